package reconciler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"opke.dev/opke/diff"
)

// testMember is one member of a real etcd cluster on loopback.
type testMember struct {
	name, peer, client string
	e                  *embed.Etcd
}

func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

func newTestMember(t *testing.T, name string) *testMember {
	return &testMember{name: name, peer: freeURL(t), client: freeURL(t)}
}

// start runs the member: founding the cluster of members, or joining it.
func (m *testMember) start(t *testing.T, members []*testMember, join bool) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.name, t.TempDir()
	peer, _ := url.Parse(m.peer)
	client, _ := url.Parse(m.client)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenMetricsUrls = nil
	var initial []string
	for _, x := range members {
		initial = append(initial, x.name+"="+x.peer)
	}
	cfg.InitialCluster, cfg.InitialClusterToken = strings.Join(initial, ","), "test"
	if join {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.e = e
	t.Cleanup(m.stop)
	if !join {
		return // the founders are ready together
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not join", m.name)
	}
}

// stop stops the member, as a server that is lost.
func (m *testMember) stop() {
	if m.e != nil {
		m.e.Close()
		m.e = nil
	}
}

// TestChangeMembership runs membership changes against a real etcd
// cluster of three: a lost member removed, a learner added and promoted
// once it caught up, each step run twice (as after a crash) without a
// second change; a member that answers kept or refused; a join refused
// when the membership is not the plan's; and every change refused once
// quorum is lost.
func TestChangeMembership(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ms := []*testMember{newTestMember(t, "m0"), newTestMember(t, "m1"), newTestMember(t, "m2")}
	for _, m := range ms {
		m.start(t, ms, false)
	}
	for _, m := range ms {
		select {
		case <-m.e.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s not ready", m.name)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ms[0].client, ms[1].client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	a := &Applier{GateTimeout: time.Minute, GateInterval: 100 * time.Millisecond}
	change := func(ch membershipChange) error { return a.changeMembership(ctx, cli, "test", ch) }
	members := func() []string {
		t.Helper()
		resp, err := cli.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range resp.Members {
			out = append(out, fmt.Sprintf("%s learner=%v", strings.Join(x.PeerURLs, ","), x.IsLearner))
		}
		slices.Sort(out)
		return out
	}
	want := func(urls map[string]bool) []string {
		var out []string
		for u, learner := range urls {
			out = append(out, fmt.Sprintf("%s learner=%v", u, learner))
		}
		slices.Sort(out)
		return out
	}

	// A member that answers is not removed as lost, nor replaced.
	if err := change(membershipChange{action: diff.ActionDelete, host: "m2", peerURL: ms[2].peer, removal: diff.RemovalLost}); err != nil {
		t.Fatal(err)
	}
	if err := change(membershipChange{action: diff.ActionDelete, host: "m2", peerURL: ms[2].peer, removal: diff.RemovalReplace}); !errors.Is(err, ErrMemberAnswers) {
		t.Fatalf("replacing a member that answers: %v, want ErrMemberAnswers", err)
	}
	if got := members(); len(got) != 3 {
		t.Fatalf("members after refusals: %v", got)
	}

	// m2 is lost: a roll of m1 is refused while it is down, then m2 is
	// removed, once.
	ms[2].stop()
	if err := change(membershipChange{action: diff.ActionDelete, host: "m1", peerURL: ms[1].peer, removal: diff.RemovalRoll}); !errors.Is(err, ErrMemberDown) {
		t.Fatalf("a roll with another member down: %v, want ErrMemberDown", err)
	}
	for range 2 {
		if err := change(membershipChange{action: diff.ActionDelete, host: "m2", peerURL: ms[2].peer, removal: diff.RemovalLost}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(want(map[string]bool{ms[0].peer: false, ms[1].peer: false}), members()); diff != "" {
		t.Fatalf("members (-want +got):\n%s", diff)
	}

	// Its replacement: refused against another membership than the
	// plan's, then added as a learner (once), started, promoted.
	n := newTestMember(t, "m2")
	add := membershipChange{action: diff.ActionCreate, host: "m2", peerURL: n.peer, others: []string{ms[0].peer, ms[1].peer, ms[2].peer}}
	if err := change(add); !errors.Is(err, ErrInconsistent) {
		t.Fatalf("a join to another membership: %v, want ErrInconsistent", err)
	}
	add.others = []string{ms[0].peer, ms[1].peer}
	for range 2 {
		if err := change(add); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(want(map[string]bool{ms[0].peer: false, ms[1].peer: false, n.peer: true}), members()); diff != "" {
		t.Fatalf("members (-want +got):\n%s", diff)
	}
	n.start(t, []*testMember{ms[0], ms[1], n}, true)
	for range 2 {
		if err := change(membershipChange{action: diff.ActionUpdate, host: "m2", peerURL: n.peer}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(want(map[string]bool{ms[0].peer: false, ms[1].peer: false, n.peer: false}), members()); diff != "" {
		t.Fatalf("members (-want +got):\n%s", diff)
	}
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("etcd after the replacement: %v", err)
	}

	// The new member rolled (its flavor changed): removed while it
	// answers, every other member answering; its next server joins.
	if err := change(membershipChange{action: diff.ActionDelete, host: "m2", peerURL: n.peer, removal: diff.RemovalRoll}); err != nil {
		t.Fatalf("a roll with every member up: %v", err)
	}
	if diff := cmp.Diff(want(map[string]bool{ms[0].peer: false, ms[1].peer: false}), members()); diff != "" {
		t.Fatalf("members after the roll's removal (-want +got):\n%s", diff)
	}
	n.stop()
	rolled := newTestMember(t, "m2")
	if err := change(membershipChange{action: diff.ActionCreate, host: "m2", peerURL: rolled.peer, others: []string{ms[0].peer, ms[1].peer}}); err != nil {
		t.Fatal(err)
	}
	rolled.start(t, []*testMember{ms[0], ms[1], rolled}, true)
	if err := change(membershipChange{action: diff.ActionUpdate, host: "m2", peerURL: rolled.peer}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want(map[string]bool{ms[0].peer: false, ms[1].peer: false, rolled.peer: false}), members()); diff != "" {
		t.Fatalf("members after the roll (-want +got):\n%s", diff)
	}

	// Two of three lost: nothing changes.
	ms[1].stop()
	rolled.stop()
	err = change(membershipChange{action: diff.ActionDelete, host: "m1", peerURL: ms[1].peer, removal: diff.RemovalLost})
	if !errors.Is(err, ErrQuorum) || !strings.Contains(err.Error(), "1 of its 2 voting members answer") {
		t.Fatalf("removal without quorum: %v, want ErrQuorum", err)
	}
	err = change(membershipChange{action: diff.ActionCreate, host: "m3", peerURL: freeURL(t), others: []string{ms[0].peer, ms[1].peer, rolled.peer}})
	if !errors.Is(err, ErrQuorum) {
		t.Fatalf("a join without quorum: %v, want ErrQuorum", err)
	}
}

// laggingCluster is a three-member etcd whose members answer Status
// with an applied index one more per call from where it starts, up to
// the committed index; a stuck one stays where it starts.
type laggingCluster struct {
	clientv3.Cluster
	members   []*etcdserverpb.Member
	committed uint64
	applied   map[string]uint64 // by endpoint; absent: no answer
	stuck     map[string]bool
	mu        sync.Mutex // listMembers asks the members at once
	calls     map[string]int
}

func (c *laggingCluster) MemberList(context.Context, ...clientv3.OpOption) (*clientv3.MemberListResponse, error) {
	return &clientv3.MemberListResponse{Members: c.members}, nil
}

func (c *laggingCluster) MemberAddAsLearner(_ context.Context, peerURLs []string) (*clientv3.MemberAddResponse, error) {
	m := &etcdserverpb.Member{ID: uint64(len(c.members) + 1), PeerURLs: peerURLs, IsLearner: true}
	c.members = append(c.members, m)
	return &clientv3.MemberAddResponse{Member: m}, nil
}

func (c *laggingCluster) Status(_ context.Context, ep string) (*clientv3.StatusResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[ep]++
	applied, ok := c.applied[ep]
	if !ok {
		return nil, errors.New("connection refused")
	}
	if !c.stuck[ep] {
		applied = min(c.committed, applied+uint64(c.calls[ep]-1))
	}
	return &clientv3.StatusResponse{RaftIndex: c.committed, RaftAppliedIndex: applied}, nil
}

// TestAddAwaitsApplied: a learner's addition is done once every member
// that answers has applied it, so that its etcd, which asks them the
// membership, finds itself in it (one a moment behind made it exit: a
// flake of TestChangeMembership, and a kubelet back-off on a host). One
// that does not catch up in the gate timeout fails the step, to be
// tried again; one that does not answer is not waited for.
func TestAddAwaitsApplied(t *testing.T) {
	for _, tc := range []struct {
		name      string
		applied   map[string]uint64
		stuck     map[string]bool
		added     bool // the learner added (and started) before a crash
		wantErr   string
		wantCalls map[string]int
	}{
		// Each member is asked once to list, once for the committed
		// index and where it is, then again until it has applied it.
		{"all applied", map[string]uint64{"c0": 10, "c1": 10, "c2": 10}, nil, false, "",
			map[string]int{"c0": 2, "c1": 2, "c2": 2}},
		{"one behind", map[string]uint64{"c0": 10, "c1": 6}, nil, false, "",
			map[string]int{"c0": 2, "c1": 5, "c2": 1}},
		{"one stuck", map[string]uint64{"c0": 10, "c1": 6}, map[string]bool{"c1": true}, false,
			"add learner to etcd: the member at c1 has not applied the addition (index 10; applied 6)", nil},
		// The step run again after a crash: the voters are waited for,
		// not the learner, which may still be catching up.
		{"added before a crash", map[string]uint64{"c0": 10, "c1": 9, "c2": 10, "learner": 2}, map[string]bool{"learner": true}, true, "",
			map[string]int{"c0": 2, "c1": 2, "c2": 2, "learner": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := &laggingCluster{committed: 10, applied: tc.applied, stuck: tc.stuck, calls: map[string]int{}}
			var others []string
			for i := range 3 {
				peer := fmt.Sprintf("http://c%d:2380", i)
				cli.members = append(cli.members, &etcdserverpb.Member{ID: uint64(i + 1), Name: fmt.Sprintf("c%d", i),
					PeerURLs: []string{peer}, ClientURLs: []string{fmt.Sprintf("c%d", i)}})
				others = append(others, peer)
			}
			if tc.added {
				cli.members = append(cli.members, &etcdserverpb.Member{ID: 4, PeerURLs: []string{"http://learner:2380"}, ClientURLs: []string{"learner"}, IsLearner: true})
			}
			a := &Applier{GateTimeout: 100 * time.Millisecond, GateInterval: time.Millisecond}
			err := a.changeMembership(t.Context(), cli, "test", membershipChange{action: diff.ActionCreate, host: "learner", peerURL: "http://learner:2380", others: others})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantCalls, cli.calls); diff != "" {
				t.Errorf("Status calls by endpoint (-want +got):\n%s", diff)
			}
		})
	}
}

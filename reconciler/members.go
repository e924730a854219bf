package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// ErrQuorum is a membership change refused because etcd has no quorum
// (or would have none after it): only a restore from a snapshot brings
// such a cluster back.
var ErrQuorum = errors.New("etcd has no quorum")

// ErrMemberDown is a controller's roll (its flavor or image changed)
// refused because another etcd member is down or still a learner: the
// roll would leave etcd with no failure to spare, or none at all.
var ErrMemberDown = errors.New("another etcd member is not a healthy voter")

// ErrMemberAnswers is the removal of a member that answers, refused: a
// controller that runs is not replaced.
var ErrMemberAnswers = errors.New("the etcd member answers")

// memberStep runs a change of a cluster's etcd membership (see
// diff/members.go): a removal, the addition of a learner, a promotion.
// OPKE's etcd client reaches the members through the gateway, never the
// member the change is about. A change made is a journal point.
func (a *Applier) memberStep(ctx context.Context, j *journal, t HostTarget, b *pki.Bundle, spec *schemas.Cluster, c diff.Change) error {
	ch := membershipChange{action: c.Action, host: c.Address.Host}
	var members []string
	ch.peerURL, ch.removal, members = diff.MemberOf(c)
	if ch.peerURL == "" {
		return fmt.Errorf("%s: the change names no peer URL", c.Address)
	}
	if c.Action == diff.ActionCreate {
		var err error
		if ch.others, err = peerURLsOf(spec, slices.DeleteFunc(slices.Clone(members), func(n string) bool { return n == ch.host })); err != nil {
			return err
		}
	}
	m, err := a.etcdMembers(ctx, t, b, ch.host)
	if err != nil {
		return err
	}
	defer m.close()
	if err := a.changeMembership(ctx, m.cli, t.Cluster, ch); err != nil {
		return err
	}
	return j.hook("member " + c.Action.String() + " " + c.Address.String())
}

// membershipChange is one change of etcd's membership.
type membershipChange struct {
	action  diff.Action // delete, create (as a learner), update (promote)
	host    string
	peerURL string
	removal string // a removal's kind (diff.Removal*)
	// others are the peer URLs of the members a learner joins, itself
	// left out: the membership must be theirs when it is added.
	others []string
}

// etcdCluster is what a membership change needs of an etcd client.
type etcdCluster interface {
	clientv3.Cluster
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
}

// changeMembership makes one change. Each is idempotent: it reads the
// membership first, so a step run again after a crash finds its work
// done; none is made without quorum, or when it would leave none.
func (a *Applier) changeMembership(ctx context.Context, cli etcdCluster, cluster string, ch membershipChange) error {
	list, err := listMembers(ctx, cli)
	if err != nil {
		return err
	}
	host := ch.host
	own := list.byPeerURL(ch.peerURL)
	if own == nil {
		// A member of the host's name elsewhere is not one OPKE made.
		for _, x := range list.members {
			if x.Name == host {
				return fmt.Errorf("etcd member %s is at %s, not at %s as OPKE renders it", host, strings.Join(x.PeerURLs, ","), ch.peerURL)
			}
		}
	}
	switch ch.action {
	case diff.ActionDelete:
		if own == nil {
			return nil // gone already
		}
		answers := list.answers[own.ID]
		switch ch.removal {
		case diff.RemovalLost:
			if own.IsLearner || answers {
				// A learner is the new member's (added before a crash), a
				// member that answers is not lost: either stays.
				a.log().Info("etcd member kept: not lost", "cluster", cluster, "host", host, "learner", own.IsLearner)
				return nil
			}
		case diff.RemovalRoll:
			// A roll takes a member that runs out for a while: only with
			// every other member a voter that answers.
			for _, x := range list.members {
				if x.ID != own.ID && (x.IsLearner || !list.answers[x.ID]) {
					return fmt.Errorf("remove %s from etcd to replace its server: %w: %s is a learner or does not answer; "+
						"a controller is rolled only while every other member is a voter that answers", host, ErrMemberDown, cmp.Or(x.Name, fmt.Sprintf("%x", x.ID)))
				}
			}
		case diff.RemovalReplace:
			if answers {
				return fmt.Errorf("%s: %w: a controller whose member answers keeps its server (its replacement while it runs is not supported: "+
					"delete its server to have it replaced; if it is in ERROR but runs, `openstack server set --state active` keeps it)", host, ErrMemberAnswers)
			}
		}
		if err := list.quorumWithout(own.ID); err != nil {
			return fmt.Errorf("remove %s from etcd: %w", host, err)
		}
		if err := a.removeMember(ctx, cli, host, own.ID); err != nil {
			return err
		}
		a.log().Info("etcd member removed", "cluster", cluster, "host", host, "id", fmt.Sprintf("%x", own.ID), "removal", ch.removal)
		return nil
	case diff.ActionCreate:
		if own != nil {
			// Added before a crash: the wait for it may not have ended.
			return a.awaitApplied(ctx, cli, host, list)
		}
		if err := list.quorum(); err != nil {
			return fmt.Errorf("add %s to etcd: %w", host, err)
		}
		// The membership must be the one the plan joins the member to:
		// its etcd.env names it, and etcd refuses to start otherwise.
		want := slices.Sorted(slices.Values(ch.others))
		var have []string
		for _, x := range list.members {
			have = append(have, x.PeerURLs...)
		}
		slices.Sort(have)
		if !slices.Equal(want, have) {
			return fmt.Errorf("add %s to etcd: %w: etcd's members are at %s, the plan joins it to %s", host, ErrInconsistent,
				strings.Join(have, ","), strings.Join(want, ","))
		}
		resp, err := cli.MemberAddAsLearner(ctx, []string{ch.peerURL})
		if etcdErrorIs(err, rpctypes.ErrGRPCPeerURLExist) {
			return nil // added by a try whose answer was lost
		}
		if err != nil {
			return fmt.Errorf("add %s to etcd as a learner: %w", host, err)
		}
		a.log().Info("etcd member added as a learner", "cluster", cluster, "host", host, "id", fmt.Sprintf("%x", resp.Member.ID))
		return a.awaitApplied(ctx, cli, host, list)
	case diff.ActionUpdate:
		if own == nil {
			return fmt.Errorf("promote %s: not a member of etcd (removed since it was added?)", host)
		}
		return a.promote(ctx, cli, cluster, host, own.ID, own.IsLearner)
	}
	return fmt.Errorf("%w: %s of an etcd member", errors.ErrUnsupported, ch.action)
}

// awaitApplied waits until every voter that answered has applied the
// log the cluster committed so far, the learner's addition among it.
// The learner's etcd reads the membership from the first of them that
// answers and refuses to start when it is not the one its
// initial-cluster names: a member a moment behind would have it exit
// and wait for its kubelet's back-off. Tried every gate interval, up to
// the gate timeout.
func (a *Applier) awaitApplied(ctx context.Context, cli etcdCluster, host string, list *memberList) error {
	var endpoints []string
	for _, x := range list.members {
		// The learner's own peers are the voters (a learner added before
		// a crash may still be catching up: not waited for).
		if !x.IsLearner && list.answers[x.ID] && len(x.ClientURLs) > 0 {
			endpoints = append(endpoints, x.ClientURLs[0])
		}
	}
	// status is a member's answer, nil if none.
	status := func(ep string) *clientv3.StatusResponse {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err := cli.Status(sctx, ep)
		if err != nil {
			return nil
		}
		return st
	}
	// The leader's committed index holds the addition: it answered the
	// add once the change was committed. The same answers say who has
	// applied it already: only the others are asked again.
	first := map[string]*clientv3.StatusResponse{}
	var committed uint64
	for _, ep := range endpoints {
		if st := status(ep); st != nil {
			first[ep], committed = st, max(committed, st.RaftIndex)
		}
	}
	deadline := time.Now().Add(cmp.Or(a.GateTimeout, DefaultGateTimeout))
	for _, ep := range endpoints {
		st := first[ep]
		for st == nil || st.RaftAppliedIndex < committed {
			if time.Now().After(deadline) {
				applied := "no answer"
				if st != nil {
					applied = fmt.Sprintf("applied %d", st.RaftAppliedIndex)
				}
				return fmt.Errorf("add %s to etcd: the member at %s has not applied the addition (index %d; %s)", host, ep, committed, applied)
			}
			if err := cloud.Sleep(ctx, cmp.Or(a.GateInterval, time.Second)); err != nil {
				return err
			}
			st = status(ep)
		}
	}
	return nil
}

// removeMember removes a member. etcd refuses ("unhealthy cluster")
// while the members left would not all have been connected to the leader
// for a few seconds (its strict reconfiguration check): a member that
// joined a moment before, as the one rolled before this one did. That
// is tried again every gate interval, up to the gate timeout.
func (a *Applier) removeMember(ctx context.Context, cli etcdCluster, host string, id uint64) error {
	timeout := cmp.Or(a.GateTimeout, DefaultGateTimeout)
	deadline := time.Now().Add(timeout)
	for {
		_, err := cli.MemberRemove(ctx, id)
		switch {
		case err == nil, etcdErrorIs(err, rpctypes.ErrGRPCMemberNotFound):
			return nil
		case !etcdErrorIs(err, rpctypes.ErrGRPCUnhealthy):
			return fmt.Errorf("remove %s from etcd: %w", host, err)
		case time.Now().After(deadline):
			return waitedOut{fmt.Errorf("remove %s from etcd: etcd still refuses after %s: %w", host, timeout, err)}
		}
		waiting(ctx, fmt.Errorf("etcd refuses the removal until its other members have been connected for a while: %w", err))
		if err := cloud.Sleep(ctx, cmp.Or(a.GateInterval, time.Second)); err != nil {
			return err
		}
	}
}

// promote makes a learner a voting member once it caught up with the
// leader (etcd refuses before), trying again every second up to the gate
// timeout.
func (a *Applier) promote(ctx context.Context, cli etcdCluster, cluster, host string, id uint64, learner bool) error {
	timeout := cmp.Or(a.GateTimeout, DefaultGateTimeout)
	deadline := time.Now().Add(timeout)
	for learner {
		_, err := cli.MemberPromote(ctx, id)
		switch {
		case err == nil:
			learner = false
		case etcdErrorIs(err, rpctypes.ErrGRPCMemberNotLearner):
			learner = false
		case !etcdErrorIs(err, rpctypes.ErrGRPCLearnerNotReady):
			return fmt.Errorf("promote %s: %w", host, err)
		case time.Now().After(deadline):
			return waitedOut{fmt.Errorf("promote %s: still not caught up with the leader after %s: %w", host, timeout, err)}
		default:
			waiting(ctx, fmt.Errorf("the learner has not caught up with the leader yet: %w", err))
			if err := cloud.Sleep(ctx, cmp.Or(a.GateInterval, time.Second)); err != nil {
				return err
			}
		}
	}
	a.log().Info("etcd member promoted", "cluster", cluster, "host", host, "id", fmt.Sprintf("%x", id))
	return nil
}

// etcdErrorIs reports whether err is etcd's error e (the client gives
// its own form of the server's errors).
func etcdErrorIs(err, e error) bool {
	return err != nil && rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(e)
}

// peerURLsOf are the peer URLs of a cluster's controllers, by name.
func peerURLsOf(spec *schemas.Cluster, names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		i, ok := schemas.ControllerIndex(spec.Metadata.Name, n)
		if !ok {
			return nil, fmt.Errorf("etcd member %s is not a controller of %s", n, spec.Metadata.Name)
		}
		ip, err := spec.ControllerIP(i)
		if err != nil {
			return nil, err
		}
		out = append(out, diff.PeerURL(ip))
	}
	return out, nil
}

// etcdMembership is an etcd client for membership changes.
type etcdMembership struct {
	cli *clientv3.Client
}

func (m *etcdMembership) close() { _ = m.cli.Close() }

// etcdMembers connects to t's etcd through the gateway, at every
// controller's client URL but except's.
func (a *Applier) etcdMembers(ctx context.Context, t HostTarget, b *pki.Bundle, except string) (*etcdMembership, error) {
	return etcdMembersVia(ctx, a.Hosts, t, b, except)
}

// etcdMembersVia is etcdMembers through h.
func etcdMembersVia(ctx context.Context, h *HostSessions, t HostTarget, b *pki.Bundle, except string) (*etcdMembership, error) {
	cfg, err := b.TLS(pki.EtcdCA, pki.EtcdOPKEClient)
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for name, host := range t.Hosts {
		if name != except && schemas.RoleOf(t.Cluster, name) == schemas.RoleController {
			endpoints = append(endpoints, "https://"+netip.AddrPortFrom(host.IP, etcdClientPort).String())
		}
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: no controller of %s but %s to reach etcd at", ErrQuorum, t.Cluster, except)
	}
	slices.Sort(endpoints)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, TLS: cfg, DialTimeout: 10 * time.Second, Logger: state.QuietEtcdLogger(), Context: ctx,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return h.Dial(ctx, t, addr)
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd of %s: %w", t.Cluster, err)
	}
	return &etcdMembership{cli: cli}, nil
}

// memberList is etcd's membership and which members answer.
type memberList struct {
	members []*etcdserverpb.Member
	answers map[uint64]bool
}

// listMembers reads the membership and asks each started member its
// status.
func listMembers(ctx context.Context, cli etcdCluster) (*memberList, error) {
	// The member's own view first (it answers without quorum too), to
	// ask every member its status.
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.MemberList(lctx, clientv3.WithSerializable())
	if err != nil {
		return nil, fmt.Errorf("etcd member list: %w", err)
	}
	l := &memberList{members: resp.Members, answers: map[uint64]bool{}}
	// Every started member is asked at once: one that is gone costs the
	// timeout once, not once per member.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, x := range resp.Members {
		if len(x.ClientURLs) == 0 {
			continue // not started
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			st, err := cli.Status(sctx, x.ClientURLs[0])
			mu.Lock()
			defer mu.Unlock()
			// A member that answers runs, whether it sees a leader or not
			// (one cut off from the others answers "no leader").
			l.answers[x.ID] = err == nil && st != nil
		})
	}
	wg.Wait()
	if l.quorum() == nil {
		// With quorum, the membership as the cluster has it, so that a
		// step run again reads what the try before it did.
		resp, err := cli.MemberList(lctx)
		if err != nil {
			return nil, fmt.Errorf("etcd member list: %w", err)
		}
		l.members = resp.Members
	}
	return l, nil
}

func (l *memberList) byPeerURL(url string) *etcdserverpb.Member {
	for _, x := range l.members {
		if slices.Contains(x.PeerURLs, url) {
			return x
		}
	}
	return nil
}

// quorum checks a majority of the voting members answer.
func (l *memberList) quorum() error { return l.quorumWithout(0) }

// quorumWithout checks a majority of the voting members but id answer,
// of the voting members but id: what is left once id is removed.
func (l *memberList) quorumWithout(id uint64) error {
	var voters, answering int
	var silent []string
	for _, x := range l.members {
		if x.IsLearner || x.ID == id {
			continue
		}
		voters++
		if l.answers[x.ID] {
			answering++
		} else {
			silent = append(silent, cmp.Or(x.Name, fmt.Sprintf("%x", x.ID)))
		}
	}
	if voters == 0 || answering <= voters/2 {
		return fmt.Errorf("%w: %d of its %d voting members answer (silent: %s); its membership cannot change. "+
			"Restore the cluster from a snapshot (opke restore; README: Backups and restore)", ErrQuorum, answering, voters, strings.Join(silent, ", "))
	}
	return nil
}

package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// member is one more daemon on e's store and simulator, as another
// process would be: its own copy of the repository, its own planner and
// applier, the same reporters.
type member struct {
	d    *daemon.Daemon
	stop func()
}

func (e *env) member(t *testing.T, id string) *member {
	t.Helper()
	mirror, err := source.OpenMirror(context.Background(), source.MirrorOptions{URL: "file://" + e.bare, Dir: filepath.Join(t.TempDir(), "cache"), Branch: "main", Forks: true})
	if err != nil {
		t.Fatal(err)
	}
	p := e.cfg.Planner
	planner := &reconciler.Planner{Store: p.Store, Clouds: p.Clouds, Hosts: p.Hosts, Health: p.Health, Now: p.Now}
	a := e.cfg.Applier
	cfg := e.cfg
	cfg.ID, cfg.Source, cfg.Planner, cfg.Metrics = id, mirror, planner, daemon.NewMetrics()
	cfg.Applier = &reconciler.Applier{Planner: planner, Hosts: a.Hosts, LeaseTTL: a.LeaseTTL, GateTimeout: a.GateTimeout, GateInterval: a.GateInterval}
	d := daemon.New(cfg)
	forge := &report.Forge{Kind: report.GitHub, API: e.forgeURL, Repo: "acme/fleet", Token: "t", ExternalURL: "http://opke.example", Memo: d.Memo()}
	d.AddReporter(report.Notes{Git: mirror}, forge)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	var once sync.Once
	m := &member{d: d, stop: func() { once.Do(func() { cancel(); <-done }) }}
	t.Cleanup(m.stop)
	return m
}

// waitFor polls ok for up to a minute.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// TestDaemonsShareTheFleet: three daemons on one store share a fleet of
// six clusters, each cluster owned by one of them (rendezvous hashing
// over the members). A commit is settled by every owner for its share
// and gets one note, in the store and in git, and one status per
// cluster; a change to a cluster a daemon that does not lead owns is
// applied by that daemon; when it stops, the survivors adopt its
// clusters and apply the next change to them.
func TestDaemonsShareTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0, "")
	cloudtest.RoomFor(t, e.simDir, e.clients) // six clusters pass the default quota
	daemons := map[string]*member{"test": {d: e.d, stop: e.stop}}
	for _, id := range []string{"b", "c"} {
		daemons[id] = e.member(t, id)
	}
	ids := []string{"b", "c", "test"}
	waitFor(t, "every daemon sees the three", func() bool {
		for _, m := range daemons {
			if !slices.Equal(m.d.Health().Members, ids) {
				return false
			}
		}
		return true
	})
	if _, page := e.get(t, "/"); !strings.Contains(page, "3 daemon(s) share the fleet") {
		t.Errorf("the status page does not say three daemons share the fleet:\n%s", page)
	}
	names := []string{"alpha", "bravo", "delta", "echo", "golf", "hotel"}
	specOf := func(i, workers int) string {
		return strings.NewReplacer("name: demo", "name: "+names[i], "192.168.10.0/24", fmt.Sprintf("192.168.%d.0/24", 20+i)).Replace(demoSpec(workers))
	}
	share := map[string][]string{}
	var specs []*schemas.Cluster
	for i, name := range names {
		f := schemas.Parse(name, []byte(specOf(i, 1)))
		if f.Cluster == nil || f.Findings.HasErrors() {
			t.Fatalf("%s: %v", name, f.Findings)
		}
		specs = append(specs, f.Cluster)
		commitSpec(t, e.work, name, specOf(i, 1), "add "+name)
		share[daemon.Owner(ids, name)] = append(share[daemon.Owner(ids, name)], name)
	}
	for _, id := range ids {
		if len(share[id]) == 0 {
			t.Fatalf("the test's clusters leave %s nothing: %v", id, share)
		}
	}
	cloudtest.Converge(t, e.store, e.clients, time.Now(), specs...)
	push := func() string {
		// The daemons are told of the push as a webhook tells one: the
		// first daemon's server may be gone.
		gittest.Git(t, e.work, "push", "-q", "-f", "origin", "HEAD:"+main)
		for _, m := range daemons {
			m.d.Trigger()
		}
		return gittest.Git(t, e.work, "rev-parse", "HEAD")
	}
	head := push()
	n := e.waitNote(t, head, main)
	for _, name := range names {
		if c := n.Clusters[name]; c == nil || c.State != report.Success || c.Summary != "no changes" {
			t.Errorf("%s: %+v, want a success with no changes", name, c)
		}
		s := e.status(t, name, func(s daemon.ClusterStatus) bool { return s.Commit == head })
		if want := daemon.Owner(ids, name); s.Daemon != want || s.State != report.Success {
			t.Errorf("%s's status: %s by %q, want success by its owner %q", name, s.State, s.Daemon, want)
		}
	}

	// A change to a cluster a daemon that does not lead owns: it applies it.
	var who string
	for _, id := range ids {
		if !daemons[id].d.Leading() {
			who = id
			break
		}
	}
	target := share[who][0]
	i := slices.Index(names, target)
	scaled := commitSpec(t, e.work, target, specOf(i, 2), "scale "+target)
	if got := push(); got != scaled {
		t.Fatalf("pushed %s, want %s", got, scaled)
	}
	n = e.waitNote(t, scaled, main)
	if c := n.Clusters[target]; n.State != report.Success || !strings.HasPrefix(c.Summary, "applied") {
		t.Fatalf("the scale-out's note: %s %+v", n.State, c)
	}
	if s := e.status(t, target, func(s daemon.ClusterStatus) bool { return s.Commit == scaled }); s.Daemon != who {
		t.Errorf("%s was applied by %q, want its owner %q", target, s.Daemon, who)
	}
	if !slices.Contains(e.servers(t), target+"-default-1") {
		t.Errorf("no second worker of %s: %v", target, e.servers(t))
	}
	for _, f := range e.forge.final(t, scaled, "opke/"+target) {
		if strings.HasPrefix(f, "pending") {
			continue
		}
		if !strings.HasPrefix(f, "success: applied") {
			t.Errorf("the forge's status of %s: %q", target, f)
		}
	}

	// The owner stops: the survivors adopt its clusters.
	stopped := time.Now()
	daemons[who].stop()
	delete(daemons, who)
	survivors := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == who })
	for _, name := range share[who] {
		s := e.status(t, name, func(s daemon.ClusterStatus) bool { return s.Taken.After(stopped) })
		if want := daemon.Owner(survivors, name); s.Daemon != want {
			t.Errorf("%s was taken over by %q, want %q", name, s.Daemon, want)
		}
	}
	again := commitSpec(t, e.work, target, specOf(i, 3), "scale "+target+" again")
	push()
	n = e.waitNote(t, again, main)
	if c := n.Clusters[target]; n.State != report.Success || !strings.HasPrefix(c.Summary, "applied") {
		t.Fatalf("the second scale-out's note: %s %+v", n.State, c)
	}
	if s := e.status(t, target, func(s daemon.ClusterStatus) bool { return s.Commit == again }); s.Daemon != daemon.Owner(survivors, target) {
		t.Errorf("%s was applied by %q, want its new owner %q", target, s.Daemon, daemon.Owner(survivors, target))
	}
	if !slices.Contains(e.servers(t), target+"-default-2") {
		t.Errorf("no third worker of %s: %v", target, e.servers(t))
	}
	if _, page := e.get(t, "/"); !strings.Contains(page, "<small>by "+daemon.Owner(survivors, target)+"</small>") {
		t.Errorf("the status page does not name %s's daemon:\n%s", target, page)
	}
	// One note per commit: the git note holds every cluster.
	if n := e.gitNote(t, again); n == nil || len(n.Clusters) != len(names) {
		t.Errorf("the git note of the last commit:\n%s", noteText(n))
	}

	// The leader stops: the last daemon leads, owns every cluster and
	// applies the next change.
	var leader string
	for id, m := range daemons {
		if m.d.Leading() {
			leader = id
		}
	}
	daemons[leader].stop()
	delete(daemons, leader)
	var last *member
	for _, m := range daemons {
		last = m
	}
	waitFor(t, "the last daemon leads", last.d.Leading)
	third := commitSpec(t, e.work, target, specOf(i, 4), "scale "+target+" out again")
	push()
	if n := e.waitNote(t, third, main); n.State != report.Success || len(n.Clusters) != len(names) {
		t.Fatalf("the third scale-out's note: %s %+v", n.State, n.Clusters[target])
	}
	if h := last.d.Health(); h.Share != len(names) {
		t.Errorf("the last daemon owns %d clusters, want all %d", h.Share, len(names))
	}
}

// TestReadNoteOfBothForms: a note stored whole (as before each cluster's
// entry had a key of its own) reads with its clusters, and an entry
// written since under its own key wins over the whole note's; so does
// one entry read alone (ReadNoteEntry, a cluster's page).
func TestReadNoteOfBothForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := statetest.Open(t)
	keys := state.KeysOf(store)
	old, err := json.Marshal(report.Note{Commit: "c0ffee", Ref: main, Applied: true, Clusters: map[string]*report.Cluster{
		"east": {State: report.Success, Summary: "applied"}, "west": {State: report.Pending, Summary: "queued"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, keys.Report("c0ffee"), old); err != nil {
		t.Fatal(err)
	}
	entry, _ := json.Marshal(report.Cluster{State: report.Success, Summary: "no changes"})
	if err := store.Put(ctx, keys.ReportEntry("c0ffee", "west"), entry); err != nil {
		t.Fatal(err)
	}
	n, err := daemon.ReadNote(ctx, store, "c0ffee")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for name, c := range n.Clusters {
		got[name] = string(c.State) + ": " + c.Summary
	}
	want := map[string]string{"east": "success: applied", "west": "success: no changes"}
	if diff := cmp.Diff(want, got); diff != "" || n.State != report.Success {
		t.Errorf("the note read (%s; -want +got):\n%s", n.State, diff)
	}
	// One entry alone, as a cluster's page reads it.
	for name, want := range want {
		if c, err := daemon.ReadNoteEntry(ctx, store, "c0ffee", name); err != nil || string(c.State)+": "+c.Summary != want {
			t.Errorf("the entry of %s: %+v, %v; want %s", name, c, err, want)
		}
	}
	if _, err := daemon.ReadNoteEntry(ctx, store, "c0ffee", "north"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("the entry of a cluster the note lacks: %v", err)
	}
}

package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

var errKill = errors.New("killed by the test")

// request is the request of a fleet.
func request(fleet ...*schemas.Cluster) reconciler.Request {
	req := reconciler.Request{Clusters: map[string]*schemas.Cluster{}, Commit: "0123456789abcdef0123456789abcdef01234567"}
	for _, c := range fleet {
		req.Clusters[c.Metadata.Name] = c
	}
	return req
}

// planned is the request of a fleet and its plan.
func (r *rig) planned(t *testing.T, fleet ...*schemas.Cluster) (reconciler.Request, *diff.Plan) {
	t.Helper()
	req := request(fleet...)
	res, err := r.planner.Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return req, res.Plan
}

// applier is a new applier process of the rig: its own SSH sessions.
func (r *rig) applier(t *testing.T) *reconciler.Applier {
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	t.Cleanup(hosts.Close)
	return &reconciler.Applier{Planner: r.planner, Hosts: hosts, Parallel: 1}
}

// ledgerKeys lists what the store knows of cluster, journals aside.
func ledgerKeys(t *testing.T, s *state.Store, cluster string) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	for _, prefix := range []string{s.Key(cluster) + "/", s.Key("_applied", cluster), s.Key("_open") + "/"} {
		kv, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, slices.Collect(maps.Keys(kv))...)
	}
	slices.Sort(keys)
	return keys
}

// TestApplyResumesAfterAKillAtEveryStep kills the applier at every
// journal point in turn: after each step's "started" entry, after its
// cloud call or upload or restart, after its "done" entry. Each process
// dies at the first point no process died at before, and the next one
// resumes the journal. The end state is a clean apply's: the same
// resources (no duplicate, no leak), the same ledger, and an empty plan.
func TestApplyResumesAfterAKillAtEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	demo := spec(t, "demo", "", 0)

	clean := newRig(t)
	clean.apply(t, demo)
	want := cloudtest.Inventory(t, clean.clients)

	r := newRig(t)
	req, plan := r.planned(t, demo)
	points, killed := killEverywhere(t, r, req, plan, func() {
		// Another plan is refused while this one is unfinished (the
		// same plan made again would be this one, and resume it).
		bigger := spec(t, "demo", "", 0)
		bigger.Spec.WorkerPools[0].Count++
		other := request(bigger)
		again, err := r.planner.Plan(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.applier(t).Apply(ctx, other, again.Plan); !errors.Is(err, reconciler.ErrUnfinished) {
			t.Fatalf("a new plan while one is interrupted: %v, want ErrUnfinished", err)
		}
	})
	var kinds [4]int // started, mid-step, done, other
	for p := range killed {
		switch what, _, _ := strings.Cut(p, " "); what {
		case "started":
			kinds[0]++
		case "done":
			kinds[2]++
		case "applied", "deleted", "uploaded", "restarted":
			kinds[1]++
		default:
			kinds[3]++
		}
	}
	if len(killed) != len(points) || kinds[0] < len(plan.Changes) || kinds[1] == 0 {
		t.Errorf("killed at %d of %d journal points (%d started, %d mid-step, %d done; the plan has %d changes)",
			len(killed), len(points), kinds[0], kinds[1], kinds[2], len(plan.Changes))
	}

	if diff := cmp.Diff(want, cloudtest.Inventory(t, r.clients)); diff != "" {
		t.Errorf("the cloud after the kills differs from a clean apply's (-clean +killed):\n%s", diff)
	}
	if diff := cmp.Diff(ledgerKeys(t, clean.store, "demo"), ledgerKeys(t, r.store, "demo")); diff != "" {
		t.Errorf("the ledger after the kills differs from a clean apply's (-clean +killed):\n%s", diff)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after the resumed apply, plan: %v, drift %v", addresses(next.Changes), addresses(next.Drift))
	}
	// The journal records every step of the plan done, whichever of the
	// processes ran it: the note of the resumed apply lists them. The
	// plan as the note kept it (JSON) names the same journal.
	var noted *diff.Plan
	if b, err := json.Marshal(plan); err != nil || json.Unmarshal(b, &noted) != nil {
		t.Fatal(err)
	}
	steps, err := r.applier(t).JournaledSteps(ctx, "demo", noted)
	if err != nil {
		t.Fatal(err)
	}
	var wantSteps, gotSteps []string
	var took time.Duration
	for _, c := range plan.Changes {
		wantSteps = append(wantSteps, c.ID+" done")
	}
	for _, s := range steps {
		gotSteps = append(gotSteps, s.Change.ID+" "+string(s.State))
		took += s.Duration
	}
	if diff := cmp.Diff(wantSteps, gotSteps); diff != "" {
		t.Errorf("the journaled steps of the resumed plan (-want +got):\n%s", diff)
	}
	if took <= 0 {
		t.Errorf("the journaled steps took %v in all", took)
	}
	// Nothing left to resume.
	sum, err := r.applier(t).Resume(ctx)
	if err != nil || len(sum.Resumed) != 0 {
		t.Errorf("a resume with nothing interrupted: %+v %v", sum, err)
	}
}

// killEverywhere applies plan, killing the applier at every journal
// point in turn: each process dies at the first point no process died at
// before, and the next one resumes the journal; afterFirst runs once the
// first has died. It returns the journal points seen and those killed at.
func killEverywhere(t *testing.T, r *rig, req reconciler.Request, plan *diff.Plan, afterFirst func()) (points, killed map[string]bool) {
	t.Helper()
	ctx := context.Background()
	points, killed = map[string]bool{}, map[string]bool{}
	for run := 0; ; run++ {
		if run > 1000 {
			t.Fatal("no end after 1000 restarts")
		}
		a := r.applier(t)
		var died string
		a.SetPoint(func(what string) error {
			points[what] = true
			if died == "" && !killed[what] {
				died = what
				return errKill
			}
			return nil
		})
		var err error
		if run == 0 {
			_, err = a.Apply(ctx, req, plan)
		} else {
			_, err = a.Resume(ctx)
		}
		if died == "" {
			if err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
			t.Logf("converged after %d kills", run)
			return points, killed
		}
		if !errors.Is(err, errKill) {
			t.Fatalf("run %d killed at %q: %v, want the kill", run, died, err)
		}
		killed[died] = true
		if run == 0 && afterFirst != nil {
			afterFirst()
		}
	}
}

// TestRollResumesAfterAKillAtEveryStep: a pool's flavor change (its
// workers rolled one at a time, each drain after the gate of the worker
// before: infrastructure steps that run with the host phase) killed at
// every journal point in turn ends as a clean roll does: each worker's
// server made again once, with the new flavor, and an empty plan.
func TestRollResumesAfterAKillAtEveryStep(t *testing.T) {
	t.Parallel()
	demo := spec(t, "demo", "", 0)
	demo.Spec.WorkerPools[0].Count = 2
	r := newRig(t)
	r.apply(t, demo)
	before := serverIDs(r.observed(t))
	demo.Spec.WorkerPools[0].Flavor = "m1.medium"
	req, plan := r.planned(t, demo)
	points, killed := killEverywhere(t, r, req, plan, nil)
	if len(killed) != len(points) {
		t.Errorf("killed at %d of %d journal points", len(killed), len(points))
	}
	res := r.observed(t)
	after := serverIDs(res)
	for k, id := range before {
		worker := strings.Contains(k, "demo-default-")
		if (after[k] != id) != worker {
			t.Errorf("%s: %s -> %s; want only the workers' servers made again", k, id, after[k])
		}
	}
	if len(after) != len(before) {
		t.Errorf("servers after the roll: %v, before %v", slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
	}
	for k, x := range res {
		if x.Kind == diff.KindServer && strings.Contains(k, "demo-default-") && x.Attrs["flavor"].Value != "m1.medium" {
			t.Errorf("%s has flavor %s after the roll", k, x.Attrs["flavor"].Value)
		}
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after the resumed roll, plan: %v, drift %v", addresses(next.Changes), addresses(next.Drift))
	}
}

// TestTwoAppliersOnOneCluster: a second applier of the cluster waits for
// the first's lease, then refuses its plan, made before the first
// applied: the cluster moved since.
func TestTwoAppliersOnOneCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	req, plan := r.planned(t, demo)
	first, second := r.applier(t), r.applier(t)
	holding, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first.SetPoint(func(string) error {
		once.Do(func() { close(holding); <-release })
		return nil
	})
	waiting := make(chan string, 1)
	second.Waiting = func(cluster string) { waiting <- cluster }

	firstDone := make(chan error)
	go func() {
		_, err := first.Apply(ctx, req, plan)
		firstDone <- err
	}()
	<-holding
	secondDone := make(chan error)
	go func() {
		_, err := second.Apply(ctx, req, plan)
		secondDone <- err
	}()
	if got := <-waiting; got != "demo" {
		t.Errorf("waiting for %q, want demo", got)
	}
	select {
	case err := <-secondDone:
		t.Fatalf("the second applier ran while the first held the lease: %v", err)
	default:
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatalf("first applier: %v", err)
	}
	if err := <-secondDone; !errors.Is(err, reconciler.ErrStale) {
		t.Fatalf("second applier, after the first applied: %v, want ErrStale", err)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after the first apply, plan: %v", addresses(next.Changes))
	}
}

// revokeAll ends every lease in the store, as their TTLs would end them
// for a stalled process.
func revokeAll(ctx context.Context, cli *clientv3.Client) error {
	leases, err := cli.Leases(ctx)
	if err != nil {
		return err
	}
	for _, l := range leases.Leases {
		if _, err := cli.Revoke(ctx, l.ID); err != nil {
			return err
		}
	}
	return nil
}

// TestApplierThatLostItsLeaseCannotWrite: the lease ends mid-apply (as
// its TTL would for a stalled process); from then the applier writes
// nothing, and says why.
func TestApplierThatLostItsLeaseCannotWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	req, plan := r.planned(t, demo)
	a := r.applier(t)
	var revokedAt int64
	a.SetPoint(func(what string) error {
		if revokedAt != 0 || !strings.HasPrefix(what, "done ") {
			return nil
		}
		if err := revokeAll(ctx, r.store.Client()); err != nil {
			return err
		}
		var err error
		revokedAt, err = r.store.Revision(ctx)
		return err
	})
	_, err := a.Apply(ctx, req, plan)
	if !errors.Is(err, state.ErrLeaseLost) {
		t.Fatalf("apply after its lease ended: %v, want ErrLeaseLost", err)
	}
	if now, err := r.store.Revision(ctx); err != nil || now != revokedAt {
		t.Errorf("the store moved from revision %d to %d after the lease ended (%v)", revokedAt, now, err)
	}
	// Its journal stays open: the next applier resumes it.
	sum, err := r.applier(t).Resume(ctx)
	if err != nil || !slices.Equal(sum.Resumed, []string{"demo"}) {
		t.Fatalf("resume: %+v %v", sum, err)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after the resume, plan: %v", addresses(next.Changes))
	}
}

// TestApplyStopsGracefully: cancelled mid-apply, the running step
// finishes, no other starts, and the journal is closed as interrupted:
// nothing to resume, and the next plan takes it from there.
func TestApplyStopsGracefully(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	req, plan := r.planned(t, demo)
	a := r.applier(t)
	var stoppedIn string
	a.SetPoint(func(what string) error {
		if stoppedIn == "" && strings.HasPrefix(what, "started ") && strings.Contains(what, "/server/") {
			stoppedIn = strings.TrimPrefix(what, "started ")
			cancel()
		}
		return nil
	})
	sum, err := a.Apply(ctx, req, plan)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("apply cancelled: %v, want context.Canceled", err)
	}
	if sum.Counts[reconciler.StepPending] == 0 {
		t.Errorf("no step left pending: %v", sum.Counts)
	}
	bg := context.Background()
	kind, name, _ := strings.Cut(strings.TrimPrefix(stoppedIn, "openstack/"), "/")
	if _, err := r.store.Get(bg, r.store.Key("demo", "infra", kind, name)); err != nil {
		t.Errorf("the running step (%s) did not finish: %v", stoppedIn, err)
	}
	if _, err := r.store.Get(bg, r.store.Key("_open", "demo")); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("the journal is still open: %v", err)
	}
	journals, err := r.store.Client().Get(bg, r.store.Key("_journal", "demo")+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, kv := range journals.Kvs {
		var jp reconciler.JournalPlan
		if strings.HasSuffix(string(kv.Key), "/plan") && json.Unmarshal(kv.Value, &jp) == nil {
			results = append(results, jp.Result)
		}
	}
	if !slices.Equal(results, []string{"interrupted"}) {
		t.Errorf("journal results: %v, want [interrupted]", results)
	}
	if s, err := r.applier(t).Resume(bg); err != nil || len(s.Resumed) != 0 {
		t.Errorf("resume after a graceful stop: %+v %v", s, err)
	}
	r.apply(t, demo)
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("plan: %v", addresses(next.Changes))
	}
}

// TestApplierThatLostItsLeaseSendsTheCloudNothing: the lease ends while a
// step runs (revoked at the step's start, as the TTL of a paused process
// would end it, before the applier's keepalive can notice): the step's
// writes to the cloud are fenced, and the cloud sees none from then on.
func TestApplierThatLostItsLeaseSendsTheCloudNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	req, plan := r.planned(t, demo)
	a := r.applier(t)
	// Another client revokes: the applier's own client would drop its
	// keepalive at once, which a paused process's does not.
	other, err := clientv3.New(clientv3.Config{Endpoints: r.store.Endpoints(), TLS: r.store.TLS(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var revoked bool
	a.SetPoint(func(what string) error {
		// A port's step writes to the cloud first (a server's forgets
		// its host's records in the store first, which is fenced there).
		if revoked || !strings.HasPrefix(what, "started openstack/port/") {
			return nil
		}
		if err := revokeAll(ctx, other); err != nil {
			return err
		}
		revoked = true
		r.sim.ResetCounters()
		return nil
	})
	if _, err := a.Apply(ctx, req, plan); err == nil {
		t.Fatal("an apply that lost its lease mid-step succeeded")
	}
	if !revoked {
		t.Fatal("no port step started")
	}
	for _, w := range r.sim.Writes() {
		if !strings.Contains(w.Route, "/auth/tokens") {
			t.Errorf("the cloud saw %s after the lease ended", w.Route)
		}
	}
}

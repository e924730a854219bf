package reconciler_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
)

// faults are a fifth of the API's answers going wrong: server errors,
// rate limiting, and connections dropped after the change was made.
var faults = []cloudsim.Fault{
	{Status: 503, Rate: 0.07, Count: faultBudget},
	{Status: 429, RetryAfter: 0, Rate: 0.07, Count: faultBudget},
	{Drop: true, Rate: 0.07, Count: faultBudget},
}

// faultBudget bounds each fault so that what is left tells the hits.
const faultBudget = 1 << 30

// faultHits counts the faults the simulator injected.
func faultHits(sim *cloudsim.Sim) map[string]int {
	hits := map[string]int{}
	for _, f := range sim.Faults() {
		what := "drop"
		if f.Status != 0 {
			what = strconv.Itoa(f.Status)
		}
		hits[what] += faultBudget - f.Count
	}
	return hits
}

// convergeUnderFaults plans and applies under faults until the plan is empty, as
// the daemon does on every commit and resync: an apply cut short by a
// failure that outlasted its retries is planned again. It returns the
// plans that were applied; hits adds up the faults injected.
func (r *rig) convergeUnderFaults(t *testing.T, hits map[string]int, fleet ...*schemas.Cluster) []*diff.Plan {
	t.Helper()
	ctx := context.Background()
	req := request(fleet...)
	var applied []*diff.Plan
	r.sim.SetFaults(faults...)
	defer r.sim.SetFaults()
	for round := range 6 {
		res, err := r.planner.Plan(ctx, req)
		if err != nil {
			t.Logf("round %d: plan: %v", round, err)
			continue
		}
		if res.Plan.Empty() {
			break
		}
		applied = append(applied, res.Plan)
		a := r.applier(t)
		a.Parallel = 8
		var mu sync.Mutex
		a.Progress = func(_ context.Context, s reconciler.Step) {
			if s.State != reconciler.StepRetrying {
				return
			}
			if reconciler.IsWaiting(s.Err) {
				return // waiting for the API server or a gate, which the faults slow
			}
			if !cloud.Transient(s.Err) {
				t.Errorf("%s retried after %v, not a transient error", s.Change.Address, s.Err)
			}
			mu.Lock()
			hits["retried"]++
			mu.Unlock()
		}
		if sum, err := a.Apply(ctx, req, res.Plan); err != nil {
			t.Logf("round %d: apply: %v", round, err)
			for _, f := range sum.Failed {
				if f.State == reconciler.StepFailed {
					t.Logf("round %d: %s %s: %v", round, f.Change.Action, f.Change.Address, f.Err)
				}
			}
			if _, err := r.applier(t).Resume(ctx); err != nil {
				t.Logf("round %d: resume: %v", round, err)
			}
		}
	}
	for k, n := range faultHits(r.sim) {
		hits[k] += n
	}
	r.sim.SetFaults()
	if p := r.plan(t, fleet...); !p.Empty() {
		t.Fatalf("no convergence under faults: plan %v, drift %v", addresses(p.Changes), addresses(p.Drift))
	}
	return applied
}

// checkClean fails on a duplicate or an orphan: every named resource in
// the project once, and each one OPKE's (tagged and observed).
func (r *rig) checkClean(t *testing.T, when string) map[string]diff.Resource {
	t.Helper()
	inv := cloudtest.Inventory(t, r.clients)
	obs, err := cloud.Observe(context.Background(), r.clients, r.owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	observed := map[string]diff.Resource{}
	for _, rs := range obs.Clusters {
		for _, x := range rs {
			observed[string(x.Kind)+"/"+x.Name] = x
		}
	}
	for k, n := range inv {
		kind, name, _ := strings.Cut(k, "/")
		switch {
		case kind == "security-group-rule", kind == "member", strings.HasPrefix(name, "("):
			continue // many per group or pool; unnamed ports (router, DHCP, VIP)
		case kind == "application-credential":
			name = strings.TrimPrefix(name, "opke-(installation)-")
		}
		if n > 1 {
			t.Errorf("%s: %s exists %d times", when, k, n)
		}
		if kind == "floating-ip" || kind == "port" || kind == "server" || kind == "network" || kind == "load-balancer" ||
			kind == "application-credential" || kind == "subnet" || kind == "router" || kind == "security-group" {
			if _, ok := observed[kind+"/"+name]; !ok {
				t.Errorf("%s: %s is an orphan: not OPKE's by its tags", when, k)
			}
		}
	}
	return observed
}

func serverIDs(observed map[string]diff.Resource) map[string]string {
	ids := map[string]string{}
	for k, x := range observed {
		if x.Kind == diff.KindServer {
			ids[k] = x.ID + " " + x.Attrs["user_data"].Value
		}
	}
	return ids
}

// TestApplyUnderFaults is the apply's life cycle against a cloud where a
// fifth of the answers go wrong: a three-controller, two-worker cluster
// from nothing; 2 -> 5 -> 1 workers; a patch upgrade that only uploads
// and restarts; a server deleted by hand made again; and with
// deletionPolicy Delete, the file removed and nothing tagged left. After
// each, the next plan is empty and no resource is duplicated or orphaned.
func TestApplyUnderFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	demo.Spec.Controllers.Count = 3
	hits := map[string]int{}
	defer func() {
		// Each kind of fault hit often enough to prove something.
		t.Logf("faults injected: %v", hits)
		if hits["retried"] == 0 {
			t.Error("no step was reported retrying (Progress told of no StepRetrying)")
		}
		for _, k := range []string{"503", "429", "drop"} {
			if hits[k] < 20 {
				t.Errorf("only %d %s faults: the test proves little (%v)", hits[k], k, hits)
			}
		}
	}()

	r.convergeUnderFaults(t, hits, demo)
	observed := r.checkClean(t, "created")
	var got []string
	for k := range serverIDs(observed) {
		got = append(got, strings.TrimPrefix(k, "server/"))
	}
	slices.Sort(got)
	want := []string{"demo-controller-0", "demo-controller-1", "demo-controller-2", "demo-default-0", "demo-default-1", "demo-gateway-0"}
	if !slices.Equal(got, want) {
		t.Errorf("servers %v, want %v", got, want)
	}

	for _, n := range []int{5, 1} {
		demo.Spec.WorkerPools[0].Count = n
		r.convergeUnderFaults(t, hits, demo)
		observed = r.checkClean(t, "scaled")
		workers := 0
		for k := range serverIDs(observed) {
			if strings.HasPrefix(k, "server/demo-default-") {
				workers++
			}
		}
		if workers != n {
			t.Errorf("%d workers after scaling to %d", workers, n)
		}
	}

	// A patch upgrade: the versioned files and their units, no server.
	before := serverIDs(observed)
	demo.Spec.Kubernetes.Version = "v1.36.2"
	plans := r.convergeUnderFaults(t, hits, demo)
	if len(plans) == 0 {
		t.Fatal("the upgrade planned nothing")
	}
	for _, c := range slices.Concat(plans[0].Changes, plans[0].Drift) {
		if c.Action != diff.ActionUpload && c.Action != diff.ActionRestart && c.Action != diff.ActionCheck && c.Action != diff.ActionBackup &&
			(c.Action != diff.ActionApply || c.Address != diff.ManifestAddress("demo", "00-kube-proxy.yaml")) {
			t.Errorf("the upgrade plans %s %s", c.Action, c.Address)
		}
	}
	observed = r.checkClean(t, "upgraded")
	if after := serverIDs(observed); !maps.Equal(before, after) {
		t.Errorf("servers or their user_data changed in an upgrade: %v -> %v", before, after)
	}
	for _, h := range []string{"demo-controller-2", "demo-default-0"} {
		v, err := r.store.Get(ctx, r.store.Key("demo", "hosts", h, "version"))
		if err != nil || string(v) != "v1.36.2" {
			t.Errorf("%s runs %q (%v), want v1.36.2", h, v, err)
		}
	}

	// A server deleted by hand is made again. (A worker: a controller
	// made again is a new etcd member under an old name, which etcd
	// refuses to bootstrap; replacing members is not built yet.)
	if err := servers.Delete(ctx, r.clients.Compute, observed["server/demo-default-0"].ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	r.convergeUnderFaults(t, hits, demo)
	observed = r.checkClean(t, "recreated")
	if x, ok := observed["server/demo-default-0"]; !ok || strings.HasPrefix(before["server/demo-default-0"], x.ID) {
		t.Errorf("demo-default-0 not made again: %+v", x)
	}

	// Retained when the file goes, unless the applied spec said Delete.
	demo.Spec.DeletionPolicy = schemas.DeletionDelete
	r.convergeUnderFaults(t, hits, demo)
	r.convergeUnderFaults(t, hits)
	r.checkClean(t, "deleted")
	if inv := cloudtest.Inventory(t, r.clients); len(inv) != 0 {
		var left []string
		for k := range inv {
			if !strings.HasPrefix(k, "port/(") {
				left = append(left, k)
			}
		}
		if len(left) > 0 {
			t.Errorf("left after the cluster was deleted: %v", left)
		}
	}
	if keys, _ := r.store.List(ctx, r.store.Key("demo")+"/"); len(keys) != 0 {
		t.Errorf("the store still holds %d keys of demo", len(keys))
	}
}

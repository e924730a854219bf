//go:build chaos

package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/schemas"
)

// settleTimeout bounds a run's convergence after its fault ended.
const settleTimeout = 4 * time.Minute

// reference is what a clean run makes, with no fault: the cloud's
// inventory once the cluster is created (and once it is upgraded: the
// same, server for server), and how long the create and the upgrade took
// from the apply's start, which is where the faults are struck.
type reference struct {
	inventory       map[string]int
	create, upgrade time.Duration
}

var clean struct {
	once sync.Once
	ref  *reference
}

// cleanRun is the reference, made once per test binary by the first
// scenario that needs it; a clean run must itself pass every check.
func cleanRun(t *testing.T) *reference {
	t.Helper()
	clean.once.Do(func() {
		w := newWorld(t, worldOptions{})
		w.serve("a")
		ref := &reference{}
		c1 := w.commit(v1)
		start := w.applyStarted(time.Minute)
		if !w.settled(c1, settleTimeout) {
			t.Fatal("a clean create did not converge")
		}
		ref.create = time.Since(start)
		ref.inventory = w.inventory()
		for name, n := range ref.inventory {
			if n != 1 && !strings.HasPrefix(name, "security-group-rule/") && !strings.HasPrefix(name, "port/(") {
				t.Fatalf("a clean create made %d of %s", n, name)
			}
		}
		ids := w.serverIDs()
		c2 := w.commit(v2)
		start = w.applyStarted(time.Minute)
		if !w.settled(c2, settleTimeout) {
			t.Fatal("a clean upgrade did not converge")
		}
		ref.upgrade = time.Since(start)
		if got := w.serverIDs(); !maps.Equal(got, ids) {
			t.Fatalf("a clean upgrade recreated servers: %v, were %v", got, ids)
		}
		var o outcome
		w.verify(&o, ref, v2, time.Now())
		if !o.Converged || o.Duplicates+o.Orphans+o.Lost > 0 {
			t.Fatalf("the clean run fails the checks: %+v", o)
		}
		t.Logf("clean run: create %v, upgrade %v, %d resources", ref.create.Round(time.Millisecond),
			ref.upgrade.Round(time.Millisecond), len(ref.inventory))
		clean.ref = ref
	})
	if clean.ref == nil {
		t.Fatal("the clean reference run failed")
	}
	return clean.ref
}

// applyStarted waits for the cluster's journal to open: an apply started.
func (w *world) applyStarted(timeout time.Duration) time.Time {
	w.t.Helper()
	if !waitFor(timeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return w.applying(ctx)
	}) {
		w.t.Fatal("no apply started")
	}
	return time.Now()
}

// clients is the test's own connection to the cloud, made at first use
// (its token is renewed when a restarted simulator refuses it).
func (w *world) clients() *cloud.Clients {
	w.t.Helper()
	if w.cloud == nil {
		c, err := cloud.Connect(context.Background(), cloud.Target{File: filepath.Join(w.dir, "sim", "clouds.yaml"), Cloud: "sim"})
		if err != nil {
			w.t.Fatal(err)
		}
		w.cloud = c
	}
	return w.cloud
}

// inventory is everything the project holds, by kind and name.
func (w *world) inventory() map[string]int { return cloudtest.Inventory(w.t, w.clients()) }

// serverIDs are the servers' ids by name.
func (w *world) serverIDs() map[string]string {
	w.t.Helper()
	pages, err := servers.List(w.clients().Compute, nil).AllPages(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	all, err := servers.ExtractServers(pages)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range all {
		out[s.Name] = s.ID
	}
	return out
}

// verify waits for the last commit to converge, then checks the cloud
// against the clean run's inventory, the ledger against the cloud, and
// every commit's report in the store and on the remote. Each problem is
// a test error.
func (w *world) verify(o *outcome, ref *reference, version string, faultEnded time.Time) {
	w.t.Helper()
	ctx := context.Background()
	head := w.commits[len(w.commits)-1]
	o.Converged = w.settled(head, settleTimeout)
	o.Recovery = time.Since(faultEnded)
	if !o.Converged {
		s, err := w.status(ctx)
		w.t.Errorf("the cluster did not converge on %.8s within %v: status %+v (%v)", head, settleTimeout, s, err)
	}

	// A plan made from outside, as `opke plan` would: nothing to do.
	data := []byte(cmp.Or(w.spec, spec(w.t, version)))
	f := schemas.Parse("clusters/demo/cluster.yaml", data)
	if f.Cluster == nil || f.Findings.HasErrors() {
		w.t.Fatalf("the spec: %v", f.Findings)
	}
	planner := &reconciler.Planner{Store: w.store, Clouds: &cloud.Pool{File: filepath.Join(w.dir, "sim", "clouds.yaml")}}
	res, err := planner.Plan(ctx, reconciler.Request{Clusters: map[string]*schemas.Cluster{cluster: f.Cluster}, Only: cluster, Commit: head})
	switch {
	case err != nil:
		o.Converged = false
		w.t.Errorf("plan after the run: %v", err)
	case !res.Plan.Empty():
		o.Converged = false
		var want []string
		for _, c := range slices.Concat(res.Plan.Changes, res.Plan.Drift) {
			want = append(want, c.Action.String()+" "+c.Address.String())
		}
		w.t.Errorf("after the run, a plan still wants: %s", strings.Join(want, ", "))
	}

	// The cloud against the clean run: no more of anything, nothing else.
	got := w.inventory()
	for _, name := range slices.Sorted(maps.Keys(got)) {
		want := ref.inventory[name]
		switch n := got[name]; {
		case want == 0:
			o.Orphans += n
			w.t.Errorf("orphan: %d of %s, which a clean run does not make", n, name)
		case n > want:
			o.Duplicates += n - want
			w.t.Errorf("duplicate: %d of %s, a clean run makes %d", n, name, want)
		}
	}
	for name, want := range ref.inventory {
		if got[name] < want {
			o.Converged = false
			w.t.Errorf("missing: %d of %s, a clean run makes %d", got[name], name, want)
		}
	}
	o.Lost = w.lostRecords()
}

// lostRecords counts the ledger's records that name nothing in the cloud
// (or another id than the cloud's), the owned resources no record names,
// and the commits without their final report in the store or their note
// on the remote (the audit trail).
func (w *world) lostRecords() int {
	w.t.Helper()
	ctx := context.Background()
	lost := 0
	ledger, err := reconciler.ReadLedger(ctx, w.store, cluster)
	if err != nil {
		w.t.Fatal(err)
	}
	owner, err := w.store.InstallationID(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	obs, err := cloud.ObserveCluster(ctx, w.clients(), owner, cluster, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	observed := map[diff.Address]diff.Resource{}
	for _, r := range obs.Clusters[cluster] {
		if prev, ok := observed[r.Address()]; ok {
			lost++
			w.t.Errorf("lost record: %s is in the cloud twice (%s, %s); the ledger can name one", r.Address(), prev.ID, r.ID)
		}
		observed[r.Address()] = r
	}
	for _, addr := range slices.SortedFunc(maps.Keys(ledger.Resources), diff.Address.Compare) {
		rec := ledger.Resources[addr]
		if o, ok := observed[addr]; !ok || o.ID != rec.ID {
			lost++
			w.t.Errorf("lost record: the ledger says %s is %s; the cloud has %q", addr, rec.ID, o.ID)
		}
	}
	for _, addr := range slices.SortedFunc(maps.Keys(observed), diff.Address.Compare) {
		if _, ok := ledger.Resources[addr]; !ok {
			lost++
			w.t.Errorf("lost record: %s (%s) is in the cloud, not in the ledger", addr, observed[addr].ID)
		}
	}
	if ledger.Spec == nil || ledger.Spec.Commit != w.commits[len(w.commits)-1] {
		lost++
		w.t.Errorf("lost record: the applied spec is %+v, want the last commit's", ledger.Spec)
	}
	for _, c := range w.commits {
		n, err := w.note(ctx, c)
		if err != nil || n.State == report.Pending || n.Clusters[cluster] == nil {
			lost++
			w.t.Errorf("lost record: commit %.8s has no final report in the store (%v)", c, err)
		}
		if err == nil && n.Clusters[cluster] != nil {
			lost += w.unrecordedSteps(c, n.Clusters[cluster])
		}
		if !waitFor(10*time.Second, func() bool { _, ok := gittest.Note(w.t, w.bare, c); return ok }) {
			lost++
			w.t.Errorf("lost record: commit %.8s has no note on the remote", c)
		}
	}
	return lost
}

// unrecordedSteps counts the changes of an applied plan its note has no
// done step of: the audit trail of an apply a killed daemon began and its
// successor finished lists every step, whichever of them ran it.
func (w *world) unrecordedSteps(commit string, e *report.Cluster) int {
	w.t.Helper()
	if e.State != report.Success || e.Plan == nil || !strings.HasPrefix(e.Summary, "applied") {
		return 0
	}
	done := map[string]bool{}
	for _, s := range e.Steps {
		done[s.ID] = s.State == string(reconciler.StepDone)
	}
	lost := 0
	for _, c := range slices.Concat(e.Plan.Changes, e.Plan.Drift) {
		if !done[c.ID] {
			lost++
			w.t.Errorf("lost record: the note of %.8s (%s) has no done step of %s %s", commit, e.Summary, c.Action, c.Address)
		}
	}
	return lost
}

// daemonOf is the daemon id a request's User-Agent names.
var daemonOf = regexp.MustCompile(`\(daemon ([^)]+)\)`)

// overlaps reads the simulator's write log and counts the writes a daemon
// made after another daemon had written: with a leader at a time and the
// cloud fenced, the writers follow each other and never come back.
func (w *world) overlaps() (int, []string) {
	w.t.Helper()
	var writes []struct {
		At    time.Time `json:"at"`
		Route string    `json:"route"`
		Agent string    `json:"agent"`
	}
	if err := getJSON("http://"+w.simAdmin+"/writes", &writes); err != nil {
		w.t.Fatal(err)
	}
	var order []string // the writers, in the order they first wrote
	n := 0
	for _, wr := range writes {
		if strings.Contains(wr.Route, "/auth/tokens") {
			continue // authenticating changes nothing
		}
		m := daemonOf.FindStringSubmatch(wr.Agent)
		if m == nil {
			continue
		}
		switch i := slices.Index(order, m[1]); {
		case i < 0:
			order = append(order, m[1])
		case i < len(order)-1:
			n++
			w.t.Errorf("overlap: %s wrote %s at %s, after %s had started writing", m[1], wr.Route,
				wr.At.Format(time.StampMilli), order[len(order)-1])
		}
	}
	return n, order
}

func getJSON(url string, v any) error {
	resp, err := httpClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

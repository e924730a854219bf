package bench

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// fleet is a seed loaded: a simulator on a copy of its snapshot, a store
// on a copy of its load, and the specs.
type fleet struct {
	dir      string
	sim      *cloudsim.Sim
	store    *state.Store
	pool     *cloud.Pool
	planner  *reconciler.Planner
	clusters map[string]*schemas.Cluster
}

// loadFleet copies s into tb's temporary folder and starts it.
func loadFleet(tb testing.TB, s *seed) *fleet {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	if err := copyTree(s.dir, dir); err != nil {
		tb.Fatal(err)
	}
	listen, err := os.ReadFile(filepath.Join(dir, "listen"))
	if err != nil {
		tb.Fatal(err)
	}
	sim, err := cloudsim.Start(ctx, cloudsim.Options{StateDir: filepath.Join(dir, "sim"), Listen: string(listen)})
	if err != nil {
		tb.Fatalf("start the seed's simulator on its address %s: %v", listen, err)
	}
	tb.Cleanup(func() { sim.Close() })
	store := openStore(tb, filepath.Join(dir, "state"))
	tb.Cleanup(func() { store.Close() })
	f := &fleet{dir: dir, sim: sim, store: store, clusters: map[string]*schemas.Cluster{},
		pool: &cloud.Pool{File: filepath.Join(dir, "sim", "clouds.yaml"), Budget: cloud.Unlimited()}}
	f.planner = &reconciler.Planner{Store: store, Clouds: f.pool, Now: func() time.Time { return seedNow }}
	for i := range s.n {
		c, _, err := parse(clusterName(i))
		if err != nil {
			tb.Fatal(err)
		}
		f.clusters[c.Metadata.Name] = c
	}
	return f
}

// another is a second installation's view of the same fleet: a copy of
// the seed's store (the same installation id, so the same resources are
// its own) and specs, on the same simulator.
func (f *fleet) another(tb testing.TB, s *seed) *fleet {
	tb.Helper()
	dir := tb.TempDir()
	for _, sub := range []string{"state", "fleet"} {
		if err := copyTree(filepath.Join(s.dir, sub), filepath.Join(dir, sub)); err != nil {
			tb.Fatal(err)
		}
	}
	store := openStore(tb, filepath.Join(dir, "state"))
	tb.Cleanup(func() { store.Close() })
	g := &fleet{dir: dir, sim: f.sim, store: store, pool: f.pool, clusters: f.clusters}
	g.planner = &reconciler.Planner{Store: store, Clouds: g.pool, Now: f.planner.Now}
	return g
}

// plan plans the whole fleet.
func (f *fleet) plan(tb testing.TB) *diff.Plan {
	tb.Helper()
	return f.planned(tb).Plan
}

// planned plans the whole fleet and returns the plan with what it was
// made from.
func (f *fleet) planned(tb testing.TB) *reconciler.Result {
	tb.Helper()
	res, err := f.planner.Plan(context.Background(), reconciler.Request{Clusters: f.clusters, Commit: "0123456789abcdef0123456789abcdef01234567"})
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// TestSeededFleetPlansNothing: a seeded fleet is converged, template and
// clones alike: its plan is empty. This is what makes the seed honest.
func TestSeededFleetPlansNothing(t *testing.T) {
	t.Parallel()
	s := seedFleet(t, t.TempDir(), 3)
	f := loadFleet(t, s)
	p := f.plan(t)
	if !p.Empty() {
		var b strings.Builder
		data, _ := json.Marshal(p)
		_ = diff.Text(&b, data)
		t.Fatalf("a seeded fleet plans %d changes, %d drift:\n%s", len(p.Changes), len(p.Drift), b.String())
	}
	if _, err := os.Stat(filepath.Join(s.dir, "fleet", "clusters", clusterName(2), "cluster.yaml")); err != nil {
		t.Fatal(err)
	}
}

// TestSeedMovesOffATakenAddress: a cached seed whose simulator address is
// taken is made again on a free one, and converged there, instead of
// failing every benchmark that loads it.
func TestSeedMovesOffATakenAddress(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	first := seedFleet(t, root, 1)
	addr, err := os.ReadFile(filepath.Join(first.dir, "listen"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	again := seedFleet(t, root, 1)
	moved, err := os.ReadFile(filepath.Join(again.dir, "listen"))
	if err != nil {
		t.Fatal(err)
	}
	if string(moved) == string(addr) {
		t.Fatalf("the seed still listens on its taken address %s", addr)
	}
	if p := loadFleet(t, again).plan(t); !p.Empty() {
		t.Errorf("the seed made again plans %d changes, %d drift", len(p.Changes), len(p.Drift))
	}
}

package reconciler_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// serverID is the ID of the one server called name, from Nova.
func (r *rig) serverID(t *testing.T, name string) string {
	t.Helper()
	id := cloudtest.ServerID(t, r.clients, name)
	if id == "" {
		t.Fatalf("no server %s", name)
	}
	return id
}

// reboot hard-reboots the named servers through Nova, as an operator or a
// hypervisor failure does.
func (r *rig) reboot(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := servers.Reboot(context.Background(), r.clients.Compute, r.serverID(t, name), servers.RebootOpts{Type: servers.HardReboot}).ExtractErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestApplyAfterHostsRebooted: one applier (as opke serve keeps it) with
// its SSH connections open; the gateway and the controller reboot under
// it. The next apply dials afresh instead of failing on, or waiting out
// its gate timeout on, connections that died with the machines. While
// no API server answers, the manifest's step says so on its progress
// (the status page's "retrying"), and fails at the gate timeout. A worker
// deleted by hand is made again at its address through the same sessions.
func TestApplyAfterHostsRebooted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	ctx := context.Background()
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	defer hosts.Close()
	var mu sync.Mutex
	var waits []reconciler.Step
	a := &reconciler.Applier{Planner: r.planner, Hosts: hosts, GateTimeout: time.Minute, GateInterval: 200 * time.Millisecond,
		Progress: func(_ context.Context, s reconciler.Step) {
			if s.State == reconciler.StepRetrying {
				mu.Lock()
				waits = append(waits, s)
				mu.Unlock()
			}
		}}
	apply := func(t *testing.T, c *schemas.Cluster) (*reconciler.Summary, error) {
		t.Helper()
		req := reconciler.Request{Clusters: map[string]*schemas.Cluster{c.Metadata.Name: c}, Commit: "0123456789abcdef0123456789abcdef01234567"}
		res, err := r.planner.Plan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return a.Apply(ctx, req, res.Plan)
	}
	if _, err := apply(t, demo); err != nil {
		t.Fatal(err)
	}
	const manifest = "00-kube-proxy.yaml"
	address := diff.ManifestAddress("demo", manifest)
	forget := func() {
		t.Helper()
		if err := r.store.Delete(ctx, r.store.Key("demo", "kubernetes", manifest)); err != nil {
			t.Fatal(err)
		}
	}

	r.reboot(t, "demo-gateway-0", "demo-controller-0")
	forget()
	if sum, err := apply(t, demo); err != nil {
		t.Fatalf("apply after the reboot: %v (%+v)", err, sum.Failed)
	}

	// No API server: the controller reboots without its static pod.
	root, err := r.sim.HostRoot("demo-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	pod := filepath.Join(root, "etc/kubernetes/manifests/kube-apiserver.yaml")
	aside := filepath.Join(t.TempDir(), "kube-apiserver.yaml")
	if err := os.Rename(pod, aside); err != nil {
		t.Fatal(err)
	}
	r.reboot(t, "demo-controller-0")
	forget()
	mu.Lock()
	waits = nil
	mu.Unlock()
	a.GateTimeout = 2 * time.Second
	sum, err := apply(t, demo)
	if err == nil || len(sum.Failed) != 1 || sum.Failed[0].Change.Address != address || !strings.Contains(sum.Failed[0].Err.Error(), "no API server ready within 2s") {
		t.Fatalf("apply without an API server: %v, failed %+v; want %s failed, no API server ready", err, sum.Failed, address)
	}
	mu.Lock()
	var told bool
	for _, w := range waits {
		told = told || w.Change.Address == address && strings.Contains(w.Err.Error(), "no API server ready yet")
		// A step that waited its whole timeout fails; it does not wait
		// as long again as a transient error would be tried again.
		if strings.Contains(w.Err.Error(), "no API server ready within") {
			t.Errorf("the step was tried again after it waited its timeout out: %v", w.Err)
		}
	}
	mu.Unlock()
	if !told {
		t.Errorf("the wait for an API server was not on the step's progress: %+v", waits)
	}

	// The static pod back, the apply finishes.
	if err := os.Rename(aside, pod); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	r.reboot(t, "demo-controller-0")
	a.GateTimeout = time.Minute
	if sum, err := apply(t, demo); err != nil {
		t.Fatalf("apply with the API server back: %v (%+v)", err, sum.Failed)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after the API server came back, plan: %v", addresses(next.Changes))
	}

	// A worker deleted by hand: the next apply makes it again at its
	// address and pushes its files, through the same sessions (the one to
	// the dead host ended with it, and is not reused for the new one).
	if err := servers.Delete(ctx, r.clients.Compute, r.serverID(t, "demo-default-0")).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if sum, err := apply(t, demo); err != nil {
		t.Fatalf("apply after a worker was deleted: %v (%+v)", err, sum.Failed)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after the worker was made again, plan: %v", addresses(next.Changes))
	}
}

// TestOSUpdateRebootsCoordinated: hosts whose staged OS update waits for
// a reboot (/run/reboot-required, as the update engine's timer or a
// Debian package writes it) are found by a resync and rebooted one at a
// time through Nova, each node drained first, gated healthy and
// uncordoned after, the next host's drain after the last one's uncordon.
// The reboot takes the file away (/run is new at boot): the next resync
// finds nothing.
func TestOSUpdateRebootsCoordinated(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.askHosts(t)
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	waiting := []string{"demo-controller-0", "demo-default-0"}
	for _, h := range waiting {
		root, err := r.sim.HostRoot(h)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "run", "reboot-required"), []byte("*** System restart required ***\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// What only a boot takes away: the proof of the reboot.
		if err := os.WriteFile(filepath.Join(root, "run", "booted-before"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := r.resync(t, demo)
	if len(p.Changes) != 0 || len(p.Drift) != 8 {
		t.Fatalf("the resync: changes %v, drift %v; want each waiting node's drain, reboot, gate and uncordon", addresses(p.Changes), addresses(p.Drift))
	}
	a := r.applier(t)
	a.GateTimeout, a.GateInterval = time.Minute, 100*time.Millisecond
	done := doneSteps(a)
	sum, err := a.Apply(context.Background(), request(demo), p)
	if err != nil {
		t.Fatalf("apply the reboots: %v (%v)", err, sum.Failed)
	}
	var want []string
	for _, h := range waiting {
		want = append(want, "host/"+h+"/drain", "host/"+h+"/reboot", "host/"+h+"/health", "host/"+h+"/node")
	}
	if d := cmp.Diff(want, done()); d != "" {
		t.Errorf("steps done (-want +got):\n%s", d)
	}
	for _, h := range waiting {
		root, err := r.sim.HostRoot(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"reboot-required", "booted-before"} {
			if _, err := os.Stat(filepath.Join(root, "run", f)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: /run/%s after its reboot: %v", h, f, err)
			}
		}
	}
	api, base, _ := r.apiClient(t, r.observed(t), "demo-controller-0")
	for _, n := range nodesOf(t, getter(api, base)) {
		if n.Spec.Unschedulable {
			t.Errorf("%s is still cordoned", n.Metadata.Name)
		}
	}
	if p := r.resync(t, demo); !p.Empty() {
		t.Errorf("a resync after the reboots: %v, drift %v", addresses(p.Changes), addresses(p.Drift))
	}
}

// node is what a test reads of a Node object.
type node struct {
	Metadata struct{ Name string }
	Spec     struct{ Unschedulable bool }
}

// nodesOf lists a cluster's Node objects through get.
func nodesOf(t *testing.T, get func(string, any) error) []node {
	t.Helper()
	var list struct{ Items []node }
	if err := get("/api/v1/nodes", &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// doneSteps records the addresses of a's steps as they are done, in
// order; the function it returns reads them.
func doneSteps(a *reconciler.Applier) func() []string {
	var mu sync.Mutex
	var done []string
	a.Progress = func(_ context.Context, s reconciler.Step) {
		if s.State == reconciler.StepDone {
			mu.Lock()
			done = append(done, s.Change.Address.String())
			mu.Unlock()
		}
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(done)
	}
}

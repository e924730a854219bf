package reconciler_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

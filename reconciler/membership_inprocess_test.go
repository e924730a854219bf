package reconciler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/sshx"
)

// TestInProcessHostsRefuseMembershipChanges: the in-process hosts' etcd
// members dial loopback stand-ins of their rendered peer URLs
// (cloudsim/HOSTS.md), so a membership change cannot be made there; OPKE
// says so at the lost member's removal rather than take the member for
// gone, and creates no server for it. Real hosts make the change (make
// e2e: TestControlPlaneOfThree); make test runs this one on in-process
// hosts.
func TestInProcessHostsRefuseMembershipChanges(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	t.Cleanup(hosts.Close)
	a := &reconciler.Applier{Planner: r.planner, Hosts: hosts, Parallel: 8, GateTimeout: 30 * time.Second, GateInterval: 200 * time.Millisecond}
	demo := spec(t, "demo", "", 0)
	demo.Spec.Controllers.Count = 3
	demo.Spec.WorkerPools[0].Count = 0
	// No worker: metrics-server, which does not run on controllers,
	// would never roll out (as on a real cluster).
	demo.Spec.Addons = nil
	r.mustApply(t, a, demo)
	if err := servers.Delete(context.Background(), r.clients.Compute, r.serverID(t, "demo-controller-1")).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	_, sum, err := r.applyPlan(t, a, demo)
	if err == nil {
		t.Fatal("a membership change applied on in-process hosts")
	}
	var refused bool
	for _, f := range sum.Failed {
		if f.Change.Address == diff.MemberAddress("demo-controller-1") && f.Change.Action == diff.ActionDelete &&
			f.Err != nil && strings.Contains(f.Err.Error(), "is at https://127.0.0.1:") {
			refused = true
		}
	}
	if !refused {
		t.Errorf("the lost member's removal was not refused as the in-process world's: %v", sum.Failed)
	}
	if _, ok := r.observed(t)["openstack/server/demo-controller-1"]; ok {
		t.Error("the lost controller's server was made again though its member could not be removed")
	}
}

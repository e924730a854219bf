package cloud_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/render/ignition"
	"opke.dev/opke/schemas"
)

const owner = "install-1"

// cluster reads the demo spec under another name and host network.
func cluster(t testing.TB, name string, i int, workers int) *schemas.Cluster {
	t.Helper()
	data, err := os.ReadFile("../clusters/demo/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := schemas.Parse("clusters/demo/cluster.yaml", data)
	if f.Cluster == nil {
		t.Fatalf("demo: %v", f.Findings)
	}
	c := *f.Cluster
	c.Metadata.Name = name
	c.Spec.Network.HostCIDR = fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256)
	c.Spec.WorkerPools = []schemas.WorkerPool{{Name: "default", Count: workers, Flavor: "m1.small"}}
	return &c
}

var userData = map[ignition.Role][]byte{ignition.RoleController: []byte("c"), ignition.RoleWorker: []byte("w"), ignition.RoleGateway: []byte("g")}

// desired is the infrastructure a spec asks for, with fixed user_data.
func desired(t testing.TB, c *schemas.Cluster) *diff.Desired {
	t.Helper()
	d, err := diff.Desire(c, diff.Inputs{UserData: userData, APIFloatingIP: true})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestObserveAdoptsAClusterBuiltByHand: a cluster's infrastructure built
// by hand to match its spec is adopted by its tags: the infrastructure
// phase plans nothing. Then each kind of drift made by hand shows up as
// drift once the cluster counts as applied.
func TestObserveAdoptsAClusterBuiltByHand(t *testing.T) {
	t.Parallel()
	_, c, _ := cloudtest.Start(t)
	ctx := context.Background()
	d := desired(t, cluster(t, "prod", 1, 2))
	cloudtest.Build(t, c, owner, d)
	obs, err := cloud.Observe(ctx, c, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := diff.Diff([]*diff.Desired{d}, []*diff.Observed{{Cluster: "prod", Cloud: obs.Clusters["prod"]}})
	if !plan.Empty() {
		for _, ch := range plan.Changes {
			t.Errorf("adopted cluster plans %s %s: %s", ch.Action, ch.Address, ch.Reason)
		}
	}
	t.Logf("observed %d resources", len(obs.Clusters["prod"]))
	if got, want := len(obs.Clusters["prod"]), len(d.Infra); got != want {
		t.Errorf("observed %d resources, desired %d", got, want)
	}

	// Applied as observed; then drift by hand.
	applied := &diff.Applied{Infra: map[string]diff.Attrs{}}
	byAddr := map[string]diff.Resource{}
	for _, r := range obs.Clusters["prod"] {
		applied.Infra[r.Address()] = r.Attrs
		byAddr[r.Address()] = r
	}
	if err := servers.Delete(ctx, c.Compute, byAddr["openstack/server/prod-default-1"].ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := rules.Delete(ctx, c.Network, byAddr["openstack/security-group-rule/prod-gateway/ingress-tcp-22-0.0.0.0_0"].ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := ports.Update(ctx, c.Network, byAddr["openstack/port/prod-controller-0"].ID, ports.UpdateOpts{SecurityGroups: &[]string{}}).Extract(); err != nil {
		t.Fatal(err)
	}
	obs, err = cloud.Observe(ctx, c, owner, obs.Members)
	if err != nil {
		t.Fatal(err)
	}
	plan = diff.Diff([]*diff.Desired{d}, []*diff.Observed{{Cluster: "prod", Cloud: obs.Clusters["prod"], Applied: applied}})
	got := map[string]diff.Action{}
	for _, ch := range plan.Drift {
		got[ch.Address] = ch.Action
	}
	want := map[string]diff.Action{
		"openstack/server/prod-default-1":                                     diff.ActionCreate,
		"openstack/security-group-rule/prod-gateway/ingress-tcp-22-0.0.0.0_0": diff.ActionCreate,
		"openstack/port/prod-controller-0":                                    diff.ActionUpdate,
	}
	for a, act := range want {
		if got[a] != act {
			t.Errorf("drift of %s: %v, want %s (drift: %v)", a, got[a], act, got)
		}
	}
	if len(plan.Changes) != 0 {
		t.Errorf("changes besides the drift: %+v", plan.Changes)
	}
}

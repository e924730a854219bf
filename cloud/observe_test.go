package cloud_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
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

// userData are small Ignition configs, one per role: the simulator boots
// them.
var userData = map[schemas.Role][]byte{schemas.RoleController: roleConfig("c"), schemas.RoleWorker: roleConfig("w"), schemas.RoleGateway: roleConfig("g")}

func roleConfig(role string) []byte {
	return []byte(`{"ignition":{"version":"3.3.0"},"storage":{"files":[{"path":"/etc/opke-role","contents":{"source":"data:,` + role + `"}}]}}`)
}

// desired is the infrastructure a spec asks for, with fixed user_data.
func desired(t testing.TB, c *schemas.Cluster) *diff.Desired {
	t.Helper()
	d, err := diff.Desire(c, diff.Inputs{UserData: userData, APIFloatingIP: true})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// clusterName is a cluster name of the test's own: tests share a real
// cloud, and OPKE never adopts what another owner named the same.
func clusterName(tgt *cloudtest.Target, base string) string {
	return base + "-" + tgt.Owner[len(tgt.Owner)-8:]
}

// TestContractObserveAdoptsAClusterBuiltByHand: a cluster's infrastructure
// built by hand to match its spec is adopted by its tags: the
// infrastructure phase plans nothing, whether the listings come in one
// page or in pages of two. Then each kind of drift made by hand shows up
// as drift once the cluster counts as applied. Not parallel: it sets the
// page size.
func TestContractObserveAdoptsAClusterBuiltByHand(t *testing.T) {
	tgt := cloudtest.Contract(t)
	c, owner := tgt.Clients, tgt.Owner
	ctx := context.Background()
	name := clusterName(tgt, "prod")
	d := desired(t, cluster(t, name, 1, 2))
	cloudtest.Build(t, c, owner, d)
	obs, err := cloud.Observe(ctx, c, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := diff.Diff([]*diff.Desired{d}, []*diff.Observed{{Cluster: name, Cloud: obs.Clusters[name]}})
	if !plan.Empty() {
		for _, ch := range plan.Changes {
			t.Errorf("adopted cluster plans %s %s: %s", ch.Action, ch.Address, ch.Reason)
		}
	}
	t.Logf("observed %d resources", len(obs.Clusters[name]))
	if got, want := len(obs.Clusters[name]), len(d.Infra); got != want {
		t.Errorf("observed %d resources, desired %d", got, want)
	}
	t.Run("in pages of two", func(t *testing.T) {
		restore := cloud.SetPageSize(2)
		paged, err := cloud.Observe(ctx, c, owner, nil)
		restore()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(obs.Clusters, paged.Clusters); diff != "" {
			t.Errorf("observed in pages of two (-one page +pages):\n%s", diff)
		}
	})
	// Applied as observed; then drift by hand.
	applied := &diff.Applied{Infra: map[diff.Address]diff.Attrs{}}
	byAddr := map[string]diff.Resource{}
	for _, r := range obs.Clusters[name] {
		applied.Infra[r.Address()] = r.Attrs
		byAddr[r.Address().String()] = r
	}
	gone := byAddr["openstack/server/"+name+"-default-1"].ID
	if err := servers.Delete(ctx, c.Compute, gone).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err := servers.Get(ctx, c.Compute, gone).Extract()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted server is still there: %v", err)
		}
	}
	if err := rules.Delete(ctx, c.Network, byAddr["openstack/security-group-rule/"+name+"-gateway/ingress-tcp-22-0.0.0.0_0"].ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := ports.Update(ctx, c.Network, byAddr["openstack/port/"+name+"-controller-0"].ID, ports.UpdateOpts{SecurityGroups: &[]string{}}).Extract(); err != nil {
		t.Fatal(err)
	}
	// The API listener's idle timeouts set back to Octavia's defaults.
	listener := byAddr["openstack/listener/"+name+"-api-6443"]
	defaults := 50000
	if _, err := listeners.Update(ctx, c.LoadBalancer, listener.ID, listeners.UpdateOpts{TimeoutClientData: &defaults, TimeoutMemberData: &defaults}).Extract(); err != nil {
		t.Fatal(err)
	}
	obs, err = cloud.Observe(ctx, c, owner, obs.Members)
	if err != nil {
		t.Fatal(err)
	}
	plan = diff.Diff([]*diff.Desired{d}, []*diff.Observed{{Cluster: name, Cloud: obs.Clusters[name], Applied: applied}})
	got := map[string]diff.Action{}
	for _, ch := range plan.Drift {
		got[ch.Address.String()] = ch.Action
	}
	want := map[string]diff.Action{
		"openstack/server/" + name + "-default-1":                                     diff.ActionCreate,
		"openstack/security-group-rule/" + name + "-gateway/ingress-tcp-22-0.0.0.0_0": diff.ActionCreate,
		"openstack/port/" + name + "-controller-0":                                    diff.ActionUpdate,
		"openstack/listener/" + name + "-api-6443":                                    diff.ActionUpdate,
	}
	for a, act := range want {
		if got[a] != act {
			t.Errorf("drift of %s: %v, want %s (drift: %v)", a, got[a], act, got)
		}
	}
	// Corrected in place: the same listener, its timeouts OPKE's again.
	for _, ch := range plan.Drift {
		if ch.Address != listener.Address() {
			continue
		}
		r := listener
		r.Attrs = ch.After
		if err := cloud.NewApplier(c, owner, name, obs.Clusters[name]).Update(ctx, r); err != nil {
			t.Fatalf("listener update: %v", err)
		}
		got, err := listeners.Get(ctx, c.LoadBalancer, listener.ID).Extract()
		if want := diff.APIIdleTimeout; err != nil || got.TimeoutClientData != want || got.TimeoutMemberData != want {
			t.Errorf("the listener after its update: %+v %v, want its idle timeouts %d", got, err, want)
		}
	}
	if len(plan.Changes) != 0 {
		t.Errorf("changes besides the drift: %+v", plan.Changes)
	}
}

// TestContractObserveOneCluster: a cluster's own observation, filtered by
// its tag, is what the whole observation holds of it, and nothing of
// another cluster.
func TestContractObserveOneCluster(t *testing.T) {
	tgt := cloudtest.Contract(t)
	c, owner := tgt.Clients, tgt.Owner
	ctx := context.Background()
	a, b := clusterName(tgt, "one"), clusterName(tgt, "two")
	cloudtest.Build(t, c, owner, desired(t, cluster(t, a, 3, 1)))
	cloudtest.Build(t, c, owner, desired(t, cluster(t, b, 4, 1)))
	all, err := cloud.Observe(ctx, c, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Clusters[a]) == 0 || len(all.Clusters[b]) == 0 {
		t.Fatalf("the whole observation holds %d resources of %s and %d of %s", len(all.Clusters[a]), a, len(all.Clusters[b]), b)
	}
	one, err := cloud.ObserveCluster(ctx, c, owner, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string][]diff.Resource{a: all.Clusters[a]}, one.Clusters); d != "" {
		t.Errorf("observation of %s alone (-of all +alone):\n%s", a, d)
	}
	share, err := cloud.ObserveShare(ctx, c, owner, func(name string) bool { return name == a }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string][]diff.Resource{a: all.Clusters[a]}, share.Clusters); d != "" {
		t.Errorf("observation of a share of %s alone (-of all +the share):\n%s", a, d)
	}
}

// TestObserveShareListsItsPoolsMembersOnly: a share's observation looks
// up the members of its own clusters' pools, not the fleet's (a request
// per pool: at 1,000 clusters, a share of 250 waited out 750 of them on
// the request budget).
func TestObserveShareListsItsPoolsMembersOnly(t *testing.T) {
	t.Parallel()
	sim, c, _ := cloudtest.Start(t)
	ctx := context.Background()
	owner := "share-test"
	names := []string{"one", "two", "three"}
	for i, name := range names {
		cloudtest.Build(t, c, owner, desired(t, cluster(t, name, 3+i, 1)))
	}
	members := func() int {
		n := 0
		for k, v := range sim.Counters() {
			if strings.HasPrefix(k, "GET ") && strings.HasSuffix(k, "/members") {
				n += int(v)
			}
		}
		return n
	}
	before := members()
	obs, err := cloud.ObserveShare(ctx, c, owner, func(name string) bool { return name == "two" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Collect(maps.Keys(obs.Clusters)); !slices.Equal(got, []string{"two"}) {
		t.Errorf("the share's observation holds %q, want two only", got)
	}
	if got := members() - before; got != 1 {
		t.Errorf("%d pools' members listed, want the share's one pool", got)
	}
}

// TestContractListServerGroupsPages: Nova gives server groups a slice at
// a time with no link to the next (at most its max_limit, 1000 by
// default: gophercloud's listing reads one slice); ListServerGroups pages
// by offset until a slice is empty and finds every group once. Not
// parallel: it sets the page size.
func TestContractListServerGroupsPages(t *testing.T) {
	tgt := cloudtest.Contract(t)
	ctx := context.Background()
	compute := *tgt.Clients.Compute
	compute.Microversion = "2.64"
	want := map[string]bool{}
	for i := range 5 {
		g, err := servergroups.Create(ctx, &compute, servergroups.CreateOpts{Name: clusterName(tgt, fmt.Sprintf("sgp%d", i)) + "-controllers", Policy: "anti-affinity"}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = servergroups.Delete(context.Background(), &compute, g.ID).ExtractErr() })
		want[g.ID] = true
	}
	restore := cloud.SetPageSize(2)
	all, err := cloud.ListServerGroups(ctx, tgt.Clients.Compute)
	restore()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, g := range all {
		seen[g.ID]++
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("server group %s listed %d times in pages of two", id, seen[id])
		}
	}
}

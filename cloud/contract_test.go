package cloud_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
)

// TestContractApplierCreatesAndDeletesEveryKind: the applier makes every
// kind of resource a cluster needs, servers and the load balancer reach
// ACTIVE, the observation then plans nothing, a second create of each is
// an adoption (no duplicate), and deleting in reverse order leaves
// nothing tagged behind.
func TestContractApplierCreatesAndDeletesEveryKind(t *testing.T) {
	t.Parallel()
	tgt := cloudtest.Contract(t)
	c, owner := tgt.Clients, tgt.Owner
	ctx := context.Background()
	name := clusterName(tgt, "kinds")
	d := desired(t, cluster(t, name, 2, 1))
	a := cloud.NewApplier(c, owner, name, nil)
	create := func(r diff.Resource) (string, error) {
		if r.Kind == diff.KindAppCredential {
			return a.CreateAppCredential(ctx, r, "the-secret-opke-chose", false)
		}
		return a.Create(ctx, r, userData[roleOf(r)])
	}
	kinds := map[diff.Kind]int{}
	for _, r := range d.Infra {
		if _, err := create(r); err != nil {
			t.Fatalf("create %s: %v", r.Address(), err)
		}
		kinds[r.Kind]++
	}
	t.Logf("created %d resources of %d kinds", len(d.Infra), len(kinds))

	t.Run("servers turn ACTIVE", func(t *testing.T) {
		for _, r := range d.Infra {
			if r.Kind != diff.KindServer {
				continue
			}
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
				s, err := servers.Get(ctx, c.Compute, a.ID(r.Kind, r.Name)).Extract()
				if err == nil && s.Status == "ACTIVE" {
					break
				}
				if err != nil || s.Status == "ERROR" || time.Now().After(deadline) {
					t.Fatalf("%s: %v %v", r.Name, s, err)
				}
			}
		}
	})
	t.Run("the load balancer is ACTIVE", func(t *testing.T) {
		lb, err := loadbalancers.Get(ctx, c.LoadBalancer, a.ID(diff.KindLoadBalancer, name+"-api")).Extract()
		if err != nil || lb.ProvisioningStatus != "ACTIVE" {
			t.Errorf("load balancer: %+v %v", lb, err)
		}
	})
	obs, err := cloud.Observe(ctx, c, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a second plan is empty", func(t *testing.T) {
		plan := diff.Diff([]*diff.Desired{d}, []*diff.Observed{{Cluster: name, Cloud: obs.Clusters[name]}})
		for _, ch := range plan.Changes {
			t.Errorf("after apply, plan: %s %s (%s)", ch.Action, ch.Address, ch.Reason)
		}
		if got, want := len(obs.Clusters[name]), len(d.Infra); got != want {
			t.Errorf("%d resources tagged for the cluster, want %d", got, want)
		}
	})
	t.Run("creating again adopts", func(t *testing.T) {
		again := cloud.NewApplier(c, owner, name, nil)
		for _, r := range d.Infra {
			if r.Kind == diff.KindAppCredential {
				continue // its secret is only known to the first create
			}
			id, err := again.Create(ctx, r, userData[roleOf(r)])
			if err != nil || id != a.ID(r.Kind, r.Name) {
				t.Errorf("create %s again: %s %v, want the first one %s", r.Address(), id, err, a.ID(r.Kind, r.Name))
			}
		}
	})
	t.Run("delete leaves nothing", func(t *testing.T) {
		for _, r := range slices.Backward(d.Infra) {
			if err := a.Delete(ctx, r); err != nil {
				t.Fatalf("delete %s: %v", r.Address(), err)
			}
		}
		obs, err := cloud.Observe(ctx, c, owner, nil)
		if err != nil {
			t.Fatal(err)
		}
		if left := obs.Clusters[name]; len(left) != 0 {
			for _, r := range left {
				t.Errorf("left behind: %s", r.Address())
			}
		}
	})
}

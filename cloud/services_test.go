package cloud_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
)

// TestServiceLoadBalancers: what a cluster's cloud controller manager made
// is found by its name and the cluster's subnet: the load balancer of a
// Service and the floating IP on its VIP; not another cluster's whose name
// begins alike, not one of the same name on another subnet (another
// installation's cluster of that name), not OPKE's own.
func TestServiceLoadBalancers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c, _ := cloudtest.Start(t)
	subnet := func(name, cidr string) string {
		n, err := networks.Create(ctx, c.Network, networks.CreateOpts{Name: name}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		s, err := subnets.Create(ctx, c.Network, subnets.CreateOpts{Name: name, NetworkID: n.ID, CIDR: cidr, IPVersion: gophercloud.IPv4}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	ours, theirs := subnet("demo", "192.168.10.0/24"), subnet("demo-elsewhere", "192.168.20.0/24")
	lb := func(name, subnet string) *loadbalancers.LoadBalancer {
		l, err := loadbalancers.Create(ctx, c.LoadBalancer, loadbalancers.CreateOpts{Name: name, VipSubnetID: subnet}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	web := lb("kube_service_demo_default_web", ours)
	lb("kube_service_demox_default_web", ours)  // cluster demox's
	lb("kube_service_demo_default_web", theirs) // the same name elsewhere
	lb("demo-api", ours)                        // OPKE's own, tagged
	pages, err := networks.List(c.Network, networks.ListOpts{Name: cloudsim.PublicNetwork}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	public, err := networks.ExtractNetworks(pages)
	if err != nil || len(public) != 1 {
		t.Fatalf("the public network: %v %v", public, err)
	}
	r, err := routers.Create(ctx, c.Network, routers.CreateOpts{Name: "demo", GatewayInfo: &routers.GatewayInfo{NetworkID: public[0].ID}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := routers.AddInterface(ctx, c.Network, r.ID, routers.AddInterfaceOpts{SubnetID: ours}).Extract(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := loadbalancers.Get(ctx, c.LoadBalancer, web.ID).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if got.ProvisioningStatus == "ACTIVE" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load balancer is %s", got.ProvisioningStatus)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fip, err := floatingips.Create(ctx, c.Network, floatingips.CreateOpts{FloatingNetworkID: public[0].ID, PortID: web.VipPortID}).Extract()
	if err != nil {
		t.Fatal(err)
	}

	got, err := cloud.ServiceLoadBalancers(ctx, c, "demo", []diff.Resource{{Kind: diff.KindSubnet, Name: "demo", ID: ours}})
	if err != nil {
		t.Fatal(err)
	}
	want := []diff.Resource{
		{Kind: diff.KindLoadBalancer, Name: "kube_service_demo_default_web", ID: web.ID, Attrs: diff.Attrs{"subnet": diff.Known("demo"),
			"vip_address": diff.Known(web.VipAddress), "made_by": diff.Known("cloud controller manager, Service default/web")}},
		{Kind: diff.KindFloatingIP, Name: "kube_service_demo_default_web", ID: fip.ID, Attrs: diff.Attrs{"address": diff.Known(fip.FloatingIP),
			"load_balancer": diff.Known("kube_service_demo_default_web"), "made_by": diff.Known("cloud controller manager")}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the Services' load balancers of demo (-want +got):\n%s", d)
	}
	if none, err := cloud.ServiceLoadBalancers(ctx, c, "demo", nil); err != nil || len(none) != 0 {
		t.Errorf("without the cluster's subnet: %v %v, want nothing", none, err)
	}
}

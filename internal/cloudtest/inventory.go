package cloudtest

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/applicationcredentials"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"opke.dev/opke/cloud"
)

var installation = regexp.MustCompile(`^opke-[0-9a-f]+-`)

// Inventory counts everything the project holds, tagged or not, by kind
// and name ("server/demo-gateway-0"; a port without a name by its device
// owner, a floating IP by its description, a rule by its group's name):
// two clouds an apply left alike have equal inventories, and a duplicate
// or a leak shows as a count that differs. The external network and the
// project's default security group are left out; the installation in an
// application credential's name is too.
func Inventory(t testing.TB, c *cloud.Clients) map[string]int {
	t.Helper()
	ctx := context.Background()
	out := map[string]int{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("inventory: %v", err)
		}
	}
	user, err := c.UserID()
	must(err)
	p, err := applicationcredentials.List(c.Identity, user, applicationcredentials.ListOpts{}).AllPages(ctx)
	must(err)
	acs, err := applicationcredentials.ExtractApplicationCredentials(p)
	must(err)
	for _, ac := range acs {
		// Named after the installation: installations compare alike.
		out["application-credential/"+installation.ReplaceAllString(ac.Name, "opke-(installation)-")]++
	}
	p, err = networks.List(c.Network, networks.ListOpts{}).AllPages(ctx)
	must(err)
	var nets []struct {
		networks.Network
		external.NetworkExternalExt
	}
	must(networks.ExtractNetworksInto(p, &nets))
	external := map[string]bool{}
	for _, n := range nets {
		if n.External {
			external[n.ID] = true
			continue
		}
		out["network/"+n.Name]++
	}
	p, err = subnets.List(c.Network, subnets.ListOpts{}).AllPages(ctx)
	must(err)
	sns, err := subnets.ExtractSubnets(p)
	must(err)
	for _, s := range sns {
		if !external[s.NetworkID] {
			out["subnet/"+s.Name]++
		}
	}
	p, err = routers.List(c.Network, routers.ListOpts{}).AllPages(ctx)
	must(err)
	rs, err := routers.ExtractRouters(p)
	must(err)
	for _, r := range rs {
		out["router/"+r.Name]++
	}
	p, err = groups.List(c.Network, groups.ListOpts{}).AllPages(ctx)
	must(err)
	gs, err := groups.ExtractGroups(p)
	must(err)
	groupName := map[string]string{}
	for _, g := range gs {
		groupName[g.ID] = g.Name
		if g.Name != "default" {
			out["security-group/"+g.Name]++
		}
	}
	p, err = rules.List(c.Network, rules.ListOpts{}).AllPages(ctx)
	must(err)
	rls, err := rules.ExtractRules(p)
	must(err)
	for _, r := range rls {
		if groupName[r.SecGroupID] != "default" {
			out["security-group-rule/"+groupName[r.SecGroupID]]++
		}
	}
	p, err = ports.List(c.Network, ports.ListOpts{}).AllPages(ctx)
	must(err)
	ps, err := ports.ExtractPorts(p)
	must(err)
	for _, port := range ps {
		name := port.Name
		if name == "" || strings.HasPrefix(name, "octavia-lb-") { // a VIP port is named by its load balancer's id
			name = "(" + port.DeviceOwner + ")"
		}
		out["port/"+name]++
	}
	p, err = floatingips.List(c.Network, floatingips.ListOpts{}).AllPages(ctx)
	must(err)
	fs, err := floatingips.ExtractFloatingIPs(p)
	must(err)
	for _, f := range fs {
		out["floating-ip/"+f.Description]++
	}
	p, err = servers.List(c.Compute, servers.ListOpts{}).AllPages(ctx)
	must(err)
	ss, err := servers.ExtractServers(p)
	must(err)
	for _, s := range ss {
		out["server/"+s.Name]++
	}
	sgs, err := cloud.ListServerGroups(ctx, c.Compute) // every page: gophercloud reads one
	must(err)
	for _, g := range sgs {
		out["server-group/"+g.Name]++
	}
	p, err = loadbalancers.List(c.LoadBalancer, loadbalancers.ListOpts{}).AllPages(ctx)
	must(err)
	lbs, err := loadbalancers.ExtractLoadBalancers(p)
	must(err)
	for _, lb := range lbs {
		out["load-balancer/"+lb.Name]++
	}
	p, err = listeners.List(c.LoadBalancer, listeners.ListOpts{}).AllPages(ctx)
	must(err)
	ls, err := listeners.ExtractListeners(p)
	must(err)
	for _, l := range ls {
		out["listener/"+l.Name]++
	}
	p, err = pools.List(c.LoadBalancer, pools.ListOpts{}).AllPages(ctx)
	must(err)
	pls, err := pools.ExtractPools(p)
	must(err)
	for _, pool := range pls {
		out["pool/"+pool.Name]++
		mp, err := pools.ListMembers(c.LoadBalancer, pool.ID, pools.ListMembersOpts{}).AllPages(ctx)
		must(err)
		ms, err := pools.ExtractMembers(mp)
		must(err)
		for _, m := range ms {
			out["member/"+pool.Name+"/"+m.Name]++
		}
	}
	p, err = monitors.List(c.LoadBalancer, monitors.ListOpts{}).AllPages(ctx)
	must(err)
	mons, err := monitors.ExtractMonitors(p)
	must(err)
	for _, m := range mons {
		out["health-monitor/"+m.Name]++
	}
	return out
}

package cloudsim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

func TestNeutronNetworkStack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	c := e.user.network
	net := makeTenantNet(t, e.user, "prod", "192.168.20.0/24")

	rt, err := routers.Get(ctx, c, net.router).Extract()
	if err != nil || rt.GatewayInfo.NetworkID != net.publicID || len(rt.GatewayInfo.ExternalFixedIPs) != 1 {
		t.Fatalf("router gateway: %+v %v", rt.GatewayInfo, err)
	}

	// A fixed IP, as OPKE asks for the API VIP and the controllers.
	p, err := ports.Create(ctx, c, ports.CreateOpts{NetworkID: net.network, Name: "prod-controller-0",
		FixedIPs: []ports.IP{{SubnetID: net.subnet, IPAddress: "192.168.20.10"}}}).Extract()
	if err != nil || p.FixedIPs[0].IPAddress != "192.168.20.10" || p.Status != "DOWN" {
		t.Fatalf("port with a fixed IP: %+v %v", p, err)
	}
	_, err = ports.Create(ctx, c, ports.CreateOpts{NetworkID: net.network, FixedIPs: []ports.IP{{SubnetID: net.subnet, IPAddress: "192.168.20.10"}}}).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("the same fixed IP twice: %v, want 409", err)
	}

	// Security groups and rules; a duplicate rule is 409.
	sg, err := groups.Create(ctx, c, groups.CreateOpts{Name: "prod-gateway"}).Extract()
	if err != nil || len(sg.Rules) != 2 {
		t.Fatalf("security group: %+v %v, want Neutron's two default egress rules", sg, err)
	}
	ssh := rules.CreateOpts{SecGroupID: sg.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4, Protocol: rules.ProtocolTCP,
		PortRangeMin: 22, PortRangeMax: 22, RemoteIPPrefix: "0.0.0.0/0"}
	if _, err := rules.Create(ctx, c, ssh).Extract(); err != nil {
		t.Fatalf("create rule: %v", err)
	}
	if _, err := rules.Create(ctx, c, ssh).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("duplicate rule: %v, want 409", err)
	}

	// A floating IP needs a router from the port's subnet to its network.
	fip, err := floatingips.Create(ctx, c, floatingips.CreateOpts{FloatingNetworkID: net.publicID, PortID: p.ID}).Extract()
	if err != nil || fip.FixedIP != "192.168.20.10" || fip.Status != "ACTIVE" {
		t.Fatalf("floating IP: %+v %v", fip, err)
	}
	isolated, _ := networks.Create(ctx, c, networks.CreateOpts{Name: "isolated"}).Extract()
	isoSub, _ := subnets.Create(ctx, c, subnets.CreateOpts{NetworkID: isolated.ID, CIDR: "10.9.0.0/24", IPVersion: gophercloud.IPv4}).Extract()
	isoPort, _ := ports.Create(ctx, c, ports.CreateOpts{NetworkID: isolated.ID, FixedIPs: []ports.IP{{SubnetID: isoSub.ID}}}).Extract()
	_, err = floatingips.Create(ctx, c, floatingips.CreateOpts{FloatingNetworkID: net.publicID, PortID: isoPort.ID}).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("floating IP without a route: %v, want 404", err)
	}

	// In-use objects cannot be deleted; dns_nameservers update in place.
	if err := routers.Delete(ctx, c, net.router).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("delete a router with interfaces: %v, want 409", err)
	}
	if err := networks.Delete(ctx, c, net.network).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("delete a network with ports: %v, want 409", err)
	}
	ns := []string{"192.0.2.53"}
	sn, err := subnets.Update(ctx, c, net.subnet, subnets.UpdateOpts{DNSNameservers: &ns}).Extract()
	if err != nil || !cmp.Equal(sn.DNSNameservers, ns) || sn.RevisionNumber != 2 {
		t.Errorf("update dns_nameservers: %+v %v", sn, err)
	}

	// Teardown in dependency order leaves nothing but the seed behind.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(floatingips.Delete(ctx, c, fip.ID).ExtractErr())
	must(ports.Delete(ctx, c, p.ID).ExtractErr())
	_, err = routers.RemoveInterface(ctx, c, net.router, routers.RemoveInterfaceOpts{SubnetID: net.subnet}).Extract()
	must(err)
	must(routers.Delete(ctx, c, net.router).ExtractErr())
	must(networks.Delete(ctx, c, net.network).ExtractErr())
	if n := inspect(e.sim, func(w *world) int { return len(w.Subnets) }); n != 2 {
		t.Errorf("subnets left: %d, want public and isolated", n)
	}
}

func TestNeutronTagsAndPagination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	c := e.user.network
	var ids []string
	for i := range 7 {
		n, err := networks.Create(ctx, c, networks.CreateOpts{Name: "net-" + itoa(i)}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		cluster := "a"
		if i%2 == 1 {
			cluster = "b"
		}
		if _, err := attributestags.ReplaceAll(ctx, c, "networks", n.ID, attributestags.ReplaceAllOpts{Tags: []string{"opke-owner=x", "opke-cluster=" + cluster}}).Extract(); err != nil {
			t.Fatalf("tag network: %v", err)
		}
		ids = append(ids, n.ID)
	}
	count := func(opts networks.ListOpts) (items, pages int) {
		t.Helper()
		err := networks.List(c, opts).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			list, err := networks.ExtractNetworks(p)
			items, pages = items+len(list), pages+1
			return true, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return items, pages
	}
	tests := []struct {
		name      string
		opts      networks.ListOpts
		wantItems int
		wantPages int
	}{
		{"tags", networks.ListOpts{Tags: "opke-cluster=a"}, 4, 1},
		{"tags of two", networks.ListOpts{Tags: "opke-owner=x,opke-cluster=b"}, 3, 1},
		{"tags-any", networks.ListOpts{TagsAny: "opke-cluster=a,opke-cluster=b"}, 7, 1},
		{"not-tags", networks.ListOpts{NotTags: "opke-cluster=a"}, 4, 1}, // b's three and public
		{"not-tags-any", networks.ListOpts{NotTagsAny: "opke-owner=x"}, 1, 1},
		{"pages of 3", networks.ListOpts{Tags: "opke-owner=x", Limit: 3}, 7, 3},
		{"a full last page", networks.ListOpts{Tags: "opke-cluster=b", Limit: 3}, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, pages := count(tt.opts)
			if items != tt.wantItems || pages != tt.wantPages {
				t.Errorf("items %d in %d pages, want %d in %d", items, pages, tt.wantItems, tt.wantPages)
			}
		})
	}
	if err := attributestags.Add(ctx, c, "networks", ids[0], "extra").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if ok, err := attributestags.Confirm(ctx, c, "networks", ids[0], "extra").Extract(); !ok || err != nil {
		t.Errorf("confirm tag: %v %v", ok, err)
	}
}

// BenchmarkListSecurityGroups lists the groups of a fleet-sized project:
// 1,000 groups of 8 rules, one page, read but not decoded.
func BenchmarkListSecurityGroups(b *testing.B) {
	e := startBenchEnv(b)
	e.sim.mu.Lock()
	now := e.sim.opts.Now()
	for i := range 1000 {
		g := e.sim.w.newSecGroup(e.sim.w.DemoProject, fmt.Sprintf("c%04d-hosts", i), "", now)
		e.sim.w.SecGroups[g.ID] = g
		for port := range 6 {
			p := 22 + port
			rule := &secRule{common: newCommon(g.ProjectID, now), SecurityGroupID: g.ID, Direction: "ingress", EtherType: "IPv4", PortRangeMin: &p, PortRangeMax: &p}
			e.sim.w.SecRules[rule.ID] = rule
		}
	}
	e.sim.mu.Unlock()
	url := e.sim.URL() + "/network/v2.0/security-groups?limit=1000"
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Auth-Token", e.user.provider.Token())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n < 1000 {
			b.Fatalf("%s, %d bytes", resp.Status, n)
		}
	}
}

// TestPortStringFieldsAsJSON: the fields a port gives without JSON are
// the fields its JSON has, so a filter on them matches the same ports.
func TestPortStringFieldsAsJSON(t *testing.T) {
	p := &port{common: common{ID: "p-1", ProjectID: "proj"}, Name: "n", NetworkID: "net", DeviceID: "dev", DeviceOwner: "network:router_interface"}
	m := asMap(p)
	for _, key := range []string{"id", "name", "network_id", "device_id", "device_owner", "project_id", "mac_address"} {
		got, fast := p.stringField(key)
		want, _ := m[key].(string)
		if fast && got != want {
			t.Errorf("%s: %q without JSON, %q in JSON", key, got, want)
		}
		if !fieldsMatch(p, map[string][]string{key: {want}}) || fieldsMatch(p, map[string][]string{key: {want + "x"}}) {
			t.Errorf("%s=%q: the filter does not match as the JSON says", key, want)
		}
	}
}

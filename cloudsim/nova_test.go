package cloudsim

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/keypairs"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/quotasets"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
)

// tenantNet is a network with a subnet routed to the public network.
type tenantNet struct {
	network, subnet, router, publicID string
}

func makeTenantNet(t *testing.T, c *clients, name, cidr string) tenantNet {
	t.Helper()
	ctx := context.Background()
	pub := findNetwork(t, c, PublicNetwork)
	n, err := networks.Create(ctx, c.network, networks.CreateOpts{Name: name}).Extract()
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	sn, err := subnets.Create(ctx, c.network, subnets.CreateOpts{NetworkID: n.ID, Name: name, CIDR: cidr, IPVersion: gophercloud.IPv4,
		AllocationPools: []subnets.AllocationPool{{Start: strings.TrimSuffix(cidr, "0/24") + "16", End: strings.TrimSuffix(cidr, "0/24") + "254"}}}).Extract()
	if err != nil {
		t.Fatalf("create subnet: %v", err)
	}
	rt, err := routers.Create(ctx, c.network, routers.CreateOpts{Name: name, GatewayInfo: &routers.GatewayInfo{NetworkID: pub}}).Extract()
	if err != nil {
		t.Fatalf("create router: %v", err)
	}
	if _, err := routers.AddInterface(ctx, c.network, rt.ID, routers.AddInterfaceOpts{SubnetID: sn.ID}).Extract(); err != nil {
		t.Fatalf("add router interface: %v", err)
	}
	return tenantNet{network: n.ID, subnet: sn.ID, router: rt.ID, publicID: pub}
}

func findNetwork(t *testing.T, c *clients, name string) string {
	t.Helper()
	pages, err := networks.List(c.network, networks.ListOpts{Name: name}).AllPages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	list, _ := networks.ExtractNetworks(pages)
	if len(list) != 1 {
		t.Fatalf("networks named %s: %d", name, len(list))
	}
	return list[0].ID
}

func imageID(t *testing.T, c *clients, name string) string {
	t.Helper()
	pages, err := images.List(c.image, images.ListOpts{Name: name}).AllPages(context.Background())
	if err != nil {
		t.Fatalf("list images: %v", err)
	}
	list, _ := images.ExtractImages(pages)
	if len(list) != 1 {
		t.Fatalf("images named %s: %d", name, len(list))
	}
	return list[0].ID
}

func TestNovaSeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	pages, err := flavors.ListDetail(e.user.compute, nil).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fl, _ := flavors.ExtractFlavors(pages)
	var names []string
	for _, f := range fl {
		names = append(names, f.Name)
	}
	if diff := cmp.Diff([]string{"m1.small", "m1.medium", "m1.large"}, names); diff != "" {
		t.Errorf("flavors (-want +got):\n%s", diff)
	}
	imageID(t, e.user, "flatcar")
	imageID(t, e.user, "fedora-coreos")
	q, err := quotasets.Get(ctx, e.user.compute, tokenProject(t, e.user)).Extract()
	if err != nil || q.Instances <= 0 || q.Cores <= 0 {
		t.Fatalf("quotas: %+v %v, want finite limits", q, err)
	}
}

func TestNovaServerLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{BootDelay: 30 * time.Second})
	net := makeTenantNet(t, e.user, "prod", "192.168.20.0/24")
	kp, err := keypairs.Create(ctx, e.user.compute, keypairs.CreateOpts{Name: "ops",
		PublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG ops@example"}).Extract()
	if err != nil || kp.Fingerprint == "" {
		t.Fatalf("import keypair: %+v %v", kp, err)
	}
	if got, err := keypairs.Get(ctx, e.user.compute, "ops", nil).Extract(); err != nil || got.PublicKey != kp.PublicKey {
		t.Fatalf("get keypair: %+v %v", got, err)
	}
	if _, err := keypairs.Create(ctx, e.user.compute, keypairs.CreateOpts{Name: "ops", PublicKey: kp.PublicKey}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("import the same name twice: %v, want 409", err)
	}
	defer func() {
		if err := keypairs.Delete(ctx, e.user.compute, "ops", nil).ExtractErr(); err != nil {
			t.Errorf("delete keypair: %v", err)
		}
		if _, err := keypairs.Get(ctx, e.user.compute, "ops", nil).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("get a deleted keypair: %v, want 404", err)
		}
	}()
	userData := []byte("{\"ignition\":{\"version\":\"3.3.0\"}}")
	sv, err := servers.Create(ctx, e.user.compute, keypairs.CreateOptsExt{KeyName: "ops", CreateOptsBuilder: servers.CreateOpts{
		Name: "prod-worker-0", FlavorRef: "2", ImageRef: imageID(t, e.user, "flatcar"),
		Networks: []servers.Network{{UUID: net.network}}, UserData: userData, Metadata: map[string]string{"role": "worker"},
		Tags: []string{"opke-cluster=prod", "opke-owner=x"}}}, nil).Extract()
	if err != nil {
		t.Fatalf("create server: %v", err)
	}
	got, err := servers.Get(ctx, e.user.compute, sv.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	// The server's create made the project's default security group, at
	// the cloud's time.
	sgPages, err := groups.List(e.user.network, groups.ListOpts{Name: "default"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sgs, _ := groups.ExtractGroups(sgPages); len(sgs) != 1 || !sgs[0].CreatedAt.Equal(newClock().Now()) {
		t.Errorf("default security group: %+v, want one created at the simulated clock's time", sgs)
	}
	if got.Status != "BUILD" {
		t.Errorf("status right after create: %s, want BUILD", got.Status)
	}
	e.clock.Advance(31 * time.Second)
	got, err = servers.Get(ctx, e.user.compute, sv.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "ACTIVE" || got.Metadata["role"] != "worker" {
		t.Errorf("after the boot delay: status %s, metadata %v", got.Status, got.Metadata)
	}
	addrs, _ := got.Addresses["prod"].([]any)
	if len(addrs) != 1 || addrs[0].(map[string]any)["addr"] != "192.168.20.17" {
		t.Errorf("addresses: %v, want the pool's second address (the DHCP port has the first)", got.Addresses)
	}

	// user_data for admins only, tag filters and the tags API: the
	// contract suite (TestContractNovaServers), on both targets.

	out, err := servers.ShowConsoleOutput(ctx, e.user.compute, sv.ID, servers.ShowConsoleOutputOpts{Length: 2}).Extract()
	if err != nil || !strings.Contains(out, "prod-worker-0 login:") || strings.Count(out, "\n") != 2 {
		t.Errorf("console output: %q %v", out, err)
	}

	if err := servers.Delete(ctx, e.user.compute, sv.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := servers.Get(ctx, e.user.compute, sv.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("get after delete: %v, want 404", err)
	}
	if n := inspect(e.sim, func(w *world) int { return len(w.Ports) }); n != 3 { // DHCP, router interface and gateway, none of the server's
		t.Errorf("ports after delete: %d, want the server's port gone", n)
	}
}

func TestNovaAntiAffinityAndQuotas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{Hypervisors: 3})
	net := makeTenantNet(t, e.user, "ha", "192.168.30.0/24")
	sc := *e.user.compute
	sc.Microversion = "2.64"
	g, err := servergroups.Create(ctx, &sc, servergroups.CreateOpts{Name: "ha-controllers", Policy: "anti-affinity"}).Extract()
	if err != nil {
		t.Fatalf("create server group: %v", err)
	}
	img := imageID(t, e.user, "flatcar")
	hosts := map[string]bool{}
	var last string
	for i := range 4 {
		sv, err := servers.Create(ctx, e.user.compute, servers.CreateOpts{Name: "ha-controller-" + itoa(i), FlavorRef: "2", ImageRef: img,
			Networks: []servers.Network{{UUID: net.network}}}, servers.SchedulerHintOpts{Group: g.ID}).Extract()
		if err != nil {
			t.Fatalf("create server %d: %v", i, err)
		}
		last = sv.ID
		got, _ := servers.Get(ctx, e.admin.compute, sv.ID).Extract()
		if i < 3 {
			if got.Status != "ACTIVE" || hosts[got.HypervisorHostname] {
				t.Errorf("member %d: status %s on %s, hosts so far %v", i, got.Status, got.HypervisorHostname, hosts)
			}
			hosts[got.HypervisorHostname] = true
		}
	}
	got, _ := servers.Get(ctx, e.user.compute, last).Extract()
	if got.Status != "ERROR" || !strings.Contains(got.Fault.Message, "No valid host") {
		t.Errorf("a 4th member over 3 hypervisors: status %s, fault %q; want ERROR, no valid host", got.Status, got.Fault.Message)
	}

	// Deleting the group frees its members; a second delete is 404.
	if err := servergroups.Delete(ctx, &sc, g.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := servergroups.Get(ctx, &sc, g.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("get a deleted group: %v, want 404", err)
	}

	// Quotas: the admin lowers them, the next create is refused with 403.
	project := tokenProject(t, e.user)
	if _, err := quotasets.Update(ctx, e.admin.compute, project, quotasets.UpdateOpts{Instances: gophercloud.IntToPointer(4)}).Extract(); err != nil {
		t.Fatalf("set quota: %v", err)
	}
	_, err = servers.Create(ctx, e.user.compute, servers.CreateOpts{Name: "one-too-many", FlavorRef: "2", ImageRef: img,
		Networks: []servers.Network{{UUID: net.network}}}, nil).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusForbidden) || !strings.Contains(err.Error(), "Quota exceeded for instances") {
		t.Errorf("over quota: %v, want 403 quota exceeded", err)
	}
}

func tokenProject(t *testing.T, c *clients) string {
	t.Helper()
	p, err := tokensGetProject(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

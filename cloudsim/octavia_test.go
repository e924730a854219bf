package cloudsim

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/applicationcredentials"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/quotas"
)

func TestOctaviaLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{BootDelay: 10 * time.Second})
	c := e.user.lb
	net := makeTenantNet(t, e.user, "prod", "192.168.20.0/24")
	lb, err := loadbalancers.Create(ctx, c, loadbalancers.CreateOpts{Name: "prod-api", VipSubnetID: net.subnet, VipAddress: "192.168.20.5",
		Tags: []string{"opke-cluster=prod"}}).Extract()
	if err != nil {
		t.Fatalf("create load balancer: %v", err)
	}
	if lb.ProvisioningStatus != "PENDING_CREATE" || lb.VipAddress != "192.168.20.5" || lb.VipPortID == "" {
		t.Errorf("new load balancer: %s %s %q", lb.ProvisioningStatus, lb.VipAddress, lb.VipPortID)
	}
	listenerOpts := listeners.CreateOpts{Name: "prod-api-6443", Protocol: listeners.ProtocolTCP, ProtocolPort: 6443, LoadbalancerID: lb.ID}
	if _, err := listeners.Create(ctx, c, listenerOpts).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("listener while PENDING_CREATE: %v, want 409", err)
	}
	e.clock.Advance(11 * time.Second)
	lb, _ = loadbalancers.Get(ctx, c, lb.ID).Extract()
	if lb.ProvisioningStatus != "ACTIVE" || lb.OperatingStatus != "ONLINE" {
		t.Fatalf("after the delay: %s/%s", lb.ProvisioningStatus, lb.OperatingStatus)
	}
	l, err := listeners.Create(ctx, c, listenerOpts).Extract()
	if err != nil {
		t.Fatalf("create listener: %v", err)
	}
	if lb, _ = loadbalancers.Get(ctx, c, lb.ID).Extract(); lb.ProvisioningStatus != "PENDING_UPDATE" {
		t.Errorf("load balancer after a listener: %s, want PENDING_UPDATE", lb.ProvisioningStatus)
	}
	step := func() { e.clock.Advance(11 * time.Second) }
	step()
	pool, err := pools.Create(ctx, c, pools.CreateOpts{Name: "prod-api", Protocol: pools.ProtocolTCP, LBMethod: pools.LBMethodRoundRobin, ListenerID: l.ID}).Extract()
	if err != nil {
		t.Fatalf("create pool: %v", err)
	}
	step()
	m, err := pools.CreateMember(ctx, c, pool.ID, pools.CreateMemberOpts{Name: "prod-controller-0", Address: "192.168.20.10", ProtocolPort: 6443, SubnetID: net.subnet}).Extract()
	if err != nil {
		t.Fatalf("create member: %v", err)
	}
	step()
	// A member whose host answers: a server's SSH.
	sv, err := servers.Create(ctx, e.user.compute, servers.CreateOpts{Name: "prod-ssh", FlavorRef: "2", ImageRef: imageID(t, e.user, "flatcar"),
		Networks: []servers.Network{{UUID: net.network, FixedIP: "192.168.20.11"}}}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	step()
	if got, err := servers.Get(ctx, e.user.compute, sv.ID).Extract(); err != nil || got.Status != "ACTIVE" {
		t.Fatalf("server: %v", err)
	}
	ssh, err := pools.CreateMember(ctx, c, pool.ID, pools.CreateMemberOpts{Name: "prod-ssh", Address: "192.168.20.11", ProtocolPort: 22, SubnetID: net.subnet}).Extract()
	if err != nil {
		t.Fatalf("create member: %v", err)
	}
	step()
	if m, _ = pools.GetMember(ctx, c, pool.ID, m.ID).Extract(); m.OperatingStatus != "NO_MONITOR" {
		t.Errorf("a member without a monitor: %s, want NO_MONITOR", m.OperatingStatus)
	}
	if _, err := monitors.Create(ctx, c, monitors.CreateOpts{PoolID: pool.ID, Type: monitors.TypeTCP, Delay: 5, Timeout: 3, MaxRetries: 3}).Extract(); err != nil {
		t.Fatalf("create monitor: %v", err)
	}
	step()
	if m, _ = pools.GetMember(ctx, c, pool.ID, m.ID).Extract(); m.ProvisioningStatus != "ACTIVE" {
		t.Errorf("member: %s", m.ProvisioningStatus)
	}
	// With a monitor, the probes decide: nothing answers at .10:6443.
	for id, want := range map[string]string{m.ID: "ERROR", ssh.ID: "ONLINE"} {
		if got, err := pools.GetMember(ctx, c, pool.ID, id).Extract(); err != nil || got.OperatingStatus != want {
			t.Errorf("member %s with a monitor: %s %v, want %s", got.Address, got.OperatingStatus, err, want)
		}
	}
	if _, err := pools.GetMember(ctx, c, "another-pool", m.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("a member read through another pool: %v, want 404", err)
	}
	// Children are found by their load balancer and pool, as Octavia
	// filters them.
	for _, tt := range []struct {
		name string
		list func() (int, error)
		want int
	}{
		{"listeners of the load balancer", func() (int, error) {
			p, err := listeners.List(c, listeners.ListOpts{LoadbalancerID: lb.ID}).AllPages(ctx)
			l, _ := listeners.ExtractListeners(p)
			return len(l), err
		}, 1},
		{"listeners of another", func() (int, error) {
			p, err := listeners.List(c, listeners.ListOpts{LoadbalancerID: "another"}).AllPages(ctx)
			l, _ := listeners.ExtractListeners(p)
			return len(l), err
		}, 0},
		{"pools of the load balancer", func() (int, error) {
			p, err := pools.List(c, pools.ListOpts{LoadbalancerID: lb.ID}).AllPages(ctx)
			l, _ := pools.ExtractPools(p)
			return len(l), err
		}, 1},
		{"monitors of the pool", func() (int, error) {
			p, err := monitors.List(c, monitors.ListOpts{PoolID: pool.ID}).AllPages(ctx)
			l, _ := monitors.ExtractMonitors(p)
			return len(l), err
		}, 1},
		{"monitors of another pool", func() (int, error) {
			p, err := monitors.List(c, monitors.ListOpts{PoolID: "another"}).AllPages(ctx)
			l, _ := monitors.ExtractMonitors(p)
			return len(l), err
		}, 0},
	} {
		if n, err := tt.list(); err != nil || n != tt.want {
			t.Errorf("%s: %d, %v; want %d", tt.name, n, err, tt.want)
		}
	}
	pages, err := loadbalancers.List(c, loadbalancers.ListOpts{Tags: []string{"opke-cluster=prod"}}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := loadbalancers.ExtractLoadBalancers(pages); len(list) != 1 {
		t.Errorf("list by tag: %d load balancers", len(list))
	}
	if err := loadbalancers.Delete(ctx, c, lb.ID, nil).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("delete with children: %v, want 400", err)
	}
	if err := loadbalancers.Delete(ctx, c, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
		t.Fatalf("cascade delete: %v", err)
	}
	step()
	if _, err := loadbalancers.Get(ctx, c, lb.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("after delete: %v, want 404", err)
	}
	left := inspect(e.sim, func(w *world) int {
		return len(w.Listeners) + len(w.Pools) + len(w.Members) + len(w.Monitors) + countVIPs(w)
	})
	if left != 0 {
		t.Errorf("a cascade delete left %d objects behind", left)
	}
}

func countVIPs(w *world) int {
	n := 0
	for _, p := range w.Ports {
		if p.DeviceOwner == "Octavia" {
			n++
		}
	}
	return n
}

// TestOctaviaPolicy: as Octavia's default policy has it, a token with
// none of the load-balancer roles (a project member's alone) is refused
// (403), load-balancer_member reads and writes, and only the quota
// admins and admins set quotas. Tokens list implied roles, as
// Keystone's do: member brings reader.
func TestOctaviaPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	user, err := tokens.Get(ctx, e.user.identity, e.user.provider.Token()).ExtractUser()
	if err != nil {
		t.Fatal(err)
	}
	project, err := tokens.Get(ctx, e.user.identity, e.user.provider.Token()).ExtractProject()
	if err != nil {
		t.Fatal(err)
	}
	// Clients holding a token of an application credential with roles.
	withRoles := func(roles ...string) *gophercloud.ServiceClient {
		t.Helper()
		var rs []applicationcredentials.Role
		for _, r := range roles {
			rs = append(rs, applicationcredentials.Role{Name: r})
		}
		ac, err := applicationcredentials.Create(ctx, e.user.identity, user.ID, applicationcredentials.CreateOpts{Name: strings.Join(roles, "+"), Roles: rs}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		pc, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: e.user.identity.IdentityEndpoint,
			ApplicationCredentialID: ac.ID, ApplicationCredentialSecret: ac.Secret})
		if err != nil {
			t.Fatal(err)
		}
		got, err := tokens.Get(ctx, e.user.identity, pc.Token()).ExtractRoles()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range got {
			names = append(names, r.Name)
		}
		if !slices.Equal(names, slices.Sorted(slices.Values(roles))) {
			t.Errorf("a token of a credential of %v lists %v, want those roles alone (no implied reader)", roles, names)
		}
		lb, err := openstack.NewLoadBalancerV2(pc, gophercloud.EndpointOpts{})
		if err != nil {
			t.Fatal(err)
		}
		return lb
	}
	member, lbMember := withRoles("member"), withRoles("load-balancer_member", "member")
	net := makeTenantNet(t, e.user, "prod", "192.168.20.0/24")
	create := loadbalancers.CreateOpts{Name: "prod-api", VipSubnetID: net.subnet}
	for _, tc := range []struct {
		name string
		call func() error
		code int
	}{
		{"a member lists", func() error { _, err := loadbalancers.List(member, nil).AllPages(ctx); return err }, http.StatusForbidden},
		{"a member creates", func() error { _, err := loadbalancers.Create(ctx, member, create).Extract(); return err }, http.StatusForbidden},
		{"a load-balancer member lists", func() error { _, err := loadbalancers.List(lbMember, nil).AllPages(ctx); return err }, 0},
		{"a load-balancer member creates", func() error { _, err := loadbalancers.Create(ctx, lbMember, create).Extract(); return err }, 0},
		{"a load-balancer member sets a quota", func() error {
			_, err := quotas.Update(ctx, lbMember, project.ID, quotas.UpdateOpts{Loadbalancer: new(int)}).Extract()
			return err
		}, http.StatusForbidden},
	} {
		err := tc.call()
		if tc.code == 0 && err != nil || tc.code != 0 && !gophercloud.ResponseCodeIs(err, tc.code) {
			t.Errorf("%s: %v, want %d", tc.name, err, tc.code)
		}
	}
}

// TestOctaviaVersions: the API's root lists Zed's minor versions, v2.0 to
// v2.26 the current one, as clients read them to pick the features they
// use (the cloud controller manager sets listeners' timeouts from v2.1).
func TestOctaviaVersions(t *testing.T) {
	t.Parallel()
	e := startEnv(t, Options{})
	resp, err := http.Get(e.user.lb.Endpoint) // the service's root, not v2's
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Versions []struct{ ID, Status, Updated string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	n := len(doc.Versions)
	if n != 27 || doc.Versions[0].ID != "v2.0" || doc.Versions[0].Status != "SUPPORTED" ||
		doc.Versions[n-1].ID != "v2.26" || doc.Versions[n-1].Status != "CURRENT" || doc.Versions[n-1].Updated != "2022-08-29T00:00:00Z" {
		t.Errorf("the versions document: %+v", doc.Versions)
	}
}

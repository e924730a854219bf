package cloud

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/quotasets"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	lbquotas "github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/quotas"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/quotas"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/ignition"
	"opke.dev/opke/schemas"
)

const owner = "install-1"

func startSim(t testing.TB) (*cloudsim.Sim, *Clients, string) {
	t.Helper()
	dir := t.TempDir()
	sim, err := cloudsim.Start(context.Background(), cloudsim.Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	c, err := Connect(context.Background(), filepath.Join(dir, "clouds.yaml"), "sim")
	if err != nil {
		t.Fatal(err)
	}
	return sim, c, dir
}

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

// build creates a cluster's infrastructure by hand through gophercloud,
// tagged as OPKE tags it, one resource after another as Desire lists them.
func build(t testing.TB, c *Clients, d *diff.Desired) {
	t.Helper()
	ctx := context.Background()
	tags := []string{Tag(schemas.TagCluster, d.Cluster), Tag(schemas.TagOwner, owner)}
	ids := map[string]string{}
	lookup := func(list func() (pagination.Pager, func(pagination.Page) (map[string]string, error))) map[string]string {
		pager, extract := list()
		out := map[string]string{}
		if err := pager.EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			m, err := extract(p)
			for k, v := range m {
				out[k] = v
			}
			return true, err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	ext := lookup(func() (pagination.Pager, func(pagination.Page) (map[string]string, error)) {
		yes := true
		return networks.List(c.Network, external.ListOptsExt{ListOptsBuilder: networks.ListOpts{}, External: &yes}), func(p pagination.Page) (map[string]string, error) {
			l, err := networks.ExtractNetworks(p)
			m := map[string]string{}
			for _, n := range l {
				m[n.Name] = n.ID
			}
			return m, err
		}
	})
	imgs := lookup(func() (pagination.Pager, func(pagination.Page) (map[string]string, error)) {
		return images.List(c.Image, nil), func(p pagination.Page) (map[string]string, error) {
			l, err := images.ExtractImages(p)
			m := map[string]string{}
			for _, n := range l {
				m[n.Name] = n.ID
			}
			return m, err
		}
	})
	tag := func(kind, id string) {
		if _, err := attributestags.ReplaceAll(ctx, c.Network, kind, id, attributestags.ReplaceAllOpts{Tags: tags}).Extract(); err != nil {
			t.Fatalf("tag %s %s: %v", kind, id, err)
		}
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	id := func(kind diff.Kind, name string) string { return ids[string(kind)+"/"+name] }
	for _, r := range d.Infra {
		a := func(k string) string { return r.Attrs[k].Value }
		var newID string
		switch r.Kind {
		case diff.KindNetwork:
			n, err := networks.Create(ctx, c.Network, networks.CreateOpts{Name: r.Name}).Extract()
			must(r.Address(), err)
			newID = n.ID
			tag("networks", n.ID)
		case diff.KindSubnet:
			var dns []string
			if v := a("dns_nameservers"); v != "" {
				dns = strings.Split(v, ",")
			}
			s, err := subnets.Create(ctx, c.Network, subnets.CreateOpts{Name: r.Name, NetworkID: id(diff.KindNetwork, a("network")), CIDR: a("cidr"),
				IPVersion: 4, DNSNameservers: dns}).Extract()
			must(r.Address(), err)
			newID = s.ID
			tag("subnets", s.ID)
		case diff.KindRouter:
			rt, err := routers.Create(ctx, c.Network, routers.CreateOpts{Name: r.Name, GatewayInfo: &routers.GatewayInfo{NetworkID: ext[a("external_network")]}}).Extract()
			must(r.Address(), err)
			newID = rt.ID
			tag("routers", rt.ID)
		case diff.KindInterface:
			_, err := routers.AddInterface(ctx, c.Network, id(diff.KindRouter, a("router")), routers.AddInterfaceOpts{SubnetID: id(diff.KindSubnet, a("subnet"))}).Extract()
			must(r.Address(), err)
		case diff.KindSecurityGroup:
			g, err := groups.Create(ctx, c.Network, groups.CreateOpts{Name: r.Name}).Extract()
			must(r.Address(), err)
			newID = g.ID
			tag("security-groups", g.ID)
		case diff.KindRule:
			opts := rules.CreateOpts{SecGroupID: id(diff.KindSecurityGroup, a("security_group")), Direction: rules.DirIngress, EtherType: rules.EtherType4}
			if p := a("protocol"); p != "any" {
				opts.Protocol = rules.RuleProtocol(p)
			}
			if p, err := strconv.Atoi(a("ports")); err == nil {
				opts.PortRangeMin, opts.PortRangeMax = p, p
			}
			if g, ok := strings.CutPrefix(a("remote"), "group:"); ok {
				opts.RemoteGroupID = id(diff.KindSecurityGroup, g)
			} else {
				opts.RemoteIPPrefix = a("remote")
			}
			_, err := rules.Create(ctx, c.Network, opts).Extract()
			must(r.Address(), err)
		case diff.KindServerGroup:
			g, err := servergroups.Create(ctx, c.Compute, servergroups.CreateOpts{Name: r.Name, Policy: a("policy")}).Extract()
			must(r.Address(), err)
			newID = g.ID
		case diff.KindPort:
			opts := ports.CreateOpts{Name: r.Name, NetworkID: id(diff.KindNetwork, a("network")), SecurityGroups: &[]string{id(diff.KindSecurityGroup, a("security_groups"))}}
			if ip := r.Attrs["fixed_ip"]; !ip.Unknown {
				opts.FixedIPs = []ports.IP{{SubnetID: id(diff.KindSubnet, d.Cluster), IPAddress: ip.Value}}
			}
			p, err := ports.Create(ctx, c.Network, opts).Extract()
			must(r.Address(), err)
			newID = p.ID
			tag("ports", p.ID)
		case diff.KindServer:
			opts := servers.CreateOpts{Name: r.Name, FlavorRef: flavorRef(a("flavor")), ImageRef: imgs[a("image")], Tags: tags,
				Networks: []servers.Network{{Port: id(diff.KindPort, a("port"))}}, Metadata: map[string]string{MetaUserData: a("user_data")}}
			var hints servers.SchedulerHintOptsBuilder
			if g := a("server_group"); g != "" {
				hints = servers.SchedulerHintOpts{Group: id(diff.KindServerGroup, g)}
			}
			s, err := servers.Create(ctx, c.Compute, opts, hints).Extract()
			must(r.Address(), err)
			newID = s.ID
		case diff.KindFloatingIP:
			opts := floatingips.CreateOpts{FloatingNetworkID: ext[a("network")], Description: r.Name}
			if p := a("port"); p != "" {
				opts.PortID = id(diff.KindPort, p)
			} else {
				opts.PortID = ids["vip/"+a("load_balancer")]
			}
			f, err := floatingips.Create(ctx, c.Network, opts).Extract()
			must(r.Address(), err)
			newID = f.ID
			tag("floatingips", f.ID)
		case diff.KindLoadBalancer:
			lb, err := loadbalancers.Create(ctx, c.LoadBalancer, loadbalancers.CreateOpts{Name: r.Name, VipSubnetID: id(diff.KindSubnet, a("subnet")),
				VipAddress: a("vip_address"), Tags: tags}).Extract()
			must(r.Address(), err)
			newID = lb.ID
			ids["vip/"+r.Name] = lb.VipPortID
		case diff.KindListener:
			port, _ := strconv.Atoi(a("port"))
			l, err := listeners.Create(ctx, c.LoadBalancer, listeners.CreateOpts{Name: r.Name, LoadbalancerID: id(diff.KindLoadBalancer, a("load_balancer")),
				Protocol: listeners.Protocol(a("protocol")), ProtocolPort: port, Tags: tags}).Extract()
			must(r.Address(), err)
			newID = l.ID
		case diff.KindPool:
			p, err := pools.Create(ctx, c.LoadBalancer, pools.CreateOpts{Name: r.Name, ListenerID: id(diff.KindListener, a("listener")),
				Protocol: pools.Protocol(a("protocol")), LBMethod: pools.LBMethod(a("algorithm")), Tags: tags}).Extract()
			must(r.Address(), err)
			newID = p.ID
		case diff.KindMember:
			port, _ := strconv.Atoi(a("port"))
			m, err := pools.CreateMember(ctx, c.LoadBalancer, id(diff.KindPool, a("pool")), pools.CreateMemberOpts{Name: r.Name, Address: a("address"),
				ProtocolPort: port, SubnetID: id(diff.KindSubnet, d.Cluster), Tags: tags}).Extract()
			must(r.Address(), err)
			newID = m.ID
		case diff.KindMonitor:
			n := func(k string) int { v, _ := strconv.Atoi(a(k)); return v }
			m, err := monitors.Create(ctx, c.LoadBalancer, monitors.CreateOpts{Name: r.Name, PoolID: id(diff.KindPool, a("pool")), Type: a("type"),
				Delay: n("delay"), Timeout: n("timeout"), MaxRetries: n("max_retries"), Tags: tags}).Extract()
			must(r.Address(), err)
			newID = m.ID
		default:
			t.Fatalf("no builder for %s", r.Kind)
		}
		ids[string(r.Kind)+"/"+r.Name] = newID
	}
}

// roomFor lifts the demo project's quotas and adds an external network
// large enough for a hundred clusters' routers and floating IPs.
func roomFor(t *testing.T, dir string, user *Clients) {
	t.Helper()
	ctx := context.Background()
	admin, err := Connect(ctx, filepath.Join(dir, "clouds.yaml"), "sim-admin")
	if err != nil {
		t.Fatal(err)
	}
	auth, ok := user.Provider.GetAuthResult().(tokens.CreateResult)
	if !ok {
		t.Fatal("no token")
	}
	project, err := auth.ExtractProject()
	if err != nil {
		t.Fatal(err)
	}
	none := -1
	if _, err := quotasets.Update(ctx, admin.Compute, project.ID, quotasets.UpdateOpts{Instances: &none, Cores: &none, RAM: &none,
		ServerGroups: &none, ServerGroupMembers: &none}).Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := quotas.Update(ctx, admin.Network, project.ID, quotas.UpdateOpts{Network: &none, Subnet: &none, Port: &none, Router: &none,
		FloatingIP: &none, SecurityGroup: &none, SecurityGroupRule: &none}).Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := lbquotas.Update(ctx, admin.LoadBalancer, project.ID, lbquotas.UpdateOpts{Loadbalancer: &none, Listener: &none,
		Pool: &none, Member: &none, Healthmonitor: &none}).Extract(); err != nil {
		t.Fatal(err)
	}
	yes := true
	net, err := networks.Create(ctx, admin.Network, external.CreateOptsExt{CreateOptsBuilder: networks.CreateOpts{Name: "internet"}, External: &yes}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subnets.Create(ctx, admin.Network, subnets.CreateOpts{NetworkID: net.ID, CIDR: "198.18.0.0/16", IPVersion: 4}).Extract(); err != nil {
		t.Fatal(err)
	}
}

func flavorRef(name string) string {
	return map[string]string{"m1.small": "2", "m1.medium": "3", "m1.large": "4"}[name]
}

// TestObserveAdoptsAClusterBuiltByHand: a cluster's infrastructure built
// by hand to match its spec is adopted by its tags: the infrastructure
// phase plans nothing. Then each kind of drift made by hand shows up as
// drift once the cluster counts as applied.
func TestObserveAdoptsAClusterBuiltByHand(t *testing.T) {
	t.Parallel()
	_, c, _ := startSim(t)
	ctx := context.Background()
	d := desired(t, cluster(t, "prod", 1, 2))
	build(t, c, d)
	obs, err := Observe(ctx, c, owner, nil)
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
	obs, err = Observe(ctx, c, owner, obs.Members)
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

// TestObserveCostDoesNotGrowWithClusters: a warm observation of 1, 10 and
// 100 converged clusters costs the same number of API calls.
func TestObserveCostDoesNotGrowWithClusters(t *testing.T) {
	t.Parallel()
	counts := map[int]int64{}
	for _, n := range []int{1, 10, 100} {
		sim, c, dir := startSim(t)
		roomFor(t, dir, c)
		for i := range n {
			cl := cluster(t, fmt.Sprintf("c%03d", i), i, 1)
			cl.Spec.Network.ExternalNetwork = "internet"
			build(t, c, desired(t, cl))
		}
		ctx := context.Background()
		cold, err := Observe(ctx, c, owner, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(cold.Clusters) != n {
			t.Fatalf("%d clusters observed, want %d", len(cold.Clusters), n)
		}
		sim.ResetCounters()
		warm, err := Observe(ctx, c, owner, cold.Members)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for route, k := range sim.Counters() {
			total += k
			t.Logf("%d clusters: %s %d", n, route, k)
		}
		counts[n] = total
		if len(warm.Clusters) != n {
			t.Fatalf("warm: %d clusters", len(warm.Clusters))
		}
	}
	if counts[1] != counts[10] || counts[10] != counts[100] {
		t.Errorf("API calls of a warm observation by cluster count: %v, want the same", counts)
	}
}

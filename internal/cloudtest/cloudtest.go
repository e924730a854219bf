// Package cloudtest builds OpenStack resources by hand for tests: a
// simulator with a connected client, a cluster's infrastructure created
// through gophercloud as OPKE would tag it, quotas lifted for fleets, and
// whole clusters converged by hand with their ledger recorded.
package cloudtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/quotasets"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/applicationcredentials"
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
	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/objects"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// Start runs a simulator in tb's temporary folder and connects to it as
// the cloud "sim"; it returns the simulator, the clients and the state dir
// (which holds clouds.yaml). The clients have no request budget.
func Start(tb testing.TB) (*cloudsim.Sim, *cloud.Clients, string) {
	tb.Helper()
	return StartWith(tb, cloudsim.Options{})
}

// StartWith is Start with options (its StateDir is tb's).
func StartWith(tb testing.TB, opts cloudsim.Options) (*cloudsim.Sim, *cloud.Clients, string) {
	tb.Helper()
	dir := tb.TempDir()
	opts.StateDir = dir
	if opts.Hosts == "" {
		opts.Hosts = os.Getenv(HostsEnv)
	}
	sim, err := cloudsim.Start(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sim.Close() })
	c, err := cloud.Connect(context.Background(), cloud.Target{File: filepath.Join(dir, "clouds.yaml"), Cloud: "sim", Budget: cloud.Unlimited()})
	if err != nil {
		tb.Fatal(err)
	}
	return sim, c, dir
}

// Build creates a cluster's infrastructure by hand through gophercloud,
// tagged as OPKE tags it for owner, one resource after another as Desire
// lists them. Servers boot the userData whose sha256 their "user_data"
// attribute names (none when it is not given).
// HostsEnv names the environment variable that chooses the simulator's
// hosts for the tests that can run on either (cloudsim.HostsInProcess, the
// default, or cloudsim.HostsReal: make realhosts sets it).
const HostsEnv = "OPKE_TEST_HOSTS"

// WaitHosts waits until every server of the cloud is ACTIVE with its host
// keys on its console, as a real machine is some seconds after its
// create; an in-process host is at once.
func WaitHosts(t testing.TB, c *cloud.Clients) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pages, err := servers.List(c.Compute, servers.ListOpts{}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		list, err := servers.ExtractServers(pages)
		if err != nil {
			t.Fatal(err)
		}
		waiting := ""
		for _, sv := range list {
			if sv.Status == "ERROR" {
				t.Fatalf("server %s: ERROR: %v", sv.Name, sv.Fault)
			}
			if sv.Status != "ACTIVE" {
				waiting = sv.Name + " is " + sv.Status
				break
			}
			out, err := servers.ShowConsoleOutput(ctx, c.Compute, sv.ID, servers.ShowConsoleOutputOpts{}).Extract()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "-----END SSH HOST KEY KEYS-----") {
				waiting = sv.Name + " has printed no host key yet"
				break
			}
		}
		if waiting == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hosts not up after 3 minutes: %s", waiting)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func Build(t testing.TB, c *cloud.Clients, owner string, d *diff.Desired, userData ...[]byte) {
	t.Helper()
	ctx := context.Background()
	tags := []string{cloud.Tag(schemas.TagCluster, d.Cluster), cloud.Tag(schemas.TagOwner, owner)}
	bySum := map[string][]byte{}
	for _, u := range userData {
		sum := sha256.Sum256(u)
		bySum[hex.EncodeToString(sum[:])] = u
	}
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
	flavorIDs := lookup(func() (pagination.Pager, func(pagination.Page) (map[string]string, error)) {
		return flavors.ListDetail(c.Compute, nil), func(p pagination.Page) (map[string]string, error) {
			l, err := flavors.ExtractFlavors(p)
			m := map[string]string{}
			for _, f := range l {
				m[f.Name] = f.ID
			}
			return m, err
		}
	})
	// settle waits for the load balancer to be ACTIVE again: Octavia
	// refuses a change while it is PENDING_*.
	var lbID string
	settle := func(what string) {
		t.Helper()
		if _, err := WaitLB(ctx, c.LoadBalancer, lbID); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
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
		case diff.KindAppCredential:
			user, err := c.UserID()
			must(r.Address().String(), err)
			ac, err := applicationcredentials.Create(ctx, c.Identity, user, applicationcredentials.CreateOpts{
				Name: cloud.AppCredentialName(owner, d.Cluster), Secret: AppCredentialSecret(d.Cluster)}).Extract()
			must(r.Address().String(), err)
			newID = ac.ID
		case diff.KindNetwork:
			n, err := networks.Create(ctx, c.Network, networks.CreateOpts{Name: r.Name}).Extract()
			must(r.Address().String(), err)
			newID = n.ID
			tag("networks", n.ID)
		case diff.KindSubnet:
			var dns []string
			if v := a("dns_nameservers"); v != "" {
				dns = strings.Split(v, ",")
			}
			s, err := subnets.Create(ctx, c.Network, subnets.CreateOpts{Name: r.Name, NetworkID: id(diff.KindNetwork, a("network")), CIDR: a("cidr"),
				IPVersion: 4, DNSNameservers: dns}).Extract()
			must(r.Address().String(), err)
			newID = s.ID
			tag("subnets", s.ID)
		case diff.KindRouter:
			rt, err := routers.Create(ctx, c.Network, routers.CreateOpts{Name: r.Name, GatewayInfo: &routers.GatewayInfo{NetworkID: ext[a("external_network")]}}).Extract()
			must(r.Address().String(), err)
			newID = rt.ID
			tag("routers", rt.ID)
		case diff.KindInterface:
			_, err := routers.AddInterface(ctx, c.Network, id(diff.KindRouter, a("router")), routers.AddInterfaceOpts{SubnetID: id(diff.KindSubnet, a("subnet"))}).Extract()
			must(r.Address().String(), err)
		case diff.KindSecurityGroup:
			g, err := groups.Create(ctx, c.Network, groups.CreateOpts{Name: r.Name}).Extract()
			must(r.Address().String(), err)
			newID = g.ID
			tag("security-groups", g.ID)
		case diff.KindRule:
			opts := rules.CreateOpts{SecGroupID: id(diff.KindSecurityGroup, a("security_group")), Direction: rules.DirIngress, EtherType: rules.EtherType4}
			if p := a("protocol"); p != "any" {
				opts.Protocol = rules.RuleProtocol(p)
			}
			lo, hi, isRange := strings.Cut(a("ports"), "-")
			if !isRange {
				hi = lo
			}
			if p, err := strconv.Atoi(lo); err == nil {
				opts.PortRangeMin = p
			}
			if p, err := strconv.Atoi(hi); err == nil {
				opts.PortRangeMax = p
			}
			if g, ok := strings.CutPrefix(a("remote"), "group:"); ok {
				opts.RemoteGroupID = id(diff.KindSecurityGroup, g)
			} else {
				opts.RemoteIPPrefix = a("remote")
			}
			_, err := rules.Create(ctx, c.Network, opts).Extract()
			must(r.Address().String(), err)
		case diff.KindServerGroup:
			g, err := servergroups.Create(ctx, c.Compute, servergroups.CreateOpts{Name: r.Name, Policy: a("policy")}).Extract()
			must(r.Address().String(), err)
			newID = g.ID
		case diff.KindPort:
			opts := ports.CreateOpts{Name: r.Name, NetworkID: id(diff.KindNetwork, a("network")), SecurityGroups: &[]string{id(diff.KindSecurityGroup, a("security_groups"))}}
			if ip := r.Attrs["fixed_ip"]; !ip.Unknown {
				opts.FixedIPs = []ports.IP{{SubnetID: id(diff.KindSubnet, d.Cluster), IPAddress: ip.Value}}
			}
			p, err := ports.Create(ctx, c.Network, opts).Extract()
			must(r.Address().String(), err)
			newID = p.ID
			tag("ports", p.ID)
		case diff.KindServer:
			opts := servers.CreateOpts{Name: r.Name, FlavorRef: flavorIDs[a("flavor")], ImageRef: imgs[a("image")], Tags: tags,
				Networks: []servers.Network{{Port: id(diff.KindPort, a("port"))}}, Metadata: map[string]string{cloud.MetaUserData: a("user_data")}, UserData: bySum[a("user_data")]}
			var hints servers.SchedulerHintOptsBuilder
			if g := a("server_group"); g != "" {
				hints = servers.SchedulerHintOpts{Group: id(diff.KindServerGroup, g)}
			}
			s, err := servers.Create(ctx, c.Compute, opts, hints).Extract()
			must(r.Address().String(), err)
			newID = s.ID
		case diff.KindFloatingIP:
			opts := floatingips.CreateOpts{FloatingNetworkID: ext[a("network")], Description: r.Name}
			if p := a("port"); p != "" {
				opts.PortID = id(diff.KindPort, p)
			} else {
				opts.PortID = ids["vip/"+a("load_balancer")]
			}
			f, err := floatingips.Create(ctx, c.Network, opts).Extract()
			must(r.Address().String(), err)
			newID = f.ID
			tag("floatingips", f.ID)
		case diff.KindLoadBalancer:
			lb, err := loadbalancers.Create(ctx, c.LoadBalancer, loadbalancers.CreateOpts{Name: r.Name, VipSubnetID: id(diff.KindSubnet, a("subnet")),
				VipAddress: a("vip_address"), Tags: tags}).Extract()
			must(r.Address().String(), err)
			newID, lbID = lb.ID, lb.ID
			ids["vip/"+r.Name] = lb.VipPortID
			settle(r.Address().String())
		case diff.KindListener:
			port, _ := strconv.Atoi(a("port"))
			client, _ := strconv.Atoi(a("timeout_client_data"))
			member, _ := strconv.Atoi(a("timeout_member_data"))
			l, err := listeners.Create(ctx, c.LoadBalancer, listeners.CreateOpts{Name: r.Name, LoadbalancerID: id(diff.KindLoadBalancer, a("load_balancer")),
				Protocol: listeners.Protocol(a("protocol")), ProtocolPort: port, Tags: tags,
				TimeoutClientData: &client, TimeoutMemberData: &member}).Extract()
			must(r.Address().String(), err)
			newID = l.ID
			settle(r.Address().String())
		case diff.KindPool:
			p, err := pools.Create(ctx, c.LoadBalancer, pools.CreateOpts{Name: r.Name, ListenerID: id(diff.KindListener, a("listener")),
				Protocol: pools.Protocol(a("protocol")), LBMethod: pools.LBMethod(a("algorithm")), Tags: tags}).Extract()
			must(r.Address().String(), err)
			newID = p.ID
			settle(r.Address().String())
		case diff.KindMember:
			port, _ := strconv.Atoi(a("port"))
			m, err := pools.CreateMember(ctx, c.LoadBalancer, id(diff.KindPool, a("pool")), pools.CreateMemberOpts{Name: r.Name, Address: a("address"),
				ProtocolPort: port, SubnetID: id(diff.KindSubnet, d.Cluster), Tags: tags}).Extract()
			must(r.Address().String(), err)
			newID = m.ID
			settle(r.Address().String())
		case diff.KindMonitor:
			n := func(k string) int { v, _ := strconv.Atoi(a(k)); return v }
			m, err := monitors.Create(ctx, c.LoadBalancer, monitors.CreateOpts{Name: r.Name, PoolID: id(diff.KindPool, a("pool")), Type: a("type"),
				Delay: n("delay"), Timeout: n("timeout"), MaxRetries: n("max_retries"), Tags: tags}).Extract()
			must(r.Address().String(), err)
			newID = m.ID
			settle(r.Address().String())
		default:
			t.Fatalf("no builder for %s", r.Kind)
		}
		ids[string(r.Kind)+"/"+r.Name] = newID
	}
}

// AppCredentialSecret is the secret Build gives a cluster's application
// credential.
func AppCredentialSecret(cluster string) string { return "cloudtest-secret-of-" + cluster }

// RoomFor lifts the demo project's quotas and adds an external network
// large enough for a hundred clusters' routers and floating IPs.
func RoomFor(t testing.TB, dir string, user *cloud.Clients) {
	t.Helper()
	ctx := context.Background()
	admin, err := cloud.Connect(ctx, cloud.Target{File: filepath.Join(dir, "clouds.yaml"), Cloud: "sim-admin", Budget: cloud.Unlimited()})
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

// Converge does by hand what apply will, short of the hosts: it issues
// the clusters' material into the store, builds their infrastructure
// through gophercloud (servers boot the rendered user_data), and records
// in the ledger what was built and every file as pushed at the clusters'
// versions. No file is pushed: a resync finds them missing.
func Converge(t testing.TB, store *state.Store, clients *cloud.Clients, now time.Time, cs ...*schemas.Cluster) {
	t.Helper()
	ctx := context.Background()
	owner, err := store.InstallationID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		out, err := render.Cluster(ctx, store, c, render.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		d, err := diff.Desire(c, diff.Inputs{UserData: out.UserData})
		if err != nil {
			t.Fatal(err)
		}
		var userData [][]byte
		for _, u := range out.UserData {
			userData = append(userData, u)
		}
		Build(t, clients, owner, d, userData...)
	}
	obs, err := cloud.Observe(ctx, clients, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		var fip netip.Addr
		var creds *assets.CloudCredential
		var subnet string
		for _, res := range obs.Clusters[c.Metadata.Name] {
			if err := reconciler.RecordResource(ctx, store, c.Metadata.Name, res); err != nil {
				t.Fatal(err)
			}
			if res.Kind == diff.KindAppCredential {
				if err := reconciler.RecordAppCredential(ctx, store, c.Metadata.Name, AppCredentialSecret(c.Metadata.Name)); err != nil {
					t.Fatal(err)
				}
				creds = &assets.CloudCredential{AuthURL: clients.AuthURL, Region: clients.Region, ID: res.ID, Secret: AppCredentialSecret(c.Metadata.Name)}
			}
			if res.Kind == diff.KindSubnet && res.Name == c.Metadata.Name {
				subnet = res.ID
			}
			if res.Kind == diff.KindFloatingIP && res.Name == c.Metadata.Name+"-api" {
				fip = netip.MustParseAddr(res.Attrs["address"].Value)
			}
		}
		creds.SubnetID = subnet
		out, err := render.Cluster(ctx, store, c, render.Options{Now: now, APIFloatingIP: fip, Cloud: creds})
		if err != nil {
			t.Fatal(err)
		}
		if err := reconciler.RecordRendered(ctx, store, c.Metadata.Name, out.Assets); err != nil {
			t.Fatal(err)
		}
		if err := reconciler.RecordSpec(ctx, store, c, "0123456789abcdef0123456789abcdef01234567"); err != nil {
			t.Fatal(err)
		}
	}
}

// CorruptObject flips one byte in the middle of a Swift object and keeps
// its metadata, as a bad disk would.
func CorruptObject(t testing.TB, c *cloud.Clients, container, object string) {
	t.Helper()
	ctx := context.Background()
	dl := objects.Download(ctx, c.ObjectStore, container, object, nil)
	b, err := dl.ExtractContent()
	if err != nil {
		t.Fatalf("download %s/%s: %v", container, object, err)
	}
	meta, err := objects.Get(ctx, c.ObjectStore, container, object, nil).ExtractMetadata()
	if err != nil {
		t.Fatalf("metadata of %s/%s: %v", container, object, err)
	}
	b[len(b)/2] ^= 0xff
	if _, err := objects.Create(ctx, c.ObjectStore, container, object, objects.CreateOpts{Content: bytes.NewReader(b), Metadata: meta}).Extract(); err != nil {
		t.Fatalf("rewrite %s/%s: %v", container, object, err)
	}
}

// WaitLB waits up to two minutes for a load balancer to be ACTIVE (after
// a create or a change of its children) and returns it; ERROR, a failed
// read or the deadline is an error.
func WaitLB(ctx context.Context, lbc *gophercloud.ServiceClient, id string) (*loadbalancers.LoadBalancer, error) {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		lb, err := loadbalancers.Get(ctx, lbc, id).Extract()
		switch {
		case err != nil:
			return nil, fmt.Errorf("load balancer %s: %w", id, err)
		case lb.ProvisioningStatus == "ACTIVE":
			return lb, nil
		case lb.ProvisioningStatus == "ERROR":
			return nil, fmt.Errorf("load balancer %s went to ERROR", id)
		case time.Now().After(deadline):
			return nil, fmt.Errorf("load balancer %s still %s after two minutes", id, lb.ProvisioningStatus)
		}
	}
}

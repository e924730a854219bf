package cloudsim_test

// The simulator's contract: what OPKE relies on in the OpenStack APIs,
// asserted through gophercloud only. These tests run against a fresh
// simulator in `make test` and against the real control plane in
// `make conformance` (internal/cloudtest.Contract); where the two answer
// differently, the simulator is wrong. What the conformance cloud cannot
// do (test/openstack/LIMITS.md) is not asked here.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/snapshots"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/keypairs"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/quotasets"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/tags"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/volumeattach"
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
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/mtu"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/quotas"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/containers"
	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/objects"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/cloud"
	"opke.dev/opke/internal/cloudtest"
)

// ct is a contract test's cloud and the names it makes.
type ct struct {
	*cloudtest.Target
	t   *testing.T
	ctx context.Context
}

// on is c bound to a subtest: its failures and cleanups are the
// subtest's (FailNow belongs to the goroutine of the test it fails).
func (c *ct) on(t *testing.T) *ct {
	bound := *c
	bound.t = t
	return &bound
}

func contract(t *testing.T) *ct {
	t.Helper()
	return &ct{Target: cloudtest.Contract(t), t: t, ctx: context.Background()}
}

// name is a name unique to the test (resources of several tests share a
// real cloud).
func (c *ct) name(s string) string { return c.Owner + "-" + s }

// tags are the tags the test puts on what it makes: Purge finds them.
func (c *ct) tags(cluster string) []string {
	return []string{cloud.Tag("opke-cluster", cluster), cloud.Tag("opke-owner", c.Owner)}
}

// cleanup deletes something when the test ends (in reverse order of
// creation), retrying while the cloud answers 409 (a port still bound, a
// load balancer still pending); a 404 is success.
func (c *ct) cleanup(what string, del func() error) {
	c.t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			err := del()
			if err == nil || gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
				return
			}
			if !gophercloud.ResponseCodeIs(err, http.StatusConflict) || time.Now().After(deadline) {
				c.t.Errorf("clean up %s: %v", what, err)
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}

// eventually polls cond until it holds, failing with its last word after
// timeout.
func (c *ct) eventually(what string, timeout time.Duration, cond func() (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: still %s after %v", what, why, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *ct) must(err error, what string) {
	c.t.Helper()
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

func (c *ct) project() string {
	c.t.Helper()
	r, ok := c.Clients.Provider.GetAuthResult().(tokens.CreateResult)
	if !ok {
		c.t.Fatal("no token")
	}
	p, err := r.ExtractProject()
	c.must(err, "the token's project")
	return p.ID
}

func (c *ct) flavor(name string) string {
	c.t.Helper()
	pages, err := flavors.ListDetail(c.Clients.Compute, nil).AllPages(c.ctx)
	c.must(err, "list flavors")
	fl, _ := flavors.ExtractFlavors(pages)
	for _, f := range fl {
		if f.Name == name {
			return f.ID
		}
	}
	c.t.Fatalf("no flavor %s", name)
	return ""
}

func (c *ct) image(name string) string {
	c.t.Helper()
	pages, err := images.List(c.Clients.Image, images.ListOpts{Name: name}).AllPages(c.ctx)
	c.must(err, "list images")
	l, _ := images.ExtractImages(pages)
	if len(l) != 1 {
		c.t.Fatalf("images named %s: %d", name, len(l))
	}
	return l[0].ID
}

func (c *ct) public() string {
	c.t.Helper()
	pages, err := networks.List(c.Clients.Network, networks.ListOpts{Name: "public"}).AllPages(c.ctx)
	c.must(err, "list networks")
	l, _ := networks.ExtractNetworks(pages)
	if len(l) != 1 {
		c.t.Fatalf("networks named public: %d", len(l))
	}
	return l[0].ID
}

// net is a tagged network with a subnet, routed to public when routed.
type net struct{ network, subnet, router string }

func (c *ct) network(cluster, cidr string, routed bool) net {
	c.t.Helper()
	nc := c.Clients.Network
	n, err := networks.Create(c.ctx, nc, networks.CreateOpts{Name: c.name(cluster)}).Extract()
	c.must(err, "create network")
	c.cleanup("network", func() error { return networks.Delete(c.ctx, nc, n.ID).ExtractErr() })
	_, err = attributestags.ReplaceAll(c.ctx, nc, "networks", n.ID, attributestags.ReplaceAllOpts{Tags: c.tags(cluster)}).Extract()
	c.must(err, "tag network")
	prefix := strings.TrimSuffix(cidr, "0/24")
	sn, err := subnets.Create(c.ctx, nc, subnets.CreateOpts{NetworkID: n.ID, Name: c.name(cluster), CIDR: cidr, IPVersion: gophercloud.IPv4,
		AllocationPools: []subnets.AllocationPool{{Start: prefix + "16", End: prefix + "254"}}}).Extract()
	c.must(err, "create subnet")
	c.cleanup("subnet", func() error { return subnets.Delete(c.ctx, nc, sn.ID).ExtractErr() })
	out := net{network: n.ID, subnet: sn.ID}
	if !routed {
		return out
	}
	rt, err := routers.Create(c.ctx, nc, routers.CreateOpts{Name: c.name(cluster), GatewayInfo: &routers.GatewayInfo{NetworkID: c.public()}}).Extract()
	c.must(err, "create router")
	c.cleanup("router", func() error { return routers.Delete(c.ctx, nc, rt.ID).ExtractErr() })
	_, err = routers.AddInterface(c.ctx, nc, rt.ID, routers.AddInterfaceOpts{SubnetID: sn.ID}).Extract()
	c.must(err, "add router interface")
	c.cleanup("router interface", func() error {
		_, err := routers.RemoveInterface(c.ctx, nc, rt.ID, routers.RemoveInterfaceOpts{SubnetID: sn.ID}).Extract()
		return err
	})
	out.router = rt.ID
	return out
}

// server creates a tagged server and cleans it up.
func (c *ct) server(opts servers.CreateOptsBuilder, hints servers.SchedulerHintOptsBuilder) *servers.Server {
	c.t.Helper()
	sv, err := servers.Create(c.ctx, c.Clients.Compute, opts, hints).Extract()
	c.must(err, "create server")
	c.cleanup("server", func() error {
		if err := servers.Delete(c.ctx, c.Clients.Compute, sv.ID).ExtractErr(); err != nil {
			return err
		}
		return gone("server "+sv.ID, func() error { _, err := servers.Get(c.ctx, c.Clients.Compute, sv.ID).Extract(); return err })
	})
	return sv
}

// gone polls get until it answers 404, for up to two minutes.
func gone(what string, get func() error) error {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		err := get()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still there after two minutes", what)
		}
	}
}

// settled polls a server until it leaves BUILD.
func (c *ct) settled(id string) *servers.Server {
	c.t.Helper()
	var sv *servers.Server
	c.eventually("server "+id+" leaves BUILD", 2*time.Minute, func() (bool, string) {
		var err error
		sv, err = servers.Get(c.ctx, c.Admin.Compute, id).Extract()
		if err != nil {
			return false, err.Error()
		}
		return sv.Status != "BUILD", sv.Status
	})
	return sv
}

// TestContractSeed: the names OPKE's example fleet and tests use exist.
func TestContractSeed(t *testing.T) {
	t.Parallel()
	c := contract(t)
	for _, tt := range []struct{ name, flavor string }{{"m1.small", "m1.small"}, {"m1.medium", "m1.medium"}, {"m1.large", "m1.large"}} {
		t.Run("flavor "+tt.name, func(t *testing.T) { c.flavor(tt.flavor) })
	}
	for _, name := range []string{"flatcar", "fedora-coreos"} {
		t.Run("image "+name, func(t *testing.T) {
			c := c.on(t)
			img, err := images.Get(c.ctx, c.Clients.Image, c.image(name)).Extract()
			if err != nil || img.Status != images.ImageStatusActive {
				t.Errorf("image %s: %+v %v, want active", name, img, err)
			}
		})
	}
	t.Run("external network public", func(t *testing.T) {
		c := c.on(t)
		var n struct {
			networks.Network
			external.NetworkExternalExt
		}
		if err := networks.Get(c.ctx, c.Clients.Network, c.public()).ExtractInto(&n); err != nil || !n.External {
			t.Errorf("public: %+v %v, want router:external", n, err)
		}
	})
	t.Run("finite quotas", func(t *testing.T) {
		c := c.on(t)
		q, err := quotasets.Get(c.ctx, c.Clients.Compute, c.project()).Extract()
		if err != nil || q.Instances <= 0 || q.Cores <= 0 || q.ServerGroups <= 0 {
			t.Errorf("compute quotas: %+v %v, want finite limits", q, err)
		}
		nq, err := quotas.Get(c.ctx, c.Admin.Network, c.project()).Extract()
		if err != nil || nq.Network <= 0 || nq.SecurityGroup <= 0 || nq.FloatingIP <= 0 {
			t.Errorf("network quotas: %+v %v, want finite limits", nq, err)
		}
	})
}

// TestContractFlavorExtraSpecs: a flavor's extra specs (os-extra_specs)
// as Nova's API reference has them: an admin sets, replaces and deletes
// them, a member reads them and may not write them. The key is OPKE's own
// namespace, which Nova's scheduler filters ignore.
func TestContractFlavorExtraSpecs(t *testing.T) {
	t.Parallel()
	c := contract(t)
	fl := c.flavor("m1.medium")
	key := "opke:" + c.name("contract")
	admin, member := c.Admin.Compute, c.Clients.Compute
	c.cleanup("extra spec", func() error {
		err := flavors.DeleteExtraSpec(c.ctx, admin, fl, key).ExtractErr()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return nil
		}
		return err
	})
	if _, err := flavors.CreateExtraSpecs(c.ctx, member, fl, flavors.ExtraSpecsOpts{key: "a"}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Errorf("a member's create: %v, want 403", err)
	}
	got, err := flavors.CreateExtraSpecs(c.ctx, admin, fl, flavors.ExtraSpecsOpts{key: "a"}).Extract()
	if err != nil || got[key] != "a" {
		t.Fatalf("an admin's create: %v, %v", got, err)
	}
	if all, err := flavors.ListExtraSpecs(c.ctx, member, fl).Extract(); err != nil || all[key] != "a" {
		t.Errorf("a member's list: %v, %v; want %s=a", all, err, key)
	}
	if _, err := flavors.UpdateExtraSpec(c.ctx, admin, fl, flavors.ExtraSpecsOpts{key: "b"}).Extract(); err != nil {
		t.Errorf("an admin's update: %v", err)
	}
	if one, err := flavors.GetExtraSpec(c.ctx, member, fl, key).Extract(); err != nil || one[key] != "b" {
		t.Errorf("get after update: %v, %v; want %s=b", one, err, key)
	}
	// A body that names another key than the URL is refused.
	_, err = admin.Put(c.ctx, admin.ServiceURL("flavors", fl, "os-extra_specs", key), map[string]string{key + "-other": "c"}, nil, &gophercloud.RequestOpts{OkCodes: []int{200}})
	if !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("update with a body of another key: %v, want 400", err)
	}
	if err := flavors.DeleteExtraSpec(c.ctx, admin, fl, key).ExtractErr(); err != nil {
		t.Errorf("an admin's delete: %v", err)
	}
	if _, err := flavors.GetExtraSpec(c.ctx, member, fl, key).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("get after delete: %v, want 404", err)
	}
	if err := flavors.DeleteExtraSpec(c.ctx, admin, fl, key).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("delete a missing key: %v, want 404", err)
	}
}

// TestContractNovaServers: a server's life as OPKE sees it.
func TestContractNovaServers(t *testing.T) {
	t.Parallel()
	c := contract(t)
	cc := c.Clients.Compute
	n := c.network("srv", "192.168.40.0/24", true)

	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG ops@example"
	kp, err := keypairs.Create(c.ctx, cc, keypairs.CreateOpts{Name: c.name("ops"), PublicKey: key}).Extract()
	c.must(err, "import keypair")
	c.cleanup("keypair", func() error { return keypairs.Delete(c.ctx, cc, kp.Name, nil).ExtractErr() })
	t.Run("keypair", func(t *testing.T) {
		if got, err := keypairs.Get(c.ctx, cc, kp.Name, nil).Extract(); err != nil || got.PublicKey != key || kp.Fingerprint == "" {
			t.Errorf("get keypair: %+v %v", got, err)
		}
		if _, err := keypairs.Create(c.ctx, cc, keypairs.CreateOpts{Name: kp.Name, PublicKey: key}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("import the same name twice: %v, want 409", err)
		}
		if _, err := keypairs.Get(c.ctx, cc, c.name("nobody"), nil).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("get a missing keypair: %v, want 404", err)
		}
	})

	userData := []byte(`{"ignition":{"version":"3.3.0"}}`)
	name := c.name("srv-worker-0")
	sv := c.server(keypairs.CreateOptsExt{KeyName: kp.Name, CreateOptsBuilder: servers.CreateOpts{
		Name: name, FlavorRef: c.flavor("m1.small"), ImageRef: c.image("flatcar"),
		Networks: []servers.Network{{UUID: n.network}}, UserData: userData, Metadata: map[string]string{"role": "worker"},
		Tags: c.tags("srv")}}, nil)
	t.Run("BUILD then ACTIVE", func(t *testing.T) {
		c := c.on(t)
		got := c.settled(sv.ID)
		if got.Status != "ACTIVE" || got.Metadata["role"] != "worker" || got.KeyName != kp.Name {
			t.Errorf("status %s, metadata %v, key %q", got.Status, got.Metadata, got.KeyName)
		}
		addrs, _ := got.Addresses[c.name("srv")].([]any)
		if len(addrs) != 1 || !strings.HasPrefix(fmt.Sprint(addrs[0].(map[string]any)["addr"]), "192.168.40.") {
			t.Errorf("addresses: %v, want one in the subnet's pool", got.Addresses)
		}
	})
	t.Run("user_data for admins only", func(t *testing.T) {
		var withUD struct {
			UserData *string `json:"OS-EXT-SRV-ATTR:user_data"`
		}
		admin := *c.Admin.Compute
		admin.Microversion = "2.3"
		if err := servers.Get(c.ctx, &admin, sv.ID).ExtractInto(&withUD); err != nil || withUD.UserData == nil ||
			*withUD.UserData != base64.StdEncoding.EncodeToString(userData) {
			t.Errorf("admin user_data: %v %v", withUD.UserData, err)
		}
		member := *cc
		member.Microversion = "2.3"
		withUD.UserData = nil
		if err := servers.Get(c.ctx, &member, sv.ID).ExtractInto(&withUD); err != nil || withUD.UserData != nil {
			t.Errorf("a member sees user_data: %v %v", withUD.UserData, err)
		}
	})
	listNames := func(t *testing.T, opts servers.ListOpts) []string {
		pages, err := servers.List(cc, opts).AllPages(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := servers.ExtractServers(pages)
		var names []string
		for _, s := range l {
			names = append(names, s.Name)
		}
		return names
	}
	for _, tt := range []struct {
		name string
		opts servers.ListOpts
		want []string
	}{
		{"tags filter", servers.ListOpts{Tags: cloud.Tag("opke-owner", c.Owner)}, []string{name}},
		{"two tags", servers.ListOpts{Tags: strings.Join(c.tags("srv"), ",")}, []string{name}},
		{"tags of another cluster", servers.ListOpts{Tags: cloud.Tag("opke-owner", c.Owner) + ",opke-cluster=other"}, nil},
		{"tags-any", servers.ListOpts{TagsAny: cloud.Tag("opke-owner", c.Owner) + ",nothing"}, []string{name}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := listNames(t, tt.opts); !slices.Equal(got, tt.want) {
				t.Errorf("servers %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("tags API", func(t *testing.T) {
		if err := tags.Add(c.ctx, cc, sv.ID, "drain").ExtractErr(); err != nil {
			t.Fatal(err)
		}
		tl, err := tags.List(c.ctx, cc, sv.ID).Extract()
		slices.Sort(tl)
		want := append(c.tags("srv"), "drain")
		slices.Sort(want)
		if !slices.Equal(tl, want) || err != nil {
			t.Errorf("tags %v %v, want %v", tl, err, want)
		}
		old := *cc
		old.Microversion = "2.25"
		if _, err := tags.List(c.ctx, &old, sv.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("tags before microversion 2.26: %v, want 404", err)
		}
	})
	t.Run("rename and description", func(t *testing.T) {
		v219 := *cc
		v219.Microversion = "2.19"
		var got struct {
			Name        string  `json:"name"`
			Description *string `json:"description"`
		}
		err := servers.Update(c.ctx, &v219, sv.ID, serverUpdate{"name": name + "-x", "description": "renamed"}).ExtractInto(&got)
		if err != nil || got.Name != name+"-x" || got.Description == nil || *got.Description != "renamed" {
			t.Errorf("rename: %+v %v", got, err)
		}
		v218 := *cc
		v218.Microversion = "2.18"
		if err := servers.Update(c.ctx, &v218, sv.ID, serverUpdate{"description": "too early"}).Err; !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("a description before microversion 2.19: %v, want 400", err)
		}
		if got, err := servers.Update(c.ctx, cc, sv.ID, servers.UpdateOpts{Name: name}).Extract(); err != nil || got.Name != name {
			t.Errorf("rename back: %+v %v", got, err)
		}
	})
	t.Run("metadata API", func(t *testing.T) {
		md, err := servers.UpdateMetadata(c.ctx, cc, sv.ID, servers.MetadataOpts{"tier": "gold"}).Extract()
		if err != nil || md["role"] != "worker" || md["tier"] != "gold" {
			t.Errorf("merge: %v %v", md, err)
		}
		if m, err := servers.CreateMetadatum(c.ctx, cc, sv.ID, servers.MetadatumOpts{"zone": "a"}).Extract(); err != nil || m["zone"] != "a" {
			t.Errorf("set one item: %v %v", m, err)
		}
		if m, err := servers.Metadatum(c.ctx, cc, sv.ID, "zone").Extract(); err != nil || m["zone"] != "a" {
			t.Errorf("get one item: %v %v", m, err)
		}
		if err := servers.DeleteMetadatum(c.ctx, cc, sv.ID, "zone").ExtractErr(); err != nil {
			t.Errorf("delete one item: %v", err)
		}
		if _, err := servers.Metadatum(c.ctx, cc, sv.ID, "zone").Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("a deleted item: %v, want 404", err)
		}
		md, err = servers.ResetMetadata(c.ctx, cc, sv.ID, servers.MetadataOpts{"role": "worker"}).Extract()
		if err != nil || len(md) != 1 || md["role"] != "worker" {
			t.Errorf("replace: %v %v", md, err)
		}
		if md, err := servers.Metadata(c.ctx, cc, sv.ID).Extract(); err != nil || len(md) != 1 || md["role"] != "worker" {
			t.Errorf("list: %v %v", md, err)
		}
	})
	t.Run("console output", func(t *testing.T) {
		// What a console holds is the host's (LIMITS.md): only the call.
		if _, err := servers.ShowConsoleOutput(c.ctx, cc, sv.ID, servers.ShowConsoleOutputOpts{Length: 5}).Extract(); err != nil {
			t.Errorf("console output: %v", err)
		}
	})
	t.Run("stop and start: SHUTOFF, a second stop a conflict, ACTIVE again", func(t *testing.T) {
		c := c.on(t)
		statusIs := func(want string) func() (bool, string) {
			return func() (bool, string) {
				got, err := servers.Get(c.ctx, cc, sv.ID).Extract()
				if err != nil {
					return false, err.Error()
				}
				return got.Status == want, got.Status
			}
		}
		c.must(servers.Stop(c.ctx, cc, sv.ID).ExtractErr(), "stop")
		c.eventually("SHUTOFF", 2*time.Minute, statusIs("SHUTOFF"))
		if err := servers.Stop(c.ctx, cc, sv.ID).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("a stop of a stopped server: %v, want 409", err)
		}
		c.must(servers.Start(c.ctx, cc, sv.ID).ExtractErr(), "start")
		c.eventually("ACTIVE again", 2*time.Minute, statusIs("ACTIVE"))
	})
	t.Run("reset-state: an admin's, Nova's record only; a member's refused", func(t *testing.T) {
		err := servers.ResetState(c.ctx, cc, sv.ID, servers.StateError).ExtractErr()
		if !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
			t.Errorf("a member's reset-state: %v, want 403", err)
		}
		for _, st := range []struct {
			state servers.ServerState
			want  string
		}{{servers.StateError, "ERROR"}, {servers.StateActive, "ACTIVE"}} {
			if err := servers.ResetState(c.ctx, c.Admin.Compute, sv.ID, st.state).ExtractErr(); err != nil {
				t.Fatalf("reset-state %s: %v", st.state, err)
			}
			got, err := servers.Get(c.ctx, cc, sv.ID).Extract()
			if err != nil || got.Status != st.want {
				t.Errorf("after reset-state %s: status %v (%v), want %s", st.state, got.Status, err, st.want)
			}
		}
	})
	for _, tt := range []struct {
		name, header string
		want         int
	}{
		{"microversion default", "", 200}, {"microversion latest", "latest", 200}, {"microversion 2.93", "2.93", 200},
		{"microversion too new", "2.999", 406}, {"microversion malformed", "two", 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(c.ctx, http.MethodGet, cc.Endpoint+"flavors", nil)
			req.Header.Set("X-Auth-Token", c.Clients.Provider.Token())
			if tt.header != "" {
				req.Header.Set("X-OpenStack-Nova-API-Version", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
			if tt.want == 200 && resp.Header.Get("X-OpenStack-Nova-API-Version") == "" {
				t.Errorf("no X-OpenStack-Nova-API-Version header in the response")
			}
		})
	}
	t.Run("delete", func(t *testing.T) {
		c := c.on(t)
		c.must(servers.Delete(c.ctx, cc, sv.ID).ExtractErr(), "delete server")
		c.must(gone("the deleted server", func() error { _, err := servers.Get(c.ctx, cc, sv.ID).Extract(); return err }), "delete server")
		c.eventually("the port Nova made goes with it", time.Minute, func() (bool, string) {
			pages, err := ports.List(c.Clients.Network, ports.ListOpts{DeviceID: sv.ID}).AllPages(c.ctx)
			l, _ := ports.ExtractPorts(pages)
			return err == nil && len(l) == 0, fmt.Sprintf("%d ports (%v)", len(l), err)
		})
	})
}

// TestContractAntiAffinity: three members of an anti-affinity group land
// on three hosts; a fourth, on a cloud of three, goes to ERROR.
func TestContractAntiAffinity(t *testing.T) {
	t.Parallel()
	c := contract(t)
	sc := *c.Clients.Compute
	sc.Microversion = "2.64"
	n := c.network("aa", "192.168.41.0/24", false)
	g, err := servergroups.Create(c.ctx, &sc, servergroups.CreateOpts{Name: c.name("aa-controllers"), Policy: "anti-affinity"}).Extract()
	c.must(err, "create server group")
	c.cleanup("server group", func() error { return servergroups.Delete(c.ctx, &sc, g.ID).ExtractErr() })
	if g.Policy == nil || *g.Policy != "anti-affinity" {
		t.Errorf("group policy: %v", g.Policy)
	}
	var ids []string
	for i := range 4 {
		sv := c.server(servers.CreateOpts{Name: c.name(fmt.Sprintf("aa-controller-%d", i)), FlavorRef: c.flavor("m1.small"),
			ImageRef: c.image("flatcar"), Networks: []servers.Network{{UUID: n.network}}, Tags: c.tags("aa")},
			servers.SchedulerHintOpts{Group: g.ID})
		ids = append(ids, sv.ID)
		// One at a time: the scheduler sees the previous placements.
		c.settled(sv.ID)
	}
	hosts := map[string]bool{}
	for i, id := range ids[:3] {
		got := c.settled(id)
		if got.Status != "ACTIVE" || got.HypervisorHostname == "" || hosts[got.HypervisorHostname] {
			t.Errorf("member %d: %s on %q, hosts so far %v", i, got.Status, got.HypervisorHostname, hosts)
		}
		hosts[got.HypervisorHostname] = true
	}
	t.Run("a fourth member has no valid host", func(t *testing.T) {
		c := c.on(t)
		got := c.settled(ids[3])
		if got.Status != "ERROR" || !strings.Contains(got.Fault.Message, "No valid host") {
			t.Errorf("status %s, fault %q; want ERROR, no valid host", got.Status, got.Fault.Message)
		}
	})
	t.Run("members", func(t *testing.T) {
		got, err := servergroups.Get(c.ctx, &sc, g.ID).Extract()
		if err != nil || len(got.Members) < 3 {
			t.Errorf("members %v %v, want the three placed", got.Members, err)
		}
	})
}

// TestContractServerGroupPages: Nova's server groups come in slices of
// limit from offset, with no links to a next page (so a client pages by
// offset until a page is empty), and a negative offset is a 400.
func TestContractServerGroupPages(t *testing.T) {
	t.Parallel()
	c := contract(t)
	sc := *c.Clients.Compute
	sc.Microversion = "2.64"
	var want []string
	for i := range 3 {
		g, err := servergroups.Create(c.ctx, &sc, servergroups.CreateOpts{Name: c.name(fmt.Sprintf("sgp-%d", i)), Policy: "anti-affinity"}).Extract()
		c.must(err, "create server group")
		c.cleanup("server group", func() error { return servergroups.Delete(c.ctx, &sc, g.ID).ExtractErr() })
		want = append(want, g.ID)
	}
	seen := map[string]int{}
	for offset := 0; ; offset += 2 {
		var page map[string]json.RawMessage
		if _, err := sc.Get(c.ctx, sc.ServiceURL("os-server-groups")+fmt.Sprintf("?limit=2&offset=%d", offset), &page, nil); err != nil {
			t.Fatalf("offset %d: %v", offset, err)
		}
		if _, ok := page["server_groups_links"]; ok {
			t.Errorf("offset %d: the page has links", offset)
		}
		var groups []struct{ ID string }
		if err := json.Unmarshal(page["server_groups"], &groups); err != nil {
			t.Fatal(err)
		}
		if len(groups) > 2 {
			t.Fatalf("offset %d: %d groups, limit 2", offset, len(groups))
		}
		if len(groups) == 0 {
			break
		}
		for _, g := range groups {
			seen[g.ID]++
		}
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("server group %s listed %d times paging by offset", id, seen[id])
		}
	}
	_, err := sc.Get(c.ctx, sc.ServiceURL("os-server-groups")+"?offset=-1", nil, nil)
	if !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("offset -1: %v, want 400", err)
	}
}

// TestContractQuotas: over a quota, Nova says 403, Neutron 409 and
// Octavia 403, naming the resource. Not parallel: it lowers the
// project's quotas.
func TestContractQuotas(t *testing.T) {
	c := contract(t)
	project := c.project()
	t.Run("nova instances", func(t *testing.T) {
		c := c.on(t)
		q, err := quotasets.Get(c.ctx, c.Admin.Compute, project).Extract()
		c.must(err, "get quotas")
		c.t.Cleanup(func() {
			quotasets.Update(c.ctx, c.Admin.Compute, project, quotasets.UpdateOpts{Instances: gophercloud.IntToPointer(q.Instances)})
		})
		pages, err := servers.List(c.Clients.Compute, nil).AllPages(c.ctx)
		c.must(err, "list servers")
		l, _ := servers.ExtractServers(pages)
		_, err = quotasets.Update(c.ctx, c.Admin.Compute, project, quotasets.UpdateOpts{Instances: gophercloud.IntToPointer(len(l))}).Extract()
		c.must(err, "set quota")
		n := c.network("quota", "192.168.42.0/24", false)
		_, err = servers.Create(c.ctx, c.Clients.Compute, servers.CreateOpts{Name: c.name("one-too-many"), FlavorRef: c.flavor("m1.small"),
			ImageRef: c.image("flatcar"), Networks: []servers.Network{{UUID: n.network}}}, nil).Extract()
		if !gophercloud.ResponseCodeIs(err, http.StatusForbidden) || !strings.Contains(err.Error(), "Quota exceeded for instances") {
			t.Errorf("over quota: %v, want 403 quota exceeded for instances", err)
		}
	})
	t.Run("neutron security groups", func(t *testing.T) {
		c := c.on(t)
		q, err := quotas.Get(c.ctx, c.Admin.Network, project).Extract()
		c.must(err, "get quotas")
		c.t.Cleanup(func() {
			quotas.Update(c.ctx, c.Admin.Network, project, quotas.UpdateOpts{SecurityGroup: gophercloud.IntToPointer(q.SecurityGroup)})
		})
		// The default group counts: make sure it exists, then count.
		pages, err := groups.List(c.Clients.Network, groups.ListOpts{}).AllPages(c.ctx)
		c.must(err, "list groups")
		l, _ := groups.ExtractGroups(pages)
		_, err = quotas.Update(c.ctx, c.Admin.Network, project, quotas.UpdateOpts{SecurityGroup: gophercloud.IntToPointer(len(l) + 1)}).Extract()
		c.must(err, "set quota")
		sg, err := groups.Create(c.ctx, c.Clients.Network, groups.CreateOpts{Name: c.name("last")}).Extract()
		c.must(err, "create the last group the quota allows")
		c.cleanup("group", func() error { return groups.Delete(c.ctx, c.Clients.Network, sg.ID).ExtractErr() })
		_, err = groups.Create(c.ctx, c.Clients.Network, groups.CreateOpts{Name: c.name("one-too-many")}).Extract()
		if !gophercloud.ResponseCodeIs(err, http.StatusConflict) || !strings.Contains(err.Error(), "Quota exceeded for resources: ['security_group']") {
			t.Errorf("over quota: %v, want 409 quota exceeded for security_group", err)
		}
	})
	t.Run("octavia load balancers", func(t *testing.T) {
		c := c.on(t)
		q, err := lbquotas.Get(c.ctx, c.Admin.LoadBalancer, project).Extract()
		c.must(err, "get quotas")
		c.t.Cleanup(func() {
			lbquotas.Update(c.ctx, c.Admin.LoadBalancer, project, lbquotas.UpdateOpts{Loadbalancer: gophercloud.IntToPointer(q.Loadbalancer)})
		})
		_, err = lbquotas.Update(c.ctx, c.Admin.LoadBalancer, project, lbquotas.UpdateOpts{Loadbalancer: gophercloud.IntToPointer(0)}).Extract()
		c.must(err, "set quota")
		n := c.network("lbquota", "192.168.43.0/24", false)
		_, err = loadbalancers.Create(c.ctx, c.Clients.LoadBalancer, loadbalancers.CreateOpts{Name: c.name("one-too-many"), VipSubnetID: n.subnet}).Extract()
		if !gophercloud.ResponseCodeIs(err, http.StatusForbidden) || !strings.Contains(err.Error(), "Quota has been met") {
			t.Errorf("over quota: %v, want 403 quota has been met", err)
		}
		// The current name, which the openstack CLI sends (gophercloud
		// sends the deprecated loadbalancer).
		body := map[string]any{"quota": map[string]any{"load_balancer": 7}}
		_, err = c.Admin.LoadBalancer.Put(c.ctx, c.Admin.LoadBalancer.ServiceURL("quotas", project), body, nil,
			&gophercloud.RequestOpts{OkCodes: []int{200, 202}})
		c.must(err, "set the quota by its current name")
		if got, err := lbquotas.Get(c.ctx, c.Admin.LoadBalancer, project).Extract(); err != nil || got.Loadbalancer != 7 {
			t.Errorf("quota set as load_balancer: %+v %v, want 7", got, err)
		}
	})
}

// TestContractNeutron: networks, subnets, ports, routers, security groups
// and floating IPs, with the conflicts OPKE meets while deleting.
func TestContractNeutron(t *testing.T) {
	t.Parallel()
	c := contract(t)
	nc := c.Clients.Network
	n := c.network("nt", "192.168.44.0/24", true)

	t.Run("router gateway", func(t *testing.T) {
		c := c.on(t)
		rt, err := routers.Get(c.ctx, nc, n.router).Extract()
		if err != nil || rt.GatewayInfo.NetworkID != c.public() || len(rt.GatewayInfo.ExternalFixedIPs) != 1 {
			t.Errorf("router gateway: %+v %v", rt.GatewayInfo, err)
		}
	})
	p, err := ports.Create(c.ctx, nc, ports.CreateOpts{NetworkID: n.network, Name: c.name("nt-controller-0"),
		FixedIPs: []ports.IP{{SubnetID: n.subnet, IPAddress: "192.168.44.10"}}}).Extract()
	c.must(err, "port with a fixed IP")
	c.cleanup("port", func() error { return ports.Delete(c.ctx, nc, p.ID).ExtractErr() })
	t.Run("fixed IP", func(t *testing.T) {
		if len(p.FixedIPs) != 1 || p.FixedIPs[0].IPAddress != "192.168.44.10" {
			t.Errorf("fixed IPs %+v", p.FixedIPs)
		}
		_, err := ports.Create(c.ctx, nc, ports.CreateOpts{NetworkID: n.network, FixedIPs: []ports.IP{{SubnetID: n.subnet, IPAddress: "192.168.44.10"}}}).Extract()
		if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("the same fixed IP twice: %v, want 409", err)
		}
	})
	sg, err := groups.Create(c.ctx, nc, groups.CreateOpts{Name: c.name("nt-gateway")}).Extract()
	c.must(err, "security group")
	c.cleanup("security group", func() error { return groups.Delete(c.ctx, nc, sg.ID).ExtractErr() })
	t.Run("security group rules", func(t *testing.T) {
		if len(sg.Rules) != 2 {
			t.Errorf("rules of a new group: %d, want the two default egress rules", len(sg.Rules))
		}
		ssh := rules.CreateOpts{SecGroupID: sg.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4, Protocol: rules.ProtocolTCP,
			PortRangeMin: 22, PortRangeMax: 22, RemoteIPPrefix: "0.0.0.0/0"}
		if _, err := rules.Create(c.ctx, nc, ssh).Extract(); err != nil {
			t.Fatalf("create rule: %v", err)
		}
		if _, err := rules.Create(c.ctx, nc, ssh).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("duplicate rule: %v, want 409", err)
		}
	})
	t.Run("security group in use", func(t *testing.T) {
		if _, err := ports.Update(c.ctx, nc, p.ID, ports.UpdateOpts{SecurityGroups: &[]string{sg.ID}}).Extract(); err != nil {
			t.Fatal(err)
		}
		if err := groups.Delete(c.ctx, nc, sg.ID).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("delete a group a port uses: %v, want 409", err)
		}
		if _, err := ports.Update(c.ctx, nc, p.ID, ports.UpdateOpts{SecurityGroups: &[]string{}}).Extract(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("floating IP", func(t *testing.T) {
		c := c.on(t)
		fip, err := floatingips.Create(c.ctx, nc, floatingips.CreateOpts{FloatingNetworkID: c.public(), PortID: p.ID}).Extract()
		if err != nil {
			t.Fatalf("floating IP: %v", err)
		}
		c.cleanup("floating IP", func() error { return floatingips.Delete(c.ctx, nc, fip.ID).ExtractErr() })
		if fip.FixedIP != "192.168.44.10" || !strings.HasPrefix(fip.FloatingIP, "203.0.113.") {
			t.Errorf("floating IP %s -> %s, want 203.0.113.x -> 192.168.44.10", fip.FloatingIP, fip.FixedIP)
		}
		if _, err := attributestags.ReplaceAll(c.ctx, nc, "floatingips", fip.ID, attributestags.ReplaceAllOpts{Tags: c.tags("nt")}).Extract(); err != nil {
			t.Errorf("tag a floating IP: %v", err)
		}
		pages, err := floatingips.List(nc, floatingips.ListOpts{Tags: cloud.Tag("opke-owner", c.Owner)}).AllPages(c.ctx)
		l, _ := floatingips.ExtractFloatingIPs(pages)
		if err != nil || len(l) != 1 || l[0].ID != fip.ID {
			t.Errorf("floating IPs by tag: %+v %v", l, err)
		}
		desc := "updated"
		if got, err := floatingips.Update(c.ctx, nc, fip.ID, floatingips.UpdateOpts{Description: &desc}).Extract(); err != nil || got.Description != desc {
			t.Errorf("a floating IP's description: %+v %v", got, err)
		}
	})
	// Every field an update sets is kept (a client's next plan would show
	// the same change forever otherwise).
	t.Run("updates", func(t *testing.T) {
		desc := "updated"
		var got struct {
			networks.Network
			mtu.NetworkMTUExt
		}
		err := networks.Update(c.ctx, nc, n.network, mtu.UpdateOptsExt{UpdateOptsBuilder: networks.UpdateOpts{Description: &desc}, MTU: 1400}).ExtractInto(&got)
		if err != nil || got.Description != desc || got.MTU != 1400 {
			t.Errorf("a network's description and mtu: %+v %v", got, err)
		}
		if got, err := groups.Update(c.ctx, nc, sg.ID, groups.UpdateOpts{Description: &desc}).Extract(); err != nil || got.Description != desc {
			t.Errorf("a security group's description: %+v %v", got, err)
		}
		if got, err := ports.Update(c.ctx, nc, p.ID, ports.UpdateOpts{Description: &desc}).Extract(); err != nil || got.Description != desc {
			t.Errorf("a port's description: %+v %v", got, err)
		}
		if got, err := routers.Update(c.ctx, nc, n.router, routers.UpdateOpts{Description: &desc}).Extract(); err != nil || got.Description != desc {
			t.Errorf("a router's description: %+v %v", got, err)
		}
		routes := []routers.Route{{DestinationCIDR: "10.20.0.0/16", NextHop: "192.168.44.10"}}
		if got, err := routers.Update(c.ctx, nc, n.router, routers.UpdateOpts{Routes: &routes}).Extract(); err != nil || len(got.Routes) != 1 || got.Routes[0].NextHop != "192.168.44.10" {
			t.Errorf("a router's routes: %+v %v", got, err)
		}
		far := []routers.Route{{DestinationCIDR: "10.21.0.0/16", NextHop: "10.99.99.1"}}
		if _, err := routers.Update(c.ctx, nc, n.router, routers.UpdateOpts{Routes: &far}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("a route whose nexthop the router does not reach: %v, want 400", err)
		}
		none := []routers.Route{}
		if _, err := routers.Update(c.ctx, nc, n.router, routers.UpdateOpts{Routes: &none}).Extract(); err != nil {
			t.Errorf("clear the routes: %v", err)
		}
	})
	t.Run("floating IP without a route", func(t *testing.T) {
		c := c.on(t)
		iso := c.network("nt-isolated", "10.9.0.0/24", false)
		ip, err := ports.Create(c.ctx, nc, ports.CreateOpts{NetworkID: iso.network, FixedIPs: []ports.IP{{SubnetID: iso.subnet}}}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		c.cleanup("port", func() error { return ports.Delete(c.ctx, nc, ip.ID).ExtractErr() })
		_, err = floatingips.Create(c.ctx, nc, floatingips.CreateOpts{FloatingNetworkID: c.public(), PortID: ip.ID}).Extract()
		if !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("floating IP without a route: %v, want 404", err)
		}
	})
	t.Run("in use", func(t *testing.T) {
		if err := routers.Delete(c.ctx, nc, n.router).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("delete a router with interfaces: %v, want 409", err)
		}
		if err := networks.Delete(c.ctx, nc, n.network).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("delete a network with ports: %v, want 409", err)
		}
		if err := subnets.Delete(c.ctx, nc, n.subnet).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("delete a subnet with ports: %v, want 409", err)
		}
	})
	t.Run("update in place", func(t *testing.T) {
		c := c.on(t)
		ns := []string{"192.0.2.53"}
		before, err := subnets.Get(c.ctx, nc, n.subnet).Extract()
		c.must(err, "get subnet")
		sn, err := subnets.Update(c.ctx, nc, n.subnet, subnets.UpdateOpts{DNSNameservers: &ns}).Extract()
		if err != nil || !slices.Equal(sn.DNSNameservers, ns) || sn.RevisionNumber <= before.RevisionNumber {
			t.Errorf("update dns_nameservers: %+v %v (revision before %d)", sn, err, before.RevisionNumber)
		}
	})
}

// TestContractTagsAndPagination: the tag filters and pages Observe uses.
func TestContractTagsAndPagination(t *testing.T) {
	t.Parallel()
	c := contract(t)
	nc := c.Clients.Network
	for i := range 7 {
		cluster := "a"
		if i%2 == 1 {
			cluster = "b"
		}
		sg, err := groups.Create(c.ctx, nc, groups.CreateOpts{Name: c.name(fmt.Sprintf("tp-%d", i))}).Extract()
		c.must(err, "create group")
		c.cleanup("group", func() error { return groups.Delete(c.ctx, nc, sg.ID).ExtractErr() })
		_, err = attributestags.ReplaceAll(c.ctx, nc, "security-groups", sg.ID, attributestags.ReplaceAllOpts{Tags: c.tags(c.name(cluster))}).Extract()
		c.must(err, "tag group")
	}
	owner := cloud.Tag("opke-owner", c.Owner)
	a, b := cloud.Tag("opke-cluster", c.name("a")), cloud.Tag("opke-cluster", c.name("b"))
	for _, tt := range []struct {
		name             string
		opts             groups.ListOpts
		items, wantPages int
	}{
		{"tags", groups.ListOpts{Tags: a}, 4, 1},
		{"tags of two", groups.ListOpts{Tags: owner + "," + b}, 3, 1},
		{"tags-any", groups.ListOpts{TagsAny: a + "," + b}, 7, 1},
		{"not-tags", groups.ListOpts{Tags: owner, NotTags: a}, 3, 1},
		{"not-tags-any", groups.ListOpts{Tags: owner, NotTagsAny: a + "," + b}, 0, 0},
		{"pages of 3", groups.ListOpts{Tags: owner, Limit: 3}, 7, 3},
		{"a full last page", groups.ListOpts{Tags: b, Limit: 3}, 3, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			items, pages := 0, 0
			err := groups.List(nc, tt.opts).EachPage(c.ctx, func(_ context.Context, p pagination.Page) (bool, error) {
				l, err := groups.ExtractGroups(p)
				if len(l) > 0 {
					pages++
				}
				items += len(l)
				return true, err
			})
			if err != nil || items != tt.items || pages != tt.wantPages {
				t.Errorf("%d items in %d pages (%v), want %d in %d", items, pages, err, tt.items, tt.wantPages)
			}
		})
	}
	t.Run("add and confirm a tag", func(t *testing.T) {
		pages, err := groups.List(nc, groups.ListOpts{Tags: a}).AllPages(c.ctx)
		l, _ := groups.ExtractGroups(pages)
		if err != nil || len(l) == 0 {
			t.Fatalf("groups of a: %v", err)
		}
		if err := attributestags.Add(c.ctx, nc, "security-groups", l[0].ID, "extra").ExtractErr(); err != nil {
			t.Fatal(err)
		}
		if ok, err := attributestags.Confirm(c.ctx, nc, "security-groups", l[0].ID, "extra").Extract(); !ok || err != nil {
			t.Errorf("confirm tag: %v %v", ok, err)
		}
	})
}

// TestContractOctavia: a load balancer's provisioning states, its
// children, tags, and the cascade delete that takes its VIP port.
func TestContractOctavia(t *testing.T) {
	t.Parallel()
	c := contract(t)
	lc := c.Clients.LoadBalancer
	n := c.network("lb", "192.168.45.0/24", true)
	lb, err := loadbalancers.Create(c.ctx, lc, loadbalancers.CreateOpts{Name: c.name("lb-api"), VipSubnetID: n.subnet, Tags: c.tags("lb")}).Extract()
	c.must(err, "create load balancer")
	c.cleanup("load balancer", func() error {
		if err := loadbalancers.Delete(c.ctx, lc, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
			return err
		}
		return gone("load balancer "+lb.ID, func() error { _, err := loadbalancers.Get(c.ctx, lc, lb.ID).Extract(); return err })
	})
	active := func(what string) *loadbalancers.LoadBalancer {
		t.Helper()
		got, err := cloudtest.WaitLB(c.ctx, lc, lb.ID)
		c.must(err, what)
		return got
	}
	t.Run("PENDING_CREATE then ACTIVE", func(t *testing.T) {
		if lb.ProvisioningStatus != "PENDING_CREATE" {
			t.Errorf("provisioning status at create: %s, want PENDING_CREATE", lb.ProvisioningStatus)
		}
		got := active("create")
		if !strings.HasPrefix(got.VipAddress, "192.168.45.") || got.VipPortID == "" {
			t.Errorf("VIP %s on port %q, want an address of the subnet on a port", got.VipAddress, got.VipPortID)
		}
		if _, err := ports.Get(c.ctx, c.Clients.Network, got.VipPortID).Extract(); err != nil {
			t.Errorf("the VIP port: %v", err)
		}
	})
	lb = active("create")
	t.Run("tags filter", func(t *testing.T) {
		pages, err := loadbalancers.List(lc, loadbalancers.ListOpts{Tags: c.tags("lb")}).AllPages(c.ctx)
		l, _ := loadbalancers.ExtractLoadBalancers(pages)
		if err != nil || len(l) != 1 || l[0].ID != lb.ID {
			t.Errorf("load balancers by tags: %d %v", len(l), err)
		}
	})
	var poolID, listenerID string
	t.Run("children", func(t *testing.T) {
		ls, err := listeners.Create(c.ctx, lc, listeners.CreateOpts{Name: c.name("lb-api-6443"), LoadbalancerID: lb.ID,
			Protocol: listeners.ProtocolTCP, ProtocolPort: 6443, Tags: c.tags("lb")}).Extract()
		if err != nil {
			t.Fatalf("listener: %v", err)
		}
		// Octavia's default idle timeouts, which cut a Kubernetes API's
		// watches and kubectl logs -f after 50 s of silence.
		if ls.TimeoutClientData != 50000 || ls.TimeoutMemberData != 50000 || ls.TimeoutMemberConnect != 5000 {
			t.Errorf("a new listener's timeouts: client data %d, member data %d, member connect %d; want 50000, 50000, 5000",
				ls.TimeoutClientData, ls.TimeoutMemberData, ls.TimeoutMemberConnect)
		}
		if got, _ := loadbalancers.Get(c.ctx, lc, lb.ID).Extract(); got != nil && got.ProvisioningStatus != "PENDING_UPDATE" && got.ProvisioningStatus != "ACTIVE" {
			t.Errorf("after a listener create: %s", got.ProvisioningStatus)
		}
		active("listener")
		p, err := pools.Create(c.ctx, lc, pools.CreateOpts{Name: c.name("lb-api"), ListenerID: ls.ID, Protocol: pools.ProtocolTCP,
			LBMethod: pools.LBMethodRoundRobin, Tags: c.tags("lb")}).Extract()
		if err != nil {
			t.Fatalf("pool: %v", err)
		}
		poolID, listenerID = p.ID, ls.ID
		active("pool")
		if _, err := pools.CreateMember(c.ctx, lc, p.ID, pools.CreateMemberOpts{Name: c.name("lb-controller-0"), Address: "192.168.45.10",
			ProtocolPort: 6443, SubnetID: n.subnet, Tags: c.tags("lb")}).Extract(); err != nil {
			t.Fatalf("member: %v", err)
		}
		active("member")
		if _, err := monitors.Create(c.ctx, lc, monitors.CreateOpts{Name: c.name("lb-api"), PoolID: p.ID, Type: monitors.TypeTCP,
			Delay: 5, Timeout: 3, MaxRetries: 3}).Extract(); err != nil {
			t.Fatalf("monitor: %v", err)
		}
		active("monitor")
	})
	t.Run("updates", func(t *testing.T) {
		if poolID == "" || listenerID == "" {
			t.Fatal("no pool: the children were not made")
		}
		limit, idle := 100, 4*3600*1000
		if _, err := listeners.Update(c.ctx, lc, listenerID, listeners.UpdateOpts{ConnLimit: &limit,
			TimeoutClientData: &idle, TimeoutMemberData: &idle}).Extract(); err != nil {
			t.Fatalf("listener update: %v", err)
		}
		active("listener update")
		if got, err := listeners.Get(c.ctx, lc, listenerID).Extract(); err != nil || got.ConnLimit != limit || got.TimeoutClientData != idle || got.TimeoutMemberData != idle {
			t.Errorf("a listener's connection_limit and idle timeouts: %+v %v, want %d, %d", got, err, limit, idle)
		}
		if _, err := pools.Update(c.ctx, lc, poolID, pools.UpdateOpts{LBMethod: pools.LBMethodLeastConnections}).Extract(); err != nil {
			t.Fatalf("pool update: %v", err)
		}
		active("pool update")
		if got, err := pools.Get(c.ctx, lc, poolID).Extract(); err != nil || got.LBMethod != string(pools.LBMethodLeastConnections) {
			t.Errorf("a pool's lb_algorithm: %+v %v", got, err)
		}
	})
	t.Run("member list", func(t *testing.T) {
		if poolID == "" {
			t.Fatal("no pool: the children were not made")
		}
		pages, err := pools.ListMembers(lc, poolID, nil).AllPages(c.ctx)
		l, _ := pools.ExtractMembers(pages)
		if err != nil || len(l) != 1 || l[0].Address != "192.168.45.10" {
			t.Errorf("members %+v %v", l, err)
		}
	})
	// The batch update the cloud controller manager sets a Service's
	// nodes with: members matched by address and port are updated, new
	// ones made, the others deleted; 202 without a body.
	t.Run("members in a batch", func(t *testing.T) {
		if poolID == "" {
			t.Fatal("no pool: the children were not made")
		}
		members := func() map[string]int { // address:port -> weight
			pages, err := pools.ListMembers(lc, poolID, nil).AllPages(c.ctx)
			l, _ := pools.ExtractMembers(pages)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int{}
			for _, m := range l {
				out[fmt.Sprintf("%s:%d", m.Address, m.ProtocolPort)] = m.Weight
			}
			return out
		}
		weight, name := 5, c.name("lb-controller-1")
		if err := pools.BatchUpdateMembers(c.ctx, lc, poolID, []pools.BatchUpdateMemberOpts{
			{Address: "192.168.45.10", ProtocolPort: 6443, Weight: &weight},
			{Address: "192.168.45.11", ProtocolPort: 6443, Name: &name},
		}).ExtractErr(); err != nil {
			t.Fatalf("batch update: %v", err)
		}
		active("batch update")
		if d := cmp.Diff(map[string]int{"192.168.45.10:6443": 5, "192.168.45.11:6443": 1}, members()); d != "" {
			t.Errorf("members after a batch that adds one (-want +got):\n%s", d)
		}
		if err := pools.BatchUpdateMembers(c.ctx, lc, poolID, []pools.BatchUpdateMemberOpts{
			{Address: "192.168.45.11", ProtocolPort: 6443},
		}).ExtractErr(); err != nil {
			t.Fatalf("batch update: %v", err)
		}
		active("batch update")
		if d := cmp.Diff(map[string]int{"192.168.45.11:6443": 1}, members()); d != "" {
			t.Errorf("members after a batch that leaves one out (-want +got):\n%s", d)
		}
		if _, err := lc.Put(c.ctx, lc.ServiceURL("lbaas", "pools", poolID, "members"), map[string]any{"members": []any{map[string]any{"address": "192.168.45.12"}}},
			nil, &gophercloud.RequestOpts{OkCodes: []int{202}}); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("a member without protocol_port: %v, want 400", err)
		}
	})
	t.Run("cascade delete", func(t *testing.T) {
		c := c.on(t)
		vip := lb.VipPortID
		c.must(loadbalancers.Delete(c.ctx, lc, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(), "delete")
		c.eventually("the deleted load balancer is 404 or DELETED", 2*time.Minute, func() (bool, string) {
			got, err := loadbalancers.Get(c.ctx, lc, lb.ID).Extract()
			if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return got.ProvisioningStatus == "DELETED", got.ProvisioningStatus
		})
		c.must(gone("the VIP port", func() error { _, err := ports.Get(c.ctx, c.Clients.Network, vip).Extract(); return err }), "cascade delete")
	})
}

// TestContractSwift: objects with metadata, listings by prefix, and the
// errors of missing and non-empty things.
func TestContractSwift(t *testing.T) {
	t.Parallel()
	c := contract(t)
	sc := c.Clients.ObjectStore
	ctr := c.name("backups")
	_, err := containers.Create(c.ctx, sc, ctr, nil).Extract()
	c.must(err, "create container")
	c.cleanup("container", func() error { return containers.Delete(c.ctx, sc, ctr).Err })
	body := []byte("snapshot bytes")
	for _, name := range []string{"demo/1", "demo/2", "other/1"} {
		_, err := objects.Create(c.ctx, sc, ctr, name, objects.CreateOpts{Content: bytes.NewReader(body), Metadata: map[string]string{"Reason": "scheduled"}}).Extract()
		c.must(err, "put "+name)
		c.cleanup("object", func() error {
			_, err := objects.Delete(c.ctx, sc, ctr, name, nil).Extract()
			return err
		})
	}
	t.Run("get with metadata", func(t *testing.T) {
		r := objects.Download(c.ctx, sc, ctr, "demo/1", nil)
		got, err := r.ExtractContent()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("download: %q %v", got, err)
		}
		md, err := objects.Get(c.ctx, sc, ctr, "demo/1", nil).ExtractMetadata()
		if err != nil || md["Reason"] != "scheduled" {
			t.Errorf("metadata %v %v", md, err)
		}
	})
	t.Run("list by prefix", func(t *testing.T) {
		pages, err := objects.List(sc, ctr, objects.ListOpts{Prefix: "demo/"}).AllPages(c.ctx)
		names, _ := objects.ExtractNames(pages)
		if err != nil || !slices.Equal(names, []string{"demo/1", "demo/2"}) {
			t.Errorf("names %v %v", names, err)
		}
	})
	t.Run("list in pages", func(t *testing.T) {
		pageCount := 0
		var names []string
		err := objects.List(sc, ctr, objects.ListOpts{Limit: 2}).EachPage(c.ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			n, err := objects.ExtractNames(p)
			if len(n) > 0 {
				pageCount++
			}
			names = append(names, n...)
			return true, err
		})
		if err != nil || len(names) != 3 || pageCount != 2 {
			t.Errorf("%v in %d pages (%v), want 3 names in 2", names, pageCount, err)
		}
	})
	t.Run("missing object", func(t *testing.T) {
		r := objects.Download(c.ctx, sc, ctr, "nothing", nil)
		_, err := r.ExtractContent()
		if !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("download a missing object: %v, want 404", err)
		}
		if _, err := objects.Delete(c.ctx, sc, ctr, "nothing", nil).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("delete a missing object: %v, want 404", err)
		}
	})
	t.Run("non-empty container", func(t *testing.T) {
		if err := containers.Delete(c.ctx, sc, ctr).Err; !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("delete a container with objects: %v, want 409", err)
		}
	})
	t.Run("missing container", func(t *testing.T) {
		_, err := objects.List(sc, c.name("nothing"), nil).AllPages(c.ctx)
		if !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("list a missing container: %v, want 404", err)
		}
	})
}

// TestContractKeystone: tokens and the application credentials OPKE
// makes for clusters' cloud providers.
func TestContractKeystone(t *testing.T) {
	t.Parallel()
	c := contract(t)
	user, err := c.Clients.UserID()
	c.must(err, "user id")
	ic := c.Clients.Identity
	ac, err := applicationcredentials.Create(c.ctx, ic, user, applicationcredentials.CreateOpts{Name: c.name("cred"), Secret: "s3cret-of-the-test"}).Extract()
	c.must(err, "create application credential")
	c.cleanup("application credential", func() error { return applicationcredentials.Delete(c.ctx, ic, user, ac.ID).ExtractErr() })
	t.Run("authenticate with it", func(t *testing.T) {
		body := fmt.Sprintf(`{"auth":{"identity":{"methods":["application_credential"],"application_credential":{"id":%q,"secret":"s3cret-of-the-test"}}}}`, ac.ID)
		resp, err := http.Post(strings.TrimSuffix(ic.Endpoint, "/")+"/auth/tokens", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Subject-Token") == "" {
			t.Errorf("token with the application credential: %s", resp.Status)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		body := fmt.Sprintf(`{"auth":{"identity":{"methods":["application_credential"],"application_credential":{"id":%q,"secret":"wrong"}}}}`, ac.ID)
		resp, err := http.Post(strings.TrimSuffix(ic.Endpoint, "/")+"/auth/tokens", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token with a wrong secret: %s, want 401", resp.Status)
		}
	})
	// A credential limited to the member role: its token lists that role
	// alone (a user's token lists what its roles imply, member implies
	// reader, but a credential's lists the roles it was given as they are),
	// and Octavia refuses it (its default policy wants a load-balancer
	// role), as OPKE's clusters' credentials carry load-balancer_member.
	t.Run("roles of a credential", func(t *testing.T) {
		c := c.on(t)
		mine, err := c.Clients.Roles()
		c.must(err, "the user's token's roles")
		if !slices.Contains(mine, "member") || !slices.Contains(mine, "reader") {
			t.Errorf("the user's token lists %v: want member and reader (implied by member)", mine)
		}
		limited, err := applicationcredentials.Create(c.ctx, ic, user, applicationcredentials.CreateOpts{Name: c.name("cred-member"), Secret: "s3cret-of-the-test",
			Roles: []applicationcredentials.Role{{Name: "member"}}}).Extract()
		c.must(err, "create a credential with the member role")
		c.cleanup("application credential", func() error { return applicationcredentials.Delete(c.ctx, ic, user, limited.ID).ExtractErr() })
		pc, err := openstack.AuthenticatedClient(c.ctx, gophercloud.AuthOptions{IdentityEndpoint: c.Clients.AuthURL,
			ApplicationCredentialID: limited.ID, ApplicationCredentialSecret: "s3cret-of-the-test"})
		c.must(err, "authenticate with it")
		roles, err := (&cloud.Clients{Provider: pc}).Roles()
		c.must(err, "its token's roles")
		if !slices.Equal(roles, []string{"member"}) {
			t.Errorf("a token of a member-only credential lists %v: want [member] (no implied reader, none of the creator's others)", roles)
		}
		lb := *c.Clients.LoadBalancer
		lb.ProviderClient = pc
		if _, err := loadbalancers.List(&lb, nil).AllPages(c.ctx); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
			t.Errorf("Octavia with a member-only token: %v, want 403", err)
		}
	})
	t.Run("duplicate name", func(t *testing.T) {
		_, err := applicationcredentials.Create(c.ctx, ic, user, applicationcredentials.CreateOpts{Name: c.name("cred")}).Extract()
		if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("a second credential of the same name: %v, want 409", err)
		}
	})
}

// TestContractUnknownPath: a path Nova does not have answers 401 without
// a token (its auth middleware comes first) and 404 with one; it is never
// a version document.
func TestContractUnknownPath(t *testing.T) {
	t.Parallel()
	c := contract(t)
	url := strings.TrimSuffix(c.Clients.Compute.Endpoint, "/") + "/no-such-resource"
	for _, tc := range []struct {
		name  string
		token string
		want  int
	}{
		{"without a token", "", http.StatusUnauthorized},
		{"with a token", c.Clients.Provider.Token(), http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" {
				req.Header.Set("X-Auth-Token", tc.token)
			}
			resp, err := c.Clients.Provider.HTTPClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s: %s, want %d\n%.300s", url, resp.Status, tc.want, body)
			}
		})
	}
}

// serverUpdate is a PUT /servers/{id} body as given (gophercloud's
// UpdateOpts has no description).
type serverUpdate map[string]any

func (u serverUpdate) ToServerUpdateMap() (map[string]any, error) {
	return map[string]any{"server": map[string]any(u)}, nil
}

// TestContractCinder: what the Cinder CSI plugin on a cluster asks of
// Block Storage v3 and of Nova's volume attachments: volumes made, found
// by name and in pages, attached to a server (in-use, with their device),
// snapshotted, detached, extended, restored from a snapshot, freed when
// their server goes, and the refusals it relies on.
func TestContractCinder(t *testing.T) {
	t.Parallel()
	c := contract(t)
	bs, err := openstack.NewBlockStorageV3(c.Clients.Provider, gophercloud.EndpointOpts{Region: c.Clients.Region})
	c.must(err, "block storage endpoint")
	cc := c.Clients.Compute
	status := func(id, want string) *volumes.Volume {
		t.Helper()
		var v *volumes.Volume
		c.eventually("volume "+id+" "+want, 2*time.Minute, func() (bool, string) {
			var err error
			if v, err = volumes.Get(c.ctx, bs, id).Extract(); err != nil {
				return false, err.Error()
			}
			return v.Status == want, v.Status
		})
		return v
	}
	volume := func(opts volumes.CreateOpts) *volumes.Volume {
		t.Helper()
		v, err := volumes.Create(c.ctx, bs, opts, nil).Extract()
		c.must(err, "create volume "+opts.Name)
		c.cleanup("volume", func() error {
			if err := volumes.Delete(c.ctx, bs, v.ID, nil).ExtractErr(); err != nil {
				// attached, or busy: 400 from Cinder, retried as a 409
				if gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
					return gophercloud.ErrUnexpectedResponseCode{Actual: http.StatusConflict}
				}
				return err
			}
			return gone("volume "+v.ID, func() error { _, err := volumes.Get(c.ctx, bs, v.ID).Extract(); return err })
		})
		if v.Status != "creating" {
			t.Errorf("a new volume is %s, want creating", v.Status)
		}
		return status(v.ID, "available")
	}
	n := c.network("vol", "192.168.47.0/24", false)
	sv := c.server(servers.CreateOpts{Name: c.name("vol-worker-0"), FlavorRef: c.flavor("m1.small"), ImageRef: c.image("flatcar"),
		Networks: []servers.Network{{UUID: n.network}}, Tags: c.tags("vol")}, nil)

	data := volume(volumes.CreateOpts{Name: c.name("data"), Size: 1, Metadata: map[string]string{"cinder.csi.openstack.org/cluster": c.Owner}})
	t.Run("a volume", func(t *testing.T) {
		if data.Size != 1 || data.AvailabilityZone != "nova" || data.VolumeType != "__DEFAULT__" || len(data.Attachments) != 0 ||
			data.Metadata["cinder.csi.openstack.org/cluster"] != c.Owner || data.Bootable != "false" || data.Multiattach {
			t.Errorf("volume %+v", data)
		}
		pages, err := volumes.List(bs, volumes.ListOpts{Name: data.Name}).AllPages(c.ctx)
		c.must(err, "list volumes by name")
		found, err := volumes.ExtractVolumes(pages)
		if err != nil || len(found) != 1 || found[0].ID != data.ID {
			t.Errorf("volumes named %s: %+v (%v), want %s alone", data.Name, found, err, data.ID)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		if _, err := volumes.Create(c.ctx, bs, volumes.CreateOpts{Name: c.name("nosize")}, nil).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("a volume without a size: %v, want 400", err)
		}
		if _, err := volumes.Create(c.ctx, bs, volumes.CreateOpts{Name: c.name("nosnap"), SnapshotID: "9b3a1b52-7e0c-4c5e-9a36-2f1f5d3f0c11"}, nil).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("a volume from a missing snapshot: %v, want 404", err)
		}
		if _, err := volumes.Get(c.ctx, bs, "9b3a1b52-7e0c-4c5e-9a36-2f1f5d3f0c11").Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("get a missing volume: %v, want 404", err)
		}
	})

	c.settled(sv.ID)
	att, err := volumeattach.Create(c.ctx, cc, sv.ID, volumeattach.CreateOpts{VolumeID: data.ID}).Extract()
	c.must(err, "attach the volume")
	if att.VolumeID != data.ID || att.ServerID != sv.ID || !strings.HasPrefix(att.Device, "/dev/") {
		t.Errorf("attachment %+v", att)
	}
	inUse := status(data.ID, "in-use")
	t.Run("attached", func(t *testing.T) {
		if len(inUse.Attachments) != 1 || inUse.Attachments[0].ServerID != sv.ID || inUse.Attachments[0].Device != att.Device {
			t.Errorf("attachments %+v, want one to %s at %s", inUse.Attachments, sv.ID, att.Device)
		}
		pages, err := volumeattach.List(cc, sv.ID).AllPages(c.ctx)
		c.must(err, "list attachments")
		list, err := volumeattach.ExtractVolumeAttachments(pages)
		if err != nil || len(list) != 1 || list[0].VolumeID != data.ID || list[0].Device != att.Device {
			t.Errorf("the server's attachments: %+v (%v)", list, err)
		}
		got, err := servers.Get(c.ctx, cc, sv.ID).Extract()
		if err != nil || len(got.AttachedVolumes) != 1 || got.AttachedVolumes[0].ID != data.ID {
			t.Errorf("the server's volumes: %+v (%v)", got.AttachedVolumes, err)
		}
		if err := volumes.Delete(c.ctx, bs, data.ID, nil).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("delete an attached volume: %v, want 400", err)
		}
		if _, err := volumeattach.Create(c.ctx, cc, sv.ID, volumeattach.CreateOpts{VolumeID: data.ID}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("attach an in-use volume: %v, want 400", err)
		}
	})

	t.Run("snapshot of an in-use volume", func(t *testing.T) {
		if _, err := snapshots.Create(c.ctx, bs, snapshots.CreateOpts{VolumeID: data.ID, Name: c.name("noforce")}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("snapshot an in-use volume without force: %v, want 400", err)
		}
	})
	snap, err := snapshots.Create(c.ctx, bs, snapshots.CreateOpts{VolumeID: data.ID, Name: c.name("snap"), Force: true}).Extract()
	c.must(err, "snapshot the volume")
	c.cleanup("snapshot", func() error {
		if err := snapshots.Delete(c.ctx, bs, snap.ID).ExtractErr(); err != nil {
			return err
		}
		return gone("snapshot "+snap.ID, func() error { _, err := snapshots.Get(c.ctx, bs, snap.ID).Extract(); return err })
	})
	c.eventually("snapshot available", 2*time.Minute, func() (bool, string) {
		got, err := snapshots.Get(c.ctx, bs, snap.ID).Extract()
		if err != nil {
			return false, err.Error()
		}
		snap = got
		return got.Status == "available", got.Status
	})
	if snap.Size != 1 || snap.VolumeID != data.ID {
		t.Errorf("snapshot %+v", snap)
	}

	c.must(volumeattach.Delete(c.ctx, cc, sv.ID, data.ID).ExtractErr(), "detach the volume")
	free := status(data.ID, "available")
	t.Run("detached", func(t *testing.T) {
		if len(free.Attachments) != 0 {
			t.Errorf("a detached volume's attachments: %+v", free.Attachments)
		}
		if err := volumes.Delete(c.ctx, bs, data.ID, nil).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("delete a volume with a snapshot: %v, want 400", err)
		}
		if _, err := volumeattach.Get(c.ctx, cc, sv.ID, data.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("get a detached volume's attachment: %v, want 404", err)
		}
	})
	t.Run("extended", func(t *testing.T) {
		c := c.on(t)
		c.must(volumes.ExtendSize(c.ctx, bs, data.ID, volumes.ExtendSizeOpts{NewSize: 2}).ExtractErr(), "extend")
		c.eventually("extended to 2 GB", 2*time.Minute, func() (bool, string) {
			v, err := volumes.Get(c.ctx, bs, data.ID).Extract()
			if err != nil {
				return false, err.Error()
			}
			return v.Status == "available" && v.Size == 2, fmt.Sprintf("%s, %d GB", v.Status, v.Size)
		})
		if err := volumes.ExtendSize(c.ctx, bs, data.ID, volumes.ExtendSizeOpts{NewSize: 1}).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
			t.Errorf("shrink a volume: %v, want 400", err)
		}
	})

	restored := volume(volumes.CreateOpts{Name: c.name("restored"), SnapshotID: snap.ID})
	t.Run("restored from the snapshot, listed in pages", func(t *testing.T) {
		if restored.SnapshotID != snap.ID || restored.Size != 1 {
			t.Errorf("restored %+v", restored)
		}
		var ids []string
		pages := 0
		err := volumes.List(bs, volumes.ListOpts{Limit: 1}).EachPage(c.ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			vs, err := volumes.ExtractVolumes(p)
			for _, v := range vs {
				ids = append(ids, v.ID)
			}
			pages++
			return true, err
		})
		if err != nil || !slices.Contains(ids, data.ID) || !slices.Contains(ids, restored.ID) || pages < 2 {
			t.Errorf("volumes in pages of 1: %v in %d pages (%v)", ids, pages, err)
		}
	})

	t.Run("a deleted server's volume", func(t *testing.T) {
		c := c.on(t)
		_, err := volumeattach.Create(c.ctx, cc, sv.ID, volumeattach.CreateOpts{VolumeID: restored.ID}).Extract()
		c.must(err, "attach the restored volume")
		status(restored.ID, "in-use")
		c.must(servers.Delete(c.ctx, cc, sv.ID).ExtractErr(), "delete the server")
		c.must(gone("server "+sv.ID, func() error { _, err := servers.Get(c.ctx, cc, sv.ID).Extract(); return err }), "server gone")
		if v := status(restored.ID, "available"); len(v.Attachments) != 0 {
			t.Errorf("the deleted server's volume keeps %+v", v.Attachments)
		}
	})
}

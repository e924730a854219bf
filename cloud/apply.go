package cloud

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/applicationcredentials"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/diff"
	"opke.dev/opke/schemas"
)

// ErrForeign is a resource of the name OPKE wants that another OPKE
// installation owns: it is never adopted.
var ErrForeign = errors.New("owned by another OPKE installation")

// ErrLoadBalancer is a load balancer that went to ERROR.
var ErrLoadBalancer = errors.New("load balancer in ERROR")

// Applier changes one cluster's resources in one cloud. Every create
// first looks for the resource by name: one found with OPKE's tags (or
// with none, left by a create whose tagging was lost) is adopted, so a
// retry after a lost response never makes a second one. Deletes of what
// is already gone succeed. An Applier is safe for concurrent use.
type Applier struct {
	c       *Clients
	cluster string
	owner   string
	tags    []string

	mu  sync.Mutex
	ids map[diff.Address]string

	// Name lookups made once: external networks, images, flavors.
	cacheMu  sync.Mutex
	external map[string]string
	images   map[string]string
	flavors  map[string]string
	// LBWait is how often a pending load balancer is polled.
	LBWait time.Duration
}

// NewApplier returns the applier of cluster, knowing the ids of the
// resources observed.
func NewApplier(c *Clients, owner, cluster string, observed []diff.Resource) *Applier {
	a := &Applier{c: c, owner: owner, cluster: cluster, tags: []string{Tag(schemas.TagCluster, cluster), Tag(schemas.TagOwner, owner)},
		ids: map[diff.Address]string{}, LBWait: 100 * time.Millisecond}
	for _, r := range observed {
		a.ids[r.Address()] = r.ID
	}
	return a
}

// ID returns the id of the cluster's resource at address, if known.
func (a *Applier) ID(kind diff.Kind, name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[diff.ResourceAddress(kind, name)]
}

func (a *Applier) setID(kind diff.Kind, name, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[diff.ResourceAddress(kind, name)] = id
}

// need returns the id of a resource a create refers to, or an error.
func (a *Applier) need(kind diff.Kind, name string) (string, error) {
	if id := a.ID(kind, name); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("%s %s: %w", kind, name, errMissingDependency)
}

var errMissingDependency = errors.New("not created yet")

// AppCredentialName is the Keystone name of a cluster's application
// credential. Keystone has no tags: the name says whose it is.
func AppCredentialName(owner, cluster string) string { return "opke-" + owner + "-" + cluster }

// CreateAppCredential makes the cluster's application credential with
// secret (OPKE chooses it and keeps it before this call, so a retry after
// a lost response finds the credential it made, with a secret it knows).
// One found by its name is adopted, unless fresh says the secret was just
// chosen: that one was made with a secret OPKE lost, and is made again.
func (a *Applier) CreateAppCredential(ctx context.Context, r diff.Resource, secret string, fresh bool) (string, error) {
	id, err := a.appCredential(ctx, r, secret, fresh)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", r.Address(), err)
	}
	a.setID(r.Kind, r.Name, id)
	return id, nil
}

func (a *Applier) appCredential(ctx context.Context, r diff.Resource, secret string, fresh bool) (string, error) {
	user, err := a.c.UserID()
	if err != nil {
		return "", err
	}
	name := AppCredentialName(a.owner, r.Name)
	p, err := applicationcredentials.List(a.c.Identity, user, applicationcredentials.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		return "", err
	}
	found, err := applicationcredentials.ExtractApplicationCredentials(p)
	if err != nil {
		return "", err
	}
	for _, ac := range found {
		if ac.Name != name {
			continue
		}
		if !fresh {
			return ac.ID, nil
		}
		if err := applicationcredentials.Delete(ctx, a.c.Identity, user, ac.ID).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return "", err
		}
	}
	ac, err := applicationcredentials.Create(ctx, a.c.Identity, user, applicationcredentials.CreateOpts{Name: name, Secret: secret,
		Description: "OPKE: the cloud provider and CSI driver of cluster " + a.cluster}).Extract()
	if err != nil {
		return "", err
	}
	return ac.ID, nil
}

// Create makes r (the desired resource) unless it exists, and returns its
// id. userData is a server's Ignition config.
func (a *Applier) Create(ctx context.Context, r diff.Resource, userData []byte) (string, error) {
	id, err := a.create(ctx, r, userData)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", r.Address(), err)
	}
	a.setID(r.Kind, r.Name, id)
	return id, nil
}

func (a *Applier) create(ctx context.Context, r diff.Resource, userData []byte) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	switch r.Kind {
	case diff.KindNetwork:
		return a.neutron(ctx, "networks", networks.List(a.c.Network, networks.ListOpts{Name: r.Name}),
			found(networks.ExtractNetworks, func(n networks.Network) tagged { return tagged{id: n.ID, tags: n.Tags} }),
			func() (string, error) {
				n, err := networks.Create(ctx, a.c.Network, networks.CreateOpts{Name: r.Name}).Extract()
				return idOf(err, func() string { return n.ID })
			})
	case diff.KindSubnet:
		netID, err := a.need(diff.KindNetwork, v("network"))
		if err != nil {
			return "", err
		}
		var dns []string
		if d := v("dns_nameservers"); d != "" {
			dns = strings.Split(d, ",")
		}
		return a.neutron(ctx, "subnets", subnets.List(a.c.Network, subnets.ListOpts{Name: r.Name, NetworkID: netID}),
			found(subnets.ExtractSubnets, func(s subnets.Subnet) tagged { return tagged{id: s.ID, tags: s.Tags} }),
			func() (string, error) {
				s, err := subnets.Create(ctx, a.c.Network, subnets.CreateOpts{Name: r.Name, NetworkID: netID, CIDR: v("cidr"), IPVersion: 4, DNSNameservers: dns}).Extract()
				return idOf(err, func() string { return s.ID })
			})
	case diff.KindRouter:
		ext, err := a.lookup(ctx, &a.external, "external network", a.listExternal, v("external_network"))
		if err != nil {
			return "", err
		}
		return a.neutron(ctx, "routers", routers.List(a.c.Network, routers.ListOpts{Name: r.Name}),
			found(routers.ExtractRouters, func(r routers.Router) tagged { return tagged{id: r.ID, tags: r.Tags} }),
			func() (string, error) {
				rt, err := routers.Create(ctx, a.c.Network, routers.CreateOpts{Name: r.Name, GatewayInfo: &routers.GatewayInfo{NetworkID: ext}}).Extract()
				return idOf(err, func() string { return rt.ID })
			})
	case diff.KindInterface:
		return a.routerInterface(ctx, v("router"), v("subnet"))
	case diff.KindSecurityGroup:
		return a.neutron(ctx, "security-groups", groups.List(a.c.Network, groups.ListOpts{Name: r.Name}),
			found(groups.ExtractGroups, func(g groups.SecGroup) tagged { return tagged{id: g.ID, tags: g.Tags} }),
			func() (string, error) {
				g, err := groups.Create(ctx, a.c.Network, groups.CreateOpts{Name: r.Name}).Extract()
				return idOf(err, func() string { return g.ID })
			})
	case diff.KindRule:
		return a.rule(ctx, r)
	case diff.KindServerGroup:
		// Server groups carry no tags: one of the name is the one.
		return a.ensure(ctx, servergroups.List(a.c.Compute, nil),
			found(servergroups.ExtractServerGroups, func(g servergroups.ServerGroup) tagged {
				return tagged{id: g.ID, skip: g.Name != r.Name}
			}),
			func() (string, error) {
				g, err := servergroups.Create(ctx, a.c.Compute, servergroups.CreateOpts{Name: r.Name, Policy: v("policy")}).Extract()
				return idOf(err, func() string { return g.ID })
			})
	case diff.KindPort:
		return a.port(ctx, r)
	case diff.KindServer:
		return a.server(ctx, r, userData)
	case diff.KindFloatingIP:
		return a.floatingIP(ctx, r)
	case diff.KindLoadBalancer, diff.KindListener, diff.KindPool, diff.KindMember, diff.KindMonitor:
		return a.octavia(ctx, r)
	}
	return "", fmt.Errorf("%w: %s", errors.ErrUnsupported, r.Kind)
}

// tagged is a found resource's id and tags; skip marks one a listing
// returned that is not the one looked for.
type tagged struct {
	id   string
	tags []string
	skip bool
}

// found turns a gophercloud extractor into one of tagged resources.
func found[T any](extract func(pagination.Page) ([]T, error), f func(T) tagged) func(pagination.Page) ([]tagged, error) {
	return func(p pagination.Page) ([]tagged, error) {
		l, err := extract(p)
		out := make([]tagged, 0, len(l))
		for _, x := range l {
			if t := f(x); !t.skip {
				out = append(out, t)
			}
		}
		return out, err
	}
}

// idOf is a create's id, or its error.
func idOf(err error, id func() string) (string, error) {
	if err != nil {
		return "", err
	}
	return id(), nil
}

// adopt picks, among resources found by name, the one to adopt: OPKE's
// for this cluster, or one without an owner tag (a create whose tagging
// was lost, or a kind without tags). It refuses one another installation
// owns.
func (a *Applier) adopt(found []tagged) (tagged, bool, error) {
	for _, f := range found {
		if slices.Contains(f.tags, a.tags[1]) && slices.Contains(f.tags, a.tags[0]) {
			return f, true, nil
		}
	}
	for _, f := range found {
		if !slices.ContainsFunc(f.tags, func(t string) bool { return strings.HasPrefix(t, schemas.TagOwner+"=") }) {
			return f, true, nil
		}
	}
	if len(found) > 0 {
		return tagged{}, false, ErrForeign
	}
	return tagged{}, false, nil
}

// look lists what list finds and picks the one to adopt.
func (a *Applier) look(ctx context.Context, list pagination.Pager, extract func(pagination.Page) ([]tagged, error)) (tagged, bool, error) {
	var all []tagged
	err := list.EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := extract(p)
		all = append(all, l...)
		return true, err
	})
	if err != nil {
		return tagged{}, false, fmt.Errorf("look before creating: %w", err)
	}
	return a.adopt(all)
}

// ensure returns the id of the resource list finds (as adopt picks), or
// creates it.
func (a *Applier) ensure(ctx context.Context, list pagination.Pager, extract func(pagination.Page) ([]tagged, error), create func() (string, error)) (string, error) {
	f, ok, err := a.look(ctx, list, extract)
	if err != nil || ok {
		return f.id, err
	}
	return create()
}

// neutron is ensure for Neutron, which takes tags after the create: the
// resource is tagged unless it already carries OPKE's tags.
func (a *Applier) neutron(ctx context.Context, kind string, list pagination.Pager, extract func(pagination.Page) ([]tagged, error), create func() (string, error)) (string, error) {
	f, ok, err := a.look(ctx, list, extract)
	if err != nil {
		return "", err
	}
	id := f.id
	if !ok {
		if id, err = create(); err != nil {
			return "", err
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(f.tags)), slices.Sorted(slices.Values(a.tags))) {
		if _, err := attributestags.ReplaceAll(ctx, a.c.Network, kind, id, attributestags.ReplaceAllOpts{Tags: a.tags}).Extract(); err != nil {
			return "", fmt.Errorf("tag: %w", err)
		}
	}
	return id, nil
}

// lookup resolves a name through a listing made once per applier.
func (a *Applier) lookup(ctx context.Context, cache *map[string]string, what string, list func(context.Context) (map[string]string, error), name string) (string, error) {
	a.cacheMu.Lock()
	defer a.cacheMu.Unlock()
	if *cache == nil {
		m, err := list(ctx)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		*cache = m
	}
	if id, ok := (*cache)[name]; ok {
		return id, nil
	}
	return "", fmt.Errorf("%s %q: not found", what, name)
}

// byName lists a listing's names and ids.
func byName[T any](ctx context.Context, list pagination.Pager, extract func(pagination.Page) ([]T, error), nameID func(T) (string, string)) (map[string]string, error) {
	out := map[string]string{}
	err := list.EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := extract(p)
		for _, x := range l {
			n, id := nameID(x)
			out[n] = id
		}
		return true, err
	})
	return out, err
}

func (a *Applier) listExternal(ctx context.Context) (map[string]string, error) {
	yes := true
	return byName(ctx, networks.List(a.c.Network, external.ListOptsExt{ListOptsBuilder: networks.ListOpts{}, External: &yes}),
		networks.ExtractNetworks, func(n networks.Network) (string, string) { return n.Name, n.ID })
}

func (a *Applier) listFlavors(ctx context.Context) (map[string]string, error) {
	return byName(ctx, flavors.ListDetail(a.c.Compute, nil), flavors.ExtractFlavors, func(f flavors.Flavor) (string, string) { return f.Name, f.ID })
}

func (a *Applier) listImages(ctx context.Context) (map[string]string, error) {
	return byName(ctx, images.List(a.c.Image, nil), images.ExtractImages, func(i images.Image) (string, string) { return i.Name, i.ID })
}

func (a *Applier) routerInterface(ctx context.Context, router, subnet string) (string, error) {
	rid, err := a.need(diff.KindRouter, router)
	if err != nil {
		return "", err
	}
	sid, err := a.need(diff.KindSubnet, subnet)
	if err != nil {
		return "", err
	}
	// The interface is the router's port on the subnet.
	return a.ensure(ctx, ports.List(a.c.Network, ports.ListOpts{DeviceID: rid}),
		found(ports.ExtractPorts, func(p ports.Port) tagged {
			return tagged{id: p.ID, skip: !slices.ContainsFunc(p.FixedIPs, func(ip ports.IP) bool { return ip.SubnetID == sid })}
		}),
		func() (string, error) {
			res, err := routers.AddInterface(ctx, a.c.Network, rid, routers.AddInterfaceOpts{SubnetID: sid}).Extract()
			return idOf(err, func() string { return res.PortID })
		})
}

func (a *Applier) rule(ctx context.Context, r diff.Resource) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	sg, err := a.need(diff.KindSecurityGroup, v("security_group"))
	if err != nil {
		return "", err
	}
	opts := rules.CreateOpts{SecGroupID: sg, Direction: rules.DirIngress, EtherType: rules.EtherType4}
	if p := v("protocol"); p != "any" {
		opts.Protocol = rules.RuleProtocol(p)
	}
	if lo, hi, isRange := strings.Cut(v("ports"), "-"); isRange {
		min, err1 := strconv.Atoi(lo)
		max, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || min < 1 || max < min || max > 65535 {
			return "", fmt.Errorf("security group rule %s: ports %q is not a range of ports", r.Name, v("ports"))
		}
		opts.PortRangeMin, opts.PortRangeMax = min, max
	} else if p, err := strconv.Atoi(v("ports")); err == nil {
		opts.PortRangeMin, opts.PortRangeMax = p, p
	}
	if g, ok := strings.CutPrefix(v("remote"), "group:"); ok {
		if opts.RemoteGroupID, err = a.need(diff.KindSecurityGroup, g); err != nil {
			return "", err
		}
	} else {
		opts.RemoteIPPrefix = v("remote")
	}
	// Rules have no name: one with the same match is the one.
	return a.ensure(ctx, rules.List(a.c.Network, rules.ListOpts{SecGroupID: sg, Direction: string(rules.DirIngress)}),
		found(rules.ExtractRules, func(x rules.SecGroupRule) tagged {
			same := x.Protocol == string(opts.Protocol) && x.PortRangeMin == opts.PortRangeMin && x.PortRangeMax == opts.PortRangeMax &&
				x.RemoteGroupID == opts.RemoteGroupID && x.RemoteIPPrefix == opts.RemoteIPPrefix && x.EtherType == string(rules.EtherType4)
			return tagged{id: x.ID, skip: !same}
		}),
		func() (string, error) {
			rule, err := rules.Create(ctx, a.c.Network, opts).Extract()
			return idOf(err, func() string { return rule.ID })
		})
}

func (a *Applier) port(ctx context.Context, r diff.Resource) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	netID, err := a.need(diff.KindNetwork, v("network"))
	if err != nil {
		return "", err
	}
	var sgs []string
	for _, g := range strings.Split(v("security_groups"), ",") {
		id, err := a.need(diff.KindSecurityGroup, g)
		if err != nil {
			return "", err
		}
		sgs = append(sgs, id)
	}
	opts := ports.CreateOpts{Name: r.Name, NetworkID: netID, SecurityGroups: &sgs}
	if ip := r.Attrs["fixed_ip"]; !ip.Unknown && ip.Value != "" {
		sid, err := a.need(diff.KindSubnet, a.cluster)
		if err != nil {
			return "", err
		}
		opts.FixedIPs = []ports.IP{{SubnetID: sid, IPAddress: ip.Value}}
	}
	return a.neutron(ctx, "ports", ports.List(a.c.Network, ports.ListOpts{Name: r.Name, NetworkID: netID}),
		found(ports.ExtractPorts, func(p ports.Port) tagged { return tagged{id: p.ID, tags: p.Tags} }),
		func() (string, error) {
			p, err := ports.Create(ctx, a.c.Network, opts).Extract()
			return idOf(err, func() string { return p.ID })
		})
}

func (a *Applier) server(ctx context.Context, r diff.Resource, userData []byte) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	portID, err := a.need(diff.KindPort, v("port"))
	if err != nil {
		return "", err
	}
	flavor, err := a.lookup(ctx, &a.flavors, "flavor", a.listFlavors, v("flavor"))
	if err != nil {
		return "", err
	}
	image, err := a.lookup(ctx, &a.images, "image", a.listImages, v("image"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(userData)
	opts := servers.CreateOpts{Name: r.Name, FlavorRef: flavor, ImageRef: image, Tags: a.tags, UserData: userData,
		Networks: []servers.Network{{Port: portID}}, Metadata: map[string]string{MetaUserData: hex.EncodeToString(sum[:])},
		AvailabilityZone: v("availability_zone")}
	var hints servers.SchedulerHintOptsBuilder
	if g := v("server_group"); g != "" {
		gid, err := a.need(diff.KindServerGroup, g)
		if err != nil {
			return "", err
		}
		hints = servers.SchedulerHintOpts{Group: gid}
	}
	var builder servers.CreateOptsBuilder = opts
	if k := v("key_name"); k != "" {
		builder = keyPairOpts{opts, k}
	}
	// Nova takes tags at create: one found by name and OPKE's tags is the
	// one an earlier attempt made (Nova's name filter is a regular
	// expression).
	return a.ensure(ctx, servers.List(a.c.Compute, servers.ListOpts{Name: "^" + regexp.QuoteMeta(r.Name) + "$", Tags: strings.Join(a.tags, ",")}),
		found(servers.ExtractServers, func(s servers.Server) tagged {
			return tagged{id: s.ID, tags: a.tags, skip: s.Name != r.Name || s.Status == "DELETED"}
		}),
		func() (string, error) {
			s, err := servers.Create(ctx, a.c.Compute, builder, hints).Extract()
			return idOf(err, func() string { return s.ID })
		})
}

// keyPairOpts adds a Nova keypair to a server create.
type keyPairOpts struct {
	servers.CreateOpts
	key string
}

func (o keyPairOpts) ToServerCreateMap() (map[string]any, error) {
	m, err := o.CreateOpts.ToServerCreateMap()
	if err != nil {
		return nil, err
	}
	m["server"].(map[string]any)["key_name"] = o.key
	return m, nil
}

func (a *Applier) floatingIP(ctx context.Context, r diff.Resource) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	ext, err := a.lookup(ctx, &a.external, "external network", a.listExternal, v("network"))
	if err != nil {
		return "", err
	}
	var portID string
	if p := v("port"); p != "" {
		if portID, err = a.need(diff.KindPort, p); err != nil {
			return "", err
		}
	} else {
		lbID, err := a.need(diff.KindLoadBalancer, v("load_balancer"))
		if err != nil {
			return "", err
		}
		lb, err := loadbalancers.Get(ctx, a.c.LoadBalancer, lbID).Extract()
		if err != nil {
			return "", err
		}
		portID = lb.VipPortID
	}
	// Floating IPs have no name: the description is OPKE's name.
	return a.neutron(ctx, "floatingips", floatingips.List(a.c.Network, floatingips.ListOpts{Description: r.Name, PortID: portID}),
		found(floatingips.ExtractFloatingIPs, func(f floatingips.FloatingIP) tagged { return tagged{id: f.ID, tags: f.Tags} }),
		func() (string, error) {
			f, err := floatingips.Create(ctx, a.c.Network, floatingips.CreateOpts{FloatingNetworkID: ext, PortID: portID, Description: r.Name}).Extract()
			return idOf(err, func() string { return f.ID })
		})
}

// octavia creates a load balancer or one of its children, waiting out the
// load balancer's PENDING states before and after.
func (a *Applier) octavia(ctx context.Context, r diff.Resource) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	num := func(k string) int { n, _ := strconv.Atoi(v(k)); return n }
	lbc := a.c.LoadBalancer
	if r.Kind == diff.KindLoadBalancer {
		sid, err := a.need(diff.KindSubnet, v("subnet"))
		if err != nil {
			return "", err
		}
		id, err := a.ensure(ctx, loadbalancers.List(lbc, loadbalancers.ListOpts{Name: r.Name}),
			found(loadbalancers.ExtractLoadBalancers, func(lb loadbalancers.LoadBalancer) tagged { return tagged{id: lb.ID, tags: lb.Tags} }),
			func() (string, error) {
				lb, err := loadbalancers.Create(ctx, lbc, loadbalancers.CreateOpts{Name: r.Name, VipSubnetID: sid, VipAddress: v("vip_address"), Tags: a.tags}).Extract()
				return idOf(err, func() string { return lb.ID })
			})
		if err != nil {
			return "", err
		}
		return id, a.waitLB(ctx, id)
	}
	lbID, err := a.need(diff.KindLoadBalancer, a.cluster+"-api")
	if err != nil {
		return "", err
	}
	var list pagination.Pager
	var extract func(pagination.Page) ([]tagged, error)
	var create func() (string, error)
	switch r.Kind {
	case diff.KindListener:
		list = listeners.List(lbc, listeners.ListOpts{Name: r.Name, LoadbalancerID: lbID})
		extract = found(listeners.ExtractListeners, func(x listeners.Listener) tagged { return tagged{id: x.ID, tags: x.Tags} })
		create = func() (string, error) {
			client, member := num("timeout_client_data"), num("timeout_member_data")
			l, err := listeners.Create(ctx, lbc, listeners.CreateOpts{Name: r.Name, LoadbalancerID: lbID,
				Protocol: listeners.Protocol(v("protocol")), ProtocolPort: num("port"), Tags: a.tags,
				TimeoutClientData: &client, TimeoutMemberData: &member}).Extract()
			return idOf(err, func() string { return l.ID })
		}
	case diff.KindPool:
		lid, err := a.need(diff.KindListener, v("listener"))
		if err != nil {
			return "", err
		}
		list = pools.List(lbc, pools.ListOpts{Name: r.Name, LoadbalancerID: lbID})
		extract = found(pools.ExtractPools, func(x pools.Pool) tagged { return tagged{id: x.ID, tags: x.Tags} })
		create = func() (string, error) {
			p, err := pools.Create(ctx, lbc, pools.CreateOpts{Name: r.Name, ListenerID: lid,
				Protocol: pools.Protocol(v("protocol")), LBMethod: pools.LBMethod(v("algorithm")), Tags: a.tags}).Extract()
			return idOf(err, func() string { return p.ID })
		}
	case diff.KindMember:
		pid, err := a.need(diff.KindPool, v("pool"))
		if err != nil {
			return "", err
		}
		sid, err := a.need(diff.KindSubnet, a.cluster)
		if err != nil {
			return "", err
		}
		list = pools.ListMembers(lbc, pid, pools.ListMembersOpts{Name: r.Name})
		extract = found(pools.ExtractMembers, func(x pools.Member) tagged { return tagged{id: x.ID, tags: x.Tags} })
		create = func() (string, error) {
			m, err := pools.CreateMember(ctx, lbc, pid, pools.CreateMemberOpts{Name: r.Name, Address: v("address"),
				ProtocolPort: num("port"), SubnetID: sid, Tags: a.tags}).Extract()
			return idOf(err, func() string { return m.ID })
		}
	case diff.KindMonitor:
		pid, err := a.need(diff.KindPool, v("pool"))
		if err != nil {
			return "", err
		}
		list = monitors.List(lbc, monitors.ListOpts{Name: r.Name, PoolID: pid})
		extract = found(monitors.ExtractMonitors, func(x monitors.Monitor) tagged { return tagged{id: x.ID, tags: x.Tags} })
		create = func() (string, error) {
			m, err := monitors.Create(ctx, lbc, monitors.CreateOpts{Name: r.Name, PoolID: pid, Type: v("type"),
				Delay: num("delay"), Timeout: num("timeout"), MaxRetries: num("max_retries"), Tags: a.tags}).Extract()
			return idOf(err, func() string { return m.ID })
		}
	}
	if err := a.waitLB(ctx, lbID); err != nil {
		return "", err
	}
	var id string
	err = a.pending(ctx, lbID, func() error {
		var err error
		id, err = a.ensure(ctx, list, extract, create)
		return err
	})
	if err != nil {
		return "", err
	}
	return id, a.waitLB(ctx, lbID)
}

// pending runs fn, waiting out a load balancer's PENDING state when the
// API answers 409 because of it.
func (a *Applier) pending(ctx context.Context, lbID string, fn func() error) error {
	for range 50 {
		err := fn()
		if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			return err
		}
		if err := a.waitLB(ctx, lbID); err != nil {
			return err
		}
	}
	return fmt.Errorf("load balancer %s: still conflicting after 50 waits", lbID)
}

// waitLB waits until a load balancer is ACTIVE (or gone).
func (a *Applier) waitLB(ctx context.Context, id string) error {
	for {
		lb, err := loadbalancers.Get(ctx, a.c.LoadBalancer, id).Extract()
		switch {
		case gophercloud.ResponseCodeIs(err, http.StatusNotFound):
			return nil
		case err != nil:
			return err
		case lb.ProvisioningStatus == "ACTIVE":
			return nil
		case lb.ProvisioningStatus == "ERROR":
			return fmt.Errorf("%s: %w", lb.Name, ErrLoadBalancer)
		}
		if err := Sleep(ctx, a.LBWait); err != nil {
			return err
		}
	}
}

// Update changes r's updatable attributes in place: a port's security
// groups, a subnet's DNS nameservers, a listener's idle timeouts.
func (a *Applier) Update(ctx context.Context, r diff.Resource) error {
	id := a.ID(r.Kind, r.Name)
	if id == "" {
		return fmt.Errorf("update %s: %w", r.Address(), errMissingDependency)
	}
	var err error
	switch r.Kind {
	case diff.KindPort:
		var sgs []string
		for _, g := range strings.Split(r.Attrs["security_groups"].Value, ",") {
			gid, err := a.need(diff.KindSecurityGroup, g)
			if err != nil {
				return err
			}
			sgs = append(sgs, gid)
		}
		_, err = ports.Update(ctx, a.c.Network, id, ports.UpdateOpts{SecurityGroups: &sgs}).Extract()
	case diff.KindSubnet:
		dns := []string{}
		if d := r.Attrs["dns_nameservers"].Value; d != "" {
			dns = strings.Split(d, ",")
		}
		_, err = subnets.Update(ctx, a.c.Network, id, subnets.UpdateOpts{DNSNameservers: &dns}).Extract()
	case diff.KindListener:
		client, _ := strconv.Atoi(r.Attrs["timeout_client_data"].Value)
		member, _ := strconv.Atoi(r.Attrs["timeout_member_data"].Value)
		// The cluster's one load balancer, as octavia finds it for a
		// create (an update names only what changes).
		lbID, lerr := a.need(diff.KindLoadBalancer, a.cluster+"-api")
		if lerr != nil {
			return lerr
		}
		if err = a.waitLB(ctx, lbID); err != nil {
			break
		}
		err = a.pending(ctx, lbID, func() error {
			_, err := listeners.Update(ctx, a.c.LoadBalancer, id, listeners.UpdateOpts{TimeoutClientData: &client, TimeoutMemberData: &member}).Extract()
			return err
		})
		if err == nil {
			err = a.waitLB(ctx, lbID)
		}
	default:
		err = fmt.Errorf("%w: update of a %s", errors.ErrUnsupported, r.Kind)
	}
	if err != nil {
		return fmt.Errorf("update %s: %w", r.Address(), err)
	}
	return nil
}

// Delete removes the resource at r's address (its id from the
// observation); one already gone is deleted.
func (a *Applier) Delete(ctx context.Context, r diff.Resource) error {
	id := cmp.Or(r.ID, a.ID(r.Kind, r.Name))
	if id == "" {
		return nil
	}
	var err error
	switch r.Kind {
	case diff.KindNetwork:
		err = networks.Delete(ctx, a.c.Network, id).ExtractErr()
	case diff.KindSubnet:
		err = subnets.Delete(ctx, a.c.Network, id).ExtractErr()
	case diff.KindRouter:
		err = routers.Delete(ctx, a.c.Network, id).ExtractErr()
	case diff.KindInterface:
		rid := a.ID(diff.KindRouter, r.Attrs["router"].Value)
		sid := a.ID(diff.KindSubnet, r.Attrs["subnet"].Value)
		if rid == "" || sid == "" {
			return nil
		}
		_, err = routers.RemoveInterface(ctx, a.c.Network, rid, routers.RemoveInterfaceOpts{SubnetID: sid}).Extract()
	case diff.KindSecurityGroup:
		err = groups.Delete(ctx, a.c.Network, id).ExtractErr()
	case diff.KindRule:
		err = rules.Delete(ctx, a.c.Network, id).ExtractErr()
	case diff.KindServerGroup:
		err = servergroups.Delete(ctx, a.c.Compute, id).ExtractErr()
	case diff.KindAppCredential:
		var user string
		if user, err = a.c.UserID(); err == nil {
			err = applicationcredentials.Delete(ctx, a.c.Identity, user, id).ExtractErr()
		}
	case diff.KindPort:
		err = ports.Delete(ctx, a.c.Network, id).ExtractErr()
	case diff.KindServer:
		if err = servers.Delete(ctx, a.c.Compute, id).ExtractErr(); err == nil {
			err = a.waitServerGone(ctx, id)
		}
	case diff.KindFloatingIP:
		err = floatingips.Delete(ctx, a.c.Network, id).ExtractErr()
	case diff.KindLoadBalancer:
		err = loadbalancers.Delete(ctx, a.c.LoadBalancer, id, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr()
		if err == nil {
			err = a.waitLB(ctx, id)
		}
	case diff.KindListener, diff.KindPool, diff.KindMember, diff.KindMonitor:
		lbID := a.ID(diff.KindLoadBalancer, a.cluster+"-api")
		err = a.pending(ctx, lbID, func() error {
			switch r.Kind {
			case diff.KindListener:
				return listeners.Delete(ctx, a.c.LoadBalancer, id).ExtractErr()
			case diff.KindPool:
				return pools.Delete(ctx, a.c.LoadBalancer, id).ExtractErr()
			case diff.KindMember:
				return pools.DeleteMember(ctx, a.c.LoadBalancer, a.ID(diff.KindPool, r.Attrs["pool"].Value), id).ExtractErr()
			default:
				return monitors.Delete(ctx, a.c.LoadBalancer, id).ExtractErr()
			}
		})
		if err == nil && lbID != "" {
			err = a.waitLB(ctx, lbID)
		}
	default:
		err = fmt.Errorf("%w: delete of a %s", errors.ErrUnsupported, r.Kind)
	}
	if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return fmt.Errorf("delete %s: %w", r.Address(), err)
	}
	a.setID(r.Kind, r.Name, "")
	return nil
}

// waitServerGone waits until a deleted server is gone, so its port and
// name are free for a replacement.
func (a *Applier) waitServerGone(ctx context.Context, id string) error {
	for {
		s, err := servers.Get(ctx, a.c.Compute, id).Extract()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) || (err == nil && s.Status == "DELETED") {
			return nil
		}
		if err != nil {
			return err
		}
		if err := Sleep(ctx, a.LBWait); err != nil {
			return err
		}
	}
}

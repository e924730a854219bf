package cloud

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
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
	tags    []string

	mu       sync.Mutex
	ids      map[string]string // address -> id
	external map[string]string // external network name -> id
	images   map[string]string
	flavors  map[string]string
	// LBWait is how often a pending load balancer is polled.
	LBWait time.Duration
}

// NewApplier returns the applier of cluster, knowing the ids of the
// resources observed.
func NewApplier(c *Clients, owner, cluster string, observed []diff.Resource) *Applier {
	a := &Applier{c: c, cluster: cluster, tags: []string{Tag(schemas.TagCluster, cluster), Tag(schemas.TagOwner, owner)},
		ids: map[string]string{}, LBWait: 100 * time.Millisecond}
	for _, r := range observed {
		a.ids[r.Address()] = r.ID
	}
	return a
}

// ID returns the id of the cluster's resource at address, if known.
func (a *Applier) ID(kind diff.Kind, name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[diff.Resource{Kind: kind, Name: name}.Address()]
}

func (a *Applier) setID(kind diff.Kind, name, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[diff.Resource{Kind: kind, Name: name}.Address()] = id
}

// need returns the id of a resource a create refers to, or an error.
func (a *Applier) need(kind diff.Kind, name string) (string, error) {
	if id := a.ID(kind, name); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("%s %s: %w", kind, name, errMissingDependency)
}

var errMissingDependency = errors.New("not created yet")

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
		return a.neutron(ctx, "networks", r.Name, func() (string, error) {
			n, err := networks.Create(ctx, a.c.Network, networks.CreateOpts{Name: r.Name}).Extract()
			return idOf(n, err, func() string { return n.ID })
		}, func(p pagination.Page) ([]tagged, error) {
			l, err := networks.ExtractNetworks(p)
			return mapTagged(l, func(n networks.Network) tagged { return tagged{n.ID, n.Tags} }), err
		}, networks.List(a.c.Network, networks.ListOpts{Name: r.Name}))
	case diff.KindSubnet:
		netID, err := a.need(diff.KindNetwork, v("network"))
		if err != nil {
			return "", err
		}
		var dns []string
		if d := v("dns_nameservers"); d != "" {
			dns = strings.Split(d, ",")
		}
		return a.neutron(ctx, "subnets", r.Name, func() (string, error) {
			s, err := subnets.Create(ctx, a.c.Network, subnets.CreateOpts{Name: r.Name, NetworkID: netID, CIDR: v("cidr"), IPVersion: 4, DNSNameservers: dns}).Extract()
			return idOf(s, err, func() string { return s.ID })
		}, func(p pagination.Page) ([]tagged, error) {
			l, err := subnets.ExtractSubnets(p)
			return mapTagged(l, func(s subnets.Subnet) tagged { return tagged{s.ID, s.Tags} }), err
		}, subnets.List(a.c.Network, subnets.ListOpts{Name: r.Name, NetworkID: netID}))
	case diff.KindRouter:
		ext, err := a.externalNetwork(ctx, v("external_network"))
		if err != nil {
			return "", err
		}
		return a.neutron(ctx, "routers", r.Name, func() (string, error) {
			rt, err := routers.Create(ctx, a.c.Network, routers.CreateOpts{Name: r.Name, GatewayInfo: &routers.GatewayInfo{NetworkID: ext}}).Extract()
			return idOf(rt, err, func() string { return rt.ID })
		}, func(p pagination.Page) ([]tagged, error) {
			l, err := routers.ExtractRouters(p)
			return mapTagged(l, func(r routers.Router) tagged { return tagged{r.ID, r.Tags} }), err
		}, routers.List(a.c.Network, routers.ListOpts{Name: r.Name}))
	case diff.KindInterface:
		return a.routerInterface(ctx, v("router"), v("subnet"))
	case diff.KindSecurityGroup:
		return a.neutron(ctx, "security-groups", r.Name, func() (string, error) {
			g, err := groups.Create(ctx, a.c.Network, groups.CreateOpts{Name: r.Name}).Extract()
			return idOf(g, err, func() string { return g.ID })
		}, func(p pagination.Page) ([]tagged, error) {
			l, err := groups.ExtractGroups(p)
			return mapTagged(l, func(g groups.SecGroup) tagged { return tagged{g.ID, g.Tags} }), err
		}, groups.List(a.c.Network, groups.ListOpts{Name: r.Name}))
	case diff.KindRule:
		return a.rule(ctx, r)
	case diff.KindServerGroup:
		return a.serverGroup(ctx, r)
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

// tagged is a found resource's id and tags.
type tagged struct {
	id   string
	tags []string
}

func mapTagged[T any](l []T, f func(T) tagged) []tagged {
	out := make([]tagged, 0, len(l))
	for _, x := range l {
		out = append(out, f(x))
	}
	return out
}

func idOf[T any](x *T, err error, id func() string) (string, error) {
	if err != nil {
		return "", err
	}
	return id(), nil
}

// adopt picks, among resources found by name, the one to adopt: OPKE's
// for this cluster, or an untagged one (a create whose tagging was lost).
// It refuses one another installation owns.
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

// neutron creates a Neutron resource unless one of its name exists, and
// tags it (Neutron takes tags after the create).
func (a *Applier) neutron(ctx context.Context, kind, name string, create func() (string, error),
	extract func(pagination.Page) ([]tagged, error), list pagination.Pager) (string, error) {
	var found []tagged
	err := list.EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := extract(p)
		found = append(found, l...)
		return true, err
	})
	if err != nil {
		return "", fmt.Errorf("look for %s: %w", name, err)
	}
	f, ok, err := a.adopt(found)
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
			return "", fmt.Errorf("tag %s: %w", name, err)
		}
	}
	return id, nil
}

func (a *Applier) externalNetwork(ctx context.Context, name string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.external == nil {
		yes := true
		a.external = map[string]string{}
		err := networks.List(a.c.Network, external.ListOptsExt{ListOptsBuilder: networks.ListOpts{}, External: &yes}).EachPage(ctx,
			func(_ context.Context, p pagination.Page) (bool, error) {
				l, err := networks.ExtractNetworks(p)
				for _, n := range l {
					a.external[n.Name] = n.ID
				}
				return true, err
			})
		if err != nil {
			a.external = nil
			return "", fmt.Errorf("external networks: %w", err)
		}
	}
	if id, ok := a.external[name]; ok {
		return id, nil
	}
	return "", fmt.Errorf("external network %q: not found", name)
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
	var existing string
	err = ports.List(a.c.Network, ports.ListOpts{DeviceID: rid}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := ports.ExtractPorts(p)
		for _, port := range l {
			for _, ip := range port.FixedIPs {
				if ip.SubnetID == sid {
					existing = port.ID
				}
			}
		}
		return true, err
	})
	if err != nil || existing != "" {
		return existing, err
	}
	res, err := routers.AddInterface(ctx, a.c.Network, rid, routers.AddInterfaceOpts{SubnetID: sid}).Extract()
	if err != nil {
		return "", err
	}
	return res.PortID, nil
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
	if p, err := strconv.Atoi(v("ports")); err == nil {
		opts.PortRangeMin, opts.PortRangeMax = p, p
	}
	if g, ok := strings.CutPrefix(v("remote"), "group:"); ok {
		if opts.RemoteGroupID, err = a.need(diff.KindSecurityGroup, g); err != nil {
			return "", err
		}
	} else {
		opts.RemoteIPPrefix = v("remote")
	}
	var existing string
	err = rules.List(a.c.Network, rules.ListOpts{SecGroupID: sg, Direction: string(rules.DirIngress)}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := rules.ExtractRules(p)
		for _, x := range l {
			if x.Protocol == string(opts.Protocol) && x.PortRangeMin == opts.PortRangeMin && x.PortRangeMax == opts.PortRangeMax &&
				x.RemoteGroupID == opts.RemoteGroupID && x.RemoteIPPrefix == opts.RemoteIPPrefix && x.EtherType == string(rules.EtherType4) {
				existing = x.ID
			}
		}
		return true, err
	})
	if err != nil || existing != "" {
		return existing, err
	}
	rule, err := rules.Create(ctx, a.c.Network, opts).Extract()
	return idOf(rule, err, func() string { return rule.ID })
}

func (a *Applier) serverGroup(ctx context.Context, r diff.Resource) (string, error) {
	var existing string
	err := servergroups.List(a.c.Compute, nil).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := servergroups.ExtractServerGroups(p)
		for _, g := range l {
			if g.Name == r.Name {
				existing = g.ID
			}
		}
		return true, err
	})
	if err != nil || existing != "" {
		return existing, err
	}
	g, err := servergroups.Create(ctx, a.c.Compute, servergroups.CreateOpts{Name: r.Name, Policy: r.Attrs["policy"].Value}).Extract()
	return idOf(g, err, func() string { return g.ID })
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
	return a.neutron(ctx, "ports", r.Name, func() (string, error) {
		p, err := ports.Create(ctx, a.c.Network, opts).Extract()
		return idOf(p, err, func() string { return p.ID })
	}, func(p pagination.Page) ([]tagged, error) {
		l, err := ports.ExtractPorts(p)
		return mapTagged(l, func(p ports.Port) tagged { return tagged{p.ID, p.Tags} }), err
	}, ports.List(a.c.Network, ports.ListOpts{Name: r.Name, NetworkID: netID}))
}

func (a *Applier) lookupName(ctx context.Context, cache *map[string]string, what string, list func(context.Context) (map[string]string, error), name string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
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

func (a *Applier) server(ctx context.Context, r diff.Resource, userData []byte) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	// Nova takes tags at create: one found by name and OPKE's tags is the
	// one an earlier attempt made.
	var found []tagged
	err := servers.List(a.c.Compute, servers.ListOpts{Name: "^" + r.Name + "$", Tags: strings.Join(a.tags, ",")}).EachPage(ctx,
		func(_ context.Context, p pagination.Page) (bool, error) {
			l, err := servers.ExtractServers(p)
			for _, s := range l {
				if s.Name == r.Name && s.Status != "DELETED" {
					found = append(found, tagged{id: s.ID})
				}
			}
			return true, err
		})
	if err != nil {
		return "", fmt.Errorf("look for %s: %w", r.Name, err)
	}
	if len(found) > 0 {
		return found[0].id, nil
	}
	portID, err := a.need(diff.KindPort, v("port"))
	if err != nil {
		return "", err
	}
	flavor, err := a.lookupName(ctx, &a.flavors, "flavor", a.listFlavors, v("flavor"))
	if err != nil {
		return "", err
	}
	image, err := a.lookupName(ctx, &a.images, "image", a.listImages, v("image"))
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
	s, err := servers.Create(ctx, a.c.Compute, builder, hints).Extract()
	return idOf(s, err, func() string { return s.ID })
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

func (a *Applier) listFlavors(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := flavors.ListDetail(a.c.Compute, nil).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := flavors.ExtractFlavors(p)
		for _, f := range l {
			out[f.Name] = f.ID
		}
		return true, err
	})
	return out, err
}

func (a *Applier) listImages(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := images.List(a.c.Image, nil).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := images.ExtractImages(p)
		for _, i := range l {
			out[i.Name] = i.ID
		}
		return true, err
	})
	return out, err
}

func (a *Applier) floatingIP(ctx context.Context, r diff.Resource) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	ext, err := a.externalNetwork(ctx, v("network"))
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
	return a.neutron(ctx, "floatingips", r.Name, func() (string, error) {
		f, err := floatingips.Create(ctx, a.c.Network, floatingips.CreateOpts{FloatingNetworkID: ext, PortID: portID, Description: r.Name}).Extract()
		return idOf(f, err, func() string { return f.ID })
	}, func(p pagination.Page) ([]tagged, error) {
		l, err := floatingips.ExtractFloatingIPs(p)
		return mapTagged(l, func(f floatingips.FloatingIP) tagged { return tagged{f.ID, f.Tags} }), err
	}, floatingips.List(a.c.Network, floatingips.ListOpts{Description: r.Name, PortID: portID}))
}

// octavia creates a load balancer or one of its children, waiting out the
// load balancer's PENDING states before and after.
func (a *Applier) octavia(ctx context.Context, r diff.Resource) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	num := func(k string) int { n, _ := strconv.Atoi(v(k)); return n }
	if r.Kind == diff.KindLoadBalancer {
		var found []tagged
		err := loadbalancers.List(a.c.LoadBalancer, loadbalancers.ListOpts{Name: r.Name}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			l, err := loadbalancers.ExtractLoadBalancers(p)
			found = append(found, mapTagged(l, func(lb loadbalancers.LoadBalancer) tagged { return tagged{lb.ID, lb.Tags} })...)
			return true, err
		})
		if err != nil {
			return "", err
		}
		f, ok, err := a.adopt(found)
		if err != nil {
			return "", err
		}
		id := f.id
		if !ok {
			sid, err := a.need(diff.KindSubnet, v("subnet"))
			if err != nil {
				return "", err
			}
			lb, err := loadbalancers.Create(ctx, a.c.LoadBalancer, loadbalancers.CreateOpts{Name: r.Name, VipSubnetID: sid,
				VipAddress: v("vip_address"), Tags: a.tags}).Extract()
			if err != nil {
				return "", err
			}
			id = lb.ID
		}
		return id, a.waitLB(ctx, id)
	}
	lbName := a.cluster + "-api"
	lbID, err := a.need(diff.KindLoadBalancer, lbName)
	if err != nil {
		return "", err
	}
	if err := a.waitLB(ctx, lbID); err != nil {
		return "", err
	}
	var id string
	err = a.pending(ctx, lbID, func() error {
		var err error
		switch r.Kind {
		case diff.KindListener:
			id, err = findOrCreate(ctx, listeners.List(a.c.LoadBalancer, listeners.ListOpts{Name: r.Name}),
				func(p pagination.Page) ([]string, error) {
					l, err := listeners.ExtractListeners(p)
					return mapIDs(l, func(x listeners.Listener) string { return x.ID }), err
				}, func() (string, error) {
					l, err := listeners.Create(ctx, a.c.LoadBalancer, listeners.CreateOpts{Name: r.Name, LoadbalancerID: lbID,
						Protocol: listeners.Protocol(v("protocol")), ProtocolPort: num("port"), Tags: a.tags}).Extract()
					return idOf(l, err, func() string { return l.ID })
				})
		case diff.KindPool:
			lid, err2 := a.need(diff.KindListener, v("listener"))
			if err2 != nil {
				return err2
			}
			id, err = findOrCreate(ctx, pools.List(a.c.LoadBalancer, pools.ListOpts{Name: r.Name}),
				func(p pagination.Page) ([]string, error) {
					l, err := pools.ExtractPools(p)
					return mapIDs(l, func(x pools.Pool) string { return x.ID }), err
				}, func() (string, error) {
					p, err := pools.Create(ctx, a.c.LoadBalancer, pools.CreateOpts{Name: r.Name, ListenerID: lid,
						Protocol: pools.Protocol(v("protocol")), LBMethod: pools.LBMethod(v("algorithm")), Tags: a.tags}).Extract()
					return idOf(p, err, func() string { return p.ID })
				})
		case diff.KindMember:
			pid, err2 := a.need(diff.KindPool, v("pool"))
			if err2 != nil {
				return err2
			}
			sid, err2 := a.need(diff.KindSubnet, a.cluster)
			if err2 != nil {
				return err2
			}
			id, err = findOrCreate(ctx, pools.ListMembers(a.c.LoadBalancer, pid, pools.ListMembersOpts{Name: r.Name}),
				func(p pagination.Page) ([]string, error) {
					l, err := pools.ExtractMembers(p)
					return mapIDs(l, func(x pools.Member) string { return x.ID }), err
				}, func() (string, error) {
					m, err := pools.CreateMember(ctx, a.c.LoadBalancer, pid, pools.CreateMemberOpts{Name: r.Name, Address: v("address"),
						ProtocolPort: num("port"), SubnetID: sid, Tags: a.tags}).Extract()
					return idOf(m, err, func() string { return m.ID })
				})
		case diff.KindMonitor:
			pid, err2 := a.need(diff.KindPool, v("pool"))
			if err2 != nil {
				return err2
			}
			id, err = findOrCreate(ctx, monitors.List(a.c.LoadBalancer, monitors.ListOpts{Name: r.Name}),
				func(p pagination.Page) ([]string, error) {
					l, err := monitors.ExtractMonitors(p)
					return mapIDs(l, func(x monitors.Monitor) string { return x.ID }), err
				}, func() (string, error) {
					m, err := monitors.Create(ctx, a.c.LoadBalancer, monitors.CreateOpts{Name: r.Name, PoolID: pid, Type: v("type"),
						Delay: num("delay"), Timeout: num("timeout"), MaxRetries: num("max_retries"), Tags: a.tags}).Extract()
					return idOf(m, err, func() string { return m.ID })
				})
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return id, a.waitLB(ctx, lbID)
}

func mapIDs[T any](l []T, f func(T) string) []string {
	out := make([]string, 0, len(l))
	for _, x := range l {
		out = append(out, f(x))
	}
	return out
}

// findOrCreate returns the first id list finds, or creates.
func findOrCreate(ctx context.Context, list pagination.Pager, extract func(pagination.Page) ([]string, error), create func() (string, error)) (string, error) {
	var found []string
	err := list.EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := extract(p)
		found = append(found, l...)
		return true, err
	})
	if err != nil {
		return "", err
	}
	if len(found) > 0 {
		return found[0], nil
	}
	return create()
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
		if err := sleep(ctx, a.LBWait); err != nil {
			return err
		}
	}
}

// Update changes r's updatable attributes in place: a port's security
// groups, a subnet's DNS nameservers.
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
		if err := sleep(ctx, a.LBWait); err != nil {
			return err
		}
	}
}

package cloud

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/applicationcredentials"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/diff"
	"opke.dev/opke/schemas"
)

// MetaUserData is the server metadata key holding the sha256 of the
// server's user_data: Nova does not show user_data to its owner.
const MetaUserData = "opke-user-data"

// pageSize is the page OPKE asks for; larger listings take more pages.
var pageSize = 1000

// Tag returns the tag key=value OPKE puts on resources.
func Tag(key, value string) string { return key + "=" + value }

// Observation is what a cloud holds for OPKE, by cluster.
type Observation struct {
	Clusters map[string][]diff.Resource
	// Members resolves load balancer member ids to the members, for the
	// next observation (the state store keeps it).
	Members map[string]diff.Resource
}

// Observe lists what OPKE owns in the cloud (resources tagged
// opke-owner=owner), each type once. known resolves member ids from a
// previous observation; nil costs a call per pool.
func Observe(ctx context.Context, c *Clients, owner string, known map[string]diff.Resource) (*Observation, error) {
	return ObserveCluster(ctx, c, owner, "", known)
}

// ObserveCluster lists what OPKE owns of one cluster (of all, if cluster
// is empty): the listings are filtered by its tag as well, so their cost
// does not grow with the fleet (the untagged server groups and health
// monitors aside).
func ObserveCluster(ctx context.Context, c *Clients, owner, cluster string, known map[string]diff.Resource) (*Observation, error) {
	o := &observer{c: c, owner: owner, only: cluster, tags: []string{Tag(schemas.TagOwner, owner)},
		out:   &Observation{Clusters: map[string][]diff.Resource{}, Members: map[string]diff.Resource{}},
		names: map[string]string{}, cluster: map[string]string{}}
	if cluster != "" {
		o.tags = append(o.tags, Tag(schemas.TagCluster, cluster))
	}
	steps := []func(context.Context) error{o.appCredentials, o.networks, o.subnets, o.securityGroups, o.routers, o.ports, o.images, o.servers,
		o.loadBalancers, o.floatingIPs, o.listeners}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	if err := o.pools(ctx, known); err != nil {
		return nil, err
	}
	if err := o.monitors(ctx); err != nil {
		return nil, err
	}
	for _, rs := range o.out.Clusters {
		slices.SortFunc(rs, func(a, b diff.Resource) int { return a.Address().Compare(b.Address()) })
	}
	return o.out, nil
}

type observer struct {
	c     *Clients
	owner string
	// only is the one cluster observed, if set; tags are the tags every
	// listing filters by (all of them).
	only    string
	tags    []string
	out     *Observation
	names   map[string]string // id -> name, for references
	cluster map[string]string // id -> cluster
	// what later steps look up
	portOfDevice map[string]string // server or lb id -> port name
	vipPort      map[string]string // port id -> load balancer name
}

// clusterOf reads the opke-cluster tag.
func clusterOf(tags []string) string {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, schemas.TagCluster+"="); ok {
			return v
		}
	}
	return ""
}

// tagFilter is the tags filter of Nova's and Neutron's listings.
func (o *observer) tagFilter() string { return strings.Join(o.tags, ",") }

func (o *observer) add(cluster string, r diff.Resource) {
	if cluster == "" || o.only != "" && cluster != o.only {
		return
	}
	o.names[r.ID] = r.Name
	o.cluster[r.ID] = cluster
	o.out.Clusters[cluster] = append(o.out.Clusters[cluster], r)
}

// appCredentials lists the user's application credentials: Keystone has
// no tags, so the name says the installation and the cluster.
func (o *observer) appCredentials(ctx context.Context) error {
	user, err := o.c.UserID()
	if err != nil {
		return err
	}
	prefix := AppCredentialName(o.owner, "")
	return each(ctx, "application credentials", applicationcredentials.List(o.c.Identity, user, applicationcredentials.ListOpts{}), func(p pagination.Page) error {
		acs, err := applicationcredentials.ExtractApplicationCredentials(p)
		for _, ac := range acs {
			if cluster, ok := strings.CutPrefix(ac.Name, prefix); ok && cluster != "" {
				o.add(cluster, diff.Resource{Kind: diff.KindAppCredential, Name: cluster, ID: ac.ID, Attrs: diff.Attrs{}})
			}
		}
		return err
	})
}

// list pages through the listing at url, whose pages hold the items
// under key and the next page's link under key+"_links" (Nova, Neutron,
// Octavia), and gives fn each page's items decoded into T. gophercloud's
// pagers decode a page into interface{}, then its Extract functions
// encode it and decode it again: at fleet scale those three passes over
// the servers, ports and security groups were most of a plan's time.
func list[T any](ctx context.Context, what string, client *gophercloud.ServiceClient, url, key string, fn func([]T)) error {
	for url != "" {
		var page map[string]json.RawMessage
		if _, err := client.Get(ctx, url, &page, &gophercloud.RequestOpts{OkCodes: []int{http.StatusOK}}); err != nil {
			return fmt.Errorf("list %s: %w", what, err)
		}
		var items []T
		if err := json.Unmarshal(page[key], &items); err != nil {
			return fmt.Errorf("list %s: %w", what, err)
		}
		fn(items)
		var links []struct {
			Href string `json:"href"`
			Rel  string `json:"rel"`
		}
		if raw, ok := page[key+"_links"]; ok {
			if err := json.Unmarshal(raw, &links); err != nil {
				return fmt.Errorf("list %s: links: %w", what, err)
			}
		}
		url = ""
		for _, l := range links {
			if l.Rel == "next" && len(items) > 0 {
				url = l.Href
			}
		}
	}
	return nil
}

// query is a listing's query string from its gophercloud options.
func query(opts any) (string, error) {
	q, err := gophercloud.BuildQueryString(opts)
	if err != nil {
		return "", err
	}
	return q.String(), nil
}

// each pages through a listing.
func each(ctx context.Context, what string, p pagination.Pager, fn func(pagination.Page) error) error {
	err := p.EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		return true, fn(page)
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", what, err)
	}
	return nil
}

func (o *observer) networks(ctx context.Context) error {
	err := each(ctx, "networks", networks.List(o.c.Network, networks.ListOpts{Tags: o.tagFilter(), Limit: pageSize}), func(p pagination.Page) error {
		list, err := networks.ExtractNetworks(p)
		for _, n := range list {
			o.add(clusterOf(n.Tags), diff.Resource{Kind: diff.KindNetwork, Name: n.Name, ID: n.ID, Attrs: diff.Attrs{}})
		}
		return err
	})
	if err != nil {
		return err
	}
	// External networks are not OPKE's: their names, for references.
	ext := true
	return each(ctx, "external networks", networks.List(o.c.Network, external.ListOptsExt{ListOptsBuilder: networks.ListOpts{Limit: pageSize}, External: &ext}),
		func(p pagination.Page) error {
			list, err := networks.ExtractNetworks(p)
			for _, n := range list {
				o.names[n.ID] = n.Name
			}
			return err
		})
}

func (o *observer) subnets(ctx context.Context) error {
	return each(ctx, "subnets", subnets.List(o.c.Network, subnets.ListOpts{Tags: o.tagFilter(), Limit: pageSize}), func(p pagination.Page) error {
		list, err := subnets.ExtractSubnets(p)
		for _, s := range list {
			dns := slices.Clone(s.DNSNameservers)
			slices.Sort(dns)
			o.add(clusterOf(s.Tags), diff.Resource{Kind: diff.KindSubnet, Name: s.Name, ID: s.ID, Attrs: diff.Attrs{
				"network": diff.Known(o.names[s.NetworkID]), "cidr": diff.Known(s.CIDR), "dns_nameservers": diff.Known(strings.Join(dns, ","))}})
		}
		return err
	})
}

func (o *observer) securityGroups(ctx context.Context) error {
	var all []groups.SecGroup
	q, err := query(&groups.ListOpts{Tags: o.tagFilter(), Limit: pageSize})
	if err != nil {
		return err
	}
	if err := list(ctx, "security groups", o.c.Network, o.c.Network.ServiceURL("security-groups")+q, "security_groups",
		func(l []groups.SecGroup) { all = append(all, l...) }); err != nil {
		return err
	}
	for _, g := range all {
		o.add(clusterOf(g.Tags), diff.Resource{Kind: diff.KindSecurityGroup, Name: g.Name, ID: g.ID, Attrs: diff.Attrs{}})
	}
	// Rules come with their group; OPKE manages the ingress ones.
	for _, g := range all {
		for _, r := range g.Rules {
			if r.Direction != "ingress" {
				continue
			}
			proto, ports, remote := r.Protocol, "any", r.RemoteIPPrefix
			if proto == "" {
				proto = "any"
			}
			switch {
			case r.PortRangeMin > 0 && r.PortRangeMin == r.PortRangeMax:
				ports = strconv.Itoa(r.PortRangeMin)
			case r.PortRangeMin > 0:
				ports = fmt.Sprintf("%d-%d", r.PortRangeMin, r.PortRangeMax)
			}
			if r.RemoteGroupID != "" {
				remote = "group:" + o.names[r.RemoteGroupID]
			}
			if remote == "" {
				remote = "any"
			}
			name := fmt.Sprintf("%s/ingress-%s-%s-%s", g.Name, proto, ports, strings.ReplaceAll(remote, "/", "_"))
			o.add(o.cluster[g.ID], diff.Resource{Kind: diff.KindRule, Name: name, ID: r.ID, Attrs: diff.Attrs{"security_group": diff.Known(g.Name),
				"direction": diff.Known("ingress"), "protocol": diff.Known(proto), "ports": diff.Known(ports), "remote": diff.Known(remote)}})
		}
	}
	return nil
}

func (o *observer) routers(ctx context.Context) error {
	err := each(ctx, "routers", routers.List(o.c.Network, routers.ListOpts{Tags: o.tagFilter(), Limit: pageSize}), func(p pagination.Page) error {
		list, err := routers.ExtractRouters(p)
		for _, r := range list {
			o.add(clusterOf(r.Tags), diff.Resource{Kind: diff.KindRouter, Name: r.Name, ID: r.ID, Attrs: diff.Attrs{
				"external_network": diff.Known(o.names[r.GatewayInfo.NetworkID])}})
		}
		return err
	})
	if err != nil {
		return err
	}
	// Interfaces are Neutron's ports on the routers: one listing of them.
	return each(ctx, "router interfaces", ports.List(o.c.Network, ports.ListOpts{DeviceOwner: "network:router_interface", Limit: pageSize}),
		func(p pagination.Page) error {
			list, err := ports.ExtractPorts(p)
			for _, port := range list {
				cl := o.cluster[port.DeviceID]
				if cl == "" || len(port.FixedIPs) == 0 {
					continue
				}
				router := o.names[port.DeviceID]
				o.add(cl, diff.Resource{Kind: diff.KindInterface, Name: router, ID: port.ID, Attrs: diff.Attrs{
					"router": diff.Known(router), "subnet": diff.Known(o.names[port.FixedIPs[0].SubnetID])}})
			}
			return err
		})
}

func (o *observer) ports(ctx context.Context) error {
	o.portOfDevice = map[string]string{}
	q, err := query(&ports.ListOpts{Tags: o.tagFilter(), Limit: pageSize})
	if err != nil {
		return err
	}
	return list(ctx, "ports", o.c.Network, o.c.Network.ServiceURL("ports")+q, "ports", func(l []ports.Port) {
		for _, port := range l {
			var sgs []string
			for _, id := range port.SecurityGroups {
				sgs = append(sgs, o.names[id])
			}
			slices.Sort(sgs)
			ip := ""
			if len(port.FixedIPs) > 0 {
				ip = port.FixedIPs[0].IPAddress
			}
			if port.DeviceID != "" {
				o.portOfDevice[port.DeviceID] = port.Name
			}
			o.add(clusterOf(port.Tags), diff.Resource{Kind: diff.KindPort, Name: port.Name, ID: port.ID, Attrs: diff.Attrs{
				"network": diff.Known(o.names[port.NetworkID]), "security_groups": diff.Known(strings.Join(sgs, ",")), "fixed_ip": diff.Known(ip)}})
		}
	})
}

func (o *observer) images(ctx context.Context) error {
	return each(ctx, "images", images.List(o.c.Image, images.ListOpts{Limit: pageSize}), func(p pagination.Page) error {
		list, err := images.ExtractImages(p)
		for _, img := range list {
			o.names[img.ID] = img.Name
		}
		return err
	})
}

// novaServer is the part of a server (microversion 2.79) OPKE compares.
type novaServer struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Status   string            `json:"status"`
	Tags     []string          `json:"tags"`
	Metadata map[string]string `json:"metadata"`
	KeyName  string            `json:"key_name"`
	AZ       string            `json:"OS-EXT-AZ:availability_zone"`
	Flavor   struct {
		Name string `json:"original_name"`
	} `json:"flavor"`
	Image any `json:"image"`
}

func (o *observer) servers(ctx context.Context) error {
	group := map[string]string{} // server id -> server group name
	// Server groups carry no tags: a cluster's is known by its name, and
	// kept once the cluster has tagged servers in this cloud.
	var groupsOf []diff.Resource
	var groupCluster []string
	err := each(ctx, "server groups", servergroups.List(o.c.Compute, servergroups.ListOpts{Limit: pageSize}), func(p pagination.Page) error {
		list, err := servergroups.ExtractServerGroups(p)
		for _, g := range list {
			for _, m := range g.Members {
				group[m] = g.Name
			}
			cl, ok := strings.CutSuffix(g.Name, "-controllers")
			if !ok {
				continue
			}
			policy := ""
			if g.Policy != nil {
				policy = *g.Policy
			} else if len(g.Policies) > 0 {
				policy = g.Policies[0]
			}
			groupsOf = append(groupsOf, diff.Resource{Kind: diff.KindServerGroup, Name: g.Name, ID: g.ID,
				Attrs: diff.Attrs{"policy": diff.Known(policy)}})
			groupCluster = append(groupCluster, cl)
		}
		return err
	})
	if err != nil {
		return err
	}
	q, err := query(&servers.ListOpts{Tags: o.tagFilter(), Limit: pageSize})
	if err != nil {
		return err
	}
	err = list(ctx, "servers", o.c.Compute, o.c.Compute.ServiceURL("servers", "detail")+q, "servers", func(l []novaServer) {
		for _, s := range l {
			attrs := diff.Attrs{"flavor": diff.Known(s.Flavor.Name), "port": diff.Known(o.portOfDevice[s.ID]),
				"user_data": diff.Known(s.Metadata[MetaUserData]), "availability_zone": diff.Known(s.AZ), "key_name": diff.Known(s.KeyName)}
			if img, ok := s.Image.(map[string]any); ok {
				id, _ := img["id"].(string)
				attrs["image"] = diff.Known(o.names[id])
			}
			if g := group[s.ID]; g != "" {
				attrs["server_group"] = diff.Known(g)
			}
			o.add(clusterOf(s.Tags), diff.Resource{Kind: diff.KindServer, Name: s.Name, ID: s.ID, Attrs: attrs})
		}
	})
	if err != nil {
		return err
	}
	for i, g := range groupsOf {
		if _, ok := o.out.Clusters[groupCluster[i]]; ok {
			o.add(groupCluster[i], g)
		}
	}
	return nil
}

func (o *observer) loadBalancers(ctx context.Context) error {
	o.vipPort = map[string]string{}
	err := each(ctx, "load balancers", loadbalancers.List(o.c.LoadBalancer, loadbalancers.ListOpts{Tags: o.tags, Limit: pageSize}),
		func(p pagination.Page) error {
			list, err := loadbalancers.ExtractLoadBalancers(p)
			for _, lb := range list {
				o.vipPort[lb.VipPortID] = lb.Name
				o.add(clusterOf(lb.Tags), diff.Resource{Kind: diff.KindLoadBalancer, Name: lb.Name, ID: lb.ID, Attrs: diff.Attrs{
					"subnet": diff.Known(o.names[lb.VipSubnetID]), "vip_address": diff.Known(lb.VipAddress)}})
			}
			return err
		})
	return err
}

// floatingIPs runs after the load balancers: a floating IP names the port
// it is on, or the load balancer whose VIP port that is. Floating IPs have
// no name: their description is OPKE's name.
func (o *observer) floatingIPs(ctx context.Context) error {
	return each(ctx, "floating IPs", floatingips.List(o.c.Network, floatingips.ListOpts{Tags: o.tagFilter()}), func(p pagination.Page) error {
		list, err := floatingips.ExtractFloatingIPs(p)
		for _, f := range list {
			attrs := diff.Attrs{"network": diff.Known(o.names[f.FloatingNetworkID]), "address": diff.Known(f.FloatingIP)}
			if lb, ok := o.vipPort[f.PortID]; ok {
				attrs["load_balancer"] = diff.Known(lb)
			} else if f.PortID != "" {
				attrs["port"] = diff.Known(o.names[f.PortID])
			}
			o.add(clusterOf(f.Tags), diff.Resource{Kind: diff.KindFloatingIP, Name: f.Description, ID: f.ID, Attrs: attrs})
		}
		return err
	})
}

func (o *observer) listeners(ctx context.Context) error {
	return each(ctx, "listeners", listeners.List(o.c.LoadBalancer, listeners.ListOpts{Tags: o.tags, Limit: pageSize}),
		func(p pagination.Page) error {
			list, err := listeners.ExtractListeners(p)
			for _, l := range list {
				if len(l.Loadbalancers) == 0 {
					continue
				}
				o.add(clusterOf(l.Tags), diff.Resource{Kind: diff.KindListener, Name: l.Name, ID: l.ID, Attrs: diff.Attrs{
					"load_balancer": diff.Known(o.names[l.Loadbalancers[0].ID]), "protocol": diff.Known(l.Protocol), "port": diff.Known(strconv.Itoa(l.ProtocolPort)),
					"timeout_client_data": diff.Known(strconv.Itoa(l.TimeoutClientData)), "timeout_member_data": diff.Known(strconv.Itoa(l.TimeoutMemberData))}})
			}
			return err
		})
}

func (o *observer) pools(ctx context.Context, known map[string]diff.Resource) error {
	var all []pools.Pool
	err := each(ctx, "pools", pools.List(o.c.LoadBalancer, pools.ListOpts{Tags: o.tags, Limit: pageSize}), func(p pagination.Page) error {
		list, err := pools.ExtractPools(p)
		all = append(all, list...)
		return err
	})
	if err != nil {
		return err
	}
	for _, pool := range all {
		cl := clusterOf(pool.Tags)
		listener := ""
		if len(pool.Listeners) > 0 {
			listener = o.names[pool.Listeners[0].ID]
		}
		o.add(cl, diff.Resource{Kind: diff.KindPool, Name: pool.Name, ID: pool.ID, Attrs: diff.Attrs{
			"listener": diff.Known(listener), "protocol": diff.Known(pool.Protocol), "algorithm": diff.Known(pool.LBMethod)}})
		resolved := true
		for _, m := range pool.Members {
			if _, ok := known[m.ID]; !ok {
				resolved = false
			}
		}
		if resolved {
			for _, m := range pool.Members {
				o.add(cl, known[m.ID])
				o.out.Members[m.ID] = known[m.ID]
			}
			continue
		}
		err := each(ctx, "members of "+pool.Name, pools.ListMembers(o.c.LoadBalancer, pool.ID, pools.ListMembersOpts{Limit: pageSize}), func(p pagination.Page) error {
			list, err := pools.ExtractMembers(p)
			for _, m := range list {
				r := diff.Resource{Kind: diff.KindMember, Name: m.Name, ID: m.ID, Attrs: diff.Attrs{
					"pool": diff.Known(pool.Name), "address": diff.Known(m.Address), "port": diff.Known(strconv.Itoa(m.ProtocolPort))}}
				o.add(cl, r)
				o.out.Members[m.ID] = r
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (o *observer) monitors(ctx context.Context) error {
	return each(ctx, "health monitors", monitors.List(o.c.LoadBalancer, monitors.ListOpts{Limit: pageSize}), func(p pagination.Page) error {
		list, err := monitors.ExtractMonitors(p)
		for _, m := range list {
			if len(m.Pools) == 0 || o.cluster[m.Pools[0].ID] == "" {
				continue
			}
			o.add(o.cluster[m.Pools[0].ID], diff.Resource{Kind: diff.KindMonitor, Name: m.Name, ID: m.ID, Attrs: diff.Attrs{
				"pool": diff.Known(o.names[m.Pools[0].ID]), "type": diff.Known(m.Type), "delay": diff.Known(strconv.Itoa(m.Delay)),
				"timeout": diff.Known(strconv.Itoa(m.Timeout)), "max_retries": diff.Known(strconv.Itoa(m.MaxRetries))}})
		}
		return err
	})
}

package cloud

import (
	"context"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/diff"
)

// ServicePrefix begins the names the OpenStack cloud controller manager
// gives the load balancers it makes for a cluster's Services of type
// LoadBalancer: kube_service_<cluster>_<namespace>_<service> (OPKE runs it
// with --cluster-name set to the cluster's name; none of the three has an
// underscore).
func ServicePrefix(cluster string) string { return "kube_service_" + cluster + "_" }

// ServiceLoadBalancers lists what the cluster's cloud controller manager
// made for its Services: the load balancers named with ServicePrefix whose
// VIP is on the cluster's subnet (found in observed, the cluster's tagged
// resources; another installation's cluster of the same name has another
// subnet), and the floating IPs on their VIPs, each under its load
// balancer's name. OPKE does not tag them and never takes them for drift:
// a cluster deleted under deletionPolicy Delete deletes them before its
// subnet, which they would otherwise keep in use. Two listings, made only
// for a cluster being deleted.
func ServiceLoadBalancers(ctx context.Context, c *Clients, cluster string, observed []diff.Resource) ([]diff.Resource, error) {
	var subnet diff.Resource
	for _, r := range observed {
		if r.Kind == diff.KindSubnet && r.Name == cluster && r.ID != "" {
			subnet = r
		}
	}
	if subnet.ID == "" {
		return nil, nil // no subnet: nothing can be on it
	}
	var out []diff.Resource
	vips := map[string]string{} // VIP port id -> load balancer name
	err := each(ctx, "load balancers", loadbalancers.List(c.LoadBalancer, loadbalancers.ListOpts{VipSubnetID: subnet.ID, Limit: pageSize}),
		func(p pagination.Page) error {
			list, err := loadbalancers.ExtractLoadBalancers(p)
			for _, lb := range list {
				rest, ok := strings.CutPrefix(lb.Name, ServicePrefix(cluster))
				if !ok || lb.VipSubnetID != subnet.ID {
					continue
				}
				vips[lb.VipPortID] = lb.Name
				out = append(out, diff.Resource{Kind: diff.KindLoadBalancer, Name: lb.Name, ID: lb.ID, Attrs: diff.Attrs{
					"subnet": diff.Known(subnet.Name), "vip_address": diff.Known(lb.VipAddress),
					"made_by": diff.Known("cloud controller manager, Service " + strings.Replace(rest, "_", "/", 1))}})
			}
			return err
		})
	if err != nil || len(vips) == 0 {
		return out, err
	}
	err = each(ctx, "floating IPs", floatingips.List(c.Network, floatingips.ListOpts{}), func(p pagination.Page) error {
		list, err := floatingips.ExtractFloatingIPs(p)
		for _, f := range list {
			if name, ok := vips[f.PortID]; ok && f.PortID != "" {
				out = append(out, diff.Resource{Kind: diff.KindFloatingIP, Name: name, ID: f.ID, Attrs: diff.Attrs{
					"address": diff.Known(f.FloatingIP), "load_balancer": diff.Known(name), "made_by": diff.Known("cloud controller manager")}})
			}
		}
		return err
	})
	return out, err
}

// ServiceAddresses are the addresses of the load balancer named name (a
// Service's: ServicePrefix, its namespace and its name): its VIP and the
// floating IPs on its VIP port. A client that reaches a Service through
// the address its status gives checks it is one of these first: the
// status is the cluster's to write.
func ServiceAddresses(ctx context.Context, c *Clients, name string) ([]string, error) {
	var out, ports []string
	err := each(ctx, "load balancers", loadbalancers.List(c.LoadBalancer, loadbalancers.ListOpts{Name: name, Limit: pageSize}),
		func(p pagination.Page) error {
			list, err := loadbalancers.ExtractLoadBalancers(p)
			for _, lb := range list {
				if lb.Name == name {
					out, ports = append(out, lb.VipAddress), append(ports, lb.VipPortID)
				}
			}
			return err
		})
	if err != nil {
		return nil, err
	}
	for _, port := range ports {
		err := each(ctx, "floating IPs", floatingips.List(c.Network, floatingips.ListOpts{PortID: port}), func(p pagination.Page) error {
			list, err := floatingips.ExtractFloatingIPs(p)
			for _, f := range list {
				if f.PortID == port {
					out = append(out, f.FloatingIP)
				}
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

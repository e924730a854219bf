package cloud

import (
	"context"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"opke.dev/opke/diff"
)

// A floating IP: the gateway's, on its port, and the API's, on its load
// balancer's VIP port. Floating IPs have no name: their description is
// OPKE's name.
var floatingIPKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		return a.floatingIP(ctx, r)
	},
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		return floatingips.Delete(ctx, a.c.Network, id).ExtractErr()
	},
	observe: (*observer).floatingIPs,
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

// floatingIPs runs after the load balancers: a floating IP names the port
// it is on, or the load balancer whose VIP port that is. Floating IPs have
// no name: their description is OPKE's name.
func (o *observer) floatingIPs(ctx context.Context) error {
	return listOf(ctx, "floating IPs", o.c.Network, o.c.Network.ServiceURL("floatingips"), &floatingips.ListOpts{Tags: o.tagFilter(), Limit: pageSize}, "floatingips", func(l []floatingIPView) {
		for _, f := range l {
			attrs := diff.Attrs{"network": diff.Known(o.names[f.FloatingNetworkID]), "address": diff.Known(f.FloatingIP)}
			if lb, ok := o.vipPort[f.PortID]; ok {
				attrs["load_balancer"] = diff.Known(lb)
			} else if f.PortID != "" {
				attrs["port"] = diff.Known(o.names[f.PortID])
			}
			o.add(clusterOf(f.Tags), diff.Resource{Kind: diff.KindFloatingIP, Name: f.Description, ID: f.ID, Attrs: attrs})
		}
	})
}

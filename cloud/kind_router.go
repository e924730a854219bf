package cloud

import (
	"context"
	"slices"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"opke.dev/opke/diff"
)

// The cluster's router, and its interface on the cluster's subnet (the
// router's port there), observed with it.
var routerKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		ext, err := a.lookup(ctx, &a.external, "external network", a.listExternal, r.Attrs["external_network"].Value)
		if err != nil {
			return "", err
		}
		return a.neutron(ctx, "routers", routers.List(a.c.Network, routers.ListOpts{Name: r.Name}),
			found(routers.ExtractRouters, func(r routers.Router) tagged { return tagged{id: r.ID, tags: r.Tags} }),
			func() (string, error) {
				rt, err := routers.Create(ctx, a.c.Network, routers.CreateOpts{Name: r.Name, GatewayInfo: &routers.GatewayInfo{NetworkID: ext}}).Extract()
				return idOf(err, func() string { return rt.ID })
			})
	},
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		return routers.Delete(ctx, a.c.Network, id).ExtractErr()
	},
	observe: (*observer).routers,
}

var interfaceKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		return a.routerInterface(ctx, r.Attrs["router"].Value, r.Attrs["subnet"].Value)
	},
	delete: func(a *Applier, ctx context.Context, _ string, r diff.Resource) error {
		rid := a.ID(diff.KindRouter, r.Attrs["router"].Value)
		sid := a.ID(diff.KindSubnet, r.Attrs["subnet"].Value)
		if rid == "" || sid == "" {
			return nil
		}
		_, err := routers.RemoveInterface(ctx, a.c.Network, rid, routers.RemoveInterfaceOpts{SubnetID: sid}).Extract()
		return err
	},
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

func (o *observer) routers(ctx context.Context) error {
	err := listOf(ctx, "routers", o.c.Network, o.c.Network.ServiceURL("routers"), &routers.ListOpts{Tags: o.tagFilter(), Limit: pageSize}, "routers", func(l []routerView) {
		for _, r := range l {
			o.add(clusterOf(r.Tags), diff.Resource{Kind: diff.KindRouter, Name: r.Name, ID: r.ID, Attrs: diff.Attrs{
				"external_network": diff.Known(o.names[r.GatewayInfo.NetworkID])}})
		}
	})
	if err != nil {
		return err
	}
	// Interfaces are Neutron's ports on the routers: one listing of them.
	return listOf(ctx, "router interfaces", o.c.Network, o.c.Network.ServiceURL("ports"), &ports.ListOpts{DeviceOwner: "network:router_interface", Limit: pageSize}, "ports",
		func(l []portView) {
			for _, port := range l {
				cl := o.cluster[port.DeviceID]
				if cl == "" || len(port.FixedIPs) == 0 {
					continue
				}
				router := o.names[port.DeviceID]
				o.add(cl, diff.Resource{Kind: diff.KindInterface, Name: router, ID: port.ID, Attrs: diff.Attrs{
					"router": diff.Known(router), "subnet": diff.Known(o.names[port.FixedIPs[0].SubnetID])}})
			}
		})
}

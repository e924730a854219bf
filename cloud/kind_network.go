package cloud

import (
	"context"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"opke.dev/opke/diff"
)

// The cluster's network.
var networkKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		return a.neutron(ctx, "networks", networks.List(a.c.Network, networks.ListOpts{Name: r.Name}),
			found(networks.ExtractNetworks, func(n networks.Network) tagged { return tagged{id: n.ID, tags: n.Tags} }),
			func() (string, error) {
				n, err := networks.Create(ctx, a.c.Network, networks.CreateOpts{Name: r.Name}).Extract()
				return idOf(err, func() string { return n.ID })
			})
	},
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		return networks.Delete(ctx, a.c.Network, id).ExtractErr()
	},
	observe: (*observer).networks,
}

func (o *observer) networks(ctx context.Context) error {
	err := listOf(ctx, "networks", o.c.Network, o.c.Network.ServiceURL("networks"), &networks.ListOpts{Tags: o.tagFilter(), Limit: pageSize}, "networks", func(l []networkView) {
		for _, n := range l {
			o.add(clusterOf(n.Tags), diff.Resource{Kind: diff.KindNetwork, Name: n.Name, ID: n.ID, Attrs: diff.Attrs{}})
		}
	})
	if err != nil {
		return err
	}
	// External networks are not OPKE's: their names, for references.
	ext := true
	q, err := external.ListOptsExt{ListOptsBuilder: networks.ListOpts{Limit: pageSize}, External: &ext}.ToNetworkListQuery()
	if err != nil {
		return err
	}
	return list(ctx, "external networks", o.c.Network, o.c.Network.ServiceURL("networks")+q, "networks", func(l []networkView) {
		for _, n := range l {
			o.names[n.ID] = n.Name
		}
	})
}

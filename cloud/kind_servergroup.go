package cloud

import (
	"context"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"opke.dev/opke/diff"
)

// The controllers' server group (anti-affinity). Server groups carry no
// tags: it is observed with the servers, a cluster's known by its name.
var serverGroupKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		// One of the name is the one.
		return a.ensure(ctx, servergroups.List(a.c.Compute, nil),
			found(servergroups.ExtractServerGroups, func(g servergroups.ServerGroup) tagged {
				return tagged{id: g.ID, skip: g.Name != r.Name}
			}),
			func() (string, error) {
				g, err := servergroups.Create(ctx, a.c.Compute, servergroups.CreateOpts{Name: r.Name, Policy: r.Attrs["policy"].Value}).Extract()
				return idOf(err, func() string { return g.ID })
			})
	},
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		return servergroups.Delete(ctx, a.c.Compute, id).ExtractErr()
	},
}

package cloud

import (
	"context"
	"slices"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"opke.dev/opke/diff"
)

// The controllers' server group (anti-affinity). Server groups carry no
// tags: it is observed with the servers, a cluster's known by its name.
var serverGroupKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		// One of the name is the one, on any page.
		all, err := ListServerGroups(ctx, a.c.Compute)
		if err != nil {
			return "", err
		}
		if i := slices.IndexFunc(all, func(g servergroups.ServerGroup) bool { return g.Name == r.Name }); i >= 0 {
			return all[i].ID, nil
		}
		g, err := servergroups.Create(ctx, a.c.Compute, servergroups.CreateOpts{Name: r.Name, Policy: r.Attrs["policy"].Value}).Extract()
		return idOf(err, func() string { return g.ID })
	},
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		return servergroups.Delete(ctx, a.c.Compute, id).ExtractErr()
	},
}

// ListServerGroups lists the project's server groups, every page of them
// (gophercloud's listing reads one: the first max_limit groups).
func ListServerGroups(ctx context.Context, compute *gophercloud.ServiceClient) ([]servergroups.ServerGroup, error) {
	var all []servergroups.ServerGroup
	err := listByOffset(ctx, "server groups", compute, compute.ServiceURL("os-server-groups"), "server_groups", func(l []servergroups.ServerGroup) {
		all = append(all, l...)
	})
	return all, err
}

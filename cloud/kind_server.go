package cloud

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"regexp"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/pagination"
	"opke.dev/opke/diff"
)

// A server, booted from its role's user_data; its server group is
// observed with it. A deletion waits until the server is gone, so its
// port and name are free for a replacement.
var serverKind = kind{
	create: (*Applier).server,
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		if err := servers.Delete(ctx, a.c.Compute, id).ExtractErr(); err != nil {
			return err
		}
		return a.waitServerGone(ctx, id)
	},
	observe: func(o *observer, ctx context.Context) error {
		// The images' names first: a server names its image by id.
		if err := o.images(ctx); err != nil {
			return err
		}
		return o.servers(ctx)
	},
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

// waitServerGone waits until a deleted server is gone, so its port and
// name are free for a replacement.
func (a *Applier) waitServerGone(ctx context.Context, id string) error {
	return poll(ctx, a.PollEvery, func() (bool, error) {
		s, err := servers.Get(ctx, a.c.Compute, id).Extract()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) || (err == nil && s.Status == "DELETED") {
			return true, nil
		}
		return false, err
	})
}

func (a *Applier) listFlavors(ctx context.Context) (map[string]string, error) {
	return byName(ctx, flavors.ListDetail(a.c.Compute, nil), flavors.ExtractFlavors, func(f flavors.Flavor) (string, string) { return f.Name, f.ID })
}

func (a *Applier) listImages(ctx context.Context) (map[string]string, error) {
	return byName(ctx, images.List(a.c.Image, nil), images.ExtractImages, func(i images.Image) (string, string) { return i.Name, i.ID })
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
	err := listByOffset(ctx, "server groups", o.c.Compute, o.c.Compute.ServiceURL("os-server-groups"), "server_groups", func(list []servergroups.ServerGroup) {
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
			o.add(clusterOf(s.Tags), diff.Resource{Kind: diff.KindServer, Name: s.Name, ID: s.ID, Attrs: attrs, Status: s.Status})
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

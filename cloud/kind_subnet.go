package cloud

import (
	"context"
	"slices"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	"opke.dev/opke/diff"
)

// The cluster's subnet; its DNS nameservers change in place.
var subnetKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		v := func(k string) string { return r.Attrs[k].Value }
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
	},
	update: func(a *Applier, ctx context.Context, id string, r diff.Resource) error {
		dns := []string{}
		if d := r.Attrs["dns_nameservers"].Value; d != "" {
			dns = strings.Split(d, ",")
		}
		_, err := subnets.Update(ctx, a.c.Network, id, subnets.UpdateOpts{DNSNameservers: &dns}).Extract()
		return err
	},
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		return subnets.Delete(ctx, a.c.Network, id).ExtractErr()
	},
	observe: (*observer).subnets,
}

func (o *observer) subnets(ctx context.Context) error {
	return listOf(ctx, "subnets", o.c.Network, o.c.Network.ServiceURL("subnets"), &subnets.ListOpts{Tags: o.tagFilter(), Limit: pageSize}, "subnets", func(l []subnetView) {
		for _, s := range l {
			dns := slices.Clone(s.DNSNameservers)
			slices.Sort(dns)
			o.add(clusterOf(s.Tags), diff.Resource{Kind: diff.KindSubnet, Name: s.Name, ID: s.ID, Attrs: diff.Attrs{
				"network": diff.Known(o.names[s.NetworkID]), "cidr": diff.Known(s.CIDR), "dns_nameservers": diff.Known(strings.Join(dns, ","))}})
		}
	})
}

package cloud

import (
	"context"
	"slices"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"opke.dev/opke/diff"
)

// A server's port; its security groups change in place.
var portKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		return a.port(ctx, r)
	},
	update: func(a *Applier, ctx context.Context, id string, r diff.Resource) error {
		var sgs []string
		for _, g := range strings.Split(r.Attrs["security_groups"].Value, ",") {
			gid, err := a.need(diff.KindSecurityGroup, g)
			if err != nil {
				return err
			}
			sgs = append(sgs, gid)
		}
		_, err := ports.Update(ctx, a.c.Network, id, ports.UpdateOpts{SecurityGroups: &sgs}).Extract()
		return err
	},
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		return ports.Delete(ctx, a.c.Network, id).ExtractErr()
	},
	observe: (*observer).ports,
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
	return a.neutron(ctx, "ports", ports.List(a.c.Network, ports.ListOpts{Name: r.Name, NetworkID: netID}),
		found(ports.ExtractPorts, func(p ports.Port) tagged { return tagged{id: p.ID, tags: p.Tags} }),
		func() (string, error) {
			p, err := ports.Create(ctx, a.c.Network, opts).Extract()
			return idOf(err, func() string { return p.ID })
		})
}

func (o *observer) ports(ctx context.Context) error {
	o.portOfDevice = map[string]string{}
	q, err := query(&ports.ListOpts{Tags: o.tagFilter(), Limit: pageSize})
	if err != nil {
		return err
	}
	return list(ctx, "ports", o.c.Network, o.c.Network.ServiceURL("ports")+q, "ports", func(l []portView) {
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

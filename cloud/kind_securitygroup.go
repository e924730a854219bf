package cloud

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"opke.dev/opke/diff"
)

// The cluster's security groups, and their ingress rules, observed with
// them.
var securityGroupKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		return a.neutron(ctx, "security-groups", groups.List(a.c.Network, groups.ListOpts{Name: r.Name}),
			found(groups.ExtractGroups, func(g groups.SecGroup) tagged { return tagged{id: g.ID, tags: g.Tags} }),
			func() (string, error) {
				g, err := groups.Create(ctx, a.c.Network, groups.CreateOpts{Name: r.Name}).Extract()
				return idOf(err, func() string { return g.ID })
			})
	},
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		return groups.Delete(ctx, a.c.Network, id).ExtractErr()
	},
	observe: (*observer).securityGroups,
}

var ruleKind = kind{
	create: func(a *Applier, ctx context.Context, r diff.Resource, _ []byte) (string, error) {
		return a.rule(ctx, r)
	},
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		return rules.Delete(ctx, a.c.Network, id).ExtractErr()
	},
}

func (a *Applier) rule(ctx context.Context, r diff.Resource) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	sg, err := a.need(diff.KindSecurityGroup, v("security_group"))
	if err != nil {
		return "", err
	}
	opts := rules.CreateOpts{SecGroupID: sg, Direction: rules.DirIngress, EtherType: rules.EtherType4}
	if p := v("protocol"); p != "any" {
		opts.Protocol = rules.RuleProtocol(p)
	}
	if lo, hi, isRange := strings.Cut(v("ports"), "-"); isRange {
		min, err1 := strconv.Atoi(lo)
		max, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || min < 1 || max < min || max > 65535 {
			return "", fmt.Errorf("security group rule %s: ports %q is not a range of ports", r.Name, v("ports"))
		}
		opts.PortRangeMin, opts.PortRangeMax = min, max
	} else if p, err := strconv.Atoi(v("ports")); err == nil {
		opts.PortRangeMin, opts.PortRangeMax = p, p
	}
	if g, ok := strings.CutPrefix(v("remote"), "group:"); ok {
		if opts.RemoteGroupID, err = a.need(diff.KindSecurityGroup, g); err != nil {
			return "", err
		}
	} else {
		opts.RemoteIPPrefix = v("remote")
	}
	// Rules have no name: one with the same match is the one.
	return a.ensure(ctx, rules.List(a.c.Network, rules.ListOpts{SecGroupID: sg, Direction: string(rules.DirIngress)}),
		found(rules.ExtractRules, func(x rules.SecGroupRule) tagged {
			same := x.Protocol == string(opts.Protocol) && x.PortRangeMin == opts.PortRangeMin && x.PortRangeMax == opts.PortRangeMax &&
				x.RemoteGroupID == opts.RemoteGroupID && x.RemoteIPPrefix == opts.RemoteIPPrefix && x.EtherType == string(rules.EtherType4)
			return tagged{id: x.ID, skip: !same}
		}),
		func() (string, error) {
			rule, err := rules.Create(ctx, a.c.Network, opts).Extract()
			return idOf(err, func() string { return rule.ID })
		})
}

func (o *observer) securityGroups(ctx context.Context) error {
	var all []secGroupView
	q, err := query(&groups.ListOpts{Tags: o.tagFilter(), Limit: pageSize})
	if err != nil {
		return err
	}
	if err := list(ctx, "security groups", o.c.Network, o.c.Network.ServiceURL("security-groups")+q, "security_groups",
		func(l []secGroupView) { all = append(all, l...) }); err != nil {
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

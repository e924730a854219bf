package cloud

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/pagination"
	"opke.dev/opke/diff"
)

// The API's Octavia load balancer and its children: listener, pool,
// members (observed with their pool) and health monitor. Every change
// waits out the load balancer's PENDING states before and after; a
// listener's idle timeouts and allowed CIDRs change in place.
var (
	loadBalancerKind = kind{
		create: (*Applier).octavia,
		delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
			if err := loadbalancers.Delete(ctx, a.c.LoadBalancer, id, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
				return err
			}
			return a.waitLB(ctx, id)
		},
		observe: (*observer).loadBalancers,
	}
	listenerKind = kind{
		create: (*Applier).octavia,
		update: func(a *Applier, ctx context.Context, id string, r diff.Resource) error {
			// An update names only what changes: the rest is left as it is.
			var opts listeners.UpdateOpts
			for k, p := range map[string]**int{"timeout_client_data": &opts.TimeoutClientData, "timeout_member_data": &opts.TimeoutMemberData} {
				if x, ok := r.Attrs[k]; ok {
					n, err := strconv.Atoi(x.Value)
					if err != nil {
						return fmt.Errorf("listener %s: %s %q: %w", r.Name, k, x.Value, err)
					}
					*p = &n
				}
			}
			if x, ok := r.Attrs["allowed_cidrs"]; ok {
				allowed := cidrs(x.Value)
				opts.AllowedCIDRs = &allowed
			}
			// The cluster's one load balancer, as octavia finds it for a
			// create (an update names only what changes).
			lbID, err := a.need(diff.KindLoadBalancer, a.cluster+"-api")
			if err != nil {
				return err
			}
			if err := a.waitLB(ctx, lbID); err != nil {
				return err
			}
			err = a.pending(ctx, lbID, func() error {
				_, err := listeners.Update(ctx, a.c.LoadBalancer, id, opts).Extract()
				return err
			})
			if err != nil {
				return err
			}
			return a.waitLB(ctx, lbID)
		},
		delete: octaviaChild(func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
			return listeners.Delete(ctx, a.c.LoadBalancer, id).ExtractErr()
		}),
		observe: (*observer).listeners,
	}
	poolKind = kind{
		create: (*Applier).octavia,
		delete: octaviaChild(func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
			return pools.Delete(ctx, a.c.LoadBalancer, id).ExtractErr()
		}),
		observe: (*observer).pools,
	}
	memberKind = kind{
		create: (*Applier).octavia,
		delete: octaviaChild(func(a *Applier, ctx context.Context, id string, r diff.Resource) error {
			return pools.DeleteMember(ctx, a.c.LoadBalancer, a.ID(diff.KindPool, r.Attrs["pool"].Value), id).ExtractErr()
		}),
	}
	monitorKind = kind{
		create: (*Applier).octavia,
		delete: octaviaChild(func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
			return monitors.Delete(ctx, a.c.LoadBalancer, id).ExtractErr()
		}),
		observe: (*observer).monitors,
	}
)

// octaviaChild is the deletion of a load balancer's child: through the
// load balancer's PENDING states, waiting for it to be ACTIVE after.
func octaviaChild(del func(a *Applier, ctx context.Context, id string, r diff.Resource) error) func(*Applier, context.Context, string, diff.Resource) error {
	return func(a *Applier, ctx context.Context, id string, r diff.Resource) error {
		lbID := a.ID(diff.KindLoadBalancer, a.cluster+"-api")
		if err := a.pending(ctx, lbID, func() error { return del(a, ctx, id, r) }); err != nil {
			return err
		}
		if lbID != "" {
			return a.waitLB(ctx, lbID)
		}
		return nil
	}
}

// octavia creates a load balancer or one of its children, waiting out the
// load balancer's PENDING states before and after.
func (a *Applier) octavia(ctx context.Context, r diff.Resource, _ []byte) (string, error) {
	v := func(k string) string { return r.Attrs[k].Value }
	num := func(k string) int { n, _ := strconv.Atoi(v(k)); return n }
	lbc := a.c.LoadBalancer
	if r.Kind == diff.KindLoadBalancer {
		sid, err := a.need(diff.KindSubnet, v("subnet"))
		if err != nil {
			return "", err
		}
		id, err := a.ensure(ctx, loadbalancers.List(lbc, loadbalancers.ListOpts{Name: r.Name}),
			found(loadbalancers.ExtractLoadBalancers, func(lb loadbalancers.LoadBalancer) tagged { return tagged{id: lb.ID, tags: lb.Tags} }),
			func() (string, error) {
				lb, err := loadbalancers.Create(ctx, lbc, loadbalancers.CreateOpts{Name: r.Name, VipSubnetID: sid, VipAddress: v("vip_address"), Tags: a.tags}).Extract()
				return idOf(err, func() string { return lb.ID })
			})
		if err != nil {
			return "", err
		}
		return id, a.waitLB(ctx, id)
	}
	lbID, err := a.need(diff.KindLoadBalancer, a.cluster+"-api")
	if err != nil {
		return "", err
	}
	var list pagination.Pager
	var extract func(pagination.Page) ([]tagged, error)
	var create func() (string, error)
	switch r.Kind {
	case diff.KindListener:
		list = listeners.List(lbc, listeners.ListOpts{Name: r.Name, LoadbalancerID: lbID})
		extract = found(listeners.ExtractListeners, func(x listeners.Listener) tagged { return tagged{id: x.ID, tags: x.Tags} })
		create = func() (string, error) {
			client, member := num("timeout_client_data"), num("timeout_member_data")
			l, err := listeners.Create(ctx, lbc, listeners.CreateOpts{Name: r.Name, LoadbalancerID: lbID,
				Protocol: listeners.Protocol(v("protocol")), ProtocolPort: num("port"), Tags: a.tags,
				TimeoutClientData: &client, TimeoutMemberData: &member, AllowedCIDRs: cidrs(v("allowed_cidrs"))}).Extract()
			return idOf(err, func() string { return l.ID })
		}
	case diff.KindPool:
		lid, err := a.need(diff.KindListener, v("listener"))
		if err != nil {
			return "", err
		}
		list = pools.List(lbc, pools.ListOpts{Name: r.Name, LoadbalancerID: lbID})
		extract = found(pools.ExtractPools, func(x pools.Pool) tagged { return tagged{id: x.ID, tags: x.Tags} })
		create = func() (string, error) {
			p, err := pools.Create(ctx, lbc, pools.CreateOpts{Name: r.Name, ListenerID: lid,
				Protocol: pools.Protocol(v("protocol")), LBMethod: pools.LBMethod(v("algorithm")), Tags: a.tags}).Extract()
			return idOf(err, func() string { return p.ID })
		}
	case diff.KindMember:
		pid, err := a.need(diff.KindPool, v("pool"))
		if err != nil {
			return "", err
		}
		sid, err := a.need(diff.KindSubnet, a.cluster)
		if err != nil {
			return "", err
		}
		list = pools.ListMembers(lbc, pid, pools.ListMembersOpts{Name: r.Name})
		extract = found(pools.ExtractMembers, func(x pools.Member) tagged { return tagged{id: x.ID, tags: x.Tags} })
		create = func() (string, error) {
			m, err := pools.CreateMember(ctx, lbc, pid, pools.CreateMemberOpts{Name: r.Name, Address: v("address"),
				ProtocolPort: num("port"), SubnetID: sid, Tags: a.tags}).Extract()
			return idOf(err, func() string { return m.ID })
		}
	case diff.KindMonitor:
		pid, err := a.need(diff.KindPool, v("pool"))
		if err != nil {
			return "", err
		}
		list = monitors.List(lbc, monitors.ListOpts{Name: r.Name, PoolID: pid})
		extract = found(monitors.ExtractMonitors, func(x monitors.Monitor) tagged { return tagged{id: x.ID, tags: x.Tags} })
		create = func() (string, error) {
			m, err := monitors.Create(ctx, lbc, monitors.CreateOpts{Name: r.Name, PoolID: pid, Type: v("type"),
				Delay: num("delay"), Timeout: num("timeout"), MaxRetries: num("max_retries"), Tags: a.tags}).Extract()
			return idOf(err, func() string { return m.ID })
		}
	}
	if err := a.waitLB(ctx, lbID); err != nil {
		return "", err
	}
	var id string
	err = a.pending(ctx, lbID, func() error {
		var err error
		id, err = a.ensure(ctx, list, extract, create)
		return err
	})
	if err != nil {
		return "", err
	}
	return id, a.waitLB(ctx, lbID)
}

// pending runs fn, waiting out a load balancer's PENDING state when the
// API answers 409 because of it.
func (a *Applier) pending(ctx context.Context, lbID string, fn func() error) error {
	for range 50 {
		err := fn()
		if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			return err
		}
		if err := a.waitLB(ctx, lbID); err != nil {
			return err
		}
	}
	return fmt.Errorf("load balancer %s: still conflicting after 50 waits", lbID)
}

// waitLB waits until a load balancer is ACTIVE (or gone).
func (a *Applier) waitLB(ctx context.Context, id string) error {
	return poll(ctx, a.PollEvery, func() (bool, error) {
		lb, err := loadbalancers.Get(ctx, a.c.LoadBalancer, id).Extract()
		switch {
		case gophercloud.ResponseCodeIs(err, http.StatusNotFound):
			return true, nil
		case err != nil:
			return false, err
		case lb.ProvisioningStatus == "ERROR":
			return false, fmt.Errorf("%s: %w", lb.Name, ErrLoadBalancer)
		}
		return lb.ProvisioningStatus == "ACTIVE", nil
	})
}

func (o *observer) loadBalancers(ctx context.Context) error {
	o.vipPort = map[string]string{}
	return listOf(ctx, "load balancers", o.c.LoadBalancer, o.c.LoadBalancer.ServiceURL("lbaas", "loadbalancers"), &loadbalancers.ListOpts{Tags: o.tags, Limit: pageSize}, "loadbalancers",
		func(l []loadBalancerView) {
			for _, lb := range l {
				o.vipPort[lb.VipPortID] = lb.Name
				o.add(clusterOf(lb.Tags), diff.Resource{Kind: diff.KindLoadBalancer, Name: lb.Name, ID: lb.ID, Attrs: diff.Attrs{
					"subnet": diff.Known(o.names[lb.VipSubnetID]), "vip_address": diff.Known(lb.VipAddress)}})
			}
		})
}

func (o *observer) listeners(ctx context.Context) error {
	return listOf(ctx, "listeners", o.c.LoadBalancer, o.c.LoadBalancer.ServiceURL("lbaas", "listeners"), &listeners.ListOpts{Tags: o.tags, Limit: pageSize}, "listeners",
		func(list []listeners.Listener) {
			for _, l := range list {
				if len(l.Loadbalancers) == 0 {
					continue
				}
				o.add(clusterOf(l.Tags), diff.Resource{Kind: diff.KindListener, Name: l.Name, ID: l.ID, Attrs: diff.Attrs{
					"load_balancer": diff.Known(o.names[l.Loadbalancers[0].ID]), "protocol": diff.Known(l.Protocol), "port": diff.Known(strconv.Itoa(l.ProtocolPort)),
					"timeout_client_data": diff.Known(strconv.Itoa(l.TimeoutClientData)), "timeout_member_data": diff.Known(strconv.Itoa(l.TimeoutMemberData)),
					"allowed_cidrs": diff.Known(diff.JoinCIDRs(l.AllowedCIDRs))}})
			}
		})
}

func (o *observer) pools(ctx context.Context) error {
	known := o.known
	var all []pools.Pool
	err := listOf(ctx, "pools", o.c.LoadBalancer, o.c.LoadBalancer.ServiceURL("lbaas", "pools"), &pools.ListOpts{Tags: o.tags, Limit: pageSize}, "pools", func(l []pools.Pool) {
		all = append(all, l...)
	})
	if err != nil {
		return err
	}
	for _, pool := range all {
		cl := clusterOf(pool.Tags)
		if !o.observes(cl) {
			continue // its members are not looked up either
		}
		listener := ""
		if len(pool.Listeners) > 0 {
			listener = o.names[pool.Listeners[0].ID]
		}
		o.add(cl, diff.Resource{Kind: diff.KindPool, Name: pool.Name, ID: pool.ID, Attrs: diff.Attrs{
			"listener": diff.Known(listener), "protocol": diff.Known(pool.Protocol), "algorithm": diff.Known(pool.LBMethod)}})
		resolved := true
		for _, m := range pool.Members {
			if _, ok := known[m.ID]; !ok {
				resolved = false
			}
		}
		if resolved {
			for _, m := range pool.Members {
				o.add(cl, known[m.ID])
				o.out.Members[m.ID] = known[m.ID]
			}
			continue
		}
		err := each(ctx, "members of "+pool.Name, pools.ListMembers(o.c.LoadBalancer, pool.ID, pools.ListMembersOpts{Limit: pageSize}), func(p pagination.Page) error {
			list, err := pools.ExtractMembers(p)
			for _, m := range list {
				r := diff.Resource{Kind: diff.KindMember, Name: m.Name, ID: m.ID, Attrs: diff.Attrs{
					"pool": diff.Known(pool.Name), "address": diff.Known(m.Address), "port": diff.Known(strconv.Itoa(m.ProtocolPort))}}
				o.add(cl, r)
				o.out.Members[m.ID] = r
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (o *observer) monitors(ctx context.Context) error {
	return listOf(ctx, "health monitors", o.c.LoadBalancer, o.c.LoadBalancer.ServiceURL("lbaas", "healthmonitors"), &monitors.ListOpts{Limit: pageSize}, "healthmonitors", func(l []monitors.Monitor) {
		for _, m := range l {
			if len(m.Pools) == 0 || o.cluster[m.Pools[0].ID] == "" {
				continue
			}
			o.add(o.cluster[m.Pools[0].ID], diff.Resource{Kind: diff.KindMonitor, Name: m.Name, ID: m.ID, Attrs: diff.Attrs{
				"pool": diff.Known(o.names[m.Pools[0].ID]), "type": diff.Known(m.Type), "delay": diff.Known(strconv.Itoa(m.Delay)),
				"timeout": diff.Known(strconv.Itoa(m.Timeout)), "max_retries": diff.Known(strconv.Itoa(m.MaxRetries))}})
		}
	})
}

// cidrs splits a listener's allowed_cidrs attribute (diff.JoinCIDRs):
// none for "".
func cidrs(v string) []string {
	if v == "" {
		return []string{}
	}
	return strings.Split(v, ",")
}

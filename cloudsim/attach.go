package cloudsim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

// Attached hosts. A real control plane without hypervisors (Nova's fake
// driver, no dataplane: test/openstack) has servers that never boot. With
// Options.Attach the simulator's host layer runs for them instead: it
// reads the real cloud as an admin (servers with their user_data at an
// admin microversion, ports, subnets, floating IPs, security group rules,
// load balancers and their listeners, pools and members), mirrors that
// into its world, and boots a host for every ACTIVE server with
// user_data. The edge, the gateways' forwarding, the controllers' etcd and
// API servers and the load balancers' passthrough then work as they do on
// the simulator's own cloud. The simulator's APIs answer 503: the real
// cloud is the only API. A server's console, which Nova's fake driver
// cannot print, is read from [Sim.ConsoleOutput].

// AttachOptions name the real cloud whose servers get simulated hosts.
type AttachOptions struct {
	// File is the clouds.yaml, Cloud an admin's entry of it.
	File, Cloud string
	// Interval is how often the real cloud is read (default 1s); a
	// connection to an address not known yet reads it at once.
	Interval time.Duration
}

// ErrAttached is the answer of an attached simulator's own APIs.
var ErrAttached = errors.New("this simulator is attached to a real cloud: use its APIs")

// attachment reads the real cloud into the world.
type attachment struct {
	opts                  AttachOptions
	compute, network, lbc *gophercloud.ServiceClient

	mu   sync.Mutex // one read at a time
	last time.Time  // when the last read started
	err  error      // of the last read
}

func (s *Sim) attach(ctx context.Context, o AttachOptions) error {
	ao, eo, _, err := clouds.Parse(clouds.WithCloudName(o.Cloud), clouds.WithLocations(o.File))
	if err != nil {
		return fmt.Errorf("attach to %s: %w", o.Cloud, err)
	}
	ao.AllowReauth = true
	pc, err := config.NewProviderClient(ctx, ao)
	if err != nil {
		return fmt.Errorf("attach to %s: %w", o.Cloud, err)
	}
	a := &attachment{opts: o}
	if a.compute, err = openstack.NewComputeV2(pc, eo); err != nil {
		return fmt.Errorf("attach to %s: %w", o.Cloud, err)
	}
	// 2.3 shows user_data to admins; 2.79 is what OPKE speaks.
	a.compute.Microversion = "2.79"
	if a.network, err = openstack.NewNetworkV2(pc, eo); err != nil {
		return fmt.Errorf("attach to %s: %w", o.Cloud, err)
	}
	if a.lbc, err = openstack.NewLoadBalancerV2(pc, eo); err != nil {
		return fmt.Errorf("attach to %s: %w", o.Cloud, err)
	}
	if a.opts.Interval == 0 {
		a.opts.Interval = time.Second
	}
	s.attached = a
	if err := s.refresh(ctx, time.Time{}); err != nil {
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(a.opts.Interval)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := s.refresh(rctx, time.Time{}); err != nil {
					s.log.Warn("attached: read the real cloud", "err", err)
				}
				cancel()
			}
		}
	}()
	return nil
}

// refresh reads the real cloud into the world unless a read that started
// after since already did.
func (s *Sim) refresh(ctx context.Context, since time.Time) error {
	a := s.attached
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !since.IsZero() && a.last.After(since) {
		return a.err
	}
	a.last = time.Now()
	m, err := a.read(ctx)
	a.err = err
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mirror(m)
	return nil
}

// mirrored is one read of the real cloud, by id.
type mirrored struct {
	servers   []realServer
	ports     map[string]*port
	subnets   map[string]*subnet
	fips      map[string]*floatingIP
	rules     map[string]*secRule
	lbs       map[string]*loadBalancer
	listeners map[string]*listener
	pools     map[string]*lbPool
	members   map[string]*member
}

// realServer is what Nova shows an admin of a server.
type realServer struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Status   string            `json:"status"`
	TenantID string            `json:"tenant_id"`
	UserID   string            `json:"user_id"`
	KeyName  string            `json:"key_name"`
	UserData *string           `json:"OS-EXT-SRV-ATTR:user_data"`
	Metadata map[string]string `json:"metadata"`
	Tags     []string          `json:"tags"`
}

// listAll reads every page of a listing, from the pages' label ("ports").
func listAll[T any](ctx context.Context, p pagination.Pager, label string) ([]T, error) {
	type slicer interface {
		ExtractIntoSlicePtr(any, string) error
	}
	var out []T
	err := p.EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		sp, ok := page.(slicer)
		if !ok {
			return false, fmt.Errorf("unexpected page %T", page)
		}
		var got []T
		if err := sp.ExtractIntoSlicePtr(&got, label); err != nil {
			return false, err
		}
		out = append(out, got...)
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", label, err)
	}
	return out, nil
}

// keyed is a Neutron or Octavia resource: its id.
type keyed interface{ key() string }

func (c *common) key() string   { return c.ID }
func (c *lbCommon) key() string { return c.ID }

// listByID is listAll by id.
func listByID[T keyed](ctx context.Context, p pagination.Pager, label string) (map[string]T, error) {
	l, err := listAll[T](ctx, p, label)
	if err != nil {
		return nil, err
	}
	out := make(map[string]T, len(l))
	for _, x := range l {
		out[x.key()] = x
	}
	return out, nil
}

// read lists what the host layer needs, as an admin, across projects.
func (a *attachment) read(ctx context.Context) (*mirrored, error) {
	m := &mirrored{members: map[string]*member{}}
	var err error
	for _, step := range []func() error{
		func() (err error) {
			m.servers, err = listAll[realServer](ctx, servers.List(a.compute, servers.ListOpts{AllTenants: true}), "servers")
			return err
		},
		func() (err error) {
			m.ports, err = listByID[*port](ctx, ports.List(a.network, nil), "ports")
			return err
		},
		func() (err error) {
			m.subnets, err = listByID[*subnet](ctx, subnets.List(a.network, nil), "subnets")
			return err
		},
		func() (err error) {
			m.fips, err = listByID[*floatingIP](ctx, floatingips.List(a.network, nil), "floatingips")
			return err
		},
		func() (err error) {
			m.rules, err = listByID[*secRule](ctx, rules.List(a.network, rules.ListOpts{}), "security_group_rules")
			return err
		},
		func() (err error) {
			m.lbs, err = listByID[*loadBalancer](ctx, loadbalancers.List(a.lbc, nil), "loadbalancers")
			return err
		},
		func() (err error) {
			m.listeners, err = listByID[*listener](ctx, listeners.List(a.lbc, nil), "listeners")
			return err
		},
		func() (err error) { m.pools, err = listByID[*lbPool](ctx, pools.List(a.lbc, nil), "pools"); return err },
	} {
		if err = step(); err != nil {
			return nil, err
		}
	}
	for _, p := range m.pools {
		if len(p.LoadBalancers) > 0 {
			p.LB = p.LoadBalancers[0].ID
		}
		ms, err := listByID[*member](ctx, pools.ListMembers(a.lbc, p.ID, nil), "members")
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			continue // deleted since the pools were listed
		}
		if err != nil {
			return nil, err
		}
		for id, mb := range ms {
			mb.PoolID, mb.LB = p.ID, p.LB
			m.members[id] = mb
		}
	}
	return m, nil
}

// mirror replaces the world's network and load balancer state with the
// real cloud's and brings the servers up to date: a server seen ACTIVE
// for the first time boots its host (its host key and folder are kept
// across reads), one gone is released. The caller holds s.mu.
func (s *Sim) mirror(m *mirrored) {
	w := s.w
	now := s.opts.Now()
	// Octavia's children name their load balancer in lists; the world
	// keeps it in LB.
	for _, lb := range m.lbs {
		lb.LB = lb.ID
	}
	for _, l := range m.listeners {
		if len(l.LoadBalancers) > 0 {
			l.LB = l.LoadBalancers[0].ID
		}
	}
	w.Ports, w.Subnets, w.FloatingIPs, w.SecRules = m.ports, m.subnets, m.fips, m.rules
	w.LoadBalancer, w.Listeners, w.Pools, w.Members = m.lbs, m.listeners, m.pools, m.members

	// A server's ports, in the order they were made.
	portsOf := map[string][]*port{}
	for _, p := range m.ports {
		if p.DeviceID != "" {
			portsOf[p.DeviceID] = append(portsOf[p.DeviceID], p)
		}
	}
	seen := map[string]bool{}
	for _, rs := range m.servers {
		seen[rs.ID] = true
		sv := w.Servers[rs.ID]
		if sv == nil {
			sv = &server{ID: rs.ID, Name: rs.Name, ProjectID: rs.TenantID, UserID: rs.UserID, KeyName: rs.KeyName, Status: "BUILD", Metadata: rs.Metadata, Tags: rs.Tags}
			if rs.UserData != nil {
				sv.UserData = *rs.UserData
			}
			w.Servers[rs.ID] = sv
		}
		sv.Name = rs.Name
		ps := portsOf[rs.ID]
		slices.SortFunc(ps, func(a, b *port) int { return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID)) })
		sv.Ports = sv.Ports[:0]
		for _, p := range ps {
			sv.Ports = append(sv.Ports, p.ID)
		}
		switch {
		case rs.Status == "ACTIVE" && sv.Status == "BUILD":
			w.activateServer(sv.ID, now) // boots the host, or puts it in ERROR here
			if sv.Status == "ERROR" {
				s.log.Warn("attached: a host did not boot", "server", sv.Name, "fault", sv.Fault)
			}
		case rs.Status != "ACTIVE" && sv.Status == "ACTIVE":
			sv.Status = rs.Status // stopped, or in ERROR: no longer a host
		}
	}
	for id, sv := range w.Servers {
		if !seen[id] {
			delete(w.Servers, id)
			if w.release != nil {
				w.release(sv.ID)
			}
		}
	}
	s.changed()
}

// ConsoleOutput is a server's console as its host prints it (its SSH host
// keys among the lines), for a cloud whose console has none: the consoles
// of an attached simulator's hosts.
func (s *Sim) ConsoleOutput(ctx context.Context, serverID string) (string, error) {
	if err := s.refresh(ctx, time.Now()); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sv := s.w.Servers[serverID]
	if sv == nil {
		return "", fmt.Errorf("console of %s: %w", serverID, errNoRoute)
	}
	if sv.Status == "ACTIVE" {
		if err := ensureHostKey(sv); err != nil {
			return "", err
		}
	}
	return consoleOutput(sv, -1, s.printsHostKeys(sv.ID)), nil
}

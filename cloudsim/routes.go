package cloudsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"
)

// Routing. A connection to a simulated ip:port is resolved inside the
// simulator, never dialled: the address is looked up on the networks the
// connection comes from (a host's ports, or a floating IP's port for the
// edge). Port 22 of a host is its in-process SSH server, reached by a pipe;
// another port is whatever the host runs there (an etcd member, an API
// server stub), which listens on a loopback port; a load balancer's VIP
// forwards to its listener's pool members in turn, as a TCP passthrough.
// Security groups are checked at the edge only, for traffic from the
// internet; traffic inside a network is not filtered.

var (
	errNoRoute = errors.New("no route to host")
	errRefused = errors.New("connection refused")
)

// networksOf returns the networks a server has ports on; the caller holds s.mu.
func (w *world) networksOf(serverID string) []string {
	var nets []string
	if sv := w.Servers[serverID]; sv != nil {
		for _, pid := range sv.Ports {
			if p := w.Ports[pid]; p != nil && !slices.Contains(nets, p.NetworkID) {
				nets = append(nets, p.NetworkID)
			}
		}
	}
	return nets
}

// destination is what an address resolves to: a server's host, or a load
// balancer's VIP.
type destination struct {
	server string
	lb     string
}

// resolve finds the server or load balancer holding ip on one of nets:
// an ACTIVE server, or one in ERROR (its machine, if it runs, answers: a
// reset-state changes Nova's record only); the caller holds s.mu.
func (w *world) resolve(nets []string, ip string) (destination, error) {
	for _, p := range w.Ports {
		if !slices.Contains(nets, p.NetworkID) || p.DeviceID == "" {
			continue
		}
		for _, f := range p.FixedIPs {
			if f.IPAddress != ip {
				continue
			}
			if t := w.Servers[p.DeviceID]; t != nil && (t.Status == "ACTIVE" || t.Status == "ERROR") {
				return destination{server: t.ID}, nil
			}
		}
	}
	for _, lb := range w.LoadBalancer {
		if lb.VIPAddress == ip && slices.Contains(nets, lb.VIPNetworkID) && lb.ProvisioningStatus != "PENDING_CREATE" && lb.ProvisioningStatus != "PENDING_DELETE" {
			return destination{lb: lb.ID}, nil
		}
	}
	return destination{}, fmt.Errorf("connect to %s: %w", ip, errNoRoute)
}

// backend is one member of a load balancer's pool.
type backend struct {
	nets []string
	ip   string
	port int
}

// lbBackends returns the members behind a load balancer's listener on
// port, starting with the next in turn; the caller holds s.mu.
func (s *Sim) lbBackends(lbID string, port int) ([]backend, error) {
	w := s.w
	lb := w.LoadBalancer[lbID]
	var pool *lbPool
	for _, l := range w.Listeners {
		if l.LB == lbID && l.ProtocolPort == port && l.AdminStateUp && l.DefaultPoolID != nil {
			pool = w.Pools[*l.DefaultPoolID]
		}
	}
	if pool == nil {
		return nil, fmt.Errorf("connect to %s port %d: %w", lb.VIPAddress, port, errRefused)
	}
	var out []backend
	for _, m := range w.Members {
		if m.PoolID != pool.ID || !m.AdminStateUp {
			continue
		}
		netID := lb.VIPNetworkID
		if sn := w.Subnets[m.SubnetID]; sn != nil {
			netID = sn.NetworkID
		}
		out = append(out, backend{nets: []string{netID}, ip: m.Address, port: m.ProtocolPort})
	}
	slices.SortFunc(out, func(a, b backend) int { return compareAddr(a.ip, b.ip) })
	if len(out) > 0 {
		s.lbTurn[lbID]++
		k := s.lbTurn[lbID] % len(out)
		out = append(out[k:], out[:k]...)
	}
	return out, nil
}

func compareAddr(a, b string) int {
	x, errX := netip.ParseAddr(a)
	y, errY := netip.ParseAddr(b)
	if errX != nil || errY != nil {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	}
	return x.Compare(y)
}

// connect opens a connection to ip:port as seen from nets.
func (s *Sim) connect(ctx context.Context, nets []string, ip string, port int) (net.Conn, error) {
	asked := time.Now()
	c, err := s.connectOnce(ctx, nets, ip, port)
	if errors.Is(err, errNoRoute) && s.attached != nil {
		// A server the last read of the real cloud did not have yet.
		if s.refresh(ctx, asked) == nil {
			return s.connectOnce(ctx, nets, ip, port)
		}
	}
	return c, err
}

func (s *Sim) connectOnce(ctx context.Context, nets []string, ip string, port int) (net.Conn, error) {
	s.mu.Lock()
	s.w.tick(s.opts.Now())
	dst, err := s.w.resolve(nets, ip)
	var backends []backend
	if err == nil && dst.lb != "" {
		backends, err = s.lbBackends(dst.lb, port)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if dst.lb != "" {
		var last error = fmt.Errorf("connect to %s port %d: no member answers: %w", ip, port, errRefused)
		for _, b := range backends {
			s.mu.Lock()
			d, err := s.w.resolve(b.nets, b.ip)
			s.mu.Unlock()
			if err != nil || d.server == "" { // members are servers, not other load balancers
				continue
			}
			c, err := s.connectHost(ctx, d.server, b.ip, b.port)
			if err == nil {
				return c, nil
			}
			last = err
		}
		return nil, last
	}
	return s.connectHost(ctx, dst.server, ip, port)
}

// connectHost connects to port of a server's host.
func (s *Sim) connectHost(ctx context.Context, serverID, ip string, port int) (net.Conn, error) {
	h, err := s.host(serverID)
	if err != nil {
		return nil, err
	}
	if h.down() {
		return nil, fmt.Errorf("connect to %s port %d: the host is rebooting: %w", ip, port, errRefused)
	}
	if port == 22 {
		// Tracked: a deleted server's SSH sessions are cut, as a dead
		// machine's are.
		a, b := net.Pipe()
		go h.serveSSH(b)
		return h.track(a), nil
	}
	addr := h.listening(port)
	if addr == "" {
		return nil, fmt.Errorf("connect to %s port %d: %w", ip, port, errRefused)
	}
	c, err := dialLoopback(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s port %d: %w", ip, port, errRefused)
	}
	return h.track(c), nil
}

var errNotLoopback = errors.New("the simulator dials loopback addresses only")

// dialLoopback dials what the simulator itself listens on: an IPv4
// loopback address literal, never a name, checked again at the socket.
func dialLoopback(ctx context.Context, addr string) (net.Conn, error) {
	if err := loopbackOnly(addr); err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error { return loopbackOnly(address) }}
	return d.DialContext(ctx, "tcp", addr)
}

func loopbackOnly(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() || !ap.Addr().IsLoopback() {
		return fmt.Errorf("%w, not %s", errNotLoopback, addr)
	}
	return nil
}

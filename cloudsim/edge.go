package cloudsim

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// The edge is the simulated cloud's internet side: a SOCKS5 proxy (RFC
// 1928, no authentication, CONNECT only) on 127.0.0.1. A CONNECT to a
// floating IP reaches what its port holds: a host, when the host's
// security groups let that TCP port in from anywhere (port 22 is the
// host's SSH server), or a load balancer's VIP, whose listener forwards to
// its members (Octavia manages the VIP's security group itself). Every
// other target is refused with the reply a router would give. The edge
// dials no simulated address: see routes.go.

// SOCKS5 replies.
const (
	socksSucceeded       = 0
	socksNotAllowed      = 2
	socksHostUnreachable = 4
	socksRefused         = 5
	socksCmdUnsupported  = 7
	socksAddrUnsupported = 8
)

var errSocks = errors.New("socks5")

func (s *Sim) serveEdge(ln net.Listener) {
	defer s.wg.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.edgeConn(conn)
		}()
	}
}

func (s *Sim) edgeConn(conn net.Conn) {
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a closing simulator ends every session
		select {
		case <-s.done:
			conn.Close()
		case <-stop:
		}
	}()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(conn)
	target, err := socksHandshake(br, conn)
	if err != nil {
		s.log.Debug("edge: bad request", "err", err)
		conn.Close()
		return
	}
	if s.real != nil {
		s.edgeReal(conn, br, target)
		return
	}
	asked := time.Now()
	nets, ip, code := s.edgeRoute(target)
	if code == socksHostUnreachable && s.attached != nil {
		// A floating IP the last read of the real cloud did not have yet.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if s.refresh(ctx, asked) == nil {
			nets, ip, code = s.edgeRoute(target)
		}
		cancel()
	}
	if code != socksSucceeded {
		socksReply(conn, code)
		conn.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	backend, err := s.connect(ctx, nets, ip, int(target.Port()))
	cancel()
	failed := byte(socksRefused)
	if errors.Is(err, errNoRoute) {
		failed = socksHostUnreachable
	}
	s.answer(conn, br, target, backend, err, failed)
}

// edgeReal connects to a floating IP of real hosts: from the edge's
// namespace on the floating IP's network, through its router, as the
// internet would; what the security groups drop times out. The edge's
// own addresses are reached too.
func (s *Sim) edgeReal(conn net.Conn, br *bufio.Reader, target netip.AddrPort) {
	s.mu.Lock()
	network := ""
	for _, f := range s.w.FloatingIPs {
		if f.FloatingIPAddress == target.Addr().String() && f.PortID != nil {
			network = f.FloatingNetworkID
		}
	}
	s.mu.Unlock()
	if network == "" {
		// The edge's own address on an external network: what serves
		// there (the APIs' public endpoints, a registry mirror), as the
		// internet reaches a cloud's public endpoints.
		network = s.real.edgeOf(target.Addr())
	}
	if network == "" {
		socksReply(conn, socksHostUnreachable)
		conn.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	backend, err := s.real.dial(ctx, network, target)
	cancel()
	failed := byte(socksHostUnreachable)
	if errors.Is(err, syscall.ECONNREFUSED) {
		failed = socksRefused
	}
	s.answer(conn, br, target, backend, err, failed)
}

// answer replies to a CONNECT: the failed code when the backend could not
// be reached, else success and the relay until either side ends. A
// closing simulator cuts the backend's side too: a host that never
// answers again must not hold the relay.
func (s *Sim) answer(conn net.Conn, br *bufio.Reader, target netip.AddrPort, backend net.Conn, err error, failed byte) {
	if err != nil {
		s.log.Debug("edge: no connection", "target", target, "err", err)
		socksReply(conn, failed)
		conn.Close()
		return
	}
	socksReply(conn, socksSucceeded)
	_ = conn.SetDeadline(time.Time{})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-s.done:
			backend.Close()
		case <-stop:
		}
	}()
	relay(&bufferedConn{Conn: conn, r: br}, backend)
}

// socksHandshake reads the greeting and the request and returns the target.
func socksHandshake(br *bufio.Reader, w io.Writer) (netip.AddrPort, error) {
	var head [2]byte
	if _, err := io.ReadFull(br, head[:]); err != nil || head[0] != 5 {
		return netip.AddrPort{}, fmt.Errorf("%w: not a SOCKS5 greeting", errSocks)
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: %v", errSocks, err)
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == 0
	}
	if !noAuth {
		_, _ = w.Write([]byte{5, 0xff})
		return netip.AddrPort{}, fmt.Errorf("%w: the client offers no method without authentication", errSocks)
	}
	if _, err := w.Write([]byte{5, 0}); err != nil {
		return netip.AddrPort{}, err
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != 5 {
		return netip.AddrPort{}, fmt.Errorf("%w: bad request", errSocks)
	}
	var addr netip.Addr
	switch req[3] {
	case 1:
		var b [4]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return netip.AddrPort{}, err
		}
		addr = netip.AddrFrom4(b)
	case 3:
		n, err := br.ReadByte()
		if err != nil {
			return netip.AddrPort{}, err
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(br, name); err != nil {
			return netip.AddrPort{}, err
		}
		// Simulated addresses have no names: a name must be an IP literal.
		if addr, err = netip.ParseAddr(string(name)); err != nil {
			var port [2]byte
			_, _ = io.ReadFull(br, port[:])
			socksReply(w, socksHostUnreachable)
			return netip.AddrPort{}, fmt.Errorf("%w: %q is not an address", errSocks, name)
		}
	default:
		socksReply(w, socksAddrUnsupported)
		return netip.AddrPort{}, fmt.Errorf("%w: address type %d", errSocks, req[3])
	}
	var port [2]byte
	if _, err := io.ReadFull(br, port[:]); err != nil {
		return netip.AddrPort{}, err
	}
	if req[1] != 1 {
		socksReply(w, socksCmdUnsupported)
		return netip.AddrPort{}, fmt.Errorf("%w: command %d", errSocks, req[1])
	}
	return netip.AddrPortFrom(addr, binary.BigEndian.Uint16(port[:])), nil
}

func socksReply(w io.Writer, code byte) {
	_, _ = w.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0})
}

// edgeRoute finds what a floating IP leads to: the fixed address of its
// port and that port's network, once the port's security groups let the
// target port in from the internet.
func (s *Sim) edgeRoute(target netip.AddrPort) (nets []string, ip string, code byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.tick(s.opts.Now())
	addr := target.Addr().String()
	for _, f := range s.w.FloatingIPs {
		if f.FloatingIPAddress != addr {
			continue
		}
		if f.PortID == nil {
			return nil, "", socksHostUnreachable
		}
		p := s.w.Ports[*f.PortID]
		if p == nil || p.DeviceID == "" || len(p.FixedIPs) == 0 {
			return nil, "", socksHostUnreachable
		}
		fixed := p.FixedIPs[0].IPAddress
		if f.FixedIPAddress != nil && *f.FixedIPAddress != "" {
			fixed = *f.FixedIPAddress
		}
		src := s.w.edgeSource(f.FloatingNetworkID)
		if p.DeviceOwner != "Octavia" && p.PortSecurity && !s.w.ingressAllowed(p, "tcp", int(target.Port()), src) {
			return nil, "", socksNotAllowed
		}
		if p.DeviceOwner == "Octavia" && !s.w.listenerAdmits(fixed, int(target.Port()), src) {
			return nil, "", socksNotAllowed
		}
		return []string{p.NetworkID}, fixed, socksSucceeded
	}
	return nil, "", socksHostUnreachable
}

// edgeSource is the address the edge dials a floating IP from: the last
// address but one of its external network's subnet, as the real hosts'
// fabric plugs the edge in (realhosts.go), so that a rule's remote
// prefix is held against the same address in both worlds.
func (w *world) edgeSource(networkID string) netip.Addr {
	if n := w.Networks[networkID]; n != nil {
		for _, sid := range n.Subnets {
			if sn := w.Subnets[sid]; sn != nil {
				if cidr, err := netip.ParsePrefix(sn.CIDR); err == nil && cidr.Addr().Is4() && cidr.Bits() <= 30 {
					return lastAddr(cidr).Prev()
				}
			}
		}
	}
	return netip.Addr{}
}

// ingressAllowed reports whether a rule of the port's security groups lets
// proto/port in from src.
func (w *world) ingressAllowed(p *port, proto string, portNum int, src netip.Addr) bool {
	groups := map[string]bool{}
	for _, g := range p.SecurityGroups {
		groups[g] = true
	}
	for _, r := range w.SecRules {
		if !groups[r.SecurityGroupID] || r.Direction != "ingress" || r.EtherType != "IPv4" {
			continue
		}
		if r.Protocol != nil && *r.Protocol != proto && *r.Protocol != "6" /* tcp by number */ {
			continue
		}
		if r.PortRangeMin != nil && portNum < *r.PortRangeMin || r.PortRangeMax != nil && portNum > *r.PortRangeMax {
			continue
		}
		if r.RemoteGroupID != nil {
			continue
		}
		if r.RemoteIPPrefix == nil || *r.RemoteIPPrefix == "" {
			return true
		}
		// Anywhere is anywhere, also for an edge whose address is not known
		// (attached to another cloud, whose external subnets it does not
		// mirror).
		if prefix, err := netip.ParsePrefix(*r.RemoteIPPrefix); err == nil && (prefix.Bits() == 0 || src.IsValid() && prefix.Contains(src)) {
			return true
		}
	}
	return false
}

// bufferedConn reads first what the handshake's reader already buffered.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// listenerAdmits reports whether the listener of the load balancer whose
// VIP is vip, on port, lets src in (its allowed_cidrs); true when there is
// no such listener (the connection is refused further on). The caller
// holds s.mu.
func (w *world) listenerAdmits(vip string, port int, src netip.Addr) bool {
	for _, l := range w.Listeners {
		if lb := w.LoadBalancer[l.LB]; lb != nil && lb.VIPAddress == vip && l.ProtocolPort == port && !l.admits(src) {
			return false
		}
	}
	return true
}

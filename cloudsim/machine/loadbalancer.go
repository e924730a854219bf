package machine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// LoadBalancer is an Octavia load balancer on the fabric: its VIP a port
// on its subnet, in an amphora namespace of its own; each listener a TCP
// forwarder there to its pool's members, round robin; with a health
// monitor, each member's operating status comes from TCP probes, and the
// forwarder sends nothing to a member in ERROR.
type LoadBalancer struct {
	f   *Fabric
	id  string
	ns  string // the amphora's namespace, by name
	vip netip.Addr
	log *slog.Logger

	mu        sync.Mutex
	listeners map[int]*lbListener
}

// Member is a pool member: its address and port.
type Member struct {
	Address netip.Addr
	Port    int
}

func (m Member) String() string { return net.JoinHostPort(m.Address.String(), strconv.Itoa(m.Port)) }

// Monitor is a TCP health monitor, as Octavia's: a member is ERROR after
// RetriesDown probes in a row fail, ONLINE after Retries in a row pass.
type Monitor struct {
	Delay, Timeout       time.Duration
	Retries, RetriesDown int
}

// Member operating statuses, as Octavia names them.
const (
	MemberOnline    = "ONLINE"
	MemberError     = "ERROR"
	MemberNoMonitor = "NO_MONITOR"
)

type lbListener struct {
	ln      net.Listener
	cancel  context.CancelFunc
	done    sync.WaitGroup
	mu      sync.Mutex
	members []Member
	monitor *Monitor
	status  map[Member]string
	streak  map[Member]int // probes in a row that agree, signed: + passed, - failed
	turn    int
	// idle closes a connection that carried nothing either way for this
	// long (0: never).
	idle time.Duration
	// allowed are the sources let in (Octavia's allowed_cidrs); none:
	// anywhere.
	allowed []netip.Prefix
}

// DefaultIdle is Octavia's default idle timeout of a listener's client
// and member sides (timeout_client_data, timeout_member_data): 50 s.
const DefaultIdle = 50 * time.Second

// AddLoadBalancer makes a load balancer's amphora with its VIP on a
// network (vip with the subnet's prefix; gateway, if valid, its default
// route, so a floating IP of the VIP answers).
func (f *Fabric) AddLoadBalancer(ctx context.Context, id, network string, vip netip.Prefix, gateway netip.Addr, log *slog.Logger) (*LoadBalancer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ns := f.name + "-" + short("a", id)
	if _, err := AddNetNS(ctx, ns); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.amphorae = append(f.amphorae, ns)
	f.mu.Unlock()
	port := Port{ID: "vip-" + id, Network: network, NetNS: ns, IfName: "eth0", Address: vip, Gateway: gateway,
		MAC: "fa:16:3e:" + short("", id)[0:2] + ":" + short("", id)[2:4] + ":" + short("", id)[4:6]}
	if err := f.AddPort(ctx, port); err != nil {
		return nil, err
	}
	lb := &LoadBalancer{f: f, id: id, ns: ns, vip: vip.Addr(), log: log, listeners: map[int]*lbListener{}}
	return lb, lb.applyRules(ctx)
}

// applyRules lets each listener's port in from its allowed CIDRs, or
// from anywhere when it has none, as Octavia's VIP security group does,
// and anything out (to the members).
func (lb *LoadBalancer) applyRules(ctx context.Context) error {
	lb.mu.Lock()
	rules := []Rule{{Direction: "egress"}}
	for _, p := range slices.Sorted(maps.Keys(lb.listeners)) {
		l := lb.listeners[p]
		l.mu.Lock()
		allowed := slices.Clone(l.allowed)
		l.mu.Unlock()
		if len(allowed) == 0 {
			rules = append(rules, Rule{Direction: "ingress", Protocol: "tcp", PortMin: p, PortMax: p})
		}
		for _, src := range allowed {
			rules = append(rules, Rule{Direction: "ingress", Protocol: "tcp", PortMin: p, PortMax: p, Remote: src.String()})
		}
	}
	lb.mu.Unlock()
	return lb.f.SetRules(ctx, "vip-"+lb.id, rules)
}

// SetListener makes or updates a TCP listener on the VIP's port, with its
// pool's members, its health monitor (nil for none) and its idle timeout:
// as HAProxy in an amphora does, a connection that carried nothing either
// way for that long is closed on both sides (the smaller of Octavia's
// timeout_client_data and timeout_member_data; 0: never). Only sources
// in allowed reach it (Octavia's allowed_cidrs); none: anywhere.
func (lb *LoadBalancer) SetListener(ctx context.Context, port int, members []Member, monitor *Monitor, idle time.Duration, allowed []netip.Prefix) error {
	lb.mu.Lock()
	l := lb.listeners[port]
	lb.mu.Unlock()
	if l == nil {
		ln, err := ListenIn(filepath.Join(NetNSDir, lb.ns), "tcp", net.JoinHostPort(lb.vip.String(), strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("load balancer %s: listener %d: %w", lb.id, port, err)
		}
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		l = &lbListener{ln: ln, cancel: cancel, status: map[Member]string{}, streak: map[Member]int{}}
		lb.mu.Lock()
		lb.listeners[port] = l
		lb.mu.Unlock()
		l.done.Add(2)
		go func() { defer l.done.Done(); lb.serve(lctx, l) }()
		go func() { defer l.done.Done(); lb.probe(lctx, l) }()
	}
	l.mu.Lock()
	l.members, l.monitor, l.idle, l.allowed = slices.Clone(members), monitor, idle, slices.Clone(allowed)
	for _, m := range members {
		if _, known := l.status[m]; !known || monitor == nil {
			l.status[m] = MemberNoMonitor
			if monitor != nil {
				l.status[m] = MemberOnline // Octavia starts a new member ONLINE until probes say otherwise
			}
		}
	}
	l.mu.Unlock()
	return lb.applyRules(ctx)
}

// RemoveListener stops a listener: its connections are cut.
func (lb *LoadBalancer) RemoveListener(ctx context.Context, port int) error {
	lb.mu.Lock()
	l := lb.listeners[port]
	delete(lb.listeners, port)
	lb.mu.Unlock()
	if l == nil {
		return nil
	}
	l.cancel()
	l.ln.Close()
	l.done.Wait()
	return lb.applyRules(ctx)
}

// Status is the operating status of each member of a listener's pool.
func (lb *LoadBalancer) Status(port int) map[Member]string {
	lb.mu.Lock()
	l := lb.listeners[port]
	lb.mu.Unlock()
	out := map[Member]string{}
	if l == nil {
		return out
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.members {
		out[m] = l.status[m]
	}
	return out
}

// pick chooses the next member to send a connection to: round robin over
// those not in ERROR.
func (l *lbListener) pick() (Member, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range l.members {
		m := l.members[l.turn%len(l.members)]
		l.turn++
		if l.status[m] != MemberError {
			return m, true
		}
	}
	return Member{}, false
}

func (lb *LoadBalancer) serve(ctx context.Context, l *lbListener) {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			m, ok := l.pick()
			if !ok {
				return // no member answers: the connection is closed
			}
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			up, err := DialIn(dctx, filepath.Join(NetNSDir, lb.ns), "tcp", m.String())
			cancel()
			if err != nil {
				lb.log.Debug("load balancer: member did not answer", "lb", lb.id, "member", m, "err", err)
				return
			}
			defer up.Close()
			var last atomic.Int64
			last.Store(time.Now().UnixNano())
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, activeReader{c, &last}); closeWrite(up); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, activeReader{up, &last}); closeWrite(c); done <- struct{}{} }()
			l.mu.Lock()
			idle := l.idle
			l.mu.Unlock()
			var tick <-chan time.Time
			if idle > 0 {
				t := time.NewTicker(max(min(idle/10, time.Second), 10*time.Millisecond))
				defer t.Stop()
				tick = t.C
			}
			for pending := 2; pending > 0; {
				select {
				case <-done:
					pending--
				case <-ctx.Done():
					return
				case <-tick:
					if time.Since(time.Unix(0, last.Load())) > idle {
						return // idle: both sides are closed
					}
				}
			}
		}()
	}
}

// activeReader notes the time of each read that carried data.
type activeReader struct {
	r    io.Reader
	last *atomic.Int64
}

func (a activeReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// probe runs the health monitor: a TCP connect to each member every
// Delay, within Timeout.
func (lb *LoadBalancer) probe(ctx context.Context, l *lbListener) {
	for {
		l.mu.Lock()
		mon, members := l.monitor, slices.Clone(l.members)
		l.mu.Unlock()
		delay := time.Second
		if mon != nil {
			delay = mon.Delay
			for _, m := range members {
				pctx, cancel := context.WithTimeout(ctx, mon.Timeout)
				c, err := DialIn(pctx, filepath.Join(NetNSDir, lb.ns), "tcp", m.String())
				cancel()
				if c != nil {
					c.Close()
				}
				l.mu.Lock()
				s := l.streak[m]
				switch {
				case err == nil && s >= 0:
					s++
				case err == nil:
					s = 1
				case s <= 0:
					s--
				default:
					s = -1
				}
				l.streak[m] = s
				if s >= max(mon.Retries, 1) {
					l.status[m] = MemberOnline
				} else if -s >= max(mon.RetriesDown, 1) {
					l.status[m] = MemberError
				}
				l.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// Close stops the listeners and removes the amphora.
func (lb *LoadBalancer) Close(ctx context.Context) error {
	lb.mu.Lock()
	ls := lb.listeners
	lb.listeners = map[int]*lbListener{}
	lb.mu.Unlock()
	for _, l := range ls {
		l.cancel()
		l.ln.Close()
		l.done.Wait()
	}
	err := lb.f.RemovePort(ctx, "vip-"+lb.id)
	lb.f.mu.Lock()
	lb.f.amphorae = slices.DeleteFunc(lb.f.amphorae, func(ns string) bool { return ns == lb.ns })
	lb.f.mu.Unlock()
	return errors.Join(err, DeleteNetNS(ctx, lb.ns))
}

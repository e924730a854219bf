//go:build realhosts

package machine_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/cloudsim/machine"
)

func hello(net.Conn) string { return "hello\n" }

// TestFabricSecurityGroups: four ports on one network, each in its own
// namespace with a TCP service on port 22. Security groups hold as
// Neutron's do: ingress only what a rule allows (replies pass without a
// rule), egress only what a rule allows, a rule's remote prefix counts,
// a port sends from its own address only; closed, nothing is left.
func TestFabricSecurityGroups(t *testing.T) {
	ctx := context.Background()
	fab := newTestFabric(t, map[string]bool{"net-a": false})
	egressAll := machine.Rule{Direction: "egress"}
	ssh := machine.Rule{Direction: "ingress", Protocol: "tcp", PortMin: 22, PortMax: 22, Remote: "10.99.1.0/28"}
	ips := map[string]string{"a": "10.99.1.2", "b": "10.99.1.3", "c": "10.99.1.4", "far": "10.99.1.20"}
	ns := map[string]string{}
	for name, rules := range map[string][]machine.Rule{
		"a":   {ssh, egressAll},
		"b":   {{Direction: "ingress", Protocol: "tcp", PortMin: 80, PortMax: 80}, egressAll},
		"c":   {egressAll},
		"far": {egressAll}, // outside ssh's remote prefix
	} {
		ns[name] = fab.host(name, "net-a", ips[name]+"/24", "", rules...)
		answer(t, ns[name], ips[name]+":22", hello)
	}
	reach := func(from, to string, d net.Dialer) bool {
		t.Helper()
		return ask(ns[from], d, ips[to]+":22") == "hello\n"
	}
	for _, tc := range []struct {
		from, to string
		want     bool
	}{
		{"c", "a", true},    // a allows 22 from the subnet; the reply needs no rule on c
		{"b", "a", true},    //
		{"c", "b", false},   // b allows 80 only
		{"far", "a", false}, // outside the rule's remote prefix
		{"a", "c", false},   // c allows no ingress at all
	} {
		if got := reach(tc.from, tc.to, net.Dialer{}); got != tc.want {
			t.Errorf("%s -> %s:22: reached %v, want %v\n%s", tc.from, tc.to, got, tc.want, fab.Ruleset())
		}
	}
	// Egress is a rule too.
	if err := fab.SetRules(ctx, "port-c", nil); err != nil {
		t.Fatal(err)
	}
	if reach("c", "a", net.Dialer{}) {
		t.Error("c reached a with no egress rule")
	}
	if err := fab.SetRules(ctx, "port-c", []machine.Rule{egressAll}); err != nil {
		t.Fatal(err)
	}
	// A port sends from its own address only.
	if err := machine.IP(ctx, filepath.Base(ns["c"]), "addr", "add", "10.99.1.9/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if reach("c", "a", net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("10.99.1.9")}}) {
		t.Error("c reached a from an address that is not its port's")
	}
	if !reach("c", "a", net.Dialer{}) {
		t.Error("c no longer reaches a from its own address")
	}

	if err := fab.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(machine.NetNSDir, fab.nsName("f"))); !os.IsNotExist(err) {
		t.Errorf("the fabric's namespace is left: %v", err)
	}
	if err := machine.IP(ctx, filepath.Base(ns["a"]), "link", "show", "eth0"); err == nil {
		t.Error("a port's machine end is left after the fabric closed")
	}
}

// newRouted is a fabric with an external network (public, 172.24.4.0/24,
// the edge at .2) and a tenant network (tenant, its router leg at
// tenantGateway) joined by router r1 (gateway 172.24.4.10); it returns
// the fabric and the edge's namespace.
func newRouted(t *testing.T, tenantGateway string) (*testFabric, string) {
	t.Helper()
	ctx := context.Background()
	fab := newTestFabric(t, map[string]bool{"public": true, "tenant": false})
	if err := fab.AddRouter(ctx, "r1", "public", netip.MustParsePrefix("172.24.4.10/24")); err != nil {
		t.Fatal(err)
	}
	if err := fab.AddRouterInterface(ctx, "r1", "tenant", netip.MustParsePrefix(tenantGateway)); err != nil {
		t.Fatal(err)
	}
	edge := fab.ns("e")
	if err := fab.AddEdge(ctx, "public", filepath.Base(edge), netip.MustParsePrefix("172.24.4.2/24")); err != nil {
		t.Fatal(err)
	}
	return fab, edge
}

// TestFabricFloatingIPs: a router between a tenant network and an
// external one. The edge, on the external network, reaches a port
// through its floating IP (the port sees the edge's own address: Neutron
// does not SNAT what comes in) when its security group lets it, and not
// by its fixed IP (nothing routes there); what a port sends out leaves
// from its floating IP, or from the router's gateway address when it has
// none; a disassociated floating IP reaches nothing.
func TestFabricFloatingIPs(t *testing.T) {
	ctx := context.Background()
	fab, edge := newRouted(t, "10.99.2.1/24")
	// Each service answers with the address the connection came from.
	from := func(c net.Conn) string {
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		return host
	}
	open := []machine.Rule{{Direction: "ingress", Protocol: "tcp", PortMin: 22, PortMax: 22}, {Direction: "egress"}}
	closed := []machine.Rule{{Direction: "egress"}}
	ns := map[string]string{}
	for name, p := range map[string]struct {
		ip    string
		rules []machine.Rule
	}{"a": {"10.99.2.5", open}, "b": {"10.99.2.6", closed}, "c": {"10.99.2.7", open}} {
		ns[name] = fab.host(name, "tenant", p.ip+"/24", "10.99.2.1", p.rules...)
		answer(t, ns[name], p.ip+":22", from)
	}
	answer(t, edge, "172.24.4.2:8080", from)
	for fip, fixed := range map[string]string{"172.24.4.50": "10.99.2.5", "172.24.4.51": "10.99.2.6"} {
		if err := fab.SetFloatingIP(ctx, "r1", netip.MustParseAddr(fip), netip.MustParseAddr(fixed)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, from, addr, want string
	}{
		{"in by the floating IP", edge, "172.24.4.50:22", "172.24.4.2"},
		{"a group without 22", edge, "172.24.4.51:22", "unreachable"},
		{"the fixed IP from outside", edge, "10.99.2.5:22", "unreachable"},
		{"out from the floating IP", ns["a"], "172.24.4.2:8080", "172.24.4.50"},
		{"out from the router's gateway", ns["c"], "172.24.4.2:8080", "172.24.4.10"},
	} {
		if got := ask(tc.from, net.Dialer{}, tc.addr); got != tc.want {
			t.Errorf("%s (%s): %q, want %q", tc.name, tc.addr, got, tc.want)
		}
	}
	if err := fab.SetFloatingIP(ctx, "r1", netip.MustParseAddr("172.24.4.50"), netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if got := ask(edge, net.Dialer{}, "172.24.4.50:22"); got != "unreachable" {
		t.Errorf("a disassociated floating IP still reaches: %q", got)
	}
}

// TestFabricLoadBalancer: a TCP listener on a VIP forwards to its pool's
// members round robin, also through the VIP's floating IP from the edge;
// a member that stops answering is marked ERROR by the health monitor
// and gets no more connections.
func TestFabricLoadBalancer(t *testing.T) {
	ctx := context.Background()
	fab, edge := newRouted(t, "10.99.3.1/24")
	listeners := map[string]net.Listener{}
	var members []machine.Member
	for i, name := range []string{"a", "b"} {
		ip := netip.AddrFrom4([4]byte{10, 99, 3, byte(5 + i)})
		rules := []machine.Rule{{Direction: "ingress", Protocol: "tcp", PortMin: 6443, PortMax: 6443, Remote: "10.99.3.0/24"}, {Direction: "egress"}}
		path := fab.host(name, "tenant", ip.String()+"/24", "10.99.3.1", rules...)
		listeners[name] = answer(t, path, ip.String()+":6443", func(net.Conn) string { return name })
		members = append(members, machine.Member{Address: ip, Port: 6443})
	}
	lb, err := fab.AddLoadBalancer(ctx, "lb1", "tenant", netip.MustParsePrefix("10.99.3.100/24"), netip.MustParseAddr("10.99.3.1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close(context.Background()) })
	mon := &machine.Monitor{Delay: 100 * time.Millisecond, Timeout: 300 * time.Millisecond, Retries: 1, RetriesDown: 2}
	if err := lb.SetListener(ctx, 6443, members, mon, machine.DefaultIdle, nil); err != nil {
		t.Fatal(err)
	}
	if err := fab.SetFloatingIP(ctx, "r1", netip.MustParseAddr("172.24.4.60"), netip.MustParseAddr("10.99.3.100")); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range 4 {
		seen[ask(edge, net.Dialer{}, "172.24.4.60:6443")]++
	}
	if seen["a"] != 2 || seen["b"] != 2 {
		t.Fatalf("round robin through the VIP's floating IP: %v", seen)
	}
	// Octavia's allowed_cidrs: only the sources they hold get in (the
	// edge dials from 172.24.4.0/24).
	for _, tc := range []struct {
		allowed string
		in      bool
	}{{"10.99.3.0/24", false}, {"172.24.4.0/24", true}} {
		if err := lb.SetListener(ctx, 6443, members, mon, machine.DefaultIdle, []netip.Prefix{netip.MustParsePrefix(tc.allowed)}); err != nil {
			t.Fatal(err)
		}
		if got := ask(edge, net.Dialer{}, "172.24.4.60:6443"); (got == "a" || got == "b") != tc.in {
			t.Errorf("the edge through a listener allowing %s only: %q, want let in %t", tc.allowed, got, tc.in)
		}
	}
	if err := lb.SetListener(ctx, 6443, members, mon, machine.DefaultIdle, nil); err != nil {
		t.Fatal(err)
	}
	listeners["b"].Close()
	deadline := time.Now().Add(10 * time.Second)
	for lb.Status(6443)[members[1]] != machine.MemberError {
		if time.Now().After(deadline) {
			t.Fatalf("the dead member is not marked ERROR: %v", lb.Status(6443))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := lb.Status(6443)[members[0]]; st != machine.MemberOnline {
		t.Errorf("the live member is %s", st)
	}
	for range 4 {
		if got := ask(edge, net.Dialer{}, "172.24.4.60:6443"); got != "a" {
			t.Errorf("a connection went to %q with b in ERROR", got)
		}
	}

	// Idle timeouts, as HAProxy keeps them: a connection that carries
	// data either way stays; one silent for the listener's idle timeout
	// is closed.
	rules := []machine.Rule{{Direction: "ingress", Protocol: "tcp", PortMin: 6443, PortMax: 7000, Remote: "10.99.3.0/24"}, {Direction: "egress"}}
	if err := fab.SetRules(ctx, "port-a", rules); err != nil {
		t.Fatal(err)
	}
	echo, err := machine.ListenIn(filepath.Join(machine.NetNSDir, fab.nsName("a")), "tcp", "10.99.3.5:7000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	const idle = 600 * time.Millisecond
	if err := lb.SetListener(ctx, 7000, []machine.Member{{Address: netip.MustParseAddr("10.99.3.5"), Port: 7000}}, nil, idle, nil); err != nil {
		t.Fatal(err)
	}
	conn, err := machine.DialIn(ctx, edge, "tcp", "172.24.4.60:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 16)
	for range 6 { // 1.2 s of traffic, every 200 ms: twice the idle timeout
		time.Sleep(200 * time.Millisecond)
		if _, err := conn.Write([]byte("x")); err != nil {
			t.Fatalf("a busy connection was cut: %v", err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := conn.Read(buf); err != nil {
			t.Fatalf("a busy connection was cut: %v", err)
		}
	}
	silent := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(buf); !errors.Is(err, io.EOF) {
		t.Errorf("a silent connection: %v, want it closed (EOF)", err)
	}
	if took := time.Since(silent); took < idle || took > idle+time.Second {
		t.Errorf("a silent connection was closed after %v, want its idle timeout %v", took, idle)
	}
}

// TestDeleteNetNSKillsWhatRunsThere: a process left in a namespace (a
// DHCP server a crashed simulator left) is killed with it, so the
// namespace does not live on unnamed.
func TestDeleteNetNSKillsWhatRunsThere(t *testing.T) {
	fab := newTestFabric(t, nil)
	name := fab.nsName("left")
	if _, err := machine.AddNetNS(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	left := exec.Command("ip", "netns", "exec", name, "sleep", "600")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- left.Wait() }()
	// Left there: ip netns exec has moved it in (Start returns before).
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, _ := exec.Command("ip", "netns", "pids", name).Output()
		if slices.Contains(strings.Fields(string(out)), strconv.Itoa(left.Process.Pid)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process never ran in %s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := machine.DeleteNetNS(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = left.Process.Kill()
		t.Fatal("the process in the deleted namespace still runs")
	}
	if _, err := os.Stat(filepath.Join(machine.NetNSDir, name)); !os.IsNotExist(err) {
		t.Errorf("the namespace is still named: %v", err)
	}
}

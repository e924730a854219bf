//go:build realhosts

package machine_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"opke.dev/opke/cloudsim/machine"
)

// TestFabricSecurityGroups: three ports on one network, each in its own
// namespace with a TCP service on port 22. Security groups hold as
// Neutron's do: ingress only what a rule allows (replies pass without a
// rule), egress only what a rule allows, a rule's remote prefix counts,
// a port sends from its own address only; closed, nothing is left.
func TestFabricSecurityGroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the fabric needs root (network namespaces, nftables)")
	}
	ctx := context.Background()
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	fab, err := machine.NewFabric(ctx, "opke-tf-"+id)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = fab.Close(context.Background())
		}
	})
	if err := fab.AddNetwork(ctx, "net-a", false); err != nil {
		t.Fatal(err)
	}
	egressAll := machine.Rule{Direction: "egress"}
	ssh := machine.Rule{Direction: "ingress", Protocol: "tcp", PortMin: 22, PortMax: 22, Remote: "10.99.1.0/28"}
	type host struct {
		name, ns, ip string
		rules        []machine.Rule
	}
	hosts := []*host{
		{name: "a", ip: "10.99.1.2", rules: []machine.Rule{ssh, egressAll}},
		{name: "b", ip: "10.99.1.3", rules: []machine.Rule{{Direction: "ingress", Protocol: "tcp", PortMin: 80, PortMax: 80}, egressAll}},
		{name: "c", ip: "10.99.1.4", rules: []machine.Rule{egressAll}},
		{name: "far", ip: "10.99.1.20", rules: []machine.Rule{egressAll}}, // outside ssh's remote prefix
	}
	by := map[string]*host{}
	for i, h := range hosts {
		name := fmt.Sprintf("opke-t%s-%s", h.name, id)
		h.ns, err = machine.AddNetNS(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = machine.DeleteNetNS(context.Background(), name) })
		port := machine.Port{ID: "port-" + h.name, Network: "net-a", NetNS: name, IfName: "eth0",
			MAC: fmt.Sprintf("fa:16:3e:00:00:%02x", i+1), Address: netip.MustParsePrefix(h.ip + "/24")}
		if err := fab.AddPort(ctx, port); err != nil {
			t.Fatal(err)
		}
		if err := fab.SetRules(ctx, port.ID, h.rules); err != nil {
			t.Fatal(err)
		}
		ln, err := machine.ListenIn(h.ns, "tcp", h.ip+":22")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("hello\n"))
				c.Close()
			}
		}()
		by[h.name] = h
	}
	reach := func(from, to string, local string) bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var c net.Conn
		var err error
		if local != "" {
			// A dial from another address than the port's: add it first.
			c, err = dialFrom(ctx, by[from].ns, local, by[to].ip+":22")
		} else {
			c, err = machine.DialIn(ctx, by[from].ns, "tcp", by[to].ip+":22")
		}
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		got, _ := io.ReadAll(c)
		return string(got) == "hello\n"
	}
	for _, tc := range []struct {
		from, to, local string
		want            bool
	}{
		{"c", "a", "", true},    // a allows 22 from the subnet; the reply needs no rule on c
		{"b", "a", "", true},    //
		{"c", "b", "", false},   // b allows 80 only
		{"far", "a", "", false}, // outside the rule's remote prefix
		{"a", "c", "", false},   // c allows no ingress at all
	} {
		if got := reach(tc.from, tc.to, tc.local); got != tc.want {
			t.Errorf("%s -> %s:22: reached %v, want %v\n%s", tc.from, tc.to, got, tc.want, fab.Ruleset())
		}
	}
	// Egress is a rule too.
	if err := fab.SetRules(ctx, "port-c", nil); err != nil {
		t.Fatal(err)
	}
	if reach("c", "a", "") {
		t.Error("c reached a with no egress rule")
	}
	if err := fab.SetRules(ctx, "port-c", []machine.Rule{egressAll}); err != nil {
		t.Fatal(err)
	}
	// A port sends from its own address only.
	if err := machine.IP(ctx, filepath.Base(by["c"].ns), "addr", "add", "10.99.1.9/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if reach("c", "a", "10.99.1.9") {
		t.Error("c reached a from an address that is not its port's")
	}
	if !reach("c", "a", "") {
		t.Error("c no longer reaches a from its own address")
	}

	if err := fab.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := os.Stat(filepath.Join(machine.NetNSDir, "opke-tf-"+id)); !os.IsNotExist(err) {
		t.Errorf("the fabric's namespace is left: %v", err)
	}
	if err := machine.IP(ctx, filepath.Base(by["a"].ns), "link", "show", "eth0"); err == nil {
		t.Error("a port's machine end is left after the fabric closed")
	}
}

func dialFrom(ctx context.Context, ns, local, addr string) (net.Conn, error) {
	var c net.Conn
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	done := make(chan error, 1)
	go func() {
		var err error
		c, err = machine.DialWith(ctx, ns, d, "tcp", addr)
		done <- err
	}()
	return c, <-done
}

// TestFabricFloatingIPs: a router between a tenant network and an
// external one. The edge, on the external network, reaches a port
// through its floating IP (the port sees the edge's own address: Neutron
// does not SNAT what comes in) when its security group lets it, and not
// by its fixed IP (nothing routes there); what a port sends out leaves
// from its floating IP, or from the router's gateway address when it has
// none; a disassociated floating IP reaches nothing.
func TestFabricFloatingIPs(t *testing.T) {
	w := newRouted(t, "10.99.2.1/24")
	ctx, fab, edge, ns := context.Background(), w.fab, w.edge, w.ns
	// serve answers each connection with the address it came from.
	serve := func(nsPath, addr string) {
		ln, err := machine.ListenIn(nsPath, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
				_, _ = c.Write([]byte(host))
				c.Close()
			}
		}()
	}
	ask := func(nsPath, addr string) string {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := machine.DialIn(ctx, nsPath, "tcp", addr)
		if err != nil {
			return "unreachable"
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		got, _ := io.ReadAll(c)
		return string(got)
	}
	open := []machine.Rule{{Direction: "ingress", Protocol: "tcp", PortMin: 22, PortMax: 22}, {Direction: "egress"}}
	closed := []machine.Rule{{Direction: "egress"}}
	ports := map[string]string{}
	for i, p := range []struct {
		name, ip string
		rules    []machine.Rule
	}{{"a", "10.99.2.5", open}, {"b", "10.99.2.6", closed}, {"c", "10.99.2.7", open}} {
		path := ns(p.name)
		port := machine.Port{ID: "port-" + p.name, Network: "tenant", NetNS: filepath.Base(path), IfName: "eth0",
			MAC: fmt.Sprintf("fa:16:3e:00:02:%02x", i+1), Address: netip.MustParsePrefix(p.ip + "/24"), Gateway: netip.MustParseAddr("10.99.2.1")}
		if err := fab.AddPort(ctx, port); err != nil {
			t.Fatal(err)
		}
		if err := fab.SetRules(ctx, port.ID, p.rules); err != nil {
			t.Fatal(err)
		}
		serve(path, p.ip+":22")
		ports[p.name] = path
	}
	serve(edge, "172.24.4.2:8080")
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
		{"out from the floating IP", ports["a"], "172.24.4.2:8080", "172.24.4.50"},
		{"out from the router's gateway", ports["c"], "172.24.4.2:8080", "172.24.4.10"},
	} {
		if got := ask(tc.from, tc.addr); got != tc.want {
			t.Errorf("%s (%s): %q, want %q", tc.name, tc.addr, got, tc.want)
		}
	}
	if err := fab.SetFloatingIP(ctx, "r1", netip.MustParseAddr("172.24.4.50"), netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if got := ask(edge, "172.24.4.50:22"); got != "unreachable" {
		t.Errorf("a disassociated floating IP still reaches: %q", got)
	}
}

// TestFabricLoadBalancer: a TCP listener on a VIP forwards to its pool's
// members round robin, also through the VIP's floating IP from the edge;
// a member that stops answering is marked ERROR by the health monitor
// and gets no more connections.
func TestFabricLoadBalancer(t *testing.T) {
	w := newRouted(t, "10.99.3.1/24")
	ctx, fab, edge, ns := context.Background(), w.fab, w.edge, w.ns
	listeners := map[string]net.Listener{}
	var members []machine.Member
	for i, name := range []string{"a", "b"} {
		path := ns(name)
		ip := fmt.Sprintf("10.99.3.%d", 5+i)
		port := machine.Port{ID: "port-" + name, Network: "tenant", NetNS: filepath.Base(path), IfName: "eth0",
			MAC: fmt.Sprintf("fa:16:3e:00:03:%02x", i+1), Address: netip.MustParsePrefix(ip + "/24"), Gateway: netip.MustParseAddr("10.99.3.1")}
		if err := fab.AddPort(ctx, port); err != nil {
			t.Fatal(err)
		}
		rules := []machine.Rule{{Direction: "ingress", Protocol: "tcp", PortMin: 6443, PortMax: 6443, Remote: "10.99.3.0/24"}, {Direction: "egress"}}
		if err := fab.SetRules(ctx, port.ID, rules); err != nil {
			t.Fatal(err)
		}
		ln, err := machine.ListenIn(path, "tcp", ip+":6443")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(name))
				c.Close()
			}
		}()
		listeners[name] = ln
		members = append(members, machine.Member{Address: netip.MustParseAddr(ip), Port: 6443})
	}
	lb, err := fab.AddLoadBalancer(ctx, "lb1", "tenant", netip.MustParsePrefix("10.99.3.100/24"), netip.MustParseAddr("10.99.3.1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close(context.Background()) })
	mon := &machine.Monitor{Delay: 100 * time.Millisecond, Timeout: 300 * time.Millisecond, Retries: 1, RetriesDown: 2}
	if err := lb.SetListener(ctx, 6443, members, mon); err != nil {
		t.Fatal(err)
	}
	if err := fab.SetFloatingIP(ctx, "r1", netip.MustParseAddr("172.24.4.60"), netip.MustParseAddr("10.99.3.100")); err != nil {
		t.Fatal(err)
	}
	ask := func() string {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := machine.DialIn(ctx, edge, "tcp", "172.24.4.60:6443")
		if err != nil {
			return "unreachable"
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		got, _ := io.ReadAll(c)
		return string(got)
	}
	seen := map[string]int{}
	for range 4 {
		seen[ask()]++
	}
	if seen["a"] != 2 || seen["b"] != 2 {
		t.Fatalf("round robin through the VIP's floating IP: %v", seen)
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
		if got := ask(); got != "a" {
			t.Errorf("a connection went to %q with b in ERROR", got)
		}
	}
}

// routed is a fabric with an external network (public, 172.24.4.0/24,
// the edge at .2) and a tenant network (tenant, CIDR's .1 its router's
// leg) joined by router r1 (gateway 172.24.4.10); ns makes a namespace
// the test removes.
type routed struct {
	fab  *machine.Fabric
	edge string
	ns   func(name string) string
}

func newRouted(t *testing.T, tenantGateway string) routed {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the fabric needs root (network namespaces, nftables)")
	}
	ctx := context.Background()
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	fab, err := machine.NewFabric(ctx, "opke-tf-"+id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fab.Close(context.Background()) })
	for _, step := range []func() error{
		func() error { return fab.AddNetwork(ctx, "public", true) },
		func() error { return fab.AddNetwork(ctx, "tenant", false) },
		func() error { return fab.AddRouter(ctx, "r1", "public", netip.MustParsePrefix("172.24.4.10/24")) },
		func() error { return fab.AddRouterInterface(ctx, "r1", "tenant", netip.MustParsePrefix(tenantGateway)) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	r := routed{fab: fab}
	r.ns = func(name string) string {
		full := "opke-t" + name + "-" + id
		path, err := machine.AddNetNS(ctx, full)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = machine.DeleteNetNS(context.Background(), full) })
		return path
	}
	r.edge = r.ns("e")
	if err := fab.AddEdge(ctx, "public", filepath.Base(r.edge), netip.MustParsePrefix("172.24.4.2/24")); err != nil {
		t.Fatal(err)
	}
	return r
}

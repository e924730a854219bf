//go:build realhosts

package machine_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"opke.dev/opke/cloudsim/machine"
)

// testFabric is a fabric for one test: its networks, and namespaces the
// test removes at its end.
type testFabric struct {
	*machine.Fabric
	t     *testing.T
	id    string
	ports int
}

// newTestFabric makes a fabric with the named networks (true: external).
func newTestFabric(t *testing.T, networks map[string]bool) *testFabric {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the fabric needs root (network namespaces, nftables)")
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	f := &testFabric{t: t, id: hex.EncodeToString(b[:])}
	fab, err := machine.NewFabric(context.Background(), f.nsName("f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fab.Close(context.Background()) })
	f.Fabric = fab
	for _, name := range slices.Sorted(maps.Keys(networks)) {
		if err := fab.AddNetwork(context.Background(), name, networks[name]); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// nsName is the test's name for a namespace of its own.
func (f *testFabric) nsName(name string) string { return "opke-t" + name + "-" + f.id }

// ns makes a namespace the test removes; it returns its path.
func (f *testFabric) ns(name string) string {
	f.t.Helper()
	full := f.nsName(name)
	path, err := machine.AddNetNS(context.Background(), full)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = machine.DeleteNetNS(context.Background(), full) })
	return path
}

// host makes a namespace plugged into network by port "port-NAME" at
// addr (with its subnet's prefix; gateway "" for no default route), its
// security groups' rules set; it returns the namespace's path.
func (f *testFabric) host(name, network, addr, gateway string, rules ...machine.Rule) string {
	f.t.Helper()
	return f.plugHost(name, network, addr, gateway, false, rules...)
}

// plugHost is host, the port's address taken by DHCP if dhcp.
func (f *testFabric) plugHost(name, network, addr, gateway string, dhcp bool, rules ...machine.Rule) string {
	f.t.Helper()
	path := f.ns(name)
	f.ports++
	port := machine.Port{ID: "port-" + name, Network: network, NetNS: f.nsName(name), IfName: "eth0",
		MAC: macOf(f.ports), Address: netip.MustParsePrefix(addr), DHCP: dhcp}
	if gateway != "" {
		port.Gateway = netip.MustParseAddr(gateway)
	}
	if err := f.AddPort(context.Background(), port); err != nil {
		f.t.Fatal(err)
	}
	if err := f.SetRules(context.Background(), port.ID, rules); err != nil {
		f.t.Fatal(err)
	}
	return path
}

// answer serves TCP at addr in the namespace at nsPath, writing reply's
// answer to each connection; it returns the listener (closed at the
// test's end).
func answer(t *testing.T, nsPath, addr string, reply func(net.Conn) string) net.Listener {
	t.Helper()
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
			_, _ = c.Write([]byte(reply(c)))
			c.Close()
		}
	}()
	return ln
}

// ask dials addr from the namespace at nsPath with d and reads the
// answer: "unreachable" when the connection is not made within a second.
func ask(nsPath string, d net.Dialer, addr string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := machine.DialWith(ctx, nsPath, d, "tcp", addr)
	if err != nil {
		return "unreachable"
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	got, _ := io.ReadAll(c)
	return string(got)
}

// macOf is the MAC of the test's nth port.
func macOf(n int) string { return fmt.Sprintf("fa:16:3e:00:%02x:%02x", n>>8, n&0xff) }

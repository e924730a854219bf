package cloudtest

import (
	"context"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/cloud"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

// ServerID is the id of the server called name, from Nova; "" if there
// is none. Two of that name fail the test.
func ServerID(t testing.TB, c *cloud.Clients, name string) string {
	t.Helper()
	pages, err := servers.List(c.Compute, servers.ListOpts{Name: "^" + name + "$"}).AllPages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	all, err := servers.ExtractServers(pages)
	if err != nil || len(all) > 1 {
		t.Fatalf("servers named %s: %d, %v", name, len(all), err)
	}
	if len(all) == 0 {
		return ""
	}
	return all[0].ID
}

// DeleteServer deletes the server called name by hand, as an operator
// would (drift for OPKE); there must be one.
func DeleteServer(t testing.TB, c *cloud.Clients, name string) {
	t.Helper()
	id := ServerID(t, c, name)
	if id == "" {
		t.Fatalf("no server named %s to delete", name)
	}
	if err := servers.Delete(context.Background(), c.Compute, id).ExtractErr(); err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
}

// DialHost opens an SSH session to a server of cluster as OPKE does: as
// core with OPKE's key for the cluster, the host keys pinned from the
// server's console; through gw to address (the host's fixed IP and
// port) when gw is set, else through the edge (address a floating IP's).
// The session is closed at the test's end.
func DialHost(t testing.TB, kv state.KV, c *cloud.Clients, edge, cluster, serverID, address string, gw *ssh.Client) *ssh.Client {
	t.Helper()
	ctx := context.Background()
	signer, _, err := pki.SSHKey(ctx, kv, cluster)
	if err != nil {
		t.Fatal(err)
	}
	console, err := servers.ShowConsoleOutput(ctx, c.Compute, serverID, servers.ShowConsoleOutputOpts{}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := sshx.HostKeysFromConsole(console)
	if err != nil {
		t.Fatal(err)
	}
	auth := sshx.Auth{User: "core", Signer: signer, HostKeys: keys}
	var cl *ssh.Client
	if gw == nil {
		cl, err = sshx.Dial(ctx, sshx.Dialer{Proxy: edge}, address, auth)
	} else {
		cl, err = sshx.Jump(ctx, gw, address, auth)
	}
	if err != nil {
		t.Fatalf("ssh %s (%s): %v", address, serverID, err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// HostRun runs command on a host of cluster as an operator would: over
// SSH (DialHost) through the edge to the gateway's floating IP and on
// through the gateway to the host's fixed IP, each server found by its
// name. It returns the output.
func HostRun(t testing.TB, kv state.KV, c *cloud.Clients, edge, cluster, host, command string) []byte {
	t.Helper()
	ctx := context.Background()
	// address is a server's fixed IP, or with floating its floating IP's.
	address := func(id string, floating bool) string {
		t.Helper()
		pp, err := ports.List(c.Network, ports.ListOpts{DeviceID: id}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := ports.ExtractPorts(pp)
		if err != nil || len(ps) != 1 || len(ps[0].FixedIPs) == 0 {
			t.Fatalf("the port of %s: %d found, %v", id, len(ps), err)
		}
		if !floating {
			return ps[0].FixedIPs[0].IPAddress + ":22"
		}
		fp, err := floatingips.List(c.Network, floatingips.ListOpts{PortID: ps[0].ID}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fips, err := floatingips.ExtractFloatingIPs(fp)
		if err != nil || len(fips) != 1 {
			t.Fatalf("the floating IP of %s: %d found, %v", id, len(fips), err)
		}
		return fips[0].FloatingIP + ":22"
	}
	gateway := cluster + "-gateway-0"
	gwID := ServerID(t, c, gateway)
	target := DialHost(t, kv, c, edge, cluster, gwID, address(gwID, true), nil)
	if host != gateway {
		id := ServerID(t, c, host)
		target = DialHost(t, kv, c, edge, cluster, id, address(id, false), target)
	}
	out, err := sshx.Run(ctx, target, command)
	if err != nil {
		t.Fatalf("%s: %s: %v\n%s", host, command, err, out)
	}
	return out
}

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

// HostRun runs command on a host of cluster as an operator would: over
// SSH as core with OPKE's key for the cluster, through the edge to the
// gateway's floating IP and on through the gateway to the host's fixed
// IP, each host key pinned from its console. It returns the output.
func HostRun(t testing.TB, kv state.KV, c *cloud.Clients, edge, cluster, host, command string) []byte {
	t.Helper()
	ctx := context.Background()
	signer, _, err := pki.SSHKey(ctx, kv, cluster)
	if err != nil {
		t.Fatal(err)
	}
	gateway := cluster + "-gateway-0"
	auth := func(server string) (sshx.Auth, string) {
		t.Helper()
		pages, err := servers.List(c.Compute, servers.ListOpts{Name: "^" + server + "$"}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all, err := servers.ExtractServers(pages)
		if err != nil || len(all) != 1 {
			t.Fatalf("server %s: %d found, %v", server, len(all), err)
		}
		console, err := servers.ShowConsoleOutput(ctx, c.Compute, all[0].ID, servers.ShowConsoleOutputOpts{}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		keys, err := sshx.HostKeysFromConsole(console)
		if err != nil {
			t.Fatal(err)
		}
		pp, err := ports.List(c.Network, ports.ListOpts{DeviceID: all[0].ID}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := ports.ExtractPorts(pp)
		if err != nil || len(ps) != 1 || len(ps[0].FixedIPs) == 0 {
			t.Fatalf("the port of %s: %d found, %v", server, len(ps), err)
		}
		addr := ps[0].FixedIPs[0].IPAddress
		if server == gateway {
			fp, err := floatingips.List(c.Network, floatingips.ListOpts{PortID: ps[0].ID}).AllPages(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fips, err := floatingips.ExtractFloatingIPs(fp)
			if err != nil || len(fips) != 1 {
				t.Fatalf("the floating IP of %s: %d found, %v", server, len(fips), err)
			}
			addr = fips[0].FloatingIP
		}
		return sshx.Auth{User: "core", Signer: signer, HostKeys: keys}, addr + ":22"
	}
	a, addr := auth(gateway)
	gw, err := sshx.Dial(ctx, sshx.Dialer{Proxy: edge}, addr, a)
	if err != nil {
		t.Fatalf("ssh %s: %v", gateway, err)
	}
	defer gw.Close()
	target := gw
	if host != gateway {
		a, addr := auth(host)
		var h *ssh.Client
		if h, err = sshx.Jump(ctx, gw, addr, a); err != nil {
			t.Fatalf("ssh %s: %v", host, err)
		}
		defer h.Close()
		target = h
	}
	out, err := sshx.Run(ctx, target, command)
	if err != nil {
		t.Fatalf("%s: %s: %v\n%s", host, command, err, out)
	}
	return out
}

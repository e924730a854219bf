package machine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// DHCP is a network's DHCP server as Neutron's DHCP agent runs one:
// dnsmasq in a namespace of its own, on the network's DHCP port, handing
// each port of the network its fixed IP by MAC (static leases only), the
// subnet's gateway as the default route, and DNS servers: the subnet's
// dns_nameservers, or, without them, itself. As the agent's dnsmasq, it
// answers the ports' own names and sends any other name to the site's
// resolver (the agent's dnsmasq_dns_servers). No traffic leaves the test
// world, so that resolver knows no zone: every other name is NXDOMAIN, as
// a cloud's resolver answers for a name under openstacklocal and an
// air-gapped site's for the internet's names.
type DHCP struct {
	// Port is the network's DHCP port (network:dhcp): its ID, Network,
	// MAC and Address (with the subnet's prefix).
	Port Port
	// Gateway is the subnet's gateway_ip (none: no default route).
	Gateway netip.Addr
	// DNS are the subnet's dns_nameservers (none: the server's address).
	DNS []netip.Addr
	// Hosts are the network's ports that get a lease.
	Hosts []DHCPHost
	// Domain is the DNS domain of the ports' names (Neutron's
	// dns_domain: openstacklocal).
	Domain string
}

// DHCPHost is a port's static lease.
type DHCPHost struct {
	MAC     string
	Address netip.Addr
	// Name is the host name the lease gives (Neutron's port dns_name,
	// which Nova sets to the server's host name).
	Name string
}

type dhcpServer struct {
	ns, dir string
	addr    netip.Addr // its port's: where its replies come from
	key     string     // what needs a restart when it changes
	cmd     *exec.Cmd
	done    chan struct{}
}

// dhcpKey is what a running server cannot take without a restart.
func (d DHCP) key() string {
	return fmt.Sprint(d.Port.ID, d.Port.MAC, d.Port.Address, d.Gateway, d.DNS, d.Domain)
}

// SetDHCP starts a network's DHCP server, or gives a running one its new
// leases (dnsmasq reads them again on SIGHUP); a changed port, gateway or
// DNS restarts it.
func (f *Fabric) SetDHCP(ctx context.Context, d DHCP) error {
	network := d.Port.Network
	f.mu.Lock()
	srv := f.dhcp[network]
	f.mu.Unlock()
	if srv != nil && srv.key != d.key() {
		if err := f.RemoveDHCP(ctx, network); err != nil {
			return err
		}
		srv = nil
	}
	if srv != nil {
		if err := writeLeases(srv.dir, d); err != nil {
			return err
		}
		if err := srv.cmd.Process.Signal(unix.SIGHUP); err != nil {
			return fmt.Errorf("dhcp of %s: %w", network, err)
		}
		return nil
	}
	srv = &dhcpServer{ns: f.name + "-" + short("d", network), addr: d.Port.Address.Addr(), key: d.key(), done: make(chan struct{})}
	if _, err := AddNetNS(ctx, srv.ns); err != nil {
		return err
	}
	fail := func(err error) error {
		if srv.dir != "" {
			_ = os.RemoveAll(srv.dir)
		}
		return errors.Join(err, DeleteNetNS(context.WithoutCancel(ctx), srv.ns))
	}
	if err := f.plug(ctx, d.Port.ID, srv.ns, "eth0", network, d.Port.MAC, d.Port.Address.String()); err != nil {
		return fail(err)
	}
	dir, err := os.MkdirTemp("", "opke-dhcp-")
	if err != nil {
		return fail(err)
	}
	srv.dir = dir
	// dnsmasq reads its files as nobody once it has started.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	if err := writeLeases(dir, d); err != nil {
		return fail(err)
	}
	// As Neutron's agent starts it (neutron/agent/linux/dhcp.py), less
	// what this world lacks (IPv6, metadata routes, ipxe).
	pfx := d.Port.Address.Masked()
	args := []string{"netns", "exec", srv.ns, "dnsmasq",
		"--keep-in-foreground", "--conf-file=/dev/null", "--no-hosts", "--no-resolv",
		"--bind-interfaces", "--interface=eth0", "--except-interface=lo",
		"--dhcp-hostsfile=" + filepath.Join(dir, "host"), "--addn-hosts=" + filepath.Join(dir, "addn_hosts"),
		"--leasefile-ro", "--dhcp-authoritative", "--pid-file=" + filepath.Join(dir, "pid"),
		"--dhcp-range=" + pfx.Addr().String() + ",static," + net.IP(net.CIDRMask(pfx.Bits(), 32)).String() + ",86400s",
		"--domain=" + d.Domain, "--log-facility=-",
		// Where Neutron's command line has --server=<dnsmasq_dns_servers>:
		// the site's resolver, which knows no zone here (NXDOMAIN for all).
		// Without it dnsmasq answers REFUSED, which resolvers (dig +search,
		// CoreDNS's forward) do not take as "try the next search domain".
		"--local=/#/",
	}
	if d.Gateway.IsValid() {
		args = append(args, "--dhcp-option=option:router,"+d.Gateway.String())
	} else {
		args = append(args, "--dhcp-option=option:router")
	}
	if len(d.DNS) > 0 {
		var s []string
		for _, a := range d.DNS {
			s = append(s, a.String())
		}
		args = append(args, "--dhcp-option=option:dns-server,"+strings.Join(s, ","))
	}
	cmd := exec.Command("ip", args...) //nolint:gosec // fixed program, our arguments
	out, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return fail(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Stopped with its network or the fabric; one a crashed simulator
	// left is killed with its namespace (DeleteNetNS).
	if err := cmd.Start(); err != nil {
		out.Close()
		return fail(fmt.Errorf("dhcp of %s: dnsmasq: %w", network, err))
	}
	out.Close()
	srv.cmd = cmd
	go func() { _ = cmd.Wait(); close(srv.done) }()
	f.mu.Lock()
	f.dhcp[network] = srv
	f.mu.Unlock()
	return f.apply(ctx)
}

// RemoveDHCP stops a network's DHCP server and removes its namespace.
func (f *Fabric) RemoveDHCP(ctx context.Context, network string) error {
	f.mu.Lock()
	srv := f.dhcp[network]
	delete(f.dhcp, network)
	f.mu.Unlock()
	if srv == nil {
		return nil
	}
	return errors.Join(srv.stop(ctx), f.apply(ctx))
}

func (s *dhcpServer) stop(ctx context.Context) error {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = os.RemoveAll(s.dir)
	return DeleteNetNS(ctx, s.ns)
}

// DHCPLog is what a network's dnsmasq logged (for a test's failure).
func (f *Fabric) DHCPLog(network string) string {
	f.mu.Lock()
	srv := f.dhcp[network]
	f.mu.Unlock()
	if srv == nil {
		return ""
	}
	b, _ := os.ReadFile(filepath.Join(srv.dir, "log"))
	return string(b)
}

// writeLeases writes the static leases (MAC,name,address) and the names
// dnsmasq answers, as Neutron's agent writes its host and addn_hosts
// files.
func writeLeases(dir string, d DHCP) error {
	hosts := slices.Clone(d.Hosts)
	slices.SortFunc(hosts, func(a, b DHCPHost) int { return a.Address.Compare(b.Address) })
	var leases, names strings.Builder
	for _, h := range hosts {
		name := dnsLabel(h.Name, h.Address)
		fmt.Fprintf(&leases, "%s,%s.%s,%s\n", h.MAC, name, d.Domain, h.Address)
		fmt.Fprintf(&names, "%s\t%s.%s %s\n", h.Address, name, d.Domain, name)
	}
	for file, body := range map[string]string{"host": leases.String(), "addn_hosts": names.String()} {
		tmp := filepath.Join(dir, file+".new")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil { //nolint:gosec // dnsmasq reads it as nobody
			return fmt.Errorf("dhcp leases: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
			return fmt.Errorf("dhcp leases: %w", err)
		}
	}
	return nil
}

// dnsLabel is a host name as Neutron makes one: the name given, if it is
// a valid DNS label, else host-<address with dashes>.
func dnsLabel(name string, addr netip.Addr) string {
	ok := name != "" && len(name) <= 63 && name[0] != '-' && name[len(name)-1] != '-'
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if ok {
		return name
	}
	return "host-" + strings.ReplaceAll(addr.String(), ".", "-")
}

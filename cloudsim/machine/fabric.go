package machine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Fabric is the network the simulator's machines live on, all of it in
// one network namespace of its own: a bridge per Neutron network, a veth
// pair per port (one end the machine's interface, with the port's MAC and
// fixed IP, the other a port of its network's bridge), and the ports'
// security groups as nftables rules, enforced as Neutron's are: stateful
// (replies pass), ingress only what a rule allows, egress what a rule
// allows, and a port sends only from its own address. Bridged IPv4 goes
// through the inet family's forward hook (br_netfilter), where conntrack
// works; the bridge family's own conntrack is not in this kernel.
type Fabric struct {
	name string
	mu   sync.Mutex
	// ports and their rules, to write the ruleset whole on each change.
	ports map[string]*fabricPort
	// external are the bridges of external networks: no security group
	// applies there (routers' gateways, floating IPs, the edge).
	external map[string]bool
	routers  map[string]*router
	// amphorae are the load balancers' namespaces, by name.
	amphorae []string
	// dhcp are the networks' DHCP servers, by network.
	dhcp map[string]*dhcpServer
}

// router is a Neutron router: a namespace of its own with a leg on each
// of its subnets (their gateway address) and one on its external network,
// which routes between them, SNATs what leaves, and DNATs its floating IPs.
type router struct {
	ns       string
	gateway  netip.Prefix // its address on the external network
	external string       // the external network
	fips     map[netip.Addr]netip.Addr
}

type fabricPort struct {
	Port
	rules []Rule
}

// Port is a Neutron port plugged into a machine.
type Port struct {
	ID, Network string
	// NetNS names the machine's network namespace; IfName is the
	// interface there (eth0).
	NetNS, IfName string
	MAC           string
	// Address is the fixed IP with its subnet's prefix (10.0.0.5/24);
	// Gateway, if set, is the default route.
	Address netip.Prefix
	Gateway netip.Addr
	// DHCP: the machine takes its address, route and DNS servers from
	// its network's DHCP server (SetDHCP) as a VM does, and the fabric
	// sets neither Address nor Gateway on the interface (it still
	// enforces them: the port's rules and anti-spoofing).
	DHCP bool
}

// Rule is a security group rule, as Neutron has it.
type Rule struct {
	// Direction is ingress or egress.
	Direction string
	// Protocol is tcp, udp, icmp or "" (any).
	Protocol string
	// PortMin and PortMax bound tcp and udp ports (0: any).
	PortMin, PortMax int
	// Remote is the remote_ip_prefix ("" or 0.0.0.0/0: anywhere).
	Remote string
}

// NewFabric makes the fabric's namespace (its name: name).
func NewFabric(ctx context.Context, name string) (*Fabric, error) {
	if _, err := AddNetNS(ctx, name); err != nil {
		return nil, err
	}
	f := &Fabric{name: name, ports: map[string]*fabricPort{}, external: map[string]bool{}, routers: map[string]*router{},
		dhcp: map[string]*dhcpServer{}}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", name, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1").CombinedOutput(); err != nil {
		_ = DeleteNetNS(context.WithoutCancel(ctx), name)
		return nil, fmt.Errorf("fabric %s: %w: %s", name, err, out)
	}
	if err := f.apply(ctx); err != nil {
		_ = DeleteNetNS(context.WithoutCancel(ctx), name)
		return nil, err
	}
	if err := conntrackAsKubeProxy(runtime.NumCPU()); err != nil {
		_ = DeleteNetNS(context.WithoutCancel(ctx), name)
		return nil, fmt.Errorf("fabric %s: %w", name, err)
	}
	return f, nil
}

// kubeProxyConntrackMax is the conntrack table size kube-proxy's defaults
// (conntrack.maxPerCore 32768, conntrack.min 131072) ask of a host of cpus
// cpus: a machine's kube-proxy counts the host's, as a machine may run on
// every one of them.
func kubeProxyConntrackMax(cpus int) int { return max(32768*cpus, 131072) }

// conntrackAsKubeProxy sets the host's conntrack table to the size
// kube-proxy's defaults ask, as a machine's kube-proxy would on a VM of
// its own: the table is the host's, shared by every machine, and
// writable from the host's first network namespace only, so kube-proxy
// in a machine, which writes it whenever it differs, would fail. The
// hash table is left as it is when it has room (kube-proxy only grows it).
func conntrackAsKubeProxy(cpus int) error {
	const path = "/proc/sys/net/netfilter/nf_conntrack_max"
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no conntrack module loaded: kube-proxy's iptables rules load it, and it reads the host's default
	}
	if err != nil {
		return fmt.Errorf("conntrack: %w", err)
	}
	want := strconv.Itoa(kubeProxyConntrackMax(cpus))
	if strings.TrimSpace(string(b)) == want {
		return nil
	}
	if err := os.WriteFile(path, []byte(want+"\n"), 0o644); err != nil {
		return fmt.Errorf("conntrack: set nf_conntrack_max as kube-proxy would: %w", err)
	}
	return nil
}

// Close removes the fabric's namespace, and with it every bridge and
// every port's fabric end (the machines' ends go with them).
func (f *Fabric) Close(ctx context.Context) error {
	// The ports' links first: a namespace's links go with it only when
	// the kernel gets round to freeing it, which may be later.
	f.mu.Lock()
	ids := make([]string, 0, len(f.ports))
	for id := range f.ports {
		ids = append(ids, id)
	}
	f.ports = map[string]*fabricPort{}
	var routers []string
	for _, r := range f.routers {
		routers = append(routers, r.ns)
	}
	routers = append(routers, f.amphorae...)
	f.amphorae = nil
	f.routers = map[string]*router{}
	dhcp := slices.Collect(maps.Values(f.dhcp))
	f.dhcp = map[string]*dhcpServer{}
	f.mu.Unlock()
	var errs []error
	for _, srv := range dhcp {
		errs = append(errs, srv.stop(ctx))
	}
	for _, id := range ids {
		_ = IP(ctx, f.name, "link", "delete", short("p", id))
	}
	for _, ns := range routers {
		errs = append(errs, DeleteNetNS(ctx, ns))
	}
	return errors.Join(append(errs, DeleteNetNS(ctx, f.name))...)
}

// short names a link after an id within Linux's 15 characters.
func short(prefix, id string) string {
	sum := sha256.Sum256([]byte(id))
	return prefix + hex.EncodeToString(sum[:])[:10]
}

// AddNetwork makes a network's bridge; external is an external network's
// (router:external), where no security group applies.
func (f *Fabric) AddNetwork(ctx context.Context, id string, external bool) error {
	br := short("br", id)
	if err := IP(ctx, f.name, "link", "add", br, "type", "bridge"); err != nil {
		return err
	}
	if err := IP(ctx, f.name, "link", "set", br, "up"); err != nil {
		return err
	}
	if external {
		f.mu.Lock()
		f.external[br] = true
		f.mu.Unlock()
		return f.apply(ctx)
	}
	return nil
}

// RemoveNetwork removes a network's bridge (what is still plugged into it
// is cut off).
func (f *Fabric) RemoveNetwork(ctx context.Context, id string) error {
	br := short("br", id)
	f.mu.Lock()
	delete(f.external, br)
	f.mu.Unlock()
	if err := IP(ctx, f.name, "link", "delete", br); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		return err
	}
	return f.apply(ctx)
}

// Name is the name of the fabric's namespace; the namespaces it makes
// (routers, amphorae) are named after it, NAME-*.
func (f *Fabric) Name() string { return f.name }

// plug makes a veth pair between a namespace (its end named ifname there,
// with addrs) and a network's bridge.
func (f *Fabric) plug(ctx context.Context, id, ns, ifname, network, mac string, addrs ...string) error {
	outer, inner := short("p", id), short("i", id)
	steps := [][]string{
		{"", "link", "add", inner, "type", "veth", "peer", "name", outer},
		{"", "link", "set", outer, "netns", f.name},
		{"", "link", "set", inner, "netns", ns},
		{f.name, "link", "set", outer, "master", short("br", network)},
		{f.name, "link", "set", outer, "up"},
		{ns, "link", "set", inner, "name", ifname},
	}
	if mac != "" {
		steps = append(steps, []string{ns, "link", "set", ifname, "address", mac})
	}
	for _, a := range addrs {
		steps = append(steps, []string{ns, "addr", "add", a, "dev", ifname})
	}
	steps = append(steps, []string{ns, "link", "set", ifname, "up"})
	for _, s := range steps {
		if err := IP(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("plug %s: %w", id, err)
		}
	}
	return nil
}

// AddRouter makes a router with its gateway on an external network
// (gateway: its address there, with the subnet's prefix).
func (f *Fabric) AddRouter(ctx context.Context, id, external string, gateway netip.Prefix) error {
	ns := f.name + "-" + short("r", id)
	if _, err := AddNetNS(ctx, ns); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		return fmt.Errorf("router %s: %w: %s", id, err, out)
	}
	if err := f.plug(ctx, "gw-"+id, ns, "qg", external, "", gateway.String()); err != nil {
		return err
	}
	f.mu.Lock()
	f.routers[id] = &router{ns: ns, gateway: gateway, external: external, fips: map[netip.Addr]netip.Addr{}}
	f.mu.Unlock()
	return f.applyRouter(ctx, id)
}

// AddRouterInterface gives a router a leg on a network at its subnet's
// gateway address (with the subnet's prefix).
func (f *Fabric) AddRouterInterface(ctx context.Context, routerID, network string, gateway netip.Prefix) error {
	f.mu.Lock()
	r := f.routers[routerID]
	f.mu.Unlock()
	if r == nil {
		return fmt.Errorf("no router %s", routerID)
	}
	return f.plug(ctx, "ri-"+routerID+"-"+network, r.ns, short("qr", network), network, "", gateway.String())
}

// RemoveRouterInterface takes a router's leg off a network.
func (f *Fabric) RemoveRouterInterface(ctx context.Context, routerID, network string) error {
	err := IP(ctx, f.name, "link", "delete", short("p", "ri-"+routerID+"-"+network))
	if err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		return err
	}
	return nil
}

// RemoveRouter removes a router, its legs and its floating IPs.
func (f *Fabric) RemoveRouter(ctx context.Context, id string) error {
	f.mu.Lock()
	r := f.routers[id]
	delete(f.routers, id)
	f.mu.Unlock()
	if r == nil {
		return nil
	}
	return DeleteNetNS(ctx, r.ns)
}

// SetFloatingIP associates a floating IP of a router's external network
// with a fixed IP behind it (an invalid fixed IP disassociates it).
func (f *Fabric) SetFloatingIP(ctx context.Context, routerID string, fip, fixed netip.Addr) error {
	f.mu.Lock()
	r := f.routers[routerID]
	if r != nil {
		if fixed.IsValid() {
			r.fips[fip] = fixed
		} else {
			delete(r.fips, fip)
		}
	}
	f.mu.Unlock()
	if r == nil {
		return fmt.Errorf("no router %s", routerID)
	}
	bits := strconv.Itoa(r.gateway.Bits())
	verb := "add"
	if !fixed.IsValid() {
		verb = "del"
	}
	if err := IP(ctx, r.ns, "addr", verb, fip.String()+"/"+bits, "dev", "qg"); err != nil && fixed.IsValid() {
		return err
	}
	return f.applyRouter(ctx, routerID)
}

// MetadataAddr is the address of the metadata service every instance
// asks (Nova's, as EC2's), and MetadataPort the port of its proxy in
// each router's namespace, where Neutron's L3 agent runs it.
var MetadataAddr = netip.MustParseAddr("169.254.169.254")

const MetadataPort = 9697

// ListenMetadata listens in a router's namespace where its metadata proxy
// serves: the router redirects what its legs send to port 80 of
// MetadataAddr there, the source kept (which instance asks), as the L3
// agent's iptables rule does; what reaches the port from the external
// network is dropped.
func (f *Fabric) ListenMetadata(routerID string) (net.Listener, error) {
	f.mu.Lock()
	r := f.routers[routerID]
	f.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("no router %s", routerID)
	}
	return ListenIn(filepath.Join(NetNSDir, r.ns), "tcp", fmt.Sprintf("0.0.0.0:%d", MetadataPort))
}

// applyRouter writes a router's NAT: each floating IP DNATed to its fixed
// IP and its fixed IP SNATed to it; everything else leaving by the
// gateway SNATed to the gateway's address; the metadata service's
// address redirected to the router's metadata proxy.
func (f *Fabric) applyRouter(ctx context.Context, id string) error {
	f.mu.Lock()
	r := f.routers[id]
	var b strings.Builder
	fmt.Fprintf(&b, "flush ruleset\ntable ip filter {\n  chain input {\n    type filter hook input priority filter; policy accept;\n    iifname \"qg\" tcp dport %d drop\n  }\n}\n", MetadataPort)
	b.WriteString("table ip nat {\n  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n")
	fmt.Fprintf(&b, "    iifname \"qr*\" ip daddr %s tcp dport 80 redirect to :%d\n", MetadataAddr, MetadataPort)
	fips := slices.SortedFunc(maps.Keys(r.fips), netip.Addr.Compare)
	for _, fip := range fips {
		fmt.Fprintf(&b, "    ip daddr %s dnat to %s\n", fip, r.fips[fip])
	}
	b.WriteString("  }\n  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n")
	for _, fip := range fips {
		fmt.Fprintf(&b, "    oifname \"qg\" ip saddr %s snat to %s\n", r.fips[fip], fip)
	}
	fmt.Fprintf(&b, "    oifname \"qg\" snat to %s\n  }\n}\n", r.gateway.Addr())
	f.mu.Unlock()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", r.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("router %s: nft: %w: %s", id, err, out)
	}
	return nil
}

// AddEdge plugs a namespace of the caller's into an external network at
// addr: where the simulator's edge dials floating IPs from.
func (f *Fabric) AddEdge(ctx context.Context, network, ns string, addr netip.Prefix) error {
	return f.plug(ctx, "edge-"+ns, ns, "eth0", network, "", addr.String())
}

// AddPort plugs a port into a machine's namespace and its network's
// bridge, with no rule: it can send and receive nothing but ARP until
// SetRules.
func (f *Fabric) AddPort(ctx context.Context, p Port) error {
	var addrs []string
	if !p.DHCP {
		addrs = append(addrs, p.Address.String())
	}
	if err := f.plug(ctx, p.ID, p.NetNS, p.IfName, p.Network, p.MAC, addrs...); err != nil {
		return err
	}
	if p.Gateway.IsValid() && !p.DHCP {
		if err := IP(ctx, p.NetNS, "route", "add", "default", "via", p.Gateway.String()); err != nil {
			return fmt.Errorf("port %s: %w", p.ID, err)
		}
	}
	f.mu.Lock()
	f.ports[p.ID] = &fabricPort{Port: p}
	f.mu.Unlock()
	return f.apply(ctx)
}

// RemovePort unplugs a port.
func (f *Fabric) RemovePort(ctx context.Context, id string) error {
	f.mu.Lock()
	delete(f.ports, id)
	f.mu.Unlock()
	if err := IP(ctx, f.name, "link", "delete", short("p", id)); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		return err
	}
	return f.apply(ctx)
}

// SetRules sets the rules of a port's security groups.
func (f *Fabric) SetRules(ctx context.Context, portID string, rules []Rule) error {
	f.mu.Lock()
	p := f.ports[portID]
	if p != nil {
		p.rules = slices.Clone(rules)
	}
	f.mu.Unlock()
	if p == nil {
		return fmt.Errorf("port %s is not plugged", portID)
	}
	return f.apply(ctx)
}

// Ruleset is the fabric's nftables ruleset as it now stands.
func (f *Fabric) Ruleset() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	b.WriteString("table inet opke {\n  chain forward {\n    type filter hook forward priority 0; policy drop;\n")
	b.WriteString("    ct state established,related accept\n    ct state invalid drop\n")
	for _, br := range slices.Sorted(maps.Keys(f.external)) {
		fmt.Fprintf(&b, "    iifname %s accept\n", br)
	}
	// DHCP, as Neutron lets it through whatever the security groups say:
	// a client's requests, and the DHCP servers' replies.
	b.WriteString("    udp sport 68 udp dport 67 accept\n")
	for _, net := range slices.Sorted(maps.Keys(f.dhcp)) {
		fmt.Fprintf(&b, "    ip saddr %s udp sport 67 udp dport 68 accept\n", f.dhcp[net].addr)
	}
	ids := make([]string, 0, len(f.ports))
	for id := range f.ports {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := f.ports[id]
		fmt.Fprintf(&b, "    ip saddr %s jump out-%s\n", p.Address.Addr(), short("p", id))
	}
	// A packet an egress chain let through must still pass the ingress
	// chain of the port it goes to.
	for _, id := range ids {
		p := f.ports[id]
		fmt.Fprintf(&b, "    ip daddr %s jump in-%s\n", p.Address.Addr(), short("p", id))
	}
	b.WriteString("    meta mark 1 accept\n  }\n")
	for _, id := range ids {
		p := f.ports[id]
		for _, dir := range []string{"egress", "ingress"} {
			chain := "out-"
			if dir == "ingress" {
				chain = "in-"
			}
			fmt.Fprintf(&b, "  chain %s%s {\n", chain, short("p", id))
			// An egress chain marks what it allows and returns, so the
			// ingress chain of the destination (if one of ours) decides;
			// an ingress chain accepts.
			verdict := "meta mark set 1 return"
			if dir == "ingress" {
				verdict = "accept"
			}
			for _, r := range p.rules {
				if r.Direction == dir {
					fmt.Fprintf(&b, "    %s %s\n", match(r, dir), verdict)
				}
			}
			if dir == "ingress" {
				b.WriteString("    drop\n")
			} else {
				b.WriteString("    meta mark set 0 drop\n")
			}
			b.WriteString("  }\n")
		}
	}
	b.WriteString("}\n")
	// A port sends from its own address only (Neutron's anti-spoofing).
	b.WriteString("table bridge opke {\n  chain forward {\n    type filter hook forward priority 0; policy accept;\n")
	for _, id := range ids {
		p := f.ports[id]
		// A DHCP client asks before it has its address.
		fmt.Fprintf(&b, "    iifname %s ether saddr %s ether type ip ip saddr 0.0.0.0 udp sport 68 udp dport 67 accept\n", short("p", id), p.MAC)
		fmt.Fprintf(&b, "    iifname %s ether type ip ip saddr != %s drop\n", short("p", id), p.Address.Addr())
		fmt.Fprintf(&b, "    iifname %s ether saddr != %s drop\n", short("p", id), p.MAC)
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// match is a rule's nftables match ("" matches all).
func match(r Rule, dir string) string {
	var parts []string
	if r.Remote != "" && r.Remote != "0.0.0.0/0" {
		field := "saddr"
		if dir == "egress" {
			field = "daddr"
		}
		parts = append(parts, "ip "+field+" "+r.Remote)
	}
	switch r.Protocol {
	case "tcp", "udp":
		parts = append(parts, "meta l4proto "+r.Protocol)
		if r.PortMin > 0 {
			ports := strconv.Itoa(r.PortMin)
			if r.PortMax > r.PortMin {
				ports += "-" + strconv.Itoa(r.PortMax)
			}
			parts = append(parts, r.Protocol+" dport "+ports)
		}
	case "icmp":
		parts = append(parts, "meta l4proto icmp")
	}
	return strings.Join(parts, " ")
}

// apply replaces the fabric's ruleset with the current one, atomically.
func (f *Fabric) apply(ctx context.Context) error {
	rs := "flush ruleset\n" + f.Ruleset()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", f.name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rs)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fabric %s: nft: %w: %s", f.name, err, out)
	}
	return nil
}

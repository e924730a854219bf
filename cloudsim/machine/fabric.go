package machine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
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
	f := &Fabric{name: name, ports: map[string]*fabricPort{}}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", name, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1").CombinedOutput(); err != nil {
		_ = DeleteNetNS(context.WithoutCancel(ctx), name)
		return nil, fmt.Errorf("fabric %s: %w: %s", name, err, out)
	}
	if err := f.apply(ctx); err != nil {
		_ = DeleteNetNS(context.WithoutCancel(ctx), name)
		return nil, err
	}
	return f, nil
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
	f.mu.Unlock()
	for _, id := range ids {
		_ = IP(ctx, f.name, "link", "delete", short("p", id))
	}
	return DeleteNetNS(ctx, f.name)
}

// short names a link after an id within Linux's 15 characters.
func short(prefix, id string) string {
	sum := sha256.Sum256([]byte(id))
	return prefix + hex.EncodeToString(sum[:])[:10]
}

// AddNetwork makes a network's bridge.
func (f *Fabric) AddNetwork(ctx context.Context, id string) error {
	br := short("br", id)
	if err := IP(ctx, f.name, "link", "add", br, "type", "bridge"); err != nil {
		return err
	}
	return IP(ctx, f.name, "link", "set", br, "up")
}

// AddPort plugs a port into a machine's namespace and its network's
// bridge, with no rule: it can send and receive nothing but ARP until
// SetRules.
func (f *Fabric) AddPort(ctx context.Context, p Port) error {
	outer, inner := short("p", p.ID), short("i", p.ID)
	steps := [][]string{
		{"", "link", "add", inner, "type", "veth", "peer", "name", outer},
		{"", "link", "set", outer, "netns", f.name},
		{"", "link", "set", inner, "netns", p.NetNS},
		{f.name, "link", "set", outer, "master", short("br", p.Network)},
		{f.name, "link", "set", outer, "up"},
		{p.NetNS, "link", "set", inner, "name", p.IfName},
		{p.NetNS, "link", "set", p.IfName, "address", p.MAC},
		{p.NetNS, "addr", "add", p.Address.String(), "dev", p.IfName},
		{p.NetNS, "link", "set", p.IfName, "up"},
	}
	if p.Gateway.IsValid() {
		steps = append(steps, []string{p.NetNS, "route", "add", "default", "via", p.Gateway.String()})
	}
	for _, s := range steps {
		if err := IP(ctx, s[0], s[1:]...); err != nil {
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

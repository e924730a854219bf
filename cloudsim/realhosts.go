package cloudsim

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/cloudsim/machine"
)

// Real hosts (Options.Hosts = HostsReal). Every server in BUILD or ACTIVE
// is a real machine (package machine): a container with systemd, booted
// from the project's image with its user_data applied by Debian's
// Ignition, in a network namespace of its own. The cloud's networks are
// projected onto a fabric (bridges, veth ports, security groups as
// nftables rules, routers with SNAT and floating IPs, load balancers'
// amphorae) by one loop, the way Neutron's agents follow its database: it
// reads the world, compares it with what it made, and makes the
// difference. Nothing is done on a host's behalf: what a host prints,
// answers and runs is its own.
//
// A server stays in BUILD until its machine has booted (Ignition applied
// and systemd started); a user_data Ignition refuses puts it in ERROR, the
// reason on its console. The edge dials floating IPs for real, from a
// namespace plugged into each external network: routing, NAT and security
// groups are the kernel's.

// Host kinds for Options.Hosts.
const (
	// HostsInProcess is the default: in-process hosts (hosts.go).
	HostsInProcess = "in-process"
	// HostsReal makes every server a real machine (root only).
	HostsReal = "real"
)

// errStillBooting keeps a server in BUILD while its machine boots.
var errStillBooting = errors.New("the machine is still booting")

// realHosts projects the world onto machines and a fabric.
type realHosts struct {
	s    *Sim
	log  *slog.Logger
	img  *machine.Image
	fab  *machine.Fabric
	dir  string // the machines' state, one folder per server
	keep bool   // keep the machines' state at Close (a state dir)
	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex // guards what follows; never held while taking s.mu
	machines map[string]*realMachine
	edges    map[string]edge // by external network
	procs    []*exec.Cmd     // processes run in edges (registries), stopped at close
	applied  applied
	lbs      map[string]*realLB
	metadata map[string]*http.Server // router id -> its metadata proxy
	servers  []*http.Server          // servers in edges (file mirrors), closed at close
}

// edge is an external network's edge: its namespace's path and its
// address on the network.
type edge struct {
	ns string
	ip netip.Addr
}

// realMachine is a server's machine, booting, up or failed.
type realMachine struct {
	ns     string // its network namespace's name
	m      *machine.Machine
	booted bool   // its first boot is over (m set, or err)
	err    error  // why it could not boot
	off    bool   // powered off (its server SHUTOFF): m stopped, its disk kept
	disks  string // the disks SetDisks last gave m, and m's start then ("": none)
}

// realLB is a load balancer's amphora and what its listeners forward to.
type realLB struct {
	lb        *machine.LoadBalancer
	key       string
	listeners map[int]string
}

// applied is what the loop made, as keys of the desired state's parts.
type applied struct {
	networks map[string]bool   // id -> external
	ports    map[string]string // port id -> key
	rules    map[string]string // port id -> key
	routers  map[string]string // router id -> key
	legs     map[string]string // router id / network id -> key
	fips     map[string]string // floating address -> key
	dhcp     map[string]string // network id -> key
	loops    map[string]bool   // volume id -> its file may have a loop device
	// files are the volumes' and snapshots' files by name, with their
	// sizes; nil until the first pass that has volumes read the folder.
	files map[string]int64
}

// NamespacePrefix begins the name of every network namespace a simulator
// with real hosts makes (its fabric's, "opke-<hash>", and its routers',
// "opke-<hash>-…"): what machine.Sweep removes after a killed one.
const NamespacePrefix = "opke-"

// fabricName names a simulator's fabric after its hosts folder, so a
// restarted simulator finds (and removes) what a crashed one left.
func fabricName(hostsDir string) string {
	sum := sha256.Sum256([]byte(hostsDir))
	return NamespacePrefix + hex.EncodeToString(sum[:])[:8]
}

// startRealHosts builds or finds the host image, clears what a previous
// run under the same name left, and makes the fabric.
func (s *Sim) startRealHosts(ctx context.Context) (*realHosts, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("real hosts need root (network namespaces, nftables, runc)")
	}
	cache := s.opts.ImageCache
	if cache == "" {
		cache = machine.DefaultCacheDir()
	}
	img, err := machine.EnsureImage(ctx, cache, s.log)
	if err != nil {
		return nil, err
	}
	if err := raiseKernelLimits(s.log); err != nil {
		return nil, err
	}
	name := fabricName(s.hostsDir)
	if err := removeNamespaces(ctx, name); err != nil {
		return nil, err
	}
	fab, err := machine.NewFabric(ctx, name)
	if err != nil {
		return nil, err
	}
	r := &realHosts{s: s, log: s.log, img: img, fab: fab, dir: s.hostsDir, keep: !s.tempDir,
		kick: make(chan struct{}, 1), done: make(chan struct{}),
		machines: map[string]*realMachine{}, edges: map[string]edge{}, lbs: map[string]*realLB{}, metadata: map[string]*http.Server{},
		applied: applied{networks: map[string]bool{}, ports: map[string]string{}, rules: map[string]string{}, dhcp: map[string]string{},
			routers: map[string]string{}, legs: map[string]string{}, fips: map[string]string{}, loops: map[string]bool{}}}
	s.log.Info("real hosts", "fabric", name, "image", img.Hash)
	return r, nil
}

// kernelLimits are the per-user kernel limits every machine has to
// itself on real hardware and all the machines here share (they run as
// root of one kernel): inotify's instances, 128 by default, which seven
// machines' systemd, containerd, kubelets, kube-proxies and flannels
// exhaust ("too many open files", make e2e's five controllers), and its
// watches. kind's documentation asks the same of a machine running
// several nodes.
var kernelLimits = []struct {
	path string
	min  int
}{
	{"/proc/sys/fs/inotify/max_user_instances", 8192},
	{"/proc/sys/fs/inotify/max_user_watches", 524288},
}

// raiseKernelLimits raises each kernel limit below its minimum to it.
func raiseKernelLimits(log *slog.Logger) error {
	for _, l := range kernelLimits {
		b, err := os.ReadFile(l.path)
		if err != nil {
			return fmt.Errorf("kernel limit: %w", err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("kernel limit %s: %w", l.path, err)
		}
		if n >= l.min {
			continue
		}
		if err := os.WriteFile(l.path, []byte(strconv.Itoa(l.min)), 0o644); err != nil {
			return fmt.Errorf("kernel limit %s (%d, the machines need %d): %w", l.path, n, l.min, err)
		}
		log.Info("kernel limit raised for the machines, which share this kernel", "limit", l.path, "was", n, "now", l.min)
	}
	return nil
}

// removeNamespaces deletes the namespaces named name or name-*.
func removeNamespaces(ctx context.Context, name string) error {
	entries, err := os.ReadDir(machine.NetNSDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("real hosts: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if e.Name() == name || strings.HasPrefix(e.Name(), name+"-") {
			errs = append(errs, machine.DeleteNetNS(ctx, e.Name()))
		}
	}
	return errors.Join(errs...)
}

// run is the loop: it converges at each kick and every second.
func (r *realHosts) run() {
	defer r.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := r.converge(ctx); err != nil {
			r.log.Warn("real hosts: converge", "err", err)
		}
		cancel()
		select {
		case <-r.done:
			return
		case <-r.kick:
		case <-t.C:
		}
	}
}

// wake asks the loop for a pass.
func (r *realHosts) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// bootResult is the boot hook (under s.mu): nil once the server's machine
// booted, its error if it could not, errStillBooting before.
func (r *realHosts) bootResult(sv *server) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rm := r.machines[sv.ID]
	switch {
	case rm == nil || !rm.booted:
		r.wake()
		return errStillBooting
	case rm.err != nil:
		return rm.err
	}
	return nil
}

// release is the hook of a deleted server: the loop removes its machine.
func (r *realHosts) release(string) { r.wake() }

// console is what the server's machine printed on its console.
func (r *realHosts) console(id string) string {
	data, err := os.ReadFile(filepath.Join(r.dir, id, "console.log"))
	if err != nil {
		return ""
	}
	const most = 1 << 20
	if len(data) > most {
		data = data[len(data)-most:]
	}
	return string(data)
}

// root is the mounted root of a server's machine.
func (r *realHosts) root(id string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rm := r.machines[id]; rm != nil && rm.m != nil {
		return rm.m.Root(), nil
	}
	return "", fmt.Errorf("server %s: no machine running", id)
}

// reboot power-cycles a server's machine.
func (r *realHosts) reboot(id string) {
	r.mu.Lock()
	rm := r.machines[id]
	r.mu.Unlock()
	if rm == nil || rm.m == nil {
		return
	}
	r.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rm.m.Reboot(ctx); err != nil {
			r.log.Warn("real hosts: reboot", "server", id, "err", err)
		}
	})
}

// dial connects from an external network's edge to a floating IP.
// edgeOf is the external network whose edge has addr, or "".
func (r *realHosts) edgeOf(addr netip.Addr) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for network, e := range r.edges {
		if e.ip == addr {
			return network
		}
	}
	return ""
}

func (r *realHosts) dial(ctx context.Context, network string, target netip.AddrPort) (net.Conn, error) {
	r.mu.Lock()
	ns := r.edges[network].ns
	r.mu.Unlock()
	if ns == "" {
		return nil, fmt.Errorf("dial %s: %w", target, errNoRoute)
	}
	return machine.DialIn(ctx, ns, "tcp", target.String())
}

// close stops every machine (kept with a state dir, removed otherwise)
// and removes every namespace.
func (r *realHosts) close() error {
	close(r.done)
	r.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, p := range r.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	for _, lb := range r.lbs {
		errs = append(errs, lb.lb.Close(ctx))
	}
	for _, srv := range r.metadata {
		_ = srv.Close()
	}
	for _, srv := range r.servers {
		_ = srv.Close()
	}
	for id, rm := range r.machines {
		errs = append(errs, r.stopMachine(ctx, id, rm, r.keep))
	}
	if !r.keep {
		// The volumes' files go with the temporary folder: their loop
		// devices would be left over deleted files. Kept ones are the
		// next simulator's (one device per file).
		for id := range r.applied.loops {
			errs = append(errs, machine.ReleaseLoop(ctx, r.volumeFile(id)))
		}
	}
	errs = append(errs, r.fab.Close(ctx), removeNamespaces(ctx, r.fab.Name()))
	return errors.Join(errs...)
}

// stopMachine stops a machine (keep) or destroys it, and removes its
// namespace.
func (r *realHosts) stopMachine(ctx context.Context, id string, rm *realMachine, keep bool) error {
	var err error
	switch {
	case rm.m != nil && keep:
		err = rm.m.Stop(ctx)
	case rm.m != nil:
		err = rm.m.Destroy(ctx)
	case !keep:
		err = machine.Remove(id, filepath.Join(r.dir, id))
	}
	return errors.Join(err, machine.DeleteNetNS(ctx, rm.ns))
}

// desired is the part of the world the fabric and machines follow.
type desired struct {
	servers   map[string]wantServer
	networks  map[string]bool
	ports     map[string]wantPort
	rules     map[string][]machine.Rule
	routers   map[string]wantRouter
	legs      map[string]wantLeg // by router id / network id
	fips      map[string]wantFIP // by floating address
	lbs       map[string]wantLB
	edges     map[string]netip.Prefix // external network -> the edge's address there
	dhcp      map[string]machine.DHCP // network id -> its DHCP server
	volumes   map[string]wantVolume
	snapshots map[string]string // snapshot id -> its volume's id
}

type wantServer struct {
	name, status string
	// userData is handed to Ignition only when the server has no port
	// to fetch it over; lease is its first port's, which it fetches over.
	userData []byte
	lease    *machine.Lease
	memory   int64
	cpus     float64
	disk     int64 // the root disk's size in bytes
}

// wantPort is a port of a server's machine.
type wantPort struct {
	machine.Port
	server string
}

func (p wantPort) key() string {
	return fmt.Sprint(p.server, p.Network, p.IfName, p.MAC, p.Address, p.Gateway, p.DHCP)
}

type wantRouter struct {
	external string
	gateway  netip.Prefix
}

type wantLeg struct {
	router, network string
	gateway         netip.Prefix
}

type wantFIP struct {
	router       string
	fip, fixed   netip.Addr
	floatNetwork string
}

type wantLB struct {
	network   string
	vip       netip.Prefix
	gateway   netip.Addr
	listeners map[int]wantListener
}

type wantListener struct {
	pool    string
	members []machine.Member
	monitor *machine.Monitor
	idle    time.Duration
	allowed []netip.Prefix
}

func (l wantListener) key() string { return fmt.Sprint(l.members, l.monitor, l.idle, l.allowed) }

// want reads the desired state from the world; the caller holds s.mu.
func (w *world) want() desired {
	d := desired{servers: map[string]wantServer{}, networks: map[string]bool{}, ports: map[string]wantPort{},
		rules: map[string][]machine.Rule{}, routers: map[string]wantRouter{}, legs: map[string]wantLeg{},
		fips: map[string]wantFIP{}, lbs: map[string]wantLB{}, edges: map[string]netip.Prefix{}, dhcp: map[string]machine.DHCP{}}
	for id, n := range w.Networks {
		d.networks[id] = n.External
		if !n.External {
			continue
		}
		for _, sid := range n.Subnets {
			// The edge takes the subnet's last address but one (its
			// broadcast address is the last): outside the allocation pool.
			if sn := w.Subnets[sid]; sn != nil {
				if cidr, err := netip.ParsePrefix(sn.CIDR); err == nil && cidr.Addr().Is4() && cidr.Bits() <= 30 {
					d.edges[id] = netip.PrefixFrom(lastAddr(cidr).Prev(), cidr.Bits())
					break
				}
			}
		}
	}
	prefix := func(f fixedIP) (netip.Prefix, netip.Addr, bool) {
		sn := w.Subnets[f.SubnetID]
		if sn == nil {
			return netip.Prefix{}, netip.Addr{}, false
		}
		cidr, err1 := netip.ParsePrefix(sn.CIDR)
		addr, err2 := netip.ParseAddr(f.IPAddress)
		if err1 != nil || err2 != nil || !addr.Is4() {
			return netip.Prefix{}, netip.Addr{}, false
		}
		gw, _ := netip.ParseAddr(sn.GatewayIP)
		return netip.PrefixFrom(addr, cidr.Bits()), gw, true
	}
	// Each network's DHCP server, on its DHCP port, for the subnet that
	// port is on (dhcpSubnet); its leases are the subnet's ports.
	dhcpSubnet := map[string]string{}
	for _, p := range w.Ports {
		if p.DeviceOwner != "network:dhcp" || len(p.FixedIPs) == 0 || d.networks[p.NetworkID] {
			continue
		}
		sn := w.Subnets[p.FixedIPs[0].SubnetID]
		addr, gw, ok := prefix(p.FixedIPs[0])
		if !ok || sn == nil || !sn.EnableDHCP {
			continue
		}
		srv := machine.DHCP{Port: machine.Port{ID: p.ID, Network: p.NetworkID, MAC: p.MACAddress, Address: addr}, Gateway: gw, Domain: "openstacklocal"}
		for _, ns := range sn.DNSNameservers {
			if a, err := netip.ParseAddr(ns); err == nil && a.Is4() {
				srv.DNS = append(srv.DNS, a)
			}
		}
		d.dhcp[p.NetworkID], dhcpSubnet[p.NetworkID] = srv, sn.ID
	}
	for _, q := range w.Ports {
		srv, ok := d.dhcp[q.NetworkID]
		if !ok || q.ID == srv.Port.ID || len(q.FixedIPs) == 0 || q.FixedIPs[0].SubnetID != dhcpSubnet[q.NetworkID] {
			continue
		}
		a, err := netip.ParseAddr(q.FixedIPs[0].IPAddress)
		if err != nil {
			continue
		}
		name := ""
		if sv := w.Servers[q.DeviceID]; sv != nil && strings.HasPrefix(q.DeviceOwner, "compute:") {
			name = strings.ToLower(sv.Name)
		}
		srv.Hosts = append(srv.Hosts, machine.DHCPHost{MAC: q.MACAddress, Address: a, Name: name})
		d.dhcp[q.NetworkID] = srv
	}
	for id, srv := range d.dhcp {
		slices.SortFunc(srv.Hosts, func(a, b machine.DHCPHost) int { return a.Address.Compare(b.Address) })
		d.dhcp[id] = srv
	}
	for id, sv := range w.Servers {
		if sv.Status != "BUILD" && sv.Status != "ACTIVE" && sv.Status != "ERROR" && sv.Status != "SHUTOFF" {
			continue
		}
		ws := wantServer{name: sv.Name, status: sv.Status}
		ws.userData, _ = base64.StdEncoding.DecodeString(sv.UserData)
		if f := w.Flavors[sv.FlavorID]; f != nil {
			ws.memory, ws.cpus, ws.disk = int64(f.RAM)<<20, float64(f.VCPUs), int64(f.Disk)<<30
			if f.Disk == 0 {
				// A flavor without a root disk size boots on the image's
				// minimum disk, as Nova sizes it from the image.
				ws.disk = int64(imageMinDisk) << 30
			}
		}
		for i, pid := range sv.Ports {
			p := w.Ports[pid]
			if p == nil || len(p.FixedIPs) == 0 {
				continue
			}
			addr, gw, ok := prefix(p.FixedIPs[0])
			if !ok {
				continue
			}
			mp := machine.Port{ID: pid, Network: p.NetworkID, IfName: "eth" + strconv.Itoa(i), MAC: p.MACAddress, Address: addr}
			if i == 0 {
				mp.Gateway = gw
				ws.lease = &machine.Lease{IfName: mp.IfName, Address: addr, Gateway: gw}
			}
			// On the subnet of its network's DHCP server, the machine
			// asks it, as a VM does.
			if _, ok := d.dhcp[p.NetworkID]; ok && p.FixedIPs[0].SubnetID == dhcpSubnet[p.NetworkID] {
				mp.DHCP = true
			}
			d.ports[pid] = wantPort{Port: mp, server: id}
			d.rules[pid] = w.portRules(p)
		}
		d.servers[id] = ws
	}
	for id, rt := range w.Routers {
		if rt.Gateway == nil || len(rt.Gateway.ExternalFixedIPs) == 0 {
			continue
		}
		addr, _, ok := prefix(rt.Gateway.ExternalFixedIPs[0])
		if !ok {
			continue
		}
		d.routers[id] = wantRouter{external: rt.Gateway.NetworkID, gateway: addr}
	}
	for _, p := range w.Ports {
		if p.DeviceOwner != "network:router_interface" || len(p.FixedIPs) == 0 {
			continue
		}
		if _, ok := d.routers[p.DeviceID]; !ok {
			continue
		}
		if addr, _, ok := prefix(p.FixedIPs[0]); ok {
			d.legs[p.DeviceID+"/"+p.NetworkID] = wantLeg{router: p.DeviceID, network: p.NetworkID, gateway: addr}
		}
	}
	for _, f := range w.FloatingIPs {
		if f.PortID == nil {
			continue
		}
		p := w.Ports[*f.PortID]
		if p == nil || len(p.FixedIPs) == 0 {
			continue
		}
		fixed := p.FixedIPs[0].IPAddress
		if f.FixedIPAddress != nil && *f.FixedIPAddress != "" {
			fixed = *f.FixedIPAddress
		}
		fip, err1 := netip.ParseAddr(f.FloatingIPAddress)
		fx, err2 := netip.ParseAddr(fixed)
		if err1 != nil || err2 != nil {
			continue
		}
		router := ""
		if f.RouterID != nil {
			router = *f.RouterID
		}
		if _, ok := d.routers[router]; !ok {
			router = d.routerBetween(f.FloatingNetworkID, p.NetworkID)
		}
		if router != "" {
			d.fips[fip.String()] = wantFIP{router: router, fip: fip, fixed: fx, floatNetwork: f.FloatingNetworkID}
		}
	}
	for id, lb := range w.LoadBalancer {
		if lb.ProvisioningStatus == "PENDING_DELETE" {
			continue
		}
		sn := w.Subnets[lb.VIPSubnetID]
		if sn == nil {
			continue
		}
		vip, gw, ok := prefix(fixedIP{SubnetID: sn.ID, IPAddress: lb.VIPAddress})
		if !ok {
			continue
		}
		want := wantLB{network: lb.VIPNetworkID, vip: vip, gateway: gw, listeners: map[int]wantListener{}}
		for _, l := range w.Listeners {
			if l.LB != id || l.ProvisioningStatus == "PENDING_DELETE" {
				continue
			}
			// HAProxy closes a connection idle on either side for the
			// smaller of the two (0: no limit on that side).
			wl := wantListener{idle: time.Duration(l.TimeoutClientData) * time.Millisecond, allowed: l.allowed()}
			if m := time.Duration(l.TimeoutMemberData) * time.Millisecond; m > 0 && (wl.idle == 0 || m < wl.idle) {
				wl.idle = m
			}
			if l.DefaultPoolID != nil {
				wl.pool = *l.DefaultPoolID
			}
			if pool := w.Pools[wl.pool]; pool != nil {
				for _, m := range w.Members {
					if m.PoolID != pool.ID || m.ProvisioningStatus == "PENDING_DELETE" {
						continue
					}
					if a, err := netip.ParseAddr(m.Address); err == nil {
						wl.members = append(wl.members, machine.Member{Address: a, Port: m.ProtocolPort})
					}
				}
				slices.SortFunc(wl.members, func(a, b machine.Member) int { return strings.Compare(a.String(), b.String()) })
				if pool.MonitorID != nil {
					if mon := w.Monitors[*pool.MonitorID]; mon != nil && mon.ProvisioningStatus != "PENDING_DELETE" {
						wl.monitor = &machine.Monitor{Delay: time.Duration(mon.Delay) * time.Second, Timeout: time.Duration(mon.Timeout) * time.Second,
							Retries: mon.MaxRetries, RetriesDown: mon.MaxDown}
					}
				}
			}
			want.listeners[l.ProtocolPort] = wl
		}
		d.lbs[id] = want
	}
	w.wantVolumes(&d)
	return d
}

// routerBetween finds a router with its gateway on an external network
// and a leg on an internal one.
func (d desired) routerBetween(external, internal string) string {
	for _, id := range slices.Sorted(maps.Keys(d.routers)) {
		if d.routers[id].external == external {
			if _, ok := d.legs[id+"/"+internal]; ok {
				return id
			}
		}
	}
	return ""
}

// portRules are the rules of a port's security groups, as the fabric has
// them: a remote group becomes each address of its ports; a port without
// port security lets everything through.
func (w *world) portRules(p *port) []machine.Rule {
	if !p.PortSecurity {
		return []machine.Rule{{Direction: "ingress"}, {Direction: "egress"}}
	}
	var rules []machine.Rule
	for _, g := range p.SecurityGroups {
		for _, sr := range w.SecRules {
			if sr.SecurityGroupID != g || sr.EtherType != "IPv4" {
				continue
			}
			r := machine.Rule{Direction: sr.Direction}
			if sr.Protocol != nil {
				switch *sr.Protocol {
				case "tcp", "6":
					r.Protocol = "tcp"
				case "udp", "17":
					r.Protocol = "udp"
				case "icmp", "1":
					r.Protocol = "icmp"
				default:
					continue // not modelled: it lets nothing through
				}
			}
			if r.Protocol == "tcp" || r.Protocol == "udp" {
				if sr.PortRangeMin != nil {
					r.PortMin = *sr.PortRangeMin
				}
				if sr.PortRangeMax != nil {
					r.PortMax = *sr.PortRangeMax
				}
			}
			switch {
			case sr.RemoteGroupID != nil:
				for _, addr := range w.groupAddresses(*sr.RemoteGroupID) {
					r.Remote = addr + "/32"
					rules = append(rules, r)
				}
			default:
				if sr.RemoteIPPrefix != nil {
					r.Remote = *sr.RemoteIPPrefix
				}
				rules = append(rules, r)
			}
		}
	}
	slices.SortFunc(rules, func(a, b machine.Rule) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return slices.Compact(rules)
}

// groupAddresses are the fixed IPv4 addresses of the ports in a group.
func (w *world) groupAddresses(group string) []string {
	var out []string
	for _, p := range w.Ports {
		if !slices.Contains(p.SecurityGroups, group) {
			continue
		}
		for _, f := range p.FixedIPs {
			if a, err := netip.ParseAddr(f.IPAddress); err == nil && a.Is4() {
				out = append(out, f.IPAddress)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// converge makes the fabric and the machines what the world says: new
// networks, machines' namespaces, ports, rules, routers, floating IPs and
// load balancers first, then what went, machines booting apart.
func (r *realHosts) converge(ctx context.Context) error {
	r.s.mu.Lock()
	r.s.w.tick(r.s.opts.Now())
	d := r.s.w.want()
	r.s.mu.Unlock()

	r.mu.Lock()
	var errs []error
	a := &r.applied
	for _, id := range slices.Sorted(maps.Keys(d.networks)) {
		if _, ok := a.networks[id]; ok {
			continue
		}
		if err := r.fab.AddNetwork(ctx, id, d.networks[id]); err != nil {
			errs = append(errs, err)
			continue
		}
		a.networks[id] = d.networks[id]
	}
	for _, id := range slices.Sorted(maps.Keys(d.edges)) {
		if r.edges[id].ns != "" || !hasNetwork(a, id) {
			continue
		}
		ns := r.fab.Name() + "-" + shortID("e", id)
		path, err := machine.AddNetNS(ctx, ns)
		if err == nil {
			err = r.fab.AddEdge(ctx, id, ns, d.edges[id])
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.edges[id] = edge{ns: path, ip: d.edges[id].Addr()}
		if d.edges[id].Addr() == fabricAPIAddr() {
			// The APIs' public endpoints, for the machines.
			ln, err := machine.ListenIn(path, "tcp", netip.AddrPortFrom(fabricAPIAddr(), FabricAPIPort).String())
			if err != nil {
				errs = append(errs, fmt.Errorf("the APIs on the edge: %w", err))
				continue
			}
			r.s.serve(r.s.api, ln)
		}
	}
	var boot []string
	for _, id := range slices.Sorted(maps.Keys(d.servers)) {
		if r.machines[id] != nil || d.servers[id].status == "ERROR" || d.servers[id].status == "SHUTOFF" {
			continue
		}
		ns := r.fab.Name() + "-" + shortID("m", id)
		if _, err := machine.AddNetNS(ctx, ns); err != nil {
			errs = append(errs, err)
			continue
		}
		r.machines[id] = &realMachine{ns: ns}
		boot = append(boot, id)
	}
	// Machines powered off (their servers SHUTOFF) stop, their disks
	// kept; powered on again (ACTIVE), they boot from them, without
	// Ignition.
	for _, id := range slices.Sorted(maps.Keys(r.machines)) {
		rm, ws := r.machines[id], d.servers[id]
		switch {
		case !rm.booted:
		case ws.status == "SHUTOFF" && rm.m != nil:
			errs = append(errs, rm.m.Stop(ctx))
			rm.m, rm.off, rm.disks = nil, true, ""
		case ws.status == "ACTIVE" && rm.off:
			rm.off, rm.booted = false, false
			r.startBoot(id, ws)
		}
	}
	// Machines whose server went: their power is cut, their state removed,
	// before their ports go, so what they leave closes on the wire.
	for id, rm := range r.machines {
		if _, ok := d.servers[id]; ok || !rm.booted {
			continue // one still booting is removed when its boot is over
		}
		delete(r.machines, id)
		errs = append(errs, r.stopMachine(ctx, id, rm, false))
	}
	// Ports: a changed port is unplugged and plugged again.
	for id, key := range a.ports {
		if p, ok := d.ports[id]; !ok || p.key() != key {
			errs = append(errs, r.fab.RemovePort(ctx, id))
			delete(a.ports, id)
			delete(a.rules, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(d.ports)) {
		p := d.ports[id]
		rm := r.machines[p.server]
		if _, ok := a.ports[id]; ok || rm == nil || !hasNetwork(a, p.Network) {
			continue
		}
		mp := p.Port
		mp.NetNS = rm.ns
		if err := r.fab.AddPort(ctx, mp); err != nil {
			errs = append(errs, err)
			continue
		}
		a.ports[id] = p.key()
	}
	for id := range a.ports {
		key := fmt.Sprint(d.rules[id])
		if a.rules[id] == key {
			continue
		}
		if err := r.fab.SetRules(ctx, id, d.rules[id]); err != nil {
			errs = append(errs, err)
			continue
		}
		a.rules[id] = key
	}
	// Routers, their legs, floating IPs.
	for id, key := range a.routers {
		if w, ok := d.routers[id]; !ok || fmt.Sprint(w) != key {
			if srv := r.metadata[id]; srv != nil {
				_ = srv.Close()
				delete(r.metadata, id)
			}
			errs = append(errs, r.fab.RemoveRouter(ctx, id))
			delete(a.routers, id)
			for k := range a.legs {
				if strings.HasPrefix(k, id+"/") {
					delete(a.legs, k)
				}
			}
			for k, v := range a.fips {
				if strings.HasPrefix(v, id+" ") {
					delete(a.fips, k)
				}
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(d.routers)) {
		w := d.routers[id]
		if _, ok := a.routers[id]; ok || !hasNetwork(a, w.external) {
			continue
		}
		if err := r.fab.AddRouter(ctx, id, w.external, w.gateway); err != nil {
			errs = append(errs, err)
			continue
		}
		a.routers[id] = fmt.Sprint(w)
	}
	// Each router's metadata proxy (Neutron's L3 agent runs one per
	// router).
	for _, id := range slices.Sorted(maps.Keys(a.routers)) {
		if r.metadata[id] != nil {
			continue
		}
		ln, err := r.fab.ListenMetadata(id)
		if err != nil {
			errs = append(errs, fmt.Errorf("router %s: its metadata proxy: %w", id, err))
			continue
		}
		srv := r.s.metadataServer(id)
		r.metadata[id] = srv
		r.s.serve(srv, ln)
	}
	for k, key := range a.legs {
		if w, ok := d.legs[k]; !ok || fmt.Sprint(w) != key {
			router, network, _ := strings.Cut(k, "/")
			errs = append(errs, r.fab.RemoveRouterInterface(ctx, router, network))
			delete(a.legs, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(d.legs)) {
		w := d.legs[k]
		if _, ok := a.legs[k]; ok || a.routers[w.router] == "" || !hasNetwork(a, w.network) {
			continue
		}
		if err := r.fab.AddRouterInterface(ctx, w.router, w.network, w.gateway); err != nil {
			errs = append(errs, err)
			continue
		}
		a.legs[k] = fmt.Sprint(w)
	}
	for k, key := range a.fips {
		if w, ok := d.fips[k]; !ok || fipKey(w) != key {
			router, _, _ := strings.Cut(key, " ")
			errs = append(errs, r.fab.SetFloatingIP(ctx, router, netip.MustParseAddr(k), netip.Addr{}))
			delete(a.fips, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(d.fips)) {
		w := d.fips[k]
		if _, ok := a.fips[k]; ok || a.routers[w.router] == "" {
			continue
		}
		if err := r.fab.SetFloatingIP(ctx, w.router, w.fip, w.fixed); err != nil {
			errs = append(errs, err)
			continue
		}
		a.fips[k] = fipKey(w)
	}
	// DHCP servers, once their network is there; their leases follow
	// the ports.
	for id := range a.dhcp {
		if _, ok := d.dhcp[id]; !ok {
			errs = append(errs, r.fab.RemoveDHCP(ctx, id))
			delete(a.dhcp, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(d.dhcp)) {
		key := fmt.Sprint(d.dhcp[id])
		if a.dhcp[id] == key || !hasNetwork(a, id) {
			continue
		}
		if err := r.fab.SetDHCP(ctx, d.dhcp[id]); err != nil {
			errs = append(errs, err)
			continue
		}
		a.dhcp[id] = key
	}
	errs = append(errs, r.convergeVolumes(ctx, d)...)
	errs = append(errs, r.convergeLBs(ctx, d)...)
	// Networks last: what was plugged into them went first.
	for id := range a.networks {
		if _, ok := d.networks[id]; ok {
			continue
		}
		errs = append(errs, r.fab.RemoveNetwork(ctx, id))
		delete(a.networks, id)
	}
	for _, id := range boot {
		r.startBoot(id, d.servers[id])
	}
	r.mu.Unlock()
	r.reportMembers(d)
	return errors.Join(errs...)
}

func hasNetwork(a *applied, id string) bool { _, ok := a.networks[id]; return ok }

func fipKey(w wantFIP) string { return w.router + " " + w.fixed.String() }

func shortID(prefix, id string) string {
	sum := sha256.Sum256([]byte(id))
	return prefix + hex.EncodeToString(sum[:])[:10]
}

// lastAddr is the last address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// errHostGone is a server whose machine's state is not there to boot
// again (the simulator restarted without it).
var errHostGone = errors.New("its host is gone: the machine's state was not found when the simulator restarted")

// startBoot boots a server's machine apart; the caller holds r.mu. A
// server already ACTIVE boots again (a restarted simulator), without
// Ignition, or is reported gone.
func (r *realHosts) startBoot(id string, ws wantServer) {
	rm := r.machines[id]
	r.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		dir := filepath.Join(r.dir, id)
		var m *machine.Machine
		var err error
		if _, statErr := os.Stat(filepath.Join(dir, "booted")); ws.status == "ACTIVE" && statErr != nil {
			err = errHostGone
		} else {
			m, err = machine.Boot(ctx, machine.Config{ID: id, Hostname: hostname(ws.name), Dir: dir, Image: r.img,
				UserData: ws.userData, Fetch: ws.lease, NetNS: filepath.Join(machine.NetNSDir, rm.ns), MemoryBytes: ws.memory, CPUs: ws.cpus, DiskBytes: ws.disk})
		}
		r.mu.Lock()
		rm.m, rm.err, rm.booted, rm.disks = m, err, true, ""
		r.mu.Unlock()
		if err != nil {
			r.log.Warn("real hosts: a machine did not boot", "server", id, "err", err)
			if ws.status == "ACTIVE" {
				r.s.serverFailed(id, err)
			}
		} else {
			r.log.Debug("real hosts: machine booted", "server", id)
		}
		r.wake()
	})
}

// hostname makes a host name of a server's name, as Nova does: lower
// case, letters, digits and dashes, at most 63 characters.
func hostname(name string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			b.WriteRune(c)
		case c == ' ', c == '_', c == '.':
			b.WriteByte('-')
		}
	}
	h := strings.Trim(b.String(), "-")
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-")
	}
	if h == "" {
		h = "server"
	}
	return h
}

// serverFailed puts an ACTIVE server in ERROR with a fault.
func (s *Sim) serverFailed(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sv := s.w.Servers[id]; sv != nil && sv.Status == "ACTIVE" {
		sv.Status, sv.Fault, sv.Updated = "ERROR", err.Error(), s.opts.Now().UTC().Truncate(time.Second)
		s.changed()
	}
}

func lbKey(w wantLB) string { return fmt.Sprint(w.network, w.vip, w.gateway) }

// convergeLBs makes each load balancer's amphora and listeners; the
// caller holds r.mu.
func (r *realHosts) convergeLBs(ctx context.Context, d desired) []error {
	var errs []error
	for id, lb := range r.lbs {
		if w, ok := d.lbs[id]; !ok || lbKey(w) != lb.key {
			errs = append(errs, lb.lb.Close(ctx))
			delete(r.lbs, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(d.lbs)) {
		w := d.lbs[id]
		lb := r.lbs[id]
		if lb == nil {
			if !hasNetwork(&r.applied, w.network) {
				continue
			}
			l, err := r.fab.AddLoadBalancer(ctx, id, w.network, w.vip, w.gateway, r.log)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			lb = &realLB{lb: l, key: lbKey(w), listeners: map[int]string{}}
			r.lbs[id] = lb
		}
		for port := range lb.listeners {
			if _, ok := w.listeners[port]; !ok {
				errs = append(errs, lb.lb.RemoveListener(ctx, port))
				delete(lb.listeners, port)
			}
		}
		for _, port := range slices.Sorted(maps.Keys(w.listeners)) {
			wl := w.listeners[port]
			if lb.listeners[port] == wl.key() {
				continue
			}
			if err := lb.lb.SetListener(ctx, port, wl.members, wl.monitor, wl.idle, wl.allowed); err != nil {
				errs = append(errs, err)
				continue
			}
			lb.listeners[port] = wl.key()
		}
	}
	return errs
}

// reportMembers writes the members' operating status, as the amphorae's
// health monitors found it, into the world.
func (r *realHosts) reportMembers(d desired) {
	type seen struct {
		pool   string
		status map[machine.Member]string
	}
	var all []seen
	r.mu.Lock()
	for id, lb := range r.lbs {
		for port, wl := range d.lbs[id].listeners {
			if _, ok := lb.listeners[port]; ok && wl.pool != "" {
				all = append(all, seen{pool: wl.pool, status: lb.lb.Status(port)})
			}
		}
	}
	r.mu.Unlock()
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	for _, m := range r.s.w.Members {
		if m.ProvisioningStatus != "ACTIVE" {
			continue
		}
		addr, err := netip.ParseAddr(m.Address)
		if err != nil {
			continue
		}
		for _, sn := range all {
			if sn.pool != m.PoolID {
				continue
			}
			if st := sn.status[machine.Member{Address: addr, Port: m.ProtocolPort}]; st != "" && st != m.OperatingStatus {
				m.OperatingStatus = st
				r.s.changed()
			}
		}
	}
}

package schemas

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Role is what a host is to its cluster: it picks the host's Ignition
// config and files, orders a rollout, and says what its health gate
// checks. Every package names roles by this type.
type Role string

// The roles. A controller runs etcd and the control plane, a worker the
// cluster's pods, the gateway only sshd (the hosts' jump host).
const (
	RoleController Role = "controller"
	RoleWorker     Role = "worker"
	RoleGateway    Role = "gateway"
)

// Roles lists every role, in the order they are rendered.
func Roles() []Role { return []Role{RoleController, RoleWorker, RoleGateway} }

// Tags OPKE puts on every OpenStack resource it creates. The owner tag holds
// the installation id, so two installations never touch each other's resources.
const (
	TagCluster = "opke-cluster"
	TagOwner   = "opke-owner"
)

// Offsets into hostCIDR of the addresses OPKE chooses. The first
// DHCPStartOffset addresses are reserved; the subnet's DHCP pool, from which
// workers, Neutron's DHCP ports and the load balancer's ports are served,
// runs from there to the last address before broadcast.
const (
	RouterOffset     = 1
	APIVIPOffset     = 5
	GatewayOffset    = 6
	ControllerOffset = 10
	DHCPStartOffset  = 16
	// PortsReserve is room in the DHCP pool for ports that are not servers.
	PortsReserve = 4
	// MaxHostnameLen is the limit of a host name label (RFC 1123).
	MaxHostnameLen = 63
)

// ServerName is the name of the index-th server of a pool:
// <cluster>-<pool>-<index>. A worker pool is named in the spec; the
// controllers' pool is "controller" and the gateway's "gateway".
func ServerName(cluster, pool string, index int) string {
	return fmt.Sprintf("%s-%s-%d", cluster, pool, index)
}

// ControllerName is the name of the cluster's index-th controller.
func ControllerName(cluster string, index int) string {
	return ServerName(cluster, string(RoleController), index)
}

// ControllerIndex is the index of a controller from its name; ok is
// false for a name that is not one of the cluster's controllers.
func ControllerIndex(cluster, server string) (index int, ok bool) {
	if RoleOf(cluster, server) != RoleController {
		return 0, false
	}
	n, err := strconv.Atoi(server[strings.LastIndex(server, "-")+1:])
	if err != nil || n < 0 || ControllerName(cluster, n) != server {
		return 0, false
	}
	return n, true
}

// GatewayName is the name of the cluster's gateway.
func GatewayName(cluster string) string { return ServerName(cluster, string(RoleGateway), 0) }

// RoleOf tells a server's role from its name, <cluster>-<pool>-<index>:
// the controllers' and the gateway's pools are named after their roles
// (Check refuses a worker pool named so); every other server is a worker,
// including one of a pool whose name only starts like a role's
// ("controller-a").
func RoleOf(cluster, server string) Role {
	rest, _ := strings.CutPrefix(server, cluster+"-")
	i := strings.LastIndex(rest, "-")
	if i < 0 {
		return RoleWorker
	}
	switch pool := Role(rest[:i]); pool {
	case RoleController, RoleGateway:
		return pool
	}
	return RoleWorker
}

// HostPrefix parses network.hostCIDR.
func (c *Cluster) HostPrefix() (netip.Prefix, error) {
	p, err := netip.ParsePrefix(c.Spec.Network.HostCIDR)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("hostCIDR: %w", err)
	}
	return p, nil
}

// ServicePrefix parses network.serviceCIDR (set by Default).
func (c *Cluster) ServicePrefix() (netip.Prefix, error) {
	p, err := netip.ParsePrefix(c.Spec.Network.ServiceCIDR)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("serviceCIDR: %w", err)
	}
	return p, nil
}

// ClusterDNSIP is the cluster DNS service's IP: the 10th address of
// serviceCIDR, as kubeadm chooses it.
func (c *Cluster) ClusterDNSIP() (netip.Addr, error) {
	p, err := c.ServicePrefix()
	if err != nil {
		return netip.Addr{}, err
	}
	a, ok := nthAddr(p, 10)
	if !ok {
		return netip.Addr{}, fmt.Errorf("serviceCIDR %s has no 10th address", p)
	}
	return a, nil
}

// APIVIP is the Kubernetes API's virtual IP: the 5th address of hostCIDR.
func (c *Cluster) APIVIP() (netip.Addr, error) { return c.hostAddr(APIVIPOffset) }

// GatewayIP is the fixed IP of the cluster's gateway: the 6th address.
func (c *Cluster) GatewayIP() (netip.Addr, error) { return c.hostAddr(GatewayOffset) }

// ControllerIP is the fixed IP of controller i: the (10+i)th address.
func (c *Cluster) ControllerIP(i int) (netip.Addr, error) {
	return c.hostAddr(ControllerOffset + i)
}

func (c *Cluster) hostAddr(offset int) (netip.Addr, error) {
	p, err := c.HostPrefix()
	if err != nil {
		return netip.Addr{}, err
	}
	a, ok := nthAddr(p, offset)
	if !ok {
		return netip.Addr{}, fmt.Errorf("hostCIDR %s has no address at offset %d", p, offset)
	}
	return a, nil
}

// WorkerCount is the number of workers over all pools.
func (s *Spec) WorkerCount() int {
	n := 0
	for _, p := range s.WorkerPools {
		n += p.Count
	}
	return n
}

// DHCPRoomNeeded is how many DHCP pool addresses the spec can use at once:
// every worker, one surge server per pool for rolling replacements, and
// PortsReserve ports that are not servers.
func (s *Spec) DHCPRoomNeeded() int {
	return s.WorkerCount() + len(s.WorkerPools) + PortsReserve
}

// DHCPRoom is the number of addresses in the DHCP pool of an IPv4 prefix.
func DHCPRoom(p netip.Prefix) int {
	hostBits := 32 - p.Bits()
	if hostBits >= 31 {
		return 1 << 30 // more than any spec can ask for
	}
	room := (1 << hostBits) - DHCPStartOffset - 1 // minus the broadcast address
	return max(room, 0)
}

// nthAddr returns the n-th address of prefix p, and false if p has none.
func nthAddr(p netip.Prefix, n int) (netip.Addr, bool) {
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
		if !a.IsValid() {
			return netip.Addr{}, false
		}
	}
	return a, p.Contains(a)
}

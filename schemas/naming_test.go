package schemas

import (
	"net/netip"
	"testing"
)

type addr = netip.Addr

// str adapts an address getter to a string one.
func str(f func() (addr, error)) func() (string, error) {
	return func() (string, error) {
		a, err := f()
		return a.String(), err
	}
}

// TestAddresses: the addresses OPKE derives from a spec's CIDRs.
func TestAddresses(t *testing.T) {
	t.Parallel()
	c := &Cluster{Spec: Spec{Network: Network{HostCIDR: "192.168.20.0/24", ServiceCIDR: "10.3.0.0/16"}}}
	for _, tc := range []struct {
		name string
		got  func() (string, error)
		want string
	}{
		{name: "API VIP", got: str(c.APIVIP), want: "192.168.20.5"},
		{name: "gateway", got: str(c.GatewayIP), want: "192.168.20.6"},
		{name: "controller 2", got: str(func() (a addr, err error) { return c.ControllerIP(2) }), want: "192.168.20.12"},
		{name: "cluster DNS", got: str(c.ClusterDNSIP), want: "10.3.0.10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.got()
			if err != nil || got != tc.want {
				t.Errorf("got %s (%v), want %s", got, err, tc.want)
			}
		})
	}
	for name, bad := range map[string]*Cluster{
		"no serviceCIDR":        {Spec: Spec{Network: Network{HostCIDR: "192.168.20.0/24"}}},
		"serviceCIDR too small": {Spec: Spec{Network: Network{ServiceCIDR: "10.3.0.0/29"}}},
		"hostCIDR not a prefix": {Spec: Spec{Network: Network{HostCIDR: "192.168.20.0", ServiceCIDR: "10.3.0.0/16"}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, errDNS := bad.ClusterDNSIP()
			_, errVIP := bad.APIVIP()
			if errDNS == nil && errVIP == nil {
				t.Error("no error")
			}
		})
	}
}

// TestServerNamesAndRoles: a server's name says its role, whatever the
// cluster's or the pool's name holds (a cluster named like a role, a
// pool whose name starts like one).
func TestServerNamesAndRoles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cluster, server string
		want            Role
	}{
		{"prod", ControllerName("prod", 2), RoleController},
		{"prod", GatewayName("prod"), RoleGateway},
		{"prod", ServerName("prod", "general", 0), RoleWorker},
		{"prod", ServerName("prod", "controllers", 0), RoleWorker},
		{"prod", ServerName("prod", "gateways", 1), RoleWorker},
		{"prod", ServerName("prod", "controller-a", 0), RoleWorker},
		{"prod", ServerName("prod", "gateway-b", 0), RoleWorker},
		{"controller", ServerName("controller", "general", 3), RoleWorker},
		{"controller", ControllerName("controller", 0), RoleController},
		{"gateway", GatewayName("gateway"), RoleGateway},
		{"prod", ControllerName("other", 0), RoleWorker},
	} {
		if got := RoleOf(tc.cluster, tc.server); got != tc.want {
			t.Errorf("RoleOf(%q, %q) = %s, want %s", tc.cluster, tc.server, got, tc.want)
		}
	}
	if got, want := ControllerName("prod", 1), "prod-controller-1"; got != want {
		t.Errorf("ControllerName = %s, want %s", got, want)
	}
	if got, want := GatewayName("prod"), "prod-gateway-0"; got != want {
		t.Errorf("GatewayName = %s, want %s", got, want)
	}
	for _, tc := range []struct {
		server string
		index  int
		ok     bool
	}{
		{"prod-controller-0", 0, true},
		{"prod-controller-4", 4, true},
		{"prod-controller-01", 0, false},
		{"prod-controller--1", 0, false},
		{"prod-controller-x", 0, false},
		{"prod-controller-a-0", 0, false},
		{"prod-gateway-0", 0, false},
		{"other-controller-1", 0, false},
	} {
		if i, ok := ControllerIndex("prod", tc.server); i != tc.index || ok != tc.ok {
			t.Errorf("ControllerIndex(prod, %q) = %d, %v; want %d, %v", tc.server, i, ok, tc.index, tc.ok)
		}
	}
}

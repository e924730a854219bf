package diff

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAddresses: each constructor's string form, and that form read
// back to the same address; the JSON form is the string form.
func TestAddresses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr Address
		want string
	}{
		{ResourceAddress(KindServer, "prod-general-3"), "openstack/server/prod-general-3"},
		{ResourceAddress(KindRule, "prod-gateway/ingress-tcp-22-0.0.0.0_0"), "openstack/security-group-rule/prod-gateway/ingress-tcp-22-0.0.0.0_0"},
		{FileAddress("prod-controller-0", "/etc/kubernetes/kubelet.env"), "host/prod-controller-0/etc/kubernetes/kubelet.env"},
		{FileAddress("prod-controller-0", "/etc/systemd/system/kubelet.service.d/10-opke.conf"), "host/prod-controller-0/etc/systemd/system/kubelet.service.d/10-opke.conf"},
		{UnitAddress("prod-general-0", "kubelet.service"), "host/prod-general-0/units/kubelet.service"},
		{GateAddress("prod-general-0"), "host/prod-general-0/health"},
		{DrainAddress("prod-general-0"), "host/prod-general-0/drain"},
		{NodeAddress("prod-general-0"), "host/prod-general-0/node"},
		{MemberAddress("prod-controller-1"), "host/prod-controller-1/etcd-member"},
		{RebootAddress("prod-worker-0"), "host/prod-worker-0/reboot"},
		{ManifestAddress("prod", "00-kube-proxy.yaml"), "kubernetes/prod/00-kube-proxy.yaml"},
		{WorkloadsAddress("prod"), "kubernetes/prod/workloads/restart"},
		{BackupAddress("prod"), "backup/prod"},
		{SnapshotAddress("prod"), "backup/prod/before-rollout"},
		{StateAddress("prod"), "state/prod"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.addr.String(); got != tc.want {
				t.Errorf("String() = %s", got)
			}
			back, err := ParseAddress(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.addr, back); d != "" {
				t.Errorf("parsed (-want +got):\n%s", d)
			}
			b, err := json.Marshal(Change{Address: tc.addr, Action: ActionCreate})
			if err != nil {
				t.Fatal(err)
			}
			var c Change
			if err := json.Unmarshal(b, &c); err != nil || c.Address != tc.addr {
				t.Errorf("through JSON: %+v, %v (%s)", c.Address, err, b)
			}
		})
	}
	if tc := (ResourceAddress(KindServer, "x")); !(GateAddress("x").OnHost() && !tc.OnHost()) {
		t.Error("OnHost: a gate is on a host, a server is not")
	}
}

// TestParseAddressRefuses: strings that name nothing are refused with
// ErrAddress, and so is a plan that holds one.
func TestParseAddressRefuses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "openstack", "openstack/", "openstack/server", "openstack/server/", "openstack/share/x", "openstack/server//x",
		"host/", "host/x", "host//etc/x", "host/x/", "host/x/units/", "host/x/units/a/b", "host/x/etc//y",
		"kubernetes/prod", "kubernetes//a.yaml", "kubernetes/prod/a/b", "kubernetes//workloads/restart", "kubernetes/a/b/workloads/restart",
		"backup/", "backup/a/b", "state/", "state/a/b", "elsewhere/x",
	} {
		if a, err := ParseAddress(s); !errors.Is(err, ErrAddress) {
			t.Errorf("ParseAddress(%q) = %+v, %v; want ErrAddress", s, a, err)
		}
	}
	if _, err := Read([]byte(`{"format_version":"1.0","changes":[{"address":"openstack/share/x","action":"create"}]}`)); !errors.Is(err, ErrFormat) {
		t.Errorf("a plan with an unknown kind: %v, want ErrFormat", err)
	}
	if _, err := json.Marshal(Change{Action: ActionCreate}); err == nil {
		t.Error("a change with no address was written")
	}
}

// FuzzParseAddress: whatever ParseAddress accepts prints back to the
// same string and parses to the same address.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"openstack/server/a-b-0", "host/a/etc/x", "host/a/units/u", "host/a/health", "kubernetes/c/m.yaml",
		"backup/c", "backup/c/before-rollout", "state/c", "kubernetes/c/workloads/restart", "openstack/security-group-rule/g/ingress-any-any-group:g"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			return
		}
		if a.String() != s {
			t.Fatalf("ParseAddress(%q).String() = %q", s, a.String())
		}
		if b, err := ParseAddress(a.String()); err != nil || b != a {
			t.Fatalf("again: %+v, %v; want %+v", b, err, a)
		}
	})
}

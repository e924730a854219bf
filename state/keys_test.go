package state

import (
	"strings"
	"testing"
)

// prefixed is a Keyer with DefaultPrefix, as a Store has by default.
type prefixed struct{}

func (prefixed) Key(parts ...string) string { return DefaultPrefix + strings.Join(parts, "/") }

// TestKeys: each name of the store's layout, as keys.go's comment draws
// it; a key written under one name is found under its prefix.
func TestKeys(t *testing.T) {
	t.Parallel()
	k := KeysOf(prefixed{})
	priv, pub := k.SSHKey("prod")
	for _, tc := range []struct{ got, want string }{
		{k.Cluster("prod"), "/opke/prod/"},
		{k.Resources("prod"), "/opke/prod/infra/"},
		{k.Resource("prod", "server", "prod-general-0"), "/opke/prod/infra/server/prod-general-0"},
		{k.Resource("prod", "security-group-rule", "prod-nodes/ingress-tcp-22-group:prod-gateway"), "/opke/prod/infra/security-group-rule/prod-nodes/ingress-tcp-22-group:prod-gateway"},
		{k.Hosts("prod"), "/opke/prod/hosts/"},
		{k.Host("prod", "prod-general-0"), "/opke/prod/hosts/prod-general-0/"},
		{k.HostFiles("prod", "prod-general-0"), "/opke/prod/hosts/prod-general-0/files/"},
		{k.HostFile("prod", "prod-general-0", "/etc/kubernetes/kubelet.env"), "/opke/prod/hosts/prod-general-0/files/etc/kubernetes/kubelet.env"},
		{k.HostVersion("prod", "prod-general-0"), "/opke/prod/hosts/prod-general-0/version"},
		{k.HostEtcd("prod", "prod-controller-0"), "/opke/prod/hosts/prod-controller-0/etcd"},
		{k.Manifests("prod"), "/opke/prod/kubernetes/"},
		{k.Manifest("prod", "00-kube-proxy.yaml"), "/opke/prod/kubernetes/00-kube-proxy.yaml"},
		{k.Backups("prod"), "/opke/prod/backups/"},
		{k.HostKeys("prod", "prod-gateway-0"), "/opke/prod/hostkeys/prod-gateway-0"},
		{k.AppCredentialSecret("prod"), "/opke/prod/cloud/application-credential-secret"},
		{k.PKI("prod"), "/opke/prod/pki/"},
		{k.PKIFile("prod", "ca.crt"), "/opke/prod/pki/ca.crt"},
		{priv, "/opke/prod/ssh/id_ed25519"},
		{pub, "/opke/prod/ssh/id_ed25519.pub"},
		{k.Kubeconfig("prod"), "/opke/prod/kubeconfig"},
		{k.AppliedSpecs(), "/opke/_applied/"},
		{k.AppliedSpec("prod"), "/opke/_applied/prod"},
		{k.OpenPlans(), "/opke/_open/"},
		{k.OpenPlan("prod"), "/opke/_open/prod"},
		{k.Journals("prod"), "/opke/_journal/prod/"},
		{k.Journal("prod", "p1", "plan"), "/opke/_journal/prod/p1/plan"},
		{k.Statuses(), "/opke/_status/"},
		{k.Status("prod"), "/opke/_status/prod"},
		{k.Report("c0ffee"), "/opke/_reports/c0ffee"},
		{k.ReportEntry("c0ffee", "prod"), "/opke/_reports/c0ffee/prod"},
		{k.SeenRefs(), "/opke/_daemon/seen/"},
		{k.SeenRef("refs/heads/main"), "/opke/_daemon/seen/refs/heads/main"},
		{k.Accepted("refs/heads/main"), "/opke/_daemon/accepted/refs/heads/main"},
		{k.Plannings(), "/opke/_daemon/planning/"},
		{k.Planning("refs/pull/7/head"), "/opke/_daemon/planning/refs/pull/7/head"},
		{k.Dispatched("refs/heads/main"), "/opke/_daemon/dispatched/refs/heads/main"},
		{k.Members(), "/opke/_members/"},
		{k.Member("opke-1/42"), "/opke/_members/opke-1/42"},
		{k.Reported("github/c0ffee/opke"), "/opke/_reported/github/c0ffee/opke"},
		{k.Locks(), "/opke/_locks/"},
		{k.Lock("prod"), "/opke/_locks/prod"},
		{k.InstallationID(), "/opke/_meta/installation-id"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	for _, c := range []struct{ key, prefix string }{
		{k.HostFile("prod", "h", "/etc/x"), k.HostFiles("prod", "h")},
		{k.HostFile("prod", "h", "/etc/x"), k.Host("prod", "h")},
		{k.HostVersion("prod", "h"), k.Hosts("prod")},
		{k.HostEtcd("prod", "h"), k.Host("prod", "h")},
		{k.Resource("prod", "server", "s"), k.Cluster("prod")},
		{k.Journal("prod", "p1", "c1"), k.Journals("prod")},
		{k.Planning("refs/pull/7/head"), k.Plannings()},
		{k.Member("d1"), k.Members()},
		{k.ReportEntry("c0ffee", "prod"), k.Report("c0ffee") + "/"},
	} {
		if !strings.HasPrefix(c.key, c.prefix) {
			t.Errorf("%s is not under %s", c.key, c.prefix)
		}
	}
	// A cluster's prefix holds none of another's whose name it starts.
	if strings.HasPrefix(k.Resource("prod-eu", "server", "s"), k.Cluster("prod")) {
		t.Error("prod's prefix holds prod-eu's keys")
	}
}

// TestRanges: a cluster's ledger range holds its ledger's records (and
// the kubeconfig, which readers skip) and nothing else of it; its
// material range holds its keys and certificates and its SSH key.
func TestRanges(t *testing.T) {
	t.Parallel()
	k := KeysOf(prefixed{})
	priv, pub := k.SSHKey("prod")
	keys := map[string][]string{
		"ledger": {k.Resource("prod", "server", "prod-general-0"), k.HostFile("prod", "prod-general-0", "/etc/kubernetes/kubelet.env"),
			k.HostVersion("prod", "prod-general-0"), k.HostEtcd("prod", "prod-controller-0"), k.Manifest("prod", "00-kube-proxy.yaml"), k.Kubeconfig("prod")},
		"material": {k.PKIFile("prod", "ca.crt"), k.PKIFile("prod", "etcd/ca.crt"), priv, pub},
		"neither": {k.Backups("prod") + "x", k.HostKeys("prod", "prod-gateway-0"), k.AppCredentialSecret("prod"), k.Status("prod"),
			k.Resource("prod2", "server", "prod2-general-0"), k.PKIFile("prod2", "ca.crt"), k.AppliedSpec("prod")},
	}
	ranges := map[string][2]string{}
	ranges["ledger"] = func() [2]string { f, t := k.Ledger("prod"); return [2]string{f, t} }()
	ranges["material"] = func() [2]string { f, t := k.Material("prod"); return [2]string{f, t} }()
	for group, list := range keys {
		for _, key := range list {
			for name, r := range ranges {
				if in := key >= r[0] && key < r[1]; in != (name == group) {
					t.Errorf("%s (%s): in the %s range [%s, %s): %v", key, group, name, r[0], r[1], in)
				}
			}
		}
	}
}

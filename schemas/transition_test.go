package schemas

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustParse(t *testing.T, spec string) *Cluster {
	t.Helper()
	f := Parse("f.yaml", []byte(spec))
	if f.Findings.HasErrors() {
		t.Fatalf("spec has findings: %v", f.Findings)
	}
	return f.Cluster
}

type effectAt struct {
	Path   string
	Effect Effect
}

// TestCompare covers each row of the field-change table with an old/new pair.
func TestCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit []string // old -> new replacements of baseSpec
		want []effectAt
	}{
		{"no change", nil, nil},
		{"kubernetes.version: rolling upgrade", []string{"v1.35.1", "v1.36.0"},
			[]effectAt{{"spec.kubernetes.version", EffectUpgrade}}},
		{"workerPools[].count: scale out", []string{"count: 3\n      flavor", "count: 5\n      flavor"},
			[]effectAt{{"spec.workerPools[0].count", EffectScale}}},
		{"workerPools[].count: scale in", []string{"count: 3\n      flavor", "count: 1\n      flavor"},
			[]effectAt{{"spec.workerPools[0].count", EffectScale}}},
		{"workerPools[] removed: scale in", []string{"  workerPools:\n    - name: general\n      count: 3\n      flavor: m1.medium\n", ""},
			[]effectAt{{"spec.workerPools", EffectScale}}},
		{"workerPools[].flavor: rolling replacement", []string{"flavor: m1.medium", "flavor: m1.large"},
			[]effectAt{{"spec.workerPools[0].flavor", EffectReplace}}},
		{"image: rolling replacement", []string{"image: flatcar", "image: fedora-coreos"},
			[]effectAt{{"spec.image", EffectReplace}}},
		{"controllers.count: scale out", []string{"count: 3\n    flavor: m1.large", "count: 5\n    flavor: m1.large"},
			[]effectAt{{"spec.controllers.count", EffectScale}}},
		{"controllers.count: scale in", []string{"count: 3\n    flavor: m1.large", "count: 1\n    flavor: m1.large"},
			[]effectAt{{"spec.controllers.count", EffectScale}}},
		{"controllers.flavor: rolling replacement", []string{"flavor: m1.large", "flavor: m1.xlarge"},
			[]effectAt{{"spec.controllers.flavor", EffectReplace}}},
		{"controllers.flavor of one controller: refused", []string{"count: 3\n    flavor: m1.large", "count: 1\n    flavor: m1.xlarge"},
			[]effectAt{{"spec.controllers.count", EffectScale}, {"spec.controllers.flavor", EffectUnsupported}}},
		{"controllers.flavor with the count: refused", []string{"count: 3\n    flavor: m1.large", "count: 5\n    flavor: m1.xlarge"},
			[]effectAt{{"spec.controllers.count", EffectScale}, {"spec.controllers.flavor", EffectUnsupported}}},
		{"image with one controller: refused", []string{"count: 3\n    flavor: m1.large", "count: 1\n    flavor: m1.large", "image: flatcar", "image: fedora-coreos"},
			[]effectAt{{"spec.controllers.count", EffectScale}, {"spec.image", EffectUnsupported}}},
		{"cloud: immutable", []string{"cloud: sim", "cloud: other"}, []effectAt{{"spec.cloud", EffectImmutable}}},
		{"region: immutable", []string{"  image: flatcar\n", "  image: flatcar\n  region: RegionTwo\n"},
			[]effectAt{{"spec.region", EffectImmutable}}},
		{"hostCIDR: immutable", []string{"192.168.20.0/24", "192.168.30.0/24"},
			[]effectAt{{"spec.network.hostCIDR", EffectImmutable}}},
		{"podCIDR: immutable", []string{"    externalNetwork: public\n", "    externalNetwork: public\n    podCIDR: 10.20.0.0/16\n"},
			[]effectAt{{"spec.network.podCIDR", EffectImmutable}}},
		{"serviceCIDR: immutable", []string{"    externalNetwork: public\n", "    externalNetwork: public\n    serviceCIDR: 10.30.0.0/16\n"},
			[]effectAt{{"spec.network.serviceCIDR", EffectImmutable}}},
		{"externalNetwork: immutable", []string{"externalNetwork: public", "externalNetwork: ext"},
			[]effectAt{{"spec.network.externalNetwork", EffectImmutable}}},
		{"sshAuthorizedKeys: files over SSH", []string{"  image: flatcar\n", "  image: flatcar\n  sshAuthorizedKeys: [\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG ops\"]\n"},
			[]effectAt{{"spec.sshAuthorizedKeys", EffectHostFiles}}},
		{"addons: manifests", []string{"  gateway:\n", "  addons: [{name: dashboard}]\n  gateway:\n"},
			[]effectAt{{"spec.addons", EffectManifests}}},
		{"backup: config only", []string{"  gateway:\n", "  backup: {interval: 1h}\n  gateway:\n"},
			[]effectAt{{"spec.backup", EffectConfig}}},
		{"remediation: config only", []string{"  gateway:\n", "  remediation: {unhealthyAfter: 10m}\n  gateway:\n"},
			[]effectAt{{"spec.remediation", EffectConfig}}},
		{"upgrade: config only", []string{"  gateway:\n", "  upgrade: {maxUnavailable: 2}\n  gateway:\n"},
			[]effectAt{{"spec.upgrade", EffectConfig}}},
		{"sshKeyName: new servers only", []string{"  image: flatcar\n", "  image: flatcar\n  sshKeyName: ops\n"},
			[]effectAt{{"spec.sshKeyName", EffectNewServersOnly}}},
		{"availabilityZones: new servers only", []string{"    flavor: m1.large\n", "    flavor: m1.large\n    availabilityZones: [az1]\n"},
			[]effectAt{{"spec.controllers.availabilityZones", EffectNewServersOnly}}},
		{"dnsNameservers: subnet updated in place", []string{"    externalNetwork: public\n", "    externalNetwork: public\n    dnsNameservers: [192.0.2.53]\n"},
			[]effectAt{{"spec.network.dnsNameservers", EffectSubnetUpdate}}},
		{"explicit default is no change", []string{"    externalNetwork: public\n", "    externalNetwork: public\n    podCIDR: 10.2.0.0/16\n    cni: flannel\n    networkPolicy: kube-router\n"}, nil},
		{"network.networkPolicy: manifests", []string{"    externalNetwork: public\n", "    externalNetwork: public\n    networkPolicy: none\n"},
			[]effectAt{{"spec.network.networkPolicy", EffectManifests}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old := mustParse(t, baseSpec)
			newSpec := baseSpec
			for i := 0; i+1 < len(tt.edit); i += 2 {
				if !strings.Contains(newSpec, tt.edit[i]) {
					t.Fatalf("edit: %q not in base spec", tt.edit[i])
				}
				newSpec = strings.Replace(newSpec, tt.edit[i], tt.edit[i+1], 1)
			}
			var got []effectAt
			for _, c := range Compare(old, mustParse(t, newSpec)) {
				got = append(got, effectAt{c.Path.String(), c.Effect})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNetworkPolicyOffSaysWhatStays: turning kube-router off says that
// its iptables rules stay on the hosts and how not to be caught by them;
// turning it on says nothing of the kind.
func TestNetworkPolicyOffSaysWhatStays(t *testing.T) {
	t.Parallel()
	on := mustParse(t, baseSpec)
	off := mustParse(t, strings.Replace(baseSpec, "    externalNetwork: public\n", "    externalNetwork: public\n    networkPolicy: none\n", 1))
	for _, tc := range []struct {
		name     string
		from, to *Cluster
		want     string
	}{
		{"off", on, off, "delete the cluster's NetworkPolicy objects first"},
		{"on", off, on, "manifest is applied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes := Compare(tc.from, tc.to)
			if len(changes) != 1 || !strings.Contains(changes[0].Note, tc.want) {
				t.Errorf("changes %+v, want one whose note says %q", changes, tc.want)
			}
		})
	}
}

func TestCheckTransition(t *testing.T) {
	t.Parallel()
	v := func(s string) Version {
		ver, err := ParseVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		return ver
	}
	tests := []struct {
		name     string
		from, to string
		facts    *TransitionFacts
		want     []string
	}{
		{"patch upgrade", "v1.35.1", "v1.35.3", nil, nil},
		{"one minor up", "v1.35.1", "v1.36.0", nil, nil},
		{"two minors up", "v1.34.2", "v1.36.0", nil, []string{"v1.34.2 -> v1.36.0 skips a minor; upgrade one minor at a time (next: v1.35)"}},
		{"patch downgrade", "v1.35.3", "v1.35.1", nil, nil},
		{"minor downgrade after apply", "v1.36.0", "v1.35.1", nil,
			[]string{"v1.36.0 -> v1.35.1 is a minor downgrade and a controller runs v1.36; restore the etcd snapshot taken before the upgrade instead"}},
		{"revert of a halted upgrade before any controller moved", "v1.36.0", "v1.35.1",
			&TransitionFacts{NewestControllerVersion: v("v1.35.1")}, nil},
		{"revert once a controller runs the new minor", "v1.36.0", "v1.35.1",
			&TransitionFacts{NewestControllerVersion: v("v1.36.0")},
			[]string{"v1.36.0 -> v1.35.1 is a minor downgrade and a controller runs v1.36; restore the etcd snapshot taken before the upgrade instead"}},
		{"revert to the applied spec after a rollout halted past its first controller", "v1.35.1", "v1.35.1",
			&TransitionFacts{NewestControllerVersion: v("v1.36.0"), Snapshot: "20261121T120000.000Z-42"},
			[]string{"v1.35.1 is a minor below v1.36, which a controller runs since a rollout halted; restore the etcd snapshot taken before the upgrade instead: " +
				"opke restore --cluster prod --snapshot 20261121T120000.000Z-42 --to DIR"}},
		{"forward fix after a halted rollout", "v1.35.1", "v1.36.1", &TransitionFacts{NewestControllerVersion: v("v1.36.0")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old := mustParse(t, strings.Replace(baseSpec, "v1.35.1", tt.from, 1))
			new := mustParse(t, strings.Replace(baseSpec, "v1.35.1", tt.to, 1))
			var got []string
			for _, p := range CheckTransition(old, new, tt.facts) {
				got = append(got, p.Message)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFleetTransitions(t *testing.T) {
	t.Parallel()
	base := mustFleet(t, map[string]string{
		"a": specNamed("a"),
		"b": specNamed("b"),
		"c": strings.Replace(specNamed("c"), "  gateway:\n", "  deletionPolicy: Delete\n  gateway:\n", 1),
	})
	next := mustFleet(t, map[string]string{
		"a": strings.Replace(specNamed("a"), "cloud: sim", "cloud: other", 1),
	})
	next.CheckTransitions(base, nil)
	want := []string{
		`clusters/a/cluster.yaml:6: spec.cloud: immutable: a cluster cannot move to another cloud`,
		`clusters/b/cluster.yaml: warning: cluster "b" is removed with deletionPolicy Retain: OPKE stops managing it and leaves its servers, networks and load balancer in place`,
		`clusters/c/cluster.yaml: warning: cluster "c" is removed with deletionPolicy Delete: OPKE will destroy its servers, networks, load balancer and state`,
	}
	if diff := cmp.Diff(want, findingStrings(next.Findings)); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func mustFleet(t *testing.T, specs map[string]string) *Fleet {
	t.Helper()
	fsys := fstestFS(specs)
	fl, err := LoadFleet(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	return fl
}

// TestCheckRotationStep walks a CA rotation's commits: each phase may
// only go to the next (or back, while nothing the new CAs signed would
// be left untrusted), and a jump is refused naming the next step.
func TestCheckRotationStep(t *testing.T) {
	t.Parallel()
	pki := func(s string) string {
		if s == "" {
			return baseSpec
		}
		return baseSpec + "  pki: " + s + "\n"
	}
	tests := []struct {
		name, from, to string
		want           []string
	}{
		{"no pki to no pki", "", "", nil},
		{"no pki is generation 1 complete", "", "{generation: 1}", nil},
		{"start", "", "{generation: 2, phase: trust}", nil},
		{"trust to reissue", "{generation: 2, phase: trust}", "{generation: 2, phase: reissue}", nil},
		{"reissue to complete", "{generation: 2, phase: reissue}", "{generation: 2}", nil},
		{"reissue back to trust", "{generation: 2, phase: reissue}", "{generation: 2, phase: trust}", nil},
		{"abandon in trust", "{generation: 2, phase: trust}", "", nil},
		{"the next rotation", "{generation: 2}", "{generation: 3, phase: trust}", nil},
		{"straight to complete", "", "{generation: 2}",
			[]string{"a CA rotation goes one phase per commit, each rolled before the next: from generation 1 (complete) the next step is {generation: 2, phase: trust}, not generation 2 (complete)"}},
		{"skips trust", "", "{generation: 2, phase: reissue}",
			[]string{"a CA rotation goes one phase per commit, each rolled before the next: from generation 1 (complete) the next step is {generation: 2, phase: trust}, not generation 2 (reissue)"}},
		{"skips reissue", "{generation: 2, phase: trust}", "{generation: 2}",
			[]string{"a CA rotation goes one phase per commit, each rolled before the next: from generation 2 (trust) the next step is {generation: 2, phase: reissue}, or {generation: 1} to abandon it, not generation 2 (complete)"}},
		{"abandon after reissue", "{generation: 2, phase: reissue}", "{generation: 1}",
			[]string{"a CA rotation goes one phase per commit, each rolled before the next: from generation 2 (reissue) the next step is {generation: 2} (complete), or {generation: 2, phase: trust}, not generation 1 (complete)"}},
		{"back a generation", "{generation: 3}", "{generation: 2}",
			[]string{"a CA rotation goes one phase per commit, each rolled before the next: from generation 3 (complete) the next step is {generation: 4, phase: trust}, not generation 2 (complete)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, p := range CheckTransition(mustParse(t, pki(tt.from)), mustParse(t, pki(tt.to)), nil) {
				got = append(got, p.Path.String()+": "+p.Message)
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, "spec.pki: "+w)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCAGenerations: what each phase trusts, the signing generation first.
func TestCAGenerations(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pki  *PKI
		want []int
	}{
		{nil, []int{1}},
		{&PKI{Generation: 1}, []int{1}},
		{&PKI{Generation: 2, Phase: RotationTrust}, []int{1, 2}},
		{&PKI{Generation: 2, Phase: RotationReissue}, []int{2, 1}},
		{&PKI{Generation: 2, Phase: RotationComplete}, []int{2}},
		{&PKI{Generation: 3}, []int{3}},
	} {
		s := Spec{PKI: tt.pki}
		if diff := cmp.Diff(tt.want, s.CAGenerations()); diff != "" {
			t.Errorf("%+v: (-want +got):\n%s", tt.pki, diff)
		}
	}
}

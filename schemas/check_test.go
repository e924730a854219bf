package schemas

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// baseSpec is a valid spec; each case edits it. Line numbers matter: the
// findings name them.
const baseSpec = `apiVersion: opke.dev/v1alpha1
kind: Cluster
metadata:
  name: prod
spec:
  cloud: sim
  image: flatcar
  kubernetes:
    version: v1.35.1
  network:
    hostCIDR: 192.168.20.0/24
    externalNetwork: public
  controllers:
    count: 3
    flavor: m1.large
  workerPools:
    - name: general
      count: 3
      flavor: m1.medium
  gateway:
    flavor: m1.small
`

// edit replaces old with new in baseSpec, failing the test if old is absent.
func edit(t *testing.T, pairs ...string) string {
	t.Helper()
	s := baseSpec
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("edit: %q is not in the base spec", pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

func findingStrings(fs Findings) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

func TestParseRules(t *testing.T) {
	t.Parallel()
	const file = "clusters/prod/cluster.yaml"
	tests := []struct {
		name string
		spec func(t *testing.T) string
		want []string
	}{
		{"valid", func(t *testing.T) string { return baseSpec }, nil},
		{"pool count over 500", func(t *testing.T) string {
			return edit(t, "count: 3\n      flavor: m1.medium", "count: 501\n      flavor: m1.medium")
		}, []string{file + ":18: spec.workerPools[0].count: must be <= 500"}},
		{"pool count negative", func(t *testing.T) string {
			return edit(t, "count: 3\n      flavor: m1.medium", "count: -1\n      flavor: m1.medium")
		}, []string{file + ":18: spec.workerPools[0].count: must be >= 0"}},
		{"pool count of the wrong type", func(t *testing.T) string {
			return edit(t, "count: 3\n      flavor: m1.medium", "count: \"3\"\n      flavor: m1.medium")
		}, []string{file + ":18: spec.workerPools[0].count: must be integer, not string"}},
		{"unknown field with a typo", func(t *testing.T) string { return edit(t, "  image: flatcar\n", "  image: flatcar\n  imgae: fedora\n") },
			[]string{file + `:8: spec.imgae: unknown field (did you mean "image"?)`}},
		{"on is a key, not a boolean", func(t *testing.T) string { return edit(t, "  image: flatcar\n", "  image: flatcar\n  on: true\n") },
			[]string{file + ":8: spec.on: unknown field"}},
		{"required field missing", func(t *testing.T) string { return edit(t, "  image: flatcar\n", "") },
			[]string{file + ":5: spec.image: required field is missing"}},
		{"wrong apiVersion", func(t *testing.T) string { return edit(t, "opke.dev/v1alpha1", "opke.dev/v1") },
			[]string{file + ":1: apiVersion: must be opke.dev/v1alpha1"}},
		{"controllers count not 1, 3 or 5", func(t *testing.T) string {
			return edit(t, "count: 3\n    flavor: m1.large", "count: 2\n    flavor: m1.large")
		},
			[]string{file + ":14: spec.controllers.count: must be one of 1, 3, 5; got 2"}},
		{"name not a DNS label", func(t *testing.T) string { return edit(t, "name: prod", "name: Prod_1") },
			[]string{file + `:4: metadata.name: must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit; got "Prod_1"`}},
		{"version read as a number", func(t *testing.T) string { return edit(t, "version: v1.35.1", "version: 1.35") },
			[]string{file + ":9: spec.kubernetes.version: must be string, not number (YAML read it as a number; put it in quotes)"}},
		{"version not vMAJOR.MINOR.PATCH", func(t *testing.T) string { return edit(t, "version: v1.35.1", `version: "1.35"`) },
			[]string{file + `:9: spec.kubernetes.version: must be vMAJOR.MINOR.PATCH, such as v1.37.0; got "1.35"`}},
		{"version minor unsupported", func(t *testing.T) string { return edit(t, "version: v1.35.1", "version: v1.29.3") },
			[]string{file + ":9: spec.kubernetes.version: minor 1.29 is not supported; supported minors: v1.30, v1.31, v1.32, v1.33, v1.34, v1.35, v1.36, v1.37"}},
		{"CIDR that does not parse", func(t *testing.T) string { return edit(t, "192.168.20.0/24", "192.168.20.0/33") },
			[]string{file + `:11: spec.network.hostCIDR: "192.168.20.0/33" is not an IPv4 CIDR such as 192.168.10.0/24`}},
		{"CIDR of the wrong form", func(t *testing.T) string { return edit(t, "192.168.20.0/24", "fd00::/64") },
			[]string{file + `:11: spec.network.hostCIDR: must be an IPv4 CIDR such as 192.168.10.0/24; got "fd00::/64"`}},
		{"CIDR not a network address", func(t *testing.T) string { return edit(t, "192.168.20.0/24", "192.168.20.5/24") },
			[]string{file + ":11: spec.network.hostCIDR: 192.168.20.5/24 is not a network address; did you mean 192.168.20.0/24?"}},
		{"CIDRs overlap", func(t *testing.T) string {
			return edit(t, "    externalNetwork: public\n", "    externalNetwork: public\n    podCIDR: 192.168.0.0/16\n")
		}, []string{file + ":13: spec.network.podCIDR: 192.168.0.0/16 overlaps spec.network.hostCIDR 192.168.20.0/24"}},
		{"hostCIDR too small for the workers", func(t *testing.T) string { return edit(t, "192.168.20.0/24", "192.168.20.0/28") },
			[]string{file + ":11: spec.network.hostCIDR: 192.168.20.0/28 leaves 0 addresses for DHCP, the spec needs 8 (3 workers, one surge per pool, 4 ports); use a /27 or larger"}},
		{"podCIDR too small for the nodes", func(t *testing.T) string {
			return edit(t, "    externalNetwork: public\n", "    externalNetwork: public\n    podCIDR: 10.2.0.0/23\n")
		}, []string{file + ":13: spec.network.podCIDR: 10.2.0.0/23 has room for 2 nodes at a /24 each, the spec can run 7; use a /21 or larger"}},
		{"serviceCIDR too large", func(t *testing.T) string {
			return edit(t, "    externalNetwork: public\n", "    externalNetwork: public\n    serviceCIDR: 172.0.0.0/8\n")
		}, []string{file + ":13: spec.network.serviceCIDR: must be between a /12 and a /24 (the API server's limits), not a /8"}},
		{"nameserver not an IPv4 address", func(t *testing.T) string {
			return edit(t, "    externalNetwork: public\n", "    externalNetwork: public\n    dnsNameservers: [1.1.1.1, 1.1.1.1, dns.example]\n")
		}, []string{
			file + ":13: spec.network.dnsNameservers[1]: repeats item 0",
			file + `:13: spec.network.dnsNameservers[2]: "dns.example" is not an IPv4 address`,
		}},
		{"unknown cni", func(t *testing.T) string {
			return edit(t, "    externalNetwork: public\n", "    externalNetwork: public\n    cni: weave\n")
		}, []string{file + ":13: spec.network.cni: must be flannel; got weave"}},
		{"duplicate pool names and a reserved one", func(t *testing.T) string {
			return edit(t, "  gateway:\n", "    - name: general\n      count: 1\n      flavor: m1.small\n    - name: gateway\n      count: 1\n      flavor: m1.small\n  gateway:\n")
		}, []string{
			file + `:20: spec.workerPools[1].name: pool name "general" is also the name of spec.workerPools[0]`,
			file + `:23: spec.workerPools[2].name: "gateway" is reserved for the gateway servers`,
		}},
		{"server names longer than a host name", func(t *testing.T) string {
			return edit(t, "name: general", "name: a-pool-name-that-is-rather-long-indeed", "name: prod", "name: a-cluster-name-that-is-long-too")
		}, []string{file + ":17: spec.workerPools[0].name: server names a-cluster-name-that-is-long-too-a-pool-name-that-is-rather-long-indeed-3 would be 72 characters, over the 63 of a host name"}},
		{"node labels the kubelet may not set", func(t *testing.T) string {
			return edit(t, "      flavor: m1.medium\n", "      flavor: m1.medium\n      labels:\n        node-role.kubernetes.io/worker: \"\"\n        node.kubernetes.io/pool: web\n        example.k8s.io/x: y\n        topology.kubernetes.io/zone: a\n")
		}, []string{
			file + `:21: spec.workerPools[0].labels["node-role.kubernetes.io/worker"]: the kubelet may not set a label of the node-role.kubernetes.io namespace (it would refuse to start): use a domain of your own, or node.kubernetes.io/`,
			file + `:23: spec.workerPools[0].labels["example.k8s.io/x"]: the kubelet may not set a label of the example.k8s.io namespace (it would refuse to start): use a domain of your own, or node.kubernetes.io/`,
		}},
		{"bad node labels", func(t *testing.T) string {
			return edit(t, "      flavor: m1.medium\n", "      flavor: m1.medium\n      labels:\n        Example.com/tier: web\n        tier: \"-bad\"\n        n: 3\n")
		}, []string{
			file + `:21: spec.workerPools[0].labels["Example.com/tier"]: label key prefix "Example.com" must be a DNS subdomain`,
			file + `:22: spec.workerPools[0].labels.tier: label value "-bad" must be empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit`,
			file + ":23: spec.workerPools[0].labels.n: must be string, not number (YAML read it as a number; put it in quotes)",
		}},
		{"unknown and repeated addons", func(t *testing.T) string {
			return baseSpec + "  addons:\n    - name: metrics-server\n    - name: metrics-server\n    - name: linkerd\n"
		}, []string{
			file + `:24: spec.addons[1].name: addon "metrics-server" is listed already at spec.addons[0]`,
			file + ":25: spec.addons[2].name: must be one of ingress-nginx, cinder-csi, openstack-cloud-controller-manager, metrics-server, dashboard, monitoring, gateway; got linkerd",
		}},
		{"ssh key not in authorized_keys form", func(t *testing.T) string {
			return edit(t, "  image: flatcar\n", "  image: flatcar\n  sshAuthorizedKeys:\n    - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG ops@example\n    - not a key\n")
		}, []string{file + ":10: spec.sshAuthorizedKeys[1]: not an SSH public key in authorized_keys form (type, base64 key, comment)"}},
		{"an authorized key with a second line", func(t *testing.T) string {
			return edit(t, "  image: flatcar\n", "  image: flatcar\n  sshAuthorizedKeys:\n    - \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG ops@example\\ncommand=\\\"/bin/sh\\\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG evil\"\n")
		}, []string{file + ":9: spec.sshAuthorizedKeys[0]: one key per item, on one line"}},
		{"an authorized key with options", func(t *testing.T) string {
			return edit(t, "  image: flatcar\n", "  image: flatcar\n  sshAuthorizedKeys:\n    - 'command=\"/bin/sh\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG ops@example'\n")
		}, []string{file + ":9: spec.sshAuthorizedKeys[0]: authorized_keys options (command=\"/bin/sh\") are not allowed: give the key alone"}},
		{"gateway SSH sources", func(t *testing.T) string {
			return edit(t, "  gateway:\n    flavor: m1.small\n", "  gateway:\n    flavor: m1.small\n    sshSources: [203.0.113.0/24, 198.51.100.7/24, 203.0.113.0/24]\n")
		}, []string{
			file + ":22: spec.gateway.sshSources[1]: 198.51.100.7/24 is not a network address; did you mean 198.51.100.0/24?",
			file + ":22: spec.gateway.sshSources[2]: repeats item 0",
		}},
		{"API allowed CIDRs", func(t *testing.T) string {
			return edit(t, "  gateway:\n    flavor: m1.small\n", "  gateway:\n    flavor: m1.small\n  api:\n    allowedCIDRs: [203.0.113.0/24, 198.51.100.7/24, 203.0.113.0/24]\n")
		}, []string{
			file + ":23: spec.api.allowedCIDRs[1]: 198.51.100.7/24 is not a network address; did you mean 198.51.100.0/24?",
			file + ":23: spec.api.allowedCIDRs[2]: repeats item 0",
		}},
		{"a gateway SSH source that is not IPv4", func(t *testing.T) string {
			return edit(t, "  gateway:\n    flavor: m1.small\n", "  gateway:\n    flavor: m1.small\n    sshSources: [2001:db8::/32]\n")
		}, []string{
			file + `:22: spec.gateway.sshSources[0]: must be an IPv4 CIDR such as 192.168.10.0/24; got "2001:db8::/32"`,
		}},
		{"durations out of range", func(t *testing.T) string {
			return baseSpec + "  upgrade:\n    drainTimeout: 10 minutes\n  backup:\n    interval: 1m\n    retain: 0\n"
		}, []string{
			file + `:23: spec.upgrade.drainTimeout: must be a duration such as 90s, 10m or 24h; got "10 minutes"`,
			file + ":25: spec.backup.interval: must be at least 5m",
			file + ":26: spec.backup.retain: must be >= 1",
		}},
		{"remediation sooner than a kubelet's restart, and none at once", func(t *testing.T) string {
			return baseSpec + "  remediation:\n    unhealthyAfter: 10s\n    maxUnhealthy: 0\n"
		}, []string{
			file + ":23: spec.remediation.unhealthyAfter: must be at least 30s: a Node is not Ready for a moment when its kubelet restarts",
			file + ":24: spec.remediation.maxUnhealthy: must be >= 1",
		}},
		{"a rotation phase at the first generation", func(t *testing.T) string {
			return baseSpec + "  pki:\n    generation: 1\n    phase: trust\n"
		}, []string{file + ":24: spec.pki.phase: generation 1 is the first: a rotation goes to generation 2 (phase trust)"}},
		{"an unknown rotation phase", func(t *testing.T) string {
			return baseSpec + "  pki:\n    generation: 2\n    phase: rotate\n"
		}, []string{file + ":24: spec.pki.phase: must be one of trust, reissue, complete; got rotate"}},
		{"registry mirror with credentials", func(t *testing.T) string {
			return baseSpec + "  registryMirror:\n    endpoint: https://ops:secret@mirror.example:5000\n"
		}, []string{file + ":23: spec.registryMirror.endpoint: must be https://host[:port][/path] (or http://), with no credentials, query or spaces; got \"https://ops:secret@mirror.example:5000\""}},
		{"registry mirror: scheme, /v2 and a CA that is not one", func(t *testing.T) string {
			return baseSpec + "  registryMirror:\n    endpoint: https://mirror.example/v2\n    caCert: not a certificate\n"
		}, []string{
			file + ":23: spec.registryMirror.endpoint: names the registry's base, without /v2 (the hosts add it)",
			file + ":24: spec.registryMirror.caCert: must be PEM certificates and nothing else",
		}},
		{"registry mirror without an endpoint", func(t *testing.T) string {
			return baseSpec + "  registryMirror:\n    caCert: x\n"
		}, []string{
			file + ":22: spec.registryMirror.endpoint: required field is missing",
			file + ":23: spec.registryMirror.caCert: must be PEM certificates and nothing else",
		}},
		{"unknown deletion policy", func(t *testing.T) string { return baseSpec + "  deletionPolicy: Orphan\n" },
			[]string{file + ":22: spec.deletionPolicy: must be one of Retain, Delete; got Orphan"}},
		{"list where a mapping belongs", func(t *testing.T) string {
			return edit(t, "  gateway:\n    flavor: m1.small\n", "  gateway: [m1.small]\n")
		},
			[]string{file + ":20: spec.gateway: must be object, not array"}},
		{"anchors and merge keys are read", func(t *testing.T) string {
			return edit(t, "  workerPools:\n    - name: general\n      count: 3\n      flavor: m1.medium\n",
				"  workerPools:\n    - &pool {name: general, count: 3, flavor: m1.medium}\n    - <<: *pool\n      name: batch\n")
		}, nil},
		{"duplicate key", func(t *testing.T) string {
			return edit(t, "  image: flatcar\n", "  image: flatcar\n  image: fedora-coreos\n")
		},
			[]string{file + ":8: spec.image: duplicate key: already defined at line 7"}},
		{"YAML syntax error", func(t *testing.T) string { return edit(t, "  image: flatcar\n", "  image: [flatcar\n") },
			[]string{file + ":7: YAML syntax: did not find expected ',' or ']'"}},
		{"every problem at once", func(t *testing.T) string {
			return edit(t, "name: prod", "name: PROD", "count: 3\n    flavor: m1.large", "count: 4\n    flavor: m1.large", "192.168.20.0/24", "192.168.20.1/24")
		}, []string{
			file + `:4: metadata.name: must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit; got "PROD"`,
			file + ":11: spec.network.hostCIDR: 192.168.20.1/24 is not a network address; did you mean 192.168.20.0/24?",
			file + ":14: spec.controllers.count: must be one of 1, 3, 5; got 4",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := Parse(file, []byte(tt.spec(t)))
			if diff := cmp.Diff(tt.want, findingStrings(f.Findings)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

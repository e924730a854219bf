package machine

import "testing"

// A flavor's vCPUs weigh a machine as a hypervisor weighs a VM's, never
// with a CFS quota (which would refuse the quotas of its pods' cgroups
// above it) or a cpuset (which its kubelet, reading the host's cpus,
// cannot split).
func TestVCPUs(t *testing.T) {
	for _, tc := range []struct {
		n      float64
		shares uint64
	}{{1, 1024}, {2, 2048}, {0.5, 512}, {4, 4096}} {
		got := vcpus(tc.n)
		if got.Quota != nil || got.Period != nil || got.Cpus != "" {
			t.Errorf("%v vCPUs: a quota or a cpuset is set: %+v", tc.n, got)
		}
		if got.Shares == nil || *got.Shares != tc.shares {
			t.Errorf("%v vCPUs: shares %v, want %d", tc.n, got.Shares, tc.shares)
		}
	}
}

// The host's conntrack table is set to what a machine's kube-proxy asks
// with its defaults, counting the host's cpus as it does.
func TestKubeProxyConntrackMax(t *testing.T) {
	for cpus, want := range map[int]int{1: 131072, 2: 131072, 4: 131072, 8: 262144} {
		if got := kubeProxyConntrackMax(cpus); got != want {
			t.Errorf("%d cpus: %d, want %d", cpus, got, want)
		}
	}
}

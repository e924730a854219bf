package machine

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A flavor's vCPUs bound a machine as a hypervisor bounds a VM: a cpuset
// of that many of the host's cpus (none when it has as many or more) and
// a weight per vCPU, never a CFS quota (which would refuse the quotas of
// its pods' cgroups above it).
func TestVCPUs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      float64
		host   int
		cpus   int // how many cpus the cpuset lists; 0: none set
		shares uint64
	}{
		{"one of two", 1, 2, 1, 1024},
		{"two of two", 2, 2, 0, 2048},
		{"four on two", 4, 2, 0, 4096},
		{"half", 0.5, 4, 1, 512},
		{"three of eight", 3, 8, 3, 3072},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := vcpus("opke-test-machine", tc.n, tc.host)
			if got.Quota != nil || got.Period != nil {
				t.Errorf("a CFS quota is set: %v/%v", got.Quota, got.Period)
			}
			if got.Shares == nil || *got.Shares != tc.shares {
				t.Errorf("shares %v, want %d", got.Shares, tc.shares)
			}
			n := 0
			if got.Cpus != "" {
				n = len(strings.Split(got.Cpus, ","))
			}
			if n != tc.cpus {
				t.Errorf("cpuset %q: %d cpus, want %d", got.Cpus, n, tc.cpus)
			}
		})
	}
	// Machines spread over the host's cpus by their ids; one id, one set.
	seen := map[string]bool{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		seen[vcpus(id, 1, 2).Cpus] = true
	}
	if d := cmp.Diff(map[string]bool{"0": true, "1": true}, seen); d != "" {
		t.Errorf("1-vCPU machines' cpusets over 2 cpus (-want +got):\n%s", d)
	}
	if vcpus("a", 1, 2).Cpus != vcpus("a", 1, 2).Cpus {
		t.Error("one machine, two cpusets")
	}
}

package main

import (
	"strings"
	"testing"
)

// TestCheckCommandRefuses: opke check's mistakes are usage errors that
// say what is wanted, and a cluster not applied is named, before
// anything is made in any cluster.
func TestCheckCommandRefuses(t *testing.T) {
	t.Parallel()
	e := newPlanEnv(t)
	state := []string{"--sim-state", e.simDir, "--data-dir", e.dataDir, "--encryption-key-file", e.keyFile}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--cluster is required"},
		{[]string{"--cluster", "demo", "--skip", "dns,nothing"}, `--skip "nothing": want one of pods, pod-network, service, dns, load-balancer, volume`},
		{[]string{"--cluster", "demo", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"--cluster", "demo", "--output", "yaml"}, `--output "yaml": want text or json`},
		{[]string{"--cluster", "demo"}, "cluster demo: not found in the state store: not applied"},
	} {
		code, out, stderr := opke(t, append(append([]string{"check"}, tc.args...), state...)...)
		if code != exitUsage || out != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("opke check %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, stderr, tc.want)
		}
	}
}

package reconciler_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"opke.dev/opke/internal/golden"
	"opke.dev/opke/reconciler"
)

// TestCheckReport: opke check's report as it prints it (text and JSON),
// and when it passes: a failed check or a namespace left behind fails
// it; a skipped check does not.
func TestCheckReport(t *testing.T) {
	t.Parallel()
	healthy := reconciler.CheckReport{Cluster: "demo", Namespace: "opke-check-0a1b2c3d", Cleanup: "deleted", TookMillis: 41_250, Checks: []reconciler.CheckResult{
		{Name: reconciler.CheckPods, Status: reconciler.CheckPassed, TookMillis: 12_340, Detail: "client ready on demo-default-0, server on demo-controller-0"},
		{Name: reconciler.CheckPodNetwork, Status: reconciler.CheckPassed, TookMillis: 210, Detail: "client on demo-default-0 reached server on demo-controller-0 at 10.2.0.7:8080"},
		{Name: reconciler.CheckService, Status: reconciler.CheckPassed, TookMillis: 340, Detail: "client on demo-default-0 reached server on demo-controller-0 at 10.3.0.77:80"},
		{Name: reconciler.CheckDNS, Status: reconciler.CheckFailed, TookMillis: 30_020, Detail: "the server through its Service's name not within the check's 30s: 400: host and/or port param are invalid. lookup server.opke-check-0a1b2c3d.svc.cluster.local: i/o timeout"},
		{Name: reconciler.CheckLoadBalancer, Status: reconciler.CheckSkipped, Detail: "the openstack-cloud-controller-manager addon is off: no Service gets a load balancer"},
		{Name: reconciler.CheckVolume, Status: reconciler.CheckSkipped, Detail: "skipped as asked"},
	}}
	golden.File(t, filepath.Join("testdata", "check", "report.txt"), []byte(healthy.String()))
	b, err := healthy.JSON()
	if err != nil {
		t.Fatal(err)
	}
	golden.File(t, filepath.Join("testdata", "check", "report.json"), b)
	var back reconciler.CheckReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(healthy, back); d != "" {
		t.Errorf("the JSON report read back (-want +got):\n%s", d)
	}

	// What the cluster says is quoted without what a terminal acts on.
	hostile := healthy
	hostile.Checks = []reconciler.CheckResult{{Name: reconciler.CheckPods, Status: reconciler.CheckFailed, Detail: "Unhealthy: \x1b]0;owned\x07\x1b[2J\r"}}
	if out := hostile.String(); strings.ContainsAny(out, "\x1b\x07\r") || !strings.Contains(out, "Unhealthy: ?]0;owned??[2J?") {
		t.Errorf("a detail's control characters reach the terminal: %q", out)
	}

	passing := healthy
	passing.Checks = append([]reconciler.CheckResult(nil), healthy.Checks...)
	passing.Checks[3].Status = reconciler.CheckPassed
	left := passing
	left.Cleanup = "not deleted: the namespace opke-check-0a1b2c3d deleted not within the check's 5m0s: Some content in the namespace has finalizers remaining"
	for _, tc := range []struct {
		name string
		r    reconciler.CheckReport
		want bool
	}{
		{"a check failed", healthy, false},
		{"passed and skipped", passing, true},
		{"its namespace left", left, false},
	} {
		if got := tc.r.Passed(); got != tc.want {
			t.Errorf("%s: Passed() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

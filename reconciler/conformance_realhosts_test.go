//go:build realhosts

package reconciler_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/world"
	"opke.dev/opke/world/worldtest"
)

// TestK8sConformance (make k8s-conformance): upstream's conformance suite
// judges a cluster OPKE makes on real machines, one controller and two
// workers on the world's first version, every image from the mirror.
// The suite runs as upstream's conformance image runs it
// (test/conformance/image/conformance-e2e.yaml): a pod of
// registry.k8s.io/conformance:<version> under a service account bound to
// every verb, its go-runner calling ginkgo and e2e.test with
// E2E_FOCUS, E2E_SKIP and E2E_PARALLEL (OPKE_CONFORMANCE_FOCUS,
// OPKE_CONFORMANCE_SKIP, OPKE_CONFORMANCE_PARALLEL), its results in
// /tmp/results on its node. The test copies upstream's JUnit report and
// log to OPKE_CONFORMANCE_OUT, prints the summary (passed, failed,
// skipped, time; each failure with its first line), and fails on any
// failed spec.
func TestK8sConformance(t *testing.T) {
	if !realHosts {
		t.Fatal("this test runs on real machines: OPKE_TEST_HOSTS=real (make k8s-conformance)")
	}
	focus := envOr("OPKE_CONFORMANCE_FOCUS", `\[Conformance\]`)
	skip := os.Getenv("OPKE_CONFORMANCE_SKIP")
	parallel := envOr("OPKE_CONFORMANCE_PARALLEL", "true")
	out := envOr("OPKE_CONFORMANCE_OUT", filepath.Join(t.TempDir(), "results"))
	timeout, err := time.ParseDuration(envOr("OPKE_CONFORMANCE_TIMEOUT", "3h"))
	if err != nil {
		t.Fatalf("OPKE_CONFORMANCE_TIMEOUT: %v", err)
	}

	r := newRig(t)
	built := worldtest.Set(t, world.Conformance, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	reg := mirrorOf(t, r, built)
	c := spec(t, "demo", "", 0)
	c.Spec.WorkerPools[0].Count = 2
	// The addons the conformance set builds (not demo's metrics-server):
	// the cloud controller manager, which initializes the nodes.
	c.Spec.Addons = []schemas.Addon{{Name: "openstack-cloud-controller-manager"}}
	useMirror(c, reg)
	t.Cleanup(func() {
		if t.Failed() {
			hostDiagnostics(t, r, "demo-controller-0", "demo-default-0", "demo-default-1")
		}
	})
	started := time.Now()
	r.apply(t, c)
	res := r.observed(t)
	api, base, _ := r.apiClient(t, res, "demo-controller-0")
	nodes := []string{"demo-controller-0", "demo-default-0", "demo-default-1"}
	waitFor(t, e2eWait(), upCheck(t, api, base, e2eFirst, nodes, map[string]int{"kube-proxy-": 3, "kube-flannel-ds-": 3, "coredns-": 1}))
	t.Logf("the cluster (%s, one controller, two workers) came up in %s", e2eFirst, time.Since(started).Round(time.Second))

	image := world.ConformanceImage(e2eFirst)
	// The whole suite (the default focus, in parallel) runs as two pods,
	// upstream's way of running both: the parallel specs, then the
	// [Serial] ones alone, one at a time.
	phases := []conformancePhase{{name: "parallel", focus: focus, skip: skip, parallel: parallel}}
	inParallel := parallel == "true" || parallel == "y" || parallel == "Y" // go-runner's
	if focus == `\[Conformance\]` && skip == "" && inParallel {
		phases = append(phases, conformancePhase{name: "serial", focus: `\[Serial\].*\[Conformance\]|\[Conformance\].*\[Serial\]`, parallel: "false"})
	}
	var total conformanceSummary
	var took time.Duration
	for i, ph := range phases {
		sum, d := runConformancePod(t, r, res, api, base, image, ph, i == 0, filepath.Join(out, ph.name), timeout)
		took += d
		total.passed += sum.passed
		total.failed = append(total.failed, sum.failed...)
	}
	t.Logf("conformance of OPKE's cluster (Kubernetes %s, e2e.test %s, one controller and two workers; stand-ins: world/LIMITS.md) in %s: %d passed, %d failed (each phase's skipped specs above: outside its focus, or by the suite); reports in %s",
		e2eFirst, e2eFirst, took.Round(time.Second), total.passed, len(total.failed), out)
	for _, f := range total.failed {
		t.Errorf("failed: %s", f)
	}
	if total.passed == 0 {
		t.Errorf("no spec passed: the focus %q ran nothing", focus)
	}
}

// conformancePhase is one run of the conformance pod: its ginkgo focus,
// skip and parallelism (E2E_FOCUS, E2E_SKIP, E2E_PARALLEL).
type conformancePhase struct {
	name, focus, skip, parallel string
}

// runConformancePod runs upstream's conformance image once as its
// conformance-e2e.yaml does (the namespace and the service account bound
// to every verb made by the first), waits for its end, copies its JUnit
// report and log from its node to out, and summarizes them.
func runConformancePod(t *testing.T, r *rig, res map[string]diff.Resource, api *http.Client, base, image string, ph conformancePhase, first bool, out string, timeout time.Duration) (conformanceSummary, time.Duration) {
	t.Helper()
	env := func(name, value string) string {
		v, _ := json.Marshal(value)
		return fmt.Sprintf("{name: %s, value: %s}", name, v)
	}
	pod := "e2e-conformance-" + ph.name
	var manifest string
	if first {
		manifest = `apiVersion: v1
kind: Namespace
metadata: {name: conformance}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: conformance-serviceaccount, namespace: conformance, labels: {component: conformance}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: conformance-serviceaccount, labels: {component: conformance}}
rules:
  - {apiGroups: ["*"], resources: ["*"], verbs: ["*"]}
  - {nonResourceURLs: [/metrics, /logs, /logs/*], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: conformance-serviceaccount-role, labels: {component: conformance}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: conformance-serviceaccount}
subjects: [{kind: ServiceAccount, name: conformance-serviceaccount, namespace: conformance}]
---
`
	}
	// Each phase's results in a folder of its own on the node.
	results := "/tmp/results/" + ph.name
	extra := os.Getenv("OPKE_CONFORMANCE_GINKGO_ARGS")
	if ph.parallel != "true" && ph.parallel != "y" && ph.parallel != "Y" {
		extra = ""
	}
	manifest += fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: conformance}
spec:
  restartPolicy: Never
  serviceAccountName: conformance-serviceaccount
  containers:
    - name: conformance-container
      image: %s
      imagePullPolicy: IfNotPresent
      env: [%s, %s, %s, %s, %s, %s, %s]
      volumeMounts: [{name: output-volume, mountPath: /tmp/results}]
  volumes:
    - {name: output-volume, hostPath: {path: %s}}
`, pod, image, env("E2E_FOCUS", ph.focus), env("E2E_SKIP", ph.skip), env("E2E_PROVIDER", "skeleton"), env("E2E_PARALLEL", ph.parallel),
		env("E2E_VERBOSITY", "4"), env("E2E_EXTRA_GINKGO_ARGS", extra), env("RESULTS_DIR", "/tmp/results"), results)
	if _, err := reconciler.ApplyManifest(t.Context(), api, base, []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance, %s: %s, focus %q, skip %q, parallel %s %s", ph.name, image, ph.focus, ph.skip, ph.parallel, extra)

	// The suite's progress: the last line of its log each few minutes.
	get := getter(api, base)
	suite := time.Now()
	var p struct {
		Spec   struct{ NodeName string }
		Status struct{ Phase string }
	}
	lastLog := time.Now()
	for failures := 0; ; {
		// An API server busy with the suite may miss a read's deadline
		// (the suite's own clients retry too); a minute of them fails.
		if err := get("/api/v1/namespaces/conformance/pods/"+pod, &p); err != nil {
			if failures++; failures == 6 {
				t.Fatalf("the suite's pod, %d reads in a row: %v", failures, err)
			}
			t.Logf("the suite's pod (read %d of 6 in a row to fail): %v", failures, err)
			time.Sleep(10 * time.Second)
			continue
		}
		failures = 0
		if p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" {
			break
		}
		if time.Since(suite) > timeout {
			// What it ran so far: go-runner tees the suite's output to its
			// log as it goes (the JUnit report is written at the end).
			if err := os.MkdirAll(out, 0o755); err == nil && p.Spec.NodeName != "" {
				gw := dialHost(t, r, res, "demo-gateway-0", nil)
				if b, err := sshx.Run(t.Context(), dialHost(t, r, res, p.Spec.NodeName, gw), sshx.Sudo("cat "+results+"/e2e.log")); err == nil {
					_ = os.WriteFile(filepath.Join(out, "e2e.log"), []byte(b), 0o644)
				}
			}
			t.Fatalf("the suite's %s phase did not finish in %s (pod %s on %s); its log so far in %s", ph.name, timeout, p.Status.Phase, p.Spec.NodeName, out)
		}
		if time.Since(lastLog) > 3*time.Minute {
			lastLog = time.Now()
			t.Logf("conformance, %s, after %s: %s", ph.name, time.Since(suite).Round(time.Second), podLogTail(t, api, base, pod))
		}
		time.Sleep(10 * time.Second)
	}
	took := time.Since(suite)

	// Upstream's report, from the node the pod ran on.
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	node := dialHost(t, r, res, p.Spec.NodeName, gw)
	for _, f := range []string{"junit_01.xml", "e2e.log"} {
		b, err := sshx.Run(t.Context(), node, sshx.Sudo("cat "+results+"/"+f))
		if err != nil {
			t.Fatalf("%s of the suite's %s phase on %s: %v", f, ph.name, p.Spec.NodeName, err)
		}
		if err := os.WriteFile(filepath.Join(out, f), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	junit, err := os.ReadFile(filepath.Join(out, "junit_01.xml"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := summarizeJUnit(junit)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance, %s, in %s, pod %s: %d passed, %d failed, %d skipped; report in %s", ph.name, took.Round(time.Second), p.Status.Phase, sum.passed, len(sum.failed), sum.skipped, out)
	return sum, took
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// podLogTail is a conformance pod's last log line.
func podLogTail(t *testing.T, api *http.Client, base, pod string) string {
	t.Helper()
	resp, err := api.Get(base + "/api/v1/namespaces/conformance/pods/" + pod + "/log?tailLines=1")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
	return strings.TrimSpace(string(b))
}

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
	env := func(name, value string) string {
		v, _ := json.Marshal(value)
		return fmt.Sprintf("{name: %s, value: %s}", name, v)
	}
	manifest := fmt.Sprintf(`apiVersion: v1
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
apiVersion: v1
kind: Pod
metadata: {name: e2e-conformance-test, namespace: conformance}
spec:
  restartPolicy: Never
  serviceAccountName: conformance-serviceaccount
  containers:
    - name: conformance-container
      image: %s
      imagePullPolicy: IfNotPresent
      env: [%s, %s, %s, %s, %s]
      volumeMounts: [{name: output-volume, mountPath: /tmp/results}]
  volumes:
    - {name: output-volume, hostPath: {path: /tmp/results}}
`, image, env("E2E_FOCUS", focus), env("E2E_SKIP", skip), env("E2E_PROVIDER", "skeleton"), env("E2E_PARALLEL", parallel), env("E2E_VERBOSITY", "4"))
	if _, err := reconciler.ApplyManifest(t.Context(), api, base, []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance: %s, focus %q, skip %q, parallel %s", image, focus, skip, parallel)

	// The suite's progress: the last line of its log each few minutes.
	get := getter(api, base)
	suite := time.Now()
	var pod struct {
		Spec   struct{ NodeName string }
		Status struct{ Phase string }
	}
	lastLog := time.Now()
	for {
		if err := get("/api/v1/namespaces/conformance/pods/e2e-conformance-test", &pod); err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase == "Succeeded" || pod.Status.Phase == "Failed" {
			break
		}
		if time.Since(suite) > timeout {
			t.Fatalf("the suite did not finish in %s (pod %s on %s)", timeout, pod.Status.Phase, pod.Spec.NodeName)
		}
		if time.Since(lastLog) > 3*time.Minute {
			lastLog = time.Now()
			t.Logf("conformance after %s: %s", time.Since(suite).Round(time.Second), podLogTail(t, api, base))
		}
		time.Sleep(10 * time.Second)
	}
	took := time.Since(suite)

	// Upstream's report, from the node the pod ran on.
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	node := dialHost(t, r, res, pod.Spec.NodeName, gw)
	for _, f := range []string{"junit_01.xml", "e2e.log"} {
		b, err := sshx.Run(t.Context(), node, sshx.Sudo("cat /tmp/results/"+f))
		if err != nil {
			t.Fatalf("%s of the suite on %s: %v", f, pod.Spec.NodeName, err)
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
	t.Logf("conformance of OPKE's cluster (Kubernetes %s, e2e.test %s, one controller and two workers; stand-ins: world/LIMITS.md) in %s, pod %s: %d passed, %d failed, %d skipped (outside the focus, or by the suite); report in %s",
		e2eFirst, e2eFirst, took.Round(time.Second), pod.Status.Phase, sum.passed, len(sum.failed), sum.skipped, out)
	for _, f := range sum.failed {
		t.Errorf("failed: %s", f)
	}
	if sum.passed == 0 {
		t.Errorf("no spec passed: the focus %q ran nothing", focus)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// podLogTail is the conformance pod's last log line.
func podLogTail(t *testing.T, api *http.Client, base string) string {
	t.Helper()
	resp, err := api.Get(base + "/api/v1/namespaces/conformance/pods/e2e-conformance-test/log?tailLines=1")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
	return strings.TrimSpace(string(b))
}

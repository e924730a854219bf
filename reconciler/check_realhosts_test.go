//go:build realhosts

package reconciler_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// checkSteps is opke check on real machines (make e2e's
// TestClusterComesUp, with the cloud controller manager and cinder-csi
// on): every check passes on the healthy cluster, with its pods across
// the two nodes and nothing left behind (its namespace, the load
// balancer its Service got, the claim's volume); then, with a
// NetworkPolicy that shuts CoreDNS off and the cloud controller manager
// stopped, the dns and load-balancer checks fail, each saying why, and
// the others still pass; OPKE's resync then finds the stopped manager's
// DaemonSet changed and its correction starts it again.
func checkSteps(t *testing.T, r *rig, c *schemas.Cluster, api *http.Client, base string) {
	t.Helper()
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	defer hosts.Close()
	planner := &reconciler.Planner{Store: r.store, Clouds: r.planner.Clouds, Hosts: hosts}
	run := func(o reconciler.CheckOptions) *reconciler.CheckReport {
		t.Helper()
		rep, err := reconciler.CheckCluster(t.Context(), planner, hosts, "demo", o)
		if err != nil {
			t.Fatalf("opke check: %v", err)
		}
		t.Logf("opke check:\n%s", rep)
		return rep
	}
	status := func(rep *reconciler.CheckReport) map[string]string {
		m := map[string]string{}
		for _, c := range rep.Checks {
			m[c.Name] = c.Status
		}
		return m
	}
	detail := func(rep *reconciler.CheckReport, name string) string {
		for _, c := range rep.Checks {
			if c.Name == name {
				return c.Detail
			}
		}
		return ""
	}
	call := func(method, path, contentType, body string) {
		t.Helper()
		resp, err := api.Do(mustRequest(t, method, base+path, contentType, body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %s %.300s", method, path, resp.Status, b)
		}
	}
	get := getter(api, base)

	step := time.Now()
	rep := run(reconciler.CheckOptions{})
	for _, name := range reconciler.Checks {
		if got := status(rep)[name]; got != reconciler.CheckPassed {
			t.Errorf("opke check on a healthy cluster: %s %s: %s", name, got, detail(rep, name))
		}
	}
	if !rep.Passed() || rep.Cleanup != "deleted" {
		t.Fatalf("opke check on a healthy cluster: passed %v, its namespace %s", rep.Passed(), rep.Cleanup)
	}
	if d := detail(rep, reconciler.CheckPods); !strings.Contains(d, "demo-default-0") || !strings.Contains(d, "demo-controller-0") {
		t.Errorf("the check's pods are not across the two nodes: %s", d)
	}
	// Nothing of it is left: its Service's load balancer went with its
	// namespace (the Service's finalizer held the namespace until then).
	if lbs := slices.DeleteFunc(serviceLoadBalancers(t, r), func(n string) bool { return !strings.Contains(n, rep.Namespace) }); len(lbs) > 0 {
		t.Errorf("opke check left load balancers behind: %v", lbs)
	}
	t.Logf("opke check passed on the healthy cluster in %s", time.Since(step).Round(time.Second))

	// CoreDNS shut off by a NetworkPolicy (kube-router enforces it), and
	// the cloud controller manager stopped (its DaemonSet placed on no
	// node): dns and load-balancer fail and say why; the rest passes.
	step = time.Now()
	call(http.MethodPost, "/apis/networking.k8s.io/v1/namespaces/kube-system/networkpolicies", "application/json",
		`{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"e2e-deny-dns"},
		"spec":{"podSelector":{"matchLabels":{"k8s-app":"kube-dns"}},"policyTypes":["Ingress"]}}`)
	const ccm = "/apis/apps/v1/namespaces/kube-system/daemonsets/openstack-cloud-controller-manager"
	call(http.MethodPatch, ccm+"?fieldManager=e2e-check", "application/merge-patch+json",
		`{"spec":{"template":{"spec":{"nodeSelector":{"opke.dev/e2e-stopped":"true"}}}}}`)
	ccmPods := func() int {
		var pods struct{ Items []struct{} }
		if err := get("/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dopenstack-cloud-controller-manager", &pods); err != nil {
			return -1
		}
		return len(pods.Items)
	}
	waitFor(t, 2*time.Minute, func() string {
		if n := ccmPods(); n != 0 {
			return fmt.Sprintf("%d cloud controller manager pods still run", n)
		}
		return ""
	})
	// Up to a minute for the policy to be programmed: until then the
	// check's DNS still answers.
	waitFor(t, 3*time.Minute, func() string {
		rep = run(reconciler.CheckOptions{Timeout: 30 * time.Second, Skip: []string{reconciler.CheckVolume}})
		if s := status(rep)[reconciler.CheckDNS]; s != reconciler.CheckFailed {
			return "the dns check " + s + " with CoreDNS shut off"
		}
		return ""
	})
	want := map[string]string{reconciler.CheckPods: reconciler.CheckPassed, reconciler.CheckPodNetwork: reconciler.CheckPassed,
		reconciler.CheckService: reconciler.CheckPassed, reconciler.CheckDNS: reconciler.CheckFailed,
		reconciler.CheckLoadBalancer: reconciler.CheckFailed, reconciler.CheckVolume: reconciler.CheckSkipped}
	for name, w := range want {
		if got := status(rep)[name]; got != w {
			t.Errorf("opke check with DNS shut off and the CCM stopped: %s %s, want %s: %s", name, got, w, detail(rep, name))
		}
	}
	if d := detail(rep, reconciler.CheckDNS); !strings.Contains(d, "server."+rep.Namespace+".svc.cluster.local") {
		t.Errorf("the dns check's failure does not name what it looked up: %s", d)
	}
	if d := detail(rep, reconciler.CheckLoadBalancer); !strings.Contains(d, "no address yet") {
		t.Errorf("the load-balancer check's failure does not say the Service got no address: %s", d)
	}
	if rep.Passed() || rep.Cleanup != "deleted" {
		t.Errorf("opke check with failures: passed %v, its namespace %s", rep.Passed(), rep.Cleanup)
	}
	call(http.MethodDelete, "/apis/networking.k8s.io/v1/namespaces/kube-system/networkpolicies/e2e-deny-dns", "", "")
	call(http.MethodPatch, ccm+"?fieldManager=e2e-check", "application/merge-patch+json",
		`{"spec":{"template":{"spec":{"nodeSelector":{"opke.dev/e2e-stopped":null}}}}}`)
	// The stop was a change to an object OPKE applied: a resync finds it,
	// and the correction applies the manifest again.
	r.askHosts(t)
	resynced := r.resync(t, c)
	manifest := "kubernetes/demo/04-openstack-cloud-controller-manager.yaml"
	if !slices.ContainsFunc(resynced.Drift, func(ch diff.Change) bool { return ch.Address.String() == manifest }) {
		t.Fatalf("the resync after the cloud controller manager's stop: drift %v, want %s", addresses(resynced.Drift), manifest)
	}
	if sum, err := r.applier(t).Apply(t.Context(), request(c), resynced); err != nil {
		t.Fatalf("the correction of the cloud controller manager's stop: %v %v", err, sum.Failed)
	}
	if again := r.resync(t, c); !again.Empty() {
		t.Errorf("a resync after the correction: %v, drift %v", addresses(again.Changes), addresses(again.Drift))
	}
	r.planner.Hosts = nil
	waitFor(t, 3*time.Minute, func() string {
		if n := ccmPods(); n != 1 {
			return fmt.Sprintf("%d cloud controller manager pods run, want 1", n)
		}
		return ""
	})
	t.Logf("opke check found DNS shut off and the CCM stopped, and the rest healthy, in %s", time.Since(step).Round(time.Second))
}

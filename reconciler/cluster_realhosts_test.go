//go:build realhosts

package reconciler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/snapshots"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"opke.dev/opke/backup"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/kubecontract"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/world"
)

// TestClusterComesUp: on real machines, a cluster of one controller and
// one worker, its images from the simulator's mirror, comes up as
// Kubernetes says: both nodes Ready at the spec's version (the worker
// joined through the API's load balancer), and kube-proxy, flannel and
// CoreDNS running on them; then a pod on the worker resolves
// kubernetes.default through CoreDNS and reaches a pod on the controller
// across flannel's VXLAN, until a NetworkPolicy admits only labelled
// pods (kube-router enforcing it). These are the first two
// steps of make e2e (issue "A real cluster comes up").
func TestClusterComesUp(t *testing.T) {
	r, reg, built := e2eRig(t)
	c := spec(t, "demo", "", 0)
	c.Spec.WorkerPools[0].Count = 1
	c.Spec.Addons = []schemas.Addon{{Name: "openstack-cloud-controller-manager"}, {Name: "cinder-csi"}, {Name: "gateway"}, {Name: "monitoring"}}
	useMirror(c, reg)
	// Whatever fails, the hosts' own account of it.
	t.Cleanup(func() {
		if t.Failed() {
			hostDiagnostics(t, r, "demo-controller-0", "demo-default-0")
		}
	})
	started := time.Now()
	r.apply(t, c)
	t.Logf("applied in %s", time.Since(started).Round(time.Second))

	res := r.observed(t)
	api, base, _ := r.apiClient(t, res, "demo-controller-0")
	get := getter(api, base)
	check := upCheck(t, api, base, e2eFirst, []string{"demo-controller-0", "demo-default-0"},
		map[string]int{"kube-proxy-": 2, "kube-flannel-ds-": 2, "kube-router-": 2, "coredns-": 1, "openstack-cloud-controller-manager-": 1,
			"csi-cinder-controllerplugin-": 1, "csi-cinder-nodeplugin-": 2, "snapshot-controller-": 2})
	waitFor(t, e2eWait(), check)
	t.Logf("the cluster came up %s after the apply began", time.Since(started).Round(time.Second))

	// The user's own tool: kubectl (built from source by make world) with
	// the admin kubeconfig opke kubeconfig prints, reaching the API's
	// floating IP through the simulator's SOCKS5 edge (its proxy-url).
	kc, err := r.store.GetSecret(t.Context(), r.store.Key("demo", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if kc, err = pki.WithProxy(kc, "socks5://"+r.sim.Edge()); err != nil {
		t.Fatal(err)
	}
	kcFile := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kcFile, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectlBin, ok := built.Binary("kubernetes-"+e2eFirst, "kubectl")
	if !ok {
		t.Fatal("make world built no kubectl")
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), kubectlBin, append([]string{"--kubeconfig", kcFile}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := kubectl("get", "nodes", "-o", "name"); out != "node/demo-controller-0\nnode/demo-default-0\n" {
		t.Errorf("kubectl get nodes: %q", out)
	}
	t.Logf("kubectl through the edge:\n%s", kubectl("get", "nodes", "-o", "wide"))
	allowedCIDRsStep(t, r, c, api, base, kubectl)

	// Step 2 of make e2e: a pod on the worker resolves the API's Service
	// through CoreDNS, and reaches a pod on the controller across
	// flannel's VXLAN (the real bridge and security groups between them):
	// a CoreDNS of its own there, answering whoami over TCP on 5353.
	del := func(path string) {
		t.Helper()
		resp, err := api.Do(mustRequest(t, http.MethodDelete, base+path, "", ""))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("DELETE %s: %s %.300s", path, resp.Status, b)
		}
	}
	post := func(path, body string) {
		t.Helper()
		resp, err := api.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %s %.300s", path, resp.Status, b)
		}
	}
	type podStatus struct {
		Status struct{ Phase, PodIP string }
	}
	waitPod := func(name string, done func(podStatus) bool) podStatus {
		t.Helper()
		var p podStatus
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(2 * time.Second) {
			p = podStatus{}
			if err := get("/api/v1/namespaces/default/pods/"+name, &p); err == nil && done(p) {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s: %+v", name, p)
			}
		}
	}
	post("/api/v1/namespaces/default/pods", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"e2e-server","labels":{"app":"e2e-server"}},"spec":{
		"nodeName":"demo-controller-0","tolerations":[{"operator":"Exists"}],
		"containers":[{"name":"coredns","image":"`+e2eImages.CoreDNS+`","args":["-dns.port","5353"]}]}}`)
	server := waitPod("e2e-server", func(p podStatus) bool { return p.Status.Phase == "Running" && p.Status.PodIP != "" })
	// A DNS query over TCP (RFC 7766: its length first), id 0x1234, for
	// "a." IN A: the answer's first bytes are its length and the id.
	probe := `getent hosts kubernetes.default.svc.cluster.local
exec 3<>/dev/tcp/$SERVER/5353
printf '\x00\x13\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x00\x00\x01\x00\x01' >&3
timeout 10 head -c 4 <&3 | od -An -tx1`
	spec, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "e2e-probe"},
		"spec": map[string]any{"nodeName": "demo-default-0", "restartPolicy": "Never",
			"containers": []any{map[string]any{"name": "probe", "image": "registry.k8s.io/kube-proxy:" + e2eFirst,
				"command": []string{"/bin/bash", "-ec", probe}, "env": []any{map[string]any{"name": "SERVER", "value": server.Status.PodIP}}}}}})
	post("/api/v1/namespaces/default/pods", string(spec))
	end := waitPod("e2e-probe", func(p podStatus) bool { return p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" })
	resp, err := api.Get(base + "/api/v1/namespaces/default/pods/e2e-probe/log")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if end.Status.Phase != "Succeeded" || !strings.Contains(string(out), "10.3.0.1") || !strings.Contains(string(out), "12 34") {
		t.Fatalf("the probe on demo-default-0 (%s): want kubernetes.default at 10.3.0.1 and an answer from %s on demo-controller-0 (12 34):\n%s",
			end.Status.Phase, server.Status.PodIP, out)
	}
	t.Logf("a pod on demo-default-0 resolved kubernetes.default and reached a pod on demo-controller-0 (%s):\n%s", server.Status.PodIP, out)

	// NetworkPolicy is enforced (kube-router, the default of
	// spec.network.networkPolicy): once the server admits only pods
	// labelled access=granted on its port, a probe from the worker without
	// the label no longer connects, and one with it gets its DNS answer.
	post("/apis/networking.k8s.io/v1/namespaces/default/networkpolicies", `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy",
		"metadata":{"name":"e2e-server-ingress"},"spec":{"podSelector":{"matchLabels":{"app":"e2e-server"}},"policyTypes":["Ingress"],
		"ingress":[{"from":[{"podSelector":{"matchLabels":{"access":"granted"}}}],"ports":[{"protocol":"TCP","port":5353}]}]}}`)
	// runPod creates a pod that ends (restartPolicy Never) and waits for
	// its end: its phase and its log.
	runPod := func(spec map[string]any) (string, string) {
		t.Helper()
		body, _ := json.Marshal(spec)
		name := spec["metadata"].(map[string]any)["name"].(string)
		post("/api/v1/namespaces/default/pods", string(body))
		end := waitPod(name, func(p podStatus) bool { return p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" })
		resp, err := api.Get(base + "/api/v1/namespaces/default/pods/" + name + "/log")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return end.Status.Phase, string(out)
	}
	runProbe := func(name string, labels map[string]string, script string) (string, string) {
		t.Helper()
		return runPod(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "labels": labels},
			"spec": map[string]any{"nodeName": "demo-default-0", "restartPolicy": "Never",
				"containers": []any{map[string]any{"name": "probe", "image": "registry.k8s.io/kube-proxy:" + e2eFirst,
					"command": []string{"/bin/bash", "-ec", script}, "env": []any{map[string]any{"name": "SERVER", "value": server.Status.PodIP}}}}}})
	}
	// Up to a minute for the agent to program the policy: the probe
	// succeeds once a connection attempt of 3 s times out (the agent
	// drops, it does not reset).
	phase, log := runProbe("e2e-denied", map[string]string{"access": "none"}, `for i in $(seq 20); do
  if timeout 3 bash -c 'exec 3<>/dev/tcp/$SERVER/5353'; then echo "attempt $i: connected"; sleep 2; else echo "attempt $i: blocked"; exit 0; fi
done
exit 1`)
	// The agent's own account, when it did not do its job.
	agentLogs := func() string {
		var pods struct {
			Items []struct {
				Metadata struct{ Name string }
				Spec     struct{ NodeName string }
			}
		}
		if err := get("/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-router", &pods); err != nil {
			return err.Error()
		}
		var b strings.Builder
		for _, p := range pods.Items {
			resp, err := api.Get(base + "/api/v1/namespaces/kube-system/pods/" + p.Metadata.Name + "/log?tailLines=80")
			if err != nil {
				fmt.Fprintf(&b, "%s: %v\n", p.Metadata.Name, err)
				continue
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Fprintf(&b, "== %s on %s:\n%s\n", p.Metadata.Name, p.Spec.NodeName, out)
		}
		return b.String()
	}
	if phase != "Succeeded" || !strings.Contains(log, "blocked") {
		t.Fatalf("a pod the NetworkPolicy does not admit still reaches %s:5353 (%s):\n%s\nthe agents:\n%s", server.Status.PodIP, phase, log, agentLogs())
	}
	t.Logf("NetworkPolicy: a pod without access=granted is refused:\n%s", log)
	// A policy is programmed after the pods it selects start, on every
	// implementation: the agent on the server's node adds the new pod's
	// address to the policy's set when it sees the pod (kube-router
	// rejects until then), so the probe tries for up to a minute.
	phase, log = runProbe("e2e-granted", map[string]string{"access": "granted"}, `for i in $(seq 30); do
  if timeout 3 bash -c 'exec 3<>/dev/tcp/$SERVER/5353'; then break; fi
  echo "attempt $i: refused"; sleep 2
done
exec 3<>/dev/tcp/$SERVER/5353
printf '\x00\x13\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x00\x00\x01\x00\x01' >&3
timeout 10 head -c 4 <&3 | od -An -tx1`)
	if phase != "Succeeded" || !strings.Contains(log, "12 34") {
		t.Fatalf("a pod the NetworkPolicy admits gets no answer from %s:5353 (%s):\n%s\nthe agents:\n%s", server.Status.PodIP, phase, log, agentLogs())
	}
	t.Logf("NetworkPolicy: a pod with access=granted is answered:\n%s", log)

	// opke check (issue 48), while kube-router enforces policies.
	checkSteps(t, r, c, api, base)

	// The agent leaves the spec as the plan's warning says: the policies
	// deleted first, while kube-router runs (it leaves its iptables rules
	// behind when it stops, as upstream's does), then networkPolicy: none,
	// and OPKE deletes its manifest's objects (prune).
	del("/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/e2e-server-ingress")
	c.Spec.Network.NetworkPolicy = schemas.NetworkPolicyNone
	plan, _ := r.apply(t, c)
	if !slices.ContainsFunc(plan.Changes, func(ch diff.Change) bool {
		return ch.Action == diff.ActionDelete && ch.Address == diff.ManifestAddress("demo", "03-kube-router.yaml")
	}) {
		t.Fatalf("networkPolicy: none plans no deletion of the agent's manifest: %v", plan.Changes)
	}
	waitFor(t, 2*time.Minute, func() string {
		var pods struct {
			Items []struct{ Metadata struct{ Name string } }
		}
		if err := get("/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-router", &pods); err != nil {
			return err.Error()
		}
		if len(pods.Items) > 0 {
			return fmt.Sprintf("%d kube-router pods remain", len(pods.Items))
		}
		var ds struct{}
		if err := get("/apis/apps/v1/namespaces/kube-system/daemonsets/kube-router", &ds); err == nil {
			return "the kube-router DaemonSet remains"
		}
		return ""
	})
	phase, log = runProbe("e2e-unenforced", map[string]string{"access": "none"}, `for i in $(seq 20); do
  if timeout 3 bash -c 'exec 3<>/dev/tcp/$SERVER/5353'; then echo "attempt $i: connected"; exit 0; else echo "attempt $i: blocked"; sleep 2; fi
done
exit 1`)
	if phase != "Succeeded" {
		t.Fatalf("with the agent gone, a pod without access=granted still cannot reach %s:5353 (%s):\n%s", server.Status.PodIP, phase, log)
	}
	t.Logf("networkPolicy: none pruned the agent; the policy is stored, not enforced:\n%s", log)

	// Secrets are encrypted at rest: etcd holds the Secret sealed with
	// the cluster's key (secretbox), the API gives it back in the clear.
	post("/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"e2e-secret"},"stringData":{"password":"e2e-plain-value"}}`)
	raw, err := r.etcdClient(t, res, []string{"demo-controller-0"}).Get(t.Context(), "/registry/secrets/default/e2e-secret")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("the Secret in etcd: %v %v", raw, err)
	}
	if v := raw.Kvs[0].Value; !bytes.HasPrefix(v, []byte("k8s:enc:secretbox:v1:key1:")) || bytes.Contains(v, []byte("e2e-plain-value")) {
		t.Errorf("the Secret is not encrypted in etcd: %.60q", v)
	}
	var secret struct{ Data map[string][]byte }
	if err := get("/api/v1/namespaces/default/secrets/e2e-secret", &secret); err != nil || string(secret.Data["password"]) != "e2e-plain-value" {
		t.Errorf("the Secret through the API: %q %v", secret.Data["password"], err)
	}
	t.Logf("a Secret is encrypted in etcd (%.26s...) and read back through the API", raw.Kvs[0].Value)

	// Addon drift: kube-proxy's ConfigMap deleted by hand, and CoreDNS's
	// Deployment scaled by hand as kubectl edit does (the replicas OPKE
	// applied now kubectl-edit's field), are found by a
	// resync, which asks the API for every object the manifests applied;
	// a field OPKE never set, changed by another manager, is not drift.
	// Each manifest is applied again (and waited for until it rolled out).
	driftStart := time.Now()
	const coredns, proxyConfig = "/apis/apps/v1/namespaces/kube-system/deployments/coredns", "/api/v1/namespaces/kube-system/configmaps/kube-proxy"
	del(proxyConfig)
	mergePatch := func(path, manager, body string) {
		t.Helper()
		resp, err := api.Do(mustRequest(t, http.MethodPatch, base+path+"?fieldManager="+manager, "application/merge-patch+json", body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PATCH %s: %s %.300s", path, resp.Status, b)
		}
	}
	mergePatch(coredns, "kubectl-edit", `{"spec":{"replicas":3}}`)
	mergePatch("/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "e2e-other-tool", `{"metadata":{"annotations":{"example.com/note":"mine"}}}`)
	r.askHosts(t)
	resynced := r.resync(t, c)
	var addonDrift []string
	for _, ch := range resynced.Drift {
		addonDrift = append(addonDrift, ch.Address.String()+": "+ch.Reason)
	}
	slices.Sort(addonDrift)
	want := []string{
		"kubernetes/demo/00-kube-proxy.yaml: changed outside OPKE since the last apply: ConfigMap kube-system/kube-proxy deleted",
		"kubernetes/demo/05-coredns.yaml: changed outside OPKE since the last apply: Deployment kube-system/coredns changed (its other field managers: kubectl-edit: .spec.replicas)",
	}
	if d := cmp.Diff(want, addonDrift); d != "" {
		t.Fatalf("the resync's drift (-want +got):\n%s", d)
	}
	if sum, err := r.applier(t).Apply(t.Context(), request(c), resynced); err != nil {
		t.Fatalf("the addon drift's correction: %v %v", err, sum.Failed)
	}
	var deployment struct {
		Spec   struct{ Replicas int }
		Status struct{ AvailableReplicas int }
	}
	if err := get(coredns, &deployment); err != nil || deployment.Spec.Replicas != 2 || deployment.Status.AvailableReplicas < 2 {
		t.Fatalf("CoreDNS after the correction: %+v %v, want the manifest's 2 replicas, available", deployment, err)
	}
	var proxyConf struct{ Data map[string]string }
	if err := get(proxyConfig, &proxyConf); err != nil || proxyConf.Data["config.conf"] == "" {
		t.Fatalf("kube-proxy's ConfigMap after the correction: %v %v", proxyConf, err)
	}
	// Every object the manifests applied is OPKE's as applied again.
	if again := r.resync(t, c); !again.Empty() {
		t.Errorf("a resync after the correction: %v, drift %v", addresses(again.Changes), addresses(again.Drift))
	}
	r.planner.Hosts = nil
	t.Logf("addon drift: kube-proxy's ConfigMap deleted and CoreDNS's Deployment scaled by hand, found by a resync and corrected in %s", time.Since(driftStart).Round(time.Second))

	// The API server audits: the Secret's creation is in the log on the
	// controller, who made it and when, its content not (Metadata).
	controller := dialHost(t, r, res, "demo-controller-0", dialHost(t, r, res, "demo-gateway-0", nil))
	waitFor(t, 30*time.Second, func() string {
		out, err := sshx.Run(t.Context(), controller, sshx.Sudo("cat /var/log/kubernetes/audit/audit.log"))
		if err != nil {
			return err.Error()
		}
		if bytes.Contains(out, []byte("e2e-plain-value")) {
			t.Fatal("the audit log holds the Secret's value")
		}
		for _, line := range bytes.Split(out, []byte("\n")) {
			var ev struct {
				Level, Verb string
				User        struct{ Username string }
				ObjectRef   struct{ Resource, Name string }
			}
			if json.Unmarshal(line, &ev) == nil && ev.Verb == "create" && ev.ObjectRef.Resource == "secrets" && ev.ObjectRef.Name == "e2e-secret" {
				if ev.Level != "Metadata" || ev.User.Username == "" {
					t.Errorf("the Secret's audit event: level %q, user %q; want Metadata and who", ev.Level, ev.User.Username)
				}
				t.Logf("the API server's audit log has the Secret's creation by %s at level %s, not its value (%d bytes of log)", ev.User.Username, ev.Level, len(out))
				return ""
			}
		}
		return fmt.Sprintf("no audit event of the Secret's creation in %d bytes of log", len(out))
	})

	// A Service of type LoadBalancer: the cloud controller manager (on
	// the controller, its cloud.conf pushed by OPKE) makes its Octavia
	// load balancer through the cloud's public endpoints, as the hosts
	// reach them, with the workers as members (the controller is
	// excluded) and a floating IP; a DNS query over TCP to that address,
	// through the edge as from the Internet, is answered by the pod
	// behind it.
	step := time.Now()
	post("/apis/apps/v1/namespaces/default/deployments", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"e2e-dns"},"spec":{
		"replicas":1,"selector":{"matchLabels":{"app":"e2e-dns"}},"template":{"metadata":{"labels":{"app":"e2e-dns"}},"spec":{
		"containers":[{"name":"coredns","image":"`+e2eImages.CoreDNS+`","args":["-dns.port","5353"]}]}}}}`)
	// Its listener's idle timeouts are the Service's to set
	// (cloud-provider-openstack's annotations, in milliseconds), not
	// Octavia's 50 s: a DNS client's long-lived TCP connection here.
	post("/api/v1/namespaces/default/services", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"e2e-dns","annotations":{
		"loadbalancer.openstack.org/timeout-client-data":"300000","loadbalancer.openstack.org/timeout-member-data":"300000"}},"spec":{
		"type":"LoadBalancer","selector":{"app":"e2e-dns"},"ports":[{"name":"dns","protocol":"TCP","port":53,"targetPort":5353}]}}`)
	var lbIP string
	var lb serviceLB
	workerIP := res["openstack/port/demo-default-0"].Attrs["fixed_ip"].Value
	waitFor(t, 5*time.Minute, func() string {
		var why string
		if lbIP, why = serviceAddress(get, "default", "e2e-dns"); why != "" {
			return why
		}
		// The worker alone: the controller is excluded from Services'
		// load balancers by its label.
		if lb = serviceLoadBalancer(t, r, "kube_service_demo_default_e2e-dns"); !slices.Equal(lb.members, []string{workerIP}) {
			return fmt.Sprintf("the load balancer's members: %v, want the worker alone (%s)", lb.members, workerIP) + ccmEvents(get)
		}
		return ""
	})
	if lb.fip != lbIP {
		t.Errorf("the Service's address %s is not the load balancer's floating IP %s", lbIP, lb.fip)
	}
	if !slices.Equal(lb.timeouts, [][2]int{{300000, 300000}}) {
		t.Errorf("the load balancer's listener timeouts (client, member data, ms): %v, want the Service's annotations' [[300000 300000]]", lb.timeouts)
	}
	var answer string
	waitFor(t, 2*time.Minute, func() string {
		answer = dnsOverTCP(t, r.sim.Edge(), net.JoinHostPort(lbIP, "53"))
		if answer != "12 34" {
			return fmt.Sprintf("the load balancer %s answered %q", lbIP, answer)
		}
		return ""
	})
	t.Logf("the Service e2e-dns got its load balancer %s (members %v) from the cloud controller manager and answered through it, in %s",
		lbIP, lb.members, time.Since(step).Round(time.Second))

	// The gateway addon: Traefik, applied by OPKE with the Gateway API's
	// definitions, serves an HTTPRoute through its Service's load
	// balancer and floating IP: a request for the route's host name,
	// through the edge as from the Internet, reaches the pod behind the
	// route (Traefik's ping answers OK); one for another host is not
	// routed (404).
	step = time.Now()
	post("/apis/apps/v1/namespaces/default/deployments", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"e2e-http"},"spec":{
		"replicas":1,"selector":{"matchLabels":{"app":"e2e-http"}},"template":{"metadata":{"labels":{"app":"e2e-http"}},"spec":{
		"containers":[{"name":"http","image":"`+assets.GatewayImage+`","args":["--entryPoints.http.address=:8081","--ping=true","--ping.entryPoint=http"]}]}}}}`)
	post("/api/v1/namespaces/default/services", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"e2e-http"},"spec":{
		"selector":{"app":"e2e-http"},"ports":[{"name":"http","port":80,"targetPort":8081}]}}`)
	post("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes", `{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute",
		"metadata":{"name":"e2e-http"},"spec":{"parentRefs":[{"name":"opke","namespace":"opke-gateway"}],"hostnames":["e2e.example"],
		"rules":[{"matches":[{"path":{"type":"PathPrefix","value":"/ping"}}],"backendRefs":[{"name":"e2e-http","port":80}]}]}}`)
	var gatewayIP string
	waitFor(t, 5*time.Minute, func() string {
		var why string
		if gatewayIP, why = serviceAddress(get, "opke-gateway", "traefik"); why != "" {
			return why
		}
		var route struct {
			Status struct {
				Parents []struct {
					Conditions []struct{ Type, Status, Message string }
				}
			}
		}
		if err := get("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/e2e-http", &route); err != nil {
			return err.Error()
		}
		if len(route.Status.Parents) == 0 || !slices.ContainsFunc(route.Status.Parents[0].Conditions, func(c struct{ Type, Status, Message string }) bool {
			return c.Type == "Accepted" && c.Status == "True"
		}) {
			return fmt.Sprintf("the HTTPRoute is not accepted by the Gateway opke: %+v", route.Status.Parents)
		}
		return ""
	})
	httpVia := func(host string) (int, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		client := &http.Client{Transport: &http.Transport{DialContext: sshx.Dialer{Proxy: r.sim.Edge()}.DialContext}}
		defer client.CloseIdleConnections()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+gatewayIP+"/ping", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	waitFor(t, 2*time.Minute, func() string {
		if code, body := httpVia("e2e.example"); code != http.StatusOK || body != "OK" {
			return fmt.Sprintf("GET http://%s/ping (Host e2e.example): %d %q", gatewayIP, code, body)
		}
		return ""
	})
	if code, body := httpVia("other.example"); code != http.StatusNotFound {
		t.Errorf("GET http://%s/ping for a host no route names: %d %q, want 404", gatewayIP, code, body)
	}
	t.Logf("an HTTPRoute served through the gateway addon's load balancer %s (Traefik, Gateway API %s) in %s",
		gatewayIP, assets.GatewayAPIVersion, time.Since(step).Round(time.Second))

	// The monitoring addon: the Prometheus Operator runs a Prometheus and
	// an Alertmanager; Prometheus scrapes every target of its
	// ServiceMonitors (the API server, etcd, each kubelet and its cAdvisor, each
	// node-exporter, CoreDNS, itself, Alertmanager, the operator) and
	// loads OPKE's rules without an error, and its always-firing Watchdog
	// reaches Alertmanager.
	step = time.Now()
	mon := monitoringAPI{get: func(path string, out any) error { return get(path, out) }} // get as it is then: a new one after the gateway's reboot
	waitFor(t, 5*time.Minute, func() string {
		targets, err := mon.targets()
		if err != nil {
			return err.Error()
		}
		for _, job := range []string{"apiserver", "etcd", "kubelet", "node-exporter", "kube-dns", "prometheus-operated", "alertmanager-operated", "prometheus-operator"} {
			if targets[job] == nil {
				return fmt.Sprintf("Prometheus has no target of job %s: %v", job, targets)
			}
		}
		for job, health := range targets {
			for instance, h := range health {
				if h != "up" {
					return fmt.Sprintf("Prometheus' target %s of job %s is %s", instance, job, h)
				}
			}
		}
		// Two kubelet endpoints (metrics, cAdvisor) per node.
		if n := len(targets["kubelet"]); n != 4 {
			return fmt.Sprintf("%d kubelet targets, want 4 (2 nodes): %v", n, targets["kubelet"])
		}
		rules, err := mon.rules()
		if err != nil {
			return err.Error()
		}
		if len(rules) < 15 {
			return fmt.Sprintf("Prometheus loaded %d rules: %v", len(rules), rules)
		}
		for name, health := range rules {
			if health != "ok" {
				return fmt.Sprintf("the rule %s: %s", name, health)
			}
		}
		alerts, err := mon.alertmanager()
		if err != nil {
			return err.Error()
		}
		if !slices.ContainsFunc(alerts, func(a alert) bool { return a.Labels["alertname"] == "Watchdog" }) {
			return fmt.Sprintf("no Watchdog in Alertmanager: %v", alerts)
		}
		return ""
	})
	targets, _ := mon.targets()
	t.Logf("the monitoring addon: Prometheus scrapes %d jobs, every target up, its rules loaded, Watchdog in Alertmanager, in %s",
		len(targets), time.Since(step).Round(time.Second))
	// An AlertmanagerConfig in the namespace monitoring routes the
	// cluster's own alerts (no namespace label: the Watchdog) to its
	// receiver: Alertmanager tries its webhook (nothing listens there; the
	// attempt is what counts).
	step = time.Now()
	post("/apis/monitoring.coreos.com/v1alpha1/namespaces/monitoring/alertmanagerconfigs", `{"apiVersion":"monitoring.coreos.com/v1alpha1",
		"kind":"AlertmanagerConfig","metadata":{"name":"e2e"},"spec":{"route":{"receiver":"e2e-webhook","groupWait":"5s",
		"matchers":[{"name":"alertname","value":"Watchdog","matchType":"="}]},
		"receivers":[{"name":"e2e-webhook","webhookConfigs":[{"url":"http://127.0.0.1:9/"}]}]}}`)
	waitFor(t, 3*time.Minute, func() string {
		resp, err := api.Get(base + alertmanagerProxy + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, `alertmanager_notifications_total{integration="webhook"} `) && !strings.HasSuffix(line, " 0\n") {
				return ""
			}
		}
		return "Alertmanager has sent nothing to the AlertmanagerConfig's webhook"
	})
	t.Logf("an AlertmanagerConfig in monitoring routed the Watchdog to its webhook in %s", time.Since(step).Round(time.Second))

	// Step 3 of make e2e: scale out to two workers, and in again with a
	// real drain. A Deployment keeps a pod on each worker (required
	// anti-affinity; the controller is tainted) under a budget that lets
	// none go: the drain waits out its timeout and fails naming the pod,
	// and the server stays. With the budget letting one go, the drain
	// evicts it (its replacement finds no node), the DaemonSets' pods
	// are left to go with the server, and the Node object goes after the
	// server, as Kubernetes keeps it otherwise.
	step = time.Now()
	c.Spec.WorkerPools[0].Count = 2
	r.apply(t, c)
	waitFor(t, 5*time.Minute, func() string {
		var n struct {
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		if err := get("/api/v1/nodes/demo-default-1", &n); err != nil {
			return err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				return ""
			}
		}
		return "demo-default-1 is not Ready"
	})
	t.Logf("scaled out to two workers, demo-default-1 Ready, in %s", time.Since(step).Round(time.Second))

	// Storage (the cinder-csi addon): a claim of the default class gets
	// a Cinder volume, attached to the node its first pod is scheduled
	// on, formatted and mounted there by the CSI node plugin (the disk
	// found by udev's by-id link, the node's instance id asked of the
	// metadata service); what that pod wrote, a pod on the other worker
	// reads once the volume moved; the claim's deletion deletes the
	// volume in Cinder.
	step = time.Now()
	post("/api/v1/namespaces/default/persistentvolumeclaims", `{"apiVersion":"v1","kind":"PersistentVolumeClaim",
		"metadata":{"name":"e2e-data"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`)
	volumePod := func(name, node, script string, claim ...string) string {
		t.Helper()
		claimName := "e2e-data"
		if len(claim) > 0 {
			claimName = claim[0]
		}
		phase, out := runPod(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"nodeSelector": map[string]string{"kubernetes.io/hostname": node}, "restartPolicy": "Never",
				"containers": []any{map[string]any{"name": "c", "image": "registry.k8s.io/kube-proxy:" + e2eFirst,
					"command": []string{"/bin/bash", "-ec", script}, "volumeMounts": []any{map[string]any{"name": "data", "mountPath": "/data"}}}},
				"volumes": []any{map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": claimName}}}}})
		if phase != "Succeeded" {
			t.Fatalf("pod %s on %s: %s\n%s", name, node, phase, out)
		}
		return out
	}
	volumePod("e2e-writer", "demo-default-0", "df -h /data; echo written-on-demo-default-0 > /data/f; sync")
	del("/api/v1/namespaces/default/pods/e2e-writer")
	if got := volumePod("e2e-reader", "demo-default-1", "cat /data/f"); got != "written-on-demo-default-0\n" {
		t.Errorf("the claim's volume on demo-default-1 holds %q, want what the pod on demo-default-0 wrote", got)
	}
	// claimVolume is a claim's PersistentVolume, of the Cinder CSI driver,
	// and its Cinder volume; the claim must be bound, of csi-cinder (the
	// default class).
	claimVolume := func(namespace, claim string) (pvName, volumeID string) {
		t.Helper()
		var c struct {
			Spec   struct{ VolumeName, StorageClassName string }
			Status struct{ Phase string }
		}
		var pv struct {
			Spec struct {
				CSI struct{ Driver, VolumeHandle string }
			}
		}
		if err := get("/api/v1/namespaces/"+namespace+"/persistentvolumeclaims/"+claim, &c); err != nil ||
			c.Spec.VolumeName == "" || c.Status.Phase != "Bound" || c.Spec.StorageClassName != "csi-cinder" {
			t.Fatalf("the claim %s/%s: %+v %v, want one bound, of csi-cinder", namespace, claim, c, err)
		}
		if err := get("/api/v1/persistentvolumes/"+c.Spec.VolumeName, &pv); err != nil || pv.Spec.CSI.Driver != "cinder.csi.openstack.org" {
			t.Fatalf("the persistent volume of %s/%s: %+v %v", namespace, claim, pv, err)
		}
		return c.Spec.VolumeName, pv.Spec.CSI.VolumeHandle
	}
	// The claim's volume (Prometheus has one of its own).
	_, volumeID := claimVolume("default", "e2e-data")
	cinder, err := openstack.NewBlockStorageV3(r.clients.Provider, gophercloud.EndpointOpts{Region: r.clients.Region, Availability: gophercloud.AvailabilityInternal})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a claim's Cinder volume written on demo-default-0, read on demo-default-1, in %s", time.Since(step).Round(time.Second))

	// Snapshots (the addon's snapshot controller and the controller
	// plugin's csi-snapshotter): a VolumeSnapshot of the claim, of the
	// default class (none named), is a Cinder snapshot of its volume
	// (the reader's pod, done, is not deleted yet); a claim restored from
	// it is a new Cinder volume made from that snapshot,
	// holding what the first pod wrote, which a pod on demo-default-0
	// reads; deleting the VolumeSnapshot deletes Cinder's.
	step = time.Now()
	post("/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots", `{"apiVersion":"snapshot.storage.k8s.io/v1",
		"kind":"VolumeSnapshot","metadata":{"name":"e2e-snap"},"spec":{"source":{"persistentVolumeClaimName":"e2e-data"}}}`)
	var vs snapshotv1.VolumeSnapshot
	waitFor(t, 3*time.Minute, func() string {
		if err := get("/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots/e2e-snap", &vs); err != nil {
			return err.Error()
		}
		if st := vs.Status; st == nil || st.ReadyToUse == nil || !*st.ReadyToUse || st.BoundVolumeSnapshotContentName == nil {
			b, _ := json.Marshal(vs.Status)
			return "the VolumeSnapshot e2e-snap is not ready to use: " + string(b)
		}
		return ""
	})
	if c := vs.Spec.VolumeSnapshotClassName; c == nil || *c != "csi-cinder-snapclass" {
		t.Errorf("the VolumeSnapshot's class is %v, want the default csi-cinder-snapclass", c)
	}
	var content snapshotv1.VolumeSnapshotContent
	if err := get("/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents/"+*vs.Status.BoundVolumeSnapshotContentName, &content); err != nil ||
		content.Status == nil || content.Status.SnapshotHandle == nil {
		t.Fatalf("the VolumeSnapshotContent of e2e-snap: %+v %v", content.Status, err)
	}
	snapID := *content.Status.SnapshotHandle
	if sn, err := snapshots.Get(t.Context(), cinder, snapID).Extract(); err != nil || sn.VolumeID != volumeID || sn.Status != "available" {
		t.Fatalf("Cinder's snapshot %s: %+v %v, want an available snapshot of the claim's volume %s", snapID, sn, err, volumeID)
	}
	post("/api/v1/namespaces/default/persistentvolumeclaims", `{"apiVersion":"v1","kind":"PersistentVolumeClaim",
		"metadata":{"name":"e2e-restored"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},
		"dataSource":{"apiGroup":"snapshot.storage.k8s.io","kind":"VolumeSnapshot","name":"e2e-snap"}}}`)
	if got := volumePod("e2e-restored-reader", "demo-default-0", "cat /data/f", "e2e-restored"); got != "written-on-demo-default-0\n" {
		t.Errorf("the claim restored from the snapshot holds %q, want what the pod on demo-default-0 wrote", got)
	}
	_, restoredID := claimVolume("default", "e2e-restored")
	if v, err := volumes.Get(t.Context(), cinder, restoredID).Extract(); err != nil || v.SnapshotID != snapID {
		t.Errorf("the restored claim's Cinder volume: %+v %v, want one made from the snapshot %s", v, err, snapID)
	}
	del("/api/v1/namespaces/default/pods/e2e-restored-reader")
	del("/api/v1/namespaces/default/persistentvolumeclaims/e2e-restored")
	del("/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots/e2e-snap")
	waitFor(t, 3*time.Minute, func() string {
		if _, err := snapshots.Get(t.Context(), cinder, snapID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return fmt.Sprintf("Cinder's snapshot %s is still there (%v)", snapID, err)
		}
		return ""
	})
	t.Logf("a VolumeSnapshot of the claim is a Cinder snapshot, a claim restored from it read on demo-default-0, the snapshot deleted with the VolumeSnapshot, in %s",
		time.Since(step).Round(time.Second))

	step = time.Now()
	del("/api/v1/namespaces/default/pods/e2e-reader")
	del("/api/v1/namespaces/default/persistentvolumeclaims/e2e-data")
	waitFor(t, 3*time.Minute, func() string {
		pages, err := volumes.List(cinder, nil).AllPages(t.Context())
		if err != nil {
			return err.Error()
		}
		all, _ := volumes.ExtractVolumes(pages)
		// Prometheus' volume (namespace monitoring) stays.
		if left := slices.DeleteFunc(all, func(v volumes.Volume) bool { return v.Metadata["csi.storage.k8s.io/pvc/namespace"] != "default" }); len(left) > 0 {
			return fmt.Sprintf("Cinder volumes left: %+v (the claim's %s)", left, volumeID)
		}
		return ""
	})
	t.Logf("the claims' Cinder volumes deleted with the claims in %s", time.Since(step).Round(time.Second))
	// Another claim, written and left bound: its volume goes with the
	// cluster (step 5).
	post("/api/v1/namespaces/default/persistentvolumeclaims", `{"apiVersion":"v1","kind":"PersistentVolumeClaim",
		"metadata":{"name":"e2e-left"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`)
	volumePod("e2e-left-writer", "demo-default-0", "echo left > /data/f; sync", "e2e-left")
	del("/api/v1/namespaces/default/pods/e2e-left-writer")
	leftPV, _ := claimVolume("default", "e2e-left")

	// OS updates: every host's staged update waits for a reboot
	// (/run/reboot-required, as a Debian package's postinst writes it
	// and as the Ignition timer does on Flatcar when update_engine says
	// UPDATE_STATUS_UPDATED_NEED_REBOOT). A resync finds them, and its
	// correction reboots them one at a time through Nova as a rollout
	// goes: the controller, each worker, the gateway last. Each node is
	// drained first (its Deployments' pods evicted: none of the names
	// running on the workers before is left), rebooted (/run is new),
	// gated healthy (the controller's etcd and API server back) and
	// uncordoned before the next one's drain.
	// Prometheus' data is on a Cinder volume (the monitoring addon with
	// cinder-csi): what it holds before the reboots' drains move its pod
	// is still there after (its head's oldest sample, replayed from the
	// volume's WAL; on the pod's disk it would be lost).
	promBefore, err := mon.prometheusPod()
	if err != nil {
		t.Fatal(err)
	}
	if promBefore.claim == "" {
		t.Fatalf("Prometheus keeps its data on no claim: %+v", promBefore)
	}
	promPV, _ := claimVolume("monitoring", promBefore.claim)
	promOldest, err := mon.headMinTime()
	if err != nil {
		t.Fatal(err)
	}

	step = time.Now()
	workers := []string{"demo-default-0", "demo-default-1"}
	rebooted := slices.Concat([]string{"demo-controller-0"}, workers, []string{"demo-gateway-0"})
	evictable := func() []string { // the pods of Deployments on the workers
		var pods struct {
			Items []struct {
				Metadata struct {
					Name, Namespace string
					OwnerReferences []struct{ Kind string }
				}
				Spec struct{ NodeName string }
			}
		}
		if err := get("/api/v1/pods", &pods); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pods.Items {
			if slices.Contains(workers, p.Spec.NodeName) && len(p.Metadata.OwnerReferences) > 0 && p.Metadata.OwnerReferences[0].Kind == "ReplicaSet" {
				out = append(out, p.Metadata.Namespace+"/"+p.Metadata.Name)
			}
		}
		return out
	}
	before := evictable()
	if len(before) == 0 {
		t.Fatal("no Deployment's pod on the workers: the drains would prove nothing")
	}
	onHosts := func(command string, each func(host string, out []byte, err error)) {
		t.Helper()
		res := r.observed(t)
		gw := dialHost(t, r, res, "demo-gateway-0", nil)
		for _, h := range rebooted {
			c := gw
			if h != "demo-gateway-0" {
				c = dialHost(t, r, res, h, gw)
			}
			out, err := sshx.Run(t.Context(), c, command)
			each(h, out, err)
		}
	}
	onHosts(sshx.Sudo("touch /run/reboot-required /run/booted-before"), func(h string, _ []byte, err error) {
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
	})
	r.askHosts(t)
	reboots := r.resync(t, c)
	if len(reboots.Changes) != 0 || len(reboots.Drift) != 13 {
		t.Fatalf("the resync after the OS updates: changes %v, drift %v; want each node's drain, reboot, gate and uncordon, and the gateway's reboot", addresses(reboots.Changes), addresses(reboots.Drift))
	}
	osApplier := r.applier(t)
	osDone := doneSteps(osApplier)
	if sum, err := osApplier.Apply(t.Context(), request(c), reboots); err != nil {
		t.Fatalf("the OS updates' reboots: %v %v", err, sum.Failed)
	}
	var wantOrder []string
	for _, h := range rebooted[:3] {
		wantOrder = append(wantOrder, "host/"+h+"/drain", "host/"+h+"/reboot", "host/"+h+"/health", "host/"+h+"/node")
	}
	wantOrder = append(wantOrder, "host/demo-gateway-0/reboot")
	if d := cmp.Diff(wantOrder, osDone()); d != "" {
		t.Errorf("the reboots' steps (-want +got):\n%s", d)
	}
	// The API client's connections went with the gateway's reboot.
	api, base, _ = r.apiClient(t, r.observed(t), "demo-controller-0")
	get = getter(api, base)
	onHosts("ls /run/reboot-required /run/booted-before", func(h string, out []byte, err error) {
		if err == nil {
			t.Errorf("%s was not rebooted: %s", h, out)
		}
	})
	for _, n := range nodesOf(t, get) {
		if n.Spec.Unschedulable {
			t.Errorf("%s is still cordoned after its reboot", n.Metadata.Name)
		}
	}
	if left := slices.DeleteFunc(evictable(), func(p string) bool { return !slices.Contains(before, p) }); len(left) > 0 {
		t.Errorf("pods on the workers before their reboots are still there (not drained): %v", left)
	}
	if again := r.resync(t, c); !again.Empty() {
		t.Errorf("a resync after the reboots: %v, drift %v", addresses(again.Changes), addresses(again.Drift))
	}
	r.planner.Hosts = nil
	t.Logf("an OS update on every host: rebooted one at a time (controller, workers, gateway), nodes drained and uncordoned, in %s; Deployments' pods evicted from the workers: %v", time.Since(step).Round(time.Second), before)
	waitFor(t, 5*time.Minute, func() string {
		p, err := mon.prometheusPod()
		if err != nil {
			return err.Error()
		}
		if p.uid == promBefore.uid {
			return "prometheus-k8s-0 was not made again: " + p.node
		}
		oldest, err := mon.headMinTime()
		if err != nil {
			return err.Error()
		}
		if oldest.After(promOldest) {
			return fmt.Sprintf("Prometheus' oldest sample is of %s, after the one it had before the reboots (%s): its data was lost", oldest, promOldest)
		}
		return ""
	})
	t.Logf("Prometheus, moved by the drains (from %s), kept its data on its Cinder volume (claim %s): its oldest sample still of %s",
		promBefore.node, promBefore.claim, promOldest.UTC().Format(time.TimeOnly))

	// A node goes down: the worker that runs neither Prometheus nor
	// Alertmanager is powered off through Nova, and OPKE's NodeDown alert
	// fires for it in Alertmanager (its kubelet and node-exporter both
	// silent for a minute); powered on again, it is Ready and the alert
	// resolves.
	step = time.Now()
	down := ""
	waitFor(t, 3*time.Minute, func() string {
		busy, err := mon.nodesOf("prometheus-k8s-0", "alertmanager-main-0")
		if err != nil {
			return err.Error()
		}
		for _, w := range workers {
			if !slices.Contains(busy, w) {
				down = w
				return ""
			}
		}
		// One on each worker: Alertmanager joins Prometheus (its node
		// cordoned while its pod is made again).
		mergePatch("/api/v1/nodes/"+busy[1], "e2e", `{"spec":{"unschedulable":true}}`)
		del("/api/v1/namespaces/monitoring/pods/alertmanager-main-0")
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
			if now, err := mon.nodesOf("alertmanager-main-0"); err == nil && now[0] == busy[0] {
				break
			}
		}
		mergePatch("/api/v1/nodes/"+busy[1], "e2e", `{"spec":{"unschedulable":null}}`)
		return fmt.Sprintf("Prometheus and Alertmanager ran on %v: Alertmanager moved to %s", busy, busy[0])
	})
	downID := r.serverID(t, down)
	if err := servers.Stop(t.Context(), r.clients.Compute, downID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	var fired time.Duration
	waitFor(t, 5*time.Minute, func() string {
		alerts, err := mon.alertmanager()
		if err != nil {
			return err.Error()
		}
		if !slices.ContainsFunc(alerts, func(a alert) bool { return a.Labels["alertname"] == "NodeDown" && a.Labels["node"] == down }) {
			return fmt.Sprintf("no NodeDown for %s in Alertmanager: %v", down, alerts)
		}
		fired = time.Since(step)
		return ""
	})
	if err := servers.Start(t.Context(), r.clients.Compute, downID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Minute, func() string {
		var n struct {
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		if err := get("/api/v1/nodes/"+down, &n); err != nil {
			return err.Error()
		}
		if !slices.ContainsFunc(n.Status.Conditions, func(c struct{ Type, Status string }) bool { return c.Type == "Ready" && c.Status == "True" }) {
			return down + " is not Ready"
		}
		alerts, err := mon.prometheusAlerts()
		if err != nil {
			return err.Error()
		}
		if slices.ContainsFunc(alerts, func(a alert) bool { return a.Labels["alertname"] == "NodeDown" }) {
			return fmt.Sprintf("NodeDown is still active in Prometheus: %v", alerts)
		}
		return ""
	})
	t.Logf("%s powered off: NodeDown in Alertmanager %s later; powered on, Ready and the alert resolved, in %s",
		down, fired.Round(time.Second), time.Since(step).Round(time.Second))

	// Node remediation: demo-default-1's kubelet stopped, Kubernetes' node
	// lifecycle controller marks its Node Unknown after its grace period,
	// and once that has lasted spec.remediation.unhealthyAfter the plan
	// replaces the worker: a best-effort drain, the server made again,
	// the old Node object deleted, the new one gated Ready (with its new
	// server's provider id, from the cloud controller manager).
	step = time.Now()
	remediate(t, r, c, get, "demo-default-1", func(res map[string]diff.Resource) {
		if _, err := sshx.Run(t.Context(), dialHost(t, r, res, "demo-default-1", dialHost(t, r, res, "demo-gateway-0", nil)), sshx.Sudo("systemctl stop kubelet")); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("demo-default-1 remediated in %s from its kubelet's stop", time.Since(step).Round(time.Second))

	post("/apis/apps/v1/namespaces/default/deployments", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"e2e-web"},"spec":{
		"replicas":2,"selector":{"matchLabels":{"app":"e2e-web"}},"template":{"metadata":{"labels":{"app":"e2e-web"}},"spec":{
		"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{"matchLabels":{"app":"e2e-web"}},"topologyKey":"kubernetes.io/hostname"}]}},
		"terminationGracePeriodSeconds":5,
		"containers":[{"name":"pause","image":"`+e2eImages.Pause+`"}]}}}}`)
	post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", `{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"e2e-web"},"spec":{
		"minAvailable":2,"selector":{"matchLabels":{"app":"e2e-web"}}}}`)
	webPods := func() map[string]string { // node (or "" when pending) by pod
		var pods struct {
			Items []struct {
				Metadata struct{ Name string }
				Spec     struct{ NodeName string }
				Status   struct {
					Phase      string
					Conditions []struct{ Type, Status, Message string }
				}
			}
		}
		if err := get("/api/v1/namespaces/default/pods?labelSelector=app%3De2e-web", &pods); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range pods.Items {
			out[p.Metadata.Name] = p.Spec.NodeName
			if p.Status.Phase != "Running" {
				out[p.Metadata.Name] += " (" + p.Status.Phase + ")"
			}
			for _, c := range p.Status.Conditions {
				if c.Type == "PodScheduled" && c.Status != "True" {
					out[p.Metadata.Name] += " " + c.Message // the scheduler's reason
				}
			}
		}
		return out
	}
	waitFor(t, 3*time.Minute, func() string {
		var pdb struct{ Status struct{ CurrentHealthy int } }
		if err := get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/e2e-web", &pdb); err != nil {
			return err.Error()
		}
		if pdb.Status.CurrentHealthy != 2 {
			return fmt.Sprintf("e2e-web: %d healthy, want 2: %v", pdb.Status.CurrentHealthy, webPods())
		}
		return ""
	})
	var onGoing string
	for pod, node := range webPods() {
		if node == "demo-default-1" {
			onGoing = pod
		}
	}
	if onGoing == "" {
		t.Fatalf("no e2e-web pod on demo-default-1: %v", webPods())
	}
	// The API as OPKE's gates and drains use it, held to the contract the
	// stand-in API server of the in-process hosts keeps (kubestub's
	// TestContract runs the same checks).
	manifest, err := sshx.Run(t.Context(), dialHost(t, r, res, "demo-controller-0", dialHost(t, r, res, "demo-gateway-0", nil)),
		sshx.Sudo("cat /etc/kubernetes/manifests/kube-scheduler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kubecontract.Run(t, kubecontract.Cluster{Client: api, Base: base, Node: "demo-default-1",
		Namespace: "default", Guarded: onGoing, Budget: "e2e-web", Static: manifest, StaticNode: "demo-controller-0",
		Image: e2eImages.Pause})

	// OPKE's own apply of a manifest with a custom resource definition
	// and a resource of its kind, in one go, as an addon's: the resource
	// is sent once the real API server serves its kind.
	crdStart := time.Now()
	fields, err := reconciler.ApplyManifest(t.Context(), api, base, []byte(`apiVersion: opke.dev/v1
kind: E2eWidget
metadata: {name: one, namespace: default}
spec: {size: 3}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: e2ewidgets.opke.dev}
spec:
  group: opke.dev
  names: {plural: e2ewidgets, singular: e2ewidget, kind: E2eWidget, listKind: E2eWidgetList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`))
	if err != nil {
		t.Fatalf("a manifest with a definition and a resource of its kind: %v", err)
	}
	var widget struct{ Spec struct{ Size int } }
	if err := get("/apis/opke.dev/v1/namespaces/default/e2ewidgets/one", &widget); err != nil || widget.Spec.Size != 3 || len(fields) != 2 || fields[0] == "" || fields[1] == "" {
		t.Fatalf("the E2eWidget applied with its definition: %+v %v, field digests %q", widget, err, fields)
	}
	del("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/e2ewidgets.opke.dev")
	t.Logf("a custom resource definition and a resource of its kind applied in one manifest in %s", time.Since(crdStart).Round(time.Millisecond))

	step = time.Now()
	c.Spec.WorkerPools[0].Count = 1
	c.Spec.Upgrade.DrainTimeout = schemas.Duration{Duration: 20 * time.Second}
	plan, sum, err := r.applyPlan(t, r.applier(t), c)
	if err == nil {
		t.Fatalf("the scale-in went through a budget that allows no disruption: %v", addresses(plan.Changes))
	}
	var drainErr string
	for _, f := range sum.Failed {
		if f.Change.Address == diff.DrainAddress("demo-default-1") {
			drainErr = fmt.Sprint(f.Err)
		}
	}
	if !strings.Contains(drainErr, "default/"+onGoing) || !strings.Contains(drainErr, "disruption budget") {
		t.Fatalf("the drain's failure does not name the pod and its budget: %q (%v)", drainErr, err)
	}
	if _, ok := r.observed(t)["openstack/server/demo-default-1"]; !ok {
		t.Fatal("demo-default-1's server was deleted past its failed drain")
	}
	t.Logf("the drain stopped at the budget after %s: %s", time.Since(step).Round(time.Second), drainErr)

	resp, err = api.Do(mustRequest(t, http.MethodPatch, base+"/apis/policy/v1/namespaces/default/poddisruptionbudgets/e2e-web",
		"application/merge-patch+json", `{"spec":{"minAvailable":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH the budget: %s", resp.Status)
	}
	waitFor(t, time.Minute, func() string {
		var pdb struct {
			Status struct{ DisruptionsAllowed int }
		}
		if err := get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/e2e-web", &pdb); err != nil {
			return err.Error()
		}
		if pdb.Status.DisruptionsAllowed != 1 {
			return fmt.Sprintf("the budget allows %d disruptions", pdb.Status.DisruptionsAllowed)
		}
		return ""
	})
	step = time.Now()
	plan, _ = r.apply(t, c)
	for _, want := range []string{diff.DrainAddress("demo-default-1").String(), diff.NodeAddress("demo-default-1").String(), "openstack/server/demo-default-1"} {
		if addresses(plan.Changes)[want] == 0 {
			t.Errorf("the scale-in's plan lacks %s: %v", want, addresses(plan.Changes))
		}
	}
	if names := nodeNames(t, r); !slices.Equal(names, []string{"demo-controller-0", "demo-default-0"}) {
		t.Errorf("Node objects after the scale-in: %v, want demo-controller-0 and demo-default-0", names)
	}
	// The evicted pod's object may outlive its server (finished, its
	// kubelet gone before it deleted it): the pod garbage collector
	// deletes it once its Node object is gone.
	waitFor(t, 2*time.Minute, func() string {
		if node, ok := webPods()[onGoing]; ok {
			return fmt.Sprintf("the pod evicted from the removed worker, %s, is still there: %s", onGoing, node)
		}
		return ""
	})
	pods := webPods()
	var running int
	for _, node := range pods {
		if node == "demo-default-0" {
			running++
		}
	}
	if running != 1 || len(pods) != 2 {
		t.Errorf("e2e-web after the scale-in: %v, want one pod running on demo-default-0 and its replacement pending", pods)
	}
	t.Logf("scaled in to one worker in %s: drained, server and Node object deleted; e2e-web: %v", time.Since(step).Round(time.Second), pods)

	// Step 4 of make e2e: a patch upgrade, e2eFirst to e2ePatch, behind
	// gates the real cluster answers: an etcd snapshot first (taken from
	// the real etcd through the gateway, the Deployment made above in
	// it), then one host at a time, controller first, its new static pods
	// and kubelet; no server replaced, and the pod on the worker runs on
	// through its kubelet's restart.
	step = time.Now()
	servers := map[string]string{}
	for addr, x := range r.observed(t) {
		if strings.HasPrefix(addr, "openstack/server/") {
			servers[addr] = x.ID
		}
	}
	c.Spec.Kubernetes.Version = e2ePatch
	c.Spec.DeletionPolicy = schemas.DeletionDelete // for step 5
	r.askHosts(t)                                  // the plan asks the API what the addons' applies change, as the daemon's does
	plan, _ = r.apply(t, c)
	r.planner.Hosts = nil
	t.Logf("upgraded to %s in %s (%d steps)", e2ePatch, time.Since(step).Round(time.Second), len(plan.Changes))
	// The plan said what the addon's apply changes: which object, from
	// the digests its last apply on this cluster recorded, and which
	// field, from a dry-run apply against the live object.
	if i := slices.IndexFunc(plan.Changes, func(ch diff.Change) bool { return ch.Address == diff.ManifestAddress("demo", "00-kube-proxy.yaml") }); i < 0 ||
		plan.Changes[i].Reason != "content changed: DaemonSet kube-system/kube-proxy changed: "+
			`spec.template.spec.containers[kube-proxy].image: "registry.k8s.io/kube-proxy:`+e2eFirst+`" → "registry.k8s.io/kube-proxy:`+e2ePatch+`"` {
		t.Errorf("the upgrade's kube-proxy manifest: %+v", plan.Changes[i:min(i+1, len(plan.Changes))])
	}
	for addr, x := range r.observed(t) {
		if id, ok := servers[addr]; ok && id != x.ID {
			t.Errorf("%s was replaced in the upgrade", addr)
		}
	}
	if d := cmp.Diff(map[string]string{"demo-controller-0": e2ePatch, "demo-default-0": e2ePatch}, r.versions(t, "demo")); d != "" {
		t.Errorf("the versions recorded as the gates passed (-want +got):\n%s", d)
	}
	var upgraded struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct {
				NodeInfo struct{ KubeletVersion string }
			}
		}
	}
	if err := get("/api/v1/nodes", &upgraded); err != nil {
		t.Fatal(err)
	}
	for _, n := range upgraded.Items {
		if n.Status.NodeInfo.KubeletVersion != e2ePatch {
			t.Errorf("node %s runs kubelet %s after the upgrade", n.Metadata.Name, n.Status.NodeInfo.KubeletVersion)
		}
	}
	var version struct{ GitVersion string }
	if err := get("/version", &version); err != nil || version.GitVersion != e2ePatch {
		t.Errorf("the API server's /version after the upgrade: %q %v", version.GitVersion, err)
	}
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct{ Containers []struct{ Image string } }
			}
		}
	}
	if err := get("/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", &ds); err != nil || len(ds.Spec.Template.Spec.Containers) == 0 ||
		ds.Spec.Template.Spec.Containers[0].Image != "registry.k8s.io/kube-proxy:"+e2ePatch {
		t.Errorf("kube-proxy's DaemonSet after the upgrade: %+v %v", ds.Spec.Template.Spec.Containers, err)
	}
	for pod, node := range webPods() {
		if node == "demo-default-0" && pods[pod] != node {
			t.Errorf("e2e-web's pod on demo-default-0 is %s, was not there before the upgrade: %v", pod, pods)
		}
	}
	recs, err := reconciler.Backups(t.Context(), r.store, "demo")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(recs, func(r *backup.Record) bool { return r.Reason == backup.ReasonBeforeRollout })
	if i < 0 {
		t.Fatalf("no snapshot before the rollout: %v", recs)
	}
	rec := recs[i]
	if !snapshotHas(t, r, rec, "/registry/deployments/default/e2e-web") {
		t.Errorf("the snapshot before the rollout (%d keys at revision %d) lacks the Deployment e2e-web", rec.Keys, rec.Revision)
	}
	t.Logf("the snapshot before the rollout: %d keys at revision %d, %s, e2e-web's Deployment in it", rec.Keys, rec.Revision, backup.FormatSize(rec.Size))

	// Step 4, the next minor: e2ePatch to e2eNext, etcd with it, the
	// same way, each node drained before its files and uncordoned once
	// its gate passed, as kubeadm's upgrade does. On one worker, e2e-web's
	// budget (one healthy pod of one running) would stop that drain, as
	// the scale-in's stopped: its owner lifts it, as kubectl drain's user
	// must.
	resp, err = api.Do(mustRequest(t, http.MethodDelete, base+"/apis/policy/v1/namespaces/default/poddisruptionbudgets/e2e-web", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE the budget: %s", resp.Status)
	}
	webBefore := webPods()
	step = time.Now()
	c.Spec.Kubernetes.Version = e2eNext
	plan, _ = r.apply(t, c)
	t.Logf("upgraded to %s in %s (%d steps)", e2eNext, time.Since(step).Round(time.Second), len(plan.Changes))
	for _, h := range []string{"demo-controller-0", "demo-default-0"} {
		if addresses(plan.Changes)[diff.DrainAddress(h).String()] == 0 || addresses(plan.Changes)[diff.NodeAddress(h).String()] == 0 {
			t.Errorf("the minor upgrade does not drain and uncordon %s: %v", h, addresses(plan.Changes))
		}
	}
	// The pod the drain evicted is made again on the uncordoned worker. A
	// replica that was pending before (the anti-affinity leaves one
	// without a node on one worker) may take the place the eviction left:
	// only a pod that was on the worker before and still is was not
	// evicted.
	waitFor(t, 2*time.Minute, func() string {
		for pod, node := range webPods() {
			if node == "demo-default-0" {
				if webBefore[pod] == "demo-default-0" {
					return fmt.Sprintf("e2e-web's pod %s on demo-default-0 was not evicted by the drain: %v", pod, webPods())
				}
				return ""
			}
		}
		return fmt.Sprintf("no e2e-web pod runs on demo-default-0 after the upgrade: %v", webPods())
	})
	var nodes struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct{ Unschedulable bool }
		}
	}
	if err := get("/api/v1/nodes", &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("node %s is still cordoned after the minor upgrade", n.Metadata.Name)
		}
	}
	if d := cmp.Diff(map[string]string{"demo-controller-0": e2eNext, "demo-default-0": e2eNext}, r.versions(t, "demo")); d != "" {
		t.Errorf("the versions recorded as the gates passed (-want +got):\n%s", d)
	}
	if err := get("/version", &version); err != nil || version.GitVersion != e2eNext {
		t.Errorf("the API server's /version after the minor upgrade: %q %v", version.GitVersion, err)
	}
	upgraded.Items = nil
	if err := get("/api/v1/nodes", &upgraded); err != nil {
		t.Fatal(err)
	}
	for _, n := range upgraded.Items {
		if n.Status.NodeInfo.KubeletVersion != e2eNext {
			t.Errorf("node %s runs kubelet %s after the minor upgrade", n.Metadata.Name, n.Status.NodeInfo.KubeletVersion)
		}
	}
	waitFor(t, time.Minute, func() string {
		if out := kubectl("get", "deployment", "e2e-web", "-o", "jsonpath={.status.readyReplicas}"); out != "1" {
			return fmt.Sprintf("e2e-web's ready replicas after the minor upgrade: %q", out)
		}
		return ""
	})
	for addr, x := range r.observed(t) {
		if id, ok := servers[addr]; ok && id != x.ID {
			t.Errorf("%s was replaced in the minor upgrade", addr)
		}
	}

	// Step 5 of make e2e: the cluster taken out of the fleet, with
	// deletionPolicy Delete: nothing of it is left in OpenStack, and its
	// machines are gone.
	// The Service e2e-dns is still there: the load balancer and floating
	// IP its cloud controller manager made go with the cluster, before
	// its subnet.
	step = time.Now()
	plan, _ = r.apply(t)
	// So do the Cinder volumes its CSI driver made for the claim e2e-left
	// and for Prometheus, attached (the PersistentVolume's name is the
	// volume's).
	for _, want := range []string{"openstack/load-balancer/kube_service_demo_default_e2e-dns", "openstack/floating-ip/kube_service_demo_default_e2e-dns",
		"openstack/volume/" + leftPV, "openstack/volume/" + promPV} {
		if addresses(plan.Changes)[want] != diff.ActionDelete {
			t.Errorf("the deletion's plan does not delete %s: %v", want, addresses(plan.Changes))
		}
	}
	volPages, err := volumes.List(cinder, nil).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if vols, _ := volumes.ExtractVolumes(volPages); len(vols) != 0 {
		t.Errorf("%d Cinder volumes outlived the cluster: %+v", len(vols), vols)
	}
	if left := r.observed(t); len(left) != 0 {
		t.Errorf("%d resources left after the cluster was deleted: %v", len(left), slices.Sorted(maps.Keys(left)))
	}
	if lbs := serviceLoadBalancers(t, r); len(lbs) != 0 {
		t.Errorf("the cloud controller manager's load balancers outlived the cluster: %v", lbs)
	}
	fipPages, err := floatingips.List(r.clients.Network, floatingips.ListOpts{}).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if fips, _ := floatingips.ExtractFloatingIPs(fipPages); len(fips) != 0 {
		t.Errorf("%d floating IPs outlived the cluster", len(fips))
	}
	for _, h := range []string{"demo-controller-0", "demo-default-0", "demo-gateway-0"} {
		if _, err := r.sim.HostRoot(h); err == nil {
			t.Errorf("%s's machine is still there", h)
		}
	}
	t.Logf("deleted in %s", time.Since(step).Round(time.Second))
}

// snapshotHas reports whether a cluster's etcd snapshot, downloaded from
// Swift (sealed: it does not restore as it is stored), opened and
// restored into a throwaway etcd, holds key.
func snapshotHas(t *testing.T, r *rig, rec *backup.Record, key string) bool {
	t.Helper()
	ctx := t.Context()
	box := backup.Objects{Client: r.clients.ObjectStore, Container: rec.Container}
	raw, err := box.Download(ctx, rec, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.Restored(ctx, raw, func(*clientv3.Client) error { return nil }); err == nil || !rec.Sealed {
		t.Errorf("the snapshot in Swift restores as it is stored (sealed: %v): it is not sealed", rec.Sealed)
	}
	path, err := reconciler.Fetch(ctx, box, rec, t.TempDir(), reconciler.OpenClusterSnapshot(r.store, rec.Cluster))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	err = backup.Restored(ctx, path, func(cli *clientv3.Client) error {
		got, err := cli.Get(ctx, key, clientv3.WithCountOnly())
		found = err == nil && got.Count == 1
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// waitFor polls check until it returns "" or the time is up, logging
// the first line of what it waits for; at the end, all of it.
func waitFor(t *testing.T, d time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s:\n%s", d, why)
		}
		t.Logf("waiting: %s", strings.SplitN(why, "\n", 2)[0])
		time.Sleep(5 * time.Second)
	}
}

func mustRequest(t *testing.T, method, url, contentType, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	return req
}

// hostDiagnostics logs what the hosts' units and network say, through
// the cluster's gateway.
func hostDiagnostics(t *testing.T, r *rig, hosts ...string) {
	ctx := context.WithoutCancel(t.Context())
	res := r.observed(t)
	if _, ok := res["openstack/server/demo-gateway-0"]; !ok {
		t.Log("no gateway to reach the hosts through: no diagnostics")
		return
	}
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	for _, h := range hosts {
		host := dialHost(t, r, res, h, gw)
		for _, cmd := range []string{
			"sudo -n systemctl --no-pager status containerd kubelet etcd-member",
			"sudo -n journalctl --no-pager -n 60 -u kubelet -u containerd",
			"sudo -n journalctl --no-pager -n 40 -u etcd-member",
			"sudo -n ctr --namespace opke tasks ls; ps -eo pid,ppid,stat,wchan:32,etime,args | grep -E 'runc|ctr|etcd|shim' | grep -v grep",
			"for p in $(pgrep -f 'runc.*delete'); do echo $p; sudo -n cat /proc/$p/stack /proc/$p/status | head -20; done",
			"sudo -n ls -l /opt/cni/bin /etc/cni/net.d /etc/containerd/certs.d",
			"sudo -n sh -c 'for f in /var/log/pods/*/*/*.log; do echo == $f; tail -n 8 $f; done'",
			"ip -4 route; ip -4 addr",
			"sudo -n iptables-save -t nat | head -40",
		} {
			out, err := sshx.Run(ctx, host, cmd)
			t.Logf("%s: %s (%v):\n%s", h, cmd, err, out)
		}
	}
}

// serviceLB is a load balancer the cloud controller manager made: its
// members' addresses and its floating IP.
type serviceLB struct {
	members []string
	fip     string
	// timeouts are its listeners' client and member data timeouts (ms).
	timeouts [][2]int
}

// serviceLoadBalancer finds the load balancer named name in Octavia.
func serviceLoadBalancer(t *testing.T, r *rig, name string) serviceLB {
	t.Helper()
	ctx := t.Context()
	pages, err := loadbalancers.List(r.clients.LoadBalancer, loadbalancers.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lbs, err := loadbalancers.ExtractLoadBalancers(pages)
	if err != nil || len(lbs) != 1 {
		t.Fatalf("load balancers named %s: %d %v", name, len(lbs), err)
	}
	var out serviceLB
	for _, p := range lbs[0].Pools {
		mp, err := pools.ListMembers(r.clients.LoadBalancer, p.ID, pools.ListMembersOpts{}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := pools.ExtractMembers(mp)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			out.members = append(out.members, m.Address)
		}
	}
	slices.Sort(out.members)
	for _, l := range lbs[0].Listeners {
		got, err := listeners.Get(ctx, r.clients.LoadBalancer, l.ID).Extract()
		if err != nil {
			t.Fatal(err)
		}
		out.timeouts = append(out.timeouts, [2]int{got.TimeoutClientData, got.TimeoutMemberData})
	}
	fp, err := floatingips.List(r.clients.Network, floatingips.ListOpts{PortID: lbs[0].VipPortID}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fips, err := floatingips.ExtractFloatingIPs(fp)
	if err != nil {
		t.Fatal(err)
	}
	if len(fips) == 1 {
		out.fip = fips[0].FloatingIP
	}
	return out
}

// serviceLoadBalancers names the load balancers the cloud controller
// manager made (named kube_service_...).
func serviceLoadBalancers(t *testing.T, r *rig) []string {
	t.Helper()
	pages, err := loadbalancers.List(r.clients.LoadBalancer, loadbalancers.ListOpts{}).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	lbs, err := loadbalancers.ExtractLoadBalancers(pages)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, lb := range lbs {
		if strings.HasPrefix(lb.Name, "kube_service_") {
			out = append(out, lb.Name+" ("+lb.ProvisioningStatus+")")
		}
	}
	return out
}

// serviceAddress is the address a Service of type LoadBalancer got from
// the cloud controller manager (its load balancer's floating IP), or why
// there is none yet.
func serviceAddress(get func(string, any) error, namespace, name string) (ip, why string) {
	var svc struct {
		Status struct {
			LoadBalancer struct{ Ingress []struct{ IP string } }
		}
	}
	if err := get("/api/v1/namespaces/"+namespace+"/services/"+name, &svc); err != nil {
		return "", err.Error()
	}
	if len(svc.Status.LoadBalancer.Ingress) == 0 {
		return "", "the Service " + namespace + "/" + name + " has no load balancer yet" + ccmEvents(get)
	}
	return svc.Status.LoadBalancer.Ingress[0].IP, ""
}

// dnsOverTCP sends a DNS query over TCP (RFC 7766: its length first), id
// 0x1234, for "a." IN A, to addr through the edge, and returns the
// answer's id in hex ("12 34"), or why there is none.
func dnsOverTCP(t *testing.T, edge, addr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := sshx.Dialer{Proxy: edge}.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("\x00\x13\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x00\x00\x01\x00\x01")); err != nil {
		return err.Error()
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("% x", b[2:])
}

// ccmEvents are the cloud controller manager's warnings on Services, for
// a wait's message.
func ccmEvents(get func(string, any) error) string {
	var evs struct {
		Items []struct {
			Type, Reason, Message string
		}
	}
	if err := get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DService", &evs); err != nil {
		return ""
	}
	var out []string
	for _, e := range evs.Items {
		if e.Type == "Warning" {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "\n" + strings.Join(out[max(0, len(out)-3):], "\n")
}

// e2eDiskNeed is what the machines of one make e2e test write to their
// disks at most (measured: see e2eRig), with room to spare.
const e2eDiskNeed = 12 << 30

// e2eRig is make e2e's start: real machines (refused otherwise), and the
// simulator's registry mirror loaded with make world's e2e set.
func e2eRig(t *testing.T) (*rig, *cloudsim.Registry, *world.Built) {
	t.Helper()
	if !realHosts {
		t.Fatal("this test runs on real machines: OPKE_TEST_HOSTS=real (make e2e)")
	}
	// Each machine has a disk of its own of its flavor's size (what its
	// kubelet's eviction measures), a sparse file on this machine's
	// file system: that file system needs room for what the machines
	// write, or their disks fail under them.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(os.TempDir(), &fs); err != nil {
		t.Fatal(err)
	}
	if free := int64(fs.Bavail) * fs.Bsize; free < e2eDiskNeed {
		t.Fatalf("%s has %d GiB free: the machines' disks need %d GiB; free some space (the Go build cache, old test dirs) first", os.TempDir(), free>>30, e2eDiskNeed>>30)
	}
	r := newRig(t)
	reg, built := mirrorWorld(t, r)
	return r, reg, built
}

// upCheck says what keeps a cluster from being up, as Kubernetes says it:
// the nodes Ready at version, and at least want[prefix] pods whose name
// begins with prefix running with every container ready. It logs a
// crashing container's last words once.
func upCheck(t *testing.T, api *http.Client, base, version string, nodeNames []string, want map[string]int) func() string {
	get := getter(api, base)
	logged := map[string]bool{}
	return func() string {
		// Fresh each time: json.Unmarshal into a used value keeps the
		// map keys of the last answer (a container's old state).
		type condition struct{ Type, Status, Reason, Message string }
		var nodes struct {
			Items []struct {
				Metadata struct{ Name string }
				Status   struct {
					Conditions []condition
					NodeInfo   struct{ KubeletVersion string }
				}
			}
		}
		var pods struct {
			Items []struct {
				Metadata struct{ Namespace, Name string }
				Spec     struct{ NodeName string }
				Status   struct {
					Phase             string
					ContainerStatuses []struct {
						Name  string
						Ready bool
						State map[string]struct{ Reason, Message string }
					}
				}
			}
		}
		if err := get("/api/v1/nodes", &nodes); err != nil {
			return err.Error()
		}
		if err := get("/api/v1/pods", &pods); err != nil {
			return err.Error()
		}
		var why []string
		ready := map[string]bool{}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" && n.Status.NodeInfo.KubeletVersion == version {
					ready[n.Metadata.Name] = true
				} else if c.Type == "Ready" {
					why = append(why, fmt.Sprintf("node %s: Ready=%s %s %s (kubelet %s)", n.Metadata.Name, c.Status, c.Reason, c.Message, n.Status.NodeInfo.KubeletVersion))
				}
			}
		}
		for _, n := range nodeNames {
			if !ready[n] && !slices.ContainsFunc(why, func(s string) bool { return strings.HasPrefix(s, "node "+n+":") }) {
				why = append(why, "node "+n+": not registered")
			}
		}
		running := map[string]int{}
		for _, p := range pods.Items {
			allReady := len(p.Status.ContainerStatuses) > 0
			for _, cs := range p.Status.ContainerStatuses {
				allReady = allReady && cs.Ready
				for state, d := range cs.State {
					if state != "running" {
						why = append(why, fmt.Sprintf("pod %s/%s on %s: %s %s %s %.160s", p.Metadata.Namespace, p.Metadata.Name, p.Spec.NodeName, cs.Name, state, d.Reason, d.Message))
					}
					// A crashing container's last words, once.
					key := p.Metadata.Namespace + "/" + p.Metadata.Name + "/" + cs.Name
					if d.Reason == "CrashLoopBackOff" && !logged[key] {
						logged[key] = true
						resp, err := api.Get(base + "/api/v1/namespaces/" + p.Metadata.Namespace + "/pods/" + p.Metadata.Name + "/log?previous=true&tailLines=30&container=" + cs.Name)
						if err == nil {
							b, _ := io.ReadAll(resp.Body)
							resp.Body.Close()
							t.Logf("%s crashed:\n%s", key, b)
						}
					}
				}
			}
			if p.Status.Phase == "Running" && allReady {
				for prefix := range want {
					if strings.HasPrefix(p.Metadata.Name, prefix) {
						running[prefix]++
					}
				}
			} else if len(p.Status.ContainerStatuses) == 0 {
				why = append(why, fmt.Sprintf("pod %s/%s on %q: %s", p.Metadata.Namespace, p.Metadata.Name, p.Spec.NodeName, p.Status.Phase))
			}
		}
		for _, prefix := range slices.Sorted(maps.Keys(want)) {
			if running[prefix] < want[prefix] {
				why = append(why, fmt.Sprintf("%d %s* pods running and ready, want %d", running[prefix], prefix, want[prefix]))
			}
		}
		return strings.Join(why, "\n")
	}
}

// e2eWait bounds the wait for a cluster to come up: 10 minutes, or
// OPKE_E2E_WAIT for a quicker look while debugging.
func e2eWait() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("OPKE_E2E_WAIT")); err == nil {
		return d
	}
	return 10 * time.Minute
}

// etcdClient is a client of the cluster's etcd members through the
// gateway, as OPKE's health gates reach them.
func (r *rig) etcdClient(t *testing.T, res map[string]diff.Resource, controllers []string) *clientv3.Client {
	t.Helper()
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	b, err := pki.Load(t.Context(), r.store, "demo", pki.EtcdCA, pki.EtcdOPKEClient)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := b.TLS(pki.EtcdCA, pki.EtcdOPKEClient)
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, ctl := range controllers {
		endpoints = append(endpoints, "https://"+net.JoinHostPort(res["openstack/port/"+ctl].Attrs["fixed_ip"].Value, "2379"))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: cfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return gw.DialContext(ctx, "tcp", addr)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// remediate breaks a host (fault) and waits for the plan to replace it
// (spec.remediation, unhealthyAfter at its least, 30 s), applies that,
// and checks the new server's Node is Ready with its provider id; it
// returns the plan applied.
func remediate(t *testing.T, r *rig, c *schemas.Cluster, get func(string, any) error, worker string, fault func(map[string]diff.Resource)) *diff.Plan {
	t.Helper()
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	t.Cleanup(hosts.Close)
	r.planner.Health, r.planner.Now = hosts, time.Now
	c.Spec.Remediation = &schemas.Remediation{UnhealthyAfter: schemas.Duration{Duration: schemas.MinUnhealthyAfter}, MaxUnhealthy: 1}
	defer func() {
		r.planner.Health, r.planner.Now, c.Spec.Remediation = nil, func() time.Time { return now }, nil
	}()
	type node struct {
		Metadata struct{ CreationTimestamp time.Time }
		Spec     struct{ ProviderID string }
		Status   struct {
			Conditions []struct{ Type, Status string }
		}
	}
	ready := func(n node) string {
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status
			}
		}
		return ""
	}
	var old node
	if err := get("/api/v1/nodes/"+worker, &old); err != nil {
		t.Fatal(err)
	}
	res := r.observed(t)
	oldID := res["openstack/server/"+worker].ID
	fault(res)
	stopped := time.Now()
	var plan *diff.Plan
	waitFor(t, 4*time.Minute, func() string {
		var n node
		if err := get("/api/v1/nodes/"+worker, &n); err != nil {
			return err.Error()
		}
		if plan = r.plan(t, c); plan.Empty() {
			return fmt.Sprintf("%s's Node is Ready %s; the plan is empty", worker, ready(n))
		}
		return ""
	})
	t.Logf("%s is remediated %s after its fault: %v", worker, time.Since(stopped).Round(time.Second), addresses(plan.Drift))
	want := map[diff.Address]diff.Action{diff.ResourceAddress(diff.KindServer, worker): diff.ActionReplace}
	if schemas.RoleOf(c.Metadata.Name, worker) == schemas.RoleWorker {
		want[diff.DrainAddress(worker)], want[diff.NodeAddress(worker)] = diff.ActionDrain, diff.ActionDelete
	} else {
		want[diff.MemberAddress(worker)] = diff.ActionDelete
	}
	for addr, action := range want {
		if !slices.ContainsFunc(plan.Drift, func(c diff.Change) bool { return c.Address == addr && c.Action == action }) || len(plan.Changes) != 0 {
			t.Fatalf("the remediation's plan has no %s %s: changes %v, drift %v", action, addr, addresses(plan.Changes), addresses(plan.Drift))
		}
	}
	if time.Since(stopped) < schemas.MinUnhealthyAfter {
		t.Errorf("remediated %s after its fault, sooner than unhealthyAfter", time.Since(stopped))
	}
	r.apply(t, c)
	res = r.observed(t)
	if id := res["openstack/server/"+worker].ID; id == oldID || id == "" {
		t.Errorf("%s's server is still %s", worker, oldID)
	}
	waitFor(t, 3*time.Minute, func() string {
		var n node
		if err := get("/api/v1/nodes/"+worker, &n); err != nil {
			return err.Error()
		}
		// A new Node (the old one's was deleted), with its new server's
		// provider id where a cloud controller manager sets them.
		if ready(n) != "True" || !n.Metadata.CreationTimestamp.After(stopped.Add(-time.Second)) ||
			old.Spec.ProviderID != "" && (n.Spec.ProviderID == "" || n.Spec.ProviderID == old.Spec.ProviderID) {
			return fmt.Sprintf("%s: Ready %s, made %s, provider id %q (the old one's %q)", worker, ready(n), n.Metadata.CreationTimestamp, n.Spec.ProviderID, old.Spec.ProviderID)
		}
		return ""
	})
	if p := r.plan(t, c); !p.Empty() || len(p.Warnings) != 0 {
		t.Errorf("the plan after the remediation: %v %v %v", addresses(p.Changes), addresses(p.Drift), p.Warnings)
	}
	return plan
}

// monitoringAPI reads the monitoring addon's Prometheus and Alertmanager
// through the API server's service proxy.
type monitoringAPI struct {
	get func(path string, out any) error
}

const (
	prometheusProxy   = "/api/v1/namespaces/monitoring/services/prometheus-operated:web/proxy"
	alertmanagerProxy = "/api/v1/namespaces/monitoring/services/alertmanager-operated:web/proxy"
)

// alert is an alert as Prometheus and Alertmanager list it.
type alert struct {
	Labels map[string]string
	State  string
}

// targets are the health of Prometheus' active targets, by job and
// instance (and path: a kubelet has two).
func (m monitoringAPI) targets() (map[string]map[string]string, error) {
	var r struct {
		Data struct {
			ActiveTargets []struct {
				Labels map[string]string
				Health string
			}
		}
	}
	if err := m.get(prometheusProxy+"/api/v1/targets?state=active", &r); err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, tg := range r.Data.ActiveTargets {
		job := tg.Labels["job"]
		if out[job] == nil {
			out[job] = map[string]string{}
		}
		out[job][tg.Labels["instance"]+tg.Labels["metrics_path"]] = tg.Health
	}
	return out, nil
}

// rules are the health of every alerting rule Prometheus loaded, by
// group and name.
func (m monitoringAPI) rules() (map[string]string, error) {
	var r struct {
		Data struct {
			Groups []struct {
				Name  string
				Rules []struct{ Name, Health, LastError string }
			}
		}
	}
	if err := m.get(prometheusProxy+"/api/v1/rules?type=alert", &r); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			out[g.Name+"/"+rule.Name] = strings.TrimSpace(rule.Health + " " + rule.LastError)
		}
	}
	return out, nil
}

// prometheusAlerts are the alerts Prometheus has pending or firing.
func (m monitoringAPI) prometheusAlerts() ([]alert, error) {
	var r struct{ Data struct{ Alerts []alert } }
	if err := m.get(prometheusProxy+"/api/v1/alerts", &r); err != nil {
		return nil, err
	}
	return r.Data.Alerts, nil
}

// alertmanager are the alerts Alertmanager holds active (received from
// Prometheus, firing).
func (m monitoringAPI) alertmanager() ([]alert, error) {
	var r []alert
	if err := m.get(alertmanagerProxy+"/api/v2/alerts?active=true&silenced=false&inhibited=false", &r); err != nil {
		return nil, err
	}
	return r, nil
}

// promPod is Prometheus' pod as the checks of its data need it.
type promPod struct{ uid, node, claim string }

// prometheusPod is prometheus-k8s-0 once it runs: its uid, node and the
// claim its data volume is.
func (m monitoringAPI) prometheusPod() (promPod, error) {
	var p struct {
		Metadata struct{ UID string }
		Spec     struct {
			NodeName string
			Volumes  []struct {
				Name                  string
				PersistentVolumeClaim *struct{ ClaimName string }
			}
		}
		Status struct{ Phase string }
	}
	if err := m.get("/api/v1/namespaces/monitoring/pods/prometheus-k8s-0", &p); err != nil {
		return promPod{}, err
	}
	if p.Status.Phase != "Running" {
		return promPod{}, fmt.Errorf("prometheus-k8s-0 is %s on %q", p.Status.Phase, p.Spec.NodeName)
	}
	out := promPod{uid: p.Metadata.UID, node: p.Spec.NodeName}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out.claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	return out, nil
}

// headMinTime is the time of the oldest sample in Prometheus' head block
// (its TSDB status), which a restart replays from the WAL.
func (m monitoringAPI) headMinTime() (time.Time, error) {
	var r struct {
		Data struct {
			HeadStats struct{ MinTime int64 }
		}
	}
	if err := m.get(prometheusProxy+"/api/v1/status/tsdb", &r); err != nil {
		return time.Time{}, err
	}
	if r.Data.HeadStats.MinTime <= 0 {
		return time.Time{}, fmt.Errorf("Prometheus' head has no sample (minTime %d)", r.Data.HeadStats.MinTime)
	}
	return time.UnixMilli(r.Data.HeadStats.MinTime), nil
}

// nodesOf are the nodes the monitoring namespace's named pods run on.
func (m monitoringAPI) nodesOf(pods ...string) ([]string, error) {
	var out []string
	for _, name := range pods {
		var p struct {
			Spec   struct{ NodeName string }
			Status struct{ Phase string }
		}
		if err := m.get("/api/v1/namespaces/monitoring/pods/"+name, &p); err != nil {
			return nil, err
		}
		if p.Status.Phase != "Running" || p.Spec.NodeName == "" {
			return nil, fmt.Errorf("%s is %s on %q", name, p.Status.Phase, p.Spec.NodeName)
		}
		out = append(out, p.Spec.NodeName)
	}
	return out, nil
}

// allowedCIDRsStep: spec.api.allowedCIDRs on real machines. Narrowed to a
// range the edge is not in, the API's floating IP no longer lets the edge
// in (the VIP's security group), while OPKE's apply (through the gateway)
// and the worker's kubelet (through the VIP's fixed address, from the
// cluster's network, which OPKE always adds) go on; widened to the edge's
// range, kubectl through the edge works again. The load balancer is
// changed in place, and the list stays for the rest of the test.
func allowedCIDRsStep(t *testing.T, r *rig, c *schemas.Cluster, api *http.Client, base string, kubectl func(...string) string) {
	t.Helper()
	before := r.observed(t)
	addr := before["openstack/floating-ip/demo-api"].Attrs["address"].Value + ":6443"
	reach := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		conn, err := sshx.Dialer{Proxy: r.sim.Edge()}.DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err
	}
	// until waits for reach to say want (true: reached), as a client
	// would see an amphora take a listener's update.
	until := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for err := reach(); (err == nil) != want; err = reach() {
			if time.Now().After(deadline) {
				t.Fatalf("the API's floating IP %s from the edge after a minute: reached=%t (%v), want %t", addr, err == nil, err, want)
			}
			time.Sleep(2 * time.Second)
		}
	}

	c.Spec.API = &schemas.API{AllowedCIDRs: []string{"198.51.100.0/24"}}
	plan, _ := r.apply(t, c)
	var changed []string
	for _, ch := range plan.Changes {
		changed = append(changed, ch.Action.String()+" "+ch.Address.String())
	}
	if d := cmp.Diff([]string{"update openstack/listener/demo-api-6443"}, changed); d != "" {
		t.Errorf("narrowing the API's allowed CIDRs (-want +got):\n%s", d)
	}
	after := r.observed(t)
	if got, want := after["openstack/listener/demo-api-6443"].Attrs["allowed_cidrs"].Value, c.Spec.Network.HostCIDR+",198.51.100.0/24"; got != want {
		t.Errorf("the API listener's allowed_cidrs: %q, want %q", got, want)
	}
	until(false)
	narrowed := time.Now()
	// A new connection from the worker to the VIP's fixed address, as a
	// kubelet starting anew would open (the running kubelet's connection
	// predates the narrowing): the cluster's network is let in.
	vip := after["openstack/load-balancer/demo-api"].Attrs["vip_address"].Value
	worker := dialHost(t, r, after, "demo-default-0", dialHost(t, r, after, "demo-gateway-0", nil))
	code, err := sshx.Run(t.Context(), worker, "curl -sk --max-time 10 -o /dev/null -w '%{http_code}' https://"+vip+":6443/healthz")
	if err != nil || strings.TrimSpace(string(code)) == "000" {
		t.Errorf("the worker's new connection to the API's VIP %s after the narrowing: %q, %v", vip, code, err)
	}
	// The worker's kubelet renews its lease every 10 s through the VIP's
	// fixed address: a renewal after the narrowing is the kubelet still
	// reaching the API from the cluster's network.
	get := getter(api, base)
	waitFor(t, 2*time.Minute, func() string {
		var lease struct{ Spec struct{ RenewTime time.Time } }
		if err := get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/demo-default-0", &lease); err != nil {
			return err.Error()
		}
		if !lease.Spec.RenewTime.After(narrowed) {
			return fmt.Sprintf("demo-default-0's lease was last renewed at %s, before the narrowing at %s", lease.Spec.RenewTime, narrowed)
		}
		return ""
	})
	if err := reach(); err == nil {
		t.Errorf("the edge reached %s outside the API's allowed CIDRs", addr)
	}
	t.Logf("api.allowedCIDRs %v: the edge kept out of %s, the worker's kubelet in", c.Spec.API.AllowedCIDRs, addr)

	c.Spec.API.AllowedCIDRs = append(c.Spec.API.AllowedCIDRs, "203.0.113.0/24")
	r.apply(t, c)
	until(true)
	if out := kubectl("get", "nodes", "-o", "name"); out != "node/demo-controller-0\nnode/demo-default-0\n" {
		t.Errorf("kubectl get nodes within the allowed CIDRs: %q", out)
	}
	if got := r.observed(t)["openstack/load-balancer/demo-api"].ID; got != before["openstack/load-balancer/demo-api"].ID {
		t.Errorf("the API's load balancer was made again (%s, was %s)", got, before["openstack/load-balancer/demo-api"].ID)
	}
	if next := r.plan(t, c); !next.Empty() {
		t.Errorf("after widening the allowed CIDRs, plan: %v, drift %v", addresses(next.Changes), next.Drift)
	}
}

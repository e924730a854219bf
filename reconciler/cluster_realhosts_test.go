//go:build realhosts

package reconciler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// TestClusterComesUp: on real machines, a cluster of one controller and
// one worker, its images from the simulator's mirror, comes up as
// Kubernetes says: both nodes Ready at the spec's version (the worker
// joined through the API's load balancer), and kube-proxy, flannel and
// CoreDNS running on them; then a pod on the worker resolves
// kubernetes.default through CoreDNS and reaches a pod on the controller
// across flannel's VXLAN. These are the first two steps of make e2e
// (issue "A real cluster comes up").
func TestClusterComesUp(t *testing.T) {
	if !realHosts {
		t.Fatal("this test runs on real machines: OPKE_TEST_HOSTS=real (make e2e)")
	}
	r := newRig(t)
	reg := mirrorWorld(t, r)
	c := spec(t, "demo", "", 0)
	c.Spec.WorkerPools[0].Count = 1
	c.Spec.Addons = nil
	c.Spec.RegistryMirror = &schemas.RegistryMirror{Endpoint: reg.URL(), CACert: string(reg.CACert)}
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
	get := func(path string, out any) error {
		resp, err := api.Get(base + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s %.200s", path, resp.Status, b)
		}
		return json.Unmarshal(b, out)
	}
	logged := map[string]bool{}
	check := func() string {
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
				if c.Type == "Ready" && c.Status == "True" && n.Status.NodeInfo.KubeletVersion == "v1.35.1" {
					ready[n.Metadata.Name] = true
				} else if c.Type == "Ready" {
					why = append(why, fmt.Sprintf("node %s: Ready=%s %s %s (kubelet %s)", n.Metadata.Name, c.Status, c.Reason, c.Message, n.Status.NodeInfo.KubeletVersion))
				}
			}
		}
		for _, n := range []string{"demo-controller-0", "demo-default-0"} {
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
				app, _, _ := strings.Cut(p.Metadata.Name, "-")
				running[app]++
			} else if len(p.Status.ContainerStatuses) == 0 {
				why = append(why, fmt.Sprintf("pod %s/%s on %q: %s", p.Metadata.Namespace, p.Metadata.Name, p.Spec.NodeName, p.Status.Phase))
			}
		}
		// kube-proxy-*, kube-flannel-ds-*, coredns-*: by their names' first word.
		for app, want := range map[string]int{"kube": 4, "coredns": 1} {
			if running[app] < want {
				why = append(why, fmt.Sprintf("%d %s pods running and ready, want %d", running[app], app, want))
			}
		}
		return strings.Join(why, "\n")
	}
	wait := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("OPKE_E2E_WAIT")); err == nil {
		wait = d // for a quicker look while debugging
	}
	deadline := time.Now().Add(wait)
	for {
		why := check()
		if why == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not come up within %s:\n%s", wait, why)
		}
		t.Logf("waiting: %s", strings.SplitN(why, "\n", 2)[0])
		time.Sleep(10 * time.Second)
	}
	t.Logf("the cluster came up %s after the apply began", time.Since(started).Round(time.Second))

	// Step 2 of make e2e: a pod on the worker resolves the API's Service
	// through CoreDNS, and reaches a pod on the controller across
	// flannel's VXLAN (the real bridge and security groups between them):
	// a CoreDNS of its own there, answering whoami over TCP on 5353.
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
	post("/api/v1/namespaces/default/pods", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"e2e-server"},"spec":{
		"nodeName":"demo-controller-0","tolerations":[{"operator":"Exists"}],
		"containers":[{"name":"coredns","image":"registry.k8s.io/coredns/coredns:v1.13.1","args":["-dns.port","5353"]}]}}`)
	server := waitPod("e2e-server", func(p podStatus) bool { return p.Status.Phase == "Running" && p.Status.PodIP != "" })
	// A DNS query over TCP (RFC 7766: its length first), id 0x1234, for
	// "a." IN A: the answer's first bytes are its length and the id.
	probe := `getent hosts kubernetes.default.svc.cluster.local
exec 3<>/dev/tcp/$SERVER/5353
printf '\x00\x13\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x00\x00\x01\x00\x01' >&3
timeout 10 head -c 4 <&3 | od -An -tx1`
	spec, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "e2e-probe"},
		"spec": map[string]any{"nodeName": "demo-default-0", "restartPolicy": "Never",
			"containers": []any{map[string]any{"name": "probe", "image": "registry.k8s.io/kube-proxy:v1.35.1",
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
}

// hostDiagnostics logs what the hosts' units and network say, through
// the cluster's gateway.
func hostDiagnostics(t *testing.T, r *rig, hosts ...string) {
	ctx := context.WithoutCancel(t.Context())
	res := r.observed(t)
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	for _, h := range hosts {
		host := dialHost(t, r, res, h, gw)
		for _, cmd := range []string{
			"sudo -n systemctl --no-pager status containerd kubelet",
			"sudo -n journalctl --no-pager -n 60 -u kubelet -u containerd",
			"sudo -n ls -l /opt/cni/bin /etc/cni/net.d /etc/containerd/certs.d",
			"ip -4 route; ip -4 addr",
			"sudo -n iptables-save -t nat | head -40",
		} {
			out, err := sshx.Run(ctx, host, cmd)
			t.Logf("%s: %s (%v):\n%s", h, cmd, err, out)
		}
	}
}

package kubestub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"opke.dev/opke/internal/kubestatus"
)

// Server-side apply as the real API server answers it: what it refuses,
// and created then updated.
func TestServerSideApply(t *testing.T) {
	b := &memBackend{}
	srv := httptest.NewServer(Handler("v1.35.1", b))
	defer srv.Close()
	const ds = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"kube-proxy","namespace":"kube-system"}}`
	const apply = "application/apply-patch+yaml"
	for _, tc := range []struct {
		name, method, path, contentType, body string
		want                                  int
		wantBody                              string
	}{
		{"discovery of the core group", "GET", "/api/v1", "", "", 200, `"name":"configmaps"`},
		{"discovery of apps", "GET", "/apis/apps/v1", "", "", 200, `"kind":"DaemonSet"`},
		{"discovery of a group not served", "GET", "/apis/example.org/v1", "", "", 404, "could not find"},
		{"no field manager", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", apply, ds, 422, "fieldManager: Required value"},
		{"a strategic merge patch", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?fieldManager=t", "application/strategic-merge-patch+json", ds, 415, "unknown format"},
		{"a merge patch of an object not there", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "application/merge-patch+json",
			`{"spec":{"template":{"metadata":{"annotations":{"a":"b"}}}}}`, 404, `daemonsets \"kube-proxy\" not found`},
		{"another name", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/other?fieldManager=t", apply, ds, 400, "does not match the name"},
		{"another kind", "PATCH", "/apis/apps/v1/namespaces/kube-system/deployments/kube-proxy?fieldManager=t", apply, ds, 400, "not a Deployment"},
		{"a resource not served", "PATCH", "/apis/apps/v1/namespaces/kube-system/widgets/kube-proxy?fieldManager=t", apply, ds, 404, "could not find"},
		{"a namespaced resource without a namespace", "PATCH", "/apis/apps/v1/daemonsets/kube-proxy?fieldManager=t", apply, ds, 404, "could not find"},
		{"a namespace that does not exist", "PATCH", "/api/v1/namespaces/kube-flannel/configmaps/cfg?fieldManager=t", apply,
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n", 404, `namespaces \"kube-flannel\" not found`},
		{"a namespace", "PATCH", "/api/v1/namespaces/kube-flannel?fieldManager=t", apply, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-flannel\n", 201, `"name":"kube-flannel"`},
		{"then an object in it", "PATCH", "/api/v1/namespaces/kube-flannel/configmaps/cfg?fieldManager=t", apply,
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n", 201, `"namespace":"kube-flannel"`},
		{"created", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?fieldManager=t", apply, ds, 201, `"kube-proxy"`},
		{"applied again", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?fieldManager=t", apply, ds, 200, `"kube-proxy"`},
		{"read back", "GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "", "", 200, `"kind":"DaemonSet"`},
		{"a merge patch, as kubectl rollout restart sends", "PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "application/merge-patch+json",
			`{"spec":{"template":{"metadata":{"annotations":{"a":"b"}}}}}`, 200, `"generation":2`},
		{"the patch kept", "GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", "", "", 200, `"annotations":{"a":"b"}`},
		{"listed", "GET", "/apis/apps/v1/daemonsets", "", "", 200, `"kind":"DaemonSetList"`},
		{"one never applied", "GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/flannel", "", "", 404, `daemonsets \"flannel\" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var sb strings.Builder
			_, _ = io.Copy(&sb, resp.Body)
			if resp.StatusCode != tc.want || !strings.Contains(sb.String(), tc.wantBody) {
				t.Errorf("%s %s: %d %s, want %d with %q", tc.method, tc.path, resp.StatusCode, sb.String(), tc.want, tc.wantBody)
			}
		})
	}
}

// TestWorkloadStatus: a workload's status is what its controller would
// write were its pods running at once on the nodes they fit: selectors,
// required node affinity, taints and tolerations (a DaemonSet's own), a
// cordon, and a node not Ready, whose pods are not available.
func TestWorkloadStatus(t *testing.T) {
	t.Parallel()
	controlPlane := corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}
	registered := map[string]Node{
		"c-0": {Name: "c-0", Taints: []corev1.Taint{controlPlane}, Labels: map[string]string{"pool": "controllers"}},
		"w-0": {Name: "w-0", Labels: map[string]string{"pool": "default"}},
		"w-1": {Name: "w-1", Labels: map[string]string{"pool": "default"}},
	}
	live := []Node{}
	for _, n := range []string{"c-0", "w-0", "w-1"} {
		n := registered[n]
		n.Ready = n.Name != "w-1" // w-1's kubelet is down
		live = append(live, n)
	}
	b := &memBackend{nodes: live, objs: Objects{Nodes: registered}}
	srv := httptest.NewServer(Handler("v1.35.1", b))
	defer srv.Close()
	do := func(method, path, body string) []byte {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/apply-patch+yaml")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}
	workload := func(kind, name, podSpec string) (path, body string) {
		res := map[string]string{"Deployment": "deployments", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets"}[kind]
		return "/apis/apps/v1/namespaces/kube-system/" + res + "/" + name + "?fieldManager=t",
			fmt.Sprintf(`{"apiVersion":"apps/v1","kind":%q,"metadata":{"name":%q,"namespace":"kube-system"},
			"spec":{"replicas":2,"updateStrategy":{"type":"RollingUpdate"},"template":{"spec":%s}}}`, kind, name, podSpec)
	}
	tolerateControlPlane := `"tolerations":[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]`
	for _, tc := range []struct {
		name, kind, podSpec string
		cordon              bool
		want                string // the status's counts, as the test prints them
		done                bool
	}{
		{"a deployment on a Ready worker", "Deployment", `{}`, false, "updated 2, available 2", true},
		{"a deployment with every worker cordoned or down", "Deployment", `{}`, true, "updated 2, available 0", false},
		{"a deployment tolerating the controllers, workers cordoned", "Deployment", "{" + tolerateControlPlane + "}", true, "updated 2, available 2", true},
		{"a deployment selecting a label no node has", "Deployment", `{"nodeSelector":{"pool":"gpu"}}`, false, "updated 2, available 0", false},
		{"a deployment whose required affinity selects only the worker down", "Deployment",
			`{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["w-1"]}]}]}}}}`,
			false, "updated 2, available 0", false},
		{"a daemon set not tolerating the controllers", "DaemonSet", `{}`, false, "desired 2, available 1", false},
		{"a daemon set tolerating them", "DaemonSet", "{" + tolerateControlPlane + "}", false, "desired 3, available 2", false},
		{"a daemon set on cordoned workers", "DaemonSet", `{}`, true, "desired 2, available 1", false},
		{"a daemon set on the controllers only", "DaemonSet", `{"nodeSelector":{"pool":"controllers"},` + tolerateControlPlane + "}", false, "desired 1, available 1", true},
		{"a stateful set", "StatefulSet", `{}`, false, "ready 2", true},
		{"a stateful set selecting nothing", "StatefulSet", `{"nodeSelector":{"pool":"gpu"}}`, false, "ready 0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = b.Update(func(o *Objects) error {
				o.Unschedulable = map[string]bool{"w-0": tc.cordon, "w-1": tc.cordon}
				return nil
			})
			name := strings.ReplaceAll(tc.name, " ", "-")
			path, body := workload(tc.kind, name, tc.podSpec)
			do(http.MethodPatch, path, body)
			got := do(http.MethodGet, strings.TrimSuffix(path, "?fieldManager=t"), "")
			var st struct {
				Metadata struct{ Generation int64 }
				Status   struct {
					ObservedGeneration                                int64
					UpdatedReplicas, AvailableReplicas, ReadyReplicas int32
					DesiredNumberScheduled, NumberAvailable           int32
				}
			}
			if err := json.Unmarshal(got, &st); err != nil {
				t.Fatal(err)
			}
			var counts string
			switch tc.kind {
			case "Deployment":
				counts = fmt.Sprintf("updated %d, available %d", st.Status.UpdatedReplicas, st.Status.AvailableReplicas)
			case "DaemonSet":
				counts = fmt.Sprintf("desired %d, available %d", st.Status.DesiredNumberScheduled, st.Status.NumberAvailable)
			case "StatefulSet":
				counts = fmt.Sprintf("ready %d", st.Status.ReadyReplicas)
			}
			if counts != tc.want || st.Metadata.Generation != 1 || st.Status.ObservedGeneration != 1 {
				t.Errorf("status: %s, generation %d observed %d; want %s, 1, 1", counts, st.Metadata.Generation, st.Status.ObservedGeneration, tc.want)
			}
			if done, why, err := kubestatus.RolledOut(tc.kind, got, 0); done != tc.done || err != nil {
				t.Errorf("rolled out: %t (%s, %v), want %t", done, why, err, tc.done)
			}
		})
	}

	// The generation: the same spec again keeps it, a new spec raises it.
	path, body := workload("Deployment", "web", `{}`)
	for i, tc := range []struct {
		body string
		want string
	}{
		{body, `"generation":1`},
		{body, `"generation":1`},
		{strings.Replace(body, `"replicas":2`, `"replicas":3`, 1), `"generation":2`},
	} {
		if got := do(http.MethodPatch, path, tc.body); !strings.Contains(string(got), tc.want) {
			t.Errorf("apply %d: %s, want %s", i, got, tc.want)
		}
	}
}

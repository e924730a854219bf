// Package kubecontract holds the stand-in API server (cloudsim/kubestub)
// to a real kube-apiserver on what OPKE's health gates, drains and
// prunes ask of the API: the same checks run against both, the stand-in's in make test
// and a real cluster's in make e2e, so that the stand-in is never kinder
// than the real one (a message it words more helpfully, a status code it
// gets wrong, a taint it forgets).
package kubecontract

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// Cluster is what the contract runs against.
type Cluster struct {
	// Client and Base reach the API server as the cluster's admin.
	Client *http.Client
	Base   string
	// Node is a node of the cluster; the contract cordons and uncordons it.
	Node string
	// Namespace holds Guarded, a pod on Node that Budget, a disruption
	// budget, lets none be evicted now.
	Namespace, Guarded, Budget string
	// Static is a static pod's manifest as pushed to StaticNode, whose
	// kubelet runs it: its mirror pod shows it as a gate reads it.
	Static     []byte
	StaticNode string
}

// status is a metav1.Status as the checks read it.
type status struct {
	Kind    string
	Status  string
	Message string
	Reason  string
	Code    int
	Details struct {
		Name   string
		Kind   string
		Causes []struct{ Reason, Message string } // metav1.StatusCause: its Type is "reason"
	}
}

// budgetCause is the real API server's cause of a refused eviction
// (k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go).
var budgetCause = regexp.MustCompile(`^The disruption budget (\S+) needs \d+ healthy pods and has \d+ currently$`)

// Run runs the contract's checks as subtests.
func Run(t *testing.T, c Cluster) {
	do := func(t *testing.T, method, path, contentType, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, c.Base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := c.Client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	failure := func(t *testing.T, what string, code int, b []byte, wantCode int, wantReason string) status {
		t.Helper()
		var st status
		if err := json.Unmarshal(b, &st); err != nil || code != wantCode || st.Kind != "Status" || st.Status != "Failure" ||
			st.Code != wantCode || st.Reason != wantReason {
			t.Errorf("%s: %d %s, want a Status %d %s", what, code, b, wantCode, wantReason)
		}
		return st
	}

	t.Run("a missing node is a NotFound Status", func(t *testing.T) {
		code, b := do(t, http.MethodGet, "/api/v1/nodes/no-such-node", "", "")
		st := failure(t, "GET a missing node", code, b, http.StatusNotFound, "NotFound")
		if st.Message != `nodes "no-such-node" not found` || st.Details.Name != "no-such-node" || st.Details.Kind != "nodes" {
			t.Errorf("GET a missing node: %+v", st)
		}
		code, b = do(t, http.MethodDelete, "/api/v1/nodes/no-such-node", "", "")
		failure(t, "DELETE a missing node", code, b, http.StatusNotFound, "NotFound")
	})

	t.Run("a Ready node's Ready condition carries its last transition's time, as remediation reads it", func(t *testing.T) {
		code, b := do(t, http.MethodGet, "/api/v1/nodes", "", "")
		var list struct {
			Items []struct {
				Metadata struct{ Name string }
				Status   struct {
					Conditions []struct {
						Type, Status       string
						LastTransitionTime time.Time
					}
				}
			}
		}
		if err := json.Unmarshal(b, &list); err != nil || code != http.StatusOK {
			t.Fatalf("GET nodes: %d %v %.300s", code, err, b)
		}
		seen := false
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type != "Ready" || n.Metadata.Name != c.StaticNode {
					continue
				}
				seen = true
				if cond.Status != "True" || cond.LastTransitionTime.IsZero() || cond.LastTransitionTime.After(time.Now().Add(time.Minute)) {
					t.Errorf("node %s: Ready %s since %s, want True since a time past", c.StaticNode, cond.Status, cond.LastTransitionTime)
				}
			}
		}
		if !seen {
			t.Errorf("node %s has no Ready condition: %.300s", c.StaticNode, b)
		}
	})

	t.Run("a cordon is spec.unschedulable and the unschedulable taint", func(t *testing.T) {
		type node struct {
			Spec struct {
				Unschedulable bool
				Taints        []struct{ Key, Effect string }
			}
		}
		tainted := func(n node) bool {
			return slices.ContainsFunc(n.Spec.Taints, func(x struct{ Key, Effect string }) bool {
				return x.Key == "node.kubernetes.io/unschedulable" && x.Effect == "NoSchedule"
			})
		}
		for _, cordon := range []bool{true, false} {
			code, b := do(t, http.MethodPatch, "/api/v1/nodes/"+c.Node, "application/merge-patch+json", fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, cordon))
			var n node
			if code != http.StatusOK || json.Unmarshal(b, &n) != nil {
				t.Fatalf("PATCH unschedulable %t: %d %s", cordon, code, b)
			}
			if n.Spec.Unschedulable != cordon {
				t.Errorf("PATCH unschedulable %t: the node says %t", cordon, n.Spec.Unschedulable)
			}
			// The taint follows the field: at once in the stand-in, a moment
			// later in a real cluster (its node lifecycle controller).
			for deadline := time.Now().Add(30 * time.Second); tainted(n) != cordon; time.Sleep(time.Second) {
				if time.Now().After(deadline) {
					t.Fatalf("unschedulable %t, the node's taints: %+v", cordon, n.Spec.Taints)
				}
				code, b := do(t, http.MethodGet, "/api/v1/nodes/"+c.Node, "", "")
				n = node{}
				if code != http.StatusOK || json.Unmarshal(b, &n) != nil {
					t.Fatalf("GET %s: %d %s", c.Node, code, b)
				}
			}
		}
	})

	t.Run("a static pod's mirror carries its manifest's annotations, images and flags, and is Ready", func(t *testing.T) {
		type podView struct {
			Metadata struct {
				Name, Namespace string
				Annotations     map[string]string
			}
			Spec struct {
				Containers []struct {
					Name, Image string
					Command     []string
				}
			}
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		var want podView
		if err := yaml.Unmarshal(c.Static, &want); err != nil || want.Metadata.Name == "" {
			t.Fatalf("the static pod's manifest: %v", err)
		}
		path := "/api/v1/namespaces/" + want.Metadata.Namespace + "/pods/" + want.Metadata.Name + "-" + c.StaticNode
		var got podView
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			code, b := do(t, http.MethodGet, path, "", "")
			got = podView{}
			if code == http.StatusOK && json.Unmarshal(b, &got) == nil && got.Metadata.Annotations["kubernetes.io/config.mirror"] != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %d %.300s", path, code, b)
			}
		}
		for k, v := range want.Metadata.Annotations {
			if got.Metadata.Annotations[k] != v {
				t.Errorf("mirror annotation %s = %q, the manifest's %q", k, got.Metadata.Annotations[k], v)
			}
		}
		if len(got.Spec.Containers) != len(want.Spec.Containers) {
			t.Fatalf("mirror containers %+v, the manifest's %+v", got.Spec.Containers, want.Spec.Containers)
		}
		for i, w := range want.Spec.Containers {
			g := got.Spec.Containers[i]
			if g.Name != w.Name || g.Image != w.Image || !slices.Equal(g.Command, w.Command) {
				t.Errorf("mirror container %+v, the manifest's %+v", g, w)
			}
		}
		if !slices.ContainsFunc(got.Status.Conditions, func(c struct{ Type, Status string }) bool { return c.Type == "Ready" && c.Status == "True" }) {
			t.Errorf("the mirror of a running static pod is not Ready: %+v", got.Status.Conditions)
		}
	})

	t.Run("pods are listed by node", func(t *testing.T) {
		code, b := do(t, http.MethodGet, "/api/v1/pods?fieldSelector=spec.nodeName%3D"+c.Node, "", "")
		var pods struct {
			Items []struct {
				Metadata struct{ Namespace, Name string }
				Spec     struct{ NodeName string }
			}
		}
		if code != http.StatusOK || json.Unmarshal(b, &pods) != nil {
			t.Fatalf("GET pods of %s: %d %.300s", c.Node, code, b)
		}
		found := false
		for _, p := range pods.Items {
			if p.Spec.NodeName != c.Node {
				t.Errorf("pod %s/%s on %s listed as on %s", p.Metadata.Namespace, p.Metadata.Name, p.Spec.NodeName, c.Node)
			}
			found = found || p.Metadata.Namespace == c.Namespace && p.Metadata.Name == c.Guarded
		}
		if !found {
			t.Errorf("%s/%s is not among %s's pods", c.Namespace, c.Guarded, c.Node)
		}
	})

	t.Run("an eviction a budget refuses is a 429 naming the budget as the API server does", func(t *testing.T) {
		ev := fmt.Sprintf(`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":%q,"namespace":%q}}`, c.Guarded, c.Namespace)
		code, b := do(t, http.MethodPost, "/api/v1/namespaces/"+c.Namespace+"/pods/"+c.Guarded+"/eviction", "application/json", ev)
		st := failure(t, "an eviction past the budget", code, b, http.StatusTooManyRequests, "TooManyRequests")
		if st.Message != "Cannot evict pod as it would violate the pod's disruption budget." {
			t.Errorf("the refusal's message: %q", st.Message)
		}
		if len(st.Details.Causes) != 1 || st.Details.Causes[0].Reason != "DisruptionBudget" {
			t.Fatalf("the refusal's causes: %+v", st.Details.Causes)
		}
		if m := budgetCause.FindStringSubmatch(st.Details.Causes[0].Message); m == nil || m[1] != c.Budget {
			t.Errorf("the refusal's cause %q, want the API server's wording naming %s", st.Details.Causes[0].Message, c.Budget)
		}
		missing := strings.Replace(ev, c.Guarded, "no-such-pod", 1)
		code, b = do(t, http.MethodPost, "/api/v1/namespaces/"+c.Namespace+"/pods/no-such-pod/eviction", "application/json", missing)
		failure(t, "the eviction of a missing pod", code, b, http.StatusNotFound, "NotFound")
	})

	// What a prune does: an object a server-side apply made is deleted
	// (2xx, kubectl's background propagation), then gone; deleting it
	// again is the NotFound a prune resumed after a crash takes for done.
	t.Run("an applied object is deleted, then NotFound", func(t *testing.T) {
		path := "/api/v1/namespaces/" + c.Namespace + "/configmaps/opke-contract-prune"
		cm := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"opke-contract-prune","namespace":%q},"data":{"a":"b"}}`, c.Namespace)
		if code, b := do(t, http.MethodPatch, path+"?fieldManager=opke&force=true", "application/apply-patch+yaml", cm); code/100 != 2 {
			t.Fatalf("apply a ConfigMap: %d %s", code, b)
		}
		if code, b := do(t, http.MethodDelete, path+"?propagationPolicy=Background", "", ""); code/100 != 2 {
			t.Fatalf("delete it: %d %s", code, b)
		}
		code, b := do(t, http.MethodGet, path, "", "")
		if st := failure(t, "GET it once deleted", code, b, http.StatusNotFound, "NotFound"); st.Message != `configmaps "opke-contract-prune" not found` {
			t.Errorf("GET it once deleted: %q", st.Message)
		}
		code, b = do(t, http.MethodDelete, path+"?propagationPolicy=Background", "", "")
		failure(t, "delete it again", code, b, http.StatusNotFound, "NotFound")
	})
}

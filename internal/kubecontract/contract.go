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
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"opke.dev/opke/internal/kubestatus"
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
	// Image is one the cluster's nodes run (from its registry mirror): the
	// contract's workloads run it.
	Image string
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

	// What OPKE waits for after a manifest's apply: its workloads' status
	// as kubectl rollout status reads it (internal/kubestatus), a
	// DaemonSet's pods on nodes that are not Ready aside. A Deployment
	// whose pods fit no node says so and is not done.
	t.Run("applied workloads roll out as OPKE reads their status", func(t *testing.T) {
		const ns = "default"
		deploy := func(name, selector string) (string, string) {
			return "/apis/apps/v1/namespaces/" + ns + "/deployments/" + name, fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment",
				"metadata":{"name":%q,"namespace":%q},"spec":{"replicas":1,"selector":{"matchLabels":{"app":%q}},
				"template":{"metadata":{"labels":{"app":%q}},"spec":{%s"terminationGracePeriodSeconds":1,
				"containers":[{"name":"pause","image":%q}]}}}}`, name, ns, name, name, selector, c.Image)
		}
		fits, fitsBody := deploy("opke-contract-fits", "")
		nowhere, nowhereBody := deploy("opke-contract-nowhere", `"nodeSelector":{"opke.dev/contract":"no-such-node"},`)
		ds := "/apis/apps/v1/namespaces/" + ns + "/daemonsets/opke-contract-everywhere"
		dsBody := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"opke-contract-everywhere","namespace":%q},
			"spec":{"selector":{"matchLabels":{"app":"opke-contract-everywhere"}},"template":{"metadata":{"labels":{"app":"opke-contract-everywhere"}},
			"spec":{"tolerations":[{"operator":"Exists"}],"terminationGracePeriodSeconds":1,"containers":[{"name":"pause","image":%q}]}}}}`, ns, c.Image)
		objects := []struct{ kind, path, body string }{{"Deployment", fits, fitsBody}, {"Deployment", nowhere, nowhereBody}, {"DaemonSet", ds, dsBody}}
		for _, o := range objects {
			if code, b := do(t, http.MethodPatch, o.path+"?fieldManager=opke&force=true", "application/apply-patch+yaml", o.body); code/100 != 2 {
				t.Fatalf("apply %s: %d %s", o.path, code, b)
			}
		}
		defer func() {
			for _, o := range objects {
				do(t, http.MethodDelete, o.path+"?propagationPolicy=Background", "", "")
			}
		}()
		notReady := func() int {
			code, b := do(t, http.MethodGet, "/api/v1/nodes", "", "")
			n, err := kubestatus.NotReady(b)
			if code != http.StatusOK || err != nil {
				t.Fatalf("GET nodes: %d %v %.300s", code, err, b)
			}
			return n
		}
		want := map[string]string{fits: "", ds: "", nowhere: "0 of 1 updated replicas are available"}
		got := map[string]string{}
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
			down := notReady()
			for _, o := range objects {
				code, b := do(t, http.MethodGet, o.path, "", "")
				if code != http.StatusOK {
					t.Fatalf("GET %s: %d %.300s", o.path, code, b)
				}
				done, why, err := kubestatus.RolledOut(o.kind, b, down)
				if err != nil {
					t.Fatalf("%s: %v", o.path, err)
				}
				if done != (why == "") {
					t.Errorf("%s: done %t with %q", o.path, done, why)
				}
				got[o.path] = why
			}
			if maps.Equal(want, got) || time.Now().After(deadline) {
				break
			}
		}
		if !maps.Equal(want, got) {
			t.Errorf("rollouts: %q, want %q", got, want)
		}
	})

	// What a resync's drift check reads (kubestatus.Fields): the field set
	// OPKE's apply owns loses a field another manager changes, and only
	// then; a forced apply takes it back.
	t.Run("a field OPKE applied and another manager changed leaves OPKE's field set, and only such a field", func(t *testing.T) {
		path := "/api/v1/namespaces/" + c.Namespace + "/configmaps/opke-contract-fields"
		cm := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"opke-contract-fields","namespace":%q,
			"labels":{"app":"opke-contract"}},"data":{"a":"1","b":"2"}}`, c.Namespace)
		// fields is the digest of OPKE's fields, and the other managers
		// with what they own ("opke-contract-edit .data.a").
		fields := func(what string, code int, b []byte) (string, []string) {
			t.Helper()
			if code/100 != 2 {
				t.Fatalf("%s: %d %s", what, code, b)
			}
			d, err := kubestatus.Fields(b, "opke")
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			others, err := kubestatus.Managers(b, "opke")
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			var said []string
			for _, m := range others {
				said = append(said, m.Name+" "+strings.Join(m.Fields, " "))
			}
			return d, said
		}
		apply := func() (int, []byte) {
			return do(t, http.MethodPatch, path+"?fieldManager=opke&force=true", "application/apply-patch+yaml", cm)
		}
		code, b := apply()
		applied, _ := fields("apply a ConfigMap", code, b)
		defer do(t, http.MethodDelete, path, "", "")
		if applied == "" {
			t.Fatal("the apply's answer has no Apply entry of opke in its managedFields")
		}
		patch := func(manager, body string) (int, []byte) {
			return do(t, http.MethodPatch, path+"?fieldManager="+manager, "application/merge-patch+json", body)
		}
		for _, step := range []struct {
			what, manager, patch string
			changed              bool
			others               []string
		}{
			{"read back", "", "", false, nil},
			{"another manager annotates it", "opke-contract-other", `{"metadata":{"annotations":{"example.com/note":"x"}}}`, false,
				[]string{`opke-contract-other .metadata.annotations.example.com/note`}},
			{"another manager sets a field OPKE applied to its value", "opke-contract-same", `{"data":{"a":"1"}}`, false,
				[]string{`opke-contract-other .metadata.annotations.example.com/note`}},
			{"another manager changes a field OPKE applied", "opke-contract-edit", `{"data":{"a":"changed"}}`, true,
				[]string{"opke-contract-edit .data.a", `opke-contract-other .metadata.annotations.example.com/note`}},
		} {
			code, b := do(t, http.MethodGet, path, "", "")
			if step.patch != "" {
				code, b = patch(step.manager, step.patch)
			}
			got, others := fields(step.what, code, b)
			if (got != applied) != step.changed || !slices.Equal(others, step.others) {
				t.Errorf("%s: OPKE's fields changed %t, other managers %q; want changed %t, %q", step.what, got != applied, others, step.changed, step.others)
			}
		}
		code, b = apply()
		again, _ := fields("apply it again", code, b)
		if again != applied {
			t.Error("a forced apply did not take back the field another manager changed")
		}
		// An apply merges: what another manager set stays, what the
		// manager no longer applies goes.
		cm = strings.Replace(cm, `"a":"1","b":"2"`, `"a":"1"`, 1)
		code, b = apply()
		if code/100 != 2 {
			t.Fatalf("apply without data.b: %d %s", code, b)
		}
		var got struct {
			Metadata struct{ Annotations map[string]string }
			Data     map[string]string
		}
		if err := json.Unmarshal(b, &got); err != nil || got.Metadata.Annotations["example.com/note"] != "x" || got.Data["a"] != "1" || got.Data["b"] != "" {
			t.Errorf("an apply without data.b: annotations %v, data %v (%v); want the other manager's annotation kept, data.b gone", got.Metadata.Annotations, got.Data, err)
		}
	})

	// What a plan's field-level addon diff reads (kubestatus.FieldChanges
	// of the live object and a dry-run apply's answer): the same
	// configuration shows no change, whatever the API server defaulted;
	// a changed field shows alone; nothing is written.
	t.Run("a dry-run apply answers what the object would become, and writes nothing", func(t *testing.T) {
		path := "/api/v1/namespaces/" + c.Namespace + "/services/opke-contract-dryrun"
		// (Not the port: the API server defaults targetPort from it, the
		// stand-in defaults nothing.)
		svc := func(app string) string {
			return fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"opke-contract-dryrun","namespace":%q},
				"spec":{"selector":{"app":%q},"ports":[{"name":"web","port":80}]}}`, c.Namespace, app)
		}
		if code, b := do(t, http.MethodPatch, path+"?fieldManager=opke&force=true", "application/apply-patch+yaml", svc("none")); code/100 != 2 {
			t.Fatalf("apply a Service: %d %s", code, b)
		}
		defer do(t, http.MethodDelete, path, "", "")
		read := func(what string) []byte {
			code, b := do(t, http.MethodGet, path, "", "")
			if code != http.StatusOK {
				t.Fatalf("GET the Service %s: %d %s", what, code, b)
			}
			return b
		}
		live := read("applied")
		for _, step := range []struct {
			app  string
			want []string
		}{
			{"none", nil},
			{"other", []string{`spec.selector.app: "none" → "other"`}},
		} {
			code, b := do(t, http.MethodPatch, path+"?fieldManager=opke&force=true&dryRun=All", "application/apply-patch+yaml", svc(step.app))
			if code/100 != 2 {
				t.Fatalf("dry-run apply of app %s: %d %s", step.app, code, b)
			}
			got, err := kubestatus.FieldChanges(live, b)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, step.want) {
				t.Errorf("a dry run of app %s changes %q, want %q", step.app, got, step.want)
			}
		}
		if got, err := kubestatus.FieldChanges(live, read("after the dry runs")); err != nil || len(got) > 0 {
			t.Errorf("the dry runs wrote %q (%v)", got, err)
		}
		code, b := do(t, http.MethodPatch, path+"?fieldManager=opke&force=true&dryRun=Some", "application/apply-patch+yaml", svc("none"))
		failure(t, "a dry run of another value than All", code, b, http.StatusUnprocessableEntity, "Invalid")
	})

	// What an addon with custom resources needs: its definition applied,
	// then, once Established, its kind served (discovery, apply, GET);
	// the definition's deletion takes its objects.
	t.Run("a custom resource definition, once Established, serves its kind; its deletion deletes its objects", func(t *testing.T) {
		const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/contracttests.opke.dev"
		def := func(name string) string {
			return fmt.Sprintf(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":%q},
				"spec":{"group":"opke.dev","names":{"plural":"contracttests","singular":"contracttest","kind":"ContractTest","listKind":"ContractTestList"},
				"scope":"Namespaced","versions":[{"name":"v1","served":true,"storage":true,
				"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`, name)
		}
		code, b := do(t, http.MethodPatch, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/other.opke.dev?fieldManager=opke&force=true",
			"application/apply-patch+yaml", def("other.opke.dev"))
		failure(t, "a definition not named plural.group", code, b, http.StatusUnprocessableEntity, "Invalid")
		if code, b := do(t, http.MethodPatch, crdPath+"?fieldManager=opke&force=true", "application/apply-patch+yaml", def("contracttests.opke.dev")); code/100 != 2 {
			t.Fatalf("apply a definition: %d %s", code, b)
		}
		defer do(t, http.MethodDelete, crdPath, "", "")
		eventually := func(what string, ok func() (bool, string)) {
			t.Helper()
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
				done, last := ok()
				if done {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: not after a minute: %s", what, last)
				}
			}
		}
		eventually("the definition Established", func() (bool, string) {
			code, b := do(t, http.MethodGet, crdPath, "", "")
			est, err := kubestatus.Established(b)
			return code == http.StatusOK && err == nil && est, fmt.Sprintf("%d %v %.300s", code, err, b)
		})
		eventually("discovery serving ContractTest", func() (bool, string) {
			code, b := do(t, http.MethodGet, "/apis/opke.dev/v1", "", "")
			var list struct {
				Resources []struct {
					Name, Kind string
					Namespaced bool
				}
			}
			_ = json.Unmarshal(b, &list)
			return code == http.StatusOK && slices.ContainsFunc(list.Resources, func(r struct {
				Name, Kind string
				Namespaced bool
			}) bool {
				return r.Name == "contracttests" && r.Kind == "ContractTest" && r.Namespaced
			}), fmt.Sprintf("%d %.300s", code, b)
		})
		cr := "/apis/opke.dev/v1/namespaces/" + c.Namespace + "/contracttests/one"
		body := fmt.Sprintf(`{"apiVersion":"opke.dev/v1","kind":"ContractTest","metadata":{"name":"one","namespace":%q},"spec":{"a":"b"}}`, c.Namespace)
		eventually("a ContractTest applied", func() (bool, string) {
			code, b := do(t, http.MethodPatch, cr+"?fieldManager=opke&force=true", "application/apply-patch+yaml", body)
			return code/100 == 2, fmt.Sprintf("%d %.300s", code, b)
		})
		if code, b := do(t, http.MethodGet, cr, "", ""); code != http.StatusOK || !strings.Contains(string(b), `"a":"b"`) {
			t.Errorf("GET the ContractTest: %d %.300s", code, b)
		}
		if code, b := do(t, http.MethodDelete, crdPath, "", ""); code/100 != 2 {
			t.Fatalf("delete the definition: %d %s", code, b)
		}
		eventually("the ContractTest gone with its definition", func() (bool, string) {
			code, b := do(t, http.MethodGet, cr, "", "")
			return code == http.StatusNotFound, fmt.Sprintf("%d %.300s", code, b)
		})
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

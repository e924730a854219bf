package reconciler

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"opke.dev/opke/cloudsim/kubestub"
)

func TestParseManifest(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []string // refs
		err        bool
	}{
		{name: "empty", data: ""},
		{name: "two documents and an empty one", data: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-flannel\n---\n---\n" +
			"apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: kube-flannel-ds\n  namespace: kube-flannel\n",
			want: []string{"Namespace kube-flannel", "DaemonSet kube-flannel/kube-flannel-ds"}},
		{name: "comments only", data: "# nothing\n---\n# still nothing\n"},
		{name: "no kind", data: "apiVersion: v1\nmetadata:\n  name: x\n", err: true},
		{name: "no name", data: "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", err: true},
		{name: "not a map", data: "- a\n- b\n", err: true},
		{name: "bad YAML", data: "apiVersion: v1\nkind: [\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := parseManifest([]byte(tc.data))
			if tc.err {
				if !errors.Is(err, ErrManifest) {
					t.Fatalf("err %v, want ErrManifest", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.ref())
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("objects (-want +got):\n%s", d)
			}
		})
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: a}\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := parseManifest(data)
		if err != nil && !errors.Is(err, ErrManifest) {
			t.Fatalf("an error that is not ErrManifest: %v", err)
		}
		for _, o := range objs {
			if o.APIVersion == "" || o.Kind == "" || o.Name == "" || o.Body == nil {
				t.Fatalf("an object without a name: %+v", o)
			}
		}
	})
}

// TestInstallOrder: namespaces and definitions before what needs them,
// workloads after their accounts and services, webhooks last, a kind not
// known (a custom resource) after every known one; a kind's objects in
// the manifest's order.
func TestInstallOrder(t *testing.T) {
	in := []string{"Deployment a", "ValidatingWebhookConfiguration w", "Prometheus p", "Service s", "ServiceAccount sa",
		"CustomResourceDefinition crd", "Namespace ns", "Deployment b", "ClusterRole r", "ConfigMap cm"}
	var objs []object
	for _, s := range in {
		kind, name, _ := strings.Cut(s, " ")
		objs = append(objs, object{objectRef: objectRef{APIVersion: "v1", Kind: kind, Name: name}})
	}
	var got []string
	for _, o := range installOrder(objs) {
		got = append(got, o.Kind+" "+o.Name)
	}
	want := []string{"Namespace ns", "ServiceAccount sa", "ConfigMap cm", "CustomResourceDefinition crd", "ClusterRole r",
		"Service s", "Deployment a", "Deployment b", "ValidatingWebhookConfiguration w", "Prometheus p"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("install order (-want +got):\n%s", d)
	}
}

// TestObjectChanges: what a manifest's new version adds, changes and
// removes against the objects its last apply recorded.
func TestObjectChanges(t *testing.T) {
	obj := func(kind, name string, data string) object {
		return object{objectRef: objectRef{APIVersion: "v1", Kind: kind, Namespace: "kube-system", Name: name},
			Body: map[string]any{"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"name": name, "namespace": "kube-system"}, "data": data}}
	}
	rec := func(objs ...object) []recordedObject {
		var out []recordedObject
		for _, o := range objs {
			d, err := o.digest()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, recordedObject{objectRef: o.objectRef, SHA256: d})
		}
		return out
	}
	a, b, c := obj("ConfigMap", "a", "1"), obj("ConfigMap", "b", "1"), obj("Secret", "c", "1")
	for _, tc := range []struct {
		name string
		had  []recordedObject
		now  []object
		want []string
	}{
		{"no record", nil, []object{a}, nil},
		{"the same", rec(a, b), []object{a, b}, nil},
		{"one changed, one added, one removed", rec(a, c), []object{obj("ConfigMap", "a", "2"), b},
			[]string{"ConfigMap kube-system/a changed", "ConfigMap kube-system/b added", "Secret kube-system/c removed"}},
		{"recorded without digests", []recordedObject{{objectRef: a.objectRef}}, []object{obj("ConfigMap", "a", "2")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, err := objectChanges(tc.had, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("changes (-want +got):\n%s", d)
			}
			for i, o := range changed {
				if got[i] != o.ref()+" changed" {
					t.Errorf("object %s said changed at %d: %q", o.ref(), i, got[i])
				}
			}
			if n := strings.Count(strings.Join(got, "\n"), " changed"); n != len(changed) {
				t.Errorf("%d said changed, %d objects handed on", n, len(changed))
			}
		})
	}
}

// stubBackend holds a stand-in API server's objects for a test.
type stubBackend struct {
	mu   sync.Mutex
	objs kubestub.Objects
}

func (b *stubBackend) Nodes() []kubestub.Node { return nil }
func (b *stubBackend) Ready() error           { return nil }
func (b *stubBackend) View(fn func(*kubestub.Objects)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn(&b.objs)
}

func (b *stubBackend) Update(fn func(*kubestub.Objects) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fn(&b.objs)
}

// widgetDefinition is the custom resource definition of the test kind
// Widget (opke.dev/v1), of scope Cluster or Namespaced.
func widgetDefinition(scope string) string {
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.opke.dev}
spec:
  group: opke.dev
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  scope: ` + scope + `
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`
}

// TestApplyDefinitionsAloneWaits: a manifest of definitions alone
// (NN-NAME.crds.yaml) is applied once the API serves their kinds, so the
// manifest after it, with resources of those kinds, applies at once.
func TestApplyDefinitionsAloneWaits(t *testing.T) {
	t.Parallel()
	b := &stubBackend{}
	srv := httptest.NewServer(kubestub.Handler("v1.35.1", b))
	t.Cleanup(srv.Close)
	defs, err := parseManifest([]byte(widgetDefinition("Cluster")))
	if err != nil {
		t.Fatal(err)
	}
	widgets, err := parseManifest([]byte("apiVersion: opke.dev/v1\nkind: Widget\nmetadata: {name: one}\n"))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubeClient{base: srv.URL, http: srv.Client()}
	a := &Applier{GateInterval: 50 * time.Millisecond}
	poll := func(what string, check func() (error, error)) error { return a.pollUntil(t.Context(), what, check) }
	if _, err := applyObjects(t.Context(), k, defs, poll); err != nil {
		t.Fatal(err)
	}
	if _, err := applyObjects(t.Context(), k, widgets, poll); err != nil {
		t.Errorf("the Widget right after its definition's manifest: %v", err)
	}
}

// TestApplyObjectsWaitsForDefinitions: a manifest with a custom resource
// definition and a resource of its kind is applied in one go: the
// definition first (Helm's order), then, once the API serves its kind
// (Established, and in discovery, read again), the resource.
func TestApplyObjectsWaitsForDefinitions(t *testing.T) {
	t.Parallel()
	b := &stubBackend{}
	srv := httptest.NewServer(kubestub.Handler("v1.35.1", b))
	t.Cleanup(srv.Close)
	objs, err := parseManifest([]byte(`apiVersion: opke.dev/v1
kind: Widget
metadata: {name: one, namespace: demo}
spec: {size: 3}
---
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
` + widgetDefinition("Namespaced")))
	if err != nil {
		t.Fatal(err)
	}
	objs = installOrder(objs)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.Kind)
	}
	if d := cmp.Diff([]string{"Namespace", "CustomResourceDefinition", "Widget"}, kinds); d != "" {
		t.Fatalf("install order (-want +got):\n%s", d)
	}
	k := &kubeClient{base: srv.URL, http: srv.Client()}
	a := &Applier{GateInterval: 50 * time.Millisecond}
	poll := func(what string, check func() (error, error)) error { return a.pollUntil(t.Context(), what, check) }
	fields, err := applyObjects(t.Context(), k, objs, poll)
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) != 3 || fields[2] == "" {
		t.Errorf("field digests %q: want one for each object", fields)
	}
	var widget map[string]any
	b.View(func(o *kubestub.Objects) { err = json.Unmarshal(o.Applied["opke.dev/v1/widgets/demo/one"], &widget) })
	if err != nil || widget["spec"].(map[string]any)["size"] != float64(3) {
		t.Errorf("the Widget as applied: %v %v", widget, err)
	}
}

package kubestub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// resources is the discovery the stub serves: the kinds a rendered
// cluster's manifests hold, with the names and scopes kube-apiserver
// 1.35's discovery gives them (held to it by the real-host suite, which
// applies the same manifests to a real API server).
var resources = map[string][]metav1.APIResource{
	"v1": {
		{Name: "configmaps", Namespaced: true, Kind: "ConfigMap"},
		{Name: "namespaces", Namespaced: false, Kind: "Namespace"},
		{Name: "nodes", Namespaced: false, Kind: "Node"},
		{Name: "pods", Namespaced: true, Kind: "Pod"},
		{Name: "pods/eviction", Namespaced: true, Kind: "Eviction"},
		{Name: "secrets", Namespaced: true, Kind: "Secret"},
		{Name: "serviceaccounts", Namespaced: true, Kind: "ServiceAccount"},
		{Name: "services", Namespaced: true, Kind: "Service"},
	},
	"apps/v1": {
		{Name: "daemonsets", Namespaced: true, Kind: "DaemonSet"},
		{Name: "deployments", Namespaced: true, Kind: "Deployment"},
		{Name: "statefulsets", Namespaced: true, Kind: "StatefulSet"},
	},
	"rbac.authorization.k8s.io/v1": {
		{Name: "clusterrolebindings", Namespaced: false, Kind: "ClusterRoleBinding"},
		{Name: "clusterroles", Namespaced: false, Kind: "ClusterRole"},
		{Name: "rolebindings", Namespaced: true, Kind: "RoleBinding"},
		{Name: "roles", Namespaced: true, Kind: "Role"},
	},
	"storage.k8s.io/v1": {
		{Name: "csidrivers", Namespaced: false, Kind: "CSIDriver"},
		{Name: "storageclasses", Namespaced: false, Kind: "StorageClass"},
	},
	"networking.k8s.io/v1":      {{Name: "ingressclasses", Namespaced: false, Kind: "IngressClass"}},
	crdGV:                       {{Name: "customresourcedefinitions", Namespaced: false, Kind: "CustomResourceDefinition"}},
	"apiregistration.k8s.io/v1": {{Name: "apiservices", Namespaced: false, Kind: "APIService"}},
	"policy/v1":                 {{Name: "poddisruptionbudgets", Namespaced: true, Kind: "PodDisruptionBudget"}},
}

// builtinNamespaces exist in every cluster before anything is applied.
var builtinNamespaces = []string{"default", "kube-node-lease", "kube-public", "kube-system"}

// versions is the discovery root of the core group (GET /api).
func (h *handler) versions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}}})
}

// groups is the discovery root of the named groups (GET /apis), each at
// its one version.
func (h *handler) groups(w http.ResponseWriter, _ *http.Request) {
	list := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	byGroup := map[string]int{}
	for _, gv := range slices.Sorted(maps.Keys(h.served())) {
		g, v, ok := strings.Cut(gv, "/")
		if !ok {
			continue
		}
		ver := metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: v}
		if i, ok := byGroup[g]; ok {
			list.Groups[i].Versions = append(list.Groups[i].Versions, ver)
			continue
		}
		byGroup[g] = len(list.Groups)
		list.Groups = append(list.Groups, metav1.APIGroup{Name: g, Versions: []metav1.GroupVersionForDiscovery{ver}, PreferredVersion: ver})
	}
	writeJSON(w, http.StatusOK, list)
}

// served are the resources the API serves now, by group version.
func (h *handler) served() map[string][]metav1.APIResource {
	var out map[string][]metav1.APIResource
	h.b.View(func(o *Objects) { out = served(o) })
	return out
}

func (h *handler) discover(w http.ResponseWriter, r *http.Request) {
	gv := "v1"
	if g := r.PathValue("group"); g != "" {
		gv = g + "/" + r.PathValue("version")
	}
	list, ok := h.served()[gv]
	if !ok {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", nil)
		return
	}
	writeJSON(w, http.StatusOK, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv, APIResources: list})
}

// target is the object a request's path names.
type target struct {
	gv, namespace string
	res           metav1.APIResource
	name          string
	// establishing is a custom resource definition not established yet.
	establishing bool
}

func (t target) key() string {
	return strings.Join([]string{t.gv, t.res.Name, t.namespace, t.name}, "/")
}

// objectTarget reads the path: /api/v1[/namespaces/NS]/RESOURCE/NAME or
// /apis/GROUP/VERSION[/namespaces/NS]/RESOURCE/NAME. A resource the stub
// does not serve, or served at the wrong scope, is answered 404 here, and
// ok is false.
func (h *handler) objectTarget(w http.ResponseWriter, r *http.Request) (t target, ok bool) {
	t = target{gv: "v1", namespace: r.PathValue("ns"), name: r.PathValue("name")}
	if g := r.PathValue("group"); g != "" {
		t.gv = g + "/" + r.PathValue("version")
	}
	res := r.PathValue("resource")
	list := h.served()[t.gv]
	i := slices.IndexFunc(list, func(x metav1.APIResource) bool { return x.Name == res })
	if i < 0 || list[i].Namespaced != (t.namespace != "") {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", nil)
		return t, false
	}
	t.res = list[i]
	return t, true
}

// apply is a server-side apply (PATCH, application/apply-patch+yaml): the
// object is created or replaced by the applied one, whose fields its
// manager then owns (managed.go); with dryRun=All, the answer is what the
// object would become, and nothing is kept. As the real API
// server, it requires a field manager, an object whose kind and name are
// the path's, and an existing namespace.
func (h *handler) apply(w http.ResponseWriter, r *http.Request) {
	t, ok := h.objectTarget(w, r)
	if !ok {
		return
	}
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	if ct == "application/merge-patch+json" {
		h.mergePatch(w, r, t)
		return
	}
	if ct != "application/apply-patch+yaml" {
		writeStatus(w, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/apply-patch+yaml, application/merge-patch+json (OPKE's stub serves only these here, not %q)", ct), nil)
		return
	}
	if r.URL.Query().Get("fieldManager") == "" {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`, nil)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error(), nil)
		return
	}
	var obj map[string]any
	if err := yaml.Unmarshal(body, &obj); err != nil || obj == nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("error decoding YAML: %v", err), nil)
		return
	}
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	switch {
	case obj["apiVersion"] != t.gv || obj["kind"] != t.res.Kind:
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("the body's %v %v is not a %s of %s", obj["apiVersion"], obj["kind"], t.res.Kind, t.gv), nil)
		return
	case name != t.name:
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the name of the object ("+name+") does not match the name on the URL ("+t.name+")", nil)
		return
	case ns != "" && ns != t.namespace:
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the namespace of the provided object does not match the namespace sent on the request", nil)
		return
	}
	if t.res.Namespaced {
		md["namespace"] = t.namespace
	}
	delete(obj, "status") // an apply to the object sets no status
	if t.gv == crdGV {
		if err := checkCRD(obj); err != nil {
			writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error(), nil)
			return
		}
	}
	delete(md, "managedFields")
	manager := r.URL.Query().Get("fieldManager")
	dryRun := false
	switch v := r.URL.Query()["dryRun"]; {
	case len(v) == 0:
	case len(v) == 1 && v[0] == "All":
		dryRun = true
	default:
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(`PatchOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: %#v: supported values: "All"`, v), nil)
		return
	}
	created := false
	var data []byte
	var nodes []corev1.Node
	live := h.live()
	err = h.b.Update(func(o *Objects) error {
		if t.res.Namespaced && !slices.Contains(builtinNamespaces, t.namespace) {
			if _, ok := o.Applied["v1/namespaces//"+t.namespace]; !ok {
				return fmt.Errorf("namespaces %q not found", t.namespace)
			}
		}
		if o.Applied == nil {
			o.Applied = map[string]json.RawMessage{}
		}
		had, ok := o.Applied[t.key()]
		created = !ok
		var before map[string]any
		if ok {
			if err := json.Unmarshal(had, &before); err != nil {
				return err
			}
		}
		after, err := applied(before, obj, manager, time.Now())
		if err != nil {
			return fmt.Errorf("%w: %w", errBadPatch, err)
		}
		generation(had, after)
		if data, err = json.Marshal(after); err != nil {
			return err
		}
		if !dryRun {
			o.Applied[t.key()] = data
			if t.gv == crdGV && created {
				if o.Established == nil {
					o.Established = map[string]time.Time{}
				}
				o.Established[t.name] = time.Now().Add(establishDelay)
			}
		}
		t.establishing = establishing(o, t.gv, t.name)
		nodes = h.servedNodes(o, live)
		return nil
	})
	switch {
	case errors.Is(err, errBadPatch):
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error(), nil)
		return
	case err != nil:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, err.Error(), nil)
		return
	}
	// Answered as a GET would show it, as the API server answers.
	if data, err = objectStatus(t, data, nodes); err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error(), nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(map[bool]int{true: http.StatusCreated, false: http.StatusOK}[created])
	_, _ = w.Write(data)
}

// getApplied returns an object a server-side apply made.
func (h *handler) getApplied(w http.ResponseWriter, r *http.Request) {
	t, ok := h.objectTarget(w, r)
	if !ok {
		return
	}
	var data json.RawMessage
	var nodes []corev1.Node
	live := h.live()
	h.b.View(func(o *Objects) {
		if data = o.Applied[t.key()]; data != nil {
			nodes = h.servedNodes(o, live)
			t.establishing = establishing(o, t.gv, t.name)
		}
	})
	if data == nil {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("%s %q not found", t.res.Name, t.name),
			&metav1.StatusDetails{Name: t.name, Kind: t.res.Name})
		return
	}
	data, err := objectStatus(t, data, nodes)
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error(), nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// deleteApplied deletes an object a server-side apply made: 200 and the
// object, or 404 (held to a real API server by internal/kubecontract). A
// namespace takes its objects with it at once. Not modelled: the real API
// server keeps a deleted namespace Terminating while its namespace
// controller empties it, and refuses new content in it meanwhile (an
// addon removed and added back at once would see a 403 there).
func (h *handler) deleteApplied(w http.ResponseWriter, r *http.Request) {
	t, ok := h.objectTarget(w, r)
	if !ok {
		return
	}
	var data json.RawMessage
	err := h.b.Update(func(o *Objects) error {
		had, ok := o.Applied[t.key()]
		if !ok {
			return &notFound{t.res.Name, t.name}
		}
		data = had
		delete(o.Applied, t.key())
		if t.gv == crdGV {
			deleteCustomResources(o, had)
		}
		if t.gv == "v1" && t.res.Kind == "Namespace" {
			for k := range o.Applied {
				// gv/resource/namespace/name: a namespaced object's third part.
				if parts := strings.Split(k, "/"); len(parts) >= 4 && parts[len(parts)-2] == t.name {
					delete(o.Applied, k)
				}
			}
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, data)
}

// mergePatch is a JSON merge patch (RFC 7386) of an object a server-side
// apply made, as kubectl rollout restart sends one: an update, whose
// manager takes the fields it changes (managed.go). A change to the spec
// raises metadata.generation, as the real API server does for the
// workloads.
func (h *handler) mergePatch(w http.ResponseWriter, r *http.Request, t target) {
	patch, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error(), nil)
		return
	}
	manager := updateManager(r)
	var data []byte
	err = h.b.Update(func(o *Objects) error {
		had, ok := o.Applied[t.key()]
		if !ok {
			return &notFound{t.res.Name, t.name}
		}
		merged, err := jsonpatch.MergePatch(had, patch)
		if err != nil {
			return fmt.Errorf("%w: %w", errBadPatch, err)
		}
		var before, after map[string]any
		if err := json.Unmarshal(had, &before); err != nil {
			return err
		}
		if err := json.Unmarshal(merged, &after); err != nil {
			return err
		}
		generation(had, after)
		if err := updated(before, after, manager, time.Now()); err != nil {
			return err
		}
		if data, err = json.Marshal(after); err != nil {
			return err
		}
		o.Applied[t.key()] = data
		return nil
	})
	switch {
	case errors.Is(err, errBadPatch):
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error(), nil)
	case err != nil:
		writeError(w, err)
	default:
		writeJSON(w, http.StatusOK, json.RawMessage(data))
	}
}

// errBadPatch is a merge patch that is not one.
var errBadPatch = errors.New("the merge patch cannot be applied")

// listApplied lists, across namespaces, the objects of a resource that
// server-side applies made (GET /apis/GROUP/VERSION/RESOURCE).
func (h *handler) listApplied(w http.ResponseWriter, r *http.Request) {
	gv := r.PathValue("group") + "/" + r.PathValue("version")
	res := r.PathValue("resource")
	list := h.served()[gv]
	i := slices.IndexFunc(list, func(x metav1.APIResource) bool { return x.Name == res })
	if i < 0 {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", nil)
		return
	}
	prefix := gv + "/" + res + "/"
	items := []json.RawMessage{}
	var notYet []bool
	var nodes []corev1.Node
	live := h.live()
	h.b.View(func(o *Objects) {
		for _, k := range slices.Sorted(maps.Keys(o.Applied)) {
			if strings.HasPrefix(k, prefix) {
				items = append(items, o.Applied[k])
				notYet = append(notYet, establishing(o, gv, strings.TrimPrefix(k, prefix+"/")))
			}
		}
		nodes = h.servedNodes(o, live)
	})
	served := target{gv: gv, res: list[i]}
	for j, item := range items {
		var err error
		served.establishing = notYet[j]
		if items[j], err = objectStatus(served, item, nodes); err != nil {
			writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error(), nil)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"apiVersion": gv, "kind": list[i].Kind + "List", "metadata": map[string]any{}, "items": items})
}

// rootCA serves kube-root-ca.crt as the controller-manager publishes it
// in every namespace; 404 until one has.
func (h *handler) rootCA(w http.ResponseWriter, r *http.Request) {
	var ca string
	h.b.View(func(o *Objects) { ca = o.RootCA })
	if ca == "" {
		writeError(w, &notFound{"configmaps", "kube-root-ca.crt"})
		return
	}
	writeJSON(w, http.StatusOK, corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: r.PathValue("ns")}, Data: map[string]string{"ca.crt": ca}})
}

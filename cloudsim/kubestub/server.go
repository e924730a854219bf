package kubestub

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
)

// Backend is the cluster behind an API server: its nodes as the hosts are
// now, and the objects the API changes. The simulator implements it; the
// cluster's API servers share one.
type Backend interface {
	// Nodes lists the cluster's nodes.
	Nodes() []Node
	// View runs fn on the cluster's objects under the backend's lock; fn
	// must not change them.
	View(fn func(*Objects))
	// Update runs fn on the cluster's objects under the backend's lock and
	// keeps what fn changed, unless fn fails.
	Update(fn func(*Objects) error) error
	// Ready reports whether the API server's etcd answers.
	Ready() error
}

// Config is one API server.
type Config struct {
	Version     string // the gitVersion, "v1.35.1"
	Certificate tls.Certificate
	ClientCAs   *x509.CertPool
	Backend     Backend
	Logger      *slog.Logger
}

// Server is a running API server stub.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Serve answers on ln with TLS until Close. Clients must present a
// certificate from cfg.ClientCAs.
func Serve(ln net.Listener, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler: Handler(cfg.Version, cfg.Backend),
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cfg.Certificate},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    cfg.ClientCAs,
		},
		ReadHeaderTimeout: 10 * time.Second,
		// Refused handshakes are expected (bad certificates): debug only.
		ErrorLog: log.New(debugWriter{cfg.Logger}, "", 0),
	}
	s := &Server{ln: ln, srv: srv}
	go func() { _ = srv.Serve(tls.NewListener(ln, srv.TLSConfig)) }()
	return s
}

// Addr is where the server listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server and its connections.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return errors.Join(err, s.srv.Close())
	}
	return nil
}

type debugWriter struct{ log *slog.Logger }

func (w debugWriter) Write(b []byte) (int, error) {
	w.log.Debug("kube-apiserver stub", "msg", strings.TrimSpace(string(b)))
	return len(b), nil
}

// Handler serves the API of a cluster at gitVersion; Serve wraps it in TLS.
func Handler(gitVersion string, b Backend) http.Handler {
	h := &handler{version: gitVersion, b: b}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", h.ok)
	mux.HandleFunc("GET /healthz", h.ready)
	mux.HandleFunc("GET /readyz", h.ready)
	mux.HandleFunc("GET /version", h.versionInfo)
	mux.HandleFunc("GET /api/v1/nodes", h.listNodes)
	mux.HandleFunc("GET /api/v1/nodes/{name}", h.getNode)
	mux.HandleFunc("PATCH /api/v1/nodes/{name}", h.patchNode)
	mux.HandleFunc("DELETE /api/v1/nodes/{name}", h.deleteNode)
	mux.HandleFunc("GET /api/v1/pods", h.listPods)
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods", h.listPods)
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{name}", h.getPod)
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/pods/{name}/eviction", h.evict)
	mux.HandleFunc("GET /api", h.versions)
	mux.HandleFunc("GET /apis", h.groups)
	mux.HandleFunc("GET /api/v1", h.discover)
	mux.HandleFunc("GET /apis/{group}/{version}", h.discover)
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt", h.rootCA)
	mux.HandleFunc("GET /apis/{group}/{version}/{resource}", h.listApplied)
	for _, p := range []string{"/api/v1/{resource}/{name}", "/api/v1/namespaces/{ns}/{resource}/{name}",
		"/apis/{group}/{version}/{resource}/{name}", "/apis/{group}/{version}/namespaces/{ns}/{resource}/{name}"} {
		mux.HandleFunc("PATCH "+p, h.apply)
		mux.HandleFunc("GET "+p, h.getApplied)
		mux.HandleFunc("DELETE "+p, h.deleteApplied)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", nil)
	})
	return mux
}

type handler struct {
	version string
	b       Backend

	mu sync.Mutex
	// seen is when each node's host last ran, as this server saw it: a
	// node whose host went is Unknown since then, as the node lifecycle
	// controller marks it (after its grace period) when its kubelet
	// stops posting.
	seen map[string]time.Time
}

func (h *handler) ok(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
}

// ready fails as the real check does when etcd does not answer.
func (h *handler) ready(w http.ResponseWriter, r *http.Request) {
	if err := h.b.Ready(); err != nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, "[+]ping ok\n[-]etcd failed: reason withheld\n%s check failed\n", strings.TrimPrefix(r.URL.Path, "/"))
		return
	}
	h.ok(w, r)
}

func (h *handler) versionInfo(w http.ResponseWriter, _ *http.Request) {
	major, minor, _ := strings.Cut(strings.TrimPrefix(h.version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	writeJSON(w, http.StatusOK, version.Info{
		Major: major, Minor: minor, GitVersion: h.version, GitTreeState: "clean",
		GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH,
	})
}

func (h *handler) node(n Node, o *Objects) corev1.Node {
	ready, reason, message := corev1.ConditionFalse, "KubeletNotReady", ""
	switch {
	case n.gone:
		ready, reason, message = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
	case n.Ready:
		ready, reason = corev1.ConditionTrue, "KubeletReady"
	}
	var since metav1.Time
	if !n.Since.IsZero() {
		since = metav1.NewTime(n.Since)
	}
	// What a kubelet labels its node with, and what was applied to it.
	labels := map[string]string{"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux"}
	maps.Copy(labels, n.Labels)
	maps.Copy(labels, o.NodeLabels[n.Name])
	node := corev1.Node{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels, ManagedFields: o.NodeManaged[n.Name]},
		Spec:       corev1.NodeSpec{Unschedulable: o.Unschedulable[n.Name]},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: reason, Message: message, LastTransitionTime: since}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.InternalIP}, {Type: corev1.NodeHostName, Address: n.Name}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: n.KubeletVersion, OperatingSystem: "linux", Architecture: runtime.GOARCH},
		},
	}
	node.Spec.Taints = slices.Clone(n.Taints)
	if node.Spec.Unschedulable {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	}
	return node
}

func (h *handler) listNodes(w http.ResponseWriter, _ *http.Request) {
	list := corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, Items: []corev1.Node{}}
	live := h.live()
	h.b.View(func(o *Objects) {
		for _, name := range slices.Sorted(maps.Keys(o.Nodes)) {
			list.Items = append(list.Items, h.node(lookup(o, live, name), o))
		}
	})
	writeJSON(w, http.StatusOK, list)
}

// live are the nodes whose hosts run now, by name, and those that ran
// before, each with when its host was last seen running.
func (h *handler) live() map[string]Node {
	live := map[string]Node{}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[string]time.Time{}
	}
	for _, n := range h.b.Nodes() {
		live[n.Name] = n
		h.seen[n.Name] = now
	}
	for name, at := range h.seen {
		if _, ok := live[name]; !ok {
			live[name] = Node{Name: name, gone: true, Since: at}
		}
	}
	return live
}

// lookup is a registered node as the API shows it: as its host runs now,
// or, with its host gone, as it last registered, Unknown since its host
// was last seen (if it was).
func lookup(o *Objects, live map[string]Node, name string) Node {
	if n, ok := live[name]; ok && !n.gone {
		return n
	}
	n := o.Nodes[name]
	n.gone, n.Since = true, live[name].Since
	return n
}

func (h *handler) findNode(name string) (Node, error) {
	live := h.live()
	var n Node
	var err error
	h.b.View(func(o *Objects) {
		if _, ok := o.Nodes[name]; !ok {
			err = &notFound{"nodes", name}
			return
		}
		n = lookup(o, live, name)
	})
	return n, err
}

// deleteNode deletes a Node object; a kubelet that still runs registers
// it again only when it starts again.
func (h *handler) deleteNode(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := h.b.Update(func(o *Objects) error { return o.DeleteNode(name) }); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess,
		Details: &metav1.StatusDetails{Name: name, Kind: "nodes"},
	})
}

func (h *handler) getNode(w http.ResponseWriter, r *http.Request) {
	n, err := h.findNode(r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	var out corev1.Node
	h.b.View(func(o *Objects) { out = h.node(n, o) })
	writeJSON(w, http.StatusOK, out)
}

// nodeLabelsApply reads a server-side apply of a node's labels: a Node
// with metadata.labels and nothing else set.
func nodeLabelsApply(body []byte) (map[string]string, bool) {
	var obj struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec map[string]any `yaml:"spec"`
	}
	if err := yaml.Unmarshal(body, &obj); err != nil || obj.Kind != "Node" || obj.Metadata.Labels == nil || obj.Spec != nil {
		return nil, false
	}
	return obj.Metadata.Labels, true
}

// applyNodeLabels keeps the labels a server-side apply gives a node, as
// the field manager's: the set replaces the one it applied before.
func (h *handler) applyNodeLabels(w http.ResponseWriter, r *http.Request, n Node, labels map[string]string) {
	if r.URL.Query().Get("fieldManager") == "" {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`, nil)
		return
	}
	var out corev1.Node
	err := h.b.Update(func(o *Objects) error {
		if o.NodeLabels == nil {
			o.NodeLabels = map[string]map[string]string{}
		}
		if o.NodeManaged == nil {
			o.NodeManaged = map[string][]metav1.ManagedFieldsEntry{}
		}
		// The node's labels OPKE's applies keep, applied as an object's.
		before := map[string]any{"apiVersion": "v1", "metadata": map[string]any{"labels": anyMap(o.NodeLabels[n.Name]), "managedFields": o.NodeManaged[n.Name]}}
		config := map[string]any{"apiVersion": "v1", "metadata": map[string]any{"labels": anyMap(labels)}}
		after, err := applied(normalise(before).(map[string]any), config, r.URL.Query().Get("fieldManager"), time.Now())
		if err != nil {
			return err
		}
		entries, err := readManaged(after)
		if err != nil {
			return err
		}
		o.NodeManaged[n.Name] = nil
		for _, e := range entries {
			o.NodeManaged[n.Name] = append(o.NodeManaged[n.Name], e.ManagedFieldsEntry)
		}
		kept := map[string]string{}
		md, _ := after["metadata"].(map[string]any)
		l, _ := md["labels"].(map[string]any)
		for k, v := range l {
			kept[k], _ = v.(string)
		}
		o.NodeLabels[n.Name] = kept
		out = h.node(n, o)
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// patchNode honours spec.unschedulable only; a patch of anything else is
// refused, so a client relying on more than the stub models finds out.
func (h *handler) patchNode(w http.ResponseWriter, r *http.Request) {
	n, err := h.findNode(r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error(), nil)
		return
	}
	if ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); ct == "application/apply-patch+yaml" {
		if labels, ok := nodeLabelsApply(body); ok {
			h.applyNodeLabels(w, r, n, labels)
			return
		}
	}
	value, err := unschedulablePatch(r.Header.Get("Content-Type"), body)
	if err != nil {
		code, reason := http.StatusUnprocessableEntity, metav1.StatusReasonInvalid
		if errors.Is(err, errMediaType) {
			code, reason = http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType
		}
		writeStatus(w, code, reason, err.Error(), nil)
		return
	}
	var out corev1.Node
	err = h.b.Update(func(o *Objects) error {
		if o.Unschedulable == nil {
			o.Unschedulable = map[string]bool{}
		}
		if value {
			o.Unschedulable[n.Name] = true
		} else {
			delete(o.Unschedulable, n.Name)
		}
		out = h.node(n, o)
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

var errMediaType = errors.New("unsupported patch type")

// unschedulablePatch reads the value a patch gives spec.unschedulable.
func unschedulablePatch(contentType string, body []byte) (bool, error) {
	mt, _, _ := strings.Cut(contentType, ";")
	switch strings.TrimSpace(mt) {
	case "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml":
		var p map[string]json.RawMessage
		if err := json.Unmarshal(body, &p); err != nil {
			return false, fmt.Errorf("patch: %w", err)
		}
		var spec map[string]*bool
		if err := json.Unmarshal(p["spec"], &spec); err != nil || len(p) != 1 || len(spec) != 1 {
			return false, errors.New("the stub patches spec.unschedulable only")
		}
		v, ok := spec["unschedulable"]
		if !ok {
			return false, errors.New("the stub patches spec.unschedulable only")
		}
		return v != nil && *v, nil
	case "application/json-patch+json":
		var ops []struct {
			Op    string `json:"op"`
			Path  string `json:"path"`
			Value *bool  `json:"value"`
		}
		if err := json.Unmarshal(body, &ops); err != nil {
			return false, fmt.Errorf("patch: %w", err)
		}
		if len(ops) != 1 || ops[0].Path != "/spec/unschedulable" {
			return false, errors.New("the stub patches spec.unschedulable only")
		}
		switch ops[0].Op {
		case "add", "replace":
			return ops[0].Value != nil && *ops[0].Value, nil
		case "remove":
			return false, nil
		}
		return false, fmt.Errorf("patch op %q on spec.unschedulable", ops[0].Op)
	}
	return false, fmt.Errorf("%w: %q", errMediaType, contentType)
}

func pod(p Pod) corev1.Pod {
	out := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels},
		Spec:       corev1.PodSpec{NodeName: p.Node},
		Status:     corev1.PodStatus{Phase: corev1.PodPhase(cmp.Or(p.Phase, string(corev1.PodRunning)))},
	}
	if kind, name, ok := strings.Cut(p.Owner, "/"); ok {
		apiVersion := "apps/v1"
		controller := true
		out.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: &controller}}
	}
	if p.Mirror {
		out.Annotations = maps.Clone(p.Annotations)
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[corev1.MirrorPodAnnotationKey] = "mirror-of-" + p.Name
		out.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: p.Node, UID: types.UID("uid-" + p.Node)}}
	}
	for _, c := range p.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image, Command: c.Command})
	}
	if out.Status.Phase == corev1.PodRunning {
		out.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	if p.Terminating {
		now := metav1.Now()
		out.DeletionTimestamp = &now
	}
	return out
}

// listPods honours the one field selector drain uses: spec.nodeName=NODE.
func (h *handler) listPods(w http.ResponseWriter, r *http.Request) {
	node := ""
	if fs := r.URL.Query().Get("fieldSelector"); fs != "" {
		v, ok := strings.CutPrefix(fs, "spec.nodeName=")
		if !ok || strings.Contains(v, ",") {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
				fmt.Sprintf("the stub selects pods by spec.nodeName only, not %q", fs), nil)
			return
		}
		node = v
	}
	ns := r.PathValue("ns")
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []corev1.Pod{}}
	h.b.View(func(o *Objects) {
		for _, p := range o.PodsOn(node) {
			if ns == "" || p.Namespace == ns {
				list.Items = append(list.Items, pod(p))
			}
		}
	})
	writeJSON(w, http.StatusOK, list)
}

func (h *handler) getPod(w http.ResponseWriter, r *http.Request) {
	var p Pod
	var err error
	h.b.View(func(o *Objects) { p, err = o.Pod(r.PathValue("ns"), r.PathValue("name")) })
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, pod(p))
}

func (h *handler) evict(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	var ev policyv1.Eviction
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&ev); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("eviction: %v", err), nil)
		return
	}
	if ev.Name != name || ev.Namespace != "" && ev.Namespace != ns {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			fmt.Sprintf("name in URL does not match name in Eviction object: %s/%s", ev.Namespace, ev.Name), nil)
		return
	}
	err := h.b.Update(func(o *Objects) error { return o.Evict(ns, name) })
	var be *BudgetError
	switch {
	case errors.As(err, &be):
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			"Cannot evict pod as it would violate the pod's disruption budget.",
			&metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: be.Error()}}})
	case err != nil:
		writeError(w, err)
	default:
		writeJSON(w, http.StatusCreated, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusSuccess, Code: http.StatusCreated})
	}
}

func writeError(w http.ResponseWriter, err error) {
	if nf, ok := errors.AsType[*notFound](err); ok {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, nf.Error(), &metav1.StatusDetails{Name: nf.name, Kind: nf.resource})
		return
	}
	writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error(), nil)
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string, details *metav1.StatusDetails) {
	writeJSON(w, code, metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Details: details, Code: int32(code),
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// anyMap is a label map as a decoded object holds it.
func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

package reconciler

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/kubestatus"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// ErrManifest is a manifest the API refused, or one that is not a list of
// Kubernetes objects.
var ErrManifest = errors.New("manifest not applied")

// errNotRegistered is a node its kubelet has not registered yet: the
// apply waits for it.
var errNotRegistered = errors.New("not registered yet")

// fieldManager is the name OPKE's server-side applies own fields under.
const fieldManager = "opke"

// objectRef names an API object: what a manifest's apply records, and
// what OPKE deletes when no manifest holds it any more.
type objectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// ref is how errors and logs name an object.
func (o objectRef) ref() string {
	if o.Namespace != "" {
		return o.Kind + " " + o.Namespace + "/" + o.Name
	}
	return o.Kind + " " + o.Name
}

// object is one API object of a manifest, as sent.
type object struct {
	objectRef
	Body map[string]any
}

// digest is the sha256 of the object as sent (its JSON, keys sorted).
func (o object) digest() (string, error) {
	b, err := json.Marshal(o.Body)
	if err != nil {
		return "", fmt.Errorf("%s: %w", o.ref(), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// objectChanges says what applying objs changes in the objects a manifest
// applied before (rec, in its recorded order), for the plan: each object
// added, changed (its digest differs) or removed, in the manifest's
// order, the removed last; and, by their index in what it says, the
// objects said changed. Nothing when nothing was recorded; an object
// recorded without a digest (before OPKE kept them) is not said changed.
func objectChanges(rec []recordedObject, objs []object) ([]string, map[int]object, error) {
	if rec == nil {
		return nil, nil, nil
	}
	had := make(map[objectRef]string, len(rec))
	for _, r := range rec {
		had[r.objectRef] = r.SHA256
	}
	var out []string
	changed := map[int]object{}
	now := make(map[objectRef]bool, len(objs))
	for _, o := range objs {
		now[o.objectRef] = true
		d, err := o.digest()
		if err != nil {
			return nil, nil, err
		}
		switch was, ok := had[o.objectRef]; {
		case !ok:
			out = append(out, o.ref()+" added")
		case was != "" && was != d:
			changed[len(out)] = o
			out = append(out, o.ref()+" changed")
		}
	}
	for _, r := range rec {
		if !now[r.objectRef] {
			out = append(out, r.ref()+" removed")
		}
	}
	return out, changed, nil
}

// parseManifest reads the YAML documents of a manifest: each names its
// apiVersion, kind and metadata.name; empty documents are skipped.
func parseManifest(data []byte) ([]object, error) {
	var out []object
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 1; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %w", ErrManifest, i, err)
		}
		if doc == nil {
			continue
		}
		o := object{Body: doc}
		o.APIVersion, _ = doc["apiVersion"].(string)
		o.Kind, _ = doc["kind"].(string)
		if md, ok := doc["metadata"].(map[string]any); ok {
			o.Name, _ = md["name"].(string)
			o.Namespace, _ = md["namespace"].(string)
		}
		if o.APIVersion == "" || o.Kind == "" || o.Name == "" {
			return nil, fmt.Errorf("%w: document %d has no apiVersion, kind or metadata.name", ErrManifest, i)
		}
		out = append(out, o)
	}
}

// apiResource is what discovery says of a kind.
type apiResource struct {
	Name       string `json:"name"`
	Namespaced bool   `json:"namespaced"`
	Kind       string `json:"kind"`
}

// discovery finds the resource of a kind from the API's discovery
// documents, each group version read once.
type discovery struct {
	do     apiRequest
	groups map[string][]apiResource
}

// apiRequest sends one request to a cluster's API (kubeClient.do, a
// controller's; apiAt.api, the first that answers).
type apiRequest func(ctx context.Context, method, path, contentType string, body, out any) (int, []byte, error)

func newDiscovery(do apiRequest) *discovery {
	return &discovery{do: do, groups: map[string][]apiResource{}}
}

func (d *discovery) resource(ctx context.Context, apiVersion, kind string) (apiResource, string, error) {
	prefix := "/apis/" + apiVersion
	if !strings.Contains(apiVersion, "/") {
		prefix = "/api/" + apiVersion
	}
	list, ok := d.groups[apiVersion]
	if !ok {
		var doc struct {
			Resources []apiResource `json:"resources"`
		}
		code, body, err := d.do(ctx, http.MethodGet, prefix, "", nil, &doc)
		switch {
		case err != nil:
			return apiResource{}, "", err
		case code == http.StatusNotFound:
			return apiResource{}, "", fmt.Errorf("%w: the API serves no %s", ErrManifest, apiVersion)
		case code != http.StatusOK:
			return apiResource{}, "", fmt.Errorf("discovery of %s: %d %s", apiVersion, code, firstLine(body))
		}
		list = doc.Resources
		d.groups[apiVersion] = list
	}
	for _, r := range list {
		if r.Kind == kind && !strings.Contains(r.Name, "/") {
			return r, prefix, nil
		}
	}
	return apiResource{}, "", fmt.Errorf("%w: %s serves no kind %s", ErrManifest, apiVersion, kind)
}

// path is the API path of the object o names.
func (d *discovery) path(ctx context.Context, o objectRef) (string, error) {
	r, prefix, err := d.resource(ctx, o.APIVersion, o.Kind)
	if err != nil {
		return "", err
	}
	path := prefix
	if r.Namespaced {
		path += "/namespaces/" + url.PathEscape(cmp.Or(o.Namespace, "default"))
	}
	return path + "/" + r.Name + "/" + url.PathEscape(o.Name), nil
}

// applyObjects sends each object with a server-side apply that takes
// ownership of the fields it sets (force), in the manifest's order, and
// returns the digest of the field set OPKE owns in each once applied
// (kubestatus.Fields), in objs' order. What it waits for (the definitions
// it applied to be served) it waits with poll (Applier.pollUntil).
func applyObjects(ctx context.Context, k *kubeClient, objs []object, poll pollFunc) ([]string, error) {
	d := newDiscovery(k.do)
	fields := make([]string, len(objs))
	var defs []object // definitions applied, not yet seen established
	for i, o := range objs {
		if len(defs) > 0 && !isDefinition(o.objectRef) {
			// What follows may be of their kinds: the API serves them
			// once established, and discovery is read again.
			if err := waitEstablished(ctx, k, defs, poll); err != nil {
				return nil, err
			}
			defs, d = nil, newDiscovery(k.do)
		}
		if isDefinition(o.objectRef) {
			defs = append(defs, o)
		}
		path, err := d.path(ctx, o.objectRef)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.ref(), err)
		}
		// A node is its kubelet's to create: OPKE only labels one that
		// registered, and waits for it.
		if o.APIVersion == "v1" && o.Kind == "Node" {
			code, body, err := k.do(ctx, http.MethodGet, path, "", nil, nil)
			switch {
			case err != nil:
				return nil, fmt.Errorf("%s: %w", o.ref(), err)
			case code == http.StatusNotFound:
				return nil, fmt.Errorf("%s: %w", o.ref(), errNotRegistered)
			case code != http.StatusOK:
				return nil, fmt.Errorf("%s: %d %s", o.ref(), code, statusMessage(body))
			}
		}
		path += "?fieldManager=" + fieldManager + "&force=true"
		code, body, err := k.do(ctx, http.MethodPatch, path, "application/apply-patch+yaml", o.Body, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.ref(), err)
		}
		if code/100 != 2 {
			return nil, fmt.Errorf("%w: %s: %d %s", ErrManifest, o.ref(), code, statusMessage(body))
		}
		if fields[i], err = kubestatus.Fields(body, fieldManager); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrManifest, o.ref(), err)
		}
	}
	// A manifest of definitions alone (NN-NAME.crds.yaml) is applied once
	// they are served, for the manifest after it.
	if len(defs) > 0 {
		if err := waitEstablished(ctx, k, defs, poll); err != nil {
			return nil, err
		}
	}
	return fields, nil
}

// isDefinition reports whether o is a CustomResourceDefinition.
func isDefinition(o objectRef) bool {
	return o.APIVersion == "apiextensions.k8s.io/v1" && o.Kind == "CustomResourceDefinition"
}

// pollFunc waits until check says nothing is pending, as
// Applier.pollUntil does.
type pollFunc func(what string, check func() (pending, err error)) error

// waitEstablished waits until each definition of defs is Established and
// discovery lists its kind at each version it serves.
func waitEstablished(ctx context.Context, k *kubeClient, defs []object, poll pollFunc) error {
	type served struct{ ref, path, gv, plural string }
	var want []served
	for _, o := range defs {
		var def struct {
			Spec struct {
				Group string
				Names struct{ Plural string }
				// Versions of the definition; those served are listed.
				Versions []struct {
					Name   string
					Served bool
				}
			}
		}
		b, err := json.Marshal(o.Body)
		if err == nil {
			err = json.Unmarshal(b, &def)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrManifest, o.ref(), err)
		}
		path := "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + url.PathEscape(o.Name)
		for _, v := range def.Spec.Versions {
			if v.Served {
				want = append(want, served{o.ref(), path, def.Spec.Group + "/" + v.Name, def.Spec.Names.Plural})
			}
		}
	}
	return poll("the custom resource definitions to be served", func() (error, error) {
		for _, w := range want {
			code, body, err := k.do(ctx, http.MethodGet, w.path, "", nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w.ref, err)
			}
			if est, err := kubestatus.Established(body); code != http.StatusOK || err != nil || !est {
				return errors.New(w.ref + " is not Established"), nil
			}
			var list struct {
				Resources []apiResource `json:"resources"`
			}
			code, _, err = k.do(ctx, http.MethodGet, "/apis/"+w.gv, "", nil, &list)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w.ref, err)
			}
			if code != http.StatusOK || !slices.ContainsFunc(list.Resources, func(r apiResource) bool { return r.Name == w.plural }) {
				return errors.New("discovery does not list " + w.plural + " in " + w.gv + " yet"), nil
			}
		}
		return nil, nil
	})
}

// deleteObjects deletes the objects refs name, last first (a workload
// before the account and the role it runs with, a namespace last), its
// dependents in the background as kubectl delete does. An object already
// gone, or of a kind the API no longer serves, is done.
func deleteObjects(ctx context.Context, k *kubeClient, refs []objectRef) error {
	d := newDiscovery(k.do)
	for _, o := range slices.Backward(refs) {
		path, err := d.path(ctx, o)
		if errors.Is(err, ErrManifest) {
			continue
		}
		if err != nil {
			return fmt.Errorf("delete %s: %w", o.ref(), err)
		}
		code, body, err := k.do(ctx, http.MethodDelete, path+"?propagationPolicy=Background", "", nil, nil)
		switch {
		case err != nil:
			return fmt.Errorf("delete %s: %w", o.ref(), err)
		case code == http.StatusNotFound, code/100 == 2:
		default:
			return fmt.Errorf("%w: delete %s: %d %s", ErrManifest, o.ref(), code, statusMessage(body))
		}
	}
	return nil
}

// statusMessage is a Status body's message, or its first line.
func statusMessage(body []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return st.Message
	}
	return firstLine(body)
}

// applyManifest applies one of the cluster's manifests through the first
// controller's API server that is ready, waiting for one up to the gate
// timeout (a new cluster's API comes up after its controllers' restarts),
// then records it in the ledger. Applying again is harmless: a
// server-side apply of the same objects changes nothing.
func (h hostStep) applyManifest(ctx context.Context, c diff.Change) error {
	a := h.a
	name := c.Address.Name
	var data []byte
	var sum string
	var found bool
	for _, host := range controllerNames(h.t) {
		if f, ok := h.files[host][assets.PathAddons+"/"+name]; ok {
			data, sum, found = f.Data, f.SHA256, true
			if err := consistent(c, f.SHA256); err != nil {
				return err
			}
			break
		}
	}
	if !found {
		return fmt.Errorf("%s: not in the render", c.Address)
	}
	objs, err := parseManifest(data)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	objs = installOrder(objs)
	// What the manifest applied before and no manifest holds now goes
	// once the new objects are in (an object moved to another manifest
	// stays).
	had, err := manifestObjects(ctx, h.j.w, c.Cluster, name)
	if err != nil {
		return err
	}
	stale, err := h.stale(had)
	if err != nil {
		return err
	}
	var fields []string
	err = h.withAPI(ctx, c, name, func(k *kubeClient) error {
		var err error
		poll := func(what string, check func() (error, error)) error { return h.a.pollUntil(ctx, name+": "+what, check) }
		if fields, err = applyObjects(ctx, k, objs, poll); err != nil {
			return err
		}
		return deleteObjects(ctx, k, stale)
	})
	if err != nil {
		return err
	}
	// Recorded only once its workloads rolled out: a manifest whose pods
	// never come up is applied and waited for again by the next plan.
	start := time.Now()
	if err := h.waitRolledOut(ctx, name, objs); err != nil {
		return err
	}
	if err := h.j.hook("applied " + c.Address.String()); err != nil {
		return err
	}
	a.log().Info("manifest applied", "cluster", c.Cluster, "manifest", name, "objects", len(objs), "pruned", len(stale),
		"rollout", time.Since(start).Round(time.Millisecond))
	// The objects first: a crash before the manifest's record applies it
	// again, and prunes nothing it did not already.
	if err := recordManifestObjects(ctx, h.j.w, c.Cluster, name, objs, fields); err != nil {
		return err
	}
	return recordManifest(ctx, h.j.w, c.Cluster, name, sum)
}

// installOrder sorts a manifest's objects as Helm installs a chart's
// (pkg/release/util/kind_sorter.go): namespaces, then what pods need
// (accounts, secrets, config, storage, custom resource definitions,
// roles), then services and workloads, then what calls into them (API
// services, webhooks); kinds it does not know last, custom resources
// among them. Objects of a kind keep the manifest's order.
func installOrder(objs []object) []object {
	rank := func(o object) int {
		if i := slices.Index(kindOrder, o.Kind); i >= 0 {
			return i
		}
		return len(kindOrder)
	}
	out := slices.Clone(objs)
	slices.SortStableFunc(out, func(a, b object) int { return cmp.Compare(rank(a), rank(b)) })
	return out
}

// kindOrder is Helm's InstallOrder.
var kindOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
	"PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
	"PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList",
	"ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
	"Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler",
	"StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService", "MutatingWebhookConfiguration",
	"ValidatingWebhookConfiguration",
}

// waitRolledOut waits, up to the gate timeout, until every Deployment,
// DaemonSet and StatefulSet of objs has rolled out as kubectl rollout
// status reads it (internal/kubestatus; a DaemonSet's pods on nodes that
// are not Ready are not waited for). A rollout that cannot finish (a
// Deployment past its progress deadline) fails at once.
func (h hostStep) waitRolledOut(ctx context.Context, name string, objs []object) error {
	type workload struct{ ref, path, kind string }
	var workloads []workload
	daemons := false
	for _, o := range objs {
		if path, ok := kubestatus.Path(o.APIVersion, o.Kind, cmp.Or(o.Namespace, "default"), o.Name); ok {
			workloads = append(workloads, workload{o.ref(), path, o.Kind})
			daemons = daemons || o.Kind == "DaemonSet"
		}
	}
	if len(workloads) == 0 {
		return nil
	}
	return h.a.pollUntil(ctx, name+": its workloads to roll out", func() (error, error) {
		var left []string
		err := h.onAPI(ctx, func(k *kubeClient) error {
			left = left[:0]
			notReady := 0
			if daemons {
				code, body, err := k.do(ctx, http.MethodGet, "/api/v1/nodes", "", nil, nil)
				switch {
				case err != nil:
					return fmt.Errorf("list nodes: %w", err)
				case code != http.StatusOK:
					return fmt.Errorf("list nodes: %d %s", code, statusMessage(body))
				}
				if notReady, err = kubestatus.NotReady(body); err != nil {
					return err
				}
			}
			for _, w := range workloads {
				code, body, err := k.do(ctx, http.MethodGet, w.path, "", nil, nil)
				switch {
				case err != nil:
					return fmt.Errorf("%s: %w", w.ref, err)
				case code == http.StatusNotFound:
					left = append(left, w.ref+": not found")
					continue
				case code != http.StatusOK:
					return fmt.Errorf("%s: %d %s", w.ref, code, statusMessage(body))
				}
				done, why, err := kubestatus.RolledOut(w.kind, body, notReady)
				if err != nil {
					return fmt.Errorf("%w: %s: %w", ErrManifest, w.ref, err)
				}
				if !done {
					left = append(left, w.ref+": "+why)
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, ErrManifest):
			return nil, fmt.Errorf("%s: %w", name, err)
		case err != nil:
			return err, nil // no API server ready: wait on
		case len(left) > 0:
			return errors.New(strings.Join(left, "; ")), nil
		}
		return nil, nil
	})
}

// ObjectDrift asks the cluster's API, through the gateway as admin, for
// each object of recorded (by manifest) and returns, by manifest, what
// changed outside OPKE: an object it no longer has (deleted, or of a kind
// it no longer serves), and one whose fields OPKE applied are no longer
// all OPKE's (another field manager changed or removed some: kubectl edit,
// kubectl scale, another controller). One GET per object.
func (h *HostSessions) ObjectDrift(ctx context.Context, t HostTarget, recorded map[string][]recordedObject) (map[string][]string, error) {
	c, err := h.asAdmin(ctx, t)
	if err != nil {
		return nil, err
	}
	defer c.close()
	d := newDiscovery(c.api)
	out := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(recorded)) {
		for _, o := range recorded[name] {
			body, err := liveObject(ctx, c.api, d, o.objectRef)
			switch {
			case err != nil:
				return nil, err
			case body == nil:
				out[name] = append(out[name], o.ref()+" deleted")
				continue
			case o.Fields == "":
				continue // recorded before OPKE kept its fields
			}
			fields, err := kubestatus.Fields(body, fieldManager)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", o.ref(), err)
			}
			if fields == o.Fields {
				continue
			}
			others, err := kubestatus.Managers(body, fieldManager) // read only when drifted
			if err != nil {
				return nil, fmt.Errorf("%s: %w", o.ref(), err)
			}
			out[name] = append(out[name], fmt.Sprintf("%s changed (its other field managers: %s)", o.ref(), managersSaid(others)))
		}
	}
	return out, nil
}

// managersSaid names an object's other field managers and the fields each
// owns, up to maxFieldsTold each: who changed what OPKE applied is among
// them ("kubectl-edit: .spec.replicas").
func managersSaid(others []kubestatus.Manager) string {
	if len(others) == 0 {
		return "none"
	}
	var parts []string
	for _, m := range others {
		parts = append(parts, m.Name+": "+upTo(m.Fields, ", "))
	}
	return strings.Join(parts, "; ")
}

// upTo joins the first maxFieldsTold of fields with sep, and says how many
// more there are.
func upTo(fields []string, sep string) string {
	told := fields[:min(len(fields), maxFieldsTold)]
	s := strings.Join(told, sep)
	if len(fields) > len(told) {
		s += fmt.Sprintf("%sand %d more", sep, len(fields)-len(told))
	}
	return s
}

// FieldChanges asks the cluster's API, through the gateway as admin, what
// applying each of objs would change in the object it has, as kubectl diff
// does: a dry-run server-side apply (dryRun=All: nothing is written) read
// against the live object (kubestatus.FieldChanges). An object the API does not have,
// or of a kind it does not serve, is left out. Two requests per object.
func (h *HostSessions) FieldChanges(ctx context.Context, t HostTarget, objs []object) (map[objectRef][]string, error) {
	c, err := h.asAdmin(ctx, t)
	if err != nil {
		return nil, err
	}
	defer c.close()
	d := newDiscovery(c.api)
	out := map[objectRef][]string{}
	for _, o := range objs {
		live, err := liveObject(ctx, c.api, d, o.objectRef)
		if err != nil {
			return nil, err
		}
		if live == nil {
			continue
		}
		path, err := d.path(ctx, o.objectRef) // read by liveObject: no request
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.ref(), err)
		}
		code, after, err := c.api(ctx, http.MethodPatch, path+"?fieldManager="+fieldManager+"&force=true&dryRun=All", "application/apply-patch+yaml", o.Body, nil)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s: dry run: %w", o.ref(), err)
		case code/100 != 2:
			return nil, fmt.Errorf("%s: dry run: %d %s", o.ref(), code, statusMessage(after))
		}
		if out[o.objectRef], err = kubestatus.FieldChanges(live, after); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ref(), err)
		}
	}
	return out, nil
}

// liveObject is the object o names as the API has it, nil when it has
// none: deleted, or of a kind it does not serve.
func liveObject(ctx context.Context, api apiRequest, d *discovery, o objectRef) ([]byte, error) {
	path, err := d.path(ctx, o)
	if errors.Is(err, ErrManifest) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.ref(), err)
	}
	code, body, err := api(ctx, http.MethodGet, path, "", nil, nil)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", o.ref(), err)
	case code == http.StatusNotFound:
		return nil, nil
	case code != http.StatusOK:
		return nil, fmt.Errorf("%s: %d %s", o.ref(), code, statusMessage(body))
	}
	return body, nil
}

// maxFieldsTold is how many changed fields a plan names per object.
const maxFieldsTold = 6

// fieldChangesTimeout bounds what a plan waits for a cluster's API to say
// what a changed manifest's apply changes: a cluster out of reach costs
// its plan no more (the plan says which objects change, not which fields).
const fieldChangesTimeout = 20 * time.Second

// tellFieldChanges adds to each object a changed manifest's apply changes
// (pl.changed, from tellObjectChanges: "DaemonSet kube-system/kube-proxy
// changed") the fields it changes in the cluster, from a dry run on its
// API ("... changed: spec.template.spec.containers[kube-proxy].image:
// "..." → "..."). An API that does not answer leaves the plan as it was
// (logged).
func (p *Planner) tellFieldChanges(ctx context.Context, pl *Planned, clients *cloud.Clients) {
	cluster := pl.Observed.Cluster
	t, err := hostTarget(cluster, clients, pl.Observed.Cloud, p.Store.ReadOnly())
	if err != nil {
		return // no gateway yet: nothing to ask
	}
	ctx, cancel := context.WithTimeout(ctx, fieldChangesTimeout)
	defer cancel()
	for i := range pl.Desired.Manifests {
		m := &pl.Desired.Manifests[i]
		changed := pl.changed[m.Name]
		if len(changed) == 0 {
			continue
		}
		fields, err := p.Hosts.FieldChanges(ctx, t, slices.Collect(maps.Values(changed)))
		if err != nil {
			p.log().Warn("could not ask the API what a manifest's apply changes", "cluster", cluster, "manifest", m.Name, "err", err)
			continue
		}
		for j, o := range changed {
			if f := fields[o.objectRef]; len(f) > 0 {
				m.Objects[j] = o.ref() + " changed: " + upTo(f, "; ")
			}
		}
	}
}

// objectDrift asks the cluster's API what changed in the objects its
// applied manifests made (a resync's check of the addons). An API that
// does not answer, or a manifest applied before OPKE recorded its objects,
// tells nothing: the plan goes on without (logged), as with the Nodes'
// health.
func (p *Planner) objectDrift(ctx context.Context, pl *Planned, clients *cloud.Clients) map[string][]string {
	if pl.Ledger.Applied == nil || len(pl.Ledger.Applied.Manifests) == 0 {
		return nil
	}
	name := pl.Observed.Cluster
	kv := p.Store.ReadOnly()
	recorded, err := clusterManifestObjects(ctx, kv, name)
	if err != nil {
		p.log().Warn("could not read the objects the manifests applied", "cluster", name, "err", err)
		return nil
	}
	for m := range recorded {
		if _, ok := pl.Ledger.Applied.Manifests[m]; !ok {
			delete(recorded, m) // its objects recorded, not the manifest (a crash between): applied again anyway
		}
	}
	if len(recorded) == 0 {
		return nil
	}
	t, err := hostTarget(name, clients, pl.Observed.Cloud, kv)
	if errors.Is(err, errNoGateway) {
		return nil
	}
	var drift map[string][]string
	if err == nil {
		drift, err = p.Hosts.ObjectDrift(ctx, t, recorded)
	}
	if err != nil {
		p.log().Warn("could not ask the API what changed in the addons' objects", "cluster", name, "err", err)
		return nil
	}
	return drift
}

// deleteManifest deletes the objects of a manifest the render no longer
// holds (its addon left the spec) that no other manifest holds, then its
// records. A manifest applied before OPKE recorded its objects cannot be
// pruned: the log says so and its record goes.
func (h hostStep) deleteManifest(ctx context.Context, c diff.Change) error {
	name := c.Address.Name
	had, err := manifestObjects(ctx, h.j.w, c.Cluster, name)
	if err != nil {
		return err
	}
	if had == nil {
		h.a.log().Warn("a manifest left the render but its objects were never recorded: delete them with kubectl", "cluster", c.Cluster, "manifest", name)
	}
	stale, err := h.stale(had)
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		if err := h.withAPI(ctx, c, name, func(k *kubeClient) error { return deleteObjects(ctx, k, stale) }); err != nil {
			return err
		}
	}
	if err := h.j.hook("deleted " + c.Address.String()); err != nil {
		return err
	}
	h.a.log().Info("manifest deleted", "cluster", c.Cluster, "manifest", name, "objects", len(stale))
	k := state.KeysOf(h.j.w)
	return errors.Join(h.j.w.Delete(ctx, k.ManifestObjects(c.Cluster, name)), h.j.w.Delete(ctx, k.Manifest(c.Cluster, name)))
}

// stale are the objects of had that no manifest of the render holds.
func (h hostStep) stale(had []objectRef) ([]objectRef, error) {
	if len(had) == 0 {
		return nil, nil
	}
	desired, err := h.desired.get(h)
	if err != nil {
		return nil, err
	}
	var out []objectRef
	for _, o := range had {
		if !desired[o] {
			out = append(out, o)
		}
	}
	return out, nil
}

// desiredObjects are the objects the render's manifests hold, read from
// the first controller's files once per render: every apply and deletion
// of a manifest compares with them.
type desiredObjects struct {
	once sync.Once
	set  map[objectRef]bool
	err  error
}

func (d *desiredObjects) get(h hostStep) (map[objectRef]bool, error) {
	d.once.Do(func() {
		for _, host := range controllerNames(h.t) {
			files := h.files[host]
			if files == nil {
				continue
			}
			d.set = map[objectRef]bool{}
			for path, f := range files {
				if !strings.HasPrefix(path, assets.PathAddons+"/") {
					continue
				}
				objs, err := parseManifest(f.Data)
				if err != nil {
					d.err = fmt.Errorf("%s: %w", path, err)
					return
				}
				for _, o := range objs {
					d.set[o.objectRef] = true
				}
			}
			return
		}
		// Without a controller's render there is nothing to compare
		// with: every object would look stale.
		d.err = errors.New("no controller's render to prune against")
	})
	return d.set, d.err
}

// withAPI runs fn against the first controller's API server that is
// ready, waiting for one up to the gate timeout (a new cluster's API
// comes up after its controllers' restarts). An API that refuses a
// request (ErrManifest) is not waited on.
func (h hostStep) withAPI(ctx context.Context, c diff.Change, name string, fn func(*kubeClient) error) error {
	a := h.a
	timeout := cmp.Or(a.GateTimeout, DefaultGateTimeout)
	deadline := time.Now().Add(timeout)
	for {
		err := h.onAPI(ctx, fn)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrManifest) {
			return fmt.Errorf("%s: %w", name, err)
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		if time.Now().After(deadline) {
			return waitedOut{fmt.Errorf("%s: no API server ready within %s: %w", name, timeout, err)}
		}
		a.log().Debug("no API server ready yet", "cluster", c.Cluster, "manifest", name, "why", err)
		waiting(ctx, fmt.Errorf("no API server ready yet: %w", err))
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(cmp.Or(a.GateInterval, time.Second)):
		}
	}
}

// onAPI runs fn against the first controller whose API server answers
// /readyz.
func (h hostStep) onAPI(ctx context.Context, fn func(*kubeClient) error) error {
	var errs []error
	for _, ip := range controllerIPs(h.t) {
		k, err := h.a.Hosts.kube(h.t, h.pki, ip)
		if err != nil {
			return err
		}
		err = func() error {
			defer k.close()
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			code, body, err := k.do(rctx, http.MethodGet, "/readyz", "", nil, nil)
			switch {
			case err != nil:
				return err
			case code != http.StatusOK:
				return fmt.Errorf("API server %s /readyz: %d %s", ip, code, firstLine(body))
			}
			return fn(k)
		}()
		if err == nil || errors.Is(err, ErrManifest) {
			return err
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return errors.New("no controller to apply to")
	}
	return errors.Join(errs...)
}

// controllerNames are t's controllers' names, by index.
func controllerNames(t HostTarget) []string {
	var out []string
	for i := range len(t.Hosts) {
		n := schemas.ControllerName(t.Cluster, i)
		if _, ok := t.Hosts[n]; ok {
			out = append(out, n)
		}
	}
	return out
}

// renderedObjects are the objects of the render's manifest name, and
// whether the render holds it.
func renderedObjects(a *assets.Set, name string) ([]object, bool, error) {
	data, ok := a.Manifest(name)
	if !ok {
		return nil, false, nil
	}
	objs, err := parseManifest(data)
	if err != nil {
		return nil, true, fmt.Errorf("%s: %w", name, err)
	}
	return objs, true, nil
}

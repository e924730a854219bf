package reconciler

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"opke.dev/opke/diff"
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
	k      *kubeClient
	groups map[string][]apiResource
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
		code, body, err := d.k.do(ctx, http.MethodGet, prefix, "", nil, &doc)
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
// ownership of the fields it sets (force), in the manifest's order.
func applyObjects(ctx context.Context, k *kubeClient, objs []object) error {
	d := &discovery{k: k, groups: map[string][]apiResource{}}
	for _, o := range objs {
		path, err := d.path(ctx, o.objectRef)
		if err != nil {
			return fmt.Errorf("%s: %w", o.ref(), err)
		}
		// A node is its kubelet's to create: OPKE only labels one that
		// registered, and waits for it.
		if o.APIVersion == "v1" && o.Kind == "Node" {
			code, body, err := k.do(ctx, http.MethodGet, path, "", nil, nil)
			switch {
			case err != nil:
				return fmt.Errorf("%s: %w", o.ref(), err)
			case code == http.StatusNotFound:
				return fmt.Errorf("%s: %w", o.ref(), errNotRegistered)
			case code != http.StatusOK:
				return fmt.Errorf("%s: %d %s", o.ref(), code, statusMessage(body))
			}
		}
		path += "?fieldManager=" + fieldManager + "&force=true"
		code, body, err := k.do(ctx, http.MethodPatch, path, "application/apply-patch+yaml", o.Body, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", o.ref(), err)
		}
		if code/100 != 2 {
			return fmt.Errorf("%w: %s: %d %s", ErrManifest, o.ref(), code, statusMessage(body))
		}
	}
	return nil
}

// deleteObjects deletes the objects refs name, last first (a workload
// before the account and the role it runs with, a namespace last), its
// dependents in the background as kubectl delete does. An object already
// gone, or of a kind the API no longer serves, is done.
func deleteObjects(ctx context.Context, k *kubeClient, refs []objectRef) error {
	d := &discovery{k: k, groups: map[string][]apiResource{}}
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
	err = h.withAPI(ctx, c, name, func(k *kubeClient) error {
		if err := applyObjects(ctx, k, objs); err != nil {
			return err
		}
		return deleteObjects(ctx, k, stale)
	})
	if err != nil {
		return err
	}
	if err := h.j.hook("applied " + c.Address.String()); err != nil {
		return err
	}
	a.log().Info("manifest applied", "cluster", c.Cluster, "manifest", name, "objects", len(objs), "pruned", len(stale))
	refs := make([]objectRef, len(objs))
	for i, o := range objs {
		refs[i] = o.objectRef
	}
	// The objects first: a crash before the manifest's record applies it
	// again, and prunes nothing it did not already.
	if err := recordManifestObjects(ctx, h.j.w, c.Cluster, name, refs); err != nil {
		return err
	}
	return recordManifest(ctx, h.j.w, c.Cluster, name, sum)
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

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
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"opke.dev/opke/diff"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
)

// ErrManifest is a manifest the API refused, or one that is not a list of
// Kubernetes objects.
var ErrManifest = errors.New("manifest not applied")

// errNotRegistered is a node its kubelet has not registered yet: the
// apply waits for it.
var errNotRegistered = errors.New("not registered yet")

// fieldManager is the name OPKE's server-side applies own fields under.
const fieldManager = "opke"

// object is one API object of a manifest, as sent.
type object struct {
	APIVersion, Kind, Namespace, Name string
	Body                              map[string]any
}

// ref is how errors and logs name an object.
func (o object) ref() string {
	if o.Namespace != "" {
		return o.Kind + " " + o.Namespace + "/" + o.Name
	}
	return o.Kind + " " + o.Name
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

// applyObjects sends each object with a server-side apply that takes
// ownership of the fields it sets (force), in the manifest's order.
func applyObjects(ctx context.Context, k *kubeClient, objs []object) error {
	d := &discovery{k: k, groups: map[string][]apiResource{}}
	for _, o := range objs {
		r, prefix, err := d.resource(ctx, o.APIVersion, o.Kind)
		if err != nil {
			return fmt.Errorf("%s: %w", o.ref(), err)
		}
		path := prefix
		if r.Namespaced {
			path += "/namespaces/" + url.PathEscape(cmp.Or(o.Namespace, "default"))
		}
		path += "/" + r.Name + "/" + url.PathEscape(o.Name)
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
	timeout := cmp.Or(a.GateTimeout, DefaultGateTimeout)
	deadline := time.Now().Add(timeout)
	for {
		err = h.applyOnce(ctx, objs)
		if err == nil || errors.Is(err, ErrManifest) {
			break
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		if time.Now().After(deadline) {
			return waitedOut{fmt.Errorf("%s: no API server ready within %s: %w", name, timeout, err)}
		}
		a.log().Debug("no API server ready to apply to yet", "cluster", c.Cluster, "manifest", name, "why", err)
		waiting(ctx, fmt.Errorf("no API server ready yet: %w", err))
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(cmp.Or(a.GateInterval, time.Second)):
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := h.j.hook("applied " + c.Address.String()); err != nil {
		return err
	}
	a.log().Info("manifest applied", "cluster", c.Cluster, "manifest", name, "objects", len(objs))
	return recordManifest(ctx, h.j.w, c.Cluster, name, sum)
}

// applyOnce applies objs through the first controller whose API server
// answers /readyz.
func (h hostStep) applyOnce(ctx context.Context, objs []object) error {
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
			return applyObjects(ctx, k, objs)
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

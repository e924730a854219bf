package kubestub

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Custom resource definitions: an applied CustomResourceDefinition
// serves its kind at each of its served versions, in discovery and for
// apply, GET, list and DELETE, once Established, as the real API server
// does; deleting it deletes its custom resources. As the real API server's
// establishing controller, the stub establishes a new definition a moment
// after its apply (establishDelay), and serves nothing of its kind
// meanwhile. Schemas are not validated.

// establishDelay is how long a new definition takes to be established.
const establishDelay = 300 * time.Millisecond

// crdGV is the group version of CustomResourceDefinitions.
const crdGV = "apiextensions.k8s.io/v1"

// crdPrefix is the key prefix of applied definitions in Objects.Applied.
const crdPrefix = crdGV + "/customresourcedefinitions//"

// crd is what the stub reads of a definition.
type crd struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Plural   string `json:"plural"`
			Singular string `json:"singular"`
			Kind     string `json:"kind"`
			ListKind string `json:"listKind"`
		} `json:"names"`
		Scope    string `json:"scope"`
		Versions []struct {
			Name    string `json:"name"`
			Served  bool   `json:"served"`
			Storage bool   `json:"storage"`
		} `json:"versions"`
	} `json:"spec"`
}

// checkCRD refuses a definition the real API server refuses for what the
// stub reads of it: its name is plural.group, a scope, a kind, and one
// storage version.
func checkCRD(obj map[string]any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var c crd
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	var errs []string
	s := c.Spec
	if c.Metadata.Name != s.Names.Plural+"."+s.Group {
		errs = append(errs, fmt.Sprintf(`metadata.name: Invalid value: %q: must be spec.names.plural+"."+spec.group`, c.Metadata.Name))
	}
	if s.Scope != "Namespaced" && s.Scope != "Cluster" {
		errs = append(errs, fmt.Sprintf(`spec.scope: Unsupported value: %q: supported values: "Cluster", "Namespaced"`, s.Scope))
	}
	if s.Names.Kind == "" {
		errs = append(errs, "spec.names.kind: Required value")
	}
	storage := 0
	for _, v := range s.Versions {
		if v.Storage {
			storage++
		}
	}
	if storage != 1 {
		errs = append(errs, "spec.versions: Invalid value: must have exactly one version marked as storage version")
	}
	if len(errs) > 0 {
		return fmt.Errorf("CustomResourceDefinition.apiextensions.k8s.io %q is invalid: [%s]", c.Metadata.Name, strings.Join(errs, ", "))
	}
	return nil
}

// served are the resources the API serves by group version: the built-in
// ones and those of the applied definitions.
func served(o *Objects) map[string][]metav1.APIResource {
	var defs []string
	for k := range o.Applied {
		if strings.HasPrefix(k, crdPrefix) && !establishing(o, crdGV, strings.TrimPrefix(k, crdPrefix)) {
			defs = append(defs, k)
		}
	}
	slices.Sort(defs) // discovery lists them in a stable order
	out, cloned := resources, false
	for _, k := range defs {
		var c crd
		if json.Unmarshal(o.Applied[k], &c) != nil {
			continue
		}
		if !cloned {
			out, cloned = maps.Clone(resources), true
		}
		for _, v := range c.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := c.Spec.Group + "/" + v.Name
			out[gv] = append(slices.Clone(out[gv]), metav1.APIResource{Name: c.Spec.Names.Plural, SingularName: c.Spec.Names.Singular,
				Namespaced: c.Spec.Scope == "Namespaced", Kind: c.Spec.Names.Kind, Verbs: metav1.Verbs{"delete", "get", "list", "patch"}})
		}
	}
	return out
}

// establishing reports whether an object of group version gv is a
// definition, name, that is not established yet.
func establishing(o *Objects, gv, name string) bool {
	if gv != crdGV {
		return false
	}
	at, ok := o.Established[name]
	return !ok || time.Now().Before(at)
}

// crdStatus is a definition as the API server shows it: established or,
// a moment after its apply, not yet.
func crdStatus(obj json.RawMessage, est bool) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, fmt.Errorf("stored definition: %w", err)
	}
	var c crd
	if err := json.Unmarshal(obj, &c); err != nil {
		return nil, fmt.Errorf("stored definition: %w", err)
	}
	var stored []string
	for _, v := range c.Spec.Versions {
		if v.Storage {
			stored = append(stored, v.Name)
		}
	}
	spec, _ := m["spec"].(map[string]any)
	cond := map[string]any{"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
	if !est {
		cond = map[string]any{"type": "Established", "status": "False", "reason": "Installing", "message": "the initial names have been accepted"}
	}
	m["status"] = map[string]any{
		"acceptedNames":  spec["names"],
		"storedVersions": stored,
		"conditions": []any{
			map[string]any{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
			cond,
		},
	}
	return json.Marshal(m)
}

// deleteCustomResources deletes the objects of a deleted definition.
func deleteCustomResources(o *Objects, def json.RawMessage) {
	var c crd
	if json.Unmarshal(def, &c) != nil {
		return
	}
	delete(o.Established, c.Metadata.Name)
	for _, v := range c.Spec.Versions {
		prefix := c.Spec.Group + "/" + v.Name + "/" + c.Spec.Names.Plural + "/"
		for k := range o.Applied {
			if strings.HasPrefix(k, prefix) {
				delete(o.Applied, k)
			}
		}
	}
}

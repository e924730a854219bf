package kubestatus

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Manager is a field manager of an object and the fields it owns there
// (their paths, ".spec.replicas", sorted), by all its entries but those of
// a subresource.
type Manager struct {
	Name   string
	Fields []string
}

// managedFields is what Fields and Managers read of an object.
type managedFields struct {
	Metadata struct {
		ManagedFields []struct {
			Manager     string                            `json:"manager"`
			Operation   metav1.ManagedFieldsOperationType `json:"operation"`
			Subresource string                            `json:"subresource"`
			FieldsV1    json.RawMessage                   `json:"fieldsV1"`
		} `json:"managedFields"`
	} `json:"metadata"`
}

// Fields is the sha256 of the field set manager's applies own in an
// object (its metadata.managedFields, server-side apply's field
// ownership), empty when it owns none. The API server moves a field to
// whoever changes its value (an update such as kubectl edit takes it, an
// apply with force takes it back), so the digest changes when a field the
// manager applied is changed or removed by another, and not when another
// manager sets a field of its own or a controller writes the status.
func Fields(obj []byte, manager string) (string, error) {
	var o managedFields
	if err := json.Unmarshal(obj, &o); err != nil {
		return "", fmt.Errorf("managed fields: %w", err)
	}
	for _, e := range o.Metadata.ManagedFields {
		if e.Subresource == "" && e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationApply {
			var b bytes.Buffer
			if err := json.Compact(&b, e.FieldsV1); err != nil {
				return "", fmt.Errorf("managed fields of %s: %w", manager, err)
			}
			sum := sha256.Sum256(b.Bytes())
			return hex.EncodeToString(sum[:]), nil
		}
	}
	return "", nil
}

// Managers are an object's field managers but manager, by name, with the
// fields each owns (of the object itself, not of a subresource such as
// its status): who took a field from manager is among them.
func Managers(obj []byte, manager string) ([]Manager, error) {
	var o managedFields
	if err := json.Unmarshal(obj, &o); err != nil {
		return nil, fmt.Errorf("managed fields: %w", err)
	}
	owned := map[string]map[string]bool{}
	for _, e := range o.Metadata.ManagedFields {
		if e.Subresource != "" || e.Manager == manager {
			continue
		}
		if owned[e.Manager] == nil {
			owned[e.Manager] = map[string]bool{}
		}
		set := &fieldpath.Set{}
		if len(e.FieldsV1) > 0 {
			if err := set.FromJSON(bytes.NewReader(e.FieldsV1)); err != nil {
				return nil, fmt.Errorf("managed fields of %s: %w", e.Manager, err)
			}
		}
		set.Leaves().Iterate(func(p fieldpath.Path) { owned[e.Manager][p.String()] = true })
	}
	var out []Manager
	for _, name := range slices.Sorted(maps.Keys(owned)) {
		out = append(out, Manager{Name: name, Fields: slices.Sorted(maps.Keys(owned[name]))})
	}
	return out, nil
}

// Established reports whether a CustomResourceDefinition is established:
// the API serves its kind (its Established condition is True).
func Established(crd []byte) (bool, error) {
	var o struct {
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(crd, &o); err != nil {
		return false, fmt.Errorf("custom resource definition: %w", err)
	}
	for _, c := range o.Status.Conditions {
		if c.Type == "Established" {
			return c.Status == "True", nil
		}
	}
	return false, nil
}

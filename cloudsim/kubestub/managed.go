package kubestub

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/merge"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// Server-side apply and field management, as the real API server does
// them for what OPKE relies on, by the same library the API server runs
// (structured-merge-diff's merge.Updater): an apply merges the applied
// fields into the object, keeps what other managers own, removes what its
// manager applied before and no longer applies (unless another manager
// owns it), and takes with force the fields whose value it changes; an
// update (a merge patch here) takes every field whose value it changes.
// A field whose value does not change moves nowhere. The schema is the
// library's deduced one: maps are granular and lists atomic (the API
// server's schemas key some lists, containers by name: it owns a
// container's image where the stub owns the whole list), and nothing is
// defaulted. A manager's set, in metadata.managedFields, is serialised
// deterministically, so it reads the same while nothing moved.

// managedEntry is an entry of an object's managedFields with its set.
type managedEntry struct {
	metav1.ManagedFieldsEntry
	set *fieldpath.Set
}

// serverKept are the metadata fields the API server keeps for itself:
// no manager owns them.
var serverKept = []string{"name", "namespace", "managedFields", "generation", "resourceVersion", "uid", "creationTimestamp"}

// content is what of an object its fields are: its metadata's labels,
// annotations and the like, its spec and data, not its identity, status
// or what the API server keeps.
func content(obj map[string]any) (*typed.TypedValue, error) {
	c := map[string]any{}
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind", "status":
		case "metadata":
			md := map[string]any{}
			m, _ := v.(map[string]any)
			for mk, mv := range m {
				if !slices.Contains(serverKept, mk) {
					md[mk] = mv
				}
			}
			if len(md) > 0 {
				c[k] = md
			}
		default:
			c[k] = v
		}
	}
	tv, err := typed.DeducedParseableType.FromUnstructured(normalise(c))
	if err != nil {
		return nil, fmt.Errorf("fields: %w", err)
	}
	return tv, nil
}

// withContent is obj's identity and server-kept metadata with tv's content.
func withContent(obj map[string]any, tv *typed.TypedValue) map[string]any {
	out, _ := tv.AsValue().Unstructured().(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	for _, k := range []string{"apiVersion", "kind"} {
		if v, ok := obj[k]; ok {
			out[k] = v
		}
	}
	md, _ := out["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	if m, ok := obj["metadata"].(map[string]any); ok {
		for _, k := range serverKept {
			if v, ok := m[k]; ok {
				md[k] = v
			}
		}
	}
	out["metadata"] = md
	return out
}

// noConversion is the converter of a stub that serves one version of each
// kind.
type noConversion struct{}

func (noConversion) Convert(v *typed.TypedValue, _ fieldpath.APIVersion) (*typed.TypedValue, error) {
	return v, nil
}

func (noConversion) IsMissingVersionError(error) bool { return false }

// updater is what the API server's field manager runs.
var updater = (&merge.UpdaterBuilder{Converter: noConversion{}}).BuildUpdater()

// applied is an apply of config by manager to before (nil: a create),
// forced: the object it makes, with its managedFields.
func applied(before, config map[string]any, manager string, now time.Time) (map[string]any, error) {
	live, entries, err := managedState(before)
	if err != nil {
		return nil, err
	}
	cfg, err := content(config)
	if err != nil {
		return nil, err
	}
	version := fieldpath.APIVersion(fmt.Sprint(config["apiVersion"]))
	out, managers, err := updater.Apply(live, cfg, version, managersOf(entries), entryKey(manager, metav1.ManagedFieldsOperationApply), true)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	if out == nil {
		out = live // nothing changed
	}
	after := withContent(config, out)
	return after, writeManaged(after, entries, managers, now)
}

// updated sets the managedFields of after, an update of before by
// manager.
func updated(before, after map[string]any, manager string, now time.Time) error {
	live, entries, err := managedState(before)
	if err != nil {
		return err
	}
	next, err := content(after)
	if err != nil {
		return err
	}
	version := fieldpath.APIVersion(fmt.Sprint(after["apiVersion"]))
	_, managers, err := updater.Update(live, next, version, managersOf(entries), entryKey(manager, metav1.ManagedFieldsOperationUpdate))
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	return writeManaged(after, entries, managers, now)
}

// managedState is an object's content and managedFields entries; an empty
// object for nil.
func managedState(obj map[string]any) (*typed.TypedValue, []managedEntry, error) {
	if obj == nil {
		obj = map[string]any{}
	}
	tv, err := content(obj)
	if err != nil {
		return nil, nil, err
	}
	entries, err := readManaged(obj)
	return tv, entries, err
}

// entryKey is how the stub names a manager's entry to the library: its
// manager and operation, as the API server keys them.
func entryKey(manager string, op metav1.ManagedFieldsOperationType) string {
	return manager + "\x00" + string(op)
}

// managersOf are entries as the library takes them.
func managersOf(entries []managedEntry) fieldpath.ManagedFields {
	out := fieldpath.ManagedFields{}
	for _, e := range entries {
		out[entryKey(e.Manager, e.Operation)] = fieldpath.NewVersionedSet(e.set, fieldpath.APIVersion(e.APIVersion), e.Operation == metav1.ManagedFieldsOperationApply)
	}
	return out
}

// readManaged reads an object's managedFields.
func readManaged(obj map[string]any) ([]managedEntry, error) {
	md, _ := obj["metadata"].(map[string]any)
	raw, ok := md["managedFields"]
	if !ok {
		return nil, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var entries []metav1.ManagedFieldsEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("managedFields: %w", err)
	}
	out := make([]managedEntry, 0, len(entries))
	for _, e := range entries {
		set := &fieldpath.Set{}
		if e.FieldsV1 != nil {
			if err := set.FromJSON(bytes.NewReader(e.FieldsV1.GetRawBytes())); err != nil {
				return nil, fmt.Errorf("managedFields of %s: %w", e.Manager, err)
			}
		}
		out = append(out, managedEntry{e, set})
	}
	return out, nil
}

// writeManaged sets obj's managedFields to managers, each entry's time
// kept from before (entries) while its set is the same, now otherwise;
// entries left with no field go, as the API server drops them. Applies
// first, then updates, each by manager.
func writeManaged(obj map[string]any, before []managedEntry, managers fieldpath.ManagedFields, now time.Time) error {
	had := map[string]managedEntry{}
	for _, e := range before {
		had[entryKey(e.Manager, e.Operation)] = e
	}
	var out []metav1.ManagedFieldsEntry
	for key, vs := range managers {
		if vs.Set().Empty() {
			continue
		}
		manager, op, _ := strings.Cut(key, "\x00")
		b, err := vs.Set().ToJSON()
		if err != nil {
			return err
		}
		t := metav1.NewTime(now.UTC().Truncate(time.Second))
		if e, ok := had[key]; ok && e.Time != nil && e.set.Equals(vs.Set()) {
			t = *e.Time
		}
		out = append(out, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationType(op),
			APIVersion: string(vs.APIVersion()), Time: &t, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(b))})
	}
	slices.SortFunc(out, func(a, b metav1.ManagedFieldsEntry) int {
		return cmp.Or(cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Manager, b.Manager))
	})
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		obj["metadata"] = md
	}
	if len(out) == 0 {
		delete(md, "managedFields")
		return nil
	}
	v, err := json.Marshal(out)
	if err != nil {
		return err
	}
	var list []any
	if err := json.Unmarshal(v, &list); err != nil {
		return err
	}
	md["managedFields"] = list
	return nil
}

// updateManager is the manager of an update: its fieldManager, or, as the
// API server names a client that gives none, its User-Agent up to the
// first slash.
func updateManager(r *http.Request) string {
	if m := r.URL.Query().Get("fieldManager"); m != "" {
		return m
	}
	ua, _, _ := strings.Cut(r.UserAgent(), "/")
	return ua
}

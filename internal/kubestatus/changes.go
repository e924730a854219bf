package kubestatus

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// FieldChanges says which fields differ from live to after, two JSON
// objects (an object as the API has it, and as a dry-run apply would
// leave it), as kubectl diff shows them: one "path: before → after" per
// field, in path order. Lists of objects that all have a name are matched
// by name (containers, env, volumes: `containers[kube-proxy].image`),
// other lists by index. What the API server keeps for itself is not
// compared: the status, and metadata's managedFields, resourceVersion,
// generation, uid, creationTimestamp and the DaemonSet template
// generation annotation.
func FieldChanges(live, after []byte) ([]string, error) {
	var a, b map[string]any
	if err := json.Unmarshal(live, &a); err != nil {
		return nil, fmt.Errorf("the live object: %w", err)
	}
	if err := json.Unmarshal(after, &b); err != nil {
		return nil, fmt.Errorf("the dry run's object: %w", err)
	}
	var out []string
	walkChanges("", ownContent(a), ownContent(b), &out)
	return out, nil
}

// ownContent is an object without what the API server keeps for itself.
func ownContent(o map[string]any) map[string]any {
	c := maps.Clone(o)
	delete(c, "status")
	if md, ok := c["metadata"].(map[string]any); ok {
		md = maps.Clone(md)
		for _, k := range []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp"} {
			delete(md, k)
		}
		if an, ok := md["annotations"].(map[string]any); ok {
			an = maps.Clone(an)
			delete(an, "deprecated.daemonset.template.generation")
			md["annotations"] = an
			if len(an) == 0 {
				delete(md, "annotations")
			}
		}
		c["metadata"] = md
	}
	return c
}

// walkChanges appends the changes from a to b below path.
func walkChanges(path string, a, b any, out *[]string) {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(union(av, bv))) {
				walkChanges(join(path, k), av[k], bv[k], out)
			}
			return
		}
	case []any:
		if bv, ok := b.([]any); ok {
			if an, aok := byName(av); aok {
				if bn, bok := byName(bv); bok {
					for _, k := range slices.Sorted(maps.Keys(union(an, bn))) {
						walkChanges(path+"["+k+"]", an[k], bn[k], out)
					}
					return
				}
			}
			for i := range max(len(av), len(bv)) {
				var x, y any
				if i < len(av) {
					x = av[i]
				}
				if i < len(bv) {
					y = bv[i]
				}
				walkChanges(path+"["+strconv.Itoa(i)+"]", x, y, out)
			}
			return
		}
	}
	if ja, jb := valueJSON(a), valueJSON(b); ja != jb {
		*out = append(*out, cmp.Or(path, ".")+": "+cut(ja)+" → "+cut(jb))
	}
}

// union is the keys of a and b.
func union[V any](a, b map[string]V) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// byName keys a list of objects by their name, when each has a distinct
// one.
func byName(l []any) (map[string]any, bool) {
	if len(l) == 0 {
		return map[string]any{}, true
	}
	out := make(map[string]any, len(l))
	for _, x := range l {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, false
		}
		name, ok := m["name"].(string)
		if _, dup := out[name]; !ok || dup {
			return nil, false
		}
		out[name] = m
	}
	return out, true
}

// join is a field path, a key with a dot or a slash quoted.
func join(path, key string) string {
	if strings.ContainsAny(key, "./[]") {
		key = "[" + strconv.Quote(key) + "]"
		return path + key
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// valueJSON is a value as JSON, "(none)" when absent.
func valueJSON(v any) string {
	if v == nil {
		return "(none)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// cut shortens a value to 80 characters for the plan.
func cut(s string) string {
	if len(s) <= 80 {
		return s
	}
	return strings.ToValidUTF8(s[:77], "") + "..."
}

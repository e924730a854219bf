// Package intern keeps one copy of strings that recur across a fleet:
// every cluster's hosts carry the same file paths, and a 1,000-cluster
// plan held a quarter of a million copies of a few hundred paths.
package intern

import (
	"slices"
	"strings"
	"sync"
)

// maxStrings bounds a table: past it, strings are returned as they are
// (a table is for a bounded vocabulary, never for ids or digests).
const maxStrings = 1 << 16

// Table is a set of interned strings, safe for concurrent use.
type Table struct {
	mu    sync.RWMutex
	m     map[string]string
	lists map[string][]string
}

// String returns the table's copy of s, adding s (a copy of it, so that
// a substring never keeps its whole string alive) when it is new.
func (t *Table) String(s string) string {
	t.mu.RLock()
	v, ok := t.m[s]
	t.mu.RUnlock()
	if ok {
		return v
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.m[s]; ok {
		return v
	}
	if t.m == nil {
		t.m = map[string]string{}
	}
	if len(t.m) >= maxStrings {
		return s
	}
	v = string([]byte(s))
	t.m[v] = v
	return v
}

// List returns the table's copy of the list l (nil for an empty one),
// adding a copy of l when it is new. The copy is shared: read only.
func (t *Table) List(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	key := strings.Join(l, "\x00")
	t.mu.RLock()
	v, ok := t.lists[key]
	t.mu.RUnlock()
	if ok {
		return v
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.lists[key]; ok {
		return v
	}
	if t.lists == nil {
		t.lists = map[string][]string{}
	}
	if len(t.lists) >= maxStrings {
		return l
	}
	v = slices.Clone(l)
	t.lists[key] = v
	return v
}

// Len is how many strings the table holds.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.m)
}

// Shared holds what every cluster of a fleet spells the same: file paths
// on hosts, manifest names, resource kinds, the units a file restarts.
var Shared Table

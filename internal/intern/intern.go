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
	return load(t, &t.m, s, s, func() (string, string) {
		c := string([]byte(s))
		return c, c // the map's key is the copy too
	})
}

// List returns the table's copy of the list l (nil for an empty one),
// adding a copy of l when it is new. The copy is shared: read only.
func (t *Table) List(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	key := strings.Join(l, "\x00")
	return load(t, &t.lists, key, l, func() (string, []string) { return key, slices.Clone(l) })
}

// load returns m's value at key, adding the key and value clone makes
// when there is none; past the table's bound it returns v as it is.
func load[V any](t *Table, m *map[string]V, key string, v V, clone func() (string, V)) V {
	t.mu.RLock()
	got, ok := (*m)[key]
	t.mu.RUnlock()
	if ok {
		return got
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if got, ok := (*m)[key]; ok {
		return got
	}
	if *m == nil {
		*m = map[string]V{}
	}
	if len(*m) >= maxStrings {
		return v
	}
	k, got := clone()
	(*m)[k] = got
	return got
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

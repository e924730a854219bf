package cloudsim

import (
	"cmp"
	"slices"
)

// sortedBy returns the map's values ordered by key(v), then insertion.
func sortedBy[V any, K cmp.Ordered](m map[string]V, key func(V) K) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortStableFunc(out, func(a, b V) int { return cmp.Compare(key(a), key(b)) })
	return out
}

// orEmpty makes a nil list marshal as [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

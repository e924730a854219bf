package reconciler

import (
	"sync"

	"opke.dev/opke/state"
)

// kept keeps what plans read of the store, per cluster, with the revision
// it was read at, for as long as the store's changes say none of its keys
// was written since: a quiet fleet's plan reads its ledgers, its
// material's fingerprints and its application credentials' secrets
// once, then only what an apply, another daemon or an operator wrote.
type kept[T any] struct {
	mu sync.Mutex
	m  map[string]keptRead[T]
}

type keptRead[T any] struct {
	rev int64
	v   T
}

// get returns the cluster's kept value if changes, synced with the store,
// say that no write to keys came after it was read. A nil changes (not
// synced) keeps nothing.
func (k *kept[T]) get(changes *state.Changes, cluster string, keys ...string) (T, bool) {
	var zero T
	if changes == nil {
		return zero, false
	}
	k.mu.Lock()
	r, ok := k.m[cluster]
	k.mu.Unlock()
	if !ok || changes.RevisionOf(keys...) > r.rev {
		return zero, false
	}
	return r.v, true
}

// put keeps v, read at rev (0: unknown, not kept).
func (k *kept[T]) put(cluster string, rev int64, v T) {
	if rev == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]keptRead[T]{}
	}
	if r, ok := k.m[cluster]; !ok || r.rev <= rev {
		k.m[cluster] = keptRead[T]{rev: rev, v: v}
	}
}

// forget drops what is kept of clusters not in names: a fleet that
// shrank does not keep what it no longer plans.
func (k *kept[T]) forget(names map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for c := range k.m {
		if !names[c] {
			delete(k.m, c)
		}
	}
}

package state

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// KV is the part of the store that rendering and planning read and write.
// *Store and *Overlay implement it.
type KV interface {
	Key(parts ...string) string
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
	GetSecret(ctx context.Context, key string) ([]byte, error)
	PutSecret(ctx context.Context, key string, value []byte) error
	// PutMany writes entries, sealing the secret ones, in few round trips.
	PutMany(ctx context.Context, entries []Entry) error
	// List returns the raw values below prefix: secrets stay sealed.
	List(ctx context.Context, prefix string) (map[string][]byte, error)
	// Open opens a sealed value that List returned.
	Open(key string, sealed []byte) ([]byte, error)
}

// Overlay reads through to a store and keeps every write in memory, so a
// pull-request plan can render (and issue certificates) without persisting
// anything.
type Overlay struct {
	base *Store
	mu   sync.Mutex
	// writes holds values as the store would: secrets sealed, with the
	// store's key, so List and Open behave alike on both.
	writes map[string][]byte
	// deleted are the keys deleted in the overlay: absent, whatever the
	// store holds.
	deleted map[string]bool
}

var (
	_ KV = (*Store)(nil)
	_ KV = (*Overlay)(nil)
)

// ReadOnly returns an overlay on the store.
func (s *Store) ReadOnly() *Overlay { return &Overlay{base: s, writes: map[string][]byte{}} }

// Key implements KV.
func (o *Overlay) Key(parts ...string) string { return o.base.Key(parts...) }

// Get implements KV.
func (o *Overlay) Get(ctx context.Context, key string) ([]byte, error) {
	if v, ok := o.written(key); ok {
		return v, nil
	}
	if o.isDeleted(key) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return o.base.Get(ctx, key)
}

// Put implements KV; the value stays in memory.
func (o *Overlay) Put(_ context.Context, key string, value []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writes[key] = append([]byte{}, value...)
	delete(o.deleted, key)
	return nil
}

// Delete deletes key in the overlay only: a plan renders as if it were
// gone (the material of a host whose server an apply makes again).
func (o *Overlay) Delete(_ context.Context, key string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.writes, key)
	if o.deleted == nil {
		o.deleted = map[string]bool{}
	}
	o.deleted[key] = true
	return nil
}

func (o *Overlay) isDeleted(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.deleted[key]
}

// GetSecret implements KV.
func (o *Overlay) GetSecret(ctx context.Context, key string) ([]byte, error) {
	if v, ok := o.written(key); ok {
		return o.base.Open(key, v)
	}
	if o.isDeleted(key) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return o.base.GetSecret(ctx, key)
}

// PutSecret implements KV; the value stays in memory, sealed.
func (o *Overlay) PutSecret(ctx context.Context, key string, value []byte) error {
	sealed, err := o.base.seal.seal(key, value)
	if err != nil {
		return err
	}
	return o.Put(ctx, key, sealed)
}

// PutMany implements KV; the values stay in memory.
func (o *Overlay) PutMany(ctx context.Context, entries []Entry) error {
	for _, e := range entries {
		put := o.Put
		if e.Secret {
			put = o.PutSecret
		}
		if err := put(ctx, e.Key, e.Value); err != nil {
			return err
		}
	}
	return nil
}

// Open implements KV.
func (o *Overlay) Open(key string, sealed []byte) ([]byte, error) { return o.base.Open(key, sealed) }

// List implements KV: the store's values with the overlay's on top.
func (o *Overlay) List(ctx context.Context, prefix string) (map[string][]byte, error) {
	out, err := o.base.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.deleted {
		delete(out, k)
	}
	for k, v := range o.writes {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out, nil
}

// Written returns the keys the overlay holds, for a plan to say what it
// would persist.
func (o *Overlay) Written() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	keys := make([]string, 0, len(o.writes))
	for k := range o.writes {
		keys = append(keys, k)
	}
	return keys
}

func (o *Overlay) written(key string) ([]byte, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.writes[key]
	return v, ok
}

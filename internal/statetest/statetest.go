// Package statetest starts a real state store for tests: embedded etcd in
// the test's temporary folder, with a fixed encryption key, closed when the
// test ends.
package statetest

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"opke.dev/opke/state"
)

// key is the encryption key of the stores Open returns.
var key = bytes.Repeat([]byte{7}, state.KeySize)

// Key returns a copy of key: no caller can rewrite the package's own.
func Key() []byte {
	return slices.Clone(key)
}

// Open starts an embedded store in tb.TempDir().
func Open(tb testing.TB) *state.Store {
	tb.Helper()
	s, _ := OpenDir(tb)
	return s
}

// OpenDir is Open, also naming the store's data dir (its etcd's
// certificates are in it: a test dialling the etcd itself needs them).
func OpenDir(tb testing.TB) (*state.Store, string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := tb.TempDir()
	s, err := state.Open(ctx, state.Options{DataDir: dir, EncryptionKey: key})
	if err != nil {
		tb.Fatalf("open state store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s, dir
}

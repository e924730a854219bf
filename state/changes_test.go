package state

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestChanges: the tracker learns of every write below the prefix by its
// group, answers a quiet store's Sync (a progress request), never says a
// group is older than its watch, and ignores writes outside the prefix.
func TestChanges(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()
	k := KeysOf(s)
	// Written before the watch: the tracker cannot know them.
	if err := s.Put(ctx, k.Resource("prod", "server", "a"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	c := s.Changes()
	sync := func() int64 {
		t.Helper()
		rev, err := c.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	start := sync()
	if got := c.RevisionOf(k.Resources("prod")); got < start {
		t.Errorf("a group written before the watch: revision %d, want at least the watch's start %d", got, start)
	}
	// A quiet store: Sync again is answered by a progress notification.
	if again := sync(); again != start {
		t.Errorf("a quiet store moved from %d to %d", start, again)
	}

	put := func(key string) int64 {
		t.Helper()
		resp, err := s.Client().Put(ctx, key, "x")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	infra := put(k.Resource("prod", "server", "b"))
	file := put(k.HostFile("prod", "prod-controller-0", "/etc/kubernetes/admin.conf"))
	applied := put(k.AppliedSpec("prod"))
	// The store's newest write is outside the prefix: no event says the
	// watch has come so far, only the progress Sync asks for.
	if elsewhere := put("/elsewhere/prod/infra/x"); sync() != elsewhere {
		t.Errorf("Sync after a write outside the prefix did not return its revision %d", elsewhere)
	}
	resp, err := s.Client().Delete(ctx, k.Resource("dev", "server", "a"), clientv3.WithPrevKV())
	if err != nil {
		t.Fatal(err)
	}
	deleted := resp.Header.Revision
	now := sync()
	if now < deleted {
		t.Fatalf("Sync returned %d before the delete at %d", now, deleted)
	}
	for _, tc := range []struct {
		keys []string
		want int64
	}{
		{[]string{k.Resources("prod")}, infra},
		{[]string{k.Resource("prod", "server", "b")}, infra},
		{[]string{k.HostFile("prod", "prod-controller-0", "/etc/x")}, file},
		{[]string{k.Hosts("prod"), k.Resources("prod")}, file},
		{[]string{k.Cluster("prod")}, file},
		{[]string{k.AppliedSpec("prod")}, applied},
		{[]string{k.AppliedSpecs()}, applied},
		{[]string{k.AppliedSpec("dev")}, start},
		{[]string{k.Manifests("prod"), k.PKI("prod")}, start},
		// A delete is a write; a key deleted that never was is none.
		{[]string{k.Resources("dev")}, start},
	} {
		if got := c.RevisionOf(tc.keys...); got != tc.want {
			t.Errorf("RevisionOf(%q) = %d, want %d", tc.keys, got, tc.want)
		}
	}
	if err := s.Put(ctx, k.Resource("dev", "server", "a"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Delete(ctx, k.Resource("dev", "server", "a")); err != nil {
		t.Fatal(err)
	}
	gone := sync()
	if got := c.RevisionOf(k.Resources("dev")); got != gone {
		t.Errorf("after a delete: RevisionOf = %d, want the delete's %d", got, gone)
	}
}

// TestChangesStopWithTheStore: closing the store ends the tracker's
// watch; a Sync after it fails rather than hangs.
func TestChangesStopWithTheStore(t *testing.T) {
	t.Parallel()
	s := openStore(t, t.TempDir(), testKey(1))
	c := s.Changes()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := c.Sync(ctx); err == nil {
		t.Error("Sync on a closed store succeeded")
	}
	if ctx.Err() != nil {
		t.Error("Sync on a closed store waited for its context")
	}
}

package state

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// nextMembers waits for the watch's next set of members.
func nextMembers(t *testing.T, ch <-chan []string) []string {
	t.Helper()
	select {
	case ids := <-ch:
		return ids
	case <-time.After(10 * time.Second):
		t.Fatal("no change of the members in 10s")
		return nil
	}
}

// TestMembership: the members' watch follows joins, a leave and a member
// whose session expired; one id is held by one live daemon; writes are
// fenced on the membership and PutIf refuses a key written since it was
// read.
func TestMembership(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()

	watch := s.WatchMembers(ctx)
	if got := nextMembers(t, watch); len(got) != 0 {
		t.Fatalf("members of a new store: %q", got)
	}
	a, err := s.Join(ctx, "daemon-a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Join(ctx, "daemon-a", time.Second); !errors.Is(err, ErrMemberTaken) {
		t.Fatalf("a second daemon-a: %v, want ErrMemberTaken", err)
	}
	if _, err := s.Join(ctx, "a/b", time.Second); err == nil {
		t.Fatal("an id with a slash was let in")
	}
	b, err := s.Join(ctx, "daemon-b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"daemon-a", "daemon-b"}
	got := nextMembers(t, watch)
	if len(got) == 1 { // the two joins may come as two changes
		got = nextMembers(t, watch)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("members (-want +got):\n%s", diff)
	}
	if ids, _, err := s.Members(ctx); err != nil || !cmp.Equal(ids, want) {
		t.Fatalf("Members = %q, %v", ids, err)
	}

	key := s.Key("_reports", "c0ffee")
	rev, err := a.PutIf(ctx, key, []byte("1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutIf(ctx, key, []byte("b"), 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("a create over an existing key: %v, want ErrConflict", err)
	}
	_, at, err := s.GetRev(ctx, key)
	if err != nil || at != rev {
		t.Fatalf("GetRev = %d, %v; want the write's revision %d", at, err, rev)
	}
	if _, err := b.PutIf(ctx, key, []byte("2"), rev); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutIf(ctx, key, []byte("stale"), rev); !errors.Is(err, ErrConflict) {
		t.Fatalf("a write from a stale read: %v, want ErrConflict", err)
	}

	// b's session stops being renewed, as a daemon killed: the others see
	// it leave within its TTL, and its writes are refused.
	if _, err := s.cli.Revoke(ctx, b.session.Lease()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"daemon-a"}, nextMembers(t, watch)); diff != "" {
		t.Fatalf("members after b died (-want +got):\n%s", diff)
	}
	if err := b.Put(ctx, key, []byte("dead")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a dead member's write: %v, want ErrLeaseLost", err)
	}
	if got, _ := s.Get(ctx, key); string(got) != "2" {
		t.Fatalf("value %q after the dead member's write", got)
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nextMembers(t, watch); len(got) != 0 {
		t.Fatalf("members after a left: %q", got)
	}
	if _, err := s.Join(ctx, "daemon-a", time.Second); err != nil {
		t.Fatalf("daemon-a back after it left: %v", err)
	}
}

// TestWatchValue: a watched key's value comes now (zero while it does
// not exist) and again at each write, with the write's revision.
func TestWatchValue(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()
	key := s.Key("_daemon", "dispatched", "refs/heads/main")
	watch := s.WatchValue(ctx, key)
	next := func() Value {
		t.Helper()
		select {
		case v := <-watch:
			return v
		case <-time.After(10 * time.Second):
			t.Fatal("no value in 10s")
			return Value{}
		}
	}
	if v := next(); v.Data != nil || v.Rev != 0 {
		t.Fatalf("a key that does not exist: %+v", v)
	}
	for _, commit := range []string{"c0ffee", "beef"} {
		if err := s.Put(ctx, key, []byte(commit)); err != nil {
			t.Fatal(err)
		}
		_, rev, err := s.GetRev(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if v := next(); string(v.Data) != commit || v.Rev != rev {
			t.Fatalf("after writing %s at %d: %q at %d", commit, rev, v.Data, v.Rev)
		}
	}
}

// TestWatchPuts: the writes under a prefix from a revision on, each with
// its revision, and not those elsewhere or before; the channel closes
// when ctx ends.
func TestWatchPuts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()
	prefix := s.Key("_reports") + "/"
	if err := s.Put(ctx, prefix+"before", []byte("x")); err != nil {
		t.Fatal(err)
	}
	from, err := s.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watch := s.WatchPuts(ctx, prefix, from+1)
	want := map[string]int64{}
	for _, k := range []string{prefix + "c1", s.Key("_status", "demo"), prefix + "c1/demo"} {
		if err := s.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
		_, rev, err := s.GetRev(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(k, prefix) {
			want[k] = rev
		}
	}
	got := map[string]int64{}
	for len(got) < len(want) {
		select {
		case b := <-watch:
			for _, p := range b.Puts {
				got[p.Key] = p.Rev
				if b.Revision < p.Rev {
					t.Errorf("a batch at revision %d carries a put at %d", b.Revision, p.Rev)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("puts seen %v, want %v", got, want)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("puts (-want +got):\n%s", d)
	}
	cancel()
	for range watch { // closes
	}
}

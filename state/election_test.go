package state

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestElectionOneLeader: a second daemon waits while the first leads,
// Leader names the first; once the first resigns, the second leads and
// the first's fenced writes are refused.
func TestElectionOneLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()

	if _, err := s.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader with no daemon: %v, want ErrNoLeader", err)
	}
	first, err := s.Elect(ctx, "daemon-a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := s.Leader(ctx); err != nil || id != "daemon-a" {
		t.Fatalf("Leader = %q, %v; want daemon-a", id, err)
	}
	if err := first.Put(ctx, s.Key("_status", "x"), []byte("a")); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
	won := make(chan *Leadership)
	go func() {
		l, err := s.Elect(ctx, "daemon-b", time.Second)
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	select {
	case <-won:
		t.Fatal("a second daemon leads while the first does")
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-won
	if id, err := s.Leader(ctx); err != nil || id != "daemon-b" {
		t.Fatalf("Leader = %q, %v; want daemon-b", id, err)
	}
	if err := first.Put(ctx, s.Key("_status", "x"), []byte("stale")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a resigned leader's write: %v, want ErrLeaseLost", err)
	}
	if got, _ := s.Get(ctx, s.Key("_status", "x")); string(got) != "a" {
		t.Fatalf("value %q after the resigned leader's write", got)
	}
	select {
	case <-first.Lost():
	default:
		t.Error("a resigned leadership is not lost")
	}
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

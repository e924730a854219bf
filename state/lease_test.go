package state

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLeaseOneWriterAtATime: a second writer waits while the first holds
// the lease, and takes it when the first releases it.
func TestLeaseOneWriterAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()

	first, err := s.Acquire(ctx, "prod", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Put(ctx, s.Key("prod", "a"), []byte("1")); err != nil {
		t.Fatalf("holder's write: %v", err)
	}
	if err := first.Check(ctx); err != nil {
		t.Fatalf("holder's check: %v", err)
	}
	waited := make(chan struct{})
	got := make(chan *Lease)
	go func() {
		second, err := s.Acquire(ctx, "prod", 0, func() { close(waited) })
		if err != nil {
			t.Error(err)
		}
		got <- second
	}()
	<-waited
	select {
	case <-got:
		t.Fatal("the second writer took a lease the first holds")
	case <-time.After(300 * time.Millisecond):
	}
	// Another name is another lease: no wait.
	other, err := s.Acquire(ctx, "dev", 0, func() { t.Error("waited for another cluster's lease") })
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)

	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	defer second.Release(ctx)
	if second.Token() <= first.Token() {
		t.Errorf("fencing tokens: second %d, first %d: want increasing", second.Token(), first.Token())
	}
	if err := second.Put(ctx, s.Key("prod", "a"), []byte("2")); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	if err := second.Check(ctx); err != nil {
		t.Errorf("new holder's check: %v", err)
	}
	if err := first.Check(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("released writer's check: %v, want ErrLeaseLost", err)
	}
	if err := first.Put(ctx, s.Key("prod", "a"), []byte("stale")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("released writer's write: %v, want ErrLeaseLost", err)
	}
	if v, _ := s.Get(ctx, s.Key("prod", "a")); string(v) != "2" {
		t.Errorf("value after a stale write: %q, want 2", v)
	}
}

// TestLeaseExpiredCannotWrite: a writer whose lease expired (revoked
// here, as the TTL would) has every kind of write refused, and none of
// them lands, even when nobody else took the lease yet.
func TestLeaseExpiredCannotWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()
	l, err := s.Acquire(ctx, "prod", 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.PutSecret(ctx, s.Key("prod", "k"), []byte("secret")); err != nil {
		t.Fatal(err)
	}
	if v, err := l.GetSecret(ctx, s.Key("prod", "k")); err != nil || string(v) != "secret" {
		t.Fatalf("read back: %q %v", v, err)
	}
	before, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Error("Lost not closed after the lease ended")
	}
	writes := []struct {
		name  string
		write func() error
	}{
		{"put", func() error { return l.Put(ctx, s.Key("prod", "x"), []byte("1")) }},
		{"put secret", func() error { return l.PutSecret(ctx, s.Key("prod", "k"), []byte("2")) }},
		{"put many", func() error { return l.PutMany(ctx, []Entry{{Key: s.Key("prod", "y"), Value: []byte("1")}}) }},
		{"delete", func() error { return l.Delete(ctx, s.Key("prod", "k")) }},
		{"delete prefix", func() error { return l.DeletePrefix(ctx, s.Key("prod")+"/") }},
	}
	for _, w := range writes {
		if err := w.write(); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("%s after the lease expired: %v, want ErrLeaseLost", w.name, err)
		}
	}
	after, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("state revision moved from %d to %d: a write landed", before, after)
	}
}

package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrLeaseLost is a write refused because the writer no longer holds its
// lease: it expired (the process stalled past its TTL) or was revoked, and
// another writer may hold it now.
var ErrLeaseLost = errors.New("the lease is lost: another writer may hold it")

// DefaultLeaseTTL is how long a lease outlives a writer that stopped
// renewing it (a crash, a partition).
const DefaultLeaseTTL = 15 * time.Second

// Lease is a named lease in etcd held by one writer at a time, and the
// writer that holds it: every write through it is a transaction that
// first checks the lease is still this writer's (its lock key's creation
// revision, the fencing token), so a writer that lost it writes nothing.
// etcd's lock alone is not a mutex: a paused holder whose lease expired
// would still write after it resumed. Lease implements [KV].
type Lease struct {
	s       *Store
	session *concurrency.Session
	mutex   *concurrency.Mutex
	name    string
}

var _ KV = (*Lease)(nil)

// Acquire takes the lease name, waiting while another writer holds it;
// waiting, if set, is called once when it must. The lease lives ttl
// (DefaultLeaseTTL if 0) past the writer's last renewal (the client
// renews it every ttl/3).
func (s *Store) Acquire(ctx context.Context, name string, ttl time.Duration, waiting func()) (*Lease, error) {
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	secs := max(int(ttl/time.Second), 1)
	session, err := concurrency.NewSession(s.cli, concurrency.WithTTL(secs), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", name, err)
	}
	m := concurrency.NewMutex(session, KeysOf(s).Lock(name))
	err = m.TryLock(ctx)
	if errors.Is(err, concurrency.ErrLocked) {
		if waiting != nil {
			waiting()
		}
		err = m.Lock(ctx)
	}
	if err != nil {
		session.Close()
		return nil, fmt.Errorf("lease %s: %w", name, err)
	}
	return &Lease{s: s, session: session, mutex: m, name: name}, nil
}

// Release gives the lease up; its writes fail from then on.
func (l *Lease) Release(ctx context.Context) error {
	err := l.mutex.Unlock(ctx)
	return errors.Join(err, l.session.Close())
}

// Revoke ends the lease at once, as its expiry would: for tests of what
// a writer that lost its lease can do.
func (l *Lease) Revoke(ctx context.Context) error {
	_, err := l.s.cli.Revoke(ctx, l.session.Lease())
	return err
}

// Lost is closed when the lease is known to be gone (it could not be
// renewed). A write is refused even before: the check is in the write.
func (l *Lease) Lost() <-chan struct{} { return l.session.Done() }

// Token is the fencing token: the revision the lease was taken at.
func (l *Lease) Token() int64 { return l.mutex.Header().Revision }

// txn commits ops if the lease is still this writer's.
func (l *Lease) txn(ctx context.Context, what string, ops ...clientv3.Op) error {
	resp, err := l.s.cli.Txn(ctx).If(l.mutex.IsOwner()).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%s: lease %s: %w", what, l.name, ErrLeaseLost)
	}
	return nil
}

// Check returns nil if the lease is still this writer's as etcd sees it
// now (a linearizable round trip), [ErrLeaseLost] if not, and the error if
// etcd cannot tell: a writer outside the store (a cloud API call) checks
// it just before each write, instead of trusting a keepalive that has
// not noticed the loss yet.
func (l *Lease) Check(ctx context.Context) error { return l.txn(ctx, "check the lease") }

// Key implements KV.
func (l *Lease) Key(parts ...string) string { return l.s.Key(parts...) }

// Get implements KV.
func (l *Lease) Get(ctx context.Context, key string) ([]byte, error) { return l.s.Get(ctx, key) }

// GetSecret implements KV.
func (l *Lease) GetSecret(ctx context.Context, key string) ([]byte, error) {
	return l.s.GetSecret(ctx, key)
}

// List implements KV.
func (l *Lease) List(ctx context.Context, prefix string) (map[string][]byte, error) {
	return l.s.List(ctx, prefix)
}

// Open implements KV.
func (l *Lease) Open(key string, sealed []byte) ([]byte, error) { return l.s.Open(key, sealed) }

// Put implements KV, fenced.
func (l *Lease) Put(ctx context.Context, key string, value []byte) error {
	return l.txn(ctx, "put "+key, clientv3.OpPut(key, string(value)))
}

// PutSecret implements KV, fenced.
func (l *Lease) PutSecret(ctx context.Context, key string, value []byte) error {
	sealed, err := l.s.seal.seal(key, value)
	if err != nil {
		return err
	}
	return l.Put(ctx, key, sealed)
}

// PutMany implements KV, fenced: each run of entries is one transaction.
func (l *Lease) PutMany(ctx context.Context, entries []Entry) error {
	held, err := l.s.putMany(ctx, entries, l.mutex.IsOwner())
	if err == nil && !held {
		err = fmt.Errorf("put %d keys: lease %s: %w", len(entries), l.name, ErrLeaseLost)
	}
	return err
}

// Delete removes key, fenced; a missing key is not an error.
func (l *Lease) Delete(ctx context.Context, key string) error {
	return l.txn(ctx, "delete "+key, clientv3.OpDelete(key))
}

// DeletePrefix removes every key below prefix, fenced.
func (l *Lease) DeletePrefix(ctx context.Context, prefix string) error {
	if !strings.HasPrefix(prefix, l.s.prefix) || len(prefix) <= len(l.s.prefix) {
		return fmt.Errorf("delete %s: %w", prefix, errOutsidePrefix)
	}
	return l.txn(ctx, "delete "+prefix, clientv3.OpDelete(prefix, clientv3.WithPrefix()))
}

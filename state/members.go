package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrMemberTaken is a Join under an id a live daemon already holds.
var ErrMemberTaken = errors.New("a live daemon already holds this id")

// ErrConflict is a [Membership.PutIf] whose key was written since it was
// read: read it again and retry.
var ErrConflict = errors.New("the key was written since it was read")

// Membership is a daemon's part in sharing the fleet: its key under
// _members/ lives as long as the daemon renews its session, and every
// write through it is fenced on that key (a daemon that paused past its
// TTL, whose share the others have taken over, writes nothing).
type Membership struct {
	s       *Store
	session *concurrency.Session
	id, key string
	rev     int64 // the member key's creation revision: the fencing token
}

// Join makes the daemon id a member until Leave or until its session can
// no longer be renewed (ttl, DefaultLeaseTTL if 0, past its last
// renewal). Two live daemons cannot hold one id: [ErrMemberTaken].
func (s *Store) Join(ctx context.Context, id string, ttl time.Duration) (*Membership, error) {
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	if id == "" || strings.Contains(id, "/") {
		return nil, fmt.Errorf("join as %q: a daemon's id is one path segment", id)
	}
	session, err := concurrency.NewSession(s.cli, concurrency.WithTTL(max(int(ttl/time.Second), 1)),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("join as %s: %w", id, err)
	}
	key := KeysOf(s).Member(id)
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, id, clientv3.WithLease(session.Lease()))).Commit()
	if err != nil {
		session.Close()
		return nil, fmt.Errorf("join as %s: %w", id, err)
	}
	if !resp.Succeeded {
		session.Close()
		return nil, fmt.Errorf("join as %s: %w", id, ErrMemberTaken)
	}
	return &Membership{s: s, session: session, id: id, key: key, rev: resp.Header.Revision}, nil
}

// ID is the member's id.
func (m *Membership) ID() string { return m.id }

// Lost is closed when the membership's session ended: the other daemons
// take its share over.
func (m *Membership) Lost() <-chan struct{} { return m.session.Done() }

// Leave ends the membership at once: the others take its share over
// without waiting for its TTL.
func (m *Membership) Leave(ctx context.Context) error {
	_, err := m.s.cli.Delete(ctx, m.key)
	return errors.Join(err, m.session.Close())
}

// held is the fence of every write through the membership.
func (m *Membership) held() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(m.key), "=", m.rev)
}

// Put writes key while the daemon is a member ([ErrLeaseLost] if not).
func (m *Membership) Put(ctx context.Context, key string, value []byte) error {
	_, err := m.PutIf(ctx, key, value, -1)
	return err
}

// PutIf writes key if it was last written at modRev (0: if it does not
// exist; -1: whatever it holds) and the daemon is still a member; it
// returns the write's revision. A key written since is [ErrConflict].
func (m *Membership) PutIf(ctx context.Context, key string, value []byte, modRev int64) (int64, error) {
	cmps := []clientv3.Cmp{m.held()}
	if modRev >= 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", modRev))
	}
	resp, err := m.s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(m.key, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return 0, fmt.Errorf("put %s: %w", key, err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	if resp.Responses[0].GetResponseRange().Count == 0 {
		return 0, fmt.Errorf("put %s: membership of %s: %w", key, m.id, ErrLeaseLost)
	}
	return 0, fmt.Errorf("put %s: %w", key, ErrConflict)
}

// Write puts entries and deletes keys while the daemon is a member, in
// as few transactions as etcd allows (each run atomic, puts first); it
// returns the transactions' revisions.
func (m *Membership) Write(ctx context.Context, puts []Entry, deletes []string) ([]int64, error) {
	ops := make([]clientv3.Op, 0, len(puts)+len(deletes))
	for _, e := range puts {
		v := e.Value
		if e.Secret {
			var err error
			if v, err = m.s.seal.seal(e.Key, v); err != nil {
				return nil, err
			}
		}
		ops = append(ops, clientv3.OpPut(e.Key, string(v)))
	}
	for _, k := range deletes {
		ops = append(ops, clientv3.OpDelete(k))
	}
	var revs []int64
	for chunk := range slices.Chunk(ops, maxTxnOps-1) {
		resp, err := m.s.cli.Txn(ctx).If(m.held()).Then(chunk...).Commit()
		if err != nil {
			return revs, fmt.Errorf("write %d keys: %w", len(chunk), err)
		}
		if !resp.Succeeded {
			return revs, fmt.Errorf("write %d keys: membership of %s: %w", len(chunk), m.id, ErrLeaseLost)
		}
		revs = append(revs, resp.Header.Revision)
	}
	return revs, nil
}

// Delete removes key while the daemon is a member.
func (m *Membership) Delete(ctx context.Context, key string) error {
	resp, err := m.s.cli.Txn(ctx).If(m.held()).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("delete %s: membership of %s: %w", key, m.id, ErrLeaseLost)
	}
	return nil
}

// GetRev returns key's value and the revision it was last written at, or
// [ErrNotFound]: what [Membership.PutIf] compares.
func (s *Store) GetRev(ctx context.Context, key string) ([]byte, int64, error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// Members lists the live members' ids, sorted, and the revision they were
// read at.
func (s *Store) Members(ctx context.Context) ([]string, int64, error) {
	prefix := KeysOf(s).Members()
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, fmt.Errorf("list the members: %w", err)
	}
	ids := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ids = append(ids, strings.TrimPrefix(string(kv.Key), prefix))
	}
	slices.Sort(ids)
	return ids, resp.Header.Revision, nil
}

// WatchMembers sends the live members' ids, sorted, now and at every
// change, until ctx ends; a watch that breaks is started again, from a
// fresh list. A slow reader gets the newest set, never a stale one.
func (s *Store) WatchMembers(ctx context.Context) <-chan []string {
	out := make(chan []string, 1)
	send := func(ids []string) {
		select { // replace what the reader has not taken yet
		case <-out:
		default:
		}
		out <- ids
	}
	go func() {
		defer close(out)
		var last []string
		for ctx.Err() == nil {
			ids, rev, err := s.Members(ctx)
			if err != nil {
				s.log.Debug("members: list", "err", err)
				sleep(ctx, time.Second)
				continue
			}
			if last == nil || !slices.Equal(ids, last) {
				send(ids)
				last = ids
			}
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for resp := range s.cli.Watch(wctx, KeysOf(s).Members(), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
				if resp.Err() != nil {
					break
				}
				changed := false
				for _, ev := range resp.Events {
					id := strings.TrimPrefix(string(ev.Kv.Key), KeysOf(s).Members())
					i, found := slices.BinarySearch(last, id)
					switch {
					case ev.Type == clientv3.EventTypeDelete && found:
						last = slices.Delete(slices.Clone(last), i, i+1)
						changed = true
					case ev.Type == clientv3.EventTypePut && !found:
						last = slices.Insert(slices.Clone(last), i, id)
						changed = true
					}
				}
				if changed {
					send(last)
				}
			}
			cancel()
			sleep(ctx, 100*time.Millisecond)
		}
	}()
	return out
}

// Value is a key's value and the revision it was written at; a zero
// Value is a key that does not exist.
type Value struct {
	Data []byte
	Rev  int64
}

// WatchValue sends key's value now and at every write, until ctx ends; a
// watch that breaks is started again from a fresh read. A slow reader
// gets the newest value, never a stale one.
func (s *Store) WatchValue(ctx context.Context, key string) <-chan Value {
	out := make(chan Value, 1)
	send := func(v Value) {
		select { // replace what the reader has not taken yet
		case <-out:
		default:
		}
		out <- v
	}
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			resp, err := s.cli.Get(ctx, key)
			if err != nil {
				s.log.Debug("watch a value: read", "key", key, "err", err)
				sleep(ctx, time.Second)
				continue
			}
			if len(resp.Kvs) == 0 {
				send(Value{})
			} else {
				send(Value{Data: resp.Kvs[0].Value, Rev: resp.Kvs[0].ModRevision})
			}
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypePut {
						send(Value{Data: ev.Kv.Value, Rev: ev.Kv.ModRevision})
					}
				}
			}
			cancel()
			sleep(ctx, 100*time.Millisecond)
		}
	}()
	return out
}

// Put is a key written, and the revision it was written at.
type Put struct {
	Key string
	Rev int64
}

// PutBatch is the puts one watch response carried, and the revision the
// store was at when it sent them: every write up to Revision was seen.
type PutBatch struct {
	Puts     []Put
	Revision int64
}

// WatchPuts sends the writes of keys under prefix from revision from on,
// a batch per watch response (one with no put tells the revision moved),
// until the watch breaks or ctx ends; then the channel closes and the
// caller starts again from a revision of its choosing.
func (s *Store) WatchPuts(ctx context.Context, prefix string, from int64) <-chan PutBatch {
	out := make(chan PutBatch)
	go func() {
		defer close(out)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		for wr := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
			if wr.Err() != nil {
				s.log.Debug("watch the puts: broken", "prefix", prefix, "err", wr.Err())
				return
			}
			b := PutBatch{Revision: wr.Header.Revision}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					b.Puts = append(b.Puts, Put{Key: string(ev.Kv.Key), Rev: ev.Kv.ModRevision})
				}
			}
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrNoLeader is returned by [Store.Leader] when no daemon leads.
var ErrNoLeader = errors.New("no daemon leads on this state")

// leaderName is the election's key under _locks/ (cluster names are DNS
// labels, so no cluster's lease can take it); under _locks/ it does not
// move the store's revision.
const leaderName = "_daemon"

// Leadership is a won election: the daemon that holds it is the one that
// applies. It ends when Resign is called or its session can no longer be
// renewed (Lost).
type Leadership struct {
	session  *concurrency.Session
	election *concurrency.Election
	// key and rev are the campaign's key and its creation revision, the
	// fencing token of the leader's writes.
	key string
	rev int64
}

// Elect campaigns as id for the daemons' leadership and returns once it
// is won, or with ctx's error. The leadership outlives a daemon that died
// by ttl (DefaultLeaseTTL if 0).
func (s *Store) Elect(ctx context.Context, id string, ttl time.Duration) (*Leadership, error) {
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	session, err := concurrency.NewSession(s.cli, concurrency.WithTTL(max(int(ttl/time.Second), 1)),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	e := concurrency.NewElection(session, KeysOf(s).Lock(leaderName))
	if err := e.Campaign(ctx, id); err != nil {
		session.Close()
		return nil, fmt.Errorf("election: %w", err)
	}
	return &Leadership{session: session, election: e, key: e.Key(), rev: e.Rev()}, nil
}

// Lost is closed when the leadership's session ended: another daemon may
// lead now.
func (l *Leadership) Lost() <-chan struct{} { return l.session.Done() }

// Resign gives the leadership up.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.election.Resign(ctx)
	return errors.Join(err, l.session.Close())
}

// Leader returns the id of the daemon that leads on this state, or
// [ErrNoLeader].
func (s *Store) Leader(ctx context.Context) (string, error) {
	resp, err := s.cli.Get(ctx, KeysOf(s).Lock(leaderName)+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("read the leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", ErrNoLeader
	}
	return string(resp.Kvs[0].Value), nil
}

// Put writes key if this daemon still leads: a daemon that lost the
// leadership (paused past its TTL) writes nothing ([ErrLeaseLost]).
func (l *Leadership) Put(ctx context.Context, key string, value []byte) error {
	_, err := l.PutRev(ctx, key, value)
	return err
}

// PutRev writes key as Put does and returns the write's revision.
func (l *Leadership) PutRev(ctx context.Context, key string, value []byte) (int64, error) {
	cmp := clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
	resp, err := l.session.Client().Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(value))).Commit()
	if err != nil {
		return 0, fmt.Errorf("put %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("put %s: leadership: %w", key, ErrLeaseLost)
	}
	return resp.Header.Revision, nil
}

// Delete removes key if this daemon still leads, as Put writes.
func (l *Leadership) Delete(ctx context.Context, key string) error {
	cmp := clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
	resp, err := l.session.Client().Txn(ctx).If(cmp).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("delete %s: leadership: %w", key, ErrLeaseLost)
	}
	return nil
}

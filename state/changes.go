package state

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Changes follows the writes below the store's prefix with one etcd
// watch, so that what a reader read of the store can be kept until a
// write touches it: a planner keeps a quiet fleet's ledgers between plans
// instead of reading them all again.
//
// It records the revision of the newest write per key group, a group
// being a key's first one and two segments below the prefix
// ("prod", "prod/infra", "_applied/prod"): how finely a kept read can
// be invalidated. Deeper keys count for their group, so a reader that
// asks for one file record of a host learns of a write to any of that
// cluster's host records: never too little, sometimes too much.
//
// A value read at revision R is still what the store holds when
// [Changes.Sync] returned S >= R and [Changes.RevisionOf] its keys is at
// most R. When the watch is restarted (the store compacted what it had
// not yet delivered, or the connection failed), RevisionOf answers at
// least the revision the new watch starts from: everything read before it
// is read again.
type Changes struct {
	s *Store

	mu sync.Mutex
	// from: the watch delivers every write after it. seen: every write up
	// to it was delivered.
	from, seen int64
	groups     map[string]int64
	// watcher is the watch's client, closed when run ends.
	watcher clientv3.Watcher
	// caught is closed and replaced when seen moves.
	caught chan struct{}
	// up is closed when the first watch is established.
	up   chan struct{}
	once sync.Once
}

// Changes returns the store's change tracker, starting its watch on first
// use; it stops when the store is closed.
func (s *Store) Changes() *Changes {
	s.changesOnce.Do(func() {
		s.changes = &Changes{s: s, watcher: clientv3.NewWatcher(s.cli), groups: map[string]int64{}, caught: make(chan struct{}), up: make(chan struct{})}
		go s.changes.run(s.cli.Ctx())
	})
	return s.changes
}

// ErrBehind is a [Changes.Sync] that could not learn that every write up
// to the store's revision was delivered: read the store instead.
var ErrBehind = errors.New("state changes: the watch is behind the store")

// syncWait bounds how long Sync waits for the watch to catch up;
// progressAsk is how often it asks the server where the watch stands.
const syncWait, progressAsk = 2 * time.Second, 200 * time.Millisecond

// Sync waits until every write up to the store's current revision was
// delivered, and returns that revision.
func (c *Changes) Sync(ctx context.Context) (int64, error) {
	select {
	case <-c.up:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(syncWait):
		return 0, fmt.Errorf("%w: no watch yet", ErrBehind)
	}
	rev, err := c.s.Current(ctx)
	if err != nil {
		return 0, err
	}
	timeout := time.NewTimer(syncWait)
	defer timeout.Stop()
	// A quiet store sends nothing: ask the server where the watch stands.
	// It answers only while every watcher of the stream is synced, and
	// drops the request otherwise (etcd's watchableStore.progressIfSync:
	// a watcher whose events wait to be sent, on a busy machine, is not),
	// so the question is asked again until the answer comes.
	ask := time.NewTicker(progressAsk)
	defer ask.Stop()
	asked := false
	for {
		c.mu.Lock()
		seen, caught := c.seen, c.caught
		c.mu.Unlock()
		if seen >= rev {
			return rev, nil
		}
		if !asked {
			// The request goes on the watch's stream: etcd's client finds
			// it by the context's metadata, the watch's (WithRequireLeader).
			if err := c.watcher.RequestProgress(clientv3.WithRequireLeader(ctx)); err != nil {
				return 0, fmt.Errorf("%w: %w", ErrBehind, err)
			}
			asked = true
		}
		select {
		case <-caught:
		case <-ask.C:
			asked = false
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-timeout.C:
			return 0, fmt.Errorf("%w: delivered up to %d of %d", ErrBehind, seen, rev)
		}
	}
}

// RevisionOf is the revision of the newest write among keys that the
// watch delivered, or the revision it started from if that is newer: a
// key that ends in "/" stands for every key below it.
func (c *Changes) RevisionOf(keys ...string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	rev := c.from
	for _, k := range keys {
		rev = max(rev, c.groups[c.group(k)])
	}
	return rev
}

// group is the group of a key, or of the keys below a prefix: its first
// segment below the store's prefix when the prefix has one segment
// ("prod/"), its first two otherwise.
func (c *Changes) group(key string) string {
	first, two := c.groupsOf(key)
	return cmp.Or(two, first)
}

// groupsOf are the groups a key counts for: its first segment below the
// store's prefix, and its first two ("" when it has one).
func (c *Changes) groupsOf(key string) (first, two string) {
	first, tail, _ := strings.Cut(strings.TrimPrefix(key, c.s.prefix), "/")
	if tail == "" {
		return first, ""
	}
	second, _, _ := strings.Cut(tail, "/")
	return first, first + "/" + second
}

// deliver records the writes of one watch response, and how far the
// watch has come.
func (c *Changes) deliver(resp clientv3.WatchResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.seen
	for _, ev := range resp.Events {
		rev := ev.Kv.ModRevision
		first, two := c.groupsOf(string(ev.Kv.Key))
		c.groups[first] = max(c.groups[first], rev)
		if two != "" {
			c.groups[two] = max(c.groups[two], rev)
		}
		seen = max(seen, rev)
	}
	// Only a progress notification says that nothing more is pending up
	// to its revision: the header of a response with events may run
	// ahead of events still to come while the watch catches up.
	if resp.IsProgressNotify() {
		seen = max(seen, resp.Header.Revision)
	}
	if seen > c.seen {
		c.seen = seen
		close(c.caught)
		c.caught = make(chan struct{})
	}
}

// run keeps a watch on the store's prefix until ctx ends, starting again
// from the store's revision when a watch fails.
func (c *Changes) run(ctx context.Context) {
	defer c.watcher.Close()
	for ctx.Err() == nil {
		rev, err := c.s.Current(ctx)
		if err != nil {
			c.s.log.Debug("state changes: no revision", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		c.mu.Lock()
		// What was read before rev is not known to hold any more.
		c.from, c.seen = rev, rev
		clear(c.groups)
		close(c.caught)
		c.caught = make(chan struct{})
		c.mu.Unlock()
		c.once.Do(func() { close(c.up) })
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range c.watcher.Watch(wctx, c.s.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if err := resp.Err(); err != nil {
				c.s.log.Debug("state changes: the watch ended", "err", err)
				break
			}
			c.deliver(resp)
		}
		cancel()
		sleep(ctx, 100*time.Millisecond)
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Current is the store's revision now (etcd's, of every key): no write
// read so far is newer. It reads one key, not the store.
func (s *Store) Current(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, KeysOf(s).InstallationID(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("state revision: %w", err)
	}
	return resp.Header.Revision, nil
}

package daemon

import (
	"context"
	"maps"
	"slices"
	"sync"

	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/schemas"
)

// resync queues a drift check of every valid cluster of the head's fleet,
// applied or not: a cluster whose first apply failed (the cloud down for
// a while) is tried again too, not left until the next commit.
func (d *Daemon) resync(ctx context.Context) {
	d.shareMu.Lock()
	defer d.shareMu.Unlock()
	d.mu.Lock()
	head, fleet := d.head, d.fleet
	d.mu.Unlock()
	if head == "" {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(fleet)) {
		if d.mine(name) {
			d.enqueue(ctx, name, &work{commit: head, ref: d.cfg.Source.Branch(), clusters: fleet, resync: true})
		}
	}
}

// work is what a cluster's queue runs: the cluster at a commit, or a
// drift check (resync).
type work struct {
	commit, ref string
	clusters    map[string]*schemas.Cluster
	resync      bool
}

// request is what to plan and apply of a cluster for the work.
func (w *work) request(name string) reconciler.Request {
	return reconciler.Request{Clusters: w.clusters, Only: name, Commit: w.commit, Resync: w.resync}
}

// version is the Kubernetes version the work's spec of a cluster asks
// for; "" if the work has no spec of it.
func (w *work) version(name string) string {
	if c := w.clusters[name]; c != nil {
		return c.Spec.Kubernetes.Version
	}
	return ""
}

// reconciled is the event of a cluster's entry in the work's note.
func (w *work) reconciled(name string, entry *report.Cluster) event {
	c := w.clusters[name]
	return event{kind: evReconciled, commit: w.commit, ref: w.ref, entry: entry, resync: w.resync,
		paused: c != nil && c.Spec.Paused, version: w.version(name)}
}

// queue holds a cluster's next work: newer work replaces older queued
// work (only the newest commit matters), and a drift check never
// replaces a commit.
type queue struct {
	mu   sync.Mutex
	next *work
	busy bool // a reconcile runs
	wake chan struct{}
}

func (d *Daemon) enqueue(ctx context.Context, name string, w *work) {
	d.mu.Lock()
	q := d.queues[name]
	if q == nil {
		if d.queues == nil {
			d.mu.Unlock()
			return // not a member
		}
		q = &queue{wake: make(chan struct{}, 1)}
		d.queues[name] = q
		d.work.Add(1)
		go func() {
			defer d.work.Done()
			d.worker(ctx, name, q)
		}()
	}
	d.mu.Unlock()
	q.mu.Lock()
	if !(w.resync && q.next != nil && !q.next.resync) {
		q.next = w
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (d *Daemon) worker(ctx context.Context, name string, q *queue) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		q.mu.Lock()
		w := q.next
		q.next, q.busy = nil, w != nil
		q.mu.Unlock()
		if w != nil {
			d.reconcile(ctx, name, w)
			q.mu.Lock()
			q.busy = false
			q.mu.Unlock()
		}
	}
}

// idle tells whether a cluster's queue has nothing queued or running.
func (d *Daemon) idle(name string) bool {
	d.mu.Lock()
	q := d.queues[name]
	d.mu.Unlock()
	if q == nil {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.next == nil && !q.busy
}

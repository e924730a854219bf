package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/state"
)

// update sets a cluster's entry in its commit's note, and its status, and
// publishes the note.
func (d *Daemon) update(ctx context.Context, w *work, name string, entry *report.Cluster) {
	if w.resync && entry.State == report.Pending {
		// A drift correction under way keeps the commit's result.
		return
	}
	if w.resync && drifted(entry.Plan) == 0 && entry.State == report.Success {
		// A scheduled backup taken: the status says so, not the note.
		d.record(ctx, name, event{kind: evChecked, backup: true, version: w.version(name)})
		return
	}
	// Read, change and publish the note in one turn: the clusters'
	// workers update the same note.
	d.pubMu.Lock()
	n, err := d.Note(ctx, w.commit)
	if err != nil {
		n = &report.Note{Commit: w.commit, Ref: w.ref, Applied: true, Clusters: map[string]*report.Cluster{}}
	}
	if w.resync {
		// The commit's own entry stays; the drift check is added to it.
		drift := entry
		if entry = n.Clusters[name]; entry == nil {
			entry = &report.Cluster{}
		}
		entry.Drift, entry.State, entry.Summary = drift, drift.State, drift.Summary
	}
	n.Clusters[name] = entry
	d.publishLocked(ctx, n)
	d.pubMu.Unlock()
	d.record(ctx, name, w.reconciled(name, entry))
}

// publish stores the note and hands it to every reporter. A reporter's
// failure is logged and counted: it does not stop the loop.
func (d *Daemon) publish(ctx context.Context, n *report.Note) {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	d.publishLocked(ctx, n)
}

func (d *Daemon) publishLocked(ctx context.Context, n *report.Note) {
	n.State = n.Overall()
	if err := d.put(ctx, state.KeysOf(d.cfg.Store).Report(n.Commit), n); err != nil {
		d.log.Error("store the note", "commit", n.Commit, "err", err)
		d.cfg.Metrics.errorAt("report")
		return
	}
	for _, r := range d.cfg.Reporters {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if err := r.Report(rctx, n); err != nil {
			d.log.Error("report", "commit", n.Commit, "err", err)
			d.cfg.Metrics.errorAt("report")
		}
		cancel()
	}
}

// put writes a JSON value if this daemon still leads.
func (d *Daemon) put(ctx context.Context, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return d.write(ctx, key, data)
}

// write puts key through the leadership: a daemon that no longer leads
// writes nothing. The write outlives ctx's cancellation (a stopping leader
// still records what it finished).
func (d *Daemon) write(ctx context.Context, key string, data []byte) error {
	d.mu.Lock()
	l := d.leader
	d.mu.Unlock()
	if l == nil {
		return fmt.Errorf("put %s: not leading: %w", key, state.ErrLeaseLost)
	}
	return l.Put(context.WithoutCancel(ctx), key, data)
}

// remove deletes key through the leadership, as write writes.
func (d *Daemon) remove(ctx context.Context, key string) error {
	d.mu.Lock()
	l := d.leader
	d.mu.Unlock()
	if l == nil {
		return fmt.Errorf("delete %s: not leading: %w", key, state.ErrLeaseLost)
	}
	return l.Delete(context.WithoutCancel(ctx), key)
}

// Note reads a commit's note from the store.
func (d *Daemon) Note(ctx context.Context, commit string) (*report.Note, error) {
	return readNote(ctx, d.cfg.Store, commit)
}

func readNote(ctx context.Context, store *state.Store, commit string) (*report.Note, error) {
	data, err := store.Get(ctx, state.KeysOf(store).Report(commit))
	if err != nil {
		return nil, err
	}
	var n report.Note
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("note of %s: %w", commit, err)
	}
	if n.Clusters == nil {
		n.Clusters = map[string]*report.Cluster{}
	}
	return &n, nil
}

func (d *Daemon) loadSeen(ctx context.Context) (map[string]string, error) {
	prefix := state.KeysOf(d.cfg.Store).SeenRefs()
	raw, err := d.cfg.Store.List(ctx, prefix)
	out := map[string]string{}
	for k, v := range raw {
		out[strings.TrimPrefix(k, prefix)] = string(v)
	}
	return out, err
}

func (d *Daemon) markSeen(ctx context.Context, ref, commit string) {
	d.mu.Lock()
	if d.seen != nil {
		d.seen[ref] = commit
	}
	d.mu.Unlock()
	if err := d.write(ctx, state.KeysOf(d.cfg.Store).SeenRef(ref), []byte(commit)); err != nil && ctx.Err() == nil {
		d.log.Error("record the handled ref", "ref", ref, "err", err)
	}
}

// Memo is where forge reporters remember what they posted: the store,
// written only while this daemon leads.
func (d *Daemon) Memo() report.Memo { return memo{d} }

type memo struct{ d *Daemon }

func (m memo) Get(ctx context.Context, key string) ([]byte, error) {
	return m.d.cfg.Store.Get(ctx, state.KeysOf(m.d.cfg.Store).Reported(key))
}

func (m memo) Put(ctx context.Context, key string, value []byte) error {
	return m.d.write(ctx, state.KeysOf(m.d.cfg.Store).Reported(key), value)
}

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	if w.resync {
		// The commit's own entry stays; the drift check is added to it.
		cur, err := d.entry(ctx, w.commit, name)
		if err != nil {
			d.log.Error("read the cluster's entry in the note", "commit", w.commit, "cluster", name, "err", err)
			cur = &report.Cluster{}
		}
		cur.Drift, cur.State, cur.Summary = entry, entry.State, entry.Summary
		entry = cur
	}
	if err := d.putEntries(ctx, w.commit, w.ref, map[string]*report.Cluster{name: entry}, nil); err != nil {
		d.log.Error("store the note", "commit", w.commit, "err", err)
		d.cfg.Metrics.errorAt("report")
	}
	d.record(ctx, name, w.reconciled(name, entry))
}

// A commit's note is stored as its header (Report: the note but its
// clusters) and one key per cluster (ReportEntry), which the cluster's
// owner writes: the daemons sharing a fleet write one note without
// contending for it, and no write carries more than one cluster's entry
// (a 10,000-cluster note is megabytes, past etcd's request limit). The
// leader hands the notes it writes to the reporters at once, and those
// the other members write as it sees them (reportNotes).

// publish stores the note as it is, replacing the stored one (the
// entries of clusters it does not hold are removed). A failure is logged
// and counted: it does not stop the loop.
func (d *Daemon) publish(ctx context.Context, n *report.Note) {
	n.State = n.Overall()
	if err := d.putEntries(ctx, n.Commit, n.Ref, n.Clusters, n); err != nil {
		d.log.Error("store the note", "commit", n.Commit, "err", err)
		d.cfg.Metrics.errorAt("report")
	}
}

// putEntries stores clusters' entries in commit's note. With header, the
// note's header is written and the entries of every other cluster are
// removed (the note is replaced); without, a note that has no header yet
// gets a blank one.
func (d *Daemon) putEntries(ctx context.Context, commit, ref string, entries map[string]*report.Cluster, header *report.Note) error {
	m, err := d.membership("note of " + commit)
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	keys := state.KeysOf(d.cfg.Store)
	var puts []state.Entry
	var deletes []string
	if header == nil {
		if _, err := d.cfg.Store.Get(ctx, keys.Report(commit)); errors.Is(err, state.ErrNotFound) {
			header = &report.Note{Commit: commit, Ref: ref, Applied: true}
		} else if err != nil {
			return err
		}
	} else {
		old, _, err := d.cfg.Store.Range(ctx, keys.ReportEntry(commit, ""), keys.ReportEntry(commit, "\xff"))
		if err != nil {
			return err
		}
		for k := range old {
			if entries[strings.TrimPrefix(k, keys.ReportEntry(commit, ""))] == nil {
				deletes = append(deletes, k)
			}
		}
	}
	if header != nil {
		h := *header
		h.Clusters, h.State = nil, ""
		data, err := json.Marshal(&h)
		if err != nil {
			return err
		}
		puts = append(puts, state.Entry{Key: keys.Report(commit), Value: data})
	}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		data, err := json.Marshal(entries[name])
		if err != nil {
			return err
		}
		puts = append(puts, state.Entry{Key: keys.ReportEntry(commit, name), Value: data})
	}
	slices.Sort(deletes)
	revs, err := m.Write(ctx, puts, deletes)
	if err != nil {
		return err
	}
	if d.Leading() {
		// The leader reports what it writes at once, in order; the
		// notes the others write it reports as it sees them.
		for _, rev := range revs {
			d.published.Store(rev, true)
		}
		n, err := d.Note(ctx, commit)
		if err != nil {
			return err
		}
		d.pubMu.Lock()
		d.report(ctx, n)
		d.pubMu.Unlock()
	}
	return nil
}

// entry reads a cluster's entry in commit's note (a blank one if none).
func (d *Daemon) entry(ctx context.Context, commit, name string) (*report.Cluster, error) {
	data, err := d.cfg.Store.Get(ctx, state.KeysOf(d.cfg.Store).ReportEntry(commit, name))
	c := &report.Cluster{}
	switch {
	case errors.Is(err, state.ErrNotFound):
		return c, nil
	case err != nil:
		return nil, err
	}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("entry of %s in the note of %s: %w", name, commit, err)
	}
	return c, nil
}

// report hands a stored note to every reporter; called with pubMu held
// (one report at a time, in the order the notes were stored).
func (d *Daemon) report(ctx context.Context, n *report.Note) {
	for _, r := range d.cfg.Reporters {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if err := r.Report(rctx, n); err != nil {
			d.log.Error("report", "commit", n.Commit, "err", err)
			d.cfg.Metrics.errorAt("report")
		}
		cancel()
	}
}

// putStatus writes a cluster's status while this daemon is a member: its
// owner's, or the last one's that worked on it.
func (d *Daemon) putStatus(ctx context.Context, key string, s ClusterStatus) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	m, err := d.membership("put " + key)
	if err != nil {
		return err
	}
	return m.Put(context.WithoutCancel(ctx), key, data)
}

// membership is this daemon's membership, through which it writes the
// notes and statuses of its share; what names the write refused without.
func (d *Daemon) membership(what string) (*state.Membership, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.member == nil {
		return nil, fmt.Errorf("%s: not a member: %w", what, state.ErrLeaseLost)
	}
	return d.member, nil
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
	return ReadNote(ctx, d.cfg.Store, commit)
}

// ReadNote reads a commit's note from the store: its header and every
// cluster's entry, in one read; its State is the clusters' (Overall).
func ReadNote(ctx context.Context, store *state.Store, commit string) (*report.Note, error) {
	keys := state.KeysOf(store)
	head := keys.Report(commit)
	kvs, _, err := store.Range(ctx, head, keys.ReportEntry(commit, "\xff"))
	if err != nil {
		return nil, err
	}
	data, ok := kvs[head]
	if !ok {
		return nil, fmt.Errorf("note of %s: %w", commit, state.ErrNotFound)
	}
	var n report.Note
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("note of %s: %w", commit, err)
	}
	if n.Clusters == nil {
		n.Clusters = make(map[string]*report.Cluster, len(kvs)-1)
	} // else a note stored whole, as before the entries had keys of their own: they come after
	prefix := keys.ReportEntry(commit, "")
	for k, v := range kvs {
		name, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		c := &report.Cluster{}
		if err := json.Unmarshal(v, c); err != nil {
			return nil, fmt.Errorf("entry of %s in the note of %s: %w", name, commit, err)
		}
		n.Clusters[name] = c
	}
	n.State = n.Overall()
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

// ReadNoteEntry reads a cluster's entry in a commit's note alone: its key,
// else the note's header (a note stored whole, as before the entries had
// keys of their own). A cluster's page reloads every few seconds: reading
// the whole note of a 10,000-cluster commit (megabytes) for one entry,
// for each of its recent commits, was the page's cost.
func ReadNoteEntry(ctx context.Context, store *state.Store, commit, cluster string) (*report.Cluster, error) {
	keys := state.KeysOf(store)
	data, err := store.Get(ctx, keys.ReportEntry(commit, cluster))
	if errors.Is(err, state.ErrNotFound) {
		var header report.Note
		if data, err = store.Get(ctx, keys.Report(commit)); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, &header); err != nil {
			return nil, fmt.Errorf("note of %s: %w", commit, err)
		}
		if c := header.Clusters[cluster]; c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("note of %s: no entry of %s: %w", commit, cluster, state.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var c report.Cluster
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("note of %s, entry of %s: %w", commit, cluster, err)
	}
	return &c, nil
}

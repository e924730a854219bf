package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// Several daemons on one store share the fleet. Each is a member while
// its session lives (state.Join); each cluster is owned by one member,
// chosen by rendezvous hashing over the live members (owner), so a
// member that joins or leaves moves only the clusters it gains or had
// (about 1/n of the fleet), and every member computes the same owners
// from the same list without talking to the others. The apply lease of
// each cluster (state.Acquire) still fences its applies: a member that
// lost a cluster while it applied it is refused its next write, and the
// new owner's apply waits for the lease.
//
// One member also leads: it follows the repository, judges each new
// head, writes its note with every cluster concerned pending, and
// dispatches it (the Dispatched key). Each member then takes its share
// of the note (takeHead): it plans the share in one plan, records the
// converged clusters in the note (each cluster's entry a key of its own,
// so the members write one note without contending) and queues the
// others. A member
// that gains clusters (it started, or another left or died) adopts them:
// resumes their journaled applies, takes their pending entries of the
// head and plans the rest, queuing what drifted. The leader hands every
// note the members write to the reporters, so a commit gets one git note
// and one status per cluster whoever applied it.

// Owner is the member that owns cluster among members (daemon ids): the
// one whose hash with the cluster's name is highest ("" with none).
func Owner(members []string, cluster string) string { return owner(members, cluster) }

// owner is Owner.
func owner(members []string, cluster string) string {
	var best string
	var top uint64
	for _, m := range members {
		h := sha256.Sum256([]byte(m + "\x00" + cluster))
		if w := binary.BigEndian.Uint64(h[:8]); best == "" || w > top {
			best, top = m, w
		}
	}
	return best
}

// mine tells whether this daemon owns cluster now.
func (d *Daemon) mine(cluster string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return owner(d.members, cluster) == d.cfg.ID
}

// shareOf is the member's share of names among members.
func (d *Daemon) shareOf(members []string, names map[string]bool) map[string]bool {
	out := map[string]bool{}
	for name := range names {
		if owner(members, name) == d.cfg.ID {
			out[name] = true
		}
	}
	return out
}

// follow runs the member's loop while it is one: it follows the members
// (adopting what it gains), the dispatched heads (taking its share of
// each), and checks its share for drift every resync interval.
func (d *Daemon) follow(ctx context.Context) {
	d.mu.Lock()
	d.queues = map[string]*queue{}
	d.mu.Unlock()
	defer func() {
		d.work.Wait()
		d.mu.Lock()
		d.queues, d.members, d.head, d.fleet, d.taken = nil, nil, "", nil, 0
		d.mu.Unlock()
	}()
	branch := d.cfg.Source.Branch()
	members := d.cfg.Store.WatchMembers(ctx)
	heads := d.cfg.Store.WatchValue(ctx, state.KeysOf(d.cfg.Store).Dispatched(branch))
	resync := time.NewTicker(d.cfg.ResyncInterval)
	defer resync.Stop()
	// The first list of members and the first dispatch are taken
	// together: a daemon that starts adopts its share at the head.
	var ids []string
	var head state.Value
	for gotIDs, gotHead := false, false; !gotIDs || !gotHead; {
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ids, ok = <-members:
			gotIDs = true
		case head, ok = <-heads:
			gotHead = true
		}
		if !ok {
			return
		}
	}
	d.shareMu.Lock()
	d.loadDispatch(ctx, head)
	d.shareMu.Unlock()
	d.reshare(ctx, ids)
	for {
		select {
		case <-ctx.Done():
			return
		case ids, ok := <-members:
			if ok {
				d.reshare(ctx, ids)
			}
		case h, ok := <-heads:
			if ok {
				d.takeHead(ctx, h)
			}
		case <-resync.C:
			d.resync(ctx)
		}
	}
}

// loadDispatch sets the member's head and fleet to a dispatched commit
// (read from this daemon's own copy of the repository), without taking
// anything of it; it returns the commit's note (nil if it could not).
func (d *Daemon) loadDispatch(ctx context.Context, h state.Value) *report.Note {
	commit := string(h.Data)
	if commit == "" {
		return nil
	}
	fleet, n, err := d.fleetOf(ctx, commit)
	if err != nil {
		d.log.Error("read the dispatched head's fleet", "commit", commit, "err", err)
		d.cfg.Metrics.errorAt("fetch")
		return nil
	}
	d.mu.Lock()
	d.head, d.fleet, d.taken = commit, fleet, h.Rev
	d.mu.Unlock()
	return n
}

// fleetOf reads the valid clusters of a dispatched commit, as the leader
// judged them: a cluster its note refused is left out. The commit is
// fetched if this daemon's copy does not have it yet. The note read is
// returned too.
func (d *Daemon) fleetOf(ctx context.Context, commit string) (map[string]*schemas.Cluster, *report.Note, error) {
	// The transitions are not checked again (the leader did, and its
	// note says which clusters it refused): each check reads two keys
	// per cluster, 20,000 reads at 10,000 clusters.
	fleet, err := d.readFleet(ctx, commit)
	if err != nil {
		if _, serr := d.cfg.Source.Sync(ctx); serr != nil && !errors.Is(serr, source.ErrUpToDate) {
			return nil, nil, errors.Join(err, serr)
		}
		if fleet, err = d.readFleet(ctx, commit); err != nil {
			return nil, nil, err
		}
	}
	n, err := d.Note(ctx, commit)
	if err != nil {
		// Without the note, a cluster the leader refused would pass.
		return nil, nil, err
	}
	valid := judge(fleet).valid
	for name, c := range n.Clusters {
		if c.State == report.Failure && c.Plan == nil {
			delete(valid, name) // refused at this commit
		}
	}
	return valid, n, nil
}

// takeHead takes this member's share of a newly dispatched head: its
// clusters pending in the note are planned together and the converged
// ones recorded; the others go to their queues.
func (d *Daemon) takeHead(ctx context.Context, h state.Value) {
	d.shareMu.Lock()
	defer d.shareMu.Unlock()
	d.mu.Lock()
	taken := d.taken
	d.mu.Unlock()
	if len(h.Data) == 0 || h.Rev <= taken {
		return // the leader dispatched it from this daemon: taken already
	}
	n := d.loadDispatch(ctx, h)
	if n == nil {
		return
	}
	var names []string
	for name, c := range n.Clusters {
		if c.State == report.Pending && d.mine(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	d.takePending(ctx, d.log.With("commit", n.Commit), n, names)
}

// takePending plans the note's pending clusters names in one plan:
// those a dead member had begun applying, and those the plan finds
// changed, go to their queues; the converged ones are recorded in the
// note (one merge) and on their statuses.
func (d *Daemon) takePending(ctx context.Context, log *slog.Logger, n *report.Note, names []string) {
	if len(names) == 0 {
		return
	}
	d.mu.Lock()
	w := &work{commit: n.Commit, ref: n.Ref, clusters: d.fleet}
	d.mu.Unlock()
	var plan []string
	var queued []string
	for _, name := range names {
		if c := n.Clusters[name]; c.Plan != nil {
			queued = append(queued, name) // a dead member's apply, resumed
		} else {
			plan = append(plan, name)
		}
	}
	settled := d.settle(ctx, log, w, plan)
	for _, name := range plan {
		if settled[name] == nil {
			queued = append(queued, name)
		}
	}
	if len(settled) > 0 {
		if err := d.putEntries(ctx, n.Commit, n.Ref, settled, nil); err != nil {
			log.Error("record the converged clusters in the note", "err", err)
		}
		d.settledStatuses(ctx, w, settled)
	}
	log.Info("took this daemon's share of the commit", "clusters", len(names), "converged", len(settled), "queued", len(queued))
	for _, name := range queued {
		d.enqueue(ctx, name, w)
	}
}

// reshare follows a new list of members: the clusters this daemon gains
// are adopted; those it lost leave its queues (an apply under way ends
// on its own, fenced by the cluster's lease).
func (d *Daemon) reshare(ctx context.Context, ids []string) {
	d.shareMu.Lock()
	defer d.shareMu.Unlock()
	d.mu.Lock()
	before := d.members
	d.members = ids
	head, fleet := d.head, d.fleet
	d.mu.Unlock()
	d.cfg.Metrics.members.Set(float64(len(ids)))
	if !slices.Contains(ids, d.cfg.ID) {
		// This daemon's key is gone (its session expired): it owns
		// nothing until it joins again.
		d.log.Warn("this daemon is not among the members: it applies nothing")
		return
	}
	// The head's clusters, and those leaving the fleet (in its note, or
	// applied and no longer in it).
	names := map[string]bool{}
	for name := range fleet {
		names[name] = true
	}
	if n, err := d.Note(ctx, head); head != "" && err == nil {
		for name := range n.Clusters {
			names[name] = true
		}
	}
	if applied, err := reconciler.AppliedSpecs(ctx, d.cfg.Store); err == nil {
		for name := range applied {
			names[name] = true
		}
	}
	now, was := d.shareOf(ids, names), d.shareOf(before, names)
	var gained, lost []string
	for name := range now {
		if !was[name] || before == nil {
			gained = append(gained, name)
		}
	}
	for name := range was {
		if !now[name] && before != nil {
			lost = append(lost, name)
		}
	}
	slices.Sort(gained)
	slices.Sort(lost)
	d.log.Info("the members changed", "members", ids, "share", len(now), "gained", len(gained), "lost", len(lost))
	for _, name := range lost {
		d.drop(name)
	}
	d.adopt(ctx, head, gained)
}

// adopt takes clusters this daemon just gained (it started, or a member
// left or died): their journaled applies are resumed, their pending
// entries of the head taken, and the others planned together, those
// that drifted queued for a drift check and the converged ones recorded
// on their status as this daemon's.
func (d *Daemon) adopt(ctx context.Context, head string, names []string) {
	if len(names) == 0 {
		return
	}
	started := time.Now()
	gained := map[string]bool{}
	for _, name := range names {
		gained[name] = true
	}
	if sum, err := d.applier.ResumeShare(ctx, func(name string) bool { return gained[name] }); err != nil {
		d.log.Error("resume the interrupted applies", "err", err)
		d.cfg.Metrics.errorAt("apply")
	} else if len(sum.Resumed) > 0 {
		d.log.Info("resumed interrupted applies", "clusters", sum.Resumed, "done", sum.Counts[reconciler.StepDone])
	}
	if head == "" {
		return
	}
	n, err := d.Note(ctx, head)
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		d.log.Error("read the head's note", "commit", head, "err", err)
		return
	}
	var pending, rest []string
	for _, name := range names {
		if c := entryOf(n, name); c != nil && c.State == report.Pending {
			pending = append(pending, name)
		} else {
			rest = append(rest, name)
		}
	}
	log := d.log.With("commit", head)
	if n != nil {
		d.takePending(ctx, log, n, pending)
	}
	d.mu.Lock()
	w := &work{commit: head, ref: d.cfg.Source.Branch(), clusters: d.fleet}
	d.mu.Unlock()
	for _, name := range pending {
		delete(gained, name) // planned by takePending
	}
	res, err := d.cfg.Planner.Plan(ctx, reconciler.Request{Clusters: w.clusters, Commit: head, Share: func(name string) bool { return gained[name] }})
	if err != nil {
		log.Warn("plan the clusters gained; each is checked on its own", "err", err)
		for _, name := range rest {
			d.enqueue(ctx, name, &work{commit: head, ref: w.ref, clusters: w.clusters, resync: true})
		}
		return
	}
	changed := map[string]bool{}
	for _, c := range slices.Concat(res.Plan.Changes, res.Plan.Drift) {
		changed[c.Cluster] = true
	}
	var drifted int
	for _, name := range rest {
		if changed[name] {
			drifted++
			d.enqueue(ctx, name, &work{commit: head, ref: w.ref, clusters: w.clusters, resync: true})
			continue
		}
		d.record(ctx, name, event{kind: evTaken})
	}
	log.Info("adopted clusters", "clusters", len(names), "pending", len(pending), "drifted", drifted,
		"took", time.Since(started).Round(time.Millisecond))
}

// entryOf is a note's entry of a cluster; nil for none or no note.
func entryOf(n *report.Note, name string) *report.Cluster {
	if n == nil {
		return nil
	}
	return n.Clusters[name]
}

// drop takes a cluster this daemon no longer owns out of its queue: its
// queued work is the new owner's now.
func (d *Daemon) drop(name string) {
	d.mu.Lock()
	q := d.queues[name]
	d.mu.Unlock()
	if q == nil {
		return
	}
	q.mu.Lock()
	q.next = nil
	q.mu.Unlock()
}

// migrateDispatched records, for a store written before heads were
// dispatched to shares, the last head the leader accepted and handled as
// dispatched: its members take its pending clusters and plan the rest.
func (d *Daemon) migrateDispatched(ctx context.Context, ref string, seen map[string]string) {
	head := seen[ref]
	key := state.KeysOf(d.cfg.Store).Dispatched(ref)
	if head == "" {
		return
	}
	if _, err := d.cfg.Store.Get(ctx, key); !errors.Is(err, state.ErrNotFound) {
		return
	}
	if accepted, err := d.accepted(ctx, ref); err != nil || accepted != head {
		return
	}
	if err := d.write(ctx, key, []byte(head)); err != nil {
		d.log.Error("record the dispatched head", "err", err)
	}
}

// reportNotes hands the notes the other members store to the reporters
// while this daemon leads: each commit's newest note, at most twice a
// second (the reporters replace what they wrote), and the
// dispatched head's once a leadership begins (its last leader may have
// died before it reported it).
func (d *Daemon) reportNotes(ctx context.Context) {
	due := map[string]bool{}
	if head, err := d.cfg.Store.Get(ctx, state.KeysOf(d.cfg.Store).Dispatched(d.cfg.Source.Branch())); err == nil {
		due[string(head)] = true
	}
	for ctx.Err() == nil {
		current, err := d.cfg.Store.Current(ctx)
		if err == nil {
			// A broken watch starts again from now: what it missed is
			// reported at the next write of its note.
			d.reportFrom(ctx, current, due)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// minReportGap is the least time between two reports of the others' notes.
const minReportGap = 500 * time.Millisecond

// reportFrom reports the notes written after revision from (and those
// due already), until its watch breaks or ctx ends.
func (d *Daemon) reportFrom(ctx context.Context, from int64, due map[string]bool) {
	prefix := state.KeysOf(d.cfg.Store).Report("")
	flush := func() {
		for _, commit := range slices.Sorted(maps.Keys(due)) {
			delete(due, commit)
			n, err := d.Note(ctx, commit)
			if err != nil {
				continue
			}
			d.pubMu.Lock()
			d.report(ctx, n)
			d.pubMu.Unlock()
		}
	}
	defer flush()
	// Reports come at most every half second, and take at most a fifth
	// of the time: a 10,000-cluster note is read and written whole.
	tick := time.NewTimer(minReportGap)
	defer tick.Stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch := d.cfg.Store.WatchPuts(wctx, prefix, from+1)
	for {
		select {
		case <-ctx.Done():
			return
		case b, ok := <-watch:
			if !ok {
				return
			}
			for _, put := range b.Puts {
				if _, own := d.published.Load(put.Rev); !own {
					commit, _, _ := strings.Cut(strings.TrimPrefix(put.Key, prefix), "/")
					due[commit] = true
				}
			}
			// The leader's own writes up to here were seen.
			d.published.Range(func(rev, _ any) bool {
				if rev.(int64) <= b.Revision {
					d.published.Delete(rev)
				}
				return true
			})
		case <-tick.C:
			started := time.Now()
			flush()
			tick.Reset(max(minReportGap, 4*time.Since(started)))
		}
	}
}

package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// poll syncs the source and dispatches what moved. On the first poll of
// a leadership the tracked branch is checked even when it did not move:
// whatever happened while no daemon led is drift.
func (d *Daemon) poll(ctx context.Context, first bool) {
	refs, err := d.cfg.Source.Sync(ctx)
	d.mu.Lock()
	if errors.Is(err, source.ErrUpToDate) {
		err = nil
	}
	d.lastErr = err
	if err == nil {
		d.synced = time.Now()
	}
	d.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("sync the fleet repository", "err", err)
			d.cfg.Metrics.errorAt("fetch")
		}
		return
	}
	branch := d.cfg.Source.Branch()
	d.mu.Lock()
	seen := maps.Clone(d.seen)
	d.mu.Unlock()
	if refs[branch] != "" {
		d.mu.Lock()
		d.missing = "" // gone again later, it is warned of again
		d.mu.Unlock()
	}
	switch head := refs[branch]; {
	case head == "":
		d.noBranch(branch)
	case head != seen[branch]:
		d.commit(ctx, branch, head)
	case first:
		d.firstHead(ctx, branch, head)
	}
	for _, ref := range slices.Sorted(maps.Keys(refs)) {
		if d.cfg.Source.IsPullRequest(ref) && refs[ref] != seen[ref] {
			d.prs.add(ref, refs[ref]) // never blocks the tracked branch
		}
	}
}

// ErrNoBranch is the sync error of a repository without the tracked
// branch (a fleet made with git init's master while the daemon tracks
// main, or a typo in --branch).
var ErrNoBranch = errors.New("the repository has no such branch")

// noBranch says, on the status and once in the log, that the tracked
// branch is not in the repository.
func (d *Daemon) noBranch(branch string) {
	err := fmt.Errorf("%w: %s (--branch names the one to apply)", ErrNoBranch, strings.TrimPrefix(branch, "refs/heads/"))
	d.mu.Lock()
	again := d.missing == err.Error()
	d.lastErr, d.missing = err, err.Error()
	d.mu.Unlock()
	if !again {
		d.log.Warn("the tracked branch is not in the fleet repository", "err", err)
	}
}

// firstHead takes up the tracked branch's head, already handled, at the
// first poll of a leadership: dispatched again if it was refused (its
// keyring or --allow-rewrite may have changed) or if a leader that died
// accepted it but did not dispatch it; else the statuses a dead leader
// did not record are caught up. The members adopt their shares on their
// own: a dead leader's pending clusters are theirs.
func (d *Daemon) firstHead(ctx context.Context, branch, head string) {
	accepted, err := d.accepted(ctx, branch)
	if err != nil {
		// Nothing is judged against a base the store would not give.
		d.log.Error("read the accepted head", "err", err)
		d.cfg.Metrics.errorAt("plan")
		return
	}
	dispatched, err := d.cfg.Store.Get(ctx, state.KeysOf(d.cfg.Store).Dispatched(branch))
	switch {
	case head != accepted || errors.Is(err, state.ErrNotFound) || err == nil && string(dispatched) != head:
		d.commit(ctx, branch, head)
	case err != nil:
		d.log.Error("read the dispatched head", "err", err)
	default:
		d.catchUp(ctx, accepted)
	}
}

// catchUp brings the statuses up to the note of commit, the handled head,
// at the first poll of a leadership. A leader stores a reconcile's entry
// in the note, hands the note to the reporters and then records the
// status: one killed in between left a status pending on an apply that
// ended, and nothing would ever say otherwise (the head is handled, and
// a drift check that changes nothing keeps the commit's result). The
// note goes to the reporters again (they replace what they wrote) and
// the statuses are recorded from it.
func (d *Daemon) catchUp(ctx context.Context, commit string) {
	n, err := d.Note(ctx, commit)
	if err != nil {
		return
	}
	var stale []string
	for _, name := range slices.Sorted(maps.Keys(n.Clusters)) {
		if n.Clusters[name].State == report.Pending {
			continue
		}
		if s, err := d.status(ctx, name); err == nil && s.Commit == commit && s.State == report.Pending {
			stale = append(stale, name)
		}
	}
	if len(stale) == 0 {
		return
	}
	d.log.Info("the last leader ended these reconciles but died before it recorded them: recorded from the commit's note",
		"commit", commit, "clusters", stale)
	d.publish(ctx, n)
	d.mu.Lock()
	w := &work{commit: commit, ref: n.Ref, clusters: d.fleet}
	d.mu.Unlock()
	for _, name := range stale {
		d.record(ctx, name, w.reconciled(name, n.Clusters[name]))
	}
}

// readFleet reads and validates the fleet at commit, within the limits,
// without the transitions.
func (d *Daemon) readFleet(ctx context.Context, commit string) (*schemas.Fleet, error) {
	var fleet *schemas.Fleet
	err := d.cfg.Source.Read(ctx, commit, func(fsys fs.FS) error {
		var err error
		fleet, err = schemas.LoadFleetWithin(fsys, "", d.cfg.Limits)
		return err
	})
	return fleet, err
}

// fleetAt reads and validates the fleet at commit, with the transitions
// from what is applied checked.
func (d *Daemon) fleetAt(ctx context.Context, commit string, applied map[string]*reconciler.AppliedSpec) (*schemas.Fleet, error) {
	fleet, err := d.readFleet(ctx, commit)
	if err != nil {
		return nil, err
	}
	base := &schemas.Fleet{}
	for _, name := range slices.Sorted(maps.Keys(applied)) {
		base.Files = append(base.Files, &schemas.File{Path: schemas.ClustersDir + "/" + name + "/" + schemas.SpecFile, Cluster: applied[name].Spec})
	}
	facts, err := d.cfg.Planner.Facts(ctx, slices.Sorted(maps.Keys(applied)))
	if err != nil {
		return nil, err
	}
	fleet.CheckTransitions(base, facts)
	fleet.CheckLifecycle(base, d.today())
	return fleet, nil
}

// judged is a fleet sorted for a commit: the valid clusters, the invalid
// ones (their findings), and whether the fleet as a whole is broken.
type judged struct {
	valid   map[string]*schemas.Cluster
	invalid map[string]string // cluster -> its first error
	broken  bool
}

// concerned lists, sorted, the clusters a commit is planned for: the
// valid ones, and the applied ones whose file is gone (the deletion guard
// decides what that means); an invalid cluster is held as it is.
func (j judged) concerned(applied map[string]*reconciler.AppliedSpec) []string {
	names := slices.Collect(maps.Keys(j.valid))
	for name := range applied {
		_, valid := j.valid[name]
		_, invalid := j.invalid[name]
		if !valid && !invalid {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func judge(fleet *schemas.Fleet) judged {
	j := judged{valid: fleet.Clusters(), invalid: map[string]string{}}
	for _, f := range fleet.Findings {
		if f.Severity != schemas.SeverityError {
			continue
		}
		name := report.ClusterOf(f.File)
		if name == "" {
			j.broken = true
			continue
		}
		if _, dup := j.invalid[name]; !dup {
			j.invalid[name] = f.String()
		}
		delete(j.valid, name)
	}
	return j
}

// commit dispatches a new commit of the tracked branch: a report for each
// cluster, pending; the valid clusters (and those its removal concerns)
// to their queues; an invalid cluster fails with its findings, and is
// neither changed nor removed.
func (d *Daemon) commit(ctx context.Context, ref, commit string) {
	log := d.log.With("commit", commit)
	n := &report.Note{Commit: commit, Ref: ref, Applied: true, Clusters: map[string]*report.Cluster{}}
	defer d.markSeen(ctx, ref, commit)
	applied, err := reconciler.AppliedSpecs(ctx, d.cfg.Store)
	if err != nil {
		log.Error("read the applied specs", "err", err)
		d.cfg.Metrics.errorAt("plan")
		n.Message = "OPKE could not read its state store: " + err.Error()
		d.publish(ctx, n)
		return
	}
	fleet, err := d.fleetAt(ctx, commit, applied)
	if err != nil {
		if errors.Is(err, schemas.ErrNotFleet) && len(applied) > 0 {
			// git keeps no empty folder: the last cluster's file removed,
			// clusters/ went with it. Taking that for an empty fleet would
			// let any commit without the folder delete every cluster.
			err = fmt.Errorf("%w; nothing is deleted: to remove the last cluster, keep the folder (clusters/.gitkeep)", err)
		}
		log.Warn("the commit holds no readable fleet", "err", err)
		n.Message = "no fleet at this commit: " + err.Error()
		d.publish(ctx, n)
		return
	}
	n.Findings = fleet.Findings
	j := judge(fleet)
	names := j.concerned(applied)
	for name, msg := range j.invalid {
		n.Clusters[name] = &report.Cluster{State: report.Failure, Summary: "invalid spec, nothing applied: " + msg}
		log.Warn("invalid spec: the cluster's change is not applied", "cluster", name, "findings", msg)
	}
	// publish sets the failed clusters' statuses before the note goes
	// out, so whoever reads the note finds the status page agreeing.
	publish := func() {
		for name, c := range n.Clusters {
			if c.State == report.Failure {
				d.record(ctx, name, event{kind: evRefused, commit: commit, ref: ref, entry: c})
			}
		}
		d.publish(ctx, n)
	}
	base, err := d.accepted(ctx, ref)
	if err != nil {
		log.Error("read the accepted head", "err", err)
		d.cfg.Metrics.errorAt("plan")
		n.Message = "OPKE could not read its state store: " + err.Error()
		d.publish(ctx, n)
		return
	}
	note, err := d.admit(ctx, base, commit)
	if err != nil {
		log.Warn("refused by the commit policy", "err", err)
		n.Message = refusedPrefix + err.Error()
		for _, name := range names {
			n.Clusters[name] = &report.Cluster{State: report.Failure, Summary: n.Message}
		}
		if old, err := d.Note(ctx, commit); err == nil && old.Ref == ref && old.Applied && dispatched(old) {
			// A commit applied when it was the head, back at the head by
			// a force push: its record stays (also when it is refused
			// again), the note says it was refused this time, and the
			// statuses say why.
			old.Message = n.Message
			for _, name := range names {
				d.record(ctx, name, event{kind: evRefused, commit: commit, ref: ref, entry: n.Clusters[name]})
			}
			d.publish(ctx, old)
			return
		}
		publish()
		return
	}
	n.Notice = note
	if j.broken {
		log.Warn("refused: the fleet is invalid", "findings", n.FleetErrors())
		for _, name := range names {
			n.Clusters[name] = &report.Cluster{State: report.Failure, Summary: "not applied: the fleet is invalid (see the findings)"}
		}
		publish()
		return
	}
	if err := d.write(ctx, state.KeysOf(d.cfg.Store).Accepted(ref), []byte(commit)); err != nil {
		log.Error("record the accepted head", "err", err)
		return
	}
	before, _ := d.Note(ctx, commit)
	// The leader takes its own share at once, in the same plan as the
	// judgement; each other member takes its own once it is dispatched.
	d.shareMu.Lock()
	defer d.shareMu.Unlock()
	w := &work{commit: commit, ref: ref, clusters: j.valid}
	var share []string
	for _, name := range names {
		if before.Pending(name, ref) == nil && d.mine(name) {
			share = append(share, name)
		}
	}
	settled := d.settle(ctx, log, w, share)
	var queued []string
	for _, name := range names {
		switch c := before.Pending(name, ref); {
		case c != nil:
			n.Clusters[name] = c // a dead member's apply, resumed
			if d.mine(name) {
				queued = append(queued, name)
			}
		case settled[name] != nil:
			n.Clusters[name] = settled[name]
		default:
			n.Clusters[name] = &report.Cluster{State: report.Pending, Summary: "queued"}
			if d.mine(name) {
				queued = append(queued, name)
			}
		}
	}
	publish()
	rev, err := d.dispatch(ctx, ref, commit)
	if err != nil {
		log.Error("dispatch the commit to the daemons' shares", "err", err)
		return
	}
	d.mu.Lock()
	d.head, d.fleet, d.taken = commit, j.valid, rev
	d.mu.Unlock()
	d.settledStatuses(ctx, w, settled)
	log.Info("new commit on the tracked branch", "clusters", len(names), "converged", len(settled),
		"queued", len(queued), "invalid", len(j.invalid))
	for _, name := range queued {
		d.enqueue(ctx, name, w)
	}
}

// dispatch records commit as the head the members apply (each takes its
// share of its note); it returns the write's revision.
func (d *Daemon) dispatch(ctx context.Context, ref, commit string) (int64, error) {
	d.mu.Lock()
	l := d.leader
	d.mu.Unlock()
	if l == nil {
		return 0, fmt.Errorf("dispatch %s: not leading: %w", commit, state.ErrLeaseLost)
	}
	return l.PutRev(context.WithoutCancel(ctx), state.KeysOf(d.cfg.Store).Dispatched(ref), []byte(commit))
}

// settle plans the clusters names of w in one go (each cloud listed
// once, whatever the fleet's size) and returns the entries of those it
// finds converged whose queue is idle: their reconcile is done. The
// others go to their queues, whose worker plans each again before it
// applies. A plan that fails leaves every cluster to its queue.
func (d *Daemon) settle(ctx context.Context, log *slog.Logger, w *work, names []string) map[string]*report.Cluster {
	if len(names) == 0 {
		return nil
	}
	started := time.Now()
	in := map[string]bool{}
	for _, name := range names {
		in[name] = true
	}
	res, err := d.cfg.Planner.Plan(ctx, reconciler.Request{Clusters: w.clusters, Commit: w.commit,
		Share: func(name string) bool { return in[name] }})
	if err != nil {
		log.Warn("plan the fleet; each cluster is planned on its own", "err", err)
		return nil
	}
	changed := map[string]bool{}
	for _, c := range slices.Concat(res.Plan.Changes, res.Plan.Drift) {
		changed[c.Cluster] = true
	}
	out := map[string]*report.Cluster{}
	for _, name := range names {
		if changed[name] || !d.idle(name) {
			continue
		}
		plan := res.Plan.Of(name)
		out[name] = &report.Cluster{State: report.Success, Summary: cmp.Or(warningsOf(plan), "no changes"), Plan: plan,
			Started: started, Finished: time.Now()}
		d.cfg.Metrics.reconcile.WithLabelValues("commit", string(report.Success)).Observe(time.Since(started).Seconds())
	}
	return out
}

// settledStatuses sets the statuses of the clusters a commit found
// converged, a few at a time.
func (d *Daemon) settledStatuses(ctx context.Context, w *work, settled map[string]*report.Cluster) {
	g := new(errgroup.Group)
	g.SetLimit(16)
	for name, entry := range settled {
		g.Go(func() error {
			d.record(ctx, name, w.reconciled(name, entry))
			return nil
		})
	}
	_ = g.Wait()
}

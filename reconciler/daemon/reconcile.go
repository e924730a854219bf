package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/state"
)

// stepLog gathers a cluster's steps as the applier reports them.
type stepLog struct {
	mu    sync.Mutex
	steps []report.Step
}

// progress is told of the steps of the applies this daemon runs: each
// ended step goes to the cluster's step log (its entry in the note), and
// a step retried or a gate passed or failed to the status as it happens.
func (d *Daemon) progress(ctx context.Context, s reconciler.Step) {
	if s.State == reconciler.StepStarted {
		return
	}
	// The status is written whatever becomes of the step's context: a
	// step cut short still says where the rollout stopped.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if s.State == reconciler.StepRetrying {
		d.record(ctx, s.Change.Cluster, event{kind: evStep, step: &s})
		return
	}
	v, ok := d.steps.Load(s.Change.Cluster)
	if !ok {
		return
	}
	l := v.(*stepLog)
	l.mu.Lock()
	l.steps = append(l.steps, reportStep(s))
	l.mu.Unlock()
	if s.Change.Action == diff.ActionCheck {
		if s.State == reconciler.StepFailed {
			d.cfg.Metrics.gateFailed(s.Change.Cluster)
		}
		d.record(ctx, s.Change.Cluster, event{kind: evStep, step: &s})
	}
}

// reportStep is a step as the commit's note records it.
func reportStep(s reconciler.Step) report.Step {
	st := report.Step{ID: s.Change.ID, Address: s.Change.Address.String(), Action: s.Change.Action, State: string(s.State),
		Seconds: s.Duration.Round(time.Millisecond).Seconds()}
	if s.Err != nil {
		st.Error = s.Err.Error()
	}
	return st
}

// journaledSteps are the steps of a cluster's plan as its journal has
// them, for the note of a plan that more than one applier ran (a daemon
// that stopped began it): the ones this daemon saw are only the rest.
// Nil when the journal cannot be read or has none.
func (d *Daemon) journaledSteps(ctx context.Context, name string, plan *diff.Plan) []report.Step {
	steps, err := d.applier.JournaledSteps(ctx, name, plan)
	if err != nil {
		d.log.Warn("read the steps of a resumed apply from its journal; the note lists only this daemon's", "cluster", name, "err", err)
		return nil
	}
	var out []report.Step
	for _, s := range steps {
		out = append(out, reportStep(s))
	}
	return out
}

// outcome is what a reconcile came to; its one exit, finish, reports it.
type outcome struct {
	started time.Time
	// entry is the cluster's entry in the commit's note.
	entry *report.Cluster
	// quiet: nothing to report (the leadership ended, or an apply was
	// interrupted: the next leader resumes its journal).
	quiet bool
	// checked: a drift check that changed nothing, or could not look
	// (checkErr); it reports on the status only.
	checked  bool
	checkErr error
	// checkWarn is what a drift check that changed nothing warned of.
	checkWarn string
}

// reconcile plans one cluster and applies the plan unless the cluster is
// paused (or, for drift, does not want it corrected); finish reports
// what it came to, whichever way it ended.
func (d *Daemon) reconcile(ctx context.Context, name string, w *work) {
	started := time.Now()
	o := &outcome{started: started, entry: &report.Cluster{State: report.Pending, Started: started}}
	log := d.log.With("cluster", name, "commit", w.commit, "kind", w.kind())
	defer d.finish(ctx, name, w, o)
	d.reconcileOnce(ctx, log, name, w, o)
}

// kind names the work in logs and metrics: a commit or a drift check.
func (w *work) kind() string {
	if w.resync {
		return "resync"
	}
	return "commit"
}

// reconcileOnce does the reconcile's work, setting o as it goes.
func (d *Daemon) reconcileOnce(ctx context.Context, log *slog.Logger, name string, w *work, o *outcome) {
	entry := o.entry
	if !d.mine(name) {
		o.quiet = true // it moved to another daemon while queued: its owner reports
		return
	}
	res, err := d.cfg.Planner.Plan(ctx, w.request(name))
	if err != nil {
		if ctx.Err() != nil {
			o.quiet = true // the membership ended: the next owner plans again
			return
		}
		log.Error("plan", "err", err)
		d.cfg.Metrics.errorAt("plan")
		if w.resync {
			// A drift check that could not look (a host unreachable for a
			// moment) says so on the status and tries again next time; it
			// does not turn the commit's result into an error.
			o.checked, o.checkErr = true, err
			return
		}
		entry.State, entry.Summary = report.Error, "plan: "+err.Error()
		return
	}
	plan := res.Plan
	for _, c := range slices.Concat(plan.Changes, plan.Drift) {
		d.cfg.Metrics.changes.WithLabelValues(c.Action.String()).Inc()
	}
	entry.Plan = plan
	spec := w.clusters[name]
	warnings := warningsOf(plan)
	switch {
	case plan.Empty() && !w.resync && d.resumed(ctx, w, name, entry):
		// The plan a dead leader journaled was finished by Resume.
	case plan.Empty() && w.resync:
		// Nothing drifted: nothing to say but what the plan warns of.
		o.checked, o.checkWarn = true, warnings
		if warnings != "" {
			log.Warn("drift check", "warnings", warnings)
		}
	case plan.Empty():
		entry.State, entry.Summary = report.Success, cmp.Or(warnings, "no changes")
	case spec != nil && spec.Spec.Paused:
		entry.State, entry.Summary = report.Success, "paused: not applied: "+report.PlanSummary(plan)
	case w.resync && spec != nil && !spec.Spec.DriftCorrectionEnabled() && drifted(plan) > 0:
		d.cfg.Metrics.drift.WithLabelValues(name).Add(float64(drifted(plan)))
		log.Warn("drift detected; not corrected (driftCorrection: false)", "changes", drifted(plan))
		entry.State, entry.Summary = report.Failure, "drift not corrected (driftCorrection: false): "+report.PlanSummary(plan)
	default:
		switch {
		case w.resync && drifted(plan) > 0:
			d.cfg.Metrics.drift.WithLabelValues(name).Add(float64(drifted(plan)))
			log.Warn("drift detected; correcting it", "changes", drifted(plan))
		case w.resync:
			log.Info("a scheduled etcd backup is due")
		}
		entry.State, entry.Summary = report.Pending, "applying: "+report.PlanSummary(plan)
		d.update(ctx, w, name, entry)
		d.apply(ctx, log, name, w, entry)
		if entry.State == report.Pending {
			o.quiet = true // interrupted (the next owner resumes the journal) or moved
			return
		}
		if warnings != "" {
			entry.Summary += "; " + warnings
		}
	}
}

// finish is a reconcile's one exit: it counts the reconcile and reports
// its outcome, on the status (a drift check that changed nothing) or in
// the commit's note and the status.
func (d *Daemon) finish(ctx context.Context, name string, w *work, o *outcome) {
	switch {
	case o.quiet:
	case o.checked:
		ev := event{kind: evChecked, checkWarn: o.checkWarn}
		if o.checkErr != nil {
			ev.checkErr = o.checkErr.Error()
			d.cfg.Metrics.reconcile.WithLabelValues(w.kind(), string(report.Error)).Observe(time.Since(o.started).Seconds())
		}
		d.record(ctx, name, ev)
	default:
		o.entry.Finished = time.Now()
		d.cfg.Metrics.reconcile.WithLabelValues(w.kind(), string(o.entry.State)).Observe(time.Since(o.started).Seconds())
		d.update(ctx, w, name, o.entry)
	}
}

// resumed fills entry from the cluster's pending entry in the note, when
// a dead leader had started applying its plan (which Resume finished).
func (d *Daemon) resumed(ctx context.Context, w *work, name string, entry *report.Cluster) bool {
	n, err := d.Note(ctx, w.commit)
	if err != nil {
		return false
	}
	old := n.Pending(name, w.ref)
	if old == nil || old.Plan == nil {
		return false
	}
	entry.Plan, entry.Steps, entry.Started = old.Plan, old.Steps, old.Started
	if steps := d.journaledSteps(ctx, name, old.Plan); len(steps) > 0 {
		entry.Steps = steps
	}
	entry.State, entry.Summary = report.Success, finishedBy(d.cfg.ID)+": "+report.PlanSummary(old.Plan)
	return true
}

// maxLeaseLapses bounds the resumes of one apply whose cluster lease
// lapsed under it: a store that keeps losing leases is an error to report.
const maxLeaseLapses = 3

// lapsed tells whether an apply stopped only because the cluster's lease
// lapsed while this daemon still holds the cluster: its journal is open
// and this daemon is the one to resume it.
func (d *Daemon) lapsed(ctx context.Context, name string, err error) bool {
	return err != nil && ctx.Err() == nil && errors.Is(err, state.ErrLeaseLost) &&
		!errors.Is(err, reconciler.ErrNotOwner) && d.mine(name)
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// finishedBy says a plan a daemon that stopped had begun was finished by
// the daemon id.
func finishedBy(id string) string {
	return "applied (finished by " + id + " after the daemon applying it stopped)"
}

// drifted counts a drift check's changes: all of them are drift, whether
// the ledger's (a file changed on a host) or the cloud's (a server gone),
// but a scheduled backup, which a drift check finds due.
func drifted(p *diff.Plan) int {
	if p == nil {
		return 0
	}
	n := 0
	for _, c := range slices.Concat(p.Changes, p.Drift) {
		if c.Action != diff.ActionBackup {
			n++
		}
	}
	return n
}

func warningsOf(p *diff.Plan) string {
	var ws []string
	for _, w := range p.Warnings {
		ws = append(ws, w.Message)
	}
	return strings.Join(ws, "; ")
}

// apply applies a cluster's plan (entry's), recording its steps in entry.
func (d *Daemon) apply(ctx context.Context, log *slog.Logger, name string, w *work, entry *report.Cluster) {
	plan := entry.Plan
	steps := &stepLog{}
	d.steps.Store(name, steps)
	defer d.steps.Delete(name)
	sum, err := d.applier.Apply(ctx, w.request(name), plan)
	lapsed := 0
	for ; lapsed < maxLeaseLapses && d.lapsed(ctx, name, err); lapsed++ {
		// The cluster's lease lapsed under this daemon while it applied (a
		// store or a machine stalled past its TTL; a new holder found it
		// free). The journal stayed open: resume it at once, as the next
		// holder would, instead of calling a half-applied plan an error.
		d.cfg.Metrics.errorAt("lease")
		log.Warn("the cluster's lease lapsed during the apply; resuming its journal", "lapses", lapsed+1, "err", err)
		sum, err = d.applier.ResumeShare(ctx, func(c string) bool { return c == name })
	}
	steps.mu.Lock()
	entry.Steps = slices.Clone(steps.steps)
	steps.mu.Unlock()
	if sum != nil && slices.Contains(sum.Resumed, name) {
		if all := d.journaledSteps(ctx, name, plan); len(all) > 0 {
			entry.Steps = all
		}
	}
	took := time.Since(entry.Started).Round(100 * time.Millisecond)
	verb := "applied"
	switch {
	case w.resync && drifted(plan) > 0:
		verb = "drift corrected"
	case w.resync:
		verb = "scheduled backup taken"
	}
	if sum != nil && slices.Contains(sum.Resumed, name) && !w.resync && lapsed == 0 {
		// The plan is the one a daemon that stopped had begun: its
		// journal said which steps were done.
		verb = finishedBy(d.cfg.ID)
	}
	if lapsed > 0 {
		verb += fmt.Sprintf(" (resumed after the cluster's lease lapsed %s)", times(lapsed))
	}
	switch {
	case err == nil:
		entry.State, entry.Summary = report.Success, fmt.Sprintf("%s in %s: %s", verb, took, report.PlanSummary(plan))
		d.cfg.Metrics.appliedAt(name, w.commit, float64(time.Now().Unix()))
		log.Info(verb, "steps", sum.Counts[reconciler.StepDone], "took", took)
	case ctx.Err() != nil:
		log.Warn("apply interrupted: the membership ended", "err", err)
	case errors.Is(err, reconciler.ErrNotOwner):
		log.Info("not applied: the cluster moved to another daemon, which applies it", "err", err)
	case errors.Is(err, reconciler.ErrFailed):
		d.cfg.Metrics.errorAt("apply")
		first := sum.Failed[0]
		entry.State = report.Failure
		entry.Summary = fmt.Sprintf("%d of %d steps failed: %s: %v", len(sum.Failed), len(plan.Changes)+len(plan.Drift), first.Change.Address, first.Err)
		log.Error("apply failed", "failed", len(sum.Failed), "first", first.Change.Address, "err", first.Err)
	default:
		d.cfg.Metrics.errorAt("apply")
		entry.State, entry.Summary = report.Error, "apply: "+err.Error()
		log.Error("apply", "err", err)
	}
}

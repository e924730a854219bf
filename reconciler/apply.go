package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

// Step is what the applier reports of one change.
type Step struct {
	Change   diff.Change
	State    StepState
	Err      error
	Duration time.Duration
}

// StepState is where a step is.
type StepState string

// The states of a step, as the journal keeps them.
const (
	StepStarted StepState = "started"
	StepDone    StepState = "done"
	StepFailed  StepState = "failed"
	StepSkipped StepState = "skipped" // a change it depends on failed
	StepPending StepState = "pending" // not started: the apply was interrupted
	// StepRetrying is told to Progress (never journaled) when a step
	// failed on a transient error and is tried again: the cloud or a host
	// is unreachable for now. Err says why.
	StepRetrying StepState = "retrying"
)

// Summary is what an apply did.
type Summary struct {
	Counts map[StepState]int
	Failed []Step
	// Resumed lists the clusters whose interrupted apply was resumed.
	Resumed  []string
	Duration time.Duration
	// Renders and Observations count the renders of a cluster and the
	// observations of its cloud the apply made: per cluster, one of each,
	// and one more observation when the infrastructure phase changed the
	// cloud, one more render when it made what the files carry (the API's
	// floating IP, the cloud credential).
	Renders, Observations int
}

// ErrFailed is an apply with failed steps; the Summary lists them.
var ErrFailed = errors.New("apply failed")

// Applier executes plans. It shares the planner's configuration: the
// store, the clouds, the hosts.
type Applier struct {
	Planner *Planner
	Hosts   *HostSessions
	Logger  *slog.Logger
	// Parallel bounds the steps run at once (default 8).
	Parallel int
	// Progress, if set, is told of every step as it starts and ends, with
	// the step's context (its values; it is cancelled when the step is
	// cut short). It is called from the steps' goroutines.
	Progress func(context.Context, Step)
	// Attempts bounds the tries of a step on transient errors (default 8).
	Attempts int
	// LeaseTTL is how long a cluster's lease outlives an applier that
	// died holding it (state.DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Waiting, if set, is told when the applier waits for the lease of a
	// cluster another applier holds.
	Waiting func(cluster string)
	// Owns, if set, tells whether the applier still owns a cluster once
	// it holds the cluster's lease: one several daemons share may have
	// moved to another while it waited ([ErrNotOwner]; nothing applied).
	Owns func(cluster string) bool
	// GateTimeout bounds how long a host's health gate may take to pass
	// (DefaultGateTimeout); GateInterval is the time between two probes
	// of a gate or two rounds of a drain (1s).
	GateTimeout  time.Duration
	GateInterval time.Duration

	// point, if set (by tests), is called after each journal write; an
	// error kills the applier there, as if its process died.
	point func(what string) error
}

// WithProgress returns a copy of the applier whose Progress tells
// progress of every step after the applier's own Progress, if any: a
// caller that watches the steps (the daemon) does not rewrite the hook of
// an applier it was given.
func (a *Applier) WithProgress(progress func(context.Context, Step)) *Applier {
	b := *a
	if prev := a.Progress; prev != nil {
		b.Progress = func(ctx context.Context, s Step) {
			prev(ctx, s)
			progress(ctx, s)
		}
	} else {
		b.Progress = progress
	}
	return &b
}

// Apply executes plan, made from req: each cluster's infrastructure
// changes, then its host changes, their values known only after apply
// filled from a render made from the real addresses (see clusterApply).
// Each cluster is applied under its lease and journaled step by step.
//
// Cancelling ctx stops the apply gracefully: the running steps finish,
// no other starts, and the journal is closed as interrupted.
func (a *Applier) Apply(ctx context.Context, req Request, plan *diff.Plan) (*Summary, error) {
	started := time.Now()
	sum := &Summary{Counts: map[StepState]int{}}
	var errs []error
	for _, name := range clustersOf(plan) {
		if err := a.cluster(ctx, name, req.Clusters[name], plan.Of(name), sum); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return a.end(sum, started, errs)
}

// Resume finishes every apply that was interrupted (its applier died):
// the journaled plan is applied again with the spec it was made from,
// its done steps skipped. Then a new plan is due: what was observed has
// moved.
func (a *Applier) Resume(ctx context.Context) (*Summary, error) {
	return a.ResumeShare(ctx, nil)
}

// ResumeShare resumes, as Resume, the journaled applies of the clusters
// share holds (every one if nil): a daemon's share of the fleet.
func (a *Applier) ResumeShare(ctx context.Context, share func(cluster string) bool) (*Summary, error) {
	started := time.Now()
	sum := &Summary{Counts: map[StepState]int{}}
	store := a.Planner.Store
	prefix := state.KeysOf(store).OpenPlans()
	open, err := store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(open)) {
		name := strings.TrimPrefix(k, prefix)
		if share != nil && !share(name) {
			continue
		}
		jp, err := readJournalPlan(ctx, store, name, string(open[k]))
		if err == nil {
			err = a.cluster(ctx, name, jp.Spec, jp.Plan, sum)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return a.end(sum, started, errs)
}

// clustersOf lists the clusters a plan changes, sorted.
func clustersOf(plan *diff.Plan) []string {
	var names []string
	for _, c := range slices.Concat(plan.Changes, plan.Drift) {
		if !slices.Contains(names, c.Cluster) {
			names = append(names, c.Cluster)
		}
	}
	slices.Sort(names)
	return names
}

func (a *Applier) end(sum *Summary, started time.Time, errs []error) (*Summary, error) {
	sum.Duration = time.Since(started)
	if len(sum.Failed) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d step(s) failed", ErrFailed, len(sum.Failed)))
	}
	return sum, errors.Join(errs...)
}

func (a *Applier) log() *slog.Logger { return cmp.Or(a.Logger, slog.New(slog.DiscardHandler)) }

// cluster applies plan, one cluster's part, under the cluster's lease:
// a new journal, or the cluster's open one if it is this plan's.
func (a *Applier) cluster(ctx context.Context, name string, spec *schemas.Cluster, plan *diff.Plan, sum *Summary) error {
	store := a.Planner.Store
	id := planID(plan)
	lease, err := store.Acquire(ctx, name, a.LeaseTTL, func() {
		a.log().Info("waiting for the lease of the cluster: another applier holds it", "cluster", name)
		if a.Waiting != nil {
			a.Waiting(name)
		}
	})
	if err != nil {
		return err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	if a.Owns != nil && !a.Owns(name) {
		return fmt.Errorf("apply %s: %w", name, ErrNotOwner)
	}

	// Steps run to their end when ctx is cancelled (a graceful stop); they
	// are cut short when the lease is lost or the test hook kills.
	stepCtx, kill := context.WithCancelCause(context.WithoutCancel(ctx))
	defer kill(nil)
	// Each write to the cloud asks etcd first whether the lease is still
	// held: a paused applier whose keepalive has not yet noticed the loss
	// sends nothing after its successor started.
	stepCtx = cloud.WithFence(stepCtx, lease.Check)
	go func() {
		select {
		case <-lease.Lost():
			kill(state.ErrLeaseLost)
		case <-stepCtx.Done():
		}
	}()
	j := &journal{w: lease, cluster: name, id: id, commit: plan.Commit}
	if a.point != nil {
		j.point = func(what string) error {
			if err := a.point(what); err != nil {
				// The kill is the cause: it is set before the revocation,
				// whose loss of the lease would otherwise race to be it.
				kill(err)
				// A dead process's lease ends: nothing it had in flight is written.
				_ = lease.Revoke(context.WithoutCancel(ctx))
				return err
			}
			return nil
		}
	}

	resume, err := a.admit(ctx, name, plan)
	if err != nil {
		return err
	}
	var done map[string]string
	if resume {
		if done, err = j.done(ctx); err != nil {
			return err
		}
		sum.Resumed = append(sum.Resumed, name)
		a.log().Info("resuming an interrupted apply", "cluster", name, "plan", id, "commit", plan.Commit, "done", len(done))
	} else if err := j.start(ctx, plan, spec); err != nil {
		return err
	}
	result := resultFailed
	clients, err := a.clients(stepCtx, spec, name)
	if err == nil {
		ca := &clusterApply{a: a, j: j, name: name, spec: spec, plan: plan, done: done, sum: sum, ctx: ctx, stepCtx: stepCtx, clients: clients}
		result, err = ca.phases()
	}
	if cause := context.Cause(stepCtx); cause != nil {
		// Killed, or the lease is lost: the journal stays open for whoever
		// holds the lease next.
		return errors.Join(err, cause)
	}
	if ctx.Err() != nil {
		result = resultInterrupted
	}
	if cerr := j.close(stepCtx, result); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close the journal: %w", cerr))
	}
	if result == resultInterrupted {
		err = errors.Join(err, ctx.Err())
	}
	return err
}

// Check tells whether plan can be applied as it is: for each of its
// clusters, no other plan is unfinished ([ErrUnfinished]) and nothing was
// written since the plan was made ([ErrStale]), unless the plan is the
// cluster's interrupted one, which apply resumes.
func (a *Applier) Check(ctx context.Context, plan *diff.Plan) error {
	var errs []error
	for _, name := range clustersOf(plan) {
		if _, err := a.admit(ctx, name, plan.Of(name)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// admit checks a cluster's plan before it is applied; resume is set when
// it is the cluster's interrupted plan.
func (a *Applier) admit(ctx context.Context, name string, plan *diff.Plan) (resume bool, err error) {
	store := a.Planner.Store
	open, err := openPlan(ctx, store, name)
	switch {
	case err != nil:
		return false, err
	case open == planID(plan):
		return true, nil
	case open != "":
		return false, fmt.Errorf("%w: plan %s", ErrUnfinished, open)
	}
	rev, err := store.RevisionOf(ctx, clusterKeys(store, name)...)
	if err != nil {
		return false, err
	}
	if rev > plan.StateRevision {
		return false, fmt.Errorf("%w: written at revision %d, the plan was made at %d", ErrStale, rev, plan.StateRevision)
	}
	return false, nil
}

// clients connects to the cloud of a cluster: its spec's, or for one no
// longer in the fleet, its last applied spec's.
func (a *Applier) clients(ctx context.Context, spec *schemas.Cluster, name string) (*cloud.Clients, error) {
	if spec == nil {
		specs, err := AppliedSpecs(ctx, a.Planner.Store)
		if err != nil {
			return nil, err
		}
		if specs[name] == nil {
			return nil, fmt.Errorf("cluster %s: no spec says which cloud it is in", name)
		}
		spec = specs[name].Spec
	}
	return a.Planner.Clouds.Clients(ctx, spec.Spec.Cloud, spec.Spec.Region)
}

// hostStep runs the host phase's steps of a cluster.
type hostStep struct {
	a     *Applier
	j     *journal
	t     HostTarget
	files map[string]map[string]assets.File
	// etcd is how the render starts each controller's etcd member.
	etcd map[string]assets.EtcdStart
	// have are the files' sha256 on the hosts, read before the phase.
	have map[string]map[string]string
	// uploads are the paths uploaded in the phase, by host.
	uploads map[string][]string
	// pki is the cluster's material, for the gates' and backups' clients.
	pki  *pki.Bundle
	spec *schemas.Cluster
	// desired are the objects the render's manifests hold, parsed once.
	desired *desiredObjects
}

// do runs an upload or a restart. An upload the host already has is not
// sent again. A file is recorded in the ledger once it is in place and,
// if it names units to restart, once they restarted: after a crash
// between the two, the next plan uploads it again (the host has it: only
// the check runs) and restarts its units.
func (h hostStep) do(ctx context.Context, c diff.Change) error {
	store := h.j.w
	host, path := c.Address.Host, c.Address.Name
	if c.Address.Target == diff.TargetMember {
		return h.a.memberStep(ctx, h.j, h.t, h.pki, h.spec, c)
	}
	switch c.Action {
	case diff.ActionCheck:
		return h.gate(ctx, c)
	case diff.ActionBackup:
		return h.backup(ctx, c.Address)
	case diff.ActionApply:
		return h.applyManifest(ctx, c)
	case diff.ActionDelete:
		if c.Address.Target != diff.TargetManifest {
			return fmt.Errorf("%s: a host step deletes manifests only", c.Address)
		}
		return h.deleteManifest(ctx, c)
	case diff.ActionUpload:
		f, ok := h.files[host][path]
		if !ok {
			return fmt.Errorf("%s: not in the render", c.Address)
		}
		if err := consistent(c, f.SHA256); err != nil {
			return err
		}
		if h.have[host][path] != f.SHA256 {
			if err := h.a.Hosts.upload(ctx, h.t, host, f); err != nil {
				return err
			}
		}
		if len(f.Restart) > 0 {
			return nil
		}
		if err := h.j.hook("uploaded " + c.Address.String()); err != nil {
			return err
		}
		return recordFile(ctx, store, c.Cluster, host, path, f.SHA256)
	case diff.ActionRestart:
		if c.Address.Target == diff.TargetWorkloads {
			return h.a.restartWorkloads(ctx, h.j, h.t, h.pki, c)
		}
		if c.Address.Target == diff.TargetReboot {
			return h.a.reboot(ctx, h.t, h.pki, host)
		}
		if c.Address.Target != diff.TargetUnit {
			return fmt.Errorf("%s: not a unit", c.Address)
		}
		unit := c.Address.Name
		for _, path := range h.uploads[host] {
			// A unit file or drop-in among the files: systemd reads it
			// again before the restart, or restarts the unit as it was.
			if f := h.files[host][path]; slices.Contains(f.Restart, unit) && strings.HasPrefix(path, "/etc/systemd/system/") {
				if _, err := h.a.Hosts.run(ctx, h.t, host, sshx.Sudo("systemctl daemon-reload")); err != nil {
					return err
				}
				break
			}
		}
		if _, err := h.a.Hosts.run(ctx, h.t, host, sshx.Sudo("systemctl restart "+unit)); err != nil {
			return err
		}
		if err := h.j.hook("restarted " + c.Address.String()); err != nil {
			return err
		}
		for _, path := range h.uploads[host] {
			f := h.files[host][path]
			if !slices.Contains(f.Restart, unit) {
				continue
			}
			if path == assets.PathEtcdEnv {
				// How the member first started stays its own: the
				// next renders of the host start it so again.
				if start, ok := h.etcd[host]; ok {
					if err := recordEtcdStart(ctx, store, c.Cluster, host, start); err != nil {
						return err
					}
				}
			}
			if err := recordFile(ctx, store, c.Cluster, host, path, f.SHA256); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%w: %s on a host", errors.ErrUnsupported, c.Action)
}

// waitedOut is the error of a step that waited its whole timeout for a
// host or an API server: however transient its cause, the step is not
// tried again (it would wait as long again), it fails.
type waitedOut struct{ error }

func (w waitedOut) Unwrap() error { return w.error }

// waitNoteKey holds a step's [waitNote] in its context.
type waitNoteKey struct{}

// waitNote tells a step's progress why it is still waiting for a host or
// an API server (a gate, a manifest's API server): the status says so
// while the step waits, as it does for a step retrying.
type waitNote struct {
	report func(error)
	mu     sync.Mutex
	last   string
	at     time.Time
}

func withWaitNote(ctx context.Context, report func(error)) context.Context {
	return context.WithValue(ctx, waitNoteKey{}, &waitNote{report: report})
}

// waiting reports err as why the step of ctx waits: the first time, and
// then when the reason changes or 10 s after the last report.
func waiting(ctx context.Context, err error) {
	w, _ := ctx.Value(waitNoteKey{}).(*waitNote)
	if w == nil || err == nil {
		return
	}
	w.mu.Lock()
	why, now := err.Error(), time.Now()
	due := why != w.last || now.Sub(w.at) >= 10*time.Second
	if due {
		w.last, w.at = why, now
	}
	w.mu.Unlock()
	if due {
		w.report(stillWaiting{err})
	}
}

// stillWaiting is why a step still waits, as its progress reports it
// (StepRetrying): no fault, unlike a retried error.
type stillWaiting struct{ error }

func (w stillWaiting) Unwrap() error { return w.error }

// IsWaiting tells whether a step's retrying progress reports a wait (for
// a host's health gate, for an API server) rather than an error tried
// again.
func IsWaiting(err error) bool {
	var w stillWaiting
	return errors.As(err, &w)
}

// pollUntil runs check every gate interval until it says nothing is
// pending any more, up to the gate timeout: pending is why it is not done
// yet (reported as the step's progress, and in the timeout's error), err
// a failure that ends the wait at once.
func (a *Applier) pollUntil(ctx context.Context, what string, check func() (pending, err error)) error {
	timeout := cmp.Or(a.GateTimeout, DefaultGateTimeout)
	deadline := time.Now().Add(timeout)
	for {
		pending, err := check()
		switch {
		case err != nil:
			return err
		case pending == nil:
			return nil
		case time.Now().After(deadline):
			return waitedOut{fmt.Errorf("%s: not within %s: %w", what, timeout, pending)}
		}
		waiting(ctx, fmt.Errorf("%s: %w", what, pending))
		if err := cloud.Sleep(ctx, cmp.Or(a.GateInterval, time.Second)); err != nil {
			return errors.Join(err, pending)
		}
	}
}

// allDone reports whether every step of a run is done.
func allDone(states map[string]StepState) bool {
	for _, st := range states {
		if st != StepDone {
			return false
		}
	}
	return true
}

// retry runs a step again on transient cloud errors, with backoff.
func (a *Applier) retry(ctx context.Context, fn func() error, retrying func(error)) error {
	attempts := cmp.Or(a.Attempts, 8)
	wait := 100 * time.Millisecond
	for i := 1; ; i++ {
		err := fn()
		var waited waitedOut
		if err == nil || i == attempts || !cloud.Transient(err) || errors.As(err, &waited) {
			return err
		}
		retrying(err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-t.C:
		}
		wait = min(wait*2, 10*time.Second)
	}
}

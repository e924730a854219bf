package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// Source is the fleet repository as the daemon reads it; [source.Mirror]
// is the implementation.
type Source interface {
	Sync(ctx context.Context) (map[string]string, error)
	Read(ctx context.Context, commit string, fn func(fs.FS) error) error
	Verify(commit, keyring string) error
	Since(ctx context.Context, base, head string, limit int) ([]string, bool, error)
	Branch() string
	IsPullRequest(ref string) bool
	LocalPath() string
}

// Defaults of Config.
const (
	DefaultInterval       = 60 * time.Second
	DefaultResyncInterval = 10 * time.Minute
)

// Config is what a daemon runs with.
type Config struct {
	// ID names this daemon in the election (host name and pid).
	ID      string
	Source  Source
	Store   *state.Store
	Planner *reconciler.Planner
	// Applier applies the tracked branch; its Planner is Planner.
	Applier   *reconciler.Applier
	Reporters []report.Reporter
	// Interval is the poll period (DefaultInterval), with up to 10 %
	// jitter; ResyncInterval the period of drift checks
	// (DefaultResyncInterval).
	Interval, ResyncInterval time.Duration
	// LeaderTTL is how long the leadership outlives a daemon that died
	// (state.DefaultLeaseTTL).
	LeaderTTL time.Duration
	// Keyring, if set (armored OpenPGP public keys), is the signature
	// policy: a head is applied only if it and every commit since the
	// last one applied are signed by one of its keys.
	Keyring string
	// AllowRewrite names the one commit that may be applied although it
	// does not descend from the last commit applied (the operator's
	// consent to a force push); every other such head is refused.
	AllowRewrite string
	// Limits bound the fleet read at a commit (schemas.DefaultLimits).
	Limits  schemas.Limits
	Logger  *slog.Logger
	Metrics *Metrics
}

// Daemon is OPKE's GitOps loop: it follows the fleet repository, applies
// the tracked branch cluster by cluster (a queue per cluster, so one slow
// cluster does not hold the others), plans pull requests without
// persisting anything, corrects drift every ResyncInterval, and reports
// on every commit. Several daemons on one store elect one leader; only
// the leader acts, and a new leader first resumes any journaled apply.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	trigger chan struct{}

	mu      sync.Mutex
	leader  *state.Leadership
	queues  map[string]*queue
	head    string                      // the tracked branch's last dispatched commit
	fleet   map[string]*schemas.Cluster // its valid clusters
	seen    map[string]string           // ref -> last dispatched commit
	lastErr error                       // the last sync's error
	missing string                      // the missing branch last warned of
	synced  time.Time                   // the last sync that succeeded

	pubMu sync.Mutex // one note published at a time
	// statusMu holds a mutex per cluster: each status change is a whole
	// read, change and write, and parallel steps report on one cluster.
	statusMu sync.Map
	steps    sync.Map // cluster -> *stepLog, while it is applied
	work     sync.WaitGroup
	prs      *prQueue
}

// New returns a daemon; Run starts it.
func New(cfg Config) *Daemon {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	cfg.ResyncInterval = cmp.Or(cfg.ResyncInterval, DefaultResyncInterval)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	cfg.Limits.MaxClusters = cmp.Or(cfg.Limits.MaxClusters, schemas.DefaultLimits.MaxClusters)
	cfg.Limits.MaxBytes = cmp.Or(cfg.Limits.MaxBytes, schemas.DefaultLimits.MaxBytes)
	d := &Daemon{cfg: cfg, log: cfg.Logger, trigger: make(chan struct{}, 1)}
	cfg.Applier.Progress = d.progress
	return d
}

// Trigger asks for a sync now (a webhook, a watched file); it never
// blocks.
func (d *Daemon) Trigger() {
	select {
	case d.trigger <- struct{}{}:
	default:
	}
}

// Leading tells whether this daemon leads.
func (d *Daemon) Leading() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leader != nil
}

// Run campaigns for the leadership and, while it leads, runs the loop;
// it returns when ctx ends.
func (d *Daemon) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		d.log.Info("campaigning for the leadership", "id", d.cfg.ID)
		l, err := d.cfg.Store.Elect(ctx, d.cfg.ID, d.cfg.LeaderTTL)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			d.log.Error("election", "err", err)
			d.cfg.Metrics.errorAt("election")
			sleep(ctx, time.Second)
			continue
		}
		d.log.Info("leading: this daemon applies", "id", d.cfg.ID)
		d.cfg.Metrics.leader.Set(1)
		leadCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-l.Lost():
				d.log.Warn("the leadership is lost: another daemon may lead now")
			case <-leadCtx.Done():
			}
			cancel()
		}()
		d.mu.Lock()
		d.leader = l
		d.mu.Unlock()
		d.lead(leadCtx)
		cancel()
		d.work.Wait()
		d.mu.Lock()
		d.leader, d.queues, d.seen, d.head = nil, nil, nil, ""
		d.mu.Unlock()
		d.cfg.Metrics.leader.Set(0)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = l.Resign(rctx)
		rcancel()
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// lead runs the loop while this daemon leads.
func (d *Daemon) lead(ctx context.Context) {
	// An apply a dead leader left half done is finished first, with the
	// plan and spec it journaled.
	if sum, err := d.cfg.Applier.Resume(ctx); err != nil {
		d.log.Error("resume the interrupted applies", "err", err)
		d.cfg.Metrics.errorAt("apply")
	} else if len(sum.Resumed) > 0 {
		d.log.Info("resumed interrupted applies", "clusters", sum.Resumed, "done", sum.Counts[reconciler.StepDone])
	}
	seen, err := d.loadSeen(ctx)
	if err != nil {
		d.log.Error("read the refs already handled", "err", err)
	}
	d.migrateAccepted(ctx, d.cfg.Source.Branch(), seen)
	d.mu.Lock()
	d.seen, d.queues = seen, map[string]*queue{}
	d.mu.Unlock()
	d.prs = newPRQueue()
	d.unfinishedPRs(ctx)
	d.work.Add(1)
	go func() {
		defer d.work.Done()
		d.pullRequests(ctx)
	}()
	if dir := d.cfg.Source.LocalPath(); dir != "" {
		d.work.Add(1)
		go func() {
			defer d.work.Done()
			if err := source.Watch(ctx, dir, d.Trigger); err != nil {
				d.log.Warn("watching the local repository failed; polling only", "err", err)
			}
		}()
	}
	resync := time.NewTicker(d.cfg.ResyncInterval)
	defer resync.Stop()
	first := true
	for {
		d.poll(ctx, first)
		first = false
		poll := time.NewTimer(jitter(d.cfg.Interval))
		select {
		case <-ctx.Done():
			poll.Stop()
			return
		case <-d.trigger:
		case <-poll.C:
		case <-resync.C:
			d.resync(ctx)
		}
		poll.Stop()
	}
}

// jitter spreads polls over up to 10 % more than the interval, so that
// daemons started together do not poll together.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/10+1))
}

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
// first poll of a leadership: dispatched again if a leader that died left
// it unfinished (its journaled applies were resumed; planning it again
// finishes it and reports) or if it was refused (its keyring or
// --allow-rewrite may have changed); else the drift checks start, held
// to the last accepted head, never to a head the policy refused.
func (d *Daemon) firstHead(ctx context.Context, branch, head string) {
	accepted, err := d.accepted(ctx, branch)
	switch {
	case err != nil:
		// Nothing is judged against a base the store would not give.
		d.log.Error("read the accepted head", "err", err)
		d.cfg.Metrics.errorAt("plan")
	case d.unfinished(ctx, head) || head != accepted:
		d.commit(ctx, branch, head)
	default:
		if accepted != "" {
			d.loadHead(ctx, accepted)
		}
		d.resync(ctx)
	}
}

// fleetAt reads and validates the fleet at commit, with the transitions
// from what is applied checked.
func (d *Daemon) fleetAt(ctx context.Context, commit string, applied map[string]*reconciler.AppliedSpec) (*schemas.Fleet, error) {
	var fleet *schemas.Fleet
	err := d.cfg.Source.Read(ctx, commit, func(fsys fs.FS) error {
		var err error
		fleet, err = schemas.LoadFleetWithin(fsys, "", d.cfg.Limits)
		return err
	})
	if err != nil {
		return nil, err
	}
	base := &schemas.Fleet{}
	for _, name := range slices.Sorted(maps.Keys(applied)) {
		base.Files = append(base.Files, &schemas.File{Path: schemas.ClustersDir + "/" + name + "/" + schemas.SpecFile, Cluster: applied[name].Spec})
	}
	facts, err := reconciler.Facts(ctx, d.cfg.Store, slices.Sorted(maps.Keys(applied)))
	if err != nil {
		return nil, err
	}
	fleet.CheckTransitions(base, facts)
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
	}
	// publish sets the failed clusters' statuses before the note goes
	// out, so whoever reads the note finds the status page agreeing.
	publish := func() {
		for name, c := range n.Clusters {
			if c.State == report.Failure {
				d.setStatus(ctx, name, func(s *ClusterStatus) {
					s.Commit, s.Ref, s.State, s.Summary, s.Updated = commit, ref, c.State, c.Summary, time.Now()
				})
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
				d.setStatus(ctx, name, func(s *ClusterStatus) {
					s.Commit, s.Ref, s.State, s.Summary, s.Updated = commit, ref, report.Failure, n.Message, time.Now()
				})
			}
			d.publish(ctx, old)
			return
		}
		publish()
		return
	}
	n.Notice = note
	if j.broken {
		log.Warn("refused: the fleet is invalid")
		for _, name := range names {
			n.Clusters[name] = &report.Cluster{State: report.Failure, Summary: "not applied: the fleet is invalid (see the findings)"}
		}
		publish()
		return
	}
	if err := d.write(ctx, d.acceptedKey(ref), []byte(commit)); err != nil {
		log.Error("record the accepted head", "err", err)
		return
	}
	before, _ := d.Note(ctx, commit)
	w := &work{commit: commit, ref: ref, clusters: j.valid}
	settled := d.settle(ctx, log, w, names)
	var queued []string
	for _, name := range names {
		switch c := before.Pending(name, ref); {
		case c != nil:
			n.Clusters[name] = c // a dead leader's apply, resumed
			queued = append(queued, name)
		case settled[name] != nil:
			n.Clusters[name] = settled[name]
		default:
			n.Clusters[name] = &report.Cluster{State: report.Pending, Summary: "queued"}
			queued = append(queued, name)
		}
	}
	d.mu.Lock()
	d.head, d.fleet = commit, j.valid
	d.mu.Unlock()
	publish()
	d.settledStatuses(ctx, w, settled)
	log.Info("new commit on the tracked branch", "clusters", len(names), "converged", len(settled), "queued", len(queued), "invalid", len(j.invalid))
	for _, name := range queued {
		d.enqueue(ctx, name, w)
	}
}

// settle plans the whole fleet of w in one go (each cloud listed once,
// whatever the fleet's size) and returns the entries of the clusters it
// finds converged whose queue is idle: their reconcile is done. The
// others go to their queues, whose worker plans each again before it
// applies. A plan that fails leaves every cluster to its queue.
func (d *Daemon) settle(ctx context.Context, log *slog.Logger, w *work, names []string) map[string]*report.Cluster {
	started := time.Now()
	res, err := d.cfg.Planner.Plan(ctx, reconciler.Request{Clusters: w.clusters, Commit: w.commit})
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
			d.setStatus(ctx, name, d.commitStatus(ctx, w, name, entry))
			return nil
		})
	}
	_ = g.Wait()
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

// loadHead sets the tracked branch's head and fleet without dispatching
// it (it was, by an earlier leader).
func (d *Daemon) loadHead(ctx context.Context, commit string) {
	applied, err := reconciler.AppliedSpecs(ctx, d.cfg.Store)
	if err != nil {
		d.log.Error("read the applied specs", "err", err)
		return
	}
	fleet, err := d.fleetAt(ctx, commit, applied)
	if err != nil {
		d.log.Warn("the head holds no readable fleet", "err", err)
		return
	}
	d.mu.Lock()
	d.head, d.fleet = commit, judge(fleet).valid
	d.mu.Unlock()
}

// resync queues a drift check of every valid cluster of the head's fleet,
// applied or not: a cluster whose first apply failed (the cloud down for
// a while) is tried again too, not left until the next commit.
func (d *Daemon) resync(ctx context.Context) {
	d.mu.Lock()
	head, fleet := d.head, d.fleet
	d.mu.Unlock()
	if head == "" {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(fleet)) {
		d.enqueue(ctx, name, &work{commit: head, ref: d.cfg.Source.Branch(), clusters: fleet, resync: true})
	}
}

// work is what a cluster's queue runs: the cluster at a commit, or a
// drift check (resync).
type work struct {
	commit, ref string
	clusters    map[string]*schemas.Cluster
	resync      bool
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
			return // not leading
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

// stepLog gathers a cluster's steps as the applier reports them.
type stepLog struct {
	mu    sync.Mutex
	steps []report.Step
}

func (d *Daemon) progress(s reconciler.Step) {
	switch s.State {
	case reconciler.StepStarted:
		return
	case reconciler.StepRetrying:
		// The cloud or a host does not answer for now: the status page
		// says so while the apply waits it out.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.setStatus(ctx, s.Change.Cluster, func(cs *ClusterStatus) {
			cs.Retrying, cs.Updated = s.Change.Address.String()+": "+s.Err.Error(), time.Now()
		})
		return
	}
	v, ok := d.steps.Load(s.Change.Cluster)
	if !ok {
		return
	}
	l := v.(*stepLog)
	st := report.Step{ID: s.Change.ID, Address: s.Change.Address.String(), Action: s.Change.Action, State: string(s.State),
		Seconds: s.Duration.Round(time.Millisecond).Seconds()}
	if s.Err != nil {
		st.Error = s.Err.Error()
	}
	l.mu.Lock()
	l.steps = append(l.steps, st)
	l.mu.Unlock()
	if s.Change.Action == diff.ActionCheck {
		// A rollout shows on the status page host by host as it goes.
		if s.State == reconciler.StepFailed {
			d.cfg.Metrics.gateFailed(s.Change.Cluster)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.setStatus(ctx, s.Change.Cluster, func(cs *ClusterStatus) {
			if cs.Rollout == nil {
				cs.Rollout = &Rollout{Version: s.Change.After["version"].Value}
			}
			host := s.Change.Address.Host
			i := slices.IndexFunc(cs.Rollout.Hosts, func(h HostVersion) bool { return h.Name == host })
			if i < 0 {
				cs.Rollout.Hosts = append(cs.Rollout.Hosts, HostVersion{Name: host})
				i = len(cs.Rollout.Hosts) - 1
			}
			switch s.State {
			case reconciler.StepDone:
				cs.Rollout.Hosts[i].Version = s.Change.After["version"].Value
				cs.Rollout.Halted = ""
			case reconciler.StepFailed:
				cs.Rollout.Halted = s.Change.Address.String() + ": " + st.Error
			}
			cs.Rollout.Version = s.Change.After["version"].Value
			cs.Rollout.tally()
			// The metrics move with the status (a scrape right after a
			// gate agrees with the page).
			d.cfg.Metrics.rollout(s.Change.Cluster, cs.Rollout.Done, len(cs.Rollout.Hosts))
		})
	}
}

// reconcile plans one cluster and applies the plan unless the cluster is
// paused (or, for drift, does not want it corrected), then reports.
func (d *Daemon) reconcile(ctx context.Context, name string, w *work) {
	kind := "commit"
	if w.resync {
		kind = "resync"
	}
	log := d.log.With("cluster", name, "commit", w.commit, "kind", kind)
	started := time.Now()
	entry := &report.Cluster{State: report.Pending, Started: started}
	req := reconciler.Request{Clusters: w.clusters, Only: name, Commit: w.commit, Resync: w.resync}
	res, err := d.cfg.Planner.Plan(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return // the leadership ended: the next leader plans again
		}
		log.Error("plan", "err", err)
		d.cfg.Metrics.errorAt("plan")
		d.cfg.Metrics.reconcile.WithLabelValues(kind, string(report.Error)).Observe(time.Since(started).Seconds())
		if w.resync {
			// A drift check that could not look (a host unreachable for a
			// moment) says so on the status and tries again next time; it
			// does not turn the commit's result into an error.
			d.setStatus(ctx, name, func(s *ClusterStatus) { s.LastResync, s.ResyncError = time.Now(), err.Error() })
			return
		}
		entry.State, entry.Summary, entry.Finished = report.Error, "plan: "+err.Error(), time.Now()
		d.update(ctx, w, name, entry)
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
	case plan.Empty():
		if w.resync {
			d.setStatus(ctx, name, func(s *ClusterStatus) { s.LastResync, s.ResyncError = time.Now(), "" })
			return // nothing drifted: nothing to say
		}
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
		d.apply(ctx, log, name, w, req, plan, entry)
		if entry.State == report.Pending {
			return // interrupted: the next leader resumes the journal
		}
		if warnings != "" {
			entry.Summary += "; " + warnings
		}
	}
	entry.Finished = time.Now()
	d.cfg.Metrics.reconcile.WithLabelValues(kind, string(entry.State)).Observe(time.Since(started).Seconds())
	d.update(ctx, w, name, entry)
}

// unfinished tells whether commit's note has a cluster still pending: its
// leader died before it was done.
func (d *Daemon) unfinished(ctx context.Context, commit string) bool {
	n, err := d.Note(ctx, commit)
	if err != nil {
		return false
	}
	for _, c := range n.Clusters {
		if c.State == report.Pending {
			return true
		}
	}
	return false
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
	entry.State, entry.Summary = report.Success, "applied (finished by "+d.cfg.ID+" after the leader died): "+report.PlanSummary(old.Plan)
	return true
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

// apply applies a cluster's plan, recording its steps in entry.
func (d *Daemon) apply(ctx context.Context, log *slog.Logger, name string, w *work, req reconciler.Request, plan *diff.Plan, entry *report.Cluster) {
	steps := &stepLog{}
	d.steps.Store(name, steps)
	defer d.steps.Delete(name)
	sum, err := d.cfg.Applier.Apply(ctx, req, plan)
	steps.mu.Lock()
	entry.Steps = slices.Clone(steps.steps)
	steps.mu.Unlock()
	took := time.Since(entry.Started).Round(100 * time.Millisecond)
	verb := "applied"
	switch {
	case w.resync && drifted(plan) > 0:
		verb = "drift corrected"
	case w.resync:
		verb = "scheduled backup taken"
	}
	switch {
	case err == nil:
		entry.State, entry.Summary = report.Success, fmt.Sprintf("%s in %s: %s", verb, took, report.PlanSummary(plan))
		d.cfg.Metrics.appliedAt(name, w.commit, float64(time.Now().Unix()))
		log.Info(verb, "steps", sum.Counts[reconciler.StepDone], "took", took)
	case ctx.Err() != nil:
		log.Warn("apply interrupted: the leadership ended", "err", err)
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

// update sets a cluster's entry in its commit's note, and its status, and
// publishes the note.
func (d *Daemon) update(ctx context.Context, w *work, name string, entry *report.Cluster) {
	if w.resync && entry.State == report.Pending {
		// A drift correction under way keeps the commit's result.
		return
	}
	if w.resync && drifted(entry.Plan) == 0 && entry.State == report.Success {
		// A scheduled backup taken: the status says so, not the note.
		d.setStatus(ctx, name, func(s *ClusterStatus) {
			s.LastResync, s.ResyncError, s.Retrying = time.Now(), "", ""
			d.day2(ctx, name, w.clusters[name], nil, s)
		})
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
	d.setStatus(ctx, name, d.commitStatus(ctx, w, name, entry))
}

// commitStatus is how a cluster's status changes with its entry in the
// note of w.
func (d *Daemon) commitStatus(ctx context.Context, w *work, name string, entry *report.Cluster) func(*ClusterStatus) {
	return func(s *ClusterStatus) {
		s.Commit, s.Ref, s.State, s.Summary, s.Updated = w.commit, w.ref, entry.State, entry.Summary, time.Now()
		if entry.State != report.Pending {
			s.Retrying = "" // the apply (or the resume) that retried is over
		}
		s.Paused = w.clusters[name] != nil && w.clusters[name].Spec.Paused
		if w.resync {
			s.LastResync, s.ResyncError = time.Now(), ""
			s.Drift = drifted(entry.Drift.Plan)
		} else if entry.State == report.Success {
			s.Drift = 0
		}
		// Applied with changes: by this daemon, by Resume when a dead
		// leader had started (its steps are in the journal, not the note),
		// or by a drift check that finished what the commit's apply could
		// not (w.commit is then the head, entry the commit's).
		if entry.State == report.Success && entry.Plan != nil && !entry.Plan.Empty() && !s.Paused {
			s.Applied = w.commit
		}
		d.day2(ctx, name, w.clusters[name], entry, s)
	}
}

// day2 sets the rollout and backup parts of a cluster's status from the
// ledger, and their metrics.
func (d *Daemon) day2(ctx context.Context, name string, spec *schemas.Cluster, entry *report.Cluster, s *ClusterStatus) {
	if spec != nil {
		versions, err := reconciler.HostVersions(ctx, d.cfg.Store, name)
		if err == nil && len(versions) > 0 {
			r := &Rollout{Version: spec.Spec.Kubernetes.Version}
			for _, h := range slices.Sorted(maps.Keys(versions)) {
				r.Hosts = append(r.Hosts, HostVersion{Name: h, Version: versions[h]})
			}
			r.tally()
			if entry != nil && entry.State == report.Failure {
				for _, st := range entry.Steps {
					if st.State == string(reconciler.StepFailed) && (st.Action == diff.ActionCheck || st.Action == diff.ActionDrain) {
						r.Halted = st.Address + ": " + st.Error
						break
					}
				}
			} else if s.Rollout != nil && (entry == nil || entry.State == report.Pending) {
				r.Halted = s.Rollout.Halted
			}
			s.Rollout = r
			d.cfg.Metrics.rollout(name, r.Done, len(r.Hosts))
		}
	}
	recs, err := reconciler.Backups(ctx, d.cfg.Store, name)
	if err != nil || len(recs) == 0 {
		return
	}
	last := recs[len(recs)-1]
	b := &BackupStatus{ID: last.ID, Reason: last.Reason, Taken: last.Taken, Size: last.Size}
	if last.Drill != nil {
		b.Drill = last.Drill.String()
	}
	s.LastBackup = b
	d.cfg.Metrics.backup(name, last)
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
	if err := d.put(ctx, d.cfg.Store.Key("_reports", n.Commit), n); err != nil {
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
	data, err := store.Get(ctx, store.Key("_reports", commit))
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

// ClusterStatus is a cluster as the status page and the API show it.
type ClusterStatus struct {
	Name    string       `json:"name"`
	Commit  string       `json:"commit"`
	Ref     string       `json:"ref"`
	State   report.State `json:"state"`
	Summary string       `json:"summary"`
	// Applied is the last commit applied with changes.
	Applied    string    `json:"applied,omitempty"`
	Drift      int       `json:"drift"`
	Paused     bool      `json:"paused,omitempty"`
	Updated    time.Time `json:"updated,omitzero"`
	LastResync time.Time `json:"lastResync,omitzero"`
	// ResyncError is why the last drift check could not look, if it could not.
	ResyncError string `json:"resyncError,omitempty"`
	// Retrying is the transient error the running apply last tried a step
	// again after (the cloud or a host unreachable for now), or why a step
	// still waits (a health gate not passed yet, no API server ready to
	// apply a manifest to); cleared when the apply ends.
	Retrying string `json:"retrying,omitempty"`
	// Rollout is where the hosts are: the version each runs, and the
	// gate (or drain) that halted the last apply, if one did.
	Rollout *Rollout `json:"rollout,omitempty"`
	// LastBackup is the newest etcd snapshot stored.
	LastBackup *BackupStatus `json:"lastBackup,omitempty"`
}

// Rollout is a cluster's rollout as the ledger and the last apply say.
type Rollout struct {
	// Version is the spec's; Done counts the hosts that run it.
	Version string        `json:"version"`
	Done    int           `json:"done"`
	Hosts   []HostVersion `json:"hosts"`
	// Halted names the step that stopped the last apply and why.
	Halted string `json:"halted,omitempty"`
}

// tally counts the hosts at the rollout's version.
func (r *Rollout) tally() {
	r.Done = 0
	for _, h := range r.Hosts {
		if h.Version == r.Version {
			r.Done++
		}
	}
}

// HostVersion is the Kubernetes version a host runs.
type HostVersion struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// BackupStatus is a cluster's newest snapshot.
type BackupStatus struct {
	ID     string    `json:"id"`
	Reason string    `json:"reason"`
	Taken  time.Time `json:"taken"`
	Size   int64     `json:"size"`
	// Drill is the last restore drill's outcome ("" if none ran).
	Drill string `json:"drill,omitempty"`
}

func (d *Daemon) setStatus(ctx context.Context, name string, set func(*ClusterStatus)) {
	mu, _ := d.statusMu.LoadOrStore(name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	key := d.cfg.Store.Key("_status", name)
	s := ClusterStatus{Name: name}
	if data, err := d.cfg.Store.Get(ctx, key); err == nil {
		_ = json.Unmarshal(data, &s)
	}
	set(&s)
	if err := d.put(ctx, key, s); err != nil && ctx.Err() == nil {
		d.log.Error("store the cluster's status", "cluster", name, "err", err)
	}
}

func (d *Daemon) loadSeen(ctx context.Context) (map[string]string, error) {
	prefix := d.cfg.Store.Key("_daemon", "seen") + "/"
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
	if err := d.write(ctx, d.cfg.Store.Key("_daemon", "seen", ref), []byte(commit)); err != nil && ctx.Err() == nil {
		d.log.Error("record the handled ref", "ref", ref, "err", err)
	}
}

// Health is what /readyz and the status page say of the daemon.
type Health struct {
	Leader    bool      `json:"leader"`
	Head      string    `json:"head,omitempty"`
	LastSync  time.Time `json:"lastSync,omitzero"`
	SyncError string    `json:"syncError,omitempty"`
}

// Health reports the daemon's state.
func (d *Daemon) Health() Health {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := Health{Leader: d.leader != nil, Head: d.head, LastSync: d.synced}
	if d.lastErr != nil {
		h.SyncError = d.lastErr.Error()
	}
	return h
}

// Memo is where forge reporters remember what they posted: the store,
// written only while this daemon leads.
func (d *Daemon) Memo() report.Memo { return memo{d} }

type memo struct{ d *Daemon }

func (m memo) Get(ctx context.Context, key string) ([]byte, error) {
	return m.d.cfg.Store.Get(ctx, m.d.cfg.Store.Key("_reported", key))
}

func (m memo) Put(ctx context.Context, key string, value []byte) error {
	return m.d.write(ctx, m.d.cfg.Store.Key("_reported", key), value)
}

// AddReporter adds a reporter (one that needs the daemon, such as a forge
// remembering through [Daemon.Memo]); call it before Run.
func (d *Daemon) AddReporter(r ...report.Reporter) { d.cfg.Reporters = append(d.cfg.Reporters, r...) }

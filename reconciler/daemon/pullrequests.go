package daemon

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// prQueue holds the pull request heads waiting to be planned: the newest
// commit of each ref, in the order the refs came. Adding never blocks, so
// however many pull requests wait, the tracked branch and the drift
// checks do not.
type prQueue struct {
	mu    sync.Mutex
	next  map[string]string // ref -> commit
	order []string
	wake  chan struct{}
}

func newPRQueue() *prQueue {
	return &prQueue{next: map[string]string{}, wake: make(chan struct{}, 1)}
}

func (q *prQueue) add(ref, commit string) {
	q.mu.Lock()
	if _, queued := q.next[ref]; !queued {
		q.order = append(q.order, ref)
	}
	q.next[ref] = commit
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *prQueue) take() (ref, commit string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return "", "", false
	}
	ref, q.order = q.order[0], q.order[1:]
	commit = q.next[ref]
	delete(q.next, ref)
	return ref, commit, true
}

// pullRequests plans pull request heads one after another: never applied,
// nothing persisted (the planner renders on the store's read-only view).
func (d *Daemon) pullRequests(ctx context.Context) {
	for {
		ref, commit, ok := d.prs.take()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-d.prs.wake:
			}
			continue
		}
		d.mu.Lock()
		done := d.seen[ref] == commit
		d.mu.Unlock()
		if !done {
			d.pullRequest(ctx, ref, commit)
		}
	}
}

// pullRequest fetches a pull request's head, plans it and publishes the
// plan. The head is marked seen before it is fetched, with a marker that
// the plan is under way: a head that kills the daemon (in its fetch or
// its plan) is not fetched or planned again by the next leader, which
// reports it failed instead ([Daemon.unfinishedPRs]).
func (d *Daemon) pullRequest(ctx context.Context, ref, commit string) {
	log := d.log.With("ref", ref, "commit", commit)
	started := time.Now()
	d.markSeen(ctx, ref, commit)
	if old, err := d.Note(ctx, commit); err == nil && old.Applied {
		// A commit of the tracked branch: its record (the note, its git
		// note, the forge's statuses) is what was applied, and a plan
		// never replaces it.
		log.Info("the pull request's head is a commit of the tracked branch; its note stands", "branch", old.Ref)
		return
	}
	if err := d.write(ctx, state.KeysOf(d.cfg.Store).Planning(ref), []byte(commit)); err != nil {
		log.Error("record the plan under way", "err", err)
		return
	}
	n := &report.Note{Commit: commit, Ref: ref, Clusters: map[string]*report.Cluster{}}
	defer func() {
		if ctx.Err() != nil {
			return // the next leader reports it
		}
		d.publish(ctx, n)
		d.cfg.Metrics.reconcile.WithLabelValues("pull_request", string(n.State)).Observe(time.Since(started).Seconds())
		log.Info("planned a pull request", "state", n.State, "clusters", len(n.Clusters))
		if err := d.remove(ctx, state.KeysOf(d.cfg.Store).Planning(ref)); err != nil {
			log.Error("clear the plan under way", "err", err)
		}
	}()
	// Fetched only now, under the marker: a head whose fetch kills the
	// daemon is reported failed by the next leader, not fetched again.
	if err := d.cfg.Source.FetchPullRequest(ctx, ref, commit); err != nil {
		n.Message = "not planned: " + err.Error()
		return
	}
	applied, err := reconciler.AppliedSpecs(ctx, d.cfg.Store)
	if err != nil {
		n.Message = "OPKE could not read its state store: " + err.Error()
		return
	}
	fleet, err := d.fleetAt(ctx, commit, applied)
	if err != nil {
		n.Message = "no fleet at this commit: " + err.Error()
		return
	}
	n.Findings = fleet.Findings
	j := judge(fleet)
	for name, msg := range j.invalid {
		n.Clusters[name] = &report.Cluster{State: report.Failure, Summary: "invalid spec: " + msg}
	}
	if j.broken {
		return
	}
	if added, max := addedServers(j, applied, d.trackedFleet()), cmp.Or(d.cfg.MaxPullRequestServers, DefaultMaxPullRequestServers); added > max {
		msg := fmt.Sprintf("not planned: the pull request adds %d servers to the fleet, over the daemon's bound of %d (--max-pr-servers)", added, max)
		for _, name := range j.concerned(applied) {
			n.Clusters[name] = &report.Cluster{State: report.Failure, Summary: msg, Started: started, Finished: time.Now()}
		}
		n.Message = msg
		return
	}
	// One plan of the whole fleet (each cloud listed once), cut by cluster.
	res, err := d.cfg.Planner.Plan(ctx, reconciler.Request{Clusters: j.valid, Commit: commit})
	for _, name := range j.concerned(applied) {
		c := &report.Cluster{Started: started, Finished: time.Now()}
		switch {
		case err != nil:
			c.State, c.Summary = report.Error, "plan: "+err.Error()
			d.cfg.Metrics.errorAt("plan")
		default:
			plan := res.Plan.Of(name)
			c.State, c.Plan = report.Success, plan
			c.Summary = "plan: " + report.PlanSummary(plan)
			if w := warningsOf(plan); w != "" {
				c.Summary += "; " + w
			}
		}
		n.Clusters[name] = c
	}
}

// DefaultMaxPullRequestServers is Config.MaxPullRequestServers' default.
const DefaultMaxPullRequestServers = 1000

// addedServers is how many servers the valid clusters want beyond those
// they have, counted from the specs before anything is planned, part by
// part (the gateway, the controllers, each worker pool by name: a
// renamed pool's servers are all new): what a part has is the larger of
// its applied spec's and the tracked branch's head's (a cluster whose
// first apply is under way is not counted against every pull request).
func addedServers(j judged, applied map[string]*reconciler.AppliedSpec, tracked map[string]*schemas.Cluster) int {
	added := 0
	for name, c := range j.valid {
		had := map[string]int{}
		for _, base := range []*schemas.Cluster{tracked[name], appliedSpec(applied[name])} {
			for part, n := range serversOf(base) {
				had[part] = max(had[part], n)
			}
		}
		for part, n := range serversOf(c) {
			added += max(0, n-had[part])
		}
	}
	return added
}

func appliedSpec(a *reconciler.AppliedSpec) *schemas.Cluster {
	if a == nil {
		return nil
	}
	return a.Spec
}

// serversOf counts a cluster spec's servers by part: its gateway, its
// controllers and each worker pool; none for nil.
func serversOf(c *schemas.Cluster) map[string]int {
	if c == nil {
		return nil
	}
	n := map[string]int{"gateway": 1, "controllers": c.Spec.Controllers.Count}
	for _, p := range c.Spec.WorkerPools {
		n["pool "+p.Name] += p.Count
	}
	return n
}

// trackedFleet is the valid clusters at the tracked branch's head the
// leader dispatched last (nil before the first): kept from the dispatch,
// not read from git again for each pull request.
func (d *Daemon) trackedFleet() map[string]*schemas.Cluster {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fleet
}

// unfinishedPRs reports the pull request heads whose plan a leader began
// and never finished (it died planning them, perhaps because of them):
// failed, and not planned again until they move.
func (d *Daemon) unfinishedPRs(ctx context.Context) {
	prefix := state.KeysOf(d.cfg.Store).Plannings()
	left, err := d.cfg.Store.List(ctx, prefix)
	if err != nil {
		d.log.Error("read the pull request plans under way", "err", err)
		return
	}
	for key, commit := range left {
		ref := strings.TrimPrefix(key, prefix)
		d.log.Warn("a pull request's plan did not finish; not planned again", "ref", ref, "commit", string(commit))
		d.publish(ctx, &report.Note{Commit: string(commit), Ref: ref, Clusters: map[string]*report.Cluster{},
			Message: "the plan of this pull request did not finish: the daemon stopped during it (it is planned again when the pull request moves)"})
		if err := d.remove(ctx, key); err != nil {
			d.log.Error("clear the plan under way", "err", err)
		}
	}
}

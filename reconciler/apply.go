package reconciler

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render"
	"opke.dev/opke/render/ignition"
	"opke.dev/opke/schemas"
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
)

// Summary is what an apply did.
type Summary struct {
	Counts   map[StepState]int
	Failed   []Step
	Duration time.Duration
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
	// Progress, if set, is told of every step as it starts and ends.
	Progress func(Step)
	// Attempts bounds the tries of a step on transient errors (default 8).
	Attempts int
}

// Apply executes plan, made from req: each cluster's infrastructure
// changes, then (with the real addresses observed) its hosts' changes,
// re-planned from what the infrastructure phase made. Every step is
// journaled before and after it runs.
func (a *Applier) Apply(ctx context.Context, req Request, plan *diff.Plan) (*Summary, error) {
	started := time.Now()
	sum := &Summary{Counts: map[StepState]int{}}
	clusters := map[string]bool{}
	for _, c := range slices.Concat(plan.Changes, plan.Drift) {
		clusters[c.Cluster] = true
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		if err := a.cluster(ctx, req, plan, name, sum); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	sum.Duration = time.Since(started)
	if len(sum.Failed) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d step(s) failed", ErrFailed, len(sum.Failed)))
	}
	return sum, errors.Join(errs...)
}

func (a *Applier) log() *slog.Logger { return cmp.Or(a.Logger, slog.New(slog.DiscardHandler)) }

// planID names a plan in the journal: the hash of its changes.
func planID(p *diff.Plan) string {
	b, _ := json.Marshal(struct{ C, D []diff.Change }{p.Changes, p.Drift})
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:6])
}

type journalEntry struct {
	Plan    string    `json:"plan"`
	Commit  string    `json:"commit,omitempty"`
	Address string    `json:"address"`
	Action  string    `json:"action"`
	State   StepState `json:"state"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

func (a *Applier) journal(ctx context.Context, plan *diff.Plan, id string, c diff.Change, st StepState, err error) error {
	e := journalEntry{Plan: id, Commit: plan.Commit, Address: c.Address, Action: c.Action.String(), State: st, At: time.Now().UTC()}
	if err != nil {
		e.Error = err.Error()
	}
	b, _ := json.Marshal(e)
	// The journal lives outside the cluster's keys: it outlives a cluster
	// that is forgotten, as the record of how it went.
	return a.Planner.Store.Put(ctx, a.Planner.Store.Key("_journal", c.Cluster, id, c.ID), b)
}

// cluster applies one cluster's part of the plan.
func (a *Applier) cluster(ctx context.Context, req Request, plan *diff.Plan, name string, sum *Summary) error {
	store := a.Planner.Store
	id := planID(plan)
	var infra, hostsPhase []diff.Change
	for _, c := range slices.Concat(plan.Changes, plan.Drift) {
		if c.Cluster != name {
			continue
		}
		if c.Phase == diff.PhaseInfrastructure {
			infra = append(infra, c)
		} else {
			hostsPhase = append(hostsPhase, c)
		}
	}
	spec := req.Clusters[name]
	owner, err := store.InstallationID(ctx)
	if err != nil {
		return err
	}
	where := func() (string, string, error) {
		if spec != nil {
			return spec.Spec.Cloud, spec.Spec.Region, nil
		}
		specs, err := appliedSpecs(ctx, store)
		if err != nil {
			return "", "", err
		}
		if s := specs[name]; s != nil {
			return s.Spec.Spec.Cloud, s.Spec.Spec.Region, nil
		}
		return "", "", fmt.Errorf("cluster %s: no spec says which cloud it is in", name)
	}
	cloudName, region, err := where()
	if err != nil {
		return err
	}
	clients, err := a.Planner.Clouds.Clients(ctx, cloudName, region)
	if err != nil {
		return err
	}
	obs, err := cloud.Observe(ctx, clients, owner, nil)
	if err != nil {
		return err
	}
	ops := cloud.NewApplier(clients, owner, name, obs.Clusters[name])
	observed := map[string]diff.Resource{}
	for _, r := range obs.Clusters[name] {
		observed[r.Address()] = r
	}

	// The material is issued for good now; user_data comes from this render.
	var out *render.Output
	if spec != nil {
		if out, err = render.Cluster(ctx, store, spec, render.Options{Now: a.Planner.now(), KubeletImage: a.Planner.KubeletImage}); err != nil {
			return err
		}
	}
	ok := a.run(ctx, plan, id, infra, sum, func(ctx context.Context, c diff.Change) error {
		return a.infraStep(ctx, ops, out, observed, c)
	})
	if !ok {
		return nil // the failed steps are in the summary
	}
	if spec == nil {
		// A cluster that left the fleet: its forget step, if any.
		a.run(ctx, plan, id, hostsPhase, sum, func(ctx context.Context, c diff.Change) error {
			if c.Action != diff.ActionForget {
				return fmt.Errorf("%w: %s of a cluster no longer in the fleet", errors.ErrUnsupported, c.Action)
			}
			return forget(ctx, store, name)
		})
		return nil
	}

	// The host phase is planned again from what the infrastructure phase
	// made: the real addresses, the certificates that carry them, issued
	// into the store first so the plan's render finds them settled.
	if obs, err = cloud.Observe(ctx, clients, owner, nil); err != nil {
		return err
	}
	if _, err := render.Cluster(ctx, store, spec, render.Options{Now: a.Planner.now(), KubeletImage: a.Planner.KubeletImage,
		APIFloatingIP: apiFloatingIP(obs.Clusters[name], name)}); err != nil {
		return err
	}
	res, err := a.Planner.Plan(ctx, Request{Clusters: map[string]*schemas.Cluster{name: spec}, Only: name, Commit: plan.Commit})
	if err != nil {
		return err
	}
	pl := res.Clusters[name]
	var hostChanges []diff.Change
	for _, c := range slices.Concat(res.Plan.Changes, res.Plan.Drift) {
		if c.Phase == diff.PhaseHosts {
			hostChanges = append(hostChanges, c)
		}
	}
	files := map[string]map[string]renderFile{}
	for _, h := range pl.Rendered.Assets.Hosts {
		files[h.Name] = map[string]renderFile{}
		for _, f := range h.Files {
			files[h.Name][f.Path] = renderFile{data: f.Data, mode: uint32(f.Mode.Perm()), sha: f.SHA256}
		}
	}
	target, err := a.hostTarget(name, clients, pl.Observed.Cloud)
	if err != nil && len(hostChanges) > 0 {
		return err
	}
	failedHosts := map[string]bool{}
	var mu sync.Mutex
	ok = a.run(ctx, plan, id, hostChanges, sum, func(ctx context.Context, c diff.Change) error {
		err := a.hostStep(ctx, target, files, c)
		if err != nil {
			mu.Lock()
			failedHosts[hostOf(c.Address)] = true
			mu.Unlock()
		}
		return err
	})
	for _, h := range pl.Desired.Hosts {
		if !failedHosts[h.Name] {
			if err := RecordVersion(ctx, store, name, h.Name, h.Version); err != nil {
				return err
			}
		}
	}
	if ok {
		return RecordSpec(ctx, store, spec, plan.Commit)
	}
	return nil
}

type renderFile struct {
	data []byte
	mode uint32
	sha  string
}

func apiFloatingIP(rs []diff.Resource, cluster string) netip.Addr {
	for _, r := range rs {
		if r.Kind == diff.KindFloatingIP && r.Name == cluster+"-api" {
			if a, err := netip.ParseAddr(r.Attrs["address"].Value); err == nil {
				return a
			}
		}
	}
	return netip.Addr{}
}

// hostOf is the host of a host-phase address: host/<host>/<path>.
func hostOf(address string) string {
	rest, _ := strings.CutPrefix(address, "host/")
	h, _, _ := strings.Cut(rest, "/")
	return h
}

// resourceOf turns an infrastructure change back into the resource it
// is about.
func resourceOf(c diff.Change) (diff.Resource, error) {
	rest, ok := strings.CutPrefix(c.Address, "openstack/")
	kind, name, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return diff.Resource{}, fmt.Errorf("%s: not an OpenStack address", c.Address)
	}
	attrs := c.After
	if c.Action == diff.ActionDelete {
		attrs = c.Before
	}
	return diff.Resource{Kind: diff.Kind(kind), Name: name, Attrs: attrs}, nil
}

func (a *Applier) infraStep(ctx context.Context, ops *cloud.Applier, out *render.Output, observed map[string]diff.Resource, c diff.Change) error {
	store := a.Planner.Store
	r, err := resourceOf(c)
	if err != nil {
		return err
	}
	switch c.Action {
	case diff.ActionCreate, diff.ActionReplace:
		if c.Action == diff.ActionReplace {
			if err := ops.Delete(ctx, observed[c.Address]); err != nil {
				return err
			}
		}
		var userData []byte
		if r.Kind == diff.KindServer {
			if out == nil {
				return fmt.Errorf("%s: no render for its user_data", c.Address)
			}
			userData = out.UserData[roleOfServer(r.Name, c.Cluster)]
			sum := sha256.Sum256(userData)
			r.Attrs = maps.Clone(r.Attrs)
			r.Attrs["user_data"] = diff.Known(hex.EncodeToString(sum[:]))
		}
		for k, v := range r.Attrs {
			if v.Unknown {
				r.Attrs = maps.Clone(r.Attrs)
				delete(r.Attrs, k)
			}
		}
		if r.ID, err = ops.Create(ctx, r, userData); err != nil {
			return err
		}
		return RecordResource(ctx, store, c.Cluster, r)
	case diff.ActionUpdate:
		if err := ops.Update(ctx, r); err != nil {
			return err
		}
		r.ID = ops.ID(r.Kind, r.Name)
		return RecordResource(ctx, store, c.Cluster, r)
	case diff.ActionDelete:
		if o, ok := observed[c.Address]; ok {
			r.ID = o.ID
		}
		if err := ops.Delete(ctx, r); err != nil {
			return err
		}
		return forgetResource(ctx, store, c.Cluster, r)
	}
	return fmt.Errorf("%w: %s in the infrastructure phase", errors.ErrUnsupported, c.Action)
}

// roleOfServer tells a server's role from its name: <cluster>-<role>-<i>.
func roleOfServer(server, cluster string) ignition.Role {
	switch {
	case strings.HasPrefix(server, cluster+"-"+schemas.RoleController+"-"):
		return ignition.RoleController
	case strings.HasPrefix(server, cluster+"-"+schemas.RoleGateway+"-"):
		return ignition.RoleGateway
	}
	return ignition.RoleWorker
}

// run executes changes in dependency order, Parallel at once; a change
// whose dependency failed is skipped. It reports whether all passed.
func (a *Applier) run(ctx context.Context, plan *diff.Plan, id string, changes []diff.Change, sum *Summary, step func(context.Context, diff.Change) error) bool {
	if len(changes) == 0 {
		return true
	}
	byID := map[string]diff.Change{}
	for _, c := range changes {
		byID[c.ID] = c
	}
	var mu sync.Mutex
	state := map[string]StepState{}
	done := make(chan string, len(changes))
	sem := make(chan struct{}, cmp.Or(a.Parallel, 8))
	report := func(s Step) {
		mu.Lock()
		defer mu.Unlock()
		if s.State != StepStarted {
			sum.Counts[s.State]++
		}
		if s.State == StepFailed || s.State == StepSkipped {
			sum.Failed = append(sum.Failed, s)
		}
		if a.Progress != nil {
			a.Progress(s)
		}
	}
	ready := func(c diff.Change) (bool, bool) { // ready, blocked
		for _, d := range c.DependsOn {
			if _, inPlan := byID[d]; !inPlan {
				continue // another cluster's or phase's: done before this phase
			}
			switch state[d] {
			case StepDone:
			case StepFailed, StepSkipped:
				return false, true
			default:
				return false, false
			}
		}
		return true, false
	}
	pending := len(changes)
	for pending > 0 {
		mu.Lock()
		for _, c := range changes {
			if state[c.ID] != "" {
				continue
			}
			ok, blocked := ready(c)
			switch {
			case blocked:
				state[c.ID] = StepSkipped
				mu.Unlock()
				_ = a.journal(ctx, plan, id, c, StepSkipped, nil)
				report(Step{Change: c, State: StepSkipped})
				mu.Lock()
				pending--
			case ok:
				state[c.ID] = StepStarted
				go func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					report(Step{Change: c, State: StepStarted})
					t0 := time.Now()
					err := a.journal(ctx, plan, id, c, StepStarted, nil)
					if err == nil {
						err = a.retry(ctx, func() error { return step(ctx, c) })
					}
					st := StepDone
					if err != nil {
						st = StepFailed
						a.log().Error("step failed", "cluster", c.Cluster, "address", c.Address, "action", c.Action.String(), "err", err)
					}
					if jerr := a.journal(ctx, plan, id, c, st, err); jerr != nil && err == nil {
						st, err = StepFailed, jerr
					}
					mu.Lock()
					state[c.ID] = st
					mu.Unlock()
					report(Step{Change: c, State: st, Err: err, Duration: time.Since(t0)})
					done <- c.ID
				}()
			}
		}
		mu.Unlock()
		if pending == 0 {
			break
		}
		// Wait for a running step to end, unless everything left was
		// just skipped.
		mu.Lock()
		running := false
		for _, s := range state {
			if s == StepStarted {
				running = true
			}
		}
		mu.Unlock()
		if !running {
			continue
		}
		<-done
		pending--
	}
	return sum.ok(changes)
}

func (s *Summary) ok(changes []diff.Change) bool {
	for _, f := range s.Failed {
		for _, c := range changes {
			if f.Change.ID == c.ID && f.Change.Cluster == c.Cluster {
				return false
			}
		}
	}
	return true
}

// retry runs a step again on transient cloud errors, with backoff.
func (a *Applier) retry(ctx context.Context, fn func() error) error {
	attempts := cmp.Or(a.Attempts, 8)
	wait := 100 * time.Millisecond
	for i := 1; ; i++ {
		err := fn()
		if err == nil || i == attempts || !cloud.Transient(err) {
			return err
		}
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

// forget removes a cluster from the store: its ledger and its material.
func forget(ctx context.Context, store *state.Store, cluster string) error {
	if err := store.DeletePrefix(ctx, store.Key(cluster)+"/"); err != nil {
		return err
	}
	return store.Delete(ctx, store.Key("_applied", cluster))
}

func forgetResource(ctx context.Context, store *state.Store, cluster string, r diff.Resource) error {
	return store.Delete(ctx, store.Key(cluster, "infra", string(r.Kind), r.Name))
}

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
	"slices"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
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
		switch {
		case c.Cluster != name:
		case c.Phase == diff.PhaseInfrastructure:
			infra = append(infra, c)
		default:
			hostsPhase = append(hostsPhase, c)
		}
	}
	spec := req.Clusters[name]
	owner, err := store.InstallationID(ctx)
	if err != nil {
		return err
	}
	clients, err := a.clients(ctx, spec, name)
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
	if !allDone(a.run(ctx, plan, id, infra, sum, func(ctx context.Context, c diff.Change) error {
		return a.infraStep(ctx, ops, out, observed, c)
	})) {
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
	// made: the real addresses, and the certificates that carry them,
	// issued for good by rendering on the store.
	res, err := a.Planner.Plan(ctx, Request{Clusters: map[string]*schemas.Cluster{name: spec}, Only: name, Commit: plan.Commit, Issue: true})
	if err != nil {
		return err
	}
	pl := res.Clusters[name]
	var hostChanges []diff.Change
	uploads := map[string][]string{}
	for _, c := range slices.Concat(res.Plan.Changes, res.Plan.Drift) {
		if c.Phase != diff.PhaseHosts {
			continue
		}
		hostChanges = append(hostChanges, c)
		if c.Action == diff.ActionUpload {
			host := hostOf(c.Address)
			uploads[host] = append(uploads[host], strings.TrimPrefix(c.Address, "host/"+host))
		}
	}
	states := map[string]StepState{}
	if len(hostChanges) > 0 {
		target, err := hostTarget(name, clients, pl.Observed.Cloud, store)
		if err != nil {
			return err
		}
		files := map[string]map[string]assets.File{}
		for _, h := range pl.Rendered.Assets.Hosts {
			files[h.Name] = map[string]assets.File{}
			for _, f := range h.Files {
				files[h.Name][f.Path] = f
			}
		}
		// A host that already has a file's bytes (a step that ran before a
		// crash) is not sent them again: one sha256sum per host says.
		have, err := a.Hosts.Checksums(ctx, target, uploads)
		if err != nil {
			a.log().Warn("reading the hosts' files before uploading; sending them all", "cluster", name, "err", err)
		}
		states = a.run(ctx, plan, id, hostChanges, sum, func(ctx context.Context, c diff.Change) error {
			return a.hostStep(ctx, target, files, have, c)
		})
	}
	notDone := map[string]bool{}
	for _, c := range hostChanges {
		if states[c.ID] != StepDone {
			notDone[hostOf(c.Address)] = true
		}
	}
	var versions map[string]string
	if pl.Ledger.Applied != nil {
		versions = pl.Ledger.Applied.Versions
	}
	for _, h := range pl.Desired.Hosts {
		if !notDone[h.Name] && versions[h.Name] != h.Version {
			if err := RecordVersion(ctx, store, name, h.Name, h.Version); err != nil {
				return err
			}
		}
	}
	if len(notDone) > 0 {
		return nil
	}
	return RecordSpec(ctx, store, spec, plan.Commit)
}

// clients connects to the cloud of a cluster: its spec's, or for one no
// longer in the fleet, its last applied spec's.
func (a *Applier) clients(ctx context.Context, spec *schemas.Cluster, name string) (*cloud.Clients, error) {
	if spec == nil {
		specs, err := appliedSpecs(ctx, a.Planner.Store)
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

// hostStep runs an upload or a restart on a host. An upload the host
// already has (have, read before the phase) is only recorded.
func (a *Applier) hostStep(ctx context.Context, t HostTarget, files map[string]map[string]assets.File, have map[string]map[string]string, c diff.Change) error {
	host := hostOf(c.Address)
	rest := strings.TrimPrefix(c.Address, "host/"+host)
	switch c.Action {
	case diff.ActionUpload:
		f, ok := files[host][rest]
		if !ok {
			return fmt.Errorf("%s: not in the render", c.Address)
		}
		if have[host][rest] != f.SHA256 {
			if err := a.Hosts.upload(ctx, t, host, f); err != nil {
				return err
			}
		}
		return RecordFile(ctx, a.Planner.Store, c.Cluster, host, rest, f.SHA256)
	case diff.ActionRestart:
		unit, ok := strings.CutPrefix(rest, "/units/")
		if !ok {
			return fmt.Errorf("%s: not a unit", c.Address)
		}
		_, err := a.Hosts.run(ctx, t, host, "systemctl restart "+unit)
		return err
	}
	return fmt.Errorf("%w: %s on a host", errors.ErrUnsupported, c.Action)
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
	if o, ok := observed[c.Address]; ok {
		r.ID = o.ID
	}
	if c.Action == diff.ActionDelete || c.Action == diff.ActionReplace {
		if err := ops.Delete(ctx, r); err != nil {
			return err
		}
	}
	if r.Kind == diff.KindServer {
		// A server deleted, or made (again, after one deleted by hand), is
		// a host the ledger knows nothing of.
		if err := ForgetHost(ctx, store, c.Cluster, r.Name); err != nil {
			return err
		}
	}
	if c.Action == diff.ActionDelete {
		return store.Delete(ctx, store.Key(c.Cluster, "infra", string(r.Kind), r.Name))
	}
	switch c.Action {
	case diff.ActionCreate, diff.ActionReplace:
		// What is known after apply is the cloud's to choose.
		r.Attrs = maps.Clone(r.Attrs)
		maps.DeleteFunc(r.Attrs, func(_ string, v diff.Value) bool { return v.Unknown })
		var userData []byte
		if r.Kind == diff.KindServer {
			if out == nil {
				return fmt.Errorf("%s: no render for its user_data", c.Address)
			}
			userData = out.UserData[roleOfServer(r.Name, c.Cluster)]
			sum := sha256.Sum256(userData)
			r.Attrs["user_data"] = diff.Known(hex.EncodeToString(sum[:]))
		}
		if r.ID, err = ops.Create(ctx, r, userData); err != nil {
			return err
		}
	case diff.ActionUpdate:
		if err := ops.Update(ctx, r); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: %s in the infrastructure phase", errors.ErrUnsupported, c.Action)
	}
	return RecordResource(ctx, store, c.Cluster, r)
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

// run executes changes in dependency order, Parallel at once, each
// journaled before and after; a change whose dependency did not pass is
// skipped. It returns each change's end state by id.
func (a *Applier) run(ctx context.Context, plan *diff.Plan, id string, changes []diff.Change, sum *Summary, step func(context.Context, diff.Change) error) map[string]StepState {
	state := make(map[string]StepState, len(changes))
	inPhase := map[string]bool{}
	for _, c := range changes {
		inPhase[c.ID] = true
	}
	var reportMu sync.Mutex
	report := func(s Step) {
		reportMu.Lock()
		defer reportMu.Unlock()
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
	results := make(chan Step)
	sem := make(chan struct{}, cmp.Or(a.Parallel, 8))
	running := 0
	for {
		for _, c := range changes {
			if state[c.ID] != "" {
				continue
			}
			ready, blocked := true, false
			for _, d := range c.DependsOn {
				// Another phase's or cluster's changes ran before this phase.
				switch st := state[d]; {
				case !inPhase[d] || st == StepDone:
				case st == StepFailed || st == StepSkipped:
					blocked = true
				default:
					ready = false
				}
			}
			switch {
			case blocked:
				state[c.ID] = StepSkipped
				_ = a.journal(ctx, plan, id, c, StepSkipped, nil)
				report(Step{Change: c, State: StepSkipped})
			case ready:
				state[c.ID] = StepStarted
				running++
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
					results <- Step{Change: c, State: st, Err: err, Duration: time.Since(t0)}
				}()
			}
		}
		if running == 0 {
			return state
		}
		r := <-results
		running--
		state[r.Change.ID] = r.State
		report(r)
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

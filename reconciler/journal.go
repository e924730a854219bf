package reconciler

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"opke.dev/opke/diff"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// The journal is how an apply of a cluster went, step by step, in the
// state store:
//
//	/opke/_open/<cluster>                   the id of the plan being applied
//	/opke/_journal/<cluster>/<plan>/plan    the plan, the spec it was made from, how it ended
//	/opke/_journal/<cluster>/<plan>/<step>  each step, written before and after it runs
//
// A cluster with an open plan was being applied when its
// applier died: [Applier.Resume] applies the journaled plan again,
// skipping the steps the journal says are done (every step is idempotent,
// so a step that was started runs again safely). An apply that ends, well
// or not, closes its journal; the newest journalKeep are kept.

// journalKeep is how many ended journals of a cluster are kept.
const journalKeep = 20

// JournalPlan is a journaled plan: one cluster's part of a plan, the spec
// it was made from (nil for a cluster that left the fleet) and its end.
type JournalPlan struct {
	ID      string           `json:"id"`
	Plan    *diff.Plan       `json:"plan"`
	Spec    *schemas.Cluster `json:"spec,omitempty"`
	Started time.Time        `json:"started"`
	Ended   *time.Time       `json:"ended,omitempty"`
	// Result is done, failed or interrupted once ended.
	Result string `json:"result,omitempty"`
}

// journalEntry is one step of a journal as it was last written.
type journalEntry struct {
	Plan    string       `json:"plan"`
	Commit  string       `json:"commit,omitempty"`
	Address diff.Address `json:"address"`
	Action  string       `json:"action"`
	State   StepState    `json:"state"`
	// Fingerprint is the hash of the whole change: a resumed plan's step
	// is done only if it is the very same change.
	Fingerprint string    `json:"fingerprint"`
	Error       string    `json:"error,omitempty"`
	At          time.Time `json:"at"`
	// Seconds is how long a done or failed step took.
	Seconds float64 `json:"seconds,omitempty"`
}

// The ends of a journal.
const (
	resultDone        = "done"
	resultFailed      = "failed"
	resultInterrupted = "interrupted"
)

// ErrUnfinished is an apply refused because another plan of the cluster
// was interrupted and is not resumed yet: [Applier.Resume] first.
var ErrUnfinished = errors.New("an interrupted apply of the cluster must be resumed first")

// ErrStale is a plan whose cluster changed in the store after it was
// made (another apply ran): plan again.
var ErrStale = errors.New("the cluster's state moved since the plan was made")

// ErrNotOwner is an apply of a cluster its applier no longer owns (the
// daemons sharing the fleet moved it to another while it waited for the
// cluster's lease): the new owner applies it.
var ErrNotOwner = errors.New("the cluster is owned by another daemon now")

// planID names a cluster's plan in the journal: the hash of its commit
// and changes, so the same saved plan applied again after a crash is
// known as the one to resume.
func planID(p *diff.Plan) string {
	b, _ := json.Marshal(struct {
		Commit string
		C, D   []diff.Change
	}{p.Commit, p.Changes, p.Drift})
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:6])
}

// journal writes one cluster's journal of one plan.
type journal struct {
	w       writer
	cluster string
	id      string
	commit  string
	// point, if set, is called after every journal write (a test kills
	// the applier there).
	point func(what string) error
}

func (j *journal) key(parts ...string) string {
	return state.KeysOf(j.w).Journal(j.cluster, parts...)
}

// openPlan returns the id of cluster's open journal, "" if none.
func openPlan(ctx context.Context, kv state.KV, cluster string) (string, error) {
	v, err := kv.Get(ctx, state.KeysOf(kv).OpenPlan(cluster))
	if errors.Is(err, state.ErrNotFound) {
		return "", nil
	}
	return string(v), err
}

// readJournalPlan reads a journaled plan.
func readJournalPlan(ctx context.Context, kv state.KV, cluster, id string) (*JournalPlan, error) {
	v, err := kv.Get(ctx, state.KeysOf(kv).Journal(cluster, id, "plan"))
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", cluster, err)
	}
	var jp JournalPlan
	if err := json.Unmarshal(v, &jp); err != nil || jp.Plan == nil {
		return nil, fmt.Errorf("journal of %s: plan %s: not a journaled plan", cluster, id)
	}
	return &jp, nil
}

// start opens the journal of a new apply: any journal of the same id
// (the same changes applied before) is dropped first.
func (j *journal) start(ctx context.Context, plan *diff.Plan, spec *schemas.Cluster) error {
	if err := j.w.DeletePrefix(ctx, j.key(j.id)+"/"); err != nil {
		return err
	}
	b, err := json.Marshal(JournalPlan{ID: j.id, Plan: plan, Spec: spec, Started: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := j.w.Put(ctx, j.key(j.id, "plan"), b); err != nil {
		return err
	}
	return j.w.Put(ctx, state.KeysOf(j.w).OpenPlan(j.cluster), []byte(j.id))
}

// fingerprint is the hash of a change, as the journal keeps it.
func fingerprint(c diff.Change) string {
	b, _ := json.Marshal(c)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// done lists the steps the journal says are done, with their fingerprints.
func (j *journal) done(ctx context.Context) (map[string]string, error) {
	prefix := j.key(j.id) + "/"
	raw, err := j.w.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range raw {
		var e journalEntry
		if strings.HasSuffix(k, "/plan") || json.Unmarshal(v, &e) != nil {
			continue
		}
		if e.State == StepDone {
			out[strings.TrimPrefix(k, prefix)] = e.Fingerprint
		}
	}
	return out, nil
}

// JournaledSteps are the steps of plan, one cluster's, as its journal
// has them, in the plan's order: the whole record of an apply that one
// applier began and another finished (it died, or its lease lapsed), each
// step as the one that ran it left it. A change the journal has no step
// of (none ran, or the journal was pruned) is left out.
func (a *Applier) JournaledSteps(ctx context.Context, cluster string, plan *diff.Plan) ([]Step, error) {
	kv := a.Planner.Store
	part := plan.Of(cluster)
	prefix := state.KeysOf(kv).Journal(cluster, planID(part)) + "/"
	raw, err := kv.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", cluster, err)
	}
	var out []Step
	for _, c := range slices.Concat(part.Changes, part.Drift) {
		v, ok := raw[prefix+c.ID]
		var e journalEntry
		if !ok || json.Unmarshal(v, &e) != nil || e.Fingerprint != fingerprint(c) {
			continue
		}
		s := Step{Change: c, State: e.State, Duration: time.Duration(e.Seconds * float64(time.Second))}
		if e.Error != "" {
			s.Err = errors.New(e.Error)
		}
		out = append(out, s)
	}
	return out, nil
}

// step writes a step's state; took is how long it ran, once it ended.
func (j *journal) step(ctx context.Context, c diff.Change, st StepState, stepErr error, took time.Duration) error {
	e := journalEntry{Plan: j.id, Commit: j.commit, Address: c.Address, Action: c.Action.String(), State: st,
		Fingerprint: fingerprint(c), At: time.Now().UTC(), Seconds: took.Round(time.Millisecond).Seconds()}
	if stepErr != nil {
		e.Error = stepErr.Error()
	}
	b, _ := json.Marshal(e)
	if err := j.w.Put(ctx, j.key(j.id, c.ID), b); err != nil {
		return err
	}
	return j.hook(string(st) + " " + c.Address.String())
}

func (j *journal) hook(what string) error {
	if j.point == nil {
		return nil
	}
	return j.point(what)
}

// close ends the journal with result and prunes the oldest ones.
func (j *journal) close(ctx context.Context, result string) error {
	jp, err := readJournalPlan(ctx, j.w, j.cluster, j.id)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	jp.Ended, jp.Result = &now, result
	b, _ := json.Marshal(jp)
	if err := j.w.Put(ctx, j.key(j.id, "plan"), b); err != nil {
		return err
	}
	if err := j.w.Delete(ctx, state.KeysOf(j.w).OpenPlan(j.cluster)); err != nil {
		return err
	}
	return j.prune(ctx)
}

// prune drops all but the newest journalKeep ended journals.
func (j *journal) prune(ctx context.Context) error {
	prefix := j.key() + "/"
	raw, err := j.w.List(ctx, prefix)
	if err != nil {
		return err
	}
	var ended []JournalPlan
	for k, v := range raw {
		var jp JournalPlan
		if strings.HasSuffix(k, "/plan") && json.Unmarshal(v, &jp) == nil && jp.Ended != nil {
			ended = append(ended, jp)
		}
	}
	slices.SortFunc(ended, func(a, b JournalPlan) int { return cmp.Compare(b.Started.UnixNano(), a.Started.UnixNano()) })
	for _, jp := range ended[min(journalKeep, len(ended)):] {
		if err := j.w.DeletePrefix(ctx, prefix+jp.ID+"/"); err != nil {
			return err
		}
	}
	return nil
}

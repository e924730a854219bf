package report

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"opke.dev/opke/diff"
	"opke.dev/opke/schemas"
)

// State is a commit's or a cluster's state, as forges name them.
type State string

// The states.
const (
	// Pending: OPKE is working on it.
	Pending State = "pending"
	// Success: applied (or, for a pull request, planned).
	Success State = "success"
	// Failure: the spec is invalid, unsigned, or a step failed.
	Failure State = "failure"
	// Error: OPKE could not do its part (the cloud or the store failed).
	Error State = "error"
)

// rank orders states by how much they say: one cluster's failure is the
// commit's.
func (s State) rank() int {
	return map[State]int{Success: 0, Pending: 1, Failure: 2, Error: 3}[s]
}

// Note is OPKE's report on a commit, the JSON of its git note.
type Note struct {
	Commit string `json:"commit"`
	// Ref is the branch or pull request ref the commit was seen on.
	Ref   string `json:"ref"`
	State State  `json:"state"`
	// Applied is false for a pull request's plan, which is never applied.
	Applied  bool                `json:"applied"`
	Clusters map[string]*Cluster `json:"clusters"`
	// Findings are the fleet's problems: an invalid spec fails its
	// cluster, and a problem of no cluster fails the commit.
	Findings []schemas.Finding `json:"findings,omitempty"`
	// Message is what happened to the commit as a whole, if anything
	// did (an unsigned commit, an unreadable fleet).
	Message string `json:"message,omitempty"`
	// Notice is what the commit policy says of a commit it let through
	// (a history rewrite the operator allowed); it fails nothing.
	Notice string `json:"notice,omitempty"`
}

// Cluster is what OPKE did for one cluster at a commit.
type Cluster struct {
	State   State  `json:"state"`
	Summary string `json:"summary"`
	// Plan is the cluster's plan, in its JSON form.
	Plan *diff.Plan `json:"plan,omitempty"`
	// Steps are the applied steps' results.
	Steps    []Step    `json:"steps,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// Drift is the last drift check that found changes made outside OPKE
	// since the commit was applied: its plan and its correction. The
	// cluster's State and Summary are then the correction's.
	Drift *Cluster `json:"drift,omitempty"`
}

// Step is one applied change's result.
type Step struct {
	ID      string      `json:"id"`
	Address string      `json:"address"`
	Action  diff.Action `json:"action"`
	State   string      `json:"state"`
	Error   string      `json:"error,omitempty"`
	Seconds float64     `json:"seconds"`
}

// Overall is the commit's state from its clusters': the worst of them,
// Failure when the fleet itself has an error finding.
func (n *Note) Overall() State {
	st := Success
	for _, c := range n.Clusters {
		if c.State.rank() > st.rank() {
			st = c.State
		}
	}
	if len(n.FleetErrors()) > 0 && st.rank() < Failure.rank() {
		st = Failure
	}
	if n.Message != "" && st.rank() < Failure.rank() {
		st = Failure
	}
	return st
}

// FleetErrors are the error findings of no cluster: the fleet's own
// (they fail the whole commit).
func (n *Note) FleetErrors() []schemas.Finding {
	var out []schemas.Finding
	for _, f := range n.Findings {
		if f.Severity == schemas.SeverityError && ClusterOf(f.File) == "" {
			out = append(out, f)
		}
	}
	return out
}

// Pending returns the cluster's entry if the note is ref's and the
// cluster's work on it was under way; nil otherwise (and for a nil note).
func (n *Note) Pending(cluster, ref string) *Cluster {
	if n == nil || n.Ref != ref {
		return nil
	}
	if c := n.Clusters[cluster]; c != nil && c.State == Pending && c.Plan != nil {
		return c
	}
	return nil
}

// ClusterOf names the cluster of a spec file (clusters/<name>/...), ""
// for another file.
func ClusterOf(file string) string {
	parts := strings.Split(file, "/")
	if i := slices.Index(parts, schemas.ClustersDir); i >= 0 && i+1 < len(parts) {
		return parts[i+1]
	}
	return ""
}

// PlanSummary sums a plan up the way a status description can carry it.
func PlanSummary(p *diff.Plan) string {
	if p == nil || p.Empty() {
		return "no changes"
	}
	counts := map[diff.Action]int{}
	for _, c := range slices.Concat(p.Changes, p.Drift) {
		counts[c.Action]++
	}
	var parts []string
	for _, a := range diff.Actions() {
		if counts[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[a], a))
		}
	}
	s := strings.Join(parts, ", ")
	if len(p.Drift) > 0 {
		s += fmt.Sprintf(" (%d drift)", len(p.Drift))
	}
	return s
}

// Reporter publishes notes. Report is called with each new state of a
// commit's note; it must not keep n.
type Reporter interface {
	Report(ctx context.Context, n *Note) error
}

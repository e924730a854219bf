package diff

import (
	"errors"
	"slices"
)

// FormatVersion is the version of the plan's JSON form. A reader refuses
// a major version it does not know.
const FormatVersion = "1.0"

var errUnknownAction = errors.New("unknown action")

// Phase is when a change runs: the infrastructure first, then the hosts.
type Phase string

// The phases.
const (
	PhaseInfrastructure Phase = "infrastructure"
	PhaseHosts          Phase = "hosts"
)

// Unknown and Sensitive are how values print when they are not shown.
const (
	unknownText   = "(known after apply)"
	sensitiveText = "(sensitive)"
)

// Value is an attribute's value in a change: known, unknown until apply,
// or sensitive (its content is never in the plan).
type Value struct {
	Value     string `json:"value,omitempty"`
	Unknown   bool   `json:"unknown,omitempty"`
	Sensitive bool   `json:"sensitive,omitempty"`
}

// Known is a known, shown value.
func Known(v string) Value { return Value{Value: v} }

// String is the value as people read it.
func (v Value) String() string {
	switch {
	case v.Unknown:
		return unknownText
	case v.Sensitive:
		return sensitiveText
	}
	return v.Value
}

// Attrs are the compared attributes of a resource or file.
type Attrs map[string]Value

// Change is one step of a plan.
type Change struct {
	ID        string   `json:"id"`
	DependsOn []string `json:"depends_on"`
	Cluster   string   `json:"cluster"`
	Phase     Phase    `json:"phase"`
	Address   Address  `json:"address"`
	Action    Action   `json:"action"`
	Before    Attrs    `json:"before,omitempty"`
	After     Attrs    `json:"after,omitempty"`
	// Reason is for people; nothing acts on it.
	Reason string `json:"reason"`
}

// Warning is something people must know that the plan does not act on.
type Warning struct {
	Cluster string `json:"cluster"`
	Message string `json:"message"`
}

// Plan is what to do to bring the fleet to its specs.
type Plan struct {
	FormatVersion string `json:"format_version"`
	// Commit is the fleet's commit the plan was made from, and
	// StateRevision the state store's revision it read: applying a saved
	// plan is refused once either has moved on.
	Commit        string    `json:"commit,omitempty"`
	StateRevision int64     `json:"state_revision,omitempty"`
	Changes       []Change  `json:"changes"`
	Drift         []Change  `json:"drift"`
	Warnings      []Warning `json:"warnings,omitempty"`
}

// Of is cluster's part of the plan: its changes, drift and warnings.
func (p *Plan) Of(cluster string) *Plan {
	other := func(c Change) bool { return c.Cluster != cluster }
	return &Plan{
		FormatVersion: p.FormatVersion,
		Commit:        p.Commit,
		StateRevision: p.StateRevision,
		Changes:       slices.DeleteFunc(slices.Clone(p.Changes), other),
		Drift:         slices.DeleteFunc(slices.Clone(p.Drift), other),
		Warnings:      slices.DeleteFunc(slices.Clone(p.Warnings), func(w Warning) bool { return w.Cluster != cluster }),
	}
}

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool { return len(p.Changes) == 0 && len(p.Drift) == 0 }

// Counts returns how many changes and drift corrections each action has.
func (p *Plan) Counts() map[Action]int {
	n := map[Action]int{}
	for _, c := range p.Changes {
		n[c.Action]++
	}
	for _, c := range p.Drift {
		n[c.Action]++
	}
	return n
}

package diff

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// ErrFormat is a plan file this version cannot read.
var ErrFormat = errors.New("plan format")

// symbols are the view's marks for the actions.
var symbols = map[Action]string{
	ActionCreate:  "+",
	ActionUpdate:  "~",
	ActionReplace: "-/+",
	ActionDelete:  "-",
	ActionUpload:  "↑",
	ActionRestart: "↻",
	ActionBackup:  "◎",
	ActionForget:  "×",
	ActionDrain:   "⇣",
	ActionCheck:   "✓",
	ActionApply:   "⇒",
}

// Symbol is the action's mark in the plan's view: + ~ -/+ - ↑ ↻ ◎ × ⇣ ✓ ⇒.
func (a Action) Symbol() string { return symbols[a] }

// Read parses a plan's JSON form, refusing another major format version.
func Read(data []byte) (*Plan, error) {
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	major, _, _ := strings.Cut(p.FormatVersion, ".")
	if want, _, _ := strings.Cut(FormatVersion, "."); major != want {
		return nil, fmt.Errorf("%w: version %q, this opke reads %s.x", ErrFormat, p.FormatVersion, want)
	}
	// A change names what it does to what (a change of neither, found by
	// fuzzing, was read and could not be written back).
	for i, c := range slices.Concat(p.Changes, p.Drift) {
		if c.Address.IsZero() || c.Action < ActionCreate || c.Action > allActions[len(allActions)-1] {
			return nil, fmt.Errorf("%w: change %d has no address or no action", ErrFormat, i)
		}
	}
	return &p, nil
}

// Text prints the human view of a plan from its JSON form: one line per
// change sorted by address, drift in a section of its own, a legend of the
// symbols used, and a line counting every action.
func Text(w io.Writer, data []byte) error {
	p, err := Read(data)
	if err != nil {
		return err
	}
	var b strings.Builder
	if p.Empty() {
		b.WriteString("No changes.")
		if len(p.Warnings) == 0 {
			b.WriteString(" The fleet matches its specs.\n")
		} else {
			b.WriteString("\n")
		}
		writeWarnings(&b, p.Warnings)
		_, err := io.WriteString(w, b.String())
		return err
	}
	counts := p.Counts()
	var legend []string
	for _, a := range allActions {
		if counts[a] > 0 {
			legend = append(legend, symbols[a]+" "+a.String())
		}
	}
	fmt.Fprintf(&b, "Legend: %s\n", strings.Join(legend, ", "))
	section := func(title string, cs []Change) {
		if len(cs) == 0 {
			return
		}
		cs = slices.Clone(cs)
		slices.SortFunc(cs, func(x, y Change) int {
			return cmp.Or(x.Address.Compare(y.Address), cmp.Compare(x.Action, y.Action))
		})
		width := 0
		for _, c := range cs {
			width = max(width, len(symbols[c.Action])+1+len(c.Address.String())+len(marker(c)))
		}
		fmt.Fprintf(&b, "\n%s\n", title)
		for _, c := range cs {
			head := symbols[c.Action] + " " + c.Address.String() + marker(c)
			fmt.Fprintf(&b, "  %-*s  # %s\n", width, head, c.Reason)
		}
	}
	section("Changes:", p.Changes)
	section("Drift (changed outside OPKE since the last apply; this plan corrects it):", p.Drift)
	writeWarnings(&b, p.Warnings)
	// A manifest's deletion prunes objects in the cluster: counted apart
	// from the cloud's resources a plan deletes.
	// So are a host's reboot (a restart of the machine) and a Node's
	// uncordon (an update of an object in the cluster).
	prunes, reboots, uncordons := 0, 0, 0
	for _, c := range slices.Concat(p.Changes, p.Drift) {
		switch {
		case c.Action == ActionDelete && c.Address.Target == TargetManifest:
			prunes++
		case c.Action == ActionRestart && c.Address.Target == TargetReboot:
			reboots++
		case c.Action == ActionUpdate && c.Address.Target == TargetNode:
			uncordons++
		}
	}
	fmt.Fprintf(&b, "\nPlan: %d to create, %d to update, ", counts[ActionCreate], counts[ActionUpdate]-uncordons)
	if n := counts[ActionReplace]; n > 0 {
		fmt.Fprintf(&b, "%d to replace, ", n)
	}
	fmt.Fprintf(&b, "%d to delete, %d uploads, %d restarts", counts[ActionDelete]-prunes, counts[ActionUpload], counts[ActionRestart]-reboots)
	if reboots > 0 {
		fmt.Fprintf(&b, ", %d reboots", reboots)
	}
	if uncordons > 0 {
		fmt.Fprintf(&b, ", %d uncordons", uncordons)
	}
	if n := counts[ActionBackup]; n > 0 {
		fmt.Fprintf(&b, ", %d backups", n)
	}
	if n := counts[ActionForget]; n > 0 {
		fmt.Fprintf(&b, ", %d to forget", n)
	}
	if n := counts[ActionDrain]; n > 0 {
		fmt.Fprintf(&b, ", %d drains", n)
	}
	if n := counts[ActionCheck]; n > 0 {
		fmt.Fprintf(&b, ", %d health gates", n)
	}
	if n := counts[ActionApply]; n > 0 {
		fmt.Fprintf(&b, ", %d manifests to apply", n)
	}
	if prunes > 0 {
		fmt.Fprintf(&b, ", %d manifests to prune", prunes)
	}
	b.WriteString(".\n")
	_, err = io.WriteString(w, b.String())
	return err
}

// marker shows an upload whose content is not shown: unknown or sensitive.
func marker(c Change) string {
	if v, ok := c.After["sha256"]; ok && (v.Unknown || v.Sensitive) {
		return " " + v.String()
	}
	return ""
}

func writeWarnings(b *strings.Builder, ws []Warning) {
	if len(ws) == 0 {
		return
	}
	b.WriteString("\nWarnings:\n")
	for _, w := range ws {
		fmt.Fprintf(b, "  ! %s: %s\n", w.Cluster, w.Message)
	}
}

package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// maxTextFindings and maxTextFailures bound the lines a text gives to a
// fleet's findings and to a cluster's failed steps; the record has all.
const (
	maxTextFindings = 10
	maxTextFailures = 3
)

// Text is the note as a person reads it in `git log --notes=opke`: what
// happened to the commit, in words that say whether anything was applied,
// then a line per cluster (its state, what OPKE did or found, when and
// how long), the failed steps and the findings with their reasons, and
// where the full record is. It is a function of the note only.
func Text(n *Note) string {
	var b strings.Builder
	fmt.Fprintf(&b, "OPKE: %s\n", headline(n))
	if n.Message != "" {
		fmt.Fprintf(&b, "%s\n", n.Message)
	}
	if n.Notice != "" {
		fmt.Fprintf(&b, "Notice: %s\n", n.Notice)
	}
	names := slices.Sorted(maps.Keys(n.Clusters))
	width := 0
	for _, name := range names {
		width = max(width, len(name))
	}
	if len(names) > 0 {
		b.WriteString("\n")
	}
	for _, name := range names {
		c := n.Clusters[name]
		summary, last := c.Summary, c
		if c.Drift != nil {
			// The entry's state and summary are then the drift check's.
			summary, last = "after the commit, a drift check: "+summary, c.Drift
		}
		fmt.Fprintf(&b, "  %-*s  %-7s  %s%s\n", width, name, c.State, summary, when(last))
		failed := 0
		for _, s := range last.Steps {
			if s.Error == "" {
				continue
			}
			if failed++; failed <= maxTextFailures {
				fmt.Fprintf(&b, "  %*s  %-7s  step %s (%s): %s\n", width, "", "", s.Address, s.Action, s.Error)
			}
		}
		if failed > maxTextFailures {
			fmt.Fprintf(&b, "  %*s  %-7s  and %d more failed steps\n", width, "", "", failed-maxTextFailures)
		}
	}
	if len(n.Findings) > 0 {
		fmt.Fprintf(&b, "\nFindings:\n")
		for i, f := range n.Findings {
			if i == maxTextFindings {
				fmt.Fprintf(&b, "  and %d more\n", len(n.Findings)-maxTextFindings)
				break
			}
			fmt.Fprintf(&b, "  %s\n", f)
		}
	}
	fmt.Fprintf(&b, "\nThe full record (plans, steps, times): git notes --ref=%s show %s\n", strings.TrimPrefix(RecordRef, "refs/notes/"), shortCommit(n.Commit))
	return b.String()
}

// headline says what happened to the commit as a whole.
func headline(n *Note) string {
	counts := map[State]int{}
	for _, c := range n.Clusters {
		counts[c.State]++
	}
	clusters := fmt.Sprintf("%d cluster", len(n.Clusters))
	if len(n.Clusters) != 1 {
		clusters += "s"
	}
	var parts []string
	for _, st := range []State{Success, Pending, Failure, Error} {
		if counts[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
		}
	}
	tally := clusters
	if len(parts) > 0 {
		tally += ": " + strings.Join(parts, ", ")
	}
	state := n.State
	if state == "" {
		state = n.Overall()
	}
	commit := shortCommit(n.Commit)
	if !n.Applied {
		what := fmt.Sprintf("%s, the head of pull request %s,", commit, n.Ref)
		switch state {
		case Pending:
			return fmt.Sprintf("%s being planned (a pull request is never applied); %s", what, tally)
		case Success:
			return fmt.Sprintf("%s planned (a pull request is never applied); %s", what, tally)
		}
		return fmt.Sprintf("%s not planned in full (a pull request is never applied); %s", what, tally)
	}
	what := fmt.Sprintf("%s of %s", commit, strings.TrimPrefix(n.Ref, "refs/heads/"))
	switch state {
	case Pending:
		return fmt.Sprintf("%s being applied; %s", what, tally)
	case Success:
		return fmt.Sprintf("%s applied; %s", what, tally)
	case Error:
		return fmt.Sprintf("%s not finished: OPKE or the cloud failed, not the spec (tried again); %s", what, tally)
	}
	if n.Message != "" || len(n.FleetErrors()) > 0 {
		return fmt.Sprintf("%s refused: nothing of it applied; %s", what, tally)
	}
	return fmt.Sprintf("%s applied in part: a cluster that failed is not as its spec says; %s", what, tally)
}

// shortCommit is a commit's first 12 digits, as the pages show it.
func shortCommit(commit string) string { return commit[:min(len(commit), 12)] }

// when is a cluster entry's time: when it finished and how long it took.
func when(c *Cluster) string {
	switch {
	case !c.Finished.IsZero() && !c.Started.IsZero():
		return fmt.Sprintf(" (%s, took %s)", c.Finished.UTC().Format("2006-01-02 15:04:05 MST"), c.Finished.Sub(c.Started).Round(100*time.Millisecond))
	case !c.Started.IsZero():
		return fmt.Sprintf(" (since %s)", c.Started.UTC().Format("2006-01-02 15:04:05 MST"))
	}
	return ""
}

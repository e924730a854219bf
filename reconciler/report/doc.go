// Package report tells people what OPKE made of a commit. A [Note] is the
// report on one commit: its state, and per cluster the plan, the result
// of each step and timings, or the findings of an invalid spec. Reporters
// publish it: [Notes] as a git note under refs/notes/opke pushed to the
// fleet's remote (the audit trail, `git log --notes=opke`), [Forge] as
// commit statuses on GitHub, Gitea or GitLab, one context per cluster
// (opke/<cluster>), each posted once per state and description.
//
//	n := &report.Note{Commit: c, Ref: "refs/heads/main", Clusters: map[string]*report.Cluster{...}}
//	n.State = n.Overall()
//	err := reporter.Report(ctx, n)
package report

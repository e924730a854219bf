package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/state"
)

func (a *app) applyCommand() *cobra.Command {
	var st stateFlags
	var cf cloudFlags
	var repo, cluster string
	var autoApprove, force bool
	var parallel int
	cmd := &cobra.Command{
		Use:   "apply [--repo DIR] [--cluster NAME] [--auto-approve] [FILE]",
		Short: "Bring the clouds in line with the fleet",
		Long: `Apply the fleet under --repo: first finish any apply that was interrupted (its
journal is in the state store), then plan, show the plan and, once you
answer yes (or with --auto-approve), apply it: each cluster under its
lease, the infrastructure first, then the hosts' files and restarts
through the cluster's gateway. Every step is journaled before and after
it runs; a failed step stops the steps that depend on it. Ctrl-C stops
gracefully: the running steps finish and the journal is closed.

With FILE, a plan saved by opke plan --out is applied as it is, with no
question: it is refused when the repository's commit or a cluster's state
moved since it was made. Plan again then.

The exit code is 0 when every step is done, 1 otherwise.`,
		Example: `  opke apply --sim-state .opke/sim
  opke apply --cluster prod --auto-approve --cloud-config clouds.yaml --encryption-key-file key
  opke plan --out prod.plan && opke apply prod.plan`,
		Args: argsAtMost(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var saved *diff.Plan
			if len(args) == 1 {
				if cluster != "" {
					return usagef("--cluster and a plan file exclude each other: the plan says which clusters it changes")
				}
				data, err := os.ReadFile(args[0])
				if err != nil {
					return usageError{err}
				}
				if saved, err = diff.Read(data); err != nil {
					return usagef("%s: %w", args[0], err)
				}
			}
			w, err := a.openWorld(cmd, &st, &cf, repo, "", cluster, "nothing applied")
			if err != nil {
				return err
			}
			defer w.Close()
			if id, err := w.store.Leader(ctx); err == nil && !force {
				return fmt.Errorf("a daemon (%s) leads on this state and applies the fleet itself: commit to its repository instead, or stop it (--force applies anyway, racing it cluster by cluster under the same leases)", id)
			} else if err != nil && !errors.Is(err, state.ErrNoLeader) {
				return err
			}
			p := &progress{out: a.stdout}
			applier := &reconciler.Applier{Planner: w.planner, Hosts: w.hosts, Logger: a.logger, Parallel: parallel,
				Progress: p.step, Waiting: func(c string) {
					fmt.Fprintf(a.stderr, "Waiting for the lease of %s: another opke is applying it.\n", c)
				}}
			req := reconciler.Request{Clusters: w.fleet.Clusters(), Only: cluster, Commit: w.commit}
			plan := saved
			if saved != nil {
				if saved.Commit != w.commit {
					return fmt.Errorf("%s was made at commit %s, the fleet is at %s: plan again", args[0], short(saved.Commit), short(w.commit))
				}
				if err := applier.Check(ctx, saved); err != nil {
					return fmt.Errorf("%s: %w: plan again", args[0], err)
				}
			} else {
				resumed, err := applier.Resume(ctx)
				if len(resumed.Resumed) > 0 {
					fmt.Fprintf(a.stdout, "Resumed the interrupted apply of %s.\n", strings.Join(resumed.Resumed, ", "))
					a.summary(resumed)
				}
				if err != nil {
					return fmt.Errorf("resume: %w", err)
				}
				res, err := w.planner.Plan(ctx, req)
				if err != nil {
					return err
				}
				if cluster != "" && len(res.Clusters) == 0 {
					return usagef("cluster %q is not in the fleet, the state store or the clouds", cluster)
				}
				plan = res.Plan
				data, err := json.Marshal(plan)
				if err != nil {
					return err
				}
				if err := diff.Text(a.stdout, data); err != nil {
					return err
				}
				if plan.Empty() {
					return nil
				}
				if !autoApprove && !a.confirm() {
					fmt.Fprintln(a.stdout, "Apply cancelled.")
					return exitCodeError{exitFailure}
				}
			}
			if plan.Empty() {
				fmt.Fprintln(a.stdout, "No changes. The fleet matches its specs.")
				return nil
			}
			fmt.Fprintln(a.stdout)
			sum, err := applier.Apply(ctx, req, plan)
			a.summary(sum)
			if err != nil && !errors.Is(err, reconciler.ErrFailed) {
				return err
			}
			if err != nil {
				return exitCodeError{exitFailure}
			}
			return nil
		},
	}
	st.register(cmd)
	cf.register(cmd)
	fl := cmd.Flags()
	repoFlag(fl, &repo)
	fl.StringVar(&cluster, "cluster", "", "apply this cluster only")
	fl.BoolVar(&autoApprove, "auto-approve", false, "apply without asking")
	fl.BoolVar(&force, "force", false, "apply even while an opke serve daemon leads on this state")
	fl.IntVar(&parallel, "parallel", 8, "steps run at once, where the plan's dependencies allow")
	return cmd
}

// confirm asks on stdin whether to apply; only "yes" is.
func (a *app) confirm() bool {
	fmt.Fprint(a.stdout, "\nApply this plan? Only 'yes' is accepted: ")
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	fmt.Fprintln(a.stdout)
	return strings.TrimSpace(line) == "yes"
}

// progress prints each step as it ends.
type progress struct {
	mu  sync.Mutex
	out io.Writer
	n   int
}

func (p *progress) step(_ context.Context, s reconciler.Step) {
	if s.State == reconciler.StepStarted {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.State == reconciler.StepRetrying {
		// Not a step's end: the same step goes on.
		fmt.Fprintf(p.out, "     %-3s %s: retrying after: %v\n", s.Change.Action.Symbol(), s.Change.Address, s.Err)
		return
	}
	p.n++
	line := fmt.Sprintf("%4d %-3s %s: %s", p.n, s.Change.Action.Symbol(), s.Change.Address, s.State)
	if s.Duration > 0 {
		line += fmt.Sprintf(" (%s)", s.Duration.Round(10*time.Millisecond))
	}
	if s.Err != nil {
		line += ": " + s.Err.Error()
	}
	fmt.Fprintln(p.out, line)
}

// summary prints what an apply did.
func (a *app) summary(sum *reconciler.Summary) {
	if sum == nil {
		return
	}
	c := sum.Counts
	verdict := "Apply complete"
	switch {
	case c[reconciler.StepFailed] > 0 || c[reconciler.StepSkipped] > 0:
		verdict = "Apply failed"
	case c[reconciler.StepPending] > 0:
		verdict = "Apply interrupted"
	}
	fmt.Fprintf(a.stdout, "\n%s: %d done, %d failed, %d skipped, %d not started, in %s.\n", verdict,
		c[reconciler.StepDone], c[reconciler.StepFailed], c[reconciler.StepSkipped], c[reconciler.StepPending], sum.Duration.Round(100*time.Millisecond))
	for _, f := range sum.Failed {
		if f.State == reconciler.StepFailed {
			fmt.Fprintf(a.stdout, "  %s %s: %v\n", f.Change.Action, f.Change.Address, f.Err)
		}
	}
}

// short is a commit's short form.
func short(commit string) string {
	if commit == "" {
		return "(none: not a git repository)"
	}
	return commit[:min(12, len(commit))]
}

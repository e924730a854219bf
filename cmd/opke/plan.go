package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/spf13/cobra"

	"opke.dev/opke/diff"
	"opke.dev/opke/internal/atomicfile"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// exitChanges is --detailed-exitcode's code for a plan with changes.
const exitChanges = 2

func (a *app) planCommand() *cobra.Command {
	var st stateFlags
	var cf cloudFlags
	var repo, rev, cluster, output, out string
	var detailed, resync bool
	cmd := &cobra.Command{
		Use:   "plan [--repo DIR] [--cluster NAME]",
		Short: "Show what it takes to bring the clouds in line with the fleet",
		Long: `Plan the fleet under --repo: render each cluster, list what OPKE owns in each
cloud (by its tags, each resource type once per cloud), read what was last
applied from the state store, and print the changes: infrastructure first,
then the hosts' files and restarts, with drift (what changed outside OPKE)
in a section of its own. Nothing is created, issued or written: keys and
certificates a new cluster needs are issued at apply, so what carries them
is "(known after apply)".

The hosts are trusted to hold what was last pushed to them; --resync reads
them instead (one sha256sum per host over SSH, through the cluster's
gateway) and plans what changed on them as drift.

--out saves the plan (JSON, with the commit and the state revision it was
made from) for opke apply, which refuses it once either has moved on.
With --detailed-exitcode the exit code is 0 for no changes, 2 for changes,
1 for an error.`,
		Example: `  opke plan --sim-state .opke/sim
  opke plan --repo fleet/ --rev origin/pr-42 --cloud-config clouds.yaml --encryption-key-file key --output json
  opke plan --cluster prod --out prod.plan --detailed-exitcode`,
		Args: argsAtMost(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output); err != nil {
				return err
			}
			w, err := a.openWorld(cmd, &st, &cf, repo, rev, cluster, "nothing planned")
			if err != nil {
				return err
			}
			defer w.Close()
			res, err := w.planner.Plan(cmd.Context(), reconciler.Request{Clusters: w.fleet.Clusters(), Only: cluster, Resync: resync, Commit: w.commit})
			if err != nil {
				return err
			}
			if cluster != "" && len(res.Clusters) == 0 {
				return usagef("cluster %q is not in the fleet, the state store or the clouds", cluster)
			}
			data, err := json.MarshalIndent(res.Plan, "", "  ")
			if err != nil {
				return err
			}
			data = append(data, '\n')
			if out != "" {
				if err := atomicfile.Write(out, data, 0o644); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
			}
			if output == "json" {
				_, err = a.stdout.Write(data)
			} else {
				err = diff.Text(a.stdout, data)
			}
			if err != nil {
				return err
			}
			if out != "" {
				msg := fmt.Sprintf("\nSaved the plan to %s; opke apply %s applies exactly it, while the fleet and the state stay as planned.\n", out, out)
				if output == "json" {
					fmt.Fprint(a.stderr, msg[1:])
				} else {
					fmt.Fprint(a.stdout, msg)
				}
			}
			if detailed && !res.Plan.Empty() {
				return exitCodeError{exitChanges}
			}
			return nil
		},
	}
	st.register(cmd)
	cf.register(cmd)
	fl := cmd.Flags()
	repoFlag(fl, &repo)
	fl.StringVar(&rev, "rev", "", "plan the fleet at this git revision (a pull request's branch) instead of the work tree")
	fl.StringVar(&cluster, "cluster", "", "plan this cluster only")
	fl.StringVar(&output, "output", "text", "text or json")
	fl.StringVar(&out, "out", "", "save the plan (JSON) to this file, for opke apply")
	fl.BoolVar(&detailed, "detailed-exitcode", false, "exit 0 for no changes, 2 for changes, 1 for an error")
	fl.BoolVar(&resync, "resync", false, "read the files on the hosts over SSH instead of trusting the state store")
	return cmd
}

// world is what plan and apply work on: the fleet at a commit, the state
// store, the clouds and the hosts.
type world struct {
	fleet   *schemas.Fleet
	commit  string
	store   *state.Store
	hosts   *reconciler.HostSessions
	planner *reconciler.Planner
}

// openWorld checks the flags, loads the fleet (refusing one with errors:
// planning without an invalid cluster would plan its deletion) and opens
// the state store and the clouds.
func (a *app) openWorld(cmd *cobra.Command, st *stateFlags, cf *cloudFlags, repo, rev, cluster, consequence string) (*world, error) {
	clouds, err := cf.resolve(st.dataDir)
	if err != nil {
		return nil, err
	}
	if clouds.fromDaemon {
		a.logger.Info("the clouds of the daemon running on the data dir", "data_dir", st.dataDir)
	}
	repo, rev = a.daemonFleet(cmd, st.dataDir, repo, rev)
	if !clouds.simulator && st.encryptionKey == "" {
		return nil, usagef("--encryption-key-file is required unless the cloud is the simulator (--sim-state)")
	}
	fleet, err := a.loadFleet(cmd, repo, rev)
	if err != nil {
		return nil, err
	}
	if err := a.refuseFindings(fleet, cluster, consequence); err != nil {
		return nil, err
	}
	commit, err := source.ResolveCommit(cmd.Context(), repo, cmp.Or(rev, "HEAD"))
	if err != nil && !errors.Is(err, source.ErrNoRepository) {
		return nil, fmt.Errorf("commit of %s: %w", repo, err)
	}
	store, err := st.open(cmd.Context(), a)
	if err != nil {
		return nil, err
	}
	hosts := &reconciler.HostSessions{Dialer: clouds.dialer}
	planner := &reconciler.Planner{Store: store, Clouds: clouds.pool, Hosts: hosts, Health: hosts, Logger: a.logger}
	return &world{fleet: fleet, commit: commit, store: store, hosts: hosts, planner: planner}, nil
}

// daemonFleet is the fleet plan and apply work on. Given neither --repo
// nor --rev on the data dir of a running daemon, it is the fleet the
// daemon tracks, at its branch's head as the daemon last fetched it: the
// folder the command runs in may be another fleet, whose plan would undo
// what the daemon applied. Given --repo, a daemon tracking another
// repository is named loudly.
func (a *app) daemonFleet(cmd *cobra.Command, dataDir, repo, rev string) (string, string) {
	ep, err := attach(dataDir)
	if err != nil || ep.Cache == "" {
		return repo, rev
	}
	if !cmd.Flags().Changed("repo") && rev == "" {
		fmt.Fprintf(a.stderr, "Working on the fleet the daemon on %s tracks: %s, branch %s, as it last fetched it (--repo DIR for another).\n", dataDir, ep.Repo, ep.Branch)
		return ep.Cache, plumbing.NewBranchReferenceName(ep.Branch).String()
	}
	if abs, err := filepath.Abs(repo); err != nil || abs != ep.Repo {
		fmt.Fprintf(a.stderr, "Warning: the daemon on %s tracks %s, not %s: what differs here, it undoes at its next commit or drift check.\n", dataDir, ep.Repo, repo)
	}
	return repo, rev
}

// Close closes the hosts' sessions and the store.
func (w *world) Close() {
	w.hosts.Close()
	w.store.Close()
}

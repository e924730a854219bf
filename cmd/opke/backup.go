package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"opke.dev/opke/backup"
	"opke.dev/opke/cloud"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// backupFlags select whose snapshots: a cluster's, or OPKE's own store's
// (which names its cloud: the store has no spec to say).
type backupFlags struct {
	st        stateFlags
	cf        cloudFlags
	cluster   string
	store     bool
	cloudName string
	region    string
	container string
	retain    int
}

func (f *backupFlags) register(cmd *cobra.Command) {
	f.st.register(cmd)
	f.cf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster", "", "the cluster whose etcd snapshots these are")
	fl.BoolVar(&f.store, "store", false, "OPKE's own state store's snapshots instead of a cluster's (needs --cloud)")
	fl.StringVar(&f.cloudName, "cloud", "", "with --store: the clouds.yaml entry whose Swift holds them")
	fl.StringVar(&f.region, "region", "", "with --store: the region of --cloud")
	fl.StringVar(&f.container, "container", schemas.DefaultBackupContainer, "with --store: the Swift container")
	fl.IntVar(&f.retain, "retain", schemas.DefaultBackupRetain, "with --store: snapshots kept")
}

// target is what the flags resolve to: the store, whose snapshots, where.
type target struct {
	store   *state.Store
	pool    *cloud.Pool
	res     *resolved
	name    string // the cluster, or reconciler.StoreBackups
	clients *cloud.Clients
	policy  reconciler.BackupPolicy
	open    func([]byte) ([]byte, error) // for sealed snapshots
}

func (t *target) Close() { _ = t.store.Close() }

// runE resolves the flags into a target for fn and closes it after.
func (f *backupFlags) runE(a *app, fn func(ctx context.Context, t *target) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		t, err := f.resolve(cmd.Context(), a)
		if err != nil {
			return err
		}
		defer t.Close()
		return fn(cmd.Context(), t)
	}
}

func (t *target) box() backup.Objects {
	return backup.Objects{Client: t.clients.ObjectStore, Container: t.policy.Container}
}

func (f *backupFlags) resolve(ctx context.Context, a *app) (*target, error) {
	switch {
	case f.store == (f.cluster != ""):
		return nil, usagef("name one of --cluster NAME and --store")
	case f.store && f.cloudName == "":
		return nil, usagef("--store needs --cloud: the clouds.yaml entry whose Swift keeps the store's snapshots")
	}
	res, err := f.cf.resolve(f.st.dataDir)
	if err != nil {
		return nil, err
	}
	store, err := f.st.open(ctx, a)
	if err != nil {
		return nil, err
	}
	t := &target{store: store, pool: res.pool, res: res}
	cloudName, region := f.cloudName, f.region
	if f.store {
		t.name, t.open = reconciler.StoreBackups, reconciler.OpenStoreSnapshot(store)
		t.policy = reconciler.BackupPolicy{Container: f.container, Retain: f.retain}
	} else {
		specs, err := reconciler.AppliedSpecs(ctx, store)
		if err != nil {
			store.Close()
			return nil, err
		}
		s := specs[f.cluster]
		if s == nil {
			store.Close()
			return nil, fmt.Errorf("cluster %s is not applied: the state store has no spec of it", f.cluster)
		}
		t.name, t.policy, t.open = f.cluster, reconciler.PolicyOf(s.Spec), reconciler.OpenClusterSnapshot(store, f.cluster)
		cloudName, region = s.Spec.Spec.Cloud, s.Spec.Spec.Region
	}
	if t.clients, err = res.pool.Clients(ctx, cloudName, region); err != nil {
		store.Close()
		return nil, err
	}
	return t, nil
}

func (a *app) backupCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup now|list|verify",
		Short: "Take, list and verify etcd snapshots",
		Long: `Snapshots of a cluster's etcd (taken through its gateway with the backup
client certificate) or of OPKE's own state store, both sealed with the
store's encryption key, kept in Swift as <container>/<cluster>/<time>-<revision>.db
with their sha256 and etcd's status in the object's metadata. The daemon
takes a cluster's on spec.backup's schedule and before every rollout.`,
		Example: `  opke backup now --cluster demo --sim-state .opke/sim
  opke backup list --cluster demo --sim-state .opke/sim
  opke backup verify --store --cloud prod --data-dir /var/lib/opke`,
		Args: argsAtMost(0),
	}
	cmd.AddCommand(a.backupNowCommand(), a.backupListCommand(), a.backupVerifyCommand())
	return cmd
}

func (a *app) backupNowCommand() *cobra.Command {
	var f backupFlags
	cmd := &cobra.Command{
		Use:   "now (--cluster NAME | --store --cloud NAME)",
		Short: "Take a snapshot now, store it and prune past retention",
		Example: `  opke backup now --cluster demo --sim-state .opke/sim
  opke backup now --store --cloud prod --data-dir /var/lib/opke`,
		Args: argsAtMost(0),
		RunE: f.runE(a, func(ctx context.Context, t *target) error {
			fmt.Fprintf(a.stderr, "Taking a snapshot of %s...\n", t.label())
			var rec *backup.Record
			var err error
			if f.store {
				rec, err = reconciler.BackupStore(ctx, t.store, t.clients, t.policy, backup.ReasonManual, time.Now())
			} else {
				hosts := &reconciler.HostSessions{Dialer: t.res.dialer}
				defer hosts.Close()
				p := &reconciler.Planner{Store: t.store, Clouds: t.pool, Logger: a.logger}
				rec, err = reconciler.BackupCluster(ctx, p, hosts, f.cluster, backup.ReasonManual)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Stored %s/%s: revision %d, %d keys, %s, sha256 %s.\n",
				rec.Container, rec.Object, rec.Revision, rec.Keys, backup.FormatSize(rec.Size), rec.SHA256)
			return nil
		}),
	}
	f.register(cmd)
	return cmd
}

func (t *target) label() string {
	if t.name == reconciler.StoreBackups {
		return "OPKE's state store"
	}
	return "cluster " + t.name + "'s etcd"
}

func (a *app) backupListCommand() *cobra.Command {
	var f backupFlags
	cmd := &cobra.Command{
		Use:     "list (--cluster NAME | --store --cloud NAME)",
		Short:   "List the snapshots Swift holds, oldest first, with their last drill",
		Example: `  opke backup list --cluster demo --sim-state .opke/sim`,
		Args:    argsAtMost(0),
		RunE: f.runE(a, func(ctx context.Context, t *target) error {
			listed, err := t.box().List(ctx, t.name)
			if err != nil {
				return err
			}
			if len(listed) == 0 {
				fmt.Fprintf(a.stdout, "No snapshot of %s in %s.\n", t.label(), t.policy.Container)
				return nil
			}
			recs, err := reconciler.Backups(ctx, t.store, t.name)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tREASON\tREVISION\tKEYS\tSIZE\tDRILL")
			for _, r := range listed {
				drill := "-"
				if stored, err := backup.Find(recs, r.ID); err == nil && stored.Drill != nil {
					drill = "failed: " + stored.Drill.Message
					if stored.Drill.Passed {
						drill = "passed " + stored.Drill.At.UTC().Format(time.RFC3339)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", r.ID, r.Reason, r.Revision, r.Keys, backup.FormatSize(r.Size), drill)
			}
			return tw.Flush()
		}),
	}
	f.register(cmd)
	return cmd
}

func (a *app) backupVerifyCommand() *cobra.Command {
	var f backupFlags
	var id string
	cmd := &cobra.Command{
		Use:   "verify (--cluster NAME | --store --cloud NAME) [--snapshot ID]",
		Short: "Check a snapshot end to end: sha256, etcd status, restore drill",
		Long: `Download a snapshot (default: the newest), check its sha256 against the
object's metadata and etcdutl's status against the record, then restore it
into a throwaway etcd on 127.0.0.1 and check its revision and key count.
The exit code is 1 when any check fails.`,
		Example: `  opke backup verify --cluster demo --sim-state .opke/sim
  opke backup verify --cluster prod --snapshot 20261121T020000.000Z-48213`,
		Args: argsAtMost(0),
		RunE: f.runE(a, func(ctx context.Context, t *target) error {
			rec, err := reconciler.VerifyBackup(ctx, t.store, t.box(), t.name, id, time.Now(), t.open)
			if errors.Is(err, backup.ErrCorrupt) {
				return fmt.Errorf("snapshot %s of %s FAILED verification: %w", rec.ID, t.label(), err)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Snapshot %s of %s verified: sha256 matches, status revision %d hash %d, drill: %s.\n",
				rec.ID, t.label(), rec.Revision, rec.Hash, rec.Drill.Message)
			return nil
		}),
	}
	f.register(cmd)
	cmd.Flags().StringVar(&id, "snapshot", "", "the snapshot's ID (default: the newest)")
	return cmd
}

func (a *app) restoreCommand() *cobra.Command {
	var f backupFlags
	var id, to string
	cmd := &cobra.Command{
		Use:   "restore (--cluster NAME | --store --cloud NAME) --snapshot ID --to DIR",
		Short: "Write an etcd data dir restored from a snapshot",
		Long: `Download a snapshot, check its sha256, and restore it with etcdutl into DIR,
which must not exist: a single-member etcd data dir. Nothing running is
touched; the command prints how to put the data dir in place.`,
		Example: `  opke restore --cluster demo --snapshot 20261121T020000.000Z-48213 --to /tmp/demo-etcd
  opke restore --store --cloud prod --snapshot 20261121T020000.000Z-912 --to /var/lib/opke-restored/etcd`,
		Args: argsAtMost(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if id == "" || to == "" {
				return usagef("--snapshot and --to are required")
			}
			if _, err := os.Stat(to); err == nil {
				return usagef("--to %s exists: restore writes a new data dir", to)
			}
			t, err := f.resolve(ctx, a)
			if err != nil {
				return err
			}
			defer t.Close()
			listed, err := t.box().List(ctx, t.name)
			if err != nil {
				return err
			}
			rec, err := backup.Find(listed, id)
			if err != nil {
				return err
			}
			tmp, err := os.MkdirTemp("", "opke-restore-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			path, err := reconciler.Fetch(ctx, t.box(), rec, tmp, t.open)
			if err != nil {
				return err
			}
			member, peer := "opke", "http://127.0.0.1:2380"
			if !f.store {
				member = schemas.ControllerName(t.name, 0)
				peer = "https://127.0.0.1:2380"
			}
			if err := backup.Restore(path, to, member, peer); err != nil {
				return err
			}
			abs, _ := filepath.Abs(to)
			fmt.Fprintf(a.stdout, "Restored snapshot %s (revision %d, %d keys) into %s as member %s.\n", id, rec.Revision, rec.Keys, abs, member)
			if f.store {
				fmt.Fprintf(a.stdout, `To use it: stop every opke serve of this store, then
  mv DATA/etcd DATA/etcd.old && mv %s DATA/etcd
and start opke serve --data-dir DATA again with the same encryption key.
`, abs)
			} else {
				fmt.Fprintf(a.stdout, `To use it (the cluster's etcd is rebuilt from one member):
  1. pause the cluster (spec.paused: true) so OPKE changes nothing;
  2. on every controller: systemctl stop kubelet etcd-member;
  3. copy %s to /var/lib/etcd on %s and start etcd-member there with
     ETCD_INITIAL_CLUSTER=%s=https://<its IP>:2380 and --force-new-cluster;
  4. add the other controllers back as new members (etcdctl member add), empty
     their /var/lib/etcd and start them; then start the kubelets and unpause.
`, abs, member, member)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&id, "snapshot", "", "the snapshot's ID (opke backup list)")
	cmd.Flags().StringVar(&to, "to", "", "the data dir to write (must not exist)")
	return cmd
}

package reconciler_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/containers"
	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/objects"

	"opke.dev/opke/backup"
	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// contractRig is a rig on the contract target: the simulator, or a real
// cloud with the simulator's host layer attached to its servers.
func contractRig(t *testing.T) (*rig, *cloudtest.Target, *reconciler.Applier) {
	t.Helper()
	ctx := context.Background()
	tgt := cloudtest.Contract(t)
	store := statetest.Open(t)
	owner, err := store.InstallationID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The hosts are the simulator's, attached to the target's servers:
	// the real servers cannot boot. On the simulator too, so that both
	// targets run the same code (its own hosts boot but see no SSH).
	hostsSim, err := cloudsim.Start(ctx, cloudsim.Options{StateDir: t.TempDir(),
		Attach: &cloudsim.AttachOptions{File: tgt.File, Cloud: tgt.AdminCloud, Interval: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostsSim.Close() })
	hosts := &reconciler.HostSessions{Console: hostsSim.ConsoleOutput}
	if tgt.Real() {
		// Runs before the target's own purge (cleanups run last first).
		t.Cleanup(func() {
			if err := cloudtest.Purge(context.Background(), tgt.Clients, owner); err != nil {
				t.Errorf("purge: %v", err)
			}
		})
	}
	hosts.Dialer = sshx.Dialer{Proxy: hostsSim.Edge()}
	t.Cleanup(hosts.Close)
	pool := &cloud.Pool{File: tgt.File, Budget: cloud.Unlimited()}
	r := &rig{sim: hostsSim, clients: tgt.Clients, store: store, owner: owner,
		// The wall clock: two snapshots at one instant and revision would
		// share an id.
		planner: &reconciler.Planner{Store: store, Clouds: pool, Now: time.Now}}
	a := &reconciler.Applier{Planner: r.planner, Hosts: hosts, Parallel: 8, GateTimeout: 2 * time.Minute, GateInterval: 500 * time.Millisecond}
	return r, tgt, a
}

// TestContractCreateScaleUpgradeBackup: a cluster's whole life through
// the engine, on the contract target. Against the real control plane
// this is the infrastructure phase on real APIs (networks, router,
// security groups, server group, servers, load balancer, floating IP)
// and the host phase on simulated hosts attached to the real servers.
func TestContractCreateScaleUpgradeBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, tgt, a := contractRig(t)
	name := "e2e-" + tgt.Owner[len(tgt.Owner)-8:]
	c := spec(t, "demo", name, 200)
	c.Spec.Cloud = tgt.Cloud
	c.Spec.Kubernetes.Version = "v1.35.1"
	c.Spec.WorkerPools[0].Count = 1
	c.Spec.DeletionPolicy = schemas.DeletionDelete
	c.Spec.Backup = &schemas.Backup{Interval: schemas.Duration{Duration: time.Hour}, Retain: 2, Container: name + "-backups", Drill: true}
	if tgt.Real() {
		sc := tgt.Clients.ObjectStore
		t.Cleanup(func() {
			pages, _ := objects.List(sc, c.Spec.Backup.Container, nil).AllPages(ctx)
			names, _ := objects.ExtractNames(pages)
			for _, n := range names {
				_, _ = objects.Delete(ctx, sc, c.Spec.Backup.Container, n, nil).Extract()
			}
			_ = containers.Delete(ctx, sc, c.Spec.Backup.Container).Err
		})
	}
	observed := func(t *testing.T) map[string]diff.Resource { return r.observedOf(t, name) }
	settled := func(t *testing.T, when string) {
		t.Helper()
		if next := r.plan(t, c); !next.Empty() {
			t.Fatalf("%s, the next plan: %v, drift %v", when, addresses(next.Changes), addresses(next.Drift))
		}
	}

	t.Run("create", func(t *testing.T) {
		r.mustApply(t, a, c)
		// Once etcd runs, its first scheduled snapshot is due.
		if got := addresses(r.plan(t, c).Changes); !maps.Equal(got, map[string]diff.Action{diff.BackupAddress(name).String(): diff.ActionBackup}) {
			t.Errorf("after the create, the plan is not the first snapshot: %v", got)
		}
		r.mustApply(t, a, c)
		settled(t, "after the create and its first snapshot")
		res := observed(t)
		for _, kind := range []diff.Kind{diff.KindNetwork, diff.KindSubnet, diff.KindRouter, diff.KindSecurityGroup, diff.KindServerGroup,
			diff.KindServer, diff.KindLoadBalancer, diff.KindListener, diff.KindFloatingIP} {
			if !slices.ContainsFunc(slices.Collect(maps.Values(res)), func(x diff.Resource) bool { return x.Kind == kind }) {
				t.Errorf("no %s observed", kind)
			}
		}
		if v := r.versions(t, name); len(v) != 2 || v[name+"-controller-0"] != "v1.35.1" {
			t.Errorf("versions the hosts run: %v", v)
		}
	})
	t.Run("scale out", func(t *testing.T) {
		c.Spec.WorkerPools[0].Count = 2
		r.mustApply(t, a, c)
		settled(t, "after the scale out")
		if _, ok := observed(t)["openstack/server/"+name+"-default-1"]; !ok {
			t.Errorf("no second worker")
		}
	})
	t.Run("upgrade rolls the hosts and recreates no server", func(t *testing.T) {
		before := serverIDs(observed(t))
		since := time.Now()
		c.Spec.Kubernetes.Version = "v1.36.0"
		plan := r.mustApply(t, a, c)
		for _, ch := range plan.Changes {
			// A minor: each node drained before its kubelet restarts and
			// uncordoned after its gate, as kubeadm's upgrade does.
			node := ch.Action == diff.ActionDrain || ch.Action == diff.ActionUpdate && ch.Address.Target == diff.TargetNode
			if ch.Phase != diff.PhaseHosts && !node {
				t.Errorf("the upgrade plans %s %s", ch.Action, ch.Address)
			}
		}
		settled(t, "after the upgrade")
		want := map[string]string{name + "-controller-0": "v1.36.0", name + "-default-0": "v1.36.0", name + "-default-1": "v1.36.0"}
		if d := cmp.Diff(want, r.versions(t, name)); d != "" {
			t.Errorf("versions the hosts run (-want +got):\n%s", d)
		}
		// Restarted on the attached hosts, the only ones SSH reaches.
		for host, times := range restarts(t, r.sim, slices.Collect(maps.Keys(want)), since) {
			if len(times) != 1 {
				t.Errorf("%s restarted its kubelet %d times in the upgrade", host, len(times))
			}
		}
		if after := serverIDs(observed(t)); !maps.Equal(before, after) {
			t.Errorf("a server or its user_data changed in the upgrade:\n%v\n%v", before, after)
		}
	})
	t.Run("backups are in object storage, drilled", func(t *testing.T) {
		recs, err := reconciler.Backups(ctx, r.store, name)
		if err != nil || len(recs) == 0 {
			t.Fatalf("backup records: %v %v", recs, err)
		}
		reasons := map[string]bool{}
		for _, rec := range recs {
			reasons[rec.Reason] = true
			if rec.Drill == nil || !rec.Drill.Passed {
				t.Errorf("backup %s: drill %v", rec.ID, rec.Drill)
			}
		}
		if !reasons[backup.ReasonBeforeRollout] || !reasons[backup.ReasonScheduled] {
			t.Errorf("backup reasons %v, want a scheduled one and one before the rollout", reasons)
		}
		listed, err := backup.Objects{Client: r.clients.ObjectStore, Container: c.Spec.Backup.Container}.List(ctx, name)
		if err != nil || len(listed) != len(recs) {
			t.Errorf("%d snapshots in the container (%v), %d records", len(listed), err, len(recs))
		}
	})
	t.Run("scale in", func(t *testing.T) {
		c.Spec.WorkerPools[0].Count = 1
		r.mustApply(t, a, c)
		settled(t, "after the scale in")
		if _, ok := observed(t)["openstack/server/"+name+"-default-1"]; ok {
			t.Errorf("the second worker is still there")
		}
	})
	t.Run("delete leaves nothing tagged", func(t *testing.T) {
		r.mustApply(t, a)
		if left := observed(t); len(left) != 0 {
			t.Errorf("left behind: %v", strings.Join(slices.Sorted(maps.Keys(left)), ", "))
		}
	})
}

package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/snapshots"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/volumeattach"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

// apply plans the fleet and applies the plan, failing the test on any
// failed step.
func (r *rig) apply(t *testing.T, fleet ...*schemas.Cluster) (*diff.Plan, *reconciler.Summary) {
	t.Helper()
	plan, sum, err := r.tryApply(t, fleet...)
	if err != nil {
		for _, f := range sum.Failed {
			t.Errorf("%s %s: %s %v", f.Change.Action, f.Change.Address, f.State, f.Err)
		}
		t.Fatal(err)
	}
	return plan, sum
}

// tryApply plans the fleet and applies the plan; it returns apply's error.
func (r *rig) tryApply(t *testing.T, fleet ...*schemas.Cluster) (*diff.Plan, *reconciler.Summary, error) {
	t.Helper()
	req := reconciler.Request{Clusters: map[string]*schemas.Cluster{}, Commit: "0123456789abcdef0123456789abcdef01234567"}
	for _, c := range fleet {
		req.Clusters[c.Metadata.Name] = c
	}
	ctx := context.Background()
	res, err := r.planner.Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	defer hosts.Close()
	a := &reconciler.Applier{Planner: r.planner, Hosts: hosts}
	sum, err := a.Apply(ctx, req, res.Plan)
	return res.Plan, sum, err
}

// TestApplyCreatesAClusterFromNothing: the demo cluster applied from
// nothing, then the next plan is empty; its controller runs the units the
// plan restarted.
func TestApplyCreatesAClusterFromNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	plan, sum := r.apply(t, demo)
	if sum.Counts[reconciler.StepDone] < len(plan.Changes) {
		t.Errorf("%d steps done, the plan had %d changes", sum.Counts[reconciler.StepDone], len(plan.Changes))
	}
	// Eight steps at once, each host dialled once: its console (host
	// keys) read once, or (real machines) until it printed them.
	if n := r.sim.Counters()["POST /compute/v2.1/servers/{id}/action"]; n != 4 && !realHosts || n < 4 {
		t.Errorf("%d console reads for 4 hosts", n)
	}
	next := r.plan(t, demo)
	if !next.Empty() {
		t.Fatalf("after apply, plan: %v, drift %v", addresses(next.Changes), addresses(next.Drift))
	}
	// A file the host already has is not sent again (a step that ran
	// before a crash that kept it from the ledger): the ledger forgets
	// kubelet.env, the plan uploads it, the host's copy stays untouched.
	ctx := context.Background()
	root, err := r.sim.HostRoot("demo-default-0")
	if err != nil {
		t.Fatal(err)
	}
	onHost := filepath.Join(root, "etc", "kubernetes", "kubelet.env")
	before, err := os.Stat(onHost)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.Delete(ctx, r.store.Key("demo", "hosts", "demo-default-0", "files/etc/kubernetes/kubelet.env")); err != nil {
		t.Fatal(err)
	}
	r.sim.ResetCounters()
	again, _ := r.apply(t, demo)
	// A plan of host changes only lists the cloud twice: once to plan it,
	// once for the host phase's addresses; the infrastructure phase has
	// nothing to do and lists nothing.
	if n := r.sim.Counters()["GET /compute/v2.1/servers/detail"]; n != 2 {
		t.Errorf("an apply of host changes only listed the servers %d times, want 2", n)
	}
	if got := addresses(again.Changes)["host/demo-default-0/etc/kubernetes/kubelet.env"]; got != diff.ActionUpload {
		t.Fatalf("a file the ledger forgot is not planned for upload: %v", addresses(again.Changes))
	}
	if after, err := os.Stat(onHost); err != nil || !after.ModTime().Equal(before.ModTime()) || !os.SameFile(before, after) {
		t.Errorf("kubelet.env was written again though the host had its bytes (%v)", err)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after the second apply, plan: %v", addresses(next.Changes))
	}

	// The cluster's application credential is in cloud.conf (0600), and
	// Keystone takes it.
	croot, err := r.sim.HostRoot("demo-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(croot, "etc", "kubernetes", "cloud.conf")
	conf, err := os.ReadFile(confPath)
	if err != nil {
		t.Fatal(err)
	}
	// The cloud controller manager's group reads it (a real host's
	// install sets the group; the in-process hosts keep no owners).
	st, _ := os.Stat(confPath)
	if st.Mode().Perm() != 0o640 {
		t.Errorf("cloud.conf mode %v, want 0640", st.Mode().Perm())
	}
	if gid := st.Sys().(*syscall.Stat_t).Gid; realHosts && gid != 1001 {
		t.Errorf("cloud.conf's group is %d on a real host, want 1001 (the cloud controller manager's)", gid)
	}
	ini := map[string]string{}
	for _, line := range strings.Split(string(conf), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			ini[k] = v
		}
	}
	if _, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: ini["auth-url"],
		ApplicationCredentialID: ini["application-credential-id"], ApplicationCredentialSecret: ini["application-credential-secret"]}); err != nil {
		t.Errorf("the cluster's application credential (%s) does not authenticate: %v", ini["application-credential-id"], err)
	}
	if ini["subnet-id"] == "" {
		t.Errorf("cloud.conf names no subnet:\n%s", conf)
	}

	if realHosts {
		// What the units did on a real machine is issue "A real cluster
		// comes up"'s: there is no etcd or kubelet on them yet.
		return
	}
	// kube-proxy, CoreDNS, flannel and the spec's addons went to the
	// cluster's API (server-side apply), each manifest once.
	objs, err := r.sim.KubeObjects("demo-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		"apps/v1/daemonsets/kube-system/kube-proxy",
		"apps/v1/deployments/kube-system/coredns",
		"v1/namespaces//kube-flannel",
		"apps/v1/daemonsets/kube-flannel/kube-flannel-ds",
		"apiregistration.k8s.io/v1/apiservices//v1beta1.metrics.k8s.io",
	} {
		if _, ok := objs.Applied[key]; !ok {
			t.Errorf("%s was not applied (the cluster has %d objects)", key, len(objs.Applied))
		}
	}
	// The controller's node is labelled as kubeadm labels it; no other.
	if d := cmp.Diff(map[string]map[string]string{"demo-controller-0": {"node-role.kubernetes.io/control-plane": ""}}, objs.NodeLabels); d != "" {
		t.Errorf("node labels applied (-want +got):\n%s", d)
	}
	var applies []string
	for _, c := range plan.Changes {
		if c.Action == diff.ActionApply {
			applies = append(applies, c.Address.String())
		}
	}
	if d := cmp.Diff([]string{"kubernetes/demo/00-kube-proxy.yaml", "kubernetes/demo/01-flannel.yaml", "kubernetes/demo/02-control-plane.yaml", "kubernetes/demo/03-kube-router.yaml", "kubernetes/demo/05-coredns.yaml", "kubernetes/demo/08-metrics-server.yaml"}, applies); d != "" {
		t.Errorf("applies (-want +got):\n%s", d)
	}
	events, err := r.sim.HostEvents("demo-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	var units []string
	for _, e := range events {
		if e.Exit != 0 || e.Error != "" {
			t.Errorf("controller: %s: exit %d: %s", e.Command, e.Exit, e.Error)
		}
		units = append(units, e.Command)
	}
	for _, want := range []string{"restart etcd-member.service", "restart kubelet.service"} {
		if !slices.ContainsFunc(units, func(u string) bool { return strings.Contains(u, want) }) {
			t.Errorf("controller did not %s: %v", want, units)
		}
	}
}

// appliedObjects are the objects server-side applies made in the demo
// cluster's API, by key.
func appliedObjects(t *testing.T, r *rig) map[string]json.RawMessage {
	t.Helper()
	o, err := r.sim.KubeObjects("demo-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	return o.Applied
}

// TestApplyPrunesWhatLeavesTheSpec: a manifest's new version drops an
// object it applied, which goes. Then an addon (metrics-server) and the
// NetworkPolicy agent leave the spec. The plan deletes their manifests
// after the applies; the apply deletes their objects from the cluster's
// API and nothing else, the ledger forgets them and the next plan is
// empty; back in the spec, they are applied again.
func TestApplyPrunesWhatLeavesTheSpec(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	before, err := r.sim.KubeObjects("demo-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"apps/v1/daemonsets/kube-system/kube-router", "apiregistration.k8s.io/v1/apiservices//v1beta1.metrics.k8s.io"} {
		if _, ok := before.Applied[key]; !ok {
			t.Fatalf("%s was not applied", key)
		}
	}

	// A new version of a manifest that no longer holds an object it
	// applied (here: kube-proxy's, as recorded, held a ConfigMap it no
	// longer has): the object goes with the apply, and nothing else.
	ctx := context.Background()
	k := state.KeysOf(r.store)
	withOld := before.Clone()
	withOld.Applied["v1/configmaps/kube-system/kube-proxy-old"] = json.RawMessage(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kube-proxy-old","namespace":"kube-system"}}`)
	if err := r.sim.SetKubeObjects("demo-controller-0", *withOld); err != nil {
		t.Fatal(err)
	}
	recorded, err := r.store.Get(ctx, k.ManifestObjects("demo", "00-kube-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var refs []map[string]string
	if err := json.Unmarshal(recorded, &refs); err != nil || len(refs) == 0 {
		t.Fatalf("the objects recorded for 00-kube-proxy.yaml: %s %v", recorded, err)
	}
	refs = append(refs, map[string]string{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "kube-system", "name": "kube-proxy-old"})
	b, _ := json.Marshal(refs)
	if err := errors.Join(r.store.Put(ctx, k.ManifestObjects("demo", "00-kube-proxy.yaml"), b),
		r.store.Put(ctx, k.Manifest("demo", "00-kube-proxy.yaml"), []byte(`{"sha256":"0ld"}`))); err != nil {
		t.Fatal(err)
	}
	r.apply(t, demo)
	pruned := appliedObjects(t, r)
	if d := cmp.Diff(slices.Sorted(maps.Keys(before.Applied)), slices.Sorted(maps.Keys(pruned))); d != "" {
		t.Errorf("objects after kube-proxy's manifest dropped one (-want +got):\n%s", d)
	}

	demo.Spec.Addons = slices.DeleteFunc(slices.Clone(demo.Spec.Addons), func(a schemas.Addon) bool { return a.Name == "metrics-server" })
	demo.Spec.Network.NetworkPolicy = schemas.NetworkPolicyNone
	plan, _ := r.apply(t, demo)
	var changes []string
	for _, c := range plan.Changes {
		changes = append(changes, c.Action.String()+" "+c.Address.String())
	}
	if d := cmp.Diff([]string{"delete kubernetes/demo/03-kube-router.yaml", "delete kubernetes/demo/08-metrics-server.yaml"}, changes); d != "" {
		t.Errorf("the plan (-want +got):\n%s", d)
	}
	after := appliedObjects(t, r)
	var gone []string
	for key := range before.Applied {
		if _, ok := after[key]; !ok {
			gone = append(gone, key)
		}
	}
	slices.Sort(gone)
	want := []string{
		"apiregistration.k8s.io/v1/apiservices//v1beta1.metrics.k8s.io",
		"apps/v1/daemonsets/kube-system/kube-router",
		"apps/v1/deployments/kube-system/metrics-server",
		"rbac.authorization.k8s.io/v1/clusterrolebindings//kube-router",
		"rbac.authorization.k8s.io/v1/clusterrolebindings//metrics-server:system:auth-delegator",
		"rbac.authorization.k8s.io/v1/clusterrolebindings//system:metrics-server",
		"rbac.authorization.k8s.io/v1/clusterroles//kube-router",
		"rbac.authorization.k8s.io/v1/clusterroles//system:aggregated-metrics-reader",
		"rbac.authorization.k8s.io/v1/clusterroles//system:metrics-server",
		"rbac.authorization.k8s.io/v1/rolebindings/kube-system/metrics-server-auth-reader",
		"v1/serviceaccounts/kube-system/kube-router",
		"v1/serviceaccounts/kube-system/metrics-server",
		"v1/services/kube-system/metrics-server",
	}
	if d := cmp.Diff(want, gone); d != "" {
		t.Errorf("objects deleted (-want +got):\n%s", d)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Fatalf("after the prune, plan: %v, drift %v", addresses(next.Changes), addresses(next.Drift))
	}
	for _, key := range []string{k.Manifest("demo", "08-metrics-server.yaml"), k.ManifestObjects("demo", "08-metrics-server.yaml")} {
		if _, err := r.store.Get(ctx, key); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("%s after the prune: %v, want it forgotten", key, err)
		}
	}

	demo.Spec.Addons = append(demo.Spec.Addons, schemas.Addon{Name: "metrics-server"})
	demo.Spec.Network.NetworkPolicy = schemas.NetworkPolicyKubeRouter
	r.apply(t, demo)
	again := appliedObjects(t, r)
	if d := cmp.Diff(slices.Sorted(maps.Keys(before.Applied)), slices.Sorted(maps.Keys(again))); d != "" {
		t.Errorf("objects once back in the spec (-before +after):\n%s", d)
	}
}

// TestApplyForgetsAManifestWithoutRecordedObjects: a manifest applied by
// an OPKE that recorded no objects (before pruning) leaves the render:
// nothing is deleted from the cluster (OPKE cannot know what it held),
// its record goes, and the next plan is empty.
func TestApplyForgetsAManifestWithoutRecordedObjects(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	ctx := context.Background()
	k := state.KeysOf(r.store)
	const name = "08-metrics-server.yaml"
	if err := r.store.Delete(ctx, k.ManifestObjects("demo", name)); err != nil {
		t.Fatal(err)
	}
	before, err := r.sim.KubeObjects("demo-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	demo.Spec.Addons = nil
	plan, _ := r.apply(t, demo)
	if !slices.ContainsFunc(plan.Changes, func(c diff.Change) bool {
		return c.Action == diff.ActionDelete && c.Address == diff.ManifestAddress("demo", name)
	}) {
		t.Fatalf("no deletion of %s planned: %v", name, addresses(plan.Changes))
	}
	after := appliedObjects(t, r)
	if d := cmp.Diff(slices.Sorted(maps.Keys(before.Applied)), slices.Sorted(maps.Keys(after))); d != "" {
		t.Errorf("objects deleted without a record of them (-before +after):\n%s", d)
	}
	if _, err := r.store.Get(ctx, k.Manifest("demo", name)); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("the manifest's record after its deletion: %v, want it forgotten", err)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Fatalf("after forgetting it, plan: %v, drift %v", addresses(next.Changes), addresses(next.Drift))
	}
}

// TestApplyScalesAndDeletes: scale out 2 -> 3, in 3 -> 1 (highest index
// first), out again to 2 (a new server under an old name, with new host
// keys), then with deletionPolicy Delete and the file gone, nothing
// tagged remains and the store forgets the cluster.
func TestApplyScalesAndDeletes(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	demo := spec(t, "demo", "", 0)
	demo.Spec.DeletionPolicy = schemas.DeletionDelete
	r.apply(t, demo)
	for _, step := range []struct {
		workers int
		want    []string
	}{
		{3, []string{"demo-controller-0", "demo-default-0", "demo-default-1", "demo-default-2", "demo-gateway-0"}},
		{1, []string{"demo-controller-0", "demo-default-0", "demo-gateway-0"}},
		{2, []string{"demo-controller-0", "demo-default-0", "demo-default-1", "demo-gateway-0"}},
	} {
		demo.Spec.WorkerPools[0].Count = step.workers
		r.apply(t, demo)
		if next := r.plan(t, demo); !next.Empty() {
			t.Fatalf("after scaling to %d, plan: %v, drift %v", step.workers, addresses(next.Changes), addresses(next.Drift))
		}
		obs, err := cloud.Observe(ctx, r.clients, r.owner, nil)
		if err != nil {
			t.Fatal(err)
		}
		var servers []string
		for _, x := range obs.Clusters["demo"] {
			if x.Kind == diff.KindServer {
				servers = append(servers, x.Name)
			}
		}
		if !slices.Equal(servers, step.want) {
			t.Errorf("servers after scaling to %d: %v, want %v", step.workers, servers, step.want)
		}
		// Kubernetes has a Node object for each server but the gateway:
		// a removed worker's went after its server.
		if names, want := nodeNames(t, r), slices.DeleteFunc(slices.Clone(step.want), func(s string) bool { return strings.Contains(s, "gateway") }); !slices.Equal(names, want) {
			t.Errorf("Node objects after scaling to %d: %v, want %v", step.workers, names, want)
		}
		// Every worker, new or made again under an old name, has its files.
		for i := range step.workers {
			host := fmt.Sprintf("demo-default-%d", i)
			root, err := r.sim.HostRoot(host)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(root, "etc", "kubernetes", "kubelet.env")); err != nil {
				t.Errorf("after scaling to %d, %s lacks kubelet.env: %v", step.workers, host, err)
			}
		}
	}

	// A server deleted by hand is made again, as a new host with its files.
	obs, err := cloud.Observe(ctx, r.clients, r.owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range obs.Clusters["demo"] {
		if x.Address().String() == "openstack/server/demo-default-1" {
			if err := servers.Delete(ctx, r.clients.Compute, x.ID).ExtractErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	plan, _ := r.apply(t, demo)
	if got := addresses(plan.Drift)["openstack/server/demo-default-1"]; got != diff.ActionCreate {
		t.Errorf("a server deleted by hand: drift %v, want create", addresses(plan.Drift))
	}
	root, err := r.sim.HostRoot("demo-default-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "kubernetes", "kubelet.env")); err != nil {
		t.Errorf("the server made again lacks kubelet.env: %v", err)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after correcting the drift, plan: %v, drift %v", addresses(next.Changes), addresses(next.Drift))
	}

	// A worker's server deleted by hand and taken out of the spec: no
	// drain (nothing runs there), and its Node object, which Kubernetes
	// keeps, is deleted.
	for _, x := range r.observed(t) {
		if x.Address().String() == "openstack/server/demo-default-1" {
			if err := servers.Delete(ctx, r.clients.Compute, x.ID).ExtractErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	demo.Spec.WorkerPools[0].Count = 1
	plan, _ = r.apply(t, demo)
	if got := addresses(plan.Changes); got[diff.NodeAddress("demo-default-1").String()] != diff.ActionDelete || got[diff.DrainAddress("demo-default-1").String()] != 0 {
		t.Errorf("a worker gone by hand and from the spec: %v, want its Node object deleted and no drain", got)
	}
	if got := nodeNames(t, r); !slices.Equal(got, []string{"demo-controller-0", "demo-default-0"}) {
		t.Errorf("Node objects: %v", got)
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after the Node object's deletion, plan: %v, drift %v", addresses(next.Changes), addresses(next.Drift))
	}

	// A Service of type LoadBalancer, as the cloud controller manager
	// makes it (untagged, named after the cluster, on its subnet, with a
	// floating IP on its VIP): not drift while the cluster lives; deleted
	// with it, before its subnet.
	res := r.observed(t)
	lb, err := loadbalancers.Create(ctx, r.clients.LoadBalancer, loadbalancers.CreateOpts{Name: cloud.ServicePrefix("demo") + "default_web",
		VipSubnetID: res["openstack/subnet/demo"].ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	for lb.ProvisioningStatus != "ACTIVE" {
		if lb, err = loadbalancers.Get(ctx, r.clients.LoadBalancer, lb.ID).Extract(); err != nil {
			t.Fatal(err)
		}
	}
	netPages, err := networks.List(r.clients.Network, networks.ListOpts{Name: res["openstack/floating-ip/demo-api"].Attrs["network"].Value}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	external, err := networks.ExtractNetworks(netPages)
	if err != nil || len(external) != 1 {
		t.Fatalf("the external network: %v %v", external, err)
	}
	if _, err := floatingips.Create(ctx, r.clients.Network, floatingips.CreateOpts{FloatingNetworkID: external[0].ID, PortID: lb.VipPortID}).Extract(); err != nil {
		t.Fatal(err)
	}
	// Volumes as the cluster's Cinder CSI driver makes them (metadata
	// naming the cluster, and the claim): one attached to a worker with a
	// snapshot, one not attached; one marked to keep, another cluster's.
	// Not drift while the cluster lives; deleted with it, but the kept one
	// and the other cluster's.
	csiVolume := func(name string, metadata map[string]string) string {
		v, err := volumes.Create(ctx, r.clients.BlockStorage, volumes.CreateOpts{Name: name, Size: 1, Metadata: metadata}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		waitVolume(t, r.clients.BlockStorage, v.ID, "available")
		return v.ID
	}
	claimed := csiVolume("pvc-1", map[string]string{cloud.CSIClusterKey: "demo", "csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "default"})
	if _, err := volumeattach.Create(ctx, r.clients.Compute, res["openstack/server/demo-default-0"].ID, volumeattach.CreateOpts{VolumeID: claimed}).Extract(); err != nil {
		t.Fatal(err)
	}
	waitVolume(t, r.clients.BlockStorage, claimed, "in-use")
	snap, err := snapshots.Create(ctx, r.clients.BlockStorage, snapshots.CreateOpts{VolumeID: claimed, Name: "snapshot-1", Force: true,
		Metadata: map[string]string{cloud.CSIClusterKey: "demo"}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	released := csiVolume("pvc-2", map[string]string{cloud.CSIClusterKey: "demo"})
	kept := csiVolume("pvc-3", map[string]string{cloud.CSIClusterKey: "demo", cloud.KeepKey: "true"})
	other := csiVolume("pvc-4", map[string]string{cloud.CSIClusterKey: "prod"})
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("a Service's load balancer or a CSI volume taken for drift: %v, drift %v", addresses(next.Changes), addresses(next.Drift))
	}
	plan, _ = r.apply(t)
	for _, want := range []string{"openstack/load-balancer/kube_service_demo_default_web", "openstack/floating-ip/kube_service_demo_default_web",
		"openstack/volume/pvc-1", "openstack/volume/pvc-2", "openstack/volume-snapshot/snapshot-1"} {
		if addresses(plan.Changes)[want] != diff.ActionDelete {
			t.Errorf("the deletion does not delete %s: %v", want, addresses(plan.Changes))
		}
	}
	for id, want := range map[string]int{claimed: 404, released: 404, kept: 200, other: 200} {
		_, err := volumes.Get(ctx, r.clients.BlockStorage, id).Extract()
		got := http.StatusOK
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			got = http.StatusNotFound
		} else if err != nil {
			got = 0
		}
		if got != want {
			t.Errorf("volume %s after the cluster's deletion: %v, want %d", id, err, want)
		}
	}
	if _, err := snapshots.Get(ctx, r.clients.BlockStorage, snap.ID).Extract(); !gophercloud.ResponseCodeIs(err, 404) {
		t.Errorf("the CSI snapshot outlived the cluster: %v", err)
	}
	obs, err = cloud.Observe(ctx, r.clients, r.owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	if left := obs.Clusters["demo"]; len(left) != 0 {
		t.Errorf("%d resources left after the cluster was deleted", len(left))
	}
	if _, err := loadbalancers.Get(ctx, r.clients.LoadBalancer, lb.ID).Extract(); !gophercloud.ResponseCodeIs(err, 404) {
		t.Errorf("the Service's load balancer outlived the cluster: %v", err)
	}
	fipPages, err := floatingips.List(r.clients.Network, floatingips.ListOpts{}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fips, _ := floatingips.ExtractFloatingIPs(fipPages); len(fips) != 0 {
		t.Errorf("%d floating IPs outlived the cluster", len(fips))
	}
	if keys, _ := r.store.List(ctx, r.store.Key("demo")+"/"); len(keys) != 0 {
		t.Errorf("the store still holds %d keys of demo", len(keys))
	}
	if next := r.plan(t); !next.Empty() || len(next.Warnings) != 0 {
		t.Errorf("after the delete, plan: %+v", next)
	}
}

// waitVolume waits for a volume to reach status, as Cinder's workers take
// their time.
func waitVolume(t *testing.T, bs *gophercloud.ServiceClient, id, status string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		v, err := volumes.Get(t.Context(), bs, id).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if v.Status == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume %s: %s, not %s within a minute", id, v.Status, status)
		}
	}
}

// nodeNames are the demo cluster's Node objects, as its API lists them.
func nodeNames(t *testing.T, r *rig) []string {
	t.Helper()
	api, base, _ := r.apiClient(t, r.observed(t), "demo-controller-0")
	var names []string
	for _, n := range nodesOf(t, getter(api, base)) {
		names = append(names, n.Metadata.Name)
	}
	return names
}

// TestApplyRegistryMirror: a mirror added to a running cluster's spec
// reaches every node's container runtime configuration over SSH (no
// server replaced: user_data does not change), systemd reads the new
// drop-in before containerd restarts, and the mirror's login, the
// daemon's, lands in files only root reads.
func TestApplyRegistryMirror(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	servers := r.observed(t)

	mirrored := *demo
	mirrored.Spec.RegistryMirror = &schemas.RegistryMirror{Endpoint: "https://mirror.internal:5000"}
	r.planner.MirrorAuth = &assets.MirrorAuth{Username: "puller", Password: "mirror-password"}
	plan, _ := r.apply(t, &mirrored)
	got := addresses(plan.Changes)
	for _, want := range []string{
		"host/demo-default-0/etc/containerd/certs.d/registry.k8s.io/hosts.toml",
		"host/demo-controller-0/etc/containerd/config.toml",
		"host/demo-controller-0/units/containerd.service",
	} {
		if _, ok := got[want]; !ok {
			t.Errorf("the plan lacks %s: %v", want, got)
		}
	}
	for addr, a := range got {
		// A restart on a controller is a rollout: etcd is backed up first.
		if !strings.HasPrefix(addr, "host/") && a != diff.ActionBackup {
			t.Errorf("a mirror changed %s (%s): only hosts' files should change", addr, a)
		}
	}
	if d := cmp.Diff(servers, r.observed(t)); d != "" {
		t.Errorf("servers changed (-before +after):\n%s", d)
	}
	root, err := r.sim.HostRoot("demo-default-0")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "etc", "containerd", "certs.d", "ghcr.io", "hosts.toml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 || !strings.Contains(string(b), `[host."https://mirror.internal:5000/v2/ghcr.io"]`) {
		t.Errorf("hosts.toml (mode %v):\n%s", st.Mode().Perm(), b)
	}
	if next := r.plan(t, &mirrored); !next.Empty() {
		t.Errorf("after apply, plan: %v", addresses(next.Changes))
	}
	if realHosts {
		return
	}
	events, err := r.sim.HostEvents("demo-default-0")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, e := range events {
		if strings.Contains(e.Command, "systemctl") {
			cmds = append(cmds, e.Command)
		}
	}
	reload := slices.IndexFunc(cmds, func(c string) bool { return strings.Contains(c, "daemon-reload") })
	restart := slices.IndexFunc(cmds, func(c string) bool { return strings.Contains(c, "restart containerd.service") })
	if reload < 0 || restart < 0 || reload > restart {
		t.Errorf("want daemon-reload before the restart of containerd: %q", cmds)
	}
}

// TestApplyCorrectsHostFileDrift: a file edited on a host by hand is
// drift a resync finds; applying the resync's plan puts the rendered
// bytes back and restarts the unit, so the next resync finds nothing.
func TestApplyCorrectsHostFileDrift(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	t.Cleanup(hosts.Close)
	r.planner.Hosts = hosts
	req := request(demo)
	req.Resync = true
	resync := func() *diff.Plan {
		t.Helper()
		res, err := r.planner.Plan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res.Plan
	}
	if p := resync(); !p.Empty() {
		t.Fatalf("a converged cluster's resync plans %v, drift %v", addresses(p.Changes), addresses(p.Drift))
	}
	res := r.observed(t)
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	controller := dialHost(t, r, res, "demo-controller-0", gw)
	put(t, controller, "/etc/kubernetes/kubelet.env", []byte("KUBELET_VERSION=edited-by-hand\n"))

	plan := resync()
	const file = "host/demo-controller-0/etc/kubernetes/kubelet.env"
	if addresses(plan.Drift)[file] != diff.ActionUpload {
		t.Fatalf("the edited file is not drift: %v", addresses(plan.Drift))
	}
	a := &reconciler.Applier{Planner: r.planner, Hosts: hosts}
	sum, err := a.Apply(ctx, req, plan)
	if err != nil {
		t.Fatalf("apply the resync's plan: %v (%+v)", err, sum.Failed)
	}
	if sum.Counts[reconciler.StepDone] != len(plan.Changes)+len(plan.Drift) {
		t.Errorf("%d steps done of %d: %v", sum.Counts[reconciler.StepDone], len(plan.Changes)+len(plan.Drift), sum.Counts)
	}
	out, err := sshx.Run(ctx, controller, "cat /etc/kubernetes/kubelet.env")
	if err != nil || strings.Contains(string(out), "edited-by-hand") {
		t.Errorf("kubelet.env after the correction: %q %v", out, err)
	}
	if p := resync(); !p.Empty() {
		t.Errorf("drift is back after its correction: %v, drift %v", addresses(p.Changes), addresses(p.Drift))
	}
}

// TestApplyRendersOnce: an apply executes the plan it is given with one
// render of the cluster and one observation of its cloud, and one more of
// each only when the infrastructure phase moved what they read: the API's
// floating IP (a new cluster's files carry it), the cloud (the host phase
// reaches the hosts by their real addresses).
func TestApplyRendersOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	demo.Spec.Kubernetes.Version = "v1.35.1"
	for _, step := range []struct {
		name                  string
		change                func(*schemas.Cluster)
		renders, observations int
	}{
		{"a new cluster", func(*schemas.Cluster) {}, 2, 2},
		{"a worker more", func(c *schemas.Cluster) { c.Spec.WorkerPools[0].Count++ }, 1, 2},
		{"a patch upgrade", func(c *schemas.Cluster) { c.Spec.Kubernetes.Version = "v1.35.4" }, 1, 1},
		{"a worker less", func(c *schemas.Cluster) { c.Spec.WorkerPools[0].Count-- }, 1, 2},
	} {
		step.change(demo)
		_, sum := r.apply(t, demo)
		if sum.Renders != step.renders || sum.Observations != step.observations {
			t.Errorf("%s: %d renders and %d observations, want %d and %d", step.name, sum.Renders, sum.Observations, step.renders, step.observations)
		}
	}
	if p := r.plan(t, demo); !p.Empty() {
		t.Errorf("after the applies, plan: %v, drift %v", addresses(p.Changes), addresses(p.Drift))
	}
}

// TestApplyRefusesAnInconsistentPlan: a plan says which bytes each known
// file gets; when the apply renders other bytes for one (here the
// kubelet's download mirror changed between plan and apply), that upload fails with
// ErrInconsistent and the host keeps what it had, as Terraform refuses an
// inconsistent final plan.
func TestApplyRefusesAnInconsistentPlan(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	demo.Spec.Kubernetes.Version = "v1.35.4"
	req, plan := r.planned(t, demo)
	// Controllers roll first: the first controller's file is refused, and
	// every host after it is skipped.
	const env = "host/demo-controller-0/etc/kubernetes/kubelet.env"
	if addresses(plan.Changes)[env] != diff.ActionUpload {
		t.Fatalf("the upgrade does not upload %s: %v", env, addresses(plan.Changes))
	}
	demo.Spec.DownloadMirror = &schemas.DownloadMirror{Endpoint: "https://another-mirror.example"}
	sum, err := r.applier(t).Apply(ctx, req, plan)
	if !errors.Is(err, reconciler.ErrFailed) {
		t.Fatalf("apply of an inconsistent plan: %v", err)
	}
	var inconsistent []string
	for _, f := range sum.Failed {
		if errors.Is(f.Err, reconciler.ErrInconsistent) {
			inconsistent = append(inconsistent, f.Change.Address.String())
		}
	}
	if !slices.Contains(inconsistent, env) {
		t.Errorf("%s is not refused as inconsistent: %v", env, inconsistent)
	}
	res := r.observed(t)
	out, err := sshx.Run(ctx, dialHost(t, r, res, "demo-controller-0", dialHost(t, r, res, "demo-gateway-0", nil)), "cat /etc/kubernetes/kubelet.env")
	if err != nil || strings.Contains(string(out), "another-mirror") || strings.Contains(string(out), "v1.35.4") {
		t.Errorf("the controller's kubelet.env after the refused apply: %q %v", out, err)
	}
}

// TestWithProgressChains: WithProgress gives a copy telling both hooks,
// the applier's own first, and leaves the applier it was called on as
// it was.
func TestWithProgressChains(t *testing.T) {
	t.Parallel()
	var told []string
	a := &reconciler.Applier{Progress: func(context.Context, reconciler.Step) { told = append(told, "own") }}
	b := a.WithProgress(func(context.Context, reconciler.Step) { told = append(told, "added") })
	b.Progress(context.Background(), reconciler.Step{})
	a.Progress(context.Background(), reconciler.Step{})
	if d := cmp.Diff([]string{"own", "added", "own"}, told); d != "" {
		t.Errorf("told (-want +got):\n%s", d)
	}
	told = nil
	(&reconciler.Applier{}).WithProgress(func(context.Context, reconciler.Step) { told = append(told, "only") }).Progress(context.Background(), reconciler.Step{})
	if d := cmp.Diff([]string{"only"}, told); d != "" {
		t.Errorf("without a hook of its own (-want +got):\n%s", d)
	}
}

// TestApplyWaitsForAddonsToRollOut: a manifest is done once its
// workloads rolled out, as kubectl rollout status reads them: with both
// workers' kubelets stopped, metrics-server (which does not tolerate the
// controllers' taint) has nowhere to run, so its apply waits, fails at the
// gate timeout saying why, and is not recorded; with a worker back, the
// next apply finishes it. A DaemonSet's pods on the nodes down are not
// waited for (kube-proxy's and flannel's manifests are not held up).
func TestApplyWaitsForAddonsToRollOut(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	ctx := context.Background()
	res := r.observed(t)
	r.kubelet(t, res, "demo-default-0", "stop")
	r.kubelet(t, res, "demo-default-1", "stop")
	// The manifests applied again: their records forgotten.
	k := state.KeysOf(r.store)
	for _, m := range []string{"00-kube-proxy.yaml", "08-metrics-server.yaml"} {
		if err := r.store.Delete(ctx, k.Manifest("demo", m)); err != nil {
			t.Fatal(err)
		}
	}
	a := r.applier(t)
	a.GateTimeout, a.GateInterval = 2*time.Second, 200*time.Millisecond
	_, sum, err := r.applyPlan(t, a, demo)
	if err == nil {
		t.Fatal("the apply of metrics-server with no node to run it succeeded")
	}
	var failed []string
	for _, f := range sum.Failed {
		failed = append(failed, f.Change.Address.String()+": "+f.Err.Error())
	}
	want := "kubernetes/demo/08-metrics-server.yaml: 08-metrics-server.yaml: its workloads to roll out: not within 2s: Deployment kube-system/metrics-server: 0 of 1 updated replicas are available"
	if d := cmp.Diff([]string{want}, failed); d != "" {
		t.Errorf("failed steps (-want +got):\n%s", d)
	}
	if _, err := r.store.Get(ctx, k.Manifest("demo", "08-metrics-server.yaml")); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("metrics-server's manifest recorded though it did not roll out: %v", err)
	}
	if _, err := r.store.Get(ctx, k.Manifest("demo", "00-kube-proxy.yaml")); err != nil {
		t.Errorf("kube-proxy's manifest, whose pods are missing only on the nodes down, not recorded: %v", err)
	}

	r.kubelet(t, res, "demo-default-1", "start")
	p := r.mustApply(t, a, demo)
	if got := addresses(p.Changes); got["kubernetes/demo/08-metrics-server.yaml"] != diff.ActionApply {
		t.Errorf("the next plan does not apply metrics-server again: %v", got)
	}
	if _, err := r.store.Get(ctx, k.Manifest("demo", "08-metrics-server.yaml")); err != nil {
		t.Errorf("metrics-server's manifest not recorded once rolled out: %v", err)
	}
}

// TestResyncFindsAddonObjectsDeletedOrChanged: a resync asks the
// cluster's API for every object its manifests applied. One deleted by
// hand is drift, and so is one whose field OPKE applied was changed by
// hand (the field now another manager's); a field OPKE never set, changed
// by another manager, is not. Each time the manifest is applied again,
// after which the next resync finds nothing.
func TestResyncFindsAddonObjectsDeletedOrChanged(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.askHosts(t)
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	ctx := context.Background()
	if p := r.resync(t, demo); !p.Empty() {
		t.Fatalf("a resync after the apply: %v, drift %v", addresses(p.Changes), addresses(p.Drift))
	}
	correct := func(p *diff.Plan) {
		t.Helper()
		sum, err := r.applier(t).Apply(ctx, request(demo), p)
		if err != nil {
			t.Fatalf("the drift's correction: %v (%v)", err, sum.Failed)
		}
		if p := r.resync(t, demo); !p.Empty() {
			t.Errorf("a resync after the correction: %v, drift %v", addresses(p.Changes), addresses(p.Drift))
		}
	}
	drift := func(p *diff.Plan) []string {
		var out []string
		for _, c := range p.Drift {
			out = append(out, c.Action.String()+" "+c.Address.String()+": "+c.Reason)
		}
		if len(p.Changes) != 0 {
			t.Errorf("changes beside the drift: %v", addresses(p.Changes))
		}
		return out
	}

	objects, err := r.sim.KubeObjects("demo-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	const gone = "apps/v1/deployments/kube-system/metrics-server"
	if _, ok := objects.Applied[gone]; !ok {
		t.Fatalf("%s was not applied", gone)
	}
	delete(objects.Applied, gone)
	delete(objects.Applied, "v1/serviceaccounts/kube-system/metrics-server")
	if err := r.sim.SetKubeObjects("demo-controller-0", *objects); err != nil {
		t.Fatal(err)
	}
	p := r.resync(t, demo)
	want := []string{"apply kubernetes/demo/08-metrics-server.yaml: changed outside OPKE since the last apply: " +
		"ServiceAccount kube-system/metrics-server deleted; Deployment kube-system/metrics-server deleted"}
	if d := cmp.Diff(want, drift(p)); d != "" {
		t.Errorf("the resync's drift (-want +got):\n%s", d)
	}
	correct(p)
	if _, ok := appliedObjects(t, r)[gone]; !ok {
		t.Errorf("%s was not made again", gone)
	}

	// By hand, as kubectl edit and another tool would: CoreDNS scaled
	// (a field OPKE applied), metrics-server annotated (one it did not).
	api, base, _ := r.apiClient(t, r.observed(t), "demo-controller-0")
	patch := func(path, manager, body string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, base+path+"?fieldManager="+manager, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/merge-patch+json")
		resp, err := api.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PATCH %s: %d %s", path, resp.StatusCode, b)
		}
	}
	const coredns = "/apis/apps/v1/namespaces/kube-system/deployments/coredns"
	patch(coredns, "kubectl-edit", `{"spec":{"replicas":5}}`)
	patch("/apis/apps/v1/namespaces/kube-system/deployments/metrics-server", "another-tool", `{"metadata":{"annotations":{"example.com/note":"mine"}}}`)
	p = r.resync(t, demo)
	want = []string{"apply kubernetes/demo/05-coredns.yaml: changed outside OPKE since the last apply: " +
		"Deployment kube-system/coredns changed (its other field managers: kubectl-edit: .spec.replicas)"}
	if d := cmp.Diff(want, drift(p)); d != "" {
		t.Errorf("the resync's drift (-want +got):\n%s", d)
	}
	correct(p)
	var dep struct{ Spec struct{ Replicas int } }
	if err := json.Unmarshal(appliedObjects(t, r)["apps/v1/deployments/kube-system/coredns"], &dep); err != nil || dep.Spec.Replicas != 2 {
		t.Errorf("CoreDNS after the correction: %d replicas (%v), want the manifest's 2", dep.Spec.Replicas, err)
	}
}

// TestPlanSaysWhatAManifestChanges: a manifest that changed since its last
// apply is planned with what its apply changes in the cluster's objects,
// read against the digests the last apply recorded (the plan, and so a
// pull request's comment, shows the addon's diff).
func TestPlanSaysWhatAManifestChanges(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	bumped := spec(t, "demo", "", 0)
	bumped.Spec.Kubernetes.Version = "v1.36.3"
	reasons := map[string]string{}
	for _, c := range r.plan(t, bumped).Changes {
		if c.Address.Target == diff.TargetManifest {
			reasons[c.Address.String()] = c.Reason
		}
	}
	want := map[string]string{"kubernetes/demo/00-kube-proxy.yaml": "content changed: DaemonSet kube-system/kube-proxy changed"}
	if d := cmp.Diff(want, reasons); d != "" {
		t.Errorf("the manifests' changes (-want +got):\n%s", d)
	}

	// With the cluster's API to ask (the daemon's and the CLI's plans),
	// the plan names the fields, from a dry-run apply against the live
	// objects; nothing is written.
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	t.Cleanup(hosts.Close)
	r.planner.Hosts = hosts
	before := appliedObjects(t, r)
	clear(reasons)
	for _, c := range r.plan(t, bumped).Changes {
		if c.Address.Target == diff.TargetManifest {
			reasons[c.Address.String()] = c.Reason
		}
	}
	want["kubernetes/demo/00-kube-proxy.yaml"] = "content changed: DaemonSet kube-system/kube-proxy changed: " +
		`spec.template.spec.containers[kube-proxy].image: "registry.k8s.io/kube-proxy:v1.36.1" → "registry.k8s.io/kube-proxy:v1.36.3"`
	if d := cmp.Diff(want, reasons); d != "" {
		t.Errorf("the manifests' changes, the API asked (-want +got):\n%s", d)
	}
	if d := cmp.Diff(before, appliedObjects(t, r)); d != "" {
		t.Errorf("the plan's dry run changed the cluster's objects (-before +after):\n%s", d)
	}
}

// TestFirstContactRefusesAnOldFlatcar: a host met for the first time (its
// host keys not pinned: a server replaced, or a store restored) whose
// /etc/os-release names a Flatcar release older than assets.MinFlatcar
// gets nothing: the step that would reach it fails naming the host, its
// release and the one needed, and its keys stay unpinned, so the next
// plan checks it again; once it runs a supported release, it is reached
// and pinned.
func TestFirstContactRefusesAnOldFlatcar(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	r.apply(t, demo)
	ctx := t.Context()
	const host = "demo-default-1"
	pinned := state.KeysOf(r.store).HostKeys("demo", host)
	if _, err := r.store.Get(ctx, pinned); err != nil {
		t.Fatalf("the applied host's keys are not pinned: %v", err)
	}
	root, err := r.sim.HostRoot(host)
	if err != nil {
		t.Fatal(err)
	}
	osRelease := filepath.Join(root, "etc", "os-release")
	current, err := os.ReadFile(osRelease)
	if err != nil {
		t.Fatal(err)
	}
	old := strings.ReplaceAll(string(current), assets.MinFlatcar, "4081.3.10")
	if err := os.WriteFile(osRelease, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	// Met again as for the first time, with a file to receive.
	for _, k := range []string{pinned, r.store.Key("demo", "hosts", host, "files/etc/kubernetes/kubelet.env")} {
		if err := r.store.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	_, sum, err := r.tryApply(t, demo)
	if err == nil {
		t.Fatal("a host on Flatcar 4081.3.10 was reached")
	}
	want := "host " + host + ": unsupported host: the host runs Flatcar 4081.3.10; OPKE needs Flatcar " + assets.MinFlatcar + " or later (containerd 2): use a newer image"
	var said []string
	for _, f := range sum.Failed {
		said = append(said, fmt.Sprint(f.Err))
	}
	if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, want) }) {
		t.Errorf("the failed steps say %q, want %q in one", said, want)
	}
	if _, err := r.store.Get(ctx, pinned); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("the refused host's keys were pinned (%v)", err)
	}
	if err := os.WriteFile(osRelease, current, 0o644); err != nil {
		t.Fatal(err)
	}
	r.apply(t, demo)
	if _, err := r.store.Get(ctx, pinned); err != nil {
		t.Errorf("the host's keys are not pinned once it runs %s: %v", assets.MinFlatcar, err)
	}
}

// TestAPIAllowedCIDRs: spec.api.allowedCIDRs close the API's listener to
// everyone else: the edge (the operator's side, 203.0.113.254 in the
// simulator) is not let in until a CIDR holds it, a change the next apply
// makes to the listener in place, its load balancer kept.
func TestAPIAllowedCIDRs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	demo.Spec.API = &schemas.API{AllowedCIDRs: []string{"198.51.100.0/24"}}
	r.apply(t, demo)
	res := r.observed(t)
	listener := res["openstack/listener/demo-api-6443"]
	if got, want := listener.Attrs["allowed_cidrs"].Value, "192.168.10.0/24,198.51.100.0/24"; got != want {
		t.Errorf("the API listener's allowed_cidrs: %q, want %q (the spec's and the cluster's network)", got, want)
	}
	api := res["openstack/floating-ip/demo-api"].Attrs["address"].Value + ":6443"
	d := sshx.Dialer{Proxy: r.sim.Edge()}
	dial := func() error {
		c, err := d.DialContext(ctx, "tcp", api)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(); err == nil {
		t.Error("the edge reached the API outside its allowed CIDRs")
	}
	demo.Spec.API.AllowedCIDRs = append(demo.Spec.API.AllowedCIDRs, "203.0.113.0/24")
	plan, _ := r.apply(t, demo)
	var got []string
	for _, c := range plan.Changes {
		got = append(got, c.Action.String()+" "+c.Address.String())
	}
	if d := cmp.Diff([]string{"update openstack/listener/demo-api-6443"}, got); d != "" {
		t.Errorf("the changes (-want +got):\n%s", d)
	}
	if err := dial(); err != nil {
		t.Errorf("the edge within the allowed CIDRs: %v", err)
	}
	if after := r.observed(t); after["openstack/load-balancer/demo-api"].ID != res["openstack/load-balancer/demo-api"].ID {
		t.Error("the load balancer was made again")
	}
	if next := r.plan(t, demo); !next.Empty() {
		t.Errorf("after the change (its idle timeouts kept?), plan: %v, drift %v", addresses(next.Changes), next.Drift)
	}
}

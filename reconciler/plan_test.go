package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

// now is the clock of every test: the wall clock when the tests start,
// since what OPKE's clients and the simulator's servers check certificates
// against is the wall clock (a health gate's TLS to an API server).
var now = time.Now().UTC().Truncate(time.Second)

// spec reads an example cluster, optionally under another name and host
// network (for fleets of many).
func spec(t testing.TB, file, name string, i int) *schemas.Cluster {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "clusters", file, "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f := schemas.Parse(file, data)
	if f.Cluster == nil || f.Findings.HasErrors() {
		t.Fatalf("%s: %v", file, f.Findings)
	}
	c := f.Cluster
	if name != "" {
		c.Metadata.Name = name
		c.Spec.Network.HostCIDR = fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256)
	}
	return c
}

type rig struct {
	sim     *cloudsim.Sim
	clients *cloud.Clients
	dir     string
	store   *state.Store
	owner   string
	planner *reconciler.Planner
}

// realHosts says the simulator's servers are real machines
// (OPKE_TEST_HOSTS=real, make realhosts).
var realHosts = os.Getenv(cloudtest.HostsEnv) == cloudsim.HostsReal

func newRig(t testing.TB) *rig {
	t.Helper()
	sim, clients, dir := cloudtest.Start(t)
	store := statetest.Open(t)
	owner, err := store.InstallationID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pool := &cloud.Pool{File: filepath.Join(dir, "clouds.yaml"), Budget: cloud.Unlimited()}
	return &rig{sim: sim, clients: clients, dir: dir, store: store, owner: owner,
		planner: &reconciler.Planner{Store: store, Clouds: pool, Now: func() time.Time { return now }}}
}

func (r *rig) plan(t testing.TB, fleet ...*schemas.Cluster) *diff.Plan {
	t.Helper()
	req := reconciler.Request{Clusters: map[string]*schemas.Cluster{}, Commit: "0123456789abcdef0123456789abcdef01234567"}
	for _, c := range fleet {
		req.Clusters[c.Metadata.Name] = c
	}
	res, err := r.planner.Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.Plan
}

// resync plans the fleet reading the hosts and the clusters' APIs (the
// planner's Hosts must be set).
func (r *rig) resync(t testing.TB, fleet ...*schemas.Cluster) *diff.Plan {
	t.Helper()
	req := request(fleet...)
	req.Resync = true
	res, err := r.planner.Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.Plan
}

// askHosts gives the rig's planner sessions to the hosts, as the daemon's
// planner has them, for the plans that read the hosts and the clusters'
// APIs (a resync; the fields an addon's change changes), until the test
// ends or planner.Hosts is set back to nil.
func (r *rig) askHosts(t testing.TB) {
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	t.Cleanup(hosts.Close)
	r.planner.Hosts = hosts
}

// kubelet runs systemctl verb kubelet on host, through the gateway.
func (r *rig) kubelet(t *testing.T, res map[string]diff.Resource, host, verb string) {
	t.Helper()
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	if _, err := sshx.Run(context.Background(), dialHost(t, r, res, host, gw), sshx.Sudo("systemctl "+verb+" kubelet")); err != nil {
		t.Fatalf("%s: systemctl %s kubelet: %v", host, verb, err)
	}
}

func (r *rig) converge(t testing.TB, cs ...*schemas.Cluster) {
	t.Helper()
	cloudtest.Converge(t, r.store, r.clients, now, cs...)
}

func addresses(cs []diff.Change) map[string]diff.Action {
	out := map[string]diff.Action{}
	for _, c := range cs {
		out[c.Address.String()] = c.Action
	}
	return out
}

// TestPlanHasNoSideEffects: planning a new cluster issues nothing into the
// store, moves its revision not at all, and creates nothing in the cloud;
// what the material it lacks will change is known after apply.
func TestPlanHasNoSideEffects(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	before, err := r.store.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	demo := spec(t, "demo", "", 0)
	r.sim.ResetCounters()
	plan := r.plan(t, demo)
	for route := range r.sim.Counters() {
		if !strings.HasPrefix(route, "GET ") && route != "POST /identity/v3/auth/tokens" {
			t.Errorf("a plan called %s", route)
		}
	}
	after, err := r.store.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after != before || plan.StateRevision != before {
		t.Errorf("state revision %d before, %d after, %d in the plan: want all equal", before, after, plan.StateRevision)
	}
	if keys, _ := r.store.List(ctx, r.store.Key("demo")+"/"); len(keys) != 0 {
		t.Errorf("the plan wrote %d keys for demo", len(keys))
	}
	if len(plan.Drift) != 0 || len(plan.Warnings) != 0 {
		t.Errorf("a new cluster has drift %v or warnings %v", plan.Drift, plan.Warnings)
	}
	got := addresses(plan.Changes)
	for _, a := range []string{"openstack/network/demo", "openstack/server/demo-controller-0", "openstack/floating-ip/demo-api",
		"host/demo-controller-0/etc/kubernetes/kubelet.env", "host/demo-controller-0/units/kubelet.service"} {
		if got[a] == 0 {
			t.Errorf("no change for %s", a)
		}
	}
	byAddr := map[string]diff.Change{}
	for _, c := range plan.Changes {
		byAddr[c.Address.String()] = c
	}
	if v := byAddr["openstack/server/demo-controller-0"].After["user_data"]; !v.Unknown {
		t.Errorf("user_data of a new cluster (it carries a CA issued at apply) is %v, want unknown", v)
	}
	if v := byAddr["host/demo-default-0/etc/kubernetes/pki/ca.crt"].After["sha256"]; !v.Unknown {
		t.Errorf("ca.crt of a new cluster is %v, want unknown", v)
	}
	if v := byAddr["host/demo-controller-0/etc/kubernetes/kubelet.env"].After["sha256"]; v.Unknown || v.Value == "" {
		t.Errorf("kubelet.env carries no new material, its sha256 is %v", v)
	}
}

// TestPlanOfAConvergedClusterIsEmpty: a cluster built as its spec says,
// with its ledger recorded, plans nothing; a version bump then plans
// uploads and restarts only.
func TestPlanOfAConvergedClusterIsEmpty(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	r.converge(t, demo)
	plan := r.plan(t, demo)
	if !plan.Empty() || len(plan.Warnings) != 0 {
		t.Fatalf("converged cluster plans changes %v, drift %v, warnings %v", addresses(plan.Changes), addresses(plan.Drift), plan.Warnings)
	}

	bumped := spec(t, "demo", "", 0)
	bumped.Spec.Kubernetes.Version = "v1.36.2"
	plan = r.plan(t, bumped)
	if len(plan.Changes) == 0 {
		t.Fatal("a version bump plans nothing")
	}
	for _, c := range plan.Changes {
		if c.Phase != diff.PhaseHosts {
			t.Errorf("a version bump plans %s %s", c.Action, c.Address)
		}
	}
}

// TestPlanOfALostController: a converged cluster of three controllers
// whose second controller's server is deleted by hand plans, as drift,
// its member's removal before the server is made again, its join with
// the members that run, and its files; those that carry its certificates
// are known after apply (the apply issues them anew), while its etcd.env
// is known: it joins the three. Its running peers' files do not change.
func TestPlanOfALostController(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	demo := spec(t, "demo", "", 0)
	demo.Spec.Controllers.Count = 3
	r.converge(t, demo)
	if plan := r.plan(t, demo); !plan.Empty() {
		t.Fatalf("converged cluster plans changes %v, drift %v", addresses(plan.Changes), addresses(plan.Drift))
	}
	if err := servers.Delete(context.Background(), r.clients.Compute, r.serverID(t, "demo-controller-1")).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	plan := r.plan(t, demo)
	if len(plan.Changes) != 0 {
		t.Errorf("changes besides the drift: %v", addresses(plan.Changes))
	}
	byAddr := map[string]diff.Change{}
	for _, c := range plan.Drift {
		byAddr[c.Address.String()+" "+c.Action.String()] = c
		if c.Address.OnHost() && c.Address.Host != "demo-controller-1" {
			t.Errorf("a running host changes: %s %s", c.Action, c.Address)
		}
	}
	for _, want := range []string{
		"host/demo-controller-1/etcd-member delete", "openstack/server/demo-controller-1 create",
		"host/demo-controller-1/etcd-member create", "host/demo-controller-1/etcd-member update", "host/demo-controller-1/health check",
	} {
		if _, ok := byAddr[want]; !ok {
			t.Errorf("no %s in the drift: %v", want, addresses(plan.Drift))
		}
	}
	for path, unknown := range map[string]bool{
		"/etc/kubernetes/pki/apiserver.crt": true, "/etc/kubernetes/pki/etcd/peer.crt": true,
		"/etc/kubernetes/manifests/kube-apiserver.yaml": true, "/etc/kubernetes/etcd.env": false,
	} {
		c, ok := byAddr["host/demo-controller-1"+path+" upload"]
		if !ok {
			t.Errorf("no upload of %s", path)
			continue
		}
		if got := c.After["sha256"].Unknown; got != unknown {
			t.Errorf("%s: known after apply %v, want %v", path, got, unknown)
		}
	}
}

// convergedFleet is n clusters of demo's shape (one controller, one
// worker) converged by hand, planned once to warm the connection.
func convergedFleet(tb testing.TB, n int) (*rig, []*schemas.Cluster) {
	tb.Helper()
	r := newRig(tb)
	cloudtest.RoomFor(tb, r.dir, r.clients)
	var fleet []*schemas.Cluster
	for i := range n {
		c := spec(tb, "demo", fmt.Sprintf("c%03d", i), i)
		c.Spec.Network.ExternalNetwork = "internet"
		c.Spec.WorkerPools[0].Count = 1
		fleet = append(fleet, c)
	}
	r.converge(tb, fleet...)
	r.plan(tb, fleet...)
	return r, fleet
}

// TestPlanCostDoesNotGrowWithClusters: planning 1, 10 and 100 converged
// clusters costs the same number of API calls, and plans nothing.
func TestPlanCostDoesNotGrowWithClusters(t *testing.T) {
	t.Parallel()
	counts := map[int]int64{}
	for _, n := range []int{1, 10, 100} {
		r, fleet := convergedFleet(t, n)
		r.sim.ResetCounters()
		plan := r.plan(t, fleet...)
		if !plan.Empty() {
			t.Fatalf("%d converged clusters plan %d changes, %d drift", n, len(plan.Changes), len(plan.Drift))
		}
		var total int64
		for route, k := range r.sim.Counters() {
			total += k
			t.Logf("%d clusters: %s %d", n, route, k)
		}
		counts[n] = total
	}
	if counts[1] != counts[10] || counts[10] != counts[100] {
		t.Errorf("API calls of a plan by cluster count: %v, want the same", counts)
	}
}

// TestPlanForgetsOrDeletesAClusterThatLeftTheFleet: per the deletion
// policy last applied.
func TestPlanForgetsOrDeletesAClusterThatLeftTheFleet(t *testing.T) {
	t.Parallel()
	for _, policy := range []schemas.DeletionPolicy{schemas.DeletionRetain, schemas.DeletionDelete} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			demo := spec(t, "demo", "", 0)
			demo.Spec.DeletionPolicy = policy
			r.converge(t, demo)
			plan := r.plan(t)
			got := addresses(plan.Changes)
			if got["state/demo"] != diff.ActionForget {
				t.Errorf("state/demo: %v, want forget", got["state/demo"])
			}
			deletes := 0
			for _, a := range got {
				if a == diff.ActionDelete {
					deletes++
				}
			}
			switch policy {
			case schemas.DeletionRetain:
				if deletes != 0 || len(plan.Warnings) != 1 {
					t.Errorf("Retain: %d deletes, warnings %v; want none and one warning", deletes, plan.Warnings)
				}
			case schemas.DeletionDelete:
				if got["openstack/server/demo-controller-0"] != diff.ActionDelete || got["openstack/network/demo"] != diff.ActionDelete {
					t.Errorf("Delete: %v", got)
				}
			}
			// --cluster of another cluster leaves it alone.
			res, err := r.planner.Plan(context.Background(), reconciler.Request{Only: "other"})
			if err != nil || !res.Plan.Empty() || len(res.Plan.Warnings) != 0 {
				t.Errorf("plan of another cluster: %v, %+v", err, res.Plan)
			}
		})
	}
}

func TestPlanRefusesAResyncWithoutHosts(t *testing.T) {
	t.Parallel()
	p := &reconciler.Planner{}
	if _, err := p.Plan(context.Background(), reconciler.Request{Resync: true}); !errors.Is(err, reconciler.ErrNoResync) {
		t.Errorf("err %v, want reconciler.ErrNoResync", err)
	}
}

// TestResyncReadsTheHosts: the ledger is trusted until a resync reads the
// hosts over SSH through the gateway: a file the ledger says was pushed
// and the host lacks, or holds other bytes of, is drift; a file that
// matches is not.
func TestResyncReadsTheHosts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	t.Cleanup(hosts.Close)
	r.planner.Hosts = hosts
	demo := spec(t, "demo", "", 0)
	r.converge(t, demo)
	cloudtest.WaitHosts(t, r.clients)
	plan := r.resync(t, demo)
	drift := map[string]string{}
	for _, c := range plan.Drift {
		drift[c.Address.String()] = c.Reason
	}
	const good, bad = "host/demo-default-0/etc/kubernetes/kubelet.env", "host/demo-controller-0/etc/kubernetes/kubelet.env"
	if drift[good] != "missing on the host" || drift[bad] != "missing on the host" {
		t.Fatalf("nothing pushed yet, drift says %q and %q", drift[good], drift[bad])
	}
	if len(plan.Changes) != 0 {
		t.Errorf("changes besides drift: %v", addresses(plan.Changes))
	}

	// Push the right kubelet.env to the worker, another to the controller.
	obs, err := cloud.Observe(ctx, r.clients, r.owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]diff.Resource{}
	for _, x := range obs.Clusters["demo"] {
		res[x.Address().String()] = x
	}
	out, err := render.Cluster(ctx, r.store, demo, render.Options{Now: now,
		APIFloatingIP: netip.MustParseAddr(res["openstack/floating-ip/demo-api"].Attrs["address"].Value)})
	if err != nil {
		t.Fatal(err)
	}
	var kubeletEnv []byte
	for _, h := range out.Assets.Hosts {
		for _, f := range h.Files {
			if h.Name == "demo-default-0" && f.Path == "/etc/kubernetes/kubelet.env" {
				kubeletEnv = f.Data
			}
		}
	}
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	put(t, dialHost(t, r, res, "demo-default-0", gw), "/etc/kubernetes/kubelet.env", kubeletEnv)
	put(t, dialHost(t, r, res, "demo-controller-0", gw), "/etc/kubernetes/kubelet.env", []byte("KUBELET_VERSION=edited-by-hand\n"))

	plan = r.resync(t, demo)
	drift = map[string]string{}
	for _, c := range plan.Drift {
		drift[c.Address.String()] = c.Reason
	}
	if reason, ok := drift[good]; ok {
		t.Errorf("%s matches the ledger, yet is drift: %s", good, reason)
	}
	if drift[bad] != "changed on the host since the last apply" {
		t.Errorf("%s edited by hand: drift %q", bad, drift[bad])
	}
	if got := addresses(plan.Drift)["host/demo-controller-0/units/kubelet.service"]; got != diff.ActionRestart {
		t.Errorf("the kubelet of the edited host is not restarted: %v", got)
	}

	// Without a resync the ledger is trusted: nothing to do.
	if plan := r.plan(t, demo); !plan.Empty() {
		t.Errorf("plan without resync: %v, drift %v", addresses(plan.Changes), addresses(plan.Drift))
	}
}

// dialHost opens SSH to a server of the rig's cluster: the gateway through
// the edge (gw nil), another host through gw.
func dialHost(t *testing.T, r *rig, res map[string]diff.Resource, name string, gw *ssh.Client) *ssh.Client {
	t.Helper()
	address := res["openstack/floating-ip/"+name].Attrs["address"].Value + ":22"
	if gw != nil {
		address = res["openstack/port/"+name].Attrs["fixed_ip"].Value + ":22"
	}
	return cloudtest.DialHost(t, r.store, r.clients, r.sim.Edge(), "demo", res["openstack/server/"+name].ID, address, gw)
}

// put writes a file on a host as an operator would: root, behind sudo.
func put(t *testing.T, c *ssh.Client, file string, data []byte) {
	t.Helper()
	if _, err := sshx.RunInput(context.Background(), c, sshx.Sudo("install -D -m 0644 -- /dev/stdin "+file), data); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkPlan plans a fleet of converged clusters (demo's shape: one
// controller, one worker) against the simulator: render, observe, ledger
// and diff, with a warm connection.
func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			r, fleet := convergedFleet(b, n)
			for b.Loop() {
				if p := r.plan(b, fleet...); !p.Empty() {
					b.Fatal("a converged fleet plans changes")
				}
			}
		})
	}
}

// TestPlanRendersOnlyWhatChanged: a cluster's desired state is rendered
// again only when what it is rendered from changed: its spec, its
// material in the store (a certificate deleted: issued again, the files
// that carry it uploaded), or the planner's clock past an hour (a
// certificate coming due); a quiet fleet's plan renders nothing.
func TestPlanRendersOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	clk := &clock{}
	r.planner.Now = clk.now
	alpha, beta := spec(t, "demo", "alpha", 1), spec(t, "demo", "beta", 2)
	r.apply(t, alpha, beta)
	plan := func(fleet ...*schemas.Cluster) (int, *diff.Plan) {
		t.Helper()
		res, err := r.planner.Plan(ctx, request(fleet...))
		if err != nil {
			t.Fatal(err)
		}
		return res.Renders, res.Plan
	}
	if n, p := plan(alpha, beta); n != 2 || !p.Empty() {
		t.Errorf("the first plan after the apply: %d renders, empty %v; want 2 (the apply's render issued material: not kept)", n, p.Empty())
	}
	if n, p := plan(alpha, beta); n != 0 || !p.Empty() {
		t.Errorf("a quiet fleet's plan: %d renders, empty %v; want none", n, p.Empty())
	}
	labelled := spec(t, "demo", "beta", 2)
	labelled.Spec.WorkerPools[0].Labels = map[string]string{"tier": "web"}
	if n, p := plan(alpha, labelled); n != 1 || p.Empty() {
		t.Errorf("one spec changed: %d renders, empty %v; want 1 and a plan", n, p.Empty())
	}
	if n, p := plan(alpha, beta); n != 1 || !p.Empty() {
		t.Errorf("the spec back: %d renders, empty %v; want 1 (a cluster's last render is kept, not every one) and no change", n, p.Empty())
	}
	keys, err := r.store.List(ctx, state.KeysOf(r.store).PKI("alpha"))
	if err != nil {
		t.Fatal(err)
	}
	crt := ""
	for k := range keys {
		if strings.HasSuffix(k, "/apiserver-alpha-controller-0.crt") {
			crt = k
		}
	}
	if crt == "" {
		t.Fatalf("no apiserver certificate in %v", slices.Sorted(maps.Keys(keys)))
	}
	if err := r.store.Delete(ctx, crt); err != nil {
		t.Fatal(err)
	}
	n, p := plan(alpha, beta)
	if n != 2 || !slices.ContainsFunc(p.Changes, func(c diff.Change) bool {
		return c.Cluster == "alpha" && c.Address.Name == "/etc/kubernetes/pki/apiserver.crt"
	}) || slices.ContainsFunc(p.Changes, func(c diff.Change) bool { return c.Cluster == "beta" }) {
		t.Errorf("alpha's apiserver.crt deleted from the store: %d renders, changes %v; want alpha's two (the second for what it issues), "+
			"its certificate uploaded, nothing of beta", n, addresses(p.Changes))
	}
	clk.advance(2 * time.Hour)
	if n, _ := plan(alpha, beta); n != 3 {
		t.Errorf("two hours later: %d renders, want alpha's two and beta's (a kept state serves an hour)", n)
	}
}

// TestPlanReadsOnlyLedgersWritten: a quiet fleet's plan reads no ledger
// (each is kept from the plan before while the store's changes say none
// of its records was written); a record written, by any writer, makes the
// next plan read that cluster's ledger again and plan from what it says;
// a write outside the ledgers reads none.
func TestPlanReadsOnlyLedgersWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	alpha, beta := spec(t, "demo", "alpha", 1), spec(t, "demo", "beta", 1)
	r.apply(t, alpha, beta)
	plan := func() (int, *diff.Plan) {
		t.Helper()
		res, err := r.planner.Plan(ctx, request(alpha, beta))
		if err != nil {
			t.Fatal(err)
		}
		return res.LedgerReads, res.Plan
	}
	plan()
	if n, p := plan(); n != 0 || !p.Empty() {
		t.Fatalf("a quiet fleet's plan read %d ledgers (empty %v), want none", n, p.Empty())
	}
	// A file record of beta's worker says another sha256: its ledger is
	// read again, and the plan pushes the file anew.
	k := state.KeysOf(r.store)
	files, err := r.store.List(ctx, k.HostFiles("beta", "beta-default-0"))
	if err != nil || len(files) == 0 {
		t.Fatalf("beta's worker has no file records (%v)", err)
	}
	key := slices.Sorted(maps.Keys(files))[0]
	if err := r.store.Put(ctx, key, []byte(`{"sha256":"0000"}`)); err != nil {
		t.Fatal(err)
	}
	n, p := plan()
	path := strings.TrimPrefix(key, strings.TrimSuffix(k.HostFiles("beta", "beta-default-0"), "/"))
	if n != 1 || !slices.ContainsFunc(p.Changes, func(c diff.Change) bool {
		return c.Cluster == "beta" && c.Address.Name == path
	}) {
		t.Errorf("a file record of beta written: %d ledgers read (want 1), changes %v (want %s pushed)", n, addresses(p.Changes), path)
	}
	if err := r.store.Put(ctx, key, files[key]); err != nil {
		t.Fatal(err)
	}
	if n, p := plan(); n != 1 || !p.Empty() {
		t.Errorf("the record back: %d ledgers read, empty %v; want 1 and no change", n, p.Empty())
	}
	// A status and a journal entry are no ledger records.
	if err := r.store.Put(ctx, k.Status("alpha"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.store.Put(ctx, k.Journal("alpha", "x"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if n, _ := plan(); n != 0 {
		t.Errorf("writes outside the ledgers: %d ledgers read, want none", n)
	}
	// A record deleted is a write: alpha's manifest forgotten is applied
	// again, as the ledger read from the store says.
	manifests, err := r.store.List(ctx, k.Manifests("alpha"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("alpha has no manifest records (%v)", err)
	}
	key = slices.Sorted(maps.Keys(manifests))[0]
	if err := r.store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(key, k.Manifests("alpha"))
	if n, p := plan(); n != 1 || !slices.ContainsFunc(p.Changes, func(c diff.Change) bool {
		return c.Cluster == "alpha" && strings.Contains(c.Address.Name, name)
	}) {
		t.Errorf("alpha's record of %s deleted: %d ledgers read, changes %v; want 1 and the manifest applied", name, n, addresses(p.Changes))
	}
	// The application credential's secret rotated in the store: the next
	// plan, which kept the secret it unsealed before, reads it again and
	// pushes alpha's cloud.conf anew.
	if err := r.store.Put(ctx, key, manifests[key]); err != nil {
		t.Fatal(err)
	}
	if n, p := plan(); n != 1 || !p.Empty() {
		t.Fatalf("before the rotation: %d ledgers read, empty %v", n, p.Empty())
	}
	if err := reconciler.RecordAppCredential(ctx, r.store, "alpha", "another-secret"); err != nil {
		t.Fatal(err)
	}
	if _, p := plan(); !slices.ContainsFunc(p.Changes, func(c diff.Change) bool {
		return c.Cluster == "alpha" && c.Address.Name == assets.PathCloudConf
	}) {
		t.Errorf("alpha's secret rotated: changes %v, want its cloud.conf pushed", addresses(p.Changes))
	}
}

package reconciler_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	corev1 "k8s.io/api/core/v1"

	"opke.dev/opke/backup"
	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/cloudsim/kubestub"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// clock is a test's movable clock: the wall clock plus an offset.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().UTC().Add(c.offset)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// applyPlan plans the fleet and applies it with a; it returns the plan,
// the summary and apply's error.
func (r *rig) applyPlan(t *testing.T, a *reconciler.Applier, fleet ...*schemas.Cluster) (*diff.Plan, *reconciler.Summary, error) {
	t.Helper()
	req := request(fleet...)
	res, err := r.planner.Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := a.Apply(context.Background(), req, res.Plan)
	return res.Plan, sum, err
}

// mustApply applies the fleet and fails the test on a failed step.
func (r *rig) mustApply(t *testing.T, a *reconciler.Applier, fleet ...*schemas.Cluster) *diff.Plan {
	t.Helper()
	p, sum, err := r.applyPlan(t, a, fleet...)
	if err != nil {
		for _, f := range sum.Failed {
			t.Errorf("%s %s: %s %v", f.Change.Action, f.Change.Address, f.State, f.Err)
		}
		t.Fatal(err)
	}
	return p
}

// versions are the Kubernetes versions the ledger says the hosts run.
func (r *rig) versions(t *testing.T, cluster string) map[string]string {
	t.Helper()
	prefix := r.store.Key(cluster, "hosts") + "/"
	kv, err := r.store.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range kv {
		if host, ok := strings.CutSuffix(strings.TrimPrefix(k, prefix), "/version"); ok && !strings.Contains(host, "gateway") {
			out[host] = string(v)
		}
	}
	return out
}

// restarts returns, per host, the times its kubelet was restarted since.
func restarts(t *testing.T, sim *cloudsim.Sim, hosts []string, since time.Time) map[string][]time.Time {
	t.Helper()
	out := map[string][]time.Time{}
	for _, h := range hosts {
		evs, err := sim.HostEvents(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Command == "systemctl restart kubelet.service" && !ev.Time.Before(since) {
				out[h] = append(out[h], ev.Time)
			}
		}
	}
	return out
}

// observed is the demo cluster's resources by address.
func (r *rig) observed(t *testing.T) map[string]diff.Resource { return r.observedOf(t, "demo") }

// observedOf is a cluster's resources by address.
func (r *rig) observedOf(t *testing.T, cluster string) map[string]diff.Resource {
	t.Helper()
	obs, err := cloud.Observe(context.Background(), r.clients, r.owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]diff.Resource{}
	for _, x := range obs.Clusters[cluster] {
		out[x.Address().String()] = x
	}
	return out
}

// getter GETs a path of the API into out, failing on any status but 200.
func getter(api *http.Client, base string) func(path string, out any) error {
	return func(path string, out any) error {
		resp, err := api.Get(base + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s %.200s", path, resp.Status, b)
		}
		return json.Unmarshal(b, out)
	}
}

// apiClient talks to a controller's API server through the gateway, as
// admin: what kubectl with the admin kubeconfig would see. The func
// returns the TLS state of the last connection it made.
func (r *rig) apiClient(t *testing.T, res map[string]diff.Resource, controller string) (*http.Client, string, func() tls.ConnectionState) {
	t.Helper()
	ctx := context.Background()
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	b, err := pki.Load(ctx, r.store, "demo", pki.CA, pki.Admin)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := b.TLS(pki.CA, pki.Admin)
	if err != nil {
		t.Fatal(err)
	}
	// The transport dials on goroutines of its own, and a dial abandoned
	// by a request's timeout may still finish beside the next one's.
	var (
		mu    sync.Mutex
		state tls.ConnectionState
	)
	tr := &http.Transport{TLSClientConfig: cfg, DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		raw, err := gw.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(addr)
		c := cfg.Clone()
		c.ServerName = host
		tc := tls.Client(raw, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		mu.Lock()
		state = tc.ConnectionState()
		mu.Unlock()
		return tc, nil
	}}
	t.Cleanup(tr.CloseIdleConnections)
	ip := res["openstack/port/"+controller].Attrs["fixed_ip"].Value
	last := func() tls.ConnectionState {
		mu.Lock()
		defer mu.Unlock()
		return state
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, "https://" + ip + ":6443", last
}

func (r *rig) apiVersion(t *testing.T, res map[string]diff.Resource, controller string) string {
	t.Helper()
	c, base, _ := r.apiClient(t, res, controller)
	resp, err := c.Get(base + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v.GitVersion
}

// TestDayTwo runs a three-controller, three-worker cluster through the
// operations of its life against the simulator, with real etcd members
// and API servers behind real SSH: a minor upgrade rolled one host at a
// time behind health gates; an upgrade whose gate fails on the second
// controller, a revert refused with the restore command, a forward fix;
// a certificate about to expire rotated; a scale-in whose drain a
// disruption budget refuses until it lets go; scheduled backups with
// retention and restore drills, and a corrupted snapshot caught.
func TestDayTwo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	clk := &clock{}
	r.planner.Now = clk.now
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	t.Cleanup(hosts.Close)
	a := &reconciler.Applier{Planner: r.planner, Hosts: hosts, Parallel: 8, GateTimeout: 30 * time.Second, GateInterval: 200 * time.Millisecond}

	demo := spec(t, "demo", "", 0)
	demo.Spec.Kubernetes.Version = "v1.30.2"
	demo.Spec.Controllers.Count = 3
	demo.Spec.WorkerPools[0].Count = 3
	demo.Spec.Upgrade.DrainTimeout = schemas.Duration{Duration: 2 * time.Second}
	demo.Spec.Backup = &schemas.Backup{Interval: schemas.Duration{Duration: time.Hour}, Retain: 3, Container: "opke-backups", Drill: true}
	r.mustApply(t, a, demo)
	controllers := []string{"demo-controller-0", "demo-controller-1", "demo-controller-2"}
	workers := []string{"demo-default-0", "demo-default-1", "demo-default-2"}
	nodes := slices.Concat(controllers, workers)
	box := backup.Objects{Client: r.clients.ObjectStore, Container: "opke-backups"}

	t.Run("minor upgrade rolls one host at a time behind its gate", func(t *testing.T) {
		before := serverIDs(r.checkClean(t, "before the upgrade"))
		since := time.Now()
		demo.Spec.Kubernetes.Version = "v1.31.1"
		plan := r.mustApply(t, a, demo)
		// Files, restarts and gates, and (a minor) each node drained
		// before its kubelet restarts and uncordoned after its gate.
		drained := map[string]bool{}
		for _, c := range plan.Changes {
			switch {
			case c.Action == diff.ActionDrain:
				drained[c.Address.Host] = true
			case c.Action == diff.ActionUpdate && c.Address.Target == diff.TargetNode && c.After["unschedulable"].Value == "false":
			case c.Phase != diff.PhaseHosts:
				t.Errorf("the upgrade plans %s %s", c.Action, c.Address)
			}
		}
		if len(drained) != len(nodes) {
			t.Errorf("the minor upgrade drains %v, want every node", drained)
		}
		got := restarts(t, r.sim, nodes, since)
		for i, h := range nodes {
			if len(got[h]) != 1 {
				t.Fatalf("%s restarted its kubelet %d times: %v", h, len(got[h]), got)
			}
			if i > 0 && !got[h][0].After(got[nodes[i-1]][0]) {
				t.Errorf("%s restarted at %s, before %s (%s): not one host at a time, controllers first",
					h, got[h][0].Format(time.StampMicro), nodes[i-1], got[nodes[i-1]][0].Format(time.StampMicro))
			}
		}
		want := map[string]string{}
		for _, h := range nodes {
			want[h] = "v1.31.1"
		}
		if d := cmp.Diff(want, r.versions(t, "demo")); d != "" {
			t.Errorf("versions the hosts run (-want +got):\n%s", d)
		}
		res := r.observed(t)
		for _, ctl := range controllers {
			if v := r.apiVersion(t, res, ctl); v != "v1.31.1" {
				t.Errorf("%s /version: %s", ctl, v)
			}
		}
		if after := serverIDs(r.checkClean(t, "upgraded")); !maps.Equal(before, after) {
			t.Errorf("a server or its user_data changed in the upgrade:\n%v\n%v", before, after)
		}
		recs, err := reconciler.Backups(ctx, r.store, "demo")
		if err != nil || !slices.ContainsFunc(recs, func(r *backup.Record) bool { return r.Reason == backup.ReasonBeforeRollout }) {
			t.Errorf("no snapshot before the rollout: %v %v", recs, err)
		}
	})

	t.Run("a failing gate halts the rollout; a revert is refused; a forward fix completes", func(t *testing.T) {
		r.sim.CrashKubelet("demo-controller-1", "v1.32.0")
		defer r.sim.CrashKubelet("demo-controller-1", "")
		short := *a
		short.GateTimeout = 3 * time.Second
		since := time.Now()
		demo.Spec.Kubernetes.Version = "v1.32.0"
		_, sum, err := r.applyPlan(t, &short, demo)
		if !errors.Is(err, reconciler.ErrFailed) {
			t.Fatalf("apply: %v", err)
		}
		gateErr := onlyFailure(t, sum, diff.GateAddress("demo-controller-1"))
		if !errors.Is(gateErr, reconciler.ErrGate) || !strings.Contains(gateErr.Error(), "demo-controller-1") ||
			!strings.Contains(gateErr.Error(), "kubelet.service is activating") {
			t.Errorf("the halt does not name the host and the reason: %v", gateErr)
		}
		want := map[string]string{"demo-controller-0": "v1.32.0", "demo-controller-1": "v1.31.1", "demo-controller-2": "v1.31.1",
			"demo-default-0": "v1.31.1", "demo-default-1": "v1.31.1", "demo-default-2": "v1.31.1"}
		if d := cmp.Diff(want, r.versions(t, "demo")); d != "" {
			t.Errorf("versions after the halt (-want +got):\n%s", d)
		}
		got := restarts(t, r.sim, nodes, since)
		for _, h := range slices.Concat(controllers[2:], workers) {
			if len(got[h]) > 0 {
				t.Errorf("%s was restarted after the halt", h)
			}
		}

		applied, err := reconciler.AppliedSpecs(ctx, r.store)
		if err != nil {
			t.Fatal(err)
		}
		facts, err := reconciler.Facts(ctx, r.store, []string{"demo"})
		if err != nil {
			t.Fatal(err)
		}
		revert := *demo
		revert.Spec.Kubernetes.Version = "v1.31.1"
		problems := schemas.CheckTransition(applied["demo"].Spec, &revert, facts["demo"])
		if len(problems) != 1 || facts["demo"].Snapshot == "" ||
			!strings.Contains(problems[0].Message, "opke restore --cluster demo --snapshot "+facts["demo"].Snapshot) {
			t.Errorf("the revert is not refused with the restore hint: %v (facts %+v)", problems, facts["demo"])
		}

		demo.Spec.Kubernetes.Version = "v1.32.1"
		if p := schemas.CheckTransition(applied["demo"].Spec, demo, facts["demo"]); len(p) != 0 {
			t.Fatalf("the forward fix is refused: %v", p)
		}
		r.mustApply(t, a, demo)
		for _, h := range nodes {
			want[h] = "v1.32.1"
		}
		if d := cmp.Diff(want, r.versions(t, "demo")); d != "" {
			t.Errorf("versions after the forward fix (-want +got):\n%s", d)
		}
		if v := r.apiVersion(t, r.observed(t), "demo-controller-1"); v != "v1.32.1" {
			t.Errorf("demo-controller-1 /version after the fix: %s", v)
		}
	})

	t.Run("a certificate about to expire is rotated with no server replaced", func(t *testing.T) {
		before := serverIDs(r.checkClean(t, "before the rotation"))
		name := pki.APIServer("demo-controller-2")
		old := shortLived(t, r, name, 10*24*time.Hour)
		plan := r.plan(t, demo)
		byAddr := addresses(plan.Changes)
		for _, want := range []struct {
			address string
			action  diff.Action
		}{
			{"host/demo-controller-2/etc/kubernetes/pki/apiserver.crt", diff.ActionUpload},
			{"host/demo-controller-2/units/kubelet.service", diff.ActionRestart},
			{diff.GateAddress("demo-controller-2").String(), diff.ActionCheck},
		} {
			if byAddr[want.address] != want.action {
				t.Errorf("the rotation does not plan %s %s: %v", want.action, want.address, byAddr)
			}
		}
		r.mustApply(t, a, demo)
		if after := serverIDs(r.checkClean(t, "rotated")); !maps.Equal(before, after) {
			t.Errorf("a server changed in the rotation")
		}
		c, base, state := r.apiClient(t, r.observed(t), "demo-controller-2")
		resp, err := c.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		served := state().PeerCertificates[0]
		if served.SerialNumber.Cmp(old.SerialNumber) == 0 || time.Until(served.NotAfter) < 300*24*time.Hour {
			t.Errorf("demo-controller-2 serves a certificate valid until %s (the old one: %s)", served.NotAfter, old.NotAfter)
		}
	})

	t.Run("a CA rotation in three commits rolls every host and restarts the workloads, no server replaced; generation 1 is gone at the end", func(t *testing.T) {
		before := serverIDs(r.checkClean(t, "before the CA rotation"))
		annotations := map[string]bool{}
		for _, step := range []struct {
			phase  schemas.RotationPhase
			issuer string // of the certificate the API servers serve
		}{
			{schemas.RotationTrust, "kubernetes"},
			{schemas.RotationReissue, "kubernetes.2"},
			{schemas.RotationComplete, "kubernetes.2"},
		} {
			demo.Spec.PKI = &schemas.PKI{Generation: 2, Phase: step.phase}
			plan := r.mustApply(t, a, demo)
			byAddr := addresses(plan.Changes)
			if byAddr[diff.WorkloadsAddress("demo").String()] != diff.ActionRestart {
				t.Errorf("%s: no workloads restart: %v", step.phase, byAddr)
			}
			for _, c := range plan.Changes {
				if c.Phase != diff.PhaseHosts {
					t.Errorf("%s plans %s %s", step.phase, c.Action, c.Address)
				}
			}
			res := r.observed(t)
			for _, ctl := range controllers {
				c, base, state := r.apiClient(t, res, ctl)
				resp, err := c.Get(base + "/readyz")
				if err != nil {
					t.Fatalf("%s: %s: %v", step.phase, ctl, err)
				}
				resp.Body.Close()
				if got := state().PeerCertificates[0].Issuer.CommonName; got != step.issuer {
					t.Errorf("%s: %s serves a certificate of %q, want %q", step.phase, ctl, got, step.issuer)
				}
			}
			objects, err := r.sim.KubeObjects("demo-controller-0")
			if err != nil {
				t.Fatal(err)
			}
			var restarted int
			phase := map[string]bool{}
			for key, raw := range objects.Applied {
				if !strings.HasPrefix(key, "apps/v1/") {
					continue
				}
				var w struct { // a Deployment, DaemonSet or StatefulSet
					Spec struct{ Template corev1.PodTemplateSpec }
				}
				if err := json.Unmarshal(raw, &w); err != nil {
					t.Fatal(err)
				}
				v := w.Spec.Template.Annotations["opke.dev/trust-sha256"]
				if v == "" || annotations[v] {
					t.Errorf("%s: %s was not restarted for this phase (annotation %q)", step.phase, key, v)
				}
				phase[v] = true
				restarted++
			}
			if len(phase) != 1 {
				t.Errorf("%s: the workloads were restarted for %d different bundles", step.phase, len(phase))
			}
			maps.Copy(annotations, phase)
			if restarted < 2 {
				t.Errorf("%s: %d workloads restarted, want kube-proxy, CoreDNS and flannel's at least", step.phase, restarted)
			}
			if objects.RootCA == "" || len(objects.Nodes) != len(nodes) {
				t.Errorf("%s: the cluster lost its nodes or its published CA: %d nodes", step.phase, len(objects.Nodes))
			}
		}
		held, err := r.store.List(ctx, r.store.Key("demo", "pki")+"/")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ca.key", "etcd-ca.key", "front-proxy-ca.key", "sa.key"} {
			if _, ok := held[r.store.Key("demo", "pki", f)]; ok {
				t.Errorf("%s of generation 1 is still in the store after the rotation", f)
			}
		}
		for address, action := range addresses(r.plan(t, demo).Changes) {
			if action != diff.ActionBackup { // a scheduled one may be due
				t.Errorf("after the rotation the plan has %s %s", action, address)
			}
		}
		if after := serverIDs(r.checkClean(t, "after the CA rotation")); !maps.Equal(before, after) {
			t.Errorf("a server changed in the CA rotation:\n%v\n%v", before, after)
		}
	})

	t.Run("scale in drains highest first, a refusing budget and a pod that does not terminate fail after the timeout, named; DaemonSet, mirror and finished pods are left", func(t *testing.T) {
		demo.Spec.WorkerPools[0].Count = 5
		r.mustApply(t, a, demo)
		objects := kubestub.Objects{
			Pods: []kubestub.Pod{
				{Namespace: "default", Name: "web-0", Node: "demo-default-4", Labels: map[string]string{"app": "web"}},
				{Namespace: "default", Name: "stuck-0", Node: "demo-default-4", Stuck: true},
				{Namespace: "default", Name: "batch-0", Node: "demo-default-3"},
				{Namespace: "default", Name: "done-0", Node: "demo-default-3", Phase: "Succeeded"},
				{Namespace: "default", Name: "db-0", Node: "demo-default-1", Labels: map[string]string{"app": "db"}},
				// They come straight back when evicted: a drain that
				// waits for them never ends.
				{Namespace: "kube-system", Name: "kube-proxy-a", Node: "demo-default-4", Owner: "DaemonSet/kube-proxy"},
				{Namespace: "kube-system", Name: "kube-proxy-b", Node: "demo-default-3", Owner: "DaemonSet/kube-proxy"},
				{Namespace: "kube-system", Name: "static-demo-default-2", Node: "demo-default-2", Mirror: true},
			},
			Budgets: []kubestub.Budget{{Namespace: "default", Name: "web", Selector: map[string]string{"app": "web"}, DisruptionsAllowed: 0}},
		}
		if err := r.sim.SetKubeObjects("demo-controller-0", objects); err != nil {
			t.Fatal(err)
		}
		demo.Spec.WorkerPools[0].Count = 2
		started := time.Now()
		_, sum, err := r.applyPlan(t, a, demo)
		if !errors.Is(err, reconciler.ErrFailed) {
			t.Fatalf("apply: %v", err)
		}
		drainErr := onlyFailure(t, sum, diff.DrainAddress("demo-default-4"))
		if !errors.Is(drainErr, reconciler.ErrDrain) || !strings.Contains(drainErr.Error(), "pod default/web-0") ||
			!strings.Contains(drainErr.Error(), "disruption budget web ") || time.Since(started) < 2*time.Second {
			t.Errorf("the drain did not fail after the 2s timeout naming the pod and budget: %v", drainErr)
		}
		if !strings.Contains(drainErr.Error(), "pod default/stuck-0: terminating") || strings.Contains(drainErr.Error(), "kube-proxy") {
			t.Errorf("the drain does not name the pod that did not terminate, or names a DaemonSet's: %v", drainErr)
		}
		if _, ok := r.observed(t)["openstack/server/demo-default-4"]; !ok {
			t.Error("demo-default-4 was deleted although its drain failed")
		}

		objects.Budgets[0].DisruptionsAllowed = 1
		objects.Pods[1].Stuck = false
		if err := r.sim.SetKubeObjects("demo-controller-0", objects); err != nil {
			t.Fatal(err)
		}
		r.mustApply(t, a, demo)
		r.checkClean(t, "scaled in")
		res := r.observed(t)
		var got []string
		for addr := range res {
			if name, ok := strings.CutPrefix(addr, "openstack/server/demo-default-"); ok {
				got = append(got, name)
			}
			if strings.HasPrefix(addr, "openstack/member/demo-default") || strings.HasPrefix(addr, "openstack/floating-ip/demo-default") {
				t.Errorf("left behind: %s", addr)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"0", "1"}) {
			t.Errorf("workers left: %v, want 0 and 1", got)
		}
		inv := cloudtest.Inventory(t, r.clients)
		for _, gone := range []string{"demo-default-2", "demo-default-3", "demo-default-4"} {
			for k := range inv {
				if strings.HasSuffix(k, "/"+gone) {
					t.Errorf("OpenStack still holds %s", k)
				}
			}
			keys, err := r.store.List(ctx, r.store.Key("demo")+"/")
			if err != nil {
				t.Fatal(err)
			}
			for k := range keys {
				if strings.Contains(k, gone) {
					t.Errorf("the store still holds %s", k)
				}
			}
		}
		left, err := r.sim.KubeObjects("demo-controller-0")
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, p := range left.PodsOn("") {
			kept = append(kept, p.Node+" "+p.Namespace+"/"+p.Name)
		}
		// The pods of the removed nodes went with their Node objects, as
		// the pod garbage collector deletes them; the DaemonSet's were
		// never evicted (an eviction makes one again under a new name).
		if d := cmp.Diff([]string{"demo-default-1 default/db-0"}, kept); d != "" {
			t.Errorf("pods left (-want +got):\n%s", d)
		}
		if left.Recreated != 0 {
			t.Errorf("%d DaemonSet pods were evicted", left.Recreated)
		}
		var nodes []string
		for n := range left.Nodes {
			nodes = append(nodes, n)
		}
		slices.Sort(nodes)
		if want := []string{"demo-controller-0", "demo-controller-1", "demo-controller-2", "demo-default-0", "demo-default-1"}; !slices.Equal(nodes, want) {
			t.Errorf("Node objects after the scale-in: %v, want %v", nodes, want)
		}
	})

	t.Run("a controller in ERROR keeps its server while its etcd member answers; once it does not, the plan replaces it", func(t *testing.T) {
		r.planner.Health = hosts
		defer func() { r.planner.Health = nil }()
		admin, err := cloud.Connect(ctx, cloud.Target{File: filepath.Join(r.dir, "clouds.yaml"), Cloud: "sim-admin"})
		if err != nil {
			t.Fatal(err)
		}
		res := r.observed(t)
		id := res["openstack/server/demo-controller-2"].ID
		if err := servers.ResetState(ctx, admin.Compute, id, servers.StateError).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := servers.ResetState(ctx, admin.Compute, id, servers.StateActive).ExtractErr(); err != nil {
				t.Error(err)
			}
		}()
		if p := r.plan(t, demo); !p.Empty() || len(p.Warnings) != 1 ||
			!strings.Contains(p.Warnings[0].Message, "demo-controller-2 is not replaced, its etcd member answering (its server is in ERROR") {
			t.Errorf("a controller in ERROR whose member answers: want no change and a warning: %v %v", addresses(p.Drift), p.Warnings)
		}
		etcd := func(verb string) {
			t.Helper()
			if _, err := sshx.Run(ctx, dialHost(t, r, res, "demo-controller-2", dialHost(t, r, res, "demo-gateway-0", nil)), sshx.Sudo("systemctl "+verb+" etcd-member")); err != nil {
				t.Fatalf("systemctl %s etcd-member: %v", verb, err)
			}
		}
		etcd("stop")
		defer etcd("start")
		p := r.plan(t, demo)
		removed := slices.ContainsFunc(p.Drift, func(c diff.Change) bool {
			return c.Address == diff.MemberAddress("demo-controller-2") && c.Action == diff.ActionDelete
		})
		if got := addresses(p.Drift); !removed || got["openstack/server/demo-controller-2"] != diff.ActionReplace || len(p.Warnings) != 0 {
			t.Errorf("a controller in ERROR whose member is silent: want its member removed and its server replaced: %v %v", got, p.Warnings)
		}
	})

	t.Run("a worker whose kubelet stopped is replaced past unhealthyAfter; two at once are an outage, left alone", func(t *testing.T) {
		r.planner.Health = hosts
		demo.Spec.Remediation = &schemas.Remediation{UnhealthyAfter: schemas.Duration{Duration: 5 * time.Minute}, MaxUnhealthy: 1}
		defer func() { demo.Spec.Remediation, r.planner.Health = nil, nil }()
		res := r.observed(t)
		kubelet := func(host, verb string) { t.Helper(); r.kubelet(t, res, host, verb) }
		if p := r.plan(t, demo); !p.Empty() || len(p.Warnings) != 0 {
			t.Fatalf("healthy workers: the plan is not empty: %v %v %v", addresses(p.Changes), addresses(p.Drift), p.Warnings)
		}
		kubelet("demo-default-0", "stop")
		kubelet("demo-default-1", "stop")
		if p := r.plan(t, demo); !p.Empty() {
			t.Errorf("workers unhealthy for less than unhealthyAfter are replaced: %v", addresses(p.Drift))
		}
		clk.advance(6 * time.Minute)
		if p := r.plan(t, demo); !p.Empty() || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Message, "2 workers have been unhealthy") {
			t.Errorf("two unhealthy workers, maxUnhealthy 1: want nothing done and the outage warned of: %v %v", addresses(p.Drift), p.Warnings)
		}
		kubelet("demo-default-1", "start")
		// A pod on the dead worker that never terminates once evicted:
		// a drain of a worker that runs fails on it after the drain
		// timeout (the scale-in above); the remediation's best-effort
		// drain does not wait for it.
		objects, err := r.sim.KubeObjects("demo-controller-0")
		if err != nil {
			t.Fatal(err)
		}
		objects.Pods = append(objects.Pods, kubestub.Pod{Namespace: "default", Name: "stuck-on-dead", Node: "demo-default-0", Stuck: true})
		if err := r.sim.SetKubeObjects("demo-controller-0", *objects); err != nil {
			t.Fatal(err)
		}
		before := serverIDs(r.checkClean(t, "before the remediation"))
		plan := r.mustApply(t, a, demo)
		want := map[string]diff.Action{
			"host/demo-default-0/drain": diff.ActionDrain, "openstack/server/demo-default-0": diff.ActionReplace,
			"host/demo-default-0/node": diff.ActionDelete, "host/demo-default-0/health": diff.ActionCheck,
		}
		got := addresses(plan.Drift)
		for addr, action := range want {
			if got[addr] != action {
				t.Errorf("the remediation does not %s %s: %v", action, addr, got)
			}
		}
		if len(plan.Changes) != 0 {
			t.Errorf("a remediation is drift: changes %v", addresses(plan.Changes))
		}
		// Its new server gets new material: what carries it is known
		// after apply.
		if i := slices.IndexFunc(plan.Drift, func(c diff.Change) bool {
			return c.Address == diff.FileAddress("demo-default-0", "/etc/kubernetes/kubelet.conf")
		}); i < 0 || !plan.Drift[i].After["sha256"].Unknown {
			t.Errorf("the remediated worker's kubelet.conf is not planned as known after apply (new material): %v", i)
		}
		after := serverIDs(r.checkClean(t, "remediated"))
		for k, id := range before {
			if replaced := k == "server/demo-default-0"; (after[k] != id) != replaced {
				t.Errorf("%s: %s -> %s; want only demo-default-0's server made again", k, id, after[k])
			}
		}
		if p := r.plan(t, demo); !p.Empty() || len(p.Warnings) != 0 {
			t.Errorf("after the remediation the plan is not empty: %v %v", addresses(p.Drift), p.Warnings)
		}
		left, err := r.sim.KubeObjects("demo-controller-0")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := left.Nodes["demo-default-0"]; !ok {
			t.Errorf("the new demo-default-0 did not register its Node: %v", slices.Sorted(maps.Keys(left.Nodes)))
		}
	})

	t.Run("a pool's flavor change rolls its workers one at a time, each Ready before the next is drained", func(t *testing.T) {
		before := serverIDs(r.checkClean(t, "before the roll"))
		workers := workers[:demo.Spec.WorkerPools[0].Count] // the scale-in above left two
		var mu sync.Mutex
		var events []string // "<state> <address>", in the order they came
		roll := a.WithProgress(func(_ context.Context, s reconciler.Step) {
			if s.State == reconciler.StepStarted || s.State == reconciler.StepDone {
				mu.Lock()
				events = append(events, string(s.State)+" "+s.Change.Address.String())
				mu.Unlock()
			}
		})
		demo.Spec.WorkerPools[0].Flavor = "m1.medium"
		defer func() { demo.Spec.WorkerPools[0].Flavor = "m1.small" }()
		plan := r.mustApply(t, roll, demo)
		at := func(event string) int {
			t.Helper()
			i := slices.Index(events, event)
			if i < 0 {
				t.Fatalf("no %q in %v", event, events)
			}
			return i
		}
		for i := 1; i < len(workers); i++ {
			ready, drained := at("done host/"+workers[i-1]+"/health"), at("started host/"+workers[i]+"/drain")
			if drained < ready {
				t.Errorf("%s was drained (event %d) before %s passed its gate (event %d)", workers[i], drained, workers[i-1], ready)
			}
		}
		if started := at("started openstack/server/" + workers[0]); started < at("done host/"+workers[0]+"/drain") {
			t.Errorf("%s's server was replaced before its drain", workers[0])
		}
		for _, c := range slices.Concat(plan.Changes, plan.Drift) {
			if c.Address.Kind == diff.KindServer && !slices.Contains(workers, c.Address.Name) {
				t.Errorf("the pool's flavor change plans %s %s", c.Action, c.Address)
			}
		}
		after := serverIDs(r.checkClean(t, "rolled"))
		for k, id := range before {
			rolled := slices.ContainsFunc(workers, func(w string) bool { return k == "server/"+w })
			if (after[k] != id) != rolled {
				t.Errorf("%s: %s -> %s; want only the pool's servers made again", k, id, after[k])
			}
		}
		if p := r.plan(t, demo); !p.Empty() {
			t.Errorf("after the roll the plan is not empty: %v %v", addresses(p.Changes), addresses(p.Drift))
		}
	})

	t.Run("scheduled backups keep the newest three, each drilled; a corrupted one fails verify", func(t *testing.T) {
		var ids []string
		for range 5 {
			clk.advance(time.Hour)
			plan := r.mustApply(t, a, demo)
			if addresses(plan.Changes)[diff.BackupAddress("demo").String()] != diff.ActionBackup {
				t.Fatalf("no backup planned an interval later: %v", addresses(plan.Changes))
			}
			recs, err := reconciler.Backups(ctx, r.store, "demo")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, recs[len(recs)-1].ID)
		}
		if p := r.plan(t, demo); !p.Empty() {
			t.Errorf("a backup is planned before its interval: %v", addresses(p.Changes))
		}
		listed, err := box.List(ctx, "demo")
		if err != nil {
			t.Fatal(err)
		}
		var scheduled []string
		for _, rec := range listed {
			if rec.Reason == backup.ReasonScheduled {
				scheduled = append(scheduled, rec.ID)
			}
		}
		if d := cmp.Diff(ids[2:], scheduled); d != "" {
			t.Errorf("scheduled snapshots in Swift (-newest three +got):\n%s", d)
		}
		recs, err := reconciler.Backups(ctx, r.store, "demo")
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != len(listed) {
			t.Errorf("the store records %d snapshots, Swift holds %d", len(recs), len(listed))
		}
		for _, rec := range recs {
			if rec.Reason == backup.ReasonScheduled && (rec.Drill == nil || !rec.Drill.Passed) {
				t.Errorf("snapshot %s: drill %+v", rec.ID, rec.Drill)
			}
		}
		newest := recs[len(recs)-1]
		if _, err := reconciler.VerifyBackup(ctx, r.store, box, "demo", newest.ID, clk.now(), reconciler.OpenClusterSnapshot(r.store, "demo")); err != nil {
			t.Errorf("verify a sound snapshot: %v", err)
		}
		// Sealed in Swift: it opens only with the store's key, and only as
		// this cluster's.
		for _, rec := range recs {
			if !rec.Sealed {
				t.Errorf("snapshot %s is stored in the clear", rec.ID)
			}
		}
		if _, err := reconciler.VerifyBackup(ctx, r.store, box, "demo", newest.ID, clk.now(), nil); err == nil {
			t.Error("a sealed snapshot verified without the key")
		}
		if _, err := reconciler.VerifyBackup(ctx, r.store, box, "demo", newest.ID, clk.now(), reconciler.OpenClusterSnapshot(r.store, "other")); !errors.Is(err, backup.ErrCorrupt) {
			t.Errorf("a snapshot opened as another cluster's: %v, want ErrCorrupt", err)
		}
		cloudtest.CorruptObject(t, r.clients, box.Container, newest.Object)
		if _, err := reconciler.VerifyBackup(ctx, r.store, box, "demo", newest.ID, clk.now(), reconciler.OpenClusterSnapshot(r.store, "demo")); !errors.Is(err, backup.ErrCorrupt) {
			t.Errorf("verify a corrupted snapshot: %v", err)
		}
	})
}

// onlyFailure returns the error of the one step that failed (the others
// were skipped), failing the test if another step failed.
func onlyFailure(t *testing.T, sum *reconciler.Summary, address diff.Address) error {
	t.Helper()
	var err error
	for _, f := range sum.Failed {
		if f.State == reconciler.StepFailed {
			if f.Change.Address != address {
				t.Errorf("failed: %s %v", f.Change.Address, f.Err)
			}
			err = f.Err
		}
	}
	return err
}

// shortLived replaces a certificate of the demo cluster in the store with
// one, signed by the same CA for the same names, that expires within
// valid; it returns it.
func shortLived(t *testing.T, r *rig, name string, valid time.Duration) *x509.Certificate {
	t.Helper()
	ctx := context.Background()
	b, err := pki.Load(ctx, r.store, "demo", pki.CA, name)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := b.Get(pki.CA)
	cur, _ := b.Get(name)
	caCert, caKey := parsePair(t, ca)
	old, _ := parsePair(t, cur)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := *old
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(valid)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.PutSecret(ctx, r.store.Key("demo", "pki", name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})); err != nil {
		t.Fatal(err)
	}
	if err := r.store.Put(ctx, r.store.Key("demo", "pki", name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert
}

func parsePair(t *testing.T, m pki.Material) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	cb, _ := pem.Decode(m.Cert)
	kb, _ := pem.Decode(m.Key)
	if cb == nil || kb == nil {
		t.Fatal("material is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

//go:build realhosts

package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	clientv3 "go.etcd.io/etcd/client/v3"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// TestControlPlaneOfThree is make e2e's second stage: a cluster of three
// controllers and a worker comes up on real machines as Kubernetes says
// (every node Ready, three etcd members, three API servers), then rolls a
// minor upgrade (e2eFirst to e2eNext, etcd with it) one controller
// at a time with etcd's quorum kept throughout: a writer puts a key into
// etcd every half second through all three members, and no write may
// wait longer than a leader election while a member restarts. The
// members stay the same members (none removed and added again), each at
// the new etcd version. Then a controller is lost (its server deleted by
// hand) and replaced, controllers.count goes 3 -> 5 -> 3, and
// controllers.flavor changes (each controller rolled to a new server),
// etcd and an API server answering throughout (see diff/members.go).
func TestControlPlaneOfThree(t *testing.T) {
	r, reg, _ := e2eRig(t)
	c := spec(t, "demo", "", 0)
	c.Spec.Controllers.Count = 3
	c.Spec.WorkerPools[0].Count = 1
	c.Spec.Addons = nil
	c.Spec.DeletionPolicy = schemas.DeletionDelete
	useMirror(c, reg)
	controllers := []string{"demo-controller-0", "demo-controller-1", "demo-controller-2"}
	t.Cleanup(func() {
		if t.Failed() {
			hostDiagnostics(t, r, append(controllers, "demo-default-0")...)
		}
	})
	started := time.Now()
	r.apply(t, c)
	t.Logf("three controllers and a worker applied in %s", time.Since(started).Round(time.Second))

	res := r.observed(t)
	api, base, _ := r.apiClient(t, res, "demo-controller-1")
	waitFor(t, e2eWait(), upCheck(t, api, base, e2eFirst, append(slices.Clone(controllers), "demo-default-0"),
		map[string]int{"kube-apiserver-": 3, "kube-proxy-": 4, "kube-flannel-ds-": 4, "kube-router-": 4, "coredns-": 1}))
	t.Logf("the cluster came up %s after the apply began", time.Since(started).Round(time.Second))

	etcd := r.etcdClient(t, res, controllers)
	before := etcdMembers(t, etcd)
	if len(before) != 3 {
		t.Fatalf("etcd has %d members, want 3: %v", len(before), before)
	}
	for id, m := range before {
		if want := etcdOf(t, e2eFirst); m.version != want {
			t.Errorf("etcd member %s (%x) runs %s, want %s", m.name, id, m.version, want)
		}
	}

	// The minor upgrade, with a writer beside it.
	w := startWriter(t, etcd)
	step := time.Now()
	c.Spec.Kubernetes.Version = e2eNext
	plan, _ := r.apply(t, c)
	writes, failed, longest := w.stop()
	t.Logf("upgraded to %s in %s (%d steps); etcd took %d writes meanwhile (%d failed), the longest wait for one %s",
		e2eNext, time.Since(step).Round(time.Second), len(plan.Changes), writes, failed, longest.Round(time.Millisecond))
	// A member's restart may cost a leader election (1 s by default, and
	// etcd hands leadership over before a graceful stop); quorum lost
	// while two members are down costs until one is back: tens of seconds.
	if longest > 10*time.Second {
		t.Errorf("etcd took no write for %s during the upgrade: quorum was lost", longest.Round(time.Millisecond))
	}
	if writes < 20 {
		t.Errorf("only %d writes during the upgrade: the writer did not run", writes)
	}
	if want := map[string]string{"demo-controller-0": e2eNext, "demo-controller-1": e2eNext, "demo-controller-2": e2eNext, "demo-default-0": e2eNext}; !maps.Equal(want, r.versions(t, "demo")) {
		t.Errorf("the versions recorded as the gates passed: %v, want %v", r.versions(t, "demo"), want)
	}
	after := etcdMembers(t, etcd)
	if !slices.Equal(slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after))) {
		t.Errorf("etcd's members changed in the upgrade: %v, were %v", after, before)
	}
	for id, m := range after {
		if want := etcdOf(t, e2eNext); m.version != want {
			t.Errorf("etcd member %s (%x) runs %s after the upgrade, want %s", m.name, id, m.version, want)
		}
	}
	for _, ctl := range controllers {
		ctlAPI, ctlBase, _ := r.apiClient(t, res, ctl)
		var v struct{ GitVersion string }
		if err := getter(ctlAPI, ctlBase)("/version", &v); err != nil || v.GitVersion != e2eNext {
			t.Errorf("%s's API server after the upgrade: %q %v", ctl, v.GitVersion, err)
		}
	}
	waitFor(t, 3*time.Minute, upCheck(t, api, base, e2eNext, append(slices.Clone(controllers), "demo-default-0"),
		map[string]int{"kube-apiserver-": 3, "kube-proxy-": 4, "kube-flannel-ds-": 4, "kube-router-": 4, "coredns-": 1}))

	// OS updates on the three controllers: a resync's correction reboots
	// them one at a time through Nova (each drained, rebooted, gated with
	// every etcd member healthy and its API server ready, uncordoned),
	// and etcd keeps its quorum throughout: a write never waits 10 s.
	step = time.Now()
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	for _, ctl := range controllers {
		if _, err := sshx.Run(t.Context(), dialHost(t, r, res, ctl, gw), sshx.Sudo("touch /run/reboot-required /run/booted-before")); err != nil {
			t.Fatal(err)
		}
	}
	r.askHosts(t)
	reboots := r.resync(t, c)
	if len(reboots.Changes) != 0 || len(reboots.Drift) != 12 {
		t.Fatalf("the resync after the controllers' OS updates: changes %v, drift %v", addresses(reboots.Changes), addresses(reboots.Drift))
	}
	w = startWriter(t, etcd)
	osApplier := r.applier(t)
	var osLog proctest.Buffer
	osApplier.Logger = slog.New(slog.NewTextHandler(&osLog, nil))
	if sum, err := osApplier.Apply(t.Context(), request(c), reboots); err != nil {
		t.Fatalf("the controllers' reboots: %v %v", err, sum.Failed)
	}
	writes, failed, longest = w.stop()
	// Whichever member led when its host's turn came handed its
	// leadership over first, as a graceful stop does.
	if log := osLog.String(); !strings.Contains(log, "etcd leadership handed over before a reboot") || strings.Contains(log, "not handed over") {
		t.Errorf("the reboots' log says no leadership was handed over:\n%s", log)
	}
	if longest > 10*time.Second {
		t.Errorf("etcd took no write for %s during the controllers' reboots: quorum was lost", longest.Round(time.Millisecond))
	}
	for _, ctl := range controllers {
		if out, err := sshx.Run(t.Context(), dialHost(t, r, res, ctl, gw), "ls /run/booted-before"); err == nil {
			t.Errorf("%s was not rebooted: %s", ctl, out)
		}
	}
	if again := r.resync(t, c); !again.Empty() {
		t.Errorf("a resync after the controllers' reboots: %v, drift %v", addresses(again.Changes), addresses(again.Drift))
	}
	r.planner.Hosts = nil
	t.Logf("the three controllers rebooted one at a time for an OS update in %s; etcd took %d writes meanwhile (%d failed), the longest wait %s",
		time.Since(step).Round(time.Second), writes, failed, longest.Round(time.Millisecond))

	// A controller lost, its server deleted by hand as a hypervisor's
	// failure takes it: the next apply removes its member from etcd,
	// makes the server again, adds the new member as a learner, promotes
	// it once caught up and gates it; etcd takes writes and controller-0's
	// API answers throughout.
	step = time.Now()
	w = startWriter(t, etcd)
	p := startAPIProbe(t, r, res, "demo-controller-0")
	lost := r.serverID(t, "demo-controller-1")
	if err := servers.Delete(t.Context(), r.clients.Compute, lost).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, func() string {
		if err := servers.Get(t.Context(), r.clients.Compute, lost).Err; !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return fmt.Sprintf("server %s still there: %v", lost, err)
		}
		return ""
	})
	plan, kills := r.applyKilled(t, c, func(what string) bool {
		return strings.Contains(what, "demo-controller-1/etcd-member") || strings.Contains(what, "openstack/server/demo-controller-1")
	})
	t.Logf("the replacement's apply was killed %d times, at each of its membership steps and its server's, and resumed", kills)
	writes, failed, longest = w.stop()
	probes, down, outage := p.stop()
	t.Logf("demo-controller-1 replaced in %s (%d steps, %d of them drift); etcd took %d writes meanwhile (%d failed), the longest wait %s; controller-0's API answered %d of %d probes",
		time.Since(step).Round(time.Second), len(plan.Changes)+len(plan.Drift), len(plan.Drift), writes, failed, longest.Round(time.Millisecond), probes-len(down), probes)
	for _, a := range []diff.Action{diff.ActionDelete, diff.ActionCreate, diff.ActionUpdate} {
		if !slices.ContainsFunc(plan.Drift, func(c diff.Change) bool { return c.Address == diff.MemberAddress("demo-controller-1") && c.Action == a }) {
			t.Errorf("the replacement's plan has no %s of demo-controller-1's etcd member", a)
		}
	}
	if longest > 10*time.Second || outage > apiOutageBound {
		t.Errorf("the control plane did not answer throughout: etcd's longest wait %s, controller-0's API down for %s, at %v", longest, outage, down)
	}
	replaced := etcdMembers(t, etcd)
	checkMembers(t, replaced, controllers, etcdOf(t, e2eNext))
	for id, m := range replaced {
		if _, kept := after[id]; kept == (m.name == "demo-controller-1") {
			t.Errorf("etcd member %s (%x): kept %v; want every member kept but the lost one's", m.name, id, kept)
		}
	}
	if plan := r.plan(t, c); !plan.Empty() {
		t.Errorf("the plan after the replacement is not empty: %v %v", addresses(plan.Changes), addresses(plan.Drift))
	}
	res = r.observed(t)
	api, base, _ = r.apiClient(t, res, "demo-controller-0")
	waitFor(t, 3*time.Minute, upCheck(t, api, base, e2eNext, append(slices.Clone(controllers), "demo-default-0"),
		map[string]int{"kube-apiserver-": 3, "kube-proxy-": 4, "kube-flannel-ds-": 4, "kube-router-": 4}))

	// controllers.count 3 -> 5 -> 3: members join one at a time and leave
	// highest index first, the API and etcd answering throughout (no outage
	// past apiOutageBound).
	for _, n := range []int{5, 3} {
		step = time.Now()
		w = startWriter(t, etcd)
		p = startAPIProbe(t, r, res, controllers...)
		c.Spec.Controllers.Count = n
		plan, _ = r.apply(t, c)
		writes, failed, longest = w.stop()
		probes, down, outage = p.stop()
		t.Logf("controllers.count %d applied in %s (%d steps); etcd took %d writes (%d failed), the longest wait %s; the API answered %d of %d probes",
			n, time.Since(step).Round(time.Second), len(plan.Changes), writes, failed, longest.Round(time.Millisecond), probes-len(down), probes)
		if longest > 10*time.Second || outage > apiOutageBound {
			t.Errorf("count %d: the control plane did not answer throughout: etcd's longest wait %s, no API server answered for %s, at %v", n, longest, outage, down)
		}
		var names []string
		for i := range n {
			names = append(names, schemas.ControllerName("demo", i))
		}
		res = r.observed(t)
		etcd = r.etcdClient(t, res, names)
		checkMembers(t, etcdMembers(t, etcd), names, etcdOf(t, e2eNext))
		if plan := r.plan(t, c); !plan.Empty() {
			t.Errorf("count %d: the plan after is not empty: %v %v", n, addresses(plan.Changes), addresses(plan.Drift))
		}
		waitFor(t, 3*time.Minute, upCheck(t, api, base, e2eNext, append(slices.Clone(names), "demo-default-0"),
			map[string]int{"kube-apiserver-": n, "kube-proxy-": n + 1, "kube-flannel-ds-": n + 1, "kube-router-": n + 1}))
	}
	for _, gone := range []string{"demo-controller-3", "demo-controller-4"} {
		if _, ok := res["openstack/server/"+gone]; ok {
			t.Errorf("%s's server is left after the count went back to 3", gone)
		}
	}

	// A controller whose server Nova has in ERROR while its etcd member
	// answers (an administrator's reset-state; the machine runs on): the
	// planner asks etcd, and the plan keeps its server, with a warning
	// (the apply would refuse the removal of a member that answers);
	// set ACTIVE again, the plan is empty and warns of nothing.
	admin, err := cloud.Connect(t.Context(), cloud.Target{File: filepath.Join(r.dir, "clouds.yaml"), Cloud: "sim-admin"})
	if err != nil {
		t.Fatal(err)
	}
	health := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: r.sim.Edge()}}
	t.Cleanup(health.Close)
	r.planner.Health = health
	broken := r.serverID(t, "demo-controller-2")
	if err := servers.ResetState(t.Context(), admin.Compute, broken, servers.StateError).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if p := r.plan(t, c); !p.Empty() || len(p.Warnings) != 1 ||
		!strings.Contains(p.Warnings[0].Message, "demo-controller-2 is not replaced, its etcd member answering (its server is in ERROR") {
		t.Fatalf("a controller in ERROR whose member answers: want no change and a warning: %v %v %v", addresses(p.Changes), addresses(p.Drift), p.Warnings)
	} else {
		t.Logf("in ERROR, its member answering: %s", p.Warnings[0].Message)
	}
	if err := servers.ResetState(t.Context(), admin.Compute, broken, servers.StateActive).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if p := r.plan(t, c); !p.Empty() || len(p.Warnings) != 0 {
		t.Errorf("the plan once the controller is ACTIVE again: %v %v %v", addresses(p.Changes), addresses(p.Drift), p.Warnings)
	}
	r.planner.Health = nil

	// A controller powered off (its server SHUTOFF, its kubelet and etcd
	// gone with it): with spec.remediation, once Kubernetes has had its
	// Node Unknown for unhealthyAfter, the plan replaces it (its silent
	// etcd member removed first, the new one added as a learner,
	// promoted, gated), the API answering throughout.
	step = time.Now()
	p = startAPIProbe(t, r, res, "demo-controller-0", "demo-controller-1")
	plan = remediate(t, r, c, getter(api, base), "demo-controller-2", func(map[string]diff.Resource) {
		if err := servers.Stop(t.Context(), r.clients.Compute, broken).ExtractErr(); err != nil {
			t.Fatal(err)
		}
	})
	probes, down, outage = p.stop()
	checkMembers(t, etcdMembers(t, etcd), controllers, etcdOf(t, e2eNext))
	t.Logf("demo-controller-2, powered off, replaced by its remediation in %s (%d steps); the API answered %d of %d probes",
		time.Since(step).Round(time.Second), len(plan.Drift), probes-len(down), probes)
	if outage > apiOutageBound {
		t.Errorf("no API server answered for %s, at %v", outage, down)
	}
	waitFor(t, 3*time.Minute, upCheck(t, api, base, e2eNext, append(slices.Clone(controllers), "demo-default-0"),
		map[string]int{"kube-apiserver-": 3, "kube-proxy-": 4, "kube-flannel-ds-": 4, "kube-router-": 4}))

	// controllers.flavor changed: each controller in turn leaves etcd
	// (every other member answering), its server is made again with the
	// new flavor, its new member joins as a learner, is promoted and
	// gated before the next leaves; etcd takes writes and the API
	// answers throughout, and every member is a new one at the end.
	step = time.Now()
	w = startWriter(t, etcd)
	p = startAPIProbe(t, r, res, controllers...)
	rolledFrom := etcdMembers(t, etcd)
	c.Spec.Controllers.Flavor = "m1.large"
	plan, _ = r.apply(t, c)
	writes, failed, longest = w.stop()
	probes, down, outage = p.stop()
	t.Logf("controllers.flavor rolled in %s (%d steps); etcd took %d writes (%d failed), the longest wait %s; the API answered %d of %d probes",
		time.Since(step).Round(time.Second), len(plan.Changes), writes, failed, longest.Round(time.Millisecond), probes-len(down), probes)
	if longest > 10*time.Second || outage > apiOutageBound {
		t.Errorf("the roll: the control plane did not answer throughout: etcd's longest wait %s, no API server answered for %s, at %v", longest, outage, down)
	}
	res = r.observed(t)
	etcd = r.etcdClient(t, res, controllers)
	rolled := etcdMembers(t, etcd)
	checkMembers(t, rolled, controllers, etcdOf(t, e2eNext))
	for id, m := range rolled {
		if _, kept := rolledFrom[id]; kept {
			t.Errorf("etcd member %s (%x) was kept through the roll", m.name, id)
		}
	}
	for _, ctl := range controllers {
		if f := res["openstack/server/"+ctl].Attrs["flavor"].Value; f != "m1.large" {
			t.Errorf("%s's server has flavor %q after the roll", ctl, f)
		}
	}
	if plan := r.plan(t, c); !plan.Empty() {
		t.Errorf("the plan after the roll is not empty: %v %v", addresses(plan.Changes), addresses(plan.Drift))
	}
	waitFor(t, 3*time.Minute, upCheck(t, api, base, e2eNext, append(slices.Clone(controllers), "demo-default-0"),
		map[string]int{"kube-apiserver-": 3, "kube-proxy-": 4, "kube-flannel-ds-": 4, "kube-router-": 4}))

	step = time.Now()
	r.apply(t)
	if left := r.observed(t); len(left) != 0 {
		t.Errorf("%d resources left after the cluster was deleted: %v", len(left), slices.Sorted(maps.Keys(left)))
	}
	t.Logf("deleted in %s", time.Since(step).Round(time.Second))
}

type etcdMember struct{ name, version string }

// applyKilled plans c and applies the plan, killing the applier once at
// each journal point kill matches and resuming it after, as a daemon
// killed there and started again does; it returns the plan and how many
// kills there were.
func (r *rig) applyKilled(t *testing.T, c *schemas.Cluster, kill func(what string) bool) (*diff.Plan, int) {
	t.Helper()
	req := request(c)
	res, err := r.planner.Plan(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	killed := map[string]bool{}
	for run := 0; ; run++ {
		if run > 50 {
			t.Fatal("no end after 50 kills")
		}
		a := r.applier(t)
		a.Parallel = 8
		// The point is passed from the steps' goroutines, at once.
		var mu sync.Mutex
		var died string
		a.SetPoint(func(what string) error {
			mu.Lock()
			defer mu.Unlock()
			if died == "" && kill(what) && !killed[what] {
				died = what
				return errKill
			}
			return nil
		})
		var sum *reconciler.Summary
		if run == 0 {
			sum, err = a.Apply(t.Context(), req, res.Plan)
		} else {
			sum, err = a.Resume(t.Context())
		}
		if died == "" {
			if err != nil {
				for _, f := range sum.Failed {
					t.Errorf("%s %s: %s %v", f.Change.Action, f.Change.Address, f.State, f.Err)
				}
				t.Fatalf("run %d: %v", run, err)
			}
			return res.Plan, run
		}
		if !errors.Is(err, errKill) {
			t.Fatalf("run %d killed at %q: %v, want the kill", run, died, err)
		}
		t.Logf("killed at %s", died)
		killed[died] = true
	}
}

// checkMembers checks etcd's members are the named controllers, each a
// voting member at version.
func checkMembers(t *testing.T, got map[uint64]etcdMember, names []string, version string) {
	t.Helper()
	var have []string
	for id, m := range got {
		have = append(have, m.name)
		if m.version != version {
			t.Errorf("etcd member %s (%x) runs %s, want %s", m.name, id, m.version, version)
		}
	}
	slices.Sort(have)
	if !slices.Equal(have, names) {
		t.Errorf("etcd's members are %v, want %v", have, names)
	}
}

// apiProbe asks the API every half second for /readyz, at each of
// controllers in turn until one answers ready, noting when none did: the
// API down, as a client that tries every endpoint (or a load balancer)
// sees it.
type apiProbe struct {
	cancel context.CancelFunc
	done   chan struct{}
	probes int
	down   []string
	// outage is the longest time from a probe no API server answered to
	// the next one answered.
	outage time.Duration
}

// apiOutageBound is the longest the API may go unanswered while the
// control plane changes: the bound the tests hold etcd's writes to. The
// API's /readyz checks etcd, so it cannot answer while etcd stalls, and
// etcd stalls for seconds while a member joins on a two-core machine
// running five controllers (2.6 to 3.9 s measured on 2026-11-28, each
// time a single 2-second probe unanswered); a bound of zero failed probes
// held the API to more than its store.
const apiOutageBound = 10 * time.Second

func startAPIProbe(t *testing.T, r *rig, res map[string]diff.Resource, controllers ...string) *apiProbe {
	type endpoint struct {
		api  *http.Client
		base string
	}
	var eps []endpoint
	for _, ctl := range controllers {
		api, base, _ := r.apiClient(t, res, ctl)
		api.Timeout = 2 * time.Second
		eps = append(eps, endpoint{api, base})
	}
	ctx, cancel := context.WithCancel(t.Context())
	p := &apiProbe{cancel: cancel, done: make(chan struct{})}
	t.Cleanup(func() { cancel(); <-p.done })
	go func() {
		defer close(p.done)
		var firstMiss time.Time
		defer func() {
			if !firstMiss.IsZero() {
				p.outage = max(p.outage, time.Since(firstMiss))
			}
		}()
		for ctx.Err() == nil {
			started := time.Now()
			ready := slices.ContainsFunc(eps, func(e endpoint) bool {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/readyz", nil)
				resp, err := e.api.Do(req)
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
			if ctx.Err() != nil {
				return
			}
			p.probes++
			switch {
			case !ready:
				p.down = append(p.down, time.Now().Format(time.TimeOnly))
				if firstMiss.IsZero() {
					firstMiss = started
				}
			case !firstMiss.IsZero():
				p.outage = max(p.outage, started.Sub(firstMiss))
				firstMiss = time.Time{}
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return p
}

// stop ends the probe: how many probes, when one failed, and the longest
// outage.
func (p *apiProbe) stop() (int, []string, time.Duration) {
	p.cancel()
	<-p.done
	return p.probes, p.down, p.outage
}

// etcdMembers are the etcd cluster's members by ID, with the version each
// reports.
func etcdMembers(t *testing.T, cli *clientv3.Client) map[uint64]etcdMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]etcdMember{}
	for _, m := range list.Members {
		if len(m.ClientURLs) == 0 {
			t.Fatalf("etcd member %s (%x) has not started", m.Name, m.ID)
		}
		st, err := cli.Status(ctx, m.ClientURLs[0])
		if err != nil {
			t.Fatalf("etcd member %s: %v", m.Name, err)
		}
		out[m.ID] = etcdMember{name: m.Name, version: st.Version}
	}
	return out
}

// writer puts a key into etcd every half second until stopped, timing
// the longest wait from one write taken to the next.
type writer struct {
	cancel         context.CancelFunc
	done           chan struct{}
	mu             sync.Mutex
	writes, failed int
	longest        time.Duration
}

func startWriter(t *testing.T, cli *clientv3.Client) *writer {
	ctx, cancel := context.WithCancel(t.Context())
	w := &writer{cancel: cancel, done: make(chan struct{})}
	t.Cleanup(func() { cancel(); <-w.done })
	go func() {
		defer close(w.done)
		last := time.Now()
		for i := 0; ctx.Err() == nil; i++ {
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := cli.Put(wctx, "/opke-e2e/writer", fmt.Sprint(i))
			wcancel()
			now := time.Now()
			w.mu.Lock()
			if err == nil {
				w.writes++
				w.longest = max(w.longest, now.Sub(last))
				last = now
			} else if ctx.Err() == nil {
				w.failed++
				t.Logf("etcd write %d at %s: %v", i, now.Format(time.TimeOnly), err)
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return w
}

// stop ends the writer: the writes taken, those failed, and the longest
// wait between two taken.
func (w *writer) stop() (writes, failed int, longest time.Duration) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes, w.failed, w.longest
}

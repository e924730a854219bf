//go:build chaos

package chaos

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

// The scenarios, as the table names them.
const (
	scenarioKillCreate  = "kill -9 serve during a create"
	scenarioKillUpgrade = "kill -9 serve during an upgrade"
	scenarioEtcd        = "etcd killed, back after 5 s"
	scenarioCloudDown   = "cloud down for 30 s"
	scenarioGit         = "git remote unreachable"
	scenarioAPIErrors   = "30 % API errors"
	scenarioTwoDaemons  = "two daemons, the leader paused"
	scenarioKillRemedy  = "kill -9 serve during a remediation"
	scenarioKillRotate  = "kill -9 serve during a CA rotation"
	scenarioKillReboots = "kill -9 serve during OS reboots"
)

// runs is how many times a scenario runs: full for make chaos, short for
// CI (OPKE_CHAOS=short).
func runs(full, short int) int {
	if os.Getenv("OPKE_CHAOS") == "short" {
		return short
	}
	return full
}

// seed makes the random fault points reproducible: OPKE_CHAOS_SEED=N
// replays a run the log names.
var seed = func() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("OPKE_CHAOS_SEED"), 10, 64); err == nil {
		return v
	}
	return uint64(time.Now().UnixNano())
}()

// each runs scenario n times in parallel subtests, each with its own
// random source, and records their outcomes.
func each(t *testing.T, scenario string, n int, run func(t *testing.T, rng *rand.Rand, o *outcome)) {
	t.Logf("%s: %d runs, OPKE_CHAOS_SEED=%d", scenario, n, seed)
	for i := range n {
		t.Run(fmt.Sprintf("run-%02d", i+1), func(t *testing.T) {
			t.Parallel()
			var o outcome
			defer func() { record(scenario, o) }()
			run(t, rand.New(rand.NewPCG(seed, uint64(i))), &o)
		})
	}
}

// strike waits for an apply to start, then for a random point of d (a
// clean run's apply time): where the fault strikes. It tells whether the
// apply is still under way then.
func (w *world) strike(rng *rand.Rand, d time.Duration) bool {
	w.applyStarted(time.Minute)
	time.Sleep(time.Duration(rng.Int64N(int64(d) + 1)))
	return w.applying(context.Background())
}

// strikeAtStep waits for an apply to start, picks how many of its steps
// must be done first (from none to all but one), and waits for that. It
// tells whether the apply is still under way then.
func (w *world) strikeAtStep(rng *rand.Rand) bool {
	w.applyStarted(2 * time.Minute)
	ctx := context.Background()
	id, err := w.store.Get(ctx, state.KeysOf(w.store).OpenPlan(cluster))
	if err != nil {
		return false // already over
	}
	jp, err := get[reconciler.JournalPlan](ctx, w.store, state.KeysOf(w.store).Journal(cluster, string(id), "plan"))
	if err != nil {
		w.t.Fatal(err)
	}
	steps := len(jp.Plan.Changes) + len(jp.Plan.Drift)
	at := rng.IntN(max(steps, 1))
	w.t.Logf("killing after %d of the apply's %d steps", at, steps)
	waitFor(time.Minute, func() bool {
		entries, err := w.store.List(ctx, state.KeysOf(w.store).Journal(cluster, string(id))+"/")
		if err != nil {
			return false
		}
		done := 0
		for k, v := range entries {
			if strings.HasSuffix(k, "/plan") {
				continue
			}
			var e struct{ State reconciler.StepState }
			if json.Unmarshal(v, &e) == nil && e.State == reconciler.StepDone {
				done++
			}
		}
		return done >= at || !w.applying(ctx)
	})
	return w.applying(ctx)
}

// killAtStep kills serve a (called name) after a random number of the
// apply's steps (o.Hit: whether it struck mid-apply) and starts it
// again; it returns when it did.
func (w *world) killAtStep(rng *rand.Rand, o *outcome, a *serveProc, name string) time.Time {
	o.Hit = w.strikeAtStep(rng)
	a.Kill()
	w.serve(name)
	return time.Now()
}

// resumed records whether serve name, started again after a kill that
// struck mid-apply, resumed the journal the killed one left (o.Reported).
func (w *world) resumed(o *outcome, name string) {
	o.Reported = !o.Hit || strings.Contains(w.logs(name), "resuming an interrupted apply")
	if !o.Reported {
		w.t.Error("the restarted daemon did not resume the journal the killed one left")
	}
}

// TestKillDuringCreate: opke serve is killed (-9) at a random point of a
// cluster's create and started again: it resumes the journal the dead
// one left and the cluster converges, every resource made once.
func TestKillDuringCreate(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	each(t, scenarioKillCreate, runs(20, 3), func(t *testing.T, rng *rand.Rand, o *outcome) {
		killDuring(t, rng, o, ref, false)
	})
}

// TestKillDuringUpgrade: the same, at a random point of a rolling
// Kubernetes upgrade: no server is recreated (an upgrade never changes
// user_data), every host ends at the new version.
func TestKillDuringUpgrade(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	each(t, scenarioKillUpgrade, runs(20, 2), func(t *testing.T, rng *rand.Rand, o *outcome) {
		killDuring(t, rng, o, ref, true)
	})
}

// killDuring kills opke serve at a random point of a create (or of an
// upgrade of a created cluster), starts it again, and checks the result.
func killDuring(t *testing.T, rng *rand.Rand, o *outcome, ref *reference, upgrade bool) {
	w := newWorld(t, worldOptions{})
	a := w.serve("a")
	version, took := v1, ref.create
	c1 := w.commit(v1)
	var ids map[string]string
	if upgrade {
		if !w.settled(c1, settleTimeout) {
			t.Fatal("the create did not converge")
		}
		ids = w.serverIDs()
		version, took = v2, ref.upgrade
		w.commit(v2)
	}
	o.Hit = w.strike(rng, took)
	a.Kill()
	w.serve("a")
	w.verify(o, ref, version, time.Now())
	if upgrade {
		if got := w.serverIDs(); !maps.Equal(got, ids) {
			o.Converged = false
			t.Errorf("the upgrade recreated servers: %v, were %v", got, ids)
		}
	}
	w.resumed(o, "a")
}

// TestKillDuringRemediation: a worker's kubelet is stopped; once its Node
// has not been Ready for spec.remediation.unhealthyAfter a drift check
// replaces the worker, and opke serve is killed (-9) at a random point of
// that replacement and started again: it resumes, and the worker is
// replaced once (no second server, nothing orphaned), the other servers
// untouched.
func TestKillDuringRemediation(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	const worker = cluster + "-default-1"
	each(t, scenarioKillRemedy, runs(10, 2), func(t *testing.T, rng *rand.Rand, o *outcome) {
		w := newWorld(t, worldOptions{})
		a := w.serve("a")
		c1 := w.commitSpec(v1, spec(t, v1)+"  remediation:\n    unhealthyAfter: 30s\n")
		if !w.settled(c1, settleTimeout) {
			t.Fatal("the create did not converge")
		}
		ids := w.serverIDs()
		cloudtest.HostRun(t, w.store, w.clients(), w.simEdge, cluster, worker, sshx.Sudo("systemctl stop kubelet"))
		// The replacement (a drain, the server deleted and made again,
		// the Node object deleted, the new host's files and restarts,
		// its gate) takes a second or two in the simulator: the kill
		// comes after a random number of its steps are done.
		restarted := w.killAtStep(rng, o, a, "a")
		replaced := waitFor(settleTimeout, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			id := w.serverIDs()[worker]
			return id != "" && id != ids[worker] && !w.applying(ctx)
		})
		if !replaced {
			o.Converged = false
			t.Errorf("%s was not replaced: %v (was %s)", worker, w.serverIDs()[worker], ids[worker])
		}
		w.verify(o, ref, v1, restarted)
		for name, id := range w.serverIDs() {
			if name != worker && ids[name] != id {
				o.Converged = false
				t.Errorf("%s was replaced too: %s, was %s", name, id, ids[name])
			}
		}
		w.resumed(o, "a")
	})
}

// TestKillDuringOSReboots: both workers' staged OS updates wait for a
// reboot (/run/reboot-required); a drift check's correction drains,
// reboots, gates and uncordons them one at a time, and opke serve is
// killed (-9) at a random point of it and started again: it resumes,
// every worker is rebooted (its /run is new) and uncordoned, no server is
// made again, nothing is duplicated or left.
func TestKillDuringOSReboots(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	workers := []string{cluster + "-default-0", cluster + "-default-1"}
	each(t, scenarioKillReboots, runs(8, 1), func(t *testing.T, rng *rand.Rand, o *outcome) {
		w := newWorld(t, worldOptions{})
		a := w.serve("a")
		c1 := w.commit(v1)
		if !w.settled(c1, settleTimeout) {
			t.Fatal("the create did not converge")
		}
		ids := w.serverIDs()
		for _, h := range workers {
			cloudtest.HostRun(t, w.store, w.clients(), w.simEdge, cluster, h, sshx.Sudo("touch /run/reboot-required /run/booted-before"))
		}
		restarted := w.killAtStep(rng, o, a, "a")
		rebooted := waitFor(settleTimeout, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if w.applying(ctx) {
				return false
			}
			// The simulator's hosts keep their roots in its state
			// dir: StateDir/hosts/<server id>/root.
			for _, h := range workers {
				if _, err := os.Stat(filepath.Join(w.dir, "sim", "hosts", ids[h], "root", "run", "booted-before")); !errors.Is(err, os.ErrNotExist) {
					return false
				}
			}
			return true
		})
		if !rebooted {
			o.Converged = false
			t.Errorf("the workers were not both rebooted")
		}
		w.verify(o, ref, v1, restarted)
		for name, id := range w.serverIDs() {
			if ids[name] != id {
				o.Converged = false
				t.Errorf("%s was made again: %s, was %s", name, id, ids[name])
			}
		}
		w.resumed(o, "a")
	})
}

// TestKillDuringRotation: opke serve is killed (-9) at a random point of
// a CA rotation's reissue phase (every certificate issued again by the
// new CAs and rolled host by host, then the workloads restarted) and
// started again: it resumes; no server is made again; the plan after it
// is empty, so every host holds the certificates the store holds (none
// issued twice: a second issue would differ from what a host got); the
// API servers serve the new CA's.
func TestKillDuringRotation(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	rotation := func(phase string) string {
		return spec(t, v1) + "  pki:\n    generation: 2\n    phase: " + phase + "\n"
	}
	each(t, scenarioKillRotate, runs(10, 2), func(t *testing.T, rng *rand.Rand, o *outcome) {
		w := newWorld(t, worldOptions{})
		a := w.serve("a")
		if c := w.commit(v1); !w.settled(c, settleTimeout) {
			t.Fatal("the create did not converge")
		}
		ids := w.serverIDs()
		if c := w.commitSpec(v1, rotation("trust")); !w.settled(c, settleTimeout) {
			t.Fatal("the rotation's trust phase did not converge")
		}
		w.commitSpec(v1, rotation("reissue"))
		w.verify(o, ref, v1, w.killAtStep(rng, o, a, "a"))
		if got := w.serverIDs(); !maps.Equal(got, ids) {
			o.Converged = false
			t.Errorf("the rotation made servers again: %v, were %v", got, ids)
		}
		b, err := pki.Load(context.Background(), w.store, cluster, pki.APIServer(cluster+"-controller-0"))
		if err != nil {
			t.Fatal(err)
		}
		m, _ := b.Get(pki.APIServer(cluster + "-controller-0"))
		if block, _ := pem.Decode(m.Cert); block == nil {
			t.Error("no API server certificate in the store")
		} else if c, err := x509.ParseCertificate(block.Bytes); err != nil || c.Issuer.CommonName != "kubernetes.2" {
			o.Converged = false
			t.Errorf("the API server's certificate after the reissue: issuer %v (%v)", c.Issuer.CommonName, err)
		}
		w.resumed(o, "a")
	})
}

// TestEtcdRestart: etcd is killed (-9) at a random point of a create and
// started again 5 s later: the daemon says it is not ready while the
// store is gone, and then finishes the cluster.
func TestEtcdRestart(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	each(t, scenarioEtcd, runs(5, 1), func(t *testing.T, rng *rand.Rand, o *outcome) {
		w := newWorld(t, worldOptions{})
		a := w.serve("a")
		w.commit(v1)
		o.Hit = w.strike(rng, ref.create)
		w.etcd.Kill()
		o.Reported = waitFor(15*time.Second, func() bool {
			code, _, err := a.ready()
			return err == nil && code == http.StatusServiceUnavailable
		})
		if !o.Reported {
			t.Error("the daemon's /readyz did not say the state store is gone")
		}
		time.Sleep(5 * time.Second)
		w.startEtcd()
		restarted := time.Now()
		w.verify(o, ref, v1, restarted)
		if code, _, err := a.ready(); err != nil || code != http.StatusOK {
			t.Errorf("/readyz after etcd came back: %d (%v)", code, err)
		}
	})
}

// TestSimulatorOutage: the cloud (the simulator, its APIs and its hosts)
// goes away for 30 s at a random point of a create: the daemon reports
// it on the cluster's status (a step retrying, or the apply failed), and
// finishes the cluster when the cloud is back.
func TestSimulatorOutage(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	each(t, scenarioCloudDown, runs(3, 1), func(t *testing.T, rng *rand.Rand, o *outcome) {
		w := newWorld(t, worldOptions{})
		w.serve("a")
		w.commit(v1)
		o.Hit = w.strike(rng, ref.create)
		w.stopSim()
		down := time.Now()
		o.Reported = waitFor(30*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := w.status(ctx)
			return err == nil && (s.State == report.Failure || s.State == report.Error || s.ResyncError != "" || s.Retrying != "")
		})
		time.Sleep(time.Until(down.Add(30 * time.Second)))
		w.startSim()
		back := time.Now()
		if o.Hit && !o.Reported {
			t.Error("the cluster's status did not report the outage")
		}
		w.verify(o, ref, v1, back)
	})
}

// TestGitRemoteUnreachable: the fleet's remote (git daemon) goes away, an
// upgrade is pushed meanwhile: the daemon reports the failing sync on
// /readyz, and applies the upgrade when the remote is back.
func TestGitRemoteUnreachable(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	each(t, scenarioGit, runs(3, 1), func(t *testing.T, _ *rand.Rand, o *outcome) {
		w := newWorld(t, worldOptions{gitDaemon: true})
		a := w.serve("a")
		c1 := w.commit(v1)
		if !w.settled(c1, settleTimeout) {
			t.Fatal("the create did not converge")
		}
		w.gitd.Stop(10 * time.Second)
		w.commit(v2)
		o.Reported = waitFor(20*time.Second, func() bool {
			code, h, err := a.ready()
			return err == nil && code == http.StatusOK && h.SyncError != ""
		})
		if !o.Reported {
			t.Error("the daemon's /readyz did not report the failing sync")
		}
		time.Sleep(3 * time.Second)
		w.startGit()
		back := time.Now()
		w.verify(o, ref, v2, back)
		if _, h, err := a.ready(); err != nil || h.SyncError != "" {
			t.Errorf("/readyz after the remote came back: %+v (%v)", h, err)
		}
	})
}

// faults are the API errors injected: about 30 % of the requests fail
// (15 % 503, 12.5 % 500 of what is left), and 10 % of the creates are
// carried out with their answer lost.
const faults = `[{"match": "POST", "drop": true, "rate": 0.1},
 {"status": 503, "rate": 0.15}, {"status": 500, "rate": 0.125}]`

// TestAPIErrors: a cluster is created while the cloud fails about 30 % of
// the requests: it converges, every resource made once.
func TestAPIErrors(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	each(t, scenarioAPIErrors, runs(5, 1), func(t *testing.T, _ *rand.Rand, o *outcome) {
		w := newWorld(t, worldOptions{})
		w.setFaults(faults)
		a := w.serve("a")
		c1 := w.commit(v1)
		o.Hit = true
		started := time.Now()
		if !w.settled(c1, settleTimeout) {
			t.Errorf("the create did not converge under faults in %v", settleTimeout)
		}
		t.Logf("converged under faults in %v", time.Since(started).Round(time.Millisecond))
		w.setFaults("[]")
		o.Reported = w.metric(a, "opke_errors_total") > 0 || strings.Contains(w.logs("a"), `"step failed"`)
		w.verify(o, ref, v1, started)
	})
}

// TestTwoDaemons: two daemons on one etcd share the fleet; the leader is
// paused (SIGSTOP: a frozen VM, a long GC) at a random point of a create,
// past its lease; the other takes the leadership over and, when the
// paused one owned the cluster, the cluster too, and finishes; the old
// leader wakes up fenced: the cloud's write log shows the two never both
// wrote.
func TestTwoDaemons(t *testing.T) {
	t.Parallel()
	ref := cleanRun(t)
	each(t, scenarioTwoDaemons, runs(5, 2), func(t *testing.T, rng *rand.Rand, o *outcome) {
		w := newWorld(t, worldOptions{})
		a := w.serve("a")
		if !waitFor(30*time.Second, func() bool { id, err := w.store.Leader(context.Background()); return err == nil && id == a.id() }) {
			t.Fatal("the first daemon did not lead")
		}
		b := w.serve("b")
		w.commit(v1)
		o.Hit = w.strike(rng, ref.create)
		if err := a.Pause(); err != nil {
			t.Fatal(err)
		}
		if !waitFor(30*time.Second, func() bool { id, err := w.store.Leader(context.Background()); return err == nil && id == b.id() }) {
			t.Error("the standby did not take over from the paused leader")
		}
		time.Sleep(2 * leaderTTL)
		if err := a.Resume(); err != nil {
			t.Fatal(err)
		}
		woke := time.Now()
		o.Reported = waitFor(20*time.Second, func() bool { return strings.Contains(w.logs("a"), "the leadership is lost") })
		if !o.Reported {
			t.Error("the paused leader did not say it lost the leadership")
		}
		w.verify(o, ref, v1, woke)
		var order []string
		o.Overlaps, order = w.overlaps()
		t.Logf("writers to the cloud, in order: %v", order)
	})
}

// setFaults replaces the simulator's injected faults.
func (w *world) setFaults(list string) {
	w.t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+w.simAdmin+"/faults", strings.NewReader(list))
	resp, err := httpClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		w.t.Fatalf("PUT /faults: %s", resp.Status)
	}
}

// metric sums a counter's series on the daemon's /metrics.
func (w *world) metric(s *serveProc, name string) float64 {
	resp, err := httpClient.Get("http://" + s.api + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0
	}
	total := 0.0
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total += v
		}
	}
	return total
}

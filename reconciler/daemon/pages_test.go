package daemon_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
)

// chromium is Debian's Chromium, which sudo make deps (and .ci/run)
// installs: without it the page tests fail on CI and are skipped
// elsewhere, as the other tools' tests are.
const chromium = "/usr/bin/chromium"

// browse renders url in headless Chromium: the DOM it built, and a
// screenshot in dir (OPKE_SCREENSHOTS, to look at; else the test's
// folder) named name.png. Chromium's own traffic is off: it reaches the
// page on 127.0.0.1 and nothing else.
func browse(t *testing.T, url, name string) string {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI must have %s (.ci/packages: chromium): %v", chromium, err)
		}
		t.Skipf("%s is not installed; sudo make deps installs it", chromium)
	}
	dir := os.Getenv("OPKE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--window-size=1280,900"}
	shot := filepath.Join(dir, name+".png")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, chromium, append(args, "--screenshot="+shot, url)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot %s: %v\n%s", url, err, out)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Fatalf("no screenshot of %s (%v)", url, err)
	}
	dom, err := exec.CommandContext(ctx, chromium, append(args, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	return string(dom)
}

// TestPagesInChromium: the fleet's page and a cluster's, rendered by
// headless Chromium, through a cluster's create, a drift repair, and a
// rollout halted by a failed health gate; each shows what happened (and
// the screenshots, with OPKE_SCREENSHOTS=DIR, are for people to look at).
func TestPagesInChromium(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second, "")
	has := func(dom, what string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(dom, w) {
				t.Errorf("%s lacks %q:\n%s", what, w, dom)
			}
		}
	}

	// A create.
	c1 := commitSpec(t, e.work, "demo", demoSpec(2), "demo: a new cluster")
	e.push(t, main)
	if n := e.waitNote(t, c1, main); n.State != report.Success {
		t.Fatalf("note: %+v", n.Clusters["demo"])
	}
	e.status(t, "demo", func(s daemon.ClusterStatus) bool { return s.Rollout != nil && s.Rollout.Done == 3 })
	has(browse(t, e.srv.URL+"/", "1-fleet-created"), "the fleet's page after the create",
		`<a href="/clusters/demo"><b>demo</b></a>`, `<span class="badge success">success</span>`, "v1.35.1", `3/3 hosts`)
	has(browse(t, e.srv.URL+"/clusters/demo", "2-cluster-created"), "the cluster's page after the create",
		"“demo: a new cluster” by dev &lt;dev@example.com&gt;", "<td>demo-controller-0</td>", "openstack/server/demo-default-1", "done")

	// A drift repair: a server deleted by hand is made again by the drift
	// check, whose own steps the cluster's page shows.
	cloudtest.DeleteServer(t, e.clients, "demo-default-1")
	e.status(t, "demo", func(s daemon.ClusterStatus) bool { return s.DriftCorrected > 0 })
	has(browse(t, e.srv.URL+"/", "3-fleet-drift-repaired"), "the fleet's page after the repair", "corrected</small>")
	has(browse(t, e.srv.URL+"/clusters/demo", "4-cluster-drift-repaired"), "the cluster's page after the repair",
		"The last drift check that changed something", "openstack/server/demo-default-1", "the last check corrected")

	// A rollout halted by a health gate.
	e.sim.CrashKubelet("demo-default-0", "v1.35.2")
	c2 := commitSpec(t, e.work, "demo", strings.Replace(demoSpec(2), "v1.35.1", "v1.35.2", 1), "demo: v1.35.2")
	e.push(t, main)
	if n := e.waitNote(t, c2, main); n.State != report.Failure {
		t.Fatalf("note of the halted rollout: %+v", n.Clusters["demo"])
	}
	e.status(t, "demo", func(s daemon.ClusterStatus) bool { return s.Rollout != nil && s.Rollout.Halted != "" })
	has(browse(t, e.srv.URL+"/", "5-fleet-gate-failed"), "the fleet's page after the failed gate",
		`<span class="badge failure">failure</span>`, "halted: host/demo-default-0/health", `applied: <a href="/commits/`+c1+`">`)
	has(browse(t, e.srv.URL+"/clusters/demo", "6-cluster-gate-failed"), "the cluster's page after the failed gate",
		"(the head is not applied)", "host/demo-default-0/health", `class="error">failed</td>`,
		"<h2>Recent commits</h2>", "demo: v1.35.2", "demo: a new cluster")
}

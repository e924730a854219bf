package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
)

// TestDaemonRefusesARollback is the attack of a force push: a cluster
// applied with deletionPolicy Delete, then the tracked branch pushed back
// to a commit from before the cluster existed. The daemon refuses it (the
// head does not descend from the last commit applied), keeps the servers,
// says why on the status, and holds the drift checks to the commit it
// applied, also after a restart. An operator who names the commit with
// AllowRewrite gets it applied, and its note says so.
func TestDaemonRefusesARollback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second, "")
	if err := os.MkdirAll(filepath.Join(e.work, "clusters"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.work, "clusters", "README"), []byte("one folder per cluster\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, e.work, "add", "-A")
	gittest.Git(t, e.work, "commit", "-qm", "an empty fleet")
	empty := gittest.Git(t, e.work, "rev-parse", "HEAD")
	e.push(t, main)
	if n := e.waitNote(t, empty, main); n.State != report.Success {
		t.Fatalf("note of the empty fleet: %+v", n)
	}
	created := commitSpec(t, e.work, "demo", demoSpec(2)+"  deletionPolicy: Delete\n", "demo, deleted with its file")
	e.push(t, main)
	if n := e.waitNote(t, created, main); n.State != report.Success {
		t.Fatalf("note of the create: %+v", n)
	}
	if got := e.servers(t); len(got) != 4 {
		t.Fatalf("servers after the create: %v", got)
	}

	gittest.Git(t, e.work, "reset", "-q", "--hard", empty)
	e.push(t, main)
	refused := func(s daemon.ClusterStatus) bool {
		return s.Commit == empty && s.State == report.Failure && strings.Contains(s.Summary, "does not descend from")
	}
	st := e.status(t, "demo", refused)
	if !strings.Contains(st.Summary, "--allow-rewrite "+empty) {
		t.Errorf("the status does not say how to allow it: %s", st.Summary)
	}
	// The drift checks (every second) go on holding the cloud to the
	// applied commit.
	time.Sleep(3 * time.Second)
	if got := e.servers(t); len(got) != 4 {
		t.Fatalf("the rollback was applied: servers %v", got)
	}
	if n := e.gitNote(t, empty); n == nil || !strings.Contains(n.Message, "not applied") {
		t.Errorf("the note of the refused head does not say it was refused: %+v", n)
	}

	// A restarted daemon (the head already seen) still does not load it.
	e.start(t)
	time.Sleep(3 * time.Second)
	if got := e.servers(t); len(got) != 4 {
		t.Fatalf("the rollback was applied after a restart: servers %v", got)
	}

	// The operator allows this very commit.
	e.cfg.AllowRewrite = empty
	e.start(t)
	e.push(t, main)
	deadline := time.Now().Add(2 * time.Minute)
	for len(e.servers(t)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the allowed rewrite was not applied: servers %v", e.servers(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	n := e.waitNote(t, empty, main)
	if n.State != report.Success || !strings.Contains(n.Notice, "history rewritten") || n.Clusters["demo"] == nil || n.Clusters["demo"].State != report.Success {
		t.Fatalf("note of the allowed rewrite: %+v %+v", n, n.Clusters["demo"])
	}
}

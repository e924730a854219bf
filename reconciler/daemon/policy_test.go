package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/schemas"
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
	empty := e.emptyFleet(t)
	created := commitSpec(t, e.work, "demo", demoSpec(2)+"  deletionPolicy: Delete\n", "demo, deleted with its file")
	e.push(t, main)
	if n := e.waitNote(t, created, main); n.State != report.Success {
		t.Fatalf("note of the create:\n%s", noteText(n))
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
		t.Errorf("the note of the refused head does not say it was refused:\n%s", noteText(n))
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

// TestDaemonBoundsPullRequests is the attack of a pull request that
// costs a few KiB to push and gigabytes to read: 100 folders naming one
// 1 MiB spec. Each spec is refused unread and the note says so; a fleet
// over the cluster limit is refused whole. A pull request whose plan a
// daemon began and never finished is reported failed by the next leader,
// not planned again.
func TestDaemonBoundsPullRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Hour, "")
	e.stop()
	e.cfg.Limits = schemas.Limits{MaxClusters: 150, MaxBytes: schemas.DefaultLimits().MaxBytes}
	e.start(t)
	e.emptyFleet(t)

	big := demoSpec(1) + strings.Repeat("# padding padding padding\n", (1<<20)/26)
	for i := range 100 {
		dir := filepath.Join(e.work, "clusters", fmt.Sprintf("c%03d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(big), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gittest.Git(t, e.work, "add", "-A")
	gittest.Git(t, e.work, "commit", "-qm", "100 folders, one blob")
	hostile := gittest.Git(t, e.work, "rev-parse", "HEAD")
	e.push(t, "refs/pull/1/head")
	n := e.waitNote(t, hostile, "refs/pull/1/head")
	tooLarge := 0
	for _, f := range n.Findings {
		if strings.Contains(f.Message, "larger than the 256 KiB limit") {
			tooLarge++
		}
	}
	if n.State != report.Failure || tooLarge != 100 || n.Applied {
		t.Fatalf("note of the hostile pull request: state %s, %d files refused as too large, applied %v", n.State, tooLarge, n.Applied)
	}

	for i := 100; i < 160; i++ {
		dir := filepath.Join(e.work, "clusters", fmt.Sprintf("c%03d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(demoSpec(1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gittest.Git(t, e.work, "add", "-A")
	gittest.Git(t, e.work, "commit", "-qm", "160 folders")
	crowded := gittest.Git(t, e.work, "rev-parse", "HEAD")
	e.push(t, "refs/pull/2/head")
	n = e.waitNote(t, crowded, "refs/pull/2/head")
	if n.State != report.Failure || !strings.Contains(n.Message, "over its limits: 160 cluster folders, at most 150") {
		t.Fatalf("note of the pull request over the cluster limit:\n%s", noteText(n))
	}

	// A leader died planning refs/pull/3/head: the next one reports it.
	e.stop()
	ctx := context.Background()
	if err := e.store.Put(ctx, e.store.Key("_daemon", "planning", "refs/pull/3/head"), []byte(hostile)); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	n = e.waitNote(t, hostile, "refs/pull/3/head")
	if n.State != report.Failure || !strings.Contains(n.Message, "did not finish") {
		t.Fatalf("note of the pull request whose plan did not finish:\n%s", noteText(n))
	}
	// The marker goes once the note is out.
	deadline := time.Now().Add(10 * time.Second)
	for {
		left, _ := e.store.List(ctx, e.store.Key("_daemon", "planning")+"/")
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plans still marked under way: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDaemonPullRequestKeepsAnAppliedNote: a pull request whose head is a
// commit already applied on the tracked branch does not replace that
// commit's note (in the store, the git note, the forge) with a plan.
func TestDaemonPullRequestKeepsAnAppliedNote(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Hour, "")
	applied := commitSpec(t, e.work, "demo", demoSpec(1), "demo")
	e.push(t, main)
	if n := e.waitNote(t, applied, main); n.State != report.Success || !n.Applied {
		t.Fatalf("note of the applied commit:\n%s", noteText(n))
	}
	// The forge hears of the apply after the note is written: its last
	// status is awaited before counting.
	deadline := time.Now().Add(30 * time.Second)
	for got := e.forge.of(applied, "opke/demo"); len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "success"); got = e.forge.of(applied, "opke/demo") {
		if time.Now().After(deadline) {
			t.Fatalf("the forge never heard of the apply's success: %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	forge := len(e.forge.of(applied, "opke/demo"))
	e.push(t, "refs/pull/5/head")
	// Pull requests are planned in the order of their refs: once the next
	// one has its note, the first was handled.
	next := commitSpec(t, e.work, "demo", demoSpec(2), "scale out")
	e.push(t, "refs/pull/6/head")
	e.waitNote(t, next, "refs/pull/6/head")
	n := e.gitNote(t, applied)
	if n == nil || n.Ref != main || !n.Applied || n.State != report.Success {
		t.Fatalf("the applied commit's note was replaced by a pull request's plan:\n%s", noteText(n))
	}
	if got := e.forge.of(applied, "opke/demo"); len(got) != forge {
		t.Errorf("the forge was told of the pull request on the applied commit: %v", got)
	}
}

// emptyFleet commits and pushes a fleet with no cluster (its clusters/
// folder holds a README) and waits for its note; it returns the commit.
func (e *env) emptyFleet(t *testing.T) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(e.work, "clusters"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.work, "clusters", "README"), []byte("one folder per cluster\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, e.work, "add", "-A")
	gittest.Git(t, e.work, "commit", "-qm", "an empty fleet")
	commit := gittest.Git(t, e.work, "rev-parse", "HEAD")
	e.push(t, main)
	if n := e.waitNote(t, commit, main); n.State != report.Success {
		t.Fatalf("note of the empty fleet:\n%s", noteText(n))
	}
	return commit
}

// TestDaemonRefusedAgainKeepsTheRecord: a commit applied once, back at
// the head by a force push, is refused, and its record (what was planned
// and applied for it) stays, also when a new leader refuses it again.
func TestDaemonRefusedAgainKeepsTheRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Hour, "")
	first := commitSpec(t, e.work, "demo", demoSpec(1), "demo")
	e.push(t, main)
	e.waitNote(t, first, main)
	second := commitSpec(t, e.work, "demo", demoSpec(2), "scale out")
	e.push(t, main)
	e.waitNote(t, second, main)

	gittest.Git(t, e.work, "reset", "-q", "--hard", first)
	for round, restart := range []bool{false, true} {
		since, notes := time.Now(), gittest.Git(t, e.bare, "rev-parse", "refs/notes/opke")
		if restart {
			e.start(t)
		}
		e.push(t, main)
		e.status(t, "demo", func(s daemon.ClusterStatus) bool {
			return s.Commit == first && s.State == report.Failure && s.Updated.After(since)
		})
		// The statuses are set before the note goes out. The first refusal
		// changes the note (its message); the second leaves it as it is,
		// so the note is watched for a while after its status.
		for deadline := time.Now().Add(10 * time.Second); !restart && gittest.Git(t, e.bare, "rev-parse", "refs/notes/opke") == notes; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no note pushed for the refusal", round)
			}
		}
		for watch := time.Now().Add(2 * time.Second); time.Now().Before(watch); time.Sleep(100 * time.Millisecond) {
			n := e.gitNote(t, first)
			if n == nil || !strings.HasPrefix(n.Message, "not applied") || n.Clusters["demo"] == nil || n.Clusters["demo"].Plan == nil {
				t.Fatalf("round %d: the record of the commit applied once is gone: %+v", round, n)
			}
		}
	}
}

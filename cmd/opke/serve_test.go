package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/state"
)

// TestMain lets the test binary be opke itself (OPKE_TEST_MAIN=1), so the
// daemon tests run real processes they can kill -9.
func TestMain(m *testing.M) {
	if os.Getenv("OPKE_TEST_MAIN") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	// validate's golden outputs judge upstream's support on a fixed day.
	lifecycleNow = func() time.Time { return time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC) }
	os.Exit(m.Run())
}

// daemonProc starts opke serve as a process of its own.
func daemonProc(t *testing.T, args ...string) (*exec.Cmd, *proctest.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), "OPKE_TEST_MAIN=1")
	out := &proctest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("opke serve (pid %d):\n%s", cmd.Process.Pid, out)
		}
	})
	return cmd, out
}

// TestTwoDaemonsTheStandbyFinishesThePlan: two opke serve processes on one
// etcd share the fleet; the daemon that owns the cluster starts creating
// it and is killed (-9) mid-apply; the other adopts the cluster (and
// leads, if it did not), resumes the journaled plan and finishes it: the
// commit gets its success note, and every server exists once.
func TestTwoDaemonsTheStandbyFinishesThePlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	simDir := t.TempDir()
	sim, err := cloudsim.Start(ctx, cloudsim.Options{StateDir: simDir, BootDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	store, storeDir := statetest.OpenDir(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, statetest.Key(), 0o600); err != nil {
		t.Fatal(err)
	}
	bare, work := gittest.Remote(t)
	base := t.TempDir()
	spec, err := os.ReadFile(filepath.Join("..", "..", "clusters", "demo", "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(work, "clusters", "demo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "clusters", "demo", "cluster.yaml"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "-qm", "add demo")
	commit := gittest.Git(t, work, "rev-parse", "HEAD")

	args := func(name string) []string {
		return append(etcdFlags(store, storeDir), "--repo", "file://"+bare, "--sim-state", simDir,
			"--encryption-key-file", keyFile, "--data-dir", filepath.Join(base, name), "--listen", "127.0.0.1:0",
			"--leader-ttl", "2s", "--interval", "1s", "--log-format", "json", "--gc-percent", "60")
	}
	first, firstOut := daemonProc(t, args("a")...)
	waitFor(t, "the first daemon to lead", func() bool {
		id, err := store.Leader(ctx)
		return err == nil && strings.HasSuffix(id, fmt.Sprintf("-%d", first.Process.Pid))
	})
	second, secondOut := daemonProc(t, args("b")...)
	var members []string
	waitFor(t, "both daemons to share the fleet", func() bool {
		members, _, err = store.Members(ctx)
		return err == nil && len(members) == 2
	})
	gittest.Git(t, work, "push", "-q", "origin", "main")
	// Kill the cluster's owner once a few steps are journaled, before the
	// end; the other finishes.
	owner, survivor, survivorOut, survivorDir := first, second, secondOut, "b"
	if strings.HasSuffix(daemon.Owner(members, "demo"), fmt.Sprintf("-%d", second.Process.Pid)) {
		owner, survivor, survivorOut, survivorDir = second, first, firstOut, "a"
	}
	waitFor(t, "the owner to journal steps", func() bool {
		entries, err := store.List(ctx, store.Key("_journal", "demo")+"/")
		return err == nil && len(entries) >= 6
	})
	if err := owner.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	if _, err := store.Get(ctx, store.Key("_open", "demo")); err != nil {
		t.Fatalf("the killed owner left no open journal (it finished first?): %v", err)
	}

	var note report.Note
	waitFor(t, "the commit's success note", func() bool {
		out, ok := gittest.Record(t, bare, commit)
		return ok && json.Unmarshal(out, &note) == nil && note.State == report.Success
	})
	if id, err := store.Leader(ctx); err != nil || !strings.HasSuffix(id, fmt.Sprintf("-%d", survivor.Process.Pid)) {
		t.Errorf("leader %q (%v), want the surviving daemon", id, err)
	}
	if c := note.Clusters["demo"]; c == nil || !strings.Contains(c.Summary, "after the daemon applying it stopped") || c.Plan == nil {
		t.Errorf("the note does not say the survivor finished the killed daemon's plan: %+v", c)
	}
	// The status says the commit is applied, though its steps are in the
	// journal Resume finished, not in the note.
	var status struct {
		Applied string `json:"applied"`
	}
	// The status is written beside the note, not before it: wait for it.
	waitFor(t, "the status to say the commit is applied", func() bool {
		b, err := store.Get(ctx, store.Key("_status", "demo"))
		return err == nil && json.Unmarshal(b, &status) == nil && status.Applied == commit
	})
	if !strings.Contains(survivorOut.String(), "resuming an interrupted apply") {
		t.Error("the surviving daemon did not resume the journaled plan")
	}
	clients, err := cloud.Connect(ctx, cloud.Target{File: filepath.Join(simDir, "clouds.yaml"), Cloud: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	pages, err := servers.List(clients.Compute, nil).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := servers.ExtractServers(pages)
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	want := []string{"demo-controller-0", "demo-default-0", "demo-default-1", "demo-gateway-0"}
	if !slices.Equal(names, want) {
		t.Errorf("servers %v, want each of %v once", names, want)
	}
	// A command on the daemon's data dir finds its simulator: the
	// kubeconfig reaches the API's floating IP through the edge.
	code, kc, stderr := opke(t, append([]string{"kubeconfig", "--cluster", "demo", "--data-dir", filepath.Join(base, survivorDir),
		"--encryption-key-file", keyFile}, etcdFlags(store, storeDir)...)...)
	if code != exitOK || !strings.Contains(kc, "proxy-url: socks5://"+sim.Edge()+"\n") {
		t.Errorf("kubeconfig on the daemon's data dir: exit %d, %s, want the edge's proxy-url in\n%s", code, stderr, kc)
	}
	// So do plan (no --repo: the fleet the daemon tracks, which it
	// applied; the folder the test runs in holds no fleet at all), ssh and
	// backup, with no cloud flag.
	dataDir := filepath.Join(base, survivorDir)
	// The flags go before the arguments: after ssh's "--" they would be
	// the command's.
	onDaemon := func(args ...string) (int, string, string) {
		n := 1
		if args[0] == "backup" {
			n = 2
		}
		flags := append([]string{"--data-dir", dataDir, "--encryption-key-file", keyFile}, etcdFlags(store, storeDir)...)
		return opke(t, slices.Concat(args[:n], flags, args[n:])...)
	}
	code, out, stderr := onDaemon("plan", "--cluster", "demo")
	if want := "Working on the fleet the daemon on " + dataDir + " tracks: file://" + bare + ", branch main"; code != exitOK ||
		out != "No changes. The fleet matches its specs.\n" || !strings.Contains(stderr, want) {
		t.Errorf("plan on the daemon's data dir: exit %d, want no changes and %q\nstdout: %s\nstderr: %s", code, want, out, stderr)
	}
	code, out, stderr = onDaemon("ssh", "--cluster", "demo", "demo-default-1", "--", "cat", "/etc/opke/role")
	if code != exitOK || out != "worker\n" {
		t.Errorf("ssh demo-default-1 -- cat /etc/opke/role: exit %d, %q, %s", code, out, stderr)
	}
	if code, _, stderr = onDaemon("ssh", "--cluster", "demo", "demo-default-1", "--", "cat", "/etc/nothing"); code != 1 {
		t.Errorf("ssh: a command that fails gives its exit status: exit %d, %s", code, stderr)
	}
	if code, _, stderr = onDaemon("ssh", "--cluster", "demo", "demo-default-7"); code != exitUsage ||
		!strings.Contains(stderr, "cluster demo has no host demo-default-7 (its hosts: demo-controller-0, demo-default-0, demo-default-1, demo-gateway-0)") {
		t.Errorf("ssh to a host the cluster lacks: exit %d, %s", code, stderr)
	}
	if code, out, stderr = onDaemon("backup", "list", "--cluster", "demo"); code != exitOK {
		t.Errorf("backup list on the daemon's data dir: exit %d\n%s%s", code, out, stderr)
	}
	// With --repo another fleet: planned, and said loudly.
	if code, _, stderr = onDaemon("plan", "--cluster", "demo", "--repo", work); code != exitOK ||
		!strings.Contains(stderr, "Warning: the daemon on "+dataDir+" tracks file://"+bare+", not "+work) {
		t.Errorf("plan --repo elsewhere: exit %d, want the warning\n%s", code, stderr)
	}
	// Stopped, the daemon says so and exits 0.
	if err := survivor.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := survivor.Wait(); err != nil {
		t.Errorf("opke serve stopped by SIGTERM: %v", err)
	}
	if !strings.Contains(survivorOut.String(), `"msg":"the collector's target set","gc_percent":60,"from":"config"`) {
		t.Errorf("the daemon did not set --gc-percent:\n%s", survivorOut)
	}
	if !strings.Contains(survivorOut.String(), `"msg":"the daemon stopped"`) {
		t.Errorf("the daemon did not say it stopped:\n%s", survivorOut)
	}
}

// etcdFlags point a command at the embedded etcd of a test store in
// dataDir, with the certificates it asks for.
func etcdFlags(store *state.Store, dataDir string) []string {
	ca, cert, key := state.LocalTLSFiles(dataDir)
	return []string{"--etcd", strings.Join(store.Endpoints(), ","), "--etcd-ca", ca, "--etcd-cert", cert, "--etcd-key", key}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// planEnv is a simulator, a fleet repository holding the example demo
// cluster, and a data dir with its key file.
type planEnv struct {
	simDir, repo, dataDir, keyFile string
	sim                            *cloudsim.Sim
	demo                           string
	git                            *git.Repository
	first                          plumbing.Hash
}

func newPlanEnv(t *testing.T) *planEnv {
	t.Helper()
	e := &planEnv{simDir: t.TempDir(), repo: t.TempDir(), dataDir: t.TempDir()}
	var err error
	if e.sim, err = cloudsim.Start(context.Background(), cloudsim.Options{StateDir: e.simDir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.sim.Close() })
	demo, err := os.ReadFile("../../clusters/demo/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e.demo = string(demo)
	e.git = gittest.Init(t, e.repo)
	e.first = gittest.Commit(t, e.git, "demo", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": e.demo}))
	e.keyFile = filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(e.keyFile, []byte(hex.EncodeToString(statetest.Key())), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// plan runs opke plan against the environment with more flags.
func (e *planEnv) plan(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return opke(t, append([]string{"plan", "--repo", e.repo, "--sim-state", e.simDir, "--data-dir", e.dataDir,
		"--encryption-key-file", e.keyFile}, args...)...)
}

// converge builds the fleet's clusters by hand and records their ledger
// in the data dir's store.
func (e *planEnv) converge(t *testing.T, names ...string) {
	t.Helper()
	ctx := context.Background()
	store, err := state.Open(ctx, state.Options{DataDir: e.dataDir, EncryptionKey: statetest.Key()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clients, err := cloud.Connect(ctx, cloud.Target{File: filepath.Join(e.simDir, "clouds.yaml"), Cloud: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	var cs []*schemas.Cluster
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(e.repo, "clusters", n, "cluster.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, schemas.Parse(n, data).Cluster)
	}
	cloudtest.Converge(t, store, clients, time.Now(), cs...)
}

// TestPlanNewCluster: the plan of a cluster not built yet, as text and as
// JSON (golden files), its exit codes, and the plan saved with --out.
func TestPlanNewCluster(t *testing.T) {
	t.Parallel()
	e := newPlanEnv(t)
	code, text, stderr := e.plan(t)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden(t, "plan/new.txt", text)
	if !strings.HasSuffix(text, "\nPlan: 31 to create, 0 to update, 0 to delete, 51 uploads, 7 restarts, 6 manifests to apply.\n") {
		t.Errorf("closing line: %q", text[strings.LastIndex(strings.TrimSuffix(text, "\n"), "\n")+1:])
	}

	out := filepath.Join(t.TempDir(), "demo.plan")
	code, js, stderr := e.plan(t, "--output", "json", "--out", out, "--detailed-exitcode")
	if code != exitChanges {
		t.Fatalf("--detailed-exitcode with changes: exit %d, want %d: %s", code, exitChanges, stderr)
	}
	golden(t, "plan/new.json", js)
	saved, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(saved) != js {
		t.Error("the saved plan differs from the printed one")
	}
	if !strings.Contains(stderr, "Saved the plan to "+out) {
		t.Errorf("stderr %q does not say where the plan went", stderr)
	}
	p, err := diff.Read(saved)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Commit) != 40 || p.StateRevision == 0 {
		t.Errorf("saved plan: commit %q, state revision %d", p.Commit, p.StateRevision)
	}
	for _, c := range append(p.Changes, p.Drift...) {
		if c.ID == "" || c.DependsOn == nil || c.Cluster != "demo" || c.Address.IsZero() || c.Reason == "" {
			t.Errorf("change lacks a field: %+v", c)
		}
	}
}

// TestPlanConvergedAndPullRequest: a converged fleet prints "No changes."
// and an empty changes array (exit 0 with --detailed-exitcode); a commit
// that scales out plans the new host, and --rev plans a revision without
// the work tree.
func TestPlanConvergedAndPullRequest(t *testing.T) {
	t.Parallel()
	e := newPlanEnv(t)
	e.converge(t, "demo")
	code, text, stderr := e.plan(t, "--detailed-exitcode")
	if code != exitOK || text != "No changes. The fleet matches its specs.\n" {
		t.Fatalf("converged fleet: exit %d, stdout %q, stderr %s", code, text, stderr)
	}
	_, js, _ := e.plan(t, "--output", "json")
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(js), &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw["changes"]) != "[]" || string(raw["drift"]) != "[]" || string(raw["format_version"]) != `"1.0"` {
		t.Errorf("converged JSON: changes %s, drift %s, format_version %s", raw["changes"], raw["drift"], raw["format_version"])
	}

	base := e.first
	gittest.Commit(t, e.git, "scale out", gittest.Files(map[string]string{
		"clusters/demo/cluster.yaml": strings.Replace(e.demo, "count: 2", "count: 3", 1)}))
	code, text, stderr = e.plan(t, "--detailed-exitcode")
	if code != exitChanges {
		t.Fatalf("scale out: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"+ openstack/server/demo-default-2 ", "+ openstack/port/demo-default-2 ", "↑ host/demo-default-2/etc/kubernetes/kubelet.env ",
		"\nPlan: 2 to create, 0 to update, 0 to delete, "} {
		if !strings.Contains(text, want) {
			t.Errorf("scale-out plan lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "demo-default-0") {
		t.Errorf("scale out touches an existing host:\n%s", text)
	}
	code, js, stderr = e.plan(t, "--rev", base.String(), "--output", "json", "--detailed-exitcode")
	if code != exitOK {
		t.Fatalf("plan of the base revision: exit %d: %s", code, stderr)
	}
	p, err := diff.Read([]byte(js))
	if err != nil || p.Commit != base.String() {
		t.Errorf("plan of --rev %s records commit %q (%v)", base, p.Commit, err)
	}
}

func TestPlanRefusals(t *testing.T) {
	t.Parallel()
	e := newPlanEnv(t)
	invalid := writeFleet(t, map[string]string{"demo": strings.Replace(e.demo, "count: 2", "count: 501", 1)})
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"bad output", []string{"--output", "yaml"}, exitUsage, `--output "yaml": want text or json`},
		{"unknown cluster", []string{"--cluster", "nope"}, exitUsage, `cluster "nope" is not in the fleet, the state store or the clouds`},
		{"invalid fleet", []string{"--repo", invalid}, exitFindings, "spec.workerPools[0].count: must be <= 500"},
		{"no sim.json", []string{"--sim-state", t.TempDir()}, exitUsage, "no sim.json"},
		{"sim and clouds.yaml", []string{"--cloud-config", "clouds.yaml"}, exitUsage, "exclude each other"},
		{"bad proxy", []string{"--socks-proxy", "http://127.0.0.1:3128"}, exitUsage, "want socks5://HOST:PORT"},
		{"unknown revision", []string{"--rev", "no-such-branch"}, exitUsage, "unknown revision"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, stderr := e.plan(t, tt.args...)
			if code != tt.wantCode || out != "" || !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, stderr, tt.wantCode, tt.wantStderr)
			}
		})
	}
	t.Run("key required outside the simulator", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := opke(t, "plan", "--repo", e.repo, "--cloud-config", filepath.Join(e.simDir, "clouds.yaml"), "--data-dir", t.TempDir())
		if code != exitUsage || !strings.Contains(stderr, "--encryption-key-file is required unless the cloud is the simulator") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
}

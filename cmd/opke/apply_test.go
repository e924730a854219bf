package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"opke.dev/opke/internal/gittest"
)

// apply runs opke apply against the environment, with stdin.
func (e *planEnv) apply(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return opkeInput(t, stdin, append([]string{"apply", "--repo", e.repo, "--sim-state", e.simDir, "--data-dir", e.dataDir,
		"--encryption-key-file", e.keyFile}, args...)...)
}

var summaryLine = regexp.MustCompile(`\nApply complete: (\d+) done, 0 failed, 0 skipped, 0 not started, in [0-9.]+m?s\.\n$`)

// TestApplyCommand: a plan is shown and applied only on "yes"; the
// applied fleet plans nothing; opke kubeconfig prints the admin's.
func TestApplyCommand(t *testing.T) {
	t.Parallel()
	e := newPlanEnv(t)

	code, out, stderr := e.apply(t, "no\n")
	if code != exitFailure || !strings.Contains(out, "Plan: 31 to create") || !strings.HasSuffix(out, "Apply cancelled.\n") {
		t.Fatalf("answer no: exit %d\n%s\n%s", code, out, stderr)
	}
	if code, _, _ := e.plan(t, "--detailed-exitcode"); code != exitChanges {
		t.Fatalf("after a cancelled apply, plan exit %d, want changes", code)
	}
	code, _, stderr = opke(t, "kubeconfig", "--cluster", "demo", "--data-dir", e.dataDir, "--encryption-key-file", e.keyFile)
	if code != exitFailure || !strings.Contains(stderr, "cluster demo has no kubeconfig in the state store: it is not applied yet") {
		t.Errorf("kubeconfig before apply: exit %d, %s", code, stderr)
	}

	code, out, stderr = e.apply(t, "yes\n")
	if code != exitOK {
		t.Fatalf("answer yes: exit %d\n%s\n%s", code, out, stderr)
	}
	m := summaryLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line:\n%s", out)
	}
	for _, want := range []string{"Apply this plan? Only 'yes' is accepted:", " +   openstack/network/demo: done (", " ↻   host/demo-controller-0/units/kubelet.service: done ("} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	if code, text, _ := e.plan(t, "--detailed-exitcode"); code != exitOK {
		t.Errorf("after apply, plan exit %d:\n%s", code, text)
	}
	code, out, _ = e.apply(t, "", "--auto-approve")
	if code != exitOK || out != "No changes. The fleet matches its specs.\n" {
		t.Errorf("apply of an applied fleet: exit %d, %q", code, out)
	}

	code, kc, stderr := opke(t, "kubeconfig", "--cluster", "demo", "--data-dir", e.dataDir, "--encryption-key-file", e.keyFile)
	if code != exitOK || !regexp.MustCompile(`server: https://[0-9.]+:6443\n`).MatchString(kc) ||
		!strings.Contains(kc, "client-key-data: ") || !strings.Contains(kc, "current-context: admin@demo") {
		t.Errorf("kubeconfig: exit %d, %s\n%s", code, stderr, kc)
	}
	file := filepath.Join(t.TempDir(), "kc")
	if code, _, stderr := opke(t, "kubeconfig", "--cluster", "demo", "--data-dir", e.dataDir, "--encryption-key-file", e.keyFile, "--out", file); code != exitOK {
		t.Fatalf("kubeconfig --out: exit %d, %s", code, stderr)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig --out: %v, mode %v", err, st.Mode())
	}
	if code, _, stderr := opke(t, "kubeconfig", "--data-dir", e.dataDir); code != exitUsage || !strings.Contains(stderr, "--cluster is required") {
		t.Errorf("kubeconfig without --cluster: exit %d, %s", code, stderr)
	}
	// The floating IP is the simulator's: kubectl reaches it through the
	// edge, or through the proxy named.
	var info struct{ Edge string }
	if b, err := os.ReadFile(filepath.Join(e.simDir, "sim.json")); err != nil || json.Unmarshal(b, &info) != nil || info.Edge == "" {
		t.Fatalf("sim.json: %v", err)
	}
	if strings.Contains(kc, "proxy-url") {
		t.Errorf("a kubeconfig with no simulator named carries a proxy:\n%s", kc)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sim-state", e.simDir}, "proxy-url: socks5://" + info.Edge + "\n"},
		{[]string{"--proxy-url", "http://127.0.0.1:3128"}, "proxy-url: http://127.0.0.1:3128\n"},
	} {
		code, kc, stderr := opke(t, append([]string{"kubeconfig", "--cluster", "demo", "--data-dir", e.dataDir, "--encryption-key-file", e.keyFile}, c.args...)...)
		if code != exitOK || !strings.Contains(kc, c.want) || !strings.Contains(kc, "client-key-data: ") {
			t.Errorf("kubeconfig %v: exit %d, %s, want %q in\n%s", c.args, code, stderr, c.want, kc)
		}
	}
	if code, _, stderr := opke(t, "kubeconfig", "--cluster", "demo", "--data-dir", e.dataDir, "--encryption-key-file", e.keyFile, "--proxy-url", "127.0.0.1:3128"); code != exitUsage || !strings.Contains(stderr, "want socks5://") {
		t.Errorf("kubeconfig --proxy-url without a scheme: exit %d, %s", code, stderr)
	}
}

// TestApplySavedPlan: a saved plan is applied as it is, and refused once
// the commit or the cluster's state moved.
func TestApplySavedPlan(t *testing.T) {
	t.Parallel()
	e := newPlanEnv(t)
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.plan"), filepath.Join(dir, "second.plan")
	for _, f := range []string{first, second} {
		if code, _, stderr := e.plan(t, "--out", f); code != exitOK {
			t.Fatalf("plan --out: exit %d, %s", code, stderr)
		}
	}
	code, out, stderr := e.apply(t, "", first)
	if code != exitOK || strings.Contains(out, "Apply this plan?") || summaryLine.FindString(out) == "" {
		t.Fatalf("apply of a saved plan: exit %d\n%s\n%s", code, out, stderr)
	}
	// The second plan was made before the first was applied.
	code, _, stderr = e.apply(t, "", second)
	if code != exitFailure || !strings.Contains(stderr, "the cluster's state moved since the plan was made") {
		t.Errorf("a plan the state moved past: exit %d, %s", code, stderr)
	}

	gittest.Commit(t, e.git, "scale out", gittest.Files(map[string]string{
		"clusters/demo/cluster.yaml": strings.Replace(e.demo, "count: 2", "count: 3", 1)}))
	code, _, stderr = e.apply(t, "", first)
	if code != exitFailure || !strings.Contains(stderr, "was made at commit "+e.first.String()[:12]) {
		t.Errorf("a plan the commit moved past: exit %d, %s", code, stderr)
	}

	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"missing file", []string{filepath.Join(dir, "none.plan")}, "no such file"},
		{"not a plan", []string{e.keyFile}, "plan format"},
		{"cluster and file", []string{"--cluster", "demo", first}, "--cluster and a plan file exclude each other"},
		{"two files", []string{first, second}, "accepts at most 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := e.apply(t, "", tt.args...)
			if code != exitUsage || out != "" || !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, stderr, tt.wantStderr)
			}
		})
	}
}

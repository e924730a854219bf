package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"opke.dev/opke/internal/gittest"
	goldenfile "opke.dev/opke/internal/golden"
)

// opke runs the command line in-process and returns its exit code and output.
func opke(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return opkeInput(t, "", args...)
}

// opkeInput is opke with stdin.
func opkeInput(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// golden compares got with testdata/name (internal/golden).
func golden(t *testing.T, name, got string) {
	t.Helper()
	goldenfile.File(t, filepath.Join("testdata", name), []byte(got))
}

// writeFleet writes specs as clusters/<name>/cluster.yaml under a new folder.
func writeFleet(t *testing.T, specs map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "clusters"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, spec := range specs {
		p := filepath.Join(dir, "clusters", name, "cluster.yaml")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func exampleSpec(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "clusters", name, "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestValidateExampleFleet(t *testing.T) {
	t.Parallel()
	code, out, errOut := opke(t, "validate", "../..")
	if code != exitOK || out != "2 clusters, 0 errors, 0 warnings\n" || errOut != "" {
		t.Fatalf("opke validate ../.. = %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// badFleet has problems in two files, to show they are all reported at once.
func badFleet(t *testing.T) string {
	demo := exampleSpec(t, "demo")
	prod := exampleSpec(t, "prod")
	return writeFleet(t, map[string]string{
		"demo":  strings.Replace(demo, "count: 2", "count: 501", 1),
		"prod":  strings.NewReplacer("count: 3\n    flavor", "count: 2\n    flavor", "podCIDR: 10.2.0.0/16", "podCIDR: 192.168.0.0/16", "  gateway:\n", "  gatway:\n").Replace(prod),
		"other": strings.Replace(demo, "name: demo", "name: demo", 1),
		"empty": "",
	})
}

func TestValidateFindings(t *testing.T) {
	t.Parallel()
	dir := badFleet(t)
	for _, output := range []string{"text", "json"} {
		t.Run(output, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := opke(t, "validate", dir, "--output", output)
			if code != exitFindings {
				t.Errorf("exit code %d, want %d (stderr %q)", code, exitFindings, errOut)
			}
			golden(t, "validate/findings."+output, strings.ReplaceAll(out, dir, "FLEET"))
		})
	}
}

// TestSymlinksOutOfTheFolder: a spec that is a symlink to a file outside
// the working folder (someone's key) is neither read nor echoed by
// validate or render; a symlink inside the folder is followed.
func TestSymlinksOutOfTheFolder(t *testing.T) {
	t.Parallel()
	fleet := writeFleet(t, map[string]string{"demo": exampleSpec(t, "demo")})
	secret := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(secret, []byte("key: very-secret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(fleet, "clusters", "evil")
	if err := os.MkdirAll(evil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(evil, "cluster.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"validate", fleet},
		{"render", "--repo", fleet, "--cluster", "demo", "--out", filepath.Join(t.TempDir(), "out"), "--data-dir", t.TempDir()},
	} {
		code, out, stderr := opke(t, args...)
		if code == exitOK || !strings.Contains(stderr, "escapes") || strings.Contains(out+stderr, "very-secret-value") {
			t.Errorf("%s with a spec linked out of the folder: exit %d\n%s%s", args[0], code, out, stderr)
		}
	}
	// Inside the folder, a link is the file it names.
	if err := os.Remove(filepath.Join(evil, "cluster.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(evil); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(fleet, "clusters", "demo", "cluster.yaml"), filepath.Join(fleet, "demo.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "demo.yaml"), filepath.Join(fleet, "clusters", "demo", "cluster.yaml")); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := opke(t, "validate", fleet); code != exitOK {
		t.Errorf("validate with a link inside the folder: exit %d\n%s%s", code, out, stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	fleet := writeFleet(t, map[string]string{})
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate" for "opke"`},
		{"unknown flag", []string{"validate", "--frob"}, "unknown flag: --frob"},
		{"too many arguments", []string{"validate", "a", "b"}, "accepts at most 1 arg(s), received 2"},
		{"folder missing", []string{"validate", filepath.Join(fleet, "nope")}, "not a folder"},
		{"not a fleet root", []string{"validate", t.TempDir()}, "not a fleet root: no clusters/ folder"},
		{"bad output format", []string{"validate", fleet, "--output", "yaml"}, `--output "yaml": want text or json`},
		{"bad log level", []string{"validate", fleet, "--log-level", "loud"}, `--log-level "loud"`},
		{"base outside a repository", []string{"validate", fleet, "--base", "HEAD"}, "--base: " + fleet + ": not inside a git repository"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := opke(t, tt.args...)
			if code != exitUsage {
				t.Errorf("exit code %d, want %d", code, exitUsage)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if !strings.Contains(errOut, tt.wantStderr) || !strings.Contains(errOut, "--help' for usage") {
				t.Errorf("stderr %q, want it to contain %q and a pointer to --help", errOut, tt.wantStderr)
			}
		})
	}
}

func TestEveryCommandHasHelpWithExample(t *testing.T) {
	t.Parallel()
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	for _, c := range a.rootCommand().Commands() {
		if c.Example == "" || c.Short == "" {
			t.Errorf("opke %s: needs a Short line and an Example", c.Name())
		}
		code, out, _ := opke(t, c.Name(), "--help")
		if code != exitOK || !strings.Contains(out, "Examples:") {
			t.Errorf("opke %s --help: exit %d, output %q", c.Name(), code, out)
		}
	}
}

// TestValidateBase runs --base against a real repository: the working tree
// is checked against the fleet at an earlier commit.
func TestValidateBase(t *testing.T) {
	t.Parallel()
	demo, prod := exampleSpec(t, "demo"), exampleSpec(t, "prod")
	deletable := strings.Replace(demo, "name: demo", "name: old", 1) + "  deletionPolicy: Delete\n"
	tests := []struct {
		name     string
		base     map[string]*string // committed, then the base revision
		worktree map[string]*string // committed on top, then validated
		rev      string
		wantCode int
		golden   string
	}{
		{"allowed changes", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": demo}),
			gittest.Files(map[string]string{"clusters/demo/cluster.yaml": strings.NewReplacer("v1.36.1", "v1.37.0", "count: 2", "count: 5").Replace(demo)}),
			"HEAD~1", exitOK, "base/allowed.txt"},
		{"refused changes", gittest.Files(map[string]string{"clusters/prod/cluster.yaml": prod}),
			gittest.Files(map[string]string{"clusters/prod/cluster.yaml": strings.NewReplacer(
				"v1.35.4", "v1.37.0", "hostCIDR: 192.168.20.0/24", "hostCIDR: 192.168.30.0/24",
				"count: 3\n    flavor: m1.large", "count: 5\n    flavor: m1.xlarge").Replace(prod)}),
			"HEAD~1", exitFindings, "base/refused.txt"},
		{"removed clusters", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": demo, "clusters/old/cluster.yaml": deletable}),
			map[string]*string{"clusters/demo/cluster.yaml": nil, "clusters/old/cluster.yaml": nil},
			"HEAD~1", exitOK, "base/removed.txt"},
		{"base before the fleet existed", gittest.Files(map[string]string{"README.md": "new\n"}),
			gittest.Files(map[string]string{"clusters/demo/cluster.yaml": demo}),
			"HEAD~1", exitOK, "base/first.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			repo := gittest.Init(t, dir)
			gittest.Commit(t, repo, "base", tt.base)
			if len(tt.worktree) > 0 {
				gittest.Commit(t, repo, "change", tt.worktree)
			}
			if err := os.MkdirAll(filepath.Join(dir, "clusters"), 0o755); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := opke(t, "validate", dir, "--base", tt.rev)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; stderr %q", code, tt.wantCode, errOut)
			}
			golden(t, tt.golden, strings.ReplaceAll(out, dir, "REPO"))
		})
	}
}

func TestValidateBaseUnknownRevision(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gittest.Commit(t, gittest.Init(t, dir), "base", gittest.Files(map[string]string{"clusters/README.md": "x\n"}))
	code, _, errOut := opke(t, "validate", dir, "--base", "no-such-branch")
	if code != exitUsage || !strings.Contains(errOut, `unknown revision "no-such-branch"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

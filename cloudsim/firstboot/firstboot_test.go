package firstboot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// goldenConfigs are render/ignition's golden configs, one per role.
func goldenConfigs(t *testing.T) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob("../../render/ignition/testdata/*.ign")
	if err != nil || len(paths) != 3 {
		t.Fatalf("golden configs: %v %v", paths, err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".ign")] = b
	}
	return out
}

// tree describes every entry under root: type, mode, owner and content
// (the result marker's content varies by run and is left out). A preset
// file's lines are sorted: Ignition writes them from a Go map, in a
// different order on each run, and their order means nothing to systemd
// (each unit has one line).
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st := info.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v %d:%d", info.Mode(), st.Uid, st.Gid)
		if info.Mode().IsRegular() && rel != "etc/.ignition-result.json" {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.HasSuffix(rel, ".preset") {
				lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
				slices.Sort(lines)
				b = []byte(strings.Join(lines, "\n") + "\n")
			}
			desc += " " + string(b)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestParity applies each golden config with Debian's ignition and with
// the fallback: the two trees must be the same, modes and owners included.
func TestParity(t *testing.T) {
	if !DebianAvailable() {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI must run this as root with Debian's ignition installed (euid %d)", os.Geteuid())
		}
		t.Skip("needs root and Debian's ignition package; .ci/run has both")
	}
	for role, cfg := range goldenConfigs(t) {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			real, fallback := t.TempDir(), t.TempDir()
			// uid 500 must reach core's home: open the test's own folder.
			if err := os.Chmod(filepath.Dir(real), 0o755); err != nil {
				t.Fatal(err)
			}
			rootA, err := Seed(real)
			if err != nil {
				t.Fatal(err)
			}
			if err := ApplyDebian(context.Background(), real, rootA, cfg); err != nil {
				t.Fatal(err)
			}
			rootB, err := Seed(fallback)
			if err != nil {
				t.Fatal(err)
			}
			if err := ApplyFallback(rootB, cfg); err != nil {
				t.Fatal(err)
			}
			a, b := tree(t, rootA), tree(t, rootB)
			if len(a) < 10 {
				t.Fatalf("Debian's ignition wrote only %d entries", len(a))
			}
			if diff := cmp.Diff(a, b); diff != "" {
				t.Errorf("trees differ (-debian +fallback):\n%s", diff)
			}
		})
	}
}

// TestFallbackWritesKeysAndUnits runs as any user: the config's content
// lands where Ignition puts it.
func TestFallbackWritesKeysAndUnits(t *testing.T) {
	t.Parallel()
	cfg := goldenConfigs(t)["controller"]
	root, err := Seed(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := ApplyFallback(root, cfg); err != nil {
		t.Fatal(err)
	}
	got := tree(t, root)
	for p, want := range map[string]string{
		"home/core/.ssh/authorized_keys.d/ignition":    "-rw------- ",
		"etc/systemd/system-preset/20-ignition.preset": "enable etcd-member.service\nenable kubelet.service\n", // sorted by tree
		"etc/kubernetes/pki":                           "drwx------ ",
		"etc/systemd/system/kubelet.service":           "EnvironmentFile=/etc/kubernetes/kubelet.env",
	} {
		if !strings.Contains(got[p], want) {
			t.Errorf("%s = %q, want it to contain %q", p, got[p], want)
		}
	}
}

// TestRejectedConfigs: what Ignition refuses is ErrInvalidConfig, both ways.
func TestRejectedConfigs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, config string }{
		{name: "not JSON", config: "#cloud-config\nusers: []\n"},
		{name: "unknown version", config: `{"ignition":{"version":"9.9.9"}}`},
		{name: "relative path", config: `{"ignition":{"version":"3.3.0"},"storage":{"files":[{"path":"etc/x","contents":{"source":"data:,x"}}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := Apply(context.Background(), t.TempDir(), []byte(tc.config))
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Apply: %v, want ErrInvalidConfig", err)
			}
			root, err := Seed(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := ApplyFallback(root, []byte(tc.config)); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("fallback: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

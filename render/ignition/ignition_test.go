package ignition

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"opke.dev/opke/internal/golden"

	"github.com/google/go-cmp/cmp"

	"opke.dev/opke/cloudsim/firstboot"
	"opke.dev/opke/schemas"
)

const opkeKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEf4mS9KkD1lV6l0pQn5bqg3Sx2dy9x+hXqD1EdzZkCG opke@prod"

func render(t *testing.T, role schemas.Role) []byte {
	t.Helper()
	out, err := Render(Input{Role: role, OPKEPublicKey: opkeKey})
	if err != nil {
		t.Fatalf("render %s: %v", role, err)
	}
	return out
}

// TestGolden keeps each role's config under testdata/<role>.ign, indented
// for review; regenerate with go test -update.
func TestGolden(t *testing.T) {
	t.Parallel()
	for _, role := range schemas.Roles() {
		t.Run(string(role), func(t *testing.T) {
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, render(t, role), "", "  "); err != nil {
				t.Fatal(err)
			}
			golden.File(t, filepath.Join("testdata", string(role)+".ign"), pretty.Bytes())
		})
	}
}

// secretOrVersion matches what must never ride in user_data: private keys,
// bearer or bootstrap tokens, and Kubernetes or etcd versions.
var secretOrVersion = regexp.MustCompile(`PRIVATE KEY|BEGIN CERTIFICATE|[a-z0-9]{6}\.[a-z0-9]{16}|(?i)token|v1\.[0-9]+\.[0-9]+|:v?[0-9]+\.[0-9]+\.[0-9]+`)

func TestUserDataHoldsNoSecretNorVersion(t *testing.T) {
	t.Parallel()
	for _, role := range schemas.Roles() {
		raw := render(t, role)
		if len(raw) > MaxUserData {
			t.Errorf("%s: %d bytes, over %d", role, len(raw), MaxUserData)
		}
		t.Logf("%s user_data: %d bytes", role, len(raw))
		// Scan the decoded file contents too, not only the JSON.
		text := string(raw) + decodedContents(t, raw)
		if m := secretOrVersion.FindString(text); m != "" {
			t.Errorf("%s user_data holds %q", role, m)
		}
	}
	if m := secretOrVersion.FindString("image: registry.k8s.io/kube-apiserver:v1.35.1"); m == "" {
		t.Fatal("the scan itself misses a version")
	}
}

// decodedContents is every file's content of a config, in path order.
func decodedContents(t *testing.T, raw []byte) string {
	t.Helper()
	files, err := Contents(raw)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(files)) {
		b.Write(files[p])
	}
	return b.String()
}

func TestRenderRefuses(t *testing.T) {
	t.Parallel()
	if _, err := Render(Input{Role: schemas.RoleWorker, OPKEPublicKey: "not a key"}); err == nil {
		t.Error("a bad public key is refused")
	}
	if _, err := Render(Input{Role: "bastion", OPKEPublicKey: opkeKey}); err == nil {
		t.Error("an unknown role is refused")
	}
}

// TestRenderIsTheBuild: a render (the role's validated template with the
// key put in) is byte for byte the config built and validated for that
// key, whatever the key's comment holds (a server's user_data that changed
// would replace it).
func TestRenderIsTheBuild(t *testing.T) {
	t.Parallel()
	rsa := "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDAa2hQqfCd1Gf7A6BH6gNNOv0p7g9YfI8gdYtdCnKyb0aZLi7nZ+0BFGGUEPFlcuw1UWX7VRs0VSxxy+0EpmqkqtBw5gVMhVGzk1C2J/h6UXlKlR9+YVD3wXWkVdnqIYL/1K4IQlEoBfGmr8uKF5ZuFpq97CUMzE4s5r8P5lDZYw=="
	for _, key := range []string{opkeKey, "  " + opkeKey + "\n", strings.TrimSuffix(opkeKey, " opke@prod"),
		opkeKey + ` <a href="x">&"\'`, placeholder, rsa + " ops"} {
		for _, role := range schemas.Roles() {
			got, err := Render(Input{Role: role, OPKEPublicKey: key})
			if err != nil {
				t.Fatalf("render %s with %q: %v", role, key, err)
			}
			want, err := build(Input{Role: role, OPKEPublicKey: key})
			if err != nil {
				t.Fatalf("build %s with %q: %v", role, key, err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("render %s with %q is not the build (-build +render):\n%s", role, key, diff)
			}
		}
	}
}

// TestDebianIgnitionAppliesEachRole runs the real ignition (fetch-offline,
// then files) on each role's config against a folder standing for the
// host's root, and checks the files, units and keys it wrote.
func TestDebianIgnitionAppliesEachRole(t *testing.T) {
	t.Parallel()
	if !firstboot.DebianAvailable() {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI must run this as root with Debian's ignition installed (euid %d)", os.Geteuid())
		}
		t.Skip("needs root and Debian's ignition package; .ci/run has both")
	}
	for _, role := range schemas.Roles() {
		t.Run(string(role), func(t *testing.T) {
			dir := t.TempDir()
			// uid 500 must reach core's home: open the test's own folder.
			if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
				t.Fatal(err)
			}
			root, err := firstboot.Seed(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := firstboot.ApplyDebian(context.Background(), dir, root, render(t, role)); err != nil {
				t.Fatal(err)
			}
			read := func(p string) string {
				t.Helper()
				b, err := os.ReadFile(filepath.Join(root, p))
				if err != nil {
					t.Fatalf("ignition did not write %s: %v", p, err)
				}
				return string(b)
			}
			if got := read("/etc/opke/role"); got != string(role)+"\n" {
				t.Errorf("/etc/opke/role = %q", got)
			}
			if !strings.Contains(read("/home/core/.ssh/authorized_keys.d/ignition"), opkeKey) {
				t.Error("OPKE's key is not authorized for core")
			}
			if role == schemas.RoleGateway {
				if !strings.Contains(read("/etc/ssh/sshd_config.d/50-opke.conf"), "AllowTcpForwarding yes") {
					t.Error("the gateway does not forward")
				}
				if _, err := os.Stat(filepath.Join(root, "etc/systemd/system/kubelet.service")); err == nil {
					t.Error("the gateway runs no kubelet")
				}
				return
			}
			preset := read("/etc/systemd/system-preset/20-ignition.preset")
			if !strings.Contains(read("/etc/systemd/system/kubelet.service"), "EnvironmentFile=/etc/kubernetes/kubelet.env") ||
				!strings.Contains(preset, "enable kubelet.service") {
				t.Errorf("kubelet unit not written or not enabled; preset:\n%s", preset)
			}
			st, err := os.Stat(filepath.Join(root, "etc/kubernetes/pki"))
			if err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("/etc/kubernetes/pki: %v %v, want mode 0700", st, err)
			}
			if role == schemas.RoleController && !strings.Contains(preset, "enable etcd-member.service") {
				t.Error("the etcd member unit is not enabled on a controller")
			}
		})
	}
}

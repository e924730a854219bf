//go:build realhosts

package world_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/world"
)

// TestMatrixIsKubeadms holds the matrix row of each Kubernetes version
// the test world runs to the etcd, CoreDNS and pause kubeadm of that
// release pins (cmd/kubeadm/app/constants), read from the module make
// world built it from. Run by make realhosts, after make world.
func TestMatrixIsKubeadms(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	cache := strings.TrimSpace(string(out))
	pin := func(src []byte, name string) string {
		m := regexp.MustCompile(`(?m)^\s*` + name + `\s*=\s*"([^"]+)"`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("kubeadm's constants name no %s", name)
		}
		return string(m[1])
	}
	for _, v := range world.KubernetesVersions() {
		t.Run(v, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(cache, "k8s.io", "kubernetes@"+v, "cmd", "kubeadm", "app", "constants", "constants.go"))
			if err != nil {
				t.Fatalf("kubeadm %s's constants (make world downloads its module): %v", v, err)
			}
			sv, err := schemas.ParseVersion(v)
			if err != nil {
				t.Fatal(err)
			}
			row, err := assets.ImagesFor(sv)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"registry.k8s.io/etcd:" + pin(src, "DefaultEtcdVersion"),
				"registry.k8s.io/coredns/coredns:" + pin(src, "CoreDNSVersion"),
				"registry.k8s.io/pause:" + pin(src, "PauseVersion"),
			}
			if d := cmp.Diff(want, []string{row.Etcd, row.CoreDNS, row.Pause}); d != "" {
				t.Errorf("minor %s's row against kubeadm %s's pins (-kubeadm +row):\n%s", sv.MinorString(), v, d)
			}
		})
	}
}

//go:build realhosts

package reconciler_test

import (
	"strings"
	"testing"

	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/world"
)

// The Kubernetes releases make e2e walks, as make world builds them
// (world.KubernetesVersions): the first, which clusters/demo names; a
// later patch release of its minor; and the next minor's release.
var e2eFirst, e2ePatch, e2eNext = func() (string, string, string) {
	v := world.KubernetesVersions()
	return v[0], v[1], v[2]
}()

// e2eImages are the matrix row of e2eFirst's minor: the images a test's
// own pods run (CoreDNS, pause), which the mirror has.
var e2eImages = func() assets.Images {
	im, err := imagesOf(e2eFirst)
	if err != nil {
		panic(err)
	}
	return im
}()

// imagesOf is the matrix row of a Kubernetes version's minor.
func imagesOf(version string) (assets.Images, error) {
	v, err := schemas.ParseVersion(version)
	if err != nil {
		return assets.Images{}, err
	}
	return assets.ImagesFor(v)
}

// etcdOf is the etcd release (3.6.8) the matrix row of a Kubernetes
// version's minor names (registry.k8s.io/etcd:3.6.8-0), the version etcd's
// members report.
func etcdOf(t testing.TB, version string) string {
	t.Helper()
	im, err := imagesOf(version)
	if err != nil {
		t.Fatal(err)
	}
	tag, ok := assets.ImageTag(im.Etcd)
	if !ok {
		t.Fatalf("etcd image %q has no tag", im.Etcd)
	}
	e, _, _ := strings.Cut(tag, "-")
	return e
}

// TestE2EVersionsWalk: the world's versions are what make e2e's steps
// say they are (a patch of the first's minor, then the next minor), and
// clusters/demo starts on the first.
func TestE2EVersionsWalk(t *testing.T) {
	first, patch, next := mustVersion(t, e2eFirst), mustVersion(t, e2ePatch), mustVersion(t, e2eNext)
	if first.Minor != patch.Minor || patch.Patch <= first.Patch {
		t.Errorf("%s -> %s is not a patch upgrade", e2eFirst, e2ePatch)
	}
	if next.Minor != patch.Minor+1 {
		t.Errorf("%s -> %s is not the next minor", e2ePatch, e2eNext)
	}
	if c := spec(t, "demo", "", 0); c.Spec.Kubernetes.Version != e2eFirst {
		t.Errorf("clusters/demo is on %s, make e2e starts on %s", c.Spec.Kubernetes.Version, e2eFirst)
	}
}

func mustVersion(t testing.TB, s string) schemas.Version {
	t.Helper()
	v, err := schemas.ParseVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

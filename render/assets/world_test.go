package assets_test

import (
	"maps"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/render"
	"opke.dev/opke/world"
)

// imageRef finds the images a rendered file names: a manifest's image:,
// an env file's *_IMAGE= and containerd's sandbox image.
var imageRef = regexp.MustCompile(`(?m)(?:image: *|^[A-Z_]+_IMAGE=|sandbox = ")([^\s"]+)`)

// Every image a cluster with every addon renders, at every Kubernetes
// version of the test world, and every file its hosts download, is one
// make world builds (its all set) or one
// world.NotBuilt() lists with the reason: a rendered image the world lacks
// fails here, not on a host that cannot pull it.
func TestTheWorldBuildsTheRenderedImages(t *testing.T) {
	arts, err := world.Targets(world.All)
	if err != nil {
		t.Fatal(err)
	}
	built, files := map[string]bool{}, map[string]bool{}
	for _, a := range arts {
		for _, im := range a.Images {
			built[im.Ref] = true
		}
		for _, d := range a.Downloads {
			files["https://"+d.Path] = true
		}
	}
	missing := map[string]string{}
	for _, v := range world.KubernetesVersions() {
		for _, spec := range []string{"prod", "airgap"} {
			c := loadSpec(t, spec)
			c.Spec.Kubernetes.Version = v
			out := renderWith(t, statetest.Open(t), c, render.Options{Now: now, Cloud: credential})
			n := 0
			for _, h := range out.Assets.Hosts {
				for _, f := range h.Files {
					for _, m := range imageRef.FindAllSubmatch(f.Data, -1) {
						ref := string(m[1])
						n++
						if !built[ref] {
							missing[ref] = world.NotBuilt()[ref]
						}
					}
					// The downloads too, as upstream lays them out.
					for _, m := range downloadURL.FindAllSubmatch(f.Data, -1) {
						if u := string(m[1]); spec == "prod" && !files[u] {
							t.Errorf("%s at %s: %s downloads %s, which make world does not build", spec, v, h.Name, u)
						}
					}
				}
			}
			if n == 0 {
				t.Fatalf("%s at %s: no image found in the rendered files", spec, v)
			}
		}
	}
	if d := cmp.Diff(world.NotBuilt(), missing); d != "" {
		t.Errorf("rendered images make world does not build (-world.NotBuilt() +rendered and not built):\n%s", d)
	}
	if len(missing) != len(world.NotBuilt()) {
		t.Errorf("NotBuilt lists %v", slices.Sorted(maps.Keys(world.NotBuilt())))
	}
}

//go:build realhosts

package world_test

import (
	"bytes"
	"net/http"
	"testing"

	"opke.dev/opke/world"
	"opke.dev/opke/world/worldtest"
)

// TestPushToARealRegistry loads an image make world built into
// distribution's registry (also built by make world) and reads it back:
// the manifest by tag, under the mirror's layout, with its digest, and
// every blob. Run by make realhosts, after make world.
func TestPushToARealRegistry(t *testing.T) {
	ctx := t.Context()
	built := worldtest.E2E(t, nil)
	bin, _ := built.Binary("distribution-"+world.DistributionVersion, "registry")
	base := worldtest.Registry(t, bin)

	ref := "registry.k8s.io/pause:3.10.2"
	dir, ok := built.Image(ref)
	if !ok {
		t.Fatalf("no %s in %v", ref, built.Images())
	}
	l, err := world.OpenLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	repo, tag, err := world.MirrorName(ref, "mirror")
	if err != nil {
		t.Fatal(err)
	}
	if repo != "mirror/registry.k8s.io/pause" || tag != "3.10.2" {
		t.Fatalf("MirrorName: %s %s", repo, tag)
	}
	for range 2 { // the second push finds every blob there
		if err := world.Push(ctx, http.DefaultClient, base, l, repo, tag); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v2/"+repo+"/manifests/"+tag, nil)
	req.Header.Set("Accept", world.MediaManifest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got bytes.Buffer
	if _, err := got.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	_, want, err := l.ReadManifest()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got.Bytes(), want) || resp.Header.Get("Docker-Content-Digest") != l.Manifest.Digest {
		t.Fatalf("manifest back: %s, digest %s (want %s), same bytes %v", resp.Status, resp.Header.Get("Docker-Content-Digest"), l.Manifest.Digest, bytes.Equal(got.Bytes(), want))
	}
	m, _, _ := l.ReadManifest()
	for _, d := range append([]world.Descriptor{m.Config}, m.Layers...) {
		resp, err := http.Head(base + "/v2/" + repo + "/blobs/" + d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ContentLength != d.Size {
			t.Errorf("blob %s: %s, %d bytes (want %d)", d.Digest, resp.Status, resp.ContentLength, d.Size)
		}
	}
}

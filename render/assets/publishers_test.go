package assets_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
)

// upstreamPublishers are where what OPKE renders may come from: each
// project's own registry, or its own release site, as the project
// publishes it. Nothing of OPKE's own, nor of its test world, is here: a
// real cloud has only what upstream publishes.
var upstreamPublishers = []struct{ prefix, who string }{
	{"registry.k8s.io/", "Kubernetes: its components, etcd, pause, CoreDNS, SIG Storage's CSI sidecars, cloud-provider-openstack, metrics-server, ingress-nginx"},
	{"ghcr.io/flannel-io/", "flannel and its CNI plugin"},
	{"quay.io/prometheus/", "Prometheus, Alertmanager, node-exporter"},
	{"quay.io/prometheus-operator/", "the Prometheus Operator"},
	{"ghcr.io/traefik/", "Traefik (its GitHub registry, a copy of every Docker Hub tag)"},
	{"ghcr.io/headlamp-k8s/", "Headlamp"},
	{"docker.io/cloudnativelabs/kube-router:", "kube-router, which publishes on Docker Hub only"},
	{"dl.k8s.io/release/", "Kubernetes' release binaries"},
	{"github.com/containernetworking/plugins/releases/download/", "the reference CNI plugins' releases"},
}

// downloadURL finds the files a rendered env file has a host download.
var downloadURL = regexp.MustCompile(`(?m)^[A-Z_]+_URL=(\S+)$`)

// TestRendersOnlyWhatUpstreamPublishes renders every example spec (the
// fleet of clusters/ and the golden cases) with every addon, with and
// without the registry and download mirrors, and holds every image
// reference and download URL a host gets to upstreamPublishers: an image
// or a file published by no one (OPKE's own, the test world's) fails here,
// not on a real cloud whose hosts cannot pull it. With a mirror, images
// keep their upstream names (the runtime's hosts.toml sends the pulls)
// and downloads are MIRROR/<upstream host and path>.
func TestRendersOnlyWhatUpstreamPublishes(t *testing.T) {
	const regMirror, dlMirror = "https://mirror.example:5000/k8s", "https://files.example/upstream"
	var specs []*schemas.Cluster
	for _, name := range []string{"demo", "prod"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "clusters", name, "cluster.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		f := schemas.Parse("clusters/"+name+"/cluster.yaml", data)
		if f.Cluster == nil || len(f.Findings) > 0 {
			t.Fatalf("clusters/%s: %v", name, f.Findings)
		}
		specs = append(specs, f.Cluster)
	}
	for _, name := range []string{"demo", "prod", "airgap"} {
		specs = append(specs, loadSpec(t, name))
	}
	published := func(s string) bool {
		return slices.ContainsFunc(upstreamPublishers, func(p struct{ prefix, who string }) bool { return strings.HasPrefix(s, p.prefix) })
	}
	for _, c := range specs {
		for _, mirrored := range []bool{false, true} {
			c := *c
			c.Spec.Addons = nil
			for _, a := range assets.AddonManifests() {
				c.Spec.Addons = append(c.Spec.Addons, schemas.Addon{Name: a})
			}
			c.Spec.RegistryMirror, c.Spec.DownloadMirror = nil, nil
			if mirrored {
				c.Spec.RegistryMirror = &schemas.RegistryMirror{Endpoint: regMirror}
				c.Spec.DownloadMirror = &schemas.DownloadMirror{Endpoint: dlMirror}
			}
			out := renderWith(t, statetest.Open(t), &c, render.Options{Now: now, Cloud: credential})
			images, downloads := 0, 0
			for _, h := range out.Assets.Hosts {
				for _, f := range h.Files {
					for _, m := range imageRef.FindAllSubmatch(f.Data, -1) {
						images++
						if ref := string(m[1]); !published(ref) {
							t.Errorf("%s (mirrored %v): %s:%s names the image %s, which no upstream publisher of the list publishes", c.Metadata.Name, mirrored, h.Name, f.Path, ref)
						}
					}
					for _, m := range downloadURL.FindAllSubmatch(f.Data, -1) {
						downloads++
						u, base := string(m[1]), "https://"
						if mirrored {
							base = dlMirror + "/"
						}
						if p, ok := strings.CutPrefix(u, base); !ok || !published(p) {
							t.Errorf("%s (mirrored %v): %s:%s downloads %s, not an upstream publisher's file under %s", c.Metadata.Name, mirrored, h.Name, f.Path, u, base)
						}
					}
				}
			}
			if images == 0 || downloads == 0 {
				t.Errorf("%s (mirrored %v): %d images and %d downloads found: the scan finds nothing", c.Metadata.Name, mirrored, images, downloads)
			}
		}
	}
}

// The scan above fails on what it is for: an image of a publisher not on
// the list, and a download from elsewhere.
func TestPublisherScanCatchesOthers(t *testing.T) {
	for _, tc := range []struct {
		file      string
		image     string
		downloads string
	}{
		{"image: ghcr.io/opke-dev/kubelet:v1.35.1\n", "ghcr.io/opke-dev/kubelet:v1.35.1", ""},
		{"KUBELET_URL=https://example.com/kubelet\n", "", "https://example.com/kubelet"},
	} {
		var img, dl string
		if m := imageRef.FindStringSubmatch(tc.file); m != nil {
			img = m[1]
		}
		if m := downloadURL.FindStringSubmatch(tc.file); m != nil {
			dl = m[1]
		}
		if img != tc.image || dl != tc.downloads {
			t.Errorf("%q: found image %q and download %q, want %q and %q", tc.file, img, dl, tc.image, tc.downloads)
		}
		for _, p := range upstreamPublishers {
			if (img != "" && strings.HasPrefix(img, p.prefix)) || (dl != "" && strings.HasPrefix(strings.TrimPrefix(dl, "https://"), p.prefix)) {
				t.Errorf("%q passes as %s's", tc.file, p.who)
			}
		}
	}
}

// docs/real-cloud.md names every publisher the hosts may take from: an
// operator mirroring a cloud reads the list there.
func TestRealCloudDocNamesThePublishers(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "real-cloud.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range upstreamPublishers {
		if !strings.Contains(string(doc), p.prefix) {
			t.Errorf("docs/real-cloud.md does not name %s (%s)", p.prefix, p.who)
		}
	}
}

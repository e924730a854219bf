package world

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/internal/golden"
	"opke.dev/opke/render/assets"

	"github.com/google/go-cmp/cmp"
)

func TestTargets(t *testing.T) {
	reg, err := Registrar()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  Set
		keys []string
	}{
		{E2E, []string{"containerd-" + ContainerdVersion, "runc-" + RuncVersion, "distribution-" + DistributionVersion, "kubernetes-v1.36.1", "etcd-v3.6.8", "pause-3.10.2",
			"coredns-v1.14.2", "flannel-v0.27.4", "flannel-cni-" + FlannelCNIPluginsVersion, "cni-plugins-" + assets.CNIPluginsVersion, "kube-router-v2.1.0", "traefik-v3.6.12",
			"prometheus-operator-v0.85.0", "prometheus-v3.16.0", "alertmanager-v0.31.1", "node-exporter-v1.12.1", "openstack-cloud-controller-manager-v1.36.0",
			"cinder-csi-plugin-v1.36.0", "csi-attacher-v4.13.0", "csi-provisioner-v6.4.0", "csi-resizer-v2.3.0", "external-snapshotter-v8.7.0",
			"kubernetes-v1.36.3", "kubernetes-v1.37.2", "etcd-v3.7.0", "coredns-v1.14.6", reg.Key, "agnhost-2.63.0"}},
		{All, []string{"containerd-" + ContainerdVersion, "runc-" + RuncVersion, "distribution-" + DistributionVersion,
			"kubernetes-v1.36.1", "etcd-v3.6.8", "pause-3.10.2", "coredns-v1.14.2",
			"flannel-v0.27.4", "flannel-cni-" + FlannelCNIPluginsVersion, "cni-plugins-" + assets.CNIPluginsVersion, "kube-router-v2.1.0", "traefik-v3.6.12",
			"prometheus-operator-v0.85.0", "prometheus-v3.16.0", "alertmanager-v0.31.1", "node-exporter-v1.12.1", "metrics-server-v0.8.0", "cloud-provider-openstack-v1.36.0", "csi-attacher-v4.13.0", "csi-provisioner-v6.4.0", "csi-resizer-v2.3.0", "external-snapshotter-v8.7.0",
			"kubernetes-v1.36.3", "kubernetes-v1.37.2", "etcd-v3.7.0", "coredns-v1.14.6", reg.Key, "agnhost-2.63.0"}},
		{Peer, []string{"opentofu-" + OpenTofuVersion, "terraform-provider-openstack-" + OpenStackProviderVersion}},
	} {
		t.Run(string(tc.set), func(t *testing.T) {
			arts, err := Targets(tc.set)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, a := range arts {
				keys = append(keys, a.Key)
			}
			if d := cmp.Diff(tc.keys, keys); d != "" {
				t.Errorf("keys (-want +got):\n%s", d)
			}
		})
	}
	if _, err := Targets("everything"); err == nil || !strings.Contains(err.Error(), "all, e2e") {
		t.Errorf("unknown set: %v, want an error naming the sets", err)
	}
}

// The images a cluster pulls at each version it is upgraded through are
// all built, under the names its manifests use.
func TestTargetsNameTheRenderedImages(t *testing.T) {
	arts, err := Targets(E2E)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"docker.io/cloudnativelabs/kube-router:v2.11.1",
		"ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1",
		"ghcr.io/flannel-io/flannel:v0.27.4",
		"ghcr.io/traefik/traefik:v3.7.13",
		"quay.io/prometheus-operator/prometheus-config-reloader:v0.95.2",
		"quay.io/prometheus-operator/prometheus-operator:v0.95.2",
		"quay.io/prometheus/alertmanager:v0.35.0",
		"quay.io/prometheus/node-exporter:v1.12.1",
		"quay.io/prometheus/prometheus:v3.16.0",
		"registry.k8s.io/coredns/coredns:v1.14.2",
		"registry.k8s.io/coredns/coredns:v1.14.6",
		"registry.k8s.io/e2e-test-images/agnhost:2.63.0",
		"registry.k8s.io/etcd:3.6.8-0",
		"registry.k8s.io/etcd:3.7.0-0",
		"registry.k8s.io/kube-apiserver:v1.36.1",
		"registry.k8s.io/kube-apiserver:v1.36.3",
		"registry.k8s.io/kube-apiserver:v1.37.2",
		"registry.k8s.io/kube-controller-manager:v1.36.1",
		"registry.k8s.io/kube-controller-manager:v1.36.3",
		"registry.k8s.io/kube-controller-manager:v1.37.2",
		"registry.k8s.io/kube-proxy:v1.36.1",
		"registry.k8s.io/kube-proxy:v1.36.3",
		"registry.k8s.io/kube-proxy:v1.37.2",
		"registry.k8s.io/kube-scheduler:v1.36.1",
		"registry.k8s.io/kube-scheduler:v1.36.3",
		"registry.k8s.io/kube-scheduler:v1.37.2",
		"registry.k8s.io/pause:3.10.2",
		"registry.k8s.io/provider-os/cinder-csi-plugin:v1.36.0",
		"registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.36.0",
		"registry.k8s.io/sig-storage/csi-attacher:v4.13.0",
		"registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.15.0",
		"registry.k8s.io/sig-storage/csi-provisioner:v6.4.0",
		"registry.k8s.io/sig-storage/csi-resizer:v2.3.0",
		"registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0",
		"registry.k8s.io/sig-storage/snapshot-controller:v8.7.0",
	}
	if d := cmp.Diff(want, imageRefs(arts)); d != "" {
		t.Errorf("images (-want +got):\n%s", d)
	}
}

func TestWrapperMod(t *testing.T) {
	kube, err := os.ReadFile("testdata/kubernetes.go.mod")
	if err != nil {
		t.Fatal(err)
	}
	a, err := Kubernetes("v1.35.1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := WrapperMod(a, "1.25.0", kube)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Format()
	if err != nil {
		t.Fatal(err)
	}
	golden.File(t, "testdata/kubernetes-wrapper.go.mod", got)

	e, err := Etcd("registry.k8s.io/etcd:3.6.5-0")
	if err != nil {
		t.Fatal(err)
	}
	f, err = WrapperMod(e, "1.24", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = f.Format()
	golden.File(t, "testdata/etcd-wrapper.go.mod", got)

	if _, err := WrapperMod(a, "1.25.0", []byte("module k8s.io/kubernetes\n")); err == nil {
		t.Error("a kubernetes go.mod without staging replacements: no error")
	}
}

func TestLDFlags(t *testing.T) {
	k, _ := Kubernetes("v1.36.1")
	date := time.Date(2026, 2, 10, 19, 6, 3, 0, time.UTC)
	got := LDFlags(k, date, "")
	for _, want := range []string{
		"-s -w ",
		"-X k8s.io/component-base/version.gitVersion=v1.36.1",
		"-X k8s.io/client-go/pkg/version.gitVersion=v1.36.1",
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=36",
		"-X k8s.io/component-base/version.gitTreeState=archive",
		"-X k8s.io/component-base/version.buildDate=2026-02-10T19:06:03Z",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ldflags %q lack %q", got, want)
		}
	}
	if got != LDFlags(k, date, "") {
		t.Error("ldflags differ between two calls (map order)")
	}
	ms, _ := MetricsServer("registry.k8s.io/metrics-server/metrics-server:v0.8.0")
	if got := LDFlags(ms, date, "d66279c6"); !strings.Contains(got, "-X k8s.io/client-go/pkg/version.gitCommit=d66279c6") {
		t.Errorf("metrics-server ldflags %q: no commit", got)
	}
	if got := LDFlags(ms, date, ""); !strings.Contains(got, "version.gitCommit=archive") {
		t.Errorf("metrics-server ldflags %q: an unknown commit is not archive", got)
	}
	c := Containerd("v2.1.5")
	if got := LDFlags(c, date, ""); !strings.Contains(got, "-X github.com/containerd/containerd/v2/version.Version=v2.1.5") {
		t.Errorf("containerd ldflags %q", got)
	}
}

func TestWriteImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "etcd")
	if err := os.WriteFile(bin, []byte("\x7fELF not really etcd"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := ImageSpec{Ref: "registry.k8s.io/etcd:3.6.5-0", Files: []ImageFile{{Binary: "etcd", Path: "/usr/local/bin/etcd"}}, Entrypoint: []string{"/usr/local/bin/etcd"}}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d1, err := WriteImage(filepath.Join(dir, "a"), spec, map[string]string{"etcd": bin}, created, "go.etcd.io/etcd/server/v3@v3.6.5", nil)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := WriteImage(filepath.Join(dir, "b"), spec, map[string]string{"etcd": bin}, created, "go.etcd.io/etcd/server/v3@v3.6.5", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d1.Digest != d2.Digest {
		t.Errorf("the same binary made two digests: %s, %s", d1.Digest, d2.Digest)
	}
	l, err := OpenLayout(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Ref != spec.Ref || l.Manifest.Annotations[AnnotationRefName] != "3.6.5-0" {
		t.Errorf("layout names %q, tag %q", l.Ref, l.Manifest.Annotations[AnnotationRefName])
	}
	files, err := l.Files()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string][]byte{"/usr/local/bin/etcd": []byte("\x7fELF not really etcd")}, files); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
	m, cfg := imageConfig(t, l)
	if d := cmp.Diff([]string{"/usr/local/bin/etcd"}, cfg.Config.Entrypoint); d != "" || cfg.OS != "linux" || cfg.Architecture != "amd64" || len(cfg.RootFS.DiffIDs) != 1 {
		t.Errorf("config: %+v", cfg)
	}
	// A layer changed on disk is caught.
	if err := os.WriteFile(l.BlobPath(m.Layers[0]), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Files(); !errors.Is(err, ErrBadLayout) {
		t.Errorf("tampered layer: %v, want ErrBadLayout", err)
	}
	if _, err := WriteImage(filepath.Join(dir, "c"), spec, map[string]string{}, created, "", nil); err == nil {
		t.Error("an image whose binary is missing: no error")
	}
}

// fakeGo stands for the go and gcc commands at the exec boundary: it
// answers go mod download with a module in testdata and writes each -o.
type fakeGo struct {
	calls []string
	fail  string
	// sum is the module hash go mod download reports.
	sum string
}

func (f *fakeGo) run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	call := name + " " + strings.Join(args, " ")
	f.calls = append(f.calls, call)
	if f.fail != "" && strings.Contains(call, f.fail) {
		return []byte("compile error"), errors.New("exit status 1")
	}
	if name == "mmdebstrap" {
		return nil, fakeRootfs(args[len(args)-1])
	}
	if name == "go" && args[0] == "mod" {
		mod, _ := filepath.Abs("testdata/kubernetes.go.mod")
		info := filepath.Join(dir, "v1.info")
		if err := os.WriteFile(info, []byte(`{"Version":"v1","Time":"2026-02-10T19:06:03Z"}`), 0o644); err != nil {
			return nil, err
		}
		return json.Marshal(moduleInfo{Path: "m", Version: "v1", Dir: dir, GoMod: mod, Info: info, Sum: f.sum})
	}
	for i, a := range args {
		if a == "-o" {
			return nil, os.WriteFile(args[i+1], []byte(call), 0o755)
		}
	}
	return nil, nil
}

func TestEnsureBuildsOnceByVersion(t *testing.T) {
	dir := t.TempDir()
	k, _ := Kubernetes("v1.35.1")
	fg := &fakeGo{}
	w := &World{Dir: dir, Run: fg.run}
	b, err := w.Ensure(t.Context(), []Artifact{k})
	if err != nil {
		t.Fatal(err)
	}
	builds := slices.DeleteFunc(slices.Clone(fg.calls), func(c string) bool { return !strings.HasPrefix(c, "go build") })
	if len(builds) != len(k.Binaries) {
		t.Fatalf("go builds: %q", builds)
	}
	if !strings.Contains(builds[0], "-trimpath") || !strings.Contains(builds[0], "k8s.io/kubernetes/cmd/kube-apiserver") ||
		!strings.Contains(builds[0], "version.buildDate=2026-02-10T19:06:03Z") {
		t.Errorf("first build: %s", builds[0])
	}
	_, files := builtImage(t, b, "registry.k8s.io/kube-apiserver:v1.35.1")
	if !bytes.Contains(files["/usr/local/bin/kube-apiserver"], []byte("cmd/kube-apiserver")) {
		t.Errorf("the image carries %q", files["/usr/local/bin/kube-apiserver"])
	}
	// Warm: nothing runs.
	fg.calls = nil
	b, err = w.Ensure(t.Context(), []Artifact{k})
	if err != nil {
		t.Fatal(err)
	}
	if len(fg.calls) != 0 || !b.Artifacts[0].Cached {
		t.Errorf("warm run ran %q (cached %v)", fg.calls, b.Artifacts[0].Cached)
	}
	// A changed pin builds again.
	k.Stamp["k8s.io/component-base/version.gitTreeState"] = "clean"
	if _, err := w.Ensure(t.Context(), []Artifact{k}); err != nil {
		t.Fatal(err)
	}
	if len(fg.calls) == 0 {
		t.Error("a changed recipe did not build again")
	}
	// A failed build keeps the last good one and says which package.
	k.Stamp["k8s.io/component-base/version.gitTreeState"] = "dirty"
	fg.fail = "cmd/kubelet"
	_, err = w.Ensure(t.Context(), []Artifact{k})
	if err == nil || !strings.Contains(err.Error(), "k8s.io/kubernetes/cmd/kubelet") || !strings.Contains(err.Error(), "compile error") {
		t.Errorf("failed build: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, k.Key, "bin", "kubelet")); err != nil {
		t.Errorf("the last good build is gone: %v", err)
	}
}

// imageRefs lists the image references of arts, sorted.
func imageRefs(arts []Artifact) []string {
	var refs []string
	for _, a := range arts {
		for _, im := range a.Images {
			refs = append(refs, im.Ref)
		}
	}
	slices.Sort(refs)
	return refs
}

// fakeRootfs writes what mmdebstrap --format=tar writes: names under ./,
// device nodes in /dev, a hard link.
func fakeRootfs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755},
		{Typeflag: tar.TypeDir, Name: "./dev/", Mode: 0o755},
		{Typeflag: tar.TypeChar, Name: "./dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3},
		{Typeflag: tar.TypeDir, Name: "./usr/sbin/", Mode: 0o755, Uname: "root"},
		{Typeflag: tar.TypeReg, Name: "./usr/sbin/xtables-nft-multi", Mode: 0o755, Size: 8},
		{Typeflag: tar.TypeLink, Name: "./usr/sbin/xtables-legacy-multi", Linkname: "./usr/sbin/xtables-nft-multi"},
		{Typeflag: tar.TypeSymlink, Name: "./usr/sbin/iptables", Linkname: "/etc/alternatives/iptables"},
	} {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte("iptables")); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// A base is built once by mmdebstrap, reproducibly and without device
// nodes, and lies under the image's own files.
func TestImageOnABase(t *testing.T) {
	dir := t.TempDir()
	fg := &fakeGo{}
	w := &World{Dir: dir, Run: fg.run}
	l1, err := w.baseLayer(t.Context(), netBase)
	if err != nil {
		t.Fatal(err)
	}
	if len(fg.calls) != 1 {
		t.Fatalf("calls: %q", fg.calls)
	}
	for _, want := range []string{"mmdebstrap --variant=essential --format=tar --include=iptables,nftables,", "--dpkgopt=path-exclude=/usr/share/doc/*", " bookworm "} {
		if !strings.Contains(fg.calls[0], want) {
			t.Errorf("mmdebstrap call %q lacks %q", fg.calls[0], want)
		}
	}
	fg.calls = nil
	l2, err := w.baseLayer(t.Context(), netBase)
	if err != nil {
		t.Fatal(err)
	}
	if len(fg.calls) != 0 || l1.Descriptor.Digest != l2.Descriptor.Digest || l1.DiffID != l2.DiffID {
		t.Errorf("second call ran %q; layers %+v, %+v", fg.calls, l1, l2)
	}

	bin := filepath.Join(dir, "flanneld")
	if err := os.WriteFile(bin, []byte("flanneld"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := ImageSpec{Ref: "ghcr.io/flannel-io/flannel:v0.27.4", Base: netBase, Files: []ImageFile{{Binary: "flanneld", Path: "/opt/bin/flanneld"}}}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := WriteImage(filepath.Join(dir, "img"), spec, map[string]string{"flanneld": bin}, created, "flannel", l1); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteImage(filepath.Join(dir, "nobase"), spec, map[string]string{"flanneld": bin}, created, "flannel", nil); err == nil {
		t.Error("an image with a base written without its layer: no error")
	}
	lay, err := OpenLayout(filepath.Join(dir, "img"))
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := lay.ReadManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 2 || m.Layers[0].Digest != l1.Descriptor.Digest {
		t.Fatalf("layers %+v, want the base's first", m.Layers)
	}
	files, err := lay.Files()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"/usr/sbin/xtables-nft-multi": []byte("iptables"), "/opt/bin/flanneld": []byte("flanneld")}
	if d := cmp.Diff(want, files); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
	// What the base layer holds, by header.
	b, err := lay.Blob(m.Layers[0])
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		got = append(got, fmt.Sprintf("%c %s>%s %q", h.Typeflag, h.Name, h.Linkname, h.Uname))
	}
	wantHeaders := []string{
		`5 dev/> ""`,
		`5 usr/sbin/> ""`,
		`0 usr/sbin/xtables-nft-multi> ""`,
		`1 usr/sbin/xtables-legacy-multi>usr/sbin/xtables-nft-multi ""`,
		`2 usr/sbin/iptables>/etc/alternatives/iptables ""`,
	}
	if d := cmp.Diff(wantHeaders, got); d != "" {
		t.Errorf("base layer (-want +got):\n%s", d)
	}

	fg.fail = "mmdebstrap"
	w2 := &World{Dir: t.TempDir(), Run: fg.run}
	if _, err := w2.baseLayer(t.Context(), storageBase); err == nil || !strings.Contains(err.Error(), "compile error") {
		t.Errorf("failed mmdebstrap: %v, want its output", err)
	}
}

// A module's own replacements with a version are kept in the wrapper (its
// build has them); ones to a folder are not.
func TestWrapperModKeepsReplacements(t *testing.T) {
	a := CloudProvider("v1.35.0")
	mod := []byte(`module k8s.io/cloud-provider-openstack

go 1.25.5

require k8s.io/kubernetes v1.35.0

replace (
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.35.0
	example.org/local => ../local
)
`)
	f, err := WrapperMod(a, "1.25.5", mod)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range f.Replace {
		got = append(got, r.Old.Path+" => "+r.New.Path+" "+r.New.Version)
	}
	if d := cmp.Diff([]string{"k8s.io/kube-proxy => k8s.io/kube-proxy v0.35.0"}, got); d != "" {
		t.Errorf("replacements (-want +got):\n%s", d)
	}
}

// The module's go.sum joins the wrapper's, each line once.
func TestCarrySums(t *testing.T) {
	wrapper, module := t.TempDir(), t.TempDir()
	if err := carrySums(wrapper, module); err != nil {
		t.Fatalf("a module without go.sum: %v", err)
	}
	if err := os.WriteFile(filepath.Join(wrapper, "go.sum"), []byte("a v1 h1:x=\nb v1 h1:y=\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(module, "go.sum"), []byte("b v1 h1:y=\nc v1/go.mod h1:z=\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := carrySums(wrapper, module); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(wrapper, "go.sum"))
	if d := cmp.Diff("a v1 h1:x=\nb v1 h1:y=\nc v1/go.mod h1:z=\n", string(got)); d != "" {
		t.Errorf("go.sum (-want +got):\n%s", d)
	}
}

// TestPinnedSum: a module outside the checksum database builds only when
// its download has the hash pinned for it.
func TestPinnedSum(t *testing.T) {
	p := OpenStackProvider(OpenStackProviderVersion)
	if !p.NoSumDB || p.Sum == "" {
		t.Fatalf("the provider's artifact pins no hash: %+v", p)
	}
	for _, tc := range []struct {
		sum   string
		build bool
	}{
		{p.Sum, true},
		{"h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", false},
		{"", false},
	} {
		fg := &fakeGo{sum: tc.sum}
		w := &World{Dir: t.TempDir(), Run: fg.run}
		_, err := w.Ensure(t.Context(), []Artifact{p})
		if built := err == nil; built != tc.build {
			t.Errorf("download with hash %q: built %v (%v), want %v", tc.sum, built, err, tc.build)
		}
		if !tc.build && !errors.Is(err, ErrSum) {
			t.Errorf("download with hash %q: %v, want ErrSum", tc.sum, err)
		}
		if !tc.build && slices.ContainsFunc(fg.calls, func(c string) bool { return strings.HasPrefix(c, "go build") }) {
			t.Errorf("download with hash %q: built anyway", tc.sum)
		}
	}
}

func TestPrometheusModuleVersion(t *testing.T) {
	for _, tt := range []struct{ tag, want string }{
		{"v3.16.0", "v0.316.0"}, {"v3.5.2", "v0.305.2"}, {"v2.53.1", "v0.253.1"}, {"3.16.0", ""}, {"v3.100.0", ""}, {"v1.2.3", ""},
	} {
		got, err := prometheusModuleVersion(tt.tag)
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("prometheusModuleVersion(%q) = %q, %v; want %q", tt.tag, got, err, tt.want)
		}
	}
}

// An image runs as the user upstream's Dockerfile names, and a binary
// upstream gives a file capability (CoreDNS binding port 53 as nonroot)
// carries it as setcap writes it: security.capability, revision 2,
// permitted and effective.
func TestImageUserAndCaps(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "coredns")
	if err := os.WriteFile(bin, []byte("\x7fELF not really coredns"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := ImageSpec{Ref: "registry.k8s.io/coredns/coredns:v1.14.2", User: "65532:65532", Entrypoint: []string{"/coredns"},
		Files: []ImageFile{{Binary: "coredns", Path: "/coredns", Caps: []Capability{CapNetBindService}}}}
	if _, err := WriteImage(filepath.Join(dir, "img"), spec, map[string]string{"coredns": bin}, time.Unix(0, 0).UTC(), "coredns", nil); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLayout(filepath.Join(dir, "img"))
	if err != nil {
		t.Fatal(err)
	}
	_, cfg := imageConfig(t, l)
	if cfg.Config.User != "65532:65532" {
		t.Errorf("the image's user: %q", cfg.Config.User)
	}
	var xattr string
	eachEntry(t, l, 0, func(h *tar.Header, _ []byte) {
		if h.Name == "coredns" {
			xattr = h.PAXRecords["SCHILY.xattr.security.capability"]
		}
	})
	// getcap prints this as cap_net_bind_service=ep.
	want := "\x01\x00\x00\x02" + "\x00\x04\x00\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00"
	if xattr != want {
		t.Errorf("coredns's security.capability: %q, want %q", xattr, want)
	}
}

// The conformance set is the e2e set with upstream's conformance image
// and agnhost; e2e.test is built as go test -c builds it, and the image
// is laid out as test/conformance/image/Dockerfile lays it out, its ENV
// with it.
func TestConformanceArtifacts(t *testing.T) {
	e2e, err := Targets(E2E)
	if err != nil {
		t.Fatal(err)
	}
	all, err := Targets(Conformance)
	if err != nil {
		t.Fatal(err)
	}
	var added []string
	for _, a := range all[len(e2e):] {
		added = append(added, a.Key)
	}
	want := []string{"conformance-" + kubernetesVersions[0], "e2e-test-images-" + kubernetesVersions[0], "busybox-1.37.0", "nginx-1.15-4-standin", "glibc-dns-testing-2.0.0", "sample-apiserver-1.29.2"}
	if d := cmp.Diff(want, added); d != "" {
		t.Errorf("the conformance set beside the e2e set (agnhost 2.63.0 is in both) (-want +got):\n%s", d)
	}
	// Every image a [Conformance] spec of v1.36 runs (docs/conformance.md
	// says which runs which) is built, under upstream's name.
	refs := imageRefs(all)
	for _, ref := range []string{"e2e-test-images/agnhost:2.63.0", "e2e-test-images/agnhost:2.55", "e2e-test-images/busybox:1.37.0-1",
		"e2e-test-images/nginx:1.15-4", "e2e-test-images/glibc-dns-testing:2.0.0", "e2e-test-images/nautilus:1.8", "e2e-test-images/kitten:1.8",
		"e2e-test-images/nonewprivs:1.4", "e2e-test-images/sample-apiserver:1.29.2", "etcd:3.6.8-0", "pause:3.10.2", "conformance:v1.36.1"} {
		if !slices.Contains(refs, "registry.k8s.io/"+ref) {
			t.Errorf("the conformance set builds no registry.k8s.io/%s", ref)
		}
	}
	if _, err := ConformanceArtifacts("v1.99.0"); err == nil {
		t.Error("a minor whose agnhost is not known: no error")
	}
	arts, err := ConformanceArtifacts("v1.36.1")
	if err != nil {
		t.Fatal(err)
	}
	fg := &fakeGo{}
	w := &World{Dir: t.TempDir(), Run: fg.run}
	b, err := w.Ensure(t.Context(), arts[:1])
	if err != nil {
		t.Fatal(err)
	}
	var tests, builds []string
	for _, c := range fg.calls {
		switch {
		case strings.HasPrefix(c, "go test -c"):
			tests = append(tests, c)
		case strings.HasPrefix(c, "go build"):
			builds = append(builds, c)
		}
	}
	if len(tests) != 1 || !strings.HasSuffix(tests[0], " k8s.io/kubernetes/test/e2e") || !strings.Contains(tests[0], "-trimpath") || len(builds) != 3 {
		t.Fatalf("go test -c: %q; go build: %q", tests, builds)
	}
	l, files := builtImage(t, b, ConformanceImage("v1.36.1"))
	for _, f := range []string{"/usr/local/bin/e2e.test", "/usr/local/bin/ginkgo", "/usr/local/bin/kubectl", "/usr/local/bin/kubeconformance", "/gorunner", "/run_e2e.sh"} {
		if _, ok := files[f]; !ok {
			t.Errorf("the conformance image has no %s", f)
		}
	}
	_, cfg := imageConfig(t, l)
	if !slices.Contains(cfg.Config.Env, `E2E_FOCUS=\[Conformance\]`) || !slices.Contains(cfg.Config.Env, "RESULTS_DIR=/tmp/results") ||
		!strings.HasPrefix(cfg.Config.Env[0], "PATH=") || !slices.Equal(cfg.Config.Entrypoint, []string{"kubeconformance"}) {
		t.Errorf("the conformance image's config: %+v", cfg.Config)
	}
}

// imageConfig reads a layout's manifest and image configuration.
func imageConfig(t *testing.T, l *Layout) (Manifest, ImageConfig) {
	t.Helper()
	m, _, err := l.ReadManifest()
	if err != nil {
		t.Fatal(err)
	}
	cb, err := l.Blob(m.Config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg ImageConfig
	if err := json.Unmarshal(cb, &cfg); err != nil {
		t.Fatal(err)
	}
	return m, cfg
}

// builtImage opens the layout of a built image and reads its files.
func builtImage(t *testing.T, b *Built, ref string) (*Layout, map[string][]byte) {
	t.Helper()
	p, ok := b.Image(ref)
	if !ok {
		t.Fatalf("no %s in %v", ref, b.Images())
	}
	l, err := OpenLayout(p)
	if err != nil {
		t.Fatal(err)
	}
	files, err := l.Files()
	if err != nil {
		t.Fatal(err)
	}
	return l, files
}

// TestStandIns: an image the world builds from a stand-in's source is
// published under the rendered name from that source, and LIMITS.md
// names both versions.
func TestStandIns(t *testing.T) {
	arts, err := Targets(E2E)
	if err != nil {
		t.Fatal(err)
	}
	limits, err := os.ReadFile("LIMITS.md")
	if err != nil {
		t.Fatal(err)
	}
	for ref, src := range StandIns {
		var built []string
		for _, a := range arts {
			for _, im := range a.Images {
				if im.Ref == ref {
					built = append(built, a.Version)
				}
			}
		}
		if !slices.Equal(built, []string{src}) {
			t.Errorf("%s is built from %v, want its stand-in %s", ref, built, src)
		}
		tag, _ := assets.ImageTag(ref)
		if !strings.Contains(string(limits), "v"+strings.TrimPrefix(tag, "v")+" (OPKE renders it)") || !strings.Contains(string(limits), "**a stand-in: "+src+"**") {
			t.Errorf("LIMITS.md does not name %s's stand-in %s", ref, src)
		}
	}
}

// An image's files besides binaries, as upstream's Dockerfiles make
// them: a file of the module's tree (ADD), given content, a setuid mode
// (chmod +s), a folder, a hard link, and a busybox's applets as hard
// links beside it (busybox --install).
func TestImageFileKinds(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "busybox")
	// A busybox that lists two applets, and itself.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n[ \"$1\" = --list ] || exit 1\necho sh; echo busybox; echo sysctl\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "localhost.crt")
	if err := os.WriteFile(src, []byte("CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := ImageSpec{Ref: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1", Cmd: []string{"sh"}, Files: []ImageFile{
		{Binary: "busybox", Path: "/bin/busybox", Applets: true},
		{Binary: "busybox", Path: "/usr/local/bin/nnp", Mode: 0o4755},
		{Source: "test/images/agnhost/porter/localhost.crt", Path: "/localhost.crt"},
		{Path: "/etc/passwd", Content: "root:x:0:0:root:/root:/bin/sh\n"},
		{Path: "/usr/bin/env", Link: "/bin/busybox"},
		{Path: "/root/"},
	}}
	files := map[string]string{"busybox": bin, sourceKey("test/images/agnhost/porter/localhost.crt"): src}
	if _, err := WriteImage(filepath.Join(dir, "img"), spec, files, time.Unix(0, 0).UTC(), "busybox", nil); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLayout(filepath.Join(dir, "img"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	eachEntry(t, l, 0, func(h *tar.Header, b []byte) {
		switch h.Typeflag {
		case tar.TypeDir:
			got[h.Name] = fmt.Sprintf("dir %o", h.Mode)
		case tar.TypeLink:
			got[h.Name] = fmt.Sprintf("link to %s %o", h.Linkname, h.Mode)
		default:
			got[h.Name] = fmt.Sprintf("%o %q", h.Mode, b)
		}
	})
	script := fmt.Sprintf("755 %q", "#!/bin/sh\n[ \"$1\" = --list ] || exit 1\necho sh; echo busybox; echo sysctl\n")
	want := map[string]string{
		"tmp/": "dir 1777", "bin/": "dir 755", "etc/": "dir 755", "root/": "dir 755", "usr/": "dir 755", "usr/bin/": "dir 755",
		"usr/local/": "dir 755", "usr/local/bin/": "dir 755",
		"bin/busybox":       script,
		"bin/sh":            "link to bin/busybox 755",
		"bin/sysctl":        "link to bin/busybox 755",
		"usr/bin/env":       "link to bin/busybox 755",
		"usr/local/bin/nnp": fmt.Sprintf("4755 %q", "#!/bin/sh\n[ \"$1\" = --list ] || exit 1\necho sh; echo busybox; echo sysctl\n"),
		"localhost.crt":     `644 "CERT"`,
		"etc/passwd":        fmt.Sprintf("644 %q", "root:x:0:0:root:/root:/bin/sh\n"),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the layer (-want +got):\n%s", d)
	}
	// A busybox that lists no applet would make an image without a shell.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteImage(filepath.Join(dir, "img4"), spec, files, time.Unix(0, 0).UTC(), "busybox", nil); err == nil || !strings.Contains(err.Error(), "--list") {
		t.Errorf("a busybox whose --list fails: %v, want an error", err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n[ \"$1\" = --list ] || exit 1\necho sh; echo busybox; echo sysctl\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A link to a file the image lacks is refused.
	dangling := spec
	dangling.Files = []ImageFile{{Path: "/agnhost-2", Link: "/agnhost"}}
	if _, err := WriteImage(filepath.Join(dir, "img3"), dangling, files, time.Unix(0, 0).UTC(), "busybox", nil); err == nil {
		t.Error("a link to a file the image lacks: no error")
	}
	delete(files, sourceKey("test/images/agnhost/porter/localhost.crt"))
	if _, err := WriteImage(filepath.Join(dir, "img2"), spec, files, time.Unix(0, 0).UTC(), "busybox", nil); err == nil || !strings.Contains(err.Error(), "no source file") {
		t.Error("an image whose source file is missing: no error")
	}
}

// eachEntry calls fn with each entry of layer n of l and its content.
func eachEntry(t *testing.T, l *Layout, n int, fn func(*tar.Header, []byte)) {
	t.Helper()
	m, _ := imageConfig(t, l)
	f, err := os.Open(l.BlobPath(m.Layers[n]))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fn(h, b)
	}
}

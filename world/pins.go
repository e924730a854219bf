package world

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
)

// kubernetesVersions are the Kubernetes releases the test world runs:
// two patch releases of one minor and one release of the next, so that a
// patch and a minor upgrade both run real binaries. The first is the one
// a single-version suite (E2E) uses.
var kubernetesVersions = []string{"v1.36.1", "v1.36.3", "v1.37.2"}

// KubernetesVersions returns a copy of kubernetesVersions: no caller can rewrite the package's own.
func KubernetesVersions() []string {
	return slices.Clone(kubernetesVersions)
}

// Host runtime and registry versions: what a Flatcar host ships (a
// containerd of the 2.x line with runc) and the registry the simulator
// serves images from. Debian bookworm's containerd (1.6) lacks CRI
// methods kubelet 1.35 calls.
const (
	ContainerdVersion   = "v2.1.5"
	RuncVersion         = "v1.3.3"
	DistributionVersion = "v3.1.2"
)

// A Set names which artifacts a run builds.
type Set string

// The sets.
const (
	// All is every Kubernetes version in KubernetesVersions with the
	// images of its minor, the host runtime and the registry.
	All Set = "all"
	// E2E is what the real-host suites use today: every Kubernetes
	// version (make e2e upgrades the first to the patch release, then to
	// the next minor) with its minor's etcd, pause, CoreDNS and flannel
	// with the CNI plugins and OpenStack's cloud controller manager, the
	// host runtime, the registry; no other addon.
	E2E Set = "e2e"
	// Peer is what make bench measures OPKE beside: OpenTofu and
	// terraform-provider-openstack, as a Terraform user runs them.
	Peer Set = "peer"
	// Conformance is the e2e set and what make k8s-conformance runs on
	// its first version's cluster: upstream's conformance image (e2e.test,
	// ginkgo, kubectl, its go-runner) and the test images its specs use.
	Conformance Set = "conformance"
)

// sets lists the sets, for flags and messages.
var sets = []Set{All, E2E, Peer, Conformance}

// Binary is one program of an artifact.
type Binary struct {
	// Name is the file name under the artifact's bin folder.
	Name string
	// Package is the Go import path of its main package (Go builds), or
	// the C source's path inside Module (C builds).
	Package string
	// Test: Package is a test package, built as go test -c builds it
	// (Kubernetes' e2e.test).
	Test bool `json:",omitempty"`
}

// ImageFile is a file an image carries: one of its artifact's binaries,
// a file of its module's tree (Source), a file of given Content, a hard
// link to another of its files (Link), or a folder (a Path ending in /).
type ImageFile struct {
	Binary string `json:",omitempty"`
	Path   string // inside the image, absolute
	// Source is a file of the artifact's module tree (its path there), as
	// upstream's Dockerfile ADDs it: agnhost's test certificate, the
	// pictures nautilus and kitten serve.
	Source string `json:",omitempty"`
	// Content is the file's content, for a file upstream's base image
	// has (an /etc/passwd): mode 0644 unless Mode says.
	Content string `json:",omitempty"`
	// Link makes Path a hard link to Link, a file of the image.
	Link string `json:",omitempty"`
	// Mode replaces the file's mode (0755 for a binary, 0644 for a
	// Source or Content): 04755 is upstream's chmod +s.
	Mode int64 `json:",omitempty"`
	// Applets: the binary is a multi-call busybox, and every applet it
	// lists (busybox --list) is a hard link to it in Path's folder, as
	// busybox --install makes them.
	Applets bool `json:",omitempty"`
	// Caps are file capabilities set on it as upstream's image sets them
	// (setcap cap_net_bind_service=+ep): what lets a non-root user bind
	// a port below 1024.
	Caps []Capability `json:",omitempty"`
}

// Capability is a Linux capability a file may carry.
type Capability int

// CapNetBindService binds ports below 1024 (linux/capability.h).
const CapNetBindService Capability = 10

// ImageSpec is one OCI image made from an artifact's binaries.
type ImageSpec struct {
	// Ref is the full name and tag, exactly as rendered manifests use it.
	Ref        string
	Files      []ImageFile
	Entrypoint []string
	// Cmd is the image's default command, for images whose upstream
	// Dockerfile sets CMD rather than ENTRYPOINT: a manifest's args
	// replace it whole (cloud-provider-openstack's manifests give the
	// binary's path as their first arg).
	Cmd []string `json:",omitempty"`
	// Base, if set, is the Debian root filesystem under Files.
	Base *Base `json:",omitempty"`
	// Env is the image's environment besides PATH, as upstream's
	// Dockerfile sets it (ENV).
	Env []string `json:",omitempty"`
	// User is the image's user as upstream's Dockerfile sets it, numeric
	// (uid or uid:gid: these images have no /etc/passwd to name it by);
	// "" runs as root, as upstream's do where they set none.
	User string `json:",omitempty"`
}

// Download is a file of an artifact as its upstream publishes it for
// download (a release binary, a tarball of binaries), kept under its URL's
// host and path as a file mirror keeps it (assets.Download), with its
// sha256 beside it (Path + ".sha256") as upstream publishes it.
type Download struct {
	// Path is the URL's host and path: dl.k8s.io/release/v1.35.1/bin/linux/amd64/kubelet.
	Path string
	// Binaries: one whose name is Path's base is the file itself; else
	// the file is a gzip tarball of them at ./NAME, as upstream's release
	// tarballs are.
	Binaries []string
}

// Tarball is an upstream release tarball: where it is and its sha256.
type Tarball struct {
	URL, SHA256 string
}

// Lang is how an artifact is built.
type Lang string

// The languages.
const (
	Go Lang = "go"
	C  Lang = "c"
	// Debian is an image of Debian's packages alone (its Base), with
	// files of given Content: nothing is built.
	Debian Lang = "debian"
	// Make is a C program from its upstream release tarball (Tarball,
	// as Debian's archive keeps it: the package's orig tarball), built by
	// Script.
	Make Lang = "make"
	// Project is a Go program of this project, built from its working
	// tree (Artifact.Dir) with its own go.mod: Module names it, Version
	// is the hash of its sources (projectSources), so a change rebuilds it.
	Project Lang = "project"
)

// Artifact is one cached build: a module at a version, its binaries and
// the images made of them.
type Artifact struct {
	// Key names the cache folder: what is built and its version.
	Key string
	// Module and Version are the upstream module the sources come from.
	Module  string
	Version string
	// Also are further modules the build requires, at their versions.
	Also     map[string]string
	Lang     Lang
	Binaries []Binary
	Images   []ImageSpec
	// Downloads are the files made of its binaries that hosts download.
	Downloads []Download `json:",omitempty"`
	// Stamp, for Go builds, is set to the values upstream's release build
	// gives its version variables (-X), by variable. DateVars are set to
	// the release's date (the module's time on the proxy), so that a
	// build is the same whenever it runs.
	Stamp    map[string]string
	DateVars []string
	// CommitVars are set to the release's commit when the proxy knows it
	// (its .info's Origin), else to "archive".
	CommitVars []string `json:",omitempty"`
	// NoSumDB: the module version is on the proxy but not in the checksum
	// database (sum.golang.org answers 404), so go is told not to ask it.
	NoSumDB bool `json:",omitempty"`
	// Sum is the module's hash (h1:), checked after its download: what
	// the checksum database would have checked for a NoSumDB module.
	Sum string `json:",omitempty"`
	// Tags are Go build tags; CGO builds with cgo (runc's seccomp).
	Tags []string
	CGO  bool
	// Staging: Kubernetes' staging modules are replaced by their
	// published v0.MINOR.PATCH releases (the module zip has no staging
	// folder).
	Staging bool
	// CDefine is, for C builds, the -D flags.
	CDefine []string
	// Tarball is, for Make builds, the release tarball; Script builds it
	// (sh -e in its top folder, its binaries written to $OUT).
	Tarball *Tarball `json:",omitempty"`
	Script  string   `json:",omitempty"`
	// Dir is, for Project builds, the project's root (its go.mod's
	// folder); not part of the build's identity (its sources' hash is).
	Dir string `json:"-"`
}

// Targets returns the artifacts of a set, in build order.
func Targets(set Set) ([]Artifact, error) {
	var versions []string
	switch set {
	case All:
		versions = kubernetesVersions
	case E2E:
		versions = kubernetesVersions
	case Conformance:
		arts, err := Targets(E2E)
		if err != nil {
			return nil, err
		}
		c, err := ConformanceArtifacts(kubernetesVersions[0])
		if err != nil {
			return nil, err
		}
		for _, a := range c {
			i := slices.IndexFunc(arts, func(b Artifact) bool { return b.Key == a.Key })
			switch {
			case i < 0:
				arts = append(arts, a)
			case arts[i].Hash() != a.Hash():
				// agnhost is both sets' (opke check's image): built once, from
				// one tree.
				return nil, fmt.Errorf("world: %s is built two ways in the conformance set (from %s and from %s)", a.Key, arts[i].Version, a.Version)
			}
		}
		return arts, nil
	case Peer:
		return []Artifact{OpenTofu(OpenTofuVersion), OpenStackProvider(OpenStackProviderVersion)}, nil
	default:
		return nil, fmt.Errorf("world: unknown set %q (one of %s)", set, strings.Join(setNames(), ", "))
	}
	var out []Artifact
	seen := map[string]bool{}
	add := func(a Artifact) {
		if !seen[a.Key] {
			seen[a.Key] = true
			out = append(out, a)
		}
	}
	add(Containerd(ContainerdVersion))
	add(Runc(RuncVersion))
	add(Distribution(DistributionVersion))
	for _, v := range versions {
		k, err := Kubernetes(v)
		if err != nil {
			return nil, err
		}
		add(k)
		pv, err := schemas.ParseVersion(v)
		if err != nil {
			return nil, fmt.Errorf("world: %w", err)
		}
		im, err := assets.ImagesFor(pv)
		if err != nil {
			return nil, fmt.Errorf("world: %w", err)
		}
		e, err := Etcd(im.Etcd)
		if err != nil {
			return nil, err
		}
		add(e)
		p, err := Pause(im.Pause, v)
		if err != nil {
			return nil, err
		}
		add(p)
		// What every cluster runs besides the control plane: its DNS and
		// its network (flannel, its CNI plugin, the plugins it delegates to).
		d, err := CoreDNS(im.CoreDNS)
		if err != nil {
			return nil, err
		}
		add(d)
		f, err := Flannel(im.Flannel)
		if err != nil {
			return nil, err
		}
		add(f)
		fc, err := FlannelCNI(im.FlannelCNI)
		if err != nil {
			return nil, err
		}
		add(fc)
		add(CNIPlugins(assets.CNIPluginsVersion))
		// What enforces NetworkPolicy by default (spec.network.networkPolicy).
		np, err := KubeRouter(im.NetworkPolicy)
		if err != nil {
			return nil, err
		}
		add(np)
		// The gateway addon's Gateway API implementation.
		gw, err := Traefik(im.Gateway)
		if err != nil {
			return nil, err
		}
		add(gw)
		// The monitoring addon.
		mon, err := Monitoring(im.Monitoring)
		if err != nil {
			return nil, err
		}
		for _, a := range mon {
			add(a)
		}
		if set == E2E {
			// make e2e's LoadBalancer Service: the cloud controller
			// manager; its volumes: the Cinder CSI plugin apart (so that
			// each is cached on its own).
			add(CloudControllerManager(im.CloudProvider))
			add(CinderCSI(im.CloudProvider))
		}
		if set == All {
			ms, err := MetricsServer(im.MetricsServer)
			if err != nil {
				return nil, err
			}
			add(ms)
			add(CloudProvider(im.CloudProvider))
		}
		// The sidecars the Cinder CSI plugin runs with, in both sets.
		for _, c := range csiSidecars {
			add(c.Artifact())
		}
		add(ExternalSnapshotter())
	}
	reg, err := Registrar()
	if err != nil {
		return nil, err
	}
	add(reg)
	// opke check's pods (assets.CheckImage), from the tree of the
	// release whose e2e names that agnhost.
	check, err := Agnhost(strings.TrimPrefix(assets.CheckImage, AgnhostImage("")), checkImageTree)
	if err != nil {
		return nil, err
	}
	add(check)
	return out, nil
}

func setNames() []string {
	s := make([]string, len(sets))
	for i, x := range sets {
		s[i] = string(x)
	}
	return s
}

// kubernetesBinaries are the programs of a Kubernetes release a cluster
// runs; the first four are also images.
var kubernetesBinaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet", "kubectl"}

// Kubernetes is a Kubernetes release: its components built from
// k8s.io/kubernetes at version v, stamped as upstream's release build
// stamps them (hack/lib/version.sh: gitVersion, gitMajor, gitMinor, a
// tree state of "archive" as for a build from a source archive, and the
// release's date as the build date), and the images the rendered
// manifests name: registry.k8s.io/NAME:v for the control plane and
// kube-proxy; the kubelet is a download, as upstream publishes it.
func Kubernetes(v string) (Artifact, error) {
	pv, err := schemas.ParseVersion(v)
	if err != nil {
		return Artifact{}, fmt.Errorf("world: kubernetes %w", err)
	}
	a := Artifact{Key: "kubernetes-" + v, Module: "k8s.io/kubernetes", Version: v, Lang: Go, Staging: true}
	for _, name := range kubernetesBinaries {
		a.Binaries = append(a.Binaries, Binary{Name: name, Package: "k8s.io/kubernetes/cmd/" + name})
	}
	for _, name := range kubernetesBinaries[:4] {
		im := ImageSpec{
			Ref:        assets.KubernetesRegistry + "/" + name + ":" + v,
			Files:      []ImageFile{{Binary: name, Path: "/usr/local/bin/" + name}},
			Entrypoint: []string{"/usr/local/bin/" + name},
		}
		if name == "kube-proxy" {
			// Upstream's kube-proxy image is distroless-iptables: the
			// iptables, nft and conntrack tools it programs the host with.
			im.Base = netBase
		}
		a.Images = append(a.Images, im)
	}
	// The kubelet as upstream releases it: a file at dl.k8s.io with its
	// sha256 beside it (assets.KubeletDownload), not an image.
	a.Downloads = []Download{{Path: assets.KubeletDownload(v).Path, Binaries: []string{"kubelet"}}}
	a.Stamp = map[string]string{}
	for _, pkg := range kubernetesStampPackages {
		for k, val := range map[string]string{
			"gitVersion": v, "gitMajor": fmt.Sprint(pv.Major), "gitMinor": fmt.Sprint(pv.Minor), "gitTreeState": "archive",
		} {
			a.Stamp[pkg+"."+k] = val
		}
		a.DateVars = append(a.DateVars, pkg+".buildDate")
	}
	return a, nil
}

// kubernetesStampPackages are the packages whose version variables a
// Kubernetes build sets (hack/lib/version.sh).
var kubernetesStampPackages = []string{"k8s.io/client-go/pkg/version", "k8s.io/component-base/version"}

// Etcd is the etcd image a minor's matrix row names (registry.k8s.io/
// etcd:3.6.5-0): etcd, etcdctl and etcdutl of the release before the
// dash. etcd's version is a constant of its source: nothing to stamp.
func Etcd(ref string) (Artifact, error) {
	tag, ok := assets.ImageTag(ref)
	if !ok {
		return Artifact{}, fmt.Errorf("world: etcd image %q has no tag", ref)
	}
	v, _, _ := strings.Cut(tag, "-")
	v = "v" + v
	a := Artifact{
		Key: "etcd-" + v, Module: "go.etcd.io/etcd/server/v3", Version: v, Lang: Go,
		Also: map[string]string{"go.etcd.io/etcd/etcdctl/v3": v, "go.etcd.io/etcd/etcdutl/v3": v},
		// The commit is not known from the module proxy: "archive", as the
		// other builds say.
		Stamp: map[string]string{"go.etcd.io/etcd/api/v3/version.GitSHA": "archive"},
		Binaries: []Binary{
			{Name: "etcd", Package: "go.etcd.io/etcd/server/v3"},
			{Name: "etcdctl", Package: "go.etcd.io/etcd/etcdctl/v3"},
			{Name: "etcdutl", Package: "go.etcd.io/etcd/etcdutl/v3"},
		},
	}
	img := ImageSpec{Ref: ref, Entrypoint: []string{"/usr/local/bin/etcd"}}
	for _, b := range a.Binaries {
		img.Files = append(img.Files, ImageFile{Binary: b.Name, Path: "/usr/local/bin/" + b.Name})
	}
	a.Images = []ImageSpec{img}
	return a, nil
}

// Pause is the pause image a minor's matrix row names: pause.c of
// k8s.io/kubernetes at kubeVersion (build/pause), whose Makefile's TAG
// must be the image's tag, compiled statically as its Makefile does.
func Pause(ref, kubeVersion string) (Artifact, error) {
	tag, ok := assets.ImageTag(ref)
	if !ok {
		return Artifact{}, fmt.Errorf("world: pause image %q has no tag", ref)
	}
	return Artifact{
		Key: "pause-" + tag, Module: "k8s.io/kubernetes", Version: kubeVersion, Lang: C,
		Binaries: []Binary{{Name: "pause", Package: "build/pause/linux/pause.c"}},
		CDefine:  []string{"-DVERSION=v" + tag},
		Images:   []ImageSpec{{Ref: ref, Files: []ImageFile{{Binary: "pause", Path: "/pause"}}, Entrypoint: []string{"/pause"}, User: "65535:65535"}},
	}, nil
}

// Containerd is the host's container runtime: containerd, ctr and the
// runc shim, stamped as containerd's Makefile stamps them.
func Containerd(v string) Artifact {
	return Artifact{
		Key: "containerd-" + v, Module: "github.com/containerd/containerd/v2", Version: v, Lang: Go,
		Binaries: []Binary{
			{Name: "containerd", Package: "github.com/containerd/containerd/v2/cmd/containerd"},
			{Name: "ctr", Package: "github.com/containerd/containerd/v2/cmd/ctr"},
			{Name: "containerd-shim-runc-v2", Package: "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"},
		},
		Tags:  []string{"no_btrfs", "no_devmapper", "no_zfs"},
		Stamp: map[string]string{"github.com/containerd/containerd/v2/version.Version": v, "github.com/containerd/containerd/v2/version.Revision": "archive"},
		// Upstream links the shim statically; with cgo off every binary is.
	}
}

// Runc is the OCI runtime containerd runs containers with, built with
// seccomp (cgo, libseccomp) as runc's Makefile builds it.
func Runc(v string) Artifact {
	return Artifact{
		Key: "runc-" + v, Module: "github.com/opencontainers/runc", Version: v, Lang: Go,
		Binaries: []Binary{{Name: "runc", Package: "github.com/opencontainers/runc"}},
		Tags:     []string{"seccomp", "urfave_cli_no_docs"},
		CGO:      true,
		// main.version is runc's VERSION file, embedded: nothing to stamp.
		Stamp: map[string]string{"main.gitCommit": "archive"},
	}
}

// The peer's versions: OpenTofu's latest 1.10 release and the OpenStack
// provider's latest release on the module proxy, 2026-11-26.
const (
	OpenTofuVersion          = "v1.10.10"
	OpenStackProviderVersion = "v3.4.0"
)

// OpenTofu is the tofu command. Its module cannot be installed (go install
// refuses its replace directives) but builds in a module that requires it
// and keeps its versioned replacements (WrapperMod), as every artifact
// here does.
func OpenTofu(v string) Artifact {
	return Artifact{
		Key: "opentofu-" + v, Module: "github.com/opentofu/opentofu", Version: v, Lang: Go,
		Binaries: []Binary{{Name: "tofu", Package: "github.com/opentofu/opentofu/cmd/tofu"}},
		// As its release build (.goreleaser.yaml): no -dev prerelease.
		Stamp: map[string]string{"github.com/opentofu/opentofu/version.dev": "no"},
	}
}

// OpenStackProvider is terraform-provider-openstack, named as a provider
// mirror names it. Its module is on the proxy but not in the checksum
// database: the hash it had when first downloaded here (2026-11-26) is
// pinned (Sum) and checked on every download.
func OpenStackProvider(v string) Artifact {
	m := "github.com/terraform-provider-openstack/terraform-provider-openstack/v3"
	return Artifact{
		Key: "terraform-provider-openstack-" + v, Module: m, Version: v, Lang: Go, NoSumDB: true,
		Sum:      openStackProviderSums[v],
		Binaries: []Binary{{Name: "terraform-provider-openstack_" + v, Package: m}},
	}
}

// openStackProviderSums are the pinned hashes of the provider's module.
var openStackProviderSums = map[string]string{
	"v3.4.0": "h1:Ap8gvameIY5ZM7CMh7fngP/VoIyeupzKX3izoyfp9yg=",
}

// Distribution is the OCI registry (distribution's registry) the
// simulator serves images from, as an operator's mirror serves them.
func Distribution(v string) Artifact {
	return Artifact{
		Key: "distribution-" + v, Module: "github.com/distribution/distribution/v3", Version: v, Lang: Go,
		Binaries: []Binary{{Name: "registry", Package: "github.com/distribution/distribution/v3/cmd/registry"}},
		Stamp: map[string]string{
			"github.com/distribution/distribution/v3/version.version":  v,
			"github.com/distribution/distribution/v3/version.revision": "archive",
		},
	}
}

// CoreDNS is the cluster DNS image a minor's matrix row names
// (registry.k8s.io/coredns/coredns:v1.13.1), with the plugins of its
// release (plugin.cfg, as its Makefile builds it), at /coredns as
// upstream's image has it.
func CoreDNS(ref string) (Artifact, error) {
	v, ok := assets.ImageTag(ref)
	if !ok {
		return Artifact{}, fmt.Errorf("world: coredns image %q has no tag", ref)
	}
	return Artifact{
		Key: "coredns-" + v, Module: "github.com/coredns/coredns", Version: v, Lang: Go,
		Binaries: []Binary{{Name: "coredns", Package: "github.com/coredns/coredns"}},
		Stamp:    map[string]string{"github.com/coredns/coredns/coremain.GitCommit": "archive"},
		Images: []ImageSpec{{Ref: ref, Files: []ImageFile{{Binary: "coredns", Path: "/coredns", Caps: []Capability{CapNetBindService}}},
			Entrypoint: []string{"/coredns"}, User: "65532:65532"}},
	}, nil
}

// cniPlugins are the plugins of the reference CNI plugins' Linux release
// (build_linux.sh: every folder of plugins/main, ipam and meta but
// windows), by folder.
var cniPlugins = []string{
	"main/bridge", "main/dummy", "main/host-device", "main/ipvlan", "main/loopback", "main/macvlan", "main/ptp", "main/tap", "main/vlan",
	"ipam/dhcp", "ipam/host-local", "ipam/static",
	"meta/bandwidth", "meta/firewall", "meta/portmap", "meta/sbr", "meta/tuning", "meta/vrf",
}

// CNIPlugins are the reference CNI plugins flannel delegates to (bridge,
// host-local, portmap, loopback) with the rest of their release, stamped
// as their build script does, in the tarball upstream releases them in
// (assets.CNIPluginsDownload), which the hosts unpack into /opt/cni/bin.
func CNIPlugins(v string) Artifact {
	const m = "github.com/containernetworking/plugins"
	a := Artifact{
		Key: "cni-plugins-" + v, Module: m, Version: v, Lang: Go,
		Stamp: map[string]string{m + "/pkg/utils/buildversion.BuildVersion": v},
	}
	d := Download{Path: assets.CNIPluginsDownload(v).Path}
	for _, p := range cniPlugins {
		name := path.Base(p)
		a.Binaries = append(a.Binaries, Binary{Name: name, Package: m + "/plugins/" + p})
		d.Binaries = append(d.Binaries, name)
	}
	a.Downloads = []Download{d}
	return a
}

// MetricsServer is the metrics-server image a minor's matrix row names,
// built and stamped as its Makefile builds it (client-go's version
// variables), at /metrics-server as upstream's image has it. v0.8.0 is
// not in the checksum database: the proxy's copy is taken unchecked
// (NoSumDB), which the note of its build says.
func MetricsServer(ref string) (Artifact, error) {
	v, ok := assets.ImageTag(ref)
	if !ok {
		return Artifact{}, fmt.Errorf("world: metrics-server image %q has no tag", ref)
	}
	const m = "sigs.k8s.io/metrics-server"
	return Artifact{
		Key: "metrics-server-" + v, Module: m, Version: v, Lang: Go, NoSumDB: true,
		Binaries:   []Binary{{Name: "metrics-server", Package: m + "/cmd/metrics-server"}},
		Stamp:      map[string]string{"k8s.io/client-go/pkg/version.gitVersion": v},
		DateVars:   []string{"k8s.io/client-go/pkg/version.buildDate"},
		CommitVars: []string{"k8s.io/client-go/pkg/version.gitCommit"},
		Images:     []ImageSpec{{Ref: ref, Files: []ImageFile{{Binary: "metrics-server", Path: "/metrics-server"}}, Entrypoint: []string{"/metrics-server"}, User: "65534"}},
	}, nil
}

// StandIns are the releases the world builds in place of upstream
// releases OPKE renders whose modules the Go module proxy does not serve
// whole, by the rendered image: each is built from the stand-in's source
// and published under the rendered name, stamped with its own version
// (world/LIMITS.md says how each differs, and why).
var StandIns = map[string]string{
	// v3.7's module needs 15 dependencies the proxy refuses (403: lego's
	// DNS providers' SDKs, containous/go-http-auth); v3.6.12 is the
	// newest release it builds.
	assets.GatewayImage: "v3.6.12",
	// The only kube-router release the proxy serves.
	assets.NetworkPolicyImage: "v2.1.0",
	// The only release of the Prometheus Operator's main module the
	// proxy serves (newer ones are refused, 403; its API module is served
	// at v0.95.2, from which the definitions are generated).
	assets.Monitoring().Operator:       "v0.85.0",
	assets.Monitoring().ConfigReloader: "v0.85.0",
	// From v0.32 Alertmanager embeds its UI from a folder its npm build
	// makes (ui/app/dist), which the module lacks: v0.31.1 is the newest
	// that builds, its UI still Go code.
	assets.Monitoring().Alertmanager: "v0.31.1",
}

// source is the version the world builds for an image of tag v: its
// stand-in's, or the tag.
func source(ref, v string) string { return cmp.Or(StandIns[ref], v) }

// KubeRouter is kube-router (assets.NetworkPolicyImage), whose network
// policy controller enforces NetworkPolicy: /usr/local/bin/kube-router on
// the network base (iptables, ipset, as upstream's Alpine image has
// them), built as its Makefile builds it (no cgo, the version and build
// date stamped); a stand-in's source where StandIns names one.
func KubeRouter(ref string) (Artifact, error) {
	tag, ok := assets.ImageTag(ref)
	if !ok {
		return Artifact{}, fmt.Errorf("world: kube-router image %q has no tag", ref)
	}
	const m = "github.com/cloudnativelabs/kube-router/v2"
	v := source(ref, tag)
	return Artifact{
		Key: "kube-router-" + v, Module: m, Version: v, Lang: Go,
		Binaries: []Binary{{Name: "kube-router", Package: m + "/cmd/kube-router"}},
		Stamp:    map[string]string{m + "/pkg/version.Version": v},
		DateVars: []string{m + "/pkg/version.BuildDate"},
		Images: []ImageSpec{{Ref: ref, Base: netBase, Files: []ImageFile{{Binary: "kube-router", Path: "/usr/local/bin/kube-router"}},
			Entrypoint: []string{"/usr/local/bin/kube-router"}}},
	}, nil
}

// Traefik is Traefik Proxy (assets.GatewayImage), the Gateway API
// implementation of the gateway addon: /usr/local/bin/traefik as
// upstream's image has it, built as its Makefile builds it (no cgo, the
// version, codename and build date stamped); a stand-in's source where
// StandIns names one. No base: Traefik reads its configuration from its
// flags and the Kubernetes API, and serves no TLS of its own in the
// addon.
func Traefik(ref string) (Artifact, error) {
	tag, ok := assets.ImageTag(ref)
	if !ok {
		return Artifact{}, fmt.Errorf("world: traefik image %q has no tag", ref)
	}
	const m = "github.com/traefik/traefik/v3"
	v := source(ref, tag)
	return Artifact{
		Key: "traefik-" + v, Module: m, Version: v, Lang: Go,
		Binaries: []Binary{{Name: "traefik", Package: m + "/cmd/traefik"}},
		Stamp:    map[string]string{m + "/pkg/version.Version": v, m + "/pkg/version.Codename": "opke"},
		DateVars: []string{m + "/pkg/version.BuildDate"},
		Images: []ImageSpec{{Ref: ref, Files: []ImageFile{{Binary: "traefik", Path: "/usr/local/bin/traefik"}},
			Entrypoint: []string{"/usr/local/bin/traefik"}}},
	}, nil
}

// Monitoring is the monitoring addon's Prometheus Operator, Prometheus,
// Alertmanager and node-exporter (assets.MonitoringImages), each from its
// module at the image's tag (a stand-in's where StandIns names one) and
// stamped with that version as its promu or Makefile build stamps it
// (prometheus/common's version variables), its binary where upstream's
// image has it, on no base (upstream's are busybox: nothing of it is
// used). Prometheus has no web UI (npm); its API is whole.
func Monitoring(im assets.MonitoringImages) ([]Artifact, error) {
	stamp := func(v string) map[string]string {
		const p = "github.com/prometheus/common/version."
		return map[string]string{p + "Version": strings.TrimPrefix(v, "v"), p + "Revision": "archive", p + "Branch": "HEAD", p + "BuildUser": "opke-world"}
	}
	tags := map[string]string{}
	for _, ref := range []string{im.Operator, im.ConfigReloader, im.Prometheus, im.Alertmanager, im.NodeExporter} {
		v, ok := assets.ImageTag(ref)
		if !ok {
			return nil, fmt.Errorf("world: monitoring image %q has no tag", ref)
		}
		tags[ref] = source(ref, v)
	}
	if tags[im.Operator] != tags[im.ConfigReloader] {
		return nil, fmt.Errorf("world: the Prometheus Operator %s and its config reloader %s are of one release", im.Operator, im.ConfigReloader)
	}
	pv, err := prometheusModuleVersion(tags[im.Prometheus])
	if err != nil {
		return nil, err
	}
	// Each artifact: named by its image's tag, built at version (the
	// tag but for Prometheus'), its binaries at /bin/NAME.
	artifact := func(name, module, version, tag string, bins []Binary, refs ...string) Artifact {
		a := Artifact{Key: name + "-" + tag, Module: module, Version: version, Lang: Go, Binaries: bins, Stamp: stamp(tag),
			DateVars: []string{"github.com/prometheus/common/version.BuildDate"}}
		for i, ref := range refs {
			path := "/bin/" + bins[i].Name
			// busybox's nobody, as each of their Dockerfiles sets it.
			a.Images = append(a.Images, ImageSpec{Ref: ref, Files: []ImageFile{{Binary: bins[i].Name, Path: path}}, Entrypoint: []string{path}, User: "65534:65534"})
		}
		return a
	}
	const op = "github.com/prometheus-operator/prometheus-operator"
	return []Artifact{
		// Its go.mod replaces its API and client modules by their
		// folders, which its zip lacks: they come from the proxy at the
		// same version.
		artifact("prometheus-operator", op, tags[im.Operator], tags[im.Operator],
			[]Binary{{Name: "operator", Package: op + "/cmd/operator"}, {Name: "prometheus-config-reloader", Package: op + "/cmd/prometheus-config-reloader"}},
			im.Operator, im.ConfigReloader),
		artifact("prometheus", "github.com/prometheus/prometheus", pv, tags[im.Prometheus],
			[]Binary{{Name: "prometheus", Package: "github.com/prometheus/prometheus/cmd/prometheus"}}, im.Prometheus),
		artifact("alertmanager", "github.com/prometheus/alertmanager", tags[im.Alertmanager], tags[im.Alertmanager],
			[]Binary{{Name: "alertmanager", Package: "github.com/prometheus/alertmanager/cmd/alertmanager"}}, im.Alertmanager),
		artifact("node-exporter", "github.com/prometheus/node_exporter", tags[im.NodeExporter], tags[im.NodeExporter],
			[]Binary{{Name: "node_exporter", Package: "github.com/prometheus/node_exporter"}}, im.NodeExporter),
	}, nil
}

// prometheusModuleVersion is the Go module version of a Prometheus
// release: v3.16.0 is v0.316.0 (its go.mod has no /v3 path, so releases
// are published as v0.MAJOR MINOR(two digits).PATCH).
func prometheusModuleVersion(tag string) (string, error) {
	var major, minor, patch int
	if n, err := fmt.Sscanf(tag, "v%d.%d.%d", &major, &minor, &patch); n != 3 || err != nil || minor > 99 || major < 2 {
		return "", fmt.Errorf("world: prometheus tag %q is not vMAJOR.MINOR.PATCH", tag)
	}
	return fmt.Sprintf("v0.%d%02d.%d", major, minor, patch), nil
}

// Flannel is the flannel image a minor's matrix row names
// (ghcr.io/flannel-io/flannel:v0.27.4): flanneld at /opt/bin/flanneld on
// the network base (iptables, nft, ip), as upstream's image has it on
// Alpine, stamped as its Makefile stamps it. Built with cgo, as upstream
// builds it on amd64 (its UDP backend is C), linked against the base's
// glibc where upstream links statically against musl. v0.27.4 is on the
// proxy but not in the checksum database (NoSumDB).
func Flannel(ref string) (Artifact, error) {
	v, ok := assets.ImageTag(ref)
	if !ok {
		return Artifact{}, fmt.Errorf("world: flannel image %q has no tag", ref)
	}
	const m = "github.com/flannel-io/flannel"
	return Artifact{
		Key: "flannel-" + v, Module: m, Version: v, Lang: Go, NoSumDB: true, CGO: true,
		Binaries: []Binary{{Name: "flanneld", Package: m}},
		Stamp:    map[string]string{m + "/pkg/version.Version": v},
		Images: []ImageSpec{{
			Ref: ref, Base: netBase,
			Files:      []ImageFile{{Binary: "flanneld", Path: "/opt/bin/flanneld"}},
			Entrypoint: []string{"/opt/bin/flanneld"},
		}},
	}, nil
}

// FlannelCNIPluginsVersion is the last release of the reference CNI
// plugins that carried the flannel CNI plugin (plugins/meta/flannel),
// which flannel-io/cni-plugin was split from. flannel-io/cni-plugin is
// not on the module proxy: this is the nearest real build of the same
// plugin (it reads /run/flannel/subnet.env and delegates to bridge and
// host-local, as the split one does).
const FlannelCNIPluginsVersion = "v0.9.1"

// FlannelCNI is the flannel CNI plugin image a minor's matrix row names
// (ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1), /flannel at
// its root as upstream's has it, on the network base for the cp its
// install container runs, built from FlannelCNIPluginsVersion.
func FlannelCNI(ref string) (Artifact, error) {
	if _, ok := assets.ImageTag(ref); !ok {
		return Artifact{}, fmt.Errorf("world: flannel CNI plugin image %q has no tag", ref)
	}
	const m = "github.com/containernetworking/plugins"
	return Artifact{
		Key: "flannel-cni-" + FlannelCNIPluginsVersion, Module: m, Version: FlannelCNIPluginsVersion, Lang: Go,
		Binaries: []Binary{{Name: "flannel", Package: m + "/plugins/meta/flannel"}},
		Stamp:    map[string]string{m + "/pkg/utils/buildversion.BuildVersion": FlannelCNIPluginsVersion},
		Images: []ImageSpec{{
			Ref: ref, Base: netBase,
			Files:      []ImageFile{{Binary: "flannel", Path: "/flannel"}},
			Entrypoint: []string{"/flannel"},
		}},
	}, nil
}

// CloudControllerManager is CloudProvider's OpenStack cloud controller
// manager alone, its image the same.
func CloudControllerManager(v string) Artifact {
	a := CloudProvider(v)
	a.Key = "openstack-cloud-controller-manager-" + v
	a.Binaries = a.Binaries[:1]
	a.Images = a.Images[:1]
	return a
}

// CloudProvider is cloud-provider-openstack at the version a minor's
// matrix row names: the OpenStack cloud controller manager and the Cinder
// CSI plugin, at /bin as upstream's images have them, stamped as its
// Makefile stamps them. The CSI plugin's image has the storage base (the
// file system tools it formats and mounts with). Its go.mod's
// replacements (Kubernetes' staging modules) are kept, as in its build.
func CloudProvider(v string) Artifact {
	const m = "k8s.io/cloud-provider-openstack"
	a := Artifact{
		Key: "cloud-provider-openstack-" + v, Module: m, Version: v, Lang: Go,
		Binaries: []Binary{
			{Name: "openstack-cloud-controller-manager", Package: m + "/cmd/openstack-cloud-controller-manager"},
			{Name: "cinder-csi-plugin", Package: m + "/cmd/cinder-csi-plugin"},
		},
		Stamp: map[string]string{"k8s.io/component-base/version.gitVersion": v, m + "/pkg/version.Version": v},
	}
	for _, b := range a.Binaries {
		im := ImageSpec{
			Ref:   "registry.k8s.io/provider-os/" + b.Name + ":" + v,
			Files: []ImageFile{{Binary: b.Name, Path: "/bin/" + b.Name}},
			Cmd:   []string{"/bin/" + b.Name}, // as upstream's Dockerfile
		}
		if b.Name == "cinder-csi-plugin" {
			im.Base = storageBase
		}
		a.Images = append(a.Images, im)
	}
	return a
}

// CinderCSI is cloud-provider-openstack's Cinder CSI plugin alone.
func CinderCSI(v string) Artifact {
	a := CloudProvider(v)
	a.Key = "cinder-csi-plugin-" + v
	a.Binaries = a.Binaries[1:]
	a.Images = a.Images[1:]
	return a
}

// registrarSources are the files the test world's stand-in for
// csi-node-driver-registrar is built from, relative to the project's root.
var registrarSources = []string{"go.mod", "go.sum", "world/standin/csi-node-driver-registrar"}

// Registrar is the test world's stand-in for kubernetes-csi's
// csi-node-driver-registrar (world/standin/csi-node-driver-registrar,
// upstream's flags and socket protocol), built from this project's tree
// into the image the rendered Cinder CSI node plugin names, upstream's
// (assets.CSI().NodeDriverRegistrar), its binary where upstream's image
// has it: the module proxy serves no version of upstream's (its v2
// releases have no /v2 module path). cloudsim/machine/LIMITS.md lists it.
func Registrar() (Artifact, error) {
	root, err := projectRoot()
	if err != nil {
		return Artifact{}, err
	}
	sum, err := projectSources(root, registrarSources)
	if err != nil {
		return Artifact{}, err
	}
	const name = "csi-node-driver-registrar"
	return Artifact{
		Key: name + "-standin-" + sum[:12], Module: "opke.dev/opke", Version: sum, Lang: Project, Dir: root,
		Binaries: []Binary{{Name: name, Package: "./world/standin/" + name}},
		Images: []ImageSpec{{Ref: assets.CSI().NodeDriverRegistrar, Files: []ImageFile{{Binary: name, Path: "/" + name}},
			Entrypoint: []string{"/" + name}}},
	}, nil
}

// projectRoot is the folder of the go.mod of the module the go command
// sees from the working folder: this project's, when make or a test of
// it runs.
func projectRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("world: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("world: not inside the project's module (go env GOMOD is empty)")
	}
	return filepath.Dir(mod), nil
}

// projectSources hashes the Go sources under root named by paths (files,
// or folders whose non-test .go files count), names and contents.
func projectSources(root string, paths []string) (string, error) {
	h := sha256.New()
	for _, p := range paths {
		full := filepath.Join(root, p)
		st, err := os.Stat(full)
		if err != nil {
			return "", fmt.Errorf("world: %w", err)
		}
		files := []string{full}
		if st.IsDir() {
			matches, err := filepath.Glob(filepath.Join(full, "*.go"))
			if err != nil {
				return "", fmt.Errorf("world: %w", err)
			}
			files = files[:0]
			for _, m := range matches {
				if !strings.HasSuffix(m, "_test.go") {
					files = append(files, m)
				}
			}
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return "", fmt.Errorf("world: %w", err)
			}
			rel, _ := filepath.Rel(root, f)
			fmt.Fprintf(h, "%s %d\n", rel, len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// CSISidecar is one of the Kubernetes CSI sidecars the rendered Cinder
// CSI controller runs, built from its module's cmd/<name>.
type CSISidecar struct {
	Ref, Module string
	// NoSumDB: the release is on the proxy but not in the checksum
	// database.
	NoSumDB bool
}

// csiSidecars are the sidecars the rendered Cinder CSI controller runs
// (assets.CSI()), with their modules.
var csiSidecars = []CSISidecar{
	{Ref: assets.CSI().Attacher, Module: "github.com/kubernetes-csi/external-attacher/v4"},
	{Ref: assets.CSI().Provisioner, Module: "github.com/kubernetes-csi/external-provisioner/v6"},
	{Ref: assets.CSI().Resizer, Module: "github.com/kubernetes-csi/external-resizer/v2"},
}

// Artifact is a CSI sidecar's image, its binary at /<name> as upstream's
// image has it, stamped as its release-tools build stamps it
// (main.version).
func (c CSISidecar) Artifact() Artifact {
	v, _ := assets.ImageTag(c.Ref)
	name := c.Ref[strings.LastIndex(c.Ref, "/")+1 : strings.LastIndex(c.Ref, ":")]
	return Artifact{
		Key: name + "-" + v, Module: c.Module, Version: v, Lang: Go, NoSumDB: c.NoSumDB,
		Binaries: []Binary{{Name: name, Package: c.Module + "/cmd/" + name}},
		Stamp:    map[string]string{"main.version": v},
		Images:   []ImageSpec{{Ref: c.Ref, Files: []ImageFile{{Binary: name, Path: "/" + name}}, Entrypoint: []string{"/" + name}}},
	}
}

// ExternalSnapshotter is kubernetes-csi's external-snapshotter at
// assets.ExternalSnapshotterVersion: the csi-snapshotter sidecar the
// rendered Cinder CSI controller runs and the snapshot controller beside
// it, each at /<name> in its image as upstream's, stamped as its
// release-tools build stamps it (main.version). Its go.mod replaces its
// client module with its own ./client, which the module's zip leaves
// out: the build requires the client module at the same release instead.
func ExternalSnapshotter() Artifact {
	const m = "github.com/kubernetes-csi/external-snapshotter/v8"
	v := assets.ExternalSnapshotterVersion
	a := Artifact{
		Key: "external-snapshotter-" + v, Module: m, Version: v, Lang: Go,
		Also:  map[string]string{"github.com/kubernetes-csi/external-snapshotter/client/v8": v},
		Stamp: map[string]string{"main.version": v},
	}
	for _, im := range []struct{ name, ref string }{
		{"csi-snapshotter", assets.CSI().Snapshotter},
		{"snapshot-controller", assets.CSI().SnapshotController},
	} {
		a.Binaries = append(a.Binaries, Binary{Name: im.name, Package: m + "/cmd/" + im.name})
		a.Images = append(a.Images, ImageSpec{Ref: im.ref, Files: []ImageFile{{Binary: im.name, Path: "/" + im.name}}, Entrypoint: []string{"/" + im.name}})
	}
	return a
}

// notBuilt are the images a rendered cluster may name that make world
// does not build, each with why. A test holds every image the renderer
// names, for every version of the test matrix, to being built or listed
// here.
var notBuilt = map[string]string{
	"registry.k8s.io/ingress-nginx/controller:v1.14.0": "ingress-nginx addon: nginx and its Lua modules are C, not on the module proxy",
	assets.DashboardImage:                              "dashboard addon (Headlamp): its front end is built with npm, and its Go backend's module is not on the module proxy",
}

// NotBuilt returns a copy of notBuilt: no caller can rewrite the package's own.
func NotBuilt() map[string]string {
	return maps.Clone(notBuilt)
}

// ConformanceImage is upstream's conformance image of Kubernetes v
// (test/conformance/image): what sonobuoy and the image's own
// conformance-e2e.yaml run in the cluster.
func ConformanceImage(v string) string { return assets.KubernetesRegistry + "/conformance:" + v }

// AgnhostImage is the e2e test image most conformance specs run, at the
// version test/utils/image/manifest.go of release names (2.63.0 for
// v1.36).
func AgnhostImage(version string) string {
	return assets.KubernetesRegistry + "/e2e-test-images/agnhost:" + version
}

// agnhostVersions is agnhost's version by Kubernetes minor
// (test/images/agnhost/VERSION, as its e2e's image manifest names it).
var agnhostVersions = map[string]string{"1.36": "2.63.0"}

// checkImageTree is the Kubernetes release whose tree has
// assets.CheckImage's agnhost (test/images/agnhost/VERSION).
const checkImageTree = "v1.36.1"

// ConformanceArtifacts are what upstream's conformance suite of
// Kubernetes v needs built: its conformance image, as
// test/conformance/image/Dockerfile makes it (on a Debian base:
// upstream's debian-base; ginkgo, e2e.test, kubectl and go-runner as
// kubeconformance under /usr/local/bin, go-runner also as /gorunner and
// /run_e2e.sh; its ENV), and agnhost (test/images/agnhost, from the
// same release's tree).
func ConformanceArtifacts(v string) ([]Artifact, error) {
	pv, err := schemas.ParseVersion(v)
	if err != nil {
		return nil, fmt.Errorf("world: conformance %w", err)
	}
	agn, ok := agnhostVersions[fmt.Sprintf("%d.%d", pv.Major, pv.Minor)]
	if !ok {
		return nil, fmt.Errorf("world: no agnhost version known for Kubernetes %s (test/images/agnhost/VERSION of the release)", v)
	}
	k, err := Kubernetes(v)
	if err != nil {
		return nil, err
	}
	suite := Artifact{Key: "conformance-" + v, Module: k.Module, Version: v, Lang: Go, Staging: true, Stamp: k.Stamp, DateVars: k.DateVars,
		Binaries: []Binary{
			{Name: "e2e.test", Package: "k8s.io/kubernetes/test/e2e", Test: true},
			{Name: "ginkgo", Package: "github.com/onsi/ginkgo/v2/ginkgo"},
			{Name: "go-runner", Package: "k8s.io/kubernetes/test/conformance/image/go-runner"},
			{Name: "kubectl", Package: "k8s.io/kubernetes/cmd/kubectl"},
		},
		Images: []ImageSpec{{Ref: ConformanceImage(v), Base: debianBase,
			Files: []ImageFile{
				{Binary: "ginkgo", Path: "/usr/local/bin/ginkgo"},
				{Binary: "e2e.test", Path: "/usr/local/bin/e2e.test"},
				{Binary: "kubectl", Path: "/usr/local/bin/kubectl"},
				{Binary: "go-runner", Path: "/usr/local/bin/kubeconformance"},
				{Binary: "go-runner", Path: "/run_e2e.sh"},
				{Binary: "go-runner", Path: "/gorunner"},
			},
			Env: []string{`E2E_FOCUS=\[Conformance\]`, "E2E_SKIP=", "E2E_PROVIDER=local", "E2E_PARALLEL=1", "E2E_VERBOSITY=4",
				"RESULTS_DIR=/tmp/results", "KUBECONFIG="},
			Entrypoint: []string{"kubeconformance"}}},
	}
	host, err := Agnhost(agn, v)
	if err != nil {
		return nil, err
	}
	images, err := E2ETestImages(v)
	if err != nil {
		return nil, err
	}
	return []Artifact{suite, host, images, Busybox(), Nginx(), GlibcDNSTesting(), SampleAPIServer()}, nil
}

// Agnhost is upstream's e2e test image agnhost at version (its
// test/images/agnhost/VERSION) as the tree of Kubernetes kubeVersion
// has it: what the conformance specs run, and opke check's pods
// (assets.CheckImage).
func Agnhost(version, kubeVersion string) (Artifact, error) {
	k, err := Kubernetes(kubeVersion)
	if err != nil {
		return Artifact{}, err
	}
	return Artifact{Key: "agnhost-" + version, Module: k.Module, Version: kubeVersion, Lang: Go, Staging: true,
		Binaries: []Binary{{Name: "agnhost", Package: "k8s.io/kubernetes/test/images/agnhost"}},
		Images: []ImageSpec{{Ref: AgnhostImage(version), Base: agnhostBase, Files: agnhostFiles(),
			Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}},
	}, nil
}

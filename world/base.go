package world

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A Base is a Debian root filesystem an image is built on, for what
// upstream's image carries that is not Go: iptables and nft for
// kube-proxy (upstream's is distroless-iptables, itself Debian's
// packages) and flannel, cp for the CNI installers, mkfs and blkid for
// the Cinder CSI plugin (upstream's is Debian with those packages). It is
// made by mmdebstrap from Debian's packages, its Essential set and
// Packages, without documentation, device nodes or package lists, with
// its files' times set to Epoch so that the same packages make the same
// layer.
type Base struct {
	Suite    string
	Packages []string
}

// baseEpoch is the time a base's files and its image history are given
// (SOURCE_DATE_EPOCH): the time has no meaning, only its being fixed.
var baseEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// netBase is the base of the images that program the host's packet
// filter (kube-proxy, flannel) or install files with cp (the flannel CNI
// plugin): iptables and nftables with their tools, conntrack and ipset,
// as distroless-iptables has them, and iproute2, as flannel's has it.
var netBase = &Base{Suite: "bookworm", Packages: []string{"iptables", "nftables", "ipset", "conntrack", "kmod", "iproute2", "ca-certificates"}}

// debianBase is upstream's debian-base (registry.k8s.io/build-image/
// debian-base): Debian's essential set, which the conformance image is on.
var debianBase = &Base{Suite: "bookworm", Packages: []string{"ca-certificates"}}

// agnhostBase stands for the Alpine agnhost is on upstream, with the
// tools its Dockerfile adds (bind-tools, curl, netcat-openbsd, iproute2,
// iperf, bash, util-linux): Debian's packages of them.
var agnhostBase = &Base{Suite: "bookworm", Packages: []string{"bind9-dnsutils", "curl", "netcat-openbsd", "iproute2", "iperf", "bash", "util-linux", "ca-certificates"}}

// storageBase is the Cinder CSI plugin's: the file system tools it runs
// to format and mount volumes (upstream's image: e2fsprogs, xfsprogs,
// mount, udev).
var storageBase = &Base{Suite: "bookworm", Packages: []string{"ca-certificates", "e2fsprogs", "xfsprogs", "mount", "udev"}}

// Layer is a built gzip layer on disk.
type Layer struct {
	Path       string
	Descriptor Descriptor
	DiffID     string
}

// hash names a base's build.
func (b *Base) hash() string {
	j, _ := json.Marshal(b)
	h := sha256.New()
	h.Write([]byte("base/1 essential, no docs or /dev\n"))
	h.Write(j)
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
}

// baseLayer returns b's layer, building it with mmdebstrap when the cache
// lacks it.
func (w *World) baseLayer(ctx context.Context, b *Base) (*Layer, error) {
	dir := filepath.Join(w.Dir, "bases", b.Suite+"-"+b.hash())
	var l Layer
	if j, err := os.ReadFile(filepath.Join(dir, "complete")); err == nil && json.Unmarshal(j, &l) == nil {
		l.Path = filepath.Join(dir, "layer.tar.gz")
		return &l, nil
	}
	started := time.Now()
	w.logger().Info("building a base layer", "suite", b.Suite, "packages", strings.Join(b.Packages, ","))
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("base %s: %w", b.hash(), err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("base %s: %w", b.hash(), err)
	}
	raw := filepath.Join(dir, "rootfs.tar")
	args := []string{"--variant=essential", "--format=tar", "--include=" + strings.Join(b.Packages, ",")}
	for _, p := range []string{"/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*"} {
		args = append(args, "--dpkgopt=path-exclude="+p)
	}
	// The package lists and caches go, as in distroless images.
	args = append(args, "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/* \"$1\"/var/log/*", b.Suite, raw)
	env := []string{fmt.Sprintf("SOURCE_DATE_EPOCH=%d", baseEpoch.Unix())}
	if out, err := w.run(ctx, dir, env, "mmdebstrap", args...); err != nil {
		return nil, fmt.Errorf("base %s: mmdebstrap: %w: %s", b.hash(), err, tailOf(out, 10))
	}
	f, err := os.Open(raw)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", b.hash(), err)
	}
	defer f.Close()
	l.Path = filepath.Join(dir, "layer.tar.gz")
	l.Descriptor, l.DiffID, err = compressLayer(f, l.Path)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", b.hash(), err)
	}
	_ = os.Remove(raw)
	j, _ := json.Marshal(l)
	if err := os.WriteFile(filepath.Join(dir, "complete"), j, 0o644); err != nil {
		return nil, fmt.Errorf("base %s: %w", b.hash(), err)
	}
	w.logger().Info("built a base layer", "suite", b.Suite, "size", l.Descriptor.Size, "took", time.Since(started).Round(time.Second))
	return &l, nil
}

// compressLayer copies a root filesystem tarball into a gzip layer at
// dst, without device nodes (a runtime makes /dev) and with names
// relative to the root, and returns its descriptor and diff id.
func compressLayer(r io.Reader, dst string) (Descriptor, string, error) {
	out, err := os.Create(dst)
	if err != nil {
		return Descriptor{}, "", err
	}
	defer out.Close()
	compressed := sha256.New()
	counter := &countWriter{}
	gz, err := gzip.NewWriterLevel(io.MultiWriter(out, compressed, counter), gzip.BestSpeed)
	if err != nil {
		return Descriptor{}, "", err
	}
	uncompressed := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(gz, uncompressed))
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Descriptor{}, "", fmt.Errorf("read the root filesystem: %w", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if name == "" || (strings.HasPrefix(name, "dev/") && name != "dev/") {
			continue
		}
		if h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock || h.Typeflag == tar.TypeFifo {
			continue
		}
		h.Name = name
		if h.Typeflag == tar.TypeLink {
			h.Linkname = strings.TrimPrefix(h.Linkname, "./")
		}
		h.Format = tar.FormatPAX
		h.Uname, h.Gname = "", ""
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		if err := tw.WriteHeader(h); err != nil {
			return Descriptor{}, "", err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return Descriptor{}, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return Descriptor{}, "", err
	}
	if err := gz.Close(); err != nil {
		return Descriptor{}, "", err
	}
	if err := out.Close(); err != nil {
		return Descriptor{}, "", err
	}
	return Descriptor{MediaType: MediaLayer, Digest: digestOf(compressed), Size: counter.n}, digestOf(uncompressed), nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// logger is w.Log, or one that discards when it is nil.
func (w *World) logger() *slog.Logger {
	if w.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Log
}

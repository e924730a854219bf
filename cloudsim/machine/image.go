package machine

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"opke.dev/opke/cloudsim/firstboot"
	"opke.dev/opke/world"
)

// packages are the Debian packages of the image, besides minbase: what a
// Flatcar host has that OPKE relies on.
var packages = []string{
	"systemd", "systemd-sysv", "dbus", "openssh-server", "sudo",
	"iproute2", "iptables", "conntrack", "kmod", "procps",
	"ca-certificates", "libseccomp2",
	// install-kubelet fetches the kubelet and the CNI plugins with it, as
	// Flatcar ships it.
	"curl",
	// The host's own name resolves without DNS, as on Flatcar (sudo
	// looks it up; with no answer it waits for DNS to time out).
	"libnss-myhostname",
	// Flatcar resolves names through systemd-resolved (the kubelet hands
	// pods its /run/systemd/resolve/resolv.conf).
	"systemd-resolved",
}

// Suite is the Debian release the image is built from.
const Suite = "bookworm"

//go:embed customize.sh
var customize []byte

// The container runtime is Flatcar's kind, not Debian's (bookworm's
// containerd 1.6 lacks CRI methods kubelet 1.35 calls): containerd and
// runc built from upstream source by package world, installed where
// Flatcar has them, with the unit and the default configuration Flatcar's
// containerd sysext ships (flatcar/scripts, coreos/sysext/containerd, as
// of stable-4593.2.5): the configuration from $CONTAINERD_CONFIG, its own
// /usr/share/containerd/config.toml by default, which imports nothing.
const containerdUnit = `[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target

[Service]
Delegate=yes
Environment=CONTAINERD_CONFIG=/usr/share/containerd/config.toml
ExecStartPre=mkdir -p /run/docker/libcontainerd
ExecStartPre=ln -fs /run/containerd/containerd.sock /run/docker/libcontainerd/docker-containerd.sock
ExecStart=/usr/bin/containerd --config ${CONTAINERD_CONFIG}
KillMode=process
Type=notify
Restart=always
RestartSec=5
LimitNOFILE=1048576
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity

[Install]
WantedBy=multi-user.target
`

// containerdConfig is Flatcar's /usr/share/containerd/config.toml.
const containerdConfig = `version = 2

# persistent data location
root = "/var/lib/containerd"
# runtime state information
state = "/run/containerd"
# set containerd as a subreaper on linux when it is not running as PID 1
subreaper = true
# set containerd's OOM score
oom_score = -999
disabled_plugins = []

# grpc configuration
[grpc]
address = "/run/containerd/containerd.sock"
# socket uid
uid = 0
# socket gid
gid = 0

[plugins."io.containerd.runtime.v1.linux"]
# shim binary name/path
shim = "containerd-shim"
# runtime binary name/path
runtime = "runc"
# do not use a shim when starting containers, saves on memory but
# live restore is not supported
no_shim = false

[plugins."io.containerd.grpc.v1.cri"]
# enable SELinux labeling
enable_selinux = true

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
# setting runc.options unsets parent settings
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true
`

// machineContainerd is the machines' own containerd setting, where they
// differ from a Flatcar host (LIMITS.md), which the configuration OPKE
// renders imports (/etc/containerd/conf.d): this kernel's root lacks
// CAP_SYS_RESOURCE, so no process here may lower its OOM score; the CRI
// keeps the scores it asks for at containerd's own instead of failing
// every pod whose score is below it (the kubelet asks -998 for static
// pods).
const machineContainerd = `version = 3
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
`

// runtimeArtifacts are the world builds the image installs.
func runtimeArtifacts() []world.Artifact {
	return []world.Artifact{world.Containerd(world.ContainerdVersion), world.Runc(world.RuncVersion)}
}

// Image is a built OS image: a root filesystem, read-only once built,
// that every machine's root overlays.
type Image struct {
	// Root is the root filesystem's folder.
	Root string
	// Hash names the recipe it was built from.
	Hash string
}

// RecipeHash names the image a recipe builds: the suite, the packages and
// the customize hook.
func RecipeHash() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", Suite, strings.Join(packages, ","))
	h.Write(customize)
	for _, a := range runtimeArtifacts() {
		fmt.Fprintf(h, "%s %s\n", a.Key, a.Hash())
	}
	h.Write([]byte(containerdUnit + containerdConfig + machineContainerd + firstboot.OSRelease))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// DefaultCacheDir is where images are kept between runs, outside any
// repository: $OPKE_CACHE, else the user's cache folder.
func DefaultCacheDir() string {
	if d := os.Getenv("OPKE_CACHE"); d != "" {
		return filepath.Join(d, "images")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "opke", "images")
	}
	return filepath.Join(os.TempDir(), "opke-images")
}

// EnsureImage returns the image of the current recipe under cacheDir,
// building it with mmdebstrap (a few minutes, Debian's packages) when it
// is not there; images of other recipes are removed.
func EnsureImage(ctx context.Context, cacheDir string, log *slog.Logger) (*Image, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	img := &Image{Hash: RecipeHash()}
	img.Root = filepath.Join(cacheDir, img.Hash, "rootfs")
	if _, err := os.Stat(filepath.Join(cacheDir, img.Hash, "complete")); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	entries, _ := os.ReadDir(cacheDir)
	for _, e := range entries {
		if e.Name() != img.Hash {
			log.Info("removing an image of another recipe", "image", e.Name())
			_ = os.RemoveAll(filepath.Join(cacheDir, e.Name()))
		}
	}
	// The runtime first: built from source when the world's cache lacks it.
	runtime, err := world.New(world.DefaultCacheDir(), log).Ensure(ctx, runtimeArtifacts())
	if err != nil {
		return nil, fmt.Errorf("the host image's container runtime: %w", err)
	}
	dir := filepath.Join(cacheDir, img.Hash)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	hook := filepath.Join(dir, "customize.sh")
	if err := os.WriteFile(hook, customize, 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	started := time.Now()
	log.Info("building the host image from Debian's packages (a few minutes, once per recipe)", "image", img.Hash, "suite", Suite)
	cmd := exec.CommandContext(ctx, "mmdebstrap", "--mode=root", "--variant=minbase",
		"--include="+strings.Join(packages, ","), "--customize-hook="+hook+` "$1"`, Suite, img.Root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("build the host image with mmdebstrap: %w: %s", err, tail(out.Bytes(), 10))
	}
	if err := installRuntime(img.Root, runtime); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("image: %w", err)
	}
	// Ignition writes core's home as uid 500: it must reach it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "complete"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	log.Info("host image built", "image", img.Hash, "took", time.Since(started).Round(time.Second))
	return img, nil
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// installRuntime puts containerd, ctr, the runc shim and runc in /usr/bin,
// the unit and the default configuration, and enables the unit.
func installRuntime(root string, b *world.Built) error {
	for _, x := range []struct{ key, name string }{
		{"containerd-" + world.ContainerdVersion, "containerd"}, {"containerd-" + world.ContainerdVersion, "ctr"},
		{"containerd-" + world.ContainerdVersion, "containerd-shim-runc-v2"}, {"runc-" + world.RuncVersion, "runc"},
	} {
		src, ok := b.Binary(x.key, x.name)
		if !ok {
			return fmt.Errorf("no %s in %s", x.name, x.key)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, "usr", "bin", x.name), data, 0o755); err != nil {
			return err
		}
	}
	for p, body := range map[string]string{
		"usr/lib/systemd/system/containerd.service": containerdUnit,
		"usr/share/containerd/config.toml":          containerdConfig,
		"etc/containerd/conf.d/50-machine.toml":     machineContainerd,
		// Debian's /etc/os-release links here: the machine says it is
		// the Flatcar release it stands in for (LIMITS.md), as OPKE
		// reads it at first contact.
		"usr/lib/os-release": firstboot.OSRelease,
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			return err
		}
	}
	wants := filepath.Join(root, "etc", "systemd", "system", "multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	return os.Symlink("/usr/lib/systemd/system/containerd.service", filepath.Join(wants, "containerd.service"))
}

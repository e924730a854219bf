// Package firstboot applies a simulated server's user_data, an Ignition
// config, into the folder that stands for the server's root, as a host's
// first boot would. It has a package of its own because it is a boundary:
// it runs Debian's real ignition binary when it can (root, the package
// installed) and an in-process fallback otherwise; a parity test keeps the
// two writing the same tree.
//
//	root, how, err := firstboot.Apply(ctx, dir, userData)
//	// root is dir/root; how is Debian or Fallback; an Ignition config that
//	// Ignition rejects is ErrInvalidConfig.
package firstboot

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v33 "github.com/coreos/ignition/v2/config/v3_3"

	"opke.dev/opke/render/assets"
)

// Binary is Debian's ignition (package ignition); it is not on PATH.
const Binary = "/usr/lib/dracut/modules.d/30ignition/ignition"

// CoreUID is the uid and gid of the image's default user, core.
const CoreUID = 500

// Method says how a config was applied.
type Method string

// The methods.
const (
	Debian   Method = "debian-ignition"
	Fallback Method = "fallback"
)

// ErrInvalidConfig is a config Ignition refuses: the server goes to ERROR.
var ErrInvalidConfig = errors.New("ignition config rejected")

// DebianAvailable reports whether the real ignition can run here: it needs
// the binary and root (it writes files as their owners).
func DebianAvailable() bool {
	_, err := os.Stat(Binary)
	return err == nil && os.Geteuid() == 0
}

// Apply seeds dir/root as a fresh Flatcar root and applies config into it
// with Debian's ignition when available, else with the fallback. An empty
// config leaves the seeded root.
func Apply(ctx context.Context, dir string, config []byte) (string, Method, error) {
	root, err := Seed(dir)
	if err != nil {
		return "", "", err
	}
	if len(bytes.TrimSpace(config)) == 0 {
		return root, Fallback, nil
	}
	if DebianAvailable() && traversable(dir) {
		return root, Debian, ApplyDebian(ctx, dir, root, config)
	}
	return root, Fallback, ApplyFallback(root, config)
}

// traversable reports whether every folder above dir lets others through:
// Ignition writes core's home as uid 500, which must reach it.
func traversable(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// FlatcarRelease is the Flatcar Container Linux release the test world's
// hosts say they are (their /etc/os-release): the oldest OPKE supports,
// assets.MinFlatcar, which they stand in for (cloudsim/machine/LIMITS.md).
const FlatcarRelease = assets.MinFlatcar

// OSRelease is Flatcar's /usr/lib/os-release (and /etc/os-release) at
// FlatcarRelease, as its image has it.
const OSRelease = `NAME="Flatcar Container Linux by Kinvolk"
ID=flatcar
ID_LIKE=coreos
VERSION=` + FlatcarRelease + `
VERSION_ID=` + FlatcarRelease + `
BUILD_ID=opke-test-world
SYSEXT_LEVEL=1.0
PRETTY_NAME="Flatcar Container Linux by Kinvolk ` + FlatcarRelease + ` (OPKE's test world)"
ANSI_COLOR="38;5;75"
HOME_URL="https://flatcar.org/"
BUG_REPORT_URL="https://issues.flatcar.org"
FLATCAR_BOARD="amd64-usr"
`

// seedFiles make a folder look like a fresh Flatcar root.
var seedFiles = map[string]string{
	"usr/lib/os-release": OSRelease,
	"etc/os-release":     OSRelease,
	"etc/passwd":         "root:x:0:0:root:/root:/bin/bash\ncore:x:500:500:CoreOS Admin:/home/core:/bin/bash\n",
	"etc/group":          "root:x:0:\ncore:x:500:\n",
	"etc/shadow":         "root:*:19000:0:99999:7:::\ncore:*:19000:0:99999:7:::\n",
	"etc/gshadow":        "root:*::\ncore:!::\n",
	// As on Flatcar: Ignition reads it to decide whether to relabel.
	"etc/selinux/config": "SELINUX=disabled\nSELINUXTYPE=mcs\n",
	// The OS's container runtime, as Flatcar's containerd sysext ships
	// its unit: its configuration from $CONTAINERD_CONFIG.
	"usr/lib/systemd/system/containerd.service": "[Unit]\nDescription=containerd container runtime\nAfter=network.target\n\n" +
		"[Service]\nEnvironment=CONTAINERD_CONFIG=/usr/share/containerd/config.toml\nExecStart=/usr/bin/containerd --config ${CONTAINERD_CONFIG}\n" +
		"Delegate=yes\nKillMode=process\nRestart=always\n\n[Install]\nWantedBy=multi-user.target\n",
}

// bootFiles are what every boot writes into /run (a tmpfs): a reboot
// finds them again, and nothing else there.
var bootFiles = map[string]string{
	// What Flatcar's systemd-resolved writes at boot: the upstream servers
	// (the kubelet hands pods this file, not the stub's /etc/resolv.conf).
	"run/systemd/resolve/resolv.conf": "# systemd-resolved: no upstream server known\n",
}

// Boot empties root's /run and /tmp (tmpfs on Flatcar) and writes what a
// boot writes into /run.
func Boot(root string) error {
	for _, d := range []string{"run", "tmp"} {
		if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
			return fmt.Errorf("boot: %w", err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "tmp"), 0o777|os.ModeSticky); err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	return writeFiles(root, bootFiles)
}

func writeFiles(root string, files map[string]string) error {
	for p, body := range files {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			return fmt.Errorf("seed root: %w", err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			return fmt.Errorf("seed root: %w", err)
		}
	}
	return nil
}

// Seed creates dir/root with the core user (uid 500) and its home.
func Seed(dir string) (string, error) {
	root := filepath.Join(dir, "root")
	if err := writeFiles(root, seedFiles); err != nil {
		return "", err
	}
	if err := writeFiles(root, bootFiles); err != nil {
		return "", err
	}
	home := filepath.Join(root, "home", "core")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return "", fmt.Errorf("seed root: %w", err)
	}
	// Ignition writes the home as the user: uid 500 must reach it.
	for _, d := range []string{dir, root, filepath.Join(root, "home"), home} {
		if err := os.Chmod(d, 0o755); err != nil {
			return "", fmt.Errorf("seed root: %w", err)
		}
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(home, CoreUID, CoreUID); err != nil {
			return "", fmt.Errorf("seed root: %w", err)
		}
	}
	return root, nil
}

// ApplyDebian runs Debian's ignition, stages fetch-offline then files, on
// root. Its cache and state files go to dir, not /run. Debian builds it to
// relabel with SELinux's setfiles, which a folder has no use for: a no-op
// setfiles comes first on its PATH.
func ApplyDebian(ctx context.Context, dir, root string, config []byte) error {
	return ApplyDebianLog(ctx, dir, root, config, io.Discard)
}

// ApplyDebianLog is ApplyDebian writing Ignition's own log to w, as
// Flatcar's console shows it.
func ApplyDebianLog(ctx context.Context, dir, root string, config []byte, w io.Writer) error {
	bin, err := noSetfiles(dir)
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "user_data.ign")
	if err := os.WriteFile(cfg, config, 0o600); err != nil {
		return fmt.Errorf("ignition: %w", err)
	}
	env := []string{"IGNITION_CONFIG_FILE=" + cfg, "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, stage := range []string{"fetch-offline", "files"} {
		if err := runStage(ctx, nil, dir, root, "file", stage, env, w); err != nil {
			return err
		}
	}
	return nil
}

// FetchTimeout bounds Ignition's fetch: it retries the metadata service
// without end, as Flatcar's initramfs would wait, and a machine that
// cannot reach it fails its boot here instead.
var FetchTimeout = 2 * time.Minute

// Network brings up what the initramfs's network would have for the
// fetch and returns what takes it down again.
type Network func(context.Context) (down func(context.Context) error, err error)

// FetchOpenStack runs Debian's ignition on root as Flatcar's initramfs
// runs it on OpenStack (platform openstack): fetch-offline, which says
// it needs the network; the network up (up); fetch inside the machine's
// network namespace netns (a path), which races the config drive against
// the metadata service (http://169.254.169.254/openstack/latest/user_data)
// and takes the first answer (a 404 is no config); the network down
// again, for the machine's own networkd to ask DHCP; then files.
// Ignition's log goes to w.
func FetchOpenStack(ctx context.Context, dir, root, netns string, up Network, w io.Writer) error {
	bin, err := noSetfiles(dir)
	if err != nil {
		return err
	}
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	// fetch-offline finds no config it can read offline and leaves the
	// neednet file, as in Flatcar's initramfs.
	_ = os.Remove(filepath.Join(dir, "ignition-neednet"))
	if err := runStage(ctx, nil, dir, root, "openstack", "fetch-offline", env, w); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "ignition-neednet")); err != nil {
		return fmt.Errorf("ignition fetch-offline on platform openstack did not ask for the network: %w", err)
	}
	down, err := up(ctx)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	err = runStage(fctx, []string{"nsenter", "--net=" + netns, "--"}, dir, root, "openstack", "fetch", env, w)
	cancel()
	if derr := down(context.WithoutCancel(ctx)); derr != nil && err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	return runStage(ctx, nil, dir, root, "openstack", "files", env, w)
}

// noSetfiles puts a no-op setfiles first on Ignition's PATH: Debian
// builds it to relabel with SELinux's, which a folder has no use for.
func noSetfiles(dir string) (string, error) {
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", fmt.Errorf("ignition: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bin, "setfiles"), []byte("#!/bin/sh\ncat >/dev/null\n"), 0o755); err != nil {
		return "", fmt.Errorf("ignition: %w", err)
	}
	return bin, nil
}

// runStage runs one of Ignition's stages on root, its cache and state in
// dir, behind wrap (nsenter into the machine's namespace, or nothing),
// and writes its log to w. A config refused at a fetch stage is
// ErrInvalidConfig.
func runStage(ctx context.Context, wrap []string, dir, root, platform, stage string, env []string, w io.Writer) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	args := slices.Concat(wrap, []string{Binary, "-platform", platform, "-stage", stage, "-root", root,
		"-config-cache", filepath.Join(dir, "ignition-cache.json"), "-state-file", filepath.Join(dir, "ignition-state"),
		"-neednet", filepath.Join(dir, "ignition-neednet"), "-log-to-stdout"})
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	_, _ = w.Write(out)
	if ctx.Err() != nil {
		return fmt.Errorf("ignition %s: %w: %s", stage, ctx.Err(), lastLines(out, 3))
	}
	if err != nil || !bytes.Contains(out, []byte("Ignition finished successfully")) {
		if strings.HasPrefix(stage, "fetch") {
			return fmt.Errorf("%w: ignition %s: %v: %s", ErrInvalidConfig, stage, err, lastLines(out, 3))
		}
		return fmt.Errorf("ignition %s: %v: %s", stage, err, lastLines(out, 3))
	}
	return nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// ApplyFallback applies the parts of spec 3.3.0 OPKE's configs use, as
// Ignition's files stage does: directories, files from data URLs, the
// core user's SSH keys, systemd units with their enablement preset (or
// masked), and the result marker. Anything else is refused rather than ignored.
func ApplyFallback(root string, config []byte) error {
	cfg, rpt, err := v33.Parse(config)
	if err != nil || rpt.IsFatal() {
		return fmt.Errorf("%w: %v %s", ErrInvalidConfig, err, rpt.String())
	}
	if len(cfg.Storage.Links) > 0 || len(cfg.Storage.Disks) > 0 || len(cfg.Storage.Filesystems) > 0 ||
		len(cfg.Storage.Raid) > 0 || len(cfg.Storage.Luks) > 0 || len(cfg.Passwd.Groups) > 0 {
		return fmt.Errorf("%w: the fallback applies files, directories, users' keys and units only", ErrInvalidConfig)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("fallback ignition: %w", err)
	}
	defer r.Close()
	mkdirs := func(p string) error {
		return r.MkdirAll(strings.TrimPrefix(path.Dir(p), "/"), 0o755)
	}
	for _, d := range cfg.Storage.Directories {
		if err := mkdirs(d.Path); err != nil {
			return fmt.Errorf("fallback ignition: %w", err)
		}
		mode := 0o755
		if d.Mode != nil {
			mode = *d.Mode
		}
		rel := strings.TrimPrefix(path.Clean(d.Path), "/")
		if err := r.Mkdir(rel, os.FileMode(mode)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("fallback ignition: %w", err)
		}
		if err := r.Chmod(rel, os.FileMode(mode)); err != nil {
			return fmt.Errorf("fallback ignition: %w", err)
		}
	}
	for _, f := range cfg.Storage.Files {
		if c := f.Contents.Compression; (c != nil && *c != "") || len(f.Append) > 0 {
			return fmt.Errorf("%w: %s: compressed or appended contents are not applied by the fallback", ErrInvalidConfig, f.Path)
		}
		data, err := dataURL(f.Contents.Source)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidConfig, f.Path, err)
		}
		mode := 0o644
		if f.Mode != nil {
			mode = *f.Mode
		}
		if err := writeIn(r, f.Path, data, os.FileMode(mode), mkdirs); err != nil {
			return err
		}
	}
	var preset strings.Builder
	for _, u := range cfg.Systemd.Units {
		if u.Contents != nil {
			if err := writeIn(r, "/etc/systemd/system/"+u.Name, []byte(*u.Contents), 0o644, mkdirs); err != nil {
				return err
			}
		}
		if u.Mask != nil && *u.Mask {
			// As Ignition masks a unit: a link to /dev/null in its place.
			if err := mkdirs("/etc/systemd/system/" + u.Name); err != nil {
				return fmt.Errorf("fallback ignition: %w", err)
			}
			if err := r.Symlink("/dev/null", "etc/systemd/system/"+u.Name); err != nil {
				return fmt.Errorf("fallback ignition: mask %s: %w", u.Name, err)
			}
		}
		if u.Enabled != nil {
			verb := "disable"
			if *u.Enabled {
				verb = "enable"
			}
			preset.WriteString(verb + " " + u.Name + "\n")
		}
	}
	if preset.Len() > 0 {
		if err := writeIn(r, "/etc/systemd/system-preset/20-ignition.preset", []byte(preset.String()), 0o644, mkdirs); err != nil {
			return err
		}
	}
	for _, u := range cfg.Passwd.Users {
		if u.Name != "core" {
			return fmt.Errorf("%w: the fallback knows the core user only, not %q", ErrInvalidConfig, u.Name)
		}
		var keys strings.Builder
		for _, k := range u.SSHAuthorizedKeys {
			keys.WriteString(string(k) + "\n")
		}
		for _, d := range []string{"home/core/.ssh", "home/core/.ssh/authorized_keys.d"} {
			if err := r.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("fallback ignition: %w", err)
			}
		}
		if err := writeIn(r, "/home/core/.ssh/authorized_keys.d/ignition", []byte(keys.String()), 0o600, mkdirs); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			for _, p := range []string{"home/core/.ssh", "home/core/.ssh/authorized_keys.d", "home/core/.ssh/authorized_keys.d/ignition"} {
				if err := r.Lchown(p, CoreUID, CoreUID); err != nil {
					return fmt.Errorf("fallback ignition: %w", err)
				}
			}
		}
	}
	result, _ := json.MarshalIndent(map[string]any{"provisioningDate": time.Now().UTC().Format(time.RFC3339), "userConfigProvided": true}, "", "  ")
	return writeIn(r, "/etc/.ignition-result.json", result, 0o600, mkdirs)
}

// writeIn replaces p under r with data and mode.
func writeIn(r *os.Root, p string, data []byte, mode os.FileMode, mkdirs func(string) error) error {
	if err := mkdirs(p); err != nil {
		return fmt.Errorf("fallback ignition: %w", err)
	}
	rel := strings.TrimPrefix(path.Clean(p), "/")
	f, err := r.OpenFile(rel, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return fmt.Errorf("fallback ignition: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("fallback ignition: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("fallback ignition: %w", err)
	}
	if err := r.Chmod(rel, mode); err != nil {
		return fmt.Errorf("fallback ignition: %w", err)
	}
	return nil
}

// dataURL decodes the data URLs OPKE writes (RFC 2397, base64 or not).
func dataURL(src *string) ([]byte, error) {
	if src == nil {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(*src, "data:")
	if !ok {
		return nil, fmt.Errorf("only data URLs are applied, not %.20q", *src)
	}
	params, data, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, errors.New("data URL without a comma")
	}
	if strings.HasSuffix(params, ";base64") {
		return base64.StdEncoding.DecodeString(data)
	}
	s, err := url.PathUnescape(data)
	return []byte(s), err
}

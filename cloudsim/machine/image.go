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
)

// Packages are the Debian packages of the image, besides minbase: what a
// Flatcar host has that OPKE relies on.
var Packages = []string{
	"systemd", "systemd-sysv", "dbus", "openssh-server", "sudo",
	"iproute2", "iptables", "conntrack", "kmod", "procps",
	"containerd", "runc", "ca-certificates",
	// The host's own name resolves without DNS, as on Flatcar (sudo
	// looks it up; with no answer it waits for DNS to time out).
	"libnss-myhostname",
}

// Suite is the Debian release the image is built from.
const Suite = "bookworm"

//go:embed customize.sh
var customize []byte

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
	fmt.Fprintf(h, "%s\n%s\n", Suite, strings.Join(Packages, ","))
	h.Write(customize)
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
		"--include="+strings.Join(Packages, ","), "--customize-hook="+hook+` "$1"`, Suite, img.Root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("build the host image with mmdebstrap: %w: %s", err, tail(out.Bytes(), 10))
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

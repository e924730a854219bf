package machine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Swept counts what Sweep removed.
type Swept struct {
	Machines, Mounts, Loops, Namespaces int
}

// diskMount is a machine's disk mounted in its folder (<dir>/disk);
// volumeFile a simulator's Cinder volume's blocks (hosts/volumes/<id>.img).
var (
	diskMount  = regexp.MustCompile(`/hosts/[^/]+/disk$`)
	volumeFile = regexp.MustCompile(`/hosts/volumes/[^/]+\.img( \(deleted\))?$`)
)

// Sweep removes what real-host runs killed instead of stopped left on
// this host: every machine runc keeps under RuncRoot (its container
// deleted, its root and disk unmounted, its folder removed, as Remove
// does), the mounts left without a container (roots under RootsDir,
// machines' disks; a disk's loop device goes with its mount), the loop
// devices over volumes' files (attached when the simulator died), and
// the network namespaces whose name begins with
// nsPrefix with what runs in them (DeleteNetNS; a simulator's fabric is
// "opke-<hash>", its routers' "opke-<hash>-…"). A simulator stopped
// normally removes its own, and one started again on the same state
// finds its own: Sweep is for a host where none runs (make clean-hosts),
// as it cannot tell a live one's machines from a dead one's.
func Sweep(ctx context.Context, nsPrefix string) (Swept, error) {
	var s Swept
	var errs []error
	var containers []struct {
		ID     string `json:"id"`
		Bundle string `json:"bundle"`
	}
	if _, err := os.Stat(RuncRoot); err == nil {
		out, err := exec.CommandContext(ctx, "runc", "--root", RuncRoot, "list", "--format", "json").Output()
		if err != nil {
			return s, fmt.Errorf("sweep: runc list: %w", err)
		}
		if err := json.Unmarshal(out, &containers); err != nil {
			return s, fmt.Errorf("sweep: runc list: %w", err)
		}
	}
	for _, c := range containers {
		if err := deleteContainer(ctx, c.ID); err != nil {
			errs = append(errs, fmt.Errorf("sweep: %w", err))
			continue
		}
		// Its bundle is in its folder (Boot's layout).
		if err := Remove(c.ID, filepath.Dir(c.Bundle)); err != nil {
			errs = append(errs, fmt.Errorf("sweep: %w", err))
			continue
		}
		s.Machines++
	}

	left, err := sweepMounts()
	if err != nil {
		return s, errors.Join(append(errs, err)...)
	}
	// Deepest first: a root is stacked on what its machine's folder holds.
	slices.Sort(left)
	for _, m := range slices.Backward(left) {
		if err := detach(m); err != nil {
			errs = append(errs, fmt.Errorf("sweep: unmount %s: %w", m, err))
			continue
		}
		s.Mounts++
	}
	if roots, err := os.ReadDir(RootsDir); err == nil {
		for _, e := range roots {
			_ = os.Remove(filepath.Join(RootsDir, e.Name())) // empty ones only
		}
	}

	out, err := exec.CommandContext(ctx, "losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output()
	if err != nil {
		return s, errors.Join(append(errs, fmt.Errorf("sweep: losetup: %w", err))...)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dev, file, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !volumeFile.MatchString(strings.TrimSpace(file)) {
			continue
		}
		if out, err := exec.CommandContext(ctx, "losetup", "-d", dev).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("sweep: losetup -d %s: %w: %s", dev, err, tail(out, 2)))
			continue
		}
		s.Loops++
	}

	namespaces, err := os.ReadDir(NetNSDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return s, errors.Join(append(errs, fmt.Errorf("sweep: %w", err))...)
	}
	for _, e := range namespaces {
		if !strings.HasPrefix(e.Name(), nsPrefix) {
			continue
		}
		if err := DeleteNetNS(ctx, e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("sweep: %w", err))
			continue
		}
		s.Namespaces++
	}
	return s, errors.Join(errs...)
}

// sweepMounts are this host's mounts of machines left without their
// container: roots under RootsDir and machines' disks.
func sweepMounts() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		if m := f[4]; strings.HasPrefix(m, RootsDir+"/") || diskMount.MatchString(m) {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

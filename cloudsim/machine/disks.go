package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Disk is a block device attached to a running machine, as a hypervisor
// hot-plugs a volume: a loop device over a file of this host, its node
// in the machine's /dev under the name the guest kernel would give it.
type Disk struct {
	// Name is the kernel's name for it in the machine: vdb, vdc…
	Name string
	// File holds the disk's blocks.
	File string
	// Serial is what the hypervisor gives the guest as the disk's serial
	// (Nova gives a volume's id): udev links it as
	// /dev/disk/by-id/virtio-<its first 20 characters>.
	Serial string
}

// diskName is a virtio disk's name, as SetDisks manages them (vda, the
// root disk of a VM, is not one here: the machine's root is its own).
var diskName = regexp.MustCompile(`^vd[b-z]+$`)

// byIDPrefix is udev's name for a virtio disk's serial link.
const byIDPrefix = "virtio-"

// SetDisks makes the disks attached to the running machine those given:
// a disk's node appears in its /dev, as the guest kernel's devtmpfs
// shows a hot-plugged disk, with the link udev's rules make from its
// serial (the machine runs no udev: a container's /sys is read-only);
// a node not given goes, as a detached disk's does. It is idempotent,
// and what a machine's restart lost (its /dev is new at each start) it
// makes again. Nothing on the disks is touched: the machine formats and
// mounts them, as a guest does.
func (m *Machine) SetDisks(ctx context.Context, disks []Disk) error {
	pid, err := m.pid(ctx)
	if err != nil {
		return err
	}
	dev := filepath.Join("/proc", fmt.Sprint(pid), "root", "dev")
	want := map[string]Disk{}
	for _, d := range disks {
		if !diskName.MatchString(d.Name) {
			return fmt.Errorf("machine %s: disk name %q is not a virtio disk's (vdb, vdc…)", m.cfg.ID, d.Name)
		}
		want[d.Name] = d
	}
	var errs []error
	entries, err := os.ReadDir(dev)
	if err != nil {
		return fmt.Errorf("machine %s: its /dev: %w", m.cfg.ID, err)
	}
	for _, e := range entries {
		if _, ok := want[e.Name()]; diskName.MatchString(e.Name()) && !ok {
			errs = append(errs, removeIfExists(filepath.Join(dev, e.Name())))
		}
	}
	byID := filepath.Join(dev, "disk", "by-id")
	links, _ := os.ReadDir(byID)
	for _, l := range links {
		if !strings.HasPrefix(l.Name(), byIDPrefix) {
			continue
		}
		target, err := os.Readlink(filepath.Join(byID, l.Name()))
		if d, ok := want[filepath.Base(target)]; err != nil || !ok || l.Name() != serialLink(d.Serial) {
			errs = append(errs, removeIfExists(filepath.Join(byID, l.Name())))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		d := want[name]
		loop, err := LoopDevice(ctx, d.File)
		if err != nil {
			errs = append(errs, fmt.Errorf("machine %s: disk %s: %w", m.cfg.ID, name, err))
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(loop, &st); err != nil {
			errs = append(errs, fmt.Errorf("machine %s: disk %s: %w", m.cfg.ID, name, err))
			continue
		}
		node := filepath.Join(dev, name)
		var have unix.Stat_t
		if err := unix.Lstat(node, &have); err == nil && (have.Mode&unix.S_IFMT != unix.S_IFBLK || have.Rdev != st.Rdev) {
			errs = append(errs, removeIfExists(node))
		}
		// Owned by the disk group (6 on Debian and on Flatcar), as udev
		// leaves a disk.
		if err := unix.Mknod(node, unix.S_IFBLK|0o660, int(st.Rdev)); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("machine %s: disk %s: its node: %w", m.cfg.ID, name, err))
			continue
		}
		errs = append(errs, os.Lchown(node, 0, 6))
		if d.Serial == "" {
			continue
		}
		if err := os.MkdirAll(byID, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		link := filepath.Join(byID, serialLink(d.Serial))
		if target, err := os.Readlink(link); err == nil && target == "../../"+name {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink("../../"+name, link); err != nil {
			errs = append(errs, fmt.Errorf("machine %s: disk %s: its link: %w", m.cfg.ID, name, err))
		}
	}
	return errors.Join(errs...)
}

// serialLink is the name of udev's link for a virtio disk's serial: the
// device holds at most 20 bytes of it (VIRTIO_BLK_ID_BYTES).
func serialLink(serial string) string {
	if len(serial) > 20 {
		serial = serial[:20]
	}
	return byIDPrefix + serial
}

// pid is the machine's init process as this host numbers it.
func (m *Machine) pid(ctx context.Context) (int, error) {
	out, err := exec.CommandContext(ctx, "runc", "--root", RuncRoot, "state", m.cfg.ID).Output()
	if err != nil {
		return 0, fmt.Errorf("machine %s: runc state: %w", m.cfg.ID, err)
	}
	var st struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("machine %s: runc state: %w", m.cfg.ID, err)
	}
	if st.Status != "running" || st.Pid == 0 {
		return 0, fmt.Errorf("machine %s: not running (%s)", m.cfg.ID, st.Status)
	}
	return st.Pid, nil
}

// LoopDevice is the loop device over file, set up if there is none: one
// device per file, whoever asks (a disk moved from one machine to
// another keeps its device; a simulator restarted finds the ones it
// made). A file grown since is shown at its new size (losetup -c), as a
// hypervisor passes on an extended volume.
func LoopDevice(ctx context.Context, file string) (string, error) {
	if loop, err := loopOf(ctx, file); err != nil || loop != "" {
		if loop != "" {
			if out, err := exec.CommandContext(ctx, "losetup", "-c", loop).CombinedOutput(); err != nil {
				return "", fmt.Errorf("losetup -c %s: %w: %s", loop, err, tail(out, 2))
			}
		}
		return loop, err
	}
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup %s: %w: %s", file, err, tail(out, 2))
	}
	return strings.TrimSpace(string(out)), nil
}

// ReleaseLoop detaches the loop devices over file, if any: a device still
// open (a machine's mount) goes when it is closed.
func ReleaseLoop(ctx context.Context, file string) error {
	for range 4 {
		loop, err := loopOf(ctx, file)
		if err != nil || loop == "" {
			return err
		}
		if out, err := exec.CommandContext(ctx, "losetup", "-d", loop).CombinedOutput(); err != nil {
			return fmt.Errorf("losetup -d %s: %w: %s", loop, err, tail(out, 2))
		}
	}
	return nil
}

// loopDev is a loop device over a file.
type loopDev struct {
	name string
	// autoclear: it goes when closed (a mount's, or one detached while
	// in use).
	autoclear bool
}

// loops are the loop devices over file.
func loops(ctx context.Context, file string) ([]loopDev, error) {
	out, err := exec.CommandContext(ctx, "losetup", "--noheadings", "--output", "NAME,AUTOCLEAR", "-j", file).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("losetup -j %s: %w: %s", file, err, tail(out, 2))
	}
	var devs []loopDev
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) == 2 {
			devs = append(devs, loopDev{name: f[0], autoclear: f[1] == "1"})
		}
	}
	return devs, nil
}

// loopOf is the first loop device over file that is not on its way out
// (detached while in use), or "".
func loopOf(ctx context.Context, file string) (string, error) {
	devs, err := loops(ctx, file)
	for _, d := range devs {
		if !d.autoclear {
			return d.name, err
		}
	}
	return "", err
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

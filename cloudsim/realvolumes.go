package cloudsim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"opke.dev/opke/cloudsim/machine"
)

// Cinder's volumes on real hosts: the simulator is the storage backend
// and the hypervisor. A volume's blocks are a sparse file in the hosts'
// folder (volumes/<id>.img, made when the volume appears: zeros, or a
// copy of the snapshot or volume it was made from); a snapshot's are a
// copy of its volume's file when the snapshot appears (crash-consistent,
// as a snapshot of an in-use volume is); an extend grows the file. An
// attached volume is a loop device over its file, whose node appears in
// the server's machine as the device Nova named (/dev/vdb…), with the
// link udev makes from the serial Nova gives a volume (its id):
// /dev/disk/by-id/virtio-<first 20 characters>. The machine formats and
// mounts it itself.

// wantVolume is a volume's file and where it is attached.
type wantVolume struct {
	size             int64  // bytes
	snapshot, source string // what it was made from
	server, device   string // attached to: the server, its device's name (vdb)
}

// wantVolumes adds the world's volumes and snapshots to d.
func (w *world) wantVolumes(d *desired) {
	d.volumes, d.snapshots = map[string]wantVolume{}, map[string]string{}
	for id, v := range w.Volumes {
		wv := wantVolume{size: int64(v.Size) << 30, snapshot: v.SnapshotID, source: v.SourceVolID}
		// The disk is the guest's once Nova attached it (in-use), until
		// Nova detached it (the attachment goes at the end of detaching).
		if a := v.Attachment; a != nil && v.Status != "attaching" {
			wv.server, wv.device = a.ServerID, strings.TrimPrefix(a.Device, "/dev/")
		}
		d.volumes[id] = wv
	}
	for id, sn := range w.Snapshots {
		d.snapshots[id] = sn.VolumeID
	}
}

func (r *realHosts) volumesDir() string          { return filepath.Join(r.dir, "volumes") }
func (r *realHosts) volumeFile(id string) string { return filepath.Join(r.volumesDir(), id+".img") }
func (r *realHosts) snapshotFile(id string) string {
	return filepath.Join(r.volumesDir(), "snapshot-"+id+".img")
}

// convergeVolumes makes the volumes' and snapshots' files, gives each
// running machine the disks attached to it, and releases and removes
// what went; the caller holds r.mu. It reads the volumes' folder once, on
// its first pass (what a previous simulator left); after that, what it
// made is in r.applied.files, and a quiet pass touches no file.
func (r *realHosts) convergeVolumes(ctx context.Context, d desired) []error {
	a := &r.applied
	if a.files == nil {
		if len(d.volumes) == 0 && len(d.snapshots) == 0 {
			return nil // no volume was ever made, or all went with their files
		}
		if err := r.readVolumeFiles(); err != nil {
			return []error{err}
		}
		// The loops a previous simulator left: released below unless
		// their volume is still attached.
		for name := range a.files {
			if !strings.HasPrefix(name, "snapshot-") {
				a.loops[strings.TrimSuffix(name, ".img")] = true
			}
		}
	}
	errs := r.makeVolumeFiles(ctx, d)

	// Each running machine's disks, again whenever they or its runs
	// changed (a restarted machine's /dev is new).
	disks := map[string][]machine.Disk{}
	for _, id := range slices.Sorted(maps.Keys(d.volumes)) {
		if v := d.volumes[id]; v.server != "" {
			disks[v.server] = append(disks[v.server], machine.Disk{Name: v.device, File: r.volumeFile(id), Serial: id})
		}
	}
	for id, rm := range r.machines {
		if rm.m == nil {
			continue
		}
		var sizes []int64
		for _, dk := range disks[id] {
			sizes = append(sizes, a.files[filepath.Base(dk.File)])
		}
		key := fmt.Sprint(rm.m.Starts(), disks[id], sizes)
		if rm.disks == key || rm.disks == "" && len(disks[id]) == 0 {
			continue
		}
		if err := rm.m.SetDisks(ctx, disks[id]); err != nil {
			errs = append(errs, err)
			continue
		}
		rm.disks = key
		for _, dk := range disks[id] {
			a.loops[dk.Serial] = true
		}
	}
	// Loops over volumes no longer attached, once no machine shows them.
	for id := range a.loops {
		if v, ok := d.volumes[id]; ok && v.server != "" && r.machines[v.server] != nil {
			continue
		}
		if err := machine.ReleaseLoop(ctx, r.volumeFile(id)); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(a.loops, id)
	}
	// Files of deleted volumes (once released) and snapshots.
	for name := range a.files {
		id := strings.TrimSuffix(name, ".img")
		gone := false
		if snap, ok := strings.CutPrefix(id, "snapshot-"); ok {
			_, kept := d.snapshots[snap]
			gone = !kept
		} else {
			_, kept := d.volumes[id]
			gone = !kept && !a.loops[id]
		}
		if !gone {
			continue
		}
		if err := os.Remove(filepath.Join(r.volumesDir(), name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		delete(a.files, name)
	}
	return errs
}

// readVolumeFiles reads the volumes' folder into r.applied.files.
func (r *realHosts) readVolumeFiles() error {
	if err := os.MkdirAll(r.volumesDir(), 0o700); err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	entries, err := os.ReadDir(r.volumesDir())
	if err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	files := map[string]int64{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".img") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("volumes: %w", err)
		}
		files[e.Name()] = info.Size()
	}
	r.applied.files = files
	return nil
}

// makeVolumeFiles makes the file of each volume and snapshot that has
// none, in the order they depend on each other, and grows each volume's
// file to its size.
func (r *realHosts) makeVolumeFiles(ctx context.Context, d desired) []error {
	var errs []error
	files := r.applied.files
	made := func(path string) bool { _, ok := files[filepath.Base(path)]; return ok }
	create := func(path, from string, size int64) bool {
		got, err := makeFile(ctx, path, from, size)
		if err != nil {
			errs = append(errs, err)
			return false
		}
		files[filepath.Base(path)] = got
		return true
	}
	for progress := true; progress; {
		progress = false
		for _, id := range slices.Sorted(maps.Keys(d.volumes)) {
			v, path := d.volumes[id], r.volumeFile(id)
			if made(path) {
				continue
			}
			from := ""
			switch {
			case v.snapshot != "":
				if _, ok := d.snapshots[v.snapshot]; ok && !made(r.snapshotFile(v.snapshot)) {
					continue // its snapshot's file first
				}
				from = r.snapshotFile(v.snapshot)
			case v.source != "":
				if _, ok := d.volumes[v.source]; ok && !made(r.volumeFile(v.source)) {
					continue
				}
				from = r.volumeFile(v.source)
			}
			progress = create(path, from, v.size) || progress
		}
		for _, id := range slices.Sorted(maps.Keys(d.snapshots)) {
			path, vol := r.snapshotFile(id), d.snapshots[id]
			if made(path) {
				continue
			}
			if _, ok := d.volumes[vol]; ok && !made(r.volumeFile(vol)) {
				continue
			}
			progress = create(path, r.volumeFile(vol), d.volumes[vol].size) || progress
		}
	}
	for id, v := range d.volumes {
		name := filepath.Base(r.volumeFile(id))
		if size, ok := files[name]; ok && size < v.size {
			if err := os.Truncate(r.volumeFile(id), v.size); err != nil {
				errs = append(errs, err)
				continue
			}
			files[name] = v.size
		}
	}
	return errs
}

// makeFile makes a disk's file: a sparse copy of from if it exists,
// else zeros; size bytes at least. It appears whole (renamed into place);
// its size is returned.
func makeFile(ctx context.Context, path, from string, size int64) (int64, error) {
	tmp := path + ".new"
	fail := func(err error) (int64, error) {
		_ = os.Remove(tmp) // may not be there
		return 0, fmt.Errorf("volume file %s: %w", filepath.Base(path), err)
	}
	if _, err := os.Stat(from); from != "" && err == nil {
		if out, err := exec.CommandContext(ctx, "cp", "--sparse=always", "--reflink=auto", from, tmp).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("cp: %w: %s", err, strings.TrimSpace(string(out))))
		}
	} else if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		return fail(err)
	}
	st, err := os.Stat(tmp)
	if err != nil {
		return fail(err)
	}
	got := max(st.Size(), size)
	if st.Size() < size {
		if err := os.Truncate(tmp, size); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return got, nil
}

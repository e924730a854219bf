// Package machine runs a simulated server as a real Linux machine: a runc
// container with systemd as PID 1, in a network namespace the simulator
// owns, its root an overlay of the project's OS image whose upper layer
// is on a disk of its own (a sparse ext4 image of the flavor's size,
// loop-mounted: what its kubelet's eviction measures), its first boot
// applied by Debian's real Ignition before systemd starts (as Flatcar's
// initramfs does), its console the pseudo-terminal its init writes to.
// Volumes are hot-plugged into it as loop devices (SetDisks): their node
// in its /dev and udev's by-id link, as a guest sees a virtio disk.
//
// It is a boundary of its own, beside the in-process hosts of cloudsim:
// what it runs is the kernel's, runc's, systemd's, OpenSSH's and
// Ignition's, not the project's, and the host contract suite holds the
// in-process hosts to it. LIMITS.md says where these machines differ from
// Flatcar.
//
//	img, err := machine.EnsureImage(ctx, machine.DefaultCacheDir(), log)
//	m, err := machine.Boot(ctx, machine.Config{ID: id, Dir: dir, Image: img, UserData: ign, NetNS: ns})
//	defer m.Destroy(ctx)
//	console, _ := m.Console()
package machine

package machine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"opke.dev/opke/cloudsim/firstboot"
)

// RuncRoot is where runc keeps the machines' container state.
const RuncRoot = "/run/opke/runc"

// RootsDir is where the machines' roots are mounted, each at its ID: a
// path every user can get through (Ignition writes core's home as uid
// 500), wherever the machine's Dir is.
const RootsDir = "/run/opke/roots"

// ErrInvalidConfig is a user_data Ignition refused: the server goes to
// ERROR, the reason on its console.
var ErrInvalidConfig = firstboot.ErrInvalidConfig

// Config is one machine.
type Config struct {
	// ID names the container (the server's id).
	ID string
	// Hostname is the machine's host name (the server's name).
	Hostname string
	// Dir holds the machine's state: its root's upper layer, its bundle,
	// its console log.
	Dir   string
	Image *Image
	// UserData is an Ignition config handed to Ignition at first boot
	// (platform file), for a machine with no metadata service to ask;
	// with Fetch set it is not used.
	UserData []byte
	// Fetch, when set, is the lease of the machine's first port in
	// NetNS: its first boot's Ignition fetches the user_data from the
	// metadata service over it, as Flatcar's initramfs does on OpenStack.
	Fetch *Lease
	// NetNS is the path of the network namespace the machine lives in
	// (its ports are already there); "" for a new, empty one.
	NetNS string
	// MemoryBytes and CPUs bound the machine (the flavor); 0 for none.
	MemoryBytes int64
	CPUs        float64
	// DiskBytes is the size of the machine's own disk (the flavor's root
	// disk): a sparse file in Dir with an ext4 filesystem, loop-mounted,
	// holding the root's upper layer and the runtime's store, so that
	// what runs on the machine (the kubelet's eviction) sees the disk a
	// VM of that flavor has, not the host's. 0: no disk of its own, the
	// layers sit on the host's filesystem.
	DiskBytes int64
}

// Machine is a booted machine.
type Machine struct {
	cfg  Config
	root string
	// console is the serial console's log, what Nova's console log shows:
	// the machine's /dev/ttyS0 (serial's slave, bound there) and what
	// the hypervisor writes (Ignition's log, a power reset). screen is
	// its /dev/console (runc's terminal), which on Flatcar's OpenStack
	// image is tty0, the screen, which that log never shows.
	console *os.File
	screen  *os.File
	serial  *os.File // the serial port's master, read into console
	serialS *os.File // its slave, kept open so that reads wait for output
	copying sync.WaitGroup

	mu     sync.Mutex
	run    chan struct{} // closed when the running container is killed
	starts int           // how many times its container was started
}

// Boot makes the machine's root (the image overlaid by a layer of its
// own), applies its user_data with Debian's Ignition as the initramfs
// would (writing Ignition's log to the console), and starts systemd in a
// container. A config Ignition refuses is ErrInvalidConfig, with nothing
// left running. Boot returns when the container runs, not when the
// machine is up: see WaitRunning.
//
// A machine whose Dir holds a completed first boot boots again without
// Ignition, as Flatcar does (Ignition runs once): that is how a stopped
// machine comes back. A container of the same ID left running (by a
// process that died without stopping it) is killed first: its console
// went with that process.
func Boot(ctx context.Context, cfg Config) (*Machine, error) {
	if cfg.Image == nil || cfg.ID == "" || cfg.Dir == "" {
		return nil, errors.New("machine: ID, Dir and Image are required")
	}
	m := &Machine{cfg: cfg, root: filepath.Join(RootsDir, cfg.ID)}
	if err := m.kill(ctx); err != nil {
		return nil, err
	}
	if err := m.unmount(); err != nil {
		return nil, err
	}
	for _, d := range []string{"disk", "bundle", "ignition"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("machine %s: %w", cfg.ID, err)
		}
	}
	if err := m.mountDisk(ctx); err != nil {
		return nil, err
	}
	// Whatever fails from here, nothing stays mounted or open: the folder
	// stays (its console says why).
	booted := false
	defer func() {
		if !booted {
			_ = m.unmount()
			m.close()
		}
	}()
	for _, d := range []string{filepath.Join(m.diskDir(), "upper"), filepath.Join(m.diskDir(), "work"), m.root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("machine %s: %w", cfg.ID, err)
		}
	}
	for _, d := range []string{filepath.Dir(RootsDir), RootsDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, fmt.Errorf("machine %s: %w", cfg.ID, err)
		}
	}
	console, err := os.OpenFile(m.ConsolePath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("machine %s: console: %w", cfg.ID, err)
	}
	m.console = console
	if m.screen, err = os.OpenFile(m.ScreenPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, fmt.Errorf("machine %s: screen: %w", cfg.ID, err)
	}
	if err := m.openSerial(); err != nil {
		return nil, err
	}
	opts := "lowerdir=" + cfg.Image.Root + ",upperdir=" + filepath.Join(m.diskDir(), "upper") + ",workdir=" + filepath.Join(m.diskDir(), "work")
	if err := unix.Mount("overlay", m.root, "overlay", 0, opts); err != nil {
		return nil, fmt.Errorf("machine %s: mount its root: %w", cfg.ID, err)
	}
	if err := m.firstBoot(ctx); err != nil {
		return nil, err
	}
	booted = true
	return m, nil
}

// firstBoot applies the user_data into the mounted root, as the initramfs
// would, once (the first boot leaves a mark in Dir), and starts the
// container.
func (m *Machine) firstBoot(ctx context.Context) error {
	mark := filepath.Join(m.cfg.Dir, "booted")
	_, err := os.Stat(mark)
	switch first := err != nil; {
	case first && m.cfg.Fetch != nil:
		if m.cfg.NetNS == "" {
			return fmt.Errorf("machine %s: a user_data to fetch needs the machine's network namespace", m.cfg.ID)
		}
		fmt.Fprintf(m.console, "[  ignition] platform openstack: fetching the user_data\n")
		up := func(ctx context.Context) (func(context.Context) error, error) {
			return upLease(ctx, filepath.Base(m.cfg.NetNS), *m.cfg.Fetch)
		}
		if err := firstboot.FetchOpenStack(ctx, filepath.Join(m.cfg.Dir, "ignition"), m.root, m.cfg.NetNS, up, m.console); err != nil {
			fmt.Fprintf(m.console, "[  ignition] failed: %v\n", err)
			return fmt.Errorf("machine %s: %w", m.cfg.ID, err)
		}
	case first && len(bytes.TrimSpace(m.cfg.UserData)) > 0:
		fmt.Fprintf(m.console, "[  ignition] applying the user_data\n")
		if err := firstboot.ApplyDebianLog(ctx, filepath.Join(m.cfg.Dir, "ignition"), m.root, m.cfg.UserData, m.console); err != nil {
			fmt.Fprintf(m.console, "[  ignition] failed: %v\n", err)
			return fmt.Errorf("machine %s: %w", m.cfg.ID, err)
		}
	}
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		return fmt.Errorf("machine %s: %w", m.cfg.ID, err)
	}
	if err := m.writeBundle(); err != nil {
		return err
	}
	return m.start(ctx)
}

// Reboot cuts the machine's power and starts it again on the same root
// (its console goes on), as `server reboot --hard` does.
func (m *Machine) Reboot(ctx context.Context) error {
	if err := m.kill(ctx); err != nil {
		return err
	}
	fmt.Fprintf(m.console, "[  power] reset\n")
	return m.start(ctx)
}

// Stop cuts the machine's power and unmounts its root, keeping its state:
// Boot with the same Dir brings it back (without Ignition).
func (m *Machine) Stop(ctx context.Context) error {
	err := m.kill(ctx)
	m.close()
	return errors.Join(err, m.unmount())
}

// Starts is how many times the machine's container was started: its
// /dev is new at each.
func (m *Machine) Starts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.starts
}

// ConsolePath is the file the machine's serial console is written to:
// what Nova's console log shows.
func (m *Machine) ConsolePath() string { return filepath.Join(m.cfg.Dir, "console.log") }

// Console returns what the machine printed on its serial console so far.
func (m *Machine) Console() ([]byte, error) { return os.ReadFile(m.ConsolePath()) }

// ScreenPath is the file the machine's /dev/console (its screen, tty0 on
// Flatcar's OpenStack image) is written to: systemd's and journald's
// console output, for diagnostics; Nova's console log never shows it.
func (m *Machine) ScreenPath() string { return filepath.Join(m.cfg.Dir, "screen.log") }

// openSerial opens the machine's serial port, a pseudo-terminal pair on
// the host's devpts whose slave the container has at /dev/ttyS0, and
// copies what the machine writes there to its console log for as long as
// the machine exists (a VM's serial port outlives its reboots).
func (m *Machine) openSerial() error {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return fmt.Errorf("machine %s: serial port: %w", m.cfg.ID, err)
	}
	fd := int(master.Fd())
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0)
	}
	if err != nil {
		master.Close()
		return fmt.Errorf("machine %s: serial port: %w", m.cfg.ID, err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return fmt.Errorf("machine %s: serial port: %w", m.cfg.ID, err)
	}
	m.serial, m.serialS = master, slave
	m.copying.Add(1)
	go func() {
		defer m.copying.Done()
		copyTerminal(m.console, master)
	}()
	return nil
}

// copyTerminal copies what a terminal's master reads to w, its CR LF
// read as a log's LF, until the master fails (it is closed).
func copyTerminal(w io.Writer, master *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := master.Read(buf)
		if n > 0 {
			_, _ = w.Write(bytes.ReplaceAll(buf[:n], []byte("\r\n"), []byte("\n")))
		}
		if err != nil {
			return
		}
	}
}

// Root is the machine's root filesystem as the host sees it.
func (m *Machine) Root() string { return m.root }

func (m *Machine) close() {
	for _, f := range []*os.File{m.serialS, m.serial} {
		if f != nil {
			_ = f.Close()
		}
	}
	m.copying.Wait()
	for _, f := range []*os.File{m.console, m.screen} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// cgroupPath is the machine's cgroup in every hierarchy.
func (m *Machine) cgroupPath() string { return "/opke-machines/" + m.cfg.ID }

// diskDir is where the machine's disk is mounted on the host (a plain
// folder when it has none of its own).
func (m *Machine) diskDir() string { return filepath.Join(m.cfg.Dir, "disk") }

// diskImage is the file that holds the machine's disk.
func (m *Machine) diskImage() string { return filepath.Join(m.cfg.Dir, "disk.img") }

// containerdDir is the machine's /var/lib/containerd on its disk.
func (m *Machine) containerdDir() string { return filepath.Join(m.diskDir(), "containerd") }

// mountDisk makes the machine's disk on first boot (a sparse file of
// DiskBytes with an ext4 filesystem, as a flavor's root disk is a
// volume of that size) and mounts it at diskDir through a loop device.
// The loop device goes with the mount (mount(8) sets it to clear
// itself), and discard gives the host back what the machine deletes.
// barrier=0: the machine's flushes stop at the host's page cache, as its
// writes did on the host's file system before it had a disk: a machine's
// power cut here is its container killed, which loses nothing the host's
// page cache holds, so nothing a VM's power cut would keep is lost; with
// barriers, each fsync of the machine's (etcd's, every write) became a
// flush of the loop's file, 4.9 ms against 1.3 ms on the host's file
// system, and five controllers' etcd on one disk stalled for seconds (make
// e2e's TestControlPlaneOfThree: the API unanswered during a member's
// join). Disk latency is not what make e2e measures.
// mount(8) reuses a loop device already set up on the file (a mount a
// killed simulator left behind), so one filesystem is never mounted
// through two devices.
func (m *Machine) mountDisk(ctx context.Context) error {
	if m.cfg.DiskBytes <= 0 {
		return nil
	}
	img := m.diskImage()
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		tmp := img + ".new"
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("machine %s: its disk: %w", m.cfg.ID, err)
		}
		err = f.Truncate(m.cfg.DiskBytes)
		err = errors.Join(err, f.Close())
		if err != nil {
			return fmt.Errorf("machine %s: its disk: %w", m.cfg.ID, err)
		}
		// Lazy initialisation: the tables are written as the disk is used,
		// so the file stays sparse and mkfs takes milliseconds.
		out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "ROOT",
			"-E", "lazy_itable_init=1,lazy_journal_init=1", tmp).CombinedOutput()
		if err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("machine %s: mkfs.ext4 on its disk: %w: %s", m.cfg.ID, err, tail(out, 3))
		}
		if err := os.Rename(tmp, img); err != nil {
			return fmt.Errorf("machine %s: its disk: %w", m.cfg.ID, err)
		}
	} else if err != nil {
		return fmt.Errorf("machine %s: its disk: %w", m.cfg.ID, err)
	}
	out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,discard,barrier=0", img, m.diskDir()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("machine %s: mount its disk: %w: %s", m.cfg.ID, err, tail(out, 3))
	}
	// Direct I/O from the loop device to its file: the machine's pages are
	// not cached a second time, nor copied by the loop's worker.
	devs, err := loops(ctx, img)
	for _, dev := range devs {
		if err != nil {
			break
		}
		if out, derr := exec.CommandContext(ctx, "losetup", "--direct-io=on", dev.name).CombinedOutput(); derr != nil {
			err = fmt.Errorf("direct I/O on %s: %w: %s", dev.name, derr, tail(out, 3))
		}
	}
	if err != nil {
		_ = unmountAll(m.cfg.ID, m.cfg.Dir)
		return fmt.Errorf("machine %s: its disk: %w", m.cfg.ID, err)
	}
	return nil
}

func (m *Machine) writeBundle() error {
	if err := os.MkdirAll(m.containerdDir(), 0o711); err != nil {
		return fmt.Errorf("machine %s: %w", m.cfg.ID, err)
	}
	caps, err := boundingSet()
	if err != nil {
		return fmt.Errorf("machine %s: %w", m.cfg.ID, err)
	}
	netns := specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: m.cfg.NetNS}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev/kmsg", Type: "bind", Source: "/dev/kmsg", Options: []string{"bind", "rw"}},
		// The serial port, whose output is the console log (Nova's), as a
		// VM's first serial port is; /dev/console is the screen.
		{Destination: "/dev/ttyS0", Type: "bind", Source: m.serialS.Name(), Options: []string{"bind", "rw"}},
		// /sys read-only, as systemd's container interface asks (and as
		// nspawn and Docker mount it): systemd then knows there is no
		// udev here, and systemd-networkd configures links without
		// waiting for udev to announce them (with it writable, the DHCP
		// client never started). The cgroup tree below stays writable.
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/sys/fs/cgroup", Type: "bind", Source: "/sys/fs/cgroup", Options: []string{"rbind", "rw"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
		{Destination: "/run/lock", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		// The runtime's store on the machine's own disk, as on a real host:
		// its overlayfs snapshots cannot sit on the overlay root.
		{Destination: "/var/lib/containerd", Type: "bind", Source: m.containerdDir(), Options: []string{"rbind", "rw"}},
	}
	res := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}}
	if m.cfg.MemoryBytes > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &m.cfg.MemoryBytes}
	}
	if m.cfg.CPUs > 0 {
		res.CPU = vcpus(m.cfg.CPUs)
	}
	spec := specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: m.root},
		Hostname: m.cfg.Hostname,
		Process: &specs.Process{
			Terminal: true,
			// machine-init shows the machine its own cgroup as each
			// hierarchy's root, then execs /sbin/init (customize.sh).
			Args: []string{"/usr/lib/opke/machine-init"},
			Env:  []string{"container=oci", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "OPKE_CGROUP=" + m.cgroupPath()},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps, Inheritable: caps,
			},
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, netns, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}},
			CgroupsPath: m.cgroupPath(),
			Resources:   res,
		},
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("machine %s: %w", m.cfg.ID, err)
	}
	return os.WriteFile(filepath.Join(m.cfg.Dir, "bundle", "config.json"), data, 0o600)
}

// vcpus weighs a machine of n vCPUs against the others as a hypervisor
// weighs a VM's vCPUs (shares, 1024 each). It sets no CFS quota: a quota
// bounds every child cgroup's quota too, so that the kubelet's pod whose
// CPU limit is above the flavor's vCPUs fails to start ("failed to write
// ... cpu.cfs_quota_us: invalid argument"), which on a VM it does not. Nor
// a cpuset: the machine's kubelet reads the host's cpus (cAdvisor's
// topology) and fails to give its kubepods cgroup more than the set
// holds. So a machine may run on every cpu of the host (cloudsim/machine/
// LIMITS.md).
func vcpus(n float64) *specs.LinuxCPU {
	shares := uint64(math.Ceil(n * 1024))
	return &specs.LinuxCPU{Shares: &shares}
}

// start runs the container; runc hands the console's pseudo-terminal
// master over a socket, and its output is copied to the screen's log.
func (m *Machine) start(ctx context.Context) error {
	// A unix socket's path has at most 107 bytes: not under Dir, which
	// may be deep.
	sum := sha256.Sum256([]byte(m.cfg.ID))
	sock := filepath.Join(filepath.Dir(RuncRoot), "console-"+hex.EncodeToString(sum[:8])+".sock")
	if err := os.MkdirAll(RuncRoot, 0o700); err != nil {
		return fmt.Errorf("machine %s: %w", m.cfg.ID, err)
	}
	_ = os.Remove(sock)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("machine %s: console socket: %w", m.cfg.ID, err)
	}
	defer ln.Close()
	defer os.Remove(sock)
	got := make(chan *os.File, 1)
	go func() {
		f, err := receiveFile(ln)
		if err != nil {
			f = nil
		}
		got <- f
	}()
	// What a VM's serial port shows first at power-on, before its kernel
	// (the host's here) and its own output.
	fmt.Fprintf(m.console, "[  power] on\n")
	cmd := exec.CommandContext(ctx, "runc", "--root", RuncRoot, "run", "--detach", "--console-socket", sock,
		"--bundle", filepath.Join(m.cfg.Dir, "bundle"), m.cfg.ID)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("machine %s: runc run: %w: %s", m.cfg.ID, err, tail(out.Bytes(), 5))
	}
	var master *os.File
	select {
	case master = <-got:
	case <-time.After(10 * time.Second):
	}
	if master == nil {
		_ = m.kill(context.WithoutCancel(ctx))
		return fmt.Errorf("machine %s: runc sent no console", m.cfg.ID)
	}
	run := make(chan struct{})
	m.mu.Lock()
	m.run = run
	m.starts++
	m.mu.Unlock()
	m.copying.Add(1)
	go func() {
		defer m.copying.Done()
		defer master.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				// A terminal's CR LF read as a log's LF.
				_, _ = m.screen.Write(bytes.ReplaceAll(buf[:n], []byte("\r\n"), []byte("\n")))
			}
			if err == nil {
				continue
			}
			// EIO while no process holds the terminal (before init has
			// it): the console waits for one, until this run is killed.
			select {
			case <-run:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return nil
}

// receiveFile accepts one connection and reads the file descriptor sent
// on it (SCM_RIGHTS), as runc sends a console's master.
func receiveFile(ln *net.UnixListener) (*os.File, error) {
	conn, err := ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		return nil, fmt.Errorf("console: no control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) == 0 {
		return nil, fmt.Errorf("console: no descriptor: %v", err)
	}
	return os.NewFile(uintptr(fds[0]), "console"), nil
}

// Exec runs a command in the machine as root, as a hypervisor's agent
// would (tests and diagnostics only: OPKE reaches machines over SSH).
func (m *Machine) Exec(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "runc", append([]string{"--root", RuncRoot, "exec", m.cfg.ID}, args...)...)
	// What the command left running in the machine may hold its output
	// open: its end does not wait for theirs.
	cmd.WaitDelay = time.Second
	return cmd.CombinedOutput()
}

// WaitRunning waits until systemd says the machine is up
// (`systemctl is-system-running` is running, or degraded: its answer is
// returned with the failed units).
func (m *Machine) WaitRunning(ctx context.Context) (string, error) {
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, _ := m.Exec(qctx, "systemctl", "is-system-running")
		cancel()
		state := strings.TrimSpace(string(out))
		switch state {
		case "running":
			return state, nil
		case "degraded":
			failed, _ := m.Exec(ctx, "systemctl", "--failed", "--no-legend", "--plain")
			return state, fmt.Errorf("machine %s is degraded: %s", m.cfg.ID, strings.TrimSpace(string(failed)))
		}
		select {
		case <-ctx.Done():
			return state, fmt.Errorf("machine %s: not up (%q): %w", m.cfg.ID, state, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// kill stops the container at once, as a VM's power is cut, and ends the
// copy of its console.
func (m *Machine) kill(ctx context.Context) error {
	_ = exec.CommandContext(ctx, "runc", "--root", RuncRoot, "kill", m.cfg.ID, "KILL").Run()
	err := deleteContainer(ctx, m.cfg.ID)
	m.mu.Lock()
	if m.run != nil {
		close(m.run)
		m.run = nil
	}
	m.mu.Unlock()
	return err
}

// deleteContainer deletes a machine's container, killed first if it
// runs; one already gone is no error.
func deleteContainer(ctx context.Context, id string) error {
	out, err := exec.CommandContext(ctx, "runc", "--root", RuncRoot, "delete", "--force", id).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("does not exist")) {
		return fmt.Errorf("machine %s: runc delete: %w: %s", id, err, tail(out, 3))
	}
	return nil
}

// detach unmounts path lazily (MNT_DETACH); one not mounted, or gone, is
// no error.
func detach(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// unmount unmounts the machine's root, then its disk.
func (m *Machine) unmount() error { return unmountAll(m.cfg.ID, m.cfg.Dir) }

// unmountAll unmounts a machine's root, then its disk (every mount
// stacked there; its loop device goes with the last), if mounted.
func unmountAll(id, dir string) error {
	if err := detach(filepath.Join(RootsDir, id)); err != nil {
		return fmt.Errorf("machine %s: unmount its root: %w", id, err)
	}
	for range 8 {
		err := unix.Unmount(filepath.Join(dir, "disk"), unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("machine %s: unmount its disk: %w", id, err)
		}
	}
	return nil
}

// Remove removes the state of a machine that is not running (left by a
// simulator that stopped without destroying it): its root and disk
// unmounted first, then its folder.
func Remove(id, dir string) error {
	if err := unmountAll(id, dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// Destroy cuts the machine's power, unmounts its root and removes its
// state: nothing of it is left.
func (m *Machine) Destroy(ctx context.Context) error {
	err := m.kill(ctx)
	m.close()
	err = errors.Join(err, m.unmount())
	if err == nil {
		err = errors.Join(os.Remove(m.root), os.RemoveAll(m.cfg.Dir))
	}
	return err
}

// capNames are the kernel's capabilities by number.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
	"CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
	"CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// boundingSet lists the capabilities of this process's bounding set: a
// machine gets each of them (asking for one the set lacks fails).
func boundingSet() ([]string, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		hexset, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		set, err := strconv.ParseUint(strings.TrimSpace(hexset), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("CapBnd %q: %w", hexset, err)
		}
		var out []string
		for i, name := range capNames {
			if set&(1<<i) != 0 {
				out = append(out, name)
			}
		}
		return out, nil
	}
	return nil, errors.New("no CapBnd in /proc/self/status")
}

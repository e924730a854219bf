//go:build realhosts

package machine_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"opke.dev/opke/cloudsim/machine"
	ignitioncfg "opke.dev/opke/render/ignition"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// ignition is the user_data of a gateway as OPKE renders it, core's key
// authorized: its opke-host-keys unit prints the host keys on the serial
// console, as on Flatcar's OpenStack image.
func ignition(t *testing.T, authorized string) []byte {
	t.Helper()
	data, err := ignitioncfg.Render(ignitioncfg.Input{Role: schemas.RoleGateway, OPKEPublicKey: authorized})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// world is a fabric with one network, a machine's namespace with a port
// on it (port-m, 10.99.0.2, its security group letting 22 in from the
// subnet; its address from the network's DHCP server, 10.99.0.3, as a
// VM's) and a client's (10.99.0.1, set from outside).
func world(t *testing.T) (fab *testFabric, machineNS, clientNS string) {
	t.Helper()
	fab = newTestFabric(t, map[string]bool{"net": false})
	egress := machine.Rule{Direction: "egress"}
	machineNS = fab.plugHost("m", "net", "10.99.0.2/24", "", true, machine.Rule{Direction: "ingress", Protocol: "tcp", PortMin: 22, PortMax: 22, Remote: "10.99.0.0/24"}, egress)
	clientNS = fab.host("c", "net", "10.99.0.1/24", "", egress)
	dhcp := machine.DHCP{
		Port:    machine.Port{ID: "port-dhcp", Network: "net", MAC: macOf(99), Address: netip.MustParsePrefix("10.99.0.3/24")},
		Gateway: netip.MustParseAddr("10.99.0.1"), Domain: "openstacklocal",
		Hosts: []machine.DHCPHost{
			{MAC: macOf(1), Address: netip.MustParseAddr("10.99.0.2"), Name: "demo-controller-0"},
			{MAC: macOf(2), Address: netip.MustParseAddr("10.99.0.1"), Name: "Client_1"},
		},
	}
	if err := fab.SetDHCP(context.Background(), dhcp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dnsmasq:\n%s", fab.DHCPLog("net"))
		}
	})
	return fab, machineNS, clientNS
}

// TestMachine: a machine boots from the image with its user_data applied
// by Debian's Ignition; systemd says running; its console holds what its
// own unit printed (the host keys sshd made at first boot); OpenSSH lets
// core in with the key Ignition gave it, pinned to the console's host key;
// core needs sudo to write /etc and has it without a password; SFTP puts
// a file into /tmp; destroyed, nothing is left.
func TestMachine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("real machines need root (runc, mounts, network namespaces)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	img, err := machine.EnsureImage(ctx, machine.DefaultCacheDir(), slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, _ := ssh.NewPublicKey(pub)
	signer, _ := ssh.NewSignerFromKey(priv)
	fab, mns, cns := world(t)
	dir := filepath.Join(t.TempDir(), "m1")
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	id := "opke-test-" + hex.EncodeToString(rb[:])
	m, err := machine.Boot(ctx, machine.Config{ID: id, Hostname: "demo-controller-0", Dir: dir, Image: img,
		UserData: ignition(t, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))), NetNS: mns, MemoryBytes: 1 << 30, CPUs: 1, DiskBytes: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			_ = m.Destroy(context.Background())
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	state, err := m.WaitRunning(wctx)
	wcancel()
	if err != nil {
		console, _ := m.Console()
		jobs, _ := m.Exec(ctx, "systemctl", "list-jobs", "--no-pager")
		t.Fatalf("%s: %v\njobs:\n%s\nconsole:\n%s", state, err, jobs, console)
	}

	var keys []ssh.PublicKey
	for keys == nil {
		console, _ := m.Console()
		keys, _ = sshx.HostKeysFromConsole(string(console))
		if ctx.Err() != nil {
			t.Fatalf("no host keys on the console:\n%s", console)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The console log is the serial port's, as Nova's is: what systemd
	// prints on /dev/console (the screen, tty0 on Flatcar's OpenStack
	// image) is not in it, and the keys are there once.
	console, _ := m.Console()
	screen, _ := os.ReadFile(m.ScreenPath())
	if !strings.Contains(string(screen), "Reached target") || strings.Contains(string(console), "Reached target") {
		t.Errorf("systemd's status lines belong on the screen only:\nscreen:\n%s\nconsole:\n%s", screen, console)
	}
	if n := strings.Count(string(console), "-----BEGIN SSH HOST KEY KEYS-----"); n != 1 {
		t.Errorf("the serial console shows the host keys %d times:\n%s", n, console)
	}
	// The machine is reachable once its DHCP client has its lease.
	var conn net.Conn
	for {
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err = machine.DialIn(dctx, cns, "tcp", "10.99.0.2:22")
		dcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			out, _ := m.Exec(context.Background(), "sh", "-c", "networkctl --no-pager status eth0; journalctl --no-pager -n 30 -u systemd-networkd; ip -4 addr")
			t.Fatalf("no SSH at the address the DHCP server leases: %v\n%s", err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	cfg := &ssh.ClientConfig{User: "core", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			for _, k := range keys {
				if string(k.Marshal()) == string(key.Marshal()) {
					return nil
				}
			}
			return fmt.Errorf("host key %s is not on the console", ssh.FingerprintSHA256(key))
		}, Timeout: 10 * time.Second}
	c, chans, reqs, err := ssh.NewClientConn(conn, "10.99.0.2:22", cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := ssh.NewClient(c, chans, reqs)
	defer client.Close()
	run := func(cmd string) (string, error) {
		s, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		out, err := s.CombinedOutput(cmd)
		return strings.TrimSpace(string(out)), err
	}
	for _, tc := range []struct {
		cmd  string
		ok   bool
		want string
	}{
		{"id -un", true, "core"},
		{"sudo -n true", true, ""},
		{"touch /etc/x", false, "Permission denied"},
		{"sudo -n touch /etc/x && ls /etc/x", true, "/etc/x"},
		{"systemctl is-system-running", true, "running"},
		{"systemctl restart ssh.service", false, ""},
		{"test -d /opt/bin && test -d /var/lib && test -w /tmp", true, ""},
		// What DHCP gave: the address, the default route, the network's
		// DHCP server as the DNS server, which answers the ports' names
		// (a name not a DNS label: host-<address>).
		{"ip -4 -o addr show dev eth0", true, "inet 10.99.0.2/24"},
		{"ip -4 route show default", true, "default via 10.99.0.1 dev eth0"},
		{"cat /run/systemd/resolve/resolv.conf", true, "nameserver 10.99.0.3"},
		{"getent hosts host-10-99-0-1.openstacklocal", true, "10.99.0.1"},
		{"getent hosts demo-controller-0.openstacklocal", true, "10.99.0.2"},
		// Any other name is NXDOMAIN, from the site's resolver, as a
		// cloud's is; not REFUSED, which ends a search list's walk.
		{"resolvectl query --cache=no nowhere.openstacklocal", false, "not found"},
		{"resolvectl query --cache=no example.com", false, "not found"},
	} {
		out, err := run(tc.cmd)
		if (err == nil) != tc.ok || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %q, %v (want ok %v, %q)", tc.cmd, out, err, tc.ok, tc.want)
		}
	}
	// The machine's root and its runtime's store are on a disk of its
	// own, of the flavor's size (what its kubelet's eviction measures),
	// not on the host's filesystem; the host holds only what was written.
	for _, path := range []string{"/", "/var/lib/kubelet", "/var/lib/containerd"} {
		out, err := run("sudo -n mkdir -p " + path + " && stat -f -c '%b %S' " + path)
		var blocks, size int64
		if _, serr := fmt.Sscan(out, &blocks, &size); err != nil || serr != nil {
			t.Errorf("stat -f %s: %q, %v", path, out, err)
			continue
		}
		if total := blocks * size; total < 1800<<20 || total > 2<<30 {
			t.Errorf("%s is on a filesystem of %d MiB, want the machine's disk of 2048 MiB", path, total>>20)
		}
	}
	// Its one vCPU bounds it as a VM's does, without a CFS quota: a cgroup
	// of its own may have a quota above one CPU, as the kubelet gives a
	// pod whose limit is above the flavor's (a quota on the machine would
	// refuse the write).
	quota := "sudo -n sh -c 'd=/sys/fs/cgroup/cpu/opke-test; mkdir -p $d && echo 150000 > $d/cpu.cfs_quota_us && cat $d/cpu.cfs_quota_us; rmdir $d'"
	if out, err := run(quota); err != nil || out != "150000" {
		t.Errorf("a child cgroup's quota above the flavor's vCPUs: %q, %v", out, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "disk.img"), &st); err != nil {
		t.Error(err)
	} else if used := st.Blocks * 512; used > 512<<20 {
		t.Errorf("the disk's file holds %d MiB on the host: it is not sparse", used>>20)
	}

	sc, err := sftp.NewClient(client)
	if err != nil {
		t.Fatal(err)
	}
	f, err := sc.Create("/tmp/pushed")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("hello\n"))
	f.Close()
	sc.Close()
	if out, err := run("cat /tmp/pushed"); err != nil || out != "hello" {
		t.Errorf("the file put into /tmp: %q, %v", out, err)
	}

	// A security group without 22 lets no new connection in (the one
	// open goes on, as conntrack keeps it).
	if err := fab.SetRules(ctx, "port-m", []machine.Rule{{Direction: "egress"}}); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	if c, err := machine.DialIn(dctx, cns, "tcp", "10.99.0.2:22"); err == nil {
		c.Close()
		t.Error("a new SSH connection got through a security group without 22")
	}
	dcancel()
	if out, err := run("echo still"); err != nil || out != "still" {
		t.Errorf("the open connection was cut: %q, %v", out, err)
	}

	// The machine has a cgroup of its own in every hierarchy (where it
	// had none it would see, and its kubelet reap, the other machines').
	cg := "/opke-machines/" + id
	if got, hierarchies := cgroupDirs(cg), len(cgroupMounts()); len(got) != hierarchies {
		t.Errorf("the machine's cgroup is in %d of the %d hierarchies: %v", len(got), hierarchies, got)
	}

	client.Close()
	if err := m.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	destroyed = true
	if out, _ := exec.Command("runc", "--root", machine.RuncRoot, "list", "-q").Output(); strings.Contains(string(out), id) {
		t.Errorf("the container is left: %s", out)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), dir) {
		t.Errorf("a mount is left under %s", dir)
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), dir) {
		t.Errorf("a loop device is left on the machine's disk: %s", out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the machine's folder is left: %v", err)
	}
	if left := cgroupDirs(cg); len(left) > 0 {
		t.Errorf("cgroups are left: %v", left)
	}
}

// TestMachineRejectedConfig: a user_data Ignition refuses leaves no
// machine running and its reason on the console, as Flatcar's emergency
// shell shows it.
func TestMachineRejectedConfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("real machines need root (runc, mounts, network namespaces)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := machine.EnsureImage(ctx, machine.DefaultCacheDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	dir := filepath.Join(base, "m")
	_, err = machine.Boot(ctx, machine.Config{ID: "opke-test-rejected", Dir: dir, Image: img, UserData: []byte(`{"ignition":{"version":"9.9.9"}}`), DiskBytes: 1 << 30})
	if !errors.Is(err, machine.ErrInvalidConfig) {
		t.Fatalf("Boot: %v, want ErrInvalidConfig", err)
	}
	console, _ := os.ReadFile(filepath.Join(dir, "console.log"))
	if !strings.Contains(string(console), "ignition] failed") || !strings.Contains(string(console), "unsupported config version") {
		t.Errorf("the console does not say why:\n%s", console)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), dir) {
		t.Errorf("a mount is left under %s", dir)
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), dir) {
		t.Errorf("a loop device is left on the machine's disk: %s", out)
	}
	if out, _ := exec.Command("runc", "--root", machine.RuncRoot, "list", "-q").Output(); strings.Contains(string(out), "opke-test-rejected") {
		t.Errorf("a container is left: %s", out)
	}
}

// cgroupDirs are a cgroup path's folders in each mounted cgroup hierarchy
// of this host that has it.
func cgroupDirs(path string) []string {
	var out []string
	for _, m := range cgroupMounts() {
		if st, err := os.Stat(filepath.Join(m, path)); err == nil && st.IsDir() {
			out = append(out, filepath.Join(m, path))
		}
	}
	return out
}

// cgroupMounts are this host's mounted cgroup hierarchies.
func cgroupMounts() []string {
	out, _ := exec.Command("findmnt", "-rn", "-t", "cgroup,cgroup2", "-o", "TARGET").Output()
	return strings.Fields(string(out))
}

// TestSweep: what a killed simulator leaves (a machine running, its root
// and disk mounted, a volume's loop device, a namespace with a process in
// it) is gone after Sweep, which counts it.
func TestSweep(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("real machines need root (runc, mounts, network namespaces)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	img, err := machine.EnsureImage(ctx, machine.DefaultCacheDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	ns := "opke-sweep-" + hex.EncodeToString(rb[:])
	nsPath, err := machine.AddNetNS(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = machine.DeleteNetNS(context.Background(), ns) })
	sleeper := exec.Command("ip", "netns", "exec", ns, "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	dir := filepath.Join(t.TempDir(), "m")
	id := "opke-test-" + hex.EncodeToString(rb[:])
	m, err := machine.Boot(ctx, machine.Config{ID: id, Hostname: "demo-default-0", Dir: dir, Image: img,
		UserData: ignition(t, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl x"), NetNS: nsPath, MemoryBytes: 1 << 30, CPUs: 1, DiskBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Destroy(context.Background()) })
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); !strings.Contains(string(mounts), dir) {
		t.Fatalf("the machine's disk is not mounted under %s", dir)
	}

	// A volume attached when the simulator died: its loop device.
	volume := filepath.Join(t.TempDir(), "hosts", "volumes", "v.img")
	if err := os.MkdirAll(filepath.Dir(volume), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(volume, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := machine.LoopDevice(ctx, volume); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = machine.ReleaseLoop(context.Background(), volume) })

	swept, err := machine.Sweep(ctx, "opke-sweep-")
	if err != nil {
		t.Fatal(err)
	}
	if swept.Machines < 1 || swept.Namespaces < 1 || swept.Loops < 1 {
		t.Errorf("swept %+v, want the machine, the namespace and the volume's loop at least", swept)
	}
	if out, _ := exec.Command("losetup", "-j", volume).Output(); len(out) > 0 {
		t.Errorf("the volume's loop device is left: %s", out)
	}
	if out, _ := exec.Command("runc", "--root", machine.RuncRoot, "list", "-q").Output(); strings.Contains(string(out), id) {
		t.Errorf("the container is left: %s", out)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), dir) || strings.Contains(string(mounts), filepath.Join(machine.RootsDir, id)) {
		t.Errorf("a mount of the machine is left")
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), dir) {
		t.Errorf("a loop device is left on the machine's disk: %s", out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the machine's folder is left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(machine.NetNSDir, ns)); !os.IsNotExist(err) {
		t.Errorf("the namespace is left: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("the process in the namespace still runs")
		_ = sleeper.Process.Kill()
	}
}

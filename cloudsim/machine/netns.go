package machine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// NetNSDir is where named network namespaces live (ip netns).
const NetNSDir = "/run/netns"

// AddNetNS makes the named network namespace (ip netns add) with its
// loopback up, and returns its path.
func AddNetNS(ctx context.Context, name string) (string, error) {
	if err := IP(ctx, "", "netns", "add", name); err != nil {
		return "", err
	}
	if err := IP(ctx, name, "link", "set", "lo", "up"); err != nil {
		return "", err
	}
	return filepath.Join(NetNSDir, name), nil
}

// DeleteNetNS removes the named network namespace; every link in it goes
// with it.
func DeleteNetNS(ctx context.Context, name string) error {
	if _, err := os.Stat(filepath.Join(NetNSDir, name)); os.IsNotExist(err) {
		return nil
	}
	// What still runs there (a DHCP server a crashed simulator left)
	// would keep the namespace alive, unnamed.
	if out, err := exec.CommandContext(ctx, "ip", "netns", "pids", name).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	return IP(ctx, "", "netns", "delete", name)
}

// IP runs ip(8), in the named network namespace unless ns is "".
func IP(ctx context.Context, ns string, args ...string) error {
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// DialIn dials addr from inside the network namespace at nsPath: the
// socket is made there (on a thread moved into it for the call), so the
// connection reaches what only that namespace reaches, and nothing is
// routed from the machine.
func DialIn(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	return DialWith(ctx, nsPath, net.Dialer{}, network, addr)
}

// DialWith is DialIn with a dialer of the caller's (a local address).
func DialWith(ctx context.Context, nsPath string, d net.Dialer, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNetNS(nsPath, func() (err error) {
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// ListenIn listens on addr inside the network namespace at nsPath.
func ListenIn(nsPath, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetNS(nsPath, func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// inNetNS runs fn on a thread moved into the namespace at nsPath: the
// sockets it makes live there. A thread that cannot move back is left
// locked, and dies with its goroutine.
func inNetNS(nsPath string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter %s: %w", nsPath, err)
			return
		}
		err = fn()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// Lease is what a machine's initramfs has on its first port when
// Ignition fetches its user_data: the address and route its network's
// DHCP server leases it.
type Lease struct {
	IfName  string
	Address netip.Prefix
	Gateway netip.Addr
}

// upLease sets lease on its interface in the namespace ns, as the
// initramfs's DHCP client would, and returns what takes it down: only
// what it added (a port whose address the fabric set keeps it).
func upLease(ctx context.Context, ns string, lease Lease) (func(context.Context) error, error) {
	var undo [][]string
	down := func(ctx context.Context) error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, IP(ctx, ns, undo[i]...))
		}
		return errors.Join(errs...)
	}
	steps := [][2][]string{
		{{"link", "set", lease.IfName, "up"}, nil},
		{{"addr", "add", lease.Address.String(), "dev", lease.IfName}, {"addr", "del", lease.Address.String(), "dev", lease.IfName}},
	}
	if lease.Gateway.IsValid() {
		via := []string{"default", "via", lease.Gateway.String(), "dev", lease.IfName}
		steps = append(steps, [2][]string{append([]string{"route", "add"}, via...), append([]string{"route", "del"}, via...)})
	}
	for _, st := range steps {
		err := IP(ctx, ns, st[0]...)
		switch {
		case err != nil && strings.Contains(err.Error(), "File exists"):
			continue // set by the fabric: not the initramfs's to take down
		case err != nil:
			return nil, errors.Join(fmt.Errorf("initramfs network: %w", err), down(ctx))
		}
		if st[1] != nil {
			undo = append(undo, st[1])
		}
	}
	return down, nil
}

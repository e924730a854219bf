package machine

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("enter %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and dies with its goroutine: it
			// must not serve other goroutines from the wrong namespace.
			done <- result{conn, err}
			return
		}
		runtime.UnlockOSThread()
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

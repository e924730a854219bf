// Package proctest runs real processes for tests that need them whole:
// the opke binary built once, processes whose output goes to a log file,
// which a test can kill -9, stop, pause and start again.
package proctest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var build struct {
	once sync.Once
	bin  string
	err  error
}

// Opke builds the opke binary once per test binary, into a folder that
// outlives each test (removed by the operating system's temporary folder
// policy, as go test's own build is).
func Opke(tb testing.TB) string {
	tb.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "opke-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.bin = filepath.Join(dir, "opke")
		cmd := exec.Command("go", "build", "-o", build.bin, "./cmd/opke")
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("build opke: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		tb.Fatal(build.err)
	}
	return build.bin
}

// moduleRoot is the repository's root: two folders above this file.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Proc is a process started by a test.
type Proc struct {
	Cmd *exec.Cmd
	// Log is the file its output goes to.
	Log    string
	exited chan struct{} // closed when it ends
}

// Start starts cmd with its output appended to dir/name.log; it is
// stopped (SIGTERM, then SIGKILL after 20 s) when tb ends.
func Start(tb testing.TB, dir, name string, cmd *exec.Cmd) *Proc {
	tb.Helper()
	p := &Proc{Cmd: cmd, exited: make(chan struct{}), Log: filepath.Join(dir, name+".log")}
	log, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		tb.Fatal(err)
	}
	go func() { _ = cmd.Wait(); log.Close(); close(p.exited) }()
	tb.Cleanup(func() { p.Stop(20 * time.Second) })
	return p
}

// Alive fails tb with the process's log if it ended.
func (p *Proc) Alive(tb testing.TB) {
	tb.Helper()
	select {
	case <-p.exited:
		out, _ := os.ReadFile(p.Log)
		tb.Fatalf("%s ended: %s", p.Cmd.Path, out)
	default:
	}
}

// Kill sends SIGKILL and waits for the end: nothing of the process runs
// on, no deferred cleanup, no graceful stop.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.exited
}

// Stop sends SIGTERM (and SIGCONT, should it be paused) and waits up to
// grace for the end, then kills it.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	_ = p.Cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.Kill()
	}
}

// Pause stops the process where it stands (SIGSTOP), as a long GC pause or
// a frozen virtual machine would; Resume lets it go on.
func (p *Proc) Pause() error { return p.Cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() error { return p.Cmd.Process.Signal(syscall.SIGCONT) }

// FreeAddr returns a 127.0.0.1 address nothing listens on now, for a
// process that must listen on the same address when it starts again.
func FreeAddr(tb testing.TB) string { return FreeAddrs(tb, 1)[0] }

// FreeAddrs returns n distinct 127.0.0.1 addresses nothing listens on now.
// Their ports are below the kernel's ephemeral range, so that no port the
// kernel hands out (a listener on :0, the local end of a connection) takes
// one while its process is down between a stop and a start.
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	low := ephemeralLow()
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries == 10_000 {
			tb.Fatalf("no free port below %d", low)
		}
		port := 10_000 + rand.IntN(low-10_000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		held = append(held, ln)
		out = append(out, ln.Addr().String())
	}
	return out
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 11_000 {
				return v
			}
		}
	}
	return 32768
}

// WaitListening waits up to a minute for addr to accept connections.
func WaitListening(tb testing.TB, addr string) {
	tb.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nothing listens on %s", addr)
		}
	}
}

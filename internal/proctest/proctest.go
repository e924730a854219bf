// Package proctest runs real processes for tests that need them whole:
// the opke binary built once, processes whose output goes to a log file,
// which a test can kill -9, stop, pause and start again.
package proctest

import (
	"bytes"
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

// FreeAddrs returns n distinct 127.0.0.1 addresses nothing listens on now,
// each reserved for this test until it ends, against every test process
// of the machine. A test that stops a process and starts it again on the
// same address (etcd killed, back after 5 s) must find the port free
// again; three things could take it meanwhile, and none can:
//   - the kernel: the ports are outside its ephemeral range (unless that
//     covers nearly all ports), so no listener on :0 and no connection's
//     local end (nor a client's connection to itself while it retries the
//     stopped process) gets one;
//   - another test of this or another test binary: a port is reserved by
//     a lock on a file named after it in the temporary folder
//     (opke-ports/PORT), held until tb ends (the lock goes with the
//     process should it die), and FreeAddrs skips ports locked;
//   - the address of a listener that just stopped: Go listeners set
//     SO_REUSEADDR, so connections in TIME_WAIT do not hold it.
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	ranges := portRanges(ephemeralRange())
	total := 0
	for _, r := range ranges {
		total += r[1] - r[0] + 1
	}
	if total < 1_000 {
		// The ephemeral range covers (nearly) everything: reservations
		// alone keep tests apart; the kernel may still take a port.
		ranges, total = [][2]int{{10_000, 65_535}}, 55_536
	}
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries == 10_000 {
			tb.Fatalf("no free port in %v after %d tries", ranges, tries)
		}
		port := pick(ranges, rand.IntN(total))
		unlock, ok := reserve(port)
		if !ok {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			unlock()
			continue
		}
		tb.Cleanup(unlock)
		held = append(held, ln)
		out = append(out, ln.Addr().String())
	}
	return out
}

// portRanges are the ports FreeAddrs picks from: 10000–65535 less the
// kernel's ephemeral range [lo, hi] (inclusive ranges).
func portRanges(lo, hi int) [][2]int {
	const first, last = 10_000, 65_535
	var out [][2]int
	if lo > first {
		out = append(out, [2]int{first, min(lo-1, last)})
	}
	if hi < last {
		out = append(out, [2]int{max(hi+1, first), last})
	}
	return out
}

// pick is the i-th port of ranges.
func pick(ranges [][2]int, i int) int {
	for _, r := range ranges {
		if n := r[1] - r[0] + 1; i >= n {
			i -= n
			continue
		}
		return r[0] + i
	}
	panic("proctest: port index out of ranges")
}

// reserve locks port's file in the temporary folder's opke-ports folder,
// or says another holder has it.
func reserve(port int) (unlock func(), ok bool) {
	dir := filepath.Join(os.TempDir(), "opke-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return func() {}, true // no folder to lock in: the listen check alone
	}
	// The files stay: removing one while another process opens it would
	// let two lock two different files of one name.
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return func() {}, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}

// ephemeralRange is the kernel's ephemeral port range (Linux's default if
// it cannot be read).
func ephemeralRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				return l, h
			}
		}
	}
	return 32768, 60999
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

// Buffer is a bytes.Buffer that several goroutines may write at once: a
// process's output, a logger's handler.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

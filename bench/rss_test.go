package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/state"
)

// peakRSS is a process's peak resident set (VmHWM), in MiB.
func peakRSS(tb testing.TB, pid int) float64 {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb / 1024
		}
	}
	tb.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// seedRun is a copy of a seed ready for opke serve: its simulator
// started in a process of its own (`opke sim` on the address the seed was
// made with), its etcd open here, an encryption key, and the fleet
// committed in a repository (head).
type seedRun struct {
	dir, key, work, head string
	store                *state.Store
}

// run copies the seed into a temporary folder and starts it with bin.
func (s *seed) run(b *testing.B, bin string) *seedRun {
	b.Helper()
	dir := b.TempDir()
	if err := copyTree(s.dir, dir); err != nil {
		b.Fatal(err)
	}
	listen, err := os.ReadFile(filepath.Join(dir, "listen"))
	if err != nil {
		b.Fatal(err)
	}
	proctest.Start(b, dir, "sim", exec.Command(bin, "sim", "--listen", string(listen), "--admin-listen", "127.0.0.1:0",
		"--edge-listen", "127.0.0.1:0", "--state", filepath.Join(dir, "sim"), "--boot-delay", "0s"))
	proctest.WaitListening(b, string(listen))
	store := openStore(b, filepath.Join(dir, "state"))
	b.Cleanup(func() { store.Close() })
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, fmt.Appendf(nil, "%x\n", statetest.Key()), 0o600); err != nil {
		b.Fatal(err)
	}
	work := filepath.Join(dir, "fleet")
	gittest.Git(b, work, "init", "-q", "-b", "main")
	gittest.Git(b, work, "add", "-A")
	gittest.Git(b, work, "commit", "-qm", "the fleet")
	return &seedRun{dir: dir, key: key, work: work, head: gittest.Git(b, work, "rev-parse", "HEAD"), store: store}
}

// BenchmarkServeRSS runs `opke serve` on a seeded fleet with the simulator
// in its own process (`opke sim`) and an etcd of its own (embedded in the
// benchmark, external to opke), until the fleet's commit is settled: the
// peak resident set of opke serve alone, and the time from its start to
// the commit's note.
func BenchmarkServeRSS(b *testing.B) {
	n := 1000
	if s := sizes(b); s[len(s)-1] < n {
		n = s[len(s)-1]
	}
	b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
		bin := proctest.Opke(b)
		s := seedFleet(b, cacheRoot(), n)
		var rss, settle float64
		for b.Loop() {
			r := s.run(b, bin)
			dir, store, key, work, head := r.dir, r.store, r.key, r.work, r.head
			addr := proctest.FreeAddr(b)
			started := time.Now()
			ca, cert, certKey := state.LocalTLSFiles(filepath.Join(dir, "state"))
			serve := proctest.Start(b, dir, "serve", exec.Command(bin, "serve", "--repo", work, "--etcd", strings.Join(store.Endpoints(), ","),
				"--etcd-ca", ca, "--etcd-cert", cert, "--etcd-key", certKey, "--encryption-key-file", key, "--sim-state", filepath.Join(dir, "sim"),
				"--data-dir", filepath.Join(dir, "serve"), "--listen", addr, "--resync-interval", "24h", "--interval", "1h"))
			for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
				serve.Alive(b)
				note, err := daemon.ReadNote(context.Background(), store, head)
				if err == nil && note.State != report.Pending && len(note.Clusters) == n {
					if note.State != report.Success {
						b.Fatalf("the fleet's commit: %s", note.State)
					}
					break
				}
				if time.Now().After(deadline) {
					logs, _ := os.ReadFile(serve.Log)
					b.Fatalf("the fleet's commit was not settled in 10 minutes; opke serve said:\n%s", logs)
				}
			}
			settle += time.Since(started).Seconds()
			rss += peakRSS(b, serve.Cmd.Process.Pid)
		}
		b.ReportMetric(rss/float64(b.N), "peak-rss-MiB")
		b.ReportMetric(settle/float64(b.N), "settle-s")
	})
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/sshx"
)

const hookSecret = "bench-hook-secret"

// repo makes the seed's fleet folder a git repository on main and
// returns it and the URL the daemon follows: file:// of it (the daemon
// watches a local repository's refs), or with remote, git:// of a bare
// clone that git daemon serves (no watch: a webhook or the poll).
func (f *fleet) repo(tb testing.TB, remote bool) (work, url string) {
	tb.Helper()
	work = filepath.Join(f.dir, "fleet")
	gittest.Git(tb, work, "init", "-q", "-b", "main")
	gittest.Git(tb, work, "add", "-A")
	gittest.Git(tb, work, "commit", "-qm", "the fleet")
	if !remote {
		return work, "file://" + work
	}
	bare := filepath.Join(f.dir, "fleet.git")
	gittest.Git(tb, f.dir, "init", "-q", "--bare", "-b", "main", bare)
	gittest.Git(tb, work, "remote", "add", "origin", bare)
	gittest.Git(tb, work, "push", "-q", "origin", "HEAD:main")
	addr := proctest.FreeAddr(tb)
	gittest.Daemon(tb, f.dir, addr)
	return work, "git://" + addr + "/fleet.git"
}

// serve runs a daemon on the fleet, following the repository at url and
// polling it every interval; it returns its HTTP handler's URL.
func (f *fleet) serve(tb testing.TB, url string, interval time.Duration) (*daemon.Daemon, string) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mirror, err := source.OpenMirror(ctx, source.MirrorOptions{URL: url, Dir: filepath.Join(tb.TempDir(), "cache"), Branch: "main"})
	if err != nil {
		tb.Fatal(err)
	}
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: f.sim.Edge()}}
	tb.Cleanup(hosts.Close)
	d := daemon.New(daemon.Config{ID: "bench", Source: mirror, Store: f.store, Planner: f.planner,
		Applier:  &reconciler.Applier{Planner: f.planner, Hosts: hosts},
		Interval: interval, ResyncInterval: 24 * time.Hour, Metrics: daemon.NewMetrics()})
	srv := httptest.NewServer(d.Handler(hookSecret))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	tb.Cleanup(func() { cancel(); <-done; srv.Close() })
	return d, srv.URL
}

// statusWatch waits for a cluster's status to name a commit: it watches
// the status key in the store from the revision it starts at.
type statusWatch struct {
	ch clientv3.WatchChan
}

func (f *fleet) watchStatus(ctx context.Context, tb testing.TB, cluster string) *statusWatch {
	tb.Helper()
	key := f.store.Key("_status", cluster)
	resp, err := f.store.Client().Get(ctx, key)
	if err != nil {
		tb.Fatal(err)
	}
	return &statusWatch{ch: f.store.Client().Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1))}
}

func (w *statusWatch) until(tb testing.TB, commit string) {
	tb.Helper()
	for resp := range w.ch {
		for _, ev := range resp.Events {
			var s daemon.ClusterStatus
			if json.Unmarshal(ev.Kv.Value, &s) == nil && s.Commit == commit {
				return
			}
		}
	}
	tb.Fatalf("the status never named %s", commit)
}

// commitOnce commits a change no cluster sees (a README) in work.
func commitOnce(tb testing.TB, work string, i int) string {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(work, "README.md"), fmt.Appendf(nil, "revision %d\n", i), 0o644); err != nil {
		tb.Fatal(err)
	}
	gittest.Git(tb, work, "add", "README.md")
	gittest.Git(tb, work, "commit", "-qm", fmt.Sprintf("revision %d", i))
	return gittest.Git(tb, work, "rev-parse", "HEAD")
}

// reportQuantiles reports the median, 95th percentile and maximum of
// latencies, in milliseconds.
func reportQuantiles(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	q := func(p float64) float64 {
		return float64(took[min(len(took)-1, int(p*float64(len(took))))].Microseconds()) / 1e3
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.95), "p95-ms")
	b.ReportMetric(q(1), "max-ms")
}

// samples is the number of commits each run of a latency benchmark makes.
const samples = 20

// BenchmarkCommitToStatus: the time from a commit (which changes no
// cluster: the apply is not what is measured) to the status naming it,
// on a converged cluster. fsnotify: the daemon follows a local
// repository and sees the commit through its refs; webhook: it follows a
// remote, told of the push by a forge's webhook. The poll is an hour:
// neither waits for it.
func BenchmarkCommitToStatus(b *testing.B) {
	for _, how := range []string{"fsnotify", "webhook"} {
		b.Run(how, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				f := converged(b, 1)
				work, remote := f.repo(b, how == "webhook")
				ctx := b.Context() // the watches end with the benchmark
				w := f.watchStatus(ctx, b, clusterName(0))
				_, url := f.serve(b, remote, time.Hour)
				w.until(b, gittest.Git(b, work, "rev-parse", "HEAD"))
				for i := range samples {
					w := f.watchStatus(ctx, b, clusterName(0))
					head := commitOnce(b, work, i)
					started := time.Now()
					if how == "webhook" {
						gittest.Git(b, work, "push", "-q", "origin", "HEAD:main")
						started = time.Now()
						gittest.Hook(b, url, hookSecret, "refs/heads/main", head)
					}
					w.until(b, head)
					took = append(took, time.Since(started))
				}
			}
			reportQuantiles(b, took)
		})
	}
}

// BenchmarkCommitToStatusPoll: the same with no trigger but the daemon's
// 60 s poll, for comparison: daemons in parallel, each committed to at a
// random moment of its first minute (each with its own store, all on
// one simulator).
func BenchmarkCommitToStatusPoll(b *testing.B) {
	const daemons = 6
	var took []time.Duration
	for b.Loop() {
		var mu sync.Mutex
		var wg sync.WaitGroup
		seed := seedFleet(b, cacheRoot(), 1)
		first := converged(b, 1)
		for k := range daemons {
			f := first
			if k > 0 {
				f = first.another(b, seed)
			}
			work, remote := f.repo(b, true)
			ctx := b.Context()
			w := f.watchStatus(ctx, b, clusterName(0))
			f.serve(b, remote, time.Minute)
			w.until(b, gittest.Git(b, work, "rev-parse", "HEAD"))
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.Int64N(int64(time.Minute))))
				w := f.watchStatus(ctx, b, clusterName(0))
				head := commitOnce(b, work, k)
				gittest.Git(b, work, "push", "-q", "origin", "HEAD:main")
				started := time.Now()
				w.until(b, head)
				mu.Lock()
				took = append(took, time.Since(started))
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	reportQuantiles(b, took)
}

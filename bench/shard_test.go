package bench

import (
	"context"
	"encoding/json"
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
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/state"
)

// envInt is an integer setting of the environment, def if unset.
func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// shardTTL is the daemons' --leader-ttl in BenchmarkShardedFleet: how
// long a killed daemon's membership outlives it, most of a takeover.
const shardTTL = 5 * time.Second

// BenchmarkShardedFleet runs OPKE_SHARD_DAEMONS (4) `opke serve` processes
// on one etcd and one simulator (`opke sim`), sharing a seeded fleet of
// OPKE_SHARD_CLUSTERS (10,000) clusters. Each op is a commit that changes
// no cluster, timed from the commit to its note final with every
// cluster's entry (each daemon settles its share). It also reports the
// first commit's settle from the daemons' start, and the takeover: one
// daemon that does not lead is killed (SIGKILL) and the time is taken
// until every cluster it owned is adopted by a survivor (its status
// names the survivor), --leader-ttl (5 s) of it waiting for the dead
// daemon's membership to expire.
func BenchmarkShardedFleet(b *testing.B) {
	n, k := envInt(b, "OPKE_SHARD_CLUSTERS", 10000), envInt(b, "OPKE_SHARD_DAEMONS", 4)
	b.Run(fmt.Sprintf("clusters=%d/daemons=%d", n, k), func(b *testing.B) {
		ctx := context.Background()
		bin := proctest.Opke(b)
		s := seedFleet(b, cacheRoot(), n)
		r := s.run(b, bin)
		dir, store, key, work, head := r.dir, r.store, r.key, r.work, r.head

		host, err := os.Hostname()
		if err != nil {
			b.Fatal(err)
		}
		ca, cert, certKey := state.LocalTLSFiles(filepath.Join(dir, "state"))
		daemons := map[string]*proctest.Proc{}
		started := time.Now()
		for i := range k {
			name := fmt.Sprintf("serve-%d", i)
			p := proctest.Start(b, dir, name, exec.Command(bin, "serve", "--repo", work, "--etcd", strings.Join(store.Endpoints(), ","),
				"--etcd-ca", ca, "--etcd-cert", cert, "--etcd-key", certKey, "--encryption-key-file", key, "--sim-state", filepath.Join(dir, "sim"),
				"--data-dir", filepath.Join(dir, name), "--listen", proctest.FreeAddr(b), "--leader-ttl", shardTTL.String(),
				"--resync-interval", "24h", "--interval", "1h"))
			daemons[fmt.Sprintf("%s-%d", host, p.Cmd.Process.Pid)] = p
		}
		alive := func() {
			for _, p := range daemons {
				p.Alive(b)
			}
		}
		// The note of 10,000 clusters is 10,000 keys: read once a second,
		// not more, beside the daemons' own reads of the same etcd.
		settled := func(commit string) {
			for deadline := time.Now().Add(20 * time.Minute); ; time.Sleep(time.Second) {
				alive()
				note, err := daemon.ReadNote(ctx, store, commit)
				if err == nil && note.State != report.Pending && len(note.Clusters) == n {
					if note.State != report.Success {
						b.Fatalf("commit %s: %s", commit, note.State)
					}
					return
				}
				if time.Now().After(deadline) {
					b.Fatalf("commit %s was not settled in 20 minutes", commit)
				}
			}
		}
		settled(head)
		first := time.Since(started)

		readme := filepath.Join(work, "README.md")
		i := 0
		for b.Loop() {
			i++
			if err := os.WriteFile(readme, fmt.Appendf(nil, "the fleet, commit %d\n", i), 0o644); err != nil {
				b.Fatal(err)
			}
			gittest.Git(b, work, "add", "-A")
			gittest.Git(b, work, "commit", "-qm", fmt.Sprintf("no change to any cluster (%d)", i))
			settled(gittest.Git(b, work, "rev-parse", "HEAD"))
		}
		b.StopTimer()

		// The takeover: a daemon that does not lead is killed.
		leader, err := store.Leader(ctx)
		if err != nil {
			b.Fatal(err)
		}
		owners := statusDaemons(b, store)
		var victim string
		for id := range daemons {
			if id != leader && (victim == "" || id < victim) {
				victim = id
			}
		}
		var share []string
		for name, id := range owners {
			if id == victim {
				share = append(share, name)
			}
		}
		if len(share) == 0 {
			b.Fatalf("%s owns no cluster: %v", victim, owners)
		}
		killed := time.Now()
		daemons[victim].Kill()
		delete(daemons, victim)
		for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(time.Second) {
			alive()
			statuses := statusesOf(b, store)
			left := 0
			for _, name := range share {
				if s := statuses[name]; s.Daemon == victim || !s.Taken.After(killed) {
					left++
				}
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of the %d clusters of the killed daemon were not taken over in 10 minutes", left, len(share))
			}
		}
		takeover := time.Since(killed)
		var rss float64
		for _, p := range daemons {
			rss = max(rss, peakRSS(b, p.Cmd.Process.Pid))
		}
		b.ReportMetric(first.Seconds(), "first-settle-s")
		b.ReportMetric(takeover.Seconds(), "takeover-s")
		b.ReportMetric(float64(len(share)), "taken-clusters")
		b.ReportMetric(rss, "peak-rss-MiB")
	})
}

// statusesOf reads every cluster's status.
func statusesOf(tb testing.TB, store *state.Store) map[string]daemon.ClusterStatus {
	tb.Helper()
	prefix := state.KeysOf(store).Statuses()
	raw, err := store.List(context.Background(), prefix)
	if err != nil {
		tb.Fatal(err)
	}
	out := make(map[string]daemon.ClusterStatus, len(raw))
	for k, v := range raw {
		var s daemon.ClusterStatus
		if err := json.Unmarshal(v, &s); err != nil {
			tb.Fatal(err)
		}
		out[strings.TrimPrefix(k, prefix)] = s
	}
	return out
}

// statusDaemons is the daemon that last worked on each cluster.
func statusDaemons(tb testing.TB, store *state.Store) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for name, s := range statusesOf(tb, store) {
		out[name] = s.Daemon
	}
	return out
}

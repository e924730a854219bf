package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// sizes are the fleet sizes benchmarked: OPKE_BENCH_SIZES (comma
// separated), default 1, 100 and 1,000 clusters.
func sizes(tb testing.TB) []int { return sizesOf(tb, "OPKE_BENCH_SIZES", "1,100,1000") }

// sizesOf are the fleet sizes the variable env lists (comma separated),
// def if it is unset.
func sizesOf(tb testing.TB, env, def string) []int {
	tb.Helper()
	spec := cmp.Or(os.Getenv(env), def)
	var out []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			tb.Fatalf("%s: %q is not a fleet size", env, f)
		}
		out = append(out, n)
	}
	return out
}

// calls sums the simulator's request counters.
func (f *fleet) calls() int64 {
	var n int64
	for _, k := range f.sim.Counters() {
		n += k
	}
	return n
}

// converged loads a seeded fleet of n clusters and checks that it plans
// nothing (which also warms the connection and the token).
func converged(b *testing.B, n int) *fleet {
	b.Helper()
	f := loadFleet(b, seedFleet(b, cacheRoot(), n))
	if p := f.plan(b); !p.Empty() {
		b.Fatalf("the seeded fleet of %d plans %d changes", n, len(p.Changes)+len(p.Drift))
	}
	return f
}

// BenchmarkNoopReconcile plans a converged fleet: each cloud listed once,
// every cluster diffed against its ledger (its desired state and its
// ledger kept from the plan before: nothing was written). It reports the
// OpenStack API calls of one plan, and the simulator's share of the time
// (what the same calls cost a real cloud is the cloud's).
func BenchmarkNoopReconcile(b *testing.B) {
	// At the peer's sizes too: make bench's table puts OpenTofu's plan
	// (BenchmarkTofuPlan) beside it.
	all := slices.Concat(sizes(b), peerSizes(b))
	slices.Sort(all)
	for _, n := range slices.Compact(all) {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			f := converged(b, n)
			var calls, renders, ledgers int64
			var busy time.Duration
			for b.Loop() {
				f.sim.ResetCounters()
				res := f.planned(b)
				if !res.Plan.Empty() {
					b.Fatal("a converged fleet planned changes")
				}
				calls, busy, renders = calls+f.calls(), busy+f.sim.Busy(), renders+int64(res.Renders)
				ledgers += int64(res.LedgerReads)
			}
			b.ReportMetric(float64(calls)/float64(b.N), "api-calls/op")
			b.ReportMetric(float64(renders)/float64(b.N), "renders/op")
			b.ReportMetric(float64(ledgers)/float64(b.N), "ledger-reads/op")
			b.ReportMetric(float64(busy.Microseconds())/1e3/float64(b.N), "sim-ms/op")
		})
	}
}

// BenchmarkOneClusterChanged scales one cluster of a converged fleet out
// by a worker, plans the fleet and applies the plan (the new worker's
// server, port and files over SSH through the gateway, its health gate):
// the API calls of the plan, and of the whole reconcile.
func BenchmarkOneClusterChanged(b *testing.B) {
	for _, n := range sizes(b) {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			f := converged(b, n)
			hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: f.sim.Edge()}}
			b.Cleanup(hosts.Close)
			a := &reconciler.Applier{Planner: f.planner, Hosts: hosts, GateInterval: 100 * time.Millisecond}
			name := clusterName(0)
			c := *f.clusters[name]
			c.Spec.WorkerPools = append([]schemas.WorkerPool(nil), c.Spec.WorkerPools...)
			f.clusters[name] = &c
			var calls, planCalls int64
			for b.Loop() {
				c.Spec.WorkerPools[0].Count++
				f.sim.ResetCounters()
				req := reconciler.Request{Clusters: f.clusters, Commit: "0123456789abcdef0123456789abcdef01234567"}
				res, err := f.planner.Plan(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				planCalls += f.calls()
				if sum, err := a.Apply(context.Background(), req, res.Plan); err != nil {
					for _, s := range sum.Failed {
						b.Errorf("%s: %v", s.Change.Address, s.Err)
					}
					b.Fatal(err)
				}
				calls += f.calls()
			}
			b.ReportMetric(float64(planCalls)/float64(b.N), "plan-api-calls/op")
			b.ReportMetric(float64(calls)/float64(b.N), "api-calls/op")
		})
	}
}

package render_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/render"
	"opke.dev/opke/schemas"
)

// fleet returns n copies of the example prod cluster (3 controllers, 5
// workers, 4 addons) with names and host networks of their own.
func fleet(tb testing.TB, n int, tag string) []*schemas.Cluster {
	tb.Helper()
	data, err := os.ReadFile("../clusters/prod/cluster.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	f := schemas.Parse("clusters/prod/cluster.yaml", data)
	if f.Cluster == nil || len(f.Findings) > 0 {
		tb.Fatalf("prod spec: %v", f.Findings)
	}
	out := make([]*schemas.Cluster, n)
	for i := range out {
		c := *f.Cluster
		c.Metadata.Name = fmt.Sprintf("%s%04d", tag, i)
		c.Spec.Network.HostCIDR = fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256)
		out[i] = &c
	}
	return out
}

// TestRenderOnReadOnlyOverlayPersistsNothing: a pull-request render issues
// its material in memory only.
func TestRenderOnReadOnlyOverlayPersistsNothing(t *testing.T) {
	s := statetest.Open(t)
	c := fleet(t, 1, "pr")[0]
	o := s.ReadOnly()
	out, err := render.Cluster(context.Background(), o, c, render.Options{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Issued) == 0 || len(o.Written()) == 0 {
		t.Fatalf("nothing issued on the overlay: %v", out.Issued)
	}
	all, err := s.List(context.Background(), s.Key(""))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Errorf("the store holds %d keys after a read-only render", len(all))
	}
}

// BenchmarkRender renders 1 and 1,000 clusters like the example prod
// cluster: "first" issues every certificate and key (a fresh cluster per
// iteration), "rerender" reuses the material in the store, as the daemon
// does on every reconcile. make bench BENCH=Render prints the figures.
func BenchmarkRender(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("clusters=%d/first", n), func(b *testing.B) {
			s := statetest.Open(b)
			i := 0
			for b.Loop() {
				b.StopTimer()
				cs := fleet(b, n, fmt.Sprintf("f%d-", i))
				i++
				b.StartTimer()
				for _, c := range cs {
					if _, err := render.Cluster(ctx, s, c, render.Options{Now: time.Now()}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*n), "ms/cluster")
		})
		b.Run(fmt.Sprintf("clusters=%d/rerender", n), func(b *testing.B) {
			s := statetest.Open(b)
			cs := fleet(b, n, "r")
			// Two warm-up renders: the first issues, the second verifies each
			// signature once (a fresh process pays that, ~2 ms a cluster).
			for range 2 {
				for _, c := range cs {
					if _, err := render.Cluster(ctx, s, c, render.Options{Now: time.Now()}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			for b.Loop() {
				for _, c := range cs {
					out, err := render.Cluster(ctx, s, c, render.Options{Now: time.Now()})
					if err != nil {
						b.Fatal(err)
					}
					if len(out.Issued) != 0 {
						b.Fatalf("re-render issued %v", out.Issued)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N*n), "ms/cluster")
		})
	}
}

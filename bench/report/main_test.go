package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParse: benchmark lines of several runs become one figure per
// benchmark and unit, with median and spread; other lines are skipped;
// a target is checked against the median.
func TestParse(t *testing.T) {
	t.Parallel()
	out := `goos: linux
BenchmarkNoopReconcile/clusters=1000-2   1   3000000000 ns/op   30.00 api-calls/op
--- BENCH: BenchmarkNoopReconcile/clusters=1000-2
    reconcile_test.go:63: seeded a fleet
BenchmarkNoopReconcile/clusters=1000-2   1   1000000000 ns/op   30.00 api-calls/op
BenchmarkNoopReconcile/clusters=1000-2   1   1500000000 ns/op   32.00 api-calls/op
BenchmarkFetch   1   200 ns/op
PASS
`
	got, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	met := true
	want := []*Figure{
		{Benchmark: "NoopReconcile/clusters=1000", Unit: "ns/op", Runs: []float64{3e9, 1e9, 1.5e9}, Median: 1.5e9, Min: 1e9, Max: 3e9, Target: "< 2 s", Met: &met},
		{Benchmark: "NoopReconcile/clusters=1000", Unit: "api-calls/op", Runs: []float64{30, 30, 32}, Median: 30, Min: 30, Max: 32},
		{Benchmark: "Fetch", Unit: "ns/op", Runs: []float64{200}, Median: 200, Min: 200, Max: 200},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("figures (-want +got):\n%s", d)
	}
	var b strings.Builder
	print(&b, got)
	for _, line := range []string{"NoopReconcile/clusters=1000  time          1.50 s", "< 2 s met", "api-calls/op  30      30 - 32"} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("the table has no %q:\n%s", line, b.String())
		}
	}
}

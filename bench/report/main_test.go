package main

import (
	"slices"
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
BenchmarkNoopReconcile/clusters=100-2   1   500000000 ns/op   30.00 api-calls/op
BenchmarkNoopReconcile/clusters=100-2   1   250000000 ns/op   30.00 api-calls/op
BenchmarkNoopReconcile/clusters=100-2   1   250000000 ns/op   16.00 api-calls/op
PASS
`
	got, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	met, missed := true, false
	want := []*Figure{
		{Benchmark: "NoopReconcile/clusters=1000", Unit: "ns/op", Runs: []float64{3e9, 1e9, 1.5e9}, Median: 1.5e9, Min: 1e9, Max: 3e9, Target: "< 2 s", Met: &met},
		{Benchmark: "NoopReconcile/clusters=1000", Unit: "api-calls/op", Runs: []float64{30, 30, 32}, Median: 30, Min: 30, Max: 32},
		{Benchmark: "Fetch", Unit: "ns/op", Runs: []float64{200}, Median: 200, Min: 200, Max: 200},
		{Benchmark: "NoopReconcile/clusters=100", Unit: "ns/op", Runs: []float64{5e8, 2.5e8, 2.5e8}, Median: 2.5e8, Min: 2.5e8, Max: 5e8},
		{Benchmark: "NoopReconcile/clusters=100", Unit: "api-calls/op", Runs: []float64{30, 30, 16}, Median: 30, Min: 16, Max: 30},
		// Growth from 100 to 1,000 clusters: run by run.
		{Benchmark: "NoopReconcile/clusters=100->1000", Unit: "x time", Runs: []float64{6, 4, 6}, Median: 6, Min: 4, Max: 6, Target: "< 3x", Met: &missed},
		{Benchmark: "NoopReconcile/clusters=100->1000", Unit: "x api-calls/op", Runs: []float64{1, 1, 2}, Median: 1, Min: 1, Max: 2},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("figures (-want +got):\n%s", d)
	}
	var b strings.Builder
	print(&b, got)
	// The table's rows, each with its columns one space apart.
	var rows []string
	for _, l := range strings.Split(b.String(), "\n") {
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	for _, row := range []string{"NoopReconcile/clusters=1000 time 1.50 s 1.00 s - 3.00 s 3 < 2 s met", "NoopReconcile/clusters=1000 api-calls/op 30 30 - 32 3",
		"NoopReconcile/clusters=100->1000 x time 6 4 - 6 3 < 3x MISSED"} {
		if !slices.Contains(rows, row) {
			t.Errorf("the table has no row %q:\n%s", row, b.String())
		}
	}
}

// TestVersus: OpenTofu's plan over OPKE's no-op reconcile, size by size
// and run by run; the 100-cluster time must be at least 20 times.
func TestVersus(t *testing.T) {
	t.Parallel()
	out := `BenchmarkNoopReconcile/clusters=100-2   1   100000000 ns/op   17.00 api-calls/op
BenchmarkNoopReconcile/clusters=100-2   1   50000000 ns/op   17.00 api-calls/op
BenchmarkTofuPlan/clusters=100-2   1   3000000000 ns/op   5800 api-calls/op
BenchmarkTofuPlan/clusters=100-2   1   500000000 ns/op   5800 api-calls/op
BenchmarkTofuPlan/clusters=30-2   1   900000000 ns/op   1745 api-calls/op
`
	got, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	print(&b, got)
	var rows []string
	for _, l := range strings.Split(b.String(), "\n") {
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	for _, row := range []string{"TofuPlan/clusters=100 over NoopReconcile x time 20 10 - 30 2 >= 20x met",
		"TofuPlan/clusters=100 over NoopReconcile x api-calls/op 341.2 341.2 - 341.2 2"} {
		if !slices.Contains(rows, row) {
			t.Errorf("the table has no row %q:\n%s", row, b.String())
		}
	}
	if strings.Contains(b.String(), "clusters=30 over") {
		t.Errorf("a size OPKE was not measured at is compared:\n%s", b.String())
	}
}

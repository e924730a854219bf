// Command report runs OPKE's fleet-scale benchmarks several times and
// prints one table of their figures, each with its median and spread
// (min-max over the runs), and its target where the project set one; it
// writes the same as JSON. `make bench` runs it:
//
//	go run ./bench/report -count 5 -json bench.json
//
// It runs `go test -bench` on the benchmark packages with -benchtime 1x
// (each run is one fleet-sized operation) and reads the standard
// benchmark lines, so any figure a benchmark reports with ReportMetric
// shows up.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Figure is one benchmark's metric over the runs.
type Figure struct {
	Benchmark string    `json:"benchmark"`
	Unit      string    `json:"unit"`
	Runs      []float64 `json:"runs"`
	Median    float64   `json:"median"`
	Min       float64   `json:"min"`
	Max       float64   `json:"max"`
	Target    string    `json:"target,omitempty"`
	Met       *bool     `json:"met,omitempty"`
}

// target is a figure's goal: below max, in the figure's unit, or at
// least it (atLeast).
type target struct {
	bench, unit string
	max         float64
	text        string
	atLeast     bool
}

// targets are the issues': a no-op reconcile of 1,000 clusters under 2 s
// and within 3x the time of 100 clusters, a commit's status within 1 s
// (p95), opke serve settling 1,000 clusters under 250 MiB.
var targets = []target{
	{"NoopReconcile/clusters=1000", "ns/op", 2e9, "< 2 s", false},
	{"NoopReconcile/clusters=100->1000", "x time", 3, "< 3x", false},
	{"CommitToStatus/fsnotify", "p95-ms", 1000, "p95 < 1 s", false},
	{"CommitToStatus/webhook", "p95-ms", 1000, "p95 < 1 s", false},
	{"ServeRSS/clusters=1000", "peak-rss-MiB", 250, "< 250 MiB", false},
	{"TofuPlan/clusters=100 over NoopReconcile", "x time", 20, ">= 20x", true},
}

// versus adds, for each size both OpenTofu's plan (TofuPlan) and OPKE's
// no-op reconcile were measured at, how many times OPKE's time and API
// calls OpenTofu's are ("x time", "x api-calls/op"), run by run.
func versus(figures []*Figure) []*Figure {
	byName := map[string]*Figure{}
	for _, f := range figures {
		byName[f.Benchmark+" "+f.Unit] = f
	}
	var out []*Figure
	for _, f := range figures {
		size, ok := strings.CutPrefix(f.Benchmark, "TofuPlan/")
		if !ok || (f.Unit != "ns/op" && f.Unit != "api-calls/op") {
			continue
		}
		opke := byName["NoopReconcile/"+size+" "+f.Unit]
		if opke == nil {
			continue
		}
		if g := ratio(f.Benchmark+" over NoopReconcile", f, opke); g != nil {
			out = append(out, g)
		}
	}
	return out
}

// ratio is the figure of a's runs over b's, run by run (nil if none):
// "x time" for durations, "x UNIT" otherwise.
func ratio(name string, a, b *Figure) *Figure {
	g := &Figure{Benchmark: name, Unit: "x " + cmp.Or(map[string]string{"ns/op": "time"}[a.Unit], a.Unit)}
	for j := range min(len(a.Runs), len(b.Runs)) {
		if b.Runs[j] > 0 {
			g.Runs = append(g.Runs, a.Runs[j]/b.Runs[j])
		}
	}
	if len(g.Runs) == 0 {
		return nil
	}
	g.summarise()
	return g
}

// growth adds, for each benchmark measured at several fleet sizes, how
// its time and API calls grow from one size to the next ("x time", "x
// api-calls/op"): run i of the larger fleet over run i of the smaller.
func growth(figures []*Figure) []*Figure {
	type key struct{ base, unit string }
	sizes := map[key][]int{}
	byName := map[string]*Figure{}
	for _, f := range figures {
		base, n, ok := strings.Cut(f.Benchmark, "/clusters=")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || (f.Unit != "ns/op" && f.Unit != "api-calls/op") {
			continue
		}
		k := key{base, f.Unit}
		sizes[k] = append(sizes[k], size)
		byName[f.Benchmark+" "+f.Unit] = f
	}
	var out []*Figure
	for _, f := range figures {
		base, n, ok := strings.Cut(f.Benchmark, "/clusters=")
		small, err := strconv.Atoi(n)
		if !ok || err != nil {
			continue
		}
		k := key{base, f.Unit}
		ss := slices.Sorted(slices.Values(sizes[k]))
		i := slices.Index(ss, small)
		if i < 0 || i+1 >= len(ss) {
			continue
		}
		big := byName[fmt.Sprintf("%s/clusters=%d %s", base, ss[i+1], f.Unit)]
		if g := ratio(fmt.Sprintf("%s/clusters=%d->%d", base, small, ss[i+1]), big, f); g != nil {
			out = append(out, g)
		}
	}
	return out
}

func main() {
	count := flag.Int("count", 5, "runs of each benchmark")
	bench := flag.String("bench", ".", "benchmarks to run (a go test -bench regexp)")
	skip := flag.String("skip", "", "benchmarks not to run (a go test -skip regexp)")
	jsonOut := flag.String("json", "", "write the figures as JSON to this file")
	pkgs := flag.String("pkgs", "./bench ./render ./schemas", "packages whose benchmarks run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	args := []string{"test", "-run", "^$", "-bench", *bench, "-benchtime", "1x", "-count", strconv.Itoa(*count), "-timeout", "60m"}
	if *skip != "" {
		args = append(args, "-skip", *skip)
	}
	if err := run(ctx, append(args, strings.Fields(*pkgs)...), *jsonOut, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run runs go with args and prints the figures of its benchmarks.
func run(ctx context.Context, args []string, jsonOut string, w io.Writer) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "go %s\n", strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return err
	}
	// The raw lines go to stderr as they come: progress on a long run.
	figures, perr := parse(io.TeeReader(out, os.Stderr))
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("go test: %w", err)
	}
	if perr != nil {
		return perr
	}
	if len(figures) == 0 {
		return errors.New("no benchmark ran")
	}
	print(w, figures)
	if jsonOut != "" {
		data, err := json.MarshalIndent(figures, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(jsonOut, append(data, '\n'), 0o644)
	}
	return nil
}

// benchLine is a benchmark result: name-procs, iterations, then value
// and unit pairs.
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// parse reads go test's output into figures, in the order first seen.
func parse(r io.Reader) ([]*Figure, error) {
	var out []*Figure
	byKey := map[string]*Figure{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		fields := strings.Fields(m[3])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark %s: value %q: %w", m[1], fields[i], err)
			}
			unit := fields[i+1]
			key := m[1] + " " + unit
			f := byKey[key]
			if f == nil {
				f = &Figure{Benchmark: m[1], Unit: unit}
				byKey[key] = f
				out = append(out, f)
			}
			f.Runs = append(f.Runs, v)
		}
	}
	for _, f := range out {
		f.summarise()
	}
	return slices.Concat(out, growth(out), versus(out)), sc.Err()
}

func (f *Figure) summarise() {
	s := slices.Clone(f.Runs)
	slices.Sort(s)
	f.Min, f.Max = s[0], s[len(s)-1]
	if n := len(s); n%2 == 1 {
		f.Median = s[n/2]
	} else {
		f.Median = (s[n/2-1] + s[n/2]) / 2
	}
	for _, t := range targets {
		if t.bench == f.Benchmark && t.unit == f.Unit {
			met := f.Median < t.max
			if t.atLeast {
				met = f.Median >= t.max
			}
			f.Target, f.Met = t.text, &met
		}
	}
}

// print writes the table: time in human units, the rest as measured;
// B/op and allocs/op are left to the JSON.
func print(w io.Writer, figures []*Figure) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tfigure\tmedian\tspread (min-max)\truns\ttarget")
	for _, f := range figures {
		if f.Unit == "B/op" || f.Unit == "allocs/op" {
			continue
		}
		tgt := ""
		if f.Met != nil {
			tgt = f.Target + map[bool]string{true: " met", false: " MISSED"}[*f.Met]
		}
		unit := cmp.Or(map[string]string{"ns/op": "time"}[f.Unit], f.Unit)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s - %s\t%d\t%s\n", f.Benchmark, unit, human(f.Unit, f.Median), human(f.Unit, f.Min), human(f.Unit, f.Max), len(f.Runs), tgt)
	}
	tw.Flush()
}

// human prints a value: durations (ns/op) in their unit, counts plain.
func human(unit string, v float64) string {
	if unit != "ns/op" {
		if v == float64(int64(v)) {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2f s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1f ms", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f µs", v/1e3)
	}
	return fmt.Sprintf("%.0f ns", v)
}

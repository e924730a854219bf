//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdEnv, set to "DIR CLIENT PEER", makes this test binary an etcd: a
// process of its own that a scenario can kill -9 and start again on the
// same data and addresses.
const etcdEnv = "OPKE_CHAOS_ETCD"

func TestMain(m *testing.M) {
	if v := os.Getenv(etcdEnv); v != "" {
		os.Exit(runEtcd(v))
	}
	code := m.Run()
	if len(results.rows) > 0 {
		printTable(os.Stdout)
		if file := os.Getenv("OPKE_CHAOS_JSON"); file != "" {
			if err := writeJSON(file); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
	}
	os.Exit(code)
}

// runEtcd runs a single-member etcd until SIGTERM.
func runEtcd(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "%s: want DIR CLIENT PEER, got %q\n", etcdEnv, spec)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Dir, cfg.Name = f[0], "chaos"
	client, peer := url.URL{Scheme: "http", Host: f[1]}, url.URL{Scheme: "http", Host: f[2]}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ListenMetricsUrls = nil
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("etcd ready on", f[1])
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	select {
	case <-ctx.Done():
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	e.Close()
	return 0
}

// outcome is what one run of a scenario found.
type outcome struct {
	// Converged: the commit's status is success and a plan made from
	// outside wants nothing.
	Converged bool
	// Duplicates are resources the cloud holds more of than a clean run
	// made; Orphans, resources a clean run did not make at all.
	Duplicates, Orphans int
	// Lost are records missing or wrong: ledger records naming nothing in
	// the cloud, owned resources no record names, commits without their
	// final report in the store or their note on the remote.
	Lost int
	// Reported: the daemon said what happened (the scenario says how).
	Reported bool
	// Overlaps are writes to the cloud by a daemon after another one had
	// started writing: two daemons both applied.
	Overlaps int
	// Hit: the fault struck while the apply was under way.
	Hit bool
	// Recovery is the time from the end of the fault to convergence.
	Recovery time.Duration
}

// row is a scenario's line of the table.
type row struct {
	Scenario   string  `json:"scenario"`
	Runs       int     `json:"runs"`
	Converged  int     `json:"converged"`
	Duplicates int     `json:"duplicates"`
	Orphans    int     `json:"orphans"`
	Lost       int     `json:"lostRecords"`
	Reported   int     `json:"reported"`
	Overlaps   int     `json:"overlaps"`
	Hit        int     `json:"hitMidApply"`
	Recovery   float64 `json:"medianRecoverySeconds"`
	recoveries []float64
}

var results = struct {
	mu   sync.Mutex
	rows map[string]*row
}{rows: map[string]*row{}}

// order is the table's order of the scenarios; the others follow by name.
var order = []string{scenarioKillCreate, scenarioKillUpgrade, scenarioKillRemedy, scenarioKillRotate, scenarioKillReboots, scenarioEtcd, scenarioCloudDown, scenarioGit, scenarioAPIErrors, scenarioTwoDaemons}

// scenarios are the recorded scenarios in the table's order; the caller
// holds results.mu.
func scenarios() []string {
	var out []string
	for _, name := range order {
		if results.rows[name] != nil {
			out = append(out, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(results.rows)) {
		if !slices.Contains(order, name) {
			out = append(out, name)
		}
	}
	return out
}

// record adds a run's outcome to its scenario's row.
func record(scenario string, o outcome) {
	results.mu.Lock()
	defer results.mu.Unlock()
	r := results.rows[scenario]
	if r == nil {
		r = &row{Scenario: scenario}
		results.rows[scenario] = r
	}
	r.Runs++
	r.Duplicates += o.Duplicates
	r.Orphans += o.Orphans
	r.Lost += o.Lost
	r.Overlaps += o.Overlaps
	for _, b := range []struct {
		ok bool
		n  *int
	}{{o.Converged, &r.Converged}, {o.Reported, &r.Reported}, {o.Hit, &r.Hit}} {
		if b.ok {
			*b.n++
		}
	}
	if o.Converged {
		r.recoveries = append(r.recoveries, o.Recovery.Seconds())
		slices.Sort(r.recoveries)
		r.Recovery = r.recoveries[len(r.recoveries)/2]
	}
}

func printTable(w io.Writer) {
	results.mu.Lock()
	defer results.mu.Unlock()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "scenario\truns\tconverged\tduplicates\torphans\tlost records\treported\toverlaps\thit mid-apply\tmedian recovery\t")
	for _, name := range scenarios() {
		r := results.rows[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.Scenario, r.Runs, r.Converged, r.Duplicates,
			r.Orphans, r.Lost, r.Reported, r.Overlaps, r.Hit, strconv.FormatFloat(r.Recovery, 'f', 1, 64)+" s")
	}
	tw.Flush()
}

func writeJSON(file string) error {
	results.mu.Lock()
	defer results.mu.Unlock()
	rows := make([]*row, 0, len(results.rows))
	for _, name := range scenarios() {
		rows = append(rows, results.rows[name])
	}
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

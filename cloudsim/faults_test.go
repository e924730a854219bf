package cloudsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
)

func TestFaultStatusWithRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	e.sim.SetFaults(Fault{Match: "GET /network/v2.0/networks", Status: http.StatusServiceUnavailable, RetryAfter: 7, Count: 1})
	_, err := networks.List(e.user.network, nil).AllPages(ctx)
	var unexpected gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &unexpected) || unexpected.Actual != http.StatusServiceUnavailable || unexpected.ResponseHeader.Get("Retry-After") != "7" {
		t.Fatalf("faulted request: %v, want 503 with Retry-After: 7", err)
	}
	if _, err := networks.List(e.user.network, nil).AllPages(ctx); err != nil {
		t.Fatalf("the fault had count 1; the next request: %v", err)
	}
	if got := e.sim.Counters()["GET /network/v2.0/networks"]; got != 2 {
		t.Errorf("counter: %d, want 2", got)
	}
	if e.sim.Busy() <= 0 {
		t.Errorf("busy %s after two requests, want more than nothing", e.sim.Busy())
	}
	e.sim.ResetCounters()
	if n, busy := len(e.sim.Counters()), e.sim.Busy(); n != 0 || busy != 0 {
		t.Errorf("after a reset: %d counters, busy %s; want none", n, busy)
	}
}

// TestFaultDropAfterProcessing is the case that makes naive clients create
// duplicates: the server is created, the response never arrives.
func TestFaultDropAfterProcessing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	net := makeTenantNet(t, e.user, "prod", "192.168.20.0/24")
	e.sim.SetFaults(Fault{Match: "POST /compute/v2.1/servers", Drop: true, Count: 1})
	_, err := servers.Create(ctx, e.user.compute, servers.CreateOpts{Name: "prod-worker-0", FlavorRef: "2",
		ImageRef: imageID(t, e.user, "flatcar"), Networks: []servers.Network{{UUID: net.network}}}, nil).Extract()
	if err == nil {
		t.Fatal("create answered although the connection was dropped")
	}
	pages, err := servers.List(e.user.compute, servers.ListOpts{Name: "^prod-worker-0$"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := servers.ExtractServers(pages); len(list) != 1 {
		t.Fatalf("servers after a dropped create: %d, want the one that was created", len(list))
	}
}

func TestFaultLatencyAndAdminEndpoint(t *testing.T) {
	t.Parallel()
	e := startEnv(t, Options{})
	body, _ := json.Marshal([]Fault{{Match: "GET /compute/v2.1/flavors", Latency: Duration{50 * time.Millisecond}}})
	req, _ := http.NewRequest(http.MethodPut, e.sim.AdminURL()+"/faults", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /faults: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := e.sim.Faults(); len(got) != 1 || got[0].Latency.Duration != 50*time.Millisecond {
		t.Fatalf("faults after PUT: %+v", got)
	}
	start := time.Now()
	req, _ = http.NewRequest(http.MethodGet, e.sim.URL()+"/compute/v2.1/flavors", nil)
	req.Header.Set("X-Auth-Token", e.user.provider.Token())
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("request took %s, want the injected 50ms at least", d)
	}
	resp, err = http.Get(e.sim.AdminURL() + "/counters")
	if err != nil {
		t.Fatal(err)
	}
	var counts struct {
		Counts map[string]int64 `json:"counts"`
		Total  int64            `json:"total"`
	}
	err = json.NewDecoder(resp.Body).Decode(&counts)
	resp.Body.Close()
	if err != nil || counts.Counts["GET /compute/v2.1/flavors"] != 1 || counts.Total < 3 {
		t.Errorf("admin counters: %+v %v", counts, err)
	}
}

func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	first, err := Start(ctx, Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{sim: first, dir: dir}
	e.user = e.connect(t, "sim")
	net := makeTenantNet(t, e.user, "prod", "192.168.20.0/24")
	sv, err := servers.Create(ctx, e.user.compute, servers.CreateOpts{Name: "prod-controller-0", FlavorRef: "3",
		ImageRef: imageID(t, e.user, "flatcar"), Networks: []servers.Network{{UUID: net.network}}, Tags: []string{"opke-cluster=prod"}}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second, err := Start(ctx, Options{StateDir: dir})
	if err != nil {
		t.Fatalf("restart on the same state dir: %v", err)
	}
	defer second.Close()
	e2 := &env{sim: second, dir: dir}
	e2.user = e2.connect(t, "sim") // clouds.yaml was rewritten with the new port
	got, err := servers.Get(ctx, e2.user.compute, sv.ID).Extract()
	if err != nil {
		t.Fatalf("server after restart: %v", err)
	}
	if got.Status != "ACTIVE" || got.Tags == nil || len(*got.Tags) != 1 || (*got.Tags)[0] != "opke-cluster=prod" {
		t.Errorf("server after restart: %s %v", got.Status, got.Tags)
	}
	if _, err := networks.Get(ctx, e2.user.network, net.network).Extract(); err != nil {
		t.Errorf("network after restart: %v", err)
	}
}

// seedServers puts n servers of one project straight into the state, as a
// benchmark seeds a fleet.
func seedServers(s *Sim, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.w
	now := s.opts.Now()
	for i := range n {
		sv := &server{meta: w.meta(now), Seq: w.next(), ID: newID(), Name: fmt.Sprintf("c%04d-worker-%d", i/6, i%6), ProjectID: w.DemoProject,
			UserID: w.DemoUser, FlavorID: "2", ImageID: firstKey(w.Images), Status: "ACTIVE", Host: w.Hypervisors[i%len(w.Hypervisors)],
			AZ: "nova", Tags: []string{"opke-owner=x", fmt.Sprintf("opke-cluster=c%04d", i/6)}, SecurityGroups: []string{"default"}}
		w.Servers[sv.ID] = sv
	}
}

func firstKey[V any](m map[string]V) string {
	for k := range m {
		return k
	}
	return ""
}

func TestListTenThousandServersInPages(t *testing.T) {
	t.Parallel()
	e := startEnv(t, Options{})
	seedServers(e.sim, 10_000)
	e.sim.ResetCounters()
	pages, err := servers.List(e.user.compute, servers.ListOpts{Tags: "opke-owner=x", Limit: 1000}).AllPages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	list, _ := servers.ExtractServers(pages)
	seen := map[string]bool{}
	for _, s := range list {
		seen[s.ID] = true
	}
	if len(list) != 10_000 || len(seen) != 10_000 {
		t.Fatalf("listed %d servers (%d distinct), want 10000", len(list), len(seen))
	}
	if got := e.sim.Counters()["GET /compute/v2.1/servers/detail"]; got != 10 {
		t.Errorf("pages fetched: %d, want 10", got)
	}
}

// BenchmarkListServers measures the simulator's share of listing n servers
// in pages of 1,000: raw HTTP pages, followed by their next links, read but
// not decoded. BenchmarkListServersGophercloud adds the client's decoding.
func BenchmarkListServers(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			e := startBenchEnv(b)
			seedServers(e.sim, n)
			for b.Loop() {
				if pages := rawPages(b, e, e.sim.URL()+"/compute/v2.1/servers/detail?limit=1000&tags=opke-owner%3Dx"); pages != n/1000 {
					b.Fatalf("%d pages", pages)
				}
			}
		})
	}
}

// rawPages follows servers_links from url and counts the pages.
func rawPages(b *testing.B, e *env, url string) int {
	pages := 0
	for url != "" {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Auth-Token", e.user.provider.Token())
		req.Header.Set("X-OpenStack-Nova-API-Version", "2.79")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var page struct {
			Links []struct {
				Href string `json:"href"`
			} `json:"servers_links"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		pages++
		url = ""
		if len(page.Links) > 0 {
			url = page.Links[0].Href
		}
	}
	return pages
}

func BenchmarkListServersGophercloud(b *testing.B) {
	e := startBenchEnv(b)
	seedServers(e.sim, 10_000)
	for b.Loop() {
		pages, err := servers.List(e.user.compute, servers.ListOpts{Tags: "opke-owner=x", Limit: 1000}).AllPages(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if list, _ := servers.ExtractServers(pages); len(list) != 10_000 {
			b.Fatalf("listed %d", len(list))
		}
	}
}

// BenchmarkMemoryPerServer reports the heap the simulator's state holds
// per server, measured on the state alone.
func BenchmarkMemoryPerServer(b *testing.B) {
	const n = 20_000
	for b.Loop() {
		s := &Sim{opts: Options{Now: time.Now}, w: seedWorld(time.Now(), 8)}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		seedServers(s, n)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/server")
		runtime.KeepAlive(s)
	}
}

func startBenchEnv(b *testing.B) *env {
	b.Helper()
	s, err := Start(context.Background(), Options{StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	e := &env{sim: s, dir: s.opts.StateDir}
	e.user = e.connect(b, "sim")
	return e
}

// TestListingPagesFollowAChange: the matches a listing's first page
// sorted are kept for its next pages only until the world changes: a
// tag added between two listings shows in the second.
func TestListingPagesFollowAChange(t *testing.T) {
	t.Parallel()
	e := startEnv(t, Options{})
	seedServers(e.sim, 2_500)
	count := func(tag string) int {
		pages, err := servers.List(e.user.compute, servers.ListOpts{Tags: tag, Limit: 1000}).AllPages(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		list, _ := servers.ExtractServers(pages)
		seen := map[string]bool{}
		for _, s := range list {
			seen[s.ID] = true
		}
		if len(seen) != len(list) {
			t.Fatalf("%d servers listed, %d distinct", len(list), len(seen))
		}
		return len(list)
	}
	if n := count("opke-owner=x"); n != 2_500 {
		t.Fatalf("listed %d servers, want 2500", n)
	}
	if n := count("extra"); n != 0 {
		t.Fatalf("listed %d servers tagged extra, want none", n)
	}
	pages, err := servers.List(e.user.compute, servers.ListOpts{Tags: "opke-owner=x", Limit: 1}).AllPages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	one, _ := servers.ExtractServers(pages)
	req, _ := http.NewRequest(http.MethodPut, e.sim.URL()+"/compute/v2.1/servers/"+one[0].ID+"/tags/extra", nil)
	req.Header.Set("X-Auth-Token", e.user.provider.Token())
	req.Header.Set("X-OpenStack-Nova-API-Version", "2.79")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("PUT tag: %s", resp.Status)
	}
	if n := count("extra"); n != 1 {
		t.Errorf("listed %d servers tagged extra after the tag was added, want 1", n)
	}
}

// TestSeededFaultRepeats: a fault with a Seed hits the same requests of a
// sequence on every run, at about its Rate; faults with different seeds
// hit differently.
func TestSeededFaultRepeats(t *testing.T) {
	t.Parallel()
	hits := func(seed uint64) []int {
		s := &Sim{faults: &faultSet{}}
		s.SetFaults(Fault{Match: "POST", Rate: 0.33, Seed: seed})
		var out []int
		for i := range 300 {
			if s.faults.match("POST /compute/v2.1/servers") != nil {
				out = append(out, i)
			}
		}
		return out
	}
	first, again, other := hits(1), hits(1), hits(2)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("the same seed hit other requests (-first +again):\n%s", diff)
	}
	if n := len(first); n < 60 || n > 140 {
		t.Errorf("%d of 300 requests hit at rate 0.33", n)
	}
	if cmp.Equal(first, other) {
		t.Errorf("seeds 1 and 2 hit the same requests: %v", first)
	}
}

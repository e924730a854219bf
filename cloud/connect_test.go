package cloud_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"

	"opke.dev/opke/cloud"
	"opke.dev/opke/internal/cloudtest"
)

const issueToken = "POST /identity/v3/auth/tokens"

// TestPoolReusesTokensUntilNearExpiry: a pooled connection authenticates
// once, is reused, and renews its token ahead of the expiry.
func TestPoolReusesTokensUntilNearExpiry(t *testing.T) {
	t.Parallel()
	sim, _, dir := cloudtest.Start(t)
	ctx := context.Background()
	now := time.Now()
	pool := &cloud.Pool{File: filepath.Join(dir, "clouds.yaml"), RenewBefore: 5 * time.Minute, Now: func() time.Time { return now }}
	sim.ResetCounters()
	first, err := pool.Clients(ctx, "sim", "")
	if err != nil {
		t.Fatal(err)
	}
	exp := first.TokenExpiry()
	if exp.IsZero() {
		t.Fatal("no token expiry")
	}
	for range 3 {
		again, err := pool.Clients(ctx, "sim", "")
		if err != nil || again != first {
			t.Fatalf("second call: %p, %v; want the pooled %p", again, err, first)
		}
	}
	if n := sim.Counters()[issueToken]; n != 1 {
		t.Errorf("%d tokens issued for four calls, want 1", n)
	}
	token := first.Provider.Token()
	now = exp.Add(-time.Minute)
	if _, err := pool.Clients(ctx, "sim", ""); err != nil {
		t.Fatal(err)
	}
	if n := sim.Counters()[issueToken]; n != 2 {
		t.Errorf("%d tokens issued after nearing expiry, want 2", n)
	}
	if first.Provider.Token() == token {
		t.Error("the token was not renewed")
	}
}

func TestPoolNamesAnUnknownCloud(t *testing.T) {
	t.Parallel()
	_, _, dir := cloudtest.Start(t)
	pool := &cloud.Pool{File: filepath.Join(dir, "clouds.yaml")}
	_, err := pool.Clients(context.Background(), "nowhere", "")
	if err == nil {
		t.Fatal("no error for a cloud clouds.yaml lacks")
	}
	if got := err.Error(); !strings.Contains(got, "cloud nowhere") {
		t.Errorf("error %q does not name the cloud", got)
	}
}

// TestBudgetLimitsRequests: a cloud's requests wait for its token bucket.
func TestBudgetLimitsRequests(t *testing.T) {
	t.Parallel()
	_, _, dir := cloudtest.Start(t)
	ctx := context.Background()
	c, err := cloud.Connect(ctx, cloud.Target{File: filepath.Join(dir, "clouds.yaml"), Cloud: "sim", Budget: cloud.Budget{Rate: 50, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 2 {
		if _, err := cloud.Observe(ctx, c, "nobody", nil); err != nil {
			t.Fatal(err)
		}
	}
	// Two observations of 15 requests at 50 per second: at least 0.58 s
	// (a lower bound: a slow machine cannot fail it).
	if took := time.Since(start); took < 580*time.Millisecond {
		t.Errorf("30 requests at 50/s took %v: the budget did not hold them back", took)
	}
}

// TestPoolCountsRequestsByService: OnRequest is told each request's
// service, as the simulator counted them.
func TestPoolCountsRequestsByService(t *testing.T) {
	t.Parallel()
	sim, _, dir := cloudtest.Start(t)
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]int{}
	pool := &cloud.Pool{File: filepath.Join(dir, "clouds.yaml"), OnRequest: func(svc string) {
		mu.Lock()
		got[svc]++
		mu.Unlock()
	}}
	sim.ResetCounters()
	c, err := pool.Clients(ctx, "sim", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cloud.Observe(ctx, c, "nobody", nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for route, n := range sim.Counters() {
		svc := strings.Split(strings.TrimPrefix(strings.SplitN(route, " ", 2)[1], "/"), "/")[0]
		want[map[string]string{"identity": "identity", "compute": "compute", "network": "network", "image": "image",
			"load-balancer": "load-balancer", "object-store": "object-store"}[svc]] += int(n)
	}
	mu.Lock()
	defer mu.Unlock()
	// Version discovery (GET of Keystone's root) is not a counted route.
	if got["identity"] < want["identity"] {
		t.Errorf("%d identity requests, the simulator counted %d", got["identity"], want["identity"])
	}
	got["identity"], want["identity"] = 0, 0
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests by service (-simulator +OnRequest):\n%s", diff)
	}
	if got["compute"] == 0 || got["network"] == 0 {
		t.Errorf("requests by service: %v", got)
	}
}

// TestFenceRefusesWritesOfALostLease: a write whose context's fence fails
// is never sent (the simulator logs no write, nothing is created) and is
// not tried again; reads pass; once the fence holds, the write goes out,
// naming the sender in its User-Agent.
func TestFenceRefusesWritesOfALostLease(t *testing.T) {
	t.Parallel()
	sim, _, dir := cloudtest.Start(t)
	ctx := context.Background()
	pool := &cloud.Pool{File: filepath.Join(dir, "clouds.yaml"), UserAgent: "opke/test daemon/a-1"}
	c, err := pool.Clients(ctx, "sim", "")
	if err != nil {
		t.Fatal(err)
	}
	lost := errors.New("lease lost")
	var checks int
	held := true
	fenced := cloud.WithFence(ctx, func(context.Context) error {
		checks++
		if held {
			return nil
		}
		return lost
	})
	sim.ResetCounters()
	held = false
	_, err = networks.Create(fenced, c.Network, networks.CreateOpts{Name: "fenced"}).Extract()
	if !errors.Is(err, cloud.ErrFenced) || !errors.Is(err, lost) {
		t.Fatalf("a fenced create: %v, want ErrFenced and the fence's error", err)
	}
	if checks != 1 {
		t.Errorf("the fence was asked %d times, want once (a fenced write is not tried again)", checks)
	}
	if w := sim.Writes(); len(w) != 0 {
		t.Errorf("the simulator saw writes from a fenced writer: %+v", w)
	}
	if _, err := networks.List(c.Network, nil).AllPages(fenced); err != nil {
		t.Errorf("a fenced read: %v, want it to pass", err)
	}
	if checks != 1 {
		t.Errorf("a read asked the fence (%d checks)", checks)
	}
	held = true
	if _, err := networks.Create(fenced, c.Network, networks.CreateOpts{Name: "fenced"}).Extract(); err != nil {
		t.Fatalf("a create once the fence holds: %v", err)
	}
	w := sim.Writes()
	if len(w) != 1 || w[0].Route != "POST /network/v2.0/networks" || !strings.HasPrefix(w[0].Agent, "opke/test daemon/a-1 gophercloud/") {
		t.Errorf("write log %+v, want one network create by opke/test daemon/a-1 (gophercloud)", w)
	}
}

// TestAuthURLForHosts: cloud.conf's auth_url is where the cluster's hosts
// reach Keystone: clouds.yaml's auth_url when OPKE uses the public
// endpoints; the catalog's public identity endpoint (its v3) when OPKE
// uses the internal or admin ones, as from a management network. Nothing
// is sent to the public address.
func TestAuthURLForHosts(t *testing.T) {
	t.Parallel()
	const elsewhere = "https://keystone.example.test:5000"
	var (
		srv *httptest.Server
		mu  sync.Mutex
		pub string // the catalog's public base
	)
	srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodPost || r.URL.Path != "/identity/v3/auth/tokens" {
			// A service's versions document, as gophercloud discovers it.
			svc := strings.Trim(r.URL.Path, "/")
			id, ok := map[string]string{"compute": "v2.1", "object-store": "v1.0"}[svc]
			if !ok {
				id = "v2.0"
			}
			_ = json.NewEncoder(rw).Encode(map[string]any{"versions": []any{map[string]any{"id": id, "status": "CURRENT",
				"links": []any{map[string]any{"rel": "self", "href": srv.URL + r.URL.Path}}}}})
			return
		}
		mu.Lock()
		public := pub
		mu.Unlock()
		var catalog []any
		for _, svc := range []string{"identity", "compute", "network", "image", "load-balancer", "object-store"} {
			eps := []any{map[string]any{"interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": public + "/" + svc}}
			if svc == "identity" {
				eps[0].(map[string]any)["url"] = public // versionless, as Keystone's often is
			}
			for _, iface := range []string{"internal", "admin"} {
				eps = append(eps, map[string]any{"interface": iface, "region": "RegionOne", "region_id": "RegionOne", "url": srv.URL + "/" + svc})
			}
			catalog = append(catalog, map[string]any{"type": svc, "name": svc, "endpoints": eps})
		}
		rw.Header().Set("X-Subject-Token", "t0ken")
		rw.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(rw).Encode(map[string]any{"token": map[string]any{
			"expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "catalog": catalog,
			"user":    map[string]any{"id": "u1", "name": "demo", "domain": map[string]any{"id": "default", "name": "Default"}},
			"project": map[string]any{"id": "p1", "name": "demo", "domain": map[string]any{"id": "default", "name": "Default"}}}})
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ iface, public, want string }{
		{"public", srv.URL, srv.URL + "/identity/v3"},
		{"internal", elsewhere, elsewhere + "/v3"},
		{"admin", elsewhere, elsewhere + "/v3"},
	} {
		t.Run(tc.iface, func(t *testing.T) {
			mu.Lock()
			pub = tc.public
			mu.Unlock()
			file := filepath.Join(t.TempDir(), "clouds.yaml")
			yaml := fmt.Sprintf("clouds:\n  c:\n    auth:\n      auth_url: %s/identity/v3\n      username: demo\n      password: secret\n      project_name: demo\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n    interface: %s\n", srv.URL, tc.iface)
			if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := cloud.Connect(t.Context(), cloud.Target{File: file, Cloud: "c"})
			if err != nil {
				t.Fatal(err)
			}
			if c.AuthURL != tc.want {
				t.Errorf("AuthURL %q, want %q", c.AuthURL, tc.want)
			}
		})
	}
}

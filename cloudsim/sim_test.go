package cloudsim

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
)

// clock is a test clock that only moves when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// env is a running simulator with gophercloud clients for its two clouds.
type env struct {
	sim   *Sim
	clock *clock
	dir   string
	user  *clients
	admin *clients
}

type clients struct {
	provider                           *gophercloud.ProviderClient
	compute, network, image, lb, swift *gophercloud.ServiceClient
	identity, volume                   *gophercloud.ServiceClient
}

func startEnv(t *testing.T, opts Options) *env {
	t.Helper()
	ck := newClock()
	if opts.Now == nil {
		opts.Now = ck.Now
	}
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	return envOf(t, startSim(t, opts), ck, opts.StateDir)
}

// startSim starts a simulator that stops with the test.
func startSim(t *testing.T, opts Options) *Sim {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// envOf is the test's view of s: clients of both clouds of the
// clouds.yaml in dir.
func envOf(t *testing.T, s *Sim, ck *clock, dir string) *env {
	t.Helper()
	e := &env{sim: s, clock: ck, dir: dir}
	e.user = e.connect(t, "sim")
	e.admin = e.connect(t, "sim-admin")
	return e
}

// restart stops the simulator and starts it again from its state dir,
// with clients of the new one.
func (e *env) restart(t *testing.T) {
	t.Helper()
	if err := e.sim.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Start(context.Background(), Options{StateDir: e.dir, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Close() })
	e.sim = again
	e.user, e.admin = e.connect(t, "sim"), e.connect(t, "sim-admin")
}

// connect authenticates as a cloud of the clouds.yaml opke sim wrote.
func (e *env) connect(t testing.TB, cloud string) *clients {
	t.Helper()
	ctx := context.Background()
	ao, eo, _, err := clouds.Parse(clouds.WithCloudName(cloud), clouds.WithLocations(filepath.Join(e.dir, "clouds.yaml")))
	if err != nil {
		t.Fatalf("parse clouds.yaml: %v", err)
	}
	ao.AllowReauth = true
	pc, err := config.NewProviderClient(ctx, ao)
	if err != nil {
		t.Fatalf("authenticate as %s: %v", cloud, err)
	}
	c := &clients{provider: pc}
	must := func(sc *gophercloud.ServiceClient, err error) *gophercloud.ServiceClient {
		t.Helper()
		if err != nil {
			t.Fatalf("service client: %v", err)
		}
		return sc
	}
	c.compute = must(openstack.NewComputeV2(pc, eo))
	c.compute.Microversion = "2.79"
	c.network = must(openstack.NewNetworkV2(pc, eo))
	c.image = must(openstack.NewImageV2(pc, eo))
	c.lb = must(openstack.NewLoadBalancerV2(pc, eo))
	c.swift = must(openstack.NewObjectStorageV1(pc, eo))
	c.identity = must(openstack.NewIdentityV3(pc, eo))
	c.volume = must(openstack.NewBlockStorageV3(pc, eo))
	return c
}

func TestStartRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", "10.0.0.1:5000", ":0"} {
		for name, opts := range map[string]Options{"api": {Listen: addr}, "admin": {AdminListen: addr}, "edge": {EdgeListen: addr}} {
			if _, err := Start(context.Background(), opts); !errors.Is(err, ErrNotLoopback) {
				t.Errorf("Start(%s %q) = %v, want ErrNotLoopback", name, addr, err)
			}
		}
	}
}

func TestClientFiles(t *testing.T) {
	t.Parallel()
	e := startEnv(t, Options{})
	info, err := os.ReadFile(filepath.Join(e.dir, "sim.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"admin": "` + e.sim.AdminURL() + `"`, `"edge": "` + e.sim.Edge() + `"`, `"auth_url": "` + e.sim.AuthURL() + `"`} {
		if !strings.Contains(string(info), want) {
			t.Errorf("sim.json lacks %s:\n%s", want, info)
		}
	}
	st, err := os.Stat(filepath.Join(e.dir, "clouds.yaml"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("clouds.yaml holds passwords: want mode 0600, got %v (%v)", st.Mode(), err)
	}
	resp, err := http.Get(e.sim.AdminURL() + "/counters")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin /counters: %s", resp.Status)
	}
}

// inspect reads the simulator's state under its lock.
func inspect[T any](s *Sim, f func(*world) T) T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f(s.w)
}

package cloudtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
)

// The contract suites (tests named TestContract*) run against the
// simulator in `make test` and against the real control plane that
// `make conformance` starts, which names it with these variables.
const (
	// EnvClouds is the clouds.yaml of the real cloud; unset: the simulator.
	EnvClouds = "OPKE_CONFORMANCE_CLOUDS"
	// EnvCloud is the cloud of a member of the project (default "demo").
	EnvCloud = "OPKE_CONFORMANCE_CLOUD"
	// EnvAdminCloud is the cloud of an admin (default "admin").
	EnvAdminCloud = "OPKE_CONFORMANCE_ADMIN_CLOUD"
)

// Target is the cloud a contract test runs against.
type Target struct {
	// Clients are a member's of the project; Admin an admin's.
	Clients, Admin *cloud.Clients
	// File is the clouds.yaml; Cloud and AdminCloud its entries.
	File, Cloud, AdminCloud string
	// Sim is the simulator, nil against a real cloud.
	Sim *cloudsim.Sim
	// Owner is fresh for every test: what it tags resources with, so tests
	// sharing a real cloud never see each other's.
	Owner string
}

// Real says whether the target is a real cloud.
func (t *Target) Real() bool { return t.Sim == nil }

// Name says which cloud it is, for logs.
func (t *Target) Name() string {
	if t.Real() {
		return "the real cloud at " + t.Clients.AuthURL
	}
	return "the simulator at " + t.Sim.URL()
}

// RealCloud says whether the contract suites run against a real cloud.
func RealCloud() bool { return os.Getenv(EnvClouds) != "" }

// Contract returns the target of a contract test: a fresh simulator, or
// the real cloud named by EnvClouds. Against a real cloud, everything
// tagged with the test's owner is deleted when it ends.
func Contract(tb testing.TB) *Target {
	tb.Helper()
	ctx := context.Background()
	t := &Target{Owner: "ct-" + randomHex(6)}
	if file := os.Getenv(EnvClouds); file != "" {
		t.File, t.Cloud, t.AdminCloud = file, envOr(EnvCloud, "demo"), envOr(EnvAdminCloud, "admin")
	} else {
		var dir string
		// As many hypervisors as the conformance cloud has compute hosts.
		t.Sim, t.Clients, dir = StartWith(tb, cloudsim.Options{Hypervisors: 3})
		t.File, t.Cloud, t.AdminCloud = filepath.Join(dir, "clouds.yaml"), "sim", "sim-admin"
	}
	var err error
	if t.Clients == nil {
		if t.Clients, err = cloud.Connect(ctx, cloud.Target{File: t.File, Cloud: t.Cloud, Budget: cloud.Unlimited()}); err != nil {
			tb.Fatalf("connect to %s: %v", t.Cloud, err)
		}
	}
	if t.Admin, err = cloud.Connect(ctx, cloud.Target{File: t.File, Cloud: t.AdminCloud, Budget: cloud.Unlimited()}); err != nil {
		tb.Fatalf("connect to %s: %v", t.AdminCloud, err)
	}
	tb.Logf("contract target: %s (owner %s)", t.Name(), t.Owner)
	if t.Real() {
		tb.Cleanup(func() {
			if err := Purge(context.Background(), t.Clients, t.Owner); err != nil {
				tb.Errorf("purge what %s left: %v", t.Owner, err)
			}
		})
	}
	return t
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// purgeOrder deletes dependents first: listeners and the rest go with
// their load balancer (a cascade delete), floating IPs before the ports
// they hold, servers before their ports and groups, ports and interfaces
// before subnets and routers.
var purgeOrder = []diff.Kind{
	diff.KindLoadBalancer, diff.KindFloatingIP, diff.KindServer, diff.KindServerGroup, diff.KindPort,
	diff.KindInterface, diff.KindRouter, diff.KindRule, diff.KindSecurityGroup, diff.KindSubnet, diff.KindNetwork,
	diff.KindAppCredential,
}

// Purge deletes every resource tagged with owner, for a test that shares
// a real cloud with others. A delete the cloud refuses for now (a 409 of
// a port still being released) is tried again for up to a minute.
func Purge(ctx context.Context, c *cloud.Clients, owner string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		obs, err := cloud.Observe(ctx, c, owner, nil)
		if err != nil {
			return err
		}
		n := 0
		for _, rs := range obs.Clusters {
			n += len(rs)
		}
		if n == 0 {
			return nil
		}
		var failed error
		for cluster, rs := range obs.Clusters {
			a := cloud.NewApplier(c, owner, cluster, rs)
			for _, kind := range purgeOrder {
				for _, r := range rs {
					if r.Kind != kind {
						continue
					}
					if err := a.Delete(ctx, r); err != nil {
						failed = errors.Join(failed, err)
					}
				}
			}
		}
		if failed == nil {
			continue
		}
		if !gophercloud.ResponseCodeIs(failed, http.StatusConflict) || time.Now().After(deadline) {
			return failed
		}
		time.Sleep(time.Second)
	}
}

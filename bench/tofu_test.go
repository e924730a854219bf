package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/world"
)

// The peer OPKE is measured beside: OpenTofu with terraform-provider-
// openstack, built from their sources by the world's build (world.Peer),
// planning the same fleet on the same simulator. Its configuration is
// testdata/tofu: what a Terraform user writes for the design OPKE plans.

// peerSizes are the fleet sizes the peer is measured at: OPKE_PEER_SIZES
// (comma separated), default 1, 10, 30 and 100 clusters.
func peerSizes(tb testing.TB) []int { return sizesOf(tb, "OPKE_PEER_SIZES", "1,10,30,100") }

// tofu is the peer's binaries: the tofu command and a provider mirror
// holding terraform-provider-openstack, laid out as tofu's
// filesystem_mirror reads it.
type tofu struct {
	bin, mirror string
}

// peer returns the peer's binaries, built by the world's build (cached
// by version; the first build takes minutes and logs its progress).
func peer(tb testing.TB) tofu {
	tb.Helper()
	arts, err := world.Targets(world.Peer)
	if err != nil {
		tb.Fatal(err)
	}
	built, err := world.New(world.DefaultCacheDir(), slog.New(slog.NewTextHandler(os.Stderr, nil))).Ensure(context.Background(), arts)
	if err != nil {
		tb.Fatal(err)
	}
	bin, ok := built.Binary(arts[0].Key, "tofu")
	if !ok {
		tb.Fatal("the world's build has no tofu")
	}
	provider, ok := built.Binary(arts[1].Key, arts[1].Binaries[0].Name)
	if !ok {
		tb.Fatal("the world's build has no terraform-provider-openstack")
	}
	version := strings.TrimPrefix(world.OpenStackProviderVersion, "v")
	mirror := filepath.Join(filepath.Dir(filepath.Dir(provider)), "mirror")
	dst := filepath.Join(mirror, "registry.opentofu.org", "terraform-provider-openstack", "openstack", version, "linux_amd64", filepath.Base(provider))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		tb.Fatal(err)
	}
	if err := os.Symlink(provider, dst); err != nil {
		tb.Fatal(err)
	}
	return tofu{bin: bin, mirror: mirror}
}

// tofuFleet is the peer's fleet of n clusters applied on a simulator of
// its own: the simulator in this process, tofu's working folder beside
// it.
type tofuFleet struct {
	t    tofu
	sim  *cloudsim.Sim
	work string
	env  []string
}

// run runs tofu in the fleet's working folder and fails the benchmark
// unless it exits 0 (a plan with -detailed-exitcode exits 2 when it finds
// a change).
func (f *tofuFleet) run(tb testing.TB, args ...string) {
	tb.Helper()
	cmd := exec.Command(f.t.bin, args...)
	cmd.Dir, cmd.Env = f.work, f.env
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("tofu %s: %v:\n%s", strings.Join(args, " "), err, tail(string(out), 60))
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// tofuEnv is tofu's environment: its configuration and the cloud's from
// the fleet's folders, no input, and a proxy that answers nothing for
// anything but loopback, so that no request leaves the machine.
func tofuEnv(dir, simDir string) []string {
	return []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"),
		"TF_CLI_CONFIG_FILE=" + filepath.Join(dir, "tofurc"), "OS_CLIENT_CONFIG_FILE=" + filepath.Join(simDir, "clouds.yaml"),
		"TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1",
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1"}
}

// configHash names the configuration a seed was applied from.
func configHash(tb testing.TB) string {
	tb.Helper()
	h := sha256.New()
	for _, f := range []string{"main.tf", "cluster/main.tf"} {
		b, err := os.ReadFile(filepath.Join("testdata", "tofu", f))
		if err != nil {
			tb.Fatal(err)
		}
		h.Write(b)
	}
	h.Write([]byte(world.OpenTofuVersion + world.OpenStackProviderVersion))
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// tofuSeed returns the folder of the peer's fleet of n clusters applied
// once (sim/ and work/), applying it now unless a seed of this
// build, configuration and size is there.
func tofuSeed(tb testing.TB, t tofu, n int) string {
	tb.Helper()
	dir := filepath.Join(cacheRoot(), fmt.Sprintf("tofu-%d-%s-%s", n, binaryHash(tb), configHash(tb)))
	if seeded(tb, dir) {
		return dir
	}
	took := makeCached(tb, dir, filepath.Join(cacheRoot(), fmt.Sprintf("tofu-%d-*", n)), func(build string) { applyTofu(tb, t, build, n) })
	tb.Logf("applied the peer's fleet of %d clusters with tofu in %s (cached in %s)", n, took.Round(time.Second), dir)
	return dir
}

// applyTofu applies the peer's fleet of n clusters on a simulator whose
// state it keeps in build.
func applyTofu(tb testing.TB, t tofu, build string, n int) {
	tb.Helper()
	simDir, work := filepath.Join(build, "sim"), filepath.Join(build, "work")
	if err := copyTree(filepath.Join("testdata", "tofu"), work); err != nil {
		tb.Fatal(err)
	}
	// Any free address: nothing tofu keeps names it (the simulator
	// writes its clouds.yaml anew at each start).
	sim, err := cloudsim.Start(context.Background(), cloudsim.Options{StateDir: simDir})
	if err != nil {
		tb.Fatal(err)
	}
	clients, err := cloud.Connect(context.Background(), cloud.Target{File: filepath.Join(simDir, "clouds.yaml"), Cloud: "sim", Budget: cloud.Unlimited()})
	if err != nil {
		tb.Fatal(err)
	}
	cloudtest.RoomFor(tb, simDir, clients)
	f := &tofuFleet{t: t, sim: sim, work: work, env: tofuEnv(work, simDir)}
	rc := fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path = %q\n  }\n}\n", t.mirror)
	if err := os.WriteFile(filepath.Join(work, "tofurc"), []byte(rc), 0o644); err != nil {
		tb.Fatal(err)
	}
	f.run(tb, "init", "-input=false", "-no-color")
	f.run(tb, "apply", "-auto-approve", "-input=false", "-no-color", "-parallelism=50", "-var", fmt.Sprintf("clusters=%d", n))
	if err := sim.Close(); err != nil {
		tb.Fatal(err)
	}
}

// loadTofuFleet starts the simulator of a copy of a seed.
func loadTofuFleet(tb testing.TB, t tofu, seed string) *tofuFleet {
	tb.Helper()
	dir := tb.TempDir()
	if err := copyTree(seed, dir); err != nil {
		tb.Fatal(err)
	}
	simDir, work := filepath.Join(dir, "sim"), filepath.Join(dir, "work")
	sim, err := cloudsim.Start(context.Background(), cloudsim.Options{StateDir: simDir})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sim.Close() })
	// The seed's folder was elsewhere: its CLI configuration names the
	// same mirror, its lock file the same provider.
	return &tofuFleet{t: t, sim: sim, work: work, env: tofuEnv(work, simDir)}
}

// BenchmarkTofuPlan times OpenTofu's plan of the peer's converged fleet
// (`tofu plan -detailed-exitcode`, which refreshes every resource as
// OpenTofu does by default, and must find no change): its API requests
// and wall time, beside BenchmarkNoopReconcile's at the same sizes (make
// bench's table puts them side by side).
func BenchmarkTofuPlan(b *testing.B) {
	t := peer(b)
	for _, n := range peerSizes(b) {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			f := loadTofuFleet(b, t, tofuSeed(b, t, n))
			plan := []string{"plan", "-detailed-exitcode", "-input=false", "-no-color", "-lock=false", "-var", fmt.Sprintf("clusters=%d", n)}
			f.run(b, plan...) // warm: the provider's first start
			var calls int64
			var busy time.Duration
			for b.Loop() {
				f.sim.ResetCounters()
				f.run(b, plan...)
				for _, k := range f.sim.Counters() {
					calls += k
				}
				busy += f.sim.Busy()
			}
			b.ReportMetric(float64(calls)/float64(b.N), "api-calls/op")
			b.ReportMetric(float64(busy.Microseconds())/1e3/float64(b.N), "sim-ms/op")
		})
	}
}

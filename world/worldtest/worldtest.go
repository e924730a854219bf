// Package worldtest serves tests with what make world built: the e2e set
// and a real registry on loopback.
package worldtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"

	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/world"
)

// E2E is make world's e2e set, taken from its cache (or built, logging to
// log, which may be nil).
func E2E(t *testing.T, log *slog.Logger) *world.Built {
	t.Helper()
	return Set(t, world.E2E, log)
}

// Set is one of make world's sets, taken from its cache (or built).
func Set(t *testing.T, set world.Set, log *slog.Logger) *world.Built {
	t.Helper()
	arts, err := world.Targets(set)
	if err != nil {
		t.Fatal(err)
	}
	built, err := world.New(world.DefaultCacheDir(), log).Ensure(t.Context(), arts)
	if err != nil {
		t.Fatal(err)
	}
	return built
}

// Registry runs distribution's registry (bin, built by make world) on a
// free loopback port, plain HTTP, until the test ends, and returns its
// base URL.
func Registry(t *testing.T, bin string) string {
	t.Helper()
	addr := proctest.FreeAddr(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		if resp, err := http.Get(base + "/v2/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the registry did not answer: %s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

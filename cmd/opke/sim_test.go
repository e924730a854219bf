package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"

	"opke.dev/opke/cloudsim"
)

// TestSimCommand runs `opke sim` as the binary would, authenticates with the
// clouds.yaml it writes, and stops it with the context, as an interrupt does.
func TestSimCommand(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--listen", "127.0.0.1:0", "--edge-listen", "127.0.0.1:0", "--state", state, "--log-level", "warn"}, strings.NewReader(""), &out, &errOut)
	}()
	var info cloudsim.Info
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(state, "sim.json"))
		if err == nil && json.Unmarshal(b, &info) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sim.json after 10s; stderr: %s", errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(info.Edge, "127.0.0.1:") {
		t.Errorf("sim.json edge %q, want a loopback SOCKS5 address", info.Edge)
	}
	ao, _, _, err := clouds.Parse(clouds.WithCloudName("sim"), clouds.WithLocations(filepath.Join(state, "clouds.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.NewProviderClient(ctx, ao); err != nil {
		t.Fatalf("authenticate against opke sim: %v", err)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("opke sim exited %d; stderr: %s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("opke sim did not stop when its context ended")
	}
	if _, err := os.Stat(filepath.Join(state, "state.json")); err != nil {
		t.Errorf("no state.json after stopping: %v", err)
	}
}

func TestSimRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	code, _, errOut := opke(t, "sim", "--listen", "0.0.0.0:0", "--state", t.TempDir())
	if code != exitFailure || !bytes.Contains([]byte(errOut), []byte("127.0.0.1 only")) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestSimMirrorNeedsRealHosts: --mirror serves real machines; without them
// it is a usage error, before anything starts.
func TestSimMirrorNeedsRealHosts(t *testing.T) {
	state := t.TempDir()
	code, out, stderr := opke(t, "sim", "--mirror", "--listen", "127.0.0.1:0", "--edge-listen", "127.0.0.1:0", "--state", state)
	if code != exitUsage || out != "" || !strings.Contains(stderr, "--mirror: only with --hosts real") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("the state dir got %d entries", len(entries))
	}
}

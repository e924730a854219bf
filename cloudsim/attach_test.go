package cloudsim_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"opke.dev/opke/cloudsim"
	"opke.dev/opke/internal/cloudtest"
)

// TestAttachedSimulatorServesNoAPI: attached to another cloud (here a
// simulator), the simulator's own APIs answer 503 and a console of a
// server it does not know is an error; an attach to a cloud it cannot
// authenticate with fails at Start. The host layer's work is the contract
// suite's (reconciler's TestContractCreateScaleUpgradeBackup).
func TestAttachedSimulatorServesNoAPI(t *testing.T) {
	t.Parallel()
	_, _, dir := cloudtest.Start(t)
	ctx := context.Background()
	file := filepath.Join(dir, "clouds.yaml")
	att, err := cloudsim.Start(ctx, cloudsim.Options{StateDir: t.TempDir(), Attach: &cloudsim.AttachOptions{File: file, Cloud: "sim-admin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	resp, err := http.Get(att.URL() + "/compute/v2.1/servers")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("an attached simulator's API: %s, want 503", resp.Status)
	}
	if _, err := att.ConsoleOutput(ctx, "no-such-server"); err == nil {
		t.Error("a console of an unknown server")
	}
	if _, err := cloudsim.Start(ctx, cloudsim.Options{Attach: &cloudsim.AttachOptions{File: file, Cloud: "nowhere"}}); err == nil {
		t.Error("an attach to a cloud clouds.yaml lacks started")
	}
}

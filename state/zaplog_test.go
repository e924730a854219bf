package state_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/zap"

	"opke.dev/opke/state"
)

// TestQuietEtcdLoggerSaysAFatal: etcd's fatal error through the quiet
// logger still ends the process, but says why on stderr first (zap's
// no-op logger ended make test's packages with exit 1 and no word).
func TestQuietEtcdLoggerSaysAFatal(t *testing.T) {
	if os.Getenv("OPKE_TEST_QUIET_FATAL") != "" {
		state.QuietEtcdLogger().Warn("dropped")
		state.QuietEtcdLogger().Fatal("failed to purge snap db file", zap.String("path", "/gone"))
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestQuietEtcdLoggerSaysAFatal$")
	cmd.Env = append(os.Environ(), "OPKE_TEST_QUIET_FATAL=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("the process after a fatal error: %v, want exit 1\n%s", err, out)
	}
	if want := "etcd: FATAL: failed to purge snap db file map[path:/gone]"; !strings.Contains(string(out), want) || strings.Contains(string(out), "dropped") {
		t.Errorf("stderr %q: want %q and nothing else of etcd's", out, want)
	}
}

// Package golden compares what a test produced with a file under its
// package's testdata/, and rewrites the file instead when the test runs
// with -update (go test ./PKG -update). It is the one -update flag of the
// test binaries that import it.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Update is the -update flag: rewrite the golden files.
var Update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// File fails t when got differs from the file at path, or writes got
// there under -update (its folder made if missing).
func File(t testing.TB, path string, got []byte) {
	t.Helper()
	if *Update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file (go test -update writes it): %v", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s (-want +got):\n%s", path, d)
	}
}

package machine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestContainerdConfigIsFlatcars: the machines' default containerd
// configuration is Flatcar's, the file OPKE's rendered one is held to
// (render/assets/testdata/flatcar), less that file's own header.
func TestContainerdConfigIsFlatcars(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "render", "assets", "testdata", "flatcar", "containerd-config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	_, stock, ok := strings.Cut(string(b), "\nversion = 2\n")
	if !ok {
		t.Fatal("the fixture has no version line")
	}
	if d := cmp.Diff("version = 2\n"+stock, containerdConfig); d != "" {
		t.Errorf("the machines' containerd configuration (-Flatcar's +the image's):\n%s", d)
	}
}

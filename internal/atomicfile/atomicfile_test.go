package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWithModeAndLeavesNoTemporary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "plan.json")
	for _, tt := range []struct {
		name string
		data string
		mode os.FileMode
	}{
		{"new file", "one", 0o644},
		{"replaced, mode tightened", "two", 0o600},
	} {
		if err := Write(path, []byte(tt.data), tt.mode); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != tt.data {
			t.Errorf("%s: read %q, %v", tt.name, got, err)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != tt.mode {
			t.Errorf("%s: mode %v, want %v", tt.name, st.Mode().Perm(), tt.mode)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries in the folder, want the file alone", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "x"), nil, 0o644); err == nil {
		t.Error("no error writing into a missing folder")
	}
}

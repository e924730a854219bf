package world

import (
	"os"
	"path/filepath"
	"testing"
)

// A project artifact's version is the hash of its sources: a change to
// one of its files, or to go.sum, is a new build; a test file is not.
func TestProjectSources(t *testing.T) {
	root := t.TempDir()
	write := func(path, body string) {
		t.Helper()
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/p\n")
	write("go.sum", "")
	write("cmd/x/main.go", "package main\n")
	paths := []string{"go.mod", "go.sum", "cmd/x"}
	hash := func() string {
		t.Helper()
		h, err := projectSources(root, paths)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	first := hash()
	write("cmd/x/main_test.go", "package main\n")
	if got := hash(); got != first {
		t.Errorf("a test file changed the hash: %s -> %s", first, got)
	}
	write("cmd/x/main.go", "package main\n\nfunc main() {}\n")
	second := hash()
	if second == first {
		t.Error("a changed source kept the hash")
	}
	write("go.sum", "example.com/q v1.0.0 h1:x\n")
	if hash() == second {
		t.Error("a changed go.sum kept the hash")
	}
	if _, err := projectSources(root, []string{"missing"}); err == nil {
		t.Error("a missing path hashed")
	}
}

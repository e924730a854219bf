package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestBuild: two reports (one of two modules, one already dated) give
// the index govulncheck reads, each module with its vulnerabilities and
// the last fixed version, and the reports under ID/ with a modified time.
func TestBuild(t *testing.T) {
	t.Parallel()
	in, out := t.TempDir(), t.TempDir()
	reports := map[string]string{
		"GO-2026-0001.json": `{"id":"GO-2026-0001","modified":"0001-01-01T00:00:00Z","affected":[
			{"package":{"name":"example.com/a"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.2.3"}]}]},
			{"package":{"name":"stdlib"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.26.9"}]}]}]}`,
		"GO-2026-0002.json": `{"id":"GO-2026-0002","modified":"2026-01-02T03:04:05Z","affected":[
			{"package":{"name":"example.com/a"},"ranges":[{"type":"SEMVER","events":[{"introduced":"2.0.0"}]}]}]}`,
	}
	for name, body := range reports {
		if err := os.WriteFile(filepath.Join(in, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	snap := time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC)
	if err := run(in, "v0.0.0-20261105234957-e22db6528018", out); err != nil {
		t.Fatal(err)
	}
	var mods []Module
	readJSON(t, filepath.Join(out, "index", "modules.json"), &mods)
	dated := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := []Module{
		{Path: "example.com/a", Vulns: []ModuleVuln{{ID: "GO-2026-0001", Modified: snap, Fixed: "1.2.3"}, {ID: "GO-2026-0002", Modified: dated}}},
		{Path: "stdlib", Vulns: []ModuleVuln{{ID: "GO-2026-0001", Modified: snap, Fixed: "1.26.9"}}},
	}
	if d := cmp.Diff(want, mods); d != "" {
		t.Errorf("modules.json (-want +got):\n%s", d)
	}
	var db map[string]time.Time
	readJSON(t, filepath.Join(out, "index", "db.json"), &db)
	if !db["modified"].Equal(snap) {
		t.Errorf("db.json modified %v, want %v", db["modified"], snap)
	}
	var e entry
	readJSON(t, filepath.Join(out, "ID", "GO-2026-0001.json"), &e)
	if !e.Modified.Equal(snap) || len(e.Affected) != 2 {
		t.Errorf("ID/GO-2026-0001.json: modified %v, %d affected", e.Modified, len(e.Affected))
	}

	// Refusals: not a pseudo-version; a report whose id is not its name.
	if err := run(in, "v1.0.0", t.TempDir()); err == nil {
		t.Error("a version without a time was taken")
	}
	if err := os.WriteFile(filepath.Join(in, "GO-2026-0003.json"), []byte(`{"id":"../x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(in, t.TempDir(), snap); err == nil {
		t.Error("a report with an id that is a path was taken")
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

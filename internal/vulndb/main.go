// Command vulndb writes a Go vulnerability database (the v1 layout
// govulncheck reads with -db file:///DIR: index/db.json,
// index/modules.json, ID/<id>.json) from the OSV reports of a
// golang.org/x/vulndb snapshot, which the Go module proxy serves where
// vuln.go.dev cannot be reached. make vulncheck runs it, then govulncheck
// on that database.
//
//	go run ./internal/vulndb -osv $VULNDB/data/osv -version v0.0.0-20261105234957-e22db6528018 -out DIR
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// entry is what the index needs of an OSV report.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []struct {
			Events []struct {
				Fixed string `json:"fixed"`
			} `json:"events"`
		} `json:"ranges"`
	} `json:"affected"`
}

// ModuleVuln and Module are index/modules.json's records.
type ModuleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Fixed    string    `json:"fixed,omitempty"`
}

type Module struct {
	Path  string       `json:"path"`
	Vulns []ModuleVuln `json:"vulns"`
}

// pseudoTime is the commit time in a pseudo-version.
var pseudoTime = regexp.MustCompile(`-(\d{14})-[0-9a-f]{12}$`)

// Build writes the database for the reports in osvDir into out. The
// snapshot's reports carry no modification time (vuln.go.dev sets it when
// it publishes): modified, the snapshot's time, stands in where one is
// missing. It returns the modules indexed.
func Build(osvDir, out string, modified time.Time) ([]Module, error) {
	files, err := filepath.Glob(filepath.Join(osvDir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no OSV report in %s", osvDir)
	}
	for _, d := range []string{"ID", "index"} {
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return nil, err
		}
	}
	byPath := map[string]*Module{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var e entry
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if e.ID == "" || strings.ContainsAny(e.ID, `/\`) || e.ID != strings.TrimSuffix(filepath.Base(f), ".json") {
			return nil, fmt.Errorf("%s: id %q does not name its file", f, e.ID)
		}
		if e.Modified.IsZero() {
			e.Modified = modified
			var doc map[string]any
			if err := json.Unmarshal(b, &doc); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			doc["modified"] = modified
			if b, err = json.Marshal(doc); err != nil {
				return nil, err
			}
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), b, 0o644); err != nil {
			return nil, err
		}
		for _, a := range e.Affected {
			m := byPath[a.Package.Name]
			if m == nil {
				m = &Module{Path: a.Package.Name}
				byPath[a.Package.Name] = m
			}
			v := ModuleVuln{ID: e.ID, Modified: e.Modified}
			for _, r := range a.Ranges {
				for _, ev := range r.Events {
					if ev.Fixed != "" {
						v.Fixed = ev.Fixed
					}
				}
			}
			m.Vulns = append(m.Vulns, v)
		}
	}
	var mods []Module
	for _, m := range byPath {
		mods = append(mods, *m)
	}
	slices.SortFunc(mods, func(a, b Module) int { return strings.Compare(a.Path, b.Path) })
	for name, v := range map[string]any{"modules.json": mods, "db.json": map[string]time.Time{"modified": modified}} {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(out, "index", name), b, 0o644); err != nil {
			return nil, err
		}
	}
	return mods, nil
}

func main() {
	osvDir := flag.String("osv", "", "the data/osv folder of a golang.org/x/vulndb snapshot")
	version := flag.String("version", "", "the snapshot's module version (a pseudo-version: its time is the database's)")
	out := flag.String("out", "", "the database folder to write")
	flag.Parse()
	if err := run(*osvDir, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
}

func run(osvDir, version, out string) error {
	if osvDir == "" || out == "" {
		return errors.New("-osv and -out are required")
	}
	m := pseudoTime.FindStringSubmatch(version)
	if m == nil {
		return fmt.Errorf("-version %q: not a pseudo-version", version)
	}
	modified, err := time.Parse("20060102150405", m[1])
	if err != nil {
		return fmt.Errorf("-version %q: %w", version, err)
	}
	if err := os.RemoveAll(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	mods, err := Build(osvDir, out, modified)
	if err != nil {
		return err
	}
	fmt.Printf("vulndb: %d modules, snapshot of %s, in %s\n", len(mods), modified.Format(time.RFC3339), out)
	return nil
}

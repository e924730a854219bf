package schemas

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
)

// ClustersDir is the folder of a fleet root that holds one folder per cluster.
const ClustersDir = "clusters"

// SpecFile is the name of a cluster's spec in its folder.
const SpecFile = "cluster.yaml"

// ErrNotFleet is returned for a folder with no clusters/ folder in it.
var ErrNotFleet = errors.New("not a fleet root: no clusters/ folder")

// Fleet is every cluster spec under a fleet root, validated one by one and
// together.
type Fleet struct {
	// Files are the spec files, sorted by path.
	Files []*File
	// Findings are the files' findings and the fleet's own, sorted.
	Findings Findings
}

// Clusters returns the clusters whose files have no errors, by name.
func (fl *Fleet) Clusters() map[string]*Cluster {
	out := map[string]*Cluster{}
	for _, f := range fl.Files {
		if f.Cluster != nil && !f.Findings.HasErrors() {
			out[f.Cluster.Metadata.Name] = f.Cluster
		}
	}
	return out
}

// filesByName indexes the files that name a cluster; with duplicates,
// the first file wins, as checkUniqueNames reports the others.
func (fl *Fleet) filesByName() map[string]*File {
	out := make(map[string]*File, len(fl.Files))
	for _, f := range fl.Files {
		if f.Cluster == nil {
			continue
		}
		if _, dup := out[f.Cluster.Metadata.Name]; !dup {
			out[f.Cluster.Metadata.Name] = f
		}
	}
	return out
}

// LoadFleet reads and validates every clusters/<name>/cluster.yaml of fsys.
// Findings name files as prefix/clusters/<name>/cluster.yaml. The error is
// for a fleet that cannot be read at all; problems in specs are findings.
func LoadFleet(fsys fs.FS, prefix string) (*Fleet, error) {
	entries, err := fs.ReadDir(fsys, ClustersDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFleet
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ClustersDir, err)
	}
	fl := &Fleet{}
	display := func(p string) string {
		if prefix == "" || prefix == "." {
			return p
		}
		return path.Join(prefix, p)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue // a README beside the cluster folders is fine
		}
		dir := path.Join(ClustersDir, e.Name())
		name := path.Join(dir, SpecFile)
		data, err := readBounded(fsys, name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// An empty folder is what git leaves behind after a removal; one
			// with files but no spec is a misnamed spec.
			if rest, _ := fs.ReadDir(fsys, dir); len(rest) > 0 {
				fl.Findings = append(fl.Findings, Finding{File: display(dir), Severity: SeverityError,
					Message: "cluster folder has no " + SpecFile})
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		f := Parse(display(name), data)
		if f.Cluster != nil && f.Cluster.Metadata.Name != e.Name() && f.Cluster.Metadata.Name != "" {
			f.Findings = append(f.Findings, f.finding(Problem{Path: Path{"metadata", "name"},
				Message: fmt.Sprintf("%q must equal its folder's name %q", f.Cluster.Metadata.Name, e.Name())}, SeverityError))
		}
		fl.Files = append(fl.Files, f)
	}
	fl.checkUniqueNames()
	for _, f := range fl.Files {
		fl.Findings = append(fl.Findings, f.Findings...)
	}
	fl.Findings.Sort()
	return fl, nil
}

func (fl *Fleet) checkUniqueNames() {
	first := map[string]*File{}
	for _, f := range fl.Files {
		if f.Cluster == nil || f.Cluster.Metadata.Name == "" {
			continue
		}
		name := f.Cluster.Metadata.Name
		if other, dup := first[name]; dup {
			f.Findings = append(f.Findings, f.finding(Problem{Path: Path{"metadata", "name"},
				Message: fmt.Sprintf("cluster name %q is also the name in %s", name, other.Path)}, SeverityError))
			continue
		}
		first[name] = f
	}
}

// readBounded reads a file of at most MaxFileSize bytes; a larger one is
// returned cut at MaxFileSize+1 bytes, which Parse reports as too large.
func readBounded(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err // the caller wraps it with the path
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxFileSize+1))
}

// CheckTransitions applies the transition rules from the fleet base (the
// fleet at an earlier revision, or as applied) to fl, adding their
// findings to fl. facts, by cluster, may be nil.
func (fl *Fleet) CheckTransitions(base *Fleet, facts map[string]*TransitionFacts) {
	baseClusters, baseFiles, files := base.Clusters(), base.filesByName(), fl.filesByName()
	for _, name := range sortedKeys(baseClusters) {
		old := baseClusters[name]
		f := files[name]
		if f == nil {
			fl.Findings = append(fl.Findings, removalFinding(baseFiles[name], old))
			continue
		}
		if f.Findings.HasErrors() {
			continue // an invalid spec is judged once it parses
		}
		for _, p := range CheckTransition(old, f.Cluster, facts[name]) {
			fl.Findings = append(fl.Findings, f.finding(p, SeverityError))
		}
	}
	fl.Findings.Sort()
}

func removalFinding(f *File, old *Cluster) Finding {
	msg := fmt.Sprintf("cluster %q is removed with deletionPolicy Retain: OPKE stops managing it and leaves its servers, networks and load balancer in place", old.Metadata.Name)
	if old.Spec.DeletionPolicy == DeletionDelete {
		msg = fmt.Sprintf("cluster %q is removed with deletionPolicy Delete: OPKE will destroy its servers, networks, load balancer and state", old.Metadata.Name)
	}
	return Finding{File: f.Path, Message: msg, Severity: SeverityWarning}
}

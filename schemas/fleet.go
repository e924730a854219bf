package schemas

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
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

// Limits bound what reading a fleet may cost as a whole; each file is
// bounded by MaxFileSize too. A pull request chooses what a fleet holds:
// many folders can name one large blob, so a few KiB pushed could make
// the daemon read and parse gigabytes.
type Limits struct {
	// MaxClusters bounds the cluster folders.
	MaxClusters int
	// MaxBytes bounds the spec bytes read, a file that several folders
	// share counted each time it is read.
	MaxBytes int64
}

// defaultLimits are LoadFleet's: twice the 10,000 clusters a fleet is
// meant to reach, in specs of 1.6 KiB on average (the examples' are 0.6
// and 1.1 KiB).
var defaultLimits = Limits{MaxClusters: 20_000, MaxBytes: 32 << 20}

// DefaultLimits returns a copy of defaultLimits: no caller can rewrite the package's own.
func DefaultLimits() Limits {
	return defaultLimits
}

// ErrFleetTooLarge is a fleet over its Limits; nothing of it was parsed.
var ErrFleetTooLarge = errors.New("the fleet is over its limits")

// LoadFleet reads and validates every clusters/<name>/cluster.yaml of fsys
// within DefaultLimits. Findings name files as
// prefix/clusters/<name>/cluster.yaml. The error is for a fleet that
// cannot be read at all (or is over its limits); problems in specs are
// findings.
func LoadFleet(fsys fs.FS, prefix string) (*Fleet, error) {
	return LoadFleetWithin(fsys, prefix, defaultLimits)
}

// LoadFleetWithin is LoadFleet within lim: the folders are counted and
// the specs' sizes summed (as fs.Stat tells them, which a git tree does
// without reading a blob) before any is read, and the bytes read are
// counted as they are.
func LoadFleetWithin(fsys fs.FS, prefix string, lim Limits) (*Fleet, error) {
	entries, err := fs.ReadDir(fsys, ClustersDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFleet
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ClustersDir, err)
	}
	dirs := slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return !e.IsDir() }) // a README beside the cluster folders is fine
	if len(dirs) > lim.MaxClusters {
		return nil, fmt.Errorf("%w: %d cluster folders, at most %d", ErrFleetTooLarge, len(dirs), lim.MaxClusters)
	}
	var total int64
	oversize := map[string]bool{}
	for _, e := range dirs {
		name := path.Join(ClustersDir, e.Name(), SpecFile)
		if st, err := fs.Stat(fsys, name); err == nil {
			if st.Size() > MaxFileSize {
				oversize[name] = true // refused unread
				continue
			}
			total += st.Size()
		}
	}
	if total > lim.MaxBytes {
		return nil, fmt.Errorf("%w: %d MiB of specs, at most %d MiB", ErrFleetTooLarge, total>>20, lim.MaxBytes>>20)
	}
	budget := lim.MaxBytes
	fl := &Fleet{}
	display := func(p string) string {
		if prefix == "" || prefix == "." {
			return p
		}
		return path.Join(prefix, p)
	}
	for _, e := range dirs {
		dir := path.Join(ClustersDir, e.Name())
		name := path.Join(dir, SpecFile)
		if oversize[name] {
			f := &File{Path: display(name)}
			f.add([]Problem{tooLarge})
			fl.Files = append(fl.Files, f)
			continue
		}
		data, err := readBounded(fsys, name)
		if budget -= int64(len(data)); budget < 0 {
			return nil, fmt.Errorf("%w: more than %d MiB of specs read", ErrFleetTooLarge, lim.MaxBytes>>20)
		}
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

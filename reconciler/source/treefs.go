package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// ErrNoRepository is returned when a folder is not inside a git repository.
var ErrNoRepository = errors.New("not inside a git repository")

// ErrUnknownRevision is returned for a revision that names no commit.
var ErrUnknownRevision = errors.New("unknown revision")

// OpenRevision returns the tree of revision rev as an fs.FS rooted at dir,
// a folder of a git worktree (dir may be a subfolder of the repository).
// A dir that did not exist at rev yields an empty filesystem.
func OpenRevision(ctx context.Context, dir, rev string) (fs.FS, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open revision %q: %w", rev, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open revision %q: %w", rev, err)
	}
	repo, err := plainOpen(abs)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoRepository)
	}
	if err != nil {
		return nil, fmt.Errorf("open repository at %s: %w", dir, err)
	}
	rel := "." // a bare repository: its root
	if wt, err := repo.Worktree(); err == nil {
		if rel, err = filepath.Rel(wt.Filesystem.Root(), abs); err != nil {
			return nil, fmt.Errorf("locate %s in its repository: %w", dir, err)
		}
	} else if !errors.Is(err, git.ErrIsBareRepository) {
		return nil, fmt.Errorf("open worktree at %s: %w", dir, err)
	}
	hash, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrUnknownRevision, rev, err)
	}
	commit, err := repo.CommitObject(*hash)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", hash, err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree of %s: %w", hash, err)
	}
	if rel = filepath.ToSlash(rel); rel != "." {
		tree, err = tree.Tree(rel)
		if errors.Is(err, object.ErrDirectoryNotFound) {
			return newTreeFS(&object.Tree{}), nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s at %s: %w", rel, hash, err)
		}
	}
	return newTreeFS(tree), nil
}

// TreeFS is a read-only fs.FS over a git tree. The folders it reads are
// decoded once: go-git's own path cache skips the first level, so every
// file of clusters/<name>/ decoded the whole clusters/ tree again (a
// 10,000-cluster fleet read 10,000 entries 10,000 times: a minute and a
// half of every commit's judgement).
type TreeFS struct {
	root *object.Tree
	// mu guards trees and the lazy indexes go-git builds in each tree.
	mu    sync.Mutex
	trees map[string]*object.Tree // by folder path
}

// newTreeFS returns the tree as a filesystem.
func newTreeFS(t *object.Tree) *TreeFS {
	return &TreeFS{root: t, trees: map[string]*object.Tree{".": t}}
}

// tree is the folder dir's tree, decoded once; the caller holds t.mu. A
// folder that is not there (or is a file) is object.ErrDirectoryNotFound.
func (t *TreeFS) tree(dir string) (*object.Tree, error) {
	if tr := t.trees[dir]; tr != nil {
		return tr, nil
	}
	parent, err := t.tree(path.Dir(dir))
	if err != nil {
		return nil, err
	}
	e, err := parent.FindEntry(path.Base(dir))
	if errors.Is(err, object.ErrEntryNotFound) || err == nil && e.Mode != filemode.Dir {
		return nil, object.ErrDirectoryNotFound
	}
	if err != nil {
		return nil, err
	}
	tr, err := parent.Tree(path.Base(dir))
	if err != nil {
		return nil, err
	}
	t.trees[dir] = tr
	return tr, nil
}

var (
	_ fs.ReadDirFS = (*TreeFS)(nil)
	_ fs.StatFS    = (*TreeFS)(nil)
)

// Open implements fs.FS.
func (t *TreeFS) Open(name string) (fs.File, error) {
	info, entry, err := t.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		entries, err := t.ReadDir(name)
		if err != nil {
			return nil, err
		}
		return &treeDir{info: info, entries: entries}, nil
	}
	file, err := t.root.TreeEntryFile(entry)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	r, err := file.Reader()
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &treeFile{info: info, r: r}, nil
}

// Stat implements fs.StatFS.
func (t *TreeFS) Stat(name string) (fs.FileInfo, error) {
	info, _, err := t.lookup("stat", name)
	return info, err
}

// ReadDir implements fs.ReadDirFS.
func (t *TreeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	info, _, err := t.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	t.mu.Lock()
	tree, err := t.tree(name)
	t.mu.Unlock()
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	entries := make([]fs.DirEntry, 0, len(tree.Entries))
	for _, e := range tree.Entries {
		fi, err := t.entryInfo(tree, e)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
		}
		entries = append(entries, fs.FileInfoToDirEntry(fi))
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

func (t *TreeFS) lookup(op, name string) (fs.FileInfo, *object.TreeEntry, error) {
	if !fs.ValidPath(name) {
		return nil, nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return fileInfo{name: ".", mode: fs.ModeDir | 0o555}, nil, nil
	}
	t.mu.Lock()
	parent, err := t.tree(path.Dir(name))
	var entry *object.TreeEntry
	if err == nil {
		entry, err = parent.FindEntry(path.Base(name))
	}
	t.mu.Unlock()
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return nil, nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	if err != nil {
		return nil, nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	info, err := t.entryInfo(parent, *entry)
	if err != nil {
		return nil, nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return info, entry, nil
}

func (t *TreeFS) entryInfo(parent *object.Tree, e object.TreeEntry) (fileInfo, error) {
	switch e.Mode {
	case filemode.Dir:
		return fileInfo{name: e.Name, mode: fs.ModeDir | 0o555}, nil
	case filemode.Submodule:
		return fileInfo{name: e.Name, mode: fs.ModeIrregular}, nil
	}
	f, err := parent.TreeEntryFile(&e)
	if err != nil {
		return fileInfo{}, fmt.Errorf("read entry %s: %w", e.Name, err)
	}
	mode := fs.FileMode(0o444)
	if e.Mode == filemode.Executable {
		mode = 0o555
	}
	if e.Mode == filemode.Symlink {
		mode |= fs.ModeSymlink
	}
	return fileInfo{name: e.Name, size: f.Size, mode: mode}, nil
}

type fileInfo struct {
	name string
	size int64
	mode fs.FileMode
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.size }
func (fi fileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi fileInfo) ModTime() time.Time { return time.Time{} }
func (fi fileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi fileInfo) Sys() any           { return nil }

type treeFile struct {
	info fs.FileInfo
	r    io.ReadCloser
}

func (f *treeFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *treeFile) Read(b []byte) (int, error) { return f.r.Read(b) }
func (f *treeFile) Close() error               { return f.r.Close() }

type treeDir struct {
	info    fs.FileInfo
	entries []fs.DirEntry
	offset  int
}

func (d *treeDir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *treeDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.Name(), Err: errors.New("is a directory")}
}
func (d *treeDir) Close() error { return nil }

// ReadDir implements fs.ReadDirFile.
func (d *treeDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.offset:]
	if n <= 0 {
		d.offset = len(d.entries)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.offset += n
	return rest[:n], nil
}

// ResolveCommit returns the hash of the commit rev names in the repository
// holding dir.
func ResolveCommit(ctx context.Context, dir, rev string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("resolve %q: %w", rev, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", rev, err)
	}
	repo, err := plainOpen(abs)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return "", fmt.Errorf("%s: %w", dir, ErrNoRepository)
	}
	if err != nil {
		return "", fmt.Errorf("open repository at %s: %w", dir, err)
	}
	hash, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", fmt.Errorf("%w %q: %w", ErrUnknownRevision, rev, err)
	}
	return hash.String(), nil
}

// plainOpen opens the repository at dir: a bare one (a daemon's git
// cache, which plan and apply read on its data dir), or the work tree
// dir is in.
func plainOpen(dir string) (*git.Repository, error) {
	if fi, err := os.Stat(filepath.Join(dir, "objects")); err == nil && fi.IsDir() {
		if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
			return git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{})
		}
	}
	return git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true})
}

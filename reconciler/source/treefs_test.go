package source

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"opke.dev/opke/internal/gittest"
)

// commitFiles commits files into a new repository at dir.
func commitFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	gittest.Commit(t, gittest.Init(t, dir), "files", gittest.Files(files))
}

func TestTreeFSConformsToIOFS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	commitFiles(t, dir, map[string]string{
		"README.md":                     "fleet\n",
		"clusters/a/cluster.yaml":       "name: a\n",
		"clusters/b/cluster.yaml":       "name: b\n",
		"clusters/b/notes/more.txt":     "x\n",
		"clusters/zz-last/cluster.yaml": "",
	})
	fsys, err := OpenRevision(context.Background(), dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(fsys, "README.md", "clusters/a/cluster.yaml", "clusters/b/notes/more.txt", "clusters/zz-last/cluster.yaml"); err != nil {
		t.Fatal(err)
	}
	got, err := fs.ReadFile(fsys, "clusters/b/cluster.yaml")
	if err != nil || string(got) != "name: b\n" {
		t.Fatalf("ReadFile: %q, %v", got, err)
	}
}

func TestOpenRevisionSubfolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	commitFiles(t, dir, map[string]string{"fleet/clusters/a/cluster.yaml": "name: a\n"})
	fsys, err := OpenRevision(context.Background(), filepath.Join(dir, "fleet"), "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(fsys, "clusters/a/cluster.yaml"); err != nil {
		t.Fatalf("subfolder is the root of the revision's filesystem: %v", err)
	}
	if _, err := fs.Stat(fsys, "fleet"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat(fleet) = %v, want ErrNotExist", err)
	}
}

func TestResolveCommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	want := gittest.Commit(t, gittest.Init(t, dir), "files", gittest.Files(map[string]string{"fleet/a.txt": "a"}))
	got, err := ResolveCommit(context.Background(), filepath.Join(dir, "fleet"), "HEAD")
	if err != nil || got != want.String() {
		t.Fatalf("ResolveCommit(HEAD) = %q, %v; want %s", got, err, want)
	}
}

// TestOpenRevisionOfABareRepository: a bare repository (a daemon's git
// cache, which plan reads on its data dir) is read at a revision, its
// root the fleet's.
func TestOpenRevisionOfABareRepository(t *testing.T) {
	t.Parallel()
	bare, work := gittest.Remote(t)
	if err := os.MkdirAll(filepath.Join(work, "clusters", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "clusters", "a", "cluster.yaml"), []byte("name: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "-qm", "a")
	gittest.Git(t, work, "push", "-q", "origin", "main")
	fsys, err := OpenRevision(context.Background(), bare, "refs/heads/main")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := fs.ReadFile(fsys, "clusters/a/cluster.yaml"); err != nil || string(b) != "name: a\n" {
		t.Errorf("clusters/a/cluster.yaml = %q, %v", b, err)
	}
	if got, err := ResolveCommit(context.Background(), bare, "refs/heads/main"); err != nil || got != gittest.Git(t, work, "rev-parse", "HEAD") {
		t.Errorf("ResolveCommit = %q, %v", got, err)
	}
}

func TestOpenRevisionErrors(t *testing.T) {
	t.Parallel()
	repoDir := t.TempDir()
	commitFiles(t, repoDir, map[string]string{"a.txt": "a"})
	tests := []struct {
		name    string
		dir     string
		rev     string
		wantErr error
	}{
		{"not a repository", t.TempDir(), "HEAD", ErrNoRepository},
		{"unknown revision", repoDir, "no-such-branch", ErrUnknownRevision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := OpenRevision(context.Background(), tt.dir, tt.rev)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("OpenRevision: got %v, want %v", err, tt.wantErr)
			}
			if _, err := ResolveCommit(context.Background(), tt.dir, tt.rev); !errors.Is(err, tt.wantErr) {
				t.Fatalf("ResolveCommit: got %v, want %v", err, tt.wantErr)
			}
		})
	}
}

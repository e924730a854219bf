package source_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"

	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
)

func openMirror(t *testing.T, url string, patterns ...string) *source.Mirror {
	t.Helper()
	m, err := source.OpenMirror(context.Background(), source.MirrorOptions{URL: url, Dir: filepath.Join(t.TempDir(), "cache"), Branch: "main", Patterns: patterns, Forks: true})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func setRef(t *testing.T, repo *git.Repository, name string, h plumbing.Hash) {
	t.Helper()
	if err := repo.Storer.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(name), h)); err != nil {
		t.Fatal(err)
	}
}

// TestMirrorFollowsTheRemote: the first sync fetches the tracked branch
// and the pull request heads (and the branches of the patterns, not
// others); an unchanged remote costs no fetch (ErrUpToDate); a closed pull
// request's ref goes; a commit's tree reads as the fleet.
func TestMirrorFollowsTheRemote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	remote := gittest.Init(t, dir)
	a := gittest.Commit(t, remote, "a", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "a\n"}))
	setRef(t, remote, "refs/heads/main", a)
	b := gittest.Commit(t, remote, "b", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "b\n"}))
	setRef(t, remote, "refs/pull/7/head", b)
	setRef(t, remote, "refs/heads/preview-x", b)
	setRef(t, remote, "refs/heads/other", b)
	setRef(t, remote, "refs/heads/main", a)

	m := openMirror(t, dir, "preview-*")
	refs, err := m.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"refs/heads/main": a.String(), "refs/pull/7/head": b.String(), "refs/heads/preview-x": b.String()}
	if d := cmp.Diff(want, refs); d != "" {
		t.Fatalf("refs (-want +got):\n%s", d)
	}
	if _, err := m.Sync(ctx); !errors.Is(err, source.ErrUpToDate) {
		t.Fatalf("second sync: %v, want ErrUpToDate", err)
	}
	if !m.IsPullRequest("refs/pull/7/head") || !m.IsPullRequest("refs/heads/preview-x") || m.IsPullRequest("refs/heads/main") {
		t.Error("IsPullRequest is wrong")
	}
	// A pull request's head is fetched when asked for, not by Sync.
	if err := m.Read(ctx, b.String(), func(fs.FS) error { return nil }); err == nil {
		t.Fatal("Sync fetched a pull request's head")
	}
	if err := m.FetchPullRequest(ctx, "refs/pull/7/head", b.String()); err != nil {
		t.Fatal(err)
	}
	var body []byte
	if err := m.Read(ctx, b.String(), func(fsys fs.FS) (err error) {
		body, err = fs.ReadFile(fsys, "clusters/demo/cluster.yaml")
		return err
	}); err != nil || string(body) != "b\n" {
		t.Fatalf("Read: %q, %v", body, err)
	}

	if err := remote.Storer.RemoveReference("refs/pull/7/head"); err != nil {
		t.Fatal(err)
	}
	refs, err = m.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := refs["refs/pull/7/head"]; ok {
		t.Error("a closed pull request's ref is still followed")
	}
}

// TestMirrorNotes: notes are pushed under refs/notes/opke and
// refs/notes/opke-record in one push, where git itself reads them; a
// second note keeps the first, and notes another writer pushed meanwhile
// are kept too.
func TestMirrorNotes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	remote := gittest.Init(t, dir)
	a := gittest.Commit(t, remote, "a", gittest.Files(map[string]string{"x": "1"}))
	b := gittest.Commit(t, remote, "b", gittest.Files(map[string]string{"x": "2"}))
	setRef(t, remote, "refs/heads/main", b)
	m1, m2 := openMirror(t, dir), openMirror(t, dir)
	for _, m := range []*source.Mirror{m1, m2} {
		if _, err := m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	notes := func(state string) map[string][]byte {
		return map[string][]byte{report.TextRef: []byte(state + "\n"), report.RecordRef: []byte(`{"state":"` + state + `"}`)}
	}
	if err := m1.AddNotes(ctx, a.String(), notes("pending")); err != nil {
		t.Fatal(err)
	}
	if err := m2.AddNotes(ctx, b.String(), notes("success")); err != nil {
		t.Fatal(err)
	}
	if err := m1.AddNotes(ctx, a.String(), notes("failure")); err != nil {
		t.Fatal(err)
	}
	for commit, want := range map[plumbing.Hash]string{a: "failure", b: "success"} {
		text, ok := gittest.Note(t, dir, commit.String())
		record, rok := gittest.Record(t, dir, commit.String())
		if !ok || !rok {
			t.Fatalf("no notes on %s", commit)
		}
		if got := strings.TrimSpace(string(text)); got != want {
			t.Errorf("note of %s = %q, want %q", commit, got, want)
		}
		if got := strings.TrimSpace(string(record)); got != `{"state":"`+want+`"}` {
			t.Errorf("record of %s = %q", commit, got)
		}
	}
	if got, err := m1.Note(report.RecordRef, b.String()); err != nil || string(got) != `{"state":"success"}` {
		t.Errorf("Note = %q, %v", got, err)
	}
	if err := m1.AddNotes(ctx, a.String(), map[string][]byte{"refs/heads/main": []byte("x")}); err == nil {
		t.Error("a note under another ref than OPKE's notes was written")
	}
}

// TestMirrorOverGitDaemon: the git:// transport, against git daemon.
func TestMirrorOverGitDaemon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	remote := gittest.Init(t, filepath.Join(base, "fleet"))
	a := gittest.Commit(t, remote, "a", gittest.Files(map[string]string{"x": "1"}))
	setRef(t, remote, "refs/heads/main", a)
	port := freePort(t)
	cmd := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
		"--base-path="+base, "--listen=127.0.0.1", fmt.Sprintf("--port=%d", port), base)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("git://127.0.0.1:%d/fleet", port)
	m := openMirror(t, url)
	var refs map[string]string
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if refs, err = m.Sync(ctx); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"refs/heads/main": a.String()}, refs); d != "" {
		t.Fatalf("refs %v", refs)
	}
	if m.LocalPath() != "" {
		t.Error("a git:// remote is not local")
	}
}

// TestWatchSeesACommit: a commit to a local repository is seen in well
// under a second.
func TestWatchSeesACommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo := gittest.Init(t, dir)
	gittest.Commit(t, repo, "a", gittest.Files(map[string]string{"x": "1"}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan struct{}, 10)
	go func() { _ = source.Watch(ctx, dir, func() { changed <- struct{}{} }) }()
	time.Sleep(100 * time.Millisecond) // the watches are in place
	gittest.Git(t, dir, "commit", "--allow-empty", "-qm", "b")
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no change seen")
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestMirrorSince: the commits between two heads and whether the second
// descends from the first, over a merge, a rollback, a side branch and an
// unrelated history; bounded, and a base the cache lacks is named.
func TestMirrorSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	gittest.Git(t, dir, "init", "-q", "-b", "main")
	commit := func(msg string) string {
		gittest.Git(t, dir, "commit", "-q", "--allow-empty", "-m", msg)
		return gittest.Git(t, dir, "rev-parse", "HEAD")
	}
	a := commit("a")
	b := commit("b")
	gittest.Git(t, dir, "checkout", "-q", "-b", "side", a)
	c := commit("c")
	gittest.Git(t, dir, "checkout", "-q", "main")
	gittest.Git(t, dir, "merge", "-q", "--no-ff", "-m", "m", "side")
	m := gittest.Git(t, dir, "rev-parse", "HEAD")
	gittest.Git(t, dir, "checkout", "-q", "--orphan", "other")
	x := commit("x")
	gittest.Git(t, dir, "update-ref", "refs/pull/1/head", c)
	gittest.Git(t, dir, "update-ref", "refs/pull/2/head", x)
	mirror := openMirror(t, dir)
	if _, err := mirror.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mirror.FetchPullRequest(ctx, "refs/pull/2/head", x); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, base, head string
		limit            int
		want             []string
		descends         bool
		err              error
	}{
		{"a merge", a, m, 10, []string{m, b, c}, true, nil},
		{"past one parent", b, m, 10, []string{m, c}, true, nil},
		{"the same commit", b, b, 10, nil, true, nil},
		{"a rollback", m, b, 10, nil, false, nil},
		{"a side branch", b, c, 10, []string{c}, false, nil},
		{"an unrelated history", b, x, 10, []string{x}, false, nil},
		{"over the limit", a, m, 2, nil, false, source.ErrTooManyCommits},
		{"an unknown base", strings.Repeat("0", 40), m, 10, nil, false, source.ErrUnknownRevision},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, descends, err := mirror.Since(ctx, tc.base, tc.head, tc.limit)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if d := cmp.Diff(tc.want, got); d != "" || descends != tc.descends {
				t.Errorf("descends %v, want %v; commits (-want +got):\n%s", descends, tc.descends, d)
			}
		})
	}
}

// TestMirrorBoundsPullRequests: a pull request whose pack is over the
// fetch limit fails alone (the tracked branch moves on, Read says why,
// no temporary pack is left, it is not fetched again until it moves);
// by default (no Forks) a pull request head that no branch holds is not
// followed at all.
func TestMirrorBoundsPullRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	remote := gittest.Init(t, dir)
	a := gittest.Commit(t, remote, "a", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "a\n"}))
	// Random bytes do not compress: the pack is as large as the blob.
	big := make([]byte, 256<<10)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	huge := gittest.Commit(t, remote, "huge", gittest.Files(map[string]string{"blob": string(big)}))
	setRef(t, remote, "refs/pull/1/head", huge)
	gittest.Git(t, dir, "reset", "-q", "--hard", a.String())
	b := gittest.Commit(t, remote, "b", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "b\n"}))
	setRef(t, remote, "refs/heads/main", b)

	m, _ := refusePullRequest(t, source.MirrorOptions{URL: dir, Branch: "main", MaxFetchBytes: 64 << 10, Forks: true}, b, huge, source.ErrFetchTooLarge)
	// The next fetch that brings a pack (the notes another writer pushed,
	// fetched before a push) is bounded afresh, not cut by the last one's
	// overflow.
	gittest.Git(t, dir, "notes", "--ref=opke", "add", "-m", "another writer's", a.String())
	if err := m.AddNotes(ctx, b.String(), map[string][]byte{report.TextRef: []byte("note\n")}); err != nil {
		t.Fatalf("a note after a fetch over the bound: %v", err)
	}
	// Another ref moves: the failed one is not fetched again, and still fails.
	c := gittest.Commit(t, remote, "c", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "c\n"}))
	setRef(t, remote, "refs/heads/main", c)
	if _, err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Read(ctx, huge.String(), func(fs.FS) error { return nil }); !errors.Is(err, source.ErrFetchTooLarge) {
		t.Fatalf("Read after another sync: %v, want ErrFetchTooLarge", err)
	}
	if err := m.FetchPullRequest(ctx, "refs/pull/1/head", huge.String()); !errors.Is(err, source.ErrFetchTooLarge) {
		t.Fatalf("FetchPullRequest again: %v, want its failure, ErrFetchTooLarge", err)
	}

	forks, err := source.OpenMirror(ctx, source.MirrorOptions{URL: dir, Dir: filepath.Join(t.TempDir(), "cache"), Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	setRef(t, remote, "refs/pull/2/head", c)
	refs, err := forks.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"refs/heads/main": c.String(), "refs/pull/2/head": c.String()}
	if d := cmp.Diff(want, refs); d != "" {
		t.Errorf("refs without Forks, the default (-want +got):\n%s", d)
	}
}

// TestMirrorLog: a branch's head and its first parents, newest first, at
// most the limit.
func TestMirrorLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	remote := gittest.Init(t, dir)
	var want []string
	for i := range 4 {
		want = append([]string{gittest.Commit(t, remote, fmt.Sprint(i), gittest.Files(map[string]string{"x": fmt.Sprint(i)})).String()}, want...)
	}
	setRef(t, remote, "refs/heads/main", plumbing.NewHash(want[0]))
	m := openMirror(t, dir)
	if _, err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{2, 10} {
		got, err := m.Log(want[0], limit)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want[:min(limit, len(want))], got); d != "" {
			t.Errorf("Log(head, %d) (-want +got):\n%s", limit, d)
		}
	}
	if _, err := m.Log(strings.Repeat("ab", 20), 3); !errors.Is(err, source.ErrUnknownRevision) {
		t.Errorf("Log of a commit the cache lacks: %v", err)
	}
}

// TestMirrorOpensADamagedCache: a cache whose ref file a crash left empty
// (go-git truncates a ref file before writing it) or cut short opens,
// says so, and fetches the refs again; a ref's leftover temporary file
// goes.
func TestMirrorOpensADamagedCache(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, content string }{
		{"empty", ""},
		{"cut short", "5f43dfddcb1d3fe8c8e5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir, remote, m := syncedMirror(t)
			a := head(t, remote)
			setRef(t, remote, "refs/pull/3/head", a)
			if _, err := m.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			opts := source.MirrorOptions{URL: dir, Dir: m.Dir(), Branch: "main"}
			if err := os.WriteFile(filepath.Join(opts.Dir, "refs", "heads", "main"), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(opts.Dir, "opke-ref-1.tmp"), nil, 0o600); err != nil {
				t.Fatal(err)
			}

			var logs strings.Builder
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			m, err := source.OpenMirror(ctx, opts)
			if err != nil {
				t.Fatalf("open the damaged cache: %v", err)
			}
			if !strings.Contains(logs.String(), "damaged ref") || !strings.Contains(logs.String(), "refs/heads/main") {
				t.Errorf("the repair was not logged:\n%s", logs.String())
			}
			refs, err := m.Sync(ctx)
			if err != nil {
				t.Fatalf("sync after the repair: %v", err)
			}
			want := map[string]string{"refs/heads/main": a.String(), "refs/pull/3/head": a.String()}
			if d := cmp.Diff(want, refs); d != "" {
				t.Errorf("refs (-want +got):\n%s", d)
			}
			if left, _ := filepath.Glob(filepath.Join(opts.Dir, "opke-ref-*")); len(left) > 0 {
				t.Errorf("temporary ref files left: %v", left)
			}
		})
	}
}

// TestMirrorReplacesRefsWhole: a ref the cache sets is a new file renamed
// over the old one (as git's lock files), never the old file truncated and
// rewritten, which a crash between the two leaves empty.
func TestMirrorReplacesRefsWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, remote, m := syncedMirror(t)
	a, cache := head(t, remote), m.Dir()
	// The old file, held open, keeps what it held if it was replaced; it
	// reads the new ref if it was rewritten.
	file := filepath.Join(cache, "refs", "heads", "main")
	old, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	b := gittest.Commit(t, remote, "b", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "b\n"}))
	setRef(t, remote, "refs/heads/main", b)
	if _, err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if body, err := io.ReadAll(old); err != nil || string(body) != a.String()+"\n" {
		t.Errorf("the ref file was rewritten in place, not replaced: the old one reads %q (%v)", body, err)
	}
	if body, err := os.ReadFile(file); err != nil || string(body) != b.String()+"\n" {
		t.Errorf("the ref file holds %q (%v), want %s", body, err, b)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "opke-ref-*")); len(left) > 0 {
		t.Errorf("temporary ref files left: %v", left)
	}
}

// syncedMirror is a remote (its folder and repository) whose main holds
// one commit, and a mirror of it, synced.
func syncedMirror(t *testing.T) (string, *git.Repository, *source.Mirror) {
	t.Helper()
	dir := t.TempDir()
	remote := gittest.Init(t, dir)
	setRef(t, remote, "refs/heads/main", gittest.Commit(t, remote, "a", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "a\n"})))
	m := openMirror(t, dir)
	if _, err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dir, remote, m
}

// head is the commit the remote's main names.
func head(t *testing.T, remote *git.Repository) plumbing.Hash {
	t.Helper()
	ref, err := remote.Reference("refs/heads/main", true)
	if err != nil {
		t.Fatal(err)
	}
	return ref.Hash()
}

// TestMirrorBoundsInflatedObjects: a pull request whose pack is small but
// whose blob inflates past the object bound (zeros compress a
// thousandfold: the review's fetch bomb) is refused before go-git
// indexes it, alone: the tracked branch moves on, the pull request says
// why, and nothing of the pack is left in the cache.
func TestMirrorBoundsInflatedObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	remote := gittest.Init(t, dir)
	a := gittest.Commit(t, remote, "a", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "a\n"}))
	bomb := gittest.Commit(t, remote, "bomb", gittest.Files(map[string]string{"zeros": string(make([]byte, 8<<20))}))
	setRef(t, remote, "refs/pull/1/head", bomb)
	gittest.Git(t, dir, "reset", "-q", "--hard", a.String())
	// The tracked branch's history makes more than the pack's total bound
	// (ten versions of a 512 KiB file: 5 MiB once inflated, a small pack
	// of deltas), which bounds pull requests only: a new cache fetches
	// the fleet's whole history.
	noise := make([]byte, 512<<10)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		noise[i] = 'x'
		gittest.Commit(t, remote, fmt.Sprint("v", i), gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "a\n", "history": string(noise)}))
	}
	b := gittest.Commit(t, remote, "b", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": "b\n"}))
	setRef(t, remote, "refs/heads/main", b)

	m, err := refusePullRequest(t, source.MirrorOptions{URL: dir, Branch: "main", Forks: true,
		MaxFetchBytes: 1 << 20, Pack: source.PackLimits{MaxObject: 1 << 20, MaxTotal: 4 << 20}}, b, bomb, source.ErrPackTooLarge)
	if !strings.Contains(err.Error(), "it declares 8 MiB, over 1 MiB") {
		t.Fatalf("Read of the pull request: %v, want it to name its 8 MiB blob", err)
	}
	if err := m.Read(ctx, b.String(), func(fsys fs.FS) error {
		got, err := fs.ReadFile(fsys, "clusters/demo/cluster.yaml")
		if string(got) != "b\n" {
			return fmt.Errorf("the tracked branch's spec: %q, %v", got, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Within the bounds, the same pull request is fetched.
	m2, err := source.OpenMirror(ctx, source.MirrorOptions{URL: dir, Dir: filepath.Join(t.TempDir(), "cache"), Branch: "main", Forks: true,
		Pack: source.PackLimits{MaxObject: 8 << 20, MaxTotal: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.FetchPullRequest(ctx, "refs/pull/1/head", bomb.String()); err != nil {
		t.Fatal(err)
	}
	if err := m2.Read(ctx, bomb.String(), func(fs.FS) error { return nil }); err != nil {
		t.Fatalf("the pull request within the bounds: %v", err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://git.example/fleet.git":            "https://git.example/fleet.git",
		"https://s3cr3t@git.example/fleet.git":     "https://REDACTED@git.example/fleet.git",
		"https://bot:s3cr3t@git.example/fleet.git": "https://REDACTED@git.example/fleet.git",
		"git://s3cr3t@git.example/fleet.git":       "git://REDACTED@git.example/fleet.git",
		"ssh://git@git.example/fleet.git":          "ssh://git@git.example/fleet.git",
		"ssh://git:s3cr3t@git.example/fleet.git":   "ssh://git:REDACTED@git.example/fleet.git",
		"git@git.example:fleet.git":                "git@git.example:fleet.git",
		"/srv/git/fleet.git":                       "/srv/git/fleet.git",
	} {
		if got := source.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// refusePullRequest opens a mirror of opts in a cache of its own and syncs
// it: the tracked branch moves to main; then refs/pull/1/head at pr is
// refused with want, and so is Read of pr, whose error it returns; no
// temporary pack is left.
func refusePullRequest(t *testing.T, opts source.MirrorOptions, main, pr plumbing.Hash, want error) (*source.Mirror, error) {
	t.Helper()
	ctx := context.Background()
	opts.Dir = filepath.Join(t.TempDir(), "cache")
	m, err := source.OpenMirror(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := m.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if refs["refs/heads/main"] != main.String() {
		t.Fatalf("the tracked branch did not move past the pull request: %v", refs)
	}
	if err := m.FetchPullRequest(ctx, "refs/pull/1/head", pr.String()); !errors.Is(err, want) {
		t.Fatalf("FetchPullRequest: %v, want %v", err, want)
	}
	err = m.Read(ctx, pr.String(), func(fs.FS) error { return nil })
	if !errors.Is(err, want) {
		t.Fatalf("Read of the refused pull request: %v, want %v", err, want)
	}
	if tmp, _ := filepath.Glob(filepath.Join(opts.Dir, "objects", "pack", "tmp_*")); len(tmp) > 0 {
		t.Errorf("temporary packs left: %v", tmp)
	}
	return m, err
}

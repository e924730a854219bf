package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/reconciler/source"
)

// history writes a bare repository on main with n commits, each changing
// one of 100 clusters' specs, through git fast-import.
func history(tb testing.TB, n int) (bare, work string) {
	tb.Helper()
	bare, work = gittest.Remote(tb)
	var stream bytes.Buffer
	for i := range n {
		fmt.Fprintf(&stream, "commit refs/heads/main\nmark :%d\ncommitter dev <dev@example.com> %d +0000\n", i+1, 1_700_000_000+i)
		msg := fmt.Sprintf("change %d", i)
		fmt.Fprintf(&stream, "data %d\n%s\n", len(msg), msg)
		if i > 0 {
			fmt.Fprintf(&stream, "from :%d\n", i)
		}
		spec := fmt.Appendf(nil, fleetSpec, clusterName(i%100))
		spec = fmt.Appendf(spec, "# revision %d\n", i)
		fmt.Fprintf(&stream, "M 644 inline clusters/%s/cluster.yaml\ndata %d\n%s\n", clusterName(i%100), len(spec), spec)
	}
	cmd := exec.Command("git", "-C", bare, "fast-import", "--quiet")
	cmd.Stdin = &stream
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("git fast-import: %v\n%s", err, out)
	}
	gittest.Git(tb, work, "pull", "-q", "origin", "main")
	return bare, work
}

// BenchmarkFetchOneCommit: the mirror of a repository of 10,000 commits
// fetches one new commit (made and pushed untimed).
func BenchmarkFetchOneCommit(b *testing.B) {
	ctx := context.Background()
	bare, work := history(b, 10_000)
	m, err := source.OpenMirror(ctx, source.MirrorOptions{URL: "file://" + bare, Dir: filepath.Join(b.TempDir(), "cache"), Branch: "main"})
	if err != nil {
		b.Fatal(err)
	}
	started := time.Now()
	if _, err := m.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("first fetch of 10,000 commits: %s", time.Since(started).Round(time.Millisecond))
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		gittest.Git(b, work, "commit", "-q", "--allow-empty", "-m", fmt.Sprintf("one more %d", i))
		gittest.Git(b, work, "push", "-q", "origin", "HEAD:main")
		head := gittest.Git(b, work, "rev-parse", "HEAD")
		b.StartTimer()
		refs, err := m.Sync(ctx)
		if err != nil && !errors.Is(err, source.ErrUpToDate) {
			b.Fatal(err)
		}
		if refs[m.Branch()] != head {
			b.Fatalf("main at %s after the fetch, want %s", refs[m.Branch()], head)
		}
	}
}

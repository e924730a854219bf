// Package gittest builds real git repositories for tests.
package gittest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"opke.dev/opke/internal/proctest"
)

// Init creates an empty repository at dir.
func Init(t testing.TB, dir string) *git.Repository {
	t.Helper()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatalf("git init %s: %v", dir, err)
	}
	return repo
}

// Commit writes files (a nil body removes the file) into the worktree of
// repo and commits them, returning the commit's hash.
func Commit(t testing.TB, repo *git.Repository, msg string, files map[string]*string) plumbing.Hash {
	t.Helper()
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	root := wt.Filesystem.Root()
	for name, body := range files {
		p := filepath.Join(root, name)
		if body == nil {
			if _, err := wt.Remove(name); err != nil {
				t.Fatalf("git rm %s: %v", name, err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(*body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := wt.Add(name); err != nil {
			t.Fatalf("git add %s: %v", name, err)
		}
	}
	sig := &object.Signature{Name: "test", Email: "test@example.com", When: time.Unix(1_700_000_000, 0)}
	h, err := wt.Commit(msg, &git.CommitOptions{Author: sig, AllowEmptyCommits: true})
	if err != nil {
		t.Fatalf("git commit: %v", err)
	}
	return h
}

// Files turns a map of contents into Commit's argument.
func Files(m map[string]string) map[string]*string {
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = &v
	}
	return out
}

// Git runs the git command line in dir, as a fixed author, and returns its
// output, trimmed; an error fails tb.
func Git(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=dev", "-c", "user.email=dev@example.com"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Remote makes a bare repository whose default branch is main, as a forge
// holds one, and a clone of it on main to commit in and push from.
func Remote(tb testing.TB) (bare, work string) {
	tb.Helper()
	base := tb.TempDir()
	bare, work = filepath.Join(base, "fleet.git"), filepath.Join(base, "work")
	Git(tb, base, "init", "-q", "--bare", "-b", "main", bare)
	Git(tb, base, "clone", "-q", bare, work)
	Git(tb, work, "checkout", "-q", "-b", "main")
	return bare, work
}

// Note returns OPKE's note (refs/notes/opke: the text people read) on
// commit in repo, as git itself reads it; false when there is none.
func Note(tb testing.TB, repo, commit string) ([]byte, bool) {
	tb.Helper()
	out, err := exec.Command("git", "-C", repo, "notes", "--ref=opke", "show", commit).Output()
	return out, err == nil
}

// Record returns OPKE's full record of commit (refs/notes/opke-record:
// the note's JSON) in repo, as git itself reads it; false when there is
// none.
func Record(tb testing.TB, repo, commit string) ([]byte, bool) {
	tb.Helper()
	out, err := exec.Command("git", "-C", repo, "notes", "--ref=opke-record", "show", commit).Output()
	return out, err == nil
}

// Hook calls a daemon's webhook (POST base+"/hooks/git") as a GitHub-like
// forge does after a push of commit to ref, signed with secret; any
// answer but 202 Accepted fails tb.
func Hook(tb testing.TB, base, secret, ref, commit string) {
	tb.Helper()
	body := []byte(`{"ref":"` + ref + `","after":"` + commit + `"}`)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, base+"/hooks/git", bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		tb.Fatalf("webhook: %s", resp.Status)
	}
}

// Daemon serves every repository under base over git:// with `git daemon`
// on addr (127.0.0.1:port), pushes included (OPKE pushes its notes),
// until tb ends or the process is stopped: a remote that a test can make
// unreachable and bring back on the same address. A repository base/x.git
// is git://addr/x.git.
func Daemon(tb testing.TB, base, addr string) *proctest.Proc {
	tb.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		tb.Fatal(err)
	}
	p := proctest.Start(tb, base, "git-daemon", exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
		"--base-path="+base, "--listen="+host, "--port="+port, base))
	proctest.WaitListening(tb, addr)
	return p
}

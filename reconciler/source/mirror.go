package source

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"opke.dev/opke/reconciler/report"
)

// ErrUpToDate is Sync's answer when no ref it follows moved: nothing was
// fetched. Like go-git's NoErrAlreadyUpToDate, it is not a failure.
var ErrUpToDate = errors.New("the remote's refs did not move")

// notesRefs are the notes refs the mirror follows and pushes, a note per
// commit in each, as report.Notes writes them: the text people read in
// git log --notes=opke, and the full record beside it.
var notesRefs = []string{report.TextRef, report.RecordRef}

// isNotes tells whether ref is one of OPKE's notes refs.
func isNotes(ref string) bool { return slices.Contains(notesRefs, ref) }

// MirrorOptions say what to mirror and where.
type MirrorOptions struct {
	// URL is the remote: a path or file://, git://, https:// or ssh://
	// (and scp-like user@host:path).
	URL string
	// Dir is the cache: a bare repository, made on first use.
	Dir string
	// Branch is the tracked branch's name (not its ref).
	Branch string
	// Patterns are further branch names (path.Match globs) planned as pull
	// requests are.
	Patterns []string
	// Auth authenticates to the remote (nil for file:// and git://).
	Auth transport.AuthMethod
	// Author signs the notes' commits.
	Author string
	// MaxFetchBytes bounds the pack one fetch may bring
	// (DefaultMaxFetchBytes); the tracked branch and each pull request
	// are fetched apart, so a pull request over it fails alone.
	MaxFetchBytes int64
	// Pack bounds what each fetched pack may hold once inflated
	// (DefaultMaxObjectBytes, DefaultMaxInflatedBytes): a fetch over it
	// is refused before go-git indexes the object over it. MaxTotal bounds
	// pull requests' fetches only.
	Pack PackLimits
	// PullRequestFetchTimeout bounds each pull request's fetch
	// (DefaultPullRequestFetchTimeout): the tracked branch waits for it.
	PullRequestFetchTimeout time.Duration
	// Forks follows the pull request heads that no branch of the
	// repository holds (a fork's, which anyone can open); without it
	// they are neither fetched nor planned.
	Forks  bool
	Logger *slog.Logger
}

// DefaultMaxFetchBytes is MirrorOptions.MaxFetchBytes' default.
const DefaultMaxFetchBytes = 128 << 20

// DefaultPullRequestFetchTimeout is MirrorOptions.PullRequestFetchTimeout's
// default.
const DefaultPullRequestFetchTimeout = 2 * time.Minute

// ErrFetchTooLarge is a fetch whose pack is over MaxFetchBytes.
var ErrFetchTooLarge = errors.New("the fetch is larger than its limit")

// Mirror is a bare clone of the fleet repository that follows the remote:
// the tracked branch, pull and merge request heads, the branches matching
// the patterns, and OPKE's notes. Its methods are safe for concurrent use
// (they take turns: go-git's storage is not made for concurrent writers).
type Mirror struct {
	opts    MirrorOptions
	mu      sync.Mutex
	repo    *git.Repository
	storage *cacheStorage
	// seen are the followed refs as last fetched.
	seen map[string]string
	// failed are the pull request heads whose fetch failed, by commit:
	// Read answers with the reason, and they are not fetched again until
	// they move.
	failed map[string]error
}

// OpenMirror opens the cache at opts.Dir, making it (and its remote)
// when missing. Nothing is fetched before the first Sync.
func OpenMirror(ctx context.Context, opts MirrorOptions) (*Mirror, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Branch == "" {
		opts.Branch = "main"
	}
	opts.MaxFetchBytes = cmp.Or(opts.MaxFetchBytes, DefaultMaxFetchBytes)
	opts.Pack.MaxObject = cmp.Or(opts.Pack.MaxObject, DefaultMaxObjectBytes)
	opts.Pack.MaxTotal = cmp.Or(opts.Pack.MaxTotal, DefaultMaxInflatedBytes)
	opts.PullRequestFetchTimeout = cmp.Or(opts.PullRequestFetchTimeout, DefaultPullRequestFetchTimeout)
	st := &cacheStorage{Storage: filesystem.NewStorage(osfs.New(opts.Dir), cache.NewObjectLRUDefault()), dir: opts.Dir, max: opts.MaxFetchBytes, maxObject: opts.Pack.MaxObject}
	repo, err := git.Open(st, nil)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("git cache: %w", err)
		}
		repo, err = git.Init(st, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("git cache %s: %w", opts.Dir, err)
	}
	remote := &config.RemoteConfig{Name: "origin", URLs: []string{opts.URL}}
	if r, err := repo.Remote("origin"); err == nil && !slices.Equal(r.Config().URLs, remote.URLs) {
		if err := repo.DeleteRemote("origin"); err != nil {
			return nil, fmt.Errorf("git cache %s: %w", opts.Dir, err)
		}
	}
	if _, err := repo.Remote("origin"); errors.Is(err, git.ErrRemoteNotFound) {
		if _, err := repo.CreateRemote(remote); err != nil {
			return nil, fmt.Errorf("git cache %s: %w", opts.Dir, err)
		}
	}
	// A cache that go-git's own ref writes left with an empty ref when the
	// daemon was killed (before cacheStorage) opens: what it held is the
	// remote's, fetched again.
	if err := repairRefs(opts.Dir, opts.Logger); err != nil {
		return nil, err
	}
	m := &Mirror{opts: opts, repo: repo, storage: st, failed: map[string]error{}}
	if m.seen, err = m.localRefs(); err != nil {
		return nil, err
	}
	return m, nil
}

// repairRefs removes the cache's ref files that hold no ref (empty or cut
// short) and the temporary files of refs never renamed: the next Sync
// fetches those refs again.
func repairRefs(dir string, log *slog.Logger) error {
	tmp, _ := filepath.Glob(filepath.Join(dir, refTempPattern))
	for _, f := range tmp {
		_ = os.Remove(f)
	}
	return filepath.WalkDir(filepath.Join(dir, "refs"), func(file string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("git cache: %w", err)
		}
		if validRef(strings.TrimSpace(string(b))) {
			return nil
		}
		rel, _ := filepath.Rel(dir, file)
		log.Warn("the git cache held a damaged ref; removed, to be fetched again", "ref", filepath.ToSlash(rel), "bytes", len(b))
		if err := os.Remove(file); err != nil {
			return fmt.Errorf("git cache: %w", err)
		}
		return nil
	})
}

// validRef tells whether a ref file's content (spaces trimmed) is a ref:
// an object name (SHA-1 or SHA-256) or "ref: " and a name.
func validRef(s string) bool {
	if target, ok := strings.CutPrefix(s, "ref: "); ok {
		return target != ""
	}
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// CacheDir names a remote's cache folder under dir: one per URL.
func CacheDir(dir, remoteURL string) string {
	sum := sha256.Sum256([]byte(remoteURL))
	return filepath.Join(dir, hex.EncodeToString(sum[:8])+".git")
}

// LocalPath returns the remote's folder when it is a local repository (a
// path or file:// URL), to watch it; "" otherwise.
func (m *Mirror) LocalPath() string {
	u := m.opts.URL
	if strings.HasPrefix(u, "file://") {
		if p, err := url.Parse(u); err == nil {
			return p.Path
		}
		return ""
	}
	if ep, err := transport.NewEndpoint(u); err == nil && ep.Protocol == "file" {
		return ep.Path
	}
	return ""
}

// Dir is the cache's folder (a bare repository).
func (m *Mirror) Dir() string { return m.opts.Dir }

// Branch is the tracked branch's ref.
func (m *Mirror) Branch() string { return plumbing.NewBranchReferenceName(m.opts.Branch).String() }

// follows tells whether OPKE follows ref: the tracked branch, a pull or
// merge request head, a branch of the patterns, or the notes.
func (m *Mirror) follows(ref string) bool {
	switch {
	case ref == m.Branch(), isNotes(ref):
		return true
	case isPullRequestHead(ref):
		return true
	}
	if name, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
		for _, p := range m.opts.Patterns {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
	}
	return false
}

// isPullRequestHead tells whether ref is a forge's pull (GitHub, Gitea)
// or merge (GitLab) request head: refs/pull/N/head,
// refs/merge-requests/N/head.
func isPullRequestHead(ref string) bool {
	return (strings.HasPrefix(ref, "refs/pull/") || strings.HasPrefix(ref, "refs/merge-requests/")) &&
		strings.HasSuffix(ref, "/head") && strings.Count(ref, "/") == 3
}

// IsPullRequest tells whether ref is one that is planned only: anything
// followed but the tracked branch and the notes.
func (m *Mirror) IsPullRequest(ref string) bool {
	return ref != m.Branch() && !isNotes(ref) && m.follows(ref)
}

// localRefs lists the followed refs the cache holds.
func (m *Mirror) localRefs() (map[string]string, error) {
	iter, err := m.repo.References()
	if err != nil {
		return nil, fmt.Errorf("git cache refs: %w", err)
	}
	out := map[string]string{}
	err = iter.ForEach(func(r *plumbing.Reference) error {
		if r.Type() == plumbing.HashReference && m.follows(r.Name().String()) {
			out[r.Name().String()] = r.Hash().String()
		}
		return nil
	})
	return out, err
}

// Sync asks the remote for its refs (one round trip) and fetches the
// tracked branch, the other followed branches and the notes when one
// moved, appeared or went; it returns the followed refs (the notes aside)
// by name with their remote commits. A pull request head is returned,
// not fetched: [Mirror.FetchPullRequest] fetches it, when the daemon has
// recorded that it does, so that the tracked branch never waits behind a
// pull request, nor fails with one. When nothing moved it returns the
// refs with [ErrUpToDate].
func (m *Mirror) Sync(ctx context.Context) (map[string]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	remote, err := m.repo.Remote("origin")
	if err != nil {
		return nil, fmt.Errorf("git cache: %w", err)
	}
	listed, err := remote.ListContext(ctx, &git.ListOptions{Auth: m.opts.Auth})
	if err != nil {
		return nil, fmt.Errorf("list the refs of %s: %w", Redact(m.opts.URL), err)
	}
	want, branches := map[string]string{}, map[string]bool{}
	for _, r := range listed {
		if r.Type() == plumbing.HashReference && r.Name().IsBranch() {
			branches[r.Hash().String()] = true
		}
	}
	for _, r := range listed {
		name, hash := r.Name().String(), r.Hash().String()
		if r.Type() != plumbing.HashReference || !m.follows(name) {
			continue
		}
		if !m.opts.Forks && isPullRequestHead(name) && !branches[hash] {
			continue // a fork's: no branch of the repository holds it
		}
		want[name] = hash
	}
	if maps.Equal(want, m.seen) {
		return withoutNotes(want), ErrUpToDate
	}
	// The tracked branch, the other followed branches and the notes, in
	// one fetch.
	missing := func(name string) bool { return m.seen[name] != want[name] && !m.has(want[name]) }
	var trusted []config.RefSpec
	for name := range want {
		if !m.IsPullRequest(name) && missing(name) {
			trusted = append(trusted, config.RefSpec("+"+name+":"+name))
		}
	}
	if len(trusted) > 0 {
		if err := m.fetch(ctx, remote, m.trusted(), trusted...); err != nil {
			return nil, fmt.Errorf("fetch from %s: %w", Redact(m.opts.URL), err)
		}
	}
	// Refs whose commits the cache has (a branch moved back, a pull
	// request at a commit of main) are set without a fetch; a pull
	// request's other head waits for FetchPullRequest; refs the remote
	// dropped (a closed pull request) go, and so do the failures of heads
	// no ref names any more.
	for name, hash := range want {
		if !m.has(hash) {
			continue
		}
		ref := plumbing.NewHashReference(plumbing.ReferenceName(name), plumbing.NewHash(hash))
		if err := m.repo.Storer.SetReference(ref); err != nil {
			return nil, fmt.Errorf("git cache: %w", err)
		}
	}
	for name := range m.seen {
		if _, ok := want[name]; !ok {
			if err := m.repo.Storer.RemoveReference(plumbing.ReferenceName(name)); err != nil {
				return nil, fmt.Errorf("git cache: %w", err)
			}
		}
	}
	heads := map[string]bool{}
	for _, hash := range want {
		heads[hash] = true
	}
	maps.DeleteFunc(m.failed, func(hash string, _ error) bool { return !heads[hash] || m.has(hash) })
	m.opts.Logger.Debug("fetched", "remote", Redact(m.opts.URL), "refs", len(trusted))
	m.seen = want
	return withoutNotes(want), nil
}

// FetchPullRequest fetches a pull request head that Sync returned at
// commit, alone: its pack bounded in size, in what it holds once inflated
// (MirrorOptions.Pack, whole) and in time (PullRequestFetchTimeout). A
// head refused by a bound is not fetched again: its refusal is returned,
// and Read of it returns it too, until the pull request moves. A head the
// cache has costs nothing.
func (m *Mirror) FetchPullRequest(ctx context.Context, ref, commit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.IsPullRequest(ref) {
		return fmt.Errorf("%s is not a pull request head", ref)
	}
	if !m.has(commit) {
		if err := m.failed[commit]; err != nil {
			return err
		}
		remote, err := m.repo.Remote("origin")
		if err != nil {
			return fmt.Errorf("git cache: %w", err)
		}
		// Bounded in time too: Sync, Read and the notes wait for it.
		fctx, cancel := context.WithTimeout(ctx, m.opts.PullRequestFetchTimeout)
		defer cancel()
		if err := m.fetch(fctx, remote, m.opts.Pack, config.RefSpec("+"+ref+":"+ref)); err != nil {
			if ctx.Err() != nil {
				return err
			}
			if fctx.Err() != nil {
				err = fmt.Errorf("not fetched within %s: %w", m.opts.PullRequestFetchTimeout, err)
			}
			err = fmt.Errorf("fetch %s from %s: %w", ref, Redact(m.opts.URL), err)
			m.opts.Logger.Warn("fetch a pull request", "ref", ref, "commit", commit, "err", err)
			if errors.Is(err, ErrFetchTooLarge) || errors.Is(err, ErrPackTooLarge) {
				m.failed[commit] = err // the same pack again would be refused again
			}
			return err
		}
		if !m.has(commit) {
			// The pull request moved since the listing: the next Sync
			// returns its new head.
			return fmt.Errorf("fetch %s: the remote's head is no longer %s", ref, commit)
		}
	}
	h := plumbing.NewHashReference(plumbing.ReferenceName(ref), plumbing.NewHash(commit))
	if err := m.repo.Storer.SetReference(h); err != nil {
		return fmt.Errorf("git cache: %w", err)
	}
	return nil
}

// trusted are the bounds of the tracked branch's and the notes' fetches:
// each object, not the whole (a new cache fetches the fleet's whole
// history, and every commit's notes).
func (m *Mirror) trusted() PackLimits { return PackLimits{MaxObject: m.opts.Pack.MaxObject} }

func (m *Mirror) has(hash string) bool {
	_, err := m.repo.CommitObject(plumbing.NewHash(hash))
	return err == nil
}

func withoutNotes(refs map[string]string) map[string]string {
	out := maps.Clone(refs)
	for _, ref := range notesRefs {
		delete(out, ref)
	}
	return out
}

// Read calls fn with the tree of commit as a filesystem.
func (m *Mirror) Read(ctx context.Context, commit string, fn func(fs.FS) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := m.repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		if ferr := m.failed[commit]; ferr != nil {
			return ferr
		}
		return fmt.Errorf("%w %s: %w", ErrUnknownRevision, commit, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return fmt.Errorf("read the tree of %s: %w", commit, err)
	}
	return fn(ctxFS{ctx: ctx, TreeFS: newTreeFS(tree)})
}

// ctxFS is a TreeFS that stops answering when ctx ends: a daemon told to
// stop while it reads a large fleet stops reading.
type ctxFS struct {
	ctx context.Context
	*TreeFS
}

func (f ctxFS) Open(name string) (fs.File, error) {
	if err := f.ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return f.TreeFS.Open(name)
}

func (f ctxFS) Stat(name string) (fs.FileInfo, error) {
	if err := f.ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return f.TreeFS.Stat(name)
}

func (f ctxFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := f.ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return f.TreeFS.ReadDir(name)
}

// ErrUnsigned is a commit with no signature or one no key of the keyring
// made.
var ErrUnsigned = errors.New("commit is not signed by a trusted key")

// CommitInfo is what a commit says of itself: who wrote it, when, and
// why (the status page's commit page shows it).
type CommitInfo struct {
	Author  string    `json:"author"`
	When    time.Time `json:"when"`
	Message string    `json:"message"`
}

// Subject is the message's first line.
func (c CommitInfo) Subject() string {
	subject, _, _ := strings.Cut(c.Message, "\n")
	return subject
}

// Commit reads commit's author, time and message from the cache.
func (m *Mirror) Commit(commit string) (CommitInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, err := m.repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return CommitInfo{}, fmt.Errorf("%w %s: %w", ErrUnknownRevision, commit, err)
	}
	return CommitInfo{Author: c.Author.Name + " <" + c.Author.Email + ">", When: c.Author.When, Message: strings.TrimSpace(c.Message)}, nil
}

// Verify checks that commit is signed by a key of keyring (armored
// OpenPGP public keys).
func (m *Mirror) Verify(commit, keyring string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, err := m.repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrUnknownRevision, commit, err)
	}
	if c.PGPSignature == "" {
		return fmt.Errorf("%s: %w: it has no signature", commit, ErrUnsigned)
	}
	if _, err := c.Verify(keyring); err != nil {
		return fmt.Errorf("%s: %w: %v", commit, ErrUnsigned, err)
	}
	return nil
}

// Note returns OPKE's note on commit under the notes ref, from the cache.
func (m *Mirror) Note(ref, commit string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tree, _, err := m.notesTree(ref)
	if err != nil || tree == nil {
		return nil, err
	}
	f, err := tree.File(commit)
	if err != nil {
		return nil, fmt.Errorf("note of %s: %w", commit, err)
	}
	r, err := f.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// notesTree is the tree of the notes ref and its commit; nil, nil when
// there are no notes yet.
func (m *Mirror) notesTree(notes string) (*object.Tree, *plumbing.Hash, error) {
	ref, err := m.repo.Reference(plumbing.ReferenceName(notes), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("notes: %w", err)
	}
	c, err := m.repo.CommitObject(ref.Hash())
	if err != nil {
		return nil, nil, fmt.Errorf("notes: %w", err)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, nil, fmt.Errorf("notes: %w", err)
	}
	h := ref.Hash()
	return tree, &h, nil
}

// AddNotes sets OPKE's notes on commit, a body by notes ref (notesRefs),
// and pushes them to the remote in one push, so that `git log
// --notes=opke` shows them wherever the repository is cloned. Notes
// another writer pushed meanwhile are fetched and kept: a rejected push is
// tried again on top of them.
func (m *Mirror) AddNotes(ctx context.Context, commit string, bodies map[string][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	remote, err := m.repo.Remote("origin")
	if err != nil {
		return fmt.Errorf("git cache: %w", err)
	}
	refs := slices.Sorted(maps.Keys(bodies))
	var specs []config.RefSpec
	for _, ref := range refs {
		if !isNotes(ref) {
			return fmt.Errorf("notes of %s: %s is not one of OPKE's notes refs", commit, ref)
		}
		specs = append(specs, config.RefSpec(ref+":"+ref))
	}
	var pushErr error
	for range 3 {
		// The remote's notes first, each apart: a fetch that finds none is
		// no error.
		for _, ref := range refs {
			err := m.fetch(ctx, remote, m.trusted(), config.RefSpec("+"+ref+":"+ref))
			if err != nil && !isNoMatchingRef(err) {
				return fmt.Errorf("fetch the notes from %s: %w", Redact(m.opts.URL), err)
			}
			if err := m.writeNote(ref, commit, bodies[ref]); err != nil {
				return err
			}
		}
		pushErr = remote.PushContext(ctx, &git.PushOptions{RefSpecs: specs, Auth: m.opts.Auth})
		if pushErr == nil || errors.Is(pushErr, git.NoErrAlreadyUpToDate) {
			for _, name := range refs {
				if ref, err := m.repo.Reference(plumbing.ReferenceName(name), true); err == nil {
					m.seen[name] = ref.Hash().String()
				}
			}
			return nil
		}
		if !errors.Is(pushErr, git.ErrNonFastForwardUpdate) && !strings.Contains(pushErr.Error(), "non-fast-forward") {
			break
		}
	}
	return fmt.Errorf("push the notes to %s: %w", Redact(m.opts.URL), pushErr)
}

func isNoMatchingRef(err error) bool {
	var nf git.NoMatchingRefSpecError
	return errors.As(err, &nf) || strings.Contains(err.Error(), "couldn't find remote ref")
}

// writeNote commits the notes ref's tree with commit's note set to body.
func (m *Mirror) writeNote(notes, commit string, body []byte) error {
	tree, parent, err := m.notesTree(notes)
	if err != nil {
		return err
	}
	blob := m.repo.Storer.NewEncodedObject()
	blob.SetType(plumbing.BlobObject)
	w, err := blob.Writer()
	if err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	blobHash, err := m.repo.Storer.SetEncodedObject(blob)
	if err != nil {
		return fmt.Errorf("notes: %w", err)
	}
	var entries []object.TreeEntry
	if tree != nil {
		for _, e := range tree.Entries {
			if e.Name != commit {
				entries = append(entries, e)
			}
		}
	}
	entries = append(entries, object.TreeEntry{Name: commit, Mode: filemode.Regular, Hash: blobHash})
	// git's order: names compared with a "/" after those of trees.
	sortKey := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	slices.SortFunc(entries, func(a, b object.TreeEntry) int { return strings.Compare(sortKey(a), sortKey(b)) })
	newTree := &object.Tree{Entries: entries}
	treeObj := m.repo.Storer.NewEncodedObject()
	if err := newTree.Encode(treeObj); err != nil {
		return fmt.Errorf("notes: %w", err)
	}
	treeHash, err := m.repo.Storer.SetEncodedObject(treeObj)
	if err != nil {
		return fmt.Errorf("notes: %w", err)
	}
	sig := object.Signature{Name: "OPKE", Email: "opke@localhost", When: time.Now()}
	if m.opts.Author != "" {
		sig.Name = m.opts.Author
	}
	c := &object.Commit{Author: sig, Committer: sig, Message: "Notes added by OPKE\n", TreeHash: treeHash}
	if parent != nil {
		c.ParentHashes = []plumbing.Hash{*parent}
	}
	commitObj := m.repo.Storer.NewEncodedObject()
	if err := c.Encode(commitObj); err != nil {
		return fmt.Errorf("notes: %w", err)
	}
	h, err := m.repo.Storer.SetEncodedObject(commitObj)
	if err != nil {
		return fmt.Errorf("notes: %w", err)
	}
	return m.repo.Storer.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(notes), h))
}

// Redact drops what a URL's user information may hide a token in, for
// logs and errors: its password, and its user name but ssh's (git@).
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		return u
	}
	_, hasPassword := p.User.Password()
	switch {
	case p.Scheme != "ssh":
		p.User = url.User("REDACTED")
	case hasPassword:
		p.User = url.UserPassword(p.User.Username(), "REDACTED")
	}
	return p.String()
}

// ErrTooManyCommits is Since's answer when more commits than its limit
// lie between the two it was given.
var ErrTooManyCommits = errors.New("too many commits to check")

// Log lists head and its first parents, newest first, at most limit
// commits: a branch's recent history as people read it.
func (m *Mirror) Log(head string, limit int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for h := plumbing.NewHash(head); len(out) < limit; {
		c, err := m.repo.CommitObject(h)
		if err != nil {
			if len(out) > 0 {
				return out, nil // a shallow history ends here
			}
			return nil, fmt.Errorf("%w %s: %w", ErrUnknownRevision, head, err)
		}
		out = append(out, c.Hash.String())
		if len(c.ParentHashes) == 0 {
			break
		}
		h = c.ParentHashes[0]
	}
	return out, nil
}

// Since lists the commits reachable from head and not from base, newest
// first, and tells whether head descends from base (or is base). It reads
// at most limit commits past base's history; more is ErrTooManyCommits.
// A base the cache does not hold is ErrUnknownRevision.
func (m *Mirror) Since(ctx context.Context, base, head string, limit int) ([]string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.repo.CommitObject(plumbing.NewHash(base))
	if err != nil {
		return nil, false, fmt.Errorf("%w %s: %w", ErrUnknownRevision, base, err)
	}
	h, err := m.repo.CommitObject(plumbing.NewHash(head))
	if err != nil {
		return nil, false, fmt.Errorf("%w %s: %w", ErrUnknownRevision, head, err)
	}
	// base's whole history, then head's walk stops wherever it meets it.
	known := map[plumbing.Hash]bool{}
	walk := func(from *object.Commit, visit func(*object.Commit) error) error {
		queue := []*object.Commit{from}
		seen := map[plumbing.Hash]bool{from.Hash: true}
		for n := 0; len(queue) > 0; n++ {
			if n%256 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			c := queue[0]
			queue = queue[1:]
			if err := visit(c); err != nil {
				return err
			}
			for _, p := range c.ParentHashes {
				if seen[p] || known[p] {
					continue
				}
				seen[p] = true
				pc, err := m.repo.CommitObject(p)
				if err != nil {
					return fmt.Errorf("read commit %s: %w", p, err)
				}
				queue = append(queue, pc)
			}
		}
		return nil
	}
	if err := walk(b, func(c *object.Commit) error { known[c.Hash] = true; return nil }); err != nil {
		return nil, false, err
	}
	if known[h.Hash] {
		return nil, h.Hash == b.Hash, nil
	}
	var out []string
	descends := false
	err = walk(h, func(c *object.Commit) error {
		if len(out) == limit {
			return fmt.Errorf("%s..%s: %w (over %d)", base, head, ErrTooManyCommits, limit)
		}
		out = append(out, c.Hash.String())
		descends = descends || slices.Contains(c.ParentHashes, b.Hash)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return out, descends, nil
}

// fetch fetches specs from remote, the pack bounded by MaxFetchBytes (a
// larger one is ErrFetchTooLarge) and what it holds by lim
// (ErrPackTooLarge); already up to date is no error. The caller holds
// m.mu.
func (m *Mirror) fetch(ctx context.Context, remote *git.Remote, lim PackLimits, specs ...config.RefSpec) error {
	slices.Sort(specs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bound := m.storage.arm(cancel, lim)
	defer m.storage.disarm()
	err := remote.FetchContext(ctx, &git.FetchOptions{RefSpecs: specs, Auth: m.opts.Auth, Force: true, Tags: git.NoTags})
	switch {
	case bound.over.Load() && bound.why != nil:
		return bound.why
	case bound.over.Load():
		return fmt.Errorf("%w (%d MiB)", ErrFetchTooLarge, m.opts.MaxFetchBytes>>20)
	case errors.Is(err, git.NoErrAlreadyUpToDate):
		return nil
	}
	return err
}

// cacheStorage is the cache's go-git storage with two changes.
//
// Every fetched pack is bounded, in its size and in what its objects
// inflate to (packGate). A fetch arms it with its cancel: a pack
// over a bound cancels the fetch (which kills the remote's upload-pack;
// go-git's file transport waits for it forever if the pack is merely no
// longer read), the rest is discarded, and no temporary pack is left.
//
// A ref is written whole and renamed into place, as git does with its
// lock files (SetReference): go-git truncates the file and then writes
// it, so a daemon killed between the two left an empty ref file, which
// every later listing of the refs fails on.
type cacheStorage struct {
	*filesystem.Storage
	dir string
	max int64
	// maxObject bounds each object of a pack fetched with no bound
	// armed (none is: every fetch arms its own).
	maxObject int64
	// fetch is the bound of the fetch under way (fetches take turns
	// under the mirror's mutex).
	fetch *fetchBound
}

type fetchBound struct {
	cancel context.CancelFunc
	over   atomic.Bool
	// why is the scan's refusal, when that is what cut the fetch (set
	// before over).
	why error
	// lim bounds what the pack holds once inflated.
	lim PackLimits
}

func (s *cacheStorage) arm(cancel context.CancelFunc, lim PackLimits) *fetchBound {
	s.fetch = &fetchBound{cancel: cancel, lim: lim}
	return s.fetch
}

// disarm ends a fetch's bound: the next pack gets one of its own (one
// left armed after an overflow would cut the next fetch).
func (s *cacheStorage) disarm() { s.fetch = nil }

// PackfileWriter implements storer.PackfileWriter, which a fetch writes
// its pack through.
func (s *cacheStorage) PackfileWriter() (io.WriteCloser, error) {
	w, err := s.Storage.PackfileWriter()
	if err != nil {
		return nil, err
	}
	bound := s.fetch
	if bound == nil {
		bound = &fetchBound{cancel: func() {}, lim: PackLimits{MaxObject: s.maxObject}}
	}
	return &boundedWriter{w: w, left: s.max, dir: s.dir, bound: bound, gate: newPackGate(bound.lim)}, nil
}

type boundedWriter struct {
	w     io.WriteCloser
	left  int64
	dir   string
	bound *fetchBound
	gate  *packGate
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if b.bound.over.Load() {
		return len(p), nil // discarded, until the cancelled read ends it
	}
	if int64(len(p)) > b.left {
		b.bound.over.Store(true)
		b.bound.cancel()
		return len(p), nil
	}
	if err := b.gate.check(p); err != nil {
		b.bound.why = err
		b.bound.over.Store(true)
		b.bound.cancel()
		return len(p), nil
	}
	b.left -= int64(len(p))
	return b.w.Write(p)
}

// Close ends the pack; one cut short leaves no temporary file behind.
func (b *boundedWriter) Close() error {
	b.gate.close()
	err := b.w.Close()
	if !b.bound.over.Load() {
		return err
	}
	tmp, _ := filepath.Glob(filepath.Join(b.dir, "objects", "pack", "tmp_pack_*"))
	for _, f := range tmp {
		_ = os.Remove(f)
	}
	return ErrFetchTooLarge
}

// refTempPattern names the files a ref is written to before its rename,
// in the cache's folder.
const refTempPattern = "opke-ref-*.tmp"

// SetReference implements storer.ReferenceStorer: a hash reference is
// written to a file in the cache's folder and renamed over its own, so a crash leaves
// the old ref or the new one, never a part of either. Symbolic references
// (HEAD, at the cache's creation) are go-git's.
func (s *cacheStorage) SetReference(ref *plumbing.Reference) error {
	return s.CheckAndSetReference(ref, nil)
}

// CheckAndSetReference implements storer.ReferenceStorer: ref is set if
// old is nil or what the ref holds. The mirror's writers take turns
// under its mutex, and one daemon uses a cache.
func (s *cacheStorage) CheckAndSetReference(ref, old *plumbing.Reference) error {
	name := ref.Name()
	if ref.Type() != plumbing.HashReference || !strings.HasPrefix(name.String(), "refs/") {
		return s.Storage.CheckAndSetReference(ref, old)
	}
	if !name.IsSafe() || name.Validate() != nil {
		return fmt.Errorf("set the ref %q: %w", name, plumbing.ErrInvalidReferenceName)
	}
	if old != nil {
		cur, err := s.Storage.Reference(old.Name())
		if err != nil {
			return fmt.Errorf("set the ref %s: %w", name, err)
		}
		if cur.Hash() != old.Hash() {
			return storage.ErrReferenceHasChanged
		}
	}
	file := filepath.Join(s.dir, filepath.FromSlash(name.String()))
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("set the ref %s: %w", name, err)
	}
	// Beside the refs, not among them: go-git reads every file under refs/
	// as a ref.
	tmp, err := os.CreateTemp(s.dir, refTempPattern)
	if err != nil {
		return fmt.Errorf("set the ref %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	if _, err := tmp.WriteString(ref.Hash().String() + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("set the ref %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("set the ref %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("set the ref %s: %w", name, err)
	}
	return nil
}

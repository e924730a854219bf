package world

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

// recipe names how this package builds an artifact; changing it rebuilds
// every artifact (its hash is in each artifact's complete mark).
const recipe = "world/3: -trimpath -ldflags=-s -w, CGO off unless asked, the module's versioned replacements kept, images a gzip layer over an optional Debian base"

// DefaultCacheDir is where builds are kept between runs, outside any
// repository: $OPKE_CACHE/world, else the user's cache folder.
func DefaultCacheDir() string {
	if d := os.Getenv("OPKE_CACHE"); d != "" {
		return filepath.Join(d, "world")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "opke", "world")
	}
	return filepath.Join(os.TempDir(), "opke-world")
}

// Runner runs a command: exec by default, a recorder in tests.
type Runner func(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error)

func execRunner(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// World builds artifacts into a cache folder.
type World struct {
	Dir string
	Log *slog.Logger
	// Run runs the go and gcc commands; exec if nil.
	Run Runner
}

// run runs a command with w.Run, exec when it is nil.
func (w *World) run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	if w.Run == nil {
		return execRunner(ctx, dir, env, name, args...)
	}
	return w.Run(ctx, dir, env, name, args...)
}

// New returns a World caching in dir.
func New(dir string, log *slog.Logger) *World {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &World{Dir: dir, Log: log, Run: execRunner}
}

// Built is what Ensure found or built, by artifact key.
type Built struct {
	Artifacts []Result
}

// Result is one artifact's outcome.
type Result struct {
	Key    string
	Cached bool
	Took   time.Duration
	// Binaries by name, Images by reference, Files (downloads and their
	// sha256 files) by their URL's host and path: paths.
	Binaries map[string]string
	Images   map[string]string
	Files    map[string]string
}

// Binary returns the path of a built binary of the artifact key.
func (b *Built) Binary(key, name string) (string, bool) {
	for _, r := range b.Artifacts {
		if r.Key == key {
			p, ok := r.Binaries[name]
			return p, ok
		}
	}
	return "", false
}

// Image returns the OCI layout of an image reference.
func (b *Built) Image(ref string) (string, bool) {
	for _, r := range b.Artifacts {
		if p, ok := r.Images[ref]; ok {
			return p, true
		}
	}
	return "", false
}

// Images lists every image's reference, sorted.
func (b *Built) Images() []string {
	var refs []string
	for _, r := range b.Artifacts {
		refs = append(refs, slices.Collect(maps.Keys(r.Images))...)
	}
	slices.Sort(refs)
	return refs
}

// Files are every download's file and its sha256 file, by URL host and
// path (dl.k8s.io/release/v1.35.1/bin/linux/amd64/kubelet): local paths.
func (b *Built) Files() map[string]string {
	out := map[string]string{}
	for _, r := range b.Artifacts {
		maps.Copy(out, r.Files)
	}
	return out
}

// Ensure returns every artifact of arts, building those not in the cache
// (or built by another recipe) one after the other, logging each as it
// starts and ends.
func (w *World) Ensure(ctx context.Context, arts []Artifact) (*Built, error) {
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
	out := &Built{}
	for i, a := range arts {
		started := time.Now()
		dir := filepath.Join(w.Dir, a.Key)
		r := Result{Key: a.Key, Binaries: map[string]string{}, Images: map[string]string{}, Files: map[string]string{}}
		for _, b := range a.Binaries {
			r.Binaries[b.Name] = filepath.Join(dir, "bin", b.Name)
		}
		for _, im := range a.Images {
			r.Images[im.Ref] = filepath.Join(dir, "images", imageDirName(im.Ref))
		}
		for _, d := range a.Downloads {
			for _, p := range []string{d.Path, d.Path + ".sha256"} {
				r.Files[p] = filepath.Join(dir, "files", filepath.FromSlash(p))
			}
		}
		mark, _ := os.ReadFile(filepath.Join(dir, "complete"))
		if strings.TrimSpace(string(mark)) == a.Hash() {
			r.Cached = true
			out.Artifacts = append(out.Artifacts, r)
			w.Log.Info("cached", "artifact", a.Key, "n", fmt.Sprintf("%d/%d", i+1, len(arts)))
			continue
		}
		from := a.Module + "@" + a.Version
		if a.Lang == Debian {
			from = "debian"
		}
		w.Log.Info("building", "artifact", a.Key, "from", from, "n", fmt.Sprintf("%d/%d", i+1, len(arts)))
		if err := w.build(ctx, a, dir); err != nil {
			return out, err
		}
		r.Took = time.Since(started)
		w.Log.Info("built", "artifact", a.Key, "took", r.Took.Round(time.Second))
		out.Artifacts = append(out.Artifacts, r)
	}
	return out, nil
}

// linkRecipe names how an image's hard links are written; it is part of
// the build of the artifacts whose images have them only, so that a
// change to it rebuilds those and no other.
const linkRecipe = "links/2: a hard link's header carries its file's mode"

// Hash names an artifact's build: its pins and this package's recipe.
func (a Artifact) Hash() string {
	b, _ := json.Marshal(a)
	h := sha256.New()
	h.Write([]byte(recipe))
	if slices.ContainsFunc(a.Images, func(im ImageSpec) bool {
		return slices.ContainsFunc(im.Files, func(f ImageFile) bool { return f.Link != "" || f.Applets })
	}) {
		h.Write([]byte(linkRecipe))
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// imageDirName is a reference made a folder name.
func imageDirName(ref string) string {
	return strings.NewReplacer("/", "_", ":", "@").Replace(ref)
}

// build builds a into dir: binaries into dir.tmp, then renamed.
func (w *World) build(ctx context.Context, a Artifact, dir string) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("world %s: %w", a.Key, err)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "bin"), 0o755); err != nil {
		return fmt.Errorf("world %s: %w", a.Key, err)
	}
	var info moduleInfo
	var err error
	src := filepath.Join(w.Dir, "src", a.Key)
	switch a.Lang {
	case Project:
		// The project's own sources: nothing to download; the image's time
		// is fixed, so that the same sources make the same image.
		info.Time = time.Unix(0, 0).UTC()
	case Debian, Make:
		// Debian's packages, or a tarball of Debian's archive: their
		// image's time is the bases' (the tarball's own is not kept).
		info.Time = baseEpoch
	default:
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("world %s: %w", a.Key, err)
		}
		if info, err = w.download(ctx, src, a.Module, a.Version, a.NoSumDB); err != nil {
			return fmt.Errorf("world %s: %w", a.Key, err)
		}
		if a.Sum != "" && info.Sum != a.Sum {
			return fmt.Errorf("world %s: %w: %s@%s is %s, pinned %s", a.Key, ErrSum, a.Module, a.Version, info.Sum, a.Sum)
		}
	}
	switch a.Lang {
	case Debian:
	case Make:
		err = w.buildMake(ctx, a, src, filepath.Join(tmp, "bin"))
	case Project:
		err = w.buildProject(ctx, a, info, filepath.Join(tmp, "bin"))
	case Go:
		err = w.buildGo(ctx, a, src, info, filepath.Join(tmp, "bin"))
	case C:
		err = w.buildC(ctx, a, info, filepath.Join(tmp, "bin"))
	default:
		err = fmt.Errorf("unknown language %q", a.Lang)
	}
	if err != nil {
		return fmt.Errorf("world %s: %w", a.Key, err)
	}
	files := map[string]string{}
	for _, b := range a.Binaries {
		files[b.Name] = filepath.Join(tmp, "bin", b.Name)
	}
	for _, im := range a.Images {
		for _, f := range im.Files {
			if f.Source == "" {
				continue
			}
			if info.Dir == "" {
				return fmt.Errorf("world %s: %s is a file of a module's tree, and a %s build has no module", a.Key, f.Source, a.Lang)
			}
			files[sourceKey(f.Source)] = filepath.Join(info.Dir, filepath.FromSlash(f.Source))
		}
	}
	for _, im := range a.Images {
		var base *Layer
		if im.Base != nil {
			if base, err = w.baseLayer(ctx, im.Base); err != nil {
				return fmt.Errorf("world %s: %w", a.Key, err)
			}
		}
		if _, err := WriteImage(filepath.Join(tmp, "images", imageDirName(im.Ref)), im, files, info.Time, a.Module+"@"+a.Version, base); err != nil {
			return fmt.Errorf("world %s: %w", a.Key, err)
		}
	}
	for _, d := range a.Downloads {
		if err := writeDownload(filepath.Join(tmp, "files"), d, files, info.Time); err != nil {
			return fmt.Errorf("world %s: %w", a.Key, err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), []byte(a.Hash()+"\n"), 0o644); err != nil {
		return fmt.Errorf("world %s: %w", a.Key, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("world %s: %w", a.Key, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("world %s: %w", a.Key, err)
	}
	return nil
}

// ErrSum is a module whose hash is not the one pinned.
var ErrSum = errors.New("module hash mismatch")

// moduleInfo is what `go mod download -json` says of a module.
type moduleInfo struct {
	Path, Version, Dir, GoMod, Sum string
	// Info is the proxy's .info file, which has the release's Time.
	Info   string
	Time   time.Time
	Origin struct{ Hash string }
	Error  string
}

// goEnv is the environment of every go command: modules through the
// proxy and nothing else, this toolchain, no workspace of the caller's.
var goEnv = []string{"GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOOS=linux", "GOARCH=amd64",
	"GOPROXY=" + proxyOnly(os.Getenv("GOPROXY"))}

// proxyOnly is a GOPROXY list without "direct": the go command's default
// (proxy.golang.org, then direct) falls back to cloning a module's
// repository from its origin when the proxy refuses it, and the world
// reaches no address but its module proxy. Unset, it is proxy.golang.org;
// a list of nothing but direct becomes off (every download refused, with
// the go command's own error).
func proxyOnly(list string) string {
	if strings.TrimSpace(list) == "" {
		return "https://proxy.golang.org"
	}
	var b strings.Builder
	sep := ""
	for list != "" {
		i := strings.IndexAny(list, ",|")
		entry, next := list, ""
		if i >= 0 {
			entry, next = list[:i], list[i:i+1]
			list = list[i+1:]
		} else {
			list = ""
		}
		if e := strings.TrimSpace(entry); e != "" && e != "direct" {
			b.WriteString(sep + e)
			sep = next
			if sep == "" {
				sep = ","
			}
		}
	}
	if b.Len() == 0 {
		return "off"
	}
	return b.String()
}

// download fetches a module's zip through the proxy (in a scratch module
// dir) and returns where it is.
func (w *World) download(ctx context.Context, dir, module, version string, noSumDB bool) (moduleInfo, error) {
	if err := ensureGoMod(dir, "opke.dev/world/scratch", nil); err != nil {
		return moduleInfo{}, err
	}
	env := goEnv
	if noSumDB {
		env = append(slices.Clone(goEnv), "GONOSUMDB="+module)
	}
	out, err := w.run(ctx, dir, env, "go", "mod", "download", "-json", module+"@"+version)
	var info moduleInfo
	if jerr := json.Unmarshal(out, &info); jerr != nil {
		return moduleInfo{}, fmt.Errorf("go mod download %s@%s: %w: %s", module, version, errors.Join(err, jerr), tailOf(out, 5))
	}
	if err != nil || info.Error != "" {
		return moduleInfo{}, fmt.Errorf("go mod download %s@%s: %s: %w", module, version, info.Error, err)
	}
	if info.Time.IsZero() && info.Info != "" {
		b, err := os.ReadFile(info.Info)
		if err != nil {
			return moduleInfo{}, fmt.Errorf("%s@%s: %w", module, version, err)
		}
		var t struct {
			Time   time.Time
			Origin struct{ Hash string }
		}
		if err := json.Unmarshal(b, &t); err != nil {
			return moduleInfo{}, fmt.Errorf("%s@%s: %s: %w", module, version, info.Info, err)
		}
		info.Time = t.Time
		if info.Origin.Hash == "" {
			info.Origin.Hash = t.Origin.Hash
		}
	}
	if info.Time.IsZero() {
		return moduleInfo{}, fmt.Errorf("%s@%s: the proxy gives no release time", module, version)
	}
	return info, nil
}

func ensureGoMod(dir, module string, f *modfile.File) error {
	if f == nil {
		f = &modfile.File{}
		if err := f.AddModuleStmt(module); err != nil {
			return err
		}
	}
	b, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.mod"), b, 0o644)
}

// WrapperMod returns the go.mod of the module a Go artifact is built in:
// it requires the artifact's modules and keeps the replacements of the
// artifact module's own go.mod (moduleGoMod) that name a published
// version, as its own build has them (a dependency's replacements bind
// only its own builds). For Kubernetes (Staging) it also replaces each
// staging module that go.mod points into ./staging with its published
// v0.MINOR.PATCH.
func WrapperMod(a Artifact, goVersion string, moduleGoMod []byte) (*modfile.File, error) {
	f := &modfile.File{}
	if err := f.AddModuleStmt("opke.dev/world/" + a.Key); err != nil {
		return nil, err
	}
	if err := f.AddGoStmt(goVersion); err != nil {
		return nil, err
	}
	if err := f.AddRequire(a.Module, a.Version); err != nil {
		return nil, err
	}
	for _, m := range slices.Sorted(maps.Keys(a.Also)) {
		if err := f.AddRequire(m, a.Also[m]); err != nil {
			return nil, err
		}
	}
	if len(moduleGoMod) == 0 {
		f.Cleanup()
		return f, nil
	}
	mf, err := modfile.Parse("go.mod", moduleGoMod, nil)
	if err != nil {
		return nil, fmt.Errorf("%s@%s go.mod: %w", a.Module, a.Version, err)
	}
	staging := "v0" + strings.TrimPrefix(a.Version, "v1")
	n := 0
	for _, r := range mf.Replace {
		switch {
		case a.Staging && strings.HasPrefix(r.New.Path, "./staging/"):
			if err := f.AddReplace(r.Old.Path, "", r.Old.Path, staging); err != nil {
				return nil, err
			}
			n++
		case r.New.Version != "":
			if err := f.AddReplace(r.Old.Path, r.Old.Version, r.New.Path, r.New.Version); err != nil {
				return nil, err
			}
		}
	}
	if a.Staging && n == 0 {
		return nil, fmt.Errorf("%s@%s go.mod: no staging modules replaced", a.Module, a.Version)
	}
	f.Cleanup()
	return f, nil
}

// carrySums adds the artifact module's go.sum to the wrapper's: its
// dependencies are checked against the sums its own build checks them
// against (some, such as flannel's tencentcloud SDK, are not in the
// checksum database, and a build from the module's folder never asks it
// for them).
func carrySums(wrapperDir, moduleDir string) error {
	if moduleDir == "" {
		return nil
	}
	theirs, err := os.ReadFile(filepath.Join(moduleDir, "go.sum"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	p := filepath.Join(wrapperDir, "go.sum")
	ours, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(string(ours)+"\n"+string(theirs), "\n") {
		if line = strings.TrimSpace(line); line != "" && !seen[line] {
			seen[line] = true
			out = append(out, line)
		}
	}
	return os.WriteFile(p, []byte(strings.Join(out, "\n")+"\n"), 0o644)
}

// LDFlags returns the -ldflags of a Go artifact: stripped, its version
// variables stamped, date variables set to date (RFC 3339, UTC), commit
// variables to commit ("archive" when unknown).
func LDFlags(a Artifact, date time.Time, commit string) string {
	flags := []string{"-s", "-w"}
	for _, k := range slices.Sorted(maps.Keys(a.Stamp)) {
		flags = append(flags, "-X", k+"="+a.Stamp[k])
	}
	for _, k := range a.DateVars {
		flags = append(flags, "-X", k+"="+date.UTC().Format("2006-01-02T15:04:05Z"))
	}
	for _, k := range a.CommitVars {
		flags = append(flags, "-X", k+"="+cmp.Or(commit, "archive"))
	}
	return strings.Join(flags, " ")
}

var goLine = regexp.MustCompile(`(?m)^go (\d+\.\d+(?:\.\d+)?)\s*$`)

func (w *World) buildGo(ctx context.Context, a Artifact, src string, info moduleInfo, bin string) error {
	var moduleMod []byte
	goVersion := "1.25.0"
	if info.GoMod != "" {
		b, err := os.ReadFile(info.GoMod)
		if err != nil {
			return err
		}
		moduleMod = b
		if m := goLine.FindSubmatch(b); m != nil {
			goVersion = string(m[1])
		}
	}
	f, err := WrapperMod(a, goVersion, moduleMod)
	if err != nil {
		return err
	}
	if err := ensureGoMod(src, "", f); err != nil {
		return err
	}
	if err := carrySums(src, info.Dir); err != nil {
		return err
	}
	env := append(slices.Clone(goEnv), "CGO_ENABLED=0")
	if a.CGO {
		env[len(env)-1] = "CGO_ENABLED=1"
	}
	if a.NoSumDB {
		env = append(env, "GONOSUMDB="+a.Module)
	}
	for _, b := range a.Binaries {
		started := time.Now()
		args := []string{"build", "-trimpath", "-ldflags=" + LDFlags(a, info.Time, info.Origin.Hash), "-o", filepath.Join(bin, b.Name)}
		if b.Test {
			args = slices.Concat([]string{"test", "-c"}, args[1:])
		}
		if len(a.Tags) > 0 {
			args = append(args, "-tags="+strings.Join(a.Tags, ","))
		}
		args = append(args, b.Package)
		if out, err := w.run(ctx, src, env, "go", args...); err != nil {
			return fmt.Errorf("go build %s: %w: %s", b.Package, err, tailOf(out, 15))
		}
		w.Log.Info("built binary", "artifact", a.Key, "binary", b.Name, "took", time.Since(started).Round(time.Second))
	}
	return nil
}

// buildProject builds a Project artifact's binaries in the project's
// tree, with its go.mod and go.sum as they are (-mod=readonly: a build
// never rewrites them), statically.
func (w *World) buildProject(ctx context.Context, a Artifact, info moduleInfo, bin string) error {
	if a.Dir == "" {
		return errors.New("a project artifact without the project's folder")
	}
	env := append(slices.Clone(goEnv), "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	for _, b := range a.Binaries {
		started := time.Now()
		out, err := w.run(ctx, a.Dir, env, "go", "build", "-trimpath", "-ldflags="+LDFlags(a, info.Time, ""), "-o", filepath.Join(bin, b.Name), b.Package)
		if err != nil {
			return fmt.Errorf("go build %s: %w: %s", b.Package, err, tailOf(out, 15))
		}
		w.Log.Info("built binary", "artifact", a.Key, "binary", b.Name, "took", time.Since(started).Round(time.Second))
	}
	return nil
}

// buildC compiles a C artifact's single source, statically, as
// Kubernetes' build/pause/Makefile does (-Os -Wall -Werror -static).
func (w *World) buildC(ctx context.Context, a Artifact, info moduleInfo, bin string) error {
	for _, b := range a.Binaries {
		if a.Module == "k8s.io/kubernetes" && b.Name == "pause" {
			if err := checkPauseTag(info.Dir, a); err != nil {
				return err
			}
		}
		args := append([]string{"-Os", "-Wall", "-Werror", "-static"}, a.CDefine...)
		args = append(args, "-o", filepath.Join(bin, b.Name), filepath.Join(info.Dir, b.Package))
		if out, err := w.run(ctx, bin, nil, "gcc", args...); err != nil {
			return fmt.Errorf("gcc %s: %w: %s", b.Package, err, tailOf(out, 15))
		}
	}
	return nil
}

// buildMake fetches a Make artifact's release tarball into src, checks
// its sha256, unpacks it and runs its Script in the tarball's top
// folder with OUT set to bin.
func (w *World) buildMake(ctx context.Context, a Artifact, src, bin string) error {
	if a.Tarball == nil {
		return errors.New("a make build needs its release tarball")
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("the tarball's folder: %w", err)
	}
	file := filepath.Join(src, path.Base(a.Tarball.URL))
	if err := fetchChecked(ctx, a.Tarball.URL, a.Tarball.SHA256, file); err != nil {
		return err
	}
	tree := filepath.Join(src, "tree")
	if err := os.RemoveAll(tree); err != nil {
		return fmt.Errorf("the source tree: %w", err)
	}
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return fmt.Errorf("the source tree: %w", err)
	}
	if out, err := w.run(ctx, tree, nil, "tar", "-xf", file, "--strip-components=1"); err != nil {
		return fmt.Errorf("unpack %s: %w: %s", a.Tarball.URL, err, tailOf(out, 5))
	}
	env := []string{"OUT=" + bin, fmt.Sprintf("SOURCE_DATE_EPOCH=%d", baseEpoch.Unix()), "KCONFIG_NOTIMESTAMP=1"}
	if out, err := w.run(ctx, tree, env, "sh", "-ec", a.Script); err != nil {
		return fmt.Errorf("build %s: %w: %s", a.Key, err, tailOf(out, 15))
	}
	for _, b := range a.Binaries {
		if _, err := os.Stat(filepath.Join(bin, b.Name)); err != nil {
			return fmt.Errorf("build %s made no %s: %w", a.Key, b.Name, err)
		}
	}
	return nil
}

// fetchClient fetches release tarballs: a stalled download fails.
var fetchClient = &http.Client{Timeout: 10 * time.Minute}

// fetchChecked downloads url to dst unless dst is there with the sha256
// want, and refuses a download of another sha256.
func fetchChecked(ctx context.Context, url, want, dst string) error {
	if b, err := os.ReadFile(dst); err == nil && fmt.Sprintf("%x", sha256.Sum256(b)) == want {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	resp, err := fetchClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch %s: %s", url, resp.Status)
	}
	tmp := dst + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != want {
		os.Remove(tmp)
		return fmt.Errorf("%w: %s is sha256 %s, pinned %s", ErrSum, url, got, want)
	}
	return os.Rename(tmp, dst)
}

// checkPauseTag refuses a pause image whose tag is not the one the
// release's build/pause/Makefile builds.
func checkPauseTag(moduleDir string, a Artifact) error {
	mk, err := os.ReadFile(filepath.Join(moduleDir, "build", "pause", "Makefile"))
	if err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	want := strings.TrimPrefix(a.Key, "pause-")
	m := regexp.MustCompile(`(?m)^TAG \?= (\S+)`).FindSubmatch(mk)
	if m == nil {
		return fmt.Errorf("pause %s: k8s.io/kubernetes %s: no TAG in build/pause/Makefile", want, a.Version)
	}
	if string(m[1]) != want {
		return fmt.Errorf("pause %s: k8s.io/kubernetes %s builds pause %s", want, a.Version, m[1])
	}
	return nil
}

func tailOf(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

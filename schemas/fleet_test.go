package schemas

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func specNamed(name string) string { return strings.Replace(baseSpec, "name: prod", "name: "+name, 1) }

func TestLoadFleet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []string
		wantNum int // valid clusters
	}{
		{"valid fleet", fstest.MapFS{
			"clusters/a/cluster.yaml": {Data: []byte(specNamed("a"))},
			"clusters/b/cluster.yaml": {Data: []byte(specNamed("b"))},
			"clusters/README.md":      {Data: []byte("# the fleet\n")},
		}, nil, 2},
		{"empty fleet", fstest.MapFS{"clusters": {Mode: os.ModeDir}}, nil, 0},
		{"name differs from folder", fstest.MapFS{
			"clusters/a/cluster.yaml": {Data: []byte(specNamed("b"))},
		}, []string{`clusters/a/cluster.yaml:4: metadata.name: "b" must equal its folder's name "a"`}, 0},
		{"duplicate cluster names", fstest.MapFS{
			"clusters/a/cluster.yaml": {Data: []byte(specNamed("b"))},
			"clusters/b/cluster.yaml": {Data: []byte(specNamed("b"))},
		}, []string{
			`clusters/a/cluster.yaml:4: metadata.name: "b" must equal its folder's name "a"`,
			`clusters/b/cluster.yaml:4: metadata.name: cluster name "b" is also the name in clusters/a/cluster.yaml`,
		}, 0},
		{"folder without a spec", fstest.MapFS{
			"clusters/a/cluster.yml": {Data: []byte(specNamed("a"))},
		}, []string{"clusters/a: cluster folder has no cluster.yaml"}, 0},
		{"empty folder left by a removal", fstest.MapFS{
			"clusters/a": {Mode: os.ModeDir},
		}, nil, 0},
		{"one bad file among good ones", fstest.MapFS{
			"clusters/a/cluster.yaml": {Data: []byte(specNamed("a"))},
			"clusters/b/cluster.yaml": {Data: []byte(strings.Replace(specNamed("b"), "count: 3\n      flavor", "count: 900\n      flavor", 1))},
		}, []string{"clusters/b/cluster.yaml:18: spec.workerPools[0].count: must be <= 500"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fl, err := LoadFleet(tt.files, ".")
			if err != nil {
				t.Fatalf("LoadFleet: %v", err)
			}
			if diff := cmp.Diff(tt.want, findingStrings(fl.Findings)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if got := len(fl.Clusters()); got != tt.wantNum {
				t.Errorf("valid clusters: got %d, want %d", got, tt.wantNum)
			}
		})
	}
}

func TestLoadFleetNotAFleet(t *testing.T) {
	t.Parallel()
	_, err := LoadFleet(fstest.MapFS{"README.md": {Data: []byte("hi")}}, ".")
	if !errors.Is(err, ErrNotFleet) {
		t.Fatalf("got %v, want ErrNotFleet", err)
	}
}

func TestLoadFleetPrefix(t *testing.T) {
	t.Parallel()
	fl, err := LoadFleet(fstest.MapFS{"clusters/a/cluster.yaml": {Data: []byte(specNamed("b"))}}, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	if len(fl.Findings) != 1 || fl.Findings[0].File != "fleet/clusters/a/cluster.yaml" {
		t.Fatalf("findings name files under the prefix: got %v", fl.Findings)
	}
}

// TestExampleFleet keeps the repository's own clusters/ valid: the repo
// root is a fleet root.
func TestExampleFleet(t *testing.T) {
	t.Parallel()
	fl, err := LoadFleet(os.DirFS(".."), ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(fl.Findings) > 0 {
		t.Fatalf("example fleet has findings:\n%s", strings.Join(findingStrings(fl.Findings), "\n"))
	}
	if got := len(fl.Clusters()); got < 2 {
		t.Fatalf("example fleet has %d clusters, want the demo and the HA one", got)
	}
}

func BenchmarkLoadFleet1000(b *testing.B) {
	fsys := fstest.MapFS{}
	for i := range 1000 {
		name := fmt.Sprintf("c%04d", i)
		fsys["clusters/"+name+"/cluster.yaml"] = &fstest.MapFile{Data: []byte(specNamed(name))}
	}
	for b.Loop() {
		fl, err := LoadFleet(fsys, ".")
		if err != nil || len(fl.Findings) > 0 {
			b.Fatal(err, fl.Findings)
		}
	}
}

func fstestFS(specs map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{"clusters": {Mode: os.ModeDir}}
	for name, spec := range specs {
		fsys["clusters/"+name+"/cluster.yaml"] = &fstest.MapFile{Data: []byte(spec)}
	}
	return fsys
}

// countingFS counts the bytes read through it; with statZero its Stat
// says every file is empty (a filesystem that lies about sizes).
type countingFS struct {
	fstest.MapFS
	read     *int64
	statZero bool
}

type countingFile struct {
	fs.File
	read *int64
}

func (f countingFile) Read(b []byte) (int, error) {
	n, err := f.File.Read(b)
	*f.read += int64(n)
	return n, err
}

func (c countingFS) Open(name string) (fs.File, error) {
	f, err := c.MapFS.Open(name)
	if err != nil {
		return nil, err
	}
	return countingFile{File: f, read: c.read}, nil
}

func (c countingFS) Stat(name string) (fs.FileInfo, error) {
	st, err := c.MapFS.Stat(name)
	if err != nil || !c.statZero || st.IsDir() {
		return st, err
	}
	return zeroSize{st}, nil
}

type zeroSize struct{ fs.FileInfo }

func (zeroSize) Size() int64 { return 0 }

// TestLoadFleetWithin: a fleet is bounded as a whole. Many folders naming
// one large spec (a few KiB pushed to a git remote) are refused without
// reading it; too many folders, or too many bytes by their sizes, are
// refused before anything is read; a filesystem whose sizes lie is cut
// off by the bytes actually read.
func TestLoadFleetWithin(t *testing.T) {
	t.Parallel()
	big := specNamed("x") + strings.Repeat("# padding padding padding\n", (1<<20)/26)
	// many is n folders; their specs share one blob, as git trees can,
	// unless body names each by its folder (NAME).
	many := func(n int, body string) fstest.MapFS {
		m := fstest.MapFS{}
		for i := range n {
			name := fmt.Sprintf("c%03d", i)
			m["clusters/"+name+"/cluster.yaml"] = &fstest.MapFile{Data: []byte(strings.ReplaceAll(body, "NAME", name))}
		}
		return m
	}
	small := specNamed("NAME")
	lim := Limits{MaxClusters: 100, MaxBytes: 64 << 10}
	for _, tc := range []struct {
		name     string
		fsys     fstest.MapFS
		statZero bool
		err      error
		maxRead  int64
		findings int
	}{
		{"100 folders, one 1 MiB spec", many(100, big), false, nil, 0, 100},
		{"101 folders", many(101, small), false, ErrFleetTooLarge, 0, 0},
		{"over the bytes by their sizes", many(100, specNamed("x")+strings.Repeat("#\n", 400)), false, ErrFleetTooLarge, 0, 0},
		{"sizes that lie", many(100, specNamed("x")+strings.Repeat("#\n", 400)), true, ErrFleetTooLarge, 64<<10 + MaxFileSize + 1, 0},
		{"within the limits", many(10, small), false, nil, 10 * int64(len(small)), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var read int64
			fl, err := LoadFleetWithin(countingFS{MapFS: tc.fsys, read: &read, statZero: tc.statZero}, "", lim)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if read > tc.maxRead {
				t.Errorf("read %d bytes, at most %d", read, tc.maxRead)
			}
			if fl != nil {
				errs := 0
				for _, f := range fl.Findings {
					if f.Severity == SeverityError {
						errs++
					}
				}
				if errs != tc.findings {
					t.Errorf("%d error findings, want %d: %v", errs, tc.findings, fl.Findings)
				}
			}
		})
	}
}

// TestFindingEscapesControlCharacters: a folder named with a terminal's
// escape codes is printed escaped, not obeyed.
func TestFindingEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	fl, err := LoadFleet(fstest.MapFS{"clusters/\x1b[2J\x1b[31mred/notes.txt": {Data: []byte("x")}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(fl.Findings) != 1 {
		t.Fatalf("findings %v", fl.Findings)
	}
	want := `clusters/\x1b[2J\x1b[31mred: cluster folder has no cluster.yaml`
	if got := fl.Findings[0].String(); got != want {
		t.Errorf("finding %q, want %q", got, want)
	}
}

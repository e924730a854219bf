package world

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// govulncheck's JSON stream of distribution v3.0.0's registry (a part of
// it): an advisory of the registry's own module and of a dependency's,
// each called, and one of a module it links without calling (not
// counted).
func TestVulncheck(t *testing.T) {
	stream, err := os.ReadFile("testdata/govulncheck/registry.json")
	if err != nil {
		t.Fatal(err)
	}
	arts := []Artifact{Distribution("v3.0.0"), {Key: "c-thing", Lang: C, Binaries: []Binary{{Name: "x"}}}}
	b := &Built{Artifacts: []Result{{Key: "distribution-v3.0.0", Binaries: map[string]string{"registry": "/cache/distribution-v3.0.0/bin/registry"}}}}
	var scanned []string
	scan := func(_ context.Context, bin string) ([]byte, error) {
		scanned = append(scanned, bin)
		return stream, nil
	}
	got, err := Vulncheck(t.Context(), arts, b, scan)
	if err != nil {
		t.Fatal(err)
	}
	want := []VulnReport{{Key: "distribution-v3.0.0", Module: "github.com/distribution/distribution/v3", Version: "v3.0.0", Advisories: []Advisory{
		{ID: "GO-2022-0635", Module: "github.com/aws/aws-sdk-go", Found: "v1.55.5", Binaries: []string{"registry"}},
		{ID: "GO-2026-6778", Module: "github.com/distribution/distribution/v3", Found: "v3.0.0", Fixed: "v3.1.2", Own: true, Binaries: []string{"registry"}},
		{ID: "GO-2026-6866", Module: "golang.org/x/net", Found: "v0.37.0", Fixed: "v0.62.0", Binaries: []string{"registry"}},
	}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("reports (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"/cache/distribution-v3.0.0/bin/registry"}, scanned); d != "" {
		t.Errorf("scanned (-want +got):\n%s", d)
	}
	var out bytes.Buffer
	FormatVulnReports(&out, got)
	if d := cmp.Diff("distribution-v3.0.0          github.com/distribution/distribution/v3@v3.0.0: GO-2026-6778 (fixed in v3.1.2); 2 of its dependencies'\n"+
		"1 artifacts: 1 advisories in their own code, 2 in their dependencies' (called)\n", out.String()); d != "" {
		t.Errorf("report (-want +got):\n%s", d)
	}
	// An artifact of the set that was not built is an error, not a pass.
	if _, err := Vulncheck(t.Context(), arts, &Built{}, scan); err == nil {
		t.Error("a set whose binaries are not built passed")
	}
}

func TestOwnModule(t *testing.T) {
	k8s := Artifact{Module: "k8s.io/kubernetes", Version: "v1.36.1"}
	etcd := Artifact{Module: "go.etcd.io/etcd/v3", Version: "v3.6.8"}
	for _, tc := range []struct {
		a               Artifact
		module, version string
		own             bool
	}{
		{k8s, "k8s.io/kubernetes", "v1.36.1", true},
		{k8s, "k8s.io/client-go", "v0.36.1", true},
		{k8s, "k8s.io/client-go", "v0.35.0", false},
		{k8s, "golang.org/x/net", "v0.49.0", false},
		{etcd, "go.etcd.io/etcd/server/v3", "v3.6.8", true},
		{etcd, "google.golang.org/grpc", "v1.71.1", false},
	} {
		if got := ownModule(tc.a, tc.module, tc.version); got != tc.own {
			t.Errorf("%s: %s@%s own: %v, want %v", tc.a.Module, tc.module, tc.version, got, tc.own)
		}
	}
}

func FuzzParseGovulncheck(f *testing.F) {
	stream, err := os.ReadFile("testdata/govulncheck/registry.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(stream)
	f.Add([]byte(`{"finding":{"osv":"","trace":[{"module":"m","function":"f"}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		advs, err := parseGovulncheck(b)
		if err != nil {
			return
		}
		for _, a := range advs {
			if a.ID == "" || a.Module == "" {
				t.Fatalf("an advisory without an id or a module: %+v", a)
			}
		}
	})
}

func TestFixServed(t *testing.T) {
	a := Advisory{ID: "GO-2026-6114", Module: "go.etcd.io/etcd/server/v3", Found: "v3.6.8", Fixed: "v3.6.14"}
	for _, tc := range []struct {
		versions []string
		want     string
	}{
		{[]string{"v3.6.8", "v3.6.12", "v3.6.14", "v3.6.16"}, "v3.6.14"},
		{[]string{"v3.6.8", "v3.6.12"}, ""},
		{[]string{"v3.6.8", "v3.7.0-rc.0"}, ""},
		{[]string{"v3.6.8", "v3.7.3"}, "v3.7.3"},
		{nil, ""},
	} {
		if got := FixServed(a, tc.versions); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.versions, got, tc.want)
		}
	}
}

func TestAccepted(t *testing.T) {
	if _, ok := Accepted("etcd-v3.6.8", Advisory{ID: "GO-2026-6114"}); !ok {
		t.Error("an advisory accepted by id did not pass")
	}
	if _, ok := Accepted("traefik-v3.6.12", Advisory{ID: "GO-2099-0001"}); !ok {
		t.Error("an advisory of a pin accepted whole did not pass")
	}
	if _, ok := Accepted("traefik-v3.6.25", Advisory{ID: "GO-2099-0001"}); ok {
		t.Error("a new pin's advisory passed on its old pin's acceptance")
	}
}

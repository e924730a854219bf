package reconciler

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"opke.dev/opke/diff"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/state"
)

// TestShareWithLedger: a desired file or manifest whose sha256 is the
// ledger's holds the ledger's copy; one that differs keeps its own.
func TestShareWithLedger(t *testing.T) {
	same, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	applied := diff.Attrs{"cidr": diff.Known("10.0.0.0/24")}
	l := &Ledger{Applied: &diff.Applied{
		Files:     map[string]map[string]string{"h": {"/etc/x": same, "/etc/y": same}},
		Manifests: map[string]string{"00-a.yaml": same},
		Infra: map[diff.Address]diff.Attrs{
			diff.ResourceAddress(diff.KindSubnet, "n"):  applied,
			diff.ResourceAddress(diff.KindNetwork, "n"): {"name": diff.Known("old")},
		},
	}}
	d := &diff.Desired{
		Hosts:     []diff.Host{{Name: "h", Files: []diff.File{{Path: "/etc/x", SHA256: strings.Clone(same)}, {Path: "/etc/y", SHA256: other}, {Path: "/etc/z", SHA256: strings.Clone(same)}}}},
		Manifests: []diff.Manifest{{Name: "00-a.yaml", SHA256: strings.Clone(same)}},
		Infra: []diff.Resource{{Kind: diff.KindSubnet, Name: "n", Attrs: diff.Attrs{"cidr": diff.Known("10.0.0.0/24")}},
			{Kind: diff.KindNetwork, Name: "n", Attrs: diff.Attrs{"name": diff.Known("new")}}},
	}
	z := d.Hosts[0].Files[2].SHA256
	shareWithLedger(d, l)
	shared := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	if f := d.Hosts[0].Files; !shared(f[0].SHA256, same) || f[1].SHA256 != other || !shared(f[2].SHA256, z) {
		t.Errorf("files: the equal digest is not the ledger's copy, or another changed")
	}
	if !shared(d.Manifests[0].SHA256, same) {
		t.Error("the manifest's equal digest is not the ledger's copy")
	}
	if reflect.ValueOf(d.Infra[0].Attrs).UnsafePointer() != reflect.ValueOf(applied).UnsafePointer() {
		t.Error("the subnet's equal attributes are not the ledger's map")
	}
	if d.Infra[1].Attrs["name"].Value != "new" {
		t.Errorf("the network's attributes, which differ, became %v", d.Infra[1].Attrs)
	}
	shareWithLedger(d, &Ledger{}) // no ledger: nothing to share, no panic
}

// TestPlannerFactsFollowTheStore: a cluster's transition facts are kept
// between judgements, and read again once a host's version is written.
func TestPlannerFactsFollowTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := statetest.Open(t)
	p := &Planner{Store: store}
	newest := func() string {
		t.Helper()
		f, err := p.Facts(ctx, []string{"prod"})
		if err != nil {
			t.Fatal(err)
		}
		return f["prod"].NewestControllerVersion.String()
	}
	if err := recordVersion(ctx, store, "prod", "prod-controller-0", "v1.35.1"); err != nil {
		t.Fatal(err)
	}
	if got := newest(); got != "v1.35.1" {
		t.Fatalf("facts say %s, want v1.35.1", got)
	}
	if got := newest(); got != "v1.35.1" {
		t.Fatalf("kept facts say %s, want v1.35.1", got)
	}
	if _, ok := p.facts.get(store.Changes(), "prod", state.KeysOf(store).Hosts("prod")); !ok {
		t.Error("the facts were not kept")
	}
	if err := recordVersion(ctx, store, "prod", "prod-controller-0", "v1.36.0"); err != nil {
		t.Fatal(err)
	}
	if got := newest(); got != "v1.36.0" {
		t.Errorf("facts after a host's version was written say %s, want v1.36.0", got)
	}
}

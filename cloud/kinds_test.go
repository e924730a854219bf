package cloud

import (
	"slices"
	"testing"

	"opke.dev/opke/diff"
)

// TestEveryKindHasItsEntry: each kind the plan knows has an entry here
// that creates (the application credential aside: CreateAppCredential
// takes its secret) and deletes it, and is observed, by its own listing
// or another's; the observation lists each listing once. The kinds the
// cluster's CSI driver makes are deleted only, and observed by
// ClusterVolumes only, not by the tagged observation.
func TestEveryKindHasItsEntry(t *testing.T) {
	t.Parallel()
	observedWith := map[diff.Kind]diff.Kind{ // kinds listed by another kind's observe
		diff.KindRule: diff.KindSecurityGroup, diff.KindInterface: diff.KindRouter, diff.KindMember: diff.KindPool, diff.KindServerGroup: diff.KindServer,
	}
	madeByTheCluster := []diff.Kind{diff.KindVolume, diff.KindSnapshot}
	for _, k := range diff.Kinds() {
		e, ok := kinds[k]
		if slices.Contains(madeByTheCluster, k) {
			if !ok || e.delete == nil || e.create != nil || e.update != nil || e.observe != nil || slices.Contains(observeOrder, k) {
				t.Errorf("%s: made by the cluster's CSI driver: deleted only, not observed by tags", k)
			}
			continue
		}
		switch {
		case !ok:
			t.Errorf("%s: no entry", k)
			continue
		case e.create == nil && k != diff.KindAppCredential:
			t.Errorf("%s: no create", k)
		case e.delete == nil:
			t.Errorf("%s: no delete", k)
		}
		if by, ok := observedWith[k]; ok {
			if e.observe != nil || !slices.Contains(observeOrder, by) {
				t.Errorf("%s: observed with %s, which the observation must list (and it has no observe of its own)", k, by)
			}
		} else if e.observe == nil || !slices.Contains(observeOrder, k) {
			t.Errorf("%s: not observed", k)
		}
	}
	if len(kinds) != len(diff.Kinds()) {
		t.Errorf("%d entries for %d kinds", len(kinds), len(diff.Kinds()))
	}
	for i, k := range observeOrder {
		if slices.Index(observeOrder, k) != i {
			t.Errorf("%s is listed twice", k)
		}
	}
}

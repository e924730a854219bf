package schemas

import (
	"strings"
	"testing"
)

// FuzzCheckTransition: the transition rules on two valid specs never
// panic, a spec compared with itself has no problem, and every problem
// names a field path.
func FuzzCheckTransition(f *testing.F) {
	f.Add([]byte(baseSpec), []byte(strings.Replace(baseSpec, "v1.35.1", "v1.36.0", 1)), "v1.35.1")
	f.Add([]byte(baseSpec), []byte(strings.Replace(baseSpec, "v1.35.1", "v1.33.0", 1)), "v1.35.1")
	f.Add([]byte(baseSpec), []byte(strings.Replace(baseSpec, "192.168.20.0/24", "192.168.21.0/24", 1)), "")
	f.Fuzz(func(t *testing.T, oldData, newData []byte, controller string) {
		if len(oldData)+len(newData) > 64<<10 {
			return // the parser's own fuzz target covers large inputs
		}
		old, new := Parse("old.yaml", oldData), Parse("new.yaml", newData)
		if old.Cluster == nil || new.Cluster == nil || old.Findings.HasErrors() || new.Findings.HasErrors() {
			return
		}
		var facts *TransitionFacts
		if v, err := ParseVersion(controller); err == nil {
			facts = &TransitionFacts{NewestControllerVersion: v, Snapshot: "20261121T000000.000Z-1"}
		}
		if p := CheckTransition(old.Cluster, old.Cluster, nil); len(p) != 0 {
			t.Fatalf("a spec against itself: %v", p)
		}
		for _, p := range CheckTransition(old.Cluster, new.Cluster, facts) {
			if len(p.Path) == 0 || p.Message == "" {
				t.Fatalf("a problem without a path or message: %+v", p)
			}
		}
	})
}

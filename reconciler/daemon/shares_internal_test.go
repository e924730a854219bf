package daemon

import (
	"fmt"
	"testing"
)

// TestOwner: rendezvous hashing gives every member a fair share of a
// fleet, and a member that joins or leaves moves only the clusters it
// gains or had.
func TestOwner(t *testing.T) {
	t.Parallel()
	const n = 10000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("fleet-%04d", i)
	}
	four := []string{"opke-a-1", "opke-b-2", "opke-c-3", "opke-d-4"}
	count := map[string]int{}
	for _, name := range names {
		count[owner(four, name)]++
	}
	for _, m := range four {
		// 2,500 each on average; a share off by more than 10 % is a
		// broken hash, not bad luck (the standard deviation is ~43).
		if c := count[m]; c < 2250 || c > 2750 {
			t.Errorf("%s owns %d of %d clusters, want about %d", m, c, n, n/len(four))
		}
	}
	for _, tc := range []struct {
		name          string
		before, after []string
	}{
		{"a member leaves", four, []string{"opke-a-1", "opke-c-3", "opke-d-4"}},
		{"a member joins", four, append([]string{"opke-0-5"}, four...)},
	} {
		moved := 0
		for _, name := range names {
			was, is := owner(tc.before, name), owner(tc.after, name)
			if was == is {
				continue
			}
			moved++
			if tc.name == "a member leaves" && was != "opke-b-2" || tc.name == "a member joins" && is != "opke-0-5" {
				t.Errorf("%s: %s moved from %s to %s", tc.name, name, was, is)
			}
		}
		if moved == 0 || moved > n/3 {
			t.Errorf("%s: %d clusters moved, want about a share", tc.name, moved)
		}
	}
	if got := owner(nil, "x"); got != "" {
		t.Errorf("owner with no member: %q", got)
	}
}

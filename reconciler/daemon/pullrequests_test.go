package daemon

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPRQueue: adding never blocks, however many heads wait (the tracked
// branch's poll adds them); a ref keeps its place and only its newest
// commit is planned.
func TestPRQueue(t *testing.T) {
	t.Parallel()
	q := newPRQueue()
	for i := range 1000 {
		q.add(fmt.Sprintf("refs/pull/%d/head", i%500), fmt.Sprint(i))
	}
	var got []string
	for {
		ref, commit, ok := q.take()
		if !ok {
			break
		}
		got = append(got, ref+"@"+commit)
	}
	var want []string
	for i := range 500 {
		want = append(want, fmt.Sprintf("refs/pull/%d/head@%d", i, i+500))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("taken (-want +got):\n%s", d)
	}
}

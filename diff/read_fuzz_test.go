package diff

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzRead: any bytes given to the plan decoder are refused with
// ErrFormat or read; a plan read prints (Text) without panicking and
// survives its own JSON form unchanged.
func FuzzRead(f *testing.F) {
	golden, _ := filepath.Glob("testdata/*/plan.json")
	for _, g := range golden {
		if data, err := os.ReadFile(g); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"format_version":"1.0"}`))
	f.Add([]byte(`{"format_version":"2.0","changes":[]}`))
	f.Add([]byte(`{"format_version":"1.9","changes":[{"action":"nonsense","before":{"x":{"value":"1","sensitive":true}}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Read(data)
		if err != nil {
			return
		}
		if err := Text(io.Discard, data); err != nil {
			t.Fatalf("Text of a plan Read took: %v", err)
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("marshal a plan Read took: %v", err)
		}
		q, err := Read(again)
		if err != nil {
			t.Fatalf("read a plan's own JSON form: %v\n%s", err, again)
		}
		// An empty list and an absent one mean the same plan (found by
		// fuzzing: "warnings":[] reads as empty and writes as absent);
		// past that, the JSON form is a fixed point.
		if d := cmp.Diff(p, q, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("a plan changed through its JSON form (-read +again):\n%s", d)
		}
		twice, err := json.Marshal(q)
		if err != nil {
			t.Fatalf("marshal a plan read back: %v", err)
		}
		if d := cmp.Diff(string(again), string(twice)); d != "" {
			t.Fatalf("a plan's JSON form is not a fixed point (-first +second):\n%s", d)
		}
	})
}

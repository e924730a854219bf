package schemas

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// hostileInputs are files a broken editor, a wrong `git add` or an attacker
// could put in a fleet; each must yield a clear finding quickly.
func hostileInputs() map[string][]byte {
	bomb := strings.Builder{}
	bomb.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		prev := "*a" + string(rune('0'+i-1))
		if i > 9 {
			prev = "*a9"
		}
		name := "a" + string(rune('0'+min(i, 9)))
		if i > 9 {
			name = "b" + string(rune('0'+i-10))
		}
		bomb.WriteString(name + ": &" + name + " [" + strings.Repeat(prev+", ", 9) + prev + "]\n")
	}
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	return map[string][]byte{
		"empty":       {},
		"blank":       []byte("\n  \n"),
		"comments":    []byte("# nothing here\n"),
		"binary":      {0x7f, 'E', 'L', 'F', 0, 0, 1, 2, 0xff, 0xfe},
		"latin1":      []byte("name: caf\xe9\n"),
		"malformed":   []byte("apiVersion: opke.dev/v1alpha1\nkind: [Cluster\nspec: {\n"),
		"scalar":      []byte("just a string\n"),
		"two docs":    []byte(baseSpec + "---\n" + baseSpec),
		"alias bomb":  []byte(bomb.String()),
		"deep":        []byte(deep),
		"10 MB":       bytes.Repeat([]byte("# padding padding padding padding padding\n"), 10<<20/42),
		"custom tags": []byte(strings.Replace(baseSpec, "apiVersion: ", "apiVersion: !secret ", 1)),
	}
}

func TestParseHostile(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"empty":       "f.yaml: file is empty",
		"blank":       "f.yaml: file is empty",
		"comments":    "f.yaml: file holds no YAML document, only comments",
		"binary":      "f.yaml: not a YAML text file: it holds binary data or is not UTF-8",
		"latin1":      "f.yaml: not a YAML text file: it holds binary data or is not UTF-8",
		"malformed":   "f.yaml:2: YAML syntax: did not find expected ',' or ']'",
		"scalar":      "f.yaml:1: a spec must be a YAML mapping (apiVersion, kind, metadata, spec)",
		"two docs":    "f.yaml:22: file holds more than one YAML document; a spec is one document",
		"alias bomb":  "f.yaml:1: document expands to more than 20000 values (aliases included); a spec is far smaller",
		"deep":        "f.yaml:1: nested deeper than 32 levels; a spec is six deep",
		"10 MB":       "f.yaml: file is larger than the 256 KiB limit of a spec",
		"custom tags": "f.yaml:1: apiVersion: unsupported YAML tag !secret",
	}
	for name, data := range hostileInputs() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A guard against hangs, not a speed target: BenchmarkParseHostile measures.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan *File, 1)
			go func() { done <- Parse("f.yaml", data) }()
			select {
			case f := <-done:
				if f.Cluster != nil && name != "custom tags" {
					t.Errorf("Parse returned a cluster for a hostile file")
				}
				got := findingStrings(f.Findings)
				if len(got) != 1 || got[0] != want[name] {
					t.Errorf("findings (-want +got):\n%s", cmp.Diff(want[name], strings.Join(got, "\n")))
				}
			case <-ctx.Done():
				t.Fatalf("Parse did not return within 20s")
			}
		})
	}
}

func BenchmarkParseHostile(b *testing.B) {
	for name, data := range hostileInputs() {
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			for b.Loop() {
				Parse("f.yaml", data)
			}
		})
	}
}

func BenchmarkParseSpec(b *testing.B) {
	data := []byte(baseSpec)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if f := Parse("f.yaml", data); f.Findings.HasErrors() {
			b.Fatal(f.Findings)
		}
	}
}

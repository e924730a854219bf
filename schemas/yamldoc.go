package schemas

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Bounds that keep parsing a hostile file within a second and a few MiB.
const (
	// MaxFileSize is the largest spec file read; a real one is a few KiB.
	MaxFileSize = 256 << 10
	// maxNodes bounds the values a document expands to, aliases included.
	maxNodes = 20_000
	// maxDepth bounds nesting; a spec is six levels deep.
	maxDepth = 32
)

// tooLarge is the problem of a file over MaxFileSize.
var tooLarge = Problem{Message: fmt.Sprintf("file is larger than the %d KiB limit of a spec", MaxFileSize>>10)}

// document is a YAML document read into plain values (map[string]any, []any,
// string, int64, float64, bool, nil) with the line of every value.
type document struct {
	root any
	pos  map[string]position // by JSON pointer
}

// position is where a value stands: the line of its key in a mapping (0 for a
// list item) and the line of the value itself.
type position struct{ keyLine, line int }

// lineOf returns the line of the value at p, or of its nearest ancestor.
func (d *document) lineOf(p Path) int {
	if d == nil {
		return 0
	}
	for n := len(p); n >= 0; n-- {
		if pos, ok := d.pos[p[:n].pointer()]; ok {
			if pos.keyLine > 0 {
				return pos.keyLine
			}
			return pos.line
		}
	}
	return 0
}

// Problem is a finding before it is placed in a file: a message about the
// value at Path, on Line when the YAML layer knows it.
type Problem struct {
	Line    int
	Path    Path
	Message string
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// decodeDocument reads data as exactly one YAML document. It never panics
// and bounds the work a hostile input can cause.
func decodeDocument(data []byte) (*document, []Problem) {
	switch {
	case len(data) > MaxFileSize:
		return nil, []Problem{tooLarge}
	case len(bytes.TrimSpace(data)) == 0:
		return nil, []Problem{{Message: "file is empty"}}
	case bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data):
		return nil, []Problem{{Message: "not a YAML text file: it holds binary data or is not UTF-8"}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, []Problem{{Message: "file holds no YAML document, only comments"}}
		}
		return nil, []Problem{syntaxProblem(err)}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, []Problem{{Line: extra.Line, Message: "file holds more than one YAML document; a spec is one document"}}
	case !errors.Is(err, io.EOF):
		return nil, []Problem{syntaxProblem(err)}
	}
	c := converter{pos: map[string]position{}}
	v, ok := c.value(root.Content[0], nil, 0, 0)
	if !ok {
		return nil, c.problems
	}
	return &document{root: v, pos: c.pos}, c.problems
}

// zeroBasedErrors are the yaml.v3 messages that give the 0-based line of
// their context mark rather than the 1-based line people count.
var zeroBasedErrors = []string{"did not find expected", "found a tab character"}

func syntaxProblem(err error) Problem {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		for _, prefix := range zeroBasedErrors {
			if strings.HasPrefix(m[2], prefix) {
				line++
				break
			}
		}
		return Problem{Line: line, Message: "YAML syntax: " + m[2]}
	}
	msg := err.Error()
	if rest, ok := bytes.CutPrefix([]byte(msg), []byte("yaml: ")); ok {
		msg = string(rest)
	}
	return Problem{Message: "YAML syntax: " + msg}
}

// converter turns yaml.Nodes into plain values, counting every node it
// visits so that alias bombs stop early.
type converter struct {
	pos      map[string]position
	nodes    int
	problems []Problem
}

// value converts n; false means the document cannot be read further.
func (c *converter) value(n *yaml.Node, path Path, keyLine, depth int) (any, bool) {
	c.nodes++
	if c.nodes > maxNodes {
		c.problems = append(c.problems, Problem{Line: n.Line, Message: fmt.Sprintf(
			"document expands to more than %d values (aliases included); a spec is far smaller", maxNodes)})
		return nil, false
	}
	if depth > maxDepth {
		c.problems = append(c.problems, Problem{Line: n.Line, Message: fmt.Sprintf("nested deeper than %d levels; a spec is six deep", maxDepth)})
		return nil, false
	}
	if ptr := path.pointer(); c.pos[ptr] == (position{}) {
		c.pos[ptr] = position{keyLine: keyLine, line: n.Line}
	}
	switch n.Kind {
	case yaml.AliasNode:
		return c.value(n.Alias, path, keyLine, depth+1)
	case yaml.ScalarNode:
		return c.scalar(n, path)
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			v, ok := c.value(item, path.Index(i), 0, depth+1)
			if !ok {
				return nil, false
			}
			list = append(list, v)
		}
		return list, true
	case yaml.MappingNode:
		return c.mapping(n, path, depth)
	}
	c.problems = append(c.problems, Problem{Line: n.Line, Path: path, Message: "unexpected YAML node"})
	return nil, false
}

func (c *converter) scalar(n *yaml.Node, path Path) (any, bool) {
	switch tag := n.ShortTag(); tag {
	case "!!str", "!!timestamp":
		return n.Value, true
	case "!!null":
		return nil, true
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			return i, true
		}
		var f float64 // out of int64's range: a float still compares with bounds
		if err := n.Decode(&f); err == nil {
			return f, true
		}
	case "!!float":
		var f float64
		if err := n.Decode(&f); err == nil {
			return f, true
		}
	default:
		// The value is kept as text, so the schema still judges it.
		c.problems = append(c.problems, Problem{Line: n.Line, Path: path, Message: fmt.Sprintf("unsupported YAML tag %s", tag)})
		return n.Value, true
	}
	c.problems = append(c.problems, Problem{Line: n.Line, Path: path, Message: fmt.Sprintf("cannot read %q as %s", n.Value, n.ShortTag())})
	return nil, true
}

func (c *converter) mapping(n *yaml.Node, path Path, depth int) (any, bool) {
	obj := make(map[string]any, len(n.Content)/2)
	seen := make(map[string]int, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolveAlias(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			c.problems = append(c.problems, Problem{Line: k.Line, Path: path, Message: "a mapping key must be a plain string"})
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			c.problems = append(c.problems, Problem{Line: k.Line, Path: path.Field(k.Value), Message: fmt.Sprintf("duplicate key: already defined at line %d", first)})
			continue
		}
		seen[k.Value] = k.Line
		val, ok := c.value(v, path.Field(k.Value), k.Line, depth+1)
		if !ok {
			return nil, false
		}
		obj[k.Value] = val
	}
	// Merge keys (<<: *base) fill only the keys the mapping does not set itself.
	for _, m := range merges {
		sources := []*yaml.Node{resolveAlias(m)}
		if sources[0].Kind == yaml.SequenceNode {
			sources = sources[0].Content
		}
		for _, src := range sources {
			src = resolveAlias(src)
			if src.Kind != yaml.MappingNode {
				c.problems = append(c.problems, Problem{Line: m.Line, Path: path, Message: "a merge key (<<) takes a mapping or a list of mappings"})
				continue
			}
			for i := 0; i+1 < len(src.Content); i += 2 {
				k := resolveAlias(src.Content[i])
				if _, set := obj[k.Value]; set || k.Kind != yaml.ScalarNode {
					continue
				}
				val, ok := c.value(src.Content[i+1], path.Field(k.Value), m.Line, depth+1)
				if !ok {
					return nil, false
				}
				obj[k.Value] = val
			}
		}
	}
	return obj, true
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for hops := 0; n.Kind == yaml.AliasNode && n.Alias != nil && hops < maxDepth; hops++ {
		n = n.Alias
	}
	return n
}

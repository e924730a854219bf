package schemas

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is one spec file read and validated on its own (fleet rules aside).
type File struct {
	// Path is the file's name as findings print it.
	Path string
	// Cluster is the defaulted spec, or nil when the file could not be read
	// as one. It may be set while Findings holds errors.
	Cluster  *Cluster
	Findings Findings

	doc *document
}

// Parse reads and validates one spec file: YAML, schema and the rules that
// need only this file. Every problem is reported at once, with its line.
func Parse(path string, data []byte) *File {
	f := &File{Path: path}
	doc, problems := decodeDocument(data)
	f.doc = doc
	f.add(problems)
	if doc == nil {
		return f
	}
	if _, isMap := doc.root.(map[string]any); !isMap {
		f.add([]Problem{{Line: doc.lineOf(nil), Message: "a spec must be a YAML mapping (apiVersion, kind, metadata, spec)"}})
		return f
	}
	schemaFound := schemaProblems(doc)
	f.add(schemaFound)

	// Values the schema refused are dropped before the typed decode, so that
	// no rule judges them a second time.
	for _, p := range schemaFound {
		prune(doc.root, p.Path)
	}
	c, err := decodeCluster(doc.root)
	if err != nil {
		f.add([]Problem{{Message: err.Error()}})
		return f
	}
	c.Default()
	f.Cluster = c
	// A value the schema refused is not judged twice.
	f.add(withoutPaths(c.check(), schemaFound))
	f.Findings.Sort()
	return f
}

// Marshal writes c as a spec file.
func Marshal(c *Cluster) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("marshal cluster %q: %w", c.Metadata.Name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("marshal cluster %q: %w", c.Metadata.Name, err)
	}
	return b.Bytes(), nil
}

// decodeCluster fills a Cluster from plain values. Values of the wrong type
// are left zero: the schema has reported them already.
func decodeCluster(root any) (*Cluster, error) {
	var n yaml.Node
	if err := n.Encode(root); err != nil {
		return nil, fmt.Errorf("re-encode spec: %w", err)
	}
	c := new(Cluster)
	if err := n.Decode(c); err != nil {
		if _, partial := err.(*yaml.TypeError); !partial {
			return nil, fmt.Errorf("decode spec: %w", err)
		}
	}
	return c, nil
}

// prune removes the value at p from root: a field is deleted, a list item
// set to null.
func prune(root any, p Path) {
	if len(p) == 0 {
		return
	}
	cur := root
	for _, e := range p[:len(p)-1] {
		switch v := cur.(type) {
		case map[string]any:
			cur = v[fmt.Sprint(e)]
		case []any:
			i, ok := e.(int)
			if !ok || i < 0 || i >= len(v) {
				return
			}
			cur = v[i]
		default:
			return
		}
	}
	switch v := cur.(type) {
	case map[string]any:
		delete(v, fmt.Sprint(p[len(p)-1]))
	case []any:
		if i, ok := p[len(p)-1].(int); ok && i >= 0 && i < len(v) {
			v[i] = nil
		}
	}
}

// add places problems in the file, with the line of their path when they
// carry none of their own.
func (f *File) add(problems []Problem) {
	for _, p := range problems {
		f.Findings = append(f.Findings, f.finding(p, SeverityError))
	}
}

func (f *File) finding(p Problem, sev Severity) Finding {
	line := p.Line
	if line == 0 {
		line = f.doc.lineOf(p.Path)
	}
	return Finding{File: f.Path, Line: line, Path: p.Path.String(), Message: p.Message, Severity: sev}
}

// withoutPaths drops the problems at or below a path that already has one.
func withoutPaths(problems, already []Problem) []Problem {
	var out []Problem
	for _, p := range problems {
		covered := false
		for _, a := range already {
			if ps, as := p.Path.String(), a.Path.String(); ps == as || strings.HasPrefix(ps, as+".") || strings.HasPrefix(ps, as+"[") {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

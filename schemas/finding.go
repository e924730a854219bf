package schemas

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Severity says whether a finding makes a fleet invalid.
type Severity string

// The severities. Only errors make a fleet invalid.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Finding is one problem found in a spec, placed by file, line and field path.
type Finding struct {
	File     string   `json:"file"`
	Line     int      `json:"line,omitempty"`
	Path     string   `json:"path,omitempty"`
	Message  string   `json:"message"`
	Severity Severity `json:"severity"`
}

// String formats the finding as file:Line: Path: message, the way compilers do.
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.File)
	if f.Line > 0 {
		b.WriteString(":" + strconv.Itoa(f.Line))
	}
	b.WriteString(": ")
	if f.Severity == SeverityWarning {
		b.WriteString("warning: ")
	}
	if f.Path != "" {
		b.WriteString(f.Path + ": ")
	}
	b.WriteString(f.Message)
	return printable(b.String())
}

// printable escapes control characters (\x1b, \r, ...), which a folder
// name or a value echoed in a message can carry: a finding printed on a
// terminal must not drive it.
func printable(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Findings is a list of findings with helpers to sort and count them.
type Findings []Finding

// HasErrors reports whether any finding is an error.
func (fs Findings) HasErrors() bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Severity == SeverityError })
}

// Sort orders findings by file, line, path and message.
func (fs Findings) Sort() {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Message, b.Message),
		)
	})
}

// Path addresses a value in a spec; each element is a field name (string) or
// a list index (int).
type Path []any

// Field returns p extended by a field name.
func (p Path) Field(name string) Path { return append(slices.Clip(p), name) }

// Index returns p extended by a list index.
func (p Path) Index(i int) Path { return append(slices.Clip(p), i) }

// String formats p as people read it: spec.workerPools[1].count. Map keys
// that are not identifiers are quoted: labels["example.com/tier"].
func (p Path) String() string {
	var b strings.Builder
	for _, e := range p {
		switch e := e.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", e)
		case string:
			switch {
			case !isIdentifier(e):
				fmt.Fprintf(&b, "[%q]", e)
			case b.Len() > 0:
				b.WriteString("." + e)
			default:
				b.WriteString(e)
			}
		}
	}
	return b.String()
}

// pointerEscape escapes a JSON pointer's segment; built once (a replacer
// built per call cost 4 KiB a value: a hostile 1 MiB spec 400 MB).
var pointerEscape = strings.NewReplacer("~", "~0", "/", "~1")

// pointer returns p as a JSON pointer, the key of a document's positions.
func (p Path) pointer() string {
	var b strings.Builder
	for _, e := range p {
		b.WriteByte('/')
		switch e := e.(type) {
		case int:
			b.WriteString(strconv.Itoa(e))
		case string:
			b.WriteString(pointerEscape.Replace(e))
		}
	}
	return b.String()
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		letter := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

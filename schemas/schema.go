package schemas

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaJSON is cluster.schema.json, the contract of a cluster spec (JSON
// Schema 2020-12), as editors and other tools read it.
//
//go:embed cluster.schema.json
var schemaJSON []byte

// SchemaID is the $id of SchemaJSON.
const SchemaID = "https://opke.dev/schemas/cluster.schema.json"

// schemaDoc is SchemaJSON as plain values, for reading keywords back.
var schemaDoc = sync.OnceValue(func() map[string]any {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		panic(fmt.Sprintf("embedded cluster.schema.json: %v", err)) // a test guards this
	}
	return doc.(map[string]any)
})

var compiledSchema = sync.OnceValue(func() *jsonschema.Schema {
	c := jsonschema.NewCompiler()
	if err := c.AddResource(SchemaID, schemaDoc()); err != nil {
		panic(fmt.Sprintf("embedded cluster.schema.json: %v", err))
	}
	return c.MustCompile(SchemaID)
})

// patternMessages says in words what each pattern of the schema asks for.
var patternMessages = map[string]string{
	"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$":           "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit",
	`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`: "must be a duration such as 90s, 10m or 24h",
	`^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$`:  "must be an IPv4 CIDR such as 192.168.10.0/24",
	`^v[0-9]+\.[0-9]+\.[0-9]+$`:                 "must be vMAJOR.MINOR.PATCH, such as v" + supportedMinors[len(supportedMinors)-1] + ".0",
	"^[^/]+$":                                   "must not contain '/'",
	`^https?://[^/@?#\s]+(/[^?#\s]*)?$`:         "must be https://host[:port][/path] (or http://), with no credentials, query or spaces",
}

var printer = message.NewPrinter(language.English)

// schemaProblems validates doc against the schema and says each violation
// in words, at the path it concerns.
func schemaProblems(doc *document) []Problem {
	err := compiledSchema().Validate(doc.root)
	var verr *jsonschema.ValidationError
	if err == nil || !errors.As(err, &verr) {
		return nil
	}
	var out []Problem
	for _, leaf := range leaves(verr) {
		path := instancePath(doc.root, leaf.InstanceLocation)
		out = append(out, describe(path, leaf)...)
	}
	return out
}

func leaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// instancePath turns a JSON pointer's tokens into a Path, telling list
// indexes from field names by walking the value.
func instancePath(root any, tokens []string) Path {
	var p Path
	cur := root
	for _, t := range tokens {
		switch v := cur.(type) {
		case []any:
			i, _ := strconv.Atoi(t)
			p = p.Index(i)
			if i >= 0 && i < len(v) {
				cur = v[i]
			}
		case map[string]any:
			p = p.Field(t)
			cur = v[t]
		default:
			p = p.Field(t)
		}
	}
	return p
}

func describe(path Path, e *jsonschema.ValidationError) []Problem {
	one := func(msg string) []Problem { return []Problem{{Path: path, Message: msg}} }
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		var out []Problem
		for _, m := range k.Missing {
			out = append(out, Problem{Path: path.Field(m), Message: "required field is missing"})
		}
		return out
	case *kind.AdditionalProperties:
		allowed := allowedProperties(e.SchemaURL)
		var out []Problem
		for _, name := range k.Properties {
			msg := "unknown field"
			if s := suggest(name, allowed); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			out = append(out, Problem{Path: path.Field(name), Message: msg})
		}
		return out
	case *kind.Type:
		msg := fmt.Sprintf("must be %s, not %s", strings.Join(k.Want, " or "), k.Got)
		if slices.Equal(k.Want, []string{"string"}) && (k.Got == "number" || k.Got == "boolean") {
			msg += ` (YAML read it as a ` + k.Got + `; put it in quotes)`
		}
		return one(msg)
	case *kind.Const:
		return one(fmt.Sprintf("must be %v", k.Want))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprint(w)
		}
		if len(want) == 1 {
			return one(fmt.Sprintf("must be %s; got %v", want[0], k.Got))
		}
		return one(fmt.Sprintf("must be one of %s; got %v", strings.Join(want, ", "), k.Got))
	case *kind.Minimum:
		return one("must be >= " + ratString(k.Want))
	case *kind.Maximum:
		return one("must be <= " + ratString(k.Want))
	case *kind.MinLength:
		if k.Want == 1 {
			return one("must not be empty")
		}
		return one(fmt.Sprintf("must be at least %d characters", k.Want))
	case *kind.MaxLength:
		return one(fmt.Sprintf("must be at most %d characters, not %d", k.Want, k.Got))
	case *kind.MaxItems:
		return one(fmt.Sprintf("must have at most %d items", k.Want))
	case *kind.Pattern:
		if msg, ok := patternMessages[k.Want]; ok {
			return one(fmt.Sprintf("%s; got %q", msg, k.Got))
		}
	}
	return one(e.ErrorKind.LocalizedString(printer))
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// allowedProperties reads the property names of the schema object that an
// additionalProperties keyword at schemaURL belongs to.
func allowedProperties(schemaURL string) []string {
	_, frag, _ := strings.Cut(schemaURL, "#")
	frag = strings.TrimSuffix(frag, "/additionalProperties")
	var cur any = schemaDoc()
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if tok == "" {
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)]
	}
	m, _ := cur.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// suggest returns the allowed name closest to name when it is close enough
// to be a typo: a different case or at most two edits.
func suggest(name string, allowed []string) string {
	best, bestDist := "", 3
	for _, a := range allowed {
		if strings.EqualFold(a, name) {
			return a
		}
		if d := editDistance(strings.ToLower(name), strings.ToLower(a)); d < bestDist {
			best, bestDist = a, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

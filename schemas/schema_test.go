package schemas

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSchemaMatchesTypes keeps cluster.schema.json and the Go types in
// agreement: the same fields, the same required set (a field is required
// exactly when its tag lacks omitempty), the same JSON types, and the
// schema's declared defaults equal to what Default fills in.
func TestSchemaMatchesTypes(t *testing.T) {
	t.Parallel()
	compareType(t, "", reflect.TypeFor[Cluster](), schemaDoc())
}

func resolve(t *testing.T, s map[string]any) map[string]any {
	t.Helper()
	for {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		cur := any(schemaDoc())
		for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[tok]
		}
		s = cur.(map[string]any)
	}
}

var durationType = reflect.TypeFor[Duration]()

func compareType(t *testing.T, path string, typ reflect.Type, s map[string]any) {
	t.Helper()
	s = resolve(t, s)
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := ""
	switch {
	case typ == durationType:
		want = "string"
	case typ.Kind() == reflect.Struct:
		want = "object"
	case typ.Kind() == reflect.Slice:
		want = "array"
	case typ.Kind() == reflect.Map:
		want = "object"
	case typ.Kind() == reflect.String:
		want = "string"
	case typ.Kind() == reflect.Int:
		want = "integer"
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	default:
		t.Fatalf("%s: Go kind %s has no schema rule", path, typ.Kind())
	}
	if got := schemaType(s); got != want {
		t.Errorf("%s: schema type %q, Go type %s wants %q", path, got, typ, want)
	}
	switch {
	case typ == durationType:
	case typ.Kind() == reflect.Struct:
		compareStruct(t, path, typ, s)
	case typ.Kind() == reflect.Slice:
		items, _ := s["items"].(map[string]any)
		compareType(t, path+"[]", typ.Elem(), items)
	case typ.Kind() == reflect.Map:
		values, _ := s["additionalProperties"].(map[string]any)
		compareType(t, path+"{}", typ.Elem(), values)
	}
}

func compareStruct(t *testing.T, path string, typ reflect.Type, s map[string]any) {
	t.Helper()
	if s["additionalProperties"] != false {
		t.Errorf("%s: schema object must set additionalProperties: false", path)
	}
	props, _ := s["properties"].(map[string]any)
	var goFields, goRequired []string
	for f := range typ.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if yname, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); yname != name {
			t.Errorf("%s.%s: json name %q and yaml name %q differ", path, f.Name, name, yname)
		}
		goFields = append(goFields, name)
		if !strings.Contains(opts, "omitempty") {
			goRequired = append(goRequired, name)
		}
		if p, ok := props[name].(map[string]any); ok {
			compareType(t, strings.TrimPrefix(path+"."+name, "."), f.Type, p)
		}
	}
	var schemaFields, schemaRequired []string
	for name := range props {
		schemaFields = append(schemaFields, name)
	}
	required, _ := s["required"].([]any)
	for _, r := range required {
		schemaRequired = append(schemaRequired, r.(string))
	}
	for _, l := range [][]string{goFields, goRequired, schemaFields, schemaRequired} {
		slices.Sort(l)
	}
	if diff := cmp.Diff(goFields, schemaFields); diff != "" {
		t.Errorf("%s: fields (-go +schema):\n%s", path, diff)
	}
	if diff := cmp.Diff(goRequired, schemaRequired); diff != "" {
		t.Errorf("%s: required fields (-go +schema):\n%s", path, diff)
	}
}

// schemaType is the JSON type a schema admits, read from type, const or enum.
func schemaType(s map[string]any) string {
	if ty, ok := s["type"].(string); ok {
		return ty
	}
	var sample any
	if c, ok := s["const"]; ok {
		sample = c
	} else if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		sample = e[0]
	}
	switch sample.(type) {
	case string:
		return "string"
	case json.Number:
		return "integer"
	}
	return ""
}

// TestSchemaDefaults checks that the defaults the schema documents for
// editors are the ones Default fills in.
func TestSchemaDefaults(t *testing.T) {
	t.Parallel()
	c := mustParse(t, baseSpec+"  backup: {}\n  remediation: {}\n  pki: {}\n")
	got, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var filled map[string]any
	if err := json.Unmarshal(got, &filled); err != nil {
		t.Fatal(err)
	}
	spec := resolve(t, schemaDoc()["properties"].(map[string]any)["spec"].(map[string]any))
	var walk func(path []string, s map[string]any, v any)
	walk = func(path []string, s map[string]any, v any) {
		s = resolve(t, s)
		if def, ok := s["default"]; ok {
			if diff := cmp.Diff(normalize(def), normalize(v)); diff != "" {
				t.Errorf("%s: schema default (-schema +Default):\n%s", strings.Join(path, "."), diff)
			}
		}
		props, _ := s["properties"].(map[string]any)
		obj, _ := v.(map[string]any)
		for name, p := range props {
			walk(append(slices.Clip(path), name), p.(map[string]any), obj[name])
		}
	}
	walk([]string{"spec"}, spec, filled["spec"])
}

func normalize(v any) any {
	switch v := v.(type) {
	case json.Number:
		f, _ := v.Float64()
		return f
	}
	return v
}

func TestPatternMessages(t *testing.T) {
	t.Parallel()
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if p, ok := v["pattern"].(string); ok {
				if _, ok := patternMessages[p]; !ok {
					t.Errorf("pattern %q has no message in patternMessages", p)
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(schemaDoc())
}

func FuzzParseCluster(f *testing.F) {
	f.Add([]byte(baseSpec))
	for _, data := range hostileInputs() {
		if len(data) < 64<<10 {
			f.Add(data)
		}
	}
	f.Add([]byte(baseSpec + "  backup: {interval: 1h}\n  addons: [{name: dashboard}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file := Parse("f.yaml", data)
		if file.Cluster == nil || file.Findings.HasErrors() {
			return
		}
		out, err := Marshal(file.Cluster)
		if err != nil {
			t.Fatalf("Marshal of a valid spec: %v", err)
		}
		again := Parse("f.yaml", out)
		if again.Findings.HasErrors() {
			t.Fatalf("marshalled spec has findings %v:\n%s", again.Findings, out)
		}
		if diff := cmp.Diff(file.Cluster, again.Cluster); diff != "" {
			t.Fatalf("round trip changed the spec (-first +second):\n%s", diff)
		}
	})
}

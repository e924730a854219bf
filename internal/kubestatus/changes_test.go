package kubestatus

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFieldChanges(t *testing.T) {
	t.Parallel()
	const ds = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"kube-proxy","namespace":"kube-system",
		"generation":%s,"resourceVersion":"%s","managedFields":[{"manager":"opke"}],
		"annotations":{"deprecated.daemonset.template.generation":"%s"}},
		"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy","image":"%s","args":%s},{"name":"sidecar","image":"s"}]}}},
		"status":{"numberReady":%s}}`
	for _, tc := range []struct {
		name        string
		live, after string
		want        []string
	}{
		{"only what the API server keeps differs",
			fmt.Sprintf(ds, "1", "10", "1", "kube-proxy:v1.35.3", `["--v=2"]`, "3"),
			fmt.Sprintf(ds, "2", "11", "2", "kube-proxy:v1.35.3", `["--v=2"]`, "0"), nil},
		{"a container's image, by its name; an arg by index",
			fmt.Sprintf(ds, "1", "10", "1", "kube-proxy:v1.35.3", `["--v=2","--a"]`, "3"),
			fmt.Sprintf(ds, "2", "10", "2", "kube-proxy:v1.35.4", `["--v=4"]`, "3"),
			[]string{
				`spec.template.spec.containers[kube-proxy].args[0]: "--v=2" → "--v=4"`,
				`spec.template.spec.containers[kube-proxy].args[1]: "--a" → (none)`,
				`spec.template.spec.containers[kube-proxy].image: "kube-proxy:v1.35.3" → "kube-proxy:v1.35.4"`,
			}},
		{"a label with a slash, added; a field removed; a long value cut",
			`{"metadata":{"name":"x","labels":{"a":"1"}},"data":{"old":"1","big":"` + long(10) + `"}}`,
			`{"metadata":{"name":"x","labels":{"a":"1","app.kubernetes.io/name":"x"}},"data":{"big":"` + long(20) + `"}}`,
			[]string{
				`data.big: "0123456789" → "01234567890123456789"`,
				`data.old: "1" → (none)`,
				`metadata.labels["app.kubernetes.io/name"]: (none) → "x"`,
			}},
		{"two long values that differ past the cut",
			`{"data":{"k":"` + long(100) + `a"}}`, `{"data":{"k":"` + long(100) + `b"}}`,
			[]string{`data.k: "` + long(100)[:76] + `... → "` + long(100)[:76] + `...`}},
		{"a value cut at 80 characters",
			`{"data":{"k":"a"}}`, `{"data":{"k":"` + long(100) + `"}}`,
			[]string{`data.k: "a" → "` + long(100)[:76] + `...`}},
		{"a list of unnamed objects, by index; a map become a string",
			`{"spec":{"ports":[{"port":53},{"port":54}],"x":{"a":1}}}`, `{"spec":{"ports":[{"port":53},{"port":55}],"x":"a"}}`,
			[]string{`spec.ports[1].port: 54 → 55`, `spec.x: {"a":1} → "a"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FieldChanges([]byte(tc.live), []byte(tc.after))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("changes (-want +got):\n%s", d)
			}
		})
	}
	if _, err := FieldChanges([]byte(`{`), []byte(`{}`)); err == nil {
		t.Error("no error for a live object that is not JSON")
	}
}

func long(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + i%10)
	}
	return string(b)
}

// FuzzFieldChanges: whatever two objects the API answers, the comparison
// does not panic, an object compared with itself changes nothing, and a
// change is only ever said of objects whose content differs.
func FuzzFieldChanges(f *testing.F) {
	f.Add([]byte(`{"spec":{"containers":[{"name":"a","image":"x"}]}}`), []byte(`{"spec":{"containers":[{"name":"a","image":"y"}]}}`))
	f.Add([]byte(`{"metadata":{"labels":{"a/b":"1"}},"status":{}}`), []byte(`{"metadata":{"labels":{}},"data":[1,2]}`))
	f.Add([]byte(`{}`), []byte(`{"a":null}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		got, err := FieldChanges(a, b)
		if err != nil {
			return
		}
		if self, err := FieldChanges(a, a); err != nil || len(self) > 0 {
			t.Fatalf("an object against itself: %q %v", self, err)
		}
		var x, y map[string]any
		_ = json.Unmarshal(a, &x)
		_ = json.Unmarshal(b, &y)
		if len(got) > 0 && reflect.DeepEqual(ownContent(x), ownContent(y)) {
			t.Fatalf("changes %q of objects whose content is the same", got)
		}
	})
}

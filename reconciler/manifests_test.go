package reconciler

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseManifest(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []string // refs
		err        bool
	}{
		{name: "empty", data: ""},
		{name: "two documents and an empty one", data: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-flannel\n---\n---\n" +
			"apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: kube-flannel-ds\n  namespace: kube-flannel\n",
			want: []string{"Namespace kube-flannel", "DaemonSet kube-flannel/kube-flannel-ds"}},
		{name: "comments only", data: "# nothing\n---\n# still nothing\n"},
		{name: "no kind", data: "apiVersion: v1\nmetadata:\n  name: x\n", err: true},
		{name: "no name", data: "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", err: true},
		{name: "not a map", data: "- a\n- b\n", err: true},
		{name: "bad YAML", data: "apiVersion: v1\nkind: [\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := parseManifest([]byte(tc.data))
			if tc.err {
				if !errors.Is(err, ErrManifest) {
					t.Fatalf("err %v, want ErrManifest", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.ref())
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("objects (-want +got):\n%s", d)
			}
		})
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: a}\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := parseManifest(data)
		if err != nil && !errors.Is(err, ErrManifest) {
			t.Fatalf("an error that is not ErrManifest: %v", err)
		}
		for _, o := range objs {
			if o.APIVersion == "" || o.Kind == "" || o.Name == "" || o.Body == nil {
				t.Fatalf("an object without a name: %+v", o)
			}
		}
	})
}

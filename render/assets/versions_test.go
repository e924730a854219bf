package assets

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"opke.dev/opke/schemas"
)

// TestImageRefsNameEveryImage: refs, which the registries a cluster's
// containerd is told about come from, holds every image reference of
// every row, at any depth of Images: a field added without it fails.
func TestImageRefsNameEveryImage(t *testing.T) {
	for minor := range matrix {
		version, err := schemas.ParseVersion("v" + minor + ".0")
		if err != nil {
			t.Fatal(err)
		}
		v, err := ImagesFor(version)
		if err != nil {
			t.Fatal(err)
		}
		refs := v.refs()
		var walk func(path string, rv reflect.Value)
		walk = func(path string, rv reflect.Value) {
			switch rv.Kind() {
			case reflect.Struct:
				for i := range rv.NumField() {
					walk(path+"."+rv.Type().Field(i).Name, rv.Field(i))
				}
			case reflect.String:
				if s := rv.String(); strings.Contains(s, "/") && !slices.Contains(refs, s) {
					t.Errorf("%s: Images%s %q is not in refs", minor, path, s)
				}
			}
		}
		walk("", reflect.ValueOf(v))
	}
}

func TestImageTag(t *testing.T) {
	for _, tt := range []struct{ ref, tag string }{
		{"quay.io/prometheus/prometheus:v3.16.0", "v3.16.0"},
		{"registry.k8s.io/etcd:3.6.5-0", "3.6.5-0"},
		{"localhost:5000/pause", ""},
		{"pause", ""},
	} {
		got, ok := ImageTag(tt.ref)
		if got != tt.tag || ok != (tt.tag != "") {
			t.Errorf("ImageTag(%q) = %q, %v; want %q", tt.ref, got, ok, tt.tag)
		}
	}
}

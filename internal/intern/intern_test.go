package intern

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// TestString: equal strings come back as one copy, which owns its bytes
// (not a window into the string it was cut from); past the bound the
// table grows no more.
func TestString(t *testing.T) {
	var tab Table
	key := "/opke/prod/hosts/prod-controller-0/files/etc/kubernetes/pki/ca.crt"
	_, cut, _ := strings.Cut(key, "/files")
	a := tab.String(cut)
	b := tab.String(strings.Clone(cut))
	if a != cut || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("two interned copies of %q do not share their bytes", cut)
	}
	if unsafe.StringData(a) == unsafe.StringData(cut) {
		t.Error("the interned string is a window into the key it was cut from")
	}
	for i := range maxStrings + 10 {
		tab.String(fmt.Sprint(i))
	}
	if tab.Len() != maxStrings {
		t.Errorf("the table holds %d strings, want its bound %d", tab.Len(), maxStrings)
	}
	if s := tab.String("past the bound"); s != "past the bound" {
		t.Errorf("past the bound: %q", s)
	}
}

// TestList: equal lists come back as one copy, not the caller's slice;
// an empty list is nil.
func TestList(t *testing.T) {
	var tab Table
	mine := []string{"kubelet.service", "containerd.service"}
	a, b := tab.List(mine), tab.List(slices.Clone(mine))
	if !slices.Equal(a, mine) || &a[0] != &b[0] {
		t.Errorf("two interned copies of %q do not share their array", mine)
	}
	if &a[0] == &mine[0] {
		t.Error("the interned list is the caller's slice")
	}
	if tab.List(nil) != nil || tab.List([]string{}) != nil {
		t.Error("an empty list is not nil")
	}
	if c := tab.List([]string{"kubelet.service"}); len(c) != 1 || &c[0] == &a[0] {
		t.Errorf("another list: %q", c)
	}
}

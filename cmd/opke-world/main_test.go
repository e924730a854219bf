package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "usage: opke-world"},
		{"unknown command", []string{"serve"}, "usage: opke-world"},
		{"unknown set", []string{"list", "--set", "most"}, `unknown set "most"`},
		{"an artifact the set does not have", []string{"list", "--set", "e2e", "--only", "registry-v9"}, `no artifact "registry-v9" in this set (it has `},
		{"stray argument", []string{"build", "now"}, "unexpected arguments"},
		{"push without a registry", []string{"push"}, "--registry \"\""},
		{"push with a login in the URL", []string{"push", "--registry", "https://u:p@mirror:5000"}, "without credentials"},
		{"push over http off loopback", []string{"push", "--registry", "http://mirror.internal:5000"}, "plain http only to a loopback"},
		{"push with a CA that is not one", []string{"push", "--registry", "https://mirror:5000", "--ca", "main.go"}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(t.Context(), tc.args, &out, &errOut); code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, errOut.String())
			}
			if !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("stderr %q, want %q", errOut.String(), tc.want)
			}
			if strings.Contains(errOut.String(), "u:p@") {
				t.Errorf("stderr repeats the credentials: %q", errOut.String())
			}
		})
	}
}

func TestOnly(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"list", "--set", "e2e", "--only", "runc-v1.3.3,distribution-v3.1.2"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var keys []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] {
		keys = append(keys, strings.Fields(l)[0])
	}
	if diff := cmp.Diff([]string{"runc-v1.3.3", "distribution-v3.1.2"}, keys); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
}

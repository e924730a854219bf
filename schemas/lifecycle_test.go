package schemas

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Every minor OPKE renders has upstream's end-of-life day.
func TestEveryMinorHasItsEndOfLife(t *testing.T) {
	for _, m := range SupportedMinors() {
		v, _ := ParseVersion("v" + m + ".0")
		if _, ok := EndOfLife(v); !ok {
			t.Errorf("minor %s has no end-of-life day", m)
		}
	}
	if len(endOfLife) != len(SupportedMinors()) {
		t.Errorf("endOfLife lists %d minors, SupportedMinors %d", len(endOfLife), len(SupportedMinors()))
	}
}

// TestCheckLifecycle: past a minor's end of life a new cluster on it is
// refused and one already applied is warned with its path, one minor at
// a time; a minor upstream supports passes; the last day still counts.
func TestCheckLifecycle(t *testing.T) {
	day := func(s string) time.Time { d, _ := time.Parse(time.DateOnly, s); return d }
	const base = "apiVersion: opke.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: demo\nspec:\n  cloud: sim\n  image: flatcar\n  kubernetes:\n    version: VERSION\n" +
		"  network:\n    hostCIDR: 192.168.10.0/24\n    externalNetwork: public\n  controllers:\n    count: 1\n    flavor: m1.medium\n  gateway:\n    flavor: m1.small\n"
	fleetOf := func(version string) *Fleet {
		f := Parse("clusters/demo/cluster.yaml", []byte(strings.Replace(base, "VERSION", version, 1)))
		if f.Cluster == nil || len(f.Findings) > 0 {
			t.Fatalf("%v", f.Findings)
		}
		return &Fleet{Files: []*File{f}}
	}
	for _, tc := range []struct {
		name, version, now string
		applied, unknown   bool
		want               []string
	}{
		{name: "new on a supported minor", version: "v1.35.4", now: "2026-12-02"},
		{name: "new on an end-of-life minor", version: "v1.34.4", now: "2026-12-02", want: []string{
			"clusters/demo/cluster.yaml:9: spec.kubernetes.version: Kubernetes 1.34 reached its end of life on 2026-10-27: a new cluster starts on a minor upstream supports (1.35, 1.36, 1.37)"}},
		{name: "applied on an end-of-life minor", version: "v1.33.2", now: "2026-12-02", applied: true, want: []string{
			"clusters/demo/cluster.yaml:9: warning: spec.kubernetes.version: Kubernetes 1.33 reached its end of life on 2026-06-28 and gets no more fixes: upgrade one minor at a time: v1.34, then v1.35 (the latest patch of each)"}},
		{name: "history unknown", version: "v1.34.4", now: "2026-12-02", unknown: true, want: []string{
			"clusters/demo/cluster.yaml:9: warning: spec.kubernetes.version: Kubernetes 1.34 reached its end of life on 2026-10-27 and gets no more fixes: upgrade one minor at a time: v1.35 (the latest patch of each)"}},
		{name: "the last day", version: "v1.35.4", now: "2027-02-28"},
		{name: "the day after", version: "v1.35.4", now: "2027-03-01", want: []string{
			"clusters/demo/cluster.yaml:9: spec.kubernetes.version: Kubernetes 1.35 reached its end of life on 2027-02-28: a new cluster starts on a minor upstream supports (1.36, 1.37)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := fleetOf(tc.version)
			var b *Fleet
			switch {
			case tc.unknown:
			case tc.applied:
				b = fleetOf(tc.version)
			default:
				b = &Fleet{}
			}
			fl.CheckLifecycle(b, day(tc.now))
			var got []string
			for _, f := range fl.Findings {
				got = append(got, f.String())
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("findings (-want +got):\n%s", d)
			}
		})
	}
}

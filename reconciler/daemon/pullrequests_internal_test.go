package daemon

import (
	"testing"

	"opke.dev/opke/reconciler"
	"opke.dev/opke/schemas"
)

func TestAddedServers(t *testing.T) {
	t.Parallel()
	cluster := func(controllers int, pools map[string]int) *schemas.Cluster {
		c := &schemas.Cluster{}
		c.Spec.Controllers.Count = controllers
		for name, n := range pools {
			c.Spec.WorkerPools = append(c.Spec.WorkerPools, schemas.WorkerPool{Name: name, Count: n})
		}
		return c
	}
	applied := func(c *schemas.Cluster) map[string]*reconciler.AppliedSpec {
		return map[string]*reconciler.AppliedSpec{"demo": {Spec: c}}
	}
	for _, tt := range []struct {
		name    string
		pr      *schemas.Cluster
		applied map[string]*reconciler.AppliedSpec
		tracked map[string]*schemas.Cluster
		want    int
	}{
		{name: "a new cluster: all of it", pr: cluster(3, map[string]int{"a": 5}), want: 9},
		{name: "unchanged", pr: cluster(1, map[string]int{"a": 2}), applied: applied(cluster(1, map[string]int{"a": 2})), want: 0},
		{name: "scaled out and in", pr: cluster(3, map[string]int{"a": 1}), applied: applied(cluster(1, map[string]int{"a": 4})), want: 2},
		{name: "a pool renamed: its servers are new", pr: cluster(1, map[string]int{"b": 4}), applied: applied(cluster(1, map[string]int{"a": 4})), want: 4},
		{name: "the tracked head's first apply under way", pr: cluster(1, map[string]int{"a": 500}),
			tracked: map[string]*schemas.Cluster{"demo": cluster(1, map[string]int{"a": 500})}, want: 0},
		{name: "the larger of applied and tracked", pr: cluster(1, map[string]int{"a": 10}), applied: applied(cluster(1, map[string]int{"a": 8})),
			tracked: map[string]*schemas.Cluster{"demo": cluster(1, map[string]int{"a": 3})}, want: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := judged{valid: map[string]*schemas.Cluster{"demo": tt.pr}}
			if got := addedServers(j, tt.applied, tt.tracked); got != tt.want {
				t.Errorf("addedServers = %d, want %d", got, tt.want)
			}
		})
	}
}

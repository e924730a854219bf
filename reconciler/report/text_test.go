package report

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"opke.dev/opke/internal/golden"

	"opke.dev/opke/diff"
	"opke.dev/opke/schemas"
)

// TestText keeps the text of notes a person reads in git log under
// testdata/text/<case>.txt; regenerate with go test -update.
func TestText(t *testing.T) {
	at := time.Date(2026, 11, 27, 6, 28, 38, 0, time.UTC)
	const commit = "4f3c2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b"
	plan := &diff.Plan{Changes: []diff.Change{{Action: diff.ActionCreate}, {Action: diff.ActionUpload}}}
	failedSteps := func(n int) []Step {
		var steps []Step
		for i := range n {
			steps = append(steps, Step{Address: fmt.Sprintf("openstack/server/web-default-%d", i), Action: diff.ActionCreate, State: "failed", Error: "Quota exceeded for instances"})
		}
		return append(steps, Step{Address: "openstack/port/web-default-0", Action: diff.ActionCreate, State: "done"})
	}
	cases := map[string]*Note{
		"applied": {Commit: commit, Ref: "refs/heads/main", State: Success, Applied: true, Clusters: map[string]*Cluster{
			"demo": {State: Success, Summary: "applied in 3.7s: 1 create, 1 upload", Plan: plan, Started: at, Finished: at.Add(3700 * time.Millisecond)},
			"prod": {State: Success, Summary: "no changes"},
		}},
		"applying": {Commit: commit, Ref: "refs/heads/main", State: Pending, Applied: true, Clusters: map[string]*Cluster{
			"demo": {State: Pending, Summary: "applying: 1 create, 1 upload", Plan: plan, Started: at},
			"prod": {State: Pending, Summary: "queued"},
		}},
		"invalid-spec": {Commit: commit, Ref: "refs/heads/main", State: Failure, Applied: true, Clusters: map[string]*Cluster{
			"demo": {State: Failure, Summary: "invalid spec, nothing applied: spec.workerPools[0].count: must be <= 500"},
			"prod": {State: Success, Summary: "no changes"},
		}, Findings: []schemas.Finding{{File: "clusters/demo/cluster.yaml", Line: 18, Path: "spec.workerPools[0].count", Message: "must be <= 500", Severity: schemas.SeverityError}}},
		"unsigned": {Commit: commit, Ref: "refs/heads/main", State: Failure, Applied: true, Message: "the commit is not signed by a key of the keyring: nothing of it is applied", Clusters: map[string]*Cluster{
			"demo": {State: Failure, Summary: "the commit is not signed by a key of the keyring: nothing of it is applied"},
		}},
		"steps-failed": {Commit: commit, Ref: "refs/heads/main", State: Failure, Applied: true, Clusters: map[string]*Cluster{
			"web": {State: Failure, Summary: "5 of 6 steps failed: openstack/server/web-default-0: Quota exceeded for instances", Steps: failedSteps(5), Started: at, Finished: at.Add(2 * time.Second)},
		}},
		"cloud-error": {Commit: commit, Ref: "refs/heads/main", State: Error, Applied: true, Clusters: map[string]*Cluster{
			"demo": {State: Error, Summary: "plan: cloud sim: authenticate: connection refused"},
		}},
		"pull-request": {Commit: commit, Ref: "refs/pull/42/head", State: Success, Applied: false, Clusters: map[string]*Cluster{
			"demo": {State: Success, Summary: "plan: 1 create, 1 upload", Plan: plan},
		}},
		"drift": {Commit: commit, Ref: "refs/heads/main", State: Success, Applied: true, Clusters: map[string]*Cluster{
			"demo": {State: Success, Summary: "drift corrected in 1.2s: 1 create", Started: at, Finished: at.Add(time.Minute),
				Drift: &Cluster{State: Success, Summary: "drift corrected in 1.2s: 1 create", Started: at.Add(time.Hour), Finished: at.Add(time.Hour + 1200*time.Millisecond)}},
		}},
	}
	for name, n := range cases {
		t.Run(name, func(t *testing.T) {
			golden.File(t, filepath.Join("testdata", "text", name+".txt"), []byte(Text(n)))
		})
	}
}

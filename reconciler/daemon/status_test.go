package daemon

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"opke.dev/opke/backup"
	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
)

// TestStatusAfter: what a cluster's status becomes after each thing that
// can happen to it, from the status it had. The function is pure: the
// status it was given is unchanged, whatever it returns.
func TestStatusAfter(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)
	at := t0.Add(time.Minute)
	changes := &diff.Plan{Changes: []diff.Change{{Address: diff.ResourceAddress(diff.KindServer, "demo-default-2"), Action: diff.ActionCreate}}}
	driftPlan := &diff.Plan{Drift: []diff.Change{
		{Address: diff.ResourceAddress(diff.KindServer, "demo-default-1"), Action: diff.ActionCreate},
		{Address: diff.FileAddress("demo-default-0", "/etc/kubernetes/kubelet.env"), Action: diff.ActionUpload},
	}}
	backupOnly := &diff.Plan{Changes: []diff.Change{{Address: diff.BackupAddress("demo"), Action: diff.ActionBackup}}}
	// was is a cluster applied at c1, a drift counted, rolling out and
	// retrying a step.
	was := ClusterStatus{Name: "demo", Commit: "c1", Ref: "refs/heads/main", State: report.Success, Summary: "applied", Applied: "c1",
		Drift: 2, Updated: t0, LastResync: t0, ResyncError: "ssh: timeout", Retrying: "openstack/server/demo-default-0: 503",
		Rollout: &Rollout{Version: "v1.36.1", Done: 1, Hosts: []HostVersion{{"demo-controller-0", "v1.36.1"}, {"demo-default-0", "v1.35.4"}},
			Halted: "host/demo-default-0/health: node NotReady"}}
	versions := map[string]string{"demo-controller-0": "v1.36.1", "demo-default-0": "v1.36.1"}
	newest := &backup.Record{ID: "b2", Reason: backup.ReasonScheduled, Taken: t0, Size: 4096, Drill: &backup.DrillResult{Passed: true}}
	ledger := &ledgerFacts{versions: versions, backup: newest}
	rolledOut := &Rollout{Version: "v1.36.1", Done: 2, Hosts: []HostVersion{{"demo-controller-0", "v1.36.1"}, {"demo-default-0", "v1.36.1"}}}
	gate := func(state reconciler.StepState, err error) *reconciler.Step {
		return &reconciler.Step{State: state, Err: err, Change: diff.Change{Cluster: "demo", Address: diff.GateAddress("demo-default-0"),
			Action: diff.ActionCheck, After: diff.Attrs{"version": diff.Known("v1.36.1")}}}
	}
	with := func(s ClusterStatus, f func(*ClusterStatus)) ClusterStatus { f(&s); return s }

	for _, tc := range []struct {
		name   string
		from   ClusterStatus
		event  event
		ledger *ledgerFacts
		want   ClusterStatus
	}{
		{
			name:  "refused: the commit and why, nothing else",
			from:  was,
			event: event{kind: evRefused, at: at, commit: "c2", ref: "refs/heads/main", entry: &report.Cluster{State: report.Failure, Summary: "invalid spec"}},
			want: with(was, func(s *ClusterStatus) {
				s.Commit, s.State, s.Summary, s.Updated = "c2", report.Failure, "invalid spec", at
			}),
		},
		{
			name: "applied with changes: applied commit, drift and retrying cleared, rollout and backup from the ledger",
			from: was,
			event: event{kind: evReconciled, at: at, commit: "c2", ref: "refs/heads/main", version: "v1.36.1",
				entry: &report.Cluster{State: report.Success, Summary: "applied", Plan: changes}},
			ledger: ledger,
			want: with(was, func(s *ClusterStatus) {
				s.Commit, s.Summary, s.Updated, s.Applied, s.Drift, s.Retrying = "c2", "applied", at, "c2", 0, ""
				s.Rollout, s.LastBackup = rolledOut, &BackupStatus{ID: "b2", Reason: backup.ReasonScheduled, Taken: t0, Size: 4096, Drill: newest.Drill.String()}
			}),
		},
		{
			name: "no changes: the applied commit stays",
			from: was,
			event: event{kind: evReconciled, at: at, commit: "c2", ref: "refs/heads/main", version: "v1.36.1",
				entry: &report.Cluster{State: report.Success, Summary: "no changes", Plan: &diff.Plan{}}},
			ledger: &ledgerFacts{versions: versions},
			want: with(was, func(s *ClusterStatus) {
				s.Commit, s.Summary, s.Updated, s.Drift, s.Retrying, s.Rollout = "c2", "no changes", at, 0, "", rolledOut
			}),
		},
		{
			name: "paused with changes: not applied",
			from: was,
			event: event{kind: evReconciled, at: at, commit: "c2", ref: "refs/heads/main", paused: true,
				entry: &report.Cluster{State: report.Success, Summary: "paused: not applied", Plan: changes}},
			want: with(was, func(s *ClusterStatus) {
				s.Commit, s.Summary, s.Updated, s.Drift, s.Retrying, s.Paused = "c2", "paused: not applied", at, 0, "", true
			}),
		},
		{
			name: "applying: pending keeps retrying, drift and the steps' halt",
			from: was,
			event: event{kind: evReconciled, at: at, commit: "c2", ref: "refs/heads/main", version: "v1.36.1",
				entry: &report.Cluster{State: report.Pending, Summary: "applying", Plan: changes}},
			ledger: &ledgerFacts{versions: map[string]string{"demo-controller-0": "v1.36.1", "demo-default-0": "v1.35.4"}},
			want: with(was, func(s *ClusterStatus) {
				s.Commit, s.State, s.Summary, s.Updated = "c2", report.Pending, "applying", at
				s.Rollout = &Rollout{Version: "v1.36.1", Done: 1, Hosts: was.Rollout.Hosts, Halted: was.Rollout.Halted}
			}),
		},
		{
			name: "failed at a gate: the rollout halts there",
			from: was,
			event: event{kind: evReconciled, at: at, commit: "c2", ref: "refs/heads/main", version: "v1.36.1",
				entry: &report.Cluster{State: report.Failure, Summary: "1 of 9 steps failed", Plan: changes, Steps: []report.Step{
					{Address: "host/demo-default-0/etc/kubernetes/kubelet.env", Action: diff.ActionUpload, State: string(reconciler.StepDone)},
					{Address: "host/demo-default-0/health", Action: diff.ActionCheck, State: string(reconciler.StepFailed), Error: "kubelet inactive"},
				}}},
			ledger: &ledgerFacts{versions: versions},
			want: with(was, func(s *ClusterStatus) {
				s.Commit, s.State, s.Summary, s.Updated, s.Retrying = "c2", report.Failure, "1 of 9 steps failed", at, ""
				s.Rollout = &Rollout{Version: "v1.36.1", Done: 2, Hosts: rolledOut.Hosts, Halted: "host/demo-default-0/health: kubelet inactive"}
			}),
		},
		{
			name: "a drift check corrected drift: counted as corrected, none left, resync time set",
			from: was,
			event: event{kind: evReconciled, at: at, commit: "c1", ref: "refs/heads/main", resync: true,
				entry: &report.Cluster{State: report.Success, Summary: "drift corrected", Plan: changes,
					Drift: &report.Cluster{State: report.Success, Summary: "drift corrected", Plan: driftPlan}}},
			want: with(was, func(s *ClusterStatus) {
				s.Summary, s.Updated, s.LastResync, s.ResyncError, s.Drift, s.DriftCorrected, s.Retrying = "drift corrected", at, at, "", 0, 2, ""
			}),
		},
		{
			name: "a drift check's repair failed: the drift is left",
			from: was,
			event: event{kind: evReconciled, at: at, commit: "c1", ref: "refs/heads/main", resync: true,
				entry: &report.Cluster{State: report.Failure, Summary: "1 of 2 steps failed", Plan: changes,
					Drift: &report.Cluster{State: report.Failure, Summary: "1 of 2 steps failed", Plan: driftPlan}}},
			want: with(was, func(s *ClusterStatus) {
				s.State, s.Summary, s.Updated, s.LastResync, s.ResyncError, s.Drift, s.Retrying = report.Failure, "1 of 2 steps failed", at, at, "", 2, ""
			}),
		},
		{
			name: "a drift check's backup failed: a backup is not drift",
			from: was,
			event: event{kind: evReconciled, at: at, commit: "c1", ref: "refs/heads/main", resync: true,
				entry: &report.Cluster{State: report.Failure, Summary: "1 of 1 steps failed", Plan: changes,
					Drift: &report.Cluster{State: report.Failure, Summary: "1 of 1 steps failed", Plan: backupOnly}}},
			want: with(was, func(s *ClusterStatus) {
				s.State, s.Summary, s.Updated, s.LastResync, s.ResyncError, s.Drift, s.Retrying = report.Failure, "1 of 1 steps failed", at, at, "", 0, ""
			}),
		},
		{
			name:  "a drift check found nothing: only when it looked",
			from:  was,
			event: event{kind: evChecked, at: at},
			want:  with(was, func(s *ClusterStatus) { s.LastResync, s.ResyncError = at, "" }),
		},
		{
			name:  "a drift check could not look: why, and nothing else",
			from:  with(was, func(s *ClusterStatus) { s.ResyncError = "" }),
			event: event{kind: evChecked, at: at, checkErr: "ssh: handshake failed"},
			want:  with(was, func(s *ClusterStatus) { s.LastResync, s.ResyncError = at, "ssh: handshake failed" }),
		},
		{
			name:   "a drift check took a scheduled backup: the backup, retrying cleared",
			from:   was,
			event:  event{kind: evChecked, at: at, backup: true, version: "v1.36.1"},
			ledger: &ledgerFacts{backup: &backup.Record{ID: "b3", Reason: backup.ReasonScheduled, Taken: at, Size: 10}},
			want: with(was, func(s *ClusterStatus) {
				s.LastResync, s.ResyncError, s.Retrying = at, "", ""
				s.LastBackup = &BackupStatus{ID: "b3", Reason: backup.ReasonScheduled, Taken: at, Size: 10}
			}),
		},
		{
			name:  "a step retried: says why",
			from:  was,
			event: event{kind: evStep, at: at, step: &reconciler.Step{State: reconciler.StepRetrying, Err: errors.New("503"), Change: diff.Change{Address: diff.ResourceAddress(diff.KindServer, "demo-default-2"), Action: diff.ActionCreate}}},
			want:  with(was, func(s *ClusterStatus) { s.Retrying, s.Updated = "openstack/server/demo-default-2: 503", at }),
		},
		{
			name:  "a gate passed: the host at the version, the halt cleared",
			from:  was,
			event: event{kind: evStep, at: at, step: gate(reconciler.StepDone, nil)},
			want:  with(was, func(s *ClusterStatus) { s.Rollout = rolledOut }),
		},
		{
			name:  "a gate failed: the rollout halts there",
			from:  with(was, func(s *ClusterStatus) { s.Rollout = nil }),
			event: event{kind: evStep, at: at, step: gate(reconciler.StepFailed, errors.New("node NotReady"))},
			want: with(was, func(s *ClusterStatus) {
				s.Rollout = &Rollout{Version: "v1.36.1", Hosts: []HostVersion{{Name: "demo-default-0"}}, Halted: "host/demo-default-0/health: node NotReady"}
			}),
		},
		{
			name:  "another step ended: nothing",
			from:  was,
			event: event{kind: evStep, at: at, step: &reconciler.Step{State: reconciler.StepDone, Change: diff.Change{Address: diff.FileAddress("demo-default-0", "/etc/x"), Action: diff.ActionUpload}}},
			want:  was,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := tc.from
			if from.Rollout != nil {
				r := *from.Rollout
				r.Hosts = append([]HostVersion(nil), r.Hosts...)
				from.Rollout = &r
			}
			got := statusAfter(from, tc.event, tc.ledger)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("status (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.from, from); d != "" {
				t.Errorf("statusAfter changed the status it was given (-was +now):\n%s", d)
			}
		})
	}
}

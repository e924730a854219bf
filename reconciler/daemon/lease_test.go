package daemon_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/state"
)

// TestDaemonResumesAnApplyWhoseLeaseLapsed: the cluster's lease ends under
// the applier in the middle of a create, as it does when the store or the
// machine stalls past its TTL. The daemon, still holding the cluster,
// resumes the journal at once: the commit's note is a success that says
// the lease lapsed, every server exists once, and no plan is left open.
func TestDaemonResumesAnApplyWhoseLeaseLapsed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Hour, "")
	keys := state.KeysOf(e.store)
	cli := e.store.Client()

	// revoke ends the cluster's lease once its apply has journaled a few
	// steps: the servers' creation is under way.
	revoked := make(chan error, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			journal, err := e.store.List(ctx, keys.Journals("demo"))
			if err != nil || len(journal) < 4 { // the plan and 3 steps
				continue
			}
			locks, err := cli.Get(ctx, keys.Lock("demo")+"/", clientv3.WithPrefix())
			if err != nil || len(locks.Kvs) == 0 {
				continue
			}
			_, err = cli.Revoke(ctx, clientv3.LeaseID(locks.Kvs[0].Lease))
			revoked <- err
			return
		}
		revoked <- ctx.Err()
	}()

	created := commitSpec(t, e.work, "demo", demoSpec(2), "add demo")
	e.push(t, main)
	if err := <-revoked; err != nil {
		t.Fatalf("revoke the cluster's lease: %v", err)
	}
	n := e.waitNote(t, created, main)
	c := n.Clusters["demo"]
	if n.State != report.Success || c == nil || !strings.Contains(c.Summary, "resumed after the cluster's lease lapsed once") {
		t.Fatalf("note of the create whose lease lapsed:\n%s", noteText(n))
	}
	// The note lists each step of the plan once, done, as the journal
	// has it: not the step the lapse cut short as failed beside its
	// second run.
	var wantSteps, gotSteps []string
	for _, ch := range slices.Concat(c.Plan.Changes, c.Plan.Drift) {
		wantSteps = append(wantSteps, ch.ID+" done")
	}
	for _, st := range c.Steps {
		gotSteps = append(gotSteps, st.ID+" "+st.State)
	}
	if diff := cmp.Diff(wantSteps, gotSteps); diff != "" {
		t.Errorf("the note's steps (-want +got):\n%s", diff)
	}
	want := []string{"demo-controller-0", "demo-default-0", "demo-default-1", "demo-gateway-0"}
	if got := e.servers(t); !slices.Equal(got, want) {
		t.Errorf("servers %v, want each of %v once", got, want)
	}
	open, err := e.store.List(t.Context(), keys.OpenPlans())
	if err != nil || len(open) != 0 {
		t.Errorf("open plans after the resume: %v %v", open, err)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "the cluster's lease lapsed during the apply; resuming its journal") {
		t.Errorf("the daemon did not log the lapse")
	}
}

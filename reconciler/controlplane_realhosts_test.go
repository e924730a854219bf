//go:build realhosts

package reconciler_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"opke.dev/opke/schemas"
)

// TestControlPlaneOfThree is make e2e's second stage: a cluster of three
// controllers and a worker comes up on real machines as Kubernetes says
// (every node Ready, three etcd members, three API servers), then rolls a
// minor upgrade (v1.35.1 to v1.36.1, etcd 3.6.5 to 3.6.6) one controller
// at a time with etcd's quorum kept throughout: a writer puts a key into
// etcd every half second through all three members, and no write may
// wait longer than a leader election while a member restarts. The
// members stay the same members (none removed and added again), each at
// the new etcd version.
func TestControlPlaneOfThree(t *testing.T) {
	r, reg, _ := e2eRig(t)
	c := spec(t, "demo", "", 0)
	c.Spec.Controllers.Count = 3
	c.Spec.WorkerPools[0].Count = 1
	c.Spec.Addons = nil
	c.Spec.DeletionPolicy = schemas.DeletionDelete
	c.Spec.RegistryMirror = &schemas.RegistryMirror{Endpoint: reg.URL(), CACert: string(reg.CACert)}
	controllers := []string{"demo-controller-0", "demo-controller-1", "demo-controller-2"}
	t.Cleanup(func() {
		if t.Failed() {
			hostDiagnostics(t, r, append(controllers, "demo-default-0")...)
		}
	})
	started := time.Now()
	r.apply(t, c)
	t.Logf("three controllers and a worker applied in %s", time.Since(started).Round(time.Second))

	res := r.observed(t)
	api, base, _ := r.apiClient(t, res, "demo-controller-1")
	waitFor(t, e2eWait(), upCheck(t, api, base, "v1.35.1", append(slices.Clone(controllers), "demo-default-0"),
		map[string]int{"kube-apiserver-": 3, "kube-proxy-": 4, "kube-flannel-ds-": 4, "coredns-": 1}))
	t.Logf("the cluster came up %s after the apply began", time.Since(started).Round(time.Second))

	etcd := r.etcdClient(t, res, controllers)
	before := etcdMembers(t, etcd)
	if len(before) != 3 {
		t.Fatalf("etcd has %d members, want 3: %v", len(before), before)
	}
	for id, m := range before {
		if m.version != "3.6.5" {
			t.Errorf("etcd member %s (%x) runs %s, want 3.6.5", m.name, id, m.version)
		}
	}

	// The minor upgrade, with a writer beside it.
	w := startWriter(t, etcd)
	step := time.Now()
	c.Spec.Kubernetes.Version = "v1.36.1"
	plan, _ := r.apply(t, c)
	writes, failed, longest := w.stop()
	t.Logf("upgraded to v1.36.1 in %s (%d steps); etcd took %d writes meanwhile (%d failed), the longest wait for one %s",
		time.Since(step).Round(time.Second), len(plan.Changes), writes, failed, longest.Round(time.Millisecond))
	// A member's restart may cost a leader election (1 s by default, and
	// etcd hands leadership over before a graceful stop); quorum lost
	// while two members are down costs until one is back: tens of seconds.
	if longest > 10*time.Second {
		t.Errorf("etcd took no write for %s during the upgrade: quorum was lost", longest.Round(time.Millisecond))
	}
	if writes < 20 {
		t.Errorf("only %d writes during the upgrade: the writer did not run", writes)
	}
	if want := map[string]string{"demo-controller-0": "v1.36.1", "demo-controller-1": "v1.36.1", "demo-controller-2": "v1.36.1", "demo-default-0": "v1.36.1"}; !maps.Equal(want, r.versions(t, "demo")) {
		t.Errorf("the versions recorded as the gates passed: %v, want %v", r.versions(t, "demo"), want)
	}
	after := etcdMembers(t, etcd)
	if !slices.Equal(slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after))) {
		t.Errorf("etcd's members changed in the upgrade: %v, were %v", after, before)
	}
	for id, m := range after {
		if m.version != "3.6.6" {
			t.Errorf("etcd member %s (%x) runs %s after the upgrade, want 3.6.6", m.name, id, m.version)
		}
	}
	for _, ctl := range controllers {
		ctlAPI, ctlBase, _ := r.apiClient(t, res, ctl)
		var v struct{ GitVersion string }
		if err := getter(ctlAPI, ctlBase)("/version", &v); err != nil || v.GitVersion != "v1.36.1" {
			t.Errorf("%s's API server after the upgrade: %q %v", ctl, v.GitVersion, err)
		}
	}
	waitFor(t, 3*time.Minute, upCheck(t, api, base, "v1.36.1", append(slices.Clone(controllers), "demo-default-0"),
		map[string]int{"kube-apiserver-": 3, "kube-proxy-": 4, "kube-flannel-ds-": 4, "coredns-": 1}))

	step = time.Now()
	r.apply(t)
	if left := r.observed(t); len(left) != 0 {
		t.Errorf("%d resources left after the cluster was deleted: %v", len(left), slices.Sorted(maps.Keys(left)))
	}
	t.Logf("deleted in %s", time.Since(step).Round(time.Second))
}

type etcdMember struct{ name, version string }

// etcdMembers are the etcd cluster's members by ID, with the version each
// reports.
func etcdMembers(t *testing.T, cli *clientv3.Client) map[uint64]etcdMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]etcdMember{}
	for _, m := range list.Members {
		if len(m.ClientURLs) == 0 {
			t.Fatalf("etcd member %s (%x) has not started", m.Name, m.ID)
		}
		st, err := cli.Status(ctx, m.ClientURLs[0])
		if err != nil {
			t.Fatalf("etcd member %s: %v", m.Name, err)
		}
		out[m.ID] = etcdMember{name: m.Name, version: st.Version}
	}
	return out
}

// writer puts a key into etcd every half second until stopped, timing
// the longest wait from one write taken to the next.
type writer struct {
	cancel         context.CancelFunc
	done           chan struct{}
	mu             sync.Mutex
	writes, failed int
	longest        time.Duration
}

func startWriter(t *testing.T, cli *clientv3.Client) *writer {
	ctx, cancel := context.WithCancel(t.Context())
	w := &writer{cancel: cancel, done: make(chan struct{})}
	t.Cleanup(func() { cancel(); <-w.done })
	go func() {
		defer close(w.done)
		last := time.Now()
		for i := 0; ctx.Err() == nil; i++ {
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := cli.Put(wctx, "/opke-e2e/writer", fmt.Sprint(i))
			wcancel()
			now := time.Now()
			w.mu.Lock()
			if err == nil {
				w.writes++
				w.longest = max(w.longest, now.Sub(last))
				last = now
			} else if ctx.Err() == nil {
				w.failed++
				t.Logf("etcd write %d at %s: %v", i, now.Format(time.TimeOnly), err)
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return w
}

// stop ends the writer: the writes taken, those failed, and the longest
// wait between two taken.
func (w *writer) stop() (writes, failed int, longest time.Duration) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes, w.failed, w.longest
}

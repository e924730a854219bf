//go:build realhosts

package reconciler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/world"
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
	get := getter(api, base)
	waitFor(t, e2eWait(), upCheck(t, get, api, base, "v1.35.1", append(slices.Clone(controllers), "demo-default-0"),
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
	waitFor(t, 3*time.Minute, upCheck(t, get, api, base, "v1.36.1", append(slices.Clone(controllers), "demo-default-0"),
		map[string]int{"kube-apiserver-": 3, "kube-proxy-": 4, "kube-flannel-ds-": 4, "coredns-": 1}))

	step = time.Now()
	r.apply(t)
	if left := r.observed(t); len(left) != 0 {
		t.Errorf("%d resources left after the cluster was deleted: %v", len(left), slices.Sorted(maps.Keys(left)))
	}
	t.Logf("deleted in %s", time.Since(step).Round(time.Second))
}

// e2eRig is make e2e's start: real machines (refused otherwise), and the
// simulator's registry mirror loaded with make world's e2e set.
func e2eRig(t *testing.T) (*rig, *cloudsim.Registry, *world.Built) {
	t.Helper()
	if !realHosts {
		t.Fatal("this test runs on real machines: OPKE_TEST_HOSTS=real (make e2e)")
	}
	r := newRig(t)
	reg, built := mirrorWorld(t, r)
	return r, reg, built
}

// getter GETs a path of the API into out, failing on any status but 200.
func getter(api *http.Client, base string) func(path string, out any) error {
	return func(path string, out any) error {
		resp, err := api.Get(base + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s %.200s", path, resp.Status, b)
		}
		return json.Unmarshal(b, out)
	}
}

// upCheck says what keeps a cluster from being up, as Kubernetes says it:
// the nodes Ready at version, and at least want[prefix] pods whose name
// begins with prefix running with every container ready. It logs a
// crashing container's last words once.
func upCheck(t *testing.T, get func(string, any) error, api *http.Client, base, version string, nodeNames []string, want map[string]int) func() string {
	logged := map[string]bool{}
	return func() string {
		// Fresh each time: json.Unmarshal into a used value keeps the
		// map keys of the last answer (a container's old state).
		type condition struct{ Type, Status, Reason, Message string }
		var nodes struct {
			Items []struct {
				Metadata struct{ Name string }
				Status   struct {
					Conditions []condition
					NodeInfo   struct{ KubeletVersion string }
				}
			}
		}
		var pods struct {
			Items []struct {
				Metadata struct{ Namespace, Name string }
				Spec     struct{ NodeName string }
				Status   struct {
					Phase             string
					ContainerStatuses []struct {
						Name  string
						Ready bool
						State map[string]struct{ Reason, Message string }
					}
				}
			}
		}
		if err := get("/api/v1/nodes", &nodes); err != nil {
			return err.Error()
		}
		if err := get("/api/v1/pods", &pods); err != nil {
			return err.Error()
		}
		var why []string
		ready := map[string]bool{}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" && n.Status.NodeInfo.KubeletVersion == version {
					ready[n.Metadata.Name] = true
				} else if c.Type == "Ready" {
					why = append(why, fmt.Sprintf("node %s: Ready=%s %s %s (kubelet %s)", n.Metadata.Name, c.Status, c.Reason, c.Message, n.Status.NodeInfo.KubeletVersion))
				}
			}
		}
		for _, n := range nodeNames {
			if !ready[n] && !slices.ContainsFunc(why, func(s string) bool { return strings.HasPrefix(s, "node "+n+":") }) {
				why = append(why, "node "+n+": not registered")
			}
		}
		running := map[string]int{}
		for _, p := range pods.Items {
			allReady := len(p.Status.ContainerStatuses) > 0
			for _, cs := range p.Status.ContainerStatuses {
				allReady = allReady && cs.Ready
				for state, d := range cs.State {
					if state != "running" {
						why = append(why, fmt.Sprintf("pod %s/%s on %s: %s %s %s %.160s", p.Metadata.Namespace, p.Metadata.Name, p.Spec.NodeName, cs.Name, state, d.Reason, d.Message))
					}
					// A crashing container's last words, once.
					key := p.Metadata.Namespace + "/" + p.Metadata.Name + "/" + cs.Name
					if d.Reason == "CrashLoopBackOff" && !logged[key] {
						logged[key] = true
						resp, err := api.Get(base + "/api/v1/namespaces/" + p.Metadata.Namespace + "/pods/" + p.Metadata.Name + "/log?previous=true&tailLines=30&container=" + cs.Name)
						if err == nil {
							b, _ := io.ReadAll(resp.Body)
							resp.Body.Close()
							t.Logf("%s crashed:\n%s", key, b)
						}
					}
				}
			}
			if p.Status.Phase == "Running" && allReady {
				for prefix := range want {
					if strings.HasPrefix(p.Metadata.Name, prefix) {
						running[prefix]++
					}
				}
			} else if len(p.Status.ContainerStatuses) == 0 {
				why = append(why, fmt.Sprintf("pod %s/%s on %q: %s", p.Metadata.Namespace, p.Metadata.Name, p.Spec.NodeName, p.Status.Phase))
			}
		}
		for _, prefix := range slices.Sorted(maps.Keys(want)) {
			if running[prefix] < want[prefix] {
				why = append(why, fmt.Sprintf("%d %s* pods running and ready, want %d", running[prefix], prefix, want[prefix]))
			}
		}
		return strings.Join(why, "\n")
	}
}

// e2eWait bounds the wait for a cluster to come up: 10 minutes, or
// OPKE_E2E_WAIT for a quicker look while debugging.
func e2eWait() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("OPKE_E2E_WAIT")); err == nil {
		return d
	}
	return 10 * time.Minute
}

// etcdClient is a client of the cluster's etcd members through the
// gateway, as OPKE's health gates reach them.
func (r *rig) etcdClient(t *testing.T, res map[string]diff.Resource, controllers []string) *clientv3.Client {
	t.Helper()
	gw := dialHost(t, r, res, "demo-gateway-0", nil)
	b, err := pki.Load(t.Context(), r.store, "demo", pki.EtcdCA, pki.EtcdOPKEClient)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := b.TLS(pki.EtcdCA, pki.EtcdOPKEClient)
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, ctl := range controllers {
		endpoints = append(endpoints, "https://"+net.JoinHostPort(res["openstack/port/"+ctl].Attrs["fixed_ip"].Value, "2379"))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: cfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return gw.DialContext(ctx, "tcp", addr)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
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

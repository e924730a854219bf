//go:build realhosts

package reconciler_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"

	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
)

// TestClusterFromGit is make e2e driven as a user drives OPKE: the opke
// binary serving a fleet repository on the simulator's real machines,
// and nothing but git commits, the daemon's API, opke kubeconfig and
// kubectl. A commit adds a cluster (a controller, a worker, the
// simulator's mirror): the daemon applies it and kubectl sees both nodes
// Ready; a commit upgrades it to the patch release: kubectl sees every
// kubelet and the API server at it; commits take its controllers from
// one to three and back; a commit removes its file (its last spec said
// deletionPolicy Delete): its servers and network are gone.
func TestClusterFromGit(t *testing.T) {
	r, reg, built := e2eRig(t)
	kubectlBin, ok := built.Binary("kubernetes-"+e2eFirst, "kubectl")
	if !ok {
		t.Fatal("make world built no kubectl")
	}
	opke := proctest.Opke(t)
	work := t.TempDir()
	fleet, data := filepath.Join(work, "fleet"), filepath.Join(work, "data")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", fleet, "-c", "user.name=operator", "-c", "user.email=op@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	base, err := os.ReadFile(filepath.Join("..", "clusters", "demo", "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ca := "      " + strings.ReplaceAll(strings.TrimSpace(string(reg.CACert)), "\n", "\n      ")
	controllers, pkiSpec := 1, ""
	specAt := func(version string) string {
		return strings.NewReplacer("count: 2", "count: 1", "    - name: metrics-server\n", "    - name: openstack-cloud-controller-manager\n",
			"version: "+e2eFirst, "version: "+version, "  controllers:\n    count: 1\n", fmt.Sprintf("  controllers:\n    count: %d\n", controllers)).Replace(string(base)) +
			"  deletionPolicy: Delete\n  registryMirror:\n    endpoint: " + reg.URL() + "\n    caCert: |\n" + ca + "\n" +
			"  downloadMirror:\n    endpoint: " + reg.FilesURL() + "\n    caCert: |\n" + ca + "\n" + pkiSpec
	}
	if err := os.MkdirAll(filepath.Join(fleet, "clusters", "demo"), 0o755); err != nil {
		t.Fatal(err)
	}
	commit := func(version, msg string) string {
		t.Helper()
		if version == "" {
			// The last cluster: clusters/ kept (git keeps no empty folder).
			if err := os.WriteFile(filepath.Join(fleet, "clusters", ".gitkeep"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			git("rm", "-q", "clusters/demo/cluster.yaml")
			git("add", ".")
		} else {
			if err := os.WriteFile(filepath.Join(fleet, "clusters", "demo", "cluster.yaml"), []byte(specAt(version)), 0o644); err != nil {
				t.Fatal(err)
			}
			git("add", ".")
		}
		git("commit", "-q", "-m", msg)
		return git("rev-parse", "HEAD")
	}
	git("init", "-q", "-b", "main")
	first := commit(e2eFirst, "demo: a controller and a worker")

	listen := proctest.FreeAddr(t)
	serve := proctest.Start(t, work, "serve", exec.Command(opke, "serve", "--sim-state", r.dir, "--repo", fleet,
		"--data-dir", data, "--listen", listen, "--interval", "5s", "--log-level", "info"))
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(serve.Log)
			t.Logf("opke serve's log (last 4 KiB):\n%s", out[max(0, len(out)-4096):])
		}
	})
	// applied waits until the daemon's API says commit is applied to demo.
	applied := func(commit string, d time.Duration) {
		t.Helper()
		waitFor(t, d, func() string {
			serve.Alive(t)
			resp, err := http.Get("http://" + listen + "/api/v1/clusters")
			if err != nil {
				return err.Error()
			}
			defer resp.Body.Close()
			var st struct{ Clusters []daemon.ClusterStatus }
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
				return err.Error()
			}
			for _, c := range st.Clusters {
				if c.Name != "demo" {
					continue
				}
				if c.Commit == commit && c.State == report.Failure {
					t.Fatalf("demo at %.12s: %s", commit, c.Summary)
				}
				if c.Commit == commit && c.State == report.Success {
					return ""
				}
				return fmt.Sprintf("demo at %.12s: %s %s %s", c.Commit, c.State, c.Summary, c.Retrying)
			}
			return "no status of demo yet"
		})
	}
	step := time.Now()
	applied(first, 10*time.Minute)
	t.Logf("the daemon applied the first commit in %s", time.Since(step).Round(time.Second))

	// kc is the kubeconfig opke kubeconfig gives now (fetched again after
	// each phase of the CA rotation).
	kc := filepath.Join(work, "demo.kubeconfig")
	fetchKubeconfig := func() {
		t.Helper()
		if out, err := exec.Command(opke, "kubeconfig", "--cluster", "demo", "--data-dir", data, "--out", kc).CombinedOutput(); err != nil {
			t.Fatalf("opke kubeconfig: %v\n%s", err, out)
		}
	}
	fetchKubeconfig()
	kubectlWith := func(config string, args ...string) (string, error) {
		out, err := exec.CommandContext(t.Context(), kubectlBin, append([]string{"--kubeconfig", config, "--request-timeout", "10s"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	kubectl := func(args ...string) (string, error) { return kubectlWith(kc, args...) }
	nodesAt := func(version string, controllers ...string) func() string {
		return func() string {
			out, err := kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.nodeInfo.kubeletVersion} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
			if err != nil {
				return fmt.Sprintf("kubectl get nodes: %v: %s", err, out)
			}
			if len(controllers) == 0 {
				controllers = []string{"demo-controller-0"}
			}
			var want []string
			for _, n := range append(slices.Clone(controllers), "demo-default-0") {
				want = append(want, n+" "+version+" True")
			}
			if out != strings.Join(want, "\n") {
				return fmt.Sprintf("nodes (name, kubelet, Ready): %q, want %q", out, strings.Join(want, "\n"))
			}
			return ""
		}
	}
	waitFor(t, e2eWait(), nodesAt(e2eFirst))
	out, _ := kubectl("get", "nodes", "-o", "wide")
	t.Logf("kubectl get nodes -o wide, %s after the first commit:\n%s", time.Since(step).Round(time.Second), out)

	step = time.Now()
	applied(commit(e2ePatch, "demo: patch upgrade"), 10*time.Minute)
	waitFor(t, 3*time.Minute, nodesAt(e2ePatch))
	if out, err := kubectl("version", "-o", "json"); err != nil || !strings.Contains(out, `"gitVersion": "`+e2ePatch+`"`) {
		t.Errorf("kubectl version after the upgrade: %v\n%s", err, out)
	}
	t.Logf("the patch upgrade, committed, ran in %s", time.Since(step).Round(time.Second))

	// controllers.count 1 -> 3 -> 1, committed: the new members join one
	// at a time, each a learner first, gated; then they leave highest
	// index first. The API servers each serve, with one etcd server per
	// member in their flags.
	apiServers := func(n int) func() string {
		return func() string {
			out, err := kubectl("get", "pods", "-n", "kube-system", "-l", "component=kube-apiserver", "-o",
				`jsonpath={range .items[*]}{.spec.nodeName} {.status.phase} {.spec.containers[0].command}{"\n"}{end}`)
			if err != nil {
				return fmt.Sprintf("kubectl get pods: %v: %s", err, out)
			}
			lines := strings.Split(out, "\n")
			if len(lines) != n {
				return fmt.Sprintf("%d API servers, want %d: %s", len(lines), n, out)
			}
			for _, l := range lines {
				if !strings.Contains(l, " Running ") || strings.Count(l, ":2379") != n {
					return fmt.Sprintf("an API server is not running with %d etcd servers: %.300s", n, l)
				}
			}
			return ""
		}
	}
	// The CAs rotated in three commits, at three controllers. After each
	// phase, a kubeconfig from opke kubeconfig works with kubectl, every
	// node is Ready and every pod of the cluster runs and is ready (the
	// workloads restarted on the new bundles, talking to the API); at the
	// end the kubeconfig from before the rotation is refused (the API
	// servers neither serve with nor trust generation 1) and the bundle
	// published to the pods holds one CA.
	rotateCAs := func(controllers []string) {
		t.Helper()
		before := filepath.Join(work, "generation-1.kubeconfig")
		if err := os.Rename(kc, before); err != nil {
			t.Fatal(err)
		}
		podsUp := func() string {
			out, err := kubectl("get", "pods", "-A", "-o",
				`jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.status.phase} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
			if err != nil {
				return fmt.Sprintf("kubectl get pods: %v: %s", err, out)
			}
			for _, l := range strings.Split(out, "\n") {
				if !strings.HasSuffix(l, " Running True") {
					return "a pod is not up: " + l
				}
			}
			return ""
		}
		for _, phase := range []string{"trust", "reissue", "complete"} {
			began := time.Now()
			pkiSpec = "  pki:\n    generation: 2\n    phase: " + phase + "\n"
			applied(commit(e2ePatch, "demo: CA rotation, "+phase), 15*time.Minute)
			fetchKubeconfig()
			waitFor(t, 3*time.Minute, nodesAt(e2ePatch, controllers...))
			waitFor(t, 5*time.Minute, podsUp)
			out, _ := kubectl("get", "pods", "-A", "-o", "wide")
			t.Logf("CA rotation, phase %s, committed, ran in %s; kubectl get pods -A:\n%s", phase, time.Since(began).Round(time.Second), out)
		}
		if out, err := kubectlWith(before, "get", "nodes"); err == nil || !strings.Contains(out, "certificate") {
			t.Errorf("the kubeconfig of generation 1 still works after the rotation: %v\n%s", err, out)
		}
		out, err := kubectl("get", "--raw", "/api/v1/namespaces/kube-system/configmaps/kube-root-ca.crt")
		if err != nil || strings.Count(out, "BEGIN CERTIFICATE") != 1 {
			t.Errorf("kube-root-ca.crt after the rotation (one CA): %v\n%.400s", err, out)
		}
	}
	for _, n := range []int{3, 1} {
		step = time.Now()
		controllers = n
		applied(commit(e2ePatch, fmt.Sprintf("demo: %d controllers", n)), 15*time.Minute)
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("demo-controller-%d", i))
		}
		waitFor(t, 5*time.Minute, nodesAt(e2ePatch, names...))
		waitFor(t, 3*time.Minute, apiServers(n))
		t.Logf("controllers.count %d, committed, ran in %s", n, time.Since(step).Round(time.Second))
		if n == 3 {
			rotateCAs(names)
		}
	}

	step = time.Now()
	commit("", "demo: delete")
	waitFor(t, 5*time.Minute, func() string {
		serve.Alive(t)
		pages, err := servers.List(r.clients.Compute, servers.ListOpts{}).AllPages(t.Context())
		if err != nil {
			return err.Error()
		}
		list, _ := servers.ExtractServers(pages)
		netPages, err := networks.List(r.clients.Network, networks.ListOpts{Name: "demo"}).AllPages(t.Context())
		if err != nil {
			return err.Error()
		}
		nets, _ := networks.ExtractNetworks(netPages)
		if len(list) != 0 || len(nets) != 0 {
			return fmt.Sprintf("%d servers and %d networks named demo left", len(list), len(nets))
		}
		return ""
	})
	t.Logf("the cluster's deletion, committed, ran in %s", time.Since(step).Round(time.Second))
	// The audit trail: each commit's note, pushed to the fleet repository.
	if note := git("notes", "--ref=opke", "show", first); !strings.Contains(note, " of main applied; 1 cluster: 1 success") {
		t.Errorf("the first commit's note: %.300s", note)
	}
	if record := git("notes", "--ref=opke-record", "show", first); !strings.Contains(record, `"success"`) {
		t.Errorf("the first commit's record: %.300s", record)
	}
}

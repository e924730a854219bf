//go:build realhosts

package reconciler_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/cloudsim"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/world"
	"opke.dev/opke/world/worldtest"
)

// TestControllerFromTheMirror: on real machines (make realhosts), a
// cluster of one controller whose spec names the simulator's registry as
// its mirror comes up from images pulled through that mirror only: the
// machines reach no other registry. The registry holds what make world
// built from upstream source; the controller's health gate is OPKE's own:
// etcd answers its member list over TLS, the kube-apiserver static pod's
// /readyz is ok with the rendered certificates, its /version is the
// spec's.
func TestControllerFromTheMirror(t *testing.T) {
	if !realHosts {
		t.Fatal("this test runs on real machines: OPKE_TEST_HOSTS=real (make realhosts)")
	}
	ctx := t.Context()
	r := newRig(t)
	reg, _ := mirrorWorld(t, r)

	c := spec(t, "demo", "", 0)
	c.Spec.WorkerPools, c.Spec.Addons = nil, nil
	useMirror(c, reg)
	t.Cleanup(func() {
		if t.Failed() {
			hostDiagnostics(t, r, "demo-controller-0")
		}
	})
	r.apply(t, c)

	// The controller comes up: what OPKE's health gate asks of it.
	res := r.observed(t)
	api, base, _ := r.apiClient(t, res, "demo-controller-0")
	deadline := time.Now().Add(8 * time.Minute)
	var last string
	for {
		resp, err := api.Get(base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "ok" {
				break
			}
			last = fmt.Sprintf("%s: %s", resp.Status, b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			gw := dialHost(t, r, res, "demo-gateway-0", nil)
			host := dialHost(t, r, res, "demo-controller-0", gw)
			for _, cmd := range []string{
				"sudo -n systemctl --no-pager status containerd etcd-member kubelet",
				"sudo -n journalctl --no-pager -n 60 -u etcd-member -u kubelet",
				"sudo -n ctr --namespace k8s.io containers list",
			} {
				out, err := sshx.Run(ctx, host, cmd)
				t.Logf("%s (%v):\n%s", cmd, err, out)
			}
			t.Fatalf("the API server's /readyz did not answer ok within 8m: %s", last)
		}
		time.Sleep(2 * time.Second)
	}
	if v := r.apiVersion(t, res, "demo-controller-0"); v != c.Spec.Kubernetes.Version {
		t.Errorf("/version says %q, want %s", v, c.Spec.Kubernetes.Version)
	}
	// The apply sent the cluster's manifests to the real API server by
	// server-side apply (the apply fails the test on a refused object):
	// the stub's discovery and apply answers are held to the real ones.
	for _, path := range []string{
		"/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
		"/apis/apps/v1/namespaces/kube-system/deployments/coredns",
		"/api/v1/namespaces/kube-flannel",
		"/apis/apps/v1/namespaces/kube-flannel/daemonsets/kube-flannel-ds",
	} {
		resp, err := api.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"manager":"opke"`) {
			t.Errorf("GET %s: %s, want the object, applied by opke: %.300s", path, resp.Status, b)
		}
	}
	// Every image came through the mirror: the registry served them.
	for _, ref := range []string{"registry.k8s.io/etcd", "registry.k8s.io/kube-apiserver", "registry.k8s.io/pause"} {
		if !slices.Contains(pulled(t, reg.Log(), reg.Addr.Addr().String()), ref) {
			t.Errorf("the mirror served no manifest of %s", ref)
		}
	}
	// And the kubelet and the CNI plugins came as upstream releases them,
	// each with its sha256, from the file mirror.
	fetched := reg.Fetched()
	for _, d := range []assets.Download{assets.KubeletDownload(c.Spec.Kubernetes.Version), assets.CNIPluginsDownload(assets.CNIPluginsVersion)} {
		for _, p := range []string{d.Path, d.Path + ".sha256"} {
			if !slices.Contains(fetched, p) {
				t.Errorf("the file mirror did not serve %s (it served %q)", p, fetched)
			}
		}
	}
}

// useMirror makes c pull every image from the simulator's registry mirror
// and download the kubelet and the CNI plugins from its file mirror, as a
// cluster in a cloud without internet does.
func useMirror(c *schemas.Cluster, reg *cloudsim.Registry) {
	c.Spec.RegistryMirror = &schemas.RegistryMirror{Endpoint: reg.URL(), CACert: string(reg.CACert)}
	c.Spec.DownloadMirror = &schemas.DownloadMirror{Endpoint: reg.FilesURL(), CACert: string(reg.CACert)}
}

// mirrorWorld starts a registry on the simulator's external network
// loaded with make world's e2e set (built or taken from its cache), and
// returns it with the set.
func mirrorWorld(t *testing.T, r *rig) (*cloudsim.Registry, *world.Built) {
	t.Helper()
	built := worldtest.E2E(t, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	return mirrorOf(t, r, built), built
}

// mirrorOf starts the simulator's mirror loaded with what built holds.
func mirrorOf(t *testing.T, r *rig, built *world.Built) *cloudsim.Registry {
	t.Helper()
	ctx := t.Context()
	bin, _ := built.Binary("distribution-"+world.DistributionVersion, "registry")
	reg, err := r.sim.StartRegistry(ctx, "public", bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := built.PushAll(ctx, reg.Client, reg.URL(), "", nil); err != nil {
		t.Fatal(err)
	}
	reg.ServeFiles(built.Files())
	return reg
}

// pulled lists the repositories whose manifests a registry's access log
// shows fetched by a host (not by the edge that loaded it).
func pulled(t *testing.T, log []byte, edge string) []string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(\S+) .*"GET /v2/(\S+)/manifests/\S+ HTTP/[0-9.]+" 200`)
	var out []string
	for _, m := range re.FindAllSubmatch(log, -1) {
		if string(m[1]) != edge {
			out = append(out, string(m[2]))
		}
	}
	if len(out) == 0 {
		t.Logf("registry log:\n%s", log)
	}
	return out
}

//go:build realhosts

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"sigs.k8s.io/yaml"

	"opke.dev/opke/cloudsim"
	"opke.dev/opke/cloudsim/machine"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	worldbuild "opke.dev/opke/world"
)

// TestSimCommandRealHosts: `opke sim --hosts real --mirror` boots a
// server as a machine (its console is what the machine printed), serves
// make world's e2e set from its registry mirror on the public network
// (reached here through the edge, with the CA mirror.yaml names) and,
// stopped, leaves no container and no namespace behind; started again, its
// mirror keeps its CA, so the specs that name it keep working.
func TestSimCommandRealHosts(t *testing.T) {
	state := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--hosts", "real", "--mirror", "--listen", "127.0.0.1:0", "--edge-listen", "127.0.0.1:0", "--state", state,
			"--boot-delay", "0s", "--log-level", "warn"}, strings.NewReader(""), &out, &errOut)
	}()
	deadline := time.Now().Add(5 * time.Minute) // the image may be built first
	for {
		if _, err := os.Stat(filepath.Join(state, MirrorFile)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s; stderr: %s", MirrorFile, errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	mirrorYAML, _ := os.ReadFile(filepath.Join(state, MirrorFile))
	var m struct {
		RegistryMirror schemas.RegistryMirror `yaml:"registryMirror"`
		DownloadMirror schemas.DownloadMirror `yaml:"downloadMirror"`
	}
	if err := yaml.Unmarshal(mirrorYAML, &m); err != nil || m.RegistryMirror.Endpoint != "https://203.0.113.254:5000" || m.RegistryMirror.CACert == "" ||
		m.DownloadMirror.Endpoint != "https://203.0.113.254:5443" || m.DownloadMirror.CACert != m.RegistryMirror.CACert {
		t.Fatalf("%s: %v\n%s", MirrorFile, err, mirrorYAML)
	}
	var info struct{ Edge string }
	if b, err := os.ReadFile(filepath.Join(state, "sim.json")); err != nil || json.Unmarshal(b, &info) != nil {
		t.Fatalf("sim.json: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(m.RegistryMirror.CACert))
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialContext: sshx.Dialer{Proxy: info.Edge}.DialContext}}
	resp, err := hc.Get(m.RegistryMirror.Endpoint + "/v2/_catalog")
	if err != nil {
		t.Fatal(err)
	}
	catalog, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, repo := range []string{"pause", "kube-apiserver", "etcd", "openstack-cloud-controller-manager"} {
		if !strings.Contains(string(catalog), repo) {
			t.Errorf("the mirror's catalog lacks %s: %s", repo, catalog)
		}
	}
	// The file mirror serves the kubelet and its sha256 as dl.k8s.io lays
	// them out, and refuses what it does not have.
	kubelet := assets.KubeletDownload(worldbuild.KubernetesVersions()[0]).URL(m.DownloadMirror.Endpoint)
	for _, tc := range []struct {
		url  string
		code int
	}{{kubelet, http.StatusOK}, {kubelet + ".sha256", http.StatusOK}, {m.DownloadMirror.Endpoint + "/dl.k8s.io/release/v0.0.0/bin/linux/amd64/kubelet", http.StatusNotFound}} {
		resp, err := hc.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || (tc.code == http.StatusOK && len(body) == 0) {
			t.Errorf("GET %s: %s (%d bytes), want %d", tc.url, resp.Status, len(body), tc.code)
		}
	}
	ao, eo, _, err := clouds.Parse(clouds.WithCloudName("sim"), clouds.WithLocations(filepath.Join(state, "clouds.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := config.NewProviderClient(ctx, ao)
	if err != nil {
		t.Fatal(err)
	}
	must := func(c *gophercloud.ServiceClient, err error) *gophercloud.ServiceClient {
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	compute, network, image := must(openstack.NewComputeV2(pc, eo)), must(openstack.NewNetworkV2(pc, eo)), must(openstack.NewImageV2(pc, eo))
	n, err := networks.Create(ctx, network, networks.CreateOpts{Name: "cli"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	sn, err := subnets.Create(ctx, network, subnets.CreateOpts{NetworkID: n.ID, CIDR: "10.40.0.0/24", IPVersion: gophercloud.IPv4}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	// A router to the public network, through which the machine's
	// Ignition reaches the metadata service for its user_data, as a
	// Flatcar VM's does (without one it waits in its initramfs).
	pubPages, err := networks.List(network, networks.ListOpts{Name: cloudsim.PublicNetwork}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := networks.ExtractNetworks(pubPages)
	if err != nil || len(pubs) != 1 {
		t.Fatalf("the public network: %v %v", pubs, err)
	}
	rt, err := routers.Create(ctx, network, routers.CreateOpts{Name: "cli", GatewayInfo: &routers.GatewayInfo{NetworkID: pubs[0].ID}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := routers.AddInterface(ctx, network, rt.ID, routers.AddInterfaceOpts{SubnetID: sn.ID}).Extract(); err != nil {
		t.Fatal(err)
	}
	pages, err := images.List(image, images.ListOpts{Name: "flatcar"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	imgs, _ := images.ExtractImages(pages)
	sv, err := servers.Create(ctx, compute, servers.CreateOpts{Name: "cli-0", FlavorRef: "2", ImageRef: imgs[0].ID,
		Networks: []servers.Network{{UUID: n.ID}}}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	for {
		got, err := servers.Get(ctx, compute, sv.ID).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == "ACTIVE" {
			break
		}
		if got.Status == "ERROR" || time.Now().After(deadline) {
			t.Fatalf("server %s: %v", got.Status, got.Fault)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		console, err := servers.ShowConsoleOutput(ctx, compute, sv.ID, servers.ShowConsoleOutputOpts{}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		// The serial port's log, as Nova's: the machine's power-on (a
		// server with no user_data prints nothing more there).
		if strings.Contains(console, "[  power] on") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console shows no power-on:\n%s", console)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sum := sha256.Sum256([]byte(filepath.Join(state, "hosts")))
	prefix := "opke-" + hex.EncodeToString(sum[:])[:8]
	if ns := withPrefix(t, prefix); len(ns) < 2 {
		t.Errorf("the simulator's namespaces while it runs: %v (want its fabric's, the machine's, the edge's)", ns)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("opke sim exited %d; stderr: %s", code, errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("opke sim did not stop")
	}
	if list, _ := exec.Command("runc", "--root", machine.RuncRoot, "list", "-q").Output(); strings.Contains(string(list), sv.ID) {
		t.Errorf("the machine of %s still runs after opke sim stopped", sv.ID)
	}
	if left := withPrefix(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left after opke sim stopped: %v", left)
	}

	// Started again: the same mirror, the same CA.
	if err := os.Remove(filepath.Join(state, MirrorFile)); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		done <- run(ctx2, []string{"sim", "--hosts", "real", "--mirror", "--listen", "127.0.0.1:0", "--edge-listen", "127.0.0.1:0", "--state", state,
			"--boot-delay", "0s", "--log-level", "warn"}, strings.NewReader(""), &out, &errOut)
	}()
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		again, err := os.ReadFile(filepath.Join(state, MirrorFile))
		if err == nil {
			if !bytes.Equal(again, mirrorYAML) {
				t.Errorf("the mirror started again names another CA:\n%s\nwas\n%s", again, mirrorYAML)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after a restart; stderr: %s", MirrorFile, errOut.String())
		}
	}
	cancel2()
	if code := <-done; code != exitOK {
		t.Fatalf("opke sim exited %d; stderr: %s", code, errOut.String())
	}
}

// withPrefix lists the network namespaces whose names start with prefix
// (a simulator's are named after its hosts folder).
func withPrefix(t *testing.T, prefix string) []string {
	t.Helper()
	entries, err := os.ReadDir(machine.NetNSDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

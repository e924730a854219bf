package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/internal/statetest"
)

// readTree returns every file under dir with its mode.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = info.Mode().Perm().String() + " " + string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRender renders the example demo cluster twice into the same folder
// with the same data dir: the second render replaces the first with the
// same bytes, secrets are 0600 and nothing secret reaches the output.
func TestRender(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	dataDir, out := filepath.Join(work, "state"), filepath.Join(work, "out")
	args := []string{"render", "--repo", "../..", "--cluster", "demo", "--out", out, "--data-dir", dataDir}
	code, stdout, stderr := opke(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "rendered demo (Kubernetes v1.36.1)") || !strings.Contains(stdout, "new TLS items issued") {
		t.Errorf("stdout %q", stdout)
	}
	first := readTree(t, out)
	code, stdout2, stderr := opke(t, args...)
	if code != exitOK {
		t.Fatalf("second render: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout2, "; 0 new TLS items issued") {
		t.Errorf("second render issued material: %q", stdout2)
	}
	if diff := cmp.Diff(first, readTree(t, out)); diff != "" {
		t.Errorf("second render differs (-first +second):\n%s", diff)
	}
	for _, want := range []string{"userdata/controller.ign", "userdata/worker.ign", "userdata/gateway.ign", "manifest.json",
		"hosts/demo-controller-0/etc/kubernetes/kubelet.env", "hosts/demo-default-1/etc/kubernetes/kubelet.env",
		"hosts/demo-controller-0/etc/kubernetes/manifests/kube-apiserver.yaml"} {
		if _, ok := first[want]; !ok {
			t.Errorf("no %s", want)
		}
	}
	var m renderManifest
	if err := json.Unmarshal([]byte(strings.SplitN(first["manifest.json"], " ", 2)[1]), &m); err != nil {
		t.Fatal(err)
	}
	secrets, files := 0, 0
	for _, h := range m.Hosts {
		for _, f := range h.Files {
			files++
			got := first[filepath.Join("hosts", h.Name, f.Path)]
			if got == "" {
				t.Errorf("%s:%s listed but not written", h.Name, f.Path)
				continue
			}
			if want := f.Mode.String() + " "; !strings.HasPrefix(got, want) {
				t.Errorf("%s:%s written %s, the manifest says %s", h.Name, f.Path, got[:10], want)
			}
			if f.Secret {
				secrets++
				if !strings.HasPrefix(got, "-rw------- ") {
					t.Errorf("%s:%s is secret but written %s", h.Name, f.Path, got[:10])
				}
			}
		}
	}
	if secrets == 0 || files < 30 || len(m.Hosts) != 4 {
		t.Errorf("manifest: %d files, %d secret, %d hosts", files, secrets, len(m.Hosts))
	}
	manifest := first["manifest.json"]
	for _, s := range []string{"PRIVATE KEY", "client-key-data"} {
		if strings.Contains(manifest, s) || strings.Contains(stdout, s) {
			t.Errorf("%q in the manifest or stdout", s)
		}
	}
}

// TestRenderRefusals: bad input fails with a clear message and loses nothing.
func TestRenderRefusals(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	foreign := filepath.Join(work, "foreign")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A folder with a manifest.json of its own, or an earlier render with
	// a file added: neither is replaced.
	withManifest := filepath.Join(work, "with-manifest")
	if err := os.MkdirAll(withManifest, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"manifest.json": `{"name":"an app"}`, "main.go": "package main"} {
		if err := os.WriteFile(filepath.Join(withManifest, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	added := filepath.Join(work, "render-and-more")
	if code, _, stderr := opke(t, "render", "--repo", "../..", "--cluster", "demo", "--out", added, "--data-dir", filepath.Join(work, "state-added")); code != exitOK {
		t.Fatalf("render: %d %s", code, stderr)
	}
	if err := os.WriteFile(filepath.Join(added, "hosts", "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	badCred := filepath.Join(work, "cred.yaml")
	if err := os.WriteFile(badCred, []byte("auth_url: http://127.0.0.1:5000/v3\napplication_credential_secret: hunter2-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	invalid := writeFleet(t, map[string]string{"demo": strings.Replace(exampleSpec(t, "demo"), "count: 1", "count: 2", 1)})
	state := filepath.Join(work, "state")
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stderr   string
		notInErr string
	}{
		{name: "missing flags", args: []string{"render", "--cluster", "demo"}, code: exitUsage, stderr: "--cluster and --out are required"},
		{name: "unknown cluster", args: []string{"render", "--repo", "../..", "--cluster", "nope", "--out", filepath.Join(work, "o1")}, code: exitUsage, stderr: `cluster "nope" is not in ../.. (clusters: demo, prod)`},
		{name: "folder that is not a render", args: []string{"render", "--repo", "../..", "--cluster", "demo", "--out", foreign}, code: exitUsage, stderr: "not empty and not an earlier render"},
		{name: "folder with a manifest.json of its own", args: []string{"render", "--repo", "../..", "--cluster", "demo", "--out", withManifest},
			code: exitUsage, stderr: "its manifest.json is not a render's"},
		{name: "a render with a file added", args: []string{"render", "--repo", "../..", "--cluster", "demo", "--out", added, "--data-dir", filepath.Join(work, "state-added")},
			code: exitUsage, stderr: "it holds hosts/notes.txt, which the render did not write"},
		{name: "invalid spec", args: []string{"render", "--repo", invalid, "--cluster", "demo", "--out", filepath.Join(work, "o2")}, code: exitFindings, stderr: "spec.controllers.count: must be one of 1, 3, 5; got 2"},
		{name: "incomplete credential", args: []string{"render", "--repo", "../..", "--cluster", "demo", "--out", filepath.Join(work, "o3"), "--data-dir", state, "--app-credential", badCred},
			code: exitUsage, stderr: "application_credential_id and application_credential_secret are required", notInErr: "hunter2"},
		{name: "bad floating IP", args: []string{"render", "--repo", "../..", "--cluster", "demo", "--out", filepath.Join(work, "o4"), "--api-floating-ip", "nope"}, code: exitUsage, stderr: "--api-floating-ip"},
		{name: "etcd cert without its key", args: []string{"render", "--repo", "../..", "--cluster", "demo", "--out", filepath.Join(work, "o6"), "--data-dir", filepath.Join(work, "o7"),
			"--etcd", "http://127.0.0.1:1", "--etcd-cert", badCred},
			code: exitUsage, stderr: "--etcd-cert and --etcd-key go together"},
		{name: "unknown revision", args: []string{"render", "--repo", "../..", "--rev", "no-such-rev", "--cluster", "demo", "--out", filepath.Join(work, "o5")}, code: exitUsage, stderr: "--rev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := opke(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
			if tc.notInErr != "" && strings.Contains(stderr, tc.notInErr) {
				t.Errorf("stderr shows %q", tc.notInErr)
			}
		})
	}
	for _, f := range []string{filepath.Join(foreign, "notes.txt"), filepath.Join(added, "hosts", "notes.txt")} {
		if b, err := os.ReadFile(f); err != nil || string(b) != "mine" {
			t.Errorf("the refused folder changed: %s: %q %v", f, b, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(withManifest, "main.go")); err != nil || string(b) != "package main" {
		t.Errorf("the folder with a manifest.json of its own changed: %q %v", b, err)
	}
	for _, o := range []string{"o1", "o2", "o3", "o4", "o5", "o6", "o7"} {
		if _, err := os.Stat(filepath.Join(work, o)); err == nil {
			t.Errorf("%s was written by a refused render", o)
		}
	}
}

// TestRenderRevision renders the spec committed at a revision, not the
// work tree, with an application credential: cloud.conf appears, 0600.
func TestRenderRevision(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo := gittest.Init(t, dir)
	demo := exampleSpec(t, "demo")
	gittest.Commit(t, repo, "v1.36.1", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": strings.Replace(demo, "metrics-server", "openstack-cloud-controller-manager", 1)}))
	gittest.Commit(t, repo, "v1.37.0", gittest.Files(map[string]string{"clusters/demo/cluster.yaml": strings.Replace(demo, "v1.36.1", "v1.37.0", 1)}))
	cred := filepath.Join(t.TempDir(), "cred.json")
	if err := os.WriteFile(cred, []byte(`{"auth_url":"http://127.0.0.1:5050/identity/v3","application_credential_id":"id1","application_credential_secret":"very-secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := opke(t, "render", "--repo", dir, "--rev", "HEAD~1", "--cluster", "demo", "--out", out,
		"--data-dir", filepath.Join(t.TempDir(), "state"), "--app-credential", cred)
	if code != exitOK || !strings.Contains(stdout, "Kubernetes v1.36.1") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, "very-secret") {
		t.Error("the credential's secret was printed")
	}
	p := filepath.Join(out, "hosts", "demo-controller-0", "etc", "kubernetes", "cloud.conf")
	info, err := os.Stat(p)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("cloud.conf: %v %v", info, err)
	}
	if b, _ := os.ReadFile(p); !bytes.Contains(b, []byte("application-credential-secret=very-secret\n")) {
		t.Errorf("cloud.conf:\n%s", b)
	}
}

// TestRenderExternalEtcd renders into an external etcd with a given key
// file and a known floating IP: the material lands in that etcd, sealed
// with that key, the serving certs carry the floating IP, and the data dir
// is not touched.
func TestRenderExternalEtcd(t *testing.T) {
	t.Parallel()
	store, storeDir := statetest.OpenDir(t)
	work := t.TempDir()
	keyFile := filepath.Join(work, "key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(statetest.Key())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir, out := filepath.Join(work, "unused"), filepath.Join(work, "out")
	code, stdout, stderr := opke(t, append([]string{"render", "--repo", "../..", "--cluster", "demo", "--out", out, "--data-dir", dataDir,
		"--encryption-key-file", keyFile, "--api-floating-ip", "203.0.113.20"}, etcdFlags(store, storeDir)...)...)
	if code != exitOK {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(dataDir); err == nil {
		t.Error("the data dir was created although --etcd was given")
	}
	ctx := context.Background()
	if _, err := store.GetSecret(ctx, store.Key("demo", "pki", "ca.key")); err != nil {
		t.Errorf("the CA key is not in the external etcd under the given key: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(out, "hosts", "demo-controller-0", "etc", "kubernetes", "pki", "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.String() == "203.0.113.20" }) {
		t.Errorf("apiserver SANs %v lack the floating IP", cert.IPAddresses)
	}
}

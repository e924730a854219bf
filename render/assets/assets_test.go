package assets_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/internal/golden"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/ignition"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

var now = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// credential is a cloud credential whose secret tests look for.
var credential = &assets.CloudCredential{
	AuthURL: "http://127.0.0.1:5050/identity/v3", Region: "RegionOne",
	ID: "0a1b2c3d4e5f", Secret: "s3cr3t-app-credential-value",
}

// loadSpec reads testdata/<name>.yaml, which must be valid.
func loadSpec(t testing.TB, name string) *schemas.Cluster {
	t.Helper()
	path := filepath.Join("testdata", name+".yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := schemas.Parse("clusters/"+name+"/cluster.yaml", data)
	if len(f.Findings) > 0 || f.Cluster == nil {
		t.Fatalf("%s: %v", path, f.Findings)
	}
	return f.Cluster
}

func renderCluster(t testing.TB, kv state.KV, c *schemas.Cluster, cloud *assets.CloudCredential) *render.Output {
	t.Helper()
	return renderWith(t, kv, c, render.Options{Now: now, Cloud: cloud})
}

func renderWith(t testing.TB, kv state.KV, c *schemas.Cluster, o render.Options) *render.Output {
	t.Helper()
	out, err := render.Cluster(context.Background(), kv, c, o)
	if err != nil {
		t.Fatalf("render %s: %v", c.Metadata.Name, err)
	}
	return out
}

// TestGolden compares every rendered file with testdata/<case>/. Files that
// carry PKI material are compared in a described form (subject, issuer,
// SANs, usages; key types), since keys are random: what is golden is which
// material goes where.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cloud *assets.CloudCredential
		auth  *assets.MirrorAuth
	}{
		{name: "demo"},
		{name: "prod", cloud: credential},
		{name: "airgap", auth: &assets.MirrorAuth{Username: "puller", Password: "mirror-password"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := renderWith(t, statetest.Open(t), loadSpec(t, tc.name), render.Options{Now: now, Cloud: tc.cloud, MirrorAuth: tc.auth})
			got := map[string][]byte{}
			for _, h := range out.Assets.Hosts {
				for _, f := range h.Files {
					// Custom resource definitions are upstream's files
					// unchanged: files.json has their digests.
					if strings.HasSuffix(f.Path, ".crds.yaml") {
						continue
					}
					got[filepath.Join(h.Name, f.Path)] = describe(t, f)
				}
			}
			manifest, err := json.MarshalIndent(redactSums(out.Assets), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got["files.json"] = append(manifest, '\n')
			dir := filepath.Join("testdata", tc.name)
			if *golden.Update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				for name, b := range got {
					if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := map[string][]byte{}
			err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(dir, path)
				want[rel], err = os.ReadFile(path)
				return err
			})
			if err != nil {
				t.Fatalf("read golden files (run go test -update to create them): %v", err)
			}
			if diff := cmp.Diff(keys(want), keys(got)); diff != "" {
				t.Errorf("files (-golden +rendered):\n%s", diff)
			}
			for name, w := range want {
				if g, ok := got[name]; ok {
					if diff := cmp.Diff(string(w), string(g)); diff != "" {
						t.Errorf("%s (-golden +rendered):\n%s", name, diff)
					}
				}
			}
		})
	}
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// redactSums drops the checksums of PKI-bearing files from the manifest.
func redactSums(s *assets.Set) *assets.Set {
	c := *s
	c.Hosts = slices.Clone(s.Hosts)
	for i, h := range c.Hosts {
		h.Files = slices.Clone(h.Files)
		for j, f := range h.Files {
			if carriesPKI(f) {
				h.Files[j].SHA256, h.Files[j].Size = "(PKI material)", 0
			}
		}
		c.Hosts[i] = h
	}
	return &c
}

func carriesPKI(f assets.File) bool {
	return bytes.Contains(f.Data, []byte("-----BEGIN")) || bytes.Contains(f.Data, []byte("certificate-authority-data")) ||
		inputsSum.Match(f.Data) || encryptionSecret.Match(f.Data)
}

// encryptionSecret is a key of the API server's encryption configuration.
var encryptionSecret = regexp.MustCompile(`secret: (\S+)`)

// inputsSum is a static pod's annotation of its inputs' sha256, which
// changes with the (random) keys of each test's PKI.
var inputsSum = regexp.MustCompile(`opke.dev/inputs-sha256: "[0-9a-f]{64}"`)

// describe returns a file's golden form.
func describe(t testing.TB, f assets.File) []byte {
	t.Helper()
	switch {
	case encryptionSecret.Match(f.Data):
		// The key's random bytes: checked to be 32, not shown.
		return encryptionSecret.ReplaceAllFunc(f.Data, func(m []byte) []byte {
			raw, err := base64.StdEncoding.DecodeString(string(encryptionSecret.FindSubmatch(m)[1]))
			if err != nil || len(raw) != 32 {
				t.Fatalf("%s: the key is not 32 bytes of base64: %v", f.Path, err)
			}
			return []byte("secret: (32 random bytes, base64)")
		})
	case inputsSum.Match(f.Data):
		return inputsSum.ReplaceAll(f.Data, []byte(`opke.dev/inputs-sha256: "(sha256 of its PKI files)"`))
	case bytes.HasPrefix(f.Data, []byte("-----BEGIN")):
		return []byte(describePEM(t, f.Data))
	case bytes.Contains(f.Data, []byte("certificate-authority-data")):
		var kc map[string]any
		if err := yaml.Unmarshal(f.Data, &kc); err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		walkStrings(kc, func(k, v string) string {
			if strings.HasSuffix(k, "-data") {
				return "(" + strings.TrimSpace(describePEMBase64(t, v)) + ")"
			}
			return v
		})
		b, err := yaml.Marshal(kc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return f.Data
}

func walkStrings(v any, fn func(k, v string) string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok {
				v[k] = fn(k, s)
				continue
			}
			walkStrings(x, fn)
		}
	case []any:
		for _, x := range v {
			walkStrings(x, fn)
		}
	}
}

func describePEMBase64(t testing.TB, s string) string {
	var b []byte
	if err := json.Unmarshal([]byte(`"`+s+`"`), &b); err != nil { // base64 via json
		t.Fatalf("base64: %v", err)
	}
	return describePEM(t, b)
}

// describePEM names what a PEM file holds without its random bytes.
func describePEM(t testing.TB, b []byte) string {
	t.Helper()
	var out strings.Builder
	for {
		block, rest := pem.Decode(b)
		if block == nil {
			break
		}
		b = rest
		switch block.Type {
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			var usage []string
			for _, u := range c.ExtKeyUsage {
				usage = append(usage, map[x509.ExtKeyUsage]string{x509.ExtKeyUsageServerAuth: "server", x509.ExtKeyUsageClientAuth: "client"}[u])
			}
			fmt.Fprintf(&out, "certificate subject=%q issuer=%q ca=%v dns=%v ips=%v usage=%v validity=%v key=%v\n",
				c.Subject.String(), c.Issuer.String(), c.IsCA, c.DNSNames, c.IPAddresses, usage, c.NotAfter.Sub(c.NotBefore), c.PublicKeyAlgorithm)
		case "EC PRIVATE KEY":
			k, err := x509.ParseECPrivateKey(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "EC private key %s\n", k.Curve.Params().Name)
		case "PUBLIC KEY":
			if _, err := x509.ParsePKIXPublicKey(block.Bytes); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "public key\n")
		default:
			t.Fatalf("unexpected PEM block %s", block.Type)
		}
	}
	return out.String()
}

// TestVersionBump: a patch and a minor upgrade change kubelet.env, the
// static pods and the cluster manifests, never a byte of user_data, never
// a TLS file.
func TestVersionBump(t *testing.T) {
	for _, tc := range []struct {
		name, to string
		etcd     bool // etcd.env changes too (a new minor pins a new etcd)
		pause    bool // and containerd's configuration (a new sandbox image)
	}{
		{name: "patch", to: "v1.35.5"},
		{name: "minor", to: "v1.36.0", etcd: true, pause: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := statetest.Open(t)
			c := loadSpec(t, "prod")
			before := renderCluster(t, store, c, credential)
			c.Spec.Kubernetes.Version = tc.to
			after := renderCluster(t, store, c, credential)

			if diff := cmp.Diff(before.UserData, after.UserData); diff != "" {
				t.Fatalf("user_data changed with the version:\n%s", diff)
			}
			if len(after.Issued) != 0 {
				t.Errorf("the upgrade issued %v", after.Issued)
			}
			// want must change; may change or not (an addon whose image is
			// the same in both minors); nothing else may.
			var want, may []string
			for _, h := range after.Assets.Hosts {
				if tc.pause && h.Role != schemas.RoleGateway {
					want = append(want, h.Name+":"+assets.PathContainerdConfig)
				}
				switch h.Role {
				case schemas.RoleController:
					want = append(want, h.Name+":"+assets.PathKubeletEnv, h.Name+":"+assets.PathAddons+"/00-kube-proxy.yaml")
					for _, p := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
						want = append(want, h.Name+":"+assets.PathManifests+"/"+p+".yaml")
					}
					if tc.etcd {
						// etcd.env names the new minor's etcd; CoreDNS's file
						// is among the addons that change when its image does.
						want = append(want, h.Name+":"+assets.PathEtcdEnv)
						for _, f := range h.Files {
							if strings.HasPrefix(f.Path, assets.PathAddons) {
								may = append(may, h.Name+":"+f.Path)
							}
						}
					}
				case schemas.RoleWorker:
					want = append(want, h.Name+":"+assets.PathKubeletEnv)
				}
			}
			slices.Sort(want)
			var changed []string
			for _, p := range changedPaths(before.Assets, after.Assets) {
				if slices.Contains(want, p) || !slices.Contains(may, p) {
					changed = append(changed, p)
				}
			}
			if diff := cmp.Diff(want, changed); diff != "" {
				t.Errorf("changed files (-want +got):\n%s", diff)
			}
			h, _ := after.Assets.Host("prod-general-0")
			env, _ := h.File(assets.PathKubeletEnv)
			if !bytes.Contains(env.Data, []byte("KUBELET_URL="+assets.KubeletDownload(tc.to).URL("")+"\n")) {
				t.Errorf("kubelet.env does not name the new version:\n%s", env.Data)
			}
		})
	}
}

// changedPaths lists host:path of every file added, removed or changed.
func changedPaths(a, b *assets.Set) []string {
	sums := func(s *assets.Set) map[string]string {
		m := map[string]string{}
		for _, h := range s.Hosts {
			for _, f := range h.Files {
				m[h.Name+":"+f.Path] = f.SHA256
			}
		}
		return m
	}
	x, y := sums(a), sums(b)
	var out []string
	for k, v := range x {
		if y[k] != v {
			out = append(out, k)
		}
	}
	for k := range y {
		if _, ok := x[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// TestAddPool: a new worker pool leaves every user_data and every file of
// the controllers and existing workers unchanged; only the new hosts get
// files.
func TestAddPool(t *testing.T) {
	store := statetest.Open(t)
	c := loadSpec(t, "prod")
	before := renderCluster(t, store, c, credential)
	c.Spec.WorkerPools = append(c.Spec.WorkerPools, schemas.WorkerPool{Name: "gpu", Count: 2, Flavor: "m1.large"})
	after := renderCluster(t, store, c, credential)
	if diff := cmp.Diff(before.UserData, after.UserData); diff != "" {
		t.Fatalf("user_data changed:\n%s", diff)
	}
	if diff := cmp.Diff([]string{pki.Kubelet("prod-gpu-0"), pki.Kubelet("prod-gpu-1")}, after.Issued); diff != "" {
		t.Errorf("issued (-want +got):\n%s", diff)
	}
	var added []string
	for _, p := range changedPaths(before.Assets, after.Assets) {
		if !strings.HasPrefix(p, "prod-gpu-") {
			t.Errorf("%s changed", p)
		}
		added = append(added, p)
	}
	if len(added) == 0 {
		t.Fatal("the new pool's hosts got no files")
	}
}

// TestEtcdStart: a member that joins the running cluster starts with
// the membership it was added to and state existing; the others keep the
// founding settings, whatever the spec's count says now.
func TestEtcdStart(t *testing.T) {
	store := statetest.Open(t)
	c := loadSpec(t, "prod")
	before := renderCluster(t, store, c, credential)
	join := map[string]assets.EtcdStart{"prod-controller-1": {Join: true, Members: []string{"prod-controller-0", "prod-controller-1", "prod-controller-2"}}}
	after := renderWith(t, store, c, render.Options{Now: now, Cloud: credential, Etcd: join})
	if diff := cmp.Diff([]string{"prod-controller-1:" + assets.PathEtcdEnv}, changedPaths(before.Assets, after.Assets)); diff != "" {
		t.Errorf("changed by the join (-want +got):\n%s", diff)
	}
	h, _ := after.Assets.Host("prod-controller-1")
	f, _ := h.File(assets.PathEtcdEnv)
	for _, want := range []string{
		"ETCD_INITIAL_CLUSTER=prod-controller-0=https://192.168.20.10:2380,prod-controller-1=https://192.168.20.11:2380,prod-controller-2=https://192.168.20.12:2380\n",
		"ETCD_INITIAL_CLUSTER_STATE=existing\n",
	} {
		if !strings.Contains(string(f.Data), want) {
			t.Errorf("etcd.env of the joining member lacks %q:\n%s", want, f.Data)
		}
	}
	if h.Etcd == nil || !h.Etcd.Equal(join["prod-controller-1"]) {
		t.Errorf("the set says the member starts %+v, want %+v", h.Etcd, join["prod-controller-1"])
	}

	// Five controllers: the three that run keep the founding members
	// they were given; the fourth joins the four.
	c.Spec.Controllers.Count = 5
	founding := []string{"prod-controller-0", "prod-controller-1", "prod-controller-2"}
	etcd := map[string]assets.EtcdStart{"prod-controller-3": {Join: true, Members: append(slices.Clone(founding), "prod-controller-3")}}
	for _, m := range founding {
		etcd[m] = assets.EtcdStart{Members: founding}
	}
	five := renderWith(t, store, c, render.Options{Now: now, Cloud: credential, Etcd: etcd})
	for _, name := range founding {
		a, _ := before.Assets.Host(name)
		b, _ := five.Assets.Host(name)
		x, _ := a.File(assets.PathEtcdEnv)
		y, _ := b.File(assets.PathEtcdEnv)
		if x.SHA256 != y.SHA256 {
			t.Errorf("%s's etcd.env changed with the count:\n%s", name, y.Data)
		}
	}
	h, _ = five.Assets.Host("prod-controller-4")
	if want := (assets.EtcdStart{Members: []string{"prod-controller-0", "prod-controller-1", "prod-controller-2", "prod-controller-3", "prod-controller-4"}}); h.Etcd == nil || !h.Etcd.Equal(want) {
		t.Errorf("a controller not in the input starts %+v, want %+v", h.Etcd, want)
	}
}

// TestRenderTwiceIsIdentical: a second render with the same store yields
// the same bytes everywhere and issues nothing.
func TestRenderTwiceIsIdentical(t *testing.T) {
	store := statetest.Open(t)
	c := loadSpec(t, "prod")
	first := renderCluster(t, store, c, credential)
	second := renderCluster(t, store, c, credential)
	if len(second.Issued) != 0 {
		t.Errorf("second render issued %v", second.Issued)
	}
	first.Issued = nil
	// Bytes compared as bytes: cmp walks a []byte element by element by
	// reflection, which took this test 148 s (a render is megabytes).
	if diff := cmp.Diff(first, second, cmpopts.EquateComparable(netip.Addr{}), cmp.Comparer(bytes.Equal)); diff != "" {
		t.Errorf("second render differs:\n%s", diff)
	}
}

// TestNoSecretOrVersionInUserData scans every user_data for private keys,
// tokens, the credential and the version; and checks that secret bytes
// live only in secret files.
// privateKeyPEM is the armour of a PEM private key of any kind.
var privateKeyPEM = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`)

func TestNoSecretOrVersionInUserData(t *testing.T) {
	c := loadSpec(t, "prod")
	out := renderCluster(t, statetest.Open(t), c, credential)
	v, _ := schemas.ParseVersion(c.Spec.Kubernetes.Version)
	forbidden := []*regexp.Regexp{
		regexp.MustCompile(`PRIVATE KEY`),
		regexp.MustCompile(`(?i)token`),
		regexp.MustCompile(regexp.QuoteMeta(credential.Secret)),
		regexp.MustCompile(regexp.QuoteMeta(v.MinorString())),
	}
	for role, ud := range out.UserData {
		plain := decodeUserData(t, ud)
		for _, re := range forbidden {
			if re.Match(plain) {
				t.Errorf("%s user_data matches %s", role, re)
			}
		}
	}
	var secrets [][]byte
	for _, h := range out.Assets.Hosts {
		for _, f := range h.Files {
			if f.Secret {
				// Its owner's, or its owner's and a group of its own
				// (never root's, which every root process has).
				group := strings.TrimPrefix(f.Owner, "root:")
				if f.Mode != 0o600 && (f.Mode != 0o640 || group == "root" || group == f.Owner) {
					t.Errorf("%s:%s is secret with mode %o, owner %s", h.Name, f.Path, f.Mode, f.Owner)
				}
				secrets = append(secrets, f.Data)
			}
			if strings.HasPrefix(f.Path, assets.PathPKI+"/") && f.Mode != 0o600 {
				t.Errorf("%s:%s: TLS file with mode %o", h.Name, f.Path, f.Mode)
			}
			// A key's PEM armour, not the words (the Prometheus Operator's
			// definitions describe "a PRIVATE KEY block").
			if !f.Secret && (privateKeyPEM.Match(f.Data) || bytes.Contains(f.Data, []byte(credential.Secret)) ||
				bytes.Contains(f.Data, []byte("client-key-data"))) {
				t.Errorf("%s:%s holds a secret but is not marked secret", h.Name, f.Path)
			}
		}
	}
	if len(secrets) == 0 {
		t.Fatal("no secret files")
	}
	manifest, _ := json.Marshal(out.Assets)
	for _, s := range secrets {
		if bytes.Contains(manifest, s) {
			t.Error("the JSON form of the set carries a secret file's bytes")
		}
	}
}

// decodeUserData returns the config followed by every file's content, so
// a scan sees what data URLs hide.
func decodeUserData(t testing.TB, ud []byte) []byte {
	t.Helper()
	files, err := ignition.Contents(ud)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte{}, ud...)
	for _, b := range files {
		out = append(append(out, '\n'), b...)
	}
	return out
}

// TestCloudConf: the credential goes to controllers always and to workers
// only when cinder-csi needs it there; without a credential, no cloud.conf.
func TestCloudConf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cloud      *assets.CloudCredential
		addons     []schemas.Addon
		storage    *schemas.Storage
		controller bool
		worker     bool
	}{
		{name: "no credential", addons: []schemas.Addon{{Name: "cinder-csi"}}},
		{name: "controllers only", cloud: credential, addons: []schemas.Addon{{Name: "openstack-cloud-controller-manager"}}, controller: true},
		{name: "cinder on workers too", cloud: credential, addons: []schemas.Addon{{Name: "cinder-csi"}}, controller: true, worker: true},
		{name: "volumes' zones ignored", cloud: credential, addons: []schemas.Addon{{Name: "cinder-csi"}}, storage: &schemas.Storage{IgnoreVolumeAZ: true},
			controller: true, worker: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loadSpec(t, "prod")
			c.Spec.Addons, c.Spec.Storage = tc.addons, tc.storage
			out := renderCluster(t, statetest.Open(t), c, tc.cloud)
			for name, want := range map[string]bool{"prod-controller-0": tc.controller, "prod-general-0": tc.worker, "prod-gateway-0": false} {
				h, _ := out.Assets.Host(name)
				f, got := h.File(assets.PathCloudConf)
				if got != want {
					t.Errorf("%s has cloud.conf: %v, want %v", name, got, want)
				}
				// The cloud controller manager (uid and gid 1001) reads it.
				if got && (!f.Secret || f.Mode != 0o640 || f.Owner != "root:1001" || !bytes.Contains(f.Data, []byte("application-credential-secret="+credential.Secret+"\n"))) {
					t.Errorf("%s cloud.conf: secret=%v mode=%o owner=%s\n%s", name, f.Secret, f.Mode, f.Owner, f.Data)
				}
				// cloud-provider-openstack's [BlockStorage] ignore-volume-az, only when asked.
				if ignored := bytes.Contains(f.Data, []byte("[BlockStorage]\nignore-volume-az=true\n")); got && ignored != (tc.storage != nil) {
					t.Errorf("%s cloud.conf ignores the volumes' zones: %v, want %v\n%s", name, ignored, tc.storage != nil, f.Data)
				}
			}
		})
	}
}

// TestPushedTLSFilesVerify: the files a controller receives chain to the
// CA files next to them, with the SANs the clients dial.
func TestPushedTLSFilesVerify(t *testing.T) {
	out := renderCluster(t, statetest.Open(t), loadSpec(t, "prod"), nil)
	h, _ := out.Assets.Host("prod-controller-1")
	read := func(p string) []byte {
		f, ok := h.File(p)
		if !ok {
			t.Fatalf("no %s", p)
		}
		return f.Data
	}
	for _, tc := range []struct {
		name, cert, ca, dnsOrIP string
		usage                   x509.ExtKeyUsage
	}{
		{name: "apiserver by host IP", cert: "/etc/kubernetes/pki/apiserver.crt", ca: "/etc/kubernetes/pki/ca.crt", dnsOrIP: "192.168.20.11", usage: x509.ExtKeyUsageServerAuth},
		{name: "apiserver by VIP", cert: "/etc/kubernetes/pki/apiserver.crt", ca: "/etc/kubernetes/pki/ca.crt", dnsOrIP: "192.168.20.5", usage: x509.ExtKeyUsageServerAuth},
		{name: "apiserver by service name", cert: "/etc/kubernetes/pki/apiserver.crt", ca: "/etc/kubernetes/pki/ca.crt", dnsOrIP: "kubernetes.default.svc.cluster.local", usage: x509.ExtKeyUsageServerAuth},
		{name: "etcd server", cert: "/etc/kubernetes/pki/etcd/server.crt", ca: "/etc/kubernetes/pki/etcd/ca.crt", dnsOrIP: "192.168.20.11", usage: x509.ExtKeyUsageServerAuth},
		{name: "etcd peer", cert: "/etc/kubernetes/pki/etcd/peer.crt", ca: "/etc/kubernetes/pki/etcd/ca.crt", dnsOrIP: "prod-controller-1", usage: x509.ExtKeyUsageClientAuth},
		{name: "apiserver to etcd", cert: "/etc/kubernetes/pki/apiserver-etcd-client.crt", ca: "/etc/kubernetes/pki/etcd/ca.crt", usage: x509.ExtKeyUsageClientAuth},
		{name: "front proxy", cert: "/etc/kubernetes/pki/front-proxy-client.crt", ca: "/etc/kubernetes/pki/front-proxy-ca.crt", usage: x509.ExtKeyUsageClientAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(read(tc.ca)) {
				t.Fatal("bad CA file")
			}
			block, _ := pem.Decode(read(tc.cert))
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: tc.dnsOrIP, KeyUsages: []x509.ExtKeyUsage{tc.usage}, CurrentTime: now}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRenderErrors: bad input fails with an error naming it, matched by kind.
func TestRenderErrors(t *testing.T) {
	store := statetest.Open(t)
	c := loadSpec(t, "demo")
	full := renderCluster(t, store, c, nil)
	bundle, _, err := pki.Issue(context.Background(), store, pki.Request{Cluster: "demo", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := assets.PlannedHosts(c)
	if err != nil {
		t.Fatal(err)
	}
	old := *c
	old.Spec.Kubernetes.Version = "v1.20.0"
	for _, tc := range []struct {
		name string
		in   assets.Input
		want error
	}{
		{name: "no PKI", in: assets.Input{Cluster: c, Hosts: hosts}, want: assets.ErrBadInput},
		{name: "unsupported minor", in: assets.Input{Cluster: &old, PKI: bundle, Hosts: hosts}, want: assets.ErrUnsupportedVersion},
		{name: "material of another host set", in: assets.Input{Cluster: c, PKI: bundle, Hosts: hosts}, want: assets.ErrMissingMaterial},
		{name: "unknown role", in: assets.Input{Cluster: c, PKI: bundle, Hosts: []assets.Host{{Name: "demo-x-0", Role: "bastion"}}}, want: assets.ErrBadInput},
		{name: "controller without IP", in: assets.Input{Cluster: c, PKI: bundle, Hosts: []assets.Host{{Name: "demo-controller-0", Role: schemas.RoleController}}}, want: assets.ErrBadInput},
		{name: "etcd member not a controller", in: assets.Input{Cluster: c, PKI: full.PKI, Hosts: hosts,
			Etcd: map[string]assets.EtcdStart{"demo-controller-0": {Join: true, Members: []string{"demo-controller-0", "demo-default-0"}}}}, want: assets.ErrBadInput},
		{name: "etcd members without the host", in: assets.Input{Cluster: c, PKI: full.PKI, Hosts: hosts,
			Etcd: map[string]assets.EtcdStart{"demo-controller-0": {Join: true, Members: []string{"demo-controller-1"}}}}, want: assets.ErrBadInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := assets.Render(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestMatrixCoversSupportedMinors: every minor the schema accepts has images.
func TestMatrixCoversSupportedMinors(t *testing.T) {
	for _, m := range schemas.SupportedMinors() {
		v, err := schemas.ParseVersion("v" + m + ".0")
		if err != nil {
			t.Fatal(err)
		}
		im, err := assets.ImagesFor(v)
		if err != nil {
			t.Errorf("%s: %v", m, err)
			continue
		}
		if im.Etcd == "" || im.CoreDNS == "" || im.Pause == "" || im.Flannel == "" || im.FlannelCNI == "" {
			t.Errorf("%s: incomplete row %+v", m, im)
		}
	}
	if len(assets.Matrix()) != len(schemas.SupportedMinors()) {
		t.Errorf("the matrix has %d rows for %d supported minors", len(assets.Matrix()), len(schemas.SupportedMinors()))
	}
}

// TestFileJSON: the JSON form has the octal mode, the checksum and no data,
// and reads back.
func TestFileJSON(t *testing.T) {
	f := assets.File{Path: "/etc/x", Mode: 0o600, Owner: "root:root", SHA256: "ab", Size: 3, Secret: true, Restart: []string{assets.UnitKubelet}, Data: []byte("key")}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"path":"/etc/x","owner":"root:root","sha256":"ab","size":3,"secret":true,"restart":["kubelet.service"],"mode":"0600"}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Fatalf("json (-want +got):\n%s", diff)
	}
	var back assets.File
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	f.Data = nil
	if diff := cmp.Diff(f, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

// TestRegistryMirror: with spec.registryMirror every image a host pulls
// (static pods, addons, the kubelet's, etcd's, the sandbox) comes from a
// registry whose hosts.toml sends it to the mirror; without one, no
// runtime configuration is pushed and the images keep their upstream
// names.
func TestRegistryMirror(t *testing.T) {
	imageRE := regexp.MustCompile(`(?m)(?:image: *|_IMAGE=|sandbox = )"?([a-z0-9.-]+(?::[0-9]+)?/[^\s":]+:[^\s"]+)`)
	registry := func(ref string) string {
		host, _, _ := strings.Cut(ref, "/")
		return host
	}
	spec := loadSpec(t, "airgap")
	for _, tc := range []struct {
		name   string
		mirror bool
		auth   *assets.MirrorAuth
	}{
		{"no mirror", false, nil},
		{"mirror", true, nil},
		{"mirror with a login", true, &assets.MirrorAuth{Username: "puller", Password: "pw"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *spec
			if !tc.mirror {
				c.Spec.RegistryMirror = nil
			}
			out := renderWith(t, statetest.Open(t), &c, render.Options{Now: now, MirrorAuth: tc.auth})
			for _, h := range out.Assets.Hosts {
				if h.Role == schemas.RoleGateway {
					continue
				}
				pulled := map[string]bool{}
				hostsTOML := map[string]assets.File{}
				for _, f := range h.Files {
					for _, m := range imageRE.FindAllSubmatch(f.Data, -1) {
						pulled[registry(string(m[1]))] = true
					}
					if reg, ok := strings.CutPrefix(f.Path, assets.PathRegistryHosts+"/"); ok {
						hostsTOML[strings.TrimSuffix(reg, "/hosts.toml")] = f
					}
				}
				if len(pulled) == 0 {
					t.Fatalf("%s: no image found in its files", h.Name)
				}
				if !tc.mirror {
					// The upstream registries, and the runtime's sandbox
					// image pinned all the same.
					for _, f := range h.Files {
						if strings.HasPrefix(f.Path, assets.PathRegistryHosts) || f.Path == assets.PathMirrorCA {
							t.Errorf("%s: %s pushed without a mirror", h.Name, f.Path)
						}
					}
					if f, ok := h.File(assets.PathContainerdConfig); !ok || !strings.Contains(string(f.Data), `sandbox = "registry.k8s.io/pause:`) {
						t.Errorf("%s: no containerd configuration pinning the sandbox image", h.Name)
					}
					continue
				}
				for reg := range pulled {
					f, ok := hostsTOML[reg]
					if !ok {
						t.Errorf("%s pulls from %s, which has no hosts.toml", h.Name, reg)
						continue
					}
					if want := `[host."https://mirror.internal:5000/v2/k8s/` + reg + `"]`; !strings.Contains(string(f.Data), want) {
						t.Errorf("%s: %s's hosts.toml lacks %s:\n%s", h.Name, reg, want, f.Data)
					}
					if f.Secret != (tc.auth != nil) || strings.Contains(string(f.Data), "Authorization") != (tc.auth != nil) {
						t.Errorf("%s: %s's hosts.toml secret=%v with login %v", h.Name, reg, f.Secret, tc.auth)
					}
				}
				cfg, ok := h.File(assets.PathContainerdConfig)
				if !ok || !slices.Contains(cfg.Restart, assets.UnitContainerd) || !strings.Contains(string(cfg.Data), `config_path = "/etc/containerd/certs.d"`) {
					t.Errorf("%s: containerd's config %+v", h.Name, cfg)
				}
			}
		})
	}
}

// TestRenewedCertificatesRestartStaticPods: a static pod's manifest
// changes exactly when a file its flags name changes (a renewed
// certificate, key or kubeconfig), so the kubelet starts it again with
// them; a kubelet restart alone would keep the old pod.
func TestRenewedCertificatesRestartStaticPods(t *testing.T) {
	store := statetest.Open(t)
	c := loadSpec(t, "prod")
	before := renderWith(t, store, c, render.Options{Now: now, Cloud: credential})
	// A year and a day later, with a renewal window of 30 days: the
	// leaf certificates are issued again, the CAs are kept.
	after := renderWith(t, store, c, render.Options{Now: now.Add(366 * 24 * time.Hour), RenewWithin: 30 * 24 * time.Hour, Cloud: credential})
	b, _ := before.Assets.Host("prod-controller-0")
	a, _ := after.Assets.Host("prod-controller-0")
	flagPath := regexp.MustCompile(`--[a-z-]+=(/etc/kubernetes/\S+)`)
	changed := 0
	for _, pod := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		path := assets.PathManifests + "/" + pod + ".yaml"
		mb, _ := b.File(path)
		ma, _ := a.File(path)
		inputChanged := false
		for _, m := range flagPath.FindAllSubmatch(ma.Data, -1) {
			fb, okb := b.File(string(m[1]))
			fa, oka := a.File(string(m[1]))
			if !okb || !oka {
				t.Fatalf("%s reads %s, which the render lacks", pod, m[1])
			}
			inputChanged = inputChanged || fb.SHA256 != fa.SHA256
		}
		if manifestChanged := mb.SHA256 != ma.SHA256; manifestChanged != inputChanged {
			t.Errorf("%s: manifest changed %v, its files changed %v", pod, manifestChanged, inputChanged)
		}
		if inputChanged {
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("no static pod's files were renewed: the test renews nothing")
	}
}

// TestManifestOrderHoldsEveryManifest: each core manifest, addon and
// NetworkPolicy agent has one place in the apply order (its file's number).
func TestManifestOrderHoldsEveryManifest(t *testing.T) {
	t.Parallel()
	want := slices.Sorted(slices.Values(slices.Concat(assets.CoreManifests(), assets.AddonManifests(), []string{schemas.NetworkPolicyKubeRouter})))
	if d := cmp.Diff(want, slices.Sorted(slices.Values(assets.ManifestOrder()))); d != "" {
		t.Errorf("manifestOrder (-every manifest +its entries):\n%s", d)
	}
}

// TestContainerdKeepsFlatcarDefaults: the containerd configuration OPKE
// pushes, which Flatcar's containerd reads instead of its own, keeps every
// setting of Flatcar's (testdata/flatcar/containerd-config.toml, version 2)
// at Flatcar's value, in version 3's place for it: the CRI's runtime
// settings moved from io.containerd.grpc.v1.cri to io.containerd.cri.v1.runtime;
// the v1 Linux runtime is not in containerd 2 at all.
func TestContainerdKeepsFlatcarDefaults(t *testing.T) {
	t.Parallel()
	stock, err := os.ReadFile(filepath.Join("testdata", "flatcar", "containerd-config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var flatcar, ours map[string]any
	if _, err := toml.Decode(string(stock), &flatcar); err != nil {
		t.Fatal(err)
	}
	out := renderWith(t, statetest.Open(t), loadSpec(t, "demo"), render.Options{Now: now})
	cfg, ok := out.Assets.Hosts[0].File(assets.PathContainerdConfig)
	if !ok {
		t.Fatal("no containerd configuration")
	}
	if _, err := toml.Decode(string(cfg.Data), &ours); err != nil {
		t.Fatalf("the rendered configuration is not TOML: %v", err)
	}
	got := flatten("", ours)
	if got["version"] != int64(3) {
		t.Errorf("version %v, want 3", got["version"])
	}
	const cri2, cri3 = "plugins.io.containerd.grpc.v1.cri.", "plugins.io.containerd.cri.v1.runtime."
	for key, want := range flatten("", flatcar) {
		switch {
		case key == "version" || strings.HasPrefix(key, "plugins.io.containerd.runtime.v1.linux."):
			continue
		case strings.HasPrefix(key, cri2):
			key = cri3 + strings.TrimPrefix(key, cri2)
		}
		if d := cmp.Diff(want, got[key]); d != "" {
			t.Errorf("%s (-Flatcar's +OPKE's):\n%s", key, d)
		}
	}
}

// flatten maps a decoded TOML document's leaves by their dotted path.
func flatten(prefix string, m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			maps.Copy(out, flatten(prefix+k+".", sub))
			continue
		}
		out[prefix+k] = v
	}
	return out
}

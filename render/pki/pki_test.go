package pki

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/state"
)

var now = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func request() Request {
	return Request{
		Cluster: "prod",
		Controllers: []Host{
			{"prod-controller-0", netip.MustParseAddr("192.168.20.10")},
			{"prod-controller-1", netip.MustParseAddr("192.168.20.11")},
			{"prod-controller-2", netip.MustParseAddr("192.168.20.12")},
		},
		Workers:     []Host{{"prod-general-0", netip.MustParseAddr("192.168.20.16")}},
		APIVIP:      netip.MustParseAddr("192.168.20.5"),
		ServiceCIDR: netip.MustParsePrefix("10.3.0.0/16"),
		Now:         now,
	}
}

func cert(t *testing.T, b *Bundle, name string) *x509.Certificate {
	t.Helper()
	m, ok := b.Get(name)
	if !ok {
		t.Fatalf("no %s in the bundle", name)
	}
	c, err := parseCert(m.Cert)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ipStrings(ips []net.IP) []string {
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

func TestIssueChainsAndSANs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, issued, err := Issue(ctx, statetest.Open(t), request())
	if err != nil {
		t.Fatal(err)
	}
	if len(issued) != len(b.Names()) {
		t.Errorf("a first issue creates everything: issued %d of %d", len(issued), len(b.Names()))
	}
	tests := []struct {
		name, ca string
		usage    x509.ExtKeyUsage
		dns      []string
		ips      []string
		cn       string
	}{
		{EtcdServer("prod-controller-1"), EtcdCA, x509.ExtKeyUsageServerAuth, []string{"prod-controller-1", "localhost"},
			[]string{"192.168.20.11", "127.0.0.1", "::1"}, "prod-controller-1"},
		{EtcdPeer("prod-controller-0"), EtcdCA, x509.ExtKeyUsageClientAuth, []string{"prod-controller-0", "localhost"},
			[]string{"192.168.20.10", "127.0.0.1", "::1"}, "prod-controller-0"},
		{APIServer("prod-controller-0"), CA, x509.ExtKeyUsageServerAuth,
			[]string{"prod-controller-0", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
			[]string{"10.3.0.1", "192.168.20.10", "192.168.20.5", "127.0.0.1"}, "kube-apiserver"},
		{APIServerEtcdClient, EtcdCA, x509.ExtKeyUsageClientAuth, nil, nil, "kube-apiserver-etcd-client"},
		{EtcdBackupClient, EtcdCA, x509.ExtKeyUsageClientAuth, nil, nil, "opke-etcd-backup"},
		{FrontProxyClient, FrontProxyCA, x509.ExtKeyUsageClientAuth, nil, nil, "front-proxy-client"},
		{Kubelet("prod-general-0"), CA, x509.ExtKeyUsageClientAuth, nil, nil, "system:node:prod-general-0"},
		{Admin, CA, x509.ExtKeyUsageClientAuth, nil, nil, "kubernetes-admin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cert(t, b, tt.name)
			pool := x509.NewCertPool()
			pool.AddCert(cert(t, b, tt.ca))
			if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{tt.usage}, CurrentTime: now}); err != nil {
				t.Errorf("does not chain to %s for %v: %v", tt.ca, tt.usage, err)
			}
			if diff := cmp.Diff(tt.dns, c.DNSNames); diff != "" {
				t.Errorf("DNS SANs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.ips, ipStrings(c.IPAddresses)); diff != "" {
				t.Errorf("IP SANs (-want +got):\n%s", diff)
			}
			if c.Subject.CommonName != tt.cn {
				t.Errorf("CN %q, want %q", c.Subject.CommonName, tt.cn)
			}
			if _, ok := c.PublicKey.(*ecdsa.PublicKey); !ok {
				t.Errorf("key type %T, want ECDSA", c.PublicKey)
			}
		})
	}
	if o := cert(t, b, Kubelet("prod-general-0")).Subject.Organization; !slices.Equal(o, []string{"system:nodes"}) {
		t.Errorf("kubelet cert organization %v", o)
	}
}

func TestIssueReusesAndReissuesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := statetest.Open(t)
	first, _, err := Issue(ctx, s, request())
	if err != nil {
		t.Fatal(err)
	}
	again, issued, err := Issue(ctx, s, request())
	if err != nil || len(issued) != 0 || !again.Equal(first) {
		t.Fatalf("a second issue: issued %v, identical %v (%v)", issued, again.Equal(first), err)
	}

	tests := []struct {
		name   string
		change func(*Request)
		want   []string
	}{
		{"the floating IP becomes known", func(r *Request) { r.APIFloatingIP = netip.MustParseAddr("203.0.113.20") },
			[]string{APIServer("prod-controller-0"), APIServer("prod-controller-1"), APIServer("prod-controller-2")}},
		{"a worker is added", func(r *Request) {
			r.APIFloatingIP = netip.MustParseAddr("203.0.113.20")
			r.Workers = append(r.Workers, Host{"prod-general-1", netip.MustParseAddr("192.168.20.17")})
		}, []string{Kubelet("prod-general-1")}},
		{"leaves near expiry are renewed, CAs kept", func(r *Request) {
			r.APIFloatingIP = netip.MustParseAddr("203.0.113.20")
			r.Workers = append(r.Workers, Host{"prod-general-1", netip.MustParseAddr("192.168.20.17")})
			r.Now = now.Add(leafValidity - 10*24*time.Hour)
		}, nil},
	}
	for _, tt := range tests { // in order: each builds on the store the previous left
		r := request()
		tt.change(&r)
		_, issued, err := Issue(ctx, s, r)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if tt.want == nil {
			if slices.Contains(issued, CA) || slices.Contains(issued, EtcdCA) || !slices.Contains(issued, Admin) || !slices.Contains(issued, EtcdServer("prod-controller-0")) {
				t.Errorf("%s: issued %v", tt.name, issued)
			}
			continue
		}
		if diff := cmp.Diff(tt.want, issued); diff != "" {
			t.Errorf("%s: issued (-want +got):\n%s", tt.name, diff)
		}
	}
	raw, err := s.Get(ctx, s.Key("prod", "pki", "ca.key"))
	if err != nil || bytes.Contains(raw, []byte("PRIVATE KEY")) {
		t.Errorf("the CA key is stored in the clear: %v", err)
	}
}

// TestMutualTLS completes a handshake: a client with the rendered admin
// cert against a server with the rendered apiserver cert, each checking
// the other against the cluster CA, as kubectl and the apiserver do.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	r := request()
	r.Now = time.Now() // the handshake checks validity against the real clock
	b, _, err := Issue(context.Background(), statetest.Open(t), r)
	if err != nil {
		t.Fatal(err)
	}
	pair := func(name string) tls.Certificate {
		m, _ := b.Get(name)
		c, err := tls.X509KeyPair(m.Cert, m.Key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pool := x509.NewCertPool()
	ca, _ := b.Get(CA)
	pool.AppendCertsFromPEM(ca.Cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair(APIServer("prod-controller-0"))},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverSaw := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			serverSaw <- err.Error()
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			serverSaw <- err.Error()
			return
		}
		serverSaw <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "kubernetes.default.svc",
		Certificates: []tls.Certificate{pair(Admin)}, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	conn.Close()
	if cn := <-serverSaw; cn != "kubernetes-admin" {
		t.Fatalf("server saw client %q", cn)
	}
}

func TestOverlayIssuesWithoutPersisting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := statetest.Open(t)
	if _, _, err := Issue(ctx, s.ReadOnly(), request()); err != nil {
		t.Fatal(err)
	}
	if all, err := s.List(ctx, s.Key("prod")+"/"); err != nil || len(all) != 0 {
		t.Fatalf("a read-only issue persisted %d keys (%v)", len(all), err)
	}
}

func TestAdminKubeconfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := statetest.Open(t)
	b, _, err := Issue(ctx, s, request())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.StoreAdminKubeconfig(ctx, s, "prod", "https://203.0.113.20:6443"); err != nil {
		t.Fatal(err)
	}
	raw, _ := s.Get(ctx, s.Key("prod", "kubeconfig"))
	if bytes.Contains(raw, []byte("client-key-data")) {
		t.Fatal("the kubeconfig is stored in the clear")
	}
	kc, err := s.GetSecret(ctx, s.Key("prod", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Clusters []struct {
			Cluster struct {
				Server string `yaml:"server"`
				CA     string `yaml:"certificate-authority-data"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
	}
	if err := yaml.Unmarshal(kc, &parsed); err != nil || len(parsed.Clusters) != 1 {
		t.Fatalf("kubeconfig: %v\n%s", err, kc)
	}
	ca, _ := b.Get(CA)
	got, _ := base64.StdEncoding.DecodeString(parsed.Clusters[0].Cluster.CA)
	if parsed.Clusters[0].Cluster.Server != "https://203.0.113.20:6443" || !bytes.Equal(got, ca.Cert) || !strings.Contains(string(kc), "current-context: admin@prod") {
		t.Errorf("kubeconfig content:\n%s", kc)
	}
}

// TestDamagedMaterial: a key that is not its cert's, or a cert signed by
// another CA, is re-issued; a key sealed under another encryption key is
// an error, never silently replaced.
func TestDamagedMaterial(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := statetest.Open(t)
	if _, _, err := Issue(ctx, s, request()); err != nil {
		t.Fatal(err)
	}
	copyKey := func(from, to string) {
		v, err := s.Get(ctx, s.Key("prod", "pki", from))
		if err != nil {
			t.Fatal(err)
		}
		// Re-seal under the destination's key path, as a mix-up would.
		plain, err := s.Open(s.Key("prod", "pki", from), v)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutSecret(ctx, s.Key("prod", "pki", to), plain); err != nil {
			t.Fatal(err)
		}
	}
	copyKey("admin.key", "scheduler.key")
	_, issued, err := Issue(ctx, s, request())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{Scheduler}, issued); diff != "" {
		t.Errorf("after a key mix-up, issued (-want +got):\n%s", diff)
	}
	// prod's front-proxy client replaced by another cluster's: same
	// subject, a matching key, but signed by a CA of the same name that is
	// not prod's. Only the signature check tells, and it is re-issued.
	other := request()
	other.Cluster = "other"
	if _, _, err := Issue(ctx, s, other); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".crt", ".key"} {
		from, to := s.Key("other", "pki", FrontProxyClient+ext), s.Key("prod", "pki", FrontProxyClient+ext)
		v, err := s.Get(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		if ext == ".key" {
			if v, err = s.Open(from, v); err == nil {
				err = s.PutSecret(ctx, to, v)
			}
		} else {
			err = s.Put(ctx, to, v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	_, issued, err = Issue(ctx, s, request())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{FrontProxyClient}, issued); diff != "" {
		t.Errorf("after a cert of another CA, issued (-want +got):\n%s", diff)
	}
	// A raw sealed value moved to another path does not open: an error.
	raw, _ := s.Get(ctx, s.Key("prod", "pki", "admin.key"))
	if err := s.Put(ctx, s.Key("prod", "pki", "scheduler.key"), raw); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Issue(ctx, s, request()); !errors.Is(err, state.ErrSealed) {
		t.Errorf("a key that does not open: %v, want ErrSealed", err)
	}
}

// TestWithProxy: the proxy reaches client-go's own kubeconfig type, the
// rest unchanged; a URL kubectl cannot dial through is refused.
func TestWithProxy(t *testing.T) {
	b, _, err := Issue(context.Background(), statetest.Open(t), request())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := b.Kubeconfig("prod", Admin, "https://203.0.113.10:6443")
	if err != nil {
		t.Fatal(err)
	}
	got, err := WithProxy(kc, "socks5://127.0.0.1:1080")
	if err != nil {
		t.Fatal(err)
	}
	var before, after clientcmdv1.Config
	for _, c := range []struct {
		b   []byte
		out *clientcmdv1.Config
	}{{kc, &before}, {got, &after}} {
		if err := sigsyaml.UnmarshalStrict(c.b, c.out); err != nil {
			t.Fatal(err)
		}
	}
	if p := after.Clusters[0].Cluster.ProxyURL; p != "socks5://127.0.0.1:1080" {
		t.Errorf("proxy-url %q", p)
	}
	after.Clusters[0].Cluster.ProxyURL = ""
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("the kubeconfig changed beside its proxy (-before +after):\n%s", d)
	}
	for _, bad := range []string{"127.0.0.1:1080", "ftp://127.0.0.1", "socks5://", "::"} {
		if _, err := WithProxy(kc, bad); err == nil {
			t.Errorf("proxy %q: accepted", bad)
		}
	}
}

// pemBlocks returns the types of the PEM blocks in b, in order.
func pemBlocks(b []byte) []string {
	var out []string
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return out
		}
		out = append(out, block.Type)
	}
}

// handshake reports whether a client presenting client and trusting
// clientTrust completes mutual TLS with a server presenting server and
// trusting serverTrust, as a kubelet and an API server do.
func handshake(t *testing.T, client Material, clientTrust []byte, server Material, serverTrust []byte) error {
	t.Helper()
	pair := func(m Material) tls.Certificate {
		c, err := tls.X509KeyPair(m.Cert, m.Key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pool := func(b []byte) *x509.CertPool {
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(b) {
			t.Fatal("no certificate to trust")
		}
		return p
	}
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{pair(server)}, ClientCAs: pool(serverTrust),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	cl := tls.Client(c, &tls.Config{RootCAs: pool(clientTrust), ServerName: "kubernetes.default.svc",
		Certificates: []tls.Certificate{pair(client)}, MinVersion: tls.VersionTLS13})
	if err := cl.Handshake(); err != nil {
		c.Close() // the server's handshake ends too
		<-done
		return err
	}
	// TLS 1.3: the client is done before the server checks its
	// certificate; read what the server says (its alert, on a refusal).
	go func() { _, _ = io.Copy(io.Discard, cl) }()
	return <-done
}

// rotator issues the request's PKI on s at a rotation, now (the
// handshakes check validity against the real clock).
func rotator(t *testing.T, s state.KV) func(Rotation) (*Bundle, []string) {
	return func(r Rotation) (*Bundle, []string) {
		t.Helper()
		req := request()
		req.Now, req.Rotation = time.Now(), r
		b, issued, err := Issue(context.Background(), s, req)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		return b, issued
	}
}

// TestRotation walks a CA rotation's three phases on one store, as three
// commits would: what each issues, what each trusts, that a host rolled
// to a phase and one not rolled yet still talk (the point of the
// phases), and that the old generation is gone at the end.
func TestRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := statetest.Open(t)
	issueAt := rotator(t, s)
	leaves := []string{APIServerEtcdClient, APIServerKubelet, FrontProxyClient, ControllerManager, Scheduler, Admin, EtcdOPKEClient, EtcdBackupClient}
	for _, h := range request().Controllers {
		leaves = append(leaves, HostMaterial(h.Name)...)
	}
	leaves = append(leaves, Kubelet("prod-general-0"))
	get := func(b *Bundle, name string) Material {
		m, ok := b.Get(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		return m
	}
	first, _ := issueAt(Rotation{})
	for _, name := range rotated {
		if got := pemBlocks(first.Trust(name)); len(got) != 1 {
			t.Errorf("generation 1 trusts %d of %s", len(got), name)
		}
	}

	trust, issued := issueAt(Rotation{Trusted: []int{1, 2}}) // trust
	if diff := cmp.Diff([]string{"ca.2", "etcd-ca.2", "front-proxy-ca.2", "sa.2"}, issued); diff != "" {
		t.Errorf("trust issues the new CAs and key only (-want +got):\n%s", diff)
	}
	for _, name := range slices.Concat([]string{CA, EtcdCA, FrontProxyCA, ServiceAccount}, leaves) {
		if !bytes.Equal(get(trust, name).Cert, get(first, name).Cert) {
			t.Errorf("trust: %s changed: the old generation still signs", name)
		}
	}
	for _, name := range rotated {
		want := []string{"CERTIFICATE", "CERTIFICATE"}
		if name == ServiceAccount {
			want = []string{"PUBLIC KEY", "PUBLIC KEY"}
		}
		if diff := cmp.Diff(want, pemBlocks(trust.Trust(name))); diff != "" {
			t.Errorf("trust: %s trusts (-want +got):\n%s", name, diff)
		}
		if !bytes.HasPrefix(trust.Trust(name), get(first, name).Cert) {
			t.Errorf("trust: %s's bundle does not start with the signing generation", name)
		}
	}

	reissue, issued := issueAt(Rotation{Trusted: []int{2, 1}}) // reissue
	if diff := cmp.Diff(slices.Sorted(slices.Values(leaves)), slices.Sorted(slices.Values(issued))); diff != "" {
		t.Errorf("reissue issues every leaf, nothing else (-want +got):\n%s", diff)
	}
	newCA := cert(t, reissue, CA)
	if newCA.Subject.CommonName != "kubernetes.2" || bytes.Equal(get(reissue, CA).Cert, get(first, CA).Cert) {
		t.Errorf("reissue: the signing CA is %q, want generation 2", newCA.Subject.CommonName)
	}
	if bytes.Equal(get(reissue, ServiceAccount).Key, get(trust, ServiceAccount).Key) {
		t.Error("reissue: the service account signing key is still generation 1's")
	}
	for _, name := range leaves {
		ca := CA
		if strings.HasPrefix(name, "etcd-") || name == APIServerEtcdClient {
			ca = EtcdCA
		} else if name == FrontProxyClient {
			ca = FrontProxyCA
		}
		if err := cert(t, reissue, name).CheckSignatureFrom(cert(t, reissue, ca)); err != nil {
			t.Errorf("reissue: %s is not signed by %s generation 2: %v", name, ca, err)
		}
	}
	// Mid-roll: a host rolled to reissue and one still at trust talk
	// both ways, each trusting both generations.
	oldKubelet, newServer := get(trust, Kubelet("prod-general-0")), get(reissue, APIServer("prod-controller-0"))
	if err := handshake(t, oldKubelet, trust.Trust(CA), newServer, reissue.Trust(CA)); err != nil {
		t.Errorf("a kubelet at trust and an API server at reissue: %v", err)
	}
	if err := handshake(t, get(reissue, Admin), reissue.Trust(CA), get(trust, APIServer("prod-controller-1")), trust.Trust(CA)); err != nil {
		t.Errorf("a client at reissue and an API server at trust: %v", err)
	}
	loaded, err := Load(ctx, s, "prod", CA, EtcdCA, Admin)
	if err != nil {
		t.Fatal(err)
	}
	if got := pemBlocks(loaded.Trust(EtcdCA)); len(got) != 2 {
		t.Errorf("Load mid-rotation trusts %d etcd CAs, want both", len(got))
	}

	done, issued := issueAt(Rotation{Trusted: []int{2}}) // complete
	if len(issued) != 0 {
		t.Errorf("complete issues nothing, issued %v", issued)
	}
	for _, name := range rotated {
		if !bytes.Equal(done.Trust(name), get(reissue, name).Cert) {
			t.Errorf("complete: %s trusts more than generation 2", name)
		}
	}
	held, err := s.List(ctx, s.Key("prod", "pki")+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key", "etcd-ca.key", "front-proxy-ca.crt", "sa.key", "sa.pub"} {
		if _, ok := held[s.Key("prod", "pki", f)]; ok {
			t.Errorf("complete: generation 1's %s is still in the store", f)
		}
	}
	if _, ok := held[s.Key("prod", "pki", "ca.2.key")]; !ok {
		t.Error("complete: generation 2's CA key is not in the store")
	}
	if err := handshake(t, oldKubelet, trust.Trust(CA), get(done, APIServer("prod-controller-0")), done.Trust(CA)); err == nil {
		t.Error("complete: a client certificate of generation 1 is still accepted")
	}
	loaded, err = Load(ctx, s, "prod", CA)
	if err != nil || !bytes.Equal(loaded.Trust(CA), get(done, CA).Cert) {
		t.Errorf("Load after the rotation: %v", err)
	}
	again, issued := issueAt(Rotation{Trusted: []int{2}})
	if len(issued) != 0 || !again.Equal(done) {
		t.Errorf("an issue after the rotation: issued %v, identical %v", issued, again.Equal(done))
	}
}

// TestRotationAbandoned goes back from trust to the generation before:
// the new CAs are deleted, nothing was signed by them, nothing reissued.
func TestRotationAbandoned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := statetest.Open(t)
	issueAt := rotator(t, s)
	first, _ := issueAt(Rotation{})
	issueAt(Rotation{Trusted: []int{1, 2}}) // trust
	back, issued := issueAt(Rotation{Trusted: []int{1}})
	if len(issued) != 0 || !back.Equal(first) {
		t.Errorf("abandoned: issued %v, back to the first bundle %v", issued, back.Equal(first))
	}
	held, err := s.List(ctx, s.Key("prod", "pki")+"/")
	if err != nil {
		t.Fatal(err)
	}
	for k := range held {
		if strings.Contains(k, ".2.") {
			t.Errorf("abandoned: %s is still in the store", k)
		}
	}
}

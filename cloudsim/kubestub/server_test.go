package kubestub

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/discovery"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedpolicyv1 "k8s.io/client-go/kubernetes/typed/policy/v1"
	"k8s.io/client-go/rest"

	"opke.dev/opke/internal/kubecontract"
)

// memBackend is a cluster of two nodes in memory.
type memBackend struct {
	mu      sync.Mutex
	objs    Objects
	nodes   []Node
	unready error
}

func (b *memBackend) Nodes() []Node { return b.nodes }
func (b *memBackend) Ready() error  { return b.unready }
func (b *memBackend) View(fn func(*Objects)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn(&b.objs)
}

func (b *memBackend) Update(fn func(*Objects) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fn(&b.objs)
}

// ca is a CA that signs leaf certificates for the tests.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf returns a certificate and key in PEM for a server (with ips) or a client.
func (c *ca) leaf(t *testing.T, cn string, ips ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: []string{"system:masters"}},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

type fixture struct {
	b       *memBackend
	srv     *Server
	cluster *ca
}

func start(t *testing.T) *fixture {
	t.Helper()
	cluster := newCA(t, "kubernetes")
	certPEM, keyPEM := cluster.leaf(t, "kube-apiserver", "127.0.0.1")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cluster.cert)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &memBackend{
		nodes: []Node{
			{Name: "prod-controller-0", InternalIP: "192.168.10.10", Ready: true, KubeletVersion: "v1.35.1", Since: time.Now().Add(-time.Hour)},
			{Name: "prod-default-0", InternalIP: "192.168.10.16", Ready: false, KubeletVersion: "v1.35.1"},
		},
		objs: Objects{
			// Both kubelets registered; the fixture's third node,
			// prod-default-1, registered and its host is gone.
			Nodes: map[string]Node{
				"prod-controller-0": {Name: "prod-controller-0", InternalIP: "192.168.10.10", KubeletVersion: "v1.35.1"},
				"prod-default-0":    {Name: "prod-default-0", InternalIP: "192.168.10.16", KubeletVersion: "v1.35.1"},
				"prod-default-1":    {Name: "prod-default-1", InternalIP: "192.168.10.17", KubeletVersion: "v1.35.0"},
			},
			Pods: []Pod{
				{Namespace: "default", Name: "web-1", Node: "prod-default-0", Labels: map[string]string{"app": "web"}},
				{Namespace: "default", Name: "web-2", Node: "prod-default-0", Labels: map[string]string{"app": "web"}},
				{Namespace: "kube-system", Name: "coredns-1", Node: "prod-controller-0", Labels: map[string]string{"k8s-app": "kube-dns"}},
			},
			Budgets: []Budget{{Namespace: "default", Name: "web", Selector: map[string]string{"app": "web"}, DisruptionsAllowed: 1}},
		},
	}
	srv := Serve(ln, Config{Version: "v1.35.1", Certificate: cert, ClientCAs: pool, Backend: b})
	t.Cleanup(func() { srv.Close() })
	return &fixture{b: b, srv: srv, cluster: cluster}
}

// restConfig is a client of the stub with a client cert from signer.
func (f *fixture) restConfig(t *testing.T, signer *ca) *rest.Config {
	t.Helper()
	certPEM, keyPEM := signer.leaf(t, "kubernetes-admin")
	return &rest.Config{Host: "https://" + f.srv.Addr(), TLSClientConfig: rest.TLSClientConfig{CAData: f.cluster.pem, CertData: certPEM, KeyData: keyPEM}}
}

func TestVersionAndHealthWithClientGo(t *testing.T) {
	t.Parallel()
	f := start(t)
	cfg := f.restConfig(t, f.cluster)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.35.1" || v.Major != "1" || v.Minor != "35" {
		t.Errorf("version: %+v", v)
	}
	ctx := context.Background()
	body, err := dc.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		t.Errorf("/readyz: %q %v", body, err)
	}
	f.b.unready = errors.New("etcd down")
	if _, err := dc.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err == nil {
		t.Error("/readyz answered ok with etcd down")
	}
	if body, err := dc.RESTClient().Get().AbsPath("/livez").DoRaw(ctx); err != nil || string(body) != "ok" {
		t.Errorf("/livez: %q %v", body, err)
	}
}

// TestClientCertificates: the stub requires a client certificate from the
// cluster's CA, and serves a certificate clients verify.
func TestClientCertificates(t *testing.T) {
	t.Parallel()
	f := start(t)
	other := newCA(t, "kubernetes")
	cases := []struct {
		name string
		cfg  func() *rest.Config
		ok   bool
	}{
		{"the cluster's CA", func() *rest.Config { return f.restConfig(t, f.cluster) }, true},
		{"no client certificate", func() *rest.Config {
			return &rest.Config{Host: "https://" + f.srv.Addr(), TLSClientConfig: rest.TLSClientConfig{CAData: f.cluster.pem}}
		}, false},
		{"a client certificate of another CA", func() *rest.Config { return f.restConfig(t, other) }, false},
		{"the server verified against another CA", func() *rest.Config {
			c := f.restConfig(t, f.cluster)
			c.CAData = other.pem
			return c
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dc, err := discovery.NewDiscoveryClientForConfig(tc.cfg())
			if err != nil {
				t.Fatal(err)
			}
			_, err = dc.ServerVersion()
			if tc.ok != (err == nil) {
				t.Errorf("ServerVersion: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestNodesCordonPodsAndEvictions(t *testing.T) {
	t.Parallel()
	f := start(t)
	cfg := f.restConfig(t, f.cluster)
	core, err := typedcorev1.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := typedpolicyv1.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// No one labels a control-plane node but a server-side apply (OPKE's,
	// as kubeadm's mark-control-plane): client-go's Apply is taken.
	if _, err := core.Nodes().Apply(ctx, corev1ac.Node("prod-controller-0").WithLabels(map[string]string{"node-role.kubernetes.io/control-plane": ""}),
		metav1.ApplyOptions{FieldManager: "opke", Force: true}); err != nil {
		t.Fatal(err)
	}
	nodes, err := core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type nodeView struct {
		Name, Kubelet string
		Ready         corev1.ConditionStatus
		ControlPlane  bool
	}
	var got []nodeView
	for _, n := range nodes.Items {
		_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
		got = append(got, nodeView{n.Name, n.Status.NodeInfo.KubeletVersion, n.Status.Conditions[0].Status, cp})
	}
	want := []nodeView{{"prod-controller-0", "v1.35.1", corev1.ConditionTrue, true}, {"prod-default-0", "v1.35.1", corev1.ConditionFalse, false},
		{"prod-default-1", "v1.35.0", corev1.ConditionUnknown, false}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("nodes (-want +got):\n%s", d)
	}
	if _, err := core.Nodes().Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get a missing node: %v, want NotFound", err)
	}

	// Cordon as kubectl does (strategic merge), uncordon with a JSON patch.
	n, err := core.Nodes().Patch(ctx, "prod-default-0", types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable || len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != corev1.TaintNodeUnschedulable {
		t.Errorf("cordoned node: %+v", n.Spec)
	}
	if n, err := core.Nodes().Get(ctx, "prod-default-0", metav1.GetOptions{}); err != nil || !n.Spec.Unschedulable {
		t.Errorf("the cordon did not stay: %+v %v", n.Spec, err)
	}
	n, err = core.Nodes().Patch(ctx, "prod-default-0", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/unschedulable","value":false}]`), metav1.PatchOptions{})
	if err != nil || n.Spec.Unschedulable {
		t.Errorf("uncordon: %+v %v", n.Spec, err)
	}
	if _, err := core.Nodes().Patch(ctx, "prod-default-0", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a patch of labels: %v, want Invalid (the stub models spec.unschedulable only)", err)
	}

	// Pods by node, as drain lists them.
	pods, err := core.Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=prod-default-0"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Namespace+"/"+p.Name+"@"+p.Spec.NodeName)
	}
	if d := cmp.Diff([]string{"default/web-1@prod-default-0", "default/web-2@prod-default-0"}, names); d != "" {
		t.Errorf("pods on prod-default-0 (-want +got):\n%s", d)
	}
	if _, err := core.Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Running"}); !apierrors.IsBadRequest(err) {
		t.Errorf("an unsupported field selector: %v, want BadRequest", err)
	}

	// The budget allows one disruption: web-1 goes, web-2 is refused with 429.
	evict := func(name string) error {
		return policy.Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
	}
	if err := evict("web-1"); err != nil {
		t.Fatalf("evict web-1: %v", err)
	}
	if _, err := core.Pods("default").Get(ctx, "web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("web-1 after its eviction: %v, want NotFound", err)
	}
	err = evict("web-2")
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evict web-2 past the budget: %v, want 429", err)
	}
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil || len(se.Status().Details.Causes) != 1 ||
		se.Status().Details.Causes[0].Type != policyv1.DisruptionBudgetCause || !strings.Contains(se.Status().Details.Causes[0].Message, "disruption budget web ") {
		t.Errorf("the 429 does not name the budget: %+v", err)
	}
	if err := evict("nope"); !apierrors.IsNotFound(err) {
		t.Errorf("evict a missing pod: %v, want NotFound", err)
	}
	// The budget opens again (the admin endpoint's job in the simulator).
	_ = f.b.Update(func(o *Objects) error { o.Budgets[0].DisruptionsAllowed = 1; return nil })
	if err := evict("web-2"); err != nil {
		t.Errorf("evict web-2 once the budget allows it: %v", err)
	}
}

// TestNodeObjectsOutliveTheirHosts: a Node object stays when its host is
// gone (Ready Unknown, as the node lifecycle controller marks it), until
// it is deleted through the API; its pods go with it; a host whose
// kubelet runs but whose node was deleted is not listed (its kubelet
// registers again only when it starts again).
func TestNodeObjectsOutliveTheirHosts(t *testing.T) {
	t.Parallel()
	f := start(t)
	core, err := typedcorev1.NewForConfig(f.restConfig(t, f.cluster))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := core.Nodes().Get(ctx, "prod-default-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := n.Status.Conditions[0]; c.Status != corev1.ConditionUnknown || c.Reason != "NodeStatusUnknown" {
		t.Errorf("a node whose host is gone: %+v, want Ready Unknown", c)
	}
	_ = f.b.Update(func(o *Objects) error {
		o.Pods = append(o.Pods, Pod{Namespace: "default", Name: "web-3", Node: "prod-default-1"})
		return nil
	})
	for _, name := range []string{"prod-default-1", "prod-default-0"} {
		if err := core.Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	if err := core.Nodes().Delete(ctx, "prod-default-1", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("delete a deleted node: %v, want NotFound", err)
	}
	nodes, err := core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	// prod-default-0's host still runs: its node stays deleted.
	if d := cmp.Diff([]string{"prod-controller-0"}, names); d != "" {
		t.Errorf("nodes after the deletes (-want +got):\n%s", d)
	}
	if _, err := core.Nodes().Get(ctx, "prod-default-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get a deleted node: %v, want NotFound", err)
	}
	pods, err := core.Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "prod-controller-0" {
			t.Errorf("pod %s/%s on deleted node %s is left", p.Namespace, p.Name, p.Spec.NodeName)
		}
	}
	// Its kubelet starts again: registered again.
	_ = f.b.Update(func(o *Objects) error { o.Register(f.b.nodes[1]); return nil })
	if _, err := core.Nodes().Get(ctx, "prod-default-0", metav1.GetOptions{}); err != nil {
		t.Errorf("a node registered again: %v", err)
	}
}

func TestUnknownPathIsAStatus(t *testing.T) {
	t.Parallel()
	f := start(t)
	cfg := f.restConfig(t, f.cluster)
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Get(cfg.Host + "/apis/apps/v1/widgets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"kind":"Status"`) {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
}

func TestParseManifest(t *testing.T) {
	t.Parallel()
	golden, err := os.ReadFile("../../render/assets/testdata/demo/demo-controller-0/etc/kubernetes/manifests/kube-apiserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	good := string(golden)
	cases := []struct {
		name    string
		data    string
		want    Manifest
		wantErr string
	}{
		{"the rendered manifest", good, Manifest{Version: "v1.35.1", Port: 6443, CertFile: "/etc/kubernetes/pki/apiserver.crt",
			KeyFile: "/etc/kubernetes/pki/apiserver.key", ClientCAFile: "/etc/kubernetes/pki/ca.crt", EtcdServers: []string{"https://192.168.10.10:2379"}}, ""},
		{"another port", strings.Replace(good, "--secure-port=6443", "--secure-port=7443", 1), Manifest{Version: "v1.35.1", Port: 7443,
			CertFile: "/etc/kubernetes/pki/apiserver.crt", KeyFile: "/etc/kubernetes/pki/apiserver.key", ClientCAFile: "/etc/kubernetes/pki/ca.crt",
			EtcdServers: []string{"https://192.168.10.10:2379"}}, ""},
		{"no tag", strings.Replace(good, "kube-apiserver:v1.35.1", "kube-apiserver", 1), Manifest{}, "has no version tag"},
		{"a tag that is no version", strings.Replace(good, "kube-apiserver:v1.35.1", "kube-apiserver:latest", 1), Manifest{}, "has no version tag"},
		{"no client CA", strings.Replace(good, "- --client-ca-file=/etc/kubernetes/pki/ca.crt\n", "", 1), Manifest{}, "--client-ca-file is not set"},
		{"a bad port", strings.Replace(good, "--secure-port=6443", "--secure-port=0", 1), Manifest{}, "--secure-port=0"},
		{"an unknown field", good + "bogus: 1\n", Manifest{}, "unknown field"},
		{"not YAML", "{", Manifest{}, "kube-apiserver manifest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseManifest([]byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrBadManifest) {
					t.Fatalf("err %v, want ErrBadManifest with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestEvictDecrementsEveryCoveringBudget(t *testing.T) {
	t.Parallel()
	o := Objects{
		Pods: []Pod{{Namespace: "a", Name: "p", Labels: map[string]string{"app": "x", "tier": "1"}}, {Namespace: "b", Name: "p"}},
		Budgets: []Budget{
			{Namespace: "a", Name: "by-app", Selector: map[string]string{"app": "x"}, DisruptionsAllowed: 2},
			{Namespace: "a", Name: "everything", DisruptionsAllowed: 1},
			{Namespace: "a", Name: "other", Selector: map[string]string{"app": "y"}, DisruptionsAllowed: 0},
			{Namespace: "b", Name: "closed", DisruptionsAllowed: 0},
		},
	}
	before := o.Clone()
	if err := o.Evict("a", "p"); err != nil {
		t.Fatal(err)
	}
	if got := []int{o.Budgets[0].DisruptionsAllowed, o.Budgets[1].DisruptionsAllowed, o.Budgets[2].DisruptionsAllowed}; !cmp.Equal(got, []int{1, 0, 0}) {
		t.Errorf("budgets after the eviction: %v", got)
	}
	var be *BudgetError
	if err := o.Evict("b", "p"); !errors.As(err, &be) || be.Budget != "closed" {
		t.Errorf("evict under a closed budget: %v", err)
	}
	if len(before.Pods) != 2 || before.Budgets[0].DisruptionsAllowed != 2 {
		t.Error("Clone shares state with the original")
	}
}

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.35.1": "v1.35.1",
		"localhost:5000/kubelet:v1.34.4":         "v1.34.4",
		"localhost:5000/kubelet":                 "",
		"kubelet":                                "",
	} {
		if got := ImageTag(image); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", image, got, want)
		}
	}
}

// TestContract: the stand-in holds to the contract make e2e holds a real
// API server to (internal/kubecontract).
func TestContract(t *testing.T) {
	t.Parallel()
	f := start(t)
	_ = f.b.Update(func(o *Objects) error {
		o.Budgets[0].DisruptionsAllowed, o.Budgets[0].DesiredHealthy, o.Budgets[0].CurrentHealthy = 0, 2, 2
		return nil
	})
	client, err := rest.HTTPClientFor(f.restConfig(t, f.cluster))
	if err != nil {
		t.Fatal(err)
	}
	// A kubelet's mirror of its static pod, as the simulator's keep them.
	manifest := []byte(`apiVersion: v1
kind: Pod
metadata:
  name: kube-scheduler
  namespace: kube-system
  annotations:
    opke.dev/inputs-sha256: "0123"
spec:
  containers:
    - name: kube-scheduler
      image: registry.k8s.io/kube-scheduler:v1.35.1
      command: [kube-scheduler, --leader-elect=true]
`)
	mirror, err := StaticPod(manifest, "prod-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	_ = f.b.Update(func(o *Objects) error {
		o.SetMirrors("prod-controller-0", []Pod{mirror})
		return nil
	})
	kubecontract.Run(t, kubecontract.Cluster{Client: client, Base: "https://" + f.srv.Addr(), Node: "prod-default-0",
		Namespace: "default", Guarded: "web-1", Budget: "web", Static: manifest, StaticNode: "prod-controller-0", Image: "registry.k8s.io/pause:3.10.1"})
}

// TestDiscoveryRoots: client-go's discovery (as kubectl runs it before
// anything else) finds the core group and every named group the stub
// serves, each at its version.
func TestDiscoveryRoots(t *testing.T) {
	t.Parallel()
	f := start(t)
	dc, err := discovery.NewDiscoveryClientForConfig(f.restConfig(t, f.cluster))
	if err != nil {
		t.Fatal(err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range groups.Groups {
		got = append(got, g.PreferredVersion.GroupVersion)
	}
	want := []string{"v1", "apiextensions.k8s.io/v1", "apiregistration.k8s.io/v1", "apps/v1", "networking.k8s.io/v1", "policy/v1", "rbac.authorization.k8s.io/v1", "storage.k8s.io/v1"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("discovered groups (-want +got):\n%s", d)
	}
	res, err := dc.ServerResourcesForGroupVersion("v1")
	if err != nil || !slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == "nodes" }) {
		t.Errorf("v1's resources: %v %v", res, err)
	}
}

// TestKubeletRegistration: the labels and taints a kubelet registers its
// node with, from its flags as OPKE's kubelet.env passes them.
func TestKubeletRegistration(t *testing.T) {
	t.Parallel()
	labels, taints, err := KubeletRegistration(`"--hostname-override=c-0 --node-labels=opke.dev/pool=controllers,topology.kubernetes.io/zone=nova --register-with-taints=node-role.kubernetes.io/control-plane:NoSchedule,dedicated=gpu:NoExecute"`)
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{"opke.dev/pool": "controllers", "topology.kubernetes.io/zone": "nova"}
	wantTaints := []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoExecute}}
	if d := cmp.Diff(wantLabels, labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantTaints, taints); d != "" {
		t.Errorf("taints (-want +got):\n%s", d)
	}
	for _, bad := range []string{"--node-labels=novalue", "--register-with-taints=key", "--register-with-taints=key:Sometimes"} {
		if _, _, err := KubeletRegistration(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

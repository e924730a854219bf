package cloudsim

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	"google.golang.org/grpc"

	"opke.dev/opke/cloudsim/kubestub"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// controlPlane is the example prod cluster's control plane created in the
// simulator through gophercloud: a gateway with a floating IP, three
// controllers at their deterministic addresses, and the API load balancer
// with a floating IP, all from one render.
type controlPlane struct {
	out         *render.Output
	signer      ssh.Signer
	gatewayFIP  string
	apiFIP      string
	gatewayID   string
	controllers map[string]string // name -> server id
	ips         map[string]string // name -> fixed IP
}

func makeControlPlane(t *testing.T, e *env) *controlPlane {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile("../clusters/prod/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := schemas.Parse("clusters/prod/cluster.yaml", data)
	if f.Cluster == nil || len(f.Findings) > 0 {
		t.Fatalf("prod spec: %v", f.Findings)
	}
	store := statetest.Open(t)
	// Certificates are checked by real TLS against the real clock.
	out, err := render.Cluster(ctx, store, f.Cluster, render.Options{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	signer, _, err := pki.SSHKey(ctx, store, "prod")
	if err != nil {
		t.Fatal(err)
	}
	c := e.user
	cidr := f.Cluster.Spec.Network.HostCIDR
	prefix := strings.TrimSuffix(cidr, "0/24")
	net := makeTenantNet(t, c, "prod", cidr)
	sg, err := groups.Create(ctx, c.network, groups.CreateOpts{Name: "prod-gateway"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rules.Create(ctx, c.network, rules.CreateOpts{SecGroupID: sg.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4,
		Protocol: rules.ProtocolTCP, PortRangeMin: 22, PortRangeMax: 22, RemoteIPPrefix: "0.0.0.0/0"}).Extract(); err != nil {
		t.Fatal(err)
	}
	image := imageID(t, c, "flatcar")
	server := func(name, ip string, role schemas.Role, sgs []string) (string, string) {
		t.Helper()
		p, err := ports.Create(ctx, c.network, ports.CreateOpts{NetworkID: net.network, Name: name,
			FixedIPs: []ports.IP{{SubnetID: net.subnet, IPAddress: ip}}, SecurityGroups: &sgs}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		sv, err := servers.Create(ctx, c.compute, servers.CreateOpts{Name: name, FlavorRef: "2", ImageRef: image,
			Networks: []servers.Network{{Port: p.ID}}, UserData: out.UserData[role]}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if sv, err = servers.Get(ctx, c.compute, sv.ID).Extract(); err != nil || sv.Status != "ACTIVE" {
			t.Fatalf("%s: %v %v", name, sv.Status, err)
		}
		return sv.ID, p.ID
	}
	cp := &controlPlane{out: out, signer: signer, controllers: map[string]string{}, ips: map[string]string{}}
	var gwPort string
	cp.gatewayID, gwPort = server("prod-gateway-0", prefix+"6", schemas.RoleGateway, []string{sg.ID})
	fip, err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: net.publicID, PortID: gwPort}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	cp.gatewayFIP = fip.FloatingIP
	for i := range 3 {
		name, ip := fmt.Sprintf("prod-controller-%d", i), fmt.Sprintf("%s%d", prefix, 10+i)
		cp.controllers[name], _ = server(name, ip, schemas.RoleController, []string{})
		cp.ips[name] = ip
	}
	// The API load balancer: VIP .5, TCP 6443 to the three controllers.
	lb, err := loadbalancers.Create(ctx, c.lb, loadbalancers.CreateOpts{Name: "prod-api", VipSubnetID: net.subnet, VipAddress: prefix + "5"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	l, err := listeners.Create(ctx, c.lb, listeners.CreateOpts{Name: "prod-api", Protocol: listeners.ProtocolTCP, ProtocolPort: 6443, LoadbalancerID: lb.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pools.Create(ctx, c.lb, pools.CreateOpts{Name: "prod-api", Protocol: pools.ProtocolTCP, LBMethod: pools.LBMethodRoundRobin, ListenerID: l.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	for name, ip := range cp.ips {
		if _, err := pools.CreateMember(ctx, c.lb, pool.ID, pools.CreateMemberOpts{Name: name, Address: ip, ProtocolPort: 6443, SubnetID: net.subnet}).Extract(); err != nil {
			t.Fatal(err)
		}
	}
	apiFIP, err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: net.publicID, PortID: lb.VipPortID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	cp.apiFIP = apiFIP.FloatingIP
	// The floating IP is known now: render again, as OPKE's host phase
	// does. It joins the API servers' SANs; user_data stays as it was.
	again, err := render.Cluster(ctx, store, f.Cluster, render.Options{Now: time.Now(), APIFloatingIP: netip.MustParseAddr(cp.apiFIP)})
	if err != nil {
		t.Fatal(err)
	}
	for role, ud := range out.UserData {
		if string(again.UserData[role]) != string(ud) {
			t.Errorf("the API's floating IP changed the %s user_data", role)
		}
	}
	cp.out = again
	return cp
}

// gateway connects to the gateway through the edge with its pinned host key.
func (cp *controlPlane) gateway(t *testing.T, e *env) *ssh.Client {
	t.Helper()
	gw, err := sshx.Dial(context.Background(), sshx.Dialer{Proxy: e.sim.Edge()}, cp.gatewayFIP+":22",
		sshx.Auth{User: "core", Signer: cp.signer, HostKeys: pinnedKeys(t, e, cp.gatewayID)})
	if err != nil {
		t.Fatalf("ssh to the gateway: %v", err)
	}
	t.Cleanup(func() { gw.Close() })
	return gw
}

// host connects to a controller through the gateway.
func (cp *controlPlane) host(t *testing.T, e *env, gw *ssh.Client, name string) *ssh.Client {
	t.Helper()
	h, err := sshx.Jump(context.Background(), gw, cp.ips[name]+":22",
		sshx.Auth{User: "core", Signer: cp.signer, HostKeys: pinnedKeys(t, e, cp.controllers[name])})
	if err != nil {
		t.Fatalf("ssh to %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// push uploads files over SFTP with their modes.
func push(t *testing.T, h *ssh.Client, files []assets.File) {
	t.Helper()
	// As OPKE pushes them: core is unprivileged, root writes behind sudo.
	for _, f := range files {
		cmd := fmt.Sprintf("sudo -n install -D -m %04o -- /dev/stdin %s", f.Mode.Perm(), f.Path)
		if _, err := sshx.RunInput(context.Background(), h, cmd, f.Data); err != nil {
			t.Fatalf("push %s: %v", f.Path, err)
		}
	}
}

func run(t *testing.T, h *ssh.Client, cmd string) string {
	t.Helper()
	out, err := sshx.Run(context.Background(), h, cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return string(out)
}

// etcdClient is OPKE's etcd client: the etcd-opke-client certificate, the
// three members' fixed IPs, every connection through the gateway.
func etcdClient(t *testing.T, gw *ssh.Client, ca, cert pki.Material, endpoints ...string) *clientv3.Client {
	t.Helper()
	pair, err := tls.X509KeyPair(cert.Cert, cert.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Cert)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return gw.DialContext(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// apiGet is a GET of the API server over TLS with a client certificate,
// through dial.
func apiGet(dial func(ctx context.Context, network, addr string) (net.Conn, error), ca, client pki.Material, url string) (int, string, error) {
	return apiDo(dial, ca, client, http.MethodGet, url, "")
}

func apiDo(dial func(ctx context.Context, network, addr string) (net.Conn, error), ca, client pki.Material, method, url, body string) (int, string, error) {
	pair, err := tls.X509KeyPair(client.Cert, client.Key)
	if err != nil {
		return 0, "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Cert)
	tr := &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func material(t *testing.T, b *pki.Bundle, name string) pki.Material {
	t.Helper()
	m, ok := b.Get(name)
	if !ok {
		t.Fatalf("no %s in the bundle", name)
	}
	return m
}

// TestControllersRunEtcdAndTheAPIServer: three controllers given rendered
// certificates over SFTP form a healthy three-member etcd reachable
// through the gateway, and answer /readyz and /version over TLS at their
// fixed IPs, the load balancer's VIP and its floating IP; wrong CAs and a
// mismatched key fail; all of it survives a simulator restart.
func TestControllersRunEtcdAndTheAPIServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Debian's ignition (CI runs as root) writes core's home as uid 500.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := startEnv(t, Options{StateDir: dir})
	cp := makeControlPlane(t, e)
	ctx := context.Background()
	gw := cp.gateway(t, e)
	names := []string{"prod-controller-0", "prod-controller-1", "prod-controller-2"}
	var endpoints []string
	for _, name := range names {
		endpoints = append(endpoints, "https://"+cp.ips[name]+":2379")
	}

	// Before etcd-member starts, nothing answers on 2379.
	if _, err := gw.DialContext(ctx, "tcp", cp.ips[names[0]]+":2379"); err == nil {
		t.Error("port 2379 answered before etcd-member started")
	}
	for _, name := range names {
		h := cp.host(t, e, gw, name)
		hf, ok := cp.out.Assets.Host(name)
		if !ok {
			t.Fatalf("no assets for %s", name)
		}
		push(t, h, hf.Files)
		run(t, h, "sudo -n systemctl daemon-reload")
		run(t, h, "sudo -n systemctl start etcd-member")
		if got := run(t, h, "systemctl is-active etcd-member"); got != "active\n" {
			t.Errorf("%s: etcd-member is %q", name, got)
		}
	}

	etcdCA := material(t, cp.out.PKI, pki.EtcdCA)
	opke := material(t, cp.out.PKI, pki.EtcdOPKEClient)
	checkEtcd := func(gw *ssh.Client, wantValue string) {
		t.Helper()
		cli := etcdClient(t, gw, etcdCA, opke, endpoints...)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// A member publishes its client URLs once it joined: wait for all
		// three, as a health gate does.
		var members []string
		for {
			ml, err := cli.MemberList(cctx)
			if err != nil {
				t.Fatalf("member list: %v", err)
			}
			members = members[:0]
			for _, m := range ml.Members {
				members = append(members, m.Name+" "+strings.Join(m.ClientURLs, ","))
			}
			slices.Sort(members)
			if !slices.ContainsFunc(members, func(m string) bool { return strings.HasSuffix(m, " ") }) || cctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		want := []string{"prod-controller-0 https://192.168.20.10:2379", "prod-controller-1 https://192.168.20.11:2379", "prod-controller-2 https://192.168.20.12:2379"}
		if d := cmp.Diff(want, members); d != "" {
			t.Errorf("members (-want +got):\n%s", d)
		}
		// Every member answers at its own fixed IP and follows one leader.
		leaders := map[uint64]bool{}
		for _, ep := range endpoints {
			st, err := cli.Status(cctx, ep)
			if err != nil {
				t.Fatalf("status of %s: %v", ep, err)
			}
			leaders[st.Leader] = true
		}
		if len(leaders) != 1 || leaders[0] {
			t.Errorf("leaders seen by the members: %v, want one", leaders)
		}
		if wantValue == "" {
			if _, err := cli.Put(cctx, "/opke-test/k", "v"); err != nil {
				t.Fatalf("put: %v", err)
			}
			wantValue = "v"
		}
		// A read from the third member alone sees the write.
		one := etcdClient(t, gw, etcdCA, opke, endpoints[2])
		resp, err := one.Get(cctx, "/opke-test/k")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != wantValue {
			t.Fatalf("get from %s: %v %v", endpoints[2], resp, err)
		}
	}
	checkEtcd(gw, "")

	// Wrong trust fails: the cluster CA instead of the etcd CA, and a
	// client certificate of the cluster CA instead of the etcd CA.
	k8sCA := material(t, cp.out.PKI, pki.CA)
	admin := material(t, cp.out.PKI, pki.Admin)
	for _, tc := range []struct {
		name     string
		ca, cert pki.Material
	}{
		{"the server checked against another CA", k8sCA, opke},
		{"a client certificate of another CA", etcdCA, admin},
	} {
		cli := etcdClient(t, gw, tc.ca, tc.cert, endpoints[0])
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(cctx, "/opke-test/k")
		cancel()
		if err == nil {
			t.Errorf("%s: the etcd client succeeded", tc.name)
		}
	}

	// The kubelet starts the kube-apiserver static pod.
	for _, name := range names {
		run(t, cp.host(t, e, gw, name), "sudo -n systemctl start kubelet")
	}
	version := cp.out.Assets.Version
	edge := sshx.Dialer{Proxy: e.sim.Edge()}
	checkAPI := func(gw *ssh.Client) {
		t.Helper()
		for _, tc := range []struct {
			name string
			dial func(ctx context.Context, network, addr string) (net.Conn, error)
			host string
		}{
			{"controller-0 through the gateway", gw.DialContext, cp.ips[names[0]]},
			{"controller-2 through the gateway", gw.DialContext, cp.ips[names[2]]},
			{"the VIP through the gateway", gw.DialContext, "192.168.20.5"},
			{"the floating IP through the edge", edge.DialContext, cp.apiFIP},
		} {
			code, body, err := apiGet(tc.dial, k8sCA, admin, "https://"+tc.host+":6443/readyz")
			if err != nil || code != http.StatusOK || body != "ok" {
				t.Errorf("%s: /readyz: %d %q %v", tc.name, code, body, err)
			}
			code, body, err = apiGet(tc.dial, k8sCA, admin, "https://"+tc.host+":6443/version")
			var v struct{ GitVersion string }
			if err != nil || code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || v.GitVersion != version {
				t.Errorf("%s: /version: %d %q %v, want %s", tc.name, code, body, err, version)
			}
		}
		// The nodes are the three controllers, Ready, at their version.
		code, body, err := apiGet(gw.DialContext, k8sCA, admin, "https://192.168.20.5:6443/api/v1/nodes")
		if err != nil || code != http.StatusOK {
			t.Fatalf("nodes: %d %v", code, err)
		}
		for _, name := range names {
			if !strings.Contains(body, `"name":"`+name+`"`) || !strings.Contains(body, `"kubeletVersion":"`+version+`"`) {
				t.Errorf("node %s missing or not at %s: %s", name, version, body)
			}
		}
	}
	checkAPI(gw)
	// Ready while etcd has quorum through any of --etcd-servers, as a real
	// API server's etcd check: one member stopped leaves every API server
	// ready, a second takes quorum and readiness away.
	readyz := func() int {
		code, _, err := apiGet(gw.DialContext, k8sCA, admin, "https://192.168.20.10:6443/readyz")
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	waitCode := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); readyz() != want; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("controller-0's /readyz is %d, want %d", readyz(), want)
			}
		}
	}
	run(t, cp.host(t, e, gw, names[2]), "sudo -n systemctl stop etcd-member")
	time.Sleep(2 * time.Second) // past an election
	waitCode(http.StatusOK)
	run(t, cp.host(t, e, gw, names[1]), "sudo -n systemctl stop etcd-member")
	waitCode(http.StatusInternalServerError)
	for _, name := range names[1:] {
		run(t, cp.host(t, e, gw, name), "sudo -n systemctl start etcd-member")
	}
	waitCode(http.StatusOK)
	checkAPI(gw)
	// The API refuses a client certificate of the etcd CA; a client that
	// trusts another CA refuses the API.
	if _, _, err := apiGet(gw.DialContext, k8sCA, opke, "https://192.168.20.10:6443/readyz"); err == nil {
		t.Error("the API accepted a client certificate of the etcd CA")
	}
	if _, _, err := apiGet(gw.DialContext, etcdCA, admin, "https://192.168.20.10:6443/readyz"); err == nil {
		t.Error("the API's certificate verified against the etcd CA")
	}
	// The edge does not route 6443 to the gateway (its group lets SSH in only).
	if _, _, err := apiGet(edge.DialContext, k8sCA, admin, "https://"+cp.gatewayFIP+":6443/readyz"); err == nil {
		t.Error("the edge routed 6443 to the gateway")
	}

	// Pods and budgets set through the admin endpoint are the API's: a
	// drain through the load balancer lists the node's pods and is refused
	// by a closed budget with 429, then evicts once it opens.
	objects := `{"pods": [{"namespace": "default", "name": "web", "node": "prod-controller-1", "labels": {"app": "web"}}],
		"budgets": [{"namespace": "default", "name": "web", "selector": {"app": "web"}, "disruptionsAllowed": 0}]}`
	if code := adminCall(t, http.MethodPut, e.sim.AdminURL()+"/kube/prod-controller-0", objects); code != http.StatusOK {
		t.Fatalf("PUT /kube: %d", code)
	}
	if code := adminCall(t, http.MethodPut, e.sim.AdminURL()+"/kube/nope", objects); code != http.StatusNotFound {
		t.Errorf("PUT /kube of a missing server: %d, want 404", code)
	}
	vip := "https://192.168.20.5:6443"
	code, body, err := apiGet(gw.DialContext, k8sCA, admin, vip+"/api/v1/pods?fieldSelector=spec.nodeName=prod-controller-1")
	if err != nil || code != http.StatusOK || !strings.Contains(body, `"name":"web"`) {
		t.Errorf("pods on prod-controller-1: %d %s %v", code, body, err)
	}
	eviction := `{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"namespace": "default", "name": "web"}}`
	code, body, err = apiDo(gw.DialContext, k8sCA, admin, http.MethodPost, vip+"/api/v1/namespaces/default/pods/web/eviction", eviction)
	if err != nil || code != http.StatusTooManyRequests || !strings.Contains(body, "disruption budget") {
		t.Errorf("eviction under a closed budget: %d %s %v, want 429", code, body, err)
	}
	if code := adminCall(t, http.MethodPut, e.sim.AdminURL()+"/kube/prod-controller-2", strings.Replace(objects, `"disruptionsAllowed": 0`, `"disruptionsAllowed": 1`, 1)); code != http.StatusOK {
		t.Fatalf("PUT /kube: %d", code)
	}
	code, body, err = apiDo(gw.DialContext, k8sCA, admin, http.MethodPost, vip+"/api/v1/namespaces/default/pods/web/eviction", eviction)
	if err != nil || code != http.StatusCreated {
		t.Errorf("eviction under an open budget: %d %s %v, want 201", code, body, err)
	}
	if code, _, _ := apiGet(gw.DialContext, k8sCA, admin, vip+"/api/v1/namespaces/default/pods/web"); code != http.StatusNotFound {
		t.Errorf("the evicted pod: %d, want 404", code)
	}
	if err := e.sim.SetKubeObjects("prod-controller-0", kubestub.Objects{Pods: []kubestub.Pod{{Namespace: "default", Name: "kept", Node: "prod-controller-1"}}}); err != nil {
		t.Fatal(err)
	}

	// A mismatched serving key: the pod does not start, 6443 is refused.
	h2 := cp.host(t, e, gw, names[2])
	other := material(t, cp.out.PKI, pki.APIServer(names[0]))
	push(t, h2, []assets.File{{Path: "/etc/kubernetes/pki/apiserver.key", Mode: 0o600, Data: other.Key}})
	run(t, h2, "sudo -n systemctl restart kubelet")
	if _, _, err := apiGet(gw.DialContext, k8sCA, admin, "https://192.168.20.12:6443/readyz"); err == nil {
		t.Error("the API answered with a key that does not match its certificate")
	}
	events, err := e.sim.HostEvents(names[2])
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; !strings.Contains(last.Error, "kube-apiserver: serving certificate") {
		t.Errorf("the failed pod is not recorded: %+v", last)
	}
	hf, _ := cp.out.Assets.Host(names[2])
	for _, f := range hf.Files {
		if f.Path == "/etc/kubernetes/pki/apiserver.key" {
			push(t, h2, []assets.File{f})
		}
	}
	run(t, h2, "sudo -n systemctl restart kubelet")

	// The kubelet watches its manifests: one written while it runs starts
	// its pod again, and its mirror follows, with no restart of its own.
	for _, f := range hf.Files {
		if f.Path == "/etc/kubernetes/manifests/kube-scheduler.yaml" {
			f.Data = bytes.Replace(f.Data, []byte("--leader-elect=true"), []byte("--leader-elect=false"), 1)
			push(t, h2, []assets.File{f})
		}
	}
	mirror := func() []string {
		o, err := e.sim.KubeObjects(names[2])
		if err != nil {
			t.Fatal(err)
		}
		p, err := o.Pod("kube-system", "kube-scheduler-"+names[2])
		if err != nil || len(p.Containers) == 0 {
			return nil
		}
		return p.Containers[0].Command
	}
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(mirror(), "--leader-elect=false"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the mirror of a manifest written while the kubelet runs: %v", mirror())
		}
	}

	// A restart of the simulator: the members and the API servers come back.
	gw.Close()
	e.restart(t)
	edge = sshx.Dialer{Proxy: e.sim.Edge()}
	gw2 := cp.gateway(t, e)
	checkEtcd(gw2, "v")
	checkAPI(gw2)
	// The pods kept, and the kubelets' mirrors of their static pods, one
	// per manifest, carrying its annotations and flags.
	o, err := e.sim.KubeObjects("prod-controller-2")
	if err != nil {
		t.Fatal(err)
	}
	var kept, mirrors []string
	for _, p := range o.Pods {
		if !p.Mirror {
			kept = append(kept, p.Name)
			continue
		}
		mirrors = append(mirrors, p.Name)
		if p.Annotations["opke.dev/inputs-sha256"] == "" || len(p.Containers) != 1 || len(p.Containers[0].Command) < 2 {
			t.Errorf("mirror pod %s lacks its manifest's annotations or command: %+v", p.Name, p)
		}
	}
	if !slices.Equal(kept, []string{"kept"}) {
		t.Errorf("the pods after a restart: %v", kept)
	}
	for _, ctl := range []string{"prod-controller-0", "prod-controller-1", "prod-controller-2"} {
		for _, pod := range []string{"kube-apiserver-", "kube-controller-manager-", "kube-scheduler-"} {
			if !slices.Contains(mirrors, pod+ctl) {
				t.Errorf("no mirror pod %s%s: %v", pod, ctl, mirrors)
			}
		}
	}
}

// TestLoopbackDialerRefusesOtherAddresses: what the simulator dials for a
// simulated address is a loopback port; the dialer refuses anything else
// before a packet leaves.
func TestLoopbackDialerRefusesOtherAddresses(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cases := []struct {
		name, addr string
		ok         bool
	}{
		{"loopback", ln.Addr().String(), true},
		{"a simulated fixed IP", "192.168.20.10:2379", false},
		{"a floating IP", "203.0.113.12:6443", false},
		{"IPv6 loopback", "[::1]:2379", false},
		{"a name", "localhost:2379", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			c, err := dialLoopback(ctx, tc.addr)
			if c != nil {
				c.Close()
			}
			if tc.ok != (err == nil) {
				t.Errorf("dial %s: %v, want ok=%v", tc.addr, err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, errNotLoopback) {
				t.Errorf("dial %s: %v, want a refusal by the dialer", tc.addr, err)
			}
		})
	}
}

package cloudsim

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/cloudsim/firstboot"
	"opke.dev/opke/render/ignition"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// cluster is a gateway with a floating IP and a worker behind it, created
// through gophercloud as OPKE will create them.
type cluster struct {
	key                ssh.Signer
	raw                ed25519.PrivateKey // the private key behind key
	gatewayIP, fip     string
	gatewayID          string
	workerID, workerIP string
}

func newKey(t *testing.T) ssh.Signer {
	s, _ := newRawKey(t)
	return s
}

func newRawKey(t *testing.T) (ssh.Signer, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, priv
}

func userData(t *testing.T, role schemas.Role, key ssh.Signer) string {
	t.Helper()
	cfg, err := ignition.Render(ignition.Input{Role: role, OPKEPublicKey: string(ssh.MarshalAuthorizedKey(key.PublicKey()))})
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(cfg)
}

func makeCluster(t *testing.T, e *env, name, cidr string) cluster {
	t.Helper()
	ctx := context.Background()
	c := e.user
	key, raw := newRawKey(t)
	net := makeTenantNet(t, c, name, cidr)
	sg, err := groups.Create(ctx, c.network, groups.CreateOpts{Name: name + "-gateway"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rules.Create(ctx, c.network, rules.CreateOpts{SecGroupID: sg.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4,
		Protocol: rules.ProtocolTCP, PortRangeMin: 22, PortRangeMax: 22, RemoteIPPrefix: "0.0.0.0/0"}).Extract(); err != nil {
		t.Fatal(err)
	}
	gwIP := strings.TrimSuffix(cidr, "0/24") + "6"
	gp, err := ports.Create(ctx, c.network, ports.CreateOpts{NetworkID: net.network, Name: name + "-gateway-0",
		FixedIPs: []ports.IP{{SubnetID: net.subnet, IPAddress: gwIP}}, SecurityGroups: &[]string{sg.ID}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	image := imageID(t, c, "flatcar")
	gw, err := servers.Create(ctx, c.compute, servers.CreateOpts{Name: name + "-gateway-0", FlavorRef: "2", ImageRef: image,
		Networks: []servers.Network{{Port: gp.ID}}, UserData: []byte(userData(t, schemas.RoleGateway, key))}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	wk, err := servers.Create(ctx, c.compute, servers.CreateOpts{Name: name + "-default-0", FlavorRef: "2", ImageRef: image,
		Networks: []servers.Network{{UUID: net.network}}, UserData: []byte(userData(t, schemas.RoleWorker, key))}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	fip, err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: net.publicID, PortID: gp.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	wk, err = servers.Get(ctx, c.compute, wk.ID).Extract()
	if err != nil || wk.Status != "ACTIVE" {
		t.Fatalf("worker: %v %v", wk.Status, err)
	}
	var workerIP string
	for _, addrs := range wk.Addresses {
		for _, a := range addrs.([]any) {
			workerIP = a.(map[string]any)["addr"].(string)
		}
	}
	return cluster{key: key, raw: raw, gatewayIP: gwIP, fip: fip.FloatingIP, gatewayID: gw.ID, workerID: wk.ID, workerIP: workerIP}
}

// pinnedKeys reads a server's host keys from its console output.
func pinnedKeys(t *testing.T, e *env, id string) []ssh.PublicKey {
	t.Helper()
	out, err := servers.ShowConsoleOutput(context.Background(), e.user.compute, id, servers.ShowConsoleOutputOpts{Length: 50}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := sshx.HostKeysFromConsole(out)
	if err != nil {
		t.Fatalf("console of %s: %v\n%s", id, err, out)
	}
	return keys
}

// TestHostsThroughEdgeAndGateway: reach a worker through the SOCKS5 edge
// and the gateway with pinned host keys, upload a file atomically over
// SFTP, restart the kubelet, and find both in the host's records, also
// after a simulator restart.
func TestHostsThroughEdgeAndGateway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Debian's ignition (CI runs as root) writes core's home as uid 500,
	// which must pass through the test's own folder.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, Options{StateDir: dir})
	cl := makeCluster(t, e, "prod", "192.168.10.0/24")
	ctx := context.Background()
	d := sshx.Dialer{Proxy: e.sim.Edge()}
	auth := func(id string) sshx.Auth {
		return sshx.Auth{User: "core", Signer: cl.key, HostKeys: pinnedKeys(t, e, id)}
	}
	gw, err := sshx.Dial(ctx, d, cl.fip+":22", auth(cl.gatewayID))
	if err != nil {
		t.Fatalf("ssh to the gateway through the edge: %v", err)
	}
	defer gw.Close()
	host, err := sshx.Jump(ctx, gw, cl.workerIP+":22", auth(cl.workerID))
	if err != nil {
		t.Fatalf("ssh to the worker through the gateway: %v", err)
	}
	defer host.Close()

	// Ignition ran at first boot: the role file is there.
	if out, err := sshx.Run(ctx, host, "cat /etc/opke/role"); err != nil || string(out) != "worker\n" {
		t.Fatalf("cat /etc/opke/role: %q %v", out, err)
	}
	// In CI (root, the package installed) Debian's ignition did the boot:
	// only it writes a boot id into its result file.
	if firstboot.DebianAvailable() {
		root, err := e.sim.HostRoot("prod-default-0")
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(root, "etc/.ignition-result.json")); err != nil || !strings.Contains(string(b), "provisioningBootID") {
			t.Errorf("the first boot was not Debian's ignition: %s %v", b, err)
		}
	}
	// SFTP runs as core: /tmp and core's home, not /etc.
	fc, err := sftp.NewClient(host)
	if err != nil {
		t.Fatal(err)
	}
	content := []byte("KUBELET_VERSION=v1.35.1\n")
	if _, err := fc.Create("/etc/kubernetes/kubelet.env"); err == nil {
		t.Error("core wrote /etc over SFTP")
	}
	f, err := fc.OpenFile("/tmp/staged", os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Root writes behind sudo, atomically: install beside, then rename.
	if _, err := sshx.Run(ctx, host, "install -m 0644 /tmp/staged /etc/kubernetes/kubelet.env"); err == nil {
		t.Error("core wrote /etc without sudo")
	}
	if _, err := sshx.Run(ctx, host, "sudo -n install -D -m 0644 -o root -g root -- /tmp/staged /etc/kubernetes/.kubelet.env.tmp && sync && sudo -n mv -f /etc/kubernetes/.kubelet.env.tmp /etc/kubernetes/kubelet.env"); err != nil {
		t.Fatal(err)
	}
	if _, err := sshx.Run(ctx, host, "sudo -n install -m 0600 /dev/stdin /etc/kubernetes/$(id)"); err == nil || !strings.Contains(err.Error(), "simple commands") {
		t.Errorf("shell syntax this host cannot follow: %v", err)
	}
	// The jail: .. and absolute paths stay inside the host's root.
	if _, err := fc.Stat("/../../../../../../etc/kubernetes/kubelet.env"); err != nil {
		t.Errorf("a path with .. is not resolved inside the root: %v", err)
	}
	if err := fc.Symlink("/etc/passwd", "/tmp-link"); err == nil {
		if _, err := fc.Open("/tmp-link"); err == nil {
			t.Error("an absolute symlink was followed")
		}
	}
	fc.Close()
	sum := sha256.Sum256(content)
	if out, err := sshx.Run(ctx, host, "sha256sum /etc/kubernetes/kubelet.env"); err != nil || string(out) != hex.EncodeToString(sum[:])+"  /etc/kubernetes/kubelet.env\n" {
		t.Fatalf("sha256sum: %q %v", out, err)
	}
	if _, err := sshx.Run(ctx, host, "systemctl restart kubelet"); err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Errorf("core restarted a unit without sudo: %v", err)
	}
	if _, err := sshx.Run(ctx, host, "sudo -n systemctl restart kubelet"); err != nil {
		t.Fatal(err)
	}
	if out, err := sshx.Run(ctx, host, "systemctl is-active kubelet.service"); err != nil || string(out) != "active\n" {
		t.Errorf("is-active: %q %v", out, err)
	}
	if _, err := sshx.Run(ctx, host, "sudo -n systemctl restart nope"); err == nil || !strings.Contains(err.Error(), "Unit nope.service not found") {
		t.Errorf("restart of a missing unit: %v", err)
	}
	if _, err := sshx.Run(ctx, host, "sha256sum /etc/kubernetes/kubelet.env /nope"); err == nil || !strings.Contains(err.Error(), "sha256sum: /nope: No such file or directory") {
		t.Errorf("sha256sum of a missing file: %v", err)
	}
	if _, err := sshx.Run(ctx, host, "rm -rf /"); err == nil {
		t.Error("a command outside the exec set ran")
	}
	checkRestart := func(s *Sim) {
		t.Helper()
		events, err := s.HostEvents("prod-default-0")
		if err != nil {
			t.Fatal(err)
		}
		var restart *HostEvent
		for i := range events {
			if events[i].Command == "systemctl restart kubelet" && events[i].Sudo && events[i].Exit == 0 {
				restart = &events[i]
			}
		}
		if restart == nil || restart.Unit != "kubelet.service" || restart.Files["/etc/kubernetes/kubelet.env"] != hex.EncodeToString(sum[:]) {
			t.Fatalf("the restart is not recorded with the file it started with: %+v", events)
		}
	}
	checkRestart(e.sim)

	// Refusals: a wrong pinned key, an unauthorized key, a host off the network.
	if _, err := sshx.Dial(ctx, d, cl.fip+":22", auth(cl.workerID)); !errors.Is(err, sshx.ErrHostKeyMismatch) {
		t.Errorf("the gateway with the worker's key pinned: %v, want ErrHostKeyMismatch", err)
	}
	stranger := sshx.Auth{User: "core", Signer: newKey(t), HostKeys: pinnedKeys(t, e, cl.gatewayID)}
	if _, err := sshx.Dial(ctx, d, cl.fip+":22", stranger); err == nil {
		t.Error("an unauthorized key logged in")
	}
	if _, err := sshx.Jump(ctx, gw, "192.168.99.10:22", auth(cl.workerID)); err == nil {
		t.Error("the gateway forwarded to an address off its networks")
	}
	if _, err := sshx.Dial(ctx, d, "203.0.113.250:22", auth(cl.gatewayID)); err == nil {
		t.Error("the edge connected to an unassigned address")
	}
	host.Close()
	gw.Close()

	// The records and the root survive a restart from the state dir.
	e.restart(t)
	checkRestart(e.sim)
	root, err := e.sim.HostRoot("prod-default-0")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/kubernetes/kubelet.env")); err != nil || string(b) != string(content) {
		t.Errorf("kubelet.env after a restart: %q %v", b, err)
	}
}

// TestBrokenUserDataPutsServerInError: a config Ignition rejects fails the build.
func TestBrokenUserDataPutsServerInError(t *testing.T) {
	t.Parallel()
	e := startEnv(t, Options{})
	c := e.user
	net := makeTenantNet(t, c, "bad", "192.168.30.0/24")
	sv, err := servers.Create(context.Background(), c.compute, servers.CreateOpts{Name: "bad-0", FlavorRef: "2", ImageRef: imageID(t, c, "flatcar"),
		Networks: []servers.Network{{UUID: net.network}}, UserData: []byte(`{"ignition":{"version":"3.3.0"},"storage":{"files":[{"path":"relative"}]}}`)}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	got, err := servers.Get(context.Background(), c.compute, sv.ID).Extract()
	if err != nil || got.Status != "ERROR" || !strings.Contains(got.Fault.Message, "ignition config rejected") {
		t.Fatalf("status %q, fault %+v, %v", got.Status, got.Fault, err)
	}
}

// TestOpenSSHClient: the upstream ssh and sftp reach the gateway through
// the edge with nc as SOCKS5 proxy command, and a worker with ProxyJump,
// with the console's host keys as known_hosts.
func TestOpenSSHClient(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"ssh", "sftp", "nc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("CI must have %s (.ci/run installs openssh-client and netcat-openbsd)", tool)
			}
			t.Skipf("%s not installed; .ci/run installs it", tool)
		}
	}
	e := startEnv(t, Options{})
	cl := makeCluster(t, e, "prod", "192.168.10.0/24")
	dir := t.TempDir()
	block, err := ssh.MarshalPrivateKey(cl.raw, "opke")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	var kh strings.Builder
	for host, id := range map[string]string{cl.fip: cl.gatewayID, cl.workerIP: cl.workerID} {
		for _, k := range pinnedKeys(t, e, id) {
			kh.WriteString(host + " " + string(ssh.MarshalAuthorizedKey(k)))
		}
	}
	knownHosts := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(knownHosts, []byte(kh.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	common := "  User core\n  IdentityFile " + keyFile + "\n  IdentitiesOnly yes\n  UserKnownHostsFile " + knownHosts +
		"\n  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 10\n"
	config := "Host gw\n  HostName " + cl.fip + "\n  ProxyCommand nc -X 5 -x " + e.sim.Edge() + " %h %p\n" + common +
		"Host worker\n  HostName " + cl.workerIP + "\n  ProxyJump gw\n" + common
	cfgFile := filepath.Join(dir, "config")
	if err := os.WriteFile(cfgFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	if out := run("ssh", "-F", cfgFile, "gw", "cat", "/etc/opke/role"); out != "gateway\n" {
		t.Errorf("ssh gw: %q", out)
	}
	if out := run("ssh", "-F", cfgFile, "worker", "cat", "/etc/opke/role"); out != "worker\n" {
		t.Errorf("ssh -J gw worker: %q", out)
	}
	local := filepath.Join(dir, "hello")
	if err := os.WriteFile(local, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	batch := filepath.Join(dir, "batch")
	if err := os.WriteFile(batch, []byte("put "+local+" /tmp/hello\nls -l /tmp\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run("sftp", "-F", cfgFile, "-b", batch, "worker"); !strings.Contains(out, "hello") {
		t.Errorf("sftp: %s", out)
	}
	root, err := e.sim.HostRoot("prod-default-0")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "tmp/hello")); err != nil || string(b) != "hello\n" {
		t.Errorf("the uploaded file: %q %v", b, err)
	}
	if err := os.WriteFile(batch, []byte("put "+local+" /etc/kubernetes/hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sftp", "-F", cfgFile, "-b", batch, "worker").CombinedOutput(); err == nil {
		t.Errorf("sftp as core wrote /etc: %s", out)
	}
	// A wrong known_hosts entry stops ssh.
	if err := os.WriteFile(knownHosts, []byte(cl.fip+" "+string(ssh.MarshalAuthorizedKey(newKey(t).PublicKey()))), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh", "-F", cfgFile, "gw", "true").CombinedOutput(); err == nil {
		t.Errorf("ssh accepted a host key that is not the pinned one:\n%s", out)
	}
}

// TestEdgeDialsFromItsAddress: the edge dials floating IPs from its
// external subnet's last address but one (203.0.113.254 here), as the
// real hosts' fabric plugs it in: a gateway rule whose remote prefix holds
// that address lets SSH in, one that does not, not.
func TestEdgeDialsFromItsAddress(t *testing.T) {
	t.Parallel()
	e := startEnv(t, Options{})
	cl := makeCluster(t, e, "prod", "192.168.10.0/24")
	ctx := context.Background()
	pages, err := groups.List(e.user.network, groups.ListOpts{Name: "prod-gateway"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sgs, err := groups.ExtractGroups(pages)
	if err != nil || len(sgs) != 1 {
		t.Fatalf("the gateway's group: %v %v", sgs, err)
	}
	d := sshx.Dialer{Proxy: e.sim.Edge()}
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{{"198.51.100.0/24", false}, {"203.0.113.254/32", true}, {"203.0.113.253/32", false}, {"203.0.113.0/25", false}, {"203.0.113.128/25", true}, {"0.0.0.0/0", true}} {
		sg, err := groups.Get(ctx, e.user.network, sgs[0].ID).Extract()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range sg.Rules {
			if r.Direction == "ingress" {
				if err := rules.Delete(ctx, e.user.network, r.ID).ExtractErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := rules.Create(ctx, e.user.network, rules.CreateOpts{SecGroupID: sg.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4,
			Protocol: rules.ProtocolTCP, PortRangeMin: 22, PortRangeMax: 22, RemoteIPPrefix: tc.prefix}).Extract(); err != nil {
			t.Fatal(err)
		}
		conn, err := d.DialContext(ctx, "tcp", cl.fip+":22")
		if err == nil {
			conn.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("SSH allowed from %s: dial %v, want allowed %t", tc.prefix, err, tc.ok)
		}
	}
}

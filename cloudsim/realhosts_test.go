//go:build realhosts

package cloudsim

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/snapshots"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/volumeattach"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/monitors"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/cloudsim/machine"
	"opke.dev/opke/render/ignition"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// realWorld is a simulator with real hosts and what a test made in it.
type realWorld struct {
	t       *testing.T
	e       *env
	net     tenantNet
	key     string // the private key's file
	signer  ssh.Signer
	dir     string
	known   string // known_hosts
	config  string // ssh_config
	servers map[string]machineServer
}

type machineServer struct {
	id, port, fixed, fip string
}

// startReal starts a simulator with real hosts, on the wall clock. With
// no state dir ("") it is as `opke sim --hosts real` without one: its
// machines and their disks go with it.
func startReal(t *testing.T, stateDir string) *env {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := Options{Hosts: HostsReal, Now: time.Now, StateDir: stateDir, Logger: log}
	if stateDir != "" {
		return startEnv(t, opts)
	}
	s := startSim(t, opts)
	dir := t.TempDir() // clouds.yaml's, not the simulator's
	if err := os.WriteFile(filepath.Join(dir, "clouds.yaml"), s.CloudsYAML(), 0o600); err != nil {
		t.Fatal(err)
	}
	return envOf(t, s, newClock(), dir)
}

// newRealWorld starts a simulator with real hosts (with a state dir, or
// none) and a tenant network.
func newRealWorld(t *testing.T, stateless bool) *realWorld {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("real hosts need root")
	}
	w := &realWorld{t: t, dir: t.TempDir(), servers: map[string]machineServer{}}
	if stateless {
		w.e = startReal(t, "")
	} else {
		w.e = startReal(t, filepath.Join(w.dir, "state"))
	}
	w.net = makeTenantNet(t, w.e.user, "rh", "10.20.0.0/24")
	signer, raw := newRawKey(t)
	w.signer = signer
	block, err := ssh.MarshalPrivateKey(ed25519.PrivateKey(raw), "test")
	if err != nil {
		t.Fatal(err)
	}
	w.key = filepath.Join(w.dir, "id_ed25519")
	if err := os.WriteFile(w.key, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	w.known = filepath.Join(w.dir, "known_hosts")
	w.config = filepath.Join(w.dir, "ssh_config")
	return w
}

// group makes a security group letting in TCP on each of the ports from
// anywhere (Neutron adds its egress rules).
func (w *realWorld) group(name string, tcp ...int) string {
	w.t.Helper()
	ctx := context.Background()
	sg, err := groups.Create(ctx, w.e.user.network, groups.CreateOpts{Name: name}).Extract()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, p := range tcp {
		w.allow(sg.ID, p, "0.0.0.0/0")
	}
	return sg.ID
}

func (w *realWorld) allow(group string, port int, from string) {
	w.t.Helper()
	if _, err := rules.Create(context.Background(), w.e.user.network, rules.CreateOpts{SecGroupID: group, Direction: rules.DirIngress,
		EtherType: rules.EtherType4, Protocol: rules.ProtocolTCP, PortRangeMin: port, PortRangeMax: port, RemoteIPPrefix: from}).Extract(); err != nil {
		w.t.Fatal(err)
	}
}

// server creates a server with a gateway's Ignition config (OPKE's own:
// core's key, the unit printing the host keys) on a port in group, with
// a floating IP if asked.
func (w *realWorld) server(name, fixed, group string, floating bool) machineServer {
	w.t.Helper()
	cfg, err := ignition.Render(ignition.Input{Role: schemas.RoleGateway, OPKEPublicKey: string(ssh.MarshalAuthorizedKey(w.signer.PublicKey()))})
	if err != nil {
		w.t.Fatal(err)
	}
	return w.serverWith(name, fixed, group, floating, cfg)
}

// serverWith creates a server with the given user_data.
func (w *realWorld) serverWith(name, fixed, group string, floating bool, cfg []byte) machineServer {
	w.t.Helper()
	ctx := context.Background()
	c := w.e.user
	p, err := ports.Create(ctx, c.network, ports.CreateOpts{NetworkID: w.net.network, Name: name,
		FixedIPs: []ports.IP{{SubnetID: w.net.subnet, IPAddress: fixed}}, SecurityGroups: &[]string{group}}).Extract()
	if err != nil {
		w.t.Fatal(err)
	}
	sv, err := servers.Create(ctx, c.compute, servers.CreateOpts{Name: name, FlavorRef: "2", ImageRef: imageID(w.t, c, "flatcar"),
		Networks: []servers.Network{{Port: p.ID}}, UserData: cfg}, nil).Extract()
	if err != nil {
		w.t.Fatal(err)
	}
	rs := machineServer{id: sv.ID, port: p.ID, fixed: fixed}
	if floating {
		f, err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: w.net.publicID, PortID: p.ID}).Extract()
		if err != nil {
			w.t.Fatal(err)
		}
		rs.fip = f.FloatingIP
	}
	w.servers[name] = rs
	return rs
}

// waitActive waits for a server to be ACTIVE (its machine booted).
func (w *realWorld) waitActive(name string) {
	w.t.Helper()
	id := w.servers[name].id
	deadline := time.Now().Add(3 * time.Minute)
	for {
		sv, err := servers.Get(context.Background(), w.e.user.compute, id).Extract()
		if err != nil {
			w.t.Fatal(err)
		}
		switch sv.Status {
		case "ACTIVE":
			return
		case "ERROR":
			w.t.Fatalf("%s: ERROR: %v", name, sv.Fault)
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: still %s", name, sv.Status)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// console is the server's console log (Nova's os-getConsoleOutput).
func (w *realWorld) console(id string) string {
	w.t.Helper()
	out, err := servers.ShowConsoleOutput(context.Background(), w.e.user.compute, id, servers.ShowConsoleOutputOpts{Length: -1}).Extract()
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

// pin waits for the server's own unit to print its host keys on its
// console and adds them to known_hosts under addr.
func (w *realWorld) pin(name, addr string) []ssh.PublicKey {
	w.t.Helper()
	id := w.servers[name].id
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out := w.console(id)
		keys, err := sshx.HostKeysFromConsole(out)
		if err == nil {
			f, err := os.OpenFile(w.known, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				w.t.Fatal(err)
			}
			for _, k := range keys {
				fmt.Fprintf(f, "%s %s", addr, ssh.MarshalAuthorizedKey(k))
			}
			f.Close()
			return keys
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s printed no host key on its console: %v\n%s", name, err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// writeConfig writes the ssh_config: each floating IP reached through the
// edge (nc -X 5), each host by name, "name-via" through the first host
// (ProxyJump).
func (w *realWorld) writeConfig(jump string) {
	w.t.Helper()
	var b strings.Builder
	for name, s := range w.servers {
		if s.fip != "" {
			fmt.Fprintf(&b, "Host %s\n  HostName %s\n  ProxyCommand nc -X 5 -x %s %%h %%p\n", name, s.fip, w.e.sim.Edge())
		}
		fmt.Fprintf(&b, "Host %s-via\n  HostName %s\n  ProxyJump %s\n", name, s.fixed, jump)
	}
	fmt.Fprintf(&b, "Host *\n  User core\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 15\n", w.key, w.known)
	if err := os.WriteFile(w.config, []byte(b.String()), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// ssh runs a command on a host with the upstream OpenSSH client.
func (w *realWorld) ssh(host, command string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ssh", "-F", w.config, host, command).CombinedOutput()
	return string(out), err
}

func (w *realWorld) mustSSH(host, command string) string {
	w.t.Helper()
	out, err := w.ssh(host, command)
	if err != nil {
		w.t.Fatalf("ssh %s %q: %v\n%s", host, command, err, out)
	}
	return out
}

// TestRealHosts: servers boot as real machines from OPKE's own Ignition
// config. The upstream OpenSSH client logs into a floating IP through the
// edge as core, with the key Ignition gave core and the host key the
// server's own unit printed on its console; core has passwordless sudo
// and cannot write /etc without it; systemd says running; sftp puts a
// file into /tmp of a second server through the first (ProxyJump); a
// security group without 22 blocks SSH until a rule lets it in; a TCP
// load balancer forwards to its members and marks a dead one ERROR; a
// reboot keeps the disk and loses /tmp; a restarted simulator brings its
// hosts back with the same host keys and without a second Ignition run;
// deleting a server cuts its sessions; deleting everything leaves no
// container, namespace or mount behind.
func TestRealHosts(t *testing.T) {
	w := newRealWorld(t, false)
	ctx := context.Background()
	c := w.e.user // the first simulator's clients (until "restart")
	sshGroup := w.group("ssh", 22)
	w.allow(sshGroup, 8080, "10.20.0.0/24")
	closed := w.group("closed")
	w.server("a", "10.20.0.11", sshGroup, true)
	w.server("b", "10.20.0.12", sshGroup, false)
	w.server("c", "10.20.0.13", closed, true)
	// A config Ignition refuses: a version it does not know.
	w.serverWith("bad", "10.20.0.14", closed, false, []byte(`{"ignition":{"version":"9.9.9"}}`))
	for _, name := range []string{"a", "b", "c"} {
		w.waitActive(name)
	}
	t.Run("rejected config", func(t *testing.T) {
		id := w.servers["bad"].id
		deadline := time.Now().Add(time.Minute)
		for {
			sv, err := servers.Get(ctx, c.compute, id).Extract()
			if err != nil {
				t.Fatal(err)
			}
			if sv.Status == "ERROR" {
				if !strings.Contains(fmt.Sprint(sv.Fault), "9.9.9") && !strings.Contains(fmt.Sprint(sv.Fault), "version") {
					t.Errorf("fault: %v", sv.Fault)
				}
				break
			}
			if sv.Status != "BUILD" || time.Now().After(deadline) {
				t.Fatalf("a server whose config Ignition refuses: %s", sv.Status)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if console := w.console(id); !strings.Contains(console, "[  ignition] failed") {
			t.Errorf("the console does not say why:\n%s", console)
		}
	})
	keysA := w.pin("a", w.servers["a"].fip)
	w.pin("b", w.servers["b"].fixed)
	w.pin("c", w.servers["c"].fip)
	w.writeConfig("a")

	t.Run("login", func(t *testing.T) {
		// A host prints its keys before its sshd listens: under load, the
		// gap is seconds.
		deadline := time.Now().Add(time.Minute)
		for {
			out, err := w.ssh("a", "true")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no SSH on a a minute after it printed its keys: %v\n%s", err, out)
			}
			time.Sleep(time.Second)
		}
		if got := strings.TrimSpace(w.mustSSH("a", "systemctl is-system-running --wait")); got != "running" {
			t.Errorf("is-system-running: %q", got)
		}
		if out, err := w.ssh("a", "sudo -n true"); err != nil {
			t.Errorf("sudo -n true: %v\n%s", err, out)
		}
		if out, err := w.ssh("a", "touch /etc/x"); err == nil {
			t.Errorf("core wrote /etc without sudo\n%s", out)
		}
		if out := w.mustSSH("a", "sudo -n touch /etc/x && ls /etc/x"); !strings.Contains(out, "/etc/x") {
			t.Errorf("sudo touch /etc/x: %q", out)
		}
		if got := strings.TrimSpace(w.mustSSH("a", "id -un; hostname")); got != "core\na" {
			t.Errorf("user and host name: %q", got)
		}
		if strings.Contains(w.console(w.servers["a"].id), "BEGIN RSA PRIVATE") {
			t.Error("a private key on the console")
		}
	})

	// Ignition fetched each user_data from the metadata service, as on
	// Flatcar's OpenStack image, over the lease the initramfs took; the
	// lease it took is gone and the machine's networkd holds its own.
	t.Run("user_data fetched", func(t *testing.T) {
		for _, name := range []string{"a", "b"} {
			console := w.console(w.servers[name].id)
			for _, want := range []string{
				"platform openstack: fetching the user_data",
				"GET http://169.254.169.254/openstack/latest/user_data: attempt #1",
				"GET result: OK",
				"Stage: files",
			} {
				if !strings.Contains(console, want) {
					t.Errorf("%s's console has no %q:\n%s", name, want, console)
				}
			}
		}
		if out := w.mustSSH("a", "networkctl status eth0 --no-pager"); !strings.Contains(out, "10.20.0.11 (DHCP4 via") {
			t.Errorf("a's eth0 is not configured by its own DHCP client:\n%s", out)
		}
	})

	// The catalog's public endpoints are where the machines reach the
	// APIs (a cluster's cloud controller manager): port 80 of the public
	// network's edge, through their router. OPKE and the CLI on this
	// machine take the internal ones (clouds.yaml's interface).
	t.Run("public endpoints", func(t *testing.T) {
		pub := w.e.sim.PublicURL()
		if pub != "http://203.0.113.254:80" {
			t.Errorf("PublicURL %s", pub)
		}
		out := w.mustSSH("a", `exec 3<>/dev/tcp/203.0.113.254/80 && printf 'GET /identity/v3 HTTP/1.0\r\nHost: 203.0.113.254\r\n\r\n' >&3 && timeout 10 cat <&3`)
		if !strings.HasPrefix(out, "HTTP/1.0 200") || !strings.Contains(out, `"id":"v3`) {
			t.Errorf("Keystone from a machine, at the public endpoint:\n%s", out)
		}
		if !strings.Contains(out, "http://203.0.113.254/identity/v3") {
			t.Errorf("Keystone's links, asked at the edge, are not the edge's:\n%s", out)
		}
	})

	// Nova's metadata service at 169.254.169.254, through each instance's
	// router: each instance is told its own id (what the Cinder CSI node
	// plugin asks), name, addresses and user_data.
	t.Run("metadata", func(t *testing.T) {
		get := func(host, path string) string {
			out := w.mustSSH(host, `exec 3<>/dev/tcp/169.254.169.254/80 && printf 'GET `+path+` HTTP/1.0\r\nHost: 169.254.169.254\r\n\r\n' >&3 && timeout 10 cat <&3`)
			head, body, _ := strings.Cut(out, "\r\n\r\n")
			if !strings.HasPrefix(head, "HTTP/1.0 200") {
				t.Errorf("%s on %s: %s", path, host, head)
			}
			return body
		}
		for _, host := range []string{"a", "b-via"} {
			name := strings.TrimSuffix(host, "-via")
			var meta struct {
				UUID, Name, Hostname string
				AZ                   string `json:"availability_zone"`
			}
			if body := get(host, "/openstack/latest/meta_data.json"); json.Unmarshal([]byte(body), &meta) != nil {
				t.Errorf("meta_data.json on %s: %q", name, body)
			}
			if want := w.servers[name].id; meta.UUID != want || meta.Name != name || meta.Hostname != name+".novalocal" || meta.AZ != "nova" {
				t.Errorf("meta_data.json on %s: %+v, want uuid %s", name, meta, want)
			}
			if got := get(host, "/latest/meta-data/local-ipv4"); got != w.servers[name].fixed {
				t.Errorf("local-ipv4 on %s: %q", name, got)
			}
		}
		if got := get("a", "/latest/meta-data/public-ipv4"); got != w.servers["a"].fip {
			t.Errorf("a's public-ipv4: %q, want %s", got, w.servers["a"].fip)
		}
		// The EC2 tree's folders list their entries, the root among them.
		if got := get("a", "/latest/meta-data/"); !strings.Contains(got, "instance-id\n") || !strings.Contains(got, "placement/\n") {
			t.Errorf("a's /latest/meta-data/: %q", got)
		}
		if got := get("a", "/latest/meta-data/placement"); got != "availability-zone" {
			t.Errorf("a's /latest/meta-data/placement: %q", got)
		}
		if got := get("a", "/openstack/2018-08-27/user_data"); !strings.Contains(got, `"ignition"`) {
			t.Errorf("a's user_data: %q", got)
		}
	})

	t.Run("sftp through a jump host", func(t *testing.T) {
		local := filepath.Join(w.dir, "payload")
		if err := os.WriteFile(local, []byte("over the jump\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sftp", "-F", w.config, "-b", "-", "b-via")
		cmd.Stdin = strings.NewReader("put " + local + " /tmp/payload\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sftp: %v\n%s", err, out)
		}
		if got := w.mustSSH("b-via", "cat /tmp/payload; hostname"); got != "over the jump\nb\n" {
			t.Errorf("b's /tmp/payload: %q", got)
		}
	})

	t.Run("security groups", func(t *testing.T) {
		if out, err := w.ssh("c", "true"); err == nil {
			t.Fatalf("c has no rule for 22 and let SSH in\n%s", out)
		}
		w.allow(closed, 22, "0.0.0.0/0")
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, err := w.ssh("c", "hostname")
			if err == nil && strings.TrimSpace(out) == "c" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("c with a rule for 22: %v\n%s", err, out)
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("load balancer", func(t *testing.T) {
		for _, name := range []string{"a", "b-via"} {
			w.mustSSH(name, "sudo -n systemd-run --unit web /usr/sbin/sshd -D -p 8080 -o VersionAddendum=from-$(hostname)")
		}
		lb, err := loadbalancers.Create(ctx, c.lb, loadbalancers.CreateOpts{Name: "web", VipSubnetID: w.net.subnet}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		w.waitLB(lb.ID)
		li, err := listeners.Create(ctx, c.lb, listeners.CreateOpts{Name: "web", LoadbalancerID: lb.ID, Protocol: listeners.ProtocolTCP, ProtocolPort: 8080}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		w.waitLB(lb.ID)
		pool, err := pools.Create(ctx, c.lb, pools.CreateOpts{Name: "web", ListenerID: li.ID, Protocol: pools.ProtocolTCP, LBMethod: pools.LBMethodRoundRobin}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		w.waitLB(lb.ID)
		memberOf := map[string]string{}
		for _, name := range []string{"a", "b"} {
			m, err := pools.CreateMember(ctx, c.lb, pool.ID, pools.CreateMemberOpts{Address: w.servers[name].fixed, ProtocolPort: 8080, SubnetID: w.net.subnet}).Extract()
			if err != nil {
				t.Fatal(err)
			}
			memberOf[name] = m.ID
			w.waitLB(lb.ID)
		}
		if _, err := monitors.Create(ctx, c.lb, monitors.CreateOpts{PoolID: pool.ID, Type: monitors.TypeTCP, Delay: 1, Timeout: 1, MaxRetries: 1, MaxRetriesDown: 1}).Extract(); err != nil {
			t.Fatal(err)
		}
		w.waitLB(lb.ID)
		f, err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: w.net.publicID, PortID: lb.VipPortID}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		deadline := time.Now().Add(time.Minute)
		for !(seen["from-a"] && seen["from-b"]) {
			if banner, err := w.banner(f.FloatingIP + ":8080"); err == nil {
				seen[banner[strings.LastIndex(banner, " ")+1:]] = true
			}
			if time.Now().After(deadline) {
				t.Fatalf("the load balancer's floating IP reached %v, not both members", seen)
			}
		}
		w.waitMember(pool.ID, memberOf["a"], "ONLINE")
		w.mustSSH("a", "sudo -n systemctl stop web")
		w.waitMember(pool.ID, memberOf["a"], "ERROR")
		w.waitMember(pool.ID, memberOf["b"], "ONLINE")
		for range 4 {
			if banner, err := w.banner(f.FloatingIP + ":8080"); err != nil || !strings.HasSuffix(banner, "from-b") {
				t.Errorf("with a in ERROR: %q %v", banner, err)
			}
		}
		if err := loadbalancers.Delete(ctx, c.lb, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		if err := floatingips.Delete(ctx, c.network, f.ID).ExtractErr(); err != nil {
			t.Fatal(err)
		}
	})

	// A volume is a real block device on the machine it is attached to:
	// its node as Nova named it, udev's link from its serial, its size;
	// what one machine wrote, another reads after the volume moved; a
	// snapshot holds what the volume held when it was taken, and a volume
	// made from it starts from that.
	var data, restored string
	t.Run("volumes", func(t *testing.T) {
		v, err := volumes.Create(ctx, c.volume, volumes.CreateOpts{Size: 1, Name: "data"}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		data = v.ID
		w.waitVolume(v.ID, "available")
		w.attach("a", v.ID)
		if got := w.mustSSH("a", waitDisk(v.ID)+" && readlink -f "+diskLink(v.ID)+" && sudo -n blockdev --getsize64 "+diskLink(v.ID)); got != "/dev/vdb\n1073741824\n" {
			t.Errorf("the volume on a: %q, want /dev/vdb of 1 GiB", got)
		}
		w.mustSSH("a", "sudo -n mkfs.ext4 -q "+diskLink(v.ID)+" && sudo -n mkdir -p /mnt/data && sudo -n mount "+diskLink(v.ID)+
			" /mnt/data && echo written-on-a | sudo -n tee /mnt/data/f >/dev/null && sudo -n umount /mnt/data")
		w.detach("a", v.ID)
		if out, err := w.ssh("a", "ls /dev/vdb "+diskLink(v.ID)); err == nil {
			t.Errorf("the detached volume is still on a:\n%s", out)
		}
		w.attach("b", v.ID)
		mount := func(id string) string {
			return waitDisk(id) + " && sudo -n mkdir -p /mnt/data && sudo -n mount " + diskLink(id) + " /mnt/data && cat /mnt/data/f"
		}
		if got := w.mustSSH("b-via", mount(v.ID)); got != "written-on-a\n" {
			t.Errorf("the volume moved to b holds %q, want what a wrote", got)
		}
		sn, err := snapshots.Create(ctx, c.volume, snapshots.CreateOpts{VolumeID: v.ID, Force: true, Name: "data"}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		w.waitSnapshot(sn.ID)
		w.mustSSH("b-via", "echo after-the-snapshot | sudo -n tee /mnt/data/f >/dev/null && sync")
		from, err := volumes.Create(ctx, c.volume, volumes.CreateOpts{Size: 1, Name: "restored", SnapshotID: sn.ID}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		restored = from.ID
		w.waitVolume(from.ID, "available")
		w.attach("a", from.ID)
		if got := w.mustSSH("a", mount(from.ID)); got != "written-on-a\n" {
			t.Errorf("the volume made from the snapshot holds %q, want what the volume held when it was taken", got)
		}
		if got := w.mustSSH("b-via", "cat /mnt/data/f"); got != "after-the-snapshot\n" {
			t.Errorf("the volume on b holds %q after the snapshot", got)
		}
	})

	t.Run("reboot", func(t *testing.T) {
		w.mustSSH("b-via", "echo kept > /home/core/kept")
		if err := servers.Reboot(ctx, c.compute, w.servers["b"].id, servers.RebootOpts{Type: servers.HardReboot}).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			out, err := w.ssh("b-via", "systemctl is-system-running --wait >/dev/null; cat /home/core/kept; ls /tmp/payload 2>&1 || true")
			if err == nil && strings.HasPrefix(out, "kept\n") && strings.Contains(out, "No such file") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after a reboot: %v\n%s", err, out)
			}
			time.Sleep(time.Second)
		}
		// Its volume is still attached after the reboot, with what was
		// written before it.
		if data != "" {
			if got := w.mustSSH("b-via", waitDisk(data)+" && sudo -n mount "+diskLink(data)+" /mnt/data && cat /mnt/data/f"); got != "after-the-snapshot\n" {
				t.Errorf("b's volume after a reboot: %q", got)
			}
		}
	})

	t.Run("restart", func(t *testing.T) {
		if err := w.e.sim.Close(); err != nil {
			t.Fatal(err)
		}
		if left := w.namespaces(); len(left) > 0 {
			t.Errorf("namespaces left by a stopped simulator: %v", left)
		}
		w.e = startReal(w.t, w.e.dir) // the test's, not the subtest's: it outlives "restart"
		w.writeConfig("a")            // the edge's port changed
		deadline := time.Now().Add(2 * time.Minute)
		for {
			out, err := w.ssh("a", "hostname")
			if err == nil && strings.TrimSpace(out) == "a" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a after a restart: %v\n%s", err, out)
			}
			time.Sleep(time.Second)
		}
		if n := strings.Count(w.console(w.servers["a"].id), "platform openstack: fetching the user_data"); n != 1 {
			t.Errorf("Ignition ran %d times on a", n)
		}
		again, err := sshx.HostKeysFromConsole(w.console(w.servers["a"].id))
		if err != nil || string(again[len(again)-1].Marshal()) != string(keysA[len(keysA)-1].Marshal()) {
			t.Errorf("a's host key after a restart: %v", err)
		}
		// a's volume is there again, on the loop device the first
		// simulator set up (one device per file).
		if restored != "" {
			if got := w.mustSSH("a", waitDisk(restored)+" && readlink -f "+diskLink(restored)); got != "/dev/vdb\n" {
				t.Errorf("a's volume after a restart: %q", got)
			}
			if n := loopsOver(filepath.Join(w.e.dir, "hosts", "volumes")); n != 2 {
				t.Errorf("%d loop devices over the volumes' files after a restart, want 2 (a's and b's)", n)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		// A connection to a's sshd through the edge, its banner read.
		conn, banner, err := w.socks(w.servers["a"].fip + ":22")
		if err != nil || !strings.HasPrefix(banner, "SSH-2.0-") {
			t.Fatalf("a's sshd through the edge: %q %v", banner, err)
		}
		defer conn.Close()
		ids := map[string]bool{}
		for _, s := range w.servers {
			ids[s.id] = true
			if err := servers.Delete(ctx, w.e.user.compute, s.id).ExtractErr(); err != nil {
				t.Fatal(err)
			}
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a connection to a deleted server: read %d, %v; want it cut", n, err)
		}
		w.deleteNetworks()
		// The servers' volumes are free again: their loop devices go, and
		// their files with them.
		for _, id := range []string{data, restored} {
			if id != "" {
				w.waitVolume(id, "available")
			}
		}
		snaps, err := snapshots.List(w.e.user.volume, nil).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all, _ := snapshots.ExtractSnapshots(snaps)
		for _, sn := range all {
			if err := snapshots.Delete(ctx, w.e.user.volume, sn.ID).ExtractErr(); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{restored, data} {
			if id == "" {
				continue
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				err := volumes.Delete(ctx, w.e.user.volume, id, nil).ExtractErr()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			left := w.leftovers(ids, 2)
			// The fabric and its edge on the public network stay while the
			// simulator runs: the cloud still has its public network.
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("left behind after deleting everything: %v", left)
			}
			time.Sleep(time.Second)
		}
		if err := w.e.sim.Close(); err != nil {
			t.Fatal(err)
		}
		if left := w.namespaces(); len(left) > 0 {
			t.Errorf("namespaces left by a stopped simulator: %v", left)
		}
	})
}

// banner reads the first line a TCP service sends, through the edge.
func (w *realWorld) banner(addr string) (string, error) {
	conn, line, err := w.socks(addr)
	if conn != nil {
		conn.Close()
	}
	return line, err
}

// socks connects to addr through the edge (SOCKS5) and reads the first
// line the service sends; the connection stays open.
func (w *realWorld) socks(addr string) (net.Conn, string, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, "", err
	}
	conn, err := net.DialTimeout("tcp", w.e.sim.Edge(), 5*time.Second)
	if err != nil {
		return nil, "", err
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	a4 := ap.Addr().As4()
	req := append([]byte{5, 1, 0, 5, 1, 0, 1}, a4[:]...)
	req = append(req, byte(ap.Port()>>8), byte(ap.Port()))
	if _, err := conn.Write(req); err != nil {
		return conn, "", err
	}
	reply := make([]byte, 12) // the method's answer (2) and the reply (10)
	if _, err := io.ReadFull(conn, reply); err != nil {
		return conn, "", err
	}
	if reply[3] != 0 {
		return conn, "", fmt.Errorf("socks reply %d", reply[3])
	}
	var line []byte
	for b := make([]byte, 1); !strings.HasSuffix(string(line), "\n"); {
		if _, err := conn.Read(b); err != nil {
			return conn, string(line), err
		}
		line = append(line, b[0])
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, strings.TrimSpace(string(line)), nil
}

func (w *realWorld) waitLB(id string) {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		lb, err := loadbalancers.Get(context.Background(), w.e.user.lb, id).Extract()
		if err != nil {
			w.t.Fatal(err)
		}
		if lb.ProvisioningStatus == "ACTIVE" {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("load balancer %s", lb.ProvisioningStatus)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (w *realWorld) waitMember(pool, id, status string) {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := pools.GetMember(context.Background(), w.e.user.lb, pool, id).Extract()
		if err != nil {
			w.t.Fatal(err)
		}
		if m.OperatingStatus == status {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("member %s: %s, want %s", m.Address, m.OperatingStatus, status)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// deleteNetworks deletes the test's floating IPs, ports, router, subnet,
// network and security groups.
func (w *realWorld) deleteNetworks() {
	w.t.Helper()
	ctx := context.Background()
	c := w.e.user
	for _, s := range w.servers {
		if s.fip != "" {
			pages, _ := floatingips.List(c.network, floatingips.ListOpts{FloatingIP: s.fip}).AllPages(ctx)
			list, _ := floatingips.ExtractFloatingIPs(pages)
			for _, f := range list {
				_ = floatingips.Delete(ctx, c.network, f.ID).ExtractErr()
			}
		}
		if err := ports.Delete(ctx, c.network, s.port).ExtractErr(); err != nil {
			w.t.Fatal(err)
		}
	}
	if _, err := routers.RemoveInterface(ctx, c.network, w.net.router, routers.RemoveInterfaceOpts{SubnetID: w.net.subnet}).Extract(); err != nil {
		w.t.Fatal(err)
	}
	if err := routers.Delete(ctx, c.network, w.net.router).ExtractErr(); err != nil {
		w.t.Fatal(err)
	}
	if err := networks.Delete(ctx, c.network, w.net.network).ExtractErr(); err != nil {
		w.t.Fatal(err)
	}
}

// namespaces are the network namespaces of the test's simulator.
func (w *realWorld) namespaces() []string {
	name := fabricName(w.e.sim.hostsDir)
	entries, _ := os.ReadDir(machine.NetNSDir)
	var out []string
	for _, e := range entries {
		if e.Name() == name || strings.HasPrefix(e.Name(), name+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// leftovers lists the containers and mounts left of the servers ids,
// the loop devices and volume files left of the simulator's, and its
// namespaces if there are not namespaces of them (2 while it runs: the
// fabric's and its public edge's; 0 once it stopped).
func (w *realWorld) leftovers(ids map[string]bool, namespaces int) []string {
	var left []string
	out, _ := exec.Command("runc", "--root", machine.RuncRoot, "list", "-q").Output()
	for _, id := range strings.Fields(string(out)) {
		if ids[id] {
			left = append(left, "container "+id)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for id := range ids {
		if strings.Contains(string(mounts), filepath.Join(machine.RootsDir, id)) {
			left = append(left, "mount of "+id)
		}
	}
	hosts := w.e.sim.hostsDir
	if n := loopsOver(hosts); n > 0 {
		left = append(left, fmt.Sprintf("%d loop devices over the simulator's files (volumes, machines' disks)", n))
	}
	if files, _ := filepath.Glob(filepath.Join(hosts, "volumes", "*.img")); len(files) > 0 {
		left = append(left, fmt.Sprintf("volume files %v", files))
	}
	if ns := w.namespaces(); len(ns) != namespaces {
		left = append(left, fmt.Sprintf("namespaces %v (want %d)", ns, namespaces))
	}
	return left
}

// waitVolume waits for a volume's status.
func (w *realWorld) waitVolume(id, status string) {
	w.t.Helper()
	w.waitStatus("volume "+id, status, func() (string, error) {
		v, err := volumes.Get(context.Background(), w.e.user.volume, id).Extract()
		if err != nil {
			return "", err
		}
		return v.Status, nil
	})
}

func (w *realWorld) waitSnapshot(id string) {
	w.t.Helper()
	w.waitStatus("snapshot "+id, "available", func() (string, error) {
		sn, err := snapshots.Get(context.Background(), w.e.user.volume, id).Extract()
		if err != nil {
			return "", err
		}
		return sn.Status, nil
	})
}

// waitStatus waits a minute at most for status() to say want.
func (w *realWorld) waitStatus(what, want string, status func() (string, error)) {
	w.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got, err := status()
		if err != nil {
			w.t.Fatal(err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: %s, want %s", what, got, want)
		}
	}
}

// attach attaches a volume to a server and waits for it to be in-use.
func (w *realWorld) attach(server, volume string) {
	w.t.Helper()
	if _, err := volumeattach.Create(context.Background(), w.e.user.compute, w.servers[server].id, volumeattach.CreateOpts{VolumeID: volume}).Extract(); err != nil {
		w.t.Fatal(err)
	}
	w.waitVolume(volume, "in-use")
}

// detach detaches a volume from a server and waits for it to be
// available.
func (w *realWorld) detach(server, volume string) {
	w.t.Helper()
	if err := volumeattach.Delete(context.Background(), w.e.user.compute, w.servers[server].id, volume).ExtractErr(); err != nil {
		w.t.Fatal(err)
	}
	w.waitVolume(volume, "available")
}

// diskLink is udev's link to the disk of a volume on a host.
func diskLink(volume string) string { return "/dev/disk/by-id/virtio-" + volume[:20] }

// waitDisk is a shell command waiting (30 s at most) for a volume's disk
// to appear on a host, as a guest waits for its hot-plugged disk.
func waitDisk(volume string) string {
	return "for i in $(seq 60); do test -b " + diskLink(volume) + " && break; sleep 0.5; done; test -b " + diskLink(volume)
}

// loopsOver counts the loop devices over files under dir.
func loopsOver(dir string) int {
	out, _ := exec.Command("losetup", "--noheadings", "--output", "BACK-FILE").Output()
	n := 0
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, dir+"/") {
			n++
		}
	}
	return n
}

// TestRealHostsStatelessClose: a simulator with no state dir takes its
// machines with it when it stops, and the loop devices of the volumes
// still attached to them, whose files go with its temporary folder (they
// were left, one per volume, by every such run that ended with a volume
// attached).
func TestRealHostsStatelessClose(t *testing.T) {
	w := newRealWorld(t, true)
	ctx := context.Background()
	w.server("a", "10.20.0.11", w.group("ssh", 22), true)
	w.waitActive("a")
	w.pin("a", w.servers["a"].fip)
	w.writeConfig("a")
	v, err := volumes.Create(ctx, w.e.user.volume, volumes.CreateOpts{Size: 1, Name: "data"}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	w.waitVolume(v.ID, "available")
	w.attach("a", v.ID)
	w.mustSSH("a", waitDisk(v.ID))
	hosts := w.e.sim.hostsDir
	if n := loopsOver(filepath.Join(hosts, "volumes")); n != 1 {
		t.Fatalf("%d loop devices over the volumes' files with one attached, want 1", n)
	}
	if len(w.namespaces()) == 0 {
		t.Fatal("no namespace of the simulator's while it runs")
	}
	if err := w.e.sim.Close(); err != nil {
		t.Fatal(err)
	}
	if left := w.leftovers(map[string]bool{w.servers["a"].id: true}, 0); len(left) > 0 {
		t.Errorf("left by a stopped simulator with no state dir: %v", left)
	}
	if _, err := os.Stat(hosts); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its hosts folder %s: %v, want it removed", hosts, err)
	}
}

// TestRealHostsContract holds real machines to the host contract
// (hostcontract_test.go), as TestHostContract holds the in-process hosts.
func TestRealHostsContract(t *testing.T) {
	hostContract(t, startReal(t, filepath.Join(t.TempDir(), "state")))
}

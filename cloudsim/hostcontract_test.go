package cloudsim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/render/ignition"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
)

// The host contract: what OPKE relies on of a host, asked of the
// in-process hosts (TestHostContract, in make test) and of real machines
// (TestRealHostsContract, make realhosts) alike, so the fast hosts cannot
// be kinder than a real one. Everything goes through OPKE's own client
// (sshx through the edge, host keys pinned from the console) and its own
// command lines (sshx.Install, sshx.Sudo).

// contractUnit is a unit the contract starts, stops and restarts.
const contractUnit = `[Unit]
Description=A unit of the host contract

[Service]
ExecStart=/bin/sleep infinity
`

// contractConfig is OPKE's gateway config with contractUnit beside (not
// enabled); without keysUnit, the unit printing the host keys is left out.
func contractConfig(t *testing.T, key ssh.Signer, keysUnit bool) []byte {
	t.Helper()
	cfg, err := ignition.Render(ignition.Input{Role: schemas.RoleGateway, OPKEPublicKey: string(ssh.MarshalAuthorizedKey(key.PublicKey()))})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(cfg, &doc); err != nil {
		t.Fatal(err)
	}
	systemd := doc["systemd"].(map[string]any)
	var units []any
	for _, u := range systemd["units"].([]any) {
		if keysUnit || u.(map[string]any)["name"] != "opke-host-keys.service" {
			units = append(units, u)
		}
	}
	systemd["units"] = append(units, map[string]any{"name": "contract.service", "contents": contractUnit})
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hostContract runs the contract against the hosts of e's simulator.
func hostContract(t *testing.T, e *env) {
	ctx := context.Background()
	c := e.user
	key := newKey(t)
	tn := makeTenantNet(t, c, "contract", "10.30.0.0/24")
	group := func(name string, ssh bool) string {
		sg, err := groups.Create(ctx, c.network, groups.CreateOpts{Name: name}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if ssh {
			if _, err := rules.Create(ctx, c.network, rules.CreateOpts{SecGroupID: sg.ID, Direction: rules.DirIngress, EtherType: rules.EtherType4,
				Protocol: rules.ProtocolTCP, PortRangeMin: 22, PortRangeMax: 22, RemoteIPPrefix: "0.0.0.0/0"}).Extract(); err != nil {
				t.Fatal(err)
			}
		}
		return sg.ID
	}
	open, closed := group("contract-ssh", true), group("contract-closed", false)
	type host struct{ id, fip string }
	server := func(name, fixed, sg string, keysUnit bool) host {
		p, err := ports.Create(ctx, c.network, ports.CreateOpts{NetworkID: tn.network, Name: name,
			FixedIPs: []ports.IP{{SubnetID: tn.subnet, IPAddress: fixed}}, SecurityGroups: &[]string{sg}}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		sv, err := servers.Create(ctx, c.compute, servers.CreateOpts{Name: name, FlavorRef: "2", ImageRef: imageID(t, c, "flatcar"),
			Networks: []servers.Network{{Port: p.ID}}, UserData: contractConfig(t, key, keysUnit)}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		f, err := floatingips.Create(ctx, c.network, floatingips.CreateOpts{FloatingNetworkID: tn.publicID, PortID: p.ID}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		return host{id: sv.ID, fip: f.FloatingIP}
	}
	h := server("contract-0", "10.30.0.10", open, true)
	quiet := server("contract-quiet", "10.30.0.11", open, false)
	shut := server("contract-closed", "10.30.0.12", closed, true)
	console := func(id string) string {
		out, err := servers.ShowConsoleOutput(ctx, c.compute, id, servers.ShowConsoleOutputOpts{Length: -1}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The host keys, from what the host's own unit printed on its console.
	hostKeys := func(id string) []ssh.PublicKey {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			sv, err := servers.Get(ctx, c.compute, id).Extract()
			if err != nil {
				t.Fatal(err)
			}
			if sv.Status == "ACTIVE" {
				if keys, err := sshx.HostKeysFromConsole(console(id)); err == nil {
					return keys
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %s (%s): no host key on its console:\n%s", id, sv.Status, console(id))
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	dial := func(hst host, keys []ssh.PublicKey) (*ssh.Client, error) {
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return sshx.Dial(dctx, sshx.Dialer{Proxy: e.sim.Edge()}, hst.fip+":22", sshx.Auth{User: "core", Signer: key, HostKeys: keys})
	}
	// redial dials h again, up to 3 minutes, while it comes back.
	redial := func(t *testing.T, keys []ssh.PublicKey, when string) *ssh.Client {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
			cl, err := dial(h, keys)
			if err == nil {
				return cl
			}
			if time.Now().After(deadline) {
				t.Fatalf("the host does not answer %s: %v", when, err)
			}
		}
	}
	cl, err := dial(h, hostKeys(h.id))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	run := func(cmd string, stdin []byte) (string, error) {
		out, err := sshx.RunInput(ctx, cl, cmd, stdin)
		return string(out), err
	}

	t.Run("core and sudo", func(t *testing.T) {
		if out, err := run("touch /etc/contract", nil); err == nil {
			t.Errorf("core wrote /etc without sudo: %s", out)
		}
		if _, err := run(sshx.Sudo("touch /etc/contract"), nil); err != nil {
			t.Errorf("sudo: %v", err)
		}
		secret := []byte("not for core's eyes\n")
		cmd, _, err := sshx.Install("core", "/etc/kubernetes/pki/contract.key", 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run(strings.ReplaceAll(cmd, "sudo -n ", ""), secret); err == nil {
			t.Error("core installed a root file without sudo")
		}
		if _, err := run(cmd, secret); err != nil {
			t.Fatalf("OPKE's install: %v", err)
		}
		if out, err := run("cat /etc/kubernetes/pki/contract.key", nil); err == nil || strings.Contains(out, "eyes") {
			t.Errorf("core read a 0600 root file: %q %v", out, err)
		}
		sum := sha256.Sum256(secret)
		if out, err := run(sshx.Sudo("sha256sum -- /etc/kubernetes/pki/contract.key"), nil); err != nil || out != hex.EncodeToString(sum[:])+"  /etc/kubernetes/pki/contract.key\n" {
			t.Errorf("sha256sum behind sudo: %q %v", out, err)
		}
		// Core's own files stay core's: it reads them without sudo.
		cmd, _, _ = sshx.Install("core", "/home/core/contract", 0o600)
		if _, err := run(cmd, []byte("mine\n")); err != nil {
			t.Fatal(err)
		}
		if out, err := run("cat /home/core/contract", nil); err != nil || out != "mine\n" {
			t.Errorf("core's own file: %q %v", out, err)
		}
	})

	t.Run("units", func(t *testing.T) {
		// The resolver file the kubelet hands pods (its resolvConf), as
		// Flatcar's systemd-resolved writes it.
		if out, err := run("cat /run/systemd/resolve/resolv.conf", nil); err != nil {
			t.Errorf("no /run/systemd/resolve/resolv.conf: %q %v", out, err)
		}
		if out, err := run("systemctl is-active contract.service", nil); err == nil || strings.TrimSpace(out) != "inactive" {
			t.Errorf("a unit not started: %q %v", out, err)
		}
		if _, err := run("systemctl start contract.service", nil); err == nil {
			t.Error("core started a unit without sudo")
		}
		for _, verb := range []string{"start", "restart"} {
			if _, err := run(sshx.Sudo("systemctl "+verb+" contract.service"), nil); err != nil {
				t.Fatalf("%s: %v", verb, err)
			}
			if out, err := run("systemctl is-active contract.service", nil); err != nil || out != "active\n" {
				t.Errorf("after %s: %q %v", verb, out, err)
			}
		}
		if _, err := run("systemctl stop contract.service", nil); err == nil {
			t.Error("core stopped a unit without sudo")
		}
		if _, err := run(sshx.Sudo("systemctl stop contract.service"), nil); err != nil {
			t.Fatal(err)
		}
		if out, _ := run("systemctl is-active contract.service", nil); strings.TrimSpace(out) != "inactive" {
			t.Errorf("after stop: %q", out)
		}
	})

	t.Run("sftp", func(t *testing.T) {
		fc, err := sftp.NewClient(cl)
		if err != nil {
			t.Fatal(err)
		}
		defer fc.Close()
		f, err := fc.Create("/tmp/contract")
		if err != nil {
			t.Fatalf("sftp into /tmp: %v", err)
		}
		if _, err := f.Write([]byte("tmp\n")); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if out, err := run("cat /tmp/contract", nil); err != nil || out != "tmp\n" {
			t.Errorf("/tmp/contract: %q %v", out, err)
		}
		if _, err := fc.Create("/etc/contract-sftp"); err == nil {
			t.Error("sftp as core wrote /etc")
		}
	})

	t.Run("max sessions", func(t *testing.T) {
		// OpenSSH's default MaxSessions: 10 open on one connection, the
		// 11th refused ("open failed"), until one of them ends.
		var open []*ssh.Session
		defer func() {
			for _, s := range open {
				s.Close()
			}
		}()
		// The sessions of the subtests before are freed on the server a
		// moment after they closed (OpenSSH's too): until then, one of
		// the 10 may be refused.
		for range 10 {
			var s *ssh.Session
			var err error
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				var refused *ssh.OpenChannelError
				if s, err = cl.NewSession(); err == nil || !errors.As(err, &refused) || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("session %d: %v", len(open)+1, err)
			}
			open = append(open, s)
		}
		var refused *ssh.OpenChannelError
		if s, err := cl.NewSession(); !errors.As(err, &refused) || refused.Reason != ssh.ConnectionFailed {
			if s != nil {
				s.Close()
			}
			t.Fatalf("an 11th session: %v, want refused (connect failed)", err)
		}
		open[0].Close()
		open = open[1:]
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, err := cl.NewSession()
			if err == nil {
				open = append(open, s)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no session once one ended: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("console", func(t *testing.T) {
		// A host whose config has no unit printing them shows no host key.
		deadline := time.Now().Add(3 * time.Minute)
		for {
			sv, err := servers.Get(ctx, c.compute, quiet.id).Extract()
			if err != nil {
				t.Fatal(err)
			}
			if sv.Status == "ACTIVE" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("contract-quiet: %s", sv.Status)
			}
			time.Sleep(300 * time.Millisecond)
		}
		hostKeys(shut.id) // by then contract-quiet has booted as long
		if out := console(quiet.id); strings.Contains(out, "SSH HOST KEY") {
			t.Errorf("a host without the unit printed host keys:\n%s", out)
		}
	})

	t.Run("security group without 22", func(t *testing.T) {
		cl, err := dial(shut, hostKeys(shut.id))
		if err == nil {
			cl.Close()
			t.Fatal("SSH got through a security group without 22")
		}
		if errors.Is(err, sshx.ErrHostKeyMismatch) {
			t.Errorf("blocked for the wrong reason: %v", err)
		}
	})

	// Last: the host goes away and comes back. Nova's reboot cuts every
	// session, /run and /tmp (tmpfs) come back empty, the disk stays, and the
	// host answers again with the keys it had.
	t.Run("reboot", func(t *testing.T) {
		keys := hostKeys(h.id)
		for _, f := range []string{"/run/contract-reboot", "/tmp/contract-reboot", "/etc/contract-reboot"} {
			cmd, _, err := sshx.Install("core", f, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := run(cmd, []byte("before\n")); err != nil {
				t.Fatalf("install %s: %v", f, err)
			}
		}
		if err := servers.Reboot(ctx, c.compute, h.id, servers.RebootOpts{Type: servers.HardReboot}).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		ended := make(chan error, 1)
		go func() { ended <- cl.Wait() }()
		select {
		case <-ended:
		case <-time.After(2 * time.Minute):
			t.Fatal("a session outlived its host's reboot")
		}
		again := redial(t, keys, "after its reboot")
		defer again.Close()
		for _, f := range []string{"/run/contract-reboot", "/tmp/contract-reboot"} {
			if out, err := sshx.Run(ctx, again, "cat "+f); err == nil {
				t.Errorf("%s survived the reboot (a tmpfs): %q", f, out)
			}
		}
		if out, err := sshx.Run(ctx, again, "cat /etc/contract-reboot"); err != nil || string(out) != "before\n" {
			t.Errorf("/etc after the reboot: %q %v", out, err)
		}
		// What the boot writes into /run is there again.
		if out, err := sshx.Run(ctx, again, "cat /run/systemd/resolve/resolv.conf"); err != nil {
			t.Errorf("no /run/systemd/resolve/resolv.conf after the reboot: %q %v", out, err)
		}
	})

	t.Run("reset-state: a server in ERROR whose machine runs answers", func(t *testing.T) {
		keys := hostKeys(h.id)
		if err := servers.ResetState(ctx, e.admin.compute, h.id, servers.StateError).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := servers.ResetState(ctx, e.admin.compute, h.id, servers.StateActive).ExtractErr(); err != nil {
				t.Error(err)
			}
		}()
		cl, err := dial(h, keys)
		if err != nil {
			t.Fatalf("a server in ERROR whose machine runs does not answer: %v", err)
		}
		defer cl.Close()
		if out, err := sshx.Run(ctx, cl, "cat /etc/contract-reboot"); err != nil || string(out) != "before\n" {
			t.Errorf("on the host in ERROR: %q %v", out, err)
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		keys := hostKeys(h.id)
		cl, err := dial(h, keys)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		cmd, _, err := sshx.Install("core", "/etc/contract-stop", 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sshx.RunInput(ctx, cl, cmd, []byte("kept\n")); err != nil {
			t.Fatal(err)
		}
		status := func(want string) {
			t.Helper()
			deadline := time.Now().Add(3 * time.Minute)
			for {
				sv, err := servers.Get(ctx, c.compute, h.id).Extract()
				if err == nil && sv.Status == want {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("server %s: %v %v, want %s", h.id, sv.Status, err, want)
				}
				time.Sleep(time.Second)
			}
		}
		if err := servers.Stop(ctx, c.compute, h.id).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		status("SHUTOFF")
		ended := make(chan error, 1)
		go func() { ended <- cl.Wait() }()
		select {
		case <-ended:
		case <-time.After(2 * time.Minute):
			t.Fatal("a session outlived its host's power")
		}
		if off, err := dial(h, keys); err == nil {
			off.Close()
			t.Error("a host that is off answers SSH")
		}
		if err := servers.Stop(ctx, c.compute, h.id).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			t.Errorf("a stop of a stopped server: %v, want 409", err)
		}
		if err := servers.Start(ctx, c.compute, h.id).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		status("ACTIVE")
		again := redial(t, keys, "once started again")
		defer again.Close()
		if out, err := sshx.Run(ctx, again, "cat /etc/contract-stop"); err != nil || string(out) != "kept\n" {
			t.Errorf("/etc after a stop and a start: %q %v", out, err)
		}
	})
}

// TestHostContract holds the in-process hosts to the host contract.
func TestHostContract(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Debian's ignition (CI runs as root) writes core's home as uid 500.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hostContract(t, startEnv(t, Options{StateDir: dir}))
}

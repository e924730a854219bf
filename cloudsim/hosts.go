package cloudsim

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/cloudsim/firstboot"
	"opke.dev/opke/internal/atomicfile"
)

// Hosts. Every ACTIVE server is a host: a folder standing for its root
// (StateDir/hosts/<server id>/root), an SSH host key (kept in the server's
// state, printed on its console as cloud images do), and an in-process SSH
// server reached only through the edge (a floating IP) or another host's
// direct-tcpip forwarding. Nothing is dialled at a simulated address: a
// connection to a host is an in-memory pipe.

// HostEvent is one effect of a command run on a host, for tests to assert on.
type HostEvent struct {
	Time    time.Time `json:"time"`
	Command string    `json:"command"`
	Unit    string    `json:"unit,omitempty"`
	Exit    int       `json:"exit"`
	// Sudo says the command ran as root, behind sudo.
	Sudo bool `json:"sudo,omitempty"`
	// Files holds the sha256 of every file under /etc and /var/lib of the
	// host when a unit was started or restarted: what it started with.
	Files map[string]string `json:"files,omitempty"`
	// Error says why the unit failed, or why a static pod of a kubelet
	// that started did not.
	Error string `json:"error,omitempty"`
}

// hostRecord is what a host keeps across restarts: records.json.
type hostRecord struct {
	Units  map[string]string `json:"units"` // unit -> active | inactive
	Events []HostEvent       `json:"events"`
}

// simHost is the runtime of one host.
type simHost struct {
	s      *Sim
	id     string
	name   string
	dir    string
	root   *os.Root
	signer ssh.Signer

	mu             sync.Mutex
	rec            hostRecord
	kubeCluster    string // the key of the cluster its kubelet last started in (Sim.kubeKey)
	kubeletVersion string // the tag of the kubelet image it last started with
	// kubeletLabels and kubeletTaints are what it registered its node
	// with when it last started (its flags).
	kubeletLabels map[string]string
	kubeletTaints []corev1.Taint
	// kubeletSince is when its kubelet's unit last changed state: its
	// Node's Ready condition's last transition (kubestub.Node.Since).
	kubeletSince time.Time

	// What the host runs (controllers.go): svcMu serialises starts and
	// stops; readers load the pointers.
	svcMu  sync.Mutex
	closed bool
	off    atomic.Bool // closed, for readers without svcMu
	etcd   atomic.Pointer[etcdMember]
	api    atomic.Pointer[apiServer]

	connsMu sync.Mutex
	conns   map[*trackedConn]struct{}
}

// hostKeyPEM makes an Ed25519 host key in OpenSSH's PEM form.
func hostKeyPEM(comment string) (string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return "", fmt.Errorf("host key: %w", err)
	}
	return string(pem.EncodeToMemory(block)), nil
}

// bootServer is the first boot of a server turning ACTIVE, run under s.mu:
// a host key, then user_data applied into the host's root. A config that
// Ignition rejects returns firstboot.ErrInvalidConfig: the server goes to
// ERROR.
//
// A server without user_data boots lazily: its root is seeded and its host
// key made when first needed, so a benchmark's 10,000 servers cost nothing.
func (s *Sim) bootServer(sv *server) error {
	if sv.UserData == "" {
		return nil
	}
	if err := ensureHostKey(sv); err != nil {
		return err
	}
	dir := filepath.Join(s.hostsDir, sv.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("host %s: %w", sv.Name, err)
	}
	var config []byte
	if sv.UserData != "" {
		var err error
		if config, err = base64.StdEncoding.DecodeString(sv.UserData); err != nil {
			return fmt.Errorf("%w: user_data is not base64", firstboot.ErrInvalidConfig)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, how, err := firstboot.Apply(ctx, dir, config)
	if err != nil {
		return err
	}
	s.log.Debug("host booted", "server", sv.Name, "ignition", how)
	return nil
}

// ensureHostKey gives sv its SSH host key; the caller holds s.mu.
func ensureHostKey(sv *server) error {
	if sv.HostKey != "" {
		return nil
	}
	k, err := hostKeyPEM("root@" + sv.Name)
	if err != nil {
		return err
	}
	sv.HostKey = k
	return nil
}

// releaseHost forgets a deleted server's host and removes its folder.
func (s *Sim) releaseHost(id string) {
	s.hostsMu.Lock()
	h := s.hosts[id]
	delete(s.hosts, id)
	s.hostsMu.Unlock()
	if h == nil {
		_ = os.RemoveAll(filepath.Join(s.hostsDir, id))
		return
	}
	// Called under s.mu: the host stops apart, as its units may wait on it.
	s.wg.Go(func() {
		h.shutdown()
		h.root.Close()
		_ = os.RemoveAll(filepath.Join(s.hostsDir, id))
	})
}

// rebootHost restarts an in-process host as a machine reboots: its
// connections are cut, what it runs stops, /run and /tmp (tmpfs) are
// emptied, and the units that were active start again. Called under s.mu:
// it runs apart. A host never started has nothing to restart.
func (s *Sim) rebootHost(id string) {
	s.hostsMu.Lock()
	h := s.hosts[id]
	s.hostsMu.Unlock()
	if h == nil {
		return
	}
	s.wg.Go(func() {
		h.shutdown() // until it is forgotten, connections to it are refused
		h.root.Close()
		if err := firstboot.Boot(filepath.Join(h.dir, "root")); err != nil {
			s.log.Error("host rebooted with its /run as it was", "server", h.name, "err", err)
		}
		s.hostsMu.Lock()
		if s.hosts[id] == h {
			delete(s.hosts, id)
		}
		s.hostsMu.Unlock()
		s.bootAgain(id, "rebooted")
	})
}

// bootAgain starts a host that stopped, from its disk: the units that
// were active start again.
func (s *Sim) bootAgain(id, what string) {
	up, err := s.host(id)
	if err != nil {
		s.log.Error("host not "+what, "server", id, "err", err)
		return
	}
	up.resume()
	s.log.Debug("host "+what, "server", up.name)
}

// powerHost makes an in-process host what its server's status says, apart
// (the caller may hold s.mu): SHUTOFF stops it (its connections close,
// new ones are refused, its disk stays), ACTIVE boots it again from its
// disk as a reboot does. powerMu keeps a stop and a start in the order the
// status last said.
func (s *Sim) powerHost(id string) {
	s.wg.Go(func() {
		s.powerMu.Lock()
		defer s.powerMu.Unlock()
		s.mu.Lock()
		on := s.w.Servers[id] != nil && s.w.Servers[id].Status == "ACTIVE"
		s.mu.Unlock()
		s.hostsMu.Lock()
		h := s.hosts[id]
		if !on && h != nil {
			delete(s.hosts, id)
		}
		s.hostsMu.Unlock()
		switch {
		case !on && h != nil:
			h.shutdown()
			h.root.Close()
			s.log.Debug("host powered off", "server", h.name)
		case on && h == nil:
			if err := firstboot.Boot(filepath.Join(s.hostsDir, id, "root")); err != nil {
				s.log.Error("host powered on with its /run as it was", "server", id, "err", err)
			}
			s.bootAgain(id, "powered on")
		}
	})
}

// host returns the runtime of an ACTIVE server, starting it on first use.
// The caller must not hold s.mu.
func (s *Sim) host(id string) (*simHost, error) {
	if s.real != nil {
		return nil, fmt.Errorf("server %s: a real machine, reached over its own network only", id)
	}
	// Never s.mu inside hostsMu: servers are removed under s.mu.
	s.hostsMu.Lock()
	h := s.hosts[id]
	s.hostsMu.Unlock()
	if h != nil {
		return h, nil
	}
	s.mu.Lock()
	sv := s.w.Servers[id]
	var name, key string
	var keyErr error
	if sv != nil && sv.Status == "ACTIVE" {
		had := sv.HostKey != ""
		keyErr = ensureHostKey(sv)
		name, key = sv.Name, sv.HostKey
		if !had {
			s.changed()
		}
	}
	s.mu.Unlock()
	if keyErr != nil {
		return nil, keyErr
	}
	if key == "" {
		return nil, fmt.Errorf("server %s: not an active host", id)
	}
	signer, err := ssh.ParsePrivateKey([]byte(key))
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", name, err)
	}
	dir := filepath.Join(s.hostsDir, id)
	if _, err := os.Stat(filepath.Join(dir, "root")); errors.Is(err, fs.ErrNotExist) {
		if _, err := firstboot.Seed(dir); err != nil { // booted without user_data
			return nil, fmt.Errorf("host %s: %w", name, err)
		}
	}
	root, err := os.OpenRoot(filepath.Join(dir, "root"))
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", name, err)
	}
	// /tmp, as every host has it (a tmpfs on Flatcar).
	err = root.MkdirAll("tmp", 0o755)
	if err == nil {
		err = root.Chmod("tmp", 0o777|os.ModeSticky)
	}
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("host %s: /tmp: %w", name, err)
	}
	h = &simHost{s: s, id: id, name: name, dir: dir, root: root, signer: signer, rec: hostRecord{Units: map[string]string{}}}
	if b, err := os.ReadFile(filepath.Join(dir, "records.json")); err == nil {
		if err := json.Unmarshal(b, &h.rec); err != nil {
			root.Close()
			return nil, fmt.Errorf("host %s records: %w", name, err)
		}
	}
	if h.rec.Units == nil {
		h.rec.Units = map[string]string{}
	}
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	if other := s.hosts[id]; other != nil {
		root.Close()
		return other, nil
	}
	s.hosts[id] = h
	return h, nil
}

// HostEvents returns what commands did on the named server's host.
func (s *Sim) HostEvents(server string) ([]HostEvent, error) {
	h, err := s.hostNamed(server)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.rec.Events), nil
}

// HostRoot returns the folder standing for the named server's root.
// With real hosts it is the machine's root as the hypervisor sees it (a
// test reading a disk), not a way in for OPKE.
func (s *Sim) HostRoot(server string) (string, error) {
	if s.real != nil {
		id, err := s.serverID(server)
		if err != nil {
			return "", err
		}
		return s.real.root(id)
	}
	h, err := s.hostNamed(server)
	if err != nil {
		return "", err
	}
	return h.root.Name(), nil
}

// hostNamed returns the host of a server named by id or unique name.
func (s *Sim) hostNamed(server string) (*simHost, error) {
	id, err := s.serverID(server)
	if err != nil {
		return nil, err
	}
	return s.host(id)
}

// serverID finds a server by id or unique name.
func (s *Sim) serverID(nameOrID string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.w.Servers[nameOrID]; ok {
		return nameOrID, nil
	}
	var found []string
	for id, sv := range s.w.Servers {
		if sv.Name == nameOrID {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("server %q: %d servers have that name", nameOrID, len(found))
	}
	return found[0], nil
}

// sshConfig accepts core with the server's Nova keypair or a key in core's
// authorized_keys files, read at each login (keys pushed later count).
func (h *simHost) sshConfig() *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if meta.User() != "core" {
				return nil, fmt.Errorf("user %q: only core logs in", meta.User())
			}
			for _, k := range h.authorizedKeys() {
				if k.Type() == key.Type() && string(k.Marshal()) == string(key.Marshal()) {
					return &ssh.Permissions{}, nil
				}
			}
			return nil, errors.New("key not authorized for core")
		},
		ServerVersion: "SSH-2.0-OpenSSH_9.6 opke-sim",
	}
	cfg.AddHostKey(h.signer)
	return cfg
}

func (h *simHost) authorizedKeys() []ssh.PublicKey {
	var lines []string
	h.s.mu.Lock()
	if sv := h.s.w.Servers[h.id]; sv != nil && sv.KeyName != "" {
		if kp := h.s.w.Keypairs[sv.UserID+"/"+sv.KeyName]; kp != nil {
			lines = append(lines, kp.PublicKey)
		}
	}
	h.s.mu.Unlock()
	read := func(p string) {
		if b, err := h.root.ReadFile(p); err == nil {
			lines = append(lines, strings.Split(string(b), "\n")...)
		}
	}
	read("home/core/.ssh/authorized_keys")
	if entries, err := fs.ReadDir(h.root.FS(), "home/core/.ssh/authorized_keys.d"); err == nil {
		for _, e := range entries {
			read("home/core/.ssh/authorized_keys.d/" + e.Name())
		}
	}
	var keys []ssh.PublicKey
	for _, l := range lines {
		if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(l)); err == nil {
			keys = append(keys, k)
		}
	}
	return keys
}

// maxSessions is OpenSSH's default MaxSessions: the sessions one
// connection may have open at once.
const maxSessions = 10

// serveSSH runs the host's SSH server on conn until the client leaves.
func (h *simHost) serveSSH(conn net.Conn) {
	defer conn.Close()
	sc, chans, reqs, err := ssh.NewServerConn(conn, h.sshConfig())
	if err != nil {
		h.s.log.Debug("ssh handshake failed", "host", h.name, "err", err)
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	var sessions atomic.Int32
	for nc := range chans {
		switch nc.ChannelType() {
		case "session":
			// OpenSSH's MaxSessions: past it a session is refused, until
			// one the server still counts has ended.
			if sessions.Load() >= maxSessions {
				_ = nc.Reject(ssh.ConnectionFailed, "open failed")
				continue
			}
			ch, reqs, err := nc.Accept()
			if err != nil {
				continue
			}
			sessions.Add(1)
			go func() {
				defer sessions.Add(-1)
				h.session(ch, reqs)
			}()
		case "direct-tcpip":
			go h.directTCPIP(nc)
		default:
			_ = nc.Reject(ssh.UnknownChannelType, "unsupported channel type")
		}
	}
}

// session serves exec and the sftp subsystem; there is no shell.
func (h *simHost) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		switch req.Type {
		case "exec":
			var p struct{ Command string }
			if ssh.Unmarshal(req.Payload, &p) != nil {
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, nil)
			code := h.exec(p.Command, ch, ch, ch.Stderr())
			_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
			return
		case "subsystem":
			var p struct{ Name string }
			if ssh.Unmarshal(req.Payload, &p) != nil || p.Name != "sftp" {
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, nil)
			srv := sftp.NewRequestServer(ch, jailHandlers(h))
			_ = srv.Serve()
			_ = srv.Close()
			_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
			return
		case "env":
			_ = req.Reply(true, nil)
		default: // shell, pty-req, x11: not on this host
			_ = req.Reply(false, nil)
		}
	}
}

func (h *simHost) systemctl(args []string, priv bool, ev *HostEvent, stdout, stderr io.Writer) int {
	if len(args) >= 1 && args[0] != "is-active" && !priv {
		// As systemd answers a user without polkit's leave.
		unit := ""
		if len(args) > 1 {
			unit = " " + args[1]
		}
		fmt.Fprintf(stderr, "Failed to %s%s: Access denied\n", args[0], unit)
		return 1
	}
	if len(args) == 1 && args[0] == "daemon-reload" {
		return 0
	}
	if len(args) != 2 {
		fmt.Fprintln(stderr, "systemctl: this host knows daemon-reload, restart, start, stop and is-active UNIT")
		return 2
	}
	verb, unit := args[0], args[1]
	if !strings.Contains(unit, ".") {
		unit += ".service"
	}
	ev.Unit = unit
	// The administrator's units (Ignition's) and the OS's.
	if _, err := h.root.Stat(path.Join("etc/systemd/system", unit)); err != nil {
		if _, err := h.root.Stat(path.Join("usr/lib/systemd/system", unit)); err != nil {
			fmt.Fprintf(stderr, "Failed to %s %s: Unit %s not found.\n", verb, unit, unit)
			return 5
		}
	}
	switch verb {
	case "restart", "start":
		h.mu.Lock()
		files := h.digests()
		h.mu.Unlock()
		unitErr, podErr := h.startUnit(unit, verb == "restart")
		state := "active"
		if errors.Is(unitErr, errCrashLoop) {
			state, ev.Error, unitErr = "activating", unitErr.Error(), nil
		} else if unitErr != nil {
			state = "failed"
			ev.Error = unitErr.Error()
			fmt.Fprintf(stderr, "Job for %s failed because the control process exited with error code.\n%s: %v\n", unit, unit, unitErr)
		} else if podErr != nil {
			ev.Error = podErr.Error()
			h.s.log.Info("static pod not started", "host", h.name, "err", podErr)
		}
		h.mu.Lock()
		h.setUnit(unit, state)
		h.mu.Unlock()
		ev.Files = files
		if unitErr != nil {
			return 1
		}
	case "stop":
		h.stopUnit(unit)
		h.mu.Lock()
		h.setUnit(unit, "inactive")
		h.mu.Unlock()
	case "is-active":
		h.mu.Lock()
		state := h.rec.Units[unit]
		h.mu.Unlock()
		if state == "" {
			state = "inactive"
		}
		fmt.Fprintln(stdout, state)
		if state != "active" {
			return 3
		}
	default:
		fmt.Fprintf(stderr, "systemctl: unknown command %q\n", verb)
		return 1
	}
	return 0
}

// digests returns the sha256 of every file under /etc and /var/lib.
func (h *simHost) digests() map[string]string {
	out := map[string]string{}
	for _, top := range []string{"etc", "var/lib"} {
		_ = fs.WalkDir(h.root.FS(), top, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			if b, err := h.root.ReadFile(p); err == nil {
				sum := sha256.Sum256(b)
				out["/"+p] = hex.EncodeToString(sum[:])
			}
			return nil
		})
	}
	return out
}

// record appends an event and saves the records.
func (h *simHost) record(ev HostEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.Events = append(h.rec.Events, ev)
	b, err := json.Marshal(h.rec)
	if err == nil {
		err = atomicfile.Write(filepath.Join(h.dir, "records.json"), b, 0o600)
	}
	if err != nil {
		h.s.log.Error("host records not saved", "host", h.name, "err", err)
	}
}

// rel turns an absolute host path into a path under the root.
func rel(p string) string {
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	if p == "" {
		return "."
	}
	return p
}

// directTCPIP forwards a channel to an address on one of the host's own
// networks: port 22 of another host reaches its SSH server, other ports
// what that host runs there, a load balancer's VIP its members.
func (h *simHost) directTCPIP(nc ssh.NewChannel) {
	var p struct {
		Host       string
		Port       uint32
		OriginHost string
		OriginPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &p); err != nil || p.Port > 65535 {
		_ = nc.Reject(ssh.ConnectionFailed, "bad direct-tcpip request")
		return
	}
	h.s.mu.Lock()
	nets := h.s.w.networksOf(h.id)
	h.s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	conn, err := h.s.connect(ctx, nets, p.Host, int(p.Port))
	cancel()
	if err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		conn.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	relay(ch, conn)
}

// relay copies both ways until either side ends.
func relay(a io.ReadWriteCloser, b io.ReadWriteCloser) {
	done := make(chan struct{}, 2)
	cp := func(dst io.WriteCloser, src io.Reader) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
}

// setUnit records a unit's state, and when the kubelet's changed (under
// h.mu).
func (h *simHost) setUnit(unit, state string) {
	if unit == unitKubelet && (h.rec.Units[unit] == "active") != (state == "active") {
		h.kubeletSince = time.Now()
	}
	h.rec.Units[unit] = state
}

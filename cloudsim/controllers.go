package cloudsim

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"opke.dev/opke/cloudsim/kubestub"
	"opke.dev/opke/internal/atomicfile"
	"opke.dev/opke/state"
)

// Controllers. What a host runs is decided by its units, as on a real
// host: starting etcd-member.service runs a real etcd member (embedded)
// from the pushed /etc/kubernetes/etcd.env and the certificates it names;
// starting kubelet.service runs the static pods of
// /etc/kubernetes/manifests, of which the simulator knows kube-apiserver
// (a kubestub.Server with the pushed serving certificate). The one
// translation: what would listen on a simulated address listens on a
// loopback port, and routes.go sends <fixed IP>:PORT there. etcd dials its
// peers itself, so its peer URLs are rewritten to loopback ports kept in
// the state (PeerPorts); its client URLs are advertised as rendered, so a
// client's member list points at the fixed IPs, reached through the
// gateway. A unit active when the simulator stopped runs again when it
// starts.

const (
	unitEtcd    = "etcd-member.service"
	unitKubelet = "kubelet.service"

	pathEtcdEnv      = "etc/kubernetes/etcd.env"
	pathKubeletEnv   = "etc/kubernetes/kubelet.env"
	pathAPIServerPod = "etc/kubernetes/manifests/kube-apiserver.yaml"
	pathClusterCA    = "etc/kubernetes/pki/ca.crt"
)

// etcdMember is a host's running etcd member.
type etcdMember struct {
	e     *embed.Etcd
	ports map[int]string // simulated port -> loopback address
}

// apiServer is a host's running kube-apiserver static pod.
type apiServer struct {
	srv    *kubestub.Server
	port   int
	digest string // of the manifest and the files it names
}

// startUnit brings up what a unit runs on start or restart; it returns
// why a unit failed, or, for the kubelet, why a static pod did not start
// (the kubelet itself runs on).
func (h *simHost) startUnit(unit string, restart bool) (unitErr, podErr error) {
	h.svcMu.Lock()
	defer h.svcMu.Unlock()
	if h.closed {
		return errors.New("the host is shutting down"), nil
	}
	switch unit {
	case unitEtcd:
		if m := h.etcd.Load(); m != nil {
			if !restart {
				return nil, nil
			}
			h.etcd.Store(nil)
			m.e.Close()
		}
		m, err := h.startEtcd()
		if err != nil {
			return err, nil
		}
		h.etcd.Store(m)
	case unitKubelet:
		if tag := h.s.crashTag(h.name); tag != "" && tag == h.kubeletEnv()["KUBELET_VERSION"] {
			return fmt.Errorf("kubelet %s exits at start: %w", tag, errCrashLoop), nil
		}
		h.kubeletSeen()
		return nil, h.syncStaticPods()
	}
	return nil, nil
}

// errCrashLoop is a unit that starts and exits again and again: systemd
// keeps it "activating" (auto-restart), and its start does not fail.
var errCrashLoop = errors.New("crash loop")

// CrashKubelet makes the kubelet of server exit at start whenever its
// kubelet.env names the release tag (one the host cannot run):
// the unit stays activating, the node is not Ready, and the static pods
// keep running as they were. An empty tag heals the host.
func (s *Sim) CrashKubelet(server, tag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crashing == nil {
		s.crashing = map[string]string{}
	}
	if tag == "" {
		delete(s.crashing, server)
		return
	}
	s.crashing[server] = tag
}

func (s *Sim) crashTag(server string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashing[server]
}

// kubeletEnv is the host's kubelet.env (its release, KUBELET_VERSION, and
// flags, KUBELET_ARGS); nil if it does not read.
func (h *simHost) kubeletEnv() map[string]string {
	b, err := h.root.ReadFile(pathKubeletEnv)
	if err != nil {
		return nil
	}
	env, err := readEnvFile(b)
	if err != nil {
		return nil
	}
	return env
}

// stopUnit stops what a unit runs. Static pods outlive their kubelet, as
// containers do.
func (h *simHost) stopUnit(unit string) {
	h.svcMu.Lock()
	defer h.svcMu.Unlock()
	if unit == unitEtcd {
		if m := h.etcd.Swap(nil); m != nil {
			m.e.Close()
		}
	}
}

// down reports whether the host was shut down (without svcMu, which a
// unit starting holds while it dials other hosts).
func (h *simHost) down() bool { return h.off.Load() }

// shutdown stops everything the host runs, for good.
func (h *simHost) shutdown() {
	h.svcMu.Lock()
	defer h.svcMu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	h.off.Store(true)
	// The connections go first, as when a machine stops: etcd would
	// otherwise wait for its clients to leave.
	h.connsMu.Lock()
	for c := range h.conns {
		c.Conn.Close()
	}
	h.connsMu.Unlock()
	if m := h.etcd.Swap(nil); m != nil {
		// A member not ready yet (no quorum) would wait for it in Close
		// forever: etcd serves its clients only once ready, and Close
		// waits for that serving to start. Stopped hard first, it does not.
		select {
		case <-m.e.Server.ReadyNotify():
		default:
			m.e.Server.HardStop()
		}
		m.e.Close()
	}
	if a := h.api.Swap(nil); a != nil {
		_ = a.srv.Close()
	}
}

// trackedConn is a connection to something a host runs, closed with the host.
type trackedConn struct {
	net.Conn
	h *simHost
}

func (c *trackedConn) Close() error {
	c.h.connsMu.Lock()
	delete(c.h.conns, c)
	c.h.connsMu.Unlock()
	return c.Conn.Close()
}

// track registers a connection to the host's services.
func (h *simHost) track(c net.Conn) net.Conn {
	t := &trackedConn{Conn: c, h: h}
	h.connsMu.Lock()
	defer h.connsMu.Unlock()
	if h.conns == nil {
		h.conns = map[*trackedConn]struct{}{}
	}
	h.conns[t] = struct{}{}
	return t
}

// leads reports whether the host runs the leader of its etcd cluster.
func (h *simHost) leads() bool {
	m := h.etcd.Load()
	return m != nil && m.e.Server.Leader() == m.e.Server.MemberID()
}

// shutdownHosts stops every host, followers first: a leader stopping
// hands its leadership to a live member, and would wait out etcd's
// request timeout for members stopping at the same time.
func shutdownHosts(hosts []*simHost) {
	var followers, leaders sync.WaitGroup
	for _, h := range hosts {
		if !h.leads() {
			followers.Go(h.shutdown)
		}
	}
	followers.Wait()
	for _, h := range hosts {
		leaders.Go(h.shutdown) // shutdown is idempotent
	}
	leaders.Wait()
}

// listening returns the loopback address of what the host runs on port.
func (h *simHost) listening(port int) string {
	if m := h.etcd.Load(); m != nil {
		if addr, ok := m.ports[port]; ok {
			return addr
		}
	}
	if a := h.api.Load(); a != nil && a.port == port {
		return a.srv.Addr()
	}
	return ""
}

// resume starts again the units that were active when the simulator stopped.
func (h *simHost) resume() {
	h.mu.Lock()
	units := h.rec.Units
	etcd, kubelet := units[unitEtcd] == "active", units[unitKubelet] == "active"
	h.mu.Unlock()
	for _, u := range []struct {
		name   string
		active bool
	}{{unitEtcd, etcd}, {unitKubelet, kubelet}} {
		if !u.active {
			continue
		}
		unitErr, podErr := h.startUnit(u.name, false)
		if err := errors.Join(unitErr, podErr); err != nil {
			h.s.log.Error("unit not resumed", "host", h.name, "unit", u.name, "err", err)
		}
	}
}

// resumeHosts starts the units of every host that had units active.
func (s *Sim) resumeHosts() {
	entries, err := os.ReadDir(s.hostsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(s.hostsDir, e.Name(), "records.json"))
		if err != nil {
			continue
		}
		var rec hostRecord
		if json.Unmarshal(b, &rec) != nil || rec.Units[unitEtcd] != "active" && rec.Units[unitKubelet] != "active" {
			continue
		}
		h, err := s.host(e.Name())
		if err != nil {
			s.log.Error("host not resumed", "server", e.Name(), "err", err)
			continue
		}
		h.resume()
	}
}

// readEnvFile parses a docker --env-file: KEY=VALUE lines, # comments.
func readEnvFile(b []byte) (map[string]string, error) {
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: not KEY=VALUE", n)
		}
		env[k] = v
	}
	return env, sc.Err()
}

// etcdKeys are the ETCD_* settings the simulator honours; another one in
// etcd.env fails the unit rather than be silently ignored.
var etcdKeys = []string{
	"ETCD_IMAGE", "ETCD_NAME", "ETCD_DATA_DIR",
	"ETCD_LISTEN_CLIENT_URLS", "ETCD_ADVERTISE_CLIENT_URLS", "ETCD_LISTEN_PEER_URLS", "ETCD_INITIAL_ADVERTISE_PEER_URLS",
	"ETCD_INITIAL_CLUSTER", "ETCD_INITIAL_CLUSTER_STATE", "ETCD_INITIAL_CLUSTER_TOKEN", "ETCD_LISTEN_METRICS_URLS", "ETCD_SNAPSHOT_COUNT",
	"ETCD_CLIENT_CERT_AUTH", "ETCD_TRUSTED_CA_FILE", "ETCD_CERT_FILE", "ETCD_KEY_FILE",
	"ETCD_PEER_CLIENT_CERT_AUTH", "ETCD_PEER_TRUSTED_CA_FILE", "ETCD_PEER_CERT_FILE", "ETCD_PEER_KEY_FILE",
}

// startEtcd runs the host's etcd member from etcd.env; the caller holds svcMu.
func (h *simHost) startEtcd() (*etcdMember, error) {
	b, err := h.root.ReadFile(pathEtcdEnv)
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", pathEtcdEnv, err)
	}
	env, err := readEnvFile(b)
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", pathEtcdEnv, err)
	}
	for k := range env {
		if !slices.Contains(etcdKeys, k) {
			return nil, fmt.Errorf("/%s: the simulator does not honour %s", pathEtcdEnv, k)
		}
	}
	for _, k := range []string{"ETCD_NAME", "ETCD_DATA_DIR", "ETCD_ADVERTISE_CLIENT_URLS", "ETCD_INITIAL_ADVERTISE_PEER_URLS", "ETCD_INITIAL_CLUSTER",
		"ETCD_TRUSTED_CA_FILE", "ETCD_CERT_FILE", "ETCD_KEY_FILE", "ETCD_PEER_TRUSTED_CA_FILE", "ETCD_PEER_CERT_FILE", "ETCD_PEER_KEY_FILE"} {
		if env[k] == "" {
			return nil, fmt.Errorf("/%s: %s is not set", pathEtcdEnv, k)
		}
	}
	// The certificates, byte for byte, copied out of the root so that etcd
	// never follows a path of the host's.
	run := filepath.Join(h.dir, "run", "etcd")
	if err := os.MkdirAll(run, 0o700); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	file := func(key string) (string, error) {
		b, err := h.root.ReadFile(rel(env[key]))
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w", key, env[key], err)
		}
		p := filepath.Join(run, strings.ToLower(key))
		return p, atomicfile.Write(p, b, 0o600)
	}
	tlsInfo := func(cert, key, ca, auth string) (transport.TLSInfo, error) {
		var ti transport.TLSInfo
		var err1, err2, err3 error
		ti.CertFile, err1 = file(cert)
		ti.KeyFile, err2 = file(key)
		ti.TrustedCAFile, err3 = file(ca)
		ti.ClientCertAuth = env[auth] == "true"
		return ti, errors.Join(err1, err2, err3)
	}
	cfg := embed.NewConfig()
	if cfg.ClientTLSInfo, err = tlsInfo("ETCD_CERT_FILE", "ETCD_KEY_FILE", "ETCD_TRUSTED_CA_FILE", "ETCD_CLIENT_CERT_AUTH"); err != nil {
		return nil, err
	}
	if cfg.PeerTLSInfo, err = tlsInfo("ETCD_PEER_CERT_FILE", "ETCD_PEER_KEY_FILE", "ETCD_PEER_TRUSTED_CA_FILE", "ETCD_PEER_CLIENT_CERT_AUTH"); err != nil {
		return nil, err
	}
	dataDir := rel(env["ETCD_DATA_DIR"])
	if err := h.root.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("ETCD_DATA_DIR: %w", err)
	}
	cfg.Name, cfg.Dir = env["ETCD_NAME"], filepath.Join(h.root.Name(), dataDir)
	if v := env["ETCD_INITIAL_CLUSTER_STATE"]; v != "" {
		cfg.ClusterState = v
	}
	if v := env["ETCD_INITIAL_CLUSTER_TOKEN"]; v != "" {
		cfg.InitialClusterToken = v
	}
	if v := env["ETCD_SNAPSHOT_COUNT"]; v != "" {
		if cfg.SnapshotCount, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, fmt.Errorf("ETCD_SNAPSHOT_COUNT: %w", err)
		}
	}
	// Peer URLs: the simulated addresses become loopback ports.
	h.s.mu.Lock()
	nets := h.s.w.networksOf(h.id)
	h.s.mu.Unlock()
	peer := func(raw string) (url.URL, int, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return url.URL{}, 0, err
		}
		ap, err := netip.ParseAddrPort(u.Host)
		if err != nil {
			return url.URL{}, 0, fmt.Errorf("peer URL %s: %w", raw, err)
		}
		port, err := h.s.peerPort(nets, ap)
		if err != nil {
			return url.URL{}, 0, err
		}
		return url.URL{Scheme: u.Scheme, Host: "127.0.0.1:" + strconv.Itoa(port)}, int(ap.Port()), nil
	}
	var initial []string
	for _, entry := range strings.Split(env["ETCD_INITIAL_CLUSTER"], ",") {
		name, raw, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("ETCD_INITIAL_CLUSTER: %q is not NAME=URL", entry)
		}
		u, _, err := peer(raw)
		if err != nil {
			return nil, fmt.Errorf("ETCD_INITIAL_CLUSTER: %w", err)
		}
		initial = append(initial, name+"="+u.String())
	}
	cfg.InitialCluster = strings.Join(initial, ",")
	own, peerPort, err := peer(strings.Split(env["ETCD_INITIAL_ADVERTISE_PEER_URLS"], ",")[0])
	if err != nil {
		return nil, fmt.Errorf("ETCD_INITIAL_ADVERTISE_PEER_URLS: %w", err)
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{own}, []url.URL{own}
	// Client URLs: one loopback listener stands for the fixed IP's; the
	// advertised URLs stay as rendered.
	cfg.AdvertiseClientUrls = nil
	clientPort := 0
	for _, raw := range strings.Split(env["ETCD_ADVERTISE_CLIENT_URLS"], ",") {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("ETCD_ADVERTISE_CLIENT_URLS: %w", err)
		}
		cfg.AdvertiseClientUrls = append(cfg.AdvertiseClientUrls, *u)
		if clientPort, err = strconv.Atoi(u.Port()); err != nil {
			return nil, fmt.Errorf("ETCD_ADVERTISE_CLIENT_URLS: %s has no port", raw)
		}
	}
	cfg.ListenClientUrls = []url.URL{{Scheme: cfg.AdvertiseClientUrls[0].Scheme, Host: "127.0.0.1:0"}}
	cfg.ListenMetricsUrls = nil
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(state.QuietEtcdLogger())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", cfg.Name, err)
	}
	m := &etcdMember{e: e, ports: map[int]string{
		clientPort: e.Clients[0].Addr().String(),
		peerPort:   e.Peers[0].Addr().String(),
	}}
	h.s.log.Debug("etcd member started", "host", h.name, "client", m.ports[clientPort], "peer", m.ports[peerPort])
	return m, nil
}

// peerPort returns the loopback port standing for addr on one of nets,
// choosing a free one the first time.
func (s *Sim) peerPort(nets []string, addr netip.AddrPort) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	netID := ""
	for _, sn := range s.w.Subnets {
		if pfx, err := netip.ParsePrefix(sn.CIDR); err == nil && pfx.Contains(addr.Addr()) && slices.Contains(nets, sn.NetworkID) {
			netID = sn.NetworkID
		}
	}
	if netID == "" {
		return 0, fmt.Errorf("%s is on none of the host's networks", addr.Addr())
	}
	key := netID + "/" + addr.String()
	if p, ok := s.w.PeerPorts[key]; ok {
		return p, nil
	}
	p, err := fixedPort(s.w.PeerPorts)
	if err != nil {
		return 0, fmt.Errorf("a loopback port for %s: %w", addr, err)
	}
	s.w.PeerPorts[key] = p
	s.changed()
	return p, nil
}

// fixedPort chooses a free loopback port a member binds again at every
// start, below Linux's ephemeral range (32768 up): a port the kernel
// gave out for a listener on :0 or an outgoing connection could be taken
// by then (parallel tests' simulators, their clients), and the member's
// restart failed with "address already in use".
func fixedPort(taken map[string]int) (int, error) {
	const lo, hi = 20000, 32767
	used := slices.Collect(maps.Values(taken))
	for range 200 {
		p := lo + rand.IntN(hi-lo)
		if slices.Contains(used, p) {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		return p, nil
	}
	return 0, errors.New("no free port between 20000 and 32767")
}

// kubeKey returns the key of the Kubernetes cluster whose hosts trust
// the CA bundle ca (a ca.crt): the cluster of any certificate in it seen
// before, else a new one keyed by the bundle's digest. Every certificate
// of the bundle is noted as the cluster's (in the state saved), so a CA
// rotation (a bundle of the old and new CAs, then the new one alone)
// keeps the cluster, as its hosts trust one another throughout. The
// caller holds s.mu.
func (s *Sim) kubeKey(ca []byte) string {
	w := s.w
	if len(ca) == 0 {
		return ""
	}
	var certs []string
	for rest := ca; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		certs = append(certs, digestOf(block.Bytes))
	}
	key := digestOf(ca)
	for _, c := range certs {
		if k, ok := w.KubeTrust[c]; ok {
			key = k
			break
		}
	}
	if w.KubeTrust == nil {
		w.KubeTrust = map[string]string{}
	}
	for _, c := range certs {
		if w.KubeTrust[c] != key {
			w.KubeTrust[c] = key
			s.changed()
		}
	}
	return key
}

// kubeletSeen notes the cluster the host's kubelet belongs to (by its CA)
// and the version it runs, and registers its node there, as a starting
// kubelet does; the caller holds svcMu.
func (h *simHost) kubeletSeen() {
	ca, _ := h.root.ReadFile(pathClusterCA)
	env := h.kubeletEnv()
	version := env["KUBELET_VERSION"]
	// The labels and taints its flags register the node with. Flags that
	// do not read register it without (a real kubelet would not start:
	// OPKE renders them; reconciler's TestApplyWaitsForAddonsToRollOut
	// needs the controllers' taint read from its render).
	labels, taints, _ := kubestub.KubeletRegistration(env["KUBELET_ARGS"])
	h.s.mu.Lock()
	key := h.s.kubeKey(ca)
	h.s.mu.Unlock()
	h.mu.Lock()
	h.kubeCluster, h.kubeletVersion, h.kubeletLabels, h.kubeletTaints = key, version, labels, taints
	h.mu.Unlock()
	if len(ca) == 0 {
		return
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	o := h.s.w.Kube[key]
	if o == nil {
		o = &kubestub.Objects{}
		h.s.w.Kube[key] = o
	}
	o.Register(kubestub.Node{Name: h.name, InternalIP: h.s.w.serverIP(h.id), KubeletVersion: version, Labels: labels, Taints: taints})
	h.s.changed()
}

// serverIP is a server's first fixed IP, or "".
func (w *world) serverIP(id string) string {
	if sv := w.Servers[id]; sv != nil && len(sv.Ports) > 0 {
		if p := w.Ports[sv.Ports[0]]; p != nil && len(p.FixedIPs) > 0 {
			return p.FixedIPs[0].IPAddress
		}
	}
	return ""
}

func digestOf(parts ...[]byte) string {
	if len(parts) == 1 && len(parts[0]) == 0 {
		return ""
	}
	d := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(d, "%d:", len(p))
		d.Write(p)
	}
	return hex.EncodeToString(d.Sum(nil))
}

// syncStaticPods runs kube-apiserver as its manifest says, restarting it
// when the manifest or a file it names changed; the caller holds svcMu.
func (h *simHost) syncStaticPods() error {
	manifest, err := h.root.ReadFile(pathAPIServerPod)
	if errors.Is(err, fs.ErrNotExist) {
		if a := h.api.Swap(nil); a != nil {
			_ = a.srv.Close()
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	m, err := kubestub.ParseManifest(manifest)
	if err != nil {
		return err
	}
	var files [3][]byte
	for i, p := range []string{m.CertFile, m.KeyFile, m.ClientCAFile} {
		if files[i], err = h.root.ReadFile(rel(p)); err != nil {
			return fmt.Errorf("kube-apiserver: %s: %w", p, err)
		}
	}
	digest := digestOf(manifest, files[0], files[1], files[2])
	h.s.mu.Lock()
	key := h.s.kubeKey(files[2])
	h.s.mu.Unlock()
	defer h.syncMirrors(key)
	if a := h.api.Load(); a != nil && a.digest == digest {
		return nil
	}
	if a := h.api.Swap(nil); a != nil {
		_ = a.srv.Close()
	}
	cert, err := tls.X509KeyPair(files[0], files[1])
	if err != nil {
		return fmt.Errorf("kube-apiserver: serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(files[2]) {
		return fmt.Errorf("kube-apiserver: %s holds no certificate", m.ClientCAFile)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	h.s.mu.Lock()
	nets := h.s.w.networksOf(h.id)
	h.s.mu.Unlock()
	b := &kubeBackend{s: h.s, cluster: key, nets: nets, etcd: m.EtcdServers}
	srv := kubestub.Serve(ln, kubestub.Config{Version: m.Version, Certificate: cert, ClientCAs: pool, Backend: b, Logger: h.s.log})
	h.api.Store(&apiServer{srv: srv, port: m.Port, digest: digest})
	h.s.log.Debug("kube-apiserver stub started", "host", h.name, "version", m.Version, "addr", srv.Addr())
	return nil
}

// syncMirrors keeps the host's mirror pods in its cluster (by its key,
// Sim.kubeKey), one per manifest of /etc/kubernetes/manifests with
// its annotations and containers, as the kubelet keeps them. The
// simulator runs only the API server's; the others' mirrors say what the
// kubelet was given.
func (h *simHost) syncMirrors(cluster string) {
	entries, err := fs.ReadDir(h.root.FS(), path.Dir(pathAPIServerPod))
	if err != nil {
		return
	}
	var pods []kubestub.Pod
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") || strings.HasPrefix(e.Name(), ".") { // the kubelet skips dotfiles
			continue
		}
		b, err := h.root.ReadFile(path.Join(path.Dir(pathAPIServerPod), e.Name()))
		if err != nil {
			continue
		}
		p, err := kubestub.StaticPod(b, h.name)
		if err != nil {
			h.s.log.Info("static pod not started", "host", h.name, "manifest", e.Name(), "err", err)
			continue
		}
		pods = append(pods, p)
	}
	rootCA := h.publishedRootCA(pods)
	b := &kubeBackend{s: h.s, cluster: cluster}
	_ = b.Update(func(o *kubestub.Objects) error {
		o.SetMirrors(h.name, pods)
		if rootCA != nil {
			o.RootCA = string(rootCA)
		}
		return nil
	})
}

// publishedRootCA is what the host's kube-controller-manager (among its
// static pods) publishes as kube-root-ca.crt: the file its --root-ca-file
// names, read from the host; nil without one. The simulator runs no
// controller-manager: this is the one thing of it OPKE depends on (a CA
// rotation's workloads restart waits for the bundle to be published).
func (h *simHost) publishedRootCA(pods []kubestub.Pod) []byte {
	for _, p := range pods {
		i := slices.IndexFunc(p.Containers, func(c kubestub.Container) bool { return c.Name == "kube-controller-manager" })
		if i < 0 {
			continue
		}
		for _, arg := range p.Containers[i].Command {
			if f, ok := strings.CutPrefix(arg, "--root-ca-file="); ok {
				b, err := h.root.ReadFile(rel(f))
				if err != nil {
					h.s.log.Info("kube-controller-manager: root CA file", "host", h.name, "err", err)
					return nil
				}
				return b
			}
		}
	}
	return nil
}

// manifestWritten is the kubelet's watch of its manifests: a static
// pod's manifest written while the kubelet runs starts the pod again with
// it, as a real kubelet does without a restart of its own.
func (h *simHost) manifestWritten(p string) {
	if path.Dir(p) != path.Dir(pathAPIServerPod) {
		return
	}
	go func() {
		h.mu.Lock()
		active := h.rec.Units[unitKubelet] == "active"
		h.mu.Unlock()
		if !active {
			return
		}
		h.svcMu.Lock()
		defer h.svcMu.Unlock()
		if h.closed {
			return
		}
		if err := h.syncStaticPods(); err != nil {
			h.s.log.Info("static pod not started", "host", h.name, "err", err)
		}
	}()
}

// kubeBackend is a Kubernetes cluster as the simulator sees it: the hosts
// whose kubelet trusts its CA, and the objects kept in the world.
type kubeBackend struct {
	s       *Sim
	cluster string // its key (Sim.kubeKey)
	nets    []string
	etcd    []string
}

func (b *kubeBackend) Nodes() []kubestub.Node {
	b.s.hostsMu.Lock()
	hosts := make([]*simHost, 0, len(b.s.hosts))
	for _, h := range b.s.hosts {
		hosts = append(hosts, h)
	}
	b.s.hostsMu.Unlock()
	var nodes []kubestub.Node
	var ids []string
	for _, h := range hosts {
		h.mu.Lock()
		cluster, ready, version, since := h.kubeCluster, h.rec.Units[unitKubelet] == "active", h.kubeletVersion, h.kubeletSince
		labels, taints := h.kubeletLabels, h.kubeletTaints
		h.mu.Unlock()
		if cluster != b.cluster {
			continue
		}
		nodes = append(nodes, kubestub.Node{Name: h.name, Ready: ready, KubeletVersion: version, Since: since, Labels: labels, Taints: taints})
		ids = append(ids, h.id)
	}
	b.s.mu.Lock()
	for i, id := range ids {
		nodes[i].InternalIP = b.s.w.serverIP(id)
	}
	b.s.mu.Unlock()
	slices.SortFunc(nodes, func(x, y kubestub.Node) int { return strings.Compare(x.Name, y.Name) })
	return nodes
}

func (b *kubeBackend) View(fn func(*kubestub.Objects)) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	o := b.s.w.Kube[b.cluster]
	if o == nil {
		o = &kubestub.Objects{}
	}
	fn(o)
}

// Update changes a copy, kept only if fn succeeds, and marks the state
// to be saved.
func (b *kubeBackend) Update(fn func(*kubestub.Objects) error) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	o := b.s.w.Kube[b.cluster]
	if o == nil {
		o = &kubestub.Objects{}
	}
	c := o.Clone()
	if err := fn(c); err != nil {
		return err
	}
	b.s.w.Kube[b.cluster] = c
	b.s.changed()
	return nil
}

// Ready reports whether one of the API server's etcd servers has a member
// that knows its leader: a real API server's etcd check is a read through
// its client of every --etcd-servers endpoint, which one member with
// quorum answers (k8s.io/apiserver's storagebackend/factory/etcd3.go).
func (b *kubeBackend) Ready() error {
	var errs []error
	for _, raw := range b.etcd {
		u, err := url.Parse(raw)
		if err != nil {
			return fmt.Errorf("--etcd-servers: %w", err)
		}
		b.s.mu.Lock()
		dst, err := b.s.w.resolve(b.nets, u.Hostname())
		b.s.mu.Unlock()
		if err != nil || dst.server == "" {
			errs = append(errs, fmt.Errorf("etcd %s: %w", raw, errNoRoute))
			continue
		}
		h, err := b.s.host(dst.server)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if m := h.etcd.Load(); m != nil && m.e.Server.Leader() != 0 {
			return nil
		}
		errs = append(errs, fmt.Errorf("etcd %s: no leader", raw))
	}
	if len(errs) == 0 {
		return errors.New("no --etcd-servers")
	}
	return errors.Join(errs...)
}

// kubeCluster returns the key of the cluster a server's host belongs to:
// the digest of its /etc/kubernetes/pki/ca.crt.
func (s *Sim) kubeCluster(server string) (string, error) {
	h, err := s.hostNamed(server)
	if err != nil {
		return "", err
	}
	ca, err := h.root.ReadFile(pathClusterCA)
	if err != nil || len(ca) == 0 {
		return "", fmt.Errorf("server %s: no cluster CA at /%s", server, pathClusterCA)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kubeKey(ca), nil
}

// KubeObjects returns the objects (cordons, pods, disruption budgets) of
// the Kubernetes cluster the named server belongs to.
func (s *Sim) KubeObjects(server string) (*kubestub.Objects, error) {
	key, err := s.kubeCluster(server)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.w.Kube[key]; o != nil {
		return o.Clone(), nil
	}
	return &kubestub.Objects{}, nil
}

// SetKubeObjects replaces the objects of the Kubernetes cluster the named
// server belongs to: the pods a drain must evict, the budgets that may
// refuse it. The Node objects stay the kubelets' (registered as they
// start) unless o has some.
func (s *Sim) SetKubeObjects(server string, o kubestub.Objects) error {
	key, err := s.kubeCluster(server)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := o.Clone()
	if old := s.w.Kube[key]; c.Nodes == nil && old != nil {
		c.Nodes = maps.Clone(old.Nodes)
	}
	s.w.Kube[key] = c
	s.changed()
	return nil
}

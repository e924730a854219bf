package cloudsim

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
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/cloudsim/machine"
)

// RegistryPort is where a registry started by StartRegistry listens.
const RegistryPort = 5000

// FileMirrorPort is where the file mirror beside a registry started by
// StartRegistry listens (HTTPS, the registry's certificate): what a
// spec's downloadMirror names.
const FileMirrorPort = 5443

// Registry is an OCI registry serving on an external network, as an
// operator's registry mirror on the cloud's provider network: the hosts
// reach it through their routers, as they would a real one.
type Registry struct {
	// Addr is where hosts reach it (the edge's address, RegistryPort).
	Addr netip.AddrPort
	// CACert is the PEM certificate of the CA that signed its
	// certificate: what a spec's registryMirror.caCert names.
	CACert []byte
	// Client reaches it from the edge, trusting that CA: for loading it.
	Client *http.Client
	// LogPath is its log, with an access log line per request.
	LogPath string
	// FilesAddr is where its file mirror listens (FileMirrorPort): the
	// files ServeFiles adds, under their upstream URL's host and path,
	// as an operator's files_repo serves them.
	FilesAddr netip.AddrPort

	filesMu sync.Mutex
	files   map[string]string // URL host and path -> local file
	fetched []string          // paths served, in order
}

// FilesURL is the file mirror's base URL: what spec.downloadMirror's
// endpoint names.
func (r *Registry) FilesURL() string { return "https://" + r.FilesAddr.String() }

// ServeFiles adds files to what the file mirror serves: by URL host and
// path (dl.k8s.io/release/v1.35.1/bin/linux/amd64/kubelet), the local
// file to serve there.
func (r *Registry) ServeFiles(files map[string]string) {
	r.filesMu.Lock()
	defer r.filesMu.Unlock()
	maps.Copy(r.files, files)
}

// Fetched lists the paths the file mirror served, in order.
func (r *Registry) Fetched() []string {
	r.filesMu.Lock()
	defer r.filesMu.Unlock()
	return slices.Clone(r.fetched)
}

// serveFile answers GET and HEAD of a file ServeFiles added; anything else
// is 404, as a static file server answers.
func (r *Registry) serveFile(w http.ResponseWriter, req *http.Request) {
	p := strings.TrimPrefix(path.Clean(req.URL.Path), "/")
	r.filesMu.Lock()
	local, ok := r.files[p]
	if ok && req.Method == http.MethodGet {
		r.fetched = append(r.fetched, p)
	}
	r.filesMu.Unlock()
	if !ok || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		http.NotFound(w, req)
		return
	}
	http.ServeFile(w, req, local)
}

// startFiles serves the file mirror on the edge's address at
// FileMirrorPort with the registry's certificate.
func (s *Sim) startFiles(reg *Registry, ns, dir string) error {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		return fmt.Errorf("file mirror: %w", err)
	}
	ln, err := machine.ListenIn(ns, "tcp", reg.FilesAddr.String())
	if err != nil {
		return fmt.Errorf("file mirror: %w", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(reg.serveFile), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	s.real.mu.Lock()
	s.real.servers = append(s.real.servers, srv)
	s.real.mu.Unlock()
	return nil
}

// Log returns what the registry logged so far.
func (r *Registry) Log() []byte {
	b, _ := os.ReadFile(r.LogPath)
	return b
}

// URL is the registry's base URL.
func (r *Registry) URL() string { return "https://" + r.Addr.String() }

// StartRegistry runs distribution's registry (binary, built by make
// world) in the edge namespace of the external network named network, on
// real hosts only: TLS with a certificate for the edge's address signed by
// a CA of its own (Registry.CACert), its storage under dir. It runs until
// the simulator closes.
func (s *Sim) StartRegistry(ctx context.Context, network, binary, dir string) (*Registry, error) {
	if s.real == nil {
		return nil, errors.New("a registry needs real hosts (--hosts real)")
	}
	id, err := s.externalNetworkID(network)
	if err != nil {
		return nil, err
	}
	var e edge
	for {
		s.real.mu.Lock()
		e = s.real.edges[id]
		s.real.mu.Unlock()
		if e.ns != "" {
			break
		}
		s.real.wake()
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, fmt.Errorf("registry: the edge of %s: %w", network, err)
		}
	}
	addr := netip.AddrPortFrom(e.ip, RegistryPort)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	// A registry started again in the same dir keeps its CA: the specs
	// that name it as their mirror keep working.
	caPEM, errCA := os.ReadFile(filepath.Join(dir, "ca.pem"))
	_, errCert := os.Stat(filepath.Join(dir, "cert.pem"))
	_, errKey := os.Stat(filepath.Join(dir, "key.pem"))
	if errCA != nil || errCert != nil || errKey != nil {
		var certPEM, keyPEM []byte
		if caPEM, certPEM, keyPEM, err = registryTLS(e.ip); err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		for name, b := range map[string][]byte{"cert.pem": certPEM, "key.pem": keyPEM, "ca.pem": caPEM} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				return nil, fmt.Errorf("registry: %w", err)
			}
		}
	}
	config := fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
  tls:
    certificate: %s
    key: %s
`, filepath.Join(dir, "data"), addr, filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	cmd := exec.Command("ip", "netns", "exec", filepath.Base(e.ns), binary, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("registry: %w", err)
	}
	logf.Close()
	s.real.mu.Lock()
	s.real.procs = append(s.real.procs, cmd)
	s.real.mu.Unlock()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM) // made above: it parses
	reg := &Registry{Addr: addr, FilesAddr: netip.AddrPortFrom(e.ip, FileMirrorPort), files: map[string]string{},
		CACert: caPEM, LogPath: filepath.Join(dir, "registry.log"), Client: &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
				return machine.DialIn(ctx, e.ns, network, a)
			},
		}}}
	if err := s.startFiles(reg, e.ns, dir); err != nil {
		return nil, err
	}
	// Up once it answers the API's base.
	for {
		resp, err := reg.Client.Get(reg.URL() + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.log.Info("registry serving", "network", network, "addr", addr)
				return reg, nil
			}
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			return nil, fmt.Errorf("registry at %s did not answer: %w: %s", addr, err, lastLines(string(log), 5))
		}
	}
}

// externalNetworkID is the id of the external network named name.
func (s *Sim) externalNetworkID(name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, n := range s.w.Networks {
		if n.External && (n.Name == name || id == name) {
			return id, nil
		}
	}
	return "", fmt.Errorf("no external network %q", name)
}

// sleepCtx waits d or until ctx ends. (OPKE's cloud.Sleep is the same;
// the simulator does not import OPKE's OpenStack adapter.)
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// registryTLS makes a CA and a serving certificate for ip, ECDSA P-256.
func registryTLS(ip netip.Addr) (caPEM, certPEM, keyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "opke sim registry CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour), IPAddresses: []net.IP{ip.AsSlice()},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

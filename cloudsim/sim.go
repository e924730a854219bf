package cloudsim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/internal/atomicfile"
)

// Options configure a simulator. The zero value is a usable in-memory cloud.
type Options struct {
	// Listen is the API address; it must be on 127.0.0.1. Default 127.0.0.1:0.
	Listen string
	// AdminListen is the admin (counters, faults) address. Default 127.0.0.1:0.
	AdminListen string
	// StateDir keeps state.json, clouds.yaml and sim.json; empty: memory only.
	StateDir string
	// BootDelay is how long a server stays in BUILD and a load balancer in
	// PENDING_*. Default 0: the answer to the write still says PENDING_*
	// (or BUILD), the next read sees ACTIVE.
	BootDelay time.Duration
	// TokenTTL is the lifetime of a Keystone token. Default 1h.
	TokenTTL time.Duration
	// Hypervisors is the number of compute hosts anti-affinity spreads over.
	// Default 8.
	Hypervisors int
	// Logger receives the simulator's logs. Default: discard.
	Logger *slog.Logger
	// Now is the clock; tests move it to expire tokens. Default time.Now.
	Now func() time.Time
	// EdgeListen is the SOCKS5 edge's address, the only way to the
	// simulated floating IPs. Default 127.0.0.1:0.
	EdgeListen string
	// Attach runs the host layer for the servers of a real cloud instead
	// of a simulated one (attach.go); nil: the simulator's own cloud.
	Attach *AttachOptions
	// Hosts is the kind of host a server is: HostsInProcess (the
	// default, "") or HostsReal, a real machine (realhosts.go; root only).
	Hosts string
	// ImageCache is where real hosts' OS image is cached; default
	// machine.DefaultCacheDir().
	ImageCache string
}

// ErrNotLoopback is returned for a listen address off 127.0.0.1.
var ErrNotLoopback = errors.New("the simulator listens on 127.0.0.1 only")

// Sim is a running OpenStack simulator.
type Sim struct {
	opts   Options
	log    *slog.Logger
	api    *http.Server
	admin  *http.Server
	apiLn  net.Listener
	admLn  net.Listener
	faults *faultSet
	count  *counters

	mu    sync.Mutex // guards w and everything reached from it
	w     *world
	dirty bool
	// gen counts the changes to the world (changed); listings keeps the
	// sorted matches of listings at gen, for their next pages.
	gen      uint64
	listings listings

	edgeLn   net.Listener
	hostsDir string // StateDir/hosts, or a temporary folder
	tempDir  bool
	hostsMu  sync.Mutex // guards hosts; never taken before mu
	powerMu  sync.Mutex // serialises powerHost's stops and starts
	hosts    map[string]*simHost
	lbTurn   map[string]int    // guarded by mu: the next member per load balancer
	crashing map[string]string // guarded by mu: server -> kubelet image tag it cannot run
	attached *attachment       // set once by Start: the real cloud whose servers are the hosts
	real     *realHosts        // set once by Start: the servers are real machines

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Start runs a simulator until ctx ends or Close is called. A StateDir with
// a previous state.json resumes that state.
func Start(ctx context.Context, opts Options) (*Sim, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.AdminListen == "" {
		opts.AdminListen = "127.0.0.1:0"
	}
	if opts.EdgeListen == "" {
		opts.EdgeListen = "127.0.0.1:0"
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.Hypervisors == 0 {
		opts.Hypervisors = 8
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	for _, addr := range []string{opts.Listen, opts.AdminListen, opts.EdgeListen} {
		if err := checkLoopback(addr); err != nil {
			return nil, err
		}
	}
	s := &Sim{opts: opts, log: opts.Logger, faults: &faultSet{}, count: newCounters(), done: make(chan struct{})}
	w, err := s.loadOrSeed()
	if err != nil {
		return nil, err
	}
	s.w = w
	s.hosts = map[string]*simHost{}
	s.lbTurn = map[string]int{}
	if opts.StateDir != "" {
		// The hosts' roots must not depend on the working folder: a
		// relative one left the hosts unable to start (found by opke serve).
		abs, err := filepath.Abs(filepath.Join(opts.StateDir, "hosts"))
		if err != nil {
			return nil, fmt.Errorf("hosts dir: %w", err)
		}
		s.hostsDir = abs
		if err := os.MkdirAll(s.hostsDir, 0o711); err != nil {
			return nil, fmt.Errorf("hosts dir: %w", err)
		}
	} else {
		if s.hostsDir, err = os.MkdirTemp("", "opke-sim-hosts-"); err != nil {
			return nil, fmt.Errorf("hosts dir: %w", err)
		}
		s.tempDir = true
	}
	w.boot, w.release = s.bootServer, s.releaseHost
	switch opts.Hosts {
	case "", HostsInProcess:
	case HostsReal:
		if opts.Attach != nil {
			return nil, errors.New("real hosts serve the simulator's own servers: they cannot attach to another cloud")
		}
		if s.real, err = s.startRealHosts(ctx); err != nil {
			return nil, err
		}
		w.boot, w.release = s.real.bootResult, s.real.release
	default:
		return nil, fmt.Errorf("hosts %q: want %q or %q", opts.Hosts, HostsInProcess, HostsReal)
	}
	started := false
	defer func() {
		if !started && s.real != nil {
			_ = s.real.close()
		}
	}()
	lc := net.ListenConfig{}
	if s.apiLn, err = lc.Listen(ctx, "tcp", opts.Listen); err != nil {
		return nil, fmt.Errorf("listen %s: %w", opts.Listen, err)
	}
	if s.admLn, err = lc.Listen(ctx, "tcp", opts.AdminListen); err != nil {
		s.apiLn.Close()
		return nil, fmt.Errorf("listen %s: %w", opts.AdminListen, err)
	}
	s.api = &http.Server{Handler: s.apiHandler(), ReadHeaderTimeout: 10 * time.Second}
	s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
	if s.edgeLn, err = lc.Listen(ctx, "tcp", opts.EdgeListen); err != nil {
		s.apiLn.Close()
		s.admLn.Close()
		return nil, fmt.Errorf("listen %s: %w", opts.EdgeListen, err)
	}
	if opts.Attach != nil {
		s.api.Handler = http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			writeJSON(rw, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{"code": 503, "message": ErrAttached.Error()}})
		})
		if err := s.attach(ctx, *opts.Attach); err != nil {
			s.apiLn.Close()
			s.admLn.Close()
			s.edgeLn.Close()
			return nil, err
		}
	}
	if s.real != nil {
		s.real.wg.Add(1)
		go s.real.run()
	} else {
		s.resumeHosts()
	}
	started = true
	s.serve(s.api, s.apiLn)
	s.serve(s.admin, s.admLn)
	s.wg.Add(1)
	go s.serveEdge(s.edgeLn)
	if opts.StateDir != "" {
		if err := s.writeClientFiles(); err != nil {
			s.Close()
			return nil, err
		}
		s.wg.Add(1)
		go s.flushLoop()
	}
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.done:
		}
	}()
	s.log.Info("simulator listening", "api", s.URL(), "admin", s.AdminURL())
	return s, nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host != "127.0.0.1" && host != "localhost" {
		return fmt.Errorf("listen address %q: %w", addr, ErrNotLoopback)
	}
	return nil
}

func (s *Sim) serve(srv *http.Server, ln net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("simulator server stopped", "err", err)
		}
	}()
}

// URL is the base URL of the APIs, http://127.0.0.1:PORT.
func (s *Sim) URL() string { return "http://" + s.apiLn.Addr().String() }

// FabricAPIPort is where, on real hosts, the machines reach the APIs:
// port 80 of the public network's edge, as devstack serves them.
const FabricAPIPort = 80

// PublicURL is the base URL of the catalog's public endpoints: with real
// hosts, the APIs on the public network's edge (port FabricAPIPort),
// where the machines reach them through their routers (a cluster's cloud
// controller manager); else URL. The internal and admin endpoints are at
// URL, where OPKE, its tests and the openstack CLI reach them
// (clouds.yaml's interface: internal), as an operator's management
// network reaches a cloud's internal endpoints.
func (s *Sim) PublicURL() string {
	if s.real == nil {
		return s.URL()
	}
	return "http://" + netip.AddrPortFrom(fabricAPIAddr(), FabricAPIPort).String()
}

// fabricAPIAddr is the public network's edge address.
func fabricAPIAddr() netip.Addr {
	return lastAddr(netip.MustParsePrefix(publicCIDR)).Prev()
}

// requestBase is the base URL a request came in on (its Host), for the
// links and Location headers of an answer: an API reached at the edge
// answers with links there.
func requestBase(r *http.Request, s *Sim) string {
	if r.Host == "" {
		return s.URL()
	}
	return "http://" + r.Host
}

// AuthURL is Keystone's v3 URL, the auth_url of clouds.yaml.
func (s *Sim) AuthURL() string { return s.URL() + "/identity/v3" }

// Edge is the SOCKS5 edge's address, 127.0.0.1:PORT.
func (s *Sim) Edge() string { return s.edgeLn.Addr().String() }

// AdminURL is the base URL of the admin endpoint (counters, faults).
func (s *Sim) AdminURL() string { return "http://" + s.admLn.Addr().String() }

// Close stops the servers and, with a StateDir, writes the state.
func (s *Sim) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(s.api.Shutdown(ctx), s.admin.Shutdown(ctx), s.edgeLn.Close())
		s.hostsMu.Lock()
		hosts := make([]*simHost, 0, len(s.hosts))
		for _, h := range s.hosts {
			hosts = append(hosts, h)
		}
		s.hostsMu.Unlock()
		shutdownHosts(hosts)
		if s.real != nil {
			err = errors.Join(err, s.real.close())
		}
		s.wg.Wait()
		// A host a reboot started again meanwhile stops too.
		s.hostsMu.Lock()
		for _, h := range s.hosts {
			if !slices.Contains(hosts, h) {
				h.shutdown()
				hosts = append(hosts, h)
			}
		}
		s.hostsMu.Unlock()
		for _, h := range hosts {
			h.root.Close()
		}
		if s.tempDir {
			err = errors.Join(err, os.RemoveAll(s.hostsDir))
		}
		if s.opts.StateDir != "" {
			err = errors.Join(err, s.Snapshot())
		}
	})
	return err
}

// Snapshot writes the state to StateDir/state.json atomically.
func (s *Sim) Snapshot() error {
	if s.opts.StateDir == "" {
		return errors.New("snapshot: the simulator has no state dir")
	}
	s.mu.Lock()
	data, err := json.Marshal(s.w)
	s.dirty = false
	s.mu.Unlock()
	if err == nil {
		err = atomicfile.Write(filepath.Join(s.opts.StateDir, "state.json"), data, 0o600)
	}
	if err != nil {
		// The state still differs from the file: the next flush tries again.
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// flushLoop writes the state soon after it changes.
func (s *Sim) flushLoop() {
	defer s.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.mu.Lock()
			dirty := s.dirty
			s.mu.Unlock()
			if dirty {
				if err := s.Snapshot(); err != nil {
					s.log.Error("simulator snapshot", "err", err)
				}
			}
		}
	}
}

func (s *Sim) loadOrSeed() (*world, error) {
	if s.opts.StateDir != "" {
		if err := os.MkdirAll(s.opts.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
		data, err := os.ReadFile(filepath.Join(s.opts.StateDir, "state.json"))
		switch {
		case err == nil:
			w := &world{}
			if err := json.Unmarshal(data, w); err != nil {
				return nil, fmt.Errorf("read %s: %w", filepath.Join(s.opts.StateDir, "state.json"), err)
			}
			w.init()
			w.relink()
			return w, nil
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("read state: %w", err)
		}
	}
	return seedWorld(s.opts.Now(), s.opts.Hypervisors), nil
}

// newID returns a random UUID (version 4), as OpenStack's ids are.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// newSecret returns a random hex string of n bytes.
func newSecret(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// apiHandler routes every simulated service on the one API address.
func (s *Sim) apiHandler() http.Handler {
	mux := http.NewServeMux()
	s.keystoneRoutes(mux)
	s.novaRoutes(mux)
	s.neutronRoutes(mux)
	s.octaviaRoutes(mux)
	s.cinderRoutes(mux)
	swift := s.swiftHandler()
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		// Swift names may hold "//" and "/./", which ServeMux would "clean"
		// with a redirect; Swift takes them as they are.
		if strings.HasPrefix(r.URL.Path, swiftPrefix) {
			swift(rw, r)
			return
		}
		mux.ServeHTTP(rw, r)
	})
}

// request is what every API handler gets: the caller's token and the world,
// locked for the duration of the call.
type request struct {
	*http.Request
	s   *Sim
	w   *world
	tok *token
	now time.Time
	// readOnly marks a request that changes nothing although its method
	// is not GET (Nova's os-getConsoleOutput is a POST): it stays out of
	// the write log.
	readOnly bool
}

type handlerFunc func(rw http.ResponseWriter, r *request)

// route registers an authenticated API handler under a ServeMux pattern.
func (s *Sim) route(mux *http.ServeMux, pattern string, h handlerFunc) {
	s.routeAuth(mux, pattern, true, h)
}

func (s *Sim) routeAuth(mux *http.ServeMux, pattern string, auth bool, h handlerFunc) {
	mux.HandleFunc(pattern, s.wrap(pattern, auth, h))
}

// wrap makes an API handler: it counts the request under pattern, applies
// the injected faults, authenticates, and runs h with the world locked.
func (s *Sim) wrap(pattern string, auth bool, h handlerFunc) http.HandlerFunc {
	return func(rw http.ResponseWriter, hr *http.Request) {
		s.count.add(pattern)
		defer s.count.took(time.Now())
		f := s.faults.match(pattern)
		if f != nil && f.Latency.Duration > 0 {
			select {
			case <-time.After(f.Latency.Duration):
			case <-hr.Context().Done():
				return
			}
		}
		if f != nil && f.Status != 0 {
			if f.RetryAfter > 0 {
				rw.Header().Set("Retry-After", fmt.Sprint(f.RetryAfter))
			}
			writeJSON(rw, f.Status, map[string]any{"error": map[string]any{"code": f.Status, "message": "injected fault", "title": http.StatusText(f.Status)}})
			return
		}
		// The body is read before the lock, so a slow client holds nothing.
		body, err := io.ReadAll(io.LimitReader(hr.Body, maxBody+1))
		if err != nil || len(body) > maxBody {
			writeJSON(rw, http.StatusRequestEntityTooLarge, map[string]any{"error": map[string]any{"code": 413, "message": "request body unreadable or too large"}})
			return
		}
		hr.Body = io.NopCloser(bytes.NewReader(body))
		target := rw
		var rec *recorder
		if f != nil && f.Drop {
			rec = &recorder{header: http.Header{}}
			target = rec
		}
		s.mu.Lock()
		now := s.opts.Now()
		if s.w.tick(now) {
			s.changed()
		}
		req := &request{Request: hr, s: s, w: s.w, now: now}
		ok := true
		if auth {
			req.tok, ok = s.w.authenticate(hr.Header.Get("X-Auth-Token"), now)
		}
		if ok {
			h(target, req)
			if hr.Method != http.MethodGet && hr.Method != http.MethodHead {
				s.changed()
				if !req.readOnly {
					s.count.wrote(Write{At: time.Now(), Route: pattern, Agent: hr.UserAgent()})
					if s.real != nil {
						s.real.wake()
					}
				}
			}
		}
		s.mu.Unlock()
		if !ok {
			unauthorized(rw, s.AuthURL())
			return
		}
		if rec != nil {
			// The request took effect; the client never hears of it.
			dropConnection(rw)
		}
	}
}

// recorder swallows a response that an injected fault drops.
type recorder struct{ header http.Header }

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(int)             {}

func dropConnection(rw http.ResponseWriter) {
	conn, _, err := http.NewResponseController(rw).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection without a response
	}
	conn.Close()
}

func unauthorized(rw http.ResponseWriter, authURL string) {
	rw.Header().Set("WWW-Authenticate", fmt.Sprintf("Keystone uri=%q", strings.TrimSuffix(authURL, "/v3")))
	writeJSON(rw, http.StatusUnauthorized, map[string]any{"error": map[string]any{
		"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication.",
	}})
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(rw).Encode(v) // the client went away: nothing to do
	}
}

// maxBody bounds request bodies, Swift objects included.
const maxBody = 64 << 20

// decodeBody reads a JSON request body into v.
func decodeBody(r *request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("malformed JSON request body: %w", err)
	}
	return nil
}

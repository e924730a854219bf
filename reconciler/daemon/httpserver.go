package daemon

import (
	"cmp"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// HTTPLimits bound what clients can hold of the daemon's HTTP server: a
// slow client is cut off at the timeouts, and past MaxConns open
// connections the next ones wait in the kernel's backlog, so slow or many
// clients cost a bounded amount of memory. The zero value is the defaults.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers (10s);
	// ReadTimeout the whole request, body included (30s); WriteTimeout
	// the answer (60s); IdleTimeout a kept-alive connection's wait for its
	// next request (2m).
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (64 KiB).
	MaxHeaderBytes int
	// MaxConns bounds the connections served at once (256).
	MaxConns int
	// MaxConnsPerClient bounds the connections one client address holds
	// at once (DefaultMaxConnsPerClient): past it, its next ones are
	// closed as they come, so that one client cannot take every
	// connection, the health probes' included.
	MaxConnsPerClient int
}

// DefaultMaxConnsPerClient is HTTPLimits.MaxConnsPerClient's default.
const DefaultMaxConnsPerClient = 32

// Server is an http.Server serving h within the limits.
func (l HTTPLimits) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cmp.Or(l.ReadHeaderTimeout, 10*time.Second),
		ReadTimeout:       cmp.Or(l.ReadTimeout, 30*time.Second),
		WriteTimeout:      cmp.Or(l.WriteTimeout, 60*time.Second),
		IdleTimeout:       cmp.Or(l.IdleTimeout, 2*time.Minute),
		MaxHeaderBytes:    cmp.Or(l.MaxHeaderBytes, 64<<10),
	}
}

// Listener accepts from ln at most MaxConns connections at once, and at
// most MaxConnsPerClient of one client address.
func (l HTTPLimits) Listener(ln net.Listener) net.Listener {
	per := &perClientListener{Listener: ln, max: cmp.Or(l.MaxConnsPerClient, DefaultMaxConnsPerClient), open: map[string]int{}}
	return netutil.LimitListener(per, cmp.Or(l.MaxConns, 256))
}

// perClientListener closes a connection as it comes when its client
// address already holds max.
type perClientListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int
}

func (l *perClientListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		l.mu.Lock()
		full := l.open[host] >= l.max
		if !full {
			l.open[host]++
		}
		l.mu.Unlock()
		if full {
			c.Close()
			continue
		}
		return &clientConn{Conn: c, done: func() {
			l.mu.Lock()
			if l.open[host]--; l.open[host] == 0 {
				delete(l.open, host)
			}
			l.mu.Unlock()
		}}, nil
	}
}

// clientConn gives its client's place back once, when it closes.
type clientConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *clientConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// securityHeaders sends the headers every page and answer carries: no
// content sniffing, no framing, no referrer, and a content policy that
// lets the pages load nothing but their own inline style.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		next.ServeHTTP(w, r)
	})
}

package daemon

import (
	"cmp"
	"net"
	"net/http"
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
}

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

// Listener accepts from ln at most MaxConns connections at once.
func (l HTTPLimits) Listener(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, cmp.Or(l.MaxConns, 256))
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

package daemon_test

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/daemon"
)

func sign(key string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// TestWebhookSignatures: only a request that proves the secret (GitHub's
// and Gitea's HMAC, GitLab's token) triggers a sync; every other gets 401
// and triggers nothing; with no secret the hook is off.
func TestWebhookSignatures(t *testing.T) {
	t.Parallel()
	store := statetest.Open(t)
	planner := &reconciler.Planner{Store: store}
	d := daemon.New(daemon.Config{Store: store, Planner: planner, Applier: &reconciler.Applier{Planner: planner}})
	body := []byte(`{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567"}`)
	tests := []struct {
		name    string
		secret  string
		header  map[string]string
		body    []byte
		code    int
		trigger bool
	}{
		{name: "github signature", secret: secret, header: map[string]string{"X-Hub-Signature-256": sign(secret, body)}, code: 202, trigger: true},
		{name: "gitlab token", secret: secret, header: map[string]string{"X-Gitlab-Token": secret}, code: 202, trigger: true},
		{name: "no signature", secret: secret, code: 401},
		{name: "wrong key", secret: secret, header: map[string]string{"X-Hub-Signature-256": sign("other", body)}, code: 401},
		{name: "signature of another body", secret: secret, header: map[string]string{"X-Hub-Signature-256": sign(secret, []byte("{}"))}, code: 401},
		{name: "not hex", secret: secret, header: map[string]string{"X-Hub-Signature-256": "sha256=zz"}, code: 401},
		{name: "sha1 only", secret: secret, header: map[string]string{"X-Hub-Signature": "sha1=00"}, code: 401},
		{name: "wrong gitlab token", secret: secret, header: map[string]string{"X-Gitlab-Token": "guess"}, code: 401},
		{name: "hook off without a secret", header: map[string]string{"X-Gitlab-Token": ""}, code: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(d.Handler(tt.secret))
			defer srv.Close()
			daemon.Triggered(d)
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hooks/git", bytes.NewReader(body))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.code)
			}
			if got := daemon.Triggered(d); got != tt.trigger {
				t.Errorf("triggered = %v, want %v", got, tt.trigger)
			}
		})
	}
}

// FuzzParsePush: any body parses or is refused, never panics; what
// parses is bounded.
func FuzzParsePush(f *testing.F) {
	f.Add([]byte(`{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567"}`))
	f.Add([]byte(`{"object_kind":"push","ref":"refs/heads/x","checkout_sha":"ab"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := daemon.ParsePush(body)
		if err == nil && (len(p.Ref) > 1024 || len(p.After) > 64) {
			t.Fatalf("unbounded push %q", p)
		}
	})
}

// countingBody is a request body that counts what the server read of it.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countingBody) Close() error { return nil }

// TestWebhookReadsNothingUnsigned: a request whose headers cannot prove the
// secret (no signature, a malformed one, a wrong GitLab token) or that
// announces a body past the bound is refused before a byte of its body is
// read; a well-formed one is read and judged on its body.
func TestWebhookReadsNothingUnsigned(t *testing.T) {
	t.Parallel()
	store := statetest.Open(t)
	planner := &reconciler.Planner{Store: store}
	d := daemon.New(daemon.Config{Store: store, Planner: planner, Applier: &reconciler.Applier{Planner: planner}})
	h := d.Handler(secret)
	body := bytes.Repeat([]byte("x"), 1<<20)
	for _, tt := range []struct {
		name   string
		header map[string]string
		length int64
		code   int
		reads  bool
	}{
		{name: "no signature", code: 401},
		{name: "short hmac", header: map[string]string{"X-Hub-Signature-256": "sha256=00"}, code: 401},
		{name: "hmac not hex", header: map[string]string{"X-Hub-Signature-256": "sha256=" + strings.Repeat("z", 64)}, code: 401},
		{name: "wrong gitlab token", header: map[string]string{"X-Gitlab-Token": "guess"}, code: 401},
		{name: "announced too large", header: map[string]string{"X-Hub-Signature-256": sign(secret, body)}, length: 5 << 20, code: 413},
		{name: "well-formed, wrong body", header: map[string]string{"X-Hub-Signature-256": sign(secret, []byte("{}"))}, code: 401, reads: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cb := &countingBody{r: bytes.NewReader(body)}
			req := httptest.NewRequest(http.MethodPost, "/hooks/git", nil)
			req.Body, req.ContentLength = cb, cmp.Or(tt.length, int64(len(body)))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.code {
				t.Errorf("status %d, want %d", rec.Code, tt.code)
			}
			if read := cb.read.Load(); read > 0 != tt.reads {
				t.Errorf("%d bytes of the body read, want reads=%v", read, tt.reads)
			}
		})
	}
}

// TestSecurityHeaders: the pages and the API answer with the usual
// security headers.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	store := statetest.Open(t)
	planner := &reconciler.Planner{Store: store}
	d := daemon.New(daemon.Config{Store: store, Planner: planner, Applier: &reconciler.Applier{Planner: planner}})
	h := d.Handler("")
	for _, path := range []string{"/", "/api/v1/clusters", "/healthz", "/commits/nope"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		got := map[string]string{}
		for _, k := range []string{"X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy", "Content-Security-Policy"} {
			got[k] = rec.Header().Get(k)
		}
		want := map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
			"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"}
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Errorf("%s: headers (-want +got):\n%s", path, diff)
		}
	}
}

// TestHTTPLimits: on a real listener, a body trickling in is cut off at
// the read timeout, and past MaxConns open connections the next client is
// served only once one of them closes.
func TestHTTPLimits(t *testing.T) {
	t.Parallel()
	serve := func(t *testing.T, limits daemon.HTTPLimits) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := limits.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "ok\n")
		}))
		go func() { _ = srv.Serve(limits.Listener(ln)) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}

	t.Run("slow body", func(t *testing.T) {
		limits := daemon.HTTPLimits{ReadTimeout: 300 * time.Millisecond}
		addr := serve(t, limits)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const size = 40
		if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size); err != nil {
			t.Fatal(err)
		}
		// One byte every 100 ms: 4 s for the body, far past the timeout.
		// The server hangs up meanwhile: a write fails, or it answers
		// (an error) and closes before the body is complete.
		sent := 0
		for ; sent < size; sent++ {
			if _, err := c.Write([]byte("x")); err != nil {
				break
			}
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if n, err := c.Read(make([]byte, 512)); n > 0 || err == io.EOF {
				break
			}
		}
		if sent == size {
			t.Fatalf("the server read a %d-byte body sent at 10 bytes/s with a %s read timeout", size, limits.ReadTimeout)
		}
	})

	t.Run("max conns", func(t *testing.T) {
		addr := serve(t, daemon.HTTPLimits{MaxConns: 2}) // the default timeouts: the held requests stay
		var held []net.Conn
		for range 2 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A request under way (headers only) keeps the slot, as a
			// slow client does.
			if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		get := func(timeout time.Duration) error {
			cl := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := cl.Get("http://" + addr + "/")
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		if err := get(150 * time.Millisecond); err == nil {
			t.Fatal("a third connection was served while two were held")
		}
		held[0].Close()
		if err := get(5 * time.Second); err != nil {
			t.Fatalf("once a slot was free: %v", err)
		}
	})

	// The review's attack: one client opens many half-sent requests (700
	// made every health probe fail). It holds MaxConnsPerClient of them;
	// its others are closed as they come, and another client is served.
	t.Run("one client", func(t *testing.T) {
		addr := serve(t, daemon.HTTPLimits{MaxConns: 8, MaxConnsPerClient: 3})
		hostile := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
		served := 0
		for range 10 {
			c, err := hostile.DialContext(t.Context(), "tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"); err != nil {
				continue // closed already
			}
			// A connection closed on arrival reads its end at once.
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
				served++
			}
		}
		if served != 3 {
			t.Errorf("the client held %d connections, want 3 (MaxConnsPerClient)", served)
		}
		cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := cl.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("another client beside one holding its every slot: %v", err)
		}
		resp.Body.Close()
	})
}

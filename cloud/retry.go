package cloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"golang.org/x/time/rate"
)

// Budget is how hard OPKE may press one cloud: a token bucket of Rate
// requests per second, Burst at once, shared by every request to it.
type Budget struct {
	Rate  float64
	Burst int
}

// defaultBudget keeps a reconcile of a large fleet polite.
var defaultBudget = Budget{Rate: 20, Burst: 40}

// unlimited is no budget at all, for tests that build fleets by hand.
var unlimited = Budget{Rate: math.Inf(1), Burst: 1}

// Unlimited returns a copy of unlimited: no caller can rewrite the package's own.
func Unlimited() Budget {
	return unlimited
}

// budgetTransport waits for the bucket before each request, checks a
// write's fence, and names the sender in the User-Agent.
type budgetTransport struct {
	base  http.RoundTripper
	lim   *rate.Limiter
	meter *meter
	agent string
}

func (t budgetTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := t.lim.Wait(r.Context()); err != nil {
		return nil, fmt.Errorf("request budget: %w", err)
	}
	if err := fence(r); err != nil {
		return nil, err
	}
	if t.agent != "" {
		r = r.Clone(r.Context())
		r.Header.Set("User-Agent", strings.TrimSpace(t.agent+" "+r.Header.Get("User-Agent")))
	}
	t.meter.count(r.URL.String())
	return t.base.RoundTrip(r)
}

// meter tells which service each request goes to, by the longest
// endpoint its URL starts with; requests before the catalog is known
// (authentication) are Keystone's.
type meter struct {
	on        func(service string)
	mu        sync.Mutex
	endpoints []endpoint
}

type endpoint struct{ prefix, service string }

func (m *meter) learn(clients map[string]*gophercloud.ServiceClient) {
	var eps []endpoint
	for svc, c := range clients {
		eps = append(eps, endpoint{prefix: c.Endpoint, service: svc})
	}
	slices.SortFunc(eps, func(a, b endpoint) int { return len(b.prefix) - len(a.prefix) })
	m.mu.Lock()
	m.endpoints = eps
	m.mu.Unlock()
}

func (m *meter) count(u string) {
	if m == nil || m.on == nil {
		return
	}
	m.mu.Lock()
	svc := "identity"
	for _, e := range m.endpoints {
		if strings.HasPrefix(u, e.prefix) {
			svc = e.service
			break
		}
	}
	m.mu.Unlock()
	m.on(svc)
}

// Retries of one request.
const (
	maxRetries   = 5
	firstBackoff = 200 * time.Millisecond
	maxBackoff   = 30 * time.Second
)

// retryAfter is how long a 429 or 503 asks the client to wait, if it says.
func retryAfter(h http.Header) (time.Duration, bool) {
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, maxBackoff), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), maxBackoff), true
	}
	return 0, false
}

func backoff(n uint) time.Duration {
	d := firstBackoff << min(n-1, 10)
	return min(d, maxBackoff)
}

// Sleep waits d or until ctx ends (its error then).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// poll asks check every interval until it says done or fails, or ctx
// ends: the waits for a resource to reach a state or to be gone.
func poll(ctx context.Context, every time.Duration, check func() (done bool, err error)) error {
	for {
		if done, err := check(); done || err != nil {
			return err
		}
		if err := Sleep(ctx, every); err != nil {
			return err
		}
	}
}

// rateLimited is gophercloud's hook for 429: wait as Retry-After says (or
// back off), then retry.
func rateLimited(ctx context.Context, e *gophercloud.ErrUnexpectedResponseCode, err error, n uint) error {
	d, ok := retryAfter(e.ResponseHeader)
	if !ok {
		d = backoff(n)
	}
	if err := Sleep(ctx, d); err != nil {
		return errors.Join(err, e)
	}
	return nil
}

// retry is gophercloud's hook for every other failed request. Reads
// (GET, HEAD) and DELETE (a second one finds nothing: 404, which the
// applier takes as done) are retried on a 5xx or a lost connection. POST
// and PUT never are here: their first attempt may have changed something
// (Neutron's add_router_interface is a PUT), so the applier's step looks
// at what is there before it tries again.
func retry(ctx context.Context, method, _ string, _ *gophercloud.RequestOpts, err error, n uint) error {
	if n > maxRetries || (method != http.MethodGet && method != http.MethodHead && method != http.MethodDelete) || !Transient(err) {
		return err
	}
	d := backoff(n)
	var code gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &code) {
		if ra, ok := retryAfter(code.ResponseHeader); ok {
			d = ra
		}
	}
	if serr := Sleep(ctx, d); serr != nil {
		return errors.Join(serr, err)
	}
	return nil
}

// Transient reports whether err may pass if the request is made again: a
// 5xx, a 429, or no answer at all.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrFenced) {
		return false
	}
	var code gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &code) {
		return code.Actual >= 500 || code.Actual == http.StatusTooManyRequests
	}
	var status interface{ GetStatusCode() int }
	if errors.As(err, &status) {
		c := status.GetStatusCode()
		return c >= 500 || c == http.StatusTooManyRequests
	}
	// No status: transient only if the connection broke before an answer.
	var netErr net.Error
	var urlErr *url.Error
	return errors.As(err, &netErr) || errors.As(err, &urlErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

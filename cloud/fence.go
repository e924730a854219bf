package cloud

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// ErrFenced is returned for a write to the cloud that its context's fence
// refused: the writer no longer holds the lease it writes under.
var ErrFenced = errors.New("fenced: this writer no longer holds its lease")

type fenceKey struct{}

// WithFence returns a context whose writes to the cloud (every request
// but GET, HEAD and OPTIONS) each ask check first, and are not sent if it
// fails. The state store fences its own writes; OpenStack has no fencing
// token, so an applier paused past its lease (a stopped process, a long
// GC) checks, just before each write, that it still holds the lease as
// etcd sees it now, instead of trusting a keepalive that has not noticed
// yet.
func WithFence(ctx context.Context, check func(context.Context) error) context.Context {
	return context.WithValue(ctx, fenceKey{}, check)
}

// fence checks r's fence, if it is a write and its context has one.
func fence(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	check, _ := r.Context().Value(fenceKey{}).(func(context.Context) error)
	if check == nil {
		return nil
	}
	if err := check(r.Context()); err != nil {
		return fmt.Errorf("%s %s: %w: %w", r.Method, r.URL.Path, ErrFenced, err)
	}
	return nil
}

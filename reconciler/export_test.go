package reconciler

import (
	"context"
	"net/http"
)

// SetPoint sets the applier's test hook: called after each journal
// write, an error it returns kills the applier there.
func (a *Applier) SetPoint(f func(what string) error) { a.point = f }

// ApplyManifest applies a manifest's objects to the API at base, as an
// addon's apply sends them (Helm's order, definitions waited for until
// served), and returns the digest of OPKE's fields in each, in that order.
func ApplyManifest(ctx context.Context, client *http.Client, base string, data []byte) ([]string, error) {
	objs, err := parseManifest(data)
	if err != nil {
		return nil, err
	}
	a := &Applier{}
	poll := func(what string, check func() (error, error)) error { return a.pollUntil(ctx, what, check) }
	return applyObjects(ctx, &kubeClient{base: base, http: client}, installOrder(objs), poll)
}

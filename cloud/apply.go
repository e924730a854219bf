package cloud

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/diff"
	"opke.dev/opke/schemas"
)

// ErrForeign is a resource of the name OPKE wants that another OPKE
// installation owns: it is never adopted.
var ErrForeign = errors.New("owned by another OPKE installation")

// ErrLoadBalancer is a load balancer that went to ERROR.
var ErrLoadBalancer = errors.New("load balancer in ERROR")

// Applier changes one cluster's resources in one cloud. Every create
// first looks for the resource by name: one found with OPKE's tags (or
// with none, left by a create whose tagging was lost) is adopted, so a
// retry after a lost response never makes a second one. Deletes of what
// is already gone succeed. An Applier is safe for concurrent use.
type Applier struct {
	c       *Clients
	cluster string
	owner   string
	tags    []string

	mu  sync.Mutex
	ids map[diff.Address]string

	// Name lookups made once: external networks, images, flavors.
	cacheMu  sync.Mutex
	external map[string]string
	images   map[string]string
	flavors  map[string]string
	// PollEvery is how often a wait polls what it waits for: a load
	// balancer to be ACTIVE, a server, a volume or a snapshot to be gone.
	PollEvery time.Duration
}

// NewApplier returns the applier of cluster, knowing the ids of the
// resources observed.
func NewApplier(c *Clients, owner, cluster string, observed []diff.Resource) *Applier {
	a := &Applier{c: c, owner: owner, cluster: cluster, tags: []string{Tag(schemas.TagCluster, cluster), Tag(schemas.TagOwner, owner)},
		ids: map[diff.Address]string{}, PollEvery: 100 * time.Millisecond}
	for _, r := range observed {
		a.ids[r.Address()] = r.ID
	}
	return a
}

// ID returns the id of the cluster's resource at address, if known.
func (a *Applier) ID(kind diff.Kind, name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[diff.ResourceAddress(kind, name)]
}

func (a *Applier) setID(kind diff.Kind, name, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[diff.ResourceAddress(kind, name)] = id
}

// need returns the id of a resource a create refers to, or an error.
func (a *Applier) need(kind diff.Kind, name string) (string, error) {
	if id := a.ID(kind, name); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("%s %s: %w", kind, name, errMissingDependency)
}

var errMissingDependency = errors.New("not created yet")

// Create makes r (the desired resource) unless it exists, and returns its
// id. userData is a server's Ignition config.
func (a *Applier) Create(ctx context.Context, r diff.Resource, userData []byte) (string, error) {
	k, ok := kinds[r.Kind]
	if !ok || k.create == nil {
		return "", fmt.Errorf("create %s: %w: create of a %s", r.Address(), errors.ErrUnsupported, r.Kind)
	}
	id, err := k.create(a, ctx, r, userData)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", r.Address(), err)
	}
	a.setID(r.Kind, r.Name, id)
	return id, nil
}

// tagged is a found resource's id and tags; skip marks one a listing
// returned that is not the one looked for.
type tagged struct {
	id   string
	tags []string
	skip bool
}

// found turns a gophercloud extractor into one of tagged resources.
func found[T any](extract func(pagination.Page) ([]T, error), f func(T) tagged) func(pagination.Page) ([]tagged, error) {
	return func(p pagination.Page) ([]tagged, error) {
		l, err := extract(p)
		out := make([]tagged, 0, len(l))
		for _, x := range l {
			if t := f(x); !t.skip {
				out = append(out, t)
			}
		}
		return out, err
	}
}

// idOf is a create's id, or its error.
func idOf(err error, id func() string) (string, error) {
	if err != nil {
		return "", err
	}
	return id(), nil
}

// adopt picks, among resources found by name, the one to adopt: OPKE's
// for this cluster, or one without an owner tag (a create whose tagging
// was lost, or a kind without tags). It refuses one another installation
// owns.
func (a *Applier) adopt(found []tagged) (tagged, bool, error) {
	for _, f := range found {
		if slices.Contains(f.tags, a.tags[1]) && slices.Contains(f.tags, a.tags[0]) {
			return f, true, nil
		}
	}
	for _, f := range found {
		if !slices.ContainsFunc(f.tags, func(t string) bool { return strings.HasPrefix(t, schemas.TagOwner+"=") }) {
			return f, true, nil
		}
	}
	if len(found) > 0 {
		return tagged{}, false, ErrForeign
	}
	return tagged{}, false, nil
}

// look lists what list finds and picks the one to adopt.
func (a *Applier) look(ctx context.Context, list pagination.Pager, extract func(pagination.Page) ([]tagged, error)) (tagged, bool, error) {
	var all []tagged
	err := list.EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := extract(p)
		all = append(all, l...)
		return true, err
	})
	if err != nil {
		return tagged{}, false, fmt.Errorf("look before creating: %w", err)
	}
	return a.adopt(all)
}

// ensure returns the id of the resource list finds (as adopt picks), or
// creates it.
func (a *Applier) ensure(ctx context.Context, list pagination.Pager, extract func(pagination.Page) ([]tagged, error), create func() (string, error)) (string, error) {
	f, ok, err := a.look(ctx, list, extract)
	if err != nil || ok {
		return f.id, err
	}
	return create()
}

// neutron is ensure for Neutron, which takes tags after the create: the
// resource is tagged unless it already carries OPKE's tags.
func (a *Applier) neutron(ctx context.Context, kind string, list pagination.Pager, extract func(pagination.Page) ([]tagged, error), create func() (string, error)) (string, error) {
	f, ok, err := a.look(ctx, list, extract)
	if err != nil {
		return "", err
	}
	id := f.id
	if !ok {
		if id, err = create(); err != nil {
			return "", err
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(f.tags)), slices.Sorted(slices.Values(a.tags))) {
		if _, err := attributestags.ReplaceAll(ctx, a.c.Network, kind, id, attributestags.ReplaceAllOpts{Tags: a.tags}).Extract(); err != nil {
			return "", fmt.Errorf("tag: %w", err)
		}
	}
	return id, nil
}

// lookup resolves a name through a listing made once per applier.
func (a *Applier) lookup(ctx context.Context, cache *map[string]string, what string, list func(context.Context) (map[string]string, error), name string) (string, error) {
	a.cacheMu.Lock()
	defer a.cacheMu.Unlock()
	if *cache == nil {
		m, err := list(ctx)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		*cache = m
	}
	if id, ok := (*cache)[name]; ok {
		return id, nil
	}
	return "", fmt.Errorf("%s %q: not found", what, name)
}

// byName lists a listing's names and ids.
func byName[T any](ctx context.Context, list pagination.Pager, extract func(pagination.Page) ([]T, error), nameID func(T) (string, string)) (map[string]string, error) {
	out := map[string]string{}
	err := list.EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		l, err := extract(p)
		for _, x := range l {
			n, id := nameID(x)
			out[n] = id
		}
		return true, err
	})
	return out, err
}

func (a *Applier) listExternal(ctx context.Context) (map[string]string, error) {
	yes := true
	return byName(ctx, networks.List(a.c.Network, external.ListOptsExt{ListOptsBuilder: networks.ListOpts{}, External: &yes}),
		networks.ExtractNetworks, func(n networks.Network) (string, string) { return n.Name, n.ID })
}

// Update changes r's updatable attributes in place (those its kind
// updates: a port's security groups, a subnet's DNS nameservers, a
// listener's idle timeouts).
func (a *Applier) Update(ctx context.Context, r diff.Resource) error {
	id := a.ID(r.Kind, r.Name)
	if id == "" {
		return fmt.Errorf("update %s: %w", r.Address(), errMissingDependency)
	}
	k, ok := kinds[r.Kind]
	if !ok || k.update == nil {
		return fmt.Errorf("update %s: %w: update of a %s", r.Address(), errors.ErrUnsupported, r.Kind)
	}
	if err := k.update(a, ctx, id, r); err != nil {
		return fmt.Errorf("update %s: %w", r.Address(), err)
	}
	return nil
}

// Delete removes the resource at r's address (its id from the
// observation); one already gone is deleted.
func (a *Applier) Delete(ctx context.Context, r diff.Resource) error {
	id := cmp.Or(r.ID, a.ID(r.Kind, r.Name))
	if id == "" {
		return nil
	}
	k, ok := kinds[r.Kind]
	if !ok || k.delete == nil {
		return fmt.Errorf("delete %s: %w: delete of a %s", r.Address(), errors.ErrUnsupported, r.Kind)
	}
	if err := k.delete(a, ctx, id, r); err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return fmt.Errorf("delete %s: %w", r.Address(), err)
	}
	a.setID(r.Kind, r.Name, "")
	return nil
}

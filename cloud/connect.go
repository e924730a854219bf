package cloud

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"golang.org/x/time/rate"
)

// computeMicroversion is the Nova microversion OPKE speaks: server tags
// (2.26, at create 2.52), flavor names in servers (2.47).
const computeMicroversion = "2.79"

// ErrNoCloudsFile is a connection with no clouds.yaml: none was named and
// none is in the standard locations.
var ErrNoCloudsFile = errors.New("no clouds.yaml")

// Target names a cloud: an entry of a clouds.yaml and a region.
type Target struct {
	// File is the clouds.yaml; empty: the standard locations
	// (OS_CLIENT_CONFIG_FILE, ./clouds.yaml, ~/.config/openstack, /etc/openstack).
	File  string
	Cloud string
	// Region overrides the entry's region_name when set.
	Region string
	// Budget limits the requests per second (DefaultBudget when zero).
	Budget Budget
	// UserAgent, if set, is put before gophercloud's in every request's
	// User-Agent: the cloud's logs tell which daemon sent what.
	UserAgent string
}

func (t Target) String() string {
	if t.Region == "" {
		return t.Cloud
	}
	return t.Cloud + "/" + t.Region
}

// Clients are the service clients of one cloud, sharing one token.
type Clients struct {
	Provider     *gophercloud.ProviderClient
	Identity     *gophercloud.ServiceClient
	Compute      *gophercloud.ServiceClient
	Network      *gophercloud.ServiceClient
	Image        *gophercloud.ServiceClient
	LoadBalancer *gophercloud.ServiceClient
	ObjectStore  *gophercloud.ServiceClient
	// BlockStorage is Cinder's v3 API; nil on a cloud without one (no
	// volumes then: the Cinder CSI addon needs it).
	BlockStorage *gophercloud.ServiceClient
	// AuthURL is Keystone's URL as the clusters' hosts reach it, for their
	// cloud.conf: clouds.yaml's auth_url, or, when OPKE reaches the cloud
	// through its internal or admin endpoints (clouds.yaml's interface),
	// the catalog's public identity endpoint. Region is the cloud's.
	AuthURL, Region string
}

// Connect authenticates as the target cloud. The token is renewed when
// Keystone refuses it (AllowReauth); [Pool] also renews it ahead of its
// expiry.
func Connect(ctx context.Context, t Target) (*Clients, error) { return connect(ctx, t, nil) }

// connect is Connect; onRequest, if set, is told each request's service.
func connect(ctx context.Context, t Target, onRequest func(service string)) (*Clients, error) {
	opts := []clouds.ParseOption{clouds.WithCloudName(t.Cloud)}
	if t.File != "" {
		opts = append(opts, clouds.WithLocations(t.File))
	}
	if t.Region != "" {
		opts = append(opts, clouds.WithRegion(t.Region))
	}
	ao, eo, tlsConfig, err := clouds.Parse(opts...)
	if err != nil && strings.Contains(err.Error(), "clouds file not found") {
		return nil, fmt.Errorf("cloud %s: %w (%v)", t, ErrNoCloudsFile, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cloud %s: %w", t, err)
	}
	ao.AllowReauth = true
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	budget := cmp.Or(t.Budget, defaultBudget)
	meter := &meter{on: onRequest}
	hc := http.Client{Transport: budgetTransport{base: transport, lim: rate.NewLimiter(rate.Limit(budget.Rate), budget.Burst), meter: meter, agent: t.UserAgent}}
	// Authenticating twice is harmless: a transient failure is tried again.
	var pc *gophercloud.ProviderClient
	for attempt, wait := 1, 200*time.Millisecond; ; attempt, wait = attempt+1, wait*2 {
		pc, err = config.NewProviderClient(ctx, ao, config.WithHTTPClient(hc))
		if err == nil || attempt == maxRetries || !Transient(err) {
			break
		}
		if err := Sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("cloud %s: authenticate: %w", t, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cloud %s: authenticate: %w", t, err)
	}
	pc.RetryFunc, pc.RetryBackoffFunc, pc.MaxBackoffRetries = retry, rateLimited, maxRetries
	c := &Clients{Provider: pc, AuthURL: ao.IdentityEndpoint, Region: eo.Region}
	if eo.Availability != "" && eo.Availability != gophercloud.AvailabilityPublic {
		pub, err := openstack.NewIdentityV3(pc, gophercloud.EndpointOpts{Region: eo.Region, Availability: gophercloud.AvailabilityPublic})
		if err != nil {
			return nil, fmt.Errorf("cloud %s: the public identity endpoint, for the hosts: %w", t, err)
		}
		c.AuthURL = strings.TrimSuffix(pub.Endpoint, "/")
	}
	for _, s := range []struct {
		dst **gophercloud.ServiceClient
		new func(*gophercloud.ProviderClient, gophercloud.EndpointOpts) (*gophercloud.ServiceClient, error)
		svc string
	}{
		{&c.Identity, openstack.NewIdentityV3, "identity"},
		{&c.Compute, openstack.NewComputeV2, "compute"},
		{&c.Network, openstack.NewNetworkV2, "network"},
		{&c.Image, openstack.NewImageV2, "image"},
		{&c.LoadBalancer, openstack.NewLoadBalancerV2, "load-balancer"},
		{&c.ObjectStore, openstack.NewObjectStorageV1, "object-store"},
	} {
		if *s.dst, err = s.new(pc, eo); err != nil {
			return nil, fmt.Errorf("cloud %s: %s endpoint: %w", t, s.svc, err)
		}
	}
	c.Compute.Microversion = computeMicroversion
	learned := map[string]*gophercloud.ServiceClient{"identity": c.Identity, "compute": c.Compute, "network": c.Network,
		"image": c.Image, "load-balancer": c.LoadBalancer, "object-store": c.ObjectStore}
	if bs, err := openstack.NewBlockStorageV3(pc, eo); err == nil {
		c.BlockStorage, learned["block-storage"] = bs, bs
	}
	meter.learn(learned)
	return c, nil
}

// UserID is the id of the user the clients authenticated as.
func (c *Clients) UserID() (string, error) {
	r, ok := c.Provider.GetAuthResult().(tokens.CreateResult)
	if !ok {
		return "", fmt.Errorf("the cloud's token does not name its user")
	}
	u, err := r.ExtractUser()
	if err != nil {
		return "", fmt.Errorf("the token's user: %w", err)
	}
	return u.ID, nil
}

// Roles are the roles the clients' token carries on its project: a
// user's with the ones they imply (member implies reader), an application
// credential's as the credential names them.
func (c *Clients) Roles() ([]string, error) {
	r, ok := c.Provider.GetAuthResult().(tokens.CreateResult)
	if !ok {
		return nil, fmt.Errorf("the cloud's token does not name its roles")
	}
	roles, err := r.ExtractRoles()
	if err != nil {
		return nil, fmt.Errorf("the token's roles: %w", err)
	}
	names := make([]string, 0, len(roles))
	for _, role := range roles {
		names = append(names, role.Name)
	}
	return names, nil
}

// TokenExpiry is when the clients' token expires; zero if unknown.
func (c *Clients) TokenExpiry() time.Time {
	r, ok := c.Provider.GetAuthResult().(tokens.CreateResult)
	if !ok {
		return time.Time{}
	}
	tok, err := r.ExtractToken()
	if err != nil {
		return time.Time{}
	}
	return tok.ExpiresAt
}

// defaultRenewBefore is how long before its expiry a pooled token is
// renewed.
const defaultRenewBefore = 5 * time.Minute

// Pool keeps one connection per cloud and region, so plans and reconciles
// share a token for its whole life instead of authenticating each time.
// A token is renewed RenewBefore its expiry, before Keystone refuses it.
// A Pool is safe for concurrent use.
type Pool struct {
	// File is the clouds.yaml every target is read from.
	File string
	// RenewBefore defaults to defaultRenewBefore.
	RenewBefore time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
	// Budget is each cloud's request budget (DefaultBudget when zero).
	Budget Budget
	// OnRequest, if set, is told the service (compute, network, ...) of
	// every request sent, for metrics.
	OnRequest func(service string)
	// UserAgent is every connection's [Target.UserAgent].
	UserAgent string

	mu    sync.Mutex
	conns map[Target]*Clients
}

// Clients returns the connection to cloud in region, connecting the first
// time and renewing a token near its expiry.
func (p *Pool) Clients(ctx context.Context, cloud, region string) (*Clients, error) {
	t := Target{File: p.File, Cloud: cloud, Region: region, Budget: p.Budget, UserAgent: p.UserAgent}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[t]; c != nil {
		if exp := c.TokenExpiry(); !exp.IsZero() && p.now().Add(p.renewBefore()).After(exp) {
			if err := c.Provider.Reauthenticate(ctx, c.Provider.Token()); err != nil {
				return nil, fmt.Errorf("cloud %s: renew token: %w", t, err)
			}
		}
		return c, nil
	}
	c, err := connect(ctx, t, p.OnRequest)
	if err != nil {
		return nil, err
	}
	if p.conns == nil {
		p.conns = map[Target]*Clients{}
	}
	p.conns[t] = c
	return c, nil
}

func (p *Pool) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pool) renewBefore() time.Duration {
	if p.RenewBefore > 0 {
		return p.RenewBefore
	}
	return defaultRenewBefore
}

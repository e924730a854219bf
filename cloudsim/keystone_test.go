package cloudsim

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/applicationcredentials"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
)

func TestKeystoneTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{TokenTTL: time.Hour})
	tok := e.user.provider.Token()
	res := tokens.Get(ctx, e.user.identity, tok)
	if res.Err != nil {
		t.Fatalf("validate token: %v", res.Err)
	}
	if got := res.Header.Get("X-Subject-Token"); got != tok {
		t.Errorf("X-Subject-Token = %q, want the token", got)
	}
	catalog, err := res.ExtractServiceCatalog()
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, svc := range catalog.Entries {
		types = append(types, svc.Type)
	}
	for _, want := range []string{"identity", "compute", "image", "network", "load-balancer", "object-store"} {
		if !slices.Contains(types, want) {
			t.Errorf("catalog lacks %s: %v", want, types)
		}
	}
	if err := tokens.Get(ctx, e.user.identity, "not-a-token").Err; !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("validating a bad token: %v, want 404", err)
	}

	// A bad token is refused with 401 by every service.
	bad := *e.user.compute
	badProvider := *e.user.provider
	badProvider.SetToken("gAAAAAbogus")
	badProvider.ReauthFunc = nil
	bad.ProviderClient = &badProvider
	if _, err := flavors.ListDetail(&bad, nil).AllPages(ctx); !gophercloud.ResponseCodeIs(err, http.StatusUnauthorized) {
		t.Errorf("list flavors with a bad token: %v, want 401", err)
	}

	// An expired token is refused; AllowReauth gets a new one transparently.
	e.clock.Advance(2 * time.Hour)
	if _, err := flavors.ListDetail(e.user.compute, nil).AllPages(ctx); err != nil {
		t.Fatalf("list after expiry with reauth: %v", err)
	}
	if e.user.provider.Token() == tok {
		t.Errorf("the client kept its expired token")
	}
	if n := e.sim.Counters()["POST /identity/v3/auth/tokens"]; n < 3 {
		t.Errorf("token requests: %d, want the two logins and a reauth", n)
	}
}

func TestKeystoneApplicationCredentials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	userID := tokenUser(t, e.user)
	ac, err := applicationcredentials.Create(ctx, e.user.identity, userID, applicationcredentials.CreateOpts{
		Name: "prod-ccm", Description: "cloud provider of cluster prod"}).Extract()
	if err != nil {
		t.Fatalf("create application credential: %v", err)
	}
	if ac.Secret == "" || ac.ID == "" {
		t.Fatalf("create returned no id or secret: %+v", ac)
	}
	_, err = applicationcredentials.Create(ctx, e.user.identity, userID, applicationcredentials.CreateOpts{Name: "prod-ccm"}).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("duplicate name: %v, want 409", err)
	}
	pages, err := applicationcredentials.List(e.user.identity, userID, nil).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := applicationcredentials.ExtractApplicationCredentials(pages)
	if len(list) != 1 || list[0].Secret != "" {
		t.Fatalf("list: %+v, want one credential without its secret", list)
	}

	// The credential authenticates, scoped to its project.
	pc, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: e.sim.AuthURL(),
		ApplicationCredentialID: ac.ID, ApplicationCredentialSecret: ac.Secret})
	if err != nil {
		t.Fatalf("authenticate with the application credential: %v", err)
	}
	_, err = openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: e.sim.AuthURL(),
		ApplicationCredentialID: ac.ID, ApplicationCredentialSecret: "wrong"})
	if !gophercloud.ResponseCodeIs(err, http.StatusUnauthorized) {
		t.Errorf("wrong secret: %v, want 401", err)
	}

	// Deleting it revokes the tokens it issued.
	if err := applicationcredentials.Delete(ctx, e.user.identity, userID, ac.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	compute, _ := openstack.NewComputeV2(pc, gophercloud.EndpointOpts{})
	if _, err := flavors.ListDetail(compute, nil).AllPages(ctx); !gophercloud.ResponseCodeIs(err, http.StatusUnauthorized) {
		t.Errorf("token of a deleted credential: %v, want 401", err)
	}
	if err := applicationcredentials.Delete(ctx, e.user.identity, userID, ac.ID).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("delete twice: %v, want 404", err)
	}
}

func tokenUser(t *testing.T, c *clients) string {
	t.Helper()
	u, err := tokens.Get(context.Background(), c.identity, c.provider.Token()).ExtractUser()
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}

func tokensGetProject(c *clients) (string, error) {
	p, err := tokens.Get(context.Background(), c.identity, c.provider.Token()).ExtractProject()
	if err != nil {
		return "", err
	}
	return p.ID, nil
}

package cloud_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/applicationcredentials"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/schemas"
)

// retrying runs a step until it passes or fails for good, as the applier
// does: a transient error (a 5xx, a 429, a lost answer) is tried again.
func retrying(t *testing.T, what string, step func() error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil {
			return
		}
		if !cloud.Transient(err) || attempt == 30 {
			t.Fatalf("%s, attempt %d: %v", what, attempt, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestApplierCreatesOnceDespiteLostAnswers: with a third of the creates
// and tag writes answered by a dropped connection (the change made, the
// answer lost) and 5xx/429 on top, a cluster's infrastructure comes out
// exactly once: no duplicate, nothing untagged. Deleting it the same way
// leaves nothing behind. The faults are seeded: the applier sends one
// request at a time, so every run meets the same hits and the count of
// lost answers below cannot fall short by chance.
func TestApplierCreatesOnceDespiteLostAnswers(t *testing.T) {
	t.Parallel()
	sim, c, _ := cloudtest.Start(t)
	ctx := context.Background()
	d := desired(t, cluster(t, "prod", 1, 2))
	faults := []cloudsim.Fault{
		{Match: "POST", Drop: true, Rate: 0.33, Count: 1000, Seed: 1},
		{Match: "PUT", Drop: true, Rate: 0.33, Seed: 2},
		{Status: 503, Rate: 0.1, Seed: 3},
		{Status: 429, RetryAfter: 0, Rate: 0.1, Seed: 4},
	}
	sim.SetFaults(faults...)
	a := cloud.NewApplier(c, owner, "prod", nil)
	for _, r := range d.Infra {
		retrying(t, "create "+r.Address().String(), func() error {
			if r.Kind == diff.KindAppCredential {
				_, err := a.CreateAppCredential(ctx, r, "the-secret-opke-chose", false)
				return err
			}
			_, err := a.Create(ctx, r, userData[roleOf(r)])
			return err
		})
	}
	if dropped := 1000 - sim.Faults()[0].Count; dropped < 5 {
		t.Fatalf("only %d creates lost their answer: the test proves nothing", dropped)
	} else {
		t.Logf("%d creates lost their answer", dropped)
	}
	sim.SetFaults()

	obs, err := cloud.Observe(ctx, c, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := diff.Diff([]*diff.Desired{d}, []*diff.Observed{{Cluster: "prod", Cloud: obs.Clusters["prod"]}})
	for _, ch := range plan.Changes {
		t.Errorf("after apply, plan: %s %s (%s)", ch.Action, ch.Address, ch.Reason)
	}
	if got, want := len(obs.Clusters["prod"]), len(d.Infra); got != want {
		t.Errorf("%d resources tagged for prod, want %d", got, want)
	}
	// Nothing untagged or twice: every server, port and network by name.
	names := allNames(t, c)
	for _, n := range names {
		if k := countOf(names, n); k > 1 {
			t.Errorf("%s exists %d times", n, k)
		}
	}

	sim.SetFaults(faults...)
	rs := slices.Clone(obs.Clusters["prod"])
	byAddr := map[diff.Address]diff.Resource{}
	for _, r := range rs {
		byAddr[r.Address()] = r
	}
	for _, r := range slices.Backward(d.Infra) {
		retrying(t, "delete "+r.Address().String(), func() error { return a.Delete(ctx, byAddr[r.Address()]) })
	}
	sim.SetFaults()
	obs, err = cloud.Observe(ctx, c, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	if left := obs.Clusters["prod"]; len(left) != 0 {
		t.Errorf("%d resources left after deleting everything: %v", len(left), left)
	}
	if names := allNames(t, c); len(names) != 0 {
		t.Errorf("left behind: %v", names)
	}
}

func countOf(l []string, s string) int {
	n := 0
	for _, x := range l {
		if x == s {
			n++
		}
	}
	return n
}

// allNames lists every server, port and network of the project by name
// (the external networks aside), tagged or not.
func allNames(t *testing.T, c *cloud.Clients) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	page := func(p pagination.Pager, f func(pagination.Page) error) {
		if err := p.EachPage(ctx, func(_ context.Context, pg pagination.Page) (bool, error) { return true, f(pg) }); err != nil {
			t.Fatal(err)
		}
	}
	page(servers.List(c.Compute, nil), func(p pagination.Page) error {
		l, err := servers.ExtractServers(p)
		for _, s := range l {
			out = append(out, "server/"+s.Name)
		}
		return err
	})
	page(ports.List(c.Network, nil), func(p pagination.Page) error {
		l, err := ports.ExtractPorts(p)
		for _, x := range l {
			if x.Name != "" {
				out = append(out, "port/"+x.Name)
			}
		}
		return err
	})
	page(networks.List(c.Network, networks.ListOpts{Name: "prod"}), func(p pagination.Page) error {
		l, err := networks.ExtractNetworks(p)
		for _, x := range l {
			out = append(out, "network/"+x.Name)
		}
		return err
	})
	return out
}

// roleOf is the role of a server by its name.
func roleOf(r diff.Resource) schemas.Role {
	switch {
	case strings.Contains(r.Name, "-controller-"):
		return schemas.RoleController
	case strings.Contains(r.Name, "-gateway-"):
		return schemas.RoleGateway
	}
	return schemas.RoleWorker
}

// TestAppCredentialCarriesOnlyWhatItsClusterNeeds: a cluster's application
// credential carries the roles its cloud provider and CSI driver need
// (ClusterCredentialRoles), never OPKE's others, and its token lists just
// those. A user without one of them (an admin of the project without
// load-balancer_member) is told which is missing, and nothing is made.
func TestAppCredentialCarriesOnlyWhatItsClusterNeeds(t *testing.T) {
	t.Parallel()
	_, demo, dir := cloudtest.Start(t)
	ctx := context.Background()
	admin, err := cloud.Connect(ctx, cloud.Target{File: filepath.Join(dir, "clouds.yaml"), Cloud: "sim-admin", Budget: cloud.Unlimited()})
	if err != nil {
		t.Fatal(err)
	}
	cred := diff.Resource{Kind: diff.KindAppCredential, Name: "prod"}
	for _, tc := range []struct {
		name    string
		clients *cloud.Clients
		// want are the credential's roles, and its token's; wantErr is
		// what the error says instead.
		want    []string
		wantErr string
	}{
		{name: "the project's member", clients: demo, want: []string{"load-balancer_member", "member", "reader"}},
		{name: "an admin", clients: admin, wantErr: "lacks the role load-balancer_member"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := cloud.NewApplier(tc.clients, owner, "prod", nil)
			id, err := a.CreateAppCredential(ctx, cred, "the-secret-opke-chose", false)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("CreateAppCredential: %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			user, err := tc.clients.UserID()
			if err != nil {
				t.Fatal(err)
			}
			ac, err := applicationcredentials.Get(ctx, tc.clients.Identity, user, id).Extract()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range ac.Roles {
				got = append(got, r.Name)
			}
			slices.Sort(got)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("the credential's roles (-want +got):\n%s", d)
			}
			// What a node holding it can do: its token's roles.
			pc, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{IdentityEndpoint: tc.clients.AuthURL,
				ApplicationCredentialID: id, ApplicationCredentialSecret: "the-secret-opke-chose"})
			if err != nil {
				t.Fatal(err)
			}
			roles, err := (&cloud.Clients{Provider: pc}).Roles()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(roles)
			if d := cmp.Diff(tc.want, roles); d != "" {
				t.Errorf("the credential's token's roles (-want +got):\n%s", d)
			}
		})
	}
}

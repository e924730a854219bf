package cloud

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/applicationcredentials"
	"github.com/gophercloud/gophercloud/v2/pagination"
	"opke.dev/opke/diff"
)

// The cluster's Keystone application credential (its cloud provider's
// and CSI driver's). Keystone has no tags: its name says the
// installation and the cluster. It is made by CreateAppCredential, which
// takes the secret OPKE chose.
var appCredentialKind = kind{
	delete: func(a *Applier, ctx context.Context, id string, _ diff.Resource) error {
		user, err := a.c.UserID()
		if err != nil {
			return err
		}
		return applicationcredentials.Delete(ctx, a.c.Identity, user, id).ExtractErr()
	},
	observe: (*observer).appCredentials,
}

// AppCredentialName is the Keystone name of a cluster's application
// credential. Keystone has no tags: the name says whose it is.
func AppCredentialName(owner, cluster string) string { return "opke-" + owner + "-" + cluster }

// CreateAppCredential makes the cluster's application credential with
// secret (OPKE chooses it and keeps it before this call, so a retry after
// a lost response finds the credential it made, with a secret it knows).
// One found by its name is adopted, unless fresh says the secret was just
// chosen: that one was made with a secret OPKE lost, and is made again.
func (a *Applier) CreateAppCredential(ctx context.Context, r diff.Resource, secret string, fresh bool) (string, error) {
	id, err := a.appCredential(ctx, r, secret, fresh)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", r.Address(), err)
	}
	a.setID(r.Kind, r.Name, id)
	return id, nil
}

func (a *Applier) appCredential(ctx context.Context, r diff.Resource, secret string, fresh bool) (string, error) {
	user, err := a.c.UserID()
	if err != nil {
		return "", err
	}
	name := AppCredentialName(a.owner, r.Name)
	p, err := applicationcredentials.List(a.c.Identity, user, applicationcredentials.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		return "", err
	}
	found, err := applicationcredentials.ExtractApplicationCredentials(p)
	if err != nil {
		return "", err
	}
	for _, ac := range found {
		if ac.Name != name {
			continue
		}
		if !fresh {
			return ac.ID, nil
		}
		if err := applicationcredentials.Delete(ctx, a.c.Identity, user, ac.ID).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return "", err
		}
	}
	roles, err := a.credentialRoles()
	if err != nil {
		return "", err
	}
	ac, err := applicationcredentials.Create(ctx, a.c.Identity, user, applicationcredentials.CreateOpts{Name: name, Secret: secret,
		Roles: roles, Description: "OPKE: the cloud provider and CSI driver of cluster " + a.cluster}).Extract()
	if err != nil {
		return "", err
	}
	return ac.ID, nil
}

// ClusterCredentialRoles are the project roles a cluster's application
// credential carries: what its cloud controller manager (Nova, Neutron,
// Octavia) and Cinder CSI driver need under OpenStack's default policies,
// the old (member) and the new (reader for reads, as Nova and Neutron
// enforce them since 2023.2), and Octavia's (load-balancer_member). reader
// is named although member implies it: a credential's token lists its
// roles as they were named, without what they imply (a real Zed Keystone:
// the contract suite's "roles of a credential"). Without this the
// credential, which sits on every controller, would carry every role of
// OPKE's user (admin, where OPKE has it).
var ClusterCredentialRoles = []string{"member", "reader", "load-balancer_member"}

// credentialRoles are ClusterCredentialRoles, each of which OPKE's token
// must have (Keystone refuses a role its creator lacks, and without one a
// cluster's cloud provider could not manage its load balancers or
// volumes); the error names the roles missing and how to grant them.
func (a *Applier) credentialRoles() ([]applicationcredentials.Role, error) {
	have, err := a.c.Roles()
	if err != nil {
		return nil, err
	}
	var roles []applicationcredentials.Role
	var missing []string
	for _, name := range ClusterCredentialRoles {
		if !slices.Contains(have, name) {
			missing = append(missing, name)
			continue
		}
		roles = append(roles, applicationcredentials.Role{Name: name})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("OPKE's user lacks the role %s on its project (it has %s), which a cluster's cloud provider needs: grant it (openstack role add --project PROJECT --user USER %s)",
			strings.Join(missing, " and "), strings.Join(have, ", "), missing[0])
	}
	return roles, nil
}

// appCredentials lists the user's application credentials: Keystone has
// no tags, so the name says the installation and the cluster.
func (o *observer) appCredentials(ctx context.Context) error {
	user, err := o.c.UserID()
	if err != nil {
		return err
	}
	prefix := AppCredentialName(o.owner, "")
	return each(ctx, "application credentials", applicationcredentials.List(o.c.Identity, user, applicationcredentials.ListOpts{}), func(p pagination.Page) error {
		acs, err := applicationcredentials.ExtractApplicationCredentials(p)
		for _, ac := range acs {
			if cluster, ok := strings.CutPrefix(ac.Name, prefix); ok && cluster != "" {
				o.add(cluster, diff.Resource{Kind: diff.KindAppCredential, Name: cluster, ID: ac.ID, Attrs: diff.Attrs{}})
			}
		}
		return err
	})
}

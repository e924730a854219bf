package reconciler

import (
	"context"
	"crypto/rand"
	"errors"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// A cluster's application credential is OPKE's to make and to keep: its
// secret is chosen here and sealed in the store before Keystone is asked
// for the credential, so a retry after a lost response, or an apply
// resumed after a crash, finds a credential whose secret it knows. Its id
// is the cloud's, observed (and in the ledger) like any resource's.
//
//	/opke/<cluster>/cloud/application-credential-secret   sealed

// appCredSecret reads a cluster's application credential secret; "" if
// none was chosen yet.
func appCredSecret(ctx context.Context, kv state.KV, cluster string) (string, error) {
	b, err := kv.GetSecret(ctx, state.KeysOf(kv).AppCredentialSecret(cluster))
	if errors.Is(err, state.ErrNotFound) {
		return "", nil
	}
	return string(b), err
}

// RecordAppCredential keeps a cluster's application credential secret,
// sealed: for tests that build clusters by hand.
func RecordAppCredential(ctx context.Context, kv state.KV, cluster, secret string) error {
	return kv.PutSecret(ctx, state.KeysOf(kv).AppCredentialSecret(cluster), []byte(secret))
}

// createAppCred is the create step of a cluster's application credential.
func createAppCred(ctx context.Context, w writer, ops *cloud.Applier, r diff.Resource, cluster string) (string, error) {
	secret, err := appCredSecret(ctx, w, cluster)
	if err != nil {
		return "", err
	}
	fresh := secret == ""
	if fresh {
		secret = rand.Text() + rand.Text()
		if err := RecordAppCredential(ctx, w, cluster, secret); err != nil {
			return "", err
		}
	}
	return ops.CreateAppCredential(ctx, r, secret, fresh)
}

// cloudCredential is what cloud.conf says of the cluster's cloud: the
// application credential (observed, with its secret as stored), the
// cloud's endpoint and region, and the cluster's subnet for load
// balancers. Without a credential yet (a new cluster), a placeholder with
// a random secret stands in: a plan renders twice and so marks cloud.conf
// "(known after apply)".
func cloudCredential(secret string, c *schemas.Cluster, clients *cloud.Clients, observed []diff.Resource) (cred *assets.CloudCredential, placeholder bool) {
	name := c.Metadata.Name
	cred = &assets.CloudCredential{Region: c.Spec.Region}
	if clients != nil {
		cred.AuthURL, cred.Region = clients.AuthURL, clients.Region
	}
	for _, r := range observed {
		switch {
		case r.Kind == diff.KindSubnet && r.Name == name:
			cred.SubnetID = r.ID
		case r.Kind == diff.KindAppCredential && r.Name == name:
			cred.ID = r.ID
		}
	}
	if secret == "" || cred.ID == "" {
		cred.ID, cred.Secret = "(known after apply)", rand.Text()
		return cred, true
	}
	cred.Secret = secret
	return cred, false
}

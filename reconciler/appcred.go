package reconciler

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// A cluster's application credential is OPKE's to make and to keep: its
// secret is chosen here and sealed in the store before Keystone is asked
// for the credential, so a retry after a lost response, or an apply
// resumed after a crash, finds a credential whose secret it knows.
//
//	/opke/<cluster>/cloud/application-credential   {"id", "secret"}, sealed

type appCredRecord struct {
	ID     string `json:"id,omitempty"`
	Secret string `json:"secret"`
}

func appCredKey(kv state.KV, cluster string) string {
	return kv.Key(cluster, "cloud", "application-credential")
}

// readAppCred reads a cluster's application credential; nil if none.
func readAppCred(ctx context.Context, kv state.KV, cluster string) (*appCredRecord, error) {
	b, err := kv.GetSecret(ctx, appCredKey(kv, cluster))
	if errors.Is(err, state.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec appCredRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Secret == "" {
		return nil, fmt.Errorf("%s: not an application credential record", appCredKey(kv, cluster))
	}
	return &rec, nil
}

func writeAppCred(ctx context.Context, kv state.KV, cluster string, rec *appCredRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return kv.PutSecret(ctx, appCredKey(kv, cluster), b)
}

// RecordAppCredential keeps a cluster's application credential, sealed:
// for tests that build clusters by hand.
func RecordAppCredential(ctx context.Context, kv state.KV, cluster, id, secret string) error {
	return writeAppCred(ctx, kv, cluster, &appCredRecord{ID: id, Secret: secret})
}

// createAppCred is the create step of a cluster's application credential.
func createAppCred(ctx context.Context, w writer, ops *cloud.Applier, r diff.Resource, cluster string) (string, error) {
	rec, err := readAppCred(ctx, w, cluster)
	if err != nil {
		return "", err
	}
	fresh := rec == nil
	if fresh {
		rec = &appCredRecord{Secret: rand.Text() + rand.Text()}
		if err := writeAppCred(ctx, w, cluster, rec); err != nil {
			return "", err
		}
	}
	id, err := ops.CreateAppCredential(ctx, r, rec.Secret, fresh)
	if err != nil {
		return "", err
	}
	if rec.ID != id {
		rec.ID = id
		if err := writeAppCred(ctx, w, cluster, rec); err != nil {
			return "", err
		}
	}
	return id, nil
}

// cloudCredential is what cloud.conf says of the cluster's cloud: the
// application credential from kv, the cloud's endpoint and region, and
// the cluster's subnet for load balancers. Without a credential yet (a
// new cluster), a placeholder with a random secret stands in: a plan
// renders twice and so marks cloud.conf "(known after apply)".
func cloudCredential(ctx context.Context, kv state.KV, c *schemas.Cluster, clients *cloud.Clients, observed []diff.Resource) (cred *assets.CloudCredential, placeholder bool, err error) {
	rec, err := readAppCred(ctx, kv, c.Metadata.Name)
	if err != nil {
		return nil, false, err
	}
	cred = &assets.CloudCredential{Region: c.Spec.Region}
	if clients != nil {
		cred.AuthURL, cred.Region = clients.AuthURL, clients.Region
	}
	for _, r := range observed {
		if r.Kind == diff.KindSubnet && r.Name == c.Metadata.Name {
			cred.SubnetID = r.ID
		}
	}
	if rec == nil || rec.ID == "" {
		cred.ID, cred.Secret = "(known after apply)", rand.Text()
		return cred, true, nil
	}
	cred.ID, cred.Secret = rec.ID, rec.Secret
	return cred, false, nil
}

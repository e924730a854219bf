package pki

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"

	"opke.dev/opke/state"
)

// SSHKey returns OPKE's SSH key pair for cluster, generating an Ed25519 key
// at first use and keeping it in the store (the private half sealed):
// /opke/<cluster>/ssh/id_ed25519 and id_ed25519.pub. The public half, in
// authorized_keys form, goes into every role's Ignition config.
func SSHKey(ctx context.Context, kv state.KV, cluster string) (ssh.Signer, string, error) {
	privKey, pubKey := state.KeysOf(kv).SSHKey(cluster)
	b, err := kv.GetSecret(ctx, privKey)
	switch {
	case err == nil:
		signer, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, "", fmt.Errorf("ssh key of %s: %w", cluster, err)
		}
		return signer, string(ssh.MarshalAuthorizedKey(signer.PublicKey())), nil
	case !errors.Is(err, state.ErrNotFound):
		return nil, "", fmt.Errorf("ssh key of %s: %w", cluster, err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("ssh key of %s: %w", cluster, err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "opke@"+cluster)
	if err != nil {
		return nil, "", fmt.Errorf("ssh key of %s: %w", cluster, err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, "", fmt.Errorf("ssh key of %s: %w", cluster, err)
	}
	pub := ssh.MarshalAuthorizedKey(signer.PublicKey())
	if err := kv.PutSecret(ctx, privKey, pem.EncodeToMemory(block)); err != nil {
		return nil, "", fmt.Errorf("store ssh key of %s: %w", cluster, err)
	}
	if err := kv.Put(ctx, pubKey, pub); err != nil {
		return nil, "", fmt.Errorf("store ssh key of %s: %w", cluster, err)
	}
	return signer, string(pub), nil
}

package pki

import (
	"context"
	"encoding/base64"
	"fmt"

	"go.yaml.in/yaml/v3"

	"opke.dev/opke/state"
)

// kubeconfig is the subset of client-go's Config that OPKE writes.
type kubeconfig struct {
	APIVersion     string         `yaml:"apiVersion"`
	Kind           string         `yaml:"kind"`
	Clusters       []namedCluster `yaml:"clusters"`
	Users          []namedUser    `yaml:"users"`
	Contexts       []namedContext `yaml:"contexts"`
	CurrentContext string         `yaml:"current-context"`
}

type namedCluster struct {
	Name    string `yaml:"name"`
	Cluster struct {
		Server string `yaml:"server"`
		CAData string `yaml:"certificate-authority-data"` // base64

	} `yaml:"cluster"`
}

type namedUser struct {
	Name string `yaml:"name"`
	User struct {
		CertData string `yaml:"client-certificate-data"` // base64
		KeyData  string `yaml:"client-key-data"`         // base64
	} `yaml:"user"`
}

type namedContext struct {
	Name    string `yaml:"name"`
	Context struct {
		Cluster string `yaml:"cluster"`
		User    string `yaml:"user"`
	} `yaml:"context"`
}

// Kubeconfig returns a kubeconfig for the client material name (Admin,
// ControllerManager, Scheduler, Kubelet(host)) of cluster, talking to server.
func (b *Bundle) Kubeconfig(cluster, name, server string) ([]byte, error) {
	m, ok := b.m[name]
	ca, okCA := b.m[CA]
	if !ok || !okCA {
		return nil, fmt.Errorf("kubeconfig %s: material %s or the CA is missing", cluster, name)
	}
	user := name + "@" + cluster
	kc := kubeconfig{APIVersion: "v1", Kind: "Config", CurrentContext: user}
	c := namedCluster{Name: cluster}
	c.Cluster.Server, c.Cluster.CAData = server, base64.StdEncoding.EncodeToString(ca.Cert)
	u := namedUser{Name: user}
	u.User.CertData, u.User.KeyData = base64.StdEncoding.EncodeToString(m.Cert), base64.StdEncoding.EncodeToString(m.Key)
	x := namedContext{Name: user}
	x.Context.Cluster, x.Context.User = cluster, user
	kc.Clusters, kc.Users, kc.Contexts = []namedCluster{c}, []namedUser{u}, []namedContext{x}
	out, err := yaml.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", cluster, err)
	}
	return out, nil
}

// StoreAdminKubeconfig writes the admin kubeconfig to /opke/<cluster>/kubeconfig,
// sealed, as the seed kept it (it holds the admin's private key).
func (b *Bundle) StoreAdminKubeconfig(ctx context.Context, kv state.KV, cluster, server string) error {
	kc, err := b.Kubeconfig(cluster, Admin, server)
	if err != nil {
		return err
	}
	if err := kv.PutSecret(ctx, kv.Key(cluster, "kubeconfig"), kc); err != nil {
		return fmt.Errorf("store kubeconfig of %s: %w", cluster, err)
	}
	return nil
}

package pki

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"

	"sigs.k8s.io/yaml"

	"opke.dev/opke/state"
)

// kubeconfigFormat is client-go's Config with one cluster, user and
// context. It is written by hand rather than marshalled: every value is a
// name, a URL or base64, none needs quoting, and a render writes thousands
// (the strict decoding test reads them back with client-go's own type).
const kubeconfigFormat = `apiVersion: v1
kind: Config
clusters:
  - name: %[1]s
    cluster:
      server: %[2]s
      certificate-authority-data: %[3]s
users:
  - name: %[4]s
    user:
      client-certificate-data: %[5]s
      client-key-data: %[6]s
contexts:
  - name: %[4]s
    context:
      cluster: %[1]s
      user: %[4]s
current-context: %[4]s
`

// Values that are safe unquoted in YAML.
var (
	plainName   = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)
	plainServer = regexp.MustCompile(`^https://[A-Za-z0-9.\[\]:-]+$`)
)

// Kubeconfig returns a kubeconfig for the client material name (Admin,
// ControllerManager, Scheduler, Kubelet(host)) of cluster, talking to server.
func (b *Bundle) Kubeconfig(cluster, name, server string) ([]byte, error) {
	m, ok := b.m[name]
	_, okCA := b.m[CA]
	if !ok || !okCA {
		return nil, fmt.Errorf("kubeconfig %s: material %s or the CA is missing", cluster, name)
	}
	if !plainName.MatchString(cluster) || !plainName.MatchString(name) || !plainServer.MatchString(server) {
		return nil, fmt.Errorf("kubeconfig %s: %q or %q would need quoting", cluster, name, server)
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, kubeconfigFormat, cluster, server, b64(b.Trust(CA)), name+"@"+cluster, b64(m.Cert), b64(m.Key)), nil
}

// StoreAdminKubeconfig writes the admin kubeconfig to /opke/<cluster>/kubeconfig,
// sealed, as the seed kept it (it holds the admin's private key), unless
// the store has it already.
func (b *Bundle) StoreAdminKubeconfig(ctx context.Context, kv state.KV, cluster, server string) error {
	kc, err := b.Kubeconfig(cluster, Admin, server)
	if err != nil {
		return err
	}
	if had, err := kv.GetSecret(ctx, state.KeysOf(kv).Kubeconfig(cluster)); err == nil && bytes.Equal(had, kc) {
		return nil
	}
	if err := kv.PutSecret(ctx, state.KeysOf(kv).Kubeconfig(cluster), kc); err != nil {
		return fmt.Errorf("store kubeconfig of %s: %w", cluster, err)
	}
	return nil
}

// WithProxy returns the kubeconfig kc with proxyURL as every cluster's
// proxy-url, which kubectl and client-go dial the API server through:
// socks5:// (the simulator's edge, a bastion's ssh -D) or http(s)://.
func WithProxy(kc []byte, proxyURL string) ([]byte, error) {
	u, err := url.Parse(proxyURL)
	if err != nil || u.Host == "" || (u.Scheme != "socks5" && u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("proxy URL %q: want socks5://, http:// or https:// and a host", proxyURL)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(kc, &cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	clusters, _ := cfg["clusters"].([]any)
	if len(clusters) == 0 {
		return nil, errors.New("kubeconfig: no cluster")
	}
	for _, c := range clusters {
		entry, _ := c.(map[string]any)
		cluster, ok := entry["cluster"].(map[string]any)
		if !ok {
			return nil, errors.New("kubeconfig: a cluster entry without its cluster")
		}
		cluster["proxy-url"] = u.String()
	}
	return yaml.Marshal(cfg)
}

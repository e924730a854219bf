package assets_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
)

// kinds maps apiVersion/kind to the k8s.io type a document must decode
// into strictly. A kind rendered but missing here fails the test, so every
// manifest OPKE writes is checked against the real API types.
var kinds = map[string]func() any{
	"v1/Pod":             func() any { return &corev1.Pod{} },
	"v1/Namespace":       func() any { return &corev1.Namespace{} },
	"v1/Node":            func() any { return &corev1.Node{} },
	"v1/ServiceAccount":  func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":       func() any { return &corev1.ConfigMap{} },
	"v1/Secret":          func() any { return &corev1.Secret{} },
	"v1/Service":         func() any { return &corev1.Service{} },
	"v1/Config":          func() any { return &clientcmdv1.Config{} },
	"apps/v1/DaemonSet":  func() any { return &appsv1.DaemonSet{} },
	"apps/v1/Deployment": func() any { return &appsv1.Deployment{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":                func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding":         func() any { return &rbacv1.ClusterRoleBinding{} },
	"rbac.authorization.k8s.io/v1/Role":                       func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding":                func() any { return &rbacv1.RoleBinding{} },
	"storage.k8s.io/v1/CSIDriver":                             func() any { return &storagev1.CSIDriver{} },
	"storage.k8s.io/v1/StorageClass":                          func() any { return &storagev1.StorageClass{} },
	"networking.k8s.io/v1/IngressClass":                       func() any { return &networkingv1.IngressClass{} },
	"apiregistration.k8s.io/v1/APIService":                    func() any { return &apiregistrationv1.APIService{} },
	"kubelet.config.k8s.io/v1beta1/KubeletConfiguration":      func() any { return &kubeletv1beta1.KubeletConfiguration{} },
	"kubeproxy.config.k8s.io/v1alpha1/KubeProxyConfiguration": func() any { return &kubeproxyv1alpha1.KubeProxyConfiguration{} },
	"apiserver.config.k8s.io/v1/EncryptionConfiguration":      func() any { return &apiserverv1.EncryptionConfiguration{} },
	"audit.k8s.io/v1/Policy":                                  func() any { return &auditv1.Policy{} },
}

// decodeStrict decodes every YAML document of b into its k8s.io type,
// refusing unknown and duplicate fields, and recurses into the
// configurations that ConfigMaps carry. It returns the kinds seen.
func decodeStrict(name string, b []byte) ([]string, error) {
	var seen []string
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s doc %d: %w", name, i, err)
		}
		gvk := head.APIVersion + "/" + head.Kind
		newObj, ok := kinds[gvk]
		if !ok {
			return nil, fmt.Errorf("%s doc %d: no k8s.io type registered for %q", name, i, gvk)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s doc %d (%s): %w", name, i, gvk, err)
		}
		seen = append(seen, gvk)
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			for key, v := range cm.Data {
				if !strings.HasSuffix(key, ".conf") {
					continue
				}
				inner, err := decodeStrict(name+" "+cm.Name+"/"+key, []byte(v))
				if err != nil {
					return nil, err
				}
				seen = append(seen, inner...)
			}
		}
	}
	return seen, nil
}

// TestManifestsDecodeStrictly decodes every YAML file of every host with
// every addon selected.
func TestManifestsDecodeStrictly(t *testing.T) {
	c := loadSpec(t, "prod")
	c.Spec.Addons = nil
	for _, a := range assets.AddonManifests() {
		c.Spec.Addons = append(c.Spec.Addons, schemas.Addon{Name: a})
	}
	out := renderCluster(t, statetest.Open(t), c, credential)
	seen := map[string]bool{}
	files := 0
	for _, h := range out.Assets.Hosts {
		for _, f := range h.Files {
			if !strings.HasSuffix(f.Path, ".yaml") && !strings.HasSuffix(f.Path, ".conf") || f.Path == assets.PathCloudConf || f.Path == assets.PathContainerdDropIn {
				continue
			}
			t.Run(h.Name+f.Path, func(t *testing.T) {
				kinds, err := decodeStrict(f.Path, f.Data)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range kinds {
					seen[k] = true
				}
			})
			files++
		}
	}
	// Every registered kind is rendered somewhere: the table has no dead rows.
	for k := range kinds {
		if !seen[k] {
			t.Errorf("%s is registered but never rendered", k)
		}
	}
	if files < 20 {
		t.Errorf("only %d manifest files decoded", files)
	}
}

// TestStrictDecodingCatchesTypos proves the check above can fail.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	for _, tc := range []struct{ name, doc string }{
		{name: "misspelt field", doc: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  hostNetwrok: true\n"},
		{name: "duplicate field", doc: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  name: y\n"},
		{name: "unknown kind", doc: "apiVersion: v1\nkind: Pdo\n"},
		{name: "typo in an embedded config", doc: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  config.conf: |\n    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n    kind: KubeProxyConfiguration\n    clusterCDIR: 10.0.0.0/8\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeStrict("test", []byte(tc.doc)); err == nil {
				t.Fatal("decoded without error")
			}
		})
	}
}

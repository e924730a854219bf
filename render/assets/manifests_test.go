package assets_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"opke.dev/opke/internal/golden"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/render"
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
	"apiextensions.k8s.io/v1/CustomResourceDefinition":        func() any { return &apiextensionsv1.CustomResourceDefinition{} },
	"gateway.networking.k8s.io/v1/GatewayClass":               func() any { return &gatewayv1.GatewayClass{} },
	"discovery.k8s.io/v1/EndpointSlice":                       func() any { return &discoveryv1.EndpointSlice{} },
	"monitoring.coreos.com/v1/Prometheus":                     func() any { return &monitoringv1.Prometheus{} },
	"monitoring.coreos.com/v1/Alertmanager":                   func() any { return &monitoringv1.Alertmanager{} },
	"monitoring.coreos.com/v1/ServiceMonitor":                 func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule":                 func() any { return &monitoringv1.PrometheusRule{} },
	"gateway.networking.k8s.io/v1/Gateway":                    func() any { return &gatewayv1.Gateway{} },
	"snapshot.storage.k8s.io/v1/VolumeSnapshotClass":          func() any { return &snapshotv1.VolumeSnapshotClass{} },
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy": func() any {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{}
	},
	"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding": func() any {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	},
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
	out := renderEveryAddon(t)
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

// TestAddonDefinitionsAtTheirVersion: an addon's custom resource
// definitions are a manifest of their own just before it
// (NN-NAME.crds.yaml), every one of the release the addon's version
// names (upstream's annotation, where it has one), and the addon's
// manifest holds none.
func TestAddonDefinitionsAtTheirVersion(t *testing.T) {
	for _, tt := range []struct {
		addon, manifest, annotation, version string
		definitions                          int
	}{
		{"gateway", "11-gateway", "gateway.networking.k8s.io/bundle-version", assets.GatewayAPIVersion, 10},
		{"monitoring", "10-monitoring", "operator.prometheus.io/version", operatorVersion(t), 7},
		// external-snapshotter's definitions carry no version of theirs.
		{"cinder-csi", "06-cinder-csi", "", "", 3},
	} {
		t.Run(tt.addon, func(t *testing.T) {
			out := renderAddons(t, tt.addon)
			kindsIn := func(name string) []string {
				var kinds []string
				for _, doc := range bytes.Split(addonFile(t, out, name), []byte("\n---\n")) {
					var o apiextensionsv1.CustomResourceDefinition
					if err := yaml.Unmarshal(doc, &o); err != nil {
						t.Fatal(err)
					}
					kinds = append(kinds, o.Kind)
					if o.Kind == "CustomResourceDefinition" && tt.annotation != "" {
						if got := o.Annotations[tt.annotation]; got != tt.version {
							t.Errorf("%s is of %q, want %s", o.Name, got, tt.version)
						}
					}
				}
				return kinds
			}
			defs := kindsIn(tt.manifest + ".crds.yaml")
			if len(defs) != tt.definitions || slices.ContainsFunc(defs, func(k string) bool { return k != "CustomResourceDefinition" }) {
				t.Errorf("%s.crds.yaml holds %v, want %d definitions alone", tt.manifest, defs, tt.definitions)
			}
			if slices.Contains(kindsIn(tt.manifest+".yaml"), "CustomResourceDefinition") {
				t.Errorf("%s.yaml holds a definition too", tt.manifest)
			}
		})
	}
}

// operatorVersion is the Prometheus Operator's release the monitoring
// addon runs, as its definitions' annotation says it (0.95.2).
func operatorVersion(t *testing.T) string {
	t.Helper()
	v, err := schemas.ParseVersion("v1.35.1")
	if err != nil {
		t.Fatal(err)
	}
	im, err := assets.ImagesFor(v)
	if err != nil {
		t.Fatal(err)
	}
	tag, ok := assets.ImageTag(im.Monitoring.Operator)
	if !ok {
		t.Fatalf("%s has no tag", im.Monitoring.Operator)
	}
	return strings.TrimPrefix(tag, "v")
}

// renderEveryAddon renders the prod example with every addon selected.
func renderEveryAddon(t *testing.T) *render.Output {
	t.Helper()
	return renderAddons(t, assets.AddonManifests()...)
}

// renderAddons renders the prod example with the addons named, alone.
func renderAddons(t *testing.T, addons ...string) *render.Output {
	t.Helper()
	c := loadSpec(t, "prod")
	c.Spec.Addons = nil
	for _, a := range addons {
		c.Spec.Addons = append(c.Spec.Addons, schemas.Addon{Name: a})
	}
	return renderCluster(t, statetest.Open(t), c, credential)
}

// addonFile is an addon's manifest as the first controller keeps it.
func addonFile(t *testing.T, out *render.Output, name string) []byte {
	t.Helper()
	f, ok := out.Assets.Hosts[0].File(assets.PathAddons + "/" + name)
	if !ok {
		t.Fatalf("no %s on the first controller", name)
	}
	return f.Data
}

// TestWorkloadSelectorsAreStable: a Deployment's, DaemonSet's or
// StatefulSet's selector cannot change once applied (the API refuses the
// apply, and the manifest would fail on every cluster that has it), so
// every workload's selector, with every addon selected, is held to
// testdata/selectors.txt: a change there must come with a new name for
// the workload (the old one is then pruned).
func TestWorkloadSelectorsAreStable(t *testing.T) {
	out := renderEveryAddon(t)
	var lines []string
	for i, name := range assets.ManifestOrder() {
		data, _ := out.Assets.Manifest(fmt.Sprintf("%02d-%s.yaml", i, name))
		for _, doc := range bytes.Split(data, []byte("\n---\n")) {
			var o struct {
				Kind     string
				Metadata struct{ Name, Namespace string }
				Spec     struct {
					Selector *struct{ MatchLabels map[string]string }
				}
			}
			if err := yaml.Unmarshal(doc, &o); err != nil {
				t.Fatal(err)
			}
			if o.Kind != "Deployment" && o.Kind != "DaemonSet" && o.Kind != "StatefulSet" {
				continue
			}
			if o.Spec.Selector == nil {
				t.Errorf("%s %s/%s has no selector", o.Kind, o.Metadata.Namespace, o.Metadata.Name)
				continue
			}
			lines = append(lines, fmt.Sprintf("%s %s/%s %v", o.Kind, o.Metadata.Namespace, o.Metadata.Name, o.Spec.Selector.MatchLabels))
		}
	}
	slices.Sort(lines)
	golden.File(t, filepath.Join("testdata", "selectors.txt"), []byte(strings.Join(lines, "\n")+"\n"))
}

// TestPrometheusStorage: with the cinder-csi addon, the monitoring addon's
// Prometheus keeps its data on a Cinder volume of the default class,
// which follows its pod; without it, on the pod's disk, with a smaller
// retention size.
func TestPrometheusStorage(t *testing.T) {
	for _, tt := range []struct {
		name          string
		addons        []string
		class         string // "" for the pod's disk
		size          string
		retentionSize monitoringv1.ByteSize
	}{
		{"the pod's disk", []string{"monitoring"}, "", "", "4GB"},
		{"a Cinder volume", []string{"cinder-csi", "monitoring"}, "csi-cinder", "10Gi", "8GB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := renderAddons(t, tt.addons...)
			var p *monitoringv1.Prometheus
			for _, doc := range bytes.Split(addonFile(t, out, "10-monitoring.yaml"), []byte("\n---\n")) {
				var o monitoringv1.Prometheus
				if err := yaml.Unmarshal(doc, &o); err != nil {
					t.Fatal(err)
				}
				if o.Kind == "Prometheus" {
					p = &o
				}
			}
			if p == nil {
				t.Fatal("no Prometheus in 10-monitoring.yaml")
			}
			if p.Spec.RetentionSize != tt.retentionSize {
				t.Errorf("retention size %q, want %q", p.Spec.RetentionSize, tt.retentionSize)
			}
			class, size := "", ""
			if s := p.Spec.Storage; s != nil {
				vct := s.VolumeClaimTemplate.Spec
				if vct.StorageClassName != nil {
					class = *vct.StorageClassName
				}
				q := vct.Resources.Requests["storage"]
				size = q.String()
			}
			if class != tt.class || size != tt.size {
				t.Errorf("storage: class %q, size %q; want %q, %q", class, size, tt.class, tt.size)
			}
		})
	}
}

// TestSnapshotDefinitionsAreUpstreams: manifests/crds/cinder-csi.yaml is
// external-snapshotter's three snapshot.storage.k8s.io definitions,
// unchanged, of its client module at ExternalSnapshotterVersion: the one
// go.mod requires (these tests decode with its types), so its files are
// in the module cache.
func TestSnapshotDefinitionsAreUpstreams(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-json", "github.com/kubernetes-csi/external-snapshotter/client/v8").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var m struct{ Version, Dir string }
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m.Version != assets.ExternalSnapshotterVersion || m.Dir == "" {
		t.Fatalf("go.mod requires the client module at %s (in %q), want %s", m.Version, m.Dir, assets.ExternalSnapshotterVersion)
	}
	var docs []string
	for _, kind := range []string{"volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots"} {
		b, err := os.ReadFile(filepath.Join(m.Dir, "config", "crd", "snapshot.storage.k8s.io_"+kind+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, strings.TrimPrefix(string(b), "---\n"))
	}
	ours, err := os.ReadFile(filepath.Join("manifests", "crds", "cinder-csi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	for line := range strings.Lines(string(ours)) {
		if !strings.HasPrefix(line, "#") { // our header
			body.WriteString(line)
		}
	}
	if d := cmp.Diff(strings.Join(docs, "---\n"), body.String()); d != "" {
		t.Errorf("manifests/crds/cinder-csi.yaml is not the client module's definitions (-upstream +ours):\n%s", d)
	}
}

package assets

import (
	"fmt"

	"opke.dev/opke/schemas"
)

// Images are the container images of one Kubernetes minor besides the
// Kubernetes components themselves, which take the cluster's version.
type Images struct {
	Etcd       string
	CoreDNS    string
	Pause      string
	Flannel    string
	FlannelCNI string
	// CNIPlugins is the image the flannel DaemonSet installs the reference
	// CNI plugins from (bridge, host-local, loopback, portmap): flannel
	// delegates to them and Flatcar does not ship them.
	CNIPlugins    string
	MetricsServer string
	IngressNginx  string
	CloudProvider string // openstack-cloud-controller-manager and cinder-csi
	Dashboard     string
	Prometheus    string
	NodeExporter  string
	// NetworkPolicy is kube-router, the same for every minor
	// (NetworkPolicyImage).
	NetworkPolicy string
}

// matrix maps each supported minor to its images. The etcd, CoreDNS and
// pause versions are the ones kubeadm of that minor pins; the others are
// the releases their projects document for that minor. Every minor in
// schemas.SupportedMinors() has a row (TestMatrixCoversSupportedMinors).
var matrix = map[string]Images{
	"1.30": {
		Etcd: "registry.k8s.io/etcd:3.5.15-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.11.3", Pause: "registry.k8s.io/pause:3.9",
		Flannel: "ghcr.io/flannel-io/flannel:v0.25.5", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.5.1-flannel1", CNIPlugins: CNIPluginsImage,
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.7.1", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.10.1",
		CloudProvider: "v1.30.0", Dashboard: "docker.io/kubernetesui/dashboard:v2.7.0",
		Prometheus: "quay.io/prometheus/prometheus:v2.53.0", NodeExporter: "quay.io/prometheus/node-exporter:v1.8.1",
	},
	"1.31": {
		Etcd: "registry.k8s.io/etcd:3.5.15-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.11.3", Pause: "registry.k8s.io/pause:3.10",
		Flannel: "ghcr.io/flannel-io/flannel:v0.25.6", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.5.1-flannel2", CNIPlugins: CNIPluginsImage,
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.7.2", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.11.2",
		CloudProvider: "v1.31.0", Dashboard: "docker.io/kubernetesui/dashboard:v2.7.0",
		Prometheus: "quay.io/prometheus/prometheus:v2.54.1", NodeExporter: "quay.io/prometheus/node-exporter:v1.8.2",
	},
	"1.32": {
		Etcd: "registry.k8s.io/etcd:3.5.16-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.11.3", Pause: "registry.k8s.io/pause:3.10",
		Flannel: "ghcr.io/flannel-io/flannel:v0.26.2", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.6.0-flannel1", CNIPlugins: CNIPluginsImage,
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.7.2", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.12.0",
		CloudProvider: "v1.32.0", Dashboard: "docker.io/kubernetesui/dashboard:v2.7.0",
		Prometheus: "quay.io/prometheus/prometheus:v3.1.0", NodeExporter: "quay.io/prometheus/node-exporter:v1.8.2",
	},
	"1.33": {
		Etcd: "registry.k8s.io/etcd:3.5.21-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.12.0", Pause: "registry.k8s.io/pause:3.10",
		Flannel: "ghcr.io/flannel-io/flannel:v0.26.7", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.6.2-flannel1", CNIPlugins: CNIPluginsImage,
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.7.2", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.12.1",
		CloudProvider: "v1.33.0", Dashboard: "docker.io/kubernetesui/dashboard:v2.7.0",
		Prometheus: "quay.io/prometheus/prometheus:v3.3.1", NodeExporter: "quay.io/prometheus/node-exporter:v1.9.1",
	},
	"1.34": {
		Etcd: "registry.k8s.io/etcd:3.6.4-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.12.1", Pause: "registry.k8s.io/pause:3.10.1",
		Flannel: "ghcr.io/flannel-io/flannel:v0.27.3", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.7.1-flannel1", CNIPlugins: CNIPluginsImage,
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.8.0", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.13.2",
		CloudProvider: "v1.34.0", Dashboard: "docker.io/kubernetesui/dashboard:v2.7.0",
		Prometheus: "quay.io/prometheus/prometheus:v3.5.0", NodeExporter: "quay.io/prometheus/node-exporter:v1.9.1",
	},
	"1.35": {
		Etcd: "registry.k8s.io/etcd:3.6.5-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.13.1", Pause: "registry.k8s.io/pause:3.10.1",
		Flannel: "ghcr.io/flannel-io/flannel:v0.27.4", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1", CNIPlugins: CNIPluginsImage,
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.8.0", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.14.0",
		CloudProvider: "v1.35.0", Dashboard: "docker.io/kubernetesui/dashboard:v2.7.0",
		Prometheus: "quay.io/prometheus/prometheus:v3.7.3", NodeExporter: "quay.io/prometheus/node-exporter:v1.10.2",
	},
	"1.36": {
		Etcd: "registry.k8s.io/etcd:3.6.6-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.13.1", Pause: "registry.k8s.io/pause:3.10.1",
		Flannel: "ghcr.io/flannel-io/flannel:v0.27.4", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1", CNIPlugins: CNIPluginsImage,
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.8.0", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.14.0",
		CloudProvider: "v1.35.0", Dashboard: "docker.io/kubernetesui/dashboard:v2.7.0",
		Prometheus: "quay.io/prometheus/prometheus:v3.7.3", NodeExporter: "quay.io/prometheus/node-exporter:v1.10.2",
	},
}

// CNIPluginsImage is OPKE's image of the reference CNI plugins
// (containernetworking/plugins), built by make world as the kubelet's is:
// upstream publishes the plugins as a tarball, not an image, and Typhoon
// installs them from an image of its own the same way.
const CNIPluginsImage = "ghcr.io/opke-dev/cni-plugins:v1.8.0"

// NetworkPolicyImage is kube-router, whose network policy controller
// enforces NetworkPolicy with iptables and ipsets beside flannel. It reads
// only stable APIs (networking.k8s.io/v1, core/v1), so one release serves
// every minor. v2.1.0 is the release the Go module proxy serves here; its
// reported flaws are in the service proxy (GO-2026-4724) and the BGP
// router (GO-2026-5653), which the manifest does not run.
// kube-network-policies (SIG Network's agent) was the first choice: it
// queues packets with nftables' queue expression, which the test world's
// kernel lacks (no nft_queue: every rule set it writes is refused).
const NetworkPolicyImage = "docker.io/cloudnativelabs/kube-router:v2.1.0"

// CSIImages are the Kubernetes CSI sidecars the Cinder CSI plugin runs.
type CSIImages struct{ Attacher, Provisioner, Resizer, NodeDriverRegistrar string }

// csi are the Cinder CSI plugin's sidecars, the same for every minor of
// the matrix. The attacher and the resizer are the releases nearest to
// those cloud-provider-openstack v1.35 names (v4.8.1, v1.13.2) that the
// Go module proxy serves whole, so that make world builds them (newer,
// as Gardener's OpenStack extension moved them for the same Kubernetes).
var csi = CSIImages{
	Attacher:            "registry.k8s.io/sig-storage/csi-attacher:v4.12.0",
	Provisioner:         "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0",
	Resizer:             "registry.k8s.io/sig-storage/csi-resizer:v1.14.0",
	NodeDriverRegistrar: "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.13.0",
}

// CSI returns a copy of csi: no caller can rewrite the package's own.
func CSI() CSIImages {
	return csi
}

// KubernetesRegistry is where the control-plane images come from.
const KubernetesRegistry = "registry.k8s.io"

// DefaultKubeletImage is the repository of the kubelet container image
// that kubelet.env names, tagged with the cluster's version. Upstream
// ships no kubelet image; this is OPKE's build of the release binary in a
// minimal image, as hyperkube was. [Input].KubeletImage overrides it.
const DefaultKubeletImage = "ghcr.io/opke-dev/kubelet"

// ImagesFor returns the matrix row of v's minor.
func ImagesFor(v schemas.Version) (Images, error) {
	im, ok := matrix[v.MinorString()]
	if !ok {
		return Images{}, fmt.Errorf("kubernetes %s: no image versions for minor %s: %w", v, v.MinorString(), ErrUnsupportedVersion)
	}
	im.NetworkPolicy = NetworkPolicyImage
	return im, nil
}

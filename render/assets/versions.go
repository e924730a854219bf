package assets

import (
	"fmt"
	"strings"

	"opke.dev/opke/schemas"
)

// Images are the container images of one Kubernetes minor besides the
// Kubernetes components themselves, which take the cluster's version.
type Images struct {
	Etcd          string
	CoreDNS       string
	Pause         string
	Flannel       string
	FlannelCNI    string
	MetricsServer string
	IngressNginx  string
	CloudProvider string // openstack-cloud-controller-manager and cinder-csi
	Dashboard     string
	// Monitoring are the monitoring addon's images, the same for every
	// minor (MonitoringImages).
	Monitoring MonitoringImages
	// NetworkPolicy is kube-router, the same for every minor
	// (NetworkPolicyImage).
	NetworkPolicy string
	// Gateway is the gateway addon's Gateway API implementation, the
	// same for every minor (GatewayImage).
	Gateway string
}

// matrix maps each supported minor to its images. The etcd, CoreDNS and
// pause versions are the ones kubeadm of that minor pins; the others are
// the releases their projects document for that minor. Every minor in
// schemas.SupportedMinors() has a row (TestMatrixCoversSupportedMinors).
var matrix = map[string]Images{
	"1.30": {
		Etcd: "registry.k8s.io/etcd:3.5.15-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.11.3", Pause: "registry.k8s.io/pause:3.9",
		Flannel: "ghcr.io/flannel-io/flannel:v0.25.5", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.5.1-flannel1",
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.7.1", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.10.1",
		CloudProvider: "v1.30.0",
	},
	"1.31": {
		Etcd: "registry.k8s.io/etcd:3.5.15-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.11.3", Pause: "registry.k8s.io/pause:3.10",
		Flannel: "ghcr.io/flannel-io/flannel:v0.25.6", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.5.1-flannel2",
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.7.2", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.11.2",
		CloudProvider: "v1.31.0",
	},
	"1.32": {
		Etcd: "registry.k8s.io/etcd:3.5.16-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.11.3", Pause: "registry.k8s.io/pause:3.10",
		Flannel: "ghcr.io/flannel-io/flannel:v0.26.2", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.6.0-flannel1",
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.7.2", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.12.0",
		CloudProvider: "v1.32.0",
	},
	"1.33": {
		Etcd: "registry.k8s.io/etcd:3.5.21-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.12.0", Pause: "registry.k8s.io/pause:3.10",
		Flannel: "ghcr.io/flannel-io/flannel:v0.26.7", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.6.2-flannel1",
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.7.2", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.12.1",
		CloudProvider: "v1.33.0",
	},
	"1.34": {
		Etcd: "registry.k8s.io/etcd:3.6.4-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.12.1", Pause: "registry.k8s.io/pause:3.10.1",
		Flannel: "ghcr.io/flannel-io/flannel:v0.27.3", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.7.1-flannel1",
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.8.0", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.13.2",
		CloudProvider: "v1.34.0",
	},
	// kubeadm v1.35.4's pins.
	"1.35": {
		Etcd: "registry.k8s.io/etcd:3.6.6-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.13.1", Pause: "registry.k8s.io/pause:3.10.1",
		Flannel: "ghcr.io/flannel-io/flannel:v0.27.4", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1",
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.8.0", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.14.0",
		CloudProvider: "v1.35.0",
	},
	// kubeadm v1.36.1's pins (cmd/kubeadm/app/constants).
	"1.36": {
		Etcd: "registry.k8s.io/etcd:3.6.8-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.14.2", Pause: "registry.k8s.io/pause:3.10.2",
		Flannel: "ghcr.io/flannel-io/flannel:v0.27.4", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1",
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.8.0", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.14.0",
		CloudProvider: "v1.36.0",
	},
	// kubeadm v1.37.2's pins; cloud-provider-openstack v1.36.0, the newest
	// release the module proxy serves (a cloud controller manager one
	// minor older than the API server is within Kubernetes' skew policy).
	"1.37": {
		Etcd: "registry.k8s.io/etcd:3.7.0-0", CoreDNS: "registry.k8s.io/coredns/coredns:v1.14.6", Pause: "registry.k8s.io/pause:3.10.2",
		Flannel: "ghcr.io/flannel-io/flannel:v0.27.4", FlannelCNI: "ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1",
		MetricsServer: "registry.k8s.io/metrics-server/metrics-server:v0.8.0", IngressNginx: "registry.k8s.io/ingress-nginx/controller:v1.14.0",
		CloudProvider: "v1.36.0",
	},
}

// NetworkPolicyImage is kube-router, whose network policy controller
// enforces NetworkPolicy with iptables and ipsets beside flannel. It reads
// only stable APIs (networking.k8s.io/v1, core/v1), so one release serves
// every minor. v2.11.1 is upstream's newest release (August 2026; its
// flags and RBAC those of the manifest since v2.1.0); kube-router
// publishes on Docker Hub only (docs/real-cloud.md: What the hosts pull). Its
// one open advisory (GO-2026-5354, BGP peer passwords logged at high
// verbosity) is in the BGP router, which the manifest does not run.
// kube-network-policies (SIG Network's agent) was the first choice: it
// queues packets with nftables' queue expression, which the test world's
// kernel lacks (no nft_queue: every rule set it writes is refused).
const NetworkPolicyImage = "docker.io/cloudnativelabs/kube-router:v2.11.1"

// GatewayImage is Traefik Proxy, the gateway addon's implementation of
// the Gateway API (v1.6.1's standard channel, GatewayAPIVersion), a
// maintained one replacing ingress-nginx, whose maintenance ended in
// March 2026. v3.7.13 is upstream's newest release and fixes every
// advisory of Traefik's own code the Go vulnerability database lists. It
// reads only stable APIs, so one release serves every minor.
const GatewayImage = "ghcr.io/traefik/traefik:v3.7.13"

// GatewayAPIVersion is the Gateway API release whose standard channel
// the gateway addon installs (manifests/crds/gateway.yaml, each
// definition carrying it as its bundle-version annotation): the one
// Traefik v3.7.13 is built against (its go.mod), which watches TLSRoute
// at v1, a version of the standard channel from v1.5.
const GatewayAPIVersion = "v1.6.1"

// DashboardImage is Headlamp, the dashboard addon: Kubernetes SIG UI's
// maintained dashboard, replacing kubernetes/dashboard (archived upstream
// in January 2026). It reads what each user's token may read, through
// stable APIs, so one release serves every minor. make world cannot
// build it: its front end is built with npm and its Go backend's module
// is not on the module proxy.
const DashboardImage = "ghcr.io/headlamp-k8s/headlamp:v0.45.0"

// CheckImage is what opke check's pods run: upstream's e2e test image
// agnhost (registry.k8s.io/e2e-test-images, built by Kubernetes' own
// image promoter), whose netexec serves its host name and dials others on
// request, as Kubernetes' network e2e tests use it; the release that
// v1.36's e2e suite names. An air-gapped cloud mirrors it with the rest.
const CheckImage = KubernetesRegistry + "/e2e-test-images/agnhost:2.63.0"

// ImageTag is an image reference's tag (quay.io/prometheus/prometheus:v3.16.0:
// v3.16.0), false if it has none (a registry's port is not a tag).
func ImageTag(ref string) (string, bool) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return "", false
	}
	return ref[i+1:], true
}

// refs are every image reference of the row (CloudProvider is a version,
// not a reference: cloud-provider-openstack's images take it as their tag).
func (im Images) refs() []string {
	m := im.Monitoring
	return []string{im.Etcd, im.CoreDNS, im.Pause, im.Flannel, im.FlannelCNI, im.MetricsServer, im.IngressNginx,
		im.Dashboard, im.NetworkPolicy, im.Gateway, m.Operator, m.ConfigReloader, m.Prometheus, m.Alertmanager, m.NodeExporter}
}

// MonitoringImages are the monitoring addon's: the Prometheus Operator and
// what it runs.
type MonitoringImages struct {
	Operator, ConfigReloader, Prometheus, Alertmanager, NodeExporter string
}

// monitoring are the monitoring addon's images, the same for every minor
// (they read only stable APIs, and their definitions' validation rules
// only what every supported minor's API server evaluates): each
// project's newest release, the Prometheus Operator v0.95.2 with its
// definitions (manifests/crds/monitoring.yaml, generated from its API
// module at that release), Prometheus v3.16.0, Alertmanager v0.35.0 and
// node-exporter v1.12.1. make world builds the operator and Alertmanager
// as stand-ins (world.StandIns says which and why; world/LIMITS.md how
// they differ). kube-state-metrics is not served by the Go module proxy
// at all (403 for every version), so the addon's rules read what
// Prometheus scrapes itself.
var monitoring = MonitoringImages{
	Operator:       "quay.io/prometheus-operator/prometheus-operator:v0.95.2",
	ConfigReloader: "quay.io/prometheus-operator/prometheus-config-reloader:v0.95.2",
	Prometheus:     "quay.io/prometheus/prometheus:v3.16.0",
	Alertmanager:   "quay.io/prometheus/alertmanager:v0.35.0",
	NodeExporter:   "quay.io/prometheus/node-exporter:v1.12.1",
}

// Monitoring returns a copy of monitoring: no caller can rewrite the
// package's own.
func Monitoring() MonitoringImages {
	return monitoring
}

// CSIImages are the Kubernetes CSI sidecars the Cinder CSI plugin runs,
// and the snapshot controller its volume snapshots need.
type CSIImages struct {
	Attacher, Provisioner, Resizer, NodeDriverRegistrar string
	// Snapshotter is the controller plugin's csi-snapshotter sidecar and
	// SnapshotController the cluster's snapshot controller, both of
	// external-snapshotter, whose release also gives the VolumeSnapshot
	// definitions (manifests/crds/cinder-csi.yaml).
	Snapshotter, SnapshotController string
}

// csi are the Cinder CSI plugin's sidecars, the same for every minor of
// the matrix: kubernetes-csi's newest releases, each built against
// Kubernetes 1.36 or 1.37 and supporting 1.34 and later, so every minor
// OPKE offers. cloud-provider-openstack v1.36.0's manifests name older
// ones (csi-attacher v4.10.0, csi-provisioner v5.3.0, csi-resizer
// v1.14.0, external-snapshotter v8.4.0); the flags OPKE passes are
// theirs in both. What the new majors change: csi-provisioner v6 puts a
// finalizer on the VolumeSnapshot a volume is restored from while the
// restore runs (it needs update and watch on volumesnapshots) and has
// VolumeAttributesClass on; csi-resizer v2 has VolumeAttributesClass on
// (a claim's class is modified only where the driver says it can;
// Cinder's does not). external-snapshotter v8.7 turns on volume group
// snapshots, whose definitions OPKE does not install: its two binaries
// are told so (CSIVolumeGroupSnapshot=false) rather than find them
// missing at every start. csi-node-driver-registrar is v2.15.0,
// cloud-provider-openstack's and kubernetes-csi's newest.
var csi = CSIImages{
	Attacher:            "registry.k8s.io/sig-storage/csi-attacher:v4.13.0",
	Provisioner:         "registry.k8s.io/sig-storage/csi-provisioner:v6.4.0",
	Resizer:             "registry.k8s.io/sig-storage/csi-resizer:v2.3.0",
	NodeDriverRegistrar: "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.15.0",
	Snapshotter:         "registry.k8s.io/sig-storage/csi-snapshotter:" + ExternalSnapshotterVersion,
	SnapshotController:  "registry.k8s.io/sig-storage/snapshot-controller:" + ExternalSnapshotterVersion,
}

// ExternalSnapshotterVersion is the release of kubernetes-csi's
// external-snapshotter the cinder-csi addon runs: its csi-snapshotter
// sidecar, its snapshot controller, and the VolumeSnapshot,
// VolumeSnapshotContent and VolumeSnapshotClass definitions of its client
// module (manifests/crds/cinder-csi.yaml, copied from
// github.com/kubernetes-csi/external-snapshotter/client/v8@v8.7.0's
// config/crd; a test holds them to that module, which go.mod requires at
// this version).
const ExternalSnapshotterVersion = "v8.7.0"

// CSI returns a copy of csi: no caller can rewrite the package's own.
func CSI() CSIImages {
	return csi
}

// KubernetesRegistry is where the control-plane images come from.
const KubernetesRegistry = "registry.k8s.io"

// CNIPluginsVersion is the release of the reference CNI plugins
// (containernetworking/plugins) every node installs in /opt/cni/bin:
// flannel delegates to bridge, host-local, loopback and portmap, and
// Flatcar ships none of them (kubeadm's install docs fetch the same
// tarball).
const CNIPluginsVersion = "v1.8.0"

// A Download is a file the hosts fetch as its upstream publishes it, not
// an image: Path is its URL's host and path. A host fetches https://PATH,
// or MIRROR/PATH when the spec names a download mirror (the layout of
// Kubespray's files_repo), and checks it against the sha256 upstream
// publishes beside it, PATH.sha256 from the same place, before it uses it.
type Download struct {
	Path string
}

// URL is where a host fetches d: from its upstream, or from the mirror
// whose base is mirror (https://host[:port][/path]) when it is not empty.
func (d Download) URL(mirror string) string {
	if mirror == "" {
		return "https://" + d.Path
	}
	return strings.TrimSuffix(mirror, "/") + "/" + d.Path
}

// KubeletDownload is the kubelet of Kubernetes v as upstream releases it
// (kubeadm's install docs, "Without a package manager"):
// dl.k8s.io/release/v/bin/linux/amd64/kubelet, its sha256 beside it.
func KubeletDownload(v string) Download {
	return Download{Path: "dl.k8s.io/release/" + v + "/bin/linux/amd64/kubelet"}
}

// CNIPluginsDownload is the reference CNI plugins' Linux tarball of
// release v as containernetworking/plugins publishes it on GitHub, its
// sha256 beside it.
func CNIPluginsDownload(v string) Download {
	return Download{Path: "github.com/containernetworking/plugins/releases/download/" + v + "/cni-plugins-linux-amd64-" + v + ".tgz"}
}

// ImagesFor returns the matrix row of v's minor.
func ImagesFor(v schemas.Version) (Images, error) {
	im, ok := matrix[v.MinorString()]
	if !ok {
		return Images{}, fmt.Errorf("kubernetes %s: no image versions for minor %s: %w", v, v.MinorString(), ErrUnsupportedVersion)
	}
	im.NetworkPolicy = NetworkPolicyImage
	im.Gateway = GatewayImage
	im.Dashboard = DashboardImage
	im.Monitoring = monitoring
	return im, nil
}

package schemas

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// APIVersion and Kind identify a cluster spec document.
const (
	APIVersion = "opke.dev/v1alpha1"
	Kind       = "Cluster"
)

// Cluster is one cluster spec, the content of clusters/<name>/cluster.yaml.
//
// Field tags follow one rule that the schema agreement test enforces: a field
// without omitempty is required by cluster.schema.json, a field with it is
// optional (and usually defaulted by [Cluster.Default]).
type Cluster struct {
	APIVersion string   `json:"apiVersion" yaml:"apiVersion"`
	Kind       string   `json:"kind" yaml:"kind"`
	Metadata   Metadata `json:"metadata" yaml:"metadata"`
	Spec       Spec     `json:"spec" yaml:"spec"`
}

// Metadata names a cluster. The name is also its folder's name and the
// prefix of every OpenStack resource OPKE creates for it.
type Metadata struct {
	Name string `json:"name" yaml:"name"`
}

// Spec is the desired state of a cluster.
type Spec struct {
	// Cloud is the entry of clouds.yaml the cluster lives in.
	Cloud string `json:"cloud" yaml:"cloud"`
	// Region overrides the region of the clouds.yaml entry.
	Region string `json:"region,omitempty" yaml:"region,omitempty"`
	// Image is the Glance image every server boots (Flatcar or Fedora CoreOS).
	Image string `json:"image" yaml:"image"`
	// SSHKeyName is an optional Nova keypair put on every new server for operators.
	SSHKeyName string `json:"sshKeyName,omitempty" yaml:"sshKeyName,omitempty"`
	// SSHAuthorizedKeys are pushed over SSH to the core user of every host.
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys,omitempty" yaml:"sshAuthorizedKeys,omitempty"`

	Kubernetes  Kubernetes   `json:"kubernetes" yaml:"kubernetes"`
	Network     Network      `json:"network" yaml:"network"`
	Controllers Controllers  `json:"controllers" yaml:"controllers"`
	WorkerPools []WorkerPool `json:"workerPools,omitempty" yaml:"workerPools,omitempty"`
	Gateway     Gateway      `json:"gateway" yaml:"gateway"`
	// API is who may reach the Kubernetes API's load balancer.
	API    *API    `json:"api,omitempty" yaml:"api,omitempty"`
	Addons []Addon `json:"addons,omitempty" yaml:"addons,omitempty"`
	// Storage tunes the cinder-csi addon's volumes.
	Storage *Storage `json:"storage,omitempty" yaml:"storage,omitempty"`
	Upgrade Upgrade  `json:"upgrade,omitempty" yaml:"upgrade,omitempty"`
	// Backup enables scheduled etcd snapshots to Swift; nil means no backups.
	Backup *Backup `json:"backup,omitempty" yaml:"backup,omitempty"`
	// Remediation replaces workers that stay unhealthy; nil means none are.
	Remediation *Remediation `json:"remediation,omitempty" yaml:"remediation,omitempty"`
	// PKI rotates the cluster's certificate authorities; nil is their
	// first generation, no rotation.
	PKI *PKI `json:"pki,omitempty" yaml:"pki,omitempty"`
	// RegistryMirror makes the hosts pull every image from the operator's
	// registry; nil pulls from the upstream registries.
	RegistryMirror *RegistryMirror `json:"registryMirror,omitempty" yaml:"registryMirror,omitempty"`
	// DownloadMirror makes the hosts fetch the files upstream releases
	// for download (the kubelet, the CNI plugins) from the operator's
	// file mirror instead of their upstream sites.
	DownloadMirror *DownloadMirror `json:"downloadMirror,omitempty" yaml:"downloadMirror,omitempty"`

	// Paused stops every change to the cluster, drift correction included.
	Paused bool `json:"paused,omitempty" yaml:"paused,omitempty"`
	// DriftCorrection corrects drift without a new commit; default true.
	DriftCorrection *bool `json:"driftCorrection,omitempty" yaml:"driftCorrection,omitempty"`
	// DeletionPolicy says what removing the cluster's file does.
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty" yaml:"deletionPolicy,omitempty"`
}

// Kubernetes selects the Kubernetes release the cluster runs.
type Kubernetes struct {
	// Version is vMAJOR.MINOR.PATCH with a minor from [SupportedMinors].
	Version string `json:"version" yaml:"version"`
}

// Network holds the cluster's address plan. Every CIDR is immutable.
type Network struct {
	HostCIDR        string   `json:"hostCIDR" yaml:"hostCIDR"`
	PodCIDR         string   `json:"podCIDR,omitempty" yaml:"podCIDR,omitempty"`
	ServiceCIDR     string   `json:"serviceCIDR,omitempty" yaml:"serviceCIDR,omitempty"`
	ExternalNetwork string   `json:"externalNetwork" yaml:"externalNetwork"`
	DNSNameservers  []string `json:"dnsNameservers,omitempty" yaml:"dnsNameservers,omitempty"`
	CNI             string   `json:"cni,omitempty" yaml:"cni,omitempty"`
	// NetworkPolicy is what enforces the cluster's NetworkPolicy objects
	// (flannel enforces none): NetworkPolicyKubeRouter (the default) or
	// NetworkPolicyNone.
	NetworkPolicy string `json:"networkPolicy,omitempty" yaml:"networkPolicy,omitempty"`
}

// The values of spec.network.networkPolicy.
const (
	// NetworkPolicyKubeRouter is kube-router's network policy controller
	// alone (no routing, no service proxy): a DaemonSet that enforces
	// NetworkPolicy with iptables and ipsets beside flannel, as Canal
	// pairs Calico's policy with flannel.
	NetworkPolicyKubeRouter = "kube-router"
	// NetworkPolicyNone: NetworkPolicy objects are stored, not enforced.
	NetworkPolicyNone = "none"
)

// Controllers is the control plane: kubeadm's layout with stacked etcd.
type Controllers struct {
	Count             int      `json:"count" yaml:"count"`
	Flavor            string   `json:"flavor" yaml:"flavor"`
	AvailabilityZones []string `json:"availabilityZones,omitempty" yaml:"availabilityZones,omitempty"`
}

// WorkerPool is a set of identical workers named <cluster>-<pool>-<index>.
type WorkerPool struct {
	Name              string            `json:"name" yaml:"name"`
	Count             int               `json:"count" yaml:"count"`
	Flavor            string            `json:"flavor" yaml:"flavor"`
	Labels            map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	AvailabilityZones []string          `json:"availabilityZones,omitempty" yaml:"availabilityZones,omitempty"`
}

// Gateway is the cluster's SSH gateway, the only server with a floating IP.
type Gateway struct {
	Flavor string `json:"flavor" yaml:"flavor"`
	// SSHSources are the IPv4 networks allowed to reach the gateway's
	// SSH port; none: anywhere (0.0.0.0/0). OPKE itself connects from
	// one of them.
	SSHSources []string `json:"sshSources,omitempty" yaml:"sshSources,omitempty"`
}

// API is the Kubernetes API's load balancer.
type API struct {
	// AllowedCIDRs are the IPv4 networks allowed to reach the API's
	// listener (Octavia's allowed_cidrs, as Cluster API's OpenStack
	// provider has them); none: anywhere. The cluster's own network
	// (network.hostCIDR: its nodes, and OPKE through its gateway) is
	// always allowed besides them.
	AllowedCIDRs []string `json:"allowedCIDRs,omitempty" yaml:"allowedCIDRs,omitempty"`
}

// Addon is a component OPKE installs into the cluster from a known set.
type Addon struct {
	Name string `json:"name" yaml:"name"`
}

// Storage tunes how the cinder-csi addon places Cinder volumes.
type Storage struct {
	// IgnoreVolumeAZ: a volume's Cinder availability zone does not bind
	// its pods to Nova's zone of the same name (cloud-provider-openstack's
	// ignore-volume-az), for clouds whose volume zones are not named as
	// their compute zones.
	IgnoreVolumeAZ bool `json:"ignoreVolumeAZ,omitempty" yaml:"ignoreVolumeAZ,omitempty"`
}

// Upgrade tunes rolling upgrades and replacements of workers, and the
// reboots that finish the hosts' OS updates.
type Upgrade struct {
	MaxUnavailable int      `json:"maxUnavailable,omitempty" yaml:"maxUnavailable,omitempty"`
	DrainTimeout   Duration `json:"drainTimeout,omitempty" yaml:"drainTimeout,omitempty"`
	// OSReboots is who reboots a host whose OS update is staged (Flatcar's
	// update engine applies updates to the passive partition; a reboot
	// switches to it): OSRebootsCoordinated (the default) or
	// OSRebootsManual. Flatcar's own reboot manager (locksmithd), which
	// reboots without a drain, is off on every host.
	OSReboots string `json:"osReboots,omitempty" yaml:"osReboots,omitempty"`
}

// The values of spec.upgrade.osReboots.
const (
	// OSRebootsCoordinated: a drift check finds the hosts whose update
	// waits for a reboot, and the drift correction reboots them one at
	// a time as a rollout goes (controllers, then workers by
	// maxUnavailable, then the gateway), each node drained before, gated
	// healthy and uncordoned after.
	OSRebootsCoordinated = "coordinated"
	// OSRebootsManual: the plan warns of the hosts that wait for a
	// reboot, and OPKE reboots none.
	OSRebootsManual = "manual"
)

// Remediation replaces a host whose Node stays not Ready (its kubelet
// says NotReady, or stopped posting its status: Unknown) for longer than
// UnhealthyAfter: a worker is drained as far as it can be, its server
// made again and its Node object deleted, as Cluster API's
// MachineHealthCheck does; a controller (of three or more, one at a time)
// has its etcd member replaced too, not while that member answers (the
// plan warns instead). When more workers are unhealthy than
// MaxUnhealthy, none is replaced: that is an outage (a network, the
// control plane), not a node's fault, and the plan says so.
type Remediation struct {
	UnhealthyAfter Duration `json:"unhealthyAfter,omitempty" yaml:"unhealthyAfter,omitempty"`
	MaxUnhealthy   int      `json:"maxUnhealthy,omitempty" yaml:"maxUnhealthy,omitempty"`
}

// PKI is the generation of the cluster's CAs (the cluster CA, etcd's, the
// front proxy's) and service account key, and the phase of the rotation
// to it. A rotation to generation N is three commits, each rolled to every
// host: {generation: N, phase: trust} (the new CAs trusted beside the
// old, which still sign), {generation: N, phase: reissue} (every leaf
// issued again by the new ones), then {generation: N} (phase complete:
// the old ones dropped, deleted from the store).
type PKI struct {
	Generation int           `json:"generation,omitempty" yaml:"generation,omitempty"`
	Phase      RotationPhase `json:"phase,omitempty" yaml:"phase,omitempty"`
}

// RotationPhase is a phase of a CA rotation.
type RotationPhase string

// The phases, in the order a rotation goes through them.
const (
	RotationTrust    RotationPhase = "trust"
	RotationReissue  RotationPhase = "reissue"
	RotationComplete RotationPhase = "complete"
)

// CAGeneration returns the spec's CA generation and rotation phase, with
// their defaults (1, complete) for an absent pki.
func (s *Spec) CAGeneration() (int, RotationPhase) {
	if s.PKI == nil {
		return 1, RotationComplete
	}
	return max(s.PKI.Generation, 1), cmp.Or(s.PKI.Phase, RotationComplete)
}

// CAGenerations returns the CA generations the spec's rotation phase
// trusts, the one that signs first: at generation N, trust: N-1 (still
// signing) and N; reissue: N (signing) and N-1; complete: N alone.
func (s *Spec) CAGenerations() []int {
	g, phase := s.CAGeneration()
	switch {
	case g > 1 && phase == RotationTrust:
		return []int{g - 1, g}
	case g > 1 && phase == RotationReissue:
		return []int{g, g - 1}
	}
	return []int{g}
}

// Backup schedules etcd snapshots into a Swift container.
type Backup struct {
	Interval  Duration `json:"interval,omitempty" yaml:"interval,omitempty"`
	Retain    int      `json:"retain,omitempty" yaml:"retain,omitempty"`
	Container string   `json:"container,omitempty" yaml:"container,omitempty"`
	// Drill restores every new snapshot into a throwaway etcd and checks it.
	Drill bool `json:"drill,omitempty" yaml:"drill,omitempty"`
}

// RegistryMirror is the registry every image of the cluster is pulled
// from, the kubelet's included, as in a cloud without internet. Each
// upstream registry's repositories are under its host name:
// registry.k8s.io/kube-apiserver:v1.35.1 is pulled from
// ENDPOINT/registry.k8s.io/kube-apiserver:v1.35.1. The hosts' container
// runtime is told so (containerd's hosts.toml for each registry); the
// manifests keep the upstream names.
type RegistryMirror struct {
	// Endpoint is https://host[:port][/path], or http:// for a registry
	// on a network the operator trusts. It carries no credentials: those
	// are the daemon's (--registry-mirror-credentials), pushed over SSH.
	Endpoint string `json:"endpoint" yaml:"endpoint"`
	// CACert is the PEM certificate of the CA that signed the mirror's,
	// when the hosts do not trust it already.
	CACert string `json:"caCert,omitempty" yaml:"caCert,omitempty"`
}

// DownloadMirror is where the hosts fetch the files upstream releases for
// download, as in a cloud without internet. Each file is under its
// upstream URL's host and path, as Kubespray's files_repo lays them out:
// https://dl.k8s.io/release/v1.35.1/bin/linux/amd64/kubelet is fetched
// from ENDPOINT/dl.k8s.io/release/v1.35.1/bin/linux/amd64/kubelet, and
// checked against the sha256 file beside it (ENDPOINT/....sha256), as
// upstream publishes both.
type DownloadMirror struct {
	// Endpoint is https://host[:port][/path], or http:// for a mirror on
	// a network the operator trusts (the sha256 comes from the same
	// place). It carries no credentials.
	Endpoint string `json:"endpoint" yaml:"endpoint"`
	// CACert is the PEM certificate of the CA that signed the mirror's,
	// when the hosts do not trust it already.
	CACert string `json:"caCert,omitempty" yaml:"caCert,omitempty"`
}

// DeletionPolicy says whether removing a cluster's file destroys the cluster.
type DeletionPolicy string

// The deletion policies. Delete acts only once it is in the last applied spec.
const (
	DeletionRetain DeletionPolicy = "Retain"
	DeletionDelete DeletionPolicy = "Delete"
)

// Duration is a time.Duration written as Go writes durations ("10m", "1h30m").
type Duration struct{ time.Duration }

// String returns the shortest form of the duration, as the spec writes it.
func (d Duration) String() string { return formatDuration(d.Duration) }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	return d.set(s)
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	if err := d.set(s); err != nil {
		// A TypeError lets the decoder go on with the other fields.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	return nil
}

// IsZero lets omitempty drop an unset duration.
func (d Duration) IsZero() bool { return d.Duration == 0 }

func (d *Duration) set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	d.Duration = v
	return nil
}

// formatDuration writes 10m rather than time.Duration's 10m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

package diff

import (
	"time"

	"opke.dev/opke/schemas"
)

// Resource is an OpenStack resource flattened to what the diff compares.
// Attributes refer to other resources by name, never by id, so a desired
// resource and an observed one compare directly.
type Resource struct {
	Kind Kind
	// Name is unique per kind within a cluster; it is part of the address.
	Name  string
	Attrs Attrs
	// Desired only: the attributes whose change replaces the resource, and
	// the addresses of the resources it needs.
	ForceNew  []string
	DependsOn []Address
	// Observed only: the cloud's id, and a server's status as Nova says
	// (ACTIVE, ERROR, SHUTOFF...).
	ID     string
	Status string
}

// Address is the resource's address: openstack/<kind>/<name>.
func (r Resource) Address() Address { return ResourceAddress(r.Kind, r.Name) }

// File is a file a host should have, as the diff sees it.
type File struct {
	Path    string
	SHA256  string
	Mode    string // octal, as people read it
	Secret  bool
	Restart []string // units restarted once the file changed
	// Unknown marks a file whose bytes are not known before apply: they
	// carry the API's floating IP (NeedsAPIFloatingIP), which does not
	// exist yet, or keys and certificates issued at apply.
	Unknown            bool
	NeedsAPIFloatingIP bool
}

// Manifest is a file of API objects the cluster should hold (its
// kube-proxy, CoreDNS, flannel and addons), applied through the API once
// the control plane serves.
type Manifest struct {
	// Name is the file's name, as rendered under /etc/kubernetes/addons
	// ("00-kube-proxy.yaml"); it orders the applies.
	Name   string
	SHA256 string
	// Unknown marks a manifest whose bytes carry keys or certificates
	// issued at apply.
	Unknown bool
	// Objects says, for a manifest that changed since its last apply,
	// which of its objects the apply adds, changes or removes
	// ("DaemonSet kube-system/kube-proxy changed"): the plan's reason.
	// Empty when unchanged, or when the last apply recorded no objects.
	Objects []string
}

// Host is a host's desired files.
type Host struct {
	Name string
	// Role is controller, worker or gateway: it orders a rollout and says
	// what the host's health gate checks.
	Role    schemas.Role
	Version string
	Files   []File
}

// Desired is a cluster as its spec and the rendered assets say.
type Desired struct {
	Cluster        string
	DeletionPolicy string
	Infra          []Resource
	Hosts          []Host
	// BackupDue asks for an etcd snapshot in this plan.
	BackupDue bool
	// MaxUnavailable is how many workers a rollout restarts at once
	// (spec.upgrade.maxUnavailable; controllers go one at a time).
	MaxUnavailable int
	// Manifests are the API objects to apply, in order.
	Manifests []Manifest
	// Remediation, if set, replaces hosts whose Node stays not Ready
	// (spec.remediation).
	Remediation *Remediation
	// OSReboots says who reboots a host whose OS update waits for a
	// reboot (spec.upgrade.osReboots): coordinated (OPKE) or manual.
	OSReboots string
}

// Remediation is when a host whose Node is not Ready is replaced
// (spec.remediation; see remediations).
type Remediation struct {
	UnhealthyAfter time.Duration
	MaxUnhealthy   int
}

// Applied is what OPKE last applied to a cluster, from the state store.
type Applied struct {
	// DeletionPolicy is the last applied spec's.
	DeletionPolicy string
	// Infra holds the attributes of each resource as applied, by address.
	Infra map[Address]Attrs
	// Files holds the sha256 of each file as pushed, by host and path.
	Files map[string]map[string]string
	// Versions holds the Kubernetes version each host runs.
	Versions map[string]string
	// Manifests holds the sha256 of each manifest as applied, by name.
	Manifests map[string]string
}

// Knows reports whether the ledger knows a host: it recorded the host's
// version or a file pushed to it (so OPKE issued it material, and its
// etcd member, if a controller's, may still be in the membership).
func (a *Applied) Knows(host string) bool {
	return a != nil && (a.Versions[host] != "" || len(a.Files[host]) > 0)
}

// Observed is a cluster as OpenStack and the state store show it.
type Observed struct {
	Cluster string
	// Cloud is every resource tagged for the cluster.
	Cloud []Resource
	// Services are what the cluster's cloud controller manager made for
	// its Services of type LoadBalancer (load balancers on its subnet and
	// their floating IPs): never desired, never drift, deleted only with
	// the cluster (deletionPolicy Delete). Observed only then.
	Services []Resource
	// Volumes are the volumes and snapshots the cluster's Cinder CSI
	// driver made (but those marked to keep): as Services, never desired,
	// never drift, deleted only with the cluster; observed only then.
	Volumes []Resource
	// Applied is nil for a cluster this store never applied (a new one, or
	// one adopted by its tags).
	Applied *Applied
	// HostFiles holds the sha256 of each file read on the hosts, by host
	// and path; nil unless a resync asked for them.
	HostFiles map[string]map[string]string
	// RebootRequired are the hosts, sorted, whose staged OS update waits
	// for a reboot (assets.PathRebootRequired is there), as a resync read
	// them with their files; nil otherwise.
	RebootRequired []string
	// ObjectDrift is, by manifest, what changed outside OPKE in the objects
	// it applied, one line each ("Deployment kube-system/coredns deleted",
	// or changed by another field manager): read by a resync (nil
	// otherwise, or when the API did not answer).
	ObjectDrift map[string][]string
	// Nodes is the health of the cluster's Node objects, by name, as its
	// API showed them when the plan was made; nil when they were not read
	// (no remediation asked for), and NodesUnread says why when the API
	// could not tell.
	Nodes       map[string]NodeHealth
	NodesUnread string
	// EtcdAnswers tells, by controller, whether its etcd member answers:
	// read when the plan would make a controller's server again for its
	// health (ControllersToRenew); nil when not read.
	EtcdAnswers map[string]bool
}

// NodeHealth is a Node's Ready condition: its status (True, False, or
// Unknown when its kubelet stopped posting), and how long it has had it
// (since the condition's last transition, by the planner's clock).
type NodeHealth struct {
	Ready string
	For   time.Duration
}

package diff

import (
	"errors"
	"fmt"
	"strings"
)

// Target is what an [Address] names.
type Target uint8

// The targets, with their addresses' string forms. A host's file is
// named by its absolute path; a security group rule's name holds a slash
// (<group>/ingress-...), which the resource's form allows.
const (
	_               Target = iota
	TargetResource         // openstack/<kind>/<name>
	TargetFile             // host/<host><path>
	TargetUnit             // host/<host>/units/<unit>
	TargetGate             // host/<host>/health: the host's health gate
	TargetDrain            // host/<host>/drain: a worker's cordon and evictions
	TargetNode             // host/<host>/node: the host's Node object
	TargetMember           // host/<host>/etcd-member: a controller's etcd membership
	TargetManifest         // kubernetes/<cluster>/<name>
	TargetBackup           // backup/<cluster>: a scheduled etcd snapshot
	TargetSnapshot         // backup/<cluster>/before-rollout
	TargetState            // state/<cluster>: what only the state store keeps
	TargetWorkloads        // kubernetes/<cluster>/workloads/restart: a rolling restart of the cluster's workloads
	TargetReboot           // host/<host>/reboot: the host's reboot into its staged OS update
)

// Address names what a change is about, as Terraform's addrs do: a typed
// value built by the functions below and read by [ParseAddress], so no
// package takes a string apart to learn which host or resource a change
// is for. Its string form (String, and the plan's JSON) is stable: the
// ids of changes are made from it. Addresses compare with ==.
type Address struct {
	Target Target
	// Kind is a resource's OpenStack kind.
	Kind Kind
	// Host is the host of a file, unit, gate, drain or Node object.
	Host string
	// Cluster is the cluster of a manifest, backup, snapshot or state
	// change (the others' is the change's).
	Cluster string
	// Name is a resource's name, a file's absolute path, a unit's or a
	// manifest's name.
	Name string
}

// ResourceAddress is the address of an OpenStack resource.
func ResourceAddress(kind Kind, name string) Address {
	return Address{Target: TargetResource, Kind: kind, Name: name}
}

// FileAddress is the address of a file on a host, by its absolute path.
func FileAddress(host, path string) Address {
	return Address{Target: TargetFile, Host: host, Name: path}
}

// UnitAddress is the address of a systemd unit's restart on a host.
func UnitAddress(host, unit string) Address {
	return Address{Target: TargetUnit, Host: host, Name: unit}
}

// GateAddress is the address of a host's health gate.
func GateAddress(host string) Address { return Address{Target: TargetGate, Host: host} }

// DrainAddress is the address of a worker's drain.
func DrainAddress(host string) Address { return Address{Target: TargetDrain, Host: host} }

// NodeAddress is the address of a host's Node object in Kubernetes.
func NodeAddress(host string) Address { return Address{Target: TargetNode, Host: host} }

// RebootAddress is the address of a host's reboot into its staged OS
// update.
func RebootAddress(host string) Address { return Address{Target: TargetReboot, Host: host} }

// MemberAddress is the address of a controller's membership in its
// cluster's etcd.
func MemberAddress(host string) Address { return Address{Target: TargetMember, Host: host} }

// ManifestAddress is the address of a manifest's apply.
func ManifestAddress(cluster, name string) Address {
	return Address{Target: TargetManifest, Cluster: cluster, Name: name}
}

// BackupAddress is the address of a cluster's scheduled etcd snapshot.
func BackupAddress(cluster string) Address { return Address{Target: TargetBackup, Cluster: cluster} }

// SnapshotAddress is the address of the etcd snapshot taken before a
// rollout's first control-plane restart.
func SnapshotAddress(cluster string) Address {
	return Address{Target: TargetSnapshot, Cluster: cluster}
}

// StateAddress is the address of what only the state store keeps of a
// cluster (its deletion policy; forgetting it).
func StateAddress(cluster string) Address { return Address{Target: TargetState, Cluster: cluster} }

// WorkloadsAddress is the address of the rolling restart of a cluster's
// workloads, after its trust bundles or its service account key changed.
func WorkloadsAddress(cluster string) Address {
	return Address{Target: TargetWorkloads, Cluster: cluster}
}

// The fixed parts of the string forms.
const (
	spaceOpenStack  = "openstack/"
	spaceHost       = "host/"
	spaceKubernetes = "kubernetes/"
	spaceBackup     = "backup/"
	spaceState      = "state/"
	unitsPrefix     = "/units/"
	gateSuffix      = "/health"
	drainSuffix     = "/drain"
	nodeSuffix      = "/node"
	memberSuffix    = "/etcd-member"
	rebootSuffix    = "/reboot"
	snapshotSuffix  = "/before-rollout"
	workloadsSuffix = "/workloads/restart"
)

// String is the address's stable string form.
func (a Address) String() string {
	switch a.Target {
	case TargetResource:
		return spaceOpenStack + string(a.Kind) + "/" + a.Name
	case TargetFile:
		return spaceHost + a.Host + a.Name
	case TargetUnit:
		return spaceHost + a.Host + unitsPrefix + a.Name
	case TargetGate:
		return spaceHost + a.Host + gateSuffix
	case TargetDrain:
		return spaceHost + a.Host + drainSuffix
	case TargetNode:
		return spaceHost + a.Host + nodeSuffix
	case TargetMember:
		return spaceHost + a.Host + memberSuffix
	case TargetReboot:
		return spaceHost + a.Host + rebootSuffix
	case TargetManifest:
		return spaceKubernetes + a.Cluster + "/" + a.Name
	case TargetBackup:
		return spaceBackup + a.Cluster
	case TargetSnapshot:
		return spaceBackup + a.Cluster + snapshotSuffix
	case TargetState:
		return spaceState + a.Cluster
	case TargetWorkloads:
		return spaceKubernetes + a.Cluster + workloadsSuffix
	}
	return ""
}

// IsZero reports whether a names nothing.
func (a Address) IsZero() bool { return a == Address{} }

// OnHost reports whether a names something on a host (a file, a unit, its
// gate, its drain, its Node object, its etcd membership or its reboot).
func (a Address) OnHost() bool { return a.Host != "" }

// Compare orders addresses by their string forms.
func (a Address) Compare(b Address) int { return strings.Compare(a.String(), b.String()) }

// MarshalText gives the string form: a plan's JSON holds addresses so.
func (a Address) MarshalText() ([]byte, error) {
	if a.IsZero() {
		return nil, errEmptyAddress
	}
	return []byte(a.String()), nil
}

// UnmarshalText parses the string form.
func (a *Address) UnmarshalText(b []byte) error {
	p, err := ParseAddress(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

// ErrAddress is a string that is not an address.
var ErrAddress = errors.New("not an address")

var errEmptyAddress = fmt.Errorf("%w: empty", ErrAddress)

// ParseAddress reads an address's string form. It accepts exactly what
// String gives for an address the constructors make.
func ParseAddress(s string) (Address, error) {
	bad := func(why string) (Address, error) { return Address{}, fmt.Errorf("%w: %q: %s", ErrAddress, s, why) }
	segment := func(v string) bool { return v != "" && !strings.Contains(v, "/") }
	switch {
	case s == "":
		return Address{}, errEmptyAddress
	case strings.HasPrefix(s, spaceOpenStack):
		kind, name, ok := strings.Cut(s[len(spaceOpenStack):], "/")
		if !ok || !Kind(kind).Known() {
			return bad("no known kind")
		}
		if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
			return bad("no name")
		}
		return ResourceAddress(Kind(kind), name), nil
	case strings.HasPrefix(s, spaceHost):
		host, rest, ok := strings.Cut(s[len(spaceHost):], "/")
		if !ok || host == "" {
			return bad("no host")
		}
		rest = "/" + rest
		switch {
		case rest == gateSuffix:
			return GateAddress(host), nil
		case rest == drainSuffix:
			return DrainAddress(host), nil
		case rest == nodeSuffix:
			return NodeAddress(host), nil
		case rest == memberSuffix:
			return MemberAddress(host), nil
		case rest == rebootSuffix:
			return RebootAddress(host), nil
		case strings.HasPrefix(rest, unitsPrefix):
			if unit := rest[len(unitsPrefix):]; segment(unit) {
				return UnitAddress(host, unit), nil
			}
			return bad("no unit")
		case len(rest) > 1 && !strings.HasSuffix(rest, "/") && !strings.Contains(rest, "//"):
			return FileAddress(host, rest), nil
		}
		return bad("no file")
	case strings.HasPrefix(s, spaceKubernetes):
		if cluster, ok := strings.CutSuffix(s[len(spaceKubernetes):], workloadsSuffix); ok && segment(cluster) {
			return WorkloadsAddress(cluster), nil
		}
		cluster, name, ok := strings.Cut(s[len(spaceKubernetes):], "/")
		if !ok || cluster == "" || !segment(name) {
			return bad("no cluster or manifest")
		}
		return ManifestAddress(cluster, name), nil
	case strings.HasPrefix(s, spaceBackup):
		rest := s[len(spaceBackup):]
		if cluster, ok := strings.CutSuffix(rest, snapshotSuffix); ok && segment(cluster) {
			return SnapshotAddress(cluster), nil
		}
		if segment(rest) {
			return BackupAddress(rest), nil
		}
		return bad("no cluster")
	case strings.HasPrefix(s, spaceState):
		if rest := s[len(spaceState):]; segment(rest) {
			return StateAddress(rest), nil
		}
		return bad("no cluster")
	}
	return bad("unknown space")
}

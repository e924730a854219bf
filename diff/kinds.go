package diff

import (
	"slices"
	"strings"
)

// Kind is an OpenStack resource type as OPKE manages it. What the plan
// knows of a kind is its row in kindSchemas below; what the cloud does with
// it (observed, created, updated, deleted) is its file in package cloud
// (cloud/kind_*.go).
type Kind string

// The kinds. Creation follows each resource's DependsOn; deletion goes
// the other way, by the attributes that name other resources (refs).
const (
	KindNetwork       Kind = "network"
	KindSecurityGroup Kind = "security-group"
	KindServerGroup   Kind = "server-group"
	KindSubnet        Kind = "subnet"
	KindRouter        Kind = "router"
	KindRule          Kind = "security-group-rule"
	KindInterface     Kind = "router-interface"
	KindPort          Kind = "port"
	KindLoadBalancer  Kind = "load-balancer"
	KindServer        Kind = "server"
	KindListener      Kind = "listener"
	KindFloatingIP    Kind = "floating-ip"
	KindPool          Kind = "pool"
	KindMember        Kind = "member"
	KindMonitor       Kind = "health-monitor"
	// KindAppCredential is the cluster's Keystone application credential
	// (its cloud provider's and CSI driver's); named after the cluster.
	KindAppCredential Kind = "application-credential"
	// KindVolume and KindSnapshot are Cinder volumes and snapshots the
	// cluster's Cinder CSI driver made for its PersistentVolumes and
	// VolumeSnapshots: OPKE never makes them; a cluster deleted under
	// deletionPolicy Delete deletes them (cloud.ClusterVolumes).
	KindVolume   Kind = "volume"
	KindSnapshot Kind = "volume-snapshot"
)

// schema is what the plan knows of a kind.
type schema struct {
	kind Kind
	// refs are the attributes by which a resource names others, and the
	// kinds they name (a list, comma-separated; "group:" marks a
	// security group named as a rule's remote): the ones it names are
	// deleted after it.
	refs map[string]Kind
	// heldBy are the kinds whose resources of the cluster must be deleted
	// before a resource of this kind, though they do not name it: a
	// router interface routes the floating IPs and load balancer VIPs, a
	// subnet holds the ports' addresses (Neutron refuses to delete a
	// subnet while a port has one).
	heldBy []Kind
}

// kindSchemas are the kinds' schemas, in creation order.
var kindSchemas = []schema{
	{kind: KindAppCredential},
	{kind: KindNetwork},
	{kind: KindSecurityGroup},
	{kind: KindServerGroup},
	{kind: KindSubnet, refs: map[string]Kind{"network": KindNetwork}, heldBy: []Kind{KindPort}},
	{kind: KindRouter},
	{kind: KindRule, refs: map[string]Kind{"security_group": KindSecurityGroup, "remote": KindSecurityGroup}},
	{kind: KindInterface, refs: map[string]Kind{"router": KindRouter, "subnet": KindSubnet}, heldBy: []Kind{KindFloatingIP, KindLoadBalancer}},
	{kind: KindPort, refs: map[string]Kind{"network": KindNetwork, "security_groups": KindSecurityGroup}},
	{kind: KindLoadBalancer, refs: map[string]Kind{"subnet": KindSubnet}},
	{kind: KindServer, refs: map[string]Kind{"port": KindPort, "server_group": KindServerGroup}},
	{kind: KindListener, refs: map[string]Kind{"load_balancer": KindLoadBalancer}},
	{kind: KindFloatingIP, refs: map[string]Kind{"port": KindPort, "load_balancer": KindLoadBalancer}},
	{kind: KindPool, refs: map[string]Kind{"listener": KindListener}},
	{kind: KindMember, refs: map[string]Kind{"pool": KindPool}},
	{kind: KindMonitor, refs: map[string]Kind{"pool": KindPool}},
	// An attached volume cannot be deleted: its server goes first (Nova
	// detaches it); nor can a volume with snapshots.
	{kind: KindVolume, heldBy: []Kind{KindServer}},
	{kind: KindSnapshot, refs: map[string]Kind{"volume": KindVolume}},
}

// schemaOf returns a kind's schema; ok is false for a kind OPKE does not
// manage.
func schemaOf(k Kind) (schema, bool) {
	i := slices.IndexFunc(kindSchemas, func(s schema) bool { return s.kind == k })
	if i < 0 {
		return schema{}, false
	}
	return kindSchemas[i], true
}

// Known reports whether k is one of the kinds OPKE manages.
func (k Kind) Known() bool {
	_, ok := schemaOf(k)
	return ok
}

// Kinds lists the kinds OPKE manages, in creation order.
func Kinds() []Kind {
	out := make([]Kind, len(kindSchemas))
	for i, s := range kindSchemas {
		out[i] = s.kind
	}
	return out
}

// referenced returns the addresses a resource names.
func referenced(r Resource) []Address {
	s, _ := schemaOf(r.Kind)
	var out []Address
	for attr, kind := range s.refs {
		for _, name := range strings.Split(r.Attrs[attr].Value, ",") {
			name = strings.TrimPrefix(name, "group:")
			if name != "" {
				out = append(out, ResourceAddress(kind, name))
			}
		}
	}
	return out
}

// holds reports whether a resource of kind k must be deleted before one
// of kind target (see schema.heldBy).
func holds(k, target Kind) bool {
	s, _ := schemaOf(target)
	return slices.Contains(s.heldBy, k)
}

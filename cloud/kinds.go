package cloud

import (
	"context"

	"opke.dev/opke/diff"
)

// kind is what this package does with one OpenStack kind: how a resource
// of it is created, updated in place (nil: it is not; the plan replaces
// it, per the kind's force-new attributes), deleted (its id found), and
// observed (nil: by another kind's listing: a security group's rules, a
// router's interface, a pool's members, the servers' server group). Each
// kind's file, kind_*.go, holds its functions and its entry; what the
// plan knows of it (its references, what holds it) is its row in
// package diff's kinds.go.
type kind struct {
	create  func(a *Applier, ctx context.Context, r diff.Resource, userData []byte) (string, error)
	update  func(a *Applier, ctx context.Context, id string, r diff.Resource) error
	delete  func(a *Applier, ctx context.Context, id string, r diff.Resource) error
	observe func(o *observer, ctx context.Context) error
}

// kinds are the kinds OPKE manages (diff.Kinds), each with its entry.
var kinds = map[diff.Kind]kind{
	diff.KindAppCredential: appCredentialKind,
	diff.KindNetwork:       networkKind,
	diff.KindSecurityGroup: securityGroupKind,
	diff.KindServerGroup:   serverGroupKind,
	diff.KindSubnet:        subnetKind,
	diff.KindRouter:        routerKind,
	diff.KindRule:          ruleKind,
	diff.KindInterface:     interfaceKind,
	diff.KindPort:          portKind,
	diff.KindLoadBalancer:  loadBalancerKind,
	diff.KindServer:        serverKind,
	diff.KindListener:      listenerKind,
	diff.KindFloatingIP:    floatingIPKind,
	diff.KindPool:          poolKind,
	diff.KindMember:        memberKind,
	diff.KindMonitor:       monitorKind,
	diff.KindVolume:        volumeKind,
	diff.KindSnapshot:      snapshotKind,
}

// observeOrder is the order an observation lists the kinds in: a listing
// names what earlier ones found by their ids (a subnet's network, a
// server's port, a floating IP's load balancer's VIP port).
var observeOrder = []diff.Kind{
	diff.KindAppCredential, diff.KindNetwork, diff.KindSubnet, diff.KindSecurityGroup, diff.KindRouter, diff.KindPort, diff.KindServer,
	diff.KindLoadBalancer, diff.KindFloatingIP, diff.KindListener, diff.KindPool, diff.KindMonitor,
}

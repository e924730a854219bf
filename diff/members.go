package diff

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
)

// The membership of a cluster's etcd changes as Cluster API's
// KubeadmControlPlane and etcd's own runtime reconfiguration guide have
// it, one member at a time and never below quorum:
//
//   - A controller that leaves (controllers.count lowered) leaves etcd's
//     membership after the API's load balancer dropped it and before its
//     server is deleted, highest index first.
//   - A controller whose member must join the etcd that runs (a server
//     lost and made again, one rolled to a new server, or
//     controllers.count raised) is added as a learner before its etcd
//     starts, with ETCD_INITIAL_CLUSTER_STATE existing and the membership
//     it was added to; promoted to a voting member once it caught up;
//     then gated healthy. The member of a lost server is removed before
//     its server is made again (a member that answers is never removed
//     so: a controller that runs is not replaced for its health); the
//     member of a controller rolled (its flavor or image changed) is
//     removed while it answers, only when every other member answers.
//   - The next membership change waits for the gate of the one before:
//     a controller replaced leaves and joins again before the next
//     leaves.
//
// Removals are infrastructure changes (before the servers go or come),
// joins host changes; the apply runs a removal that waits for a gate
// once the gate passed, with the host changes (reconciler/clusterapply.go).

// Attributes of membership changes.
const (
	attrPeerURL = "peer_url"
	attrMembers = "members"
	attrLearner = "learner"
	// attrRemoval says why a member is removed: a controller that leaves,
	// or the member of a lost (or replaced) server.
	attrRemoval = "removal"
)

// Why a member is removed.
const (
	// RemovalLeave is a controller the spec no longer has.
	RemovalLeave = "leave"
	// RemovalLost is a member whose server is gone: removed only if it
	// does not answer.
	RemovalLost = "lost"
	// RemovalReplace is a member whose server is to be replaced while it
	// exists, for its health (in ERROR, remediated): refused while the
	// member answers.
	RemovalReplace = "replace"
	// RemovalRoll is a member whose server is replaced because its flavor
	// or image changed: removed while it answers, when every other member
	// answers (etcd keeps its quorum, and one failure more is the most it
	// loses for the while).
	RemovalRoll = "roll"
)

// Join is a controller whose etcd member joins the etcd that runs.
type Join struct {
	Host string
	// Members are the controllers etcd's membership holds once the host
	// is added, the host included, by index.
	Members []string
	// Removal is set when the host ran before (its server lost or to be
	// replaced): a member of its peer URL may be left, to remove first.
	Removal string
}

// Start is how the joining member's etcd first starts.
func (j Join) Start() assets.EtcdStart { return assets.EtcdStart{Join: true, Members: j.Members} }

// MemberChange reads a membership change: the joining member's start
// (ok false for another change).
func MemberChange(c Change) (start assets.EtcdStart, ok bool) {
	if c.Address.Target != TargetMember || c.Action != ActionCreate {
		return assets.EtcdStart{}, false
	}
	_, _, members := MemberOf(c)
	return assets.EtcdStart{Join: true, Members: members}, len(members) > 0
}

// MemberOf reads what a membership change is about: the member's peer
// URL, why it is removed (a removal), and the members a join expects.
func MemberOf(c Change) (peerURL, removal string, members []string) {
	attrs := c.After
	if c.Action == ActionDelete {
		attrs = c.Before
	}
	if m := attrs[attrMembers].Value; m != "" {
		members = strings.Split(m, ",")
	}
	return attrs[attrPeerURL].Value, attrs[attrRemoval].Value, members
}

// PeerURL is a controller's etcd peer URL at its fixed IP.
func PeerURL(ip netip.Addr) string { return "https://" + netip.AddrPortFrom(ip, 2380).String() }

// Joins lists the controllers of d whose etcd members join the etcd that
// runs, in the order they join (by index). The etcd runs once a
// controller of the cluster ran (the ledger has its version); a member
// runs if its controller ran and keeps its server. Before that, every
// controller founds the cluster and none joins. Each joins the members
// there are then: those that run, those that ran and are still to be
// removed and join again later (one at a time, each removed just before
// its own join), and those joined before it.
func Joins(d *Desired, o *Observed) []Join {
	if o.Applied == nil {
		return nil
	}
	ran := false
	for host := range o.Applied.Versions {
		if schemas.RoleOf(d.Cluster, host) == schemas.RoleController {
			ran = true
		}
	}
	if !ran {
		return nil
	}
	renewed := renewedServers(d, o)
	var running, joining []string
	for _, r := range d.Infra {
		if r.Kind != KindServer || schemas.RoleOf(d.Cluster, r.Name) != schemas.RoleController {
			continue
		}
		if o.Applied.Versions[r.Name] != "" && renewed[r.Name] == "" {
			running = append(running, r.Name)
		} else {
			joining = append(joining, r.Name)
		}
	}
	slices.SortFunc(joining, byIndex)
	members := running
	for _, host := range joining {
		if o.Applied.Knows(host) {
			members = append(members, host) // in the membership until its turn
		}
	}
	var out []Join
	for _, host := range joining {
		if !slices.Contains(members, host) {
			members = append(members, host)
		}
		j := Join{Host: host, Members: slices.SortedFunc(slices.Values(members), byIndex)}
		if o.Applied.Knows(host) {
			j.Removal = cmp.Or(renewed[host], RemovalLost)
		}
		out = append(out, j)
	}
	return out
}

// Starts is how a cluster's controllers' etcd members start, for a
// render: a member that joins as joins say; one that started before as
// the ledger recorded it (recorded); one that ran with no record (made
// before OPKE kept them, when the count could not change) founding the
// cluster with the controllers that ran. The rest found it with the
// spec's controllers (the render's default).
func Starts(cluster string, versions map[string]string, recorded map[string]assets.EtcdStart, joins []Join) map[string]assets.EtcdStart {
	out := map[string]assets.EtcdStart{}
	var ran []string
	for host := range versions {
		if _, ok := schemas.ControllerIndex(cluster, host); ok {
			ran = append(ran, host)
		}
	}
	slices.SortFunc(ran, byIndex)
	for _, host := range ran {
		out[host] = assets.EtcdStart{Members: ran}
	}
	maps.Copy(out, recorded)
	for _, j := range joins {
		out[j.Host] = j.Start()
	}
	return out
}

// Renewed lists the hosts the ledger knew whose servers the plan makes
// again (lost, or replaced): an apply forgets what it issued for them,
// and issues it anew.
func Renewed(d *Desired, o *Observed) []string {
	if o.Applied == nil {
		return nil
	}
	var out []string
	for host := range renewedServers(d, o) {
		if o.Applied.Knows(host) {
			out = append(out, host)
		}
	}
	slices.Sort(out)
	return out
}

// renewedServers are the servers of d the plan creates (RemovalLost: not
// in the cloud) or replaces (RemovalRoll: an attribute that forces a new
// one changed; RemovalReplace: one in ERROR, or remediated), as the
// builder finds them (changedAttrs, renewals).
func renewedServers(d *Desired, o *Observed) map[string]string {
	cloud := map[string]Resource{}
	for _, r := range o.Cloud {
		if r.Kind == KindServer {
			cloud[r.Name] = r
		}
	}
	out := map[string]string{}
	for _, r := range d.Infra {
		if r.Kind != KindServer {
			continue
		}
		got, ok := cloud[r.Name]
		if !ok {
			out[r.Name] = RemovalLost
			continue
		}
		if slices.ContainsFunc(changedAttrs(r, got), func(k string) bool { return slices.Contains(r.ForceNew, k) }) {
			out[r.Name] = RemovalRoll
		}
	}
	renew, _ := renewals(d, o)
	for name := range renew {
		out[name] = RemovalReplace
	}
	return out
}

// peerURLs are the etcd peer URLs of the cluster's controllers, desired
// or observed, by host, from their ports' fixed IPs.
func peerURLs(d *Desired, o *Observed) map[string]string {
	out := map[string]string{}
	for _, r := range slices.Concat(o.Cloud, d.Infra) {
		if r.Kind != KindPort || schemas.RoleOf(d.Cluster, r.Name) != schemas.RoleController {
			continue
		}
		if ip, err := netip.ParseAddr(r.Attrs["fixed_ip"].Value); err == nil {
			out[r.Name] = PeerURL(ip)
		}
	}
	return out
}

// members plans the membership changes of d's etcd: the removals of the
// controllers that leave (their servers' deletions in deletes) and of
// the members of lost servers, and the joins, chained one after another.
func (b *builder) members(d *Desired, o *Observed, joins []Join, deletes []*pending) {
	urls := peerURLs(d, o)
	var chain []*pending // the membership changes, in order
	// Controllers that leave: after the load balancer dropped them and
	// before their servers go (the rolling chain of the deletions,
	// highest index first, keeps them one at a time).
	var leaving []*pending
	for _, p := range deletes {
		if p.Address.Kind == KindServer && schemas.RoleOf(d.Cluster, p.Address.Name) == schemas.RoleController {
			leaving = append(leaving, p)
		}
	}
	slices.SortFunc(leaving, func(x, y *pending) int { return byIndex(y.Address.Name, x.Address.Name) })
	for _, p := range leaving {
		host := p.Address.Name
		m := b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseInfrastructure, Address: MemberAddress(host), Action: ActionDelete,
			Before: Attrs{attrPeerURL: Known(urls[host]), attrRemoval: Known(RemovalLeave)},
			Reason: "controllers.count lowered: leaves etcd's membership before its server is deleted"}})
		m.deps, p.deps = p.deps, []string{m.key}
		if lb := b.find(d.Cluster, ResourceAddress(KindMember, host), ActionDelete); lb != nil {
			m.deps = append(m.deps, lb.key)
		}
		chain = append(chain, m)
	}
	// Joins, each after the removal of its host's old member if it has
	// one (a lost server's, one replaced): added as a learner before its
	// etcd starts, promoted once caught up, then gated.
	for _, j := range joins {
		server := b.find(d.Cluster, ResourceAddress(KindServer, j.Host), ActionCreate, ActionReplace)
		drift := server != nil && server.drift
		if j.Removal != "" {
			reason := "the member of the lost server leaves etcd's membership before its server is made again"
			switch j.Removal {
			case RemovalReplace:
				reason = "the member leaves etcd's membership before its server is replaced (refused while it answers)"
			case RemovalRoll:
				reason = "the member leaves etcd's membership before its server is replaced (every other member answering)"
			}
			m := b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseInfrastructure, Address: MemberAddress(j.Host), Action: ActionDelete,
				Before: Attrs{attrPeerURL: Known(urls[j.Host]), attrRemoval: Known(j.Removal)}, Reason: reason}, drift: drift})
			if server != nil {
				server.deps = append(server.deps, m.key)
			}
			if j.Removal == RemovalRoll && !drift {
				// A roll of the controllers takes etcd's snapshot first,
				// as a rollout does (roll).
				snapshot := b.find(d.Cluster, SnapshotAddress(d.Cluster), ActionBackup)
				if snapshot == nil {
					snapshot = b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: SnapshotAddress(d.Cluster),
						Action: ActionBackup, Reason: "etcd snapshot before the first controller leaves etcd's membership, to restore if the roll must be undone"}})
				}
				m.deps = append(m.deps, snapshot.key)
			}
			chain = append(chain, m)
		}
		add := b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: MemberAddress(j.Host), Action: ActionCreate,
			After:  Attrs{attrPeerURL: Known(urls[j.Host]), attrMembers: Known(strings.Join(j.Members, ",")), attrLearner: Known("true")},
			Reason: fmt.Sprintf("added to etcd as a learner before its etcd starts: %d members with it", len(j.Members))}})
		promote := b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: MemberAddress(j.Host), Action: ActionUpdate,
			Before: Attrs{attrPeerURL: Known(urls[j.Host]), attrLearner: Known("true")}, After: Attrs{attrPeerURL: Known(urls[j.Host]), attrLearner: Known("false")},
			Reason: "promoted to a voting member once it caught up with the leader"}})
		add.drift, promote.drift = drift, drift
		promote.deps = append(promote.deps, add.key)
		// The units etcd.env restarts: etcd's.
		var etcdUnits []string
		if i := slices.IndexFunc(d.Hosts, func(h Host) bool { return h.Name == j.Host }); i >= 0 {
			if k := slices.IndexFunc(d.Hosts[i].Files, func(f File) bool { return f.Path == assets.PathEtcdEnv }); k >= 0 {
				etcdUnits = d.Hosts[i].Files[k].Restart
			}
		}
		for _, p := range b.list {
			if p.Cluster != d.Cluster || p.Address.Host != j.Host || p.Action != ActionRestart {
				continue
			}
			// Its etcd starts once it is a member; the promotion waits for
			// every unit of the host to restart.
			if slices.Contains(etcdUnits, p.Address.Name) {
				p.deps = append(p.deps, add.key)
			}
			promote.deps = append(promote.deps, p.key)
		}
		if g := b.find(d.Cluster, GateAddress(j.Host), ActionCheck); g != nil {
			g.deps = append(g.deps, promote.key)
			chain = append(chain, add, g)
		} else {
			chain = append(chain, add, promote)
		}
	}
	// One membership change at a time: each waits for the one before (a
	// join's gate).
	for i := 1; i < len(chain); i++ {
		if chain[i].Action == ActionCheck {
			continue // a join's gate follows its own promotion
		}
		chain[i].deps = append(chain[i].deps, chain[i-1].key)
	}
	b.quorum(d, o, joins)
}

// quorum warns of a cluster whose etcd, as the ledger and the cloud
// show it, lost quorum: more members' servers are gone than it can
// spare. Its membership cannot change; the plan's steps will say so, and
// a restore from a snapshot is the way back.
func (b *builder) quorum(d *Desired, o *Observed, joins []Join) {
	if o.Applied == nil {
		return
	}
	servers := map[string]bool{}
	for _, r := range o.Cloud {
		if r.Kind == KindServer {
			servers[r.Name] = true
		}
	}
	var members, lost []string
	for _, host := range slices.Sorted(maps.Keys(o.Applied.Versions)) {
		if schemas.RoleOf(d.Cluster, host) != schemas.RoleController {
			continue
		}
		members = append(members, host)
		if !servers[host] {
			lost = append(lost, host)
		}
	}
	if len(joins) == 0 || len(members) == 0 || len(members)-len(lost) > len(members)/2 {
		return
	}
	b.warnings = append(b.warnings, Warning{Cluster: d.Cluster, Message: fmt.Sprintf(
		"etcd has lost quorum: the servers of %d of its %d members are gone (%s), and its membership cannot change without a majority; "+
			"restore the cluster from a snapshot (opke restore; README: Backups and restore)", len(lost), len(members), strings.Join(lost, ", "))})
}

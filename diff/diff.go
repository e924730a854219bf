package diff

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
)

// Diff plans each desired cluster against what is observed of it, and
// each cluster observed but no longer desired per its last applied
// deletion policy. It is a pure function: no I/O, no clock, and the same
// inputs give the same plan.
func Diff(desired []*Desired, observed []*Observed) *Plan {
	b := &builder{byKey: map[string]*pending{}}
	seen := map[string]bool{}
	obs := map[string]*Observed{}
	for _, o := range observed {
		obs[o.Cluster] = o
	}
	for _, d := range desired {
		seen[d.Cluster] = true
		o := obs[d.Cluster]
		if o == nil {
			o = &Observed{Cluster: d.Cluster}
		}
		b.cluster(d, o)
	}
	for _, o := range observed {
		if !seen[o.Cluster] {
			b.removed(o)
		}
	}
	return b.plan()
}

// pending is a change being built; deps are keys of other pendings.
type pending struct {
	Change
	key   string
	drift bool
	deps  []string
}

type builder struct {
	list     []*pending
	byKey    map[string]*pending
	warnings []Warning
}

func key(cluster string, address Address, a Action) string {
	return cluster + " " + address.String() + " " + a.String()
}

func (b *builder) add(p *pending) *pending {
	p.key = key(p.Cluster, p.Address, p.Action)
	if old := b.byKey[p.key]; old != nil {
		return old
	}
	b.list = append(b.list, p)
	b.byKey[p.key] = p
	return p
}

// find returns the change of the cluster at address with one of actions.
func (b *builder) find(cluster string, address Address, actions ...Action) *pending {
	for _, a := range actions {
		if p := b.byKey[key(cluster, address, a)]; p != nil {
			return p
		}
	}
	return nil
}

// cluster plans one desired cluster.
func (b *builder) cluster(d *Desired, o *Observed) {
	var applied map[Address]Attrs
	if o.Applied != nil {
		applied = o.Applied.Infra
	}
	cloud := map[Address]Resource{}
	for _, r := range o.Cloud {
		cloud[r.Address()] = r
	}
	desired := map[Address]bool{}
	var infra []*pending
	renew, warnings := renewals(d, o)
	b.warnings = append(b.warnings, warnings...)
	for _, r := range d.Infra {
		a := r.Address()
		desired[a] = true
		was, wasApplied := applied[a]
		got, exists := cloud[a]
		if !exists {
			p := &pending{Change: Change{Cluster: d.Cluster, Phase: PhaseInfrastructure, Address: a, Action: ActionCreate, After: r.Attrs,
				Reason: "not in OpenStack yet"}}
			if wasApplied {
				p.drift, p.Reason = true, "deleted outside OPKE since the last apply"
			}
			infra = append(infra, b.add(p))
			continue
		}
		changed := changedAttrs(r, got)
		if why, ok := renew[r.Name]; ok && r.Kind == KindServer && len(changed) == 0 {
			infra = append(infra, b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseInfrastructure, Address: a, Action: ActionReplace,
				After: maps.Clone(r.Attrs), Reason: why}, drift: true}))
			continue
		}
		if len(changed) == 0 {
			continue
		}
		p := &pending{Change: Change{Cluster: d.Cluster, Phase: PhaseInfrastructure, Address: a, Action: ActionUpdate,
			Before: Attrs{}, After: Attrs{}}}
		var what []string
		for _, k := range changed {
			p.Before[k], p.After[k] = got.Attrs[k], r.Attrs[k]
			what = append(what, fmt.Sprintf("%s %s → %s", k, orNone(got.Attrs[k]), r.Attrs[k]))
			if slices.Contains(r.ForceNew, k) {
				p.Action = ActionReplace
			}
			if wasApplied && was[k] != got.Attrs[k] {
				p.drift = true
			}
		}
		p.Reason = strings.Join(what, ", ")
		if p.Action == ActionReplace {
			// The new resource is made from the whole of it.
			p.After = maps.Clone(r.Attrs)
			if why, ok := renew[r.Name]; ok {
				p.drift, p.Reason = true, p.Reason+"; "+why
			}
		}
		if p.drift {
			p.Reason = "changed outside OPKE: " + p.Reason
		}
		infra = append(infra, b.add(p))
	}
	// Creation order: what a resource needs comes first.
	byAddr := map[Address]Resource{}
	for _, r := range d.Infra {
		byAddr[r.Address()] = r
	}
	for _, p := range infra {
		for _, dep := range byAddr[p.Address].DependsOn {
			if q := b.find(d.Cluster, dep, ActionCreate, ActionReplace); q != nil {
				p.deps = append(p.deps, q.key)
			}
		}
	}
	rolling(infra, ActionReplace, false)
	b.renewedNodes(d, o, renew)
	// What OpenStack has for the cluster and the spec no longer asks for.
	var gone []Resource
	for _, r := range o.Cloud {
		if !desired[r.Address()] {
			gone = append(gone, r)
		}
	}
	deletes := b.deleteAll(d.Cluster, gone, "not in the spec")
	rolling(deletes, ActionDelete, true)
	b.drains(d, o, deletes)
	joins := Joins(d, o)
	b.hosts(d, o, joins)
	b.gatedRolls(d)
	b.members(d, o, joins, deletes)
	b.manifests(d, o)
	b.workloads(d)
	b.stateChanges(d, o)
	b.reboots(d, o)
}

// trustFiles are the files whose change on the controllers of a cluster
// that runs means its pods must start again: what the controller-manager
// publishes to every namespace (kube-root-ca.crt, from ca.crt), which
// pods read once, at start, and the keys their tokens are checked with.
var trustFiles = []string{assets.PathPKI + "/ca.crt", assets.PathPKI + "/sa.pub"}

// workloads plans a rolling restart of the cluster's workloads (every
// Deployment, DaemonSet and StatefulSet) after a roll that changed what
// the controllers trust or sign tokens with: a CA rotation's phases. A
// pod keeps the CA bundle it started with; without the restart, pods
// started before a rotation's trust phase refuse the API servers once
// they serve with the new CA's certificates, and pods whose tokens the
// old key signed are refused once it is dropped. It comes after every
// other change of the cluster's host phase: the controllers rolled, the
// bundle published.
func (b *builder) workloads(d *Desired) {
	var why []string
	var deps []string
	for _, p := range b.list {
		if p.Cluster != d.Cluster || p.Phase != PhaseHosts {
			continue
		}
		deps = append(deps, p.key)
		if p.Action == ActionUpload && !p.drift && p.Before != nil && slices.Contains(trustFiles, p.Address.Name) &&
			b.isController(d, p.Address.Host) && !slices.Contains(why, p.Address.Name) {
			why = append(why, p.Address.Name)
		}
	}
	if len(why) == 0 {
		return
	}
	slices.Sort(why)
	p := b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: WorkloadsAddress(d.Cluster), Action: ActionRestart,
		After:  Attrs{"kinds": Known("Deployment,DaemonSet,StatefulSet")},
		Reason: "the controllers' " + strings.Join(why, " and ") + " changed (a CA rotation): pods read what they trust at start"}})
	p.deps = append(p.deps, deps...)
}

// gatedRolls makes a pool's workers rolled to new servers (its flavor or
// the image changed) go one at a time with each back before the next
// leaves: a worker's drain waits for the gate (node Ready) of the worker
// replaced before it, not only for its server's replacement. Replacements
// for health (drift: in ERROR, remediated) are not held so: their nodes
// are out already. Controllers are held by their etcd membership's
// chain (members), the gateway is one.
func (b *builder) gatedRolls(d *Desired) {
	pools := map[string][]*pending{}
	for _, p := range b.list {
		if p.Cluster == d.Cluster && p.Action == ActionReplace && p.Address.Kind == KindServer && !p.drift &&
			schemas.RoleOf(d.Cluster, p.Address.Name) == schemas.RoleWorker {
			pool, _ := index(p.Address.Name)
			pools[pool] = append(pools[pool], p)
		}
	}
	for _, list := range pools {
		slices.SortFunc(list, func(x, y *pending) int { return byIndex(x.Address.Name, y.Address.Name) })
		for i := 1; i < len(list); i++ {
			gate := b.find(d.Cluster, GateAddress(list[i-1].Address.Name), ActionCheck)
			if gate == nil {
				continue
			}
			first := b.find(d.Cluster, DrainAddress(list[i].Address.Name), ActionDrain)
			if first == nil {
				first = list[i]
			}
			first.deps = append(first.deps, gate.key)
		}
	}
}

// drains adds, before the deletion of a worker that ran a kubelet, its
// drain: cordon, then evict its pods. The drain takes the deletion's
// place in the rolling chain (the next worker drains once the one before
// is gone), and a load balancer member of the server goes after the
// drain and before the server.
//
// After the deletion of a server that ran a kubelet comes the deletion of
// its Node object, which Kubernetes keeps (NotReady) when the machine is
// gone unless a cloud controller manager removes it; as Cluster API does,
// once the server is gone, so that its kubelet cannot register it again.
// A node whose server went before its Node object did (a failed step,
// a server deleted by hand) is the ledger's to remember: its version
// stays until the Node object is deleted.
func (b *builder) drains(d *Desired, o *Observed, deletes []*pending) {
	if o.Applied == nil {
		return
	}
	deleted := map[string]bool{}
	for _, p := range deletes {
		name := p.Address.Name
		if p.Address.Kind != KindServer || o.Applied.Versions[name] == "" || schemas.RoleOf(d.Cluster, name) == schemas.RoleGateway {
			continue
		}
		deleted[name] = true
		b.deleteNode(d.Cluster, o, name, "delete the Node object of the deleted server", p)
		if schemas.RoleOf(d.Cluster, name) == schemas.RoleController {
			continue
		}
		drain := b.drainBefore(d.Cluster, name, p, nil, "cordon the node and evict its pods before its server is deleted")
		if m := b.find(d.Cluster, ResourceAddress(KindMember, name), ActionDelete); m != nil {
			m.deps = append(m.deps, drain.key)
			p.deps = append(p.deps, m.key)
		}
	}
	desired := map[string]bool{}
	for _, h := range d.Hosts {
		desired[h.Name] = true
	}
	servers := map[string]bool{}
	for _, r := range o.Cloud {
		if r.Kind == KindServer {
			servers[r.Name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(o.Applied.Versions)) {
		if !desired[name] && !servers[name] && !deleted[name] && schemas.RoleOf(d.Cluster, name) != schemas.RoleGateway {
			b.deleteNode(d.Cluster, o, name, "its server is gone and its Node object is left", nil)
		}
	}
}

// deleteNode adds the deletion of a host's Node object (the ledger's
// version of it before), after the step of its server, if any, and drift
// as that step is.
func (b *builder) deleteNode(cluster string, o *Observed, name, reason string, server *pending) *pending {
	p := b.add(&pending{Change: Change{Cluster: cluster, Phase: PhaseInfrastructure, Address: NodeAddress(name), Action: ActionDelete,
		Before: Attrs{"version": Known(o.Applied.Versions[name])}, Reason: reason}})
	if server != nil {
		p.deps, p.drift = append(p.deps, server.key), server.drift
	}
	return p
}

// drainBefore adds a worker's drain before the step of its server, in
// that step's place in its chain: the drain waits for what the step
// waited for, the step for the drain.
func (b *builder) drainBefore(cluster, name string, server *pending, after Attrs, reason string) *pending {
	drain := b.add(&pending{Change: Change{Cluster: cluster, Phase: PhaseInfrastructure, Address: DrainAddress(name), Action: ActionDrain,
		After: after, Reason: reason}, drift: server.drift})
	drain.deps, server.deps = server.deps, []string{drain.key}
	return drain
}

// orNone prints an absent value.
func orNone(v Value) string {
	if v == (Value{}) {
		return "(none)"
	}
	return v.String()
}

// changedAttrs are the attributes, sorted, whose desired value is known
// and differs from what the cloud has.
func changedAttrs(want, got Resource) []string {
	var out []string
	for k, v := range want.Attrs {
		if !v.Unknown && got.Attrs[k] != v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// byIndex orders server names of one pool by their index.
func byIndex(a, b string) int {
	_, i := index(a)
	_, j := index(b)
	return cmp.Compare(i, j)
}

// index splits a server name <cluster>-<pool>-<index>.
func index(name string) (string, int) {
	i := strings.LastIndex(name, "-")
	n, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil {
		return name, -1
	}
	return name[:i], n
}

// rolling chains the servers' changes of one action pool by pool, one at a
// time (surge 1): by index, or highest index first.
func rolling(ps []*pending, a Action, highestFirst bool) {
	pools := map[string][]*pending{}
	for _, p := range ps {
		if p.Action == a && p.Address.Kind == KindServer {
			pool, _ := index(p.Address.Name)
			pools[pool] = append(pools[pool], p)
		}
	}
	for _, list := range pools {
		slices.SortFunc(list, func(x, y *pending) int {
			if highestFirst {
				return byIndex(y.Address.Name, x.Address.Name)
			}
			return byIndex(x.Address.Name, y.Address.Name)
		})
		for i := 1; i < len(list); i++ {
			list[i].deps = append(list[i].deps, list[i-1].key)
		}
	}
}

// deleteAll plans the deletion of resources: each after the deletions of
// the resources that name it and of those that hold it (its kind's
// schema).
func (b *builder) deleteAll(cluster string, rs []Resource, reason string) []*pending {
	var out []*pending
	for _, r := range rs {
		out = append(out, b.add(&pending{Change: Change{Cluster: cluster, Phase: PhaseInfrastructure, Address: r.Address(),
			Action: ActionDelete, Before: r.Attrs, Reason: reason}}))
	}
	for _, r := range rs {
		p := b.find(cluster, r.Address(), ActionDelete)
		for _, target := range referenced(r) {
			if q := b.find(cluster, target, ActionDelete); q != nil && q != p {
				q.deps = append(q.deps, p.key)
			}
		}
		for _, s := range rs {
			if holds(r.Kind, s.Kind) {
				q := b.find(cluster, s.Address(), ActionDelete)
				q.deps = append(q.deps, p.key)
			}
		}
	}
	return out
}

// hostChanges are one host's changes in a plan.
type hostChanges struct {
	host     Host
	uploads  []*pending
	restarts []*pending
	gate     *pending // nil for a new host
	// drain and uncordon bracket the restarts of a node whose kubelet
	// goes to a new minor (nil otherwise), as kubeadm's upgrade does.
	drain, uncordon *pending
}

// end is the host's last step, which the next batch waits for.
func (hc *hostChanges) end() *pending {
	if hc.uncordon != nil {
		return hc.uncordon
	}
	return hc.gate
}

// hosts plans the host phase of a cluster: uploads where the file differs
// from what was applied (or, after a resync, from what the host has), and
// restarts of the units whose files changed.
//
// New hosts restart one after another (a controller that joins the etcd
// that runs is then gated, see members). Hosts that already run (the ledger
// has their version) roll: controllers one at a time, then workers in
// batches of MaxUnavailable, then the gateway; each host's restarts are
// followed by its health gate, and the next batch's uploads wait for the
// gates of the one before, so a gate that fails leaves the hosts after it
// untouched. An etcd snapshot comes before the first controller's files.
func (b *builder) hosts(d *Desired, o *Observed, joins []Join) {
	var appliedFiles map[string]map[string]string
	var versions map[string]string
	if o.Applied != nil {
		appliedFiles, versions = o.Applied.Files, o.Applied.Versions
	}
	apiFIP := b.find(d.Cluster, ResourceAddress(KindFloatingIP, d.Cluster+"-api"), ActionCreate, ActionReplace)
	var fresh, rolling []*hostChanges
	for _, h := range d.Hosts {
		server := b.find(d.Cluster, ResourceAddress(KindServer, h.Name), ActionCreate, ActionReplace)
		applied, actual := appliedFiles[h.Name], o.HostFiles[h.Name]
		var note string
		if v := versions[h.Name]; v != "" && v != h.Version {
			note = fmt.Sprintf(" (%s → %s)", v, h.Version)
		}
		hc := &hostChanges{host: h}
		units := map[string][]*pending{}
		for _, f := range h.Files {
			had := applied[f.Path]
			p := &pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: FileAddress(h.Name, f.Path), Action: ActionUpload}}
			onHost, checked := actual[f.Path]
			switch {
			case server != nil:
				p.Reason = "new host"
				if server.Action == ActionReplace {
					p.Reason = "replaced host"
				}
				p.drift, had = server.drift, "" // a host recreated to correct drift is drift too
			case checked && had != "" && onHost != had:
				p.drift, p.Reason = true, "changed on the host since the last apply"
				if onHost == "" {
					p.Reason = "missing on the host"
				}
				had = onHost
			case actual != nil && !checked && had != "":
				p.drift, p.Reason, had = true, "missing on the host", ""
			case f.Unknown:
				p.Reason = "carries keys or certificates issued at apply"
				if f.NeedsAPIFloatingIP {
					p.Reason = "carries the API's floating IP"
				}
			case had != f.SHA256:
				p.Reason = "content changed" + note
				if had == "" {
					p.Reason = "new file"
				}
			default:
				continue
			}
			p.Before, p.After = fileAttrs(had, f, false), fileAttrs(f.SHA256, f, f.Unknown)
			if had == "" {
				p.Before = nil
			}
			p = b.add(p)
			if server != nil {
				p.deps = append(p.deps, server.key)
				// A host made again starts once its old Node object is
				// gone (renewedNodes): a deletion after its kubelet
				// registered would take the new node's pods, and the
				// ledger's records of the host with it.
				if node := b.find(d.Cluster, NodeAddress(h.Name), ActionDelete); node != nil {
					p.deps = append(p.deps, node.key)
				}
			}
			if f.NeedsAPIFloatingIP && apiFIP != nil {
				p.deps = append(p.deps, apiFIP.key)
			}
			hc.uploads = append(hc.uploads, p)
			for _, u := range f.Restart {
				units[u] = append(units[u], p)
			}
		}
		for _, u := range slices.Sorted(maps.Keys(units)) {
			p := &pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: UnitAddress(h.Name, u), Action: ActionRestart,
				Reason: fmt.Sprintf("%d file(s) changed%s", len(units[u]), note)}}
			p.drift = true
			for _, up := range units[u] {
				p.drift = p.drift && up.drift
			}
			p = b.add(p)
			// A unit restarts once every file of the host is in place: a
			// kubelet restarted before its static pods' manifests would
			// start the old ones.
			for _, up := range hc.uploads {
				p.deps = append(p.deps, up.key)
			}
			// One unit at a time, containerd first (units sort by name):
			// the kubelet's and etcd's units pull through containerd, and
			// a restart of it under theirs fails them.
			if n := len(hc.restarts); n > 0 {
				p.deps = append(p.deps, hc.restarts[n-1].key)
			}
			hc.restarts = append(hc.restarts, p)
		}
		runs := server == nil && versions[h.Name] != ""
		switch {
		case !runs:
			switch {
			case slices.ContainsFunc(joins, func(j Join) bool { return j.Host == h.Name }):
				// A member that joins the etcd that runs is gated healthy
				// before the next membership change.
				hc.gate = b.gate(d.Cluster, hc, note, false)
			case server != nil && server.Action == ActionReplace && h.Role == schemas.RoleWorker:
				// A worker made again (remediated, or its flavor
				// changed) is gated Ready: the plan ends with it back.
				hc.gate = b.gate(d.Cluster, hc, note, false)
			}
			fresh = append(fresh, hc)
		case len(hc.restarts) > 0 || restartsPods(hc) || versions[h.Name] != h.Version && h.Role != schemas.RoleGateway:
			// A host that runs gets a gate when it restarts (a static
			// pod's manifest changed restarts the pod: the kubelet
			// watches them), and a node when it does not run the desired
			// version yet (its gate failed). The gateway runs no
			// Kubernetes.
			hc.gate = b.gate(d.Cluster, hc, note, true)
			if h.Role != schemas.RoleGateway && minorChanges(versions[h.Name], h.Version) {
				b.drainForUpgrade(d.Cluster, hc)
			}
			rolling = append(rolling, hc)
		}
	}
	// New hosts: one host restarts at a time, controllers first.
	var prev []*pending
	for _, hc := range fresh {
		if len(hc.restarts) == 0 {
			continue
		}
		for _, p := range hc.restarts {
			for _, q := range prev {
				p.deps = append(p.deps, q.key)
			}
		}
		prev = hc.restarts
	}
	b.roll(d, rolling)
}

// restartsPods reports whether a host's uploads change a static pod's
// manifest, which the kubelet restarts the pod for.
func restartsPods(hc *hostChanges) bool {
	return slices.ContainsFunc(hc.uploads, func(p *pending) bool {
		return strings.HasPrefix(p.Address.Name, assets.PathManifests+"/")
	})
}

// gate adds a host's health gate after its restarts.
func (b *builder) gate(cluster string, hc *hostChanges, note string, running bool) *pending {
	h := hc.host
	what := "restarted units active"
	// A controller of a cluster that runs is gated on its Node too: the
	// cluster's network is there (not yet for a new cluster's).
	node := running && h.Role == schemas.RoleController
	switch {
	case node:
		what = "kubelet active, every etcd member healthy, API /readyz and /version " + h.Version + ", node Ready"
	case h.Role == schemas.RoleController:
		what = "kubelet active, every etcd member healthy, API /readyz and /version " + h.Version
	case h.Role == schemas.RoleWorker:
		what = "kubelet active, node Ready"
	}
	// The units that must be active: those restarted, and a node's kubelet.
	var units []string
	for _, r := range hc.restarts {
		units = append(units, r.Address.Name)
	}
	if h.Role != schemas.RoleGateway && !slices.Contains(units, "kubelet.service") {
		units = append(units, "kubelet.service")
	}
	slices.Sort(units)
	p := &pending{Change: Change{Cluster: cluster, Phase: PhaseHosts, Address: GateAddress(h.Name), Action: ActionCheck,
		After: Attrs{"version": Known(h.Version), "role": Known(string(h.Role)), "units": Known(strings.Join(units, ","))}, Reason: what + note}}
	if node {
		p.After["node"] = Known("Ready")
	}
	p.drift = len(hc.restarts) > 0
	for _, r := range hc.restarts {
		p.drift = p.drift && r.drift
	}
	p = b.add(p)
	for _, q := range slices.Concat(hc.uploads, hc.restarts) {
		p.deps = append(p.deps, q.key)
	}
	return p
}

// roll orders the changes of hosts that run into batches: each
// controller alone, then workers by MaxUnavailable, then the gateway. A
// batch's changes wait for the gates of the batch before it.
func (b *builder) roll(d *Desired, hosts []*hostChanges) {
	var batches [][]*hostChanges
	var workers []*hostChanges
	var gateway []*hostChanges
	for _, hc := range hosts {
		switch hc.host.Role {
		case schemas.RoleController:
			batches = append(batches, []*hostChanges{hc})
		case schemas.RoleGateway:
			gateway = append(gateway, hc)
		default:
			workers = append(workers, hc)
		}
	}
	for size := max(d.MaxUnavailable, 1); len(workers) > 0; workers = workers[min(size, len(workers)):] {
		batches = append(batches, workers[:min(size, len(workers))])
	}
	if len(gateway) > 0 {
		batches = append(batches, gateway)
	}
	var snapshot *pending
	for _, hc := range hosts {
		if hc.host.Role == schemas.RoleController && slices.ContainsFunc(hc.restarts, func(p *pending) bool { return !p.drift }) {
			snapshot = b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: SnapshotAddress(d.Cluster),
				Action: ActionBackup, Reason: "etcd snapshot before the first control-plane restart, to restore if the rollout must be undone"}})
			break
		}
	}
	for i, batch := range batches {
		var before []string
		if i > 0 {
			for _, hc := range batches[i-1] {
				before = append(before, hc.end().key)
			}
		} else if snapshot != nil { // batch 0 is the first controller's
			before = append(before, snapshot.key)
		}
		for _, hc := range batch {
			for _, p := range slices.Concat(hc.uploads, hc.restarts, []*pending{hc.gate}) {
				p.deps = append(p.deps, before...)
			}
			if hc.drain != nil {
				hc.drain.deps = append(hc.drain.deps, before...)
			}
		}
	}
}

// minorChanges reports whether a host that ran from (the ledger's version)
// goes to another minor with to.
func minorChanges(from, to string) bool {
	f, err1 := schemas.ParseVersion(from)
	t, err2 := schemas.ParseVersion(to)
	return err1 == nil && err2 == nil && (f.Major != t.Major || f.Minor != t.Minor)
}

// drainForUpgrade brackets the restarts of a node whose kubelet goes to a
// new minor with a drain and an uncordon, as kubeadm's upgrade drains a
// node before its kubelet's: the drain, then the files (a controller's
// static pods move on as they land), the restarts, the gate, and the
// uncordon once the node is healthy.
func (b *builder) drainForUpgrade(cluster string, hc *hostChanges) {
	h := hc.host
	if len(hc.restarts) == 0 || !slices.ContainsFunc(hc.restarts, func(p *pending) bool { return p.Address.Name == "kubelet.service" }) {
		return
	}
	drain := b.add(&pending{Change: Change{Cluster: cluster, Phase: PhaseInfrastructure, Address: DrainAddress(h.Name), Action: ActionDrain,
		Reason: "cordon the node and evict its pods before its kubelet's minor upgrade (" + h.Version + ")"}, drift: hc.gate.drift})
	// Before the files: a controller's new static pods restart its API
	// server as they land, and a one-controller cluster's drain goes
	// through that API server.
	for _, p := range slices.Concat(hc.uploads, hc.restarts) {
		p.deps = append(p.deps, drain.key)
	}
	uncordon := b.add(&pending{Change: Change{Cluster: cluster, Phase: PhaseInfrastructure, Address: NodeAddress(h.Name), Action: ActionUpdate,
		Before: Attrs{"unschedulable": Known("true")}, After: Attrs{"unschedulable": Known("false")},
		Reason: "uncordon the node, healthy on its new minor"}, drift: hc.gate.drift, deps: []string{hc.gate.key}})
	hc.drain, hc.uncordon = drain, uncordon
}

// manifests plans the applies of the manifests that differ from what was
// applied, in their names' order, each after every change of the
// controllers (their files, restarts and gates): the objects go to an API
// that runs the desired version, as kubeadm upgrades its addons after the
// control plane. A manifest that is no longer desired is deleted after
// them: its objects no desired manifest holds go.
func (b *builder) manifests(d *Desired, o *Observed) {
	var applied map[string]string
	if o.Applied != nil {
		applied = o.Applied.Manifests
	}
	// A manifest goes through a controller's API server, after every
	// step of the controllers; and its workloads, which the apply waits
	// for, need the nodes: after every kubelet (re)started in the plan,
	// and every node a minor upgrade drained uncordoned again.
	var controllers []string
	for _, p := range b.list {
		if p.Cluster == d.Cluster && p.Address.Target == TargetNode && p.Action == ActionUpdate {
			controllers = append(controllers, p.key)
			continue
		}
		if p.Cluster != d.Cluster || p.Phase != PhaseHosts || !p.Address.OnHost() {
			continue
		}
		if b.isController(d, p.Address.Host) || p.Address.Target == TargetUnit && p.Address.Name == "kubelet.service" {
			controllers = append(controllers, p.key)
		}
	}
	var prev *pending
	desired := map[string]bool{}
	for _, m := range d.Manifests {
		desired[m.Name] = true
		had := applied[m.Name]
		drifted := o.ObjectDrift[m.Name]
		if had == m.SHA256 && !m.Unknown && len(drifted) == 0 {
			continue
		}
		p := &pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: ManifestAddress(d.Cluster, m.Name), Action: ActionApply,
			After: Attrs{"sha256": Known(m.SHA256)}, Reason: "content changed"}}
		switch {
		case had == "":
			p.Reason = "new manifest"
		case m.Unknown:
			p.Reason = "carries keys or certificates issued at apply"
		case had == m.SHA256:
			// Applied as it is, and some of its objects deleted or changed
			// since: drift, corrected by applying it again.
			p.drift, p.Reason = true, "changed outside OPKE since the last apply: "+strings.Join(drifted, "; ")
		case len(m.Objects) > 0:
			p.Reason = "content changed: " + strings.Join(m.Objects, ", ")
		}
		if m.Unknown {
			p.After["sha256"] = Value{Unknown: true}
		}
		if had != "" {
			p.Before = Attrs{"sha256": Known(had)}
		}
		p = b.add(p)
		p.deps = append(p.deps, controllers...)
		if prev != nil {
			p.deps = append(p.deps, prev.key)
		}
		prev = p
	}
	// A manifest no longer rendered (its addon left the spec) has its
	// objects deleted, after every apply: an object it shares with a
	// desired manifest (one renamed) stays.
	for _, name := range slices.Sorted(maps.Keys(applied)) {
		if desired[name] {
			continue
		}
		p := b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: ManifestAddress(d.Cluster, name), Action: ActionDelete,
			Before: Attrs{"sha256": Known(applied[name])}, Reason: "no longer rendered: its addon left the spec"}})
		p.deps = append(p.deps, controllers...)
		if prev != nil {
			p.deps = append(p.deps, prev.key)
		}
		prev = p
	}
}

// isController reports whether host is one of d's controllers.
func (b *builder) isController(d *Desired, host string) bool {
	for _, h := range d.Hosts {
		if h.Name == host {
			return h.Role == schemas.RoleController
		}
	}
	return false
}

// stateChanges plans what only the store keeps, and a scheduled backup.
func (b *builder) stateChanges(d *Desired, o *Observed) {
	// The deletion policy lives in the state store only (the applied
	// spec): changing it is a change of its own, or removing the file
	// after a plan with nothing else would still go by the old one.
	if o.Applied != nil && o.Applied.DeletionPolicy != "" && o.Applied.DeletionPolicy != d.DeletionPolicy {
		b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: StateAddress(d.Cluster), Action: ActionUpdate,
			Before: Attrs{"deletion_policy": Known(o.Applied.DeletionPolicy)}, After: Attrs{"deletion_policy": Known(d.DeletionPolicy)},
			Reason: "deletionPolicy changed"}})
	}
	// A snapshot before a rollout stands in for a scheduled one due now;
	// the scheduled one comes with the next plan.
	if d.BackupDue && b.find(d.Cluster, SnapshotAddress(d.Cluster), ActionBackup) == nil {
		b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseHosts, Address: BackupAddress(d.Cluster), Action: ActionBackup,
			Reason: "a scheduled etcd snapshot is due"}})
	}
}

func fileAttrs(sum string, f File, unknown bool) Attrs {
	a := Attrs{"sha256": Known(sum), "mode": Known(f.Mode)}
	switch {
	case unknown:
		a["sha256"] = Value{Unknown: true}
	case f.Secret:
		a["sha256"] = Value{Sensitive: true}
	}
	return a
}

// removed plans a cluster whose file left the fleet, per its last applied
// deletion policy: Delete destroys every tagged resource; Retain (and a
// cluster this store never applied) keeps them and forgets the cluster.
func (b *builder) removed(o *Observed) {
	policy := ""
	if o.Applied != nil {
		policy = o.Applied.DeletionPolicy
	}
	if policy != "Delete" {
		b.warnings = append(b.warnings, Warning{Cluster: o.Cluster, Message: fmt.Sprintf(
			"no longer in the fleet; deletionPolicy %s keeps its %d OpenStack resources: OPKE forgets the cluster and adopts it again by its tags if its file returns",
			cmp.Or(policy, "Retain"), len(o.Cloud))})
		if o.Applied != nil {
			b.add(&pending{Change: Change{Cluster: o.Cluster, Phase: PhaseHosts, Address: StateAddress(o.Cluster), Action: ActionForget,
				Reason: "no longer in the fleet (deletionPolicy Retain)"}})
		}
		return
	}
	deletes := b.deleteAll(o.Cluster, slices.Concat(o.Cloud, o.Services, o.Volumes), "no longer in the fleet (deletionPolicy Delete)")
	forget := b.add(&pending{Change: Change{Cluster: o.Cluster, Phase: PhaseHosts, Address: StateAddress(o.Cluster), Action: ActionForget,
		Reason: "its resources are deleted"}})
	for _, p := range deletes {
		forget.deps = append(forget.deps, p.key)
	}
}

// plan gives every change its id, turns keys into ids, and sorts.
func (b *builder) plan() *Plan {
	ids := map[string]string{}
	for _, p := range b.list {
		sum := sha256.Sum256([]byte(p.key))
		p.ID = "c" + hex.EncodeToString(sum[:5])
		ids[p.key] = p.ID
	}
	plan := &Plan{FormatVersion: FormatVersion, Changes: []Change{}, Drift: []Change{}, Warnings: b.warnings}
	for _, p := range b.list {
		p.DependsOn = []string{}
		for _, k := range p.deps {
			if id := ids[k]; !slices.Contains(p.DependsOn, id) {
				p.DependsOn = append(p.DependsOn, id)
			}
		}
		slices.Sort(p.DependsOn)
		if len(p.Before) == 0 {
			p.Before = nil
		}
		if len(p.After) == 0 {
			p.After = nil
		}
		if p.drift {
			plan.Drift = append(plan.Drift, p.Change)
		} else {
			plan.Changes = append(plan.Changes, p.Change)
		}
	}
	order := func(x, y Change) int {
		return cmp.Or(cmp.Compare(x.Cluster, y.Cluster), cmp.Compare(phaseRank(x.Phase), phaseRank(y.Phase)),
			x.Address.Compare(y.Address), cmp.Compare(x.Action, y.Action))
	}
	slices.SortFunc(plan.Changes, order)
	slices.SortFunc(plan.Drift, order)
	slices.SortFunc(plan.Warnings, func(x, y Warning) int { return cmp.Compare(x.Cluster, y.Cluster) })
	return plan
}

func phaseRank(p Phase) int {
	if p == PhaseInfrastructure {
		return 0
	}
	return 1
}

package schemas

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Effect is what changing a field of a live cluster does. The plan follows
// the same table; validation refuses the changes marked as refused.
type Effect string

// The effects, one per row of the field-change table in the README.
const (
	// EffectUpgrade rolls a Kubernetes upgrade: files and restarts only.
	EffectUpgrade Effect = "rolling-upgrade"
	// EffectScale adds or removes workers, highest index first.
	EffectScale Effect = "scale"
	// EffectReplace replaces servers one by one (surge 1).
	EffectReplace Effect = "rolling-replace"
	// EffectHostFiles pushes files over SSH; no server changes.
	EffectHostFiles Effect = "host-files"
	// EffectManifests applies manifests to the cluster.
	EffectManifests Effect = "manifests"
	// EffectConfig changes only how OPKE acts on the cluster.
	EffectConfig Effect = "config"
	// EffectNewServersOnly applies to servers created from now on.
	EffectNewServersOnly Effect = "new-servers-only"
	// EffectSubnetUpdate updates the hosts' subnet in place.
	EffectSubnetUpdate Effect = "subnet-update"
	// EffectImmutable is refused: the field cannot change on a live cluster.
	EffectImmutable Effect = "refused-immutable"
	// EffectUnsupported is refused: OPKE cannot make the change yet.
	EffectUnsupported Effect = "refused-unsupported"
)

// Refused reports whether a change with this effect is refused.
func (e Effect) Refused() bool { return e == EffectImmutable || e == EffectUnsupported }

// FieldChange is one field that differs between two specs of a cluster.
type FieldChange struct {
	Path   Path
	Effect Effect
	// Note explains the effect to people.
	Note string
}

// Compare lists what differs from old to new and what each difference does.
// Both must be defaulted specs of the same cluster.
func Compare(old, new *Cluster) []FieldChange {
	var out []FieldChange
	o, n := &old.Spec, &new.Spec
	spec := Path{"spec"}
	diff := func(p Path, a, b any, e Effect, note string) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, FieldChange{Path: p, Effect: e, Note: note})
		}
	}
	net := spec.Field("network")
	diff(spec.Field("cloud"), o.Cloud, n.Cloud, EffectImmutable, "a cluster cannot move to another cloud")
	diff(spec.Field("region"), o.Region, n.Region, EffectImmutable, "a cluster cannot move to another region")
	for _, f := range []struct {
		name string
		a, b string
	}{
		{"hostCIDR", o.Network.HostCIDR, n.Network.HostCIDR},
		{"podCIDR", o.Network.PodCIDR, n.Network.PodCIDR},
		{"serviceCIDR", o.Network.ServiceCIDR, n.Network.ServiceCIDR},
		{"externalNetwork", o.Network.ExternalNetwork, n.Network.ExternalNetwork},
		{"cni", o.Network.CNI, n.Network.CNI},
	} {
		diff(net.Field(f.name), f.a, f.b, EffectImmutable, "the network of a live cluster is fixed; create a new cluster instead")
	}
	diff(spec.Field("kubernetes").Field("version"), o.Kubernetes.Version, n.Kubernetes.Version, EffectUpgrade,
		"new versioned files are pushed and units restarted, controllers first; no server is recreated")
	ctl := spec.Field("controllers")
	if o.Controllers.Count != n.Controllers.Count {
		note := fmt.Sprintf("%d controllers join etcd one at a time (a learner first, promoted once caught up, then gated)", n.Controllers.Count-o.Controllers.Count)
		if n.Controllers.Count < o.Controllers.Count {
			note = fmt.Sprintf("%d controllers leave etcd's membership one at a time, highest index first, then their servers are deleted", o.Controllers.Count-n.Controllers.Count)
		}
		out = append(out, FieldChange{Path: ctl.Field("count"), Effect: EffectScale, Note: note})
	}
	// The controllers' servers are replaced through etcd's membership,
	// one member at a time: only with a quorum to spare, and not while
	// the membership changes for the count.
	rollControllers := func(p Path, what string) {
		e, note := EffectReplace, what
		switch {
		case o.Controllers.Count < 3 || n.Controllers.Count < 3:
			e, note = EffectUnsupported, "a single controller's server cannot be replaced without losing etcd's data: "+
				"raise controllers.count to 3 first (a commit of its own), make this change, then lower the count again"
		case o.Controllers.Count != n.Controllers.Count:
			e, note = EffectUnsupported, "change controllers.count and this in separate commits: one etcd membership change at a time"
		}
		diff(p, true, false, e, note)
	}
	if o.Controllers.Flavor != n.Controllers.Flavor {
		rollControllers(ctl.Field("flavor"), "controllers are replaced one at a time: each leaves etcd's membership (every other member answering), "+
			"its server is made again, it joins as a learner, is promoted and gated healthy before the next leaves; an etcd snapshot first")
	}
	diff(ctl.Field("availabilityZones"), o.Controllers.AvailabilityZones, n.Controllers.AvailabilityZones, EffectNewServersOnly,
		"existing controllers stay where they are")
	if o.Image != n.Image {
		rollControllers(spec.Field("image"), "every server is replaced, one at a time in each pool: workers drained and gated Ready before the next, "+
			"controllers through etcd's membership as for controllers.flavor, then the gateway")
	}
	diff(spec.Field("sshKeyName"), o.SSHKeyName, n.SSHKeyName, EffectNewServersOnly,
		"Nova puts the keypair on servers created from now on")
	diff(spec.Field("sshAuthorizedKeys"), o.SSHAuthorizedKeys, n.SSHAuthorizedKeys, EffectHostFiles,
		"authorized keys are pushed to every host over SSH")
	diff(net.Field("dnsNameservers"), o.Network.DNSNameservers, n.Network.DNSNameservers, EffectSubnetUpdate,
		"the subnet is updated in place; hosts pick the resolvers up on DHCP renewal")
	diff(spec.Field("gateway").Field("flavor"), o.Gateway.Flavor, n.Gateway.Flavor, EffectReplace,
		"the gateway holds no state and is replaced")
	diff(spec.Field("addons"), o.Addons, n.Addons, EffectManifests, "addon manifests are applied or removed")
	npNote := "the NetworkPolicy agent's manifest is applied"
	if o.Network.NetworkPolicy == NetworkPolicyKubeRouter {
		npNote = "kube-router's objects are deleted; the iptables rules it wrote stay on the hosts (it does not remove them as it stops): delete the cluster's NetworkPolicy objects first, while it runs, or reboot the hosts after"
	}
	diff(net.Field("networkPolicy"), o.Network.NetworkPolicy, n.Network.NetworkPolicy, EffectManifests, npNote)
	diff(spec.Field("upgrade"), o.Upgrade, n.Upgrade, EffectConfig, "used by the next rollout")
	diff(spec.Field("backup"), o.Backup, n.Backup, EffectConfig, "the backup schedule changes")
	diff(spec.Field("remediation"), o.Remediation, n.Remediation, EffectConfig, "unhealthy workers are replaced, or left, from the next drift check")
	og, op := o.CAGeneration()
	if ng, np := n.CAGeneration(); og != ng || op != np {
		out = append(out, FieldChange{Path: spec.Field("pki"), Effect: EffectUpgrade, Note: rotationNote(ng, np)})
	}
	diff(spec.Field("paused"), o.Paused, n.Paused, EffectConfig, "pausing stops every change, drift correction included")
	diff(spec.Field("driftCorrection"), o.DriftCorrectionEnabled(), n.DriftCorrectionEnabled(), EffectConfig, "drift is corrected, or only reported")
	diff(spec.Field("deletionPolicy"), o.DeletionPolicy, n.DeletionPolicy, EffectConfig, "takes effect once applied")
	out = append(out, comparePools(o.WorkerPools, n.WorkerPools)...)
	return out
}

func comparePools(old, new []WorkerPool) []FieldChange {
	var out []FieldChange
	pools := Path{"spec", "workerPools"}
	for i, np := range new {
		p := pools.Index(i)
		j := slices.IndexFunc(old, func(op WorkerPool) bool { return op.Name == np.Name })
		if j < 0 {
			if np.Count > 0 {
				out = append(out, FieldChange{Path: p, Effect: EffectScale, Note: fmt.Sprintf("new pool %q: %d workers are created", np.Name, np.Count)})
			}
			continue
		}
		op := old[j]
		if op.Count != np.Count {
			note := fmt.Sprintf("%d workers are created", np.Count-op.Count)
			if np.Count < op.Count {
				note = fmt.Sprintf("%d workers are drained and deleted, highest index first", op.Count-np.Count)
			}
			out = append(out, FieldChange{Path: p.Field("count"), Effect: EffectScale, Note: note})
		}
		if op.Flavor != np.Flavor {
			out = append(out, FieldChange{Path: p.Field("flavor"), Effect: EffectReplace, Note: "the pool's workers are replaced one at a time"})
		}
		if !reflect.DeepEqual(op.Labels, np.Labels) {
			out = append(out, FieldChange{Path: p.Field("labels"), Effect: EffectHostFiles, Note: "node labels are updated"})
		}
		if !slices.Equal(op.AvailabilityZones, np.AvailabilityZones) {
			out = append(out, FieldChange{Path: p.Field("availabilityZones"), Effect: EffectNewServersOnly, Note: "existing workers stay where they are"})
		}
	}
	for _, op := range old {
		if !slices.ContainsFunc(new, func(np WorkerPool) bool { return np.Name == op.Name }) && op.Count > 0 {
			out = append(out, FieldChange{Path: pools, Effect: EffectScale,
				Note: fmt.Sprintf("pool %q is removed: its %d workers are drained and deleted", op.Name, op.Count)})
		}
	}
	return out
}

// TransitionFacts is what OPKE observed of a cluster that the rules need.
type TransitionFacts struct {
	// NewestControllerVersion is the newest version any controller runs
	// (zero: none recorded).
	NewestControllerVersion Version
	// Snapshot is the etcd snapshot taken before the last rollout, the
	// one to restore instead of a refused downgrade ("" if none).
	Snapshot string
}

// CheckTransition applies the transition rules to a change from old (the
// last applied spec) to new. facts may be nil, as for `opke validate
// --base`: then old is taken as fully applied.
func CheckTransition(old, new *Cluster, facts *TransitionFacts) []Problem {
	var out []Problem
	for _, c := range Compare(old, new) {
		switch c.Effect {
		case EffectImmutable:
			out = append(out, Problem{Path: c.Path, Message: "immutable: " + c.Note})
		case EffectUnsupported:
			out = append(out, Problem{Path: c.Path, Message: "refused: " + c.Note})
		}
	}
	if p := checkRotationStep(&old.Spec, &new.Spec); p != "" {
		out = append(out, Problem{Path: Path{"spec", "pki"}, Message: p})
	}
	if p := checkVersionStep(new.Metadata.Name, old.Spec.Kubernetes.Version, new.Spec.Kubernetes.Version, facts); p != "" {
		out = append(out, Problem{Path: Path{"spec", "kubernetes", "version"}, Message: p})
	}
	return out
}

// checkVersionStep refuses a major change, a skipped minor, and a minor
// below what a controller runs: a rollout halted after its first
// controller cannot be reverted by a commit (etcd's data may already be
// the new minor's), even to the spec last applied.
func checkVersionStep(cluster, oldS, newS string, facts *TransitionFacts) string {
	from, err1 := ParseVersion(oldS)
	to, err2 := ParseVersion(newS)
	if err1 != nil || err2 != nil {
		return ""
	}
	running := from
	if facts != nil && facts.NewestControllerVersion != (Version{}) {
		running = facts.NewestControllerVersion
	}
	if to.Major == running.Major && to.Minor < running.Minor {
		hint := "restore the etcd snapshot taken before the upgrade instead"
		if facts != nil && facts.Snapshot != "" {
			hint = fmt.Sprintf("%s: opke restore --cluster %s --snapshot %s --to DIR", hint, cluster, facts.Snapshot)
		}
		if from == to {
			return fmt.Sprintf("%s is a minor below v%s, which a controller runs since a rollout halted; %s", to, running.MinorString(), hint)
		}
		return fmt.Sprintf("%s -> %s is a minor downgrade and a controller runs v%s; %s", from, to, running.MinorString(), hint)
	}
	if from == to {
		return ""
	}
	switch {
	case from.Major != to.Major:
		return fmt.Sprintf("%s -> %s changes the major version, which is not supported", from, to)
	case minorsBetween(from, to) > 1:
		return fmt.Sprintf("%s -> %s skips a minor; upgrade one minor at a time (next: v%d.%d)", from, to, from.Major, from.Minor+1)
	}
	return ""
}

// rotationNote says what a CA rotation's phase does to the hosts.
func rotationNote(g int, p RotationPhase) string {
	switch p {
	case RotationTrust:
		return fmt.Sprintf("CA generation %d is created and trusted beside %d, which still signs: every host gets the CA bundles and restarts, controllers first; then every Deployment, DaemonSet and StatefulSet restarts", g, g-1)
	case RotationReissue:
		return fmt.Sprintf("CA generation %d signs: every certificate is issued again and rolled, tokens are signed with the new service account key; then every Deployment, DaemonSet and StatefulSet restarts", g)
	}
	return fmt.Sprintf("only CA generation %d is trusted: the bundles drop the others, which are deleted; rolled to every host", g)
}

// checkRotationStep refuses a CA rotation that skips a phase: from the
// applied generation N (complete) the next commit may only start the
// rotation to N+1 (trust); trust goes on to reissue or back to N (abort,
// nothing was signed by N+1 yet); reissue goes on to complete or back
// to trust. Each phase must have rolled to every host before the next:
// a host that does not trust a CA yet refuses what it signs.
func checkRotationStep(o, n *Spec) string {
	og, op := o.CAGeneration()
	ng, np := n.CAGeneration()
	if og == ng && op == np {
		return ""
	}
	next := nextRotations(og, op)
	var names []string
	for _, r := range next {
		if r.generation == ng && r.phase == np {
			return ""
		}
		names = append(names, r.String())
	}
	return fmt.Sprintf("a CA rotation goes one phase per commit, each rolled before the next: from generation %d (%s) the next step is %s, not generation %d (%s)",
		og, op, strings.Join(names, ", or "), ng, np)
}

// rotationStep is a commit's place in a CA rotation; note says what it
// means, where that is not plain.
type rotationStep struct {
	generation int
	phase      RotationPhase
	note       string
}

func (r rotationStep) String() string {
	if r.phase == RotationComplete {
		return fmt.Sprintf("{generation: %d}%s", r.generation, r.note)
	}
	return fmt.Sprintf("{generation: %d, phase: %s}%s", r.generation, r.phase, r.note)
}

// nextRotations are the steps a rotation may take from generation g in
// phase p.
func nextRotations(g int, p RotationPhase) []rotationStep {
	switch p {
	case RotationTrust:
		return []rotationStep{{g, RotationReissue, ""}, {g - 1, RotationComplete, " to abandon it"}}
	case RotationReissue:
		return []rotationStep{{g, RotationComplete, " (complete)"}, {g, RotationTrust, ""}}
	}
	return []rotationStep{{g + 1, RotationTrust, ""}}
}

package diff

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"opke.dev/opke/schemas"
)

// remediations are the workers d's remediation replaces (spec.remediation),
// with why, as Cluster API's MachineHealthCheck finds them: a worker that
// ran (the ledger has its version), whose server is there, and whose Node
// has not been Ready (NotReady, or Unknown: its kubelet stopped posting)
// for UnhealthyAfter. When more workers are so than MaxUnhealthy, none is
// replaced: many nodes failing at once is an outage (the network, the
// control plane, the cloud), which new servers do not cure and drains
// would make worse; the warning says so. Controllers are not remediated
// here: a lost one is (members.go).
func remediations(d *Desired, o *Observed) (map[string]string, *Warning) {
	r := d.Remediation
	if r == nil || o.Applied == nil {
		return nil, nil
	}
	if o.Nodes == nil {
		if o.NodesUnread == "" {
			return nil, nil
		}
		return nil, &Warning{Cluster: d.Cluster, Message: "no worker is remediated: its Nodes' health could not be read: " + o.NodesUnread}
	}
	servers := map[string]bool{}
	for _, s := range o.Cloud {
		if s.Kind == KindServer {
			servers[s.Name] = true
		}
	}
	out := map[string]string{}
	for _, h := range d.Hosts {
		n, seen := o.Nodes[h.Name]
		if h.Role != schemas.RoleWorker || !servers[h.Name] || o.Applied.Versions[h.Name] == "" ||
			!seen || n.Ready == "True" || n.For < r.UnhealthyAfter {
			continue
		}
		state := "NotReady"
		if n.Ready != "False" {
			state = "Ready " + n.Ready + " (its kubelet stopped posting)"
		}
		out[h.Name] = fmt.Sprintf("remediation: its Node has been %s for %s, past spec.remediation.unhealthyAfter %s",
			state, schemas.Duration{Duration: n.For.Round(time.Second)}, schemas.Duration{Duration: r.UnhealthyAfter})
	}
	if len(out) > r.MaxUnhealthy {
		names := slices.Sorted(maps.Keys(out))
		return nil, &Warning{Cluster: d.Cluster, Message: fmt.Sprintf(
			"%d workers have been unhealthy past spec.remediation.unhealthyAfter (%s), more than spec.remediation.maxUnhealthy %d: none is replaced; "+
				"so many at once is an outage (the network, the control plane, the cloud), not a node's fault: look at what they share",
			len(out), strings.Join(names, ", "), r.MaxUnhealthy)}
	}
	return out, nil
}

// Remediated lists the workers the plan of d against o replaces for
// their health (spec.remediation), by name: a resync does not read them
// (a host that does not answer must not keep its own replacement from
// being planned).
func Remediated(d *Desired, o *Observed) []string {
	r, _ := remediations(d, o)
	return slices.Sorted(maps.Keys(r))
}

// replacedWorkers plans, for each worker that ran (the ledger has its
// version) whose server the infrastructure changes replace (a remediated
// one, or one whose flavor or image changed), its drain before the
// replacement and the deletion of its Node object after. A remediated
// worker's drain is best effort: a node whose kubelet is gone cannot
// confirm its pods ended; their evictions are asked for, and the drain
// goes on once the drain timeout passed. The Node object goes before the
// new server's kubelet registers (the host phase starts it), so that it
// registers afresh, with its new server's provider id, rather than
// taking over the dead one's.
func (b *builder) replacedWorkers(d *Desired, o *Observed, remedied map[string]string) {
	if o.Applied == nil {
		return
	}
	for _, h := range d.Hosts {
		replace := b.find(d.Cluster, ResourceAddress(KindServer, h.Name), ActionReplace)
		if replace == nil || h.Role != schemas.RoleWorker || o.Applied.Versions[h.Name] == "" {
			continue
		}
		drain := &pending{Change: Change{Cluster: d.Cluster, Phase: PhaseInfrastructure, Address: DrainAddress(h.Name), Action: ActionDrain,
			Reason: "cordon the node and evict its pods before its server is replaced"}, drift: replace.drift}
		if _, ok := remedied[h.Name]; ok {
			drain.After = Attrs{"best_effort": Known("true")}
			drain.Reason = "cordon the node and evict its pods, as far as they go (best effort: its kubelet may not answer), before its server is replaced"
		}
		drain = b.add(drain)
		drain.deps, replace.deps = replace.deps, []string{drain.key}
		node := b.add(&pending{Change: Change{Cluster: d.Cluster, Phase: PhaseInfrastructure, Address: NodeAddress(h.Name), Action: ActionDelete,
			Before: Attrs{"version": Known(o.Applied.Versions[h.Name])},
			Reason: "delete the Node object of the replaced server, so that the new one's kubelet registers afresh"}, drift: replace.drift})
		node.deps = append(node.deps, replace.key)
	}
}

// BestEffort reports whether a drain change goes on once its timeout
// passed with pods left (a remediation's: see remediate).
func BestEffort(c Change) bool { return c.After["best_effort"].Value == "true" }

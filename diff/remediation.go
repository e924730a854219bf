package diff

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"opke.dev/opke/schemas"
)

// remediations are the hosts d's remediation replaces (spec.remediation),
// with why, as Cluster API's MachineHealthCheck finds them: a worker or a
// controller that ran (the ledger has its version), whose server is
// there, and whose Node has not been Ready (NotReady, or Unknown: its
// kubelet stopped posting, its machine off or cut off) for
// UnhealthyAfter. When more workers are so than MaxUnhealthy, none is
// replaced: many nodes failing at once is an outage (the network, the
// control plane, the cloud), which new servers do not cure and drains
// would make worse; the warning says so. Controllers go one at a time, of
// three or more (the only controller's replacement would lose etcd's
// data: that is a restore): its etcd member is replaced, which the apply
// refuses while the member answers (members.go); the planner asks
// first, and renewals keeps a controller whose member answers.
func remediations(d *Desired, o *Observed) (map[string]string, []Warning) {
	r := d.Remediation
	if r == nil || o.Applied == nil {
		return nil, nil
	}
	if o.Nodes == nil {
		if o.NodesUnread == "" {
			return nil, nil
		}
		return nil, []Warning{{Cluster: d.Cluster, Message: "no host is remediated: the health of the cluster's Nodes could not be read: " + o.NodesUnread}}
	}
	servers := map[string]bool{}
	for _, s := range o.Cloud {
		if s.Kind == KindServer {
			servers[s.Name] = true
		}
	}
	workers, controllers := map[string]string{}, map[string]string{}
	count := 0
	for _, h := range d.Hosts {
		if h.Role == schemas.RoleController {
			count++
		}
		n, seen := o.Nodes[h.Name]
		if h.Role == schemas.RoleGateway || !servers[h.Name] || o.Applied.Versions[h.Name] == "" ||
			!seen || n.Ready == "True" || n.For < r.UnhealthyAfter {
			continue
		}
		state := "NotReady"
		if n.Ready != "False" {
			state = "Ready " + n.Ready + " (its kubelet stopped posting)"
		}
		why := fmt.Sprintf("remediation: its Node has been %s for %s, past spec.remediation.unhealthyAfter %s",
			state, schemas.Duration{Duration: n.For.Round(time.Second)}, schemas.Duration{Duration: r.UnhealthyAfter})
		if h.Role == schemas.RoleController {
			controllers[h.Name] = why
		} else {
			workers[h.Name] = why
		}
	}
	var warnings []Warning
	if len(workers) > r.MaxUnhealthy {
		warnings = append(warnings, Warning{Cluster: d.Cluster, Message: fmt.Sprintf(
			"%d workers have been unhealthy past spec.remediation.unhealthyAfter (%s), more than spec.remediation.maxUnhealthy %d: none is replaced; "+
				"so many at once is an outage (the network, the control plane, the cloud), not a node's fault: look at what they share",
			len(workers), strings.Join(slices.Sorted(maps.Keys(workers)), ", "), r.MaxUnhealthy)})
		workers = map[string]string{}
	}
	switch {
	case len(controllers) > 0 && count < 3:
		warnings = append(warnings, Warning{Cluster: d.Cluster, Message: fmt.Sprintf(
			"the only controller, %s, has been unhealthy past spec.remediation.unhealthyAfter: it is not replaced (a new one would start an empty etcd); "+
				"bring it back, or restore the cluster from a snapshot (opke restore)", strings.Join(slices.Sorted(maps.Keys(controllers)), ", "))})
	case len(controllers) > 1:
		warnings = append(warnings, Warning{Cluster: d.Cluster, Message: fmt.Sprintf(
			"%d controllers have been unhealthy past spec.remediation.unhealthyAfter (%s): none is replaced (controllers go one at a time); "+
				"if their etcd members do not answer, etcd may have lost its quorum: bring them back, or restore (opke restore)",
			len(controllers), strings.Join(slices.Sorted(maps.Keys(controllers)), ", "))})
	default:
		maps.Copy(workers, controllers)
	}
	return workers, warnings
}

// broken are the servers of d that Nova has in ERROR, with why: made
// again as drift, as a deleted one is. A server in ERROR is one Nova no
// longer manages (no reboot, resize or migration; its machine may be
// gone), as Cluster API's OpenStack provider takes it: a failed machine.
// A worker is drained first as far as it goes; a controller's etcd member
// is replaced, not while it answers (renewals; members.go refuses it
// too): a controller that runs keeps its server.
func broken(d *Desired, o *Observed) map[string]string {
	status := map[string]string{}
	for _, r := range o.Cloud {
		if r.Kind == KindServer {
			status[r.Name] = r.Status
		}
	}
	out := map[string]string{}
	for _, r := range d.Infra {
		if r.Kind == KindServer && status[r.Name] == "ERROR" {
			out[r.Name] = "its server is in ERROR: Nova no longer manages it"
		}
	}
	return out
}

// renewals are the servers of d the plan makes again though nothing of
// them changed: the broken ones and the remediated hosts, with why; and
// the warnings remediations gave. A controller whose etcd member answers
// (o.EtcdAnswers) keeps its server, with a warning: a controller that
// runs is not replaced (the apply would refuse it).
func renewals(d *Desired, o *Observed) (map[string]string, []Warning) {
	out, warnings := candidates(d, o)
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if schemas.RoleOf(d.Cluster, name) == schemas.RoleController && o.EtcdAnswers[name] {
			warnings = append(warnings, Warning{Cluster: d.Cluster, Message: fmt.Sprintf(
				"%s is not replaced, its etcd member answering (%s); a controller that runs keeps its server "+
					"(look at its kubelet; if its server is in ERROR but runs, `openstack server set --state active` clears it)",
				name, strings.TrimPrefix(out[name], "remediation: "))})
			delete(out, name)
		}
	}
	return out, warnings
}

// candidates are renewals before the etcd members' answers are known.
func candidates(d *Desired, o *Observed) (map[string]string, []Warning) {
	out, warn := remediations(d, o)
	for name, why := range broken(d, o) {
		if out == nil {
			out = map[string]string{}
		}
		out[name] = why
	}
	return out, warn
}

// ControllersToRenew lists the controllers the plan of d against o would
// make again for their health (in ERROR, or remediated), whatever their
// etcd members say: the planner reads those members' health
// (Observed.EtcdAnswers) before it plans.
func ControllersToRenew(d *Desired, o *Observed) []string {
	c, _ := candidates(d, o)
	var out []string
	for name := range c {
		if schemas.RoleOf(d.Cluster, name) == schemas.RoleController {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Remediated lists the servers the plan of d against o makes again for
// their health (in ERROR, or workers remediated), by name: a resync does
// not read them (a host that does not answer must not keep its own
// replacement from being planned).
func Remediated(d *Desired, o *Observed) []string {
	r, _ := renewals(d, o)
	return slices.Sorted(maps.Keys(r))
}

// renewedNodes plans, for each host that ran (the ledger has its
// version) whose server the plan makes again (lost, or replaced: a
// remediated one, one in ERROR, one whose flavor or image changed), the
// deletion of its Node object after the server's step: the host phase
// starts the new kubelet, which registers afresh, with its new server's
// provider id, rather than taking over the dead one's Node. A worker
// that is replaced is drained first; a remediated one's (or one in
// ERROR's) drain is best effort: a node whose kubelet is gone cannot
// confirm its pods ended; their evictions are asked for, and the drain
// goes on once the drain timeout passed.
func (b *builder) renewedNodes(d *Desired, o *Observed, renew map[string]string) {
	if o.Applied == nil {
		return
	}
	for _, h := range d.Hosts {
		server := b.find(d.Cluster, ResourceAddress(KindServer, h.Name), ActionCreate, ActionReplace)
		if server == nil || h.Role == schemas.RoleGateway || o.Applied.Versions[h.Name] == "" {
			continue
		}
		if server.Action == ActionReplace && h.Role == schemas.RoleWorker {
			if _, ok := renew[h.Name]; ok {
				b.drainBefore(d.Cluster, h.Name, server, Attrs{"best_effort": Known("true")},
					"cordon the node and evict its pods, as far as they go (best effort: its kubelet may not answer), before its server is replaced")
			} else {
				b.drainBefore(d.Cluster, h.Name, server, nil, "cordon the node and evict its pods before its server is replaced")
			}
		}
		b.deleteNode(d.Cluster, o, h.Name, "delete the Node object of the server made again, so that the new one's kubelet registers afresh", server)
	}
}

// BestEffort reports whether a drain change goes on once its timeout
// passed with pods left (a remediated host's, or one in ERROR: see
// renewedNodes).
func BestEffort(c Change) bool { return c.After["best_effort"].Value == "true" }

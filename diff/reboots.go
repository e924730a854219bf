package diff

import (
	"fmt"
	"slices"
	"strings"

	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
)

// rebootNote ends the reason of a reboot's gate.
const rebootNote = " (after its reboot into the staged OS update)"

// reboots plans the reboots of the hosts whose staged OS update waits for
// one (Observed.RebootRequired, read by a resync), as kured and Flatcar's
// update operator reboot them: one host at a time as a rollout goes
// (each controller alone, then workers by MaxUnavailable, then the
// gateway), a node cordoned and drained before its reboot, gated healthy
// after it and uncordoned. They come after every other change of the
// cluster in the plan, and a host with a change of its own in it waits
// for the next resync. They are drift: the hosts' state moved, not the
// spec. With spec.upgrade.osReboots manual, the plan warns instead.
func (b *builder) reboots(d *Desired, o *Observed) {
	if len(o.RebootRequired) == 0 {
		return
	}
	var others []string
	busy := map[string]bool{}
	for _, p := range b.list {
		if p.Cluster != d.Cluster {
			continue
		}
		others = append(others, p.key)
		busy[p.Address.Host] = true
		if p.Address.Target == TargetResource && p.Address.Kind == KindServer {
			busy[p.Address.Name] = true
		}
	}
	var versions map[string]string
	if o.Applied != nil {
		versions = o.Applied.Versions
	}
	servers := map[string]bool{}
	for _, r := range o.Cloud {
		if r.Kind == KindServer {
			servers[r.Name] = true
		}
	}
	var controllers, workers, gateway []Host
	var names, later []string
	for _, h := range d.Hosts {
		switch {
		case !slices.Contains(o.RebootRequired, h.Name):
			continue
		case busy[h.Name] || !servers[h.Name] || h.Role != schemas.RoleGateway && versions[h.Name] == "":
			later = append(later, h.Name)
			continue
		}
		names = append(names, h.Name)
		switch h.Role {
		case schemas.RoleController:
			controllers = append(controllers, h)
		case schemas.RoleGateway:
			gateway = append(gateway, h)
		default:
			workers = append(workers, h)
		}
	}
	if d.OSReboots == schemas.OSRebootsManual {
		b.warnings = append(b.warnings, Warning{Cluster: d.Cluster, Message: fmt.Sprintf(
			"%s wait for a reboot to finish an OS update; spec.upgrade.osReboots is manual: OPKE reboots none",
			strings.Join(slices.Concat(names, later), ", "))})
		return
	}
	if len(later) > 0 {
		b.warnings = append(b.warnings, Warning{Cluster: d.Cluster, Message: fmt.Sprintf(
			"%s wait for a reboot to finish an OS update: rebooted by a drift check once the changes this plan makes to them are applied",
			strings.Join(later, ", "))})
	}
	var batches [][]Host
	for _, h := range controllers {
		batches = append(batches, []Host{h})
	}
	for size := max(d.MaxUnavailable, 1); len(workers) > 0; workers = workers[min(size, len(workers)):] {
		batches = append(batches, workers[:min(size, len(workers))])
	}
	if len(gateway) > 0 {
		batches = append(batches, gateway)
	}
	before := others
	for _, batch := range batches {
		var ends []string
		for _, h := range batch {
			ends = append(ends, b.reboot(d.Cluster, h, before).key)
		}
		before = ends
	}
}

// reboot adds one host's chain after the keys before: a node's drain,
// its reboot, its gate and its uncordon; the gateway's reboot alone
// (rebooted, it answers SSH or the step fails). It returns the last.
func (b *builder) reboot(cluster string, h Host, before []string) *pending {
	reboot := b.add(&pending{Change: Change{Cluster: cluster, Phase: PhaseHosts, Address: RebootAddress(h.Name), Action: ActionRestart,
		Reason: "its staged OS update waits for a reboot (" + assets.PathRebootRequired + ")"}, drift: true, deps: slices.Clone(before)})
	if h.Role == schemas.RoleGateway {
		return reboot
	}
	drain := b.add(&pending{Change: Change{Cluster: cluster, Phase: PhaseInfrastructure, Address: DrainAddress(h.Name), Action: ActionDrain,
		Reason: "cordon the node and evict its pods before its reboot"}, drift: true, deps: slices.Clone(before)})
	reboot.deps = []string{drain.key}
	gate := b.gate(cluster, &hostChanges{host: h}, rebootNote, false)
	gate.drift, gate.deps = true, append(gate.deps, reboot.key)
	return b.add(&pending{Change: Change{Cluster: cluster, Phase: PhaseInfrastructure, Address: NodeAddress(h.Name), Action: ActionUpdate,
		Before: Attrs{"unschedulable": Known("true")}, After: Attrs{"unschedulable": Known("false")},
		Reason: "uncordon the node, healthy after its reboot"}, drift: true, deps: []string{gate.key}})
}

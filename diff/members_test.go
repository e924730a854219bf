package diff

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// desireAgainst renders c as the planner does against o (no member's
// start recorded): a controller that joins the etcd that runs is
// rendered to join it.
func desireAgainst(t *testing.T, kv state.KV, c *schemas.Cluster, o *Observed) *Desired {
	t.Helper()
	var versions map[string]string
	if o.Applied != nil {
		versions = o.Applied.Versions
	}
	d := desireStarting(t, kv, c, true, Starts(c.Metadata.Name, versions, nil, nil))
	if joins := Joins(d, o); len(joins) > 0 {
		return desireStarting(t, kv, c, true, Starts(c.Metadata.Name, versions, nil, joins))
	}
	return d
}

// TestMembership: the plans of etcd's membership, as golden files, and
// the order each must keep: one change at a time, a member removed before
// its server goes or comes back, added before its etcd starts, promoted
// after, gated before the next.
func TestMembership(t *testing.T) {
	kv := statetest.Open(t)
	controllers := func(n int) *schemas.Cluster {
		return spec(t, "demo", func(c *schemas.Cluster) { c.Spec.Controllers.Count = n })
	}
	three := converged(desire(t, kv, controllers(3), true))
	five := converged(desire(t, kv, controllers(5), true))
	lost := func(o *Observed, hosts ...string) *Observed {
		for _, h := range hosts {
			o = without(o, "openstack/server/"+h)
		}
		return o
	}
	ctl := func(i int) string { return schemas.ControllerName("demo", i) }
	remedied := func(n int) *schemas.Cluster {
		c := controllers(n)
		c.Spec.Remediation = &schemas.Remediation{UnhealthyAfter: schemas.Duration{Duration: 5 * time.Minute}, MaxUnhealthy: 1}
		return c
	}
	answers := func(o *Observed, hosts ...string) *Observed {
		c := *o
		c.EtcdAnswers = map[string]bool{}
		for _, h := range hosts {
			c.EtcdAnswers[h] = true
		}
		return &c
	}
	unhealthy := func(o *Observed, hosts ...string) *Observed {
		nodes := map[string]NodeHealth{}
		for _, h := range hosts {
			nodes[h] = NodeHealth{Ready: "Unknown", For: 10 * time.Minute}
		}
		return health(o, nodes)
	}
	restartOf := func(t *testing.T, p *Plan, host, unit string) Change {
		return find(t, slices.Concat(p.Changes, p.Drift), UnitAddress(host, unit), ActionRestart)
	}
	for _, tc := range []struct {
		name     string
		spec     *schemas.Cluster
		observed *Observed
		check    func(t *testing.T, p *Plan)
	}{
		{"controller-lost", controllers(3), lost(three, ctl(1)), func(t *testing.T, p *Plan) {
			if len(p.Changes) != 0 {
				t.Errorf("a lost controller's replacement is drift only: %v", p.Changes)
			}
			rm := find(t, p.Drift, MemberAddress(ctl(1)), ActionDelete)
			server := find(t, p.Drift, ResourceAddress(KindServer, ctl(1)), ActionCreate)
			add := find(t, p.Drift, MemberAddress(ctl(1)), ActionCreate)
			promote := find(t, p.Drift, MemberAddress(ctl(1)), ActionUpdate)
			gate := find(t, p.Drift, GateAddress(ctl(1)), ActionCheck)
			etcd := restartOf(t, p, ctl(1), "etcd-member.service")
			if rm.Phase != PhaseInfrastructure || rm.Before[attrRemoval].Value != RemovalLost || !after(p, server, rm) {
				t.Errorf("the lost member is not removed first, in the infrastructure phase: %+v", rm)
			}
			if got := add.After[attrMembers].Value; got != "demo-controller-0,demo-controller-1,demo-controller-2" {
				t.Errorf("joins with members %s", got)
			}
			if !after(p, etcd, add) || !after(p, promote, etcd) || !after(p, gate, promote) {
				t.Error("not in order: add, etcd's start, promotion, gate")
			}
			for _, c := range []Change{rm, add, promote} {
				if url, _, _ := MemberOf(c); url != "https://192.168.10.11:2380" {
					t.Errorf("%s %s names peer URL %q", c.Action, c.Address, url)
				}
			}
			if start, ok := MemberChange(add); !ok || !start.Join || len(start.Members) != 3 {
				t.Errorf("MemberChange(%v) = %+v, %v", add.Address, start, ok)
			}
			if len(p.Warnings) != 0 {
				t.Errorf("warnings: %v", p.Warnings)
			}
		}},
		{"controller-error", controllers(3), inError(three, ctl(2)), func(t *testing.T, p *Plan) {
			if len(p.Changes) != 0 || len(p.Warnings) != 0 {
				t.Errorf("a controller in ERROR is replaced as drift, with no warning: %v %v", addrs(p.Changes), p.Warnings)
			}
			rm := find(t, p.Drift, MemberAddress(ctl(2)), ActionDelete)
			server := find(t, p.Drift, ResourceAddress(KindServer, ctl(2)), ActionReplace)
			add := find(t, p.Drift, MemberAddress(ctl(2)), ActionCreate)
			gate := find(t, p.Drift, GateAddress(ctl(2)), ActionCheck)
			if rm.Before[attrRemoval].Value != RemovalReplace || !after(p, server, rm) || add.Phase != PhaseHosts || !after(p, gate, add) {
				t.Errorf("want the member removed (replace: refused while it answers), the server replaced, the new member added, gated: %+v", rm.Before)
			}
			if !strings.Contains(server.Reason, "ERROR") {
				t.Errorf("the replacement does not say why: %q", server.Reason)
			}
			for _, c := range p.Drift {
				if c.Address.Target == TargetDrain {
					t.Errorf("a controller is not drained: %s %s", c.Action, c.Address)
				}
			}
			if node := find(t, p.Drift, NodeAddress(ctl(2)), ActionDelete); !slices.Equal(node.DependsOn, []string{server.ID}) {
				t.Errorf("the old Node object is not deleted after the server is made again: %v", node.DependsOn)
			}
		}},
		{"controller-error-answers", controllers(3), answers(inError(three, ctl(2)), ctl(2)), func(t *testing.T, p *Plan) {
			if !p.Empty() || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Message, "demo-controller-2 is not replaced, its etcd member answering (its server is in ERROR") {
				t.Errorf("a controller in ERROR whose member answers: want no change and a warning: %v %v", addrs(p.Drift), p.Warnings)
			}
			if got := ControllersToRenew(desire(t, kv, controllers(3), true), inError(three, ctl(2))); !slices.Equal(got, []string{ctl(2)}) {
				t.Errorf("ControllersToRenew = %v, want the controller in ERROR (the planner asks its member)", got)
			}
		}},
		{"controller-unhealthy", remedied(3), unhealthy(three, ctl(1)), func(t *testing.T, p *Plan) {
			rm := find(t, p.Drift, MemberAddress(ctl(1)), ActionDelete)
			server := find(t, p.Drift, ResourceAddress(KindServer, ctl(1)), ActionReplace)
			if rm.Before[attrRemoval].Value != RemovalReplace || !after(p, server, rm) || len(p.Warnings) != 0 || len(p.Changes) != 0 {
				t.Errorf("want its member replaced (refused while it answers) before its server, as drift: %+v %v", rm.Before, p.Warnings)
			}
			find(t, p.Drift, MemberAddress(ctl(1)), ActionCreate)
		}},
		{"controllers-unhealthy", remedied(3), unhealthy(three, ctl(1), ctl(2)), func(t *testing.T, p *Plan) {
			if !p.Empty() || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Message, "2 controllers have been unhealthy") {
				t.Errorf("two controllers unhealthy: want none replaced and a warning: %v %v", addrs(p.Drift), p.Warnings)
			}
		}},
		{"controllers-lost-quorum", controllers(3), lost(three, ctl(1), ctl(2)), func(t *testing.T, p *Plan) {
			if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Message, "lost quorum") {
				t.Errorf("warnings: %v", p.Warnings)
			}
			add1 := find(t, p.Drift, MemberAddress(ctl(1)), ActionCreate)
			add2 := find(t, p.Drift, MemberAddress(ctl(2)), ActionCreate)
			if got := add2.After[attrMembers].Value; got != "demo-controller-0,demo-controller-1,demo-controller-2" || !after(p, add2, add1) {
				t.Errorf("the second join (members %s) does not follow the first", got)
			}
		}},
		{"controllers-scale-out", controllers(5), three, func(t *testing.T, p *Plan) {
			add3 := find(t, p.Changes, MemberAddress(ctl(3)), ActionCreate)
			add4 := find(t, p.Changes, MemberAddress(ctl(4)), ActionCreate)
			gate3 := find(t, p.Changes, GateAddress(ctl(3)), ActionCheck)
			if got := add3.After[attrMembers].Value; got != "demo-controller-0,demo-controller-1,demo-controller-2,demo-controller-3" {
				t.Errorf("the fourth joins with %s", got)
			}
			if got := add4.After[attrMembers].Value; got != "demo-controller-0,demo-controller-1,demo-controller-2,demo-controller-3,demo-controller-4" {
				t.Errorf("the fifth joins with %s", got)
			}
			if !after(p, add4, gate3) {
				t.Error("the fifth joins before the fourth's gate")
			}
			for _, c := range slices.Concat(p.Changes, p.Drift) {
				if c.Address.Target == TargetMember && c.Action == ActionDelete {
					t.Errorf("a scale-out removes %s", c.Address)
				}
				if c.Address == FileAddress(ctl(0), assets.PathEtcdEnv) {
					t.Errorf("a member that runs gets a new etcd.env: %+v", c)
				}
			}
		}},
		{"controllers-flavor", func() *schemas.Cluster {
			c := controllers(3)
			c.Spec.Controllers.Flavor = "m1.xlarge"
			return c
		}(), three, func(t *testing.T, p *Plan) {
			if len(p.Drift) != 0 || len(p.Warnings) != 0 {
				t.Errorf("a flavor change is a change, not drift: %v %v", addrs(p.Drift), p.Warnings)
			}
			var prevGate *Change
			for i := range 3 {
				rm := find(t, p.Changes, MemberAddress(ctl(i)), ActionDelete)
				server := find(t, p.Changes, ResourceAddress(KindServer, ctl(i)), ActionReplace)
				add := find(t, p.Changes, MemberAddress(ctl(i)), ActionCreate)
				gate := find(t, p.Changes, GateAddress(ctl(i)), ActionCheck)
				if rm.Before[attrRemoval].Value != RemovalRoll || !after(p, server, rm) || !after(p, add, rm) || !after(p, gate, server) || !after(p, gate, add) {
					t.Errorf("%s: want its member removed (a roll), its server replaced, the new member added, gated: %+v", ctl(i), rm.Before)
				}
				if got := add.After[attrMembers].Value; got != "demo-controller-0,demo-controller-1,demo-controller-2" {
					t.Errorf("%s joins with members %s", ctl(i), got)
				}
				if prevGate != nil && !after(p, rm, *prevGate) {
					t.Errorf("%s leaves etcd before the controller before it passed its gate", ctl(i))
				}
				prevGate = &gate
				node := find(t, p.Changes, NodeAddress(ctl(i)), ActionDelete)
				if up := find(t, p.Changes, FileAddress(ctl(i), assets.PathEtcdEnv), ActionUpload); !after(p, up, node) {
					t.Errorf("%s's files go up before its old Node object is deleted: a deletion after its kubelet registers takes the new node", ctl(i))
				}
				if snapshot := find(t, p.Changes, SnapshotAddress("demo"), ActionBackup); !after(p, rm, snapshot) {
					t.Errorf("%s leaves etcd before the snapshot", ctl(i))
				}
			}
		}},
		{"controllers-scale-in", controllers(3), five, func(t *testing.T, p *Plan) {
			rm4 := find(t, p.Changes, MemberAddress(ctl(4)), ActionDelete)
			rm3 := find(t, p.Changes, MemberAddress(ctl(3)), ActionDelete)
			server4 := find(t, p.Changes, ResourceAddress(KindServer, ctl(4)), ActionDelete)
			server3 := find(t, p.Changes, ResourceAddress(KindServer, ctl(3)), ActionDelete)
			lb4 := find(t, p.Changes, ResourceAddress(KindMember, ctl(4)), ActionDelete)
			if !after(p, server4, rm4) || !after(p, rm4, lb4) || !after(p, rm3, server4) || !after(p, server3, rm3) {
				t.Error("not in order: the load balancer's member, etcd's, the server; -4 before -3")
			}
			if rm4.Before[attrRemoval].Value != RemovalLeave {
				t.Errorf("removal %+v", rm4.Before)
			}
			for _, c := range slices.Concat(p.Changes, p.Drift) {
				if c.Address.Target == TargetMember && c.Action != ActionDelete {
					t.Errorf("a scale-in plans %s %s", c.Action, c.Address)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := desireAgainst(t, kv, tc.spec, tc.observed)
			p := Diff([]*Desired{d}, []*Observed{tc.observed})
			tc.check(t, p)
			checkPlan(t, tc.name, p)
		})
	}
}

// TestJoins: who joins the etcd that runs, with whom.
func TestJoins(t *testing.T) {
	kv := statetest.Open(t)
	c := spec(t, "demo", func(c *schemas.Cluster) { c.Spec.Controllers.Count = 3 })
	d := desire(t, kv, c, true)
	done := converged(d)
	for _, tc := range []struct {
		name string
		o    *Observed
		want []Join
	}{
		{"new cluster", &Observed{Cluster: "demo"}, nil},
		{"converged", done, nil},
		{"never ran: founding", func() *Observed {
			o := *done
			o.Applied = &Applied{Infra: done.Applied.Infra, Versions: map[string]string{}}
			return &o
		}(), nil},
		{"one lost", without(done, "openstack/server/demo-controller-2"),
			[]Join{{Host: "demo-controller-2", Members: []string{"demo-controller-0", "demo-controller-1", "demo-controller-2"}, Removal: RemovalLost}}},
		{"one never passed its gate", func() *Observed {
			o := *done
			a := *done.Applied
			a.Versions = map[string]string{"demo-controller-0": "v1.35.1", "demo-controller-2": "v1.35.1"}
			a.Files = map[string]map[string]string{}
			o.Applied = &a
			return &o
		}(), []Join{{Host: "demo-controller-1", Members: []string{"demo-controller-0", "demo-controller-1", "demo-controller-2"}}}},
		{"replaced", func() *Observed {
			o := *done
			o.Cloud = slices.Clone(done.Cloud)
			for i, r := range o.Cloud {
				if r.Address() == ResourceAddress(KindServer, "demo-controller-0") {
					o.Cloud[i].Attrs = Attrs{"flavor": Known("other")}
				}
			}
			return &o
		}(), []Join{{Host: "demo-controller-0", Members: []string{"demo-controller-0", "demo-controller-1", "demo-controller-2"}, Removal: RemovalRoll}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Joins(d, tc.o)); diff != "" {
				t.Errorf("Joins (-want +got):\n%s", diff)
			}
		})
	}
}

package diff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"opke.dev/opke/internal/golden"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// spec reads an example cluster and edits it.
func spec(t testing.TB, name string, edit func(*schemas.Cluster)) *schemas.Cluster {
	t.Helper()
	data, err := os.ReadFile("../clusters/" + name + "/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := schemas.Parse("clusters/"+name+"/cluster.yaml", data)
	if f.Cluster == nil || len(f.Findings) > 0 {
		t.Fatalf("%s: %v", name, f.Findings)
	}
	c := *f.Cluster
	c.Spec.WorkerPools = slices.Clone(c.Spec.WorkerPools)
	if edit != nil {
		edit(&c)
	}
	return &c
}

// desire renders c with the store's PKI and lists what it asks for.
func desire(t testing.TB, kv state.KV, c *schemas.Cluster, apiFIP bool) *Desired {
	t.Helper()
	return desireStarting(t, kv, c, apiFIP, nil)
}

// desireStarting is desire with the controllers' etcd members starting as
// etcd says (render.Options.Etcd).
func desireStarting(t testing.TB, kv state.KV, c *schemas.Cluster, apiFIP bool, etcd map[string]assets.EtcdStart) *Desired {
	t.Helper()
	out, err := render.Cluster(context.Background(), kv, c, render.Options{Now: time.Now(), Etcd: etcd})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Desire(c, Inputs{UserData: out.UserData, Assets: out.Assets, APIFloatingIP: apiFIP})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// converged is what OpenStack and the store show once d was applied: every
// resource with the desired attributes (unknown ones filled in), applied
// as is, every file pushed.
func converged(d *Desired) *Observed {
	o := &Observed{Cluster: d.Cluster, Applied: &Applied{DeletionPolicy: d.DeletionPolicy, Infra: map[Address]Attrs{},
		Files: map[string]map[string]string{}, Versions: map[string]string{}, Manifests: map[string]string{}}}
	for _, m := range d.Manifests {
		o.Applied.Manifests[m.Name] = m.SHA256
	}
	for i, r := range d.Infra {
		attrs := Attrs{}
		for k, v := range r.Attrs {
			if v.Unknown {
				v = Known(fmt.Sprintf("known-%d-%s", i, k))
			}
			attrs[k] = v
		}
		o.Cloud = append(o.Cloud, Resource{Kind: r.Kind, Name: r.Name, Attrs: attrs, ID: fmt.Sprintf("id-%d", i)})
		o.Applied.Infra[r.Address()] = attrs
	}
	for _, h := range d.Hosts {
		files := map[string]string{}
		for _, f := range h.Files {
			files[f.Path] = f.SHA256
		}
		o.Applied.Files[h.Name] = files
		o.Applied.Versions[h.Name] = h.Version
	}
	return o
}

// without returns o without the cloud resource at address.
func without(o *Observed, address string) *Observed {
	c := *o
	c.Cloud = slices.DeleteFunc(slices.Clone(o.Cloud), func(r Resource) bool { return r.Address().String() == address })
	return &c
}

// inError returns o with the named servers in ERROR.
func inError(o *Observed, servers ...string) *Observed {
	c := *o
	c.Cloud = slices.Clone(o.Cloud)
	for i, r := range c.Cloud {
		if r.Kind == KindServer && slices.Contains(servers, r.Name) {
			c.Cloud[i].Status = "ERROR"
		}
	}
	return &c
}

// health returns o with its Nodes' health.
func health(o *Observed, nodes map[string]NodeHealth) *Observed {
	c := *o
	c.Nodes = nodes
	return &c
}

var sha = regexp.MustCompile(`[0-9a-f]{64}`)

// normalize replaces each sha256 by its rank of appearance: certificates
// and keys are new on every run, the plan's shape is not.
func normalize(b []byte) []byte {
	seen := map[string]string{}
	return sha.ReplaceAllFunc(b, func(m []byte) []byte {
		if _, ok := seen[string(m)]; !ok {
			seen[string(m)] = fmt.Sprintf("sha256-%d", len(seen)+1)
		}
		return []byte(seen[string(m)])
	})
}

// TestPlans: every case's plan in its JSON form and its human view, as
// golden files, plus what each case must and must not contain.
func TestPlans(t *testing.T) {
	kv := statetest.Open(t)
	demo := func(edit func(*schemas.Cluster)) *schemas.Cluster { return spec(t, "demo", edit) }
	base := desire(t, kv, demo(nil), true)
	done := converged(base)
	pool := func(c *schemas.Cluster) *schemas.WorkerPool { return &c.Spec.WorkerPools[0] }
	remedied := desire(t, kv, demo(func(c *schemas.Cluster) {
		c.Spec.Remediation = &schemas.Remediation{UnhealthyAfter: schemas.Duration{Duration: 5 * time.Minute}, MaxUnhealthy: 1}
	}), true)

	cases := []struct {
		name     string
		desired  []*Desired
		observed []*Observed
		// check asserts what the case is about, beyond the golden files.
		check func(t *testing.T, p *Plan)
	}{
		{"new-cluster", []*Desired{desire(t, kv, demo(nil), false)}, nil, func(t *testing.T, p *Plan) {
			wantCreate(t, p, "openstack/network/demo", "openstack/router-interface/demo", "openstack/server-group/demo-controllers",
				"openstack/port/demo-controller-0", "openstack/floating-ip/demo-gateway-0", "openstack/load-balancer/demo-api",
				"openstack/listener/demo-api-6443", "openstack/pool/demo-api", "openstack/member/demo-controller-0",
				"openstack/health-monitor/demo-api", "openstack/floating-ip/demo-api")
			c := find(t, p.Changes, "host/demo-controller-0/etc/kubernetes/pki/apiserver.crt", ActionUpload)
			if !c.After["sha256"].Unknown || !slices.Contains(c.DependsOn, find(t, p.Changes, "openstack/floating-ip/demo-api", ActionCreate).ID) {
				t.Errorf("the API cert is not (known after apply) after the API's floating IP: %+v", c)
			}
			if c := find(t, p.Changes, "host/demo-controller-0/etc/kubernetes/pki/apiserver.key", ActionUpload); !c.After["sha256"].Sensitive {
				t.Errorf("a key's digest is shown: %+v", c.After)
			}
			port := find(t, p.Changes, "openstack/port/demo-controller-0", ActionCreate)
			if server := find(t, p.Changes, "openstack/server/demo-controller-0", ActionCreate); !slices.Contains(server.DependsOn, port.ID) {
				t.Errorf("the server does not wait for its port: %v", server.DependsOn)
			}
			// The kubelet's unit pulls through containerd: it restarts once
			// containerd has.
			for _, h := range []string{"demo-controller-0", "demo-default-0"} {
				ctrd := find(t, p.Changes, "host/"+h+"/units/containerd.service", ActionRestart)
				if kubelet := find(t, p.Changes, "host/"+h+"/units/kubelet.service", ActionRestart); !after(p, kubelet, ctrd) {
					t.Errorf("%s: the kubelet restarts beside containerd: %v", h, kubelet.DependsOn)
				}
			}
		}},
		{"listener-idle-timeouts", []*Desired{base}, []*Observed{func() *Observed {
			// A cluster made before the API's listener had its idle
			// timeouts: Octavia's 50 s defaults, in the cloud and in
			// what OPKE recorded.
			o := converged(base)
			o.Cloud = slices.Clone(o.Cloud)
			for i, r := range o.Cloud {
				if r.Kind == KindListener {
					attrs := maps.Clone(r.Attrs)
					attrs["timeout_client_data"], attrs["timeout_member_data"] = Known("50000"), Known("50000")
					o.Cloud[i].Attrs = attrs
					o.Applied.Infra[r.Address()] = attrs
				}
			}
			return o
		}()}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 1 || len(p.Drift) != 0 {
				t.Fatalf("want one change, no drift: %d changes, %d corrections", len(p.Changes), len(p.Drift))
			}
			c := find(t, p.Changes, "openstack/listener/demo-api-6443", ActionUpdate)
			if c.After["timeout_client_data"].Value != "14400000" || c.After["timeout_member_data"].Value != "14400000" {
				t.Errorf("the listener's update: %+v", c.After)
			}
		}},
		{"converged", []*Desired{base}, []*Observed{done}, func(t *testing.T, p *Plan) {
			if !p.Empty() {
				t.Errorf("a converged cluster plans %d changes and %d corrections", len(p.Changes), len(p.Drift))
			}
		}},
		{"scale-out", []*Desired{desire(t, kv, demo(func(c *schemas.Cluster) { pool(c).Count = 3 }), true)}, []*Observed{done},
			func(t *testing.T, p *Plan) {
				wantCreate(t, p, "openstack/port/demo-default-2", "openstack/server/demo-default-2")
				onlyAbout(t, p, "demo-default-2")
			}},
		{"scale-in", []*Desired{desire(t, kv, demo(func(c *schemas.Cluster) { pool(c).Count = 0 }), true)}, []*Observed{done},
			func(t *testing.T, p *Plan) {
				first := find(t, p.Changes, "openstack/server/demo-default-1", ActionDelete)
				second := find(t, p.Changes, "openstack/server/demo-default-0", ActionDelete)
				drain1 := find(t, p.Changes, DrainAddress("demo-default-1"), ActionDrain)
				drain0 := find(t, p.Changes, DrainAddress("demo-default-0"), ActionDrain)
				if !slices.Contains(first.DependsOn, drain1.ID) || !slices.Contains(second.DependsOn, drain0.ID) {
					t.Errorf("a worker is deleted before its drain: %v %v", first.DependsOn, second.DependsOn)
				}
				if !slices.Contains(drain0.DependsOn, first.ID) {
					t.Errorf("scale in does not take the highest index first (drain of -0 waits for -1's deletion): %v", drain0.DependsOn)
				}
				if port := find(t, p.Changes, "openstack/port/demo-default-1", ActionDelete); !slices.Contains(port.DependsOn, first.ID) {
					t.Errorf("the port goes before its server: %v", port.DependsOn)
				}
				// Each Node object goes once its server is gone (a kubelet
				// still running could register it again).
				for _, server := range []Change{first, second} {
					host := server.Address.Name
					if node := find(t, p.Changes, NodeAddress(host), ActionDelete); !slices.Equal(node.DependsOn, []string{server.ID}) {
						t.Errorf("%s's Node object goes before its server, or after more: %v", host, node.DependsOn)
					}
				}
			}},
		{"node-left", []*Desired{desire(t, kv, demo(func(c *schemas.Cluster) { pool(c).Count = 1 }), true)}, []*Observed{func() *Observed {
			// demo-default-1's server was deleted and its Node object's
			// deletion failed: the ledger still has its version.
			o := converged(base)
			for _, a := range []string{"openstack/server/demo-default-1", "openstack/port/demo-default-1"} {
				o = without(o, a)
				delete(o.Applied.Infra, mustAddress(a))
			}
			delete(o.Applied.Files, "demo-default-1")
			return o
		}()}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 1 || len(p.Drift) != 0 {
				t.Fatalf("want one change, no drift: %v, drift %v", p.Changes, p.Drift)
			}
			if c := find(t, p.Changes, NodeAddress("demo-default-1"), ActionDelete); len(c.DependsOn) != 0 {
				t.Errorf("the left Node object's deletion waits: %v", c.DependsOn)
			}
		}},
		{"version-bump", []*Desired{desire(t, kv, demo(func(c *schemas.Cluster) { c.Spec.Kubernetes.Version = "v1.37.0" }), true)}, []*Observed{done},
			func(t *testing.T, p *Plan) {
				for _, c := range p.Changes {
					switch {
					case c.Action == ActionUpload, c.Action == ActionRestart, c.Action == ActionCheck, c.Action == ActionBackup, c.Action == ActionApply:
					case c.Action == ActionDrain, c.Action == ActionUpdate && c.Address.Target == TargetNode:
					default:
						t.Errorf("a version bump plans %s %s", c.Action, c.Address)
					}
				}
				// A minor bump drains each node before its files and its
				// kubelet's restart and uncordons it once its gate passed,
				// as kubeadm's upgrade does; the next host waits for that.
				for _, h := range []string{"demo-controller-0", "demo-default-0", "demo-default-1"} {
					drain := find(t, p.Changes, DrainAddress(h), ActionDrain)
					env := find(t, p.Changes, "host/"+h+"/etc/kubernetes/kubelet.env", ActionUpload)
					// The host's first restart (its units restart one at a
					// time, by name) waits for the drain.
					var restart Change
					for _, c := range p.Changes {
						if c.Action == ActionRestart && c.Address.Host == h && restart.ID == "" {
							restart = c
						}
					}
					gate := find(t, p.Changes, GateAddress(h), ActionCheck)
					uncordon := find(t, p.Changes, NodeAddress(h), ActionUpdate)
					if !slices.Contains(env.DependsOn, drain.ID) || !slices.Contains(restart.DependsOn, drain.ID) || !slices.Contains(uncordon.DependsOn, gate.ID) {
						t.Errorf("%s: want drain, files, restart, gate, uncordon: drain %v, %s %v, uncordon %v", h, drain.DependsOn, restart.Address, restart.DependsOn, uncordon.DependsOn)
					}
					// An addon's workloads need a schedulable node: the
					// manifests go once every node is uncordoned.
					if dns := find(t, p.Changes, ManifestAddress("demo", "05-coredns.yaml"), ActionApply); !slices.Contains(dns.DependsOn, uncordon.ID) {
						t.Errorf("CoreDNS is applied before %s is uncordoned: %v", h, dns.DependsOn)
					}
				}
				// kube-proxy's new image goes to the API once the control
				// plane runs the new version, as kubeadm upgrades it.
				proxy := find(t, p.Changes, ManifestAddress("demo", "00-kube-proxy.yaml"), ActionApply)
				if gate := find(t, p.Changes, GateAddress("demo-controller-0"), ActionCheck); !slices.Contains(proxy.DependsOn, gate.ID) {
					t.Errorf("kube-proxy is applied before the controller's gate: %v", proxy.DependsOn)
				}
				if proxy.Before["sha256"].Value == "" || proxy.Reason != "content changed" {
					t.Errorf("kube-proxy's apply: %+v", proxy)
				}
				snap := find(t, p.Changes, SnapshotAddress("demo"), ActionBackup)
				env := find(t, p.Changes, "host/demo-controller-0/etc/kubernetes/kubelet.env", ActionUpload)
				if !slices.Contains(env.DependsOn, snap.ID) {
					t.Errorf("the first controller's files do not wait for the etcd snapshot: %v", env.DependsOn)
				}
				ctlRestart := find(t, p.Changes, "host/demo-controller-0/units/kubelet.service", ActionRestart)
				ctlGate := find(t, p.Changes, GateAddress("demo-controller-0"), ActionCheck)
				if !slices.Contains(ctlGate.DependsOn, ctlRestart.ID) || ctlGate.After["version"].Value != "v1.37.0" {
					t.Errorf("the controller's gate does not follow its restart or checks another version: %+v", ctlGate)
				}
				if ctlGate.After["node"].Value != "Ready" {
					t.Errorf("the running controller's gate does not check its Node: %+v", ctlGate.After)
				}
				wEnv := find(t, p.Changes, "host/demo-default-0/etc/kubernetes/kubelet.env", ActionUpload)
				ctlEnd := find(t, p.Changes, NodeAddress("demo-controller-0"), ActionUpdate)
				w0End := find(t, p.Changes, NodeAddress("demo-default-0"), ActionUpdate)
				w1Env := find(t, p.Changes, "host/demo-default-1/etc/kubernetes/kubelet.env", ActionUpload)
				if !slices.Contains(wEnv.DependsOn, ctlEnd.ID) {
					t.Errorf("a worker's files go before the controller is back (gated, uncordoned): %v", wEnv.DependsOn)
				}
				if !slices.Contains(w1Env.DependsOn, w0End.ID) {
					t.Errorf("maxUnavailable 1: the second worker does not wait for the first to be back: %v", w1Env.DependsOn)
				}
			}},
		{"version-bump-batches", []*Desired{desire(t, kv, demo(func(c *schemas.Cluster) {
			c.Spec.Kubernetes.Version = "v1.37.0"
			c.Spec.Upgrade.MaxUnavailable = 2
		}), true)}, []*Observed{done},
			func(t *testing.T, p *Plan) {
				ctlEnd := find(t, p.Changes, NodeAddress("demo-controller-0"), ActionUpdate)
				w0End := find(t, p.Changes, NodeAddress("demo-default-0"), ActionUpdate)
				w1Env := find(t, p.Changes, "host/demo-default-1/etc/kubernetes/kubelet.env", ActionUpload)
				if slices.Contains(w1Env.DependsOn, w0End.ID) || !slices.Contains(w1Env.DependsOn, ctlEnd.ID) {
					t.Errorf("maxUnavailable 2: both workers are one batch after the controller: %v", w1Env.DependsOn)
				}
			}},
		{"patch-bump", []*Desired{desire(t, kv, demo(func(c *schemas.Cluster) { c.Spec.Kubernetes.Version = "v1.36.3" }), true)}, []*Observed{done},
			func(t *testing.T, p *Plan) {
				// A patch restarts the kubelets in place: no drain.
				for _, c := range p.Changes {
					if c.Action == ActionDrain || c.Action == ActionUpdate {
						t.Errorf("a patch bump plans %s %s", c.Action, c.Address)
					}
				}
				if len(p.Changes) == 0 {
					t.Error("a patch bump plans nothing")
				}
			}},
		{"pool-flavor", []*Desired{desire(t, kv, demo(func(c *schemas.Cluster) { pool(c).Flavor = "m1.large" }), true)}, []*Observed{done},
			func(t *testing.T, p *Plan) {
				first := find(t, p.Changes, "openstack/server/demo-default-0", ActionReplace)
				second := find(t, p.Changes, "openstack/server/demo-default-1", ActionReplace)
				drain := find(t, p.Changes, DrainAddress("demo-default-1").String(), ActionDrain)
				if !slices.Contains(drain.DependsOn, first.ID) || !slices.Equal(second.DependsOn, []string{drain.ID}) || BestEffort(drain) {
					t.Errorf("the replace is not rolling (surge 1), each worker drained (not best effort) first: %v, %v, %v", drain.DependsOn, second.DependsOn, drain.After)
				}
				if gate := find(t, p.Changes, GateAddress("demo-default-0").String(), ActionCheck); !slices.Contains(drain.DependsOn, gate.ID) {
					t.Errorf("the second worker is drained before the first is back (its gate): %v", drain.DependsOn)
				}
				if node := find(t, p.Changes, NodeAddress("demo-default-1").String(), ActionDelete); !slices.Equal(node.DependsOn, []string{second.ID}) {
					t.Errorf("the replaced worker's Node object is not deleted after its server: %v", node.DependsOn)
				}
				if first.After["port"].Value != "demo-default-0" || first.After["image"].Value == "" {
					t.Errorf("the replacement is not made from the whole resource: %+v", first.After)
				}
				if first.Before["flavor"].Value == first.After["flavor"].Value {
					t.Errorf("before/after: %+v %+v", first.Before, first.After)
				}
				up := find(t, p.Changes, "host/demo-default-1/etc/kubernetes/kubelet.env", ActionUpload)
				if !slices.Contains(up.DependsOn, second.ID) {
					t.Errorf("a replaced host's files do not wait for it: %v", up.DependsOn)
				}
			}},
		{"worker-unhealthy", []*Desired{remedied}, []*Observed{health(done, map[string]NodeHealth{
			"demo-controller-0": {Ready: "Unknown", For: time.Hour}, // the only controller is not replaced
			"demo-default-0":    {Ready: "Unknown", For: 6 * time.Minute},
			"demo-default-1":    {Ready: "False", For: 4 * time.Minute}, // not for long enough
		})}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 0 || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Message, "the only controller, demo-controller-0") {
				t.Errorf("a remediation is drift, and warns only that the only controller is not replaced: %v %v", addrs(p.Changes), p.Warnings)
			}
			drain := find(t, p.Drift, DrainAddress("demo-default-0"), ActionDrain)
			replace := find(t, p.Drift, "openstack/server/demo-default-0", ActionReplace)
			node := find(t, p.Drift, NodeAddress("demo-default-0"), ActionDelete)
			if !BestEffort(drain) || !slices.Equal(replace.DependsOn, []string{drain.ID}) || !slices.Equal(node.DependsOn, []string{replace.ID}) {
				t.Errorf("want a best-effort drain, then the server, then the Node object: %v %v %v", drain.After, replace.DependsOn, node.DependsOn)
			}
			if up := find(t, p.Drift, "host/demo-default-0/etc/kubernetes/kubelet.env", ActionUpload); !slices.Contains(up.DependsOn, replace.ID) {
				t.Errorf("the new server's files do not wait for it: %v", up.DependsOn)
			}
			for _, c := range p.Drift {
				if c.Address.Host == "demo-default-1" || c.Address.Name == "demo-default-1" || strings.Contains(c.Address.String(), "controller") {
					t.Errorf("%s %s: only demo-default-0 is remediated", c.Action, c.Address)
				}
			}
			if got, want := Renewed(remedied, health(done, map[string]NodeHealth{"demo-default-0": {Ready: "Unknown", For: time.Hour}})), []string{"demo-default-0"}; !slices.Equal(got, want) {
				t.Errorf("Renewed = %v, want %v: the apply forgets the material of the remediated worker", got, want)
			}
		}},
		{"worker-error", []*Desired{base}, []*Observed{inError(done, "demo-default-1")}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 0 || len(p.Warnings) != 0 {
				t.Errorf("a server in ERROR is replaced as drift, with or without spec.remediation: %v %v", addrs(p.Changes), p.Warnings)
			}
			drain := find(t, p.Drift, DrainAddress("demo-default-1"), ActionDrain)
			replace := find(t, p.Drift, "openstack/server/demo-default-1", ActionReplace)
			find(t, p.Drift, NodeAddress("demo-default-1"), ActionDelete)
			if !BestEffort(drain) || !slices.Equal(replace.DependsOn, []string{drain.ID}) {
				t.Errorf("want a best-effort drain before the server: %v %v", drain.After, replace.DependsOn)
			}
			if got := Remediated(base, inError(done, "demo-default-1")); !slices.Equal(got, []string{"demo-default-1"}) {
				t.Errorf("Remediated = %v: a resync must not read the host in ERROR", got)
			}
		}},
		{"workers-unhealthy-outage", []*Desired{remedied}, []*Observed{health(done, map[string]NodeHealth{
			"demo-default-0": {Ready: "Unknown", For: 6 * time.Minute},
			"demo-default-1": {Ready: "Unknown", For: 6 * time.Minute},
		})}, func(t *testing.T, p *Plan) {
			if !p.Empty() || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Message, "2 workers have been unhealthy") {
				t.Errorf("more unhealthy than maxUnhealthy: want nothing done and a warning: %v %v %v", addrs(p.Changes), addrs(p.Drift), p.Warnings)
			}
		}},
		{"drift-server-deleted", []*Desired{base}, []*Observed{without(done, "openstack/server/demo-default-1")}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 0 {
				t.Errorf("changes besides the drift: %v", p.Changes)
			}
			find(t, p.Drift, "openstack/server/demo-default-1", ActionCreate)
		}},
		{"drift-rule-deleted", []*Desired{base}, []*Observed{without(done, "openstack/security-group-rule/demo-gateway/ingress-tcp-22-0.0.0.0_0")},
			func(t *testing.T, p *Plan) {
				if len(p.Changes) != 0 || len(p.Drift) != 1 {
					t.Errorf("want one correction: %+v", p)
				}
			}},
		{"drift-server-resized", []*Desired{base}, []*Observed{func() *Observed {
			o := converged(base)
			for i, r := range o.Cloud {
				if r.Address() == ResourceAddress(KindServer, "demo-default-0") {
					o.Cloud[i].Attrs = Attrs{}
					for k, v := range r.Attrs {
						o.Cloud[i].Attrs[k] = v
					}
					o.Cloud[i].Attrs["flavor"] = Known("m1.xlarge")
				}
			}
			return o
		}()}, func(t *testing.T, p *Plan) {
			if c := find(t, p.Drift, "openstack/server/demo-default-0", ActionReplace); !strings.Contains(c.Reason, "outside OPKE") {
				t.Errorf("reason: %q", c.Reason)
			}
		}},
		{"drift-file-changed", []*Desired{base}, []*Observed{func() *Observed {
			o := converged(base)
			o.HostFiles = map[string]map[string]string{}
			for h, files := range o.Applied.Files {
				o.HostFiles[h] = map[string]string{}
				for p, s := range files {
					o.HostFiles[h][p] = s
				}
			}
			o.HostFiles["demo-default-0"]["/etc/kubernetes/kubelet.env"] = strings.Repeat("0", 64)
			delete(o.HostFiles["demo-default-1"], "/etc/kubernetes/kubelet.env")
			return o
		}()}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 0 {
				t.Errorf("changes besides the drift: %v", p.Changes)
			}
			find(t, p.Drift, "host/demo-default-0/etc/kubernetes/kubelet.env", ActionUpload)
			find(t, p.Drift, "host/demo-default-1/etc/kubernetes/kubelet.env", ActionUpload)
			find(t, p.Drift, "host/demo-default-0/units/kubelet.service", ActionRestart)
		}},
		{"drift-manifest-objects-deleted-or-changed", []*Desired{base}, []*Observed{func() *Observed {
			o := converged(base)
			o.ObjectDrift = map[string][]string{base.Manifests[0].Name: {"DaemonSet kube-system/kube-proxy deleted",
				"ConfigMap kube-system/kube-proxy changed (its other field managers: kubectl-edit: .data.config.conf)"}}
			return o
		}()}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 0 || len(p.Drift) != 1 {
				t.Fatalf("want one drift, the manifest applied again: changes %v, drift %v", p.Changes, p.Drift)
			}
			c := find(t, p.Drift, "kubernetes/demo/"+base.Manifests[0].Name, ActionApply)
			if c.Reason != "changed outside OPKE since the last apply: DaemonSet kube-system/kube-proxy deleted; "+
				"ConfigMap kube-system/kube-proxy changed (its other field managers: kubectl-edit: .data.config.conf)" {
				t.Errorf("reason: %q", c.Reason)
			}
		}},
		{"os-reboots-coordinated", []*Desired{base}, []*Observed{func() *Observed {
			o := converged(base)
			o.RebootRequired = []string{"demo-controller-0", "demo-default-0", "demo-default-1", "demo-gateway-0"}
			return o
		}()}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 0 || len(p.Warnings) != 0 {
				t.Fatalf("a reboot is drift, and nothing else changes: changes %v, warnings %v", p.Changes, p.Warnings)
			}
			// Each node: drain, reboot, gate, uncordon; one host at a
			// time: the controller, the workers (maxUnavailable 1), the
			// gateway last, with no drain of its own.
			var prev Change
			for _, h := range []string{"demo-controller-0", "demo-default-0", "demo-default-1"} {
				drain := find(t, p.Drift, DrainAddress(h), ActionDrain)
				reboot := find(t, p.Drift, RebootAddress(h), ActionRestart)
				gate := find(t, p.Drift, GateAddress(h), ActionCheck)
				uncordon := find(t, p.Drift, NodeAddress(h), ActionUpdate)
				if !after(p, reboot, drain) || !after(p, gate, reboot) || !after(p, uncordon, gate) {
					t.Errorf("%s: not drain, reboot, gate, uncordon in order", h)
				}
				if prev.ID != "" && !after(p, drain, prev) {
					t.Errorf("%s drains before the host before it is back", h)
				}
				if uncordon.After["unschedulable"] != Known("false") {
					t.Errorf("%s: uncordon %v", h, uncordon.After)
				}
				prev = uncordon
			}
			gw := find(t, p.Drift, RebootAddress("demo-gateway-0"), ActionRestart)
			if !after(p, gw, prev) || len(p.Drift) != 13 {
				t.Errorf("the gateway reboots alone, last: %d drift changes", len(p.Drift))
			}
		}},
		{"os-reboots-after-the-hosts-changes", []*Desired{base}, []*Observed{func() *Observed {
			o := converged(base)
			o.HostFiles = map[string]map[string]string{}
			for h, files := range o.Applied.Files {
				o.HostFiles[h] = maps.Clone(files)
			}
			o.HostFiles["demo-default-0"]["/etc/kubernetes/kubelet.env"] = strings.Repeat("0", 64)
			o.RebootRequired = []string{"demo-default-0", "demo-default-1"}
			return o
		}()}, func(t *testing.T, p *Plan) {
			// A host with a change of its own waits for the next drift
			// check; the others' reboots wait for every other change.
			if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Message, "demo-default-0 wait for a reboot") {
				t.Errorf("warnings: %v", p.Warnings)
			}
			if slices.ContainsFunc(p.Drift, func(c Change) bool { return c.Address == RebootAddress("demo-default-0") }) {
				t.Error("demo-default-0 reboots in the plan that changes its files")
			}
			drain := find(t, p.Drift, DrainAddress("demo-default-1"), ActionDrain)
			if restart := find(t, p.Drift, "host/demo-default-0/units/kubelet.service", ActionRestart); !after(p, drain, restart) {
				t.Error("demo-default-1 drains before the plan's other changes are made")
			}
		}},
		{"os-reboots-manual", []*Desired{desire(t, kv, demo(func(c *schemas.Cluster) { c.Spec.Upgrade.OSReboots = schemas.OSRebootsManual }), true)},
			[]*Observed{func() *Observed {
				o := converged(base)
				o.RebootRequired = []string{"demo-default-1"}
				return o
			}()}, func(t *testing.T, p *Plan) {
				if len(p.Changes)+len(p.Drift) != 0 || len(p.Warnings) != 1 ||
					p.Warnings[0].Message != "demo-default-1 wait for a reboot to finish an OS update; spec.upgrade.osReboots is manual: OPKE reboots none" {
					t.Errorf("manual reboots: changes %v, drift %v, warnings %v", p.Changes, p.Drift, p.Warnings)
				}
			}},
		{"removed-retain", nil, []*Observed{done}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 1 || p.Changes[0].Action != ActionForget || len(p.Warnings) != 1 {
				t.Errorf("Retain must destroy nothing, warn and forget: %+v", p)
			}
		}},
		{"removed-delete", nil, []*Observed{func() *Observed {
			o := converged(base)
			o.Applied.DeletionPolicy = "Delete"
			return o
		}()}, func(t *testing.T, p *Plan) {
			for _, c := range p.Changes {
				if c.Action != ActionDelete && c.Action != ActionForget {
					t.Errorf("deleting a cluster plans %s %s", c.Action, c.Address)
				}
			}
			net := find(t, p.Changes, "openstack/network/demo", ActionDelete)
			subnet := find(t, p.Changes, "openstack/subnet/demo", ActionDelete)
			if !slices.Contains(net.DependsOn, subnet.ID) {
				t.Errorf("the network goes before its subnet: %v", net.DependsOn)
			}
			lb := find(t, p.Changes, "openstack/load-balancer/demo-api", ActionDelete)
			if !slices.Contains(subnet.DependsOn, lb.ID) || !slices.Contains(lb.DependsOn, find(t, p.Changes, "openstack/listener/demo-api-6443", ActionDelete).ID) {
				t.Errorf("not in reverse order: subnet %v, lb %v", subnet.DependsOn, lb.DependsOn)
			}
		}},
		// A cluster deleted with a Service of type LoadBalancer left: what
		// its cloud controller manager made goes first, the floating IP
		// before its load balancer, the load balancer before the subnet
		// (its VIP port holds an address there) and the router interface.
		{"removed-delete-services", nil, []*Observed{func() *Observed {
			o := converged(base)
			o.Applied.DeletionPolicy = "Delete"
			o.Services = []Resource{
				{Kind: KindLoadBalancer, Name: "kube_service_demo_default_web", ID: "lb-web", Attrs: Attrs{"subnet": Known("demo"),
					"vip_address": Known("192.168.10.50"), "made_by": Known("cloud controller manager, Service default/web")}},
				{Kind: KindFloatingIP, Name: "kube_service_demo_default_web", ID: "fip-web", Attrs: Attrs{"address": Known("203.0.113.40"),
					"load_balancer": Known("kube_service_demo_default_web"), "made_by": Known("cloud controller manager")}},
			}
			return o
		}()}, func(t *testing.T, p *Plan) {
			lb := find(t, p.Changes, "openstack/load-balancer/kube_service_demo_default_web", ActionDelete)
			fip := find(t, p.Changes, "openstack/floating-ip/kube_service_demo_default_web", ActionDelete)
			subnet := find(t, p.Changes, "openstack/subnet/demo", ActionDelete)
			if !slices.Contains(lb.DependsOn, fip.ID) || !slices.Contains(subnet.DependsOn, lb.ID) {
				t.Errorf("not in order: lb %v (want after %s), subnet %v (want after %s)", lb.DependsOn, fip.ID, subnet.DependsOn, lb.ID)
			}
			for _, c := range p.Changes {
				if c.Address == ResourceAddress(KindInterface, "demo") && !slices.Contains(c.DependsOn, lb.ID) {
					t.Errorf("the router interface goes before the Service's load balancer: %v", c.DependsOn)
				}
			}
		}},
		// Never drift: a cluster in the fleet plans nothing of them (the
		// planner observes them only for a cluster being deleted; set here,
		// they are still left alone).
		{"services-not-drift", []*Desired{base}, []*Observed{func() *Observed {
			o := converged(base)
			o.Services = []Resource{{Kind: KindLoadBalancer, Name: "kube_service_demo_default_web", ID: "lb-web", Attrs: Attrs{"subnet": Known("demo")}}}
			return o
		}()}, func(t *testing.T, p *Plan) {
			if len(p.Changes) != 0 || len(p.Drift) != 0 {
				t.Errorf("a Service's load balancer of a cluster in the fleet: %+v", p)
			}
		}},
		{"adopted", []*Desired{base}, []*Observed{func() *Observed {
			o := converged(base)
			o.Applied = nil // built by hand, found by its tags
			return o
		}()}, func(t *testing.T, p *Plan) {
			for _, c := range p.Changes {
				if c.Phase == PhaseInfrastructure {
					t.Errorf("an adopted cluster plans %s %s", c.Action, c.Address)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Diff(tc.desired, tc.observed)
			tc.check(t, p)
			checkPlan(t, tc.name, p)
		})
	}
}

// checkPlan checks a case's plan: its graph, its JSON form and human view
// against testdata/<name>/, and that the JSON form reads back.
func checkPlan(t *testing.T, name string, p *Plan) {
	t.Helper()
	checkGraph(t, p)
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := Text(&text, data); err != nil {
		t.Fatal(err)
	}
	golden.File(t, "testdata/"+name+"/plan.json", normalize(append(data, '\n')))
	golden.File(t, "testdata/"+name+"/plan.txt", text.Bytes())
	back, err := Read(data)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(p, back); d != "" {
		t.Errorf("the JSON form does not read back (-plan +read):\n%s", d)
	}
}

// checkGraph: ids unique, every dependency names a change of the plan,
// and no cycle.
func checkGraph(t *testing.T, p *Plan) {
	t.Helper()
	deps := map[string][]string{}
	for _, c := range slices.Concat(p.Changes, p.Drift) {
		if _, dup := deps[c.ID]; dup {
			t.Fatalf("id %s twice", c.ID)
		}
		deps[c.ID] = c.DependsOn
	}
	state := map[string]int{}
	var visit func(id string)
	visit = func(id string) {
		switch state[id] {
		case 1:
			t.Fatalf("a cycle through %s", id)
		case 2:
			return
		}
		state[id] = 1
		for _, d := range deps[id] {
			if _, ok := deps[d]; !ok {
				t.Fatalf("%s depends on %s, not in the plan", id, d)
			}
			visit(d)
		}
		state[id] = 2
	}
	for id := range deps {
		visit(id)
	}
}

// after says whether c depends on d, directly or through other changes.
func after(p *Plan, c, d Change) bool {
	byID := map[string]Change{}
	for _, x := range slices.Concat(p.Changes, p.Drift) {
		byID[x.ID] = x
	}
	seen := map[string]bool{}
	todo := slices.Clone(c.DependsOn)
	for len(todo) > 0 {
		id := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if id == d.ID {
			return true
		}
		if !seen[id] {
			seen[id] = true
			todo = append(todo, byID[id].DependsOn...)
		}
	}
	return false
}

// find is the change of an address, given as an Address or its string
// form.
func find(t *testing.T, cs []Change, address any, a Action) Change {
	t.Helper()
	for _, c := range cs {
		if c.Address.String() == fmt.Sprint(address) && c.Action == a {
			return c
		}
	}
	t.Fatalf("no %s of %s", a, address)
	return Change{}
}

func wantCreate(t *testing.T, p *Plan, addresses ...string) {
	t.Helper()
	for _, a := range addresses {
		find(t, p.Changes, a, ActionCreate)
	}
}

// mustAddress parses an address a test names.
func mustAddress(s string) Address {
	a, err := ParseAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

// onlyAbout fails on a change whose address does not name host.
func onlyAbout(t *testing.T, p *Plan, host string) {
	t.Helper()
	for _, c := range slices.Concat(p.Changes, p.Drift) {
		if !strings.Contains(c.Address.String(), host) {
			t.Errorf("a change outside %s: %s %s", host, c.Action, c.Address)
		}
	}
}

func TestActionsAreExhaustive(t *testing.T) {
	for _, a := range allActions {
		if symbols[a] == "" {
			t.Errorf("%s has no symbol in the view", a)
		}
		b, err := a.MarshalText()
		if err != nil || strings.HasPrefix(string(b), "Action(") {
			t.Errorf("%d: %q %v", int(a), b, err)
		}
		var back Action
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Errorf("%s does not read back: %v", a, err)
		}
	}
	if _, err := Action(0).MarshalText(); err == nil {
		t.Error("the zero action marshals")
	}
	if n := len(allActions); Action(n) != ActionApply {
		t.Errorf("Actions lists %d actions; the last constant is %d", n, ActionApply)
	}
}

func TestReadRefusesAnotherMajorVersion(t *testing.T) {
	for _, tc := range []struct{ name, data string }{
		{"major 2", `{"format_version": "2.0", "changes": [], "drift": []}`},
		{"no version", `{"changes": []}`},
		{"an unknown action", `{"format_version": "1.0", "changes": [{"action": "explode"}]}`},
		{"not JSON", `plan`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Read([]byte(tc.data)); err == nil {
				t.Error("read")
			}
		})
	}
}

// FuzzDiff: for any valid spec and hosts' files, a cluster observed
// exactly as desired plans nothing, and the same inputs plan the same
// bytes.
func FuzzDiff(f *testing.F) {
	f.Add(uint8(1), uint8(2), uint8(0), "m1.medium", "", false, []byte("kubelet.env"))
	f.Add(uint8(3), uint8(40), uint8(7), "m1.large", "ops", true, []byte{0, 1, 2})
	f.Add(uint8(5), uint8(0), uint8(255), "", "", true, []byte{})
	base := spec(f, "prod", nil)
	f.Fuzz(func(t *testing.T, controllers, workers, pools uint8, flavor, keyName string, zones bool, files []byte) {
		c := *base
		c.Spec.Controllers.Count = []int{1, 3, 5}[int(controllers)%3]
		c.Spec.SSHKeyName = keyName
		if zones {
			c.Spec.Controllers.AvailabilityZones = []string{"az-1", "az-2"}
		}
		c.Spec.WorkerPools = nil
		for i := range int(pools) % 4 {
			p := schemas.WorkerPool{Name: fmt.Sprintf("pool%d", i), Count: (int(workers) + i) % 50, Flavor: flavor + "x"}
			if zones {
				p.AvailabilityZones = []string{"az-" + flavor}
			}
			c.Spec.WorkerPools = append(c.Spec.WorkerPools, p)
		}
		d, err := Desire(&c, Inputs{APIFloatingIP: true})
		if err != nil {
			t.Skip(err) // a spec validation refuses; Desire needs a valid one
		}
		// Hosts with files made from the fuzz input.
		for i := range min(len(files), 8) {
			h := Host{Name: fmt.Sprintf("h%d", i), Version: "v1.35.1"}
			for j, b := range files {
				h.Files = append(h.Files, File{Path: fmt.Sprintf("/etc/f%d", j), SHA256: fmt.Sprintf("%064x", b), Mode: "0644",
					Secret: b%2 == 0, Restart: []string{[]string{"kubelet.service", "etcd-member.service"}[int(b)%2]}})
			}
			d.Hosts = append(d.Hosts, h)
		}
		o := converged(d)
		p := Diff([]*Desired{d}, []*Observed{o})
		if !p.Empty() || len(p.Warnings) > 0 {
			t.Fatalf("Diff(x, x) plans %d changes, %d corrections: %+v", len(p.Changes), len(p.Drift), p)
		}
		a, _ := json.Marshal(Diff([]*Desired{d}, nil))
		b, _ := json.Marshal(Diff([]*Desired{d}, nil))
		if !bytes.Equal(a, b) {
			t.Fatal("the same inputs planned different bytes")
		}
	})
}

// TestPlanOf: a cluster's part of a plan holds its changes, drift and
// warnings, and nothing of another cluster.
func TestPlanOf(t *testing.T) {
	t.Parallel()
	p := &Plan{FormatVersion: FormatVersion, Commit: "c0ffee", StateRevision: 7,
		Changes:  []Change{{Cluster: "a", Address: mustAddress("openstack/network/a"), Action: ActionCreate}, {Cluster: "b", Address: mustAddress("openstack/network/b"), Action: ActionCreate}},
		Drift:    []Change{{Cluster: "b", Address: mustAddress("openstack/server/b-worker-0"), Action: ActionCreate}},
		Warnings: []Warning{{Cluster: "a", Message: "a's"}, {Cluster: "b", Message: "b's"}}}
	for _, tc := range []struct {
		name string
		want *Plan
	}{
		{"a", &Plan{FormatVersion: FormatVersion, Commit: "c0ffee", StateRevision: 7, Changes: p.Changes[:1], Drift: []Change{}, Warnings: p.Warnings[:1]}},
		{"b", &Plan{FormatVersion: FormatVersion, Commit: "c0ffee", StateRevision: 7, Changes: p.Changes[1:], Drift: p.Drift, Warnings: p.Warnings[1:]}},
		{"c", &Plan{FormatVersion: FormatVersion, Commit: "c0ffee", StateRevision: 7, Changes: []Change{}, Drift: []Change{}, Warnings: []Warning{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, p.Of(tc.name), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("plan of %s (-want +got):\n%s", tc.name, d)
			}
		})
	}
}

// TestGatewaySSHSources: the gateway's SSH rule is one per source the spec
// names, anywhere (0.0.0.0/0) when it names none.
func TestGatewaySSHSources(t *testing.T) {
	kv := statetest.Open(t)
	rules := func(sources ...string) []string {
		d := desire(t, kv, spec(t, "demo", func(c *schemas.Cluster) { c.Spec.Gateway.SSHSources = sources }), true)
		var out []string
		for _, r := range d.Infra {
			if r.Kind == KindRule && strings.HasPrefix(r.Name, "demo-gateway/") {
				out = append(out, r.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		sources []string
		want    []string
	}{
		{nil, []string{"demo-gateway/ingress-tcp-22-0.0.0.0_0"}},
		{[]string{"203.0.113.0/24", "198.51.100.7/32"}, []string{"demo-gateway/ingress-tcp-22-198.51.100.7_32", "demo-gateway/ingress-tcp-22-203.0.113.0_24"}},
	} {
		if d := cmp.Diff(tc.want, rules(tc.sources...)); d != "" {
			t.Errorf("sources %v (-want +got):\n%s", tc.sources, d)
		}
	}
}

// demoDesired is the demo cluster's desired state as rendered, with
// unsettled the files whose content is known only after apply.
func demoDesired(t *testing.T, unsettled map[string]map[string]bool) *Desired {
	t.Helper()
	c := spec(t, "demo", nil)
	out, err := render.Cluster(context.Background(), statetest.Open(t), c, render.Options{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Desire(c, Inputs{UserData: out.UserData, Assets: out.Assets, APIFloatingIP: true, UnsettledFiles: unsettled})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestUnsettledManifest: a manifest whose bytes carry material the plan
// could only issue in memory is planned known after apply, also when the
// cluster already applied one of that name (the apply checks every known
// value against its render, so a known one would be refused there).
func TestUnsettledManifest(t *testing.T) {
	t.Parallel()
	const file = "/etc/kubernetes/addons/05-coredns.yaml"
	d := demoDesired(t, map[string]map[string]bool{"demo-controller-0": {file: true}})
	o := converged(d)
	p := Diff([]*Desired{d}, []*Observed{o})
	ch := find(t, p.Changes, ManifestAddress("demo", "05-coredns.yaml"), ActionApply)
	if !ch.After["sha256"].Unknown || ch.Reason != "carries keys or certificates issued at apply" || ch.Before["sha256"].Value == "" {
		t.Errorf("the unsettled manifest's change: %+v", ch)
	}
	if _, ok := addressesOf(p)["kubernetes/demo/00-kube-proxy.yaml"]; ok {
		t.Error("a settled manifest, applied as it is, is planned again")
	}
}

// TestManifestLeavesTheRender: a manifest applied before and no longer
// rendered (its addon left the spec) is deleted, after every apply of the
// cluster's manifests, so that an object moved to another manifest is
// applied there before the old one's objects are pruned.
func TestManifestLeavesTheRender(t *testing.T) {
	t.Parallel()
	d := demoDesired(t, nil)
	o := converged(d)
	o.Applied.Manifests["09-dashboard.yaml"] = "0ld"
	o.Applied.Manifests["05-coredns.yaml"] = "changed"
	p := Diff([]*Desired{d}, []*Observed{o})
	del := find(t, p.Changes, ManifestAddress("demo", "09-dashboard.yaml"), ActionDelete)
	if del.Before["sha256"].Value != "0ld" || del.Phase != PhaseHosts || !strings.Contains(del.Reason, "no longer rendered") {
		t.Errorf("the deletion: %+v", del)
	}
	apply := find(t, p.Changes, ManifestAddress("demo", "05-coredns.yaml"), ActionApply)
	if !slices.Contains(del.DependsOn, apply.ID) {
		t.Errorf("the deletion depends on %v, not on the apply %s", del.DependsOn, apply.ID)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings: %v", p.Warnings)
	}
	// Printed, the deletion is a prune of the cluster's objects, not a
	// resource of the cloud deleted.
	checkPlan(t, "addon-removed", p)
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := Text(&text, data); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "0 to delete,") || !strings.Contains(text.String(), ", 1 manifests to prune.") {
		t.Errorf("the closing line: %s", text.String()[strings.LastIndex(strings.TrimSuffix(text.String(), "\n"), "\n")+1:])
	}
}

// addressesOf are the addresses a plan changes.
func addressesOf(p *Plan) map[string]bool {
	out := map[string]bool{}
	for _, c := range slices.Concat(p.Changes, p.Drift) {
		out[c.Address.String()] = true
	}
	return out
}

// addrs are the changes' addresses, in order, to print.
func addrs(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Action.String()+" "+c.Address.String())
	}
	return out
}

// TestRotationPlans plans a CA rotation's phases, each from the cluster
// converged at the phase before (its own store: each render issues).
// Every phase is a roll of files and restarts, no server touched (no
// CA goes into user_data), and ends with the workloads' restart when
// what the controllers trust changed.
func TestRotationPlans(t *testing.T) {
	kv := statetest.Open(t)
	at := func(g int, phase schemas.RotationPhase) *Desired {
		return desire(t, kv, spec(t, "demo", func(c *schemas.Cluster) {
			if g > 1 {
				c.Spec.PKI = &schemas.PKI{Generation: g, Phase: phase}
			}
		}), true)
	}
	prev := at(1, schemas.RotationComplete)
	for _, step := range []struct {
		name       string
		generation int
		phase      schemas.RotationPhase
	}{
		{"ca-rotation-trust", 2, schemas.RotationTrust},
		{"ca-rotation-reissue", 2, schemas.RotationReissue},
		{"ca-rotation-complete", 2, schemas.RotationComplete},
	} {
		next := at(step.generation, step.phase)
		p := Diff([]*Desired{next}, []*Observed{converged(prev)})
		t.Run(step.name, func(t *testing.T) {
			restart := find(t, p.Changes, WorkloadsAddress("demo"), ActionRestart)
			for _, c := range p.Changes {
				if c.Phase == PhaseInfrastructure {
					t.Errorf("a rotation changes %s %s", c.Action, c.Address)
				}
				if c.Address.Target == TargetGate && !slices.Contains(restart.DependsOn, c.ID) {
					t.Errorf("the workloads restart before %s's gate", c.Address.Host)
				}
			}
			for _, h := range []string{"demo-controller-0", "demo-default-0"} {
				find(t, p.Changes, "host/"+h+"/etc/kubernetes/pki/ca.crt", ActionUpload)
				find(t, p.Changes, GateAddress(h), ActionCheck)
			}
			checkPlan(t, step.name, p)
		})
		prev = next
	}
	// Leaves renewed near expiry: a roll, but nothing pods trust changed.
	p := Diff([]*Desired{desire(t, kv, spec(t, "demo", func(c *schemas.Cluster) { c.Spec.PKI = &schemas.PKI{Generation: 2} }), true)},
		[]*Observed{converged(prev)})
	if !p.Empty() {
		t.Errorf("after the rotation: %d changes", len(p.Changes))
	}
}

// TestManifestReasonSaysItsObjects: a changed manifest told which of its
// objects its apply changes is planned with them as its reason; one not
// told says its content changed.
func TestManifestReasonSaysItsObjects(t *testing.T) {
	t.Parallel()
	d := demoDesired(t, nil)
	o := converged(d)
	o.Applied.Manifests[d.Manifests[0].Name] = "0ld"
	o.Applied.Manifests[d.Manifests[1].Name] = "0ld"
	d.Manifests[0].Objects = []string{"DaemonSet kube-system/kube-proxy changed", "ConfigMap kube-system/extra added"}
	p := Diff([]*Desired{d}, []*Observed{o})
	told := find(t, p.Changes, ManifestAddress("demo", d.Manifests[0].Name), ActionApply)
	if told.Reason != "content changed: DaemonSet kube-system/kube-proxy changed, ConfigMap kube-system/extra added" {
		t.Errorf("the told manifest's reason: %q", told.Reason)
	}
	if other := find(t, p.Changes, ManifestAddress("demo", d.Manifests[1].Name), ActionApply); other.Reason != "content changed" {
		t.Errorf("the other manifest's reason: %q", other.Reason)
	}
}

// TestAPIAllowedCIDRs: the API's listener lets in the spec's
// api.allowedCIDRs and the cluster's own network, anywhere when the spec
// names none; setting them changes the listener in place, and nothing
// else.
func TestAPIAllowedCIDRs(t *testing.T) {
	kv := statetest.Open(t)
	with := func(cidrs ...string) *Desired {
		return desire(t, kv, spec(t, "demo", func(c *schemas.Cluster) {
			if cidrs != nil {
				c.Spec.API = &schemas.API{AllowedCIDRs: cidrs}
			}
		}), true)
	}
	listener := func(d *Desired) Resource {
		for _, r := range d.Infra {
			if r.Kind == KindListener {
				return r
			}
		}
		t.Fatal("no listener desired")
		return Resource{}
	}
	open := with()
	if got := listener(open).Attrs["allowed_cidrs"].Value; got != "" {
		t.Errorf("no api.allowedCIDRs: allowed_cidrs %q, want none (anywhere)", got)
	}
	closed := with("203.0.113.0/24", "198.51.100.0/24")
	host := spec(t, "demo", nil).Spec.Network.HostCIDR
	if got, want := listener(closed).Attrs["allowed_cidrs"].Value, JoinCIDRs([]string{"198.51.100.0/24", "203.0.113.0/24", host}); got != want {
		t.Errorf("allowed_cidrs %q, want %q", got, want)
	}
	p := Diff([]*Desired{closed}, []*Observed{converged(open)})
	var got []string
	for _, c := range p.Changes {
		got = append(got, c.Action.String()+" "+c.Address.String())
	}
	want := []string{"update " + ResourceAddress(KindListener, listener(closed).Name).String()}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("plan (-want +got):\n%s", d)
	}
}

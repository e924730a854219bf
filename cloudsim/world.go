package cloudsim

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"opke.dev/opke/cloudsim/kubestub"
)

// world is the whole state of the simulated cloud. It is serialised as is
// into state.json; maps are keyed by id.
type world struct {
	Seq int64 `json:"seq"`

	Projects map[string]*project  `json:"projects"`
	Users    map[string]*user     `json:"users"`
	AppCreds map[string]*appCred  `json:"app_creds"`
	Tokens   map[string]*token    `json:"tokens"`
	Flavors  map[string]*flavor   `json:"flavors"`
	Images   map[string]*image    `json:"images"`
	Keypairs map[string]*keypair  `json:"keypairs"` // by user id + "/" + name
	Quotas   map[string]*quotaSet `json:"quotas"`   // by project id

	Hypervisors  []string                `json:"hypervisors"`
	Servers      map[string]*server      `json:"servers"`
	ServerGroups map[string]*serverGroup `json:"server_groups"`

	Networks     map[string]*network      `json:"networks"`
	Subnets      map[string]*subnet       `json:"subnets"`
	Routers      map[string]*router       `json:"routers"`
	Ports        map[string]*port         `json:"ports"`
	SecGroups    map[string]*secGroup     `json:"security_groups"`
	SecRules     map[string]*secRule      `json:"security_group_rules"`
	FloatingIPs  map[string]*floatingIP   `json:"floating_ips"`
	LoadBalancer map[string]*loadBalancer `json:"load_balancers"`
	Listeners    map[string]*listener     `json:"listeners"`
	Pools        map[string]*lbPool       `json:"pools"`
	Members      map[string]*member       `json:"members"`
	Monitors     map[string]*monitor      `json:"health_monitors"`
	Accounts     map[string]*account      `json:"accounts"` // Swift, by AUTH_<project id>
	Volumes      map[string]*volume       `json:"volumes"`
	Snapshots    map[string]*snapshot     `json:"snapshots"`

	// PeerPorts are the loopback ports standing for the simulated
	// addresses etcd members dial themselves (their peer URLs), by
	// "<network id>/<ip>:<port>", kept so a member keeps its URL across
	// restarts.
	PeerPorts map[string]int `json:"peer_ports"`
	// Kube holds each Kubernetes cluster's objects (cordons, pods,
	// disruption budgets), by the cluster's key: the digest of the CA
	// bundle its first kubelet started with (Sim.kubeKey).
	Kube map[string]*kubestub.Objects `json:"kube"`
	// KubeTrust maps the digest of every CA certificate a cluster's hosts
	// have trusted to the cluster's key: a CA rotation changes the
	// bundle, the cluster stays the one it trusted before.
	KubeTrust map[string]string `json:"kube_trust,omitempty"`

	// Pending are state changes due at a time: BUILD -> ACTIVE and the like.
	Pending []pendingChange `json:"pending"`

	// DemoProject and AdminProject name the seeded projects.
	DemoProject  string `json:"demo_project"`
	AdminProject string `json:"admin_project"`
	DemoUser     string `json:"demo_user"`
	AdminUser    string `json:"admin_user"`

	// boot runs a server's first boot as it turns ACTIVE; an error puts it
	// in ERROR. release forgets a deleted server's host. Set by the Sim.
	boot    func(*server) error
	release func(id string)
}

// meta is what every resource carries.
type meta struct {
	Created time.Time `json:"created_at"`
	Updated time.Time `json:"updated_at"`
}

type pendingChange struct {
	Due  time.Time `json:"due"`
	Kind string    `json:"kind"` // "server-active", "lb-active", "lb-deleted", "volume-settle", "snapshot-settle"
	ID   string    `json:"id"`
}

func (w *world) init() {
	initMap(&w.Projects)
	initMap(&w.Users)
	initMap(&w.AppCreds)
	initMap(&w.Tokens)
	initMap(&w.Flavors)
	initMap(&w.Images)
	initMap(&w.Keypairs)
	initMap(&w.Quotas)
	initMap(&w.Servers)
	initMap(&w.ServerGroups)
	initMap(&w.Networks)
	initMap(&w.Subnets)
	initMap(&w.Routers)
	initMap(&w.Ports)
	initMap(&w.SecGroups)
	initMap(&w.SecRules)
	initMap(&w.FloatingIPs)
	initMap(&w.LoadBalancer)
	initMap(&w.Listeners)
	initMap(&w.Pools)
	initMap(&w.Members)
	initMap(&w.Monitors)
	initMap(&w.Accounts)
	initMap(&w.Volumes)
	initMap(&w.Snapshots)
	initMap(&w.PeerPorts)
	initMap(&w.Kube)
}

func initMap[V any](m *map[string]V) {
	if *m == nil {
		*m = map[string]V{}
	}
}

func (w *world) next() int64 { w.Seq++; return w.Seq }

func (w *world) meta(now time.Time) meta {
	return meta{Created: now.UTC().Truncate(time.Second), Updated: now.UTC().Truncate(time.Second)}
}

// The seeded names; the conformance suite seeds a real cloud with the same.
const (
	RegionName       = "RegionOne"
	PublicNetwork    = "public"
	DemoProjectName  = "demo"
	AdminProjectName = "admin"
	DefaultDomain    = "default"
	publicCIDR       = "203.0.113.0/24"
	// imageMinDisk is the seeded image's min_disk in GB: the root disk
	// of a server whose flavor gives none.
	imageMinDisk = 10
)

// seedWorld builds the state of a fresh cloud.
func seedWorld(now time.Time, hypervisors int) *world {
	w := &world{}
	w.init()
	for i := range hypervisors {
		w.Hypervisors = append(w.Hypervisors, "compute-"+itoa(i))
	}
	admin := &project{ID: newHex(), Name: AdminProjectName, DomainID: DefaultDomain, Enabled: true}
	demo := &project{ID: newHex(), Name: DemoProjectName, DomainID: DefaultDomain, Enabled: true}
	w.Projects[admin.ID], w.Projects[demo.ID] = admin, demo
	w.AdminProject, w.DemoProject = admin.ID, demo.ID
	au := &user{ID: newHex(), Name: "admin", Password: newSecret(12), DomainID: DefaultDomain, ProjectID: admin.ID, Roles: []string{"admin", "member", "reader"}}
	du := &user{ID: newHex(), Name: "demo", Password: newSecret(12), DomainID: DefaultDomain, ProjectID: demo.ID, Roles: []string{"member", "reader", "load-balancer_member"}}
	w.Users[au.ID], w.Users[du.ID] = au, du
	w.AdminUser, w.DemoUser = au.ID, du.ID

	for i, f := range []struct {
		name            string
		vcpus, ram, dsk int
	}{{"m1.small", 1, 2048, 20}, {"m1.medium", 2, 4096, 40}, {"m1.large", 4, 8192, 80}} {
		id := itoa(i + 2)
		w.Flavors[id] = &flavor{ID: id, Name: f.name, VCPUs: f.vcpus, RAM: f.ram, Disk: f.dsk, IsPublic: true}
	}
	for _, name := range []string{"flatcar", "fedora-coreos"} {
		img := &image{meta: w.meta(now), Seq: w.next(), ID: newID(), Name: name, Status: "active", Visibility: "public",
			DiskFormat: "qcow2", ContainerFormat: "bare", Size: 1 << 30, MinDisk: imageMinDisk, Owner: admin.ID}
		w.Images[img.ID] = img
	}
	for _, p := range []string{admin.ID, demo.ID} {
		w.Quotas[p] = defaultQuotas()
	}
	pub := &network{common: newCommon(admin.ID, now), Name: PublicNetwork, External: true, AdminStateUp: true, Status: "ACTIVE",
		MTU: 1500, PortSecurity: true, AZHints: []string{}, AZs: []string{"nova"}}
	w.Networks[pub.ID] = pub
	pfx := netip.MustParsePrefix(publicCIDR)
	sub := &subnet{common: newCommon(admin.ID, now), Name: "public-subnet", NetworkID: pub.ID, CIDR: publicCIDR, IPVersion: 4,
		GatewayIP: addrAt(pfx, 1).String(), AllocationPools: []allocationPool{{Start: addrAt(pfx, 10).String(), End: addrAt(pfx, 250).String()}},
		DNSNameservers: []string{}, HostRoutes: []any{}}
	w.Subnets[sub.ID] = sub
	pub.Subnets = []string{sub.ID}
	return w
}

// tick applies the pending changes that are due; it tells whether any was.
func (w *world) tick(now time.Time) bool {
	if len(w.Pending) == 0 {
		return false
	}
	keep := w.Pending[:0]
	var due []pendingChange
	for _, p := range w.Pending {
		if p.Due.After(now) {
			keep = append(keep, p)
		} else {
			due = append(due, p)
		}
	}
	w.Pending = keep
	for _, p := range due {
		switch p.Kind {
		case "server-active":
			w.activateServer(p.ID, now)
		case "lb-active":
			w.activateLB(p.ID, now)
		case "lb-deleted":
			w.finishLBDelete(p.ID)
		case "volume-settle":
			w.settleVolume(p.ID, now)
		case "snapshot-settle":
			w.settleSnapshot(p.ID, now)
		}
	}
	return len(due) > 0
}

// schedule makes a change due after delay. Even with none, it is applied
// by the next request's tick, not this one: the answer to a write shows
// the state the write left (PENDING_CREATE, BUILD), as OpenStack's do.
func (w *world) schedule(now time.Time, delay time.Duration, kind, id string) {
	w.Pending = append(w.Pending, pendingChange{Due: now.Add(delay), Kind: kind, ID: id})
}

// Tag filters shared by Nova and Neutron: tags (all of), tags-any,
// not-tags (not all of), not-tags-any (none of).
type tagFilter struct{ all, anyOf, notAll, notAny []string }

func parseTagFilter(q map[string][]string) tagFilter {
	split := func(k string) []string {
		var out []string
		for _, v := range q[k] {
			for _, t := range strings.Split(v, ",") {
				if t != "" {
					out = append(out, t)
				}
			}
		}
		return out
	}
	return tagFilter{all: split("tags"), anyOf: split("tags-any"), notAll: split("not-tags"), notAny: split("not-tags-any")}
}

func (f tagFilter) match(tags []string) bool {
	has := func(t string) bool { return slices.Contains(tags, t) }
	for _, t := range f.all {
		if !has(t) {
			return false
		}
	}
	if len(f.anyOf) > 0 && !slices.ContainsFunc(f.anyOf, has) {
		return false
	}
	if len(f.notAll) > 0 && !slices.ContainsFunc(f.notAll, func(t string) bool { return !has(t) }) {
		return false
	}
	if slices.ContainsFunc(f.notAny, has) {
		return false
	}
	return true
}

// addrAt returns the n-th address of p.
func addrAt(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a
}

func itoa(i int) string { return strconv.Itoa(i) }

// newHex is a Keystone-style id: 32 hex digits.
func newHex() string { return newSecret(16) }

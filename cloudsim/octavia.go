package cloudsim

import (
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// lbCommon holds what every Octavia object carries.
type lbCommon struct {
	ID                 string   `json:"id"`
	Name               string   `json:"name"`
	Description        string   `json:"description"`
	ProjectID          string   `json:"project_id"`
	TenantID           string   `json:"tenant_id"`
	AdminStateUp       bool     `json:"admin_state_up"`
	ProvisioningStatus string   `json:"provisioning_status"`
	OperatingStatus    string   `json:"operating_status"`
	Tags               []string `json:"tags"`
	Created            lbTime   `json:"created_at"`
	Updated            lbTime   `json:"updated_at"`
	// LB is the load balancer the object belongs to (its own id for one);
	// world.init derives it again from the API fields after a restore.
	LB string `json:"-"`
}

func (c *lbCommon) lbBase() *lbCommon { return c }

// lbTime is a time as Octavia writes it: UTC, with no zone suffix.
type lbTime time.Time

const lbTimeLayout = "2006-01-02T15:04:05"

// MarshalJSON implements json.Marshaler.
func (t lbTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(lbTimeLayout) + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *lbTime) UnmarshalJSON(b []byte) error {
	v, err := time.Parse(`"`+lbTimeLayout+`"`, string(b))
	if err != nil {
		return fmt.Errorf("octavia time: %w", err)
	}
	*t = lbTime(v)
	return nil
}

type idRef struct {
	ID string `json:"id"`
}

type loadBalancer struct {
	lbCommon
	VIPAddress   string  `json:"vip_address"`
	VIPPortID    string  `json:"vip_port_id"`
	VIPSubnetID  string  `json:"vip_subnet_id"`
	VIPNetworkID string  `json:"vip_network_id"`
	Provider     string  `json:"provider"`
	FlavorID     *string `json:"flavor_id"`
	AZ           *string `json:"availability_zone"`
	Listeners    []idRef `json:"listeners"`
	Pools        []idRef `json:"pools"`
	AddlVIPs     []any   `json:"additional_vips"`
	VIPQoS       *string `json:"vip_qos_policy_id"`
}

type listener struct {
	lbCommon
	Protocol      string  `json:"protocol"`
	ProtocolPort  int     `json:"protocol_port"`
	DefaultPoolID *string `json:"default_pool_id"`
	LoadBalancers []idRef `json:"loadbalancers"`
	ConnLimit     int     `json:"connection_limit"`
	AllowedCIDRs  []any   `json:"allowed_cidrs"`
	// Octavia's idle timeouts, in milliseconds (its defaults: 50 s of
	// client and member inactivity, 5 s to connect to a member).
	TimeoutClientData    int `json:"timeout_client_data"`
	TimeoutMemberData    int `json:"timeout_member_data"`
	TimeoutMemberConnect int `json:"timeout_member_connect"`
	TimeoutTCPInspect    int `json:"timeout_tcp_inspect"`
}

// listenerTimeouts are a listener's timeout fields, each 0 to 24 hours
// in milliseconds as Octavia bounds them.
var listenerTimeouts = []string{"timeout_client_data", "timeout_member_data", "timeout_member_connect", "timeout_tcp_inspect"}

func (l *listener) timeout(key string) *int {
	switch key {
	case "timeout_client_data":
		return &l.TimeoutClientData
	case "timeout_member_data":
		return &l.TimeoutMemberData
	case "timeout_member_connect":
		return &l.TimeoutMemberConnect
	default:
		return &l.TimeoutTCPInspect
	}
}

type lbPool struct {
	lbCommon
	Protocol      string  `json:"protocol"`
	LBAlgorithm   string  `json:"lb_algorithm"`
	Listeners     []idRef `json:"listeners"`
	LoadBalancers []idRef `json:"loadbalancers"`
	Members       []idRef `json:"members"`
	MonitorID     *string `json:"healthmonitor_id"`
	Persistence   any     `json:"session_persistence"`
}

type member struct {
	lbCommon
	PoolID       string `json:"pool_id"`
	Address      string `json:"address"`
	ProtocolPort int    `json:"protocol_port"`
	SubnetID     string `json:"subnet_id"`
	Weight       int    `json:"weight"`
	Backup       bool   `json:"backup"`
	MonitorAddr  any    `json:"monitor_address"`
	MonitorPort  any    `json:"monitor_port"`
}

type monitor struct {
	lbCommon
	PoolID     string  `json:"-"` // Pools[0], kept apart for lookups
	Pools      []idRef `json:"pools"`
	Type       string  `json:"type"`
	Delay      int     `json:"delay"`
	Timeout    int     `json:"timeout"`
	MaxRetries int     `json:"max_retries"`
	MaxDown    int     `json:"max_retries_down"`
	URLPath    string  `json:"url_path,omitempty"`
	HTTPMethod string  `json:"http_method,omitempty"`
	Expected   string  `json:"expected_codes,omitempty"`
}

func octaviaError(rw http.ResponseWriter, code int, msg string) {
	writeJSON(rw, code, map[string]any{"faultcode": map[bool]string{true: "Client", false: "Server"}[code < 500], "faultstring": msg, "debuginfo": nil})
}

func newLBCommon(r *request, b map[string]any, lb string) lbCommon {
	t := lbTime(r.now.UTC().Truncate(time.Second))
	tags := strList(b, "tags")
	return lbCommon{ID: newID(), Name: str(b, "name"), Description: str(b, "description"), ProjectID: r.tok.ProjectID, TenantID: r.tok.ProjectID,
		AdminStateUp: boolOr(b, "admin_state_up", true), ProvisioningStatus: "PENDING_CREATE", OperatingStatus: "OFFLINE",
		Tags: orEmpty(tags), Created: t, Updated: t, LB: lb}
}

// Octavia's default policy: no access to the load-balancer API without
// one of its roles (https://docs.openstack.org/octavia/zed/configuration/policy.html):
// the observers read, load-balancer_member reads and writes, the admins
// do all; a project's member role alone is not enough.
var (
	octaviaReaders = []string{"load-balancer_observer", "load-balancer_global_observer", "load-balancer_member", "load-balancer_admin", "admin"}
	octaviaWriters = []string{"load-balancer_member", "load-balancer_admin", "admin"}
	octaviaQuotas  = []string{"load-balancer_quota_admin", "load-balancer_admin", "admin"}
)

// octaviaPolicy answers 403 as Octavia does to a token with none of the
// roles, else runs h.
func octaviaPolicy(roles []string, h handlerFunc) handlerFunc {
	return func(rw http.ResponseWriter, r *request) {
		if !slices.ContainsFunc(r.tok.Roles, func(role string) bool { return slices.Contains(roles, role) }) {
			writeJSON(rw, http.StatusForbidden, map[string]any{"faultcode": "Client",
				"faultstring": "Policy does not allow this request to be performed.", "debuginfo": nil})
			return
		}
		h(rw, r)
	}
}

func (s *Sim) octaviaRoutes(mux *http.ServeMux) {
	route := func(pattern string, h handlerFunc) {
		roles := octaviaWriters
		switch {
		case strings.HasPrefix(pattern, "GET "):
			roles = octaviaReaders
		case strings.Contains(pattern, "quotas/"):
			roles = octaviaQuotas
		}
		s.route(mux, pattern, octaviaPolicy(roles, h))
	}
	for _, v := range []string{"v2", "v2.0"} {
		base := "/load-balancer/" + v + "/lbaas/"
		route("GET "+base+"loadbalancers", s.lbList("loadbalancers", func(w *world) []any { return values(w.LoadBalancer) }))
		route("POST "+base+"loadbalancers", s.createLB)
		route("GET "+base+"loadbalancers/{id}", s.lbGet("loadbalancer"))
		route("PUT "+base+"loadbalancers/{id}", s.updateLBObject("loadbalancer"))
		route("DELETE "+base+"loadbalancers/{id}", s.deleteLB)
		route("GET "+base+"loadbalancers/{id}/status", s.probingMembers(s.lbStatusTree))
		// Octavia answers quotas at /v2/lbaas/quotas and, as gophercloud
		// asks, at /v2/quotas.
		for _, q := range []string{base + "quotas/{project}", "/load-balancer/" + v + "/quotas/{project}"} {
			route("GET "+q, s.getOctaviaQuotas)
			route("PUT "+q, s.putOctaviaQuotas)
		}
		// The children of a load balancer share one shape of routes.
		for _, c := range []struct {
			kind, plural, path string
			all                func(*world) []any
			create             handlerFunc
		}{
			{"listener", "listeners", "listeners", func(w *world) []any { return values(w.Listeners) }, s.createListener},
			{"pool", "pools", "pools", func(w *world) []any { return values(w.Pools) }, s.createPool},
			{"member", "members", "pools/{pool}/members", func(w *world) []any { return values(w.Members) }, s.createMember},
			{"healthmonitor", "healthmonitors", "healthmonitors", func(w *world) []any { return values(w.Monitors) }, s.createMonitor},
		} {
			list, get := s.lbList(c.plural, c.all), s.lbGet(c.kind)
			if c.kind == "member" {
				list, get = s.probingMembers(list), s.probingMembers(get)
			}
			route("GET "+base+c.path, list)
			route("POST "+base+c.path, c.create)
			route("GET "+base+c.path+"/{id}", get)
			route("PUT "+base+c.path+"/{id}", s.updateLBObject(c.kind))
			route("DELETE "+base+c.path+"/{id}", s.deleteLBChild(c.kind))
		}
	}
	for _, v := range []string{"v2", "v2.0"} {
		route("PUT /load-balancer/"+v+"/lbaas/pools/{pool}/members", s.batchMembers)
	}
	mux.HandleFunc("GET /load-balancer", s.lbVersions)
	mux.HandleFunc("GET /load-balancer/{$}", s.lbVersions)
}

// probingMembers sets the operating status of the members a request
// reads (a pool's, or one) with a health monitor before h reads them, as
// the monitor's probes would find them: ONLINE when their in-process host
// listens on the member's port, ERROR when it does not (no host there, or
// nothing running on the port). Without a monitor a member stays
// NO_MONITOR. Real hosts have real probes (realhosts.go); an attached
// cloud's Octavia has its own.
func (s *Sim) probingMembers(h handlerFunc) handlerFunc {
	return func(rw http.ResponseWriter, r *request) {
		if s.real == nil && s.attached == nil {
			var ms []*member
			if pool := r.w.Pools[r.PathValue("pool")]; pool != nil {
				for _, ref := range pool.Members {
					if m := r.w.Members[ref.ID]; m != nil {
						ms = append(ms, m)
					}
				}
			}
			if id := r.PathValue("id"); id != "" {
				ms = slices.DeleteFunc(ms, func(m *member) bool { return m.ID != id })
			}
			s.probeMembers(r.w, ms)
		}
		h(rw, r)
	}
}

// probeMembers is probingMembers' work on members; the caller holds s.mu.
// The ports are scanned once, for the members' networks only: a probe per
// request over every port of a 10,000-cluster cloud was most of a
// listing's time.
func (s *Sim) probeMembers(w *world, members []*member) {
	networkOf := map[*member]string{}
	networks := map[string]bool{}
	for _, m := range members {
		if m.ProvisioningStatus != "ACTIVE" {
			continue
		}
		pool := w.Pools[m.PoolID]
		if pool == nil || pool.MonitorID == nil || w.Monitors[*pool.MonitorID] == nil {
			continue
		}
		network := ""
		if sn := w.Subnets[m.SubnetID]; sn != nil {
			network = sn.NetworkID
		} else if lb := w.LoadBalancer[m.LB]; lb != nil {
			network = lb.VIPNetworkID
		}
		networkOf[m], networks[network] = network, true
	}
	if len(networkOf) == 0 {
		return
	}
	servers := map[string]string{} // network/ip -> ACTIVE server
	for _, p := range w.Ports {
		if !networks[p.NetworkID] {
			continue
		}
		if sv := w.Servers[p.DeviceID]; sv != nil && sv.Status == "ACTIVE" {
			for _, f := range p.FixedIPs {
				servers[p.NetworkID+"/"+f.IPAddress] = sv.ID
			}
		}
	}
	for m, network := range networkOf {
		status := "ERROR"
		if id := servers[network+"/"+m.Address]; id != "" {
			// Every host serves SSH; other ports only what it runs.
			s.hostsMu.Lock()
			h := s.hosts[id]
			s.hostsMu.Unlock()
			if m.ProtocolPort == 22 || h != nil && h.listening(m.ProtocolPort) != "" {
				status = "ONLINE"
			}
		}
		if m.OperatingStatus != status {
			m.OperatingStatus = status
			s.changed()
		}
	}
}

func values[V any](m map[string]V) []any {
	out := make([]any, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

type lbObject interface{ lbBase() *lbCommon }

// lbKindNames are the names Octavia's messages give each kind.
var lbKindNames = map[string]string{"loadbalancer": "Load Balancer", "listener": "Listener", "pool": "Pool",
	"member": "Member", "healthmonitor": "Health Monitor"}

// lbVersionDates are the minor versions of Octavia's v2 API that Zed's
// serves (octavia/api/root_controller.py of 11.0.0), with their dates:
// clients take the newest as the features they may use (the cloud
// controller manager sets listeners' timeouts from 2.1, tags from 2.5,
// allowed_cidrs from 2.12), so a list shorter than a real cloud's would
// turn them off.
var lbVersionDates = []string{"2016-12-11", "2018-04-20", "2018-07-31", "2018-12-18", "2018-12-19", "2019-01-21",
	"2019-01-25", "2018-01-25T12:00:00Z", "2019-02-12", "2019-03-04", "2019-03-05", "2019-06-24", "2019-09-11", "2019-09-13",
	"2019-11-10", "2020-03-10", "2020-03-15", "2020-04-29", "2020-04-29T01:00:00Z", "2020-05-12", "2020-08-02", "2020-09-03",
	"2020-09-04", "2020-09-07", "2020-10-15", "2021-10-02", "2022-08-29"}

func (s *Sim) lbVersions(rw http.ResponseWriter, r *http.Request) {
	var versions []any
	for i, d := range lbVersionDates {
		status := "SUPPORTED"
		if i == len(lbVersionDates)-1 {
			status = "CURRENT"
		}
		if !strings.Contains(d, "T") {
			d += "T00:00:00Z"
		}
		versions = append(versions, map[string]any{"id": fmt.Sprintf("v2.%d", i), "status": status, "updated": d,
			"links": []any{map[string]any{"rel": "self", "href": requestBase(r, s) + "/load-balancer/v2"}}})
	}
	writeJSON(rw, http.StatusOK, map[string]any{"versions": versions})
}

func (s *Sim) lbList(plural string, all func(*world) []any) handlerFunc {
	return func(rw http.ResponseWriter, r *request) {
		q := r.URL.Query()
		limit, ok := parseLimit(rw, q.Get("limit"), octaviaError)
		if !ok {
			return
		}
		tags := parseTagFilter(q)
		filters := map[string][]string{}
		for k, v := range q {
			if !slices.Contains(listKeys, k) {
				filters[k] = v
			}
		}
		// Octavia filters children by the ids their JSON shows as lists
		// (a listener's loadbalancers, a monitor's pools).
		byLB, byPool := filters["loadbalancer_id"], filters["pool_id"]
		delete(filters, "loadbalancer_id")
		delete(filters, "pool_id")
		pool := r.PathValue("pool")
		var objects []any
		if p := r.w.Pools[pool]; pool != "" && p != nil {
			// A pool's members: its own, not every member of the cloud.
			for _, ref := range p.Members {
				if m := r.w.Members[ref.ID]; m != nil {
					objects = append(objects, m)
				}
			}
		} else {
			objects = all(r.w)
		}
		var matches []lbObject
		for _, v := range objects {
			o := v.(lbObject)
			c := o.lbBase()
			if !r.visible(c.ProjectID, false) || !tags.match(c.Tags) || (len(filters) > 0 && !fieldsMatch(o, filters)) {
				continue
			}
			if byLB != nil && !slices.Contains(byLB, c.LB) {
				continue
			}
			if mon, isMonitor := o.(*monitor); byPool != nil && (!isMonitor || !slices.Contains(byPool, mon.PoolID)) {
				continue
			}
			if m, isMember := o.(*member); isMember && m.PoolID != pool {
				continue
			}
			matches = append(matches, o)
		}
		sort.Slice(matches, func(i, j int) bool { return matches[i].lbBase().ID < matches[j].lbBase().ID })
		page, more, ok := paginate(matches, q.Get("marker"), limit, func(o lbObject) string { return o.lbBase().ID })
		if !ok {
			octaviaError(rw, http.StatusBadRequest, "Invalid marker")
			return
		}
		out := make([]any, 0, len(page))
		for _, o := range page {
			out = append(out, selectFields(o, q["fields"]))
		}
		links := []any{}
		if more {
			links = append(links, map[string]any{"rel": "next", "href": nextHref(requestBase(r.Request, r.s), r.URL, page[len(page)-1].lbBase().ID)})
		}
		writeJSON(rw, http.StatusOK, map[string]any{plural: out, plural + "_links": links})
	}
}

func (s *Sim) lbGet(kind string) handlerFunc {
	return func(rw http.ResponseWriter, r *request) {
		if o, ok := r.findLB(rw, kind); ok {
			writeJSON(rw, http.StatusOK, map[string]any{kind: o})
		}
	}
}

// findLB returns the object of kind named by the path's id, answering 404
// for one the caller may not see, or a member of another pool.
func (r *request) findLB(rw http.ResponseWriter, kind string) (lbObject, bool) {
	o := r.w.lbChild(kind, r.PathValue("id"))
	if o != nil && r.visible(o.lbBase().ProjectID, false) {
		if m, isMember := o.(*member); !isMember || m.PoolID == r.PathValue("pool") {
			return o, true
		}
	}
	octaviaError(rw, http.StatusNotFound, fmt.Sprintf("%s %s not found.", lbKindNames[kind], r.PathValue("id")))
	return nil, false
}

// lbBody reads {"<singular>": {...}}.
func lbBody(rw http.ResponseWriter, r *request, singular string) (map[string]any, bool) {
	var body map[string]map[string]any
	if err := decodeBody(r, &body); err != nil || body[singular] == nil {
		octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute "+singular+".")
		return nil, false
	}
	return body[singular], true
}

// mutableLB returns the load balancer when it may change: ACTIVE, as Octavia
// answers 409 while it is PENDING_*.
func mutableLB(rw http.ResponseWriter, r *request, id string) (*loadBalancer, bool) {
	lb := r.w.LoadBalancer[id]
	if lb == nil || !r.visible(lb.ProjectID, false) {
		octaviaError(rw, http.StatusNotFound, "Load Balancer "+id+" not found.")
		return nil, false
	}
	if lb.ProvisioningStatus != "ACTIVE" {
		octaviaError(rw, http.StatusConflict, "Load Balancer "+id+" is immutable and cannot be updated.")
		return nil, false
	}
	return lb, true
}

// pendingUpdate puts a load balancer into PENDING_UPDATE until the delay passes.
func (r *request) pendingUpdate(lb *loadBalancer) {
	lb.ProvisioningStatus = "PENDING_UPDATE"
	lb.Updated = lbTime(r.now.UTC().Truncate(time.Second))
	r.w.schedule(r.now, r.s.opts.BootDelay, "lb-active", lb.ID)
}

func (s *Sim) createLB(rw http.ResponseWriter, r *request) {
	b, ok := lbBody(rw, r, "loadbalancer")
	if !ok {
		return
	}
	if limit := r.w.quota(r.tok.ProjectID, "load_balancer"); limit >= 0 {
		n := 0
		for _, lb := range r.w.LoadBalancer {
			if lb.ProjectID == r.tok.ProjectID {
				n++
			}
		}
		if n >= limit {
			octaviaError(rw, http.StatusForbidden, "Quota has been met for resources: Load Balancer")
			return
		}
	}
	var sn *subnet
	switch {
	case str(b, "vip_subnet_id") != "":
		sn = r.w.Subnets[str(b, "vip_subnet_id")]
	case str(b, "vip_network_id") != "":
		if n := r.w.Networks[str(b, "vip_network_id")]; n != nil && len(n.Subnets) > 0 {
			sn = r.w.Subnets[n.Subnets[0]]
		}
	default:
		octaviaError(rw, http.StatusBadRequest, "Validation failure: VIP must contain one of: vip_port_id, vip_network_id, vip_subnet_id.")
		return
	}
	if sn == nil || !r.visible(sn.ProjectID, false) {
		octaviaError(rw, http.StatusBadRequest, "Validation failure: Subnet "+str(b, "vip_subnet_id")+" not found.")
		return
	}
	lb := &loadBalancer{lbCommon: newLBCommon(r, b, ""), VIPSubnetID: sn.ID, VIPNetworkID: sn.NetworkID, Provider: "amphora",
		Listeners: []idRef{}, Pools: []idRef{}, AddlVIPs: []any{}}
	lb.LB = lb.ID
	if p := str(b, "provider"); p != "" {
		lb.Provider = p
	}
	p, code, msg := r.w.newPort(r.tok.ProjectID, sn.NetworkID, []fixedIP{{SubnetID: sn.ID, IPAddress: str(b, "vip_address")}}, []string{}, r.now)
	if code != 0 {
		octaviaError(rw, http.StatusConflict, msg)
		return
	}
	p.Name, p.DeviceOwner, p.DeviceID, p.Status = "octavia-lb-"+lb.ID, "Octavia", "lb-"+lb.ID, "DOWN"
	lb.VIPPortID, lb.VIPAddress = p.ID, p.FixedIPs[0].IPAddress
	r.w.LoadBalancer[lb.ID] = lb
	r.w.schedule(r.now, s.opts.BootDelay, "lb-active", lb.ID)
	writeJSON(rw, http.StatusCreated, map[string]any{"loadbalancer": lb})
}

func (s *Sim) createListener(rw http.ResponseWriter, r *request) {
	b, ok := lbBody(rw, r, "listener")
	if !ok {
		return
	}
	lb, ok := mutableLB(rw, r, str(b, "loadbalancer_id"))
	if !ok {
		return
	}
	port, _ := b["protocol_port"].(float64)
	proto := str(b, "protocol")
	if !slices.Contains([]string{"TCP", "HTTP", "HTTPS", "TERMINATED_HTTPS", "UDP", "SCTP", "PROMETHEUS"}, proto) || port < 1 || port > 65535 {
		octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute protocol or protocol_port.")
		return
	}
	for _, l := range r.w.Listeners {
		if l.LB == lb.ID && l.ProtocolPort == int(port) && l.Protocol == proto {
			octaviaError(rw, http.StatusConflict, fmt.Sprintf("Another Listener on this Load Balancer is already using protocol_port %d", int(port)))
			return
		}
	}
	l := &listener{lbCommon: newLBCommon(r, b, lb.ID), Protocol: proto, ProtocolPort: int(port), LoadBalancers: []idRef{{lb.ID}},
		ConnLimit: -1, AllowedCIDRs: nil, TimeoutClientData: 50000, TimeoutMemberData: 50000, TimeoutMemberConnect: 5000}
	for _, k := range listenerTimeouts {
		if !lbNumber(rw, b, k, 0, maxLBTimeout, l.timeout(k)) {
			return
		}
	}
	if pid := str(b, "default_pool_id"); pid != "" {
		l.DefaultPoolID = &pid
	}
	if v, set := b["allowed_cidrs"]; set {
		list, ok := allowedCIDRs(rw, v)
		if !ok {
			return
		}
		l.AllowedCIDRs = list
	}
	r.w.Listeners[l.ID] = l
	lb.Listeners = append(lb.Listeners, idRef{l.ID})
	r.pendingUpdate(lb)
	writeJSON(rw, http.StatusCreated, map[string]any{"listener": l})
}

func (s *Sim) createPool(rw http.ResponseWriter, r *request) {
	b, ok := lbBody(rw, r, "pool")
	if !ok {
		return
	}
	var l *listener
	lbID := str(b, "loadbalancer_id")
	if lid := str(b, "listener_id"); lid != "" {
		if l = r.w.Listeners[lid]; l == nil {
			octaviaError(rw, http.StatusNotFound, "Listener "+lid+" not found.")
			return
		}
		lbID = l.LB
	}
	lb, ok := mutableLB(rw, r, lbID)
	if !ok {
		return
	}
	algo := str(b, "lb_algorithm")
	if !slices.Contains([]string{"ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"}, algo) {
		octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute lb_algorithm. Value: '"+algo+"'.")
		return
	}
	p := &lbPool{lbCommon: newLBCommon(r, b, lb.ID), Protocol: str(b, "protocol"), LBAlgorithm: algo, Listeners: []idRef{},
		LoadBalancers: []idRef{{lb.ID}}, Members: []idRef{}}
	if l != nil {
		if l.DefaultPoolID != nil {
			octaviaError(rw, http.StatusConflict, "Listener "+l.ID+" is already using default pool "+*l.DefaultPoolID+".")
			return
		}
		id := p.ID
		l.DefaultPoolID = &id
		p.Listeners = []idRef{{l.ID}}
	}
	r.w.Pools[p.ID] = p
	lb.Pools = append(lb.Pools, idRef{p.ID})
	r.pendingUpdate(lb)
	writeJSON(rw, http.StatusCreated, map[string]any{"pool": p})
}

func (s *Sim) createMember(rw http.ResponseWriter, r *request) {
	p := r.w.Pools[r.PathValue("pool")]
	if p == nil || !r.visible(p.ProjectID, false) {
		octaviaError(rw, http.StatusNotFound, "Pool "+r.PathValue("pool")+" not found.")
		return
	}
	b, ok := lbBody(rw, r, "member")
	if !ok {
		return
	}
	lb, ok := mutableLB(rw, r, p.LB)
	if !ok {
		return
	}
	addr, port, ok := memberAt(rw, b)
	if !ok {
		return
	}
	for _, m := range r.w.Members {
		if m.PoolID == p.ID && m.Address == addr && m.ProtocolPort == int(port) {
			octaviaError(rw, http.StatusConflict, fmt.Sprintf("Another member on this pool is already using ip %s on protocol_port %d", addr, int(port)))
			return
		}
	}
	m := r.addMember(p, lb, b, addr, port)
	r.pendingUpdate(lb)
	writeJSON(rw, http.StatusCreated, map[string]any{"member": m})
}

// memberAt reads the address and protocol_port a member's body gives,
// answering 400 when either is missing or out of range.
func memberAt(rw http.ResponseWriter, b map[string]any) (addr string, port int, ok bool) {
	p, _ := b["protocol_port"].(float64)
	addr, port = str(b, "address"), int(p)
	if addr == "" || port < 1 || port > 65535 {
		octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute address or protocol_port.")
		return "", 0, false
	}
	return addr, port, true
}

// addMember makes a member of pool p (of lb) from its body, PENDING_CREATE.
func (r *request) addMember(p *lbPool, lb *loadBalancer, b map[string]any, addr string, port int) *member {
	weight := 1
	if w, ok := b["weight"].(float64); ok {
		weight = int(w)
	}
	m := &member{lbCommon: newLBCommon(r, b, lb.ID), PoolID: p.ID, Address: addr, ProtocolPort: port, SubnetID: str(b, "subnet_id"), Weight: weight,
		Backup: boolOr(b, "backup", false), MonitorAddr: b["monitor_address"], MonitorPort: b["monitor_port"]}
	r.w.Members[m.ID] = m
	p.Members = append(p.Members, idRef{m.ID})
	return m
}

// batchMembers is Octavia's batch update of a pool's members (PUT
// .../pools/{pool}/members, as the cloud controller manager sets a
// Service's nodes): the members the body lists, matched by address and
// protocol_port, are made or updated; the pool's others are deleted,
// unless additive_only=true. All or nothing: 202 without a body.
func (s *Sim) batchMembers(rw http.ResponseWriter, r *request) {
	p := r.w.Pools[r.PathValue("pool")]
	if p == nil || !r.visible(p.ProjectID, false) || p.ProvisioningStatus == "PENDING_DELETE" {
		octaviaError(rw, http.StatusNotFound, "Pool "+r.PathValue("pool")+" not found.")
		return
	}
	var body struct {
		Members []map[string]any `json:"members"`
	}
	if err := decodeBody(r, &body); err != nil || body.Members == nil {
		octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute members.")
		return
	}
	additive, _ := strconv.ParseBool(r.URL.Query().Get("additive_only"))
	lb, ok := mutableLB(rw, r, p.LB)
	if !ok {
		return
	}
	type key struct {
		addr string
		port int
	}
	existing := map[key]*member{}
	for _, ref := range p.Members {
		if m := r.w.Members[ref.ID]; m != nil && m.ProvisioningStatus != "PENDING_DELETE" {
			existing[key{m.Address, m.ProtocolPort}] = m
		}
	}
	// Checked whole before anything changes.
	listed := map[key]bool{}
	updated := map[*member]member{}
	keys := make([]key, len(body.Members))
	for i, b := range body.Members {
		addr, port, ok := memberAt(rw, b)
		if !ok {
			return
		}
		k := key{addr, port}
		keys[i] = k
		if listed[k] {
			octaviaError(rw, http.StatusBadRequest, fmt.Sprintf("Duplicate member %s:%d in the request.", k.addr, k.port))
			return
		}
		listed[k] = true
		if m := existing[k]; m != nil {
			upd := maps.Clone(b)
			for _, f := range []string{"address", "protocol_port", "subnet_id"} {
				delete(upd, f)
			}
			next := *m
			if !updateLBFields(rw, "member", &next, upd) {
				return
			}
			// What the request leaves unset stays as it was.
			if _, set := b["name"]; set {
				next.Name = str(b, "name")
			}
			next.AdminStateUp = boolOr(b, "admin_state_up", m.AdminStateUp)
			updated[m] = next
		}
	}
	for i, b := range body.Members {
		k := keys[i]
		if m := existing[k]; m != nil {
			*m = updated[m]
			m.ProvisioningStatus, m.Updated = "PENDING_UPDATE", lbTime(r.now.UTC().Truncate(time.Second))
			continue
		}
		r.addMember(p, lb, b, k.addr, k.port)
	}
	if !additive {
		for k, m := range existing {
			if !listed[k] {
				m.ProvisioningStatus = "PENDING_DELETE"
			}
		}
	}
	r.pendingUpdate(lb)
	rw.WriteHeader(http.StatusAccepted)
}

func (s *Sim) createMonitor(rw http.ResponseWriter, r *request) {
	b, ok := lbBody(rw, r, "healthmonitor")
	if !ok {
		return
	}
	p := r.w.Pools[str(b, "pool_id")]
	if p == nil || !r.visible(p.ProjectID, false) {
		octaviaError(rw, http.StatusNotFound, "Pool "+str(b, "pool_id")+" not found.")
		return
	}
	if p.MonitorID != nil {
		octaviaError(rw, http.StatusConflict, "Pool "+p.ID+" already has a health monitor.")
		return
	}
	lb, ok := mutableLB(rw, r, p.LB)
	if !ok {
		return
	}
	num := func(k string, def int) int {
		if v, ok := b[k].(float64); ok {
			return int(v)
		}
		return def
	}
	m := &monitor{lbCommon: newLBCommon(r, b, lb.ID), PoolID: p.ID, Pools: []idRef{{p.ID}}, Type: str(b, "type"),
		Delay: num("delay", 0), Timeout: num("timeout", 0), MaxRetries: num("max_retries", 0), MaxDown: num("max_retries_down", 3)}
	if m.Delay < 1 || m.Timeout < 1 || m.MaxRetries < 1 || m.Type == "" {
		octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute: type, delay, timeout and max_retries are required.")
		return
	}
	if m.Type == "HTTP" || m.Type == "HTTPS" {
		m.URLPath, m.HTTPMethod, m.Expected = "/", "GET", "200"
		if u := str(b, "url_path"); u != "" {
			m.URLPath = u
		}
	}
	r.w.Monitors[m.ID] = m
	id := m.ID
	p.MonitorID = &id
	r.pendingUpdate(lb)
	writeJSON(rw, http.StatusCreated, map[string]any{"healthmonitor": m})
}

// lbChild finds an object below a load balancer by kind and id.
func (w *world) lbChild(kind, id string) lbObject {
	switch kind {
	case "loadbalancer":
		return nilObj(w.LoadBalancer[id])
	case "listener":
		return nilObj(w.Listeners[id])
	case "pool":
		return nilObj(w.Pools[id])
	case "member":
		return nilObj(w.Members[id])
	case "healthmonitor":
		return nilObj(w.Monitors[id])
	}
	return nil
}

func nilObj[T any, P interface {
	*T
	lbObject
}](v P) lbObject {
	if v == nil {
		return nil
	}
	return v
}

func (s *Sim) updateLBObject(kind string) handlerFunc {
	return func(rw http.ResponseWriter, r *request) {
		o, ok := r.findLB(rw, kind)
		if !ok {
			return
		}
		b, ok := lbBody(rw, r, kind)
		if !ok {
			return
		}
		lb, ok := mutableLB(rw, r, o.lbBase().LB)
		if !ok {
			return
		}
		if !updateLBFields(rw, kind, o, b) {
			return
		}
		c := o.lbBase()
		if _, set := b["name"]; set {
			c.Name = str(b, "name")
		}
		if _, set := b["description"]; set {
			c.Description = str(b, "description")
		}
		if _, set := b["tags"]; set {
			c.Tags = orEmpty(strList(b, "tags"))
		}
		c.AdminStateUp = boolOr(b, "admin_state_up", c.AdminStateUp)
		if kind != "loadbalancer" {
			c.ProvisioningStatus = "PENDING_UPDATE"
		}
		c.Updated = lbTime(r.now.UTC().Truncate(time.Second))
		r.pendingUpdate(lb)
		writeJSON(rw, http.StatusOK, map[string]any{kind: o})
	}
}

// lbNumber sets *dst from a body's whole number at key, if there, when it
// is within [lo, hi]; out of it, or not whole, it answers 400 and says no.
func lbNumber(rw http.ResponseWriter, b map[string]any, key string, lo, hi int, dst *int) bool {
	n, set, ok := wholeNumber(b, key)
	if set && (!ok || n < lo || n > hi) {
		octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute "+key+". Value: '"+fmt.Sprint(b[key])+"'.")
		return false
	}
	if set {
		*dst = n
	}
	return true
}

// maxLBTimeout is Octavia's bound on a listener's timeouts: 24 hours,
// in milliseconds.
const maxLBTimeout = 24 * 3600 * 1000

// lbUpdatable are the fields an update of each kind takes besides name,
// description, admin_state_up and tags, as Octavia's API reference lists
// them; any other is refused, never dropped.
var lbUpdatable = map[string][]string{
	"loadbalancer":  {"vip_qos_policy_id"},
	"listener":      {"connection_limit", "timeout_client_data", "timeout_member_data", "timeout_member_connect", "timeout_tcp_inspect", "default_pool_id", "allowed_cidrs"},
	"pool":          {"lb_algorithm", "session_persistence"},
	"member":        {"weight", "backup", "monitor_address", "monitor_port"},
	"healthmonitor": {"delay", "timeout", "max_retries", "max_retries_down", "url_path", "http_method", "expected_codes"},
}

// updateLBFields checks an update's fields and sets those of its kind.
func updateLBFields(rw http.ResponseWriter, kind string, o interface{ lbBase() *lbCommon }, b map[string]any) bool {
	for k := range b {
		if !slices.Contains([]string{"name", "description", "admin_state_up", "tags"}, k) && !slices.Contains(lbUpdatable[kind], k) {
			octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute "+kind+". Value: '"+fmt.Sprint(b)+"'. Unknown attribute for argument "+kind+": "+k)
			return false
		}
	}
	num := func(key string, lo, hi int, dst *int) bool { return lbNumber(rw, b, key, lo, hi, dst) }
	switch o := o.(type) {
	case *loadBalancer:
		if v, set := b["vip_qos_policy_id"]; set {
			o.VIPQoS = strPtr(v)
		}
	case *listener:
		if !num("connection_limit", -1, 1<<31-1, &o.ConnLimit) {
			return false
		}
		for _, k := range listenerTimeouts {
			if !num(k, 0, maxLBTimeout, o.timeout(k)) {
				return false
			}
		}
		if v, set := b["default_pool_id"]; set {
			o.DefaultPoolID = strPtr(v)
		}
		if v, set := b["allowed_cidrs"]; set {
			list, ok := allowedCIDRs(rw, v)
			if !ok {
				return false
			}
			o.AllowedCIDRs = orEmpty(list)
		}
	case *lbPool:
		if v, set := b["lb_algorithm"]; set {
			algo, _ := v.(string)
			if !slices.Contains([]string{"ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"}, algo) {
				octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute lb_algorithm. Value: '"+fmt.Sprint(v)+"'.")
				return false
			}
			o.LBAlgorithm = algo
		}
		if v, set := b["session_persistence"]; set {
			o.Persistence = v
		}
	case *member:
		if !num("weight", 0, 256, &o.Weight) {
			return false
		}
		o.Backup = boolOr(b, "backup", o.Backup)
		if v, set := b["monitor_address"]; set {
			o.MonitorAddr = v
		}
		if v, set := b["monitor_port"]; set {
			o.MonitorPort = v
		}
	case *monitor:
		if !num("delay", 0, 1<<31-1, &o.Delay) || !num("timeout", 0, 1<<31-1, &o.Timeout) ||
			!num("max_retries", 1, 10, &o.MaxRetries) || !num("max_retries_down", 1, 10, &o.MaxDown) {
			return false
		}
		if o.Delay < o.Timeout {
			octaviaError(rw, http.StatusBadRequest, "Validation failure: The delay must be greater than or equal to the timeout.")
			return false
		}
		setStr(b, "url_path", &o.URLPath)
		setStr(b, "http_method", &o.HTTPMethod)
		setStr(b, "expected_codes", &o.Expected)
	}
	return true
}

func strPtr(v any) *string {
	if s, ok := v.(string); ok {
		return &s
	}
	return nil
}

func (s *Sim) deleteLBChild(kind string) handlerFunc {
	return func(rw http.ResponseWriter, r *request) {
		o, ok := r.findLB(rw, kind)
		if !ok {
			return
		}
		if o.lbBase().ProvisioningStatus == "PENDING_DELETE" {
			octaviaError(rw, http.StatusNotFound, lbKindNames[kind]+" "+r.PathValue("id")+" not found.")
			return
		}
		lb, ok := mutableLB(rw, r, o.lbBase().LB)
		if !ok {
			return
		}
		o.lbBase().ProvisioningStatus = "PENDING_DELETE"
		r.pendingUpdate(lb)
		rw.WriteHeader(http.StatusNoContent)
	}
}

func (s *Sim) deleteLB(rw http.ResponseWriter, r *request) {
	lb := r.w.LoadBalancer[r.PathValue("id")]
	if lb == nil || !r.visible(lb.ProjectID, false) || lb.ProvisioningStatus == "PENDING_DELETE" {
		octaviaError(rw, http.StatusNotFound, "Load Balancer "+r.PathValue("id")+" not found.")
		return
	}
	if lb.ProvisioningStatus != "ACTIVE" && lb.ProvisioningStatus != "ERROR" {
		octaviaError(rw, http.StatusConflict, "Invalid state "+lb.ProvisioningStatus+" of loadbalancer resource "+lb.ID)
		return
	}
	// The openstack CLI sends Python's spelling (cascade=True); Octavia
	// reads any of a boolean's.
	cascade, _ := strconv.ParseBool(r.URL.Query().Get("cascade"))
	if !cascade && (len(lb.Listeners) > 0 || len(lb.Pools) > 0) {
		octaviaError(rw, http.StatusBadRequest, "Validation failure: Cannot delete Load Balancer "+lb.ID+" - it has children")
		return
	}
	lb.ProvisioningStatus = "PENDING_DELETE"
	r.w.schedule(r.now, s.opts.BootDelay, "lb-deleted", lb.ID)
	rw.WriteHeader(http.StatusNoContent)
}

// activateLB ends a load balancer's PENDING_* state and its children's.
func (w *world) activateLB(id string, now time.Time) {
	lb := w.LoadBalancer[id]
	if lb == nil || lb.ProvisioningStatus == "PENDING_DELETE" {
		return
	}
	// A later change of the same balancer keeps it pending until its own due time.
	for _, p := range w.Pending {
		if p.ID == id && p.Kind == "lb-active" {
			return
		}
	}
	for _, l := range w.Listeners {
		if l.LB == id {
			w.settle(&l.lbCommon, "ONLINE")
		}
	}
	for _, p := range w.Pools {
		if p.LB == id {
			w.settle(&p.lbCommon, "ONLINE")
		}
	}
	for _, m := range w.Members {
		if m.LB == id {
			w.settle(&m.lbCommon, "NO_MONITOR")
		}
	}
	for _, m := range w.Monitors {
		if m.LB == id {
			w.settle(&m.lbCommon, "ONLINE")
		}
	}
	w.purgeDeleted(lb)
	lb.ProvisioningStatus, lb.OperatingStatus = "ACTIVE", "ONLINE"
	lb.Updated = lbTime(now.UTC().Truncate(time.Second))
}

func (w *world) settle(c *lbCommon, operating string) {
	if strings.HasPrefix(c.ProvisioningStatus, "PENDING_") && c.ProvisioningStatus != "PENDING_DELETE" {
		c.ProvisioningStatus, c.OperatingStatus = "ACTIVE", operating
	}
}

// purgeDeleted removes the children in PENDING_DELETE, and what hangs off them.
func (w *world) purgeDeleted(lb *loadBalancer) {
	gone := func(c *lbCommon) bool { return c.ProvisioningStatus == "PENDING_DELETE" }
	for id, m := range w.Monitors {
		if m.LB == lb.ID && (gone(&m.lbCommon) || w.Pools[m.PoolID] == nil || gone(&w.Pools[m.PoolID].lbCommon)) {
			if p := w.Pools[m.PoolID]; p != nil {
				p.MonitorID = nil
			}
			delete(w.Monitors, id)
		}
	}
	for id, m := range w.Members {
		if m.LB == lb.ID && (gone(&m.lbCommon) || w.Pools[m.PoolID] == nil || gone(&w.Pools[m.PoolID].lbCommon)) {
			if p := w.Pools[m.PoolID]; p != nil {
				p.Members = slices.DeleteFunc(p.Members, func(r idRef) bool { return r.ID == id })
			}
			delete(w.Members, id)
		}
	}
	for id, p := range w.Pools {
		if p.LB == lb.ID && gone(&p.lbCommon) {
			for _, l := range w.Listeners {
				if l.DefaultPoolID != nil && *l.DefaultPoolID == id {
					l.DefaultPoolID = nil
				}
			}
			lb.Pools = slices.DeleteFunc(lb.Pools, func(r idRef) bool { return r.ID == id })
			delete(w.Pools, id)
		}
	}
	for id, l := range w.Listeners {
		if l.LB == lb.ID && gone(&l.lbCommon) {
			lb.Listeners = slices.DeleteFunc(lb.Listeners, func(r idRef) bool { return r.ID == id })
			delete(w.Listeners, id)
		}
	}
}

// finishLBDelete removes a load balancer, its children and its VIP port.
func (w *world) finishLBDelete(id string) {
	lb := w.LoadBalancer[id]
	if lb == nil {
		return
	}
	for k, v := range w.Monitors {
		if v.LB == id {
			delete(w.Monitors, k)
		}
	}
	for k, v := range w.Members {
		if v.LB == id {
			delete(w.Members, k)
		}
	}
	for k, v := range w.Pools {
		if v.LB == id {
			delete(w.Pools, k)
		}
	}
	for k, v := range w.Listeners {
		if v.LB == id {
			delete(w.Listeners, k)
		}
	}
	if lb.VIPPortID != "" {
		w.deletePort(lb.VIPPortID)
	}
	delete(w.LoadBalancer, id)
}

func (s *Sim) lbStatusTree(rw http.ResponseWriter, r *request) {
	lb := r.w.LoadBalancer[r.PathValue("id")]
	if lb == nil || !r.visible(lb.ProjectID, false) {
		octaviaError(rw, http.StatusNotFound, "Load Balancer "+r.PathValue("id")+" not found.")
		return
	}
	st := func(c *lbCommon) map[string]any {
		return map[string]any{"id": c.ID, "name": c.Name, "provisioning_status": c.ProvisioningStatus, "operating_status": c.OperatingStatus}
	}
	var listeners []any
	for _, ref := range lb.Listeners {
		l := r.w.Listeners[ref.ID]
		if l == nil {
			continue
		}
		lv := st(&l.lbCommon)
		var pools []any
		if l.DefaultPoolID != nil {
			if p := r.w.Pools[*l.DefaultPoolID]; p != nil {
				pv := st(&p.lbCommon)
				var members []any
				for _, mref := range p.Members {
					if m := r.w.Members[mref.ID]; m != nil {
						mv := st(&m.lbCommon)
						mv["address"], mv["protocol_port"] = m.Address, m.ProtocolPort
						members = append(members, mv)
					}
				}
				pv["members"] = orEmpty(members)
				if p.MonitorID != nil {
					if hm := r.w.Monitors[*p.MonitorID]; hm != nil {
						hv := st(&hm.lbCommon)
						hv["type"] = hm.Type
						pv["health_monitor"] = hv
					}
				}
				pools = append(pools, pv)
			}
		}
		lv["pools"] = orEmpty(pools)
		listeners = append(listeners, lv)
	}
	root := st(&lb.lbCommon)
	root["listeners"] = orEmpty(listeners)
	writeJSON(rw, http.StatusOK, map[string]any{"statuses": map[string]any{"loadbalancer": root}})
}

// relink restores the links the API does not show, after a restore.
func (w *world) relink() {
	for _, lb := range w.LoadBalancer {
		lb.LB = lb.ID
	}
	for _, l := range w.Listeners {
		if len(l.LoadBalancers) > 0 {
			l.LB = l.LoadBalancers[0].ID
		}
	}
	for _, p := range w.Pools {
		if len(p.LoadBalancers) > 0 {
			p.LB = p.LoadBalancers[0].ID
		}
	}
	for _, m := range w.Members {
		if p := w.Pools[m.PoolID]; p != nil {
			m.LB = p.LB
		}
	}
	for _, m := range w.Monitors {
		if len(m.Pools) > 0 {
			m.PoolID = m.Pools[0].ID
			if p := w.Pools[m.PoolID]; p != nil {
				m.LB = p.LB
			}
		}
	}
}

// octaviaQuotaNames maps Octavia's quota names to the simulator's.
var octaviaQuotaNames = map[string]string{"loadbalancer": "load_balancer", "listener": "listener", "pool": "pool", "member": "member",
	"healthmonitor": "health_monitor"}

func (s *Sim) getOctaviaQuotas(rw http.ResponseWriter, r *request) {
	project := r.PathValue("project")
	if project != r.tok.ProjectID && !r.tok.admin() {
		octaviaError(rw, http.StatusForbidden, "Policy does not allow this request to be performed.")
		return
	}
	out := map[string]any{}
	for name, key := range octaviaQuotaNames {
		out[name] = r.w.quota(project, key)
	}
	writeJSON(rw, http.StatusOK, map[string]any{"quota": out})
}

func (s *Sim) putOctaviaQuotas(rw http.ResponseWriter, r *request) {
	if !r.tok.admin() {
		octaviaError(rw, http.StatusForbidden, "Policy does not allow this request to be performed.")
		return
	}
	var body struct {
		Quota map[string]any `json:"quota"`
	}
	if err := decodeBody(r, &body); err != nil {
		octaviaError(rw, http.StatusBadRequest, err.Error())
		return
	}
	values, allowed := map[string]any{}, []string{}
	for name, v := range body.Quota {
		key, ok := octaviaQuotaNames[name]
		if !ok && slices.Contains(slices.Collect(maps.Values(octaviaQuotaNames)), name) {
			// The current names (load_balancer, health_monitor), which the
			// openstack CLI sends; the others are their deprecated aliases.
			key, ok = name, true
		}
		if !ok {
			octaviaError(rw, http.StatusBadRequest, fmt.Sprintf("Invalid input for field/attribute quota: %s.", name))
			return
		}
		values[key] = v
	}
	for _, key := range octaviaQuotaNames {
		allowed = append(allowed, key)
	}
	if !r.w.setQuotas(r.PathValue("project"), values, allowed) {
		octaviaError(rw, http.StatusBadRequest, "Invalid input for field/attribute quota.")
		return
	}
	s.getOctaviaQuotas(rw, r)
}

// allowedCIDRs reads a listener's allowed_cidrs: a list of IPv4 CIDRs
// (the VIPs are IPv4), or null; anything else is refused as Octavia
// refuses it.
func allowedCIDRs(rw http.ResponseWriter, v any) ([]any, bool) {
	if v == nil {
		return nil, true
	}
	list, ok := v.([]any)
	for _, x := range list {
		c, _ := x.(string)
		if p, err := netip.ParsePrefix(c); err != nil || !p.Addr().Is4() {
			ok = false
		}
	}
	if !ok {
		octaviaError(rw, http.StatusBadRequest, fmt.Sprintf("Invalid input for field/attribute allowed_cidrs. Value: '%v'.", v))
		return nil, false
	}
	return list, true
}

// allowed are a listener's allowed_cidrs as prefixes (none: anywhere).
func (l *listener) allowed() []netip.Prefix {
	var out []netip.Prefix
	for _, x := range l.AllowedCIDRs {
		c, _ := x.(string)
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// admits reports whether the listener lets a connection from src in:
// from anywhere without allowed_cidrs, else from one of them (Octavia
// makes them the VIP port's security group rules).
func (l *listener) admits(src netip.Addr) bool {
	allowed := l.allowed()
	return len(allowed) == 0 || slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Contains(src) })
}

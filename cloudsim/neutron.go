package cloudsim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// common holds Neutron's standard attributes.
type common struct {
	ID          string    `json:"id"`
	ProjectID   string    `json:"project_id"`
	TenantID    string    `json:"tenant_id"`
	Description string    `json:"description"`
	Tags        []string  `json:"tags"`
	Revision    int       `json:"revision_number"`
	Created     time.Time `json:"created_at"`
	Updated     time.Time `json:"updated_at"`
}

func (c *common) base() *common { return c }

func newCommon(project string, now time.Time) common {
	t := now.UTC().Truncate(time.Second)
	return common{ID: newID(), ProjectID: project, TenantID: project, Tags: []string{}, Revision: 1, Created: t, Updated: t}
}

func (c *common) touch(now time.Time) {
	c.Revision++
	c.Updated = now.UTC().Truncate(time.Second)
}

type network struct {
	common
	Name         string   `json:"name"`
	Status       string   `json:"status"`
	AdminStateUp bool     `json:"admin_state_up"`
	Shared       bool     `json:"shared"`
	External     bool     `json:"router:external"`
	MTU          int      `json:"mtu"`
	Subnets      []string `json:"subnets"`
	PortSecurity bool     `json:"port_security_enabled"`
	AZHints      []string `json:"availability_zone_hints"`
	AZs          []string `json:"availability_zones"`
}

type allocationPool struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

type subnet struct {
	common
	Name            string           `json:"name"`
	NetworkID       string           `json:"network_id"`
	CIDR            string           `json:"cidr"`
	IPVersion       int              `json:"ip_version"`
	GatewayIP       string           `json:"gateway_ip"`
	EnableDHCP      bool             `json:"enable_dhcp"`
	AllocationPools []allocationPool `json:"allocation_pools"`
	DNSNameservers  []string         `json:"dns_nameservers"`
	HostRoutes      []any            `json:"host_routes"`
	SubnetPoolID    *string          `json:"subnetpool_id"`
}

type fixedIP struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
}

type addressPair struct {
	IPAddress  string `json:"ip_address"`
	MACAddress string `json:"mac_address"`
}

type port struct {
	common
	Name                string        `json:"name"`
	NetworkID           string        `json:"network_id"`
	MACAddress          string        `json:"mac_address"`
	FixedIPs            []fixedIP     `json:"fixed_ips"`
	DeviceID            string        `json:"device_id"`
	DeviceOwner         string        `json:"device_owner"`
	Status              string        `json:"status"`
	AdminStateUp        bool          `json:"admin_state_up"`
	SecurityGroups      []string      `json:"security_groups"`
	AllowedAddressPairs []addressPair `json:"allowed_address_pairs"`
	PortSecurity        bool          `json:"port_security_enabled"`
	BindingHostID       string        `json:"binding:host_id"`
	BindingVNICType     string        `json:"binding:vnic_type"`
	ExtraDHCPOpts       []any         `json:"extra_dhcp_opts"`
}

type gatewayInfo struct {
	NetworkID        string    `json:"network_id"`
	EnableSNAT       bool      `json:"enable_snat"`
	ExternalFixedIPs []fixedIP `json:"external_fixed_ips"`
}

type router struct {
	common
	Name         string       `json:"name"`
	Status       string       `json:"status"`
	AdminStateUp bool         `json:"admin_state_up"`
	Gateway      *gatewayInfo `json:"external_gateway_info"`
	Routes       []any        `json:"routes"`
	AZHints      []string     `json:"availability_zone_hints"`
	AZs          []string     `json:"availability_zones"`
}

type secGroup struct {
	common
	Name     string    `json:"name"`
	Stateful bool      `json:"stateful"`
	Rules    []secRule `json:"security_group_rules"`
}

type secRule struct {
	common
	SecurityGroupID string  `json:"security_group_id"`
	Direction       string  `json:"direction"`
	EtherType       string  `json:"ethertype"`
	Protocol        *string `json:"protocol"`
	PortRangeMin    *int    `json:"port_range_min"`
	PortRangeMax    *int    `json:"port_range_max"`
	RemoteIPPrefix  *string `json:"remote_ip_prefix"`
	RemoteGroupID   *string `json:"remote_group_id"`
}

type floatingIP struct {
	common
	FloatingNetworkID string  `json:"floating_network_id"`
	FloatingIPAddress string  `json:"floating_ip_address"`
	FixedIPAddress    *string `json:"fixed_ip_address"`
	PortID            *string `json:"port_id"`
	RouterID          *string `json:"router_id"`
	Status            string  `json:"status"`
	PortDetails       any     `json:"port_details"`
}

func neutronError(rw http.ResponseWriter, code int, typ, msg string) {
	writeJSON(rw, code, map[string]any{"NeutronError": map[string]any{"type": typ, "message": msg, "detail": ""}})
}

func badRequest(rw http.ResponseWriter, msg string) {
	neutronError(rw, http.StatusBadRequest, "HTTPBadRequest", msg)
}

// neutronKind describes one Neutron resource for the generic handlers.
type neutronKind[T interface{ base() *common }] struct {
	// singular and plural are the JSON keys; path is the URL's collection
	// (security-groups), plural when empty.
	singular, plural, path string
	table                  func(*world) map[string]T
	// create makes a resource from a request body, or answers an error.
	create func(rw http.ResponseWriter, r *request, body map[string]any) (T, bool)
	// update applies a request body, or answers an error.
	update func(rw http.ResponseWriter, r *request, v T, body map[string]any) bool
	// remove deletes the resource, or answers an error.
	remove func(rw http.ResponseWriter, r *request, v T) bool
	// viewer returns the function that adapts stored values for output; nil
	// shows them as stored. It is called once per request, so that it can
	// index what its views share.
	viewer func(w *world) func(T) any
	// quota is the quota name counted by create; "" for none.
	quota string
	// notFound is the error type of a missing resource (NetworkNotFound).
	notFound string
}

func registerNeutron[T interface{ base() *common }](s *Sim, mux *http.ServeMux, k neutronKind[T]) {
	path := k.path
	if path == "" {
		path = k.plural
	}
	prefix := "/network/v2.0/" + path
	s.route(mux, "GET "+prefix, func(rw http.ResponseWriter, r *request) { neutronList(rw, r, k) })
	s.route(mux, "POST "+prefix, func(rw http.ResponseWriter, r *request) {
		body, ok := neutronBody(rw, r, k.singular)
		if !ok {
			return
		}
		if k.quota != "" {
			if limit := r.w.quota(r.tok.ProjectID, k.quota); limit >= 0 && countOwned(k.table(r.w), r.tok.ProjectID) >= limit {
				neutronError(rw, http.StatusConflict, "OverQuota", fmt.Sprintf("Quota exceeded for resources: ['%s'].", k.quota))
				return
			}
		}
		v, ok := k.create(rw, r, body)
		if !ok {
			return
		}
		k.table(r.w)[v.base().ID] = v
		writeJSON(rw, http.StatusCreated, map[string]any{k.singular: k.show(r.w, v)})
	})
	item := prefix + "/{id}"
	s.route(mux, "GET "+item, func(rw http.ResponseWriter, r *request) {
		if v, ok := neutronFind(rw, r, k); ok {
			writeJSON(rw, http.StatusOK, map[string]any{k.singular: k.show(r.w, v)})
		}
	})
	s.route(mux, "PUT "+item, func(rw http.ResponseWriter, r *request) {
		v, ok := neutronFind(rw, r, k)
		if !ok {
			return
		}
		body, ok := neutronBody(rw, r, k.singular)
		if !ok {
			return
		}
		switch {
		case k.update != nil:
			if !k.update(rw, r, v, body) {
				return
			}
		case len(body) > 0:
			badRequest(rw, "Cannot update "+k.singular)
			return
		}
		v.base().touch(r.now)
		writeJSON(rw, http.StatusOK, map[string]any{k.singular: k.show(r.w, v)})
	})
	s.route(mux, "DELETE "+item, func(rw http.ResponseWriter, r *request) {
		v, ok := neutronFind(rw, r, k)
		if !ok {
			return
		}
		if k.remove != nil && !k.remove(rw, r, v) {
			return
		}
		delete(k.table(r.w), v.base().ID)
		rw.WriteHeader(http.StatusNoContent)
	})
	// The tags API of the standard-attr-tag extension.
	s.route(mux, "GET "+item+"/tags", func(rw http.ResponseWriter, r *request) {
		if v, ok := neutronFind(rw, r, k); ok {
			writeJSON(rw, http.StatusOK, map[string]any{"tags": v.base().Tags})
		}
	})
	s.route(mux, "PUT "+item+"/tags", func(rw http.ResponseWriter, r *request) {
		v, ok := neutronFind(rw, r, k)
		if !ok {
			return
		}
		var body struct {
			Tags []string `json:"tags"`
		}
		if err := decodeBody(r, &body); err != nil || slices.ContainsFunc(body.Tags, func(t string) bool { return t == "" || len(t) > 255 }) {
			badRequest(rw, "Invalid input for tags.")
			return
		}
		v.base().Tags = append([]string{}, dedupe(body.Tags)...)
		v.base().touch(r.now)
		writeJSON(rw, http.StatusOK, map[string]any{"tags": v.base().Tags})
	})
	s.route(mux, "DELETE "+item+"/tags", func(rw http.ResponseWriter, r *request) {
		if v, ok := neutronFind(rw, r, k); ok {
			v.base().Tags = []string{}
			v.base().touch(r.now)
			rw.WriteHeader(http.StatusNoContent)
		}
	})
	s.route(mux, "GET "+item+"/tags/{tag}", func(rw http.ResponseWriter, r *request) {
		if v, ok := neutronFind(rw, r, k); ok {
			if !slices.Contains(v.base().Tags, r.PathValue("tag")) {
				neutronError(rw, http.StatusNotFound, "TagNotFound", "Tag "+r.PathValue("tag")+" could not be found.")
				return
			}
			rw.WriteHeader(http.StatusNoContent)
		}
	})
	s.route(mux, "PUT "+item+"/tags/{tag}", func(rw http.ResponseWriter, r *request) {
		if v, ok := neutronFind(rw, r, k); ok {
			if t := r.PathValue("tag"); !slices.Contains(v.base().Tags, t) {
				v.base().Tags = append(v.base().Tags, t)
				v.base().touch(r.now)
			}
			rw.WriteHeader(http.StatusCreated)
		}
	})
	s.route(mux, "DELETE "+item+"/tags/{tag}", func(rw http.ResponseWriter, r *request) {
		if v, ok := neutronFind(rw, r, k); ok {
			t := r.PathValue("tag")
			if !slices.Contains(v.base().Tags, t) {
				neutronError(rw, http.StatusNotFound, "TagNotFound", "Tag "+t+" could not be found.")
				return
			}
			v.base().Tags = slices.DeleteFunc(v.base().Tags, func(x string) bool { return x == t })
			v.base().touch(r.now)
			rw.WriteHeader(http.StatusNoContent)
		}
	})
}

// shower returns the view function of one request.
func (k neutronKind[T]) shower(w *world) func(T) any {
	if k.viewer != nil {
		return k.viewer(w)
	}
	return func(v T) any { return v }
}

// show is the view of a single value.
func (k neutronKind[T]) show(w *world, v T) any { return k.shower(w)(v) }

func countOwned[T interface{ base() *common }](m map[string]T, project string) int {
	n := 0
	for _, v := range m {
		if v.base().ProjectID == project {
			n++
		}
	}
	return n
}

// neutronBody reads {"<singular>": {...}}.
func neutronBody(rw http.ResponseWriter, r *request, singular string) (map[string]any, bool) {
	var body map[string]map[string]any
	if err := decodeBody(r, &body); err != nil {
		badRequest(rw, "Failed to parse request. "+err.Error())
		return nil, false
	}
	inner, ok := body[singular]
	if !ok {
		badRequest(rw, "Resource body required")
		return nil, false
	}
	if inner == nil {
		inner = map[string]any{}
	}
	return inner, true
}

// visible reports whether the caller may see a resource of that project.
func (r *request) visible(project string, shared bool) bool {
	return project == r.tok.ProjectID || r.tok.admin() || shared
}

func neutronFind[T interface{ base() *common }](rw http.ResponseWriter, r *request, k neutronKind[T]) (T, bool) {
	v, ok := k.table(r.w)[r.PathValue("id")]
	if ok && r.visible(v.base().ProjectID, isShared(v)) {
		return v, true
	}
	neutronError(rw, http.StatusNotFound, k.notFound, fmt.Sprintf("%s %s could not be found.", strings.ReplaceAll(k.singular, "_", " "), r.PathValue("id")))
	var zero T
	return zero, false
}

// isShared: the external network is visible to every project, as in a real cloud.
func isShared(v any) bool {
	n, ok := v.(*network)
	return ok && (n.Shared || n.External)
}

// reserved query keys of Neutron lists; every other key filters by field.
var listKeys = []string{"limit", "marker", "page_reverse", "fields", "sort_key", "sort_dir", "tags", "tags-any", "not-tags", "not-tags-any"}

func neutronList[T interface{ base() *common }](rw http.ResponseWriter, r *request, k neutronKind[T]) {
	q := r.URL.Query()
	limit, ok := parseLimit(rw, q.Get("limit"), func(rw http.ResponseWriter, code int, msg string) { badRequest(rw, msg) })
	if !ok {
		return
	}
	tags := parseTagFilter(q)
	filters := map[string][]string{}
	for key, vals := range q {
		if !slices.Contains(listKeys, key) {
			filters[key] = vals
		}
	}
	show := k.shower(r.w)
	matches := matchesOf(r.s, listingKey(k.plural, r), func() []T {
		var matches []T
		for _, v := range k.table(r.w) {
			b := v.base()
			if !r.visible(b.ProjectID, isShared(v)) || !tags.match(b.Tags) {
				continue
			}
			if len(filters) > 0 && !fieldsMatch(show(v), filters) {
				continue
			}
			matches = append(matches, v)
		}
		sort.Slice(matches, func(i, j int) bool { return matches[i].base().ID < matches[j].base().ID })
		return matches
	})
	page, more, ok := paginate(matches, q.Get("marker"), limit, func(v T) string { return v.base().ID })
	if !ok {
		neutronError(rw, http.StatusNotFound, k.notFound, "marker "+q.Get("marker")+" could not be found.")
		return
	}
	out := make([]any, 0, len(page))
	fields := q["fields"]
	for _, v := range page {
		out = append(out, selectFields(show(v), fields))
	}
	body := map[string]any{k.plural: out}
	if more {
		body[k.plural+"_links"] = []any{map[string]any{"rel": "next", "href": nextHref(requestBase(r.Request, r.s), r.URL, page[len(page)-1].base().ID)}}
	}
	writeJSON(rw, http.StatusOK, body)
}

// asMap turns a resource into its JSON fields.
func asMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// stringFields is a resource that gives the string fields a listing
// filters on most without being turned into JSON: a router's ports
// (device_owner) are picked out of every port of a project.
type stringFields interface {
	stringField(key string) (string, bool)
}

func (p *port) stringField(key string) (string, bool) {
	switch key {
	case "id":
		return p.ID, true
	case "name":
		return p.Name, true
	case "network_id":
		return p.NetworkID, true
	case "device_id":
		return p.DeviceID, true
	case "device_owner":
		return p.DeviceOwner, true
	}
	return "", false
}

// fieldsMatch applies Neutron's field filters: each key matches if the
// field equals one of the values.
func fieldsMatch(v any, filters map[string][]string) bool {
	var m map[string]any
	for key, vals := range filters {
		if f, ok := v.(stringFields); ok {
			if s, ok := f.stringField(key); ok {
				if !slices.Contains(vals, s) {
					return false
				}
				continue
			}
		}
		if m == nil {
			m = asMap(v)
		}
		got, ok := m[key]
		if !ok {
			return false
		}
		var s string
		switch g := got.(type) {
		case string:
			s = g
		case bool:
			// Neutron reads a boolean filter as any of its spellings
			// (the openstack CLI sends router:external=True).
			if !slices.ContainsFunc(vals, func(v string) bool { b, err := strconv.ParseBool(v); return err == nil && b == g }) {
				return false
			}
			continue
		case nil:
			s = ""
		default:
			b, _ := json.Marshal(g)
			s = string(b)
		}
		if !slices.Contains(vals, s) {
			return false
		}
	}
	return true
}

func selectFields(v any, fields []string) any {
	if len(fields) == 0 {
		return v
	}
	m := asMap(v)
	out := map[string]any{}
	for _, f := range fields {
		if val, ok := m[f]; ok {
			out[f] = val
		}
	}
	return out
}

// body helpers: typed reads of a request body's attributes.

func str(body map[string]any, key string) string { s, _ := body[key].(string); return s }

// wholeNumber reads body[key] as a whole number: set tells whether the
// key is there, ok whether its value is one.
func wholeNumber(body map[string]any, key string) (n int, set, ok bool) {
	v, set := body[key]
	f, isNum := v.(float64)
	return int(f), set, isNum && f == math.Trunc(f)
}

func boolOr(body map[string]any, key string, def bool) bool {
	if b, ok := body[key].(bool); ok {
		return b
	}
	return def
}

func strList(body map[string]any, key string) []string {
	var out []string
	list, _ := body[key].([]any)
	for _, v := range list {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// setStr sets *dst from the body when the body has key.
func setStr(body map[string]any, key string, dst *string) {
	if _, ok := body[key]; ok {
		*dst = str(body, key)
	}
}

// onlyKeys answers 400 for attributes the resource does not have.
func onlyKeys(rw http.ResponseWriter, body map[string]any, allowed ...string) bool {
	var bad []string
	for k := range body {
		if !slices.Contains(allowed, k) {
			bad = append(bad, "'"+k+"'")
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		badRequest(rw, "Unrecognized attribute(s) "+strings.Join(bad, ", "))
		return false
	}
	return true
}

func (s *Sim) neutronRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /network", s.networkVersions)
	mux.HandleFunc("GET /network/{$}", s.networkVersions)
	mux.HandleFunc("GET /network/v2.0", s.networkV2)
	mux.HandleFunc("GET /network/v2.0/{$}", s.networkV2)
	s.route(mux, "GET /network/v2.0/extensions", s.listExtensions)
	s.route(mux, "GET /network/v2.0/quotas/{project}", s.getNeutronQuotas)
	s.route(mux, "GET /network/v2.0/quotas/{project}/details", s.getNeutronQuotas)
	s.route(mux, "PUT /network/v2.0/quotas/{project}", s.putNeutronQuotas)
	common := []string{"name", "description", "tenant_id", "project_id"}

	registerNeutron(s, mux, neutronKind[*network]{singular: "network", plural: "networks", quota: "network", notFound: "NetworkNotFound",
		table: func(w *world) map[string]*network { return w.Networks },
		create: func(rw http.ResponseWriter, r *request, b map[string]any) (*network, bool) {
			if !onlyKeys(rw, b, append(common, "admin_state_up", "shared", "router:external", "mtu", "port_security_enabled", "availability_zone_hints")...) {
				return nil, false
			}
			if (boolOr(b, "router:external", false) || boolOr(b, "shared", false)) && !r.tok.admin() {
				neutronError(rw, http.StatusForbidden, "HTTPForbidden", "(rule:create_network:router:external) is disallowed by policy")
				return nil, false
			}
			n := &network{common: newCommon(r.tok.ProjectID, r.now), Name: str(b, "name"), Status: "ACTIVE", AdminStateUp: boolOr(b, "admin_state_up", true),
				Shared: boolOr(b, "shared", false), External: boolOr(b, "router:external", false), MTU: 1450, Subnets: []string{},
				PortSecurity: boolOr(b, "port_security_enabled", true), AZHints: []string{}, AZs: []string{"nova"}}
			n.Description = str(b, "description")
			return n, true
		},
		update: func(rw http.ResponseWriter, r *request, n *network, b map[string]any) bool {
			if !onlyKeys(rw, b, "name", "description", "admin_state_up", "mtu", "port_security_enabled") {
				return false
			}
			setStr(b, "name", &n.Name)
			setStr(b, "description", &n.Description)
			n.AdminStateUp = boolOr(b, "admin_state_up", n.AdminStateUp)
			n.PortSecurity = boolOr(b, "port_security_enabled", n.PortSecurity)
			if mtu, set, ok := wholeNumber(b, "mtu"); set {
				switch {
				case !ok:
					badRequest(rw, "Invalid input for mtu. Reason: '"+fmt.Sprint(b["mtu"])+"' is not an integer.")
					return false
				case mtu < 68:
					badRequest(rw, "Invalid input for operation: MTU must be at least 68.")
					return false
				case mtu > 1450:
					badRequest(rw, "Invalid input for operation: Requested MTU is too big, maximum is 1450.")
					return false
				}
				n.MTU = mtu
			}
			return true
		},
		remove: func(rw http.ResponseWriter, r *request, n *network) bool {
			for _, p := range r.w.Ports {
				if p.NetworkID == n.ID && p.DeviceOwner != "network:dhcp" {
					neutronError(rw, http.StatusConflict, "NetworkInUse", "Unable to complete operation on network "+n.ID+". There are one or more ports still in use on the network.")
					return false
				}
			}
			for _, p := range r.w.Ports {
				if p.NetworkID == n.ID {
					delete(r.w.Ports, p.ID)
				}
			}
			for _, sid := range n.Subnets {
				delete(r.w.Subnets, sid)
			}
			return true
		},
	})

	registerNeutron(s, mux, neutronKind[*subnet]{singular: "subnet", plural: "subnets", quota: "subnet", notFound: "SubnetNotFound",
		table:  func(w *world) map[string]*subnet { return w.Subnets },
		create: s.createSubnet,
		update: func(rw http.ResponseWriter, r *request, sn *subnet, b map[string]any) bool {
			if !onlyKeys(rw, b, "name", "description", "dns_nameservers", "enable_dhcp", "gateway_ip", "host_routes", "allocation_pools") {
				return false
			}
			setStr(b, "name", &sn.Name)
			setStr(b, "description", &sn.Description)
			if _, ok := b["dns_nameservers"]; ok {
				ns := strList(b, "dns_nameservers")
				for _, a := range ns {
					if _, err := netip.ParseAddr(a); err != nil {
						badRequest(rw, "Invalid input for dns_nameservers. Reason: '"+a+"' is not a valid nameserver.")
						return false
					}
				}
				sn.DNSNameservers = append([]string{}, ns...)
			}
			sn.EnableDHCP = boolOr(b, "enable_dhcp", sn.EnableDHCP)
			return true
		},
		remove: func(rw http.ResponseWriter, r *request, sn *subnet) bool {
			for _, p := range r.w.Ports {
				if p.DeviceOwner == "network:dhcp" {
					continue
				}
				for _, ip := range p.FixedIPs {
					if ip.SubnetID == sn.ID {
						neutronError(rw, http.StatusConflict, "SubnetInUse", "Unable to complete operation on subnet "+sn.ID+": One or more ports have an IP allocation from this subnet.")
						return false
					}
				}
			}
			if n := r.w.Networks[sn.NetworkID]; n != nil {
				n.Subnets = slices.DeleteFunc(n.Subnets, func(id string) bool { return id == sn.ID })
			}
			return true
		},
	})

	registerNeutron(s, mux, neutronKind[*port]{singular: "port", plural: "ports", quota: "port", notFound: "PortNotFound",
		table: func(w *world) map[string]*port { return w.Ports },
		create: func(rw http.ResponseWriter, r *request, b map[string]any) (*port, bool) {
			if !onlyKeys(rw, b, append(common, "network_id", "fixed_ips", "security_groups", "allowed_address_pairs", "admin_state_up",
				"device_id", "device_owner", "mac_address", "port_security_enabled", "binding:vnic_type", "binding:host_id")...) {
				return nil, false
			}
			n := r.w.Networks[str(b, "network_id")]
			if n == nil || !r.visible(n.ProjectID, n.Shared) {
				neutronError(rw, http.StatusNotFound, "NetworkNotFound", "Network "+str(b, "network_id")+" could not be found.")
				return nil, false
			}
			var fixed []fixedIP
			if raw, ok := b["fixed_ips"]; ok {
				buf, _ := json.Marshal(raw)
				if err := json.Unmarshal(buf, &fixed); err != nil {
					badRequest(rw, "Invalid input for fixed_ips.")
					return nil, false
				}
			}
			sgs := strList(b, "security_groups")
			if _, set := b["security_groups"]; !set {
				sgs = []string{r.w.defaultSecGroup(r.tok.ProjectID, r.now).ID}
			}
			for _, id := range sgs {
				if g := r.w.SecGroups[id]; g == nil || !r.visible(g.ProjectID, false) {
					neutronError(rw, http.StatusNotFound, "SecurityGroupNotFound", "Security group "+id+" does not exist")
					return nil, false
				}
			}
			p, code, msg := r.w.newPort(r.tok.ProjectID, n.ID, fixed, sgs, r.now)
			if code != 0 {
				neutronError(rw, code, map[int]string{409: "IpAddressAlreadyAllocated", 400: "InvalidInput"}[code], msg)
				return nil, false
			}
			delete(r.w.Ports, p.ID) // the generic handler stores it
			p.Name, p.Description, p.DeviceID, p.DeviceOwner = str(b, "name"), str(b, "description"), str(b, "device_id"), str(b, "device_owner")
			p.AdminStateUp, p.PortSecurity = boolOr(b, "admin_state_up", true), boolOr(b, "port_security_enabled", true)
			if pairs, ok := b["allowed_address_pairs"]; ok {
				buf, _ := json.Marshal(pairs)
				_ = json.Unmarshal(buf, &p.AllowedAddressPairs)
			}
			if v := str(b, "binding:vnic_type"); v != "" {
				p.BindingVNICType = v
			}
			return p, true
		},
		update: func(rw http.ResponseWriter, r *request, p *port, b map[string]any) bool {
			if !onlyKeys(rw, b, "name", "description", "security_groups", "allowed_address_pairs", "admin_state_up", "device_id", "device_owner", "port_security_enabled") {
				return false
			}
			setStr(b, "name", &p.Name)
			setStr(b, "description", &p.Description)
			setStr(b, "device_owner", &p.DeviceOwner)
			p.PortSecurity = boolOr(b, "port_security_enabled", p.PortSecurity)
			if _, ok := b["security_groups"]; ok {
				p.SecurityGroups = append([]string{}, strList(b, "security_groups")...)
			}
			if pairs, ok := b["allowed_address_pairs"]; ok {
				buf, _ := json.Marshal(pairs)
				p.AllowedAddressPairs = nil
				_ = json.Unmarshal(buf, &p.AllowedAddressPairs)
				p.AllowedAddressPairs = orEmpty(p.AllowedAddressPairs)
			}
			if _, ok := b["device_id"]; ok {
				p.DeviceID = str(b, "device_id")
			}
			p.AdminStateUp = boolOr(b, "admin_state_up", p.AdminStateUp)
			return true
		},
		remove: func(rw http.ResponseWriter, r *request, p *port) bool {
			if p.DeviceOwner == "network:router_interface" || p.DeviceOwner == "network:router_gateway" {
				neutronError(rw, http.StatusConflict, "PortInUse", "Port "+p.ID+" cannot be deleted directly via the port API: has device owner "+p.DeviceOwner+".")
				return false
			}
			r.w.deletePort(p.ID)
			return true
		},
	})

	registerNeutron(s, mux, neutronKind[*router]{singular: "router", plural: "routers", quota: "router", notFound: "RouterNotFound",
		table: func(w *world) map[string]*router { return w.Routers },
		create: func(rw http.ResponseWriter, r *request, b map[string]any) (*router, bool) {
			if !onlyKeys(rw, b, append(common, "admin_state_up", "external_gateway_info", "availability_zone_hints", "distributed", "ha")...) {
				return nil, false
			}
			rt := &router{common: newCommon(r.tok.ProjectID, r.now), Name: str(b, "name"), Status: "ACTIVE", AdminStateUp: boolOr(b, "admin_state_up", true),
				Routes: []any{}, AZHints: []string{}, AZs: []string{"nova"}}
			rt.Description = str(b, "description")
			if gw, ok := b["external_gateway_info"].(map[string]any); ok {
				if !r.w.setRouterGateway(rw, r, rt, gw) {
					return nil, false
				}
			}
			return rt, true
		},
		update: func(rw http.ResponseWriter, r *request, rt *router, b map[string]any) bool {
			if !onlyKeys(rw, b, "name", "description", "admin_state_up", "external_gateway_info", "routes") {
				return false
			}
			setStr(b, "name", &rt.Name)
			setStr(b, "description", &rt.Description)
			rt.AdminStateUp = boolOr(b, "admin_state_up", rt.AdminStateUp)
			if raw, ok := b["routes"]; ok {
				routes, ok := r.w.routerRoutes(rw, rt, raw)
				if !ok {
					return false
				}
				rt.Routes = routes
			}
			if gwRaw, ok := b["external_gateway_info"]; ok {
				gw, _ := gwRaw.(map[string]any)
				if len(gw) == 0 {
					r.w.clearRouterGateway(rt)
				} else if !r.w.setRouterGateway(rw, r, rt, gw) {
					return false
				}
			}
			return true
		},
		remove: func(rw http.ResponseWriter, r *request, rt *router) bool {
			for _, p := range r.w.Ports {
				if p.DeviceID == rt.ID && p.DeviceOwner == "network:router_interface" {
					neutronError(rw, http.StatusConflict, "RouterInUse", "Router "+rt.ID+" still has ports")
					return false
				}
			}
			r.w.clearRouterGateway(rt)
			return true
		},
	})
	s.route(mux, "PUT /network/v2.0/routers/{id}/add_router_interface", s.addRouterInterface)
	s.route(mux, "PUT /network/v2.0/routers/{id}/remove_router_interface", s.removeRouterInterface)

	registerNeutron(s, mux, neutronKind[*secGroup]{singular: "security_group", plural: "security_groups", path: "security-groups", quota: "security_group", notFound: "SecurityGroupNotFound",
		table: func(w *world) map[string]*secGroup { return w.SecGroups },
		create: func(rw http.ResponseWriter, r *request, b map[string]any) (*secGroup, bool) {
			if !onlyKeys(rw, b, append(common, "stateful")...) {
				return nil, false
			}
			if str(b, "name") == "default" {
				neutronError(rw, http.StatusConflict, "SecurityGroupDefaultAlreadyExists", "Default security group already exists.")
				return nil, false
			}
			return r.w.newSecGroup(r.tok.ProjectID, str(b, "name"), str(b, "description"), r.now), true
		},
		update: func(rw http.ResponseWriter, r *request, g *secGroup, b map[string]any) bool {
			if !onlyKeys(rw, b, "name", "description", "stateful") {
				return false
			}
			if stateful, ok := b["stateful"].(bool); ok && stateful != g.Stateful {
				for _, p := range r.w.Ports {
					if slices.Contains(p.SecurityGroups, g.ID) {
						neutronError(rw, http.StatusConflict, "SecurityGroupInUse", "Security Group "+g.ID+" in use.")
						return false
					}
				}
				g.Stateful = stateful
			}
			setStr(b, "name", &g.Name)
			setStr(b, "description", &g.Description)
			return true
		},
		remove: func(rw http.ResponseWriter, r *request, g *secGroup) bool {
			for _, p := range r.w.Ports {
				if slices.Contains(p.SecurityGroups, g.ID) {
					neutronError(rw, http.StatusConflict, "SecurityGroupInUse", "Security Group "+g.ID+" in use.")
					return false
				}
			}
			for id, rule := range r.w.SecRules {
				if rule.SecurityGroupID == g.ID {
					delete(r.w.SecRules, id)
				}
			}
			return true
		},
		viewer: func(w *world) func(*secGroup) any {
			// The rules are indexed by group once per request, not scanned
			// (and sorted) once per group shown.
			byGroup := map[string][]secRule{}
			for _, rule := range sortedBy(w.SecRules, func(x *secRule) string { return x.ID }) {
				byGroup[rule.SecurityGroupID] = append(byGroup[rule.SecurityGroupID], *rule)
			}
			return func(g *secGroup) any {
				v := *g
				v.Rules = orEmpty(byGroup[g.ID])
				return &v
			}
		},
	})

	registerNeutron(s, mux, neutronKind[*secRule]{singular: "security_group_rule", plural: "security_group_rules", path: "security-group-rules", quota: "security_group_rule", notFound: "SecurityGroupRuleNotFound",
		table:  func(w *world) map[string]*secRule { return w.SecRules },
		create: s.createSecRule,
	})

	registerNeutron(s, mux, neutronKind[*floatingIP]{singular: "floatingip", plural: "floatingips", quota: "floatingip", notFound: "FloatingIPNotFound",
		table: func(w *world) map[string]*floatingIP { return w.FloatingIPs },
		create: func(rw http.ResponseWriter, r *request, b map[string]any) (*floatingIP, bool) {
			if !onlyKeys(rw, b, "floating_network_id", "port_id", "fixed_ip_address", "floating_ip_address", "description", "tenant_id", "project_id", "subnet_id") {
				return nil, false
			}
			ext := r.w.Networks[str(b, "floating_network_id")]
			if ext == nil || !ext.External {
				neutronError(rw, http.StatusNotFound, "NetworkNotFound", "Network "+str(b, "floating_network_id")+" could not be found.")
				return nil, false
			}
			addr, ok := r.w.allocateIP(ext, str(b, "floating_ip_address"))
			if !ok {
				neutronError(rw, http.StatusConflict, "IpAddressGenerationFailure", "No more IP addresses available on network "+ext.ID+".")
				return nil, false
			}
			f := &floatingIP{common: newCommon(r.tok.ProjectID, r.now), FloatingNetworkID: ext.ID, FloatingIPAddress: addr.IPAddress, Status: "DOWN"}
			f.Description = str(b, "description")
			// The address is held by a port of the floating network, as Neutron does.
			holder := &port{common: newCommon("", r.now), NetworkID: ext.ID, MACAddress: newMAC(), FixedIPs: []fixedIP{addr},
				DeviceID: f.ID, DeviceOwner: "network:floatingip", Status: "N/A", AdminStateUp: true, SecurityGroups: []string{},
				AllowedAddressPairs: []addressPair{}, BindingVNICType: "normal", ExtraDHCPOpts: []any{}}
			r.w.Ports[holder.ID] = holder
			if pid := str(b, "port_id"); pid != "" {
				if !r.w.associateFIP(rw, r, f, pid, str(b, "fixed_ip_address")) {
					delete(r.w.Ports, holder.ID)
					return nil, false
				}
			}
			return f, true
		},
		update: func(rw http.ResponseWriter, r *request, f *floatingIP, b map[string]any) bool {
			if !onlyKeys(rw, b, "port_id", "fixed_ip_address", "description") {
				return false
			}
			setStr(b, "description", &f.Description)
			if _, ok := b["port_id"]; ok {
				if pid := str(b, "port_id"); pid != "" {
					return r.w.associateFIP(rw, r, f, pid, str(b, "fixed_ip_address"))
				}
				f.PortID, f.FixedIPAddress, f.RouterID, f.Status = nil, nil, nil, "DOWN"
			}
			return true
		},
		remove: func(rw http.ResponseWriter, r *request, f *floatingIP) bool {
			for id, p := range r.w.Ports {
				if p.DeviceOwner == "network:floatingip" && p.DeviceID == f.ID {
					delete(r.w.Ports, id)
				}
			}
			return true
		},
	})
}

func (s *Sim) networkVersions(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]any{"versions": []any{map[string]any{"id": "v2.0", "status": "CURRENT",
		"links": []any{map[string]any{"rel": "self", "href": requestBase(r, s) + "/network/v2.0/"}}}}})
}

func (s *Sim) networkV2(rw http.ResponseWriter, r *http.Request) {
	var res []any
	for _, p := range []string{"network", "subnet", "port", "router", "floatingip", "security_group", "security_group_rule"} {
		res = append(res, map[string]any{"name": p, "collection": p + "s", "links": []any{map[string]any{"rel": "self", "href": requestBase(r, s) + "/network/v2.0/" + p + "s"}}})
	}
	writeJSON(rw, http.StatusOK, map[string]any{"resources": res})
}

var neutronExtensions = []string{"standard-attr-tag", "standard-attr-description", "standard-attr-revisions", "standard-attr-timestamp",
	"router", "ext-gw-mode", "external-net", "extraroute", "security-group", "port-security", "allowed-address-pairs", "binding",
	"quotas", "quota_details", "availability_zone", "network_availability_zone", "router_availability_zone", "fip-port-details",
	"project-id", "pagination", "sorting", "fields", "net-mtu", "dns-integration"}

func (s *Sim) listExtensions(rw http.ResponseWriter, _ *request) {
	var out []any
	for _, alias := range neutronExtensions {
		out = append(out, map[string]any{"alias": alias, "name": alias, "description": alias, "updated": "2019-01-01T00:00:00-00:00", "links": []any{}})
	}
	writeJSON(rw, http.StatusOK, map[string]any{"extensions": out})
}

var neutronQuotaNames = []string{"network", "subnet", "port", "router", "floatingip", "security_group", "security_group_rule"}

func (s *Sim) getNeutronQuotas(rw http.ResponseWriter, r *request) {
	project := r.PathValue("project")
	if project != r.tok.ProjectID && !r.tok.admin() {
		neutronError(rw, http.StatusForbidden, "HTTPForbidden", "(rule:get_quota) is disallowed by policy")
		return
	}
	detail := strings.HasSuffix(r.URL.Path, "/details")
	used := map[string]int{"network": countOwned(r.w.Networks, project), "subnet": countOwned(r.w.Subnets, project),
		"port": countOwned(r.w.Ports, project), "router": countOwned(r.w.Routers, project), "floatingip": countOwned(r.w.FloatingIPs, project),
		"security_group": countOwned(r.w.SecGroups, project), "security_group_rule": countOwned(r.w.SecRules, project)}
	out := map[string]any{}
	for _, name := range neutronQuotaNames {
		if detail {
			out[name] = map[string]any{"limit": r.w.quota(project, name), "used": used[name], "reserved": 0}
		} else {
			out[name] = r.w.quota(project, name)
		}
	}
	writeJSON(rw, http.StatusOK, map[string]any{"quota": out})
}

func (s *Sim) putNeutronQuotas(rw http.ResponseWriter, r *request) {
	if !r.tok.admin() {
		neutronError(rw, http.StatusForbidden, "HTTPForbidden", "(rule:update_quota) is disallowed by policy")
		return
	}
	body, ok := neutronBody(rw, r, "quota")
	if !ok {
		return
	}
	if !r.w.setQuotas(r.PathValue("project"), body, neutronQuotaNames) {
		badRequest(rw, "Invalid input for quota.")
		return
	}
	s.getNeutronQuotas(rw, r)
}

func (s *Sim) createSubnet(rw http.ResponseWriter, r *request, b map[string]any) (*subnet, bool) {
	if !onlyKeys(rw, b, "name", "description", "tenant_id", "project_id", "network_id", "cidr", "ip_version", "gateway_ip", "enable_dhcp",
		"allocation_pools", "dns_nameservers", "host_routes", "subnetpool_id", "ipv6_address_mode", "ipv6_ra_mode") {
		return nil, false
	}
	n := r.w.Networks[str(b, "network_id")]
	if n == nil || !r.visible(n.ProjectID, false) {
		neutronError(rw, http.StatusNotFound, "NetworkNotFound", "Network "+str(b, "network_id")+" could not be found.")
		return nil, false
	}
	if v, _ := b["ip_version"].(float64); v != 4 {
		badRequest(rw, "Invalid input for ip_version. Reason: the simulator serves IPv4 subnets only.")
		return nil, false
	}
	pfx, err := netip.ParsePrefix(str(b, "cidr"))
	if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 30 {
		badRequest(rw, "Invalid input for cidr. Reason: '"+str(b, "cidr")+"' is not a valid IP subnet.")
		return nil, false
	}
	pfx = pfx.Masked()
	for _, other := range r.w.Subnets {
		if other.NetworkID == n.ID && netip.MustParsePrefix(other.CIDR).Overlaps(pfx) {
			badRequest(rw, "Invalid input for operation: Requested subnet with cidr: "+pfx.String()+" for network: "+n.ID+" overlaps with another subnet.")
			return nil, false
		}
	}
	last := addrAt(pfx, (1<<(32-pfx.Bits()))-2)
	sn := &subnet{common: newCommon(r.tok.ProjectID, r.now), Name: str(b, "name"), NetworkID: n.ID, CIDR: pfx.String(), IPVersion: 4,
		GatewayIP: addrAt(pfx, 1).String(), EnableDHCP: boolOr(b, "enable_dhcp", true), DNSNameservers: []string{}, HostRoutes: []any{}}
	sn.Description = str(b, "description")
	if gw, set := b["gateway_ip"]; set {
		if gw == nil {
			sn.GatewayIP = ""
		} else if a, err := netip.ParseAddr(str(b, "gateway_ip")); err != nil || !pfx.Contains(a) {
			badRequest(rw, "Invalid input for gateway_ip.")
			return nil, false
		} else {
			sn.GatewayIP = a.String()
		}
	}
	if raw, ok := b["allocation_pools"]; ok {
		buf, _ := json.Marshal(raw)
		if err := json.Unmarshal(buf, &sn.AllocationPools); err != nil {
			badRequest(rw, "Invalid input for allocation_pools.")
			return nil, false
		}
		for _, p := range sn.AllocationPools {
			start, err1 := netip.ParseAddr(p.Start)
			end, err2 := netip.ParseAddr(p.End)
			if err1 != nil || err2 != nil || !pfx.Contains(start) || !pfx.Contains(end) || end.Less(start) {
				badRequest(rw, "The allocation pool "+p.Start+"-"+p.End+" spans beyond the subnet cidr "+pfx.String()+".")
				return nil, false
			}
		}
	} else {
		start := addrAt(pfx, 2)
		if sn.GatewayIP != "" && sn.GatewayIP != addrAt(pfx, 1).String() {
			start = addrAt(pfx, 1)
		}
		sn.AllocationPools = []allocationPool{{Start: start.String(), End: last.String()}}
	}
	for _, a := range strList(b, "dns_nameservers") {
		if _, err := netip.ParseAddr(a); err != nil {
			badRequest(rw, "Invalid input for dns_nameservers. Reason: '"+a+"' is not a valid nameserver.")
			return nil, false
		}
		sn.DNSNameservers = append(sn.DNSNameservers, a)
	}
	r.w.Subnets[sn.ID] = sn // before the DHCP port, which allocates from it
	n.Subnets = append(n.Subnets, sn.ID)
	if sn.EnableDHCP {
		r.w.ensureDHCPPort(n, sn, r.now)
	}
	return sn, true
}

// ensureDHCPPort gives a network its DHCP port, which takes an address of
// the subnet's pool as the real agent's does.
func (w *world) ensureDHCPPort(n *network, sn *subnet, now time.Time) {
	for _, p := range w.Ports {
		if p.NetworkID == n.ID && p.DeviceOwner == "network:dhcp" {
			return
		}
	}
	p, code, _ := w.newPort(n.ProjectID, n.ID, []fixedIP{{SubnetID: sn.ID}}, []string{}, now)
	if code == 0 {
		p.DeviceOwner, p.DeviceID, p.Status = "network:dhcp", "dhcp"+newHex()[:24], "ACTIVE"
	}
}

func newMAC() string {
	b := newSecret(3)
	return "fa:16:3e:" + b[0:2] + ":" + b[2:4] + ":" + b[4:6]
}

// newPort creates a port on network netID with addresses from its subnets:
// requested ones, or the lowest free address of the first subnet's pools.
func (w *world) newPort(project, netID string, fixed []fixedIP, sgs []string, now time.Time) (*port, int, string) {
	n := w.Networks[netID]
	if len(fixed) == 0 && len(n.Subnets) > 0 {
		fixed = []fixedIP{{SubnetID: n.Subnets[0]}}
	}
	var ips []fixedIP
	for _, f := range fixed {
		sid := f.SubnetID
		if sid == "" && f.IPAddress != "" {
			for _, id := range n.Subnets {
				if a, err := netip.ParseAddr(f.IPAddress); err == nil && netip.MustParsePrefix(w.Subnets[id].CIDR).Contains(a) {
					sid = id
				}
			}
		}
		sn := w.Subnets[sid]
		if sn == nil || sn.NetworkID != netID {
			return nil, http.StatusBadRequest, "Invalid input for operation: IP address " + f.IPAddress + " is not a valid IP for the specified subnet."
		}
		ip, ok := w.allocateIPIn(sn, f.IPAddress)
		if !ok {
			if f.IPAddress != "" {
				return nil, http.StatusConflict, "IP address " + f.IPAddress + " already allocated in subnet " + sn.ID
			}
			return nil, http.StatusConflict, "No more IP addresses available on network " + netID + "."
		}
		ips = append(ips, ip)
	}
	p := &port{common: newCommon(project, now), NetworkID: netID, MACAddress: newMAC(), FixedIPs: orEmpty(ips), Status: "DOWN",
		AdminStateUp: true, SecurityGroups: orEmpty(sgs), AllowedAddressPairs: []addressPair{}, PortSecurity: true,
		BindingVNICType: "normal", ExtraDHCPOpts: []any{}}
	w.Ports[p.ID] = p
	return p, 0, ""
}

// allocateIP takes an address of the network's first subnet.
func (w *world) allocateIP(n *network, want string) (fixedIP, bool) {
	if len(n.Subnets) == 0 {
		return fixedIP{}, false
	}
	return w.allocateIPIn(w.Subnets[n.Subnets[0]], want)
}

// allocateIPIn takes want, or the lowest free address of sn's pools.
func (w *world) allocateIPIn(sn *subnet, want string) (fixedIP, bool) {
	used := map[string]bool{sn.GatewayIP: true}
	for _, p := range w.Ports {
		for _, ip := range p.FixedIPs {
			if ip.SubnetID == sn.ID {
				used[ip.IPAddress] = true
			}
		}
	}
	pfx := netip.MustParsePrefix(sn.CIDR)
	if want != "" {
		a, err := netip.ParseAddr(want)
		if err != nil || !pfx.Contains(a) || used[a.String()] && a.String() != sn.GatewayIP {
			return fixedIP{}, false
		}
		if used[a.String()] && a.String() == sn.GatewayIP && w.gatewayTaken(sn) {
			return fixedIP{}, false
		}
		return fixedIP{SubnetID: sn.ID, IPAddress: a.String()}, true
	}
	for _, pool := range sn.AllocationPools {
		start, end := netip.MustParseAddr(pool.Start), netip.MustParseAddr(pool.End)
		for a := start; a.IsValid() && !end.Less(a); a = a.Next() {
			if !used[a.String()] {
				return fixedIP{SubnetID: sn.ID, IPAddress: a.String()}, true
			}
		}
	}
	return fixedIP{}, false
}

// gatewayTaken reports whether a port holds the subnet's gateway address.
func (w *world) gatewayTaken(sn *subnet) bool {
	for _, p := range w.Ports {
		for _, ip := range p.FixedIPs {
			if ip.SubnetID == sn.ID && ip.IPAddress == sn.GatewayIP {
				return true
			}
		}
	}
	return false
}

// deletePort removes a port and detaches what pointed at it.
func (w *world) deletePort(id string) {
	for _, f := range w.FloatingIPs {
		if f.PortID != nil && *f.PortID == id {
			f.PortID, f.FixedIPAddress, f.RouterID, f.Status = nil, nil, nil, "DOWN"
		}
	}
	for _, sv := range w.Servers {
		sv.Ports = slices.DeleteFunc(sv.Ports, func(p string) bool { return p == id })
	}
	for _, m := range w.LoadBalancer {
		if m.VIPPortID == id {
			m.VIPPortID = ""
		}
	}
	delete(w.Ports, id)
}

func (w *world) setRouterGateway(rw http.ResponseWriter, r *request, rt *router, gw map[string]any) bool {
	ext := w.Networks[str(gw, "network_id")]
	if ext == nil || !ext.External {
		neutronError(rw, http.StatusBadRequest, "BadRequest", "Bad router request: Network "+str(gw, "network_id")+" is not a valid external network.")
		return false
	}
	if rt.Gateway != nil && rt.Gateway.NetworkID == ext.ID {
		rt.Gateway.EnableSNAT = boolOr(gw, "enable_snat", rt.Gateway.EnableSNAT)
		return true
	}
	w.clearRouterGateway(rt)
	p, code, msg := w.newPort("", ext.ID, nil, []string{}, r.now)
	if code != 0 {
		neutronError(rw, http.StatusConflict, "IpAddressGenerationFailure", msg)
		return false
	}
	p.DeviceID, p.DeviceOwner, p.Status = rt.ID, "network:router_gateway", "ACTIVE"
	rt.Gateway = &gatewayInfo{NetworkID: ext.ID, EnableSNAT: boolOr(gw, "enable_snat", true), ExternalFixedIPs: p.FixedIPs}
	return true
}

func (w *world) clearRouterGateway(rt *router) {
	for id, p := range w.Ports {
		if p.DeviceID == rt.ID && p.DeviceOwner == "network:router_gateway" {
			delete(w.Ports, id)
		}
	}
	rt.Gateway = nil
}

// routerAction starts an add/remove_router_interface call: the router of
// the path and the request body, or the error it answered.
func (r *request) routerAction(rw http.ResponseWriter) (*router, map[string]any, bool) {
	rt := r.w.Routers[r.PathValue("id")]
	if rt == nil || !r.visible(rt.ProjectID, false) {
		neutronError(rw, http.StatusNotFound, "RouterNotFound", "Router "+r.PathValue("id")+" could not be found")
		return nil, nil, false
	}
	var b map[string]any
	if err := decodeBody(r, &b); err != nil {
		badRequest(rw, err.Error())
		return nil, nil, false
	}
	return rt, b, true
}

func (s *Sim) addRouterInterface(rw http.ResponseWriter, r *request) {
	rt, b, ok := r.routerAction(rw)
	if !ok {
		return
	}
	var p *port
	switch {
	case str(b, "subnet_id") != "":
		sn := r.w.Subnets[str(b, "subnet_id")]
		if sn == nil || !r.visible(sn.ProjectID, false) {
			neutronError(rw, http.StatusNotFound, "SubnetNotFound", "Subnet "+str(b, "subnet_id")+" could not be found.")
			return
		}
		if sn.GatewayIP == "" {
			badRequest(rw, "Bad router request: Subnet for router interface must have a gateway IP.")
			return
		}
		for _, other := range r.w.Ports {
			if other.DeviceOwner == "network:router_interface" && other.DeviceID == rt.ID && other.NetworkID == sn.NetworkID {
				badRequest(rw, "Bad router request: Router already has a port on subnet "+sn.ID+".")
				return
			}
		}
		var code int
		var msg string
		p, code, msg = r.w.newPort(rt.ProjectID, sn.NetworkID, []fixedIP{{SubnetID: sn.ID, IPAddress: sn.GatewayIP}}, []string{}, r.now)
		if code != 0 {
			neutronError(rw, http.StatusConflict, "IpAddressInUse", msg)
			return
		}
	case str(b, "port_id") != "":
		p = r.w.Ports[str(b, "port_id")]
		if p == nil {
			neutronError(rw, http.StatusNotFound, "PortNotFound", "Port "+str(b, "port_id")+" could not be found.")
			return
		}
		if p.DeviceID != "" {
			neutronError(rw, http.StatusConflict, "PortInUse", "Unable to complete operation on port "+p.ID+". The port is in use.")
			return
		}
	default:
		badRequest(rw, "Bad router request: Either subnet_id or port_id must be specified.")
		return
	}
	p.DeviceID, p.DeviceOwner, p.Status = rt.ID, "network:router_interface", "ACTIVE"
	rt.touch(r.now)
	var subnets []string
	for _, ip := range p.FixedIPs {
		subnets = append(subnets, ip.SubnetID)
	}
	writeJSON(rw, http.StatusOK, map[string]any{"id": rt.ID, "tenant_id": rt.ProjectID, "project_id": rt.ProjectID, "port_id": p.ID,
		"network_id": p.NetworkID, "subnet_id": subnets[0], "subnet_ids": subnets})
}

func (s *Sim) removeRouterInterface(rw http.ResponseWriter, r *request) {
	rt, b, ok := r.routerAction(rw)
	if !ok {
		return
	}
	for _, p := range r.w.Ports {
		if p.DeviceID != rt.ID || p.DeviceOwner != "network:router_interface" {
			continue
		}
		if p.ID == str(b, "port_id") || (len(p.FixedIPs) > 0 && p.FixedIPs[0].SubnetID == str(b, "subnet_id")) {
			for _, f := range r.w.FloatingIPs {
				if f.RouterID != nil && *f.RouterID == rt.ID && r.w.portOnNetwork(f.PortID, p.NetworkID) {
					neutronError(rw, http.StatusConflict, "RouterInterfaceInUseByFloatingIP", "Router interface for subnet "+p.FixedIPs[0].SubnetID+" on router "+rt.ID+" cannot be deleted, as it is required by one or more floating IPs.")
					return
				}
			}
			delete(r.w.Ports, p.ID)
			rt.touch(r.now)
			writeJSON(rw, http.StatusOK, map[string]any{"id": rt.ID, "tenant_id": rt.ProjectID, "port_id": p.ID, "subnet_id": p.FixedIPs[0].SubnetID, "network_id": p.NetworkID})
			return
		}
	}
	neutronError(rw, http.StatusNotFound, "RouterInterfaceNotFoundForSubnet", "Router "+rt.ID+" has no interface on subnet "+str(b, "subnet_id"))
}

func (w *world) portOnNetwork(portID *string, netID string) bool {
	if portID == nil {
		return false
	}
	p := w.Ports[*portID]
	return p != nil && p.NetworkID == netID
}

// associateFIP binds a floating IP to a port, which must sit on a subnet
// with a router to the floating IP's network.
func (w *world) associateFIP(rw http.ResponseWriter, r *request, f *floatingIP, portID, fixed string) bool {
	p := w.Ports[portID]
	if p == nil || !r.visible(p.ProjectID, false) {
		neutronError(rw, http.StatusNotFound, "PortNotFound", "Port "+portID+" could not be found.")
		return false
	}
	if len(p.FixedIPs) == 0 {
		badRequest(rw, "Bad floatingip request: Port "+portID+" does not have any IP addresses on it.")
		return false
	}
	ip := p.FixedIPs[0]
	if fixed != "" {
		found := false
		for _, cand := range p.FixedIPs {
			if cand.IPAddress == fixed {
				ip, found = cand, true
			}
		}
		if !found {
			badRequest(rw, "Bad floatingip request: Port "+portID+" does not have fixed ip "+fixed+".")
			return false
		}
	}
	for _, other := range w.FloatingIPs {
		if other.ID != f.ID && other.PortID != nil && *other.PortID == portID && other.FixedIPAddress != nil && *other.FixedIPAddress == ip.IPAddress {
			neutronError(rw, http.StatusConflict, "FloatingIPPortAlreadyAssociated", "Cannot associate floating IP "+f.FloatingIPAddress+" with port "+portID+" using fixed IP "+ip.IPAddress+", as that fixed IP already has a floating IP on external network "+f.FloatingNetworkID+".")
			return false
		}
	}
	var routerID string
	for _, rp := range w.Ports {
		if rp.DeviceOwner != "network:router_interface" || rp.NetworkID != p.NetworkID {
			continue
		}
		if rt := w.Routers[rp.DeviceID]; rt != nil && rt.Gateway != nil && rt.Gateway.NetworkID == f.FloatingNetworkID {
			routerID = rt.ID
		}
	}
	if routerID == "" {
		neutronError(rw, http.StatusNotFound, "ExternalGatewayForFloatingIPNotFound", "External network "+f.FloatingNetworkID+" is not reachable from subnet "+ip.SubnetID+".  Therefore, cannot associate Port "+portID+" with a Floating IP.")
		return false
	}
	pid, addr := p.ID, ip.IPAddress
	f.PortID, f.FixedIPAddress, f.RouterID, f.Status = &pid, &addr, &routerID, "ACTIVE"
	return true
}

// findSecGroup finds a group by id or name; "default" is created at now
// when the project has none yet.
func (w *world) findSecGroup(project, nameOrID string, now time.Time) *secGroup {
	if nameOrID == "default" {
		return w.defaultSecGroup(project, now)
	}
	if g := w.SecGroups[nameOrID]; g != nil {
		return g
	}
	for _, g := range w.SecGroups {
		if g.ProjectID == project && g.Name == nameOrID {
			return g
		}
	}
	return nil
}

// defaultSecGroup returns the project's default group, creating it on first use.
func (w *world) defaultSecGroup(project string, now time.Time) *secGroup {
	for _, g := range w.SecGroups {
		if g.ProjectID == project && g.Name == "default" {
			return g
		}
	}
	g := w.newSecGroup(project, "default", "Default security group", now)
	for _, eth := range []string{"IPv4", "IPv6"} {
		self := g.ID
		rule := &secRule{common: newCommon(project, now), SecurityGroupID: g.ID, Direction: "ingress", EtherType: eth, RemoteGroupID: &self}
		w.SecRules[rule.ID] = rule
	}
	w.SecGroups[g.ID] = g
	return g
}

// newSecGroup makes a group with Neutron's two default egress rules.
func (w *world) newSecGroup(project, name, description string, now time.Time) *secGroup {
	g := &secGroup{common: newCommon(project, now), Name: name, Stateful: true}
	g.Description = description
	for _, eth := range []string{"IPv4", "IPv6"} {
		rule := &secRule{common: newCommon(project, now), SecurityGroupID: g.ID, Direction: "egress", EtherType: eth}
		w.SecRules[rule.ID] = rule
	}
	return g
}

func (s *Sim) createSecRule(rw http.ResponseWriter, r *request, b map[string]any) (*secRule, bool) {
	if !onlyKeys(rw, b, "security_group_id", "direction", "ethertype", "protocol", "port_range_min", "port_range_max",
		"remote_ip_prefix", "remote_group_id", "description", "tenant_id", "project_id") {
		return nil, false
	}
	g := r.w.SecGroups[str(b, "security_group_id")]
	if g == nil || !r.visible(g.ProjectID, false) {
		neutronError(rw, http.StatusNotFound, "SecurityGroupNotFound", "Security group "+str(b, "security_group_id")+" does not exist")
		return nil, false
	}
	dir := str(b, "direction")
	if dir != "ingress" && dir != "egress" {
		badRequest(rw, "Invalid input for direction. Reason: '"+dir+"' is not in ['ingress', 'egress'].")
		return nil, false
	}
	rule := &secRule{common: newCommon(g.ProjectID, r.now), SecurityGroupID: g.ID, Direction: dir, EtherType: str(b, "ethertype")}
	rule.Description = str(b, "description")
	if rule.EtherType == "" {
		rule.EtherType = "IPv4"
	}
	if p := str(b, "protocol"); p != "" {
		rule.Protocol = &p
	}
	for key, dst := range map[string]**int{"port_range_min": &rule.PortRangeMin, "port_range_max": &rule.PortRangeMax} {
		if v, ok := b[key].(float64); ok {
			n := int(v)
			if n < 0 || n > 65535 {
				badRequest(rw, fmt.Sprintf("Invalid value for port %d.", n))
				return nil, false
			}
			*dst = &n
		}
	}
	if rule.PortRangeMin != nil && rule.PortRangeMax != nil && *rule.PortRangeMin > *rule.PortRangeMax {
		badRequest(rw, "For TCP/UDP protocols, port_range_min must be <= port_range_max")
		return nil, false
	}
	if p := str(b, "remote_ip_prefix"); p != "" {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			badRequest(rw, "Invalid input for remote_ip_prefix. Reason: '"+p+"' is not a valid IP subnet.")
			return nil, false
		}
		m := pfx.Masked().String()
		rule.RemoteIPPrefix = &m
	}
	if g := str(b, "remote_group_id"); g != "" {
		rule.RemoteGroupID = &g
	}
	for _, other := range r.w.SecRules {
		if other.SecurityGroupID == rule.SecurityGroupID && sameRule(other, rule) {
			neutronError(rw, http.StatusConflict, "SecurityGroupRuleExists", "Security group rule already exists. Rule id is "+other.ID+".")
			return nil, false
		}
	}
	return rule, true
}

func sameRule(a, b *secRule) bool {
	eq := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	eqi := func(x, y *int) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.Direction == b.Direction && a.EtherType == b.EtherType && eq(a.Protocol, b.Protocol) &&
		eqi(a.PortRangeMin, b.PortRangeMin) && eqi(a.PortRangeMax, b.PortRangeMax) && eq(a.RemoteIPPrefix, b.RemoteIPPrefix) && eq(a.RemoteGroupID, b.RemoteGroupID)
}

// routerRoutes checks a router's extra routes as Neutron does: each a
// destination CIDR and a nexthop on one of the router's subnets.
func (w *world) routerRoutes(rw http.ResponseWriter, rt *router, raw any) ([]any, bool) {
	list, ok := raw.([]any)
	if !ok {
		badRequest(rw, "Invalid input for routes. Reason: Invalid data format for hostroute.")
		return nil, false
	}
	var cidrs []netip.Prefix
	for _, p := range w.Ports {
		if p.DeviceID == rt.ID && p.DeviceOwner == "network:router_interface" {
			for _, ip := range p.FixedIPs {
				if sn := w.Subnets[ip.SubnetID]; sn != nil {
					if c, err := netip.ParsePrefix(sn.CIDR); err == nil {
						cidrs = append(cidrs, c)
					}
				}
			}
		}
	}
	out := []any{}
	for _, item := range list {
		m, _ := item.(map[string]any)
		dest, errD := netip.ParsePrefix(fmt.Sprint(m["destination"]))
		hop, errH := netip.ParseAddr(fmt.Sprint(m["nexthop"]))
		if len(m) != 2 || errD != nil || errH != nil {
			badRequest(rw, "Invalid input for routes. Reason: Invalid data format for hostroute.")
			return nil, false
		}
		if !slices.ContainsFunc(cidrs, func(c netip.Prefix) bool { return c.Contains(hop) }) {
			badRequest(rw, "Invalid format for routes: "+fmt.Sprint(item)+", the nexthop is not connected with router")
			return nil, false
		}
		out = append(out, map[string]any{"destination": dest.String(), "nexthop": hop.String()})
	}
	return out, true
}

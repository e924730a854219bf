package cloudsim

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Nova's microversions: the simulator speaks those of the Zed release.
const (
	novaMinMinor = 1
	novaMaxMinor = 93
)

type flavor struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	VCPUs    int    `json:"vcpus"`
	RAM      int    `json:"ram"`
	Disk     int    `json:"disk"`
	IsPublic bool   `json:"is_public"`
	// ExtraSpecs are the flavor's os-extra_specs (flavorspecs.go).
	ExtraSpecs map[string]string `json:"extra_specs,omitempty"`
}

type image struct {
	meta
	Seq             int64  `json:"seq"`
	ID              string `json:"id"`
	Name            string `json:"name"`
	Status          string `json:"status"`
	Visibility      string `json:"visibility"`
	DiskFormat      string `json:"disk_format"`
	ContainerFormat string `json:"container_format"`
	Size            int64  `json:"size"`
	MinDisk         int    `json:"min_disk"`
	Owner           string `json:"owner"`
}

type keypair struct {
	meta
	Name        string `json:"name"`
	UserID      string `json:"user_id"`
	PublicKey   string `json:"public_key"`
	Fingerprint string `json:"fingerprint"`
	Type        string `json:"type"`
}

// quotaSet holds the limits of one project by resource name, Nova's,
// Neutron's and Octavia's alike; -1 is unlimited.
type quotaSet map[string]int

func defaultQuotas() *quotaSet {
	return &quotaSet{
		"instances": 20, "cores": 80, "ram": 163840, "key_pairs": 100, "server_groups": 10, "server_group_members": 10,
		"network": 20, "subnet": 20, "port": 200, "router": 10, "floatingip": 20, "security_group": 20, "security_group_rule": 200,
		"load_balancer": 10, "listener": -1, "pool": -1, "member": -1, "health_monitor": -1,
		"volumes": 10, "gigabytes": 1000, "snapshots": 10,
	}
}

type server struct {
	meta
	Seq            int64             `json:"seq"`
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	ProjectID      string            `json:"project_id"`
	UserID         string            `json:"user_id"`
	FlavorID       string            `json:"flavor_id"`
	ImageID        string            `json:"image_id"`
	KeyName        string            `json:"key_name"`
	UserData       string            `json:"user_data"` // base64, as sent
	Metadata       map[string]string `json:"metadata"`
	Tags           []string          `json:"tags"`
	Status         string            `json:"status"`
	Fault          string            `json:"fault,omitempty"`
	Host           string            `json:"host"`
	AZ             string            `json:"availability_zone"`
	GroupID        string            `json:"group_id,omitempty"`
	Ports          []string          `json:"ports"`      // attached, in order
	NovaPorts      []string          `json:"nova_ports"` // created by Nova, deleted with the server
	SecurityGroups []string          `json:"security_groups"`
	LaunchedAt     *time.Time        `json:"launched_at,omitempty"`
	// Description is the server's (microversion 2.19 and later).
	Description *string `json:"description,omitempty"`
	// HostKey is the host's SSH private key (OpenSSH PEM), made at first boot.
	HostKey string `json:"host_key,omitempty"`
}

type serverGroup struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Policy    string   `json:"policy"`
	ProjectID string   `json:"project_id"`
	UserID    string   `json:"user_id"`
	Members   []string `json:"members"`
}

// novaError answers an OpenStack fault as Nova (and Cinder) write them:
// {"badRequest": {"code": 400, "message": "..."}}.
func novaError(rw http.ResponseWriter, code int, msg string) {
	kind := map[int]string{400: "badRequest", 403: "forbidden", 404: "itemNotFound", 409: "conflictingRequest", 413: "overLimit"}[code]
	if kind == "" {
		kind = "computeFault"
	}
	writeJSON(rw, code, map[string]any{kind: map[string]any{"code": code, "message": msg}})
}

// novaVersion reads the requested microversion, sets the response headers
// and answers 406 for one out of range. ok is false when it answered.
func novaVersion(rw http.ResponseWriter, r *request) (minor int, ok bool) {
	raw := r.Header.Get("X-OpenStack-Nova-API-Version")
	if v := r.Header.Get("OpenStack-API-Version"); raw == "" && strings.HasPrefix(v, "compute ") {
		raw = strings.TrimPrefix(v, "compute ")
	}
	return microversion(rw, raw, 2, novaMinMinor, novaMaxMinor, func(h http.Header, v string) {
		h.Set("X-OpenStack-Nova-API-Version", v)
		h.Set("OpenStack-API-Version", "compute "+v)
		h.Set("Vary", "OpenStack-API-Version, X-OpenStack-Nova-API-Version")
	})
}

// microversion reads a requested microversion of major ("", "latest" or
// "<major>.N", the oldest when empty) that the service serves from lo to
// hi, as OpenStack's services read theirs: the answer's headers are set
// with the version ("<major>.N"), a malformed one answered 400 and one out
// of range 406 (ok is false when it answered).
func microversion(rw http.ResponseWriter, raw string, major, lo, hi int, set func(h http.Header, v string)) (minor int, ok bool) {
	minor = lo
	switch raw = strings.TrimSpace(raw); raw {
	case "":
	case "latest":
		minor = hi
	default:
		maj, m, found := strings.Cut(raw, ".")
		n, err := strconv.Atoi(m)
		if !found || maj != strconv.Itoa(major) || err != nil {
			novaError(rw, http.StatusBadRequest, fmt.Sprintf("API Version String %s is of invalid format. Must be of format MajorNum.MinorNum.", raw))
			return 0, false
		}
		minor = n
	}
	v := fmt.Sprintf("%d.%d", major, minor)
	set(rw.Header(), v)
	if minor < lo || minor > hi {
		novaError(rw, http.StatusNotAcceptable, fmt.Sprintf("Version %s is not supported by the API. Minimum is %d.%d and maximum is %d.%d.", v, major, lo, major, hi))
		return 0, false
	}
	return minor, true
}

func (s *Sim) novaRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /compute", s.computeVersions)
	mux.HandleFunc("GET /compute/{$}", s.computeVersions)
	// Any other path is Nova's after its auth middleware: 401 without a
	// token, 404 with one (a version document for anything hid mistakes).
	s.route(mux, "/compute/", func(rw http.ResponseWriter, r *request) {
		novaError(rw, http.StatusNotFound, "The resource could not be found.")
	})
	mux.HandleFunc("GET /compute/v2.1", s.computeV21)
	mux.HandleFunc("GET /compute/v2.1/{$}", s.computeV21)
	n := func(pattern string, h func(http.ResponseWriter, *request, int)) {
		s.route(mux, pattern, func(rw http.ResponseWriter, r *request) {
			if mv, ok := novaVersion(rw, r); ok {
				h(rw, r, mv)
			}
		})
	}
	n("GET /compute/v2.1/flavors", s.listFlavors)
	n("GET /compute/v2.1/flavors/detail", s.listFlavors)
	n("GET /compute/v2.1/flavors/{id}", s.getFlavor)
	s.flavorExtraSpecs(n)
	n("GET /compute/v2.1/os-keypairs", s.listKeypairs)
	n("POST /compute/v2.1/os-keypairs", s.createKeypair)
	n("GET /compute/v2.1/os-keypairs/{name}", s.getKeypair)
	n("DELETE /compute/v2.1/os-keypairs/{name}", s.deleteKeypair)
	n("GET /compute/v2.1/servers", s.listServers)
	n("GET /compute/v2.1/servers/detail", s.listServers)
	n("POST /compute/v2.1/servers", s.createServer)
	n("GET /compute/v2.1/servers/{id}", s.getServer)
	n("DELETE /compute/v2.1/servers/{id}", s.deleteServer)
	n("PUT /compute/v2.1/servers/{id}", s.updateServer)
	n("GET /compute/v2.1/servers/{id}/metadata", s.serverMetadata)
	n("PUT /compute/v2.1/servers/{id}/metadata", s.serverMetadata)
	n("POST /compute/v2.1/servers/{id}/metadata", s.serverMetadata)
	n("GET /compute/v2.1/servers/{id}/metadata/{key}", s.serverMetadatum)
	n("PUT /compute/v2.1/servers/{id}/metadata/{key}", s.serverMetadatum)
	n("DELETE /compute/v2.1/servers/{id}/metadata/{key}", s.serverMetadatum)
	n("POST /compute/v2.1/servers/{id}/action", s.serverAction)
	n("GET /compute/v2.1/servers/{id}/tags", s.serverTags)
	n("PUT /compute/v2.1/servers/{id}/tags", s.serverTags)
	n("DELETE /compute/v2.1/servers/{id}/tags", s.serverTags)
	n("GET /compute/v2.1/servers/{id}/tags/{tag}", s.serverTag)
	n("PUT /compute/v2.1/servers/{id}/tags/{tag}", s.serverTag)
	n("DELETE /compute/v2.1/servers/{id}/tags/{tag}", s.serverTag)
	n("GET /compute/v2.1/servers/{id}/os-interface", s.serverInterfaces)
	n("GET /compute/v2.1/servers/{id}/os-volume_attachments", s.listAttachments)
	n("POST /compute/v2.1/servers/{id}/os-volume_attachments", s.attachVolume)
	n("GET /compute/v2.1/servers/{id}/os-volume_attachments/{volume}", s.getAttachment)
	n("DELETE /compute/v2.1/servers/{id}/os-volume_attachments/{volume}", s.detachVolumeFromServer)
	n("GET /compute/v2.1/os-server-groups", s.listServerGroups)
	n("POST /compute/v2.1/os-server-groups", s.createServerGroup)
	n("GET /compute/v2.1/os-server-groups/{id}", s.getServerGroup)
	n("DELETE /compute/v2.1/os-server-groups/{id}", s.deleteServerGroup)
	n("GET /compute/v2.1/os-quota-sets/{project}", s.getNovaQuotas)
	n("GET /compute/v2.1/os-quota-sets/{project}/detail", s.getNovaQuotas)
	n("PUT /compute/v2.1/os-quota-sets/{project}", s.putNovaQuotas)
	n("GET /compute/v2.1/limits", s.novaLimits)
	n("GET /compute/v2.1/os-hypervisors", s.listHypervisors)
	n("GET /compute/v2.1/os-availability-zone", s.listAZs)

	mux.HandleFunc("GET /image", s.imageVersions)
	mux.HandleFunc("GET /image/{$}", s.imageVersions)
	mux.HandleFunc("GET /image/versions", s.imageVersions)
	s.route(mux, "GET /image/v2/images", s.listImages)
	s.route(mux, "GET /image/v2/images/{id}", s.getImage)
}

func (s *Sim) computeVersion(r *http.Request) map[string]any {
	return map[string]any{"id": "v2.1", "status": "CURRENT", "version": "2." + strconv.Itoa(novaMaxMinor), "min_version": "2.1",
		"updated": "2013-07-23T11:33:21Z", "links": []any{map[string]any{"rel": "self", "href": requestBase(r, s) + "/compute/v2.1/"}},
		"media-types": []any{map[string]any{"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2.1"}}}
}

func (s *Sim) computeVersions(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]any{"versions": []any{s.computeVersion(r)}})
}

func (s *Sim) computeV21(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]any{"version": s.computeVersion(r)})
}

func (s *Sim) flavorView(f *flavor, mv int, detail bool) map[string]any {
	v := map[string]any{"id": f.ID, "name": f.Name, "links": s.links("/compute/v2.1/flavors/" + f.ID)}
	if !detail {
		return v
	}
	v["vcpus"], v["ram"], v["disk"] = f.VCPUs, f.RAM, f.Disk
	v["OS-FLV-EXT-DATA:ephemeral"], v["OS-FLV-DISABLED:disabled"], v["os-flavor-access:is_public"] = 0, false, f.IsPublic
	v["rxtx_factor"], v["swap"] = 1.0, ""
	if mv >= 75 {
		v["swap"] = 0
	}
	if mv >= 55 {
		v["description"] = nil
	}
	if mv >= 61 {
		v["extra_specs"] = f.specs()
	}
	return v
}

func (s *Sim) listFlavors(rw http.ResponseWriter, r *request, mv int) {
	detail := strings.HasSuffix(r.URL.Path, "/detail")
	var out []any
	for _, f := range sortedBy(r.w.Flavors, func(f *flavor) string { return f.ID }) {
		out = append(out, s.flavorView(f, mv, detail))
	}
	writeJSON(rw, http.StatusOK, map[string]any{"flavors": orEmpty(out)})
}

func (s *Sim) getFlavor(rw http.ResponseWriter, r *request, mv int) {
	f := r.w.Flavors[r.PathValue("id")]
	if f == nil {
		novaError(rw, http.StatusNotFound, "Flavor "+r.PathValue("id")+" could not be found.")
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"flavor": s.flavorView(f, mv, true)})
}

func (w *world) findFlavor(ref string) *flavor {
	ref = ref[strings.LastIndex(ref, "/")+1:]
	if f := w.Flavors[ref]; f != nil {
		return f
	}
	for _, f := range w.Flavors {
		if f.Name == ref {
			return f
		}
	}
	return nil
}

func keypairView(k *keypair, mv int) map[string]any {
	v := map[string]any{"name": k.Name, "public_key": k.PublicKey, "fingerprint": k.Fingerprint}
	if mv >= 2 {
		v["type"] = k.Type
	}
	return v
}

func (s *Sim) listKeypairs(rw http.ResponseWriter, r *request, mv int) {
	var out []any
	for _, k := range sortedBy(r.w.Keypairs, func(k *keypair) string { return k.Name }) {
		if k.UserID == r.tok.UserID {
			out = append(out, map[string]any{"keypair": keypairView(k, mv)})
		}
	}
	writeJSON(rw, http.StatusOK, map[string]any{"keypairs": orEmpty(out)})
}

var keypairNameRE = regexp.MustCompile(`^[a-zA-Z0-9 _.@-]{1,255}$`)

func (s *Sim) createKeypair(rw http.ResponseWriter, r *request, mv int) {
	var body struct {
		Keypair struct {
			Name      string `json:"name"`
			PublicKey string `json:"public_key"`
			Type      string `json:"type"`
		} `json:"keypair"`
	}
	if err := decodeBody(r, &body); err != nil {
		novaError(rw, http.StatusBadRequest, err.Error())
		return
	}
	kp := body.Keypair
	if !keypairNameRE.MatchString(kp.Name) {
		novaError(rw, http.StatusBadRequest, "Keypair data is invalid: Keypair name contains unsafe characters")
		return
	}
	key := r.tok.UserID + "/" + kp.Name
	if _, dup := r.w.Keypairs[key]; dup {
		novaError(rw, http.StatusConflict, "Key pair '"+kp.Name+"' already exists.")
		return
	}
	if n := r.w.countKeypairs(r.tok.UserID); n >= r.w.quota(r.tok.ProjectID, "key_pairs") && r.w.quota(r.tok.ProjectID, "key_pairs") >= 0 {
		novaError(rw, http.StatusForbidden, "Quota exceeded, too many key pairs.")
		return
	}
	var private string
	if kp.PublicKey == "" {
		if mv >= 92 {
			novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute keypair. Value: public_key is a required property")
			return
		}
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		sshPub, _ := ssh.NewPublicKey(pub)
		block, _ := ssh.MarshalPrivateKey(priv, "")
		kp.PublicKey, private = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))), string(pem.EncodeToMemory(block))
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(kp.PublicKey))
	if err != nil {
		novaError(rw, http.StatusBadRequest, "Keypair data is invalid: failed to generate fingerprint")
		return
	}
	if kp.Type == "" {
		kp.Type = "ssh"
	}
	k := &keypair{meta: r.w.meta(r.now), Name: kp.Name, UserID: r.tok.UserID, PublicKey: kp.PublicKey,
		Fingerprint: ssh.FingerprintLegacyMD5(pub), Type: kp.Type}
	r.w.Keypairs[key] = k
	v := keypairView(k, mv)
	v["user_id"] = k.UserID
	if private != "" {
		v["private_key"] = private
	}
	status := http.StatusOK
	if mv >= 2 {
		status = http.StatusCreated
	}
	writeJSON(rw, status, map[string]any{"keypair": v})
}

func (w *world) countKeypairs(userID string) int {
	n := 0
	for _, k := range w.Keypairs {
		if k.UserID == userID {
			n++
		}
	}
	return n
}

func (s *Sim) getKeypair(rw http.ResponseWriter, r *request, mv int) {
	k := r.w.Keypairs[r.tok.UserID+"/"+r.PathValue("name")]
	if k == nil {
		novaError(rw, http.StatusNotFound, "Keypair "+r.PathValue("name")+" not found for user "+r.tok.UserID)
		return
	}
	v := keypairView(k, mv)
	v["user_id"], v["id"], v["created_at"], v["deleted"] = k.UserID, 1, k.Created.Format("2006-01-02T15:04:05.000000"), false
	writeJSON(rw, http.StatusOK, map[string]any{"keypair": v})
}

func (s *Sim) deleteKeypair(rw http.ResponseWriter, r *request, mv int) {
	key := r.tok.UserID + "/" + r.PathValue("name")
	if r.w.Keypairs[key] == nil {
		novaError(rw, http.StatusNotFound, "Keypair "+r.PathValue("name")+" not found for user "+r.tok.UserID)
		return
	}
	delete(r.w.Keypairs, key)
	if mv >= 2 {
		rw.WriteHeader(http.StatusNoContent)
	} else {
		rw.WriteHeader(http.StatusAccepted)
	}
}

// visibleServer returns the server if the caller's project may see it.
// serverOr404 is the server the path names, or Nova's 404 written.
func (r *request) serverOr404(rw http.ResponseWriter) (*server, bool) {
	sv := r.visibleServer(r.PathValue("id"))
	if sv == nil {
		novaError(rw, http.StatusNotFound, "Instance "+r.PathValue("id")+" could not be found.")
	}
	return sv, sv != nil
}

func (r *request) visibleServer(id string) *server {
	sv := r.w.Servers[id]
	if sv == nil || (sv.ProjectID != r.tok.ProjectID && !r.tok.admin()) {
		return nil
	}
	return sv
}

// serverJSON is Nova's view of a server. A struct rather than a map:
// listing thousands of servers is dominated by encoding them.
type serverJSON struct {
	ID             string                `json:"id"`
	Name           string                `json:"name"`
	Status         string                `json:"status"`
	TenantID       string                `json:"tenant_id"`
	UserID         string                `json:"user_id"`
	Metadata       map[string]string     `json:"metadata"`
	HostID         string                `json:"hostId"`
	Image          refJSON               `json:"image"`
	Flavor         any                   `json:"flavor"`
	Created        string                `json:"created"`
	Updated        string                `json:"updated"`
	Addresses      map[string][]addrJSON `json:"addresses"`
	AccessIPv4     string                `json:"accessIPv4"`
	AccessIPv6     string                `json:"accessIPv6"`
	Links          []linkJSON            `json:"links"`
	DiskConfig     string                `json:"OS-DCF:diskConfig"`
	Progress       int                   `json:"progress"`
	AZ             string                `json:"OS-EXT-AZ:availability_zone"`
	ConfigDrive    string                `json:"config_drive"`
	KeyName        *string               `json:"key_name"`
	LaunchedAt     *string               `json:"OS-SRV-USG:launched_at"`
	TerminatedAt   *string               `json:"OS-SRV-USG:terminated_at"`
	SecurityGroups []nameJSON            `json:"security_groups"`
	// Description is shown from 2.19 on, null when unset.
	Description any        `json:"description,omitempty"`
	TaskState   *string    `json:"OS-EXT-STS:task_state"`
	VMState     string     `json:"OS-EXT-STS:vm_state"`
	PowerState  int        `json:"OS-EXT-STS:power_state"`
	Volumes     []any      `json:"os-extended-volumes:volumes_attached"`
	Tags        *[]string  `json:"tags,omitempty"`
	Fault       *faultJSON `json:"fault,omitempty"`
	*serverAdminJSON
	*serverAdminV3JSON
}

// serverAdminJSON holds the attributes only an admin sees.
type serverAdminJSON struct {
	Host         *string `json:"OS-EXT-SRV-ATTR:host"`
	Hypervisor   *string `json:"OS-EXT-SRV-ATTR:hypervisor_hostname"`
	InstanceName string  `json:"OS-EXT-SRV-ATTR:instance_name"`
}

// serverAdminV3JSON holds the admin attributes of microversion 2.3 and later.
type serverAdminV3JSON struct {
	UserData *string `json:"OS-EXT-SRV-ATTR:user_data"`
	Hostname string  `json:"OS-EXT-SRV-ATTR:hostname"`
}

type refJSON struct {
	ID    string     `json:"id"`
	Links []linkJSON `json:"links"`
}

type linkJSON struct {
	Rel  string `json:"rel"`
	Href string `json:"href"`
}

type nameJSON struct {
	Name string `json:"name"`
}

type addrJSON struct {
	Version int    `json:"version"`
	Addr    string `json:"addr"`
	Type    string `json:"OS-EXT-IPS:type"`
	MAC     string `json:"OS-EXT-IPS-MAC:mac_addr"`
}

type faultJSON struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Created string `json:"created"`
}

func (s *Sim) links(path string) []linkJSON {
	return []linkJSON{{Rel: "self", Href: s.URL() + path}, {Rel: "bookmark", Href: s.URL() + path}}
}

// serverIndex is what a server's view looks up elsewhere in the world,
// indexed once per answer (a listing of thousands of servers reads it for
// each): the floating IPs by the port they are bound to, the volumes by
// the server they are attached (or attaching) to.
type serverIndex struct {
	fips    map[string][]*floatingIP
	volumes map[string][]*volume
}

func (w *world) serverIndex() serverIndex {
	ix := serverIndex{fips: map[string][]*floatingIP{}, volumes: map[string][]*volume{}}
	for _, f := range w.FloatingIPs {
		if f.PortID != nil {
			ix.fips[*f.PortID] = append(ix.fips[*f.PortID], f)
		}
	}
	for _, v := range w.Volumes {
		if v.Attachment != nil {
			ix.volumes[v.Attachment.ServerID] = append(ix.volumes[v.Attachment.ServerID], v)
		}
	}
	for _, vs := range ix.volumes {
		slices.SortFunc(vs, byDevice)
	}
	return ix
}

func (s *Sim) serverView(w *world, sv *server, mv int, admin bool, ix serverIndex) serverJSON {
	addresses := map[string][]addrJSON{}
	for _, pid := range sv.Ports {
		p := w.Ports[pid]
		if p == nil {
			continue
		}
		name := w.Networks[p.NetworkID].Name
		for _, ip := range p.FixedIPs {
			addresses[name] = append(addresses[name], addrJSON{Version: 4, Addr: ip.IPAddress, Type: "fixed", MAC: p.MACAddress})
		}
		for _, f := range ix.fips[pid] {
			addresses[name] = append(addresses[name], addrJSON{Version: 4, Addr: f.FloatingIPAddress, Type: "floating", MAC: p.MACAddress})
		}
	}
	v := serverJSON{ID: sv.ID, Name: sv.Name, Status: sv.Status, TenantID: sv.ProjectID, UserID: sv.UserID, Metadata: orEmptyMap(sv.Metadata),
		HostID: hostID(sv), Image: refJSON{ID: sv.ImageID, Links: s.links("/images/" + sv.ImageID)},
		Created: sv.Created.Format(time.RFC3339), Updated: sv.Updated.Format(time.RFC3339), Addresses: addresses,
		Links: s.links("/compute/v2.1/servers/" + sv.ID), DiskConfig: "MANUAL", AZ: sv.AZ, SecurityGroups: []nameJSON{},
		VMState: map[string]string{"BUILD": "building", "ACTIVE": "active", "ERROR": "error"}[sv.Status], Volumes: []any{}}
	for _, vol := range ix.volumes[sv.ID] {
		att := map[string]any{"id": vol.ID}
		if mv >= 3 {
			att["delete_on_termination"] = vol.Attachment.DeleteOnTermination
		}
		v.Volumes = append(v.Volumes, att)
	}
	if sv.KeyName != "" {
		v.KeyName = &sv.KeyName
	}
	switch sv.Status {
	case "ACTIVE":
		v.PowerState = 1
	case "BUILD":
		spawning := "spawning"
		v.TaskState = &spawning
	}
	// As Nova with Neutron: the groups of the server's ports, by name,
	// each once (a server made on OPKE's ports has theirs, not "default").
	seen := map[string]bool{}
	for _, pid := range sv.Ports {
		if p := w.Ports[pid]; p != nil {
			for _, id := range p.SecurityGroups {
				if g := w.SecGroups[id]; g != nil && !seen[g.Name] {
					seen[g.Name] = true
					v.SecurityGroups = append(v.SecurityGroups, nameJSON{g.Name})
				}
			}
		}
	}
	if sv.LaunchedAt != nil {
		at := sv.LaunchedAt.Format("2006-01-02T15:04:05.000000")
		v.LaunchedAt = &at
	}
	if f := w.Flavors[sv.FlavorID]; f != nil {
		if mv >= 47 {
			v.Flavor = map[string]any{"original_name": f.Name, "vcpus": f.VCPUs, "ram": f.RAM, "disk": f.Disk, "ephemeral": 0, "swap": 0, "extra_specs": f.specs()}
		} else {
			v.Flavor = refJSON{ID: f.ID, Links: s.links("/flavors/" + f.ID)}
		}
	}
	if mv >= 19 {
		v.Description = sv.Description
	}
	if mv >= 26 {
		tags := orEmpty(sv.Tags)
		v.Tags = &tags
	}
	if sv.Fault != "" {
		v.Fault = &faultJSON{Code: 500, Message: sv.Fault, Created: sv.Updated.Format(time.RFC3339)}
	}
	if admin {
		v.serverAdminJSON = &serverAdminJSON{InstanceName: fmt.Sprintf("instance-%08x", sv.Seq)}
		if sv.Host != "" {
			v.Host, v.Hypervisor = &sv.Host, &sv.Host
		}
		if mv >= 3 {
			v.serverAdminV3JSON = &serverAdminV3JSON{Hostname: sv.Name}
			if sv.UserData != "" {
				v.UserData = &sv.UserData
			}
		}
	}
	return v
}

func hostID(sv *server) string {
	if sv.Host == "" {
		return ""
	}
	return fmt.Sprintf("%x", []byte(sv.ProjectID+sv.Host))[:56]
}

func orEmptyMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (s *Sim) listServers(rw http.ResponseWriter, r *request, mv int) {
	q := r.URL.Query()
	detail := strings.HasSuffix(r.URL.Path, "/detail")
	allTenants := r.tok.admin() && (q.Get("all_tenants") == "1" || strings.EqualFold(q.Get("all_tenants"), "true"))
	var nameRE *regexp.Regexp
	if n := q.Get("name"); n != "" {
		var err error
		if nameRE, err = regexp.Compile(n); err != nil {
			novaError(rw, http.StatusBadRequest, "Invalid name filter")
			return
		}
	}
	tags := parseTagFilter(q)
	if mv < 26 {
		tags = tagFilter{}
	}
	limit, ok := parseLimit(rw, q.Get("limit"), novaError)
	if !ok {
		return
	}
	var changesSince time.Time
	if cs := q.Get("changes-since"); cs != "" {
		t, err := time.Parse(time.RFC3339, cs)
		if err != nil {
			novaError(rw, http.StatusBadRequest, "Invalid filter field: changes-since.")
			return
		}
		changesSince = t
	}
	matches := matchesOf(s, listingKey("servers", r, strconv.Itoa(mv)), func() []*server {
		matches := make([]*server, 0, 64)
		for _, sv := range r.w.Servers {
			switch {
			case !allTenants && sv.ProjectID != r.tok.ProjectID,
				nameRE != nil && !nameRE.MatchString(sv.Name),
				q.Get("status") != "" && !strings.EqualFold(q.Get("status"), sv.Status),
				q.Get("flavor") != "" && q.Get("flavor") != sv.FlavorID,
				q.Get("image") != "" && q.Get("image") != sv.ImageID,
				!changesSince.IsZero() && sv.Updated.Before(changesSince),
				!tags.match(sv.Tags):
				continue
			}
			matches = append(matches, sv)
		}
		// Nova's default order: newest first.
		slices.SortFunc(matches, func(a, b *server) int { return int(b.Seq - a.Seq) })
		return matches
	})
	page, more, ok := paginate(matches, q.Get("marker"), limit, func(sv *server) string { return sv.ID })
	if !ok {
		novaError(rw, http.StatusBadRequest, "marker ["+q.Get("marker")+"] not found")
		return
	}
	out := make([]any, 0, len(page))
	ix := r.w.serverIndex()
	for _, sv := range page {
		if detail {
			out = append(out, s.serverView(r.w, sv, mv, r.tok.admin(), ix))
		} else {
			out = append(out, map[string]any{"id": sv.ID, "name": sv.Name, "links": s.links("/compute/v2.1/servers/" + sv.ID)})
		}
	}
	body := map[string]any{"servers": out}
	if more {
		body["servers_links"] = []any{map[string]any{"rel": "next", "href": nextHref(requestBase(r.Request, s), r.URL, page[len(page)-1].ID)}}
	}
	writeJSON(rw, http.StatusOK, body)
}

type createServerBody struct {
	Server struct {
		Name             string            `json:"name"`
		FlavorRef        string            `json:"flavorRef"`
		ImageRef         string            `json:"imageRef"`
		KeyName          string            `json:"key_name"`
		UserData         string            `json:"user_data"`
		Metadata         map[string]string `json:"metadata"`
		Tags             []string          `json:"tags"`
		AvailabilityZone string            `json:"availability_zone"`
		Networks         any               `json:"networks"`
		SecurityGroups   []struct {
			Name string `json:"name"`
		} `json:"security_groups"`
	} `json:"server"`
	Hints struct {
		Group string `json:"group"`
	} `json:"os:scheduler_hints"`
}

func (s *Sim) createServer(rw http.ResponseWriter, r *request, mv int) {
	var body createServerBody
	if err := decodeBody(r, &body); err != nil {
		novaError(rw, http.StatusBadRequest, err.Error())
		return
	}
	w, req := r.w, body.Server
	if strings.TrimSpace(req.Name) == "" || len(req.Name) > 255 {
		novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute name.")
		return
	}
	fl := w.findFlavor(req.FlavorRef)
	if fl == nil {
		novaError(rw, http.StatusBadRequest, "Flavor "+req.FlavorRef+" could not be found.")
		return
	}
	if w.Images[req.ImageRef] == nil {
		novaError(rw, http.StatusBadRequest, "Can not find requested image")
		return
	}
	if req.KeyName != "" && w.Keypairs[r.tok.UserID+"/"+req.KeyName] == nil {
		novaError(rw, http.StatusBadRequest, "Invalid key_name provided.")
		return
	}
	if req.UserData != "" {
		raw, err := base64.StdEncoding.DecodeString(req.UserData)
		if err != nil {
			novaError(rw, http.StatusBadRequest, "User data needs to be valid base 64.")
			return
		}
		if len(raw) > 65535 {
			novaError(rw, http.StatusBadRequest, "User data too large. User data must be no larger than 65535 bytes once base64 encoded.")
			return
		}
	}
	if len(req.Tags) > 0 && mv < 52 {
		novaError(rw, http.StatusBadRequest, "Additional properties are not allowed ('tags' was unexpected)")
		return
	}
	var group *serverGroup
	if id := body.Hints.Group; id != "" {
		if group = w.ServerGroups[id]; group == nil {
			novaError(rw, http.StatusBadRequest, "Invalid server group: "+id)
			return
		}
		if limit := w.quota(r.tok.ProjectID, "server_group_members"); limit >= 0 && len(group.Members) >= limit {
			novaError(rw, http.StatusForbidden, "Quota exceeded, too many servers in group")
			return
		}
	}
	if msg := w.checkComputeQuota(r.tok.ProjectID, fl); msg != "" {
		novaError(rw, http.StatusForbidden, msg)
		return
	}
	sgNames := []string{"default"}
	if len(req.SecurityGroups) > 0 {
		sgNames = nil
		for _, sg := range req.SecurityGroups {
			if w.findSecGroup(r.tok.ProjectID, sg.Name, r.now) == nil {
				novaError(rw, http.StatusBadRequest, "Security group "+sg.Name+" not found for project "+r.tok.ProjectID+".")
				return
			}
			sgNames = append(sgNames, sg.Name)
		}
	}
	sv := &server{meta: w.meta(r.now), Seq: w.next(), ID: newID(), Name: req.Name, ProjectID: r.tok.ProjectID, UserID: r.tok.UserID,
		FlavorID: fl.ID, ImageID: req.ImageRef, KeyName: req.KeyName, UserData: req.UserData, Metadata: req.Metadata,
		Tags: dedupe(req.Tags), Status: "BUILD", AZ: "nova", SecurityGroups: sgNames}
	if req.AvailabilityZone != "" {
		sv.AZ = req.AvailabilityZone
	}
	if code, msg := w.attachNetworks(sv, req.Networks, r.now); code != 0 {
		novaError(rw, code, msg)
		return
	}
	w.Servers[sv.ID] = sv
	if group != nil {
		sv.GroupID = group.ID
		group.Members = append(group.Members, sv.ID)
	}
	if host := w.placeServer(sv, group); host == "" {
		sv.Status, sv.Fault = "ERROR", "No valid host was found. There are not enough hosts available."
	} else {
		sv.Host = host
		w.schedule(r.now, s.opts.BootDelay, "server-active", sv.ID)
	}
	rw.Header().Set("Location", requestBase(r.Request, s)+"/compute/v2.1/servers/"+sv.ID)
	sgs := []any{}
	for _, n := range sgNames {
		sgs = append(sgs, map[string]any{"name": n})
	}
	writeJSON(rw, http.StatusAccepted, map[string]any{"server": map[string]any{"id": sv.ID, "links": s.links("/compute/v2.1/servers/" + sv.ID),
		"OS-DCF:diskConfig": "MANUAL", "security_groups": sgs, "adminPass": newSecret(6)}})
}

func dedupe(tags []string) []string {
	var out []string
	for _, t := range tags {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func (w *world) checkComputeQuota(projectID string, fl *flavor) string {
	var n, cores, ram int
	for _, sv := range w.Servers {
		if sv.ProjectID == projectID {
			n++
			if f := w.Flavors[sv.FlavorID]; f != nil {
				cores, ram = cores+f.VCPUs, ram+f.RAM
			}
		}
	}
	for _, c := range []struct {
		name       string
		used, want int
	}{{"instances", n, 1}, {"cores", cores, fl.VCPUs}, {"ram", ram, fl.RAM}} {
		if limit := w.quota(projectID, c.name); limit >= 0 && c.used+c.want > limit {
			return fmt.Sprintf("Quota exceeded for %s: Requested %d, but already used %d of %d %s", c.name, c.want, c.used, limit, c.name)
		}
	}
	return ""
}

func (w *world) quota(projectID, resource string) int {
	q := w.Quotas[projectID]
	if q == nil {
		return -1
	}
	if v, ok := (*q)[resource]; ok {
		return v
	}
	return -1
}

// attachNetworks creates or binds a port per requested network.
func (w *world) attachNetworks(sv *server, networks any, now time.Time) (int, string) {
	type netReq struct{ uuid, port, fixedIP string }
	var reqs []netReq
	switch v := networks.(type) {
	case nil, string:
		if v == "none" {
			return 0, ""
		}
		var candidates []*network
		for _, n := range w.Networks {
			if n.ProjectID == sv.ProjectID && !n.External {
				candidates = append(candidates, n)
			}
		}
		if len(candidates) != 1 {
			return http.StatusConflict, "Multiple possible networks found, use a Network ID to be more specific."
		}
		reqs = append(reqs, netReq{uuid: candidates[0].ID})
	case []any:
		for _, item := range v {
			m, _ := item.(map[string]any)
			str := func(k string) string { s, _ := m[k].(string); return s }
			reqs = append(reqs, netReq{uuid: str("uuid"), port: str("port"), fixedIP: str("fixed_ip")})
		}
	default:
		return http.StatusBadRequest, "Invalid input for field/attribute networks."
	}
	for _, nr := range reqs {
		if nr.port != "" {
			p := w.Ports[nr.port]
			if p == nil {
				return http.StatusBadRequest, "Port " + nr.port + " could not be found."
			}
			if p.DeviceID != "" {
				return http.StatusConflict, "Port " + nr.port + " is still in use."
			}
			continue
		}
		n := w.Networks[nr.uuid]
		if n == nil || (n.ProjectID != sv.ProjectID && !n.Shared) {
			return http.StatusBadRequest, "Network " + nr.uuid + " could not be found."
		}
		if len(n.Subnets) == 0 {
			return http.StatusBadRequest, "Network " + nr.uuid + " requires a subnet in order to boot instances on."
		}
	}
	for _, nr := range reqs {
		if nr.port != "" {
			p := w.Ports[nr.port]
			p.DeviceID, p.DeviceOwner, p.Updated = sv.ID, "compute:"+sv.AZ, now.UTC()
			sv.Ports = append(sv.Ports, p.ID)
			continue
		}
		var fixed []fixedIP
		if nr.fixedIP != "" {
			fixed = []fixedIP{{IPAddress: nr.fixedIP}}
		}
		var sgIDs []string
		for _, name := range sv.SecurityGroups {
			sgIDs = append(sgIDs, w.findSecGroup(sv.ProjectID, name, now).ID)
		}
		p, code, msg := w.newPort(sv.ProjectID, nr.uuid, fixed, sgIDs, now)
		if code != 0 {
			w.releaseServerPorts(sv)
			return code, msg
		}
		p.DeviceID, p.DeviceOwner = sv.ID, "compute:"+sv.AZ
		sv.Ports, sv.NovaPorts = append(sv.Ports, p.ID), append(sv.NovaPorts, p.ID)
	}
	return 0, ""
}

// placeServer picks a hypervisor: the least loaded one, avoiding the hosts
// of the other members of an anti-affinity group. "" means none fits.
func (w *world) placeServer(sv *server, group *serverGroup) string {
	load := map[string]int{}
	for _, other := range w.Servers {
		if other.Host != "" {
			load[other.Host]++
		}
	}
	avoid := map[string]bool{}
	if group != nil && group.Policy == "anti-affinity" {
		for _, id := range group.Members {
			if m := w.Servers[id]; m != nil && m.ID != sv.ID {
				avoid[m.Host] = true
			}
		}
	}
	var same string
	if group != nil && group.Policy == "affinity" {
		for _, id := range group.Members {
			if m := w.Servers[id]; m != nil && m.Host != "" {
				same = m.Host
			}
		}
	}
	best := ""
	for _, h := range w.Hypervisors {
		if avoid[h] || (same != "" && h != same) {
			continue
		}
		if best == "" || load[h] < load[best] {
			best = h
		}
	}
	return best
}

func (w *world) activateServer(id string, now time.Time) {
	sv := w.Servers[id]
	if sv == nil || sv.Status != "BUILD" {
		return
	}
	t := now.UTC()
	if w.boot != nil {
		if err := w.boot(sv); errors.Is(err, errStillBooting) {
			// Asked again at the next tick (a request, or the real hosts'
			// loop): due now, so a test's frozen clock does not hold it.
			w.schedule(now, 0, "server-active", id)
			return
		} else if err != nil {
			sv.Status, sv.Fault, sv.Updated = "ERROR", "Build of instance "+sv.ID+" aborted: "+err.Error(), t.Truncate(time.Second)
			return
		}
	}
	sv.Status, sv.Updated, sv.LaunchedAt = "ACTIVE", t.Truncate(time.Second), &t
	for _, pid := range sv.Ports {
		if p := w.Ports[pid]; p != nil {
			p.Status = "ACTIVE"
		}
	}
}

func (s *Sim) getServer(rw http.ResponseWriter, r *request, mv int) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"server": s.serverView(r.w, sv, mv, r.tok.admin(), r.w.serverIndex())})
}

// updateServer renames a server (and, from 2.19, sets its description),
// as Nova's PUT /servers/{id} does; any other field is refused.
func (s *Sim) updateServer(rw http.ResponseWriter, r *request, mv int) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return
	}
	var req struct {
		Server map[string]json.RawMessage `json:"server"`
	}
	if err := decodeBody(r, &req); err != nil || req.Server == nil {
		novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute server.")
		return
	}
	allowed := []string{"name", "accessIPv4", "accessIPv6"}
	if mv >= 19 {
		allowed = append(allowed, "description")
	}
	for k := range req.Server {
		if !slices.Contains(allowed, k) {
			novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute server. Value: "+k+". Additional properties are not allowed ('"+k+"' was unexpected)")
			return
		}
	}
	if raw, ok := req.Server["name"]; ok {
		var name string
		if json.Unmarshal(raw, &name) != nil || strings.TrimSpace(name) == "" || len(name) > 255 {
			novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute name.")
			return
		}
		sv.Name = name
	}
	if raw, ok := req.Server["description"]; ok {
		var d *string
		if json.Unmarshal(raw, &d) != nil || d != nil && len(*d) > 255 {
			novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute description.")
			return
		}
		sv.Description = d
	}
	sv.Updated = r.now.UTC()
	writeJSON(rw, http.StatusOK, map[string]any{"server": s.serverView(r.w, sv, mv, r.tok.admin(), r.w.serverIndex())})
}

// metadataOK checks server metadata as Nova does: keys of 1 to 255
// characters, values of at most 255, at most 128 items.
func metadataOK(rw http.ResponseWriter, md map[string]string) bool {
	for k, v := range md {
		if k == "" || len(k) > 255 || len(v) > 255 {
			novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute metadata.")
			return false
		}
	}
	if len(md) > 128 {
		novaError(rw, http.StatusForbidden, "Quota exceeded for metadata_items: Requested "+strconv.Itoa(len(md))+", but already used 0 of 128 metadata_items")
		return false
	}
	return true
}

// serverMetadata is /servers/{id}/metadata: GET lists, PUT replaces, POST
// merges.
func (s *Sim) serverMetadata(rw http.ResponseWriter, r *request, _ int) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return
	}
	if r.Method != http.MethodGet {
		var req struct {
			Metadata map[string]string `json:"metadata"`
		}
		if err := decodeBody(r, &req); err != nil || req.Metadata == nil {
			novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute metadata.")
			return
		}
		next := req.Metadata
		if r.Method == http.MethodPost {
			next = maps.Clone(orEmptyMap(sv.Metadata))
			maps.Copy(next, req.Metadata)
		}
		if !metadataOK(rw, next) {
			return
		}
		sv.Metadata, sv.Updated = next, r.now.UTC()
	}
	writeJSON(rw, http.StatusOK, map[string]any{"metadata": orEmptyMap(sv.Metadata)})
}

// serverMetadatum is /servers/{id}/metadata/{key}.
func (s *Sim) serverMetadatum(rw http.ResponseWriter, r *request, _ int) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return
	}
	key := r.PathValue("key")
	value, has := sv.Metadata[key]
	switch r.Method {
	case http.MethodGet:
		if !has {
			novaError(rw, http.StatusNotFound, "Metadata item was not found")
			return
		}
		writeJSON(rw, http.StatusOK, map[string]any{"meta": map[string]string{key: value}})
	case http.MethodPut:
		var req struct {
			Meta map[string]string `json:"meta"`
		}
		if err := decodeBody(r, &req); err != nil || len(req.Meta) != 1 {
			novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute meta.")
			return
		}
		if _, ok := req.Meta[key]; !ok {
			novaError(rw, http.StatusBadRequest, "Request body and URI mismatch")
			return
		}
		next := maps.Clone(orEmptyMap(sv.Metadata))
		next[key] = req.Meta[key]
		if !metadataOK(rw, next) {
			return
		}
		sv.Metadata, sv.Updated = next, r.now.UTC()
		writeJSON(rw, http.StatusOK, map[string]any{"meta": req.Meta})
	case http.MethodDelete:
		if !has {
			novaError(rw, http.StatusNotFound, "Metadata item was not found")
			return
		}
		delete(sv.Metadata, key)
		sv.Updated = r.now.UTC()
		rw.WriteHeader(http.StatusNoContent)
	}
}

func (s *Sim) deleteServer(rw http.ResponseWriter, r *request, _ int) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return
	}
	r.w.removeServer(sv, r.now)
	rw.WriteHeader(http.StatusNoContent)
}

func (w *world) removeServer(sv *server, now time.Time) {
	w.releaseServerPorts(sv)
	w.releaseServerVolumes(sv, now)
	for _, pid := range sv.Ports {
		if p := w.Ports[pid]; p != nil && !slices.Contains(sv.NovaPorts, pid) {
			p.DeviceID, p.DeviceOwner, p.Status, p.Updated = "", "", "DOWN", now.UTC()
		}
	}
	if g := w.ServerGroups[sv.GroupID]; g != nil {
		g.Members = slices.DeleteFunc(g.Members, func(id string) bool { return id == sv.ID })
	}
	delete(w.Servers, sv.ID)
	if w.release != nil {
		w.release(sv.ID)
	}
}

// releaseServerPorts deletes the ports Nova created for the server.
func (w *world) releaseServerPorts(sv *server) {
	for _, pid := range sv.NovaPorts {
		w.deletePort(pid)
	}
	sv.Ports = slices.DeleteFunc(sv.Ports, func(id string) bool { return slices.Contains(sv.NovaPorts, id) })
	sv.NovaPorts = nil
}

func (s *Sim) serverAction(rw http.ResponseWriter, r *request, _ int) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return
	}
	var body map[string]any
	if err := decodeBody(r, &body); err != nil {
		novaError(rw, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case body["os-getConsoleOutput"] != nil:
		r.readOnly = true
		length := -1
		if m, ok := body["os-getConsoleOutput"].(map[string]any); ok {
			if l, ok := m["length"].(float64); ok {
				length = int(l)
			}
		}
		if s.real != nil {
			writeJSON(rw, http.StatusOK, map[string]any{"output": lastLines(s.real.console(sv.ID), length)})
			return
		}
		if sv.Status == "ACTIVE" {
			if err := ensureHostKey(sv); err != nil {
				novaError(rw, http.StatusInternalServerError, err.Error())
				return
			}
		}
		writeJSON(rw, http.StatusOK, map[string]any{"output": consoleOutput(sv, length, s.printsHostKeys(sv.ID))})
	case body["os-resetState"] != nil:
		// An administrator's `openstack server set --state`: Nova's
		// record only; the machine runs on as it was.
		m, _ := body["os-resetState"].(map[string]any)
		st, _ := m["state"].(string)
		if !r.tok.admin() {
			novaError(rw, http.StatusForbidden, "Policy doesn't allow os_compute_api:os-admin-actions:reset_state to be performed.")
			return
		}
		switch st {
		case "error", "active":
			sv.Status = strings.ToUpper(st)
			rw.WriteHeader(http.StatusAccepted)
		default:
			novaError(rw, http.StatusBadRequest, fmt.Sprintf("Invalid input for field/attribute state. Value: %s. '%s' is not one of ['active', 'error']", st, st))
		}
	case has(body, "os-stop"), has(body, "os-start"):
		// Power off (SHUTOFF) and on again: the machine stops, keeping
		// its disk, and boots again from it (no Ignition, /run empty).
		verb, from, to := "stop", "ACTIVE", "SHUTOFF"
		if has(body, "os-start") {
			verb, from, to = "start", "SHUTOFF", "ACTIVE"
		}
		if sv.Status != from {
			novaError(rw, http.StatusConflict, fmt.Sprintf("Cannot '%s' instance %s while it is in vm_state %s", verb, sv.ID, vmState(sv.Status)))
			return
		}
		sv.Status, sv.Updated = to, r.now.UTC().Truncate(time.Second)
		if s.real == nil {
			s.powerHost(sv.ID)
		}
		rw.WriteHeader(http.StatusAccepted)
	case body["reboot"] != nil:
		if sv.Status != "ACTIVE" {
			novaError(rw, http.StatusConflict, "Cannot 'reboot' instance "+sv.ID+" while it is in vm_state "+vmState(sv.Status))
			return
		}
		if s.real != nil {
			s.real.reboot(sv.ID)
		} else {
			s.rebootHost(sv.ID)
		}
		rw.WriteHeader(http.StatusAccepted)
	default:
		novaError(rw, http.StatusBadRequest, "There is no such action")
	}
}

// lastLines is the last n lines of a console (all for n < 0).
func lastLines(console string, n int) string {
	if n < 0 {
		return console
	}
	lines := strings.SplitAfter(console, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if n < len(lines) {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// printsHostKeys reports whether a host has a unit that prints its SSH
// host keys on the console (the block cloud-init prints; OPKE's Ignition
// has such a unit): a host without one prints none, as Flatcar does not.
func (s *Sim) printsHostKeys(id string) bool {
	dir := filepath.Join(s.hostsDir, id, "root", "etc", "systemd", "system")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".service") || !e.Type().IsRegular() {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && bytes.Contains(b, []byte("BEGIN SSH HOST KEY KEYS")) {
			return true
		}
	}
	return false
}

// consoleOutput is the serial console of a booted host, the last length
// lines; the host keys are on it if a unit of the host printed them.
func consoleOutput(sv *server, length int, printsKeys bool) string {
	if sv.Status == "BUILD" {
		return ""
	}
	lines := []string{
		"[    0.000000] Linux version 6.6.0 (simulated)",
		"[    1.000000] ignition[1]: fetching config from the metadata service",
		"[    2.000000] systemd[1]: Started sshd.service.",
	}
	// As cloud images print them, for clients to pin the host key.
	if signer, err := ssh.ParsePrivateKey([]byte(sv.HostKey)); err == nil && printsKeys {
		lines = append(lines, "-----BEGIN SSH HOST KEY KEYS-----",
			strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))+" root@"+sv.Name,
			"-----END SSH HOST KEY KEYS-----")
	}
	lines = append(lines, sv.Name+" login: ")
	if length >= 0 && length < len(lines) {
		lines = lines[len(lines)-length:]
	}
	return strings.Join(lines, "\n") + "\n"
}

var tagRE = regexp.MustCompile(`^[^,/]{1,60}$`)

func (s *Sim) serverTags(rw http.ResponseWriter, r *request, mv int) {
	sv := r.visibleServer(r.PathValue("id"))
	if mv < 26 || sv == nil {
		novaError(rw, http.StatusNotFound, "Instance "+r.PathValue("id")+" could not be found.")
		return
	}
	switch r.Method {
	case http.MethodPut:
		var body struct {
			Tags []string `json:"tags"`
		}
		if err := decodeBody(r, &body); err != nil || len(body.Tags) > 50 || slices.ContainsFunc(body.Tags, func(t string) bool { return !tagRE.MatchString(t) }) {
			novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute tags.")
			return
		}
		sv.Tags, sv.Updated = dedupe(body.Tags), r.now.UTC()
	case http.MethodDelete:
		sv.Tags, sv.Updated = nil, r.now.UTC()
		rw.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"tags": orEmpty(sv.Tags)})
}

func (s *Sim) serverTag(rw http.ResponseWriter, r *request, mv int) {
	sv := r.visibleServer(r.PathValue("id"))
	if mv < 26 || sv == nil {
		novaError(rw, http.StatusNotFound, "Instance "+r.PathValue("id")+" could not be found.")
		return
	}
	tag := r.PathValue("tag")
	has := slices.Contains(sv.Tags, tag)
	switch r.Method {
	case http.MethodGet:
		if !has {
			novaError(rw, http.StatusNotFound, "Tag "+tag+" could not be found.")
			return
		}
		rw.WriteHeader(http.StatusNoContent)
	case http.MethodPut:
		if has {
			rw.WriteHeader(http.StatusNoContent)
			return
		}
		if !tagRE.MatchString(tag) || len(sv.Tags) >= 50 {
			novaError(rw, http.StatusBadRequest, "Invalid tag "+tag)
			return
		}
		sv.Tags, sv.Updated = append(sv.Tags, tag), r.now.UTC()
		rw.Header().Set("Location", requestBase(r.Request, s)+r.URL.Path)
		rw.WriteHeader(http.StatusCreated)
	case http.MethodDelete:
		if !has {
			novaError(rw, http.StatusNotFound, "Tag "+tag+" could not be found.")
			return
		}
		sv.Tags = slices.DeleteFunc(sv.Tags, func(t string) bool { return t == tag })
		sv.Updated = r.now.UTC()
		rw.WriteHeader(http.StatusNoContent)
	}
}

func (s *Sim) serverInterfaces(rw http.ResponseWriter, r *request, _ int) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return
	}
	var out []any
	for _, pid := range sv.Ports {
		if p := r.w.Ports[pid]; p != nil {
			var ips []any
			for _, ip := range p.FixedIPs {
				ips = append(ips, map[string]any{"subnet_id": ip.SubnetID, "ip_address": ip.IPAddress})
			}
			out = append(out, map[string]any{"port_id": p.ID, "net_id": p.NetworkID, "mac_addr": p.MACAddress, "port_state": p.Status, "fixed_ips": ips})
		}
	}
	writeJSON(rw, http.StatusOK, map[string]any{"interfaceAttachments": orEmpty(out)})
}

func serverGroupView(g *serverGroup, mv int) map[string]any {
	v := map[string]any{"id": g.ID, "name": g.Name, "members": orEmpty(g.Members)}
	if mv >= 64 {
		v["policy"], v["rules"], v["project_id"], v["user_id"] = g.Policy, map[string]any{}, g.ProjectID, g.UserID
	} else {
		v["policies"], v["metadata"] = []string{g.Policy}, map[string]any{}
	}
	return v
}

// listServerGroups answers as Nova's server groups index does: no links,
// a slice of at most limit groups from offset (common.limited), limit
// capped at the API's max_limit (1000) however many groups there are.
func (s *Sim) listServerGroups(rw http.ResponseWriter, r *request, mv int) {
	q := r.URL.Query()
	offset, limit := 0, maxPage
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			novaError(rw, http.StatusBadRequest, "Invalid input for query parameters offset. Value: "+v+".")
			return
		}
		offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			novaError(rw, http.StatusBadRequest, "Invalid input for query parameters limit. Value: "+v+".")
			return
		}
		if n > 0 {
			limit = min(n, maxPage)
		}
	}
	var out []any
	for _, g := range sortedBy(r.w.ServerGroups, func(g *serverGroup) string { return g.Name }) {
		if g.ProjectID == r.tok.ProjectID || (r.tok.admin() && q.Get("all_projects") != "") {
			out = append(out, serverGroupView(g, mv))
		}
	}
	out = out[min(offset, len(out)):]
	out = out[:min(limit, len(out))]
	writeJSON(rw, http.StatusOK, map[string]any{"server_groups": orEmpty(out)})
}

func (s *Sim) createServerGroup(rw http.ResponseWriter, r *request, mv int) {
	var body struct {
		SG struct {
			Name     string   `json:"name"`
			Policy   string   `json:"policy"`
			Policies []string `json:"policies"`
		} `json:"server_group"`
	}
	if err := decodeBody(r, &body); err != nil || body.SG.Name == "" {
		novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute server_group.")
		return
	}
	policy := body.SG.Policy
	if mv < 64 {
		if len(body.SG.Policies) != 1 || policy != "" {
			novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute policies.")
			return
		}
		policy = body.SG.Policies[0]
	}
	if !slices.Contains([]string{"anti-affinity", "affinity", "soft-anti-affinity", "soft-affinity"}, policy) {
		novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute policy. Value: "+policy)
		return
	}
	n := 0
	for _, g := range r.w.ServerGroups {
		if g.ProjectID == r.tok.ProjectID {
			n++
		}
	}
	if limit := r.w.quota(r.tok.ProjectID, "server_groups"); limit >= 0 && n >= limit {
		novaError(rw, http.StatusForbidden, "Quota exceeded, too many server groups.")
		return
	}
	g := &serverGroup{ID: newID(), Name: body.SG.Name, Policy: policy, ProjectID: r.tok.ProjectID, UserID: r.tok.UserID}
	r.w.ServerGroups[g.ID] = g
	writeJSON(rw, http.StatusOK, map[string]any{"server_group": serverGroupView(g, mv)})
}

// visibleServerGroup returns the group named by the path, answering 404 for
// one the caller may not see.
func (r *request) visibleServerGroup(rw http.ResponseWriter) (*serverGroup, bool) {
	g := r.w.ServerGroups[r.PathValue("id")]
	if g == nil || !r.visible(g.ProjectID, false) {
		novaError(rw, http.StatusNotFound, "Instance group "+r.PathValue("id")+" could not be found.")
		return nil, false
	}
	return g, true
}

func (s *Sim) getServerGroup(rw http.ResponseWriter, r *request, mv int) {
	g, ok := r.visibleServerGroup(rw)
	if !ok {
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"server_group": serverGroupView(g, mv)})
}

func (s *Sim) deleteServerGroup(rw http.ResponseWriter, r *request, _ int) {
	g, ok := r.visibleServerGroup(rw)
	if !ok {
		return
	}
	for _, id := range g.Members {
		if sv := r.w.Servers[id]; sv != nil {
			sv.GroupID = ""
		}
	}
	delete(r.w.ServerGroups, g.ID)
	rw.WriteHeader(http.StatusNoContent)
}

var novaQuotaNames = []string{"instances", "cores", "ram", "key_pairs", "server_groups", "server_group_members"}

func (s *Sim) getNovaQuotas(rw http.ResponseWriter, r *request, _ int) {
	project := r.PathValue("project")
	if project != r.tok.ProjectID && !r.tok.admin() {
		novaError(rw, http.StatusForbidden, "Policy doesn't allow os_compute_api:os-quota-sets:show to be performed.")
		return
	}
	detail := strings.HasSuffix(r.URL.Path, "/detail")
	out := map[string]any{"id": project}
	for _, name := range novaQuotaNames {
		limit := r.w.quota(project, name)
		if detail {
			out[name] = map[string]any{"limit": limit, "in_use": r.w.novaUsage(project, name), "reserved": 0}
		} else {
			out[name] = limit
		}
	}
	writeJSON(rw, http.StatusOK, map[string]any{"quota_set": out})
}

func (w *world) novaUsage(project, name string) int {
	n := 0
	switch name {
	case "instances", "cores", "ram":
		for _, sv := range w.Servers {
			if sv.ProjectID != project {
				continue
			}
			f := w.Flavors[sv.FlavorID]
			switch name {
			case "instances":
				n++
			case "cores":
				n += f.VCPUs
			case "ram":
				n += f.RAM
			}
		}
	case "server_groups":
		for _, g := range w.ServerGroups {
			if g.ProjectID == project {
				n++
			}
		}
	}
	return n
}

func (s *Sim) putNovaQuotas(rw http.ResponseWriter, r *request, mv int) {
	if !r.tok.admin() {
		novaError(rw, http.StatusForbidden, "Policy doesn't allow os_compute_api:os-quota-sets:update to be performed.")
		return
	}
	var body struct {
		QS map[string]any `json:"quota_set"`
	}
	if err := decodeBody(r, &body); err != nil {
		novaError(rw, http.StatusBadRequest, err.Error())
		return
	}
	if !r.w.setQuotas(r.PathValue("project"), body.QS, novaQuotaNames) {
		novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute quota_set.")
		return
	}
	s.getNovaQuotas(rw, r, mv)
}

// setQuotas sets the named limits of a project from a request body.
func (w *world) setQuotas(project string, values map[string]any, allowed []string) bool {
	q := w.Quotas[project]
	if q == nil {
		q = defaultQuotas()
		w.Quotas[project] = q
	}
	for k, v := range values {
		f, ok := v.(float64)
		if !slices.Contains(allowed, k) || !ok || f < -1 {
			if k == "force" || k == "project_id" {
				continue
			}
			return false
		}
		(*q)[k] = int(f)
	}
	return true
}

func (s *Sim) novaLimits(rw http.ResponseWriter, r *request, _ int) {
	p := r.tok.ProjectID
	writeJSON(rw, http.StatusOK, map[string]any{"limits": map[string]any{"rate": []any{}, "absolute": map[string]any{
		"maxTotalInstances": r.w.quota(p, "instances"), "maxTotalCores": r.w.quota(p, "cores"), "maxTotalRAMSize": r.w.quota(p, "ram"),
		"maxTotalKeypairs": r.w.quota(p, "key_pairs"), "maxServerGroups": r.w.quota(p, "server_groups"), "maxServerGroupMembers": r.w.quota(p, "server_group_members"),
		"totalInstancesUsed": r.w.novaUsage(p, "instances"), "totalCoresUsed": r.w.novaUsage(p, "cores"), "totalRAMUsed": r.w.novaUsage(p, "ram"),
		"totalServerGroupsUsed": r.w.novaUsage(p, "server_groups"), "maxServerMeta": 128, "maxPersonality": 5, "maxPersonalitySize": 10240,
	}}})
}

func (s *Sim) listHypervisors(rw http.ResponseWriter, r *request, _ int) {
	if !r.tok.admin() {
		novaError(rw, http.StatusForbidden, "Policy doesn't allow os_compute_api:os-hypervisors:list to be performed.")
		return
	}
	var out []any
	for i, h := range r.w.Hypervisors {
		out = append(out, map[string]any{"id": i + 1, "hypervisor_hostname": h, "state": "up", "status": "enabled"})
	}
	writeJSON(rw, http.StatusOK, map[string]any{"hypervisors": out})
}

func (s *Sim) listAZs(rw http.ResponseWriter, _ *request, _ int) {
	writeJSON(rw, http.StatusOK, map[string]any{"availabilityZoneInfo": []any{map[string]any{"zoneName": "nova", "zoneState": map[string]any{"available": true}, "hosts": nil}}})
}

func (s *Sim) imageVersions(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusMultipleChoices, map[string]any{"versions": []any{map[string]any{"id": "v2.16", "status": "CURRENT",
		"links": []any{map[string]any{"rel": "self", "href": requestBase(r, s) + "/image/v2/"}}}}})
}

func (s *Sim) imageView(img *image) map[string]any {
	return map[string]any{"id": img.ID, "name": img.Name, "status": img.Status, "visibility": img.Visibility, "disk_format": img.DiskFormat,
		"container_format": img.ContainerFormat, "size": img.Size, "min_disk": img.MinDisk, "min_ram": 0, "owner": img.Owner,
		"protected": false, "os_hidden": false, "tags": []string{}, "created_at": img.Created.Format(time.RFC3339),
		"updated_at": img.Updated.Format(time.RFC3339), "self": "/v2/images/" + img.ID, "file": "/v2/images/" + img.ID + "/file",
		"schema": "/v2/schemas/image", "checksum": nil, "virtual_size": nil}
}

func (s *Sim) listImages(rw http.ResponseWriter, r *request) {
	q := r.URL.Query()
	limit, ok := parseLimit(rw, q.Get("limit"), glanceError)
	if !ok {
		return
	}
	var matches []*image
	for _, img := range sortedBy(r.w.Images, func(i *image) int64 { return -i.Seq }) {
		if (q.Get("name") == "" || q.Get("name") == img.Name) && (q.Get("status") == "" || q.Get("status") == img.Status) {
			matches = append(matches, img)
		}
	}
	page, more, ok := paginate(matches, q.Get("marker"), limit, func(i *image) string { return i.ID })
	if !ok {
		glanceError(rw, http.StatusBadRequest, "marker not found")
		return
	}
	out := make([]any, 0, len(page))
	for _, img := range page {
		out = append(out, s.imageView(img))
	}
	body := map[string]any{"images": out, "first": "/v2/images", "schema": "/v2/schemas/images"}
	if more {
		nq := r.URL.Query()
		nq.Set("marker", page[len(page)-1].ID)
		body["next"] = "/v2/images?" + nq.Encode()
	}
	writeJSON(rw, http.StatusOK, body)
}

func glanceError(rw http.ResponseWriter, code int, msg string) {
	rw.Header().Set("Content-Type", "text/plain")
	rw.WriteHeader(code)
	fmt.Fprintf(rw, "%d %s\n\n%s\n", code, http.StatusText(code), msg)
}

func (s *Sim) getImage(rw http.ResponseWriter, r *request) {
	img := r.w.Images[r.PathValue("id")]
	if img == nil {
		glanceError(rw, http.StatusNotFound, "No image found with ID "+r.PathValue("id"))
		return
	}
	writeJSON(rw, http.StatusOK, s.imageView(img))
}

// vmState is Nova's vm_state of a server status, as its conflicts name it.
func vmState(status string) string {
	switch status {
	case "SHUTOFF":
		return "stopped"
	}
	return strings.ToLower(status)
}

// has reports whether an action's body names it: {"os-stop": null} does.
func has(body map[string]any, action string) bool {
	_, ok := body[action]
	return ok
}

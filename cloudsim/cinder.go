package cloudsim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Cinder: Block Storage v3 at /volume/v3/{project_id} (volumes, snapshots,
// volume types, availability zones) and Nova's volume attachments
// (os-volume_attachments), as a Zed cloud answers them. A volume goes
// creating -> available, attaching -> in-use and detaching -> available
// after Options.BootDelay, as Cinder's and Nova's workers take their time;
// a server deleted with volumes leaves them available (or deleted, with
// delete_on_termination). Quotas: volumes, gigabytes and snapshots, with
// Cinder's defaults. With real hosts, a volume's blocks are a file and an
// attachment a block device in the server's machine (realvolumes.go,
// HOSTS.md); with in-process hosts an attachment is a record only.

// Cinder's microversions: those of the Zed release.
const (
	cinderMinMinor = 0
	cinderMaxMinor = 70
)

// defaultVolumeType is the type Cinder creates at its database's
// creation and gives a volume that names none.
const defaultVolumeType = "__DEFAULT__"

// defaultVolumeTypeID is its id in the simulator.
const defaultVolumeTypeID = "4b0a4d1e-54ab-4f1c-8f55-0f0e2d1c7a10"

type volume struct {
	meta
	Seq         int64             `json:"seq"`
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	ProjectID   string            `json:"project_id"`
	UserID      string            `json:"user_id"`
	Status      string            `json:"status"`
	Size        int               `json:"size"`
	AZ          string            `json:"availability_zone"`
	SnapshotID  string            `json:"snapshot_id,omitempty"`
	SourceVolID string            `json:"source_volid,omitempty"`
	Metadata    map[string]string `json:"metadata"`
	// Attachment is the volume's attachment to a server: attached once
	// the volume is in-use, on its way while attaching or detaching.
	Attachment *volumeAttachment `json:"attachment,omitempty"`
	// NewSize is the size an extend under way gives it.
	NewSize int `json:"new_size,omitempty"`
}

type volumeAttachment struct {
	ID                  string    `json:"id"`
	ServerID            string    `json:"server_id"`
	Device              string    `json:"device"`
	Tag                 string    `json:"tag,omitempty"`
	DeleteOnTermination bool      `json:"delete_on_termination"`
	AttachedAt          time.Time `json:"attached_at"`
	BDM                 string    `json:"bdm_uuid"`
}

type snapshot struct {
	meta
	Seq         int64             `json:"seq"`
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	ProjectID   string            `json:"project_id"`
	UserID      string            `json:"user_id"`
	VolumeID    string            `json:"volume_id"`
	Status      string            `json:"status"`
	Size        int               `json:"size"`
	Metadata    map[string]string `json:"metadata"`
}

// cinderTime is how Cinder writes its times: no zone, microseconds.
func cinderTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000") }

// cinderError is Nova's: Cinder writes its faults alike.
var cinderError = novaError

// cinderVersion reads the requested microversion ("OpenStack-API-Version:
// volume 3.N"), sets the response headers and answers 406 for one out of
// range. ok is false when it answered.
func cinderVersion(rw http.ResponseWriter, r *request) (minor int, ok bool) {
	raw, _ := strings.CutPrefix(r.Header.Get("OpenStack-API-Version"), "volume ")
	return microversion(rw, raw, 3, cinderMinMinor, cinderMaxMinor, func(h http.Header, v string) {
		h.Set("OpenStack-API-Version", "volume "+v)
		h.Set("Vary", "OpenStack-API-Version")
	})
}

func (s *Sim) cinderRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /volume", s.volumeVersions)
	mux.HandleFunc("GET /volume/{$}", s.volumeVersions)
	s.route(mux, "/volume/", func(rw http.ResponseWriter, r *request) {
		cinderError(rw, http.StatusNotFound, "The resource could not be found.")
	})
	c := func(pattern string, h func(http.ResponseWriter, *request, int)) {
		s.route(mux, pattern, func(rw http.ResponseWriter, r *request) {
			mv, ok := cinderVersion(rw, r)
			if !ok {
				return
			}
			// Cinder refuses a project in the path that is not the token's.
			if p := r.PathValue("project"); p != r.tok.ProjectID {
				cinderError(rw, http.StatusBadRequest, "Malformed request url")
				return
			}
			h(rw, r, mv)
		})
	}
	c("GET /volume/v3/{project}/volumes", s.listVolumes)
	c("GET /volume/v3/{project}/volumes/detail", s.listVolumes)
	c("POST /volume/v3/{project}/volumes", s.createVolume)
	c("GET /volume/v3/{project}/volumes/{id}", s.getVolume)
	c("PUT /volume/v3/{project}/volumes/{id}", s.updateVolume)
	c("DELETE /volume/v3/{project}/volumes/{id}", s.deleteVolume)
	c("POST /volume/v3/{project}/volumes/{id}/action", s.volumeAction)
	c("GET /volume/v3/{project}/snapshots", s.listSnapshots)
	c("GET /volume/v3/{project}/snapshots/detail", s.listSnapshots)
	c("POST /volume/v3/{project}/snapshots", s.createSnapshot)
	c("GET /volume/v3/{project}/snapshots/{id}", s.getSnapshot)
	c("DELETE /volume/v3/{project}/snapshots/{id}", s.deleteSnapshot)
	c("GET /volume/v3/{project}/types", s.listVolumeTypes)
	c("GET /volume/v3/{project}/types/default", s.getVolumeType)
	c("GET /volume/v3/{project}/types/{id}", s.getVolumeType)
	c("GET /volume/v3/{project}/os-availability-zone", s.listVolumeAZs)
}

func (s *Sim) volumeVersions(rw http.ResponseWriter, r *http.Request) {
	writeJSON(rw, http.StatusMultipleChoices, map[string]any{"versions": []any{map[string]any{
		"id": "v3.0", "status": "CURRENT", "version": "3." + strconv.Itoa(cinderMaxMinor), "min_version": "3.0",
		"updated": "2023-08-31T00:00:00Z",
		"links":   []any{map[string]any{"rel": "self", "href": s.URL() + "/volume/v3/"}},
		"media-types": []any{map[string]any{"base": "application/json",
			"type": "application/vnd.openstack.volume+json;version=3"}},
	}}})
}

// visibleVolume is the volume id names, if the caller may see it.
func (r *request) visibleVolume(id string) *volume {
	v := r.w.Volumes[id]
	if v == nil || (v.ProjectID != r.tok.ProjectID && !r.tok.admin()) {
		return nil
	}
	return v
}

func (r *request) volumeOr404(rw http.ResponseWriter) (*volume, bool) {
	v := r.visibleVolume(r.PathValue("id"))
	if v == nil {
		cinderError(rw, http.StatusNotFound, "Volume "+r.PathValue("id")+" could not be found.")
	}
	return v, v != nil
}

func (s *Sim) volumeView(w *world, v *volume, mv int, admin, detail bool) map[string]any {
	links := []any{
		map[string]any{"rel": "self", "href": s.URL() + "/volume/v3/" + v.ProjectID + "/volumes/" + v.ID},
		map[string]any{"rel": "bookmark", "href": s.URL() + "/volume/" + v.ProjectID + "/volumes/" + v.ID},
	}
	out := map[string]any{"id": v.ID, "name": v.Name, "links": links}
	if !detail {
		return out
	}
	attachments := []any{}
	if a := v.Attachment; a != nil && (v.Status == "in-use" || v.Status == "detaching") {
		att := map[string]any{"id": v.ID, "attachment_id": a.ID, "volume_id": v.ID, "server_id": a.ServerID,
			"host_name": nil, "device": a.Device, "attached_at": cinderTime(a.AttachedAt)}
		if sv := w.Servers[a.ServerID]; sv != nil {
			att["host_name"] = sv.Host
		}
		attachments = append(attachments, att)
	}
	snap := any(nil)
	if v.SnapshotID != "" {
		snap = v.SnapshotID
	}
	src := any(nil)
	if v.SourceVolID != "" {
		src = v.SourceVolID
	}
	maps.Copy(out, map[string]any{
		"status": v.Status, "size": v.Size, "availability_zone": v.AZ, "description": v.Description,
		"created_at": cinderTime(v.Created), "updated_at": cinderTime(v.Updated),
		"attachments": attachments, "bootable": "false", "encrypted": false, "multiattach": false,
		"metadata": orEmptyMap(v.Metadata), "volume_type": defaultVolumeType, "snapshot_id": snap, "source_volid": src,
		"user_id": v.UserID, "os-vol-tenant-attr:tenant_id": v.ProjectID, "replication_status": nil,
		"consistencygroup_id": nil, "migration_status": nil,
	})
	if admin {
		out["os-vol-host-attr:host"] = "cinder@fake#fake"
		out["os-vol-mig-status-attr:migstat"], out["os-vol-mig-status-attr:name_id"] = nil, nil
	}
	if mv >= 13 {
		out["group_id"] = nil
	}
	if mv >= 21 && admin {
		out["provider_id"] = nil
	}
	if mv >= 48 {
		out["shared_targets"], out["service_uuid"] = false, nil
	}
	if mv >= 63 {
		out["volume_type_id"] = defaultVolumeTypeID
	}
	if mv >= 65 {
		out["consumes_quota"] = true
	}
	return out
}

func (s *Sim) listVolumes(rw http.ResponseWriter, r *request, mv int) {
	detail := strings.HasSuffix(r.URL.Path, "/detail")
	cinderList(s, rw, r, "volumes", r.w.Volumes, func(v *volume, q url.Values) bool {
		return (!q.Has("name") || v.Name == q.Get("name")) && (!q.Has("status") || v.Status == q.Get("status"))
	}, func(v *volume) any { return s.volumeView(r.w, v, mv, r.tok.admin(), detail) })
}

// cinderItem is what Cinder lists: volumes and snapshots.
type cinderItem interface {
	owner() string // its project
	order() int64  // its creation's rank
	id() string
}

func (v *volume) owner() string    { return v.ProjectID }
func (v *volume) order() int64     { return v.Seq }
func (v *volume) id() string       { return v.ID }
func (sn *snapshot) owner() string { return sn.ProjectID }
func (sn *snapshot) order() int64  { return sn.Seq }
func (sn *snapshot) id() string    { return sn.ID }

// cinderList answers a listing of items under key: the caller's project's
// (every project's for an admin asking all_tenants) that keep accepts,
// newest first as Cinder orders them, in limit/marker pages with a next
// link under key_links.
func cinderList[T cinderItem](s *Sim, rw http.ResponseWriter, r *request, key string, items map[string]T, keep func(T, url.Values) bool, view func(T) any) {
	q := r.URL.Query()
	all := r.tok.admin() && (q.Get("all_tenants") == "1" || strings.EqualFold(q.Get("all_tenants"), "true"))
	limit, ok := parseLimit(rw, q.Get("limit"), cinderError)
	if !ok {
		return
	}
	var matches []T
	for _, it := range items {
		if (all || it.owner() == r.tok.ProjectID) && keep(it, q) {
			matches = append(matches, it)
		}
	}
	slices.SortFunc(matches, func(a, b T) int { return cmp.Compare(b.order(), a.order()) })
	page, more, ok := paginate(matches, q.Get("marker"), limit, T.id)
	if !ok {
		cinderError(rw, http.StatusBadRequest, "Invalid input received: marker ["+q.Get("marker")+"] not found")
		return
	}
	out := make([]any, 0, len(page))
	for _, it := range page {
		out = append(out, view(it))
	}
	body := map[string]any{key: out}
	if more {
		body[key+"_links"] = []any{map[string]any{"rel": "next", "href": nextHref(s.URL(), r.URL, page[len(page)-1].id())}}
	}
	writeJSON(rw, http.StatusOK, body)
}

func (s *Sim) getVolume(rw http.ResponseWriter, r *request, mv int) {
	if v, ok := r.volumeOr404(rw); ok {
		writeJSON(rw, http.StatusOK, map[string]any{"volume": s.volumeView(r.w, v, mv, r.tok.admin(), true)})
	}
}

// volumeUsage is what a project's volumes and snapshots take of its
// quotas: "volumes", "gigabytes" (volumes' and snapshots') or "snapshots".
func (w *world) volumeUsage(project, name string) int {
	n := 0
	for _, v := range w.Volumes {
		if v.ProjectID == project {
			n += map[string]int{"volumes": 1, "gigabytes": v.Size}[name]
		}
	}
	for _, sn := range w.Snapshots {
		if sn.ProjectID == project {
			n += map[string]int{"snapshots": 1, "gigabytes": sn.Size}[name]
		}
	}
	return n
}

// cinderQuotasAllow tells whether a project's quotas take what asks
// counts more of, by quota name, in order; it answers Cinder's 413 when
// they do not.
func (r *request) cinderQuotasAllow(rw http.ResponseWriter, project string, asks ...cinderAsk) bool {
	for _, a := range asks {
		if msg := r.w.volumeQuotaError(project, a.quota, a.count); msg != "" {
			rw.Header().Set("Retry-After", "0")
			cinderError(rw, http.StatusRequestEntityTooLarge, msg)
			return false
		}
	}
	return true
}

// cinderAsk is an amount of a quota.
type cinderAsk struct {
	quota string
	count int
}

// volumeQuotaError is Cinder's refusal of count more of quota name, or "".
func (w *world) volumeQuotaError(project, name string, count int) string {
	limit := w.quota(project, name)
	used := w.volumeUsage(project, name)
	if limit < 0 || used+count <= limit {
		return ""
	}
	if name == "gigabytes" {
		return fmt.Sprintf("VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds allowed gigabytes quota. Requested %dG, quota is %dG and %dG has been consumed.", count, limit, used)
	}
	kind := map[string]string{"volumes": "VolumeLimitExceeded", "snapshots": "SnapshotLimitExceeded"}[name]
	return fmt.Sprintf("%s: Maximum number of %s allowed (%d) exceeded for quota '%s'.", kind, name, limit, name)
}

func (s *Sim) createVolume(rw http.ResponseWriter, r *request, mv int) {
	var body struct {
		Volume *struct {
			Name             *string           `json:"name"`
			Description      *string           `json:"description"`
			Size             any               `json:"size"`
			AvailabilityZone *string           `json:"availability_zone"`
			VolumeType       *string           `json:"volume_type"`
			SnapshotID       *string           `json:"snapshot_id"`
			SourceVolID      *string           `json:"source_volid"`
			Metadata         map[string]string `json:"metadata"`
		} `json:"volume"`
	}
	if err := decodeBody(r, &body); err != nil || body.Volume == nil {
		cinderError(rw, http.StatusBadRequest, "Invalid input for field/attribute volume.")
		return
	}
	in := body.Volume
	size := 0
	if in.Size != nil {
		f, isNum := in.Size.(float64)
		if !isNum || f != float64(int(f)) || f < 1 || f > 2147483647 {
			cinderError(rw, http.StatusBadRequest, fmt.Sprintf("Invalid input for field/attribute size. Value: %v. %v is not of type 'integer' or is less than the minimum of 1", in.Size, in.Size))
			return
		}
		size = int(f)
	}
	v := &volume{meta: r.w.meta(r.now), Seq: r.w.next(), ID: newID(), ProjectID: r.tok.ProjectID, UserID: r.tok.UserID,
		Status: "creating", AZ: "nova", Metadata: in.Metadata}
	if in.Name != nil {
		v.Name = *in.Name
	}
	if in.Description != nil {
		v.Description = *in.Description
	}
	if in.AvailabilityZone != nil && *in.AvailabilityZone != "" && *in.AvailabilityZone != "nova" {
		cinderError(rw, http.StatusBadRequest, "Invalid input received: Availability zone '"+*in.AvailabilityZone+"' is invalid.")
		return
	}
	if in.VolumeType != nil && *in.VolumeType != "" && *in.VolumeType != defaultVolumeType && *in.VolumeType != defaultVolumeTypeID {
		cinderError(rw, http.StatusNotFound, "Volume type with name "+*in.VolumeType+" could not be found.")
		return
	}
	// Made from a snapshot or a volume: at least its size, by default.
	originSize, tooSmall := 0, ""
	switch {
	case in.SnapshotID != nil && *in.SnapshotID != "":
		sn := r.w.Snapshots[*in.SnapshotID]
		if sn == nil || sn.ProjectID != r.tok.ProjectID && !r.tok.admin() {
			cinderError(rw, http.StatusNotFound, "Snapshot "+*in.SnapshotID+" could not be found.")
			return
		}
		if sn.Status != "available" {
			cinderError(rw, http.StatusBadRequest, "Invalid snapshot: Originating snapshot status must be one of 'available' values")
			return
		}
		v.SnapshotID, originSize = sn.ID, sn.Size
		tooSmall = "Invalid input received: Volume size '%d'GB cannot be smaller than the snapshot size %dGB. They must be >= original snapshot size."
	case in.SourceVolID != nil && *in.SourceVolID != "":
		src := r.visibleVolume(*in.SourceVolID)
		if src == nil {
			cinderError(rw, http.StatusNotFound, "Volume "+*in.SourceVolID+" could not be found.")
			return
		}
		v.SourceVolID, originSize = src.ID, src.Size
		tooSmall = "Invalid input received: Volume size '%d'GB cannot be smaller than original volume size  %dGB. They must be >= original volume size."
	case size == 0:
		cinderError(rw, http.StatusBadRequest, "Invalid input received: \"size\" must be specified when creating a volume")
		return
	}
	if size == 0 {
		size = originSize
	}
	if size < originSize {
		cinderError(rw, http.StatusBadRequest, fmt.Sprintf(tooSmall, size, originSize))
		return
	}
	v.Size = size
	if !r.cinderQuotasAllow(rw, r.tok.ProjectID, cinderAsk{"volumes", 1}, cinderAsk{"gigabytes", size}) {
		return
	}
	r.w.Volumes[v.ID] = v
	r.w.schedule(r.now, s.opts.BootDelay, "volume-settle", v.ID)
	writeJSON(rw, http.StatusAccepted, map[string]any{"volume": s.volumeView(r.w, v, mv, r.tok.admin(), true)})
}

func (s *Sim) updateVolume(rw http.ResponseWriter, r *request, mv int) {
	v, ok := r.volumeOr404(rw)
	if !ok {
		return
	}
	var body struct {
		Volume *struct {
			Name        *string           `json:"name"`
			Description *string           `json:"description"`
			Metadata    map[string]string `json:"metadata"`
		} `json:"volume"`
	}
	if err := decodeBody(r, &body); err != nil || body.Volume == nil {
		cinderError(rw, http.StatusBadRequest, "Invalid input for field/attribute volume.")
		return
	}
	if n := body.Volume.Name; n != nil {
		v.Name = *n
	}
	if d := body.Volume.Description; d != nil {
		v.Description = *d
	}
	if body.Volume.Metadata != nil {
		v.Metadata = body.Volume.Metadata
	}
	v.Updated = r.now.UTC()
	writeJSON(rw, http.StatusOK, map[string]any{"volume": s.volumeView(r.w, v, mv, r.tok.admin(), true)})
}

// volumeInUseMessage is Cinder's refusal to delete a volume that is not
// free to go.
const volumeInUseMessage = "Invalid volume: Volume status must be available or error or error_restoring or error_extending or error_managing and must not be migrating, attached, belong to a group, have snapshots, awaiting a transfer, or be disassociated from snapshots after volume transfer."

func (s *Sim) deleteVolume(rw http.ResponseWriter, r *request, _ int) {
	v, ok := r.volumeOr404(rw)
	if !ok {
		return
	}
	hasSnapshots := false
	for _, sn := range r.w.Snapshots {
		hasSnapshots = hasSnapshots || sn.VolumeID == v.ID
	}
	if !slices.Contains([]string{"available", "error", "error_restoring", "error_extending", "error_managing"}, v.Status) || v.Attachment != nil || hasSnapshots {
		cinderError(rw, http.StatusBadRequest, volumeInUseMessage)
		return
	}
	v.Status, v.Updated = "deleting", r.now.UTC()
	r.w.schedule(r.now, s.opts.BootDelay, "volume-settle", v.ID)
	rw.WriteHeader(http.StatusAccepted)
}

func (s *Sim) volumeAction(rw http.ResponseWriter, r *request, _ int) {
	v, ok := r.volumeOr404(rw)
	if !ok {
		return
	}
	var body map[string]json.RawMessage
	if err := decodeBody(r, &body); err != nil {
		cinderError(rw, http.StatusBadRequest, "Malformed request body")
		return
	}
	raw, ok := body["os-extend"]
	if !ok {
		cinderError(rw, http.StatusBadRequest, "There is no such action: "+strings.Join(slices.Sorted(maps.Keys(body)), ", "))
		return
	}
	var extend struct {
		NewSize any `json:"new_size"`
	}
	_ = json.Unmarshal(raw, &extend)
	f, isNum := extend.NewSize.(float64)
	if !isNum || f != float64(int(f)) || f < 1 {
		cinderError(rw, http.StatusBadRequest, fmt.Sprintf("Invalid input for field/attribute new_size. Value: %v.", extend.NewSize))
		return
	}
	size := int(f)
	if v.Status != "available" {
		cinderError(rw, http.StatusBadRequest, "Invalid volume: Volume status must be available to extend.")
		return
	}
	if size <= v.Size {
		cinderError(rw, http.StatusBadRequest, fmt.Sprintf("Invalid input received: New size for extend must be greater than current size. (current: %d, extended: %d).", v.Size, size))
		return
	}
	if !r.cinderQuotasAllow(rw, v.ProjectID, cinderAsk{"gigabytes", size - v.Size}) {
		return
	}
	v.Status, v.NewSize, v.Updated = "extending", size, r.now.UTC()
	r.w.schedule(r.now, s.opts.BootDelay, "volume-settle", v.ID)
	rw.WriteHeader(http.StatusAccepted)
}

// settleVolume ends what a volume's worker was doing: the caller holds
// the world.
func (w *world) settleVolume(id string, now time.Time) {
	v := w.Volumes[id]
	if v == nil {
		return
	}
	switch v.Status {
	case "creating", "extending":
		if v.NewSize > 0 {
			v.Size, v.NewSize = v.NewSize, 0
		}
		v.Status = "available"
	case "attaching":
		if a := v.Attachment; a != nil && w.Servers[a.ServerID] != nil {
			v.Status, a.AttachedAt = "in-use", now.UTC()
		} else {
			v.Status, v.Attachment = "available", nil
		}
	case "detaching":
		v.Status, v.Attachment = "available", nil
	case "deleting":
		delete(w.Volumes, id)
		return
	default:
		return
	}
	v.Updated = now.UTC()
}

// releaseServerVolumes detaches a deleted server's volumes, deleting those
// attached with delete_on_termination, as Nova's termination does.
func (w *world) releaseServerVolumes(sv *server, now time.Time) {
	for _, v := range w.attachedTo(sv.ID) {
		if v.Attachment.DeleteOnTermination {
			delete(w.Volumes, v.ID)
			continue
		}
		v.Attachment, v.Status, v.Updated = nil, "available", now.UTC()
	}
}

func (s *Sim) snapshotView(sn *snapshot, mv int, detail bool) map[string]any {
	out := map[string]any{"id": sn.ID, "name": sn.Name, "description": sn.Description, "volume_id": sn.VolumeID,
		"status": sn.Status, "size": sn.Size, "created_at": cinderTime(sn.Created), "updated_at": cinderTime(sn.Updated),
		"metadata": orEmptyMap(sn.Metadata)}
	if !detail {
		return out
	}
	out["os-extended-snapshot-attributes:progress"] = map[bool]string{true: "100%", false: "0%"}[sn.Status == "available"]
	out["os-extended-snapshot-attributes:project_id"] = sn.ProjectID
	if mv >= 14 {
		out["group_snapshot_id"] = nil
	}
	if mv >= 41 {
		out["user_id"] = sn.UserID
	}
	if mv >= 65 {
		out["consumes_quota"] = true
	}
	return out
}

func (r *request) snapshotOr404(rw http.ResponseWriter) (*snapshot, bool) {
	sn := r.w.Snapshots[r.PathValue("id")]
	if sn == nil || (sn.ProjectID != r.tok.ProjectID && !r.tok.admin()) {
		cinderError(rw, http.StatusNotFound, "Snapshot "+r.PathValue("id")+" could not be found.")
		return nil, false
	}
	return sn, true
}

func (s *Sim) listSnapshots(rw http.ResponseWriter, r *request, mv int) {
	detail := strings.HasSuffix(r.URL.Path, "/detail")
	cinderList(s, rw, r, "snapshots", r.w.Snapshots, func(sn *snapshot, q url.Values) bool {
		return (!q.Has("name") || sn.Name == q.Get("name")) && (!q.Has("status") || sn.Status == q.Get("status")) &&
			(!q.Has("volume_id") || sn.VolumeID == q.Get("volume_id"))
	}, func(sn *snapshot) any { return s.snapshotView(sn, mv, detail) })
}

func (s *Sim) getSnapshot(rw http.ResponseWriter, r *request, mv int) {
	if sn, ok := r.snapshotOr404(rw); ok {
		writeJSON(rw, http.StatusOK, map[string]any{"snapshot": s.snapshotView(sn, mv, true)})
	}
}

func (s *Sim) createSnapshot(rw http.ResponseWriter, r *request, mv int) {
	var body struct {
		Snapshot *struct {
			VolumeID    string            `json:"volume_id"`
			Name        *string           `json:"name"`
			Description *string           `json:"description"`
			Force       any               `json:"force"`
			Metadata    map[string]string `json:"metadata"`
		} `json:"snapshot"`
	}
	if err := decodeBody(r, &body); err != nil || body.Snapshot == nil {
		cinderError(rw, http.StatusBadRequest, "Invalid input for field/attribute snapshot.")
		return
	}
	in := body.Snapshot
	v := r.visibleVolume(in.VolumeID)
	if v == nil {
		cinderError(rw, http.StatusNotFound, "Volume "+in.VolumeID+" could not be found.")
		return
	}
	// An in-use volume's snapshot needs force before 3.66.
	force := in.Force == true || in.Force == "true" || in.Force == "True"
	if v.Status != "available" && !(v.Status == "in-use" && (force || mv >= 66)) {
		cinderError(rw, http.StatusBadRequest, "Invalid volume: Volume "+v.ID+" status must be available, but current status is: "+v.Status+".")
		return
	}
	if !r.cinderQuotasAllow(rw, v.ProjectID, cinderAsk{"snapshots", 1}, cinderAsk{"gigabytes", v.Size}) {
		return
	}
	sn := &snapshot{meta: r.w.meta(r.now), Seq: r.w.next(), ID: newID(), ProjectID: v.ProjectID, UserID: r.tok.UserID,
		VolumeID: v.ID, Status: "creating", Size: v.Size, Metadata: in.Metadata}
	if in.Name != nil {
		sn.Name = *in.Name
	}
	if in.Description != nil {
		sn.Description = *in.Description
	}
	r.w.Snapshots[sn.ID] = sn
	r.w.schedule(r.now, s.opts.BootDelay, "snapshot-settle", sn.ID)
	writeJSON(rw, http.StatusAccepted, map[string]any{"snapshot": s.snapshotView(sn, mv, true)})
}

func (s *Sim) deleteSnapshot(rw http.ResponseWriter, r *request, _ int) {
	sn, ok := r.snapshotOr404(rw)
	if !ok {
		return
	}
	if sn.Status != "available" && sn.Status != "error" {
		cinderError(rw, http.StatusBadRequest, "Invalid snapshot: Volume Snapshot status must be available or error and must not be part of a group.")
		return
	}
	sn.Status, sn.Updated = "deleting", r.now.UTC()
	r.w.schedule(r.now, s.opts.BootDelay, "snapshot-settle", sn.ID)
	rw.WriteHeader(http.StatusAccepted)
}

func (w *world) settleSnapshot(id string, now time.Time) {
	sn := w.Snapshots[id]
	switch {
	case sn == nil:
	case sn.Status == "creating":
		sn.Status, sn.Updated = "available", now.UTC()
	case sn.Status == "deleting":
		delete(w.Snapshots, id)
	}
}

func (s *Sim) volumeTypeView() map[string]any {
	return map[string]any{"id": defaultVolumeTypeID, "name": defaultVolumeType, "description": "Default Volume Type",
		"is_public": true, "os-volume-type-access:is_public": true, "extra_specs": map[string]any{}, "qos_specs_id": nil}
}

func (s *Sim) listVolumeTypes(rw http.ResponseWriter, r *request, _ int) {
	writeJSON(rw, http.StatusOK, map[string]any{"volume_types": []any{s.volumeTypeView()}})
}

func (s *Sim) getVolumeType(rw http.ResponseWriter, r *request, _ int) {
	if id := r.PathValue("id"); id != "" && id != defaultVolumeTypeID {
		cinderError(rw, http.StatusNotFound, "Volume type "+id+" could not be found.")
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"volume_type": s.volumeTypeView()})
}

func (s *Sim) listVolumeAZs(rw http.ResponseWriter, r *request, _ int) {
	writeJSON(rw, http.StatusOK, map[string]any{"availabilityZoneInfo": []any{
		map[string]any{"zoneName": "nova", "zoneState": map[string]any{"available": true}},
	}})
}

// Nova's volume attachments.

func (s *Sim) attachmentView(v *volume, mv int) map[string]any {
	a := v.Attachment
	out := map[string]any{"device": a.Device, "serverId": a.ServerID, "volumeId": v.ID}
	if mv < 89 {
		out["id"] = v.ID
	} else {
		out["attachment_id"], out["bdm_uuid"] = a.ID, a.BDM
	}
	if mv >= 70 {
		out["tag"] = nil
		if a.Tag != "" {
			out["tag"] = a.Tag
		}
	}
	if mv >= 79 {
		out["delete_on_termination"] = a.DeleteOnTermination
	}
	return out
}

// nextDevice is the first free /dev/vdX of a server, its root disk vda.
func (w *world) nextDevice(sv *server) string {
	used := map[string]bool{"/dev/vda": true}
	for _, v := range w.attachedTo(sv.ID) {
		used[v.Attachment.Device] = true
	}
	for c := 'b'; c <= 'z'; c++ {
		if d := "/dev/vd" + string(c); !used[d] {
			return d
		}
	}
	return ""
}

func (s *Sim) attachVolume(rw http.ResponseWriter, r *request, mv int) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return
	}
	var body struct {
		Attachment *struct {
			VolumeID            string  `json:"volumeId"`
			Device              *string `json:"device"`
			Tag                 string  `json:"tag"`
			DeleteOnTermination bool    `json:"delete_on_termination"`
		} `json:"volumeAttachment"`
	}
	if err := decodeBody(r, &body); err != nil || body.Attachment == nil || body.Attachment.VolumeID == "" {
		novaError(rw, http.StatusBadRequest, "Invalid input for field/attribute volumeAttachment.")
		return
	}
	in := body.Attachment
	if sv.Status != "ACTIVE" && sv.Status != "SHUTOFF" {
		state := map[string]string{"BUILD": "building", "ERROR": "error"}[sv.Status]
		novaError(rw, http.StatusConflict, "Cannot 'attach_volume' instance "+sv.ID+" while it is in vm_state "+cmp.Or(state, strings.ToLower(sv.Status)))
		return
	}
	v := r.visibleVolume(in.VolumeID)
	if v == nil {
		novaError(rw, http.StatusNotFound, "Volume "+in.VolumeID+" could not be found.")
		return
	}
	if v.Status != "available" || v.Attachment != nil {
		novaError(rw, http.StatusBadRequest, "Invalid input received: Invalid volume: Volume "+v.ID+" status must be available or downloading to reserve, but the current status is "+v.Status+".")
		return
	}
	dev := r.w.nextDevice(sv)
	if dev == "" {
		novaError(rw, http.StatusForbidden, "Maximum number of volumes attached to the server exceeded.")
		return
	}
	v.Attachment = &volumeAttachment{ID: newID(), ServerID: sv.ID, Device: dev, Tag: in.Tag,
		DeleteOnTermination: in.DeleteOnTermination && mv >= 79, BDM: newID()}
	v.Status, v.Updated = "attaching", r.now.UTC()
	r.w.schedule(r.now, s.opts.BootDelay, "volume-settle", v.ID)
	writeJSON(rw, http.StatusOK, map[string]any{"volumeAttachment": s.attachmentView(v, min(mv, 88))})
}

// attachedTo are the volumes attached (or attaching, or detaching) to a
// server, by device.
func (w *world) attachedTo(serverID string) []*volume {
	var out []*volume
	for _, v := range w.Volumes {
		if v.Attachment != nil && v.Attachment.ServerID == serverID {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, byDevice)
	return out
}

func byDevice(a, b *volume) int { return strings.Compare(a.Attachment.Device, b.Attachment.Device) }

func (s *Sim) listAttachments(rw http.ResponseWriter, r *request, mv int) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return
	}
	out := []any{}
	for _, v := range r.w.attachedTo(sv.ID) {
		out = append(out, s.attachmentView(v, mv))
	}
	writeJSON(rw, http.StatusOK, map[string]any{"volumeAttachments": out})
}

// attachmentOr404 finds the attachment of the path's volume to the path's
// server.
func (r *request) attachmentOr404(rw http.ResponseWriter) (*server, *volume, bool) {
	sv, ok := r.serverOr404(rw)
	if !ok {
		return nil, nil, false
	}
	id := r.PathValue("volume")
	for _, v := range r.w.attachedTo(sv.ID) {
		if v.ID == id {
			return sv, v, true
		}
	}
	novaError(rw, http.StatusNotFound, "Volume "+id+" is not attached to server "+sv.ID+".")
	return nil, nil, false
}

func (s *Sim) getAttachment(rw http.ResponseWriter, r *request, mv int) {
	if _, v, ok := r.attachmentOr404(rw); ok {
		writeJSON(rw, http.StatusOK, map[string]any{"volumeAttachment": s.attachmentView(v, mv)})
	}
}

func (s *Sim) detachVolumeFromServer(rw http.ResponseWriter, r *request, _ int) {
	sv, v, ok := r.attachmentOr404(rw)
	if !ok {
		return
	}
	if v.Status != "in-use" {
		novaError(rw, http.StatusBadRequest, "Invalid volume: Unable to detach volume. Volume status must be 'in-use' and attach_status must be 'attached' to detach.")
		return
	}
	if sv.Status != "ACTIVE" && sv.Status != "SHUTOFF" {
		novaError(rw, http.StatusConflict, "Cannot 'detach_volume' instance "+sv.ID+" while it is in vm_state "+strings.ToLower(sv.Status))
		return
	}
	v.Status, v.Updated = "detaching", r.now.UTC()
	r.w.schedule(r.now, s.opts.BootDelay, "volume-settle", v.ID)
	rw.WriteHeader(http.StatusAccepted)
}

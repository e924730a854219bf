package backup

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Reasons a snapshot is taken.
const (
	ReasonScheduled     = "scheduled"
	ReasonBeforeRollout = "before-rollout"
	ReasonManual        = "manual"
)

// idTime is the time part of an ID: sortable, to the millisecond.
const idTime = "20060102T150405.000Z"

// ErrCorrupt is a snapshot whose bytes are not the ones recorded.
var ErrCorrupt = errors.New("snapshot corrupt")

// ErrNotFound is a snapshot the container does not hold.
var ErrNotFound = errors.New("snapshot not found")

// Record describes one stored snapshot. It lives in the object's
// metadata and, as an index, in the state store.
type Record struct {
	ID      string    `json:"id"`
	Cluster string    `json:"cluster"`
	Reason  string    `json:"reason"`
	Taken   time.Time `json:"taken"`
	// Revision, Hash and TotalKeys are etcdutl's status of the file;
	// Keys the live keys at Revision, counted on the source.
	Revision  int64  `json:"revision"`
	Hash      uint32 `json:"hash"`
	TotalKeys int    `json:"totalKeys"`
	Keys      int64  `json:"keys"`
	// Size and SHA256 are of the object as stored (sealed, for OPKE's
	// own store).
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	Container string `json:"container"`
	Object    string `json:"object"`
	Sealed    bool   `json:"sealed,omitempty"`
	// Drill is the last restore drill of the snapshot, if any.
	Drill *DrillResult `json:"drill,omitempty"`
}

// DrillResult is how a restore drill went.
type DrillResult struct {
	At       time.Time `json:"at"`
	Passed   bool      `json:"passed"`
	Message  string    `json:"message"`
	Revision int64     `json:"revision"`
	Keys     int64     `json:"keys"`
}

// newID names a snapshot taken at t of revision rev.
func newID(t time.Time, rev int64) string {
	return t.UTC().Format(idTime) + "-" + strconv.FormatInt(rev, 10)
}

// objectName is where a cluster's snapshot lives in its container.
func objectName(cluster, id string) string { return cluster + "/" + id + ".db" }

// metadata keys (Swift's X-Object-Meta-<Key>, as gophercloud writes them).
const (
	metaSHA256    = "Sha256"
	metaRevision  = "Revision"
	metaHash      = "Hash"
	metaKeys      = "Keys"
	metaTotalKeys = "Total-Keys"
	metaReason    = "Reason"
	metaTaken     = "Taken"
	metaSealed    = "Sealed"
)

// metadata is the record as object metadata.
func (r *Record) metadata() map[string]string {
	m := map[string]string{
		metaSHA256:    r.SHA256,
		metaRevision:  strconv.FormatInt(r.Revision, 10),
		metaHash:      strconv.FormatUint(uint64(r.Hash), 10),
		metaKeys:      strconv.FormatInt(r.Keys, 10),
		metaTotalKeys: strconv.Itoa(r.TotalKeys),
		metaReason:    r.Reason,
		metaTaken:     r.Taken.UTC().Format(time.RFC3339Nano),
	}
	if r.Sealed {
		m[metaSealed] = "true"
	}
	return m
}

// recordFrom reads a record back from an object's name, size and
// metadata (keys as Swift returns them: any case, with or without the
// X-Object-Meta- prefix).
func recordFrom(container, object string, size int64, meta map[string]string) (*Record, error) {
	norm := map[string]string{}
	for k, v := range meta {
		norm[strings.TrimPrefix(strings.ToLower(k), "x-object-meta-")] = v
	}
	get := func(k string) string { return norm[strings.ToLower(k)] }
	cluster, file, ok := strings.Cut(object, "/")
	id, okExt := strings.CutSuffix(file, ".db")
	if !ok || !okExt || get(metaSHA256) == "" {
		return nil, fmt.Errorf("%s/%s: not a snapshot of OPKE's", container, object)
	}
	r := &Record{ID: id, Cluster: cluster, Container: container, Object: object, Size: size,
		SHA256: get(metaSHA256), Reason: get(metaReason), Sealed: get(metaSealed) == "true"}
	var errs []error
	var err error
	r.Revision, err = strconv.ParseInt(get(metaRevision), 10, 64)
	errs = append(errs, err)
	h, err := strconv.ParseUint(get(metaHash), 10, 32)
	r.Hash = uint32(h)
	errs = append(errs, err)
	r.Keys, err = strconv.ParseInt(get(metaKeys), 10, 64)
	errs = append(errs, err)
	r.TotalKeys, err = strconv.Atoi(get(metaTotalKeys))
	errs = append(errs, err)
	r.Taken, err = time.Parse(time.RFC3339Nano, get(metaTaken))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s/%s: metadata: %w", container, object, err)
	}
	return r, nil
}

// String is the drill's outcome as people read it.
func (d *DrillResult) String() string {
	if d.Passed {
		return "passed: " + d.Message
	}
	return "failed: " + d.Message
}

// FormatSize prints a snapshot's size as people read it.
func FormatSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

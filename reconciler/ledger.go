package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	"opke.dev/opke/backup"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/intern"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// The ledger is what OPKE last applied, in the state store. Each record is
// written by the apply step that made it true, so a crash leaves the
// ledger no further than the cloud and the hosts:
//
//	/opke/_applied/<cluster>                    the last applied spec and its commit
//	/opke/<cluster>/infra/<kind>/<name>         a resource as applied: {"id", "attrs"}
//	/opke/<cluster>/hosts/<host>/files/<path>   a file as pushed: {"sha256"}
//	/opke/<cluster>/hosts/<host>/version        the Kubernetes version the host runs
//	/opke/<cluster>/hosts/<host>/etcd           how a controller's etcd member first started
//	/opke/<cluster>/kubernetes/<manifest>        a manifest as applied to the API: {"sha256"}
//
// A host's records go with its server ([forgetHost]), but for a deleted
// node's version, which stays until its Node object is deleted: the plan
// of a Node object whose server is gone is made from it.
//
// The _applied records sit under one prefix so a single listing finds
// every cluster the store knows, with its cloud and deletion policy.

// ledgerKV is what the ledger needs of the store.
type ledgerKV interface {
	Key(parts ...string) string
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
	List(ctx context.Context, prefix string) (map[string][]byte, error)
}

// AppliedSpec is a cluster's last applied spec and the commit it came from.
type AppliedSpec struct {
	Commit string           `json:"commit"`
	Spec   *schemas.Cluster `json:"spec"`
}

type infraRecord struct {
	ID    string     `json:"id"`
	Attrs diff.Attrs `json:"attrs"`
}

type fileRecord struct {
	SHA256 string `json:"sha256"`
}

// Ledger is one cluster's ledger as read.
type Ledger struct {
	// Spec is nil until an apply of the cluster completed.
	Spec *AppliedSpec
	// Applied is nil when the store holds nothing of the cluster.
	Applied *diff.Applied
	// Resources are the applied resources with their cloud ids, by
	// address; nil in a plan's ledger, which needs its members only.
	Resources map[diff.Address]diff.Resource
	// members are the load balancer members the ledger knows, by their
	// ids: an observation resolves them without listing their pool's
	// members.
	members map[string]diff.Resource
	// Etcd is how each controller's etcd member first started, by host
	// (recorded with its etcd.env): it renders so again.
	Etcd map[string]assets.EtcdStart
}

// AppliedSpecs lists every cluster's last applied spec, by name: the
// clusters the store knows.
func AppliedSpecs(ctx context.Context, kv ledgerKV) (map[string]*AppliedSpec, error) {
	prefix := state.KeysOf(kv).AppliedSpecs()
	raw, err := kv.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	out := make(map[string]*AppliedSpec, len(raw))
	for k, v := range raw {
		a, err := parseApplied(k, v)
		if err != nil {
			return nil, err
		}
		out[strings.TrimPrefix(k, prefix)] = a
	}
	return out, nil
}

func parseApplied(key string, v []byte) (*AppliedSpec, error) {
	var a AppliedSpec
	if err := json.Unmarshal(v, &a); err != nil || a.Spec == nil {
		return nil, fmt.Errorf("ledger: %s: not an applied spec", key)
	}
	return &a, nil
}

// ReadLedger reads one cluster's ledger: its last applied spec and what
// the store says was applied of it.
func ReadLedger(ctx context.Context, kv ledgerKV, cluster string) (*Ledger, error) {
	spec, err := appliedSpec(ctx, kv, cluster)
	if err != nil {
		return nil, err
	}
	return readLedger(ctx, kv, cluster, spec)
}

// appliedSpec reads one cluster's last applied spec; nil if it has none.
func appliedSpec(ctx context.Context, kv ledgerKV, cluster string) (*AppliedSpec, error) {
	key := state.KeysOf(kv).AppliedSpec(cluster)
	b, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, state.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("ledger of %s: %w", cluster, err)
	}
	return parseApplied(key, b)
}

// readLedger reads a cluster's resources and files; spec is its applied
// spec, if any.
func readLedger(ctx context.Context, kv ledgerKV, cluster string, spec *AppliedSpec) (*Ledger, error) {
	r, _, err := readRecords(ctx, kv, cluster)
	if err != nil {
		return nil, err
	}
	return r.ledger(spec), nil
}

// planned is the part of records a plan reads, the whole of what a
// planner keeps: the resources are dropped, the members kept (a tenth of
// a 1,000-cluster daemon's heap).
func (r *records) planned() *records {
	p := *r
	p.resources = nil
	return &p
}

// records are a cluster's ledger as its records say, but its applied
// spec: what a planner keeps between plans while no record is written. A
// records' maps are shared by the ledgers made of it: read only.
type records struct {
	resources map[diff.Address]diff.Resource
	members   map[string]diff.Resource
	etcd      map[string]assets.EtcdStart
	applied   diff.Applied
	// some: the store holds records of the cluster.
	some bool
}

// ledger is the cluster's ledger with its applied spec, if any.
func (r *records) ledger(spec *AppliedSpec) *Ledger {
	l := &Ledger{Spec: spec, Resources: r.resources, members: r.members, Etcd: r.etcd}
	if spec != nil || r.some {
		applied := r.applied
		if spec != nil {
			applied.DeletionPolicy = string(spec.Spec.Spec.DeletionPolicy)
		}
		l.Applied = &applied
	}
	return l
}

// readRecords reads a cluster's ledger records, and the revision it read
// them at (0 if kv cannot tell).
func readRecords(ctx context.Context, kv ledgerKV, cluster string) (*records, int64, error) {
	infra, hosts, manifests, rev, err := ledgerRecords(ctx, kv, cluster)
	if err != nil {
		return nil, 0, fmt.Errorf("ledger of %s: %w", cluster, err)
	}
	r := &records{resources: map[diff.Address]diff.Resource{}, members: map[string]diff.Resource{}, etcd: map[string]assets.EtcdStart{},
		applied: diff.Applied{Infra: map[diff.Address]diff.Attrs{}, Files: map[string]map[string]string{}, Versions: map[string]string{}, Manifests: map[string]string{}},
		some:    len(infra) > 0 || len(hosts) > 0 || len(manifests) > 0}
	applied := &r.applied
	prefix := state.KeysOf(kv).Resources(cluster)
	for k, v := range infra {
		kind, name, ok := strings.Cut(strings.TrimPrefix(k, prefix), "/")
		var rec infraRecord
		if !ok || json.Unmarshal(v, &rec) != nil {
			return nil, 0, fmt.Errorf("ledger of %s: %s: not a resource record", cluster, k)
		}
		res := diff.Resource{Kind: diff.Kind(intern.Shared.String(kind)), Name: strings.Clone(name), ID: rec.ID, Attrs: rec.Attrs}
		r.resources[res.Address()] = res
		if res.Kind == diff.KindMember && res.ID != "" {
			r.members[res.ID] = res
		}
		applied.Infra[res.Address()] = rec.Attrs
	}
	prefix = state.KeysOf(kv).Hosts(cluster)
	// Records are kept between plans: a host's name is held once, not as
	// a window into each of its keys, and the paths every cluster shares
	// once for the fleet.
	names := map[string]string{}
	for k, v := range hosts {
		host, rest, _ := strings.Cut(strings.TrimPrefix(k, prefix), "/")
		if name, ok := names[host]; ok {
			host = name
		} else {
			host = strings.Clone(host)
			names[host] = host
		}
		switch rest {
		case "version":
			applied.Versions[host] = string(v)
			continue
		case "etcd":
			var start assets.EtcdStart
			if err := json.Unmarshal(v, &start); err != nil || len(start.Members) == 0 {
				return nil, 0, fmt.Errorf("ledger of %s: %s: not an etcd member's start", cluster, k)
			}
			r.etcd[host] = start
			continue
		}
		path, ok := strings.CutPrefix(rest, "files")
		var rec fileRecord
		if !ok || !strings.HasPrefix(path, "/") || json.Unmarshal(v, &rec) != nil {
			return nil, 0, fmt.Errorf("ledger of %s: %s: not a file record", cluster, k)
		}
		if applied.Files[host] == nil {
			applied.Files[host] = map[string]string{}
		}
		applied.Files[host][intern.Shared.String(path)] = rec.SHA256
	}
	prefix = state.KeysOf(kv).Manifests(cluster)
	for k, v := range manifests {
		var rec fileRecord
		name := strings.TrimPrefix(k, prefix)
		if name == "" || strings.Contains(name, "/") || json.Unmarshal(v, &rec) != nil {
			return nil, 0, fmt.Errorf("ledger of %s: %s: not a manifest record", cluster, k)
		}
		applied.Manifests[intern.Shared.String(name)] = rec.SHA256
	}
	return r, rev, nil
}

// ledgerKeys are the prefixes of a cluster's ledger records: what a
// kept ledger is checked against ([state.Changes.RevisionOf]).
func ledgerKeys(kv state.KV, cluster string) []string {
	k := state.KeysOf(kv)
	return []string{k.Resources(cluster), k.Hosts(cluster), k.Manifests(cluster)}
}

// ranger reads a range of keys in one request, and says at what
// revision: the store does, an overlay does not.
type ranger interface {
	Range(ctx context.Context, from, to string) (map[string][]byte, int64, error)
}

// ledgerRecords reads a cluster's ledger records: its resources, its
// hosts' and its manifests'. A store reads them in one request (Keys.Ledger)
// and says at what revision, anything else prefix by prefix (rev 0).
func ledgerRecords(ctx context.Context, kv ledgerKV, cluster string) (infra, hosts, manifests map[string][]byte, rev int64, err error) {
	k := state.KeysOf(kv)
	r, ok := kv.(ranger)
	if !ok {
		if infra, err = kv.List(ctx, k.Resources(cluster)); err == nil {
			if hosts, err = kv.List(ctx, k.Hosts(cluster)); err == nil {
				manifests, err = kv.List(ctx, k.Manifests(cluster))
			}
		}
		return infra, hosts, manifests, 0, err
	}
	from, to := k.Ledger(cluster)
	all, rev, err := r.Range(ctx, from, to)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	infra, hosts, manifests = map[string][]byte{}, map[string][]byte{}, map[string][]byte{}
	for key, v := range all {
		switch {
		case strings.HasPrefix(key, k.Resources(cluster)):
			infra[key] = v
		case strings.HasPrefix(key, k.Hosts(cluster)):
			hosts[key] = v
		case strings.HasPrefix(key, k.Manifests(cluster)):
			manifests[key] = v
		}
	}
	return infra, hosts, manifests, rev, nil
}

// RecordResource notes a resource as applied.
func RecordResource(ctx context.Context, kv ledgerKV, cluster string, r diff.Resource) error {
	b, err := json.Marshal(infraRecord{ID: r.ID, Attrs: r.Attrs})
	if err != nil {
		return err
	}
	return kv.Put(ctx, state.KeysOf(kv).Resource(cluster, string(r.Kind), r.Name), b)
}

// recordFile notes a file as pushed to a host.
func recordFile(ctx context.Context, kv ledgerKV, cluster, host, path, sha256 string) error {
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("record file %s on %s: %w", path, host, errRelativePath)
	}
	b, err := json.Marshal(fileRecord{SHA256: sha256})
	if err != nil {
		return err
	}
	return kv.Put(ctx, state.KeysOf(kv).HostFile(cluster, host, path), b)
}

// RecordRendered notes a whole render as applied: every host's files and
// version, and the cluster's manifests. It is for seeding a store with a
// cluster built outside OPKE (tests, benchmarks), never for an apply,
// which records each step as it is done.
func RecordRendered(ctx context.Context, kv ledgerKV, cluster string, set *assets.Set) error {
	manifests := map[string]bool{}
	for _, h := range set.Hosts {
		for _, f := range h.Files {
			if err := recordFile(ctx, kv, cluster, h.Name, f.Path, f.SHA256); err != nil {
				return err
			}
			if name, ok := strings.CutPrefix(f.Path, assets.PathAddons+"/"); ok && h.Role == schemas.RoleController && !manifests[name] {
				manifests[name] = true
				if err := recordManifest(ctx, kv, cluster, name, f.SHA256); err != nil {
					return err
				}
			}
		}
		if h.Etcd != nil {
			if err := recordEtcdStart(ctx, kv, cluster, h.Name, *h.Etcd); err != nil {
				return err
			}
		}
		if err := recordVersion(ctx, kv, cluster, h.Name, set.Version); err != nil {
			return err
		}
	}
	return nil
}

// recordManifest notes a manifest as applied to the cluster's API.
func recordManifest(ctx context.Context, kv ledgerKV, cluster, name, sha256 string) error {
	b, err := json.Marshal(fileRecord{SHA256: sha256})
	if err != nil {
		return err
	}
	return kv.Put(ctx, state.KeysOf(kv).Manifest(cluster, name), b)
}

// recordedObject is an object a manifest applied, with the sha256 of what
// was sent and of the field set OPKE's apply owned once applied
// (kubestatus.Fields), each empty in records made before OPKE kept it.
type recordedObject struct {
	objectRef
	SHA256 string `json:"sha256,omitempty"`
	Fields string `json:"fields,omitempty"`
}

// recordManifestObjects notes the objects an applied manifest holds, the
// digest of each and of the fields OPKE owns in it (fields, in objs'
// order), kept apart from its record so that reading a ledger does not
// read them.
func recordManifestObjects(ctx context.Context, kv ledgerKV, cluster, name string, objs []object, fields []string) error {
	rec := make([]recordedObject, len(objs))
	for i, o := range objs {
		d, err := o.digest()
		if err != nil {
			return err
		}
		rec[i] = recordedObject{objectRef: o.objectRef, SHA256: d, Fields: fields[i]}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return kv.Put(ctx, state.KeysOf(kv).ManifestObjects(cluster, name), b)
}

// manifestObjects are the objects a manifest held when last applied; nil
// if none were recorded.
func manifestObjects(ctx context.Context, kv ledgerKV, cluster, name string) ([]objectRef, error) {
	rec, err := recordedObjects(ctx, kv, cluster, name)
	if rec == nil {
		return nil, err
	}
	refs := make([]objectRef, len(rec))
	for i, r := range rec {
		refs[i] = r.objectRef
	}
	return refs, nil
}

// clusterManifestObjects are, by manifest, the objects each of the
// cluster's manifests held when last applied, with their digests, read at
// once.
func clusterManifestObjects(ctx context.Context, kv ledgerKV, cluster string) (map[string][]recordedObject, error) {
	prefix := state.KeysOf(kv).ManifestObjects(cluster, "")
	kvs, err := kv.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]recordedObject, len(kvs))
	for key, b := range kvs {
		var rec []recordedObject
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("ledger of %s: %s: %w", cluster, key, err)
		}
		out[strings.TrimPrefix(key, prefix)] = rec
	}
	return out, nil
}

// recordedObjects are the objects a manifest held when last applied, with
// their digests; nil if none were recorded.
func recordedObjects(ctx context.Context, kv ledgerKV, cluster, name string) ([]recordedObject, error) {
	b, err := kv.Get(ctx, state.KeysOf(kv).ManifestObjects(cluster, name))
	if errors.Is(err, state.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec []recordedObject
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("ledger of %s: the objects of %s: %w", cluster, name, err)
	}
	return rec, nil
}

// recordEtcdStart notes how a controller's etcd member first started.
func recordEtcdStart(ctx context.Context, kv ledgerKV, cluster, host string, start assets.EtcdStart) error {
	b, err := json.Marshal(start)
	if err != nil {
		return err
	}
	return kv.Put(ctx, state.KeysOf(kv).HostEtcd(cluster, host), b)
}

// recordVersion notes the Kubernetes version a host runs.
func recordVersion(ctx context.Context, kv ledgerKV, cluster, host, version string) error {
	return kv.Put(ctx, state.KeysOf(kv).HostVersion(cluster, host), []byte(version))
}

// RecordSpec notes a cluster's spec as applied, from commit.
func RecordSpec(ctx context.Context, kv ledgerKV, c *schemas.Cluster, commit string) error {
	b, err := json.Marshal(AppliedSpec{Commit: commit, Spec: c})
	if err != nil {
		return err
	}
	return kv.Put(ctx, state.KeysOf(kv).AppliedSpec(c.Metadata.Name), b)
}

// writer is the store as an applier writes it: through its lease.
type writer interface {
	state.KV
	Delete(ctx context.Context, key string) error
	DeletePrefix(ctx context.Context, prefix string) error
}

// forgetHost drops what the ledger knows of a host whose server is
// deleted: its files, its version, its pinned host key and, with
// material, the certificates issued for it. A server made again under
// the name is a new host with none of them. With keepVersion, the
// version stays, for the deletion of its Node object ([forgetNode]).
func forgetHost(ctx context.Context, w writer, cluster, host string, keepVersion, material bool) error {
	if keepVersion {
		if err := w.DeletePrefix(ctx, state.KeysOf(w).HostFiles(cluster, host)); err != nil {
			return err
		}
	} else if err := w.DeletePrefix(ctx, state.KeysOf(w).Host(cluster, host)); err != nil {
		return err
	}
	if material {
		for _, key := range hostMaterialKeys(w, cluster, host) {
			if err := w.Delete(ctx, key); err != nil {
				return err
			}
		}
	}
	return w.Delete(ctx, state.KeysOf(w).HostKeys(cluster, host))
}

// hostMaterialKeys are the store keys of the certificates and keys
// issued for a host.
func hostMaterialKeys(kv state.KV, cluster, host string) []string {
	var out []string
	for _, name := range pki.HostMaterial(host) {
		for _, ext := range []string{".crt", ".key"} {
			out = append(out, state.KeysOf(kv).PKIFile(cluster, name+ext))
		}
	}
	return out
}

// forgetNode drops the last record of a host, its version, once its
// Node object is deleted.
func forgetNode(ctx context.Context, w writer, cluster, host string) error {
	return w.DeletePrefix(ctx, state.KeysOf(w).Host(cluster, host))
}

// forget removes a cluster from the store: its ledger and its material.
// Its journals stay, as the record of how it went.
func forget(ctx context.Context, w writer, cluster string) error {
	if err := w.DeletePrefix(ctx, state.KeysOf(w).Cluster(cluster)); err != nil {
		return err
	}
	return w.Delete(ctx, state.KeysOf(w).AppliedSpec(cluster))
}

// clusterKeys are the keys whose writes make a plan of cluster stale:
// its ledger, its material and its journal.
func clusterKeys(kv state.KV, cluster string) []string {
	k := state.KeysOf(kv)
	return []string{k.Cluster(cluster), k.AppliedSpec(cluster), k.OpenPlan(cluster), k.Journals(cluster)}
}

var errRelativePath = errors.New("not an absolute path")

var (
	_ writer = (*state.Store)(nil)
	_ writer = (*state.Lease)(nil)
)

// Facts returns, for each named cluster, what the transition rules need
// of it: the newest version a controller runs, and the snapshot taken
// before the last rollout.
func Facts(ctx context.Context, kv ledgerKV, clusters []string) (map[string]*schemas.TransitionFacts, error) {
	out := make(map[string]*schemas.TransitionFacts, len(clusters))
	var mu sync.Mutex
	// Two reads per cluster, a few clusters at a time: at 10,000 clusters
	// one after another they were seconds of every commit's judgement.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(planParallel)
	for _, name := range clusters {
		g.Go(func() error {
			f := &schemas.TransitionFacts{}
			versions, err := HostVersions(gctx, kv, name)
			if err != nil {
				return err
			}
			for host, v := range versions {
				if schemas.RoleOf(name, host) != schemas.RoleController {
					continue
				}
				if ver, err := schemas.ParseVersion(v); err == nil && ver.Compare(f.NewestControllerVersion) > 0 {
					f.NewestControllerVersion = ver
				}
			}
			recs, err := Backups(gctx, kv, name)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.Reason == backup.ReasonBeforeRollout {
					f.Snapshot = r.ID // oldest first: the last one wins
				}
			}
			mu.Lock()
			out[name] = f
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// HostVersions returns the Kubernetes version each host of a cluster
// runs, as recorded when its gate passed (the gateway aside).
func HostVersions(ctx context.Context, kv ledgerKV, cluster string) (map[string]string, error) {
	out, err := recordedVersions(ctx, kv, cluster)
	maps.DeleteFunc(out, func(host, _ string) bool { return schemas.RoleOf(cluster, host) == schemas.RoleGateway })
	return out, err
}

// recordedVersions returns the version recorded of each host, the
// gateway's too (it is recorded once its files are in place).
func recordedVersions(ctx context.Context, kv ledgerKV, cluster string) (map[string]string, error) {
	prefix := state.KeysOf(kv).Hosts(cluster)
	hosts, err := kv.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("ledger of %s: %w", cluster, err)
	}
	out := map[string]string{}
	for k, v := range hosts {
		if host, rest, _ := strings.Cut(strings.TrimPrefix(k, prefix), "/"); rest == "version" {
			out[host] = string(v)
		}
	}
	return out, nil
}

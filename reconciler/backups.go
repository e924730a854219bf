package reconciler

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"opke.dev/opke/backup"
	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// StoreBackups is the name OPKE's own store's snapshots go under: its
// records at /opke/_opke/backups/<id>, its objects at <container>/_opke/.
const StoreBackups = "_opke"

// Backups returns the backup records of a cluster the store holds,
// oldest first.
func Backups(ctx context.Context, kv ledgerKV, cluster string) ([]*backup.Record, error) {
	raw, err := kv.List(ctx, state.KeysOf(kv).Backups(cluster))
	if err != nil {
		return nil, fmt.Errorf("backups of %s: %w", cluster, err)
	}
	var out []*backup.Record
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		var r backup.Record
		if err := json.Unmarshal(raw[k], &r); err != nil {
			return nil, fmt.Errorf("backups of %s: %s: %w", cluster, k, err)
		}
		out = append(out, &r)
	}
	return out, nil
}

// recordBackup keeps a backup record in the store.
func recordBackup(ctx context.Context, kv ledgerKV, r *backup.Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return kv.Put(ctx, state.KeysOf(kv).Backups(r.Cluster)+r.ID, b)
}

// backupDue reports whether a cluster's scheduled backup is due: its
// newest scheduled record is older than the interval.
func backupDue(ctx context.Context, kv ledgerKV, c *schemas.Cluster, now time.Time) (bool, error) {
	if c.Spec.Backup == nil {
		return false, nil
	}
	recs, err := Backups(ctx, kv, c.Metadata.Name)
	if err != nil {
		return false, err
	}
	for _, r := range slices.Backward(recs) {
		if r.Reason == backup.ReasonScheduled {
			return !now.Before(r.Taken.Add(c.Spec.Backup.Interval.Duration)), nil
		}
	}
	return true, nil
}

// BackupPolicy is where a cluster's snapshots go and how many stay.
type BackupPolicy struct {
	Container string
	Retain    int
	Drill     bool
}

// PolicyOf is a cluster's backup policy; a cluster without spec.backup
// still keeps its snapshots before rollouts, in the default container.
func PolicyOf(c *schemas.Cluster) BackupPolicy {
	if b := c.Spec.Backup; b != nil {
		return BackupPolicy{Container: cmp.Or(b.Container, schemas.DefaultBackupContainer), Retain: cmp.Or(b.Retain, schemas.DefaultBackupRetain), Drill: b.Drill}
	}
	return BackupPolicy{Container: schemas.DefaultBackupContainer, Retain: schemas.DefaultBackupRetain}
}

// ClusterSource is a cluster's etcd as a snapshot source: its
// controllers' client URLs through the gateway, with the backup client
// certificate.
func (h *HostSessions) ClusterSource(t HostTarget, b *pki.Bundle) (backup.Source, error) {
	cfg, err := b.TLS(pki.EtcdCA, pki.EtcdBackupClient)
	if err != nil {
		return backup.Source{}, err
	}
	var eps []string
	for _, ip := range controllerIPs(t) {
		eps = append(eps, "https://"+netip.AddrPortFrom(ip, etcdClientPort).String())
	}
	if len(eps) == 0 {
		return backup.Source{}, fmt.Errorf("%s: no controller to snapshot", t.Cluster)
	}
	return backup.Source{Endpoints: eps, TLS: cfg, Dial: func(ctx context.Context, addr string) (net.Conn, error) { return h.Dial(ctx, t, addr) }}, nil
}

// backupJob is a backup to take: of which cluster's etcd and why, from
// where, and where it goes.
type backupJob struct {
	Cluster, Reason string
	Source          backup.Source
	// Objects reach the policy's container.
	Objects *cloud.Clients
	Policy  BackupPolicy
	Now     time.Time
	// Seal seals the file before it is stored (the store's encryption
	// key, under a label per cluster or the store's own); the drill, if
	// any, runs on the plain file.
	Seal func([]byte) ([]byte, error)
}

// storeBackup takes the snapshot and stores it under its policy: uploaded,
// recorded, older ones pruned, and drilled if the policy says so. The
// store's records follow the container: the snapshots it holds are the
// ones recorded.
func storeBackup(ctx context.Context, kv writer, s backupJob) (*backup.Record, error) {
	cluster, pol := s.Cluster, s.Policy
	tmp, err := os.MkdirTemp("", "opke-backup-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	snap, err := backup.Take(ctx, s.Source, tmp)
	if err != nil {
		return nil, fmt.Errorf("backup of %s: %w", cluster, err)
	}
	rec := snap.Record(cluster, s.Reason, s.Now, pol.Container)
	stored := snap.Path // what goes to Swift; the plain file stays for the drill
	if s.Seal != nil {
		stored = snap.Path + ".sealed"
		if err := transformFile(snap.Path, stored, s.Seal); err != nil {
			return nil, err
		}
		if rec.SHA256, rec.Size, err = fileSum(stored); err != nil {
			return nil, err
		}
		rec.Sealed = true
	}
	box := backup.Objects{Client: s.Objects.ObjectStore, Container: pol.Container}
	if err := box.Put(ctx, rec, stored); err != nil {
		return nil, err
	}
	if err := recordBackup(ctx, kv, rec); err != nil {
		return nil, err
	}
	if err := prune(ctx, kv, box, cluster, pol.Retain); err != nil {
		return rec, err
	}
	if pol.Drill {
		return rec, drill(ctx, kv, snap.Path, rec, s.Now)
	}
	return rec, nil
}

// drill restores a snapshot file into a throwaway etcd, records how it
// went, and fails with [backup.ErrCorrupt] if it did not pass.
func drill(ctx context.Context, kv writer, path string, rec *backup.Record, now time.Time) error {
	res, err := backup.Drill(ctx, path, rec, now)
	if err != nil {
		return err
	}
	rec.Drill = res
	if err := recordBackup(ctx, kv, rec); err != nil {
		return err
	}
	if !res.Passed {
		return fmt.Errorf("restore drill of %s: %s: %w", rec.ID, res.Message, backup.ErrCorrupt)
	}
	return nil
}

// Fetch downloads a snapshot into dir, checked against its sha256 and,
// if sealed, opened with open: a plain etcd snapshot file.
func Fetch(ctx context.Context, box backup.Objects, rec *backup.Record, dir string, open func([]byte) ([]byte, error)) (string, error) {
	path, err := box.Download(ctx, rec, dir)
	if err != nil || !rec.Sealed {
		return path, err
	}
	if open == nil {
		return "", fmt.Errorf("snapshot %s is sealed: the store's encryption key is needed to open it", rec.ID)
	}
	if err := transformFile(path, path, open); err != nil {
		return "", fmt.Errorf("open snapshot %s: %w: %w", rec.ID, err, backup.ErrCorrupt)
	}
	return path, nil
}

// prune deletes a cluster's snapshots past retention from the container
// and makes the store's records match what the container keeps: a record
// lost by a crash between upload and record comes back from the object's
// metadata, a record of an object gone is dropped.
func prune(ctx context.Context, kv writer, box backup.Objects, cluster string, retain int) error {
	listed, err := box.List(ctx, cluster)
	if err != nil {
		return err
	}
	expired := backup.Expired(listed, retain)
	for _, r := range expired {
		if err := box.Delete(ctx, r); err != nil {
			return err
		}
	}
	recs, err := Backups(ctx, kv, cluster)
	if err != nil {
		return err
	}
	have := map[string]*backup.Record{}
	for _, r := range recs {
		have[r.ID] = r
	}
	keep := map[string]bool{}
	for _, r := range listed {
		if slices.Contains(expired, r) {
			continue
		}
		keep[r.ID] = true
		if have[r.ID] == nil {
			if err := recordBackup(ctx, kv, r); err != nil {
				return err
			}
		}
	}
	for id := range have {
		if !keep[id] {
			if err := kv.Delete(ctx, state.KeysOf(kv).Backups(cluster)+id); err != nil {
				return err
			}
		}
	}
	return nil
}

// transformFile writes to the file at to the bytes of the file at from
// through fn (sealing or opening them); from and to may be one file.
func transformFile(from, to string, fn func([]byte) ([]byte, error)) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	out, err := fn(b)
	if err != nil {
		return err
	}
	return os.WriteFile(to, out, 0o600)
}

// backupStep runs a plan's backup change: a scheduled snapshot, or the
// one before a rollout's first control-plane restart.
func (h hostStep) backup(ctx context.Context, address diff.Address) error {
	reason := backup.ReasonScheduled
	if address.Target == diff.TargetSnapshot {
		reason = backup.ReasonBeforeRollout
	}
	src, err := h.a.Hosts.ClusterSource(h.t, h.pki)
	if err != nil {
		return err
	}
	rec, err := storeBackup(ctx, h.j.w, backupJob{Cluster: h.j.cluster, Reason: reason, Source: src, Objects: h.t.Clients,
		Policy: PolicyOf(h.spec), Now: h.a.Planner.now(), Seal: sealClusterSnapshot(h.a.Planner.Store, h.j.cluster)})
	if err != nil {
		return err
	}
	h.a.log().Info("etcd snapshot stored", "cluster", h.j.cluster, "reason", reason, "id", rec.ID, "size", rec.Size, "object", rec.Container+"/"+rec.Object)
	return nil
}

// fileSum is a file's sha256 and size.
func fileSum(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// VerifyBackup checks a stored snapshot end to end (id "": the newest):
// downloaded, its sha256 against the object's metadata, etcdutl's status
// against the record, and a restore drill, whose result is recorded. A
// snapshot that fails any of them is [backup.ErrCorrupt].
func VerifyBackup(ctx context.Context, kv writer, box backup.Objects, cluster, id string, now time.Time, open func([]byte) ([]byte, error)) (*backup.Record, error) {
	listed, err := box.List(ctx, cluster)
	if err != nil {
		return nil, err
	}
	if id == "" {
		if len(listed) == 0 {
			return nil, fmt.Errorf("no snapshot of %s in %s: %w", cluster, box.Container, backup.ErrNotFound)
		}
		id = listed[len(listed)-1].ID
	}
	rec, err := backup.Find(listed, id)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "opke-verify-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	path, err := Fetch(ctx, box, rec, tmp, open)
	if err != nil {
		return rec, err
	}
	st, err := backup.Status(path)
	if err != nil {
		return rec, err
	}
	if st.Revision != rec.Revision || st.Hash != rec.Hash {
		return rec, fmt.Errorf("snapshot %s: status says revision %d hash %d, the record %d and %d: %w", id, st.Revision, st.Hash, rec.Revision, rec.Hash, backup.ErrCorrupt)
	}
	return rec, drill(ctx, kv, path, rec, now)
}

// storeLabel binds a sealed snapshot of OPKE's store to its purpose.
const storeLabel = "opke-store-snapshot"

// BackupStore snapshots OPKE's own state store, seals it with the
// store's encryption key, and keeps it like a cluster's, under
// StoreBackups in the policy's container.
func BackupStore(ctx context.Context, store *state.Store, clients *cloud.Clients, pol BackupPolicy, reason string, now time.Time) (*backup.Record, error) {
	return storeBackup(ctx, store, backupJob{Cluster: StoreBackups, Reason: reason, Source: backup.Source{Client: store.Client()}, Objects: clients,
		Policy: pol, Now: now, Seal: func(b []byte) ([]byte, error) { return store.SealBlob(storeLabel, b) }})
}

// A cluster's snapshots are sealed like the store's, with the store's
// encryption key, bound to the cluster: they hold everything of the
// cluster's etcd (its Secrets sealed by the API server, the rest in the
// clear), and Swift is not a place to keep that readable. A snapshot of
// one cluster does not open as another's.
func clusterSnapshotLabel(cluster string) string { return "opke-cluster-snapshot/" + cluster }

func sealClusterSnapshot(store *state.Store, cluster string) func([]byte) ([]byte, error) {
	return func(b []byte) ([]byte, error) { return store.SealBlob(clusterSnapshotLabel(cluster), b) }
}

// OpenClusterSnapshot is the opener of a cluster's sealed snapshots.
func OpenClusterSnapshot(store *state.Store, cluster string) func([]byte) ([]byte, error) {
	return func(b []byte) ([]byte, error) { return store.OpenBlob(clusterSnapshotLabel(cluster), b) }
}

// OpenStoreSnapshot is the opener of OPKE's sealed store snapshots.
func OpenStoreSnapshot(store *state.Store) func([]byte) ([]byte, error) {
	return func(b []byte) ([]byte, error) { return store.OpenBlob(storeLabel, b) }
}

// ClusterHosts is how an applied cluster's hosts are reached now, through
// its gateway as the cloud shows it (opke backup, opke ssh), and its
// applied spec.
func ClusterHosts(ctx context.Context, p *Planner, cluster string) (HostTarget, *AppliedSpec, error) {
	a, err := appliedSpec(ctx, p.Store, cluster)
	if err != nil {
		return HostTarget{}, nil, err
	}
	if a == nil {
		return HostTarget{}, nil, fmt.Errorf("cluster %s: %w: not applied", cluster, state.ErrNotFound)
	}
	clients, err := p.Clouds.Clients(ctx, a.Spec.Spec.Cloud, a.Spec.Spec.Region)
	if err != nil {
		return HostTarget{}, nil, err
	}
	owner, err := p.Store.InstallationID(ctx)
	if err != nil {
		return HostTarget{}, nil, err
	}
	obs, err := cloud.ObserveCluster(ctx, clients, owner, cluster, nil)
	if err != nil {
		return HostTarget{}, nil, err
	}
	t, err := hostTarget(cluster, clients, obs.Clusters[cluster], p.Store)
	return t, a, err
}

// BackupCluster snapshots an applied cluster's etcd now, as `opke backup
// now` does: through its gateway with the backup client certificate,
// stored and pruned under its spec's policy.
func BackupCluster(ctx context.Context, p *Planner, hosts *HostSessions, cluster, reason string) (*backup.Record, error) {
	t, a, err := ClusterHosts(ctx, p, cluster)
	if err != nil {
		return nil, err
	}
	clients := t.Clients
	b, err := pki.Load(ctx, p.Store, cluster, pki.EtcdCA, pki.EtcdBackupClient)
	if err != nil {
		return nil, err
	}
	src, err := hosts.ClusterSource(t, b)
	if err != nil {
		return nil, err
	}
	return storeBackup(ctx, p.Store, backupJob{Cluster: cluster, Reason: reason, Source: src, Objects: clients, Policy: PolicyOf(a.Spec), Now: p.now(),
		Seal: sealClusterSnapshot(p.Store, cluster)})
}

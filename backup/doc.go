// Package backup takes, checks, stores and restores etcd snapshots: a
// cluster's etcd (reached through its gateway, with the backup client
// certificate) and OPKE's own state store (sealed before upload). It has a
// top-level folder because it is a boundary of its own: etcd's snapshot
// format (etcdutl's status and restore) and the object store (Swift).
//
// A snapshot's life:
//
//	Take      clientv3 Maintenance.SnapshotWithVersion into a local file, its
//	          sha256 and size, etcdutl's status (hash, revision, key count),
//	          and the live keys at that revision counted on the source
//	Put       the file to Swift as <container>/<cluster>/<id>.db, with the
//	          record in the object's metadata (sha256 included), so the
//	          container alone describes every snapshot it holds
//	Prune     keeps the newest Retain scheduled or manual snapshots and the
//	          newest one taken before a rollout; deletes the others
//	Verify    downloads, checks the sha256 against the metadata and the
//	          status against the record, and drills
//	Drill     restores into a throwaway embedded etcd on 127.0.0.1 and
//	          checks its revision and key count against the record
//	Restore   writes a restored data dir for an operator to start
//
// IDs are <UTC time to the millisecond>-<revision>: sorting them sorts the
// snapshots by age.
package backup

// Package state is OPKE's state store: etcd, embedded (server/v3/embed, in
// the data dir) by default or external endpoints with TLS. It has a
// top-level folder because it is a boundary of its own: everything OPKE
// must remember between two reconciles lives here and nowhere else.
//
// One key layout under a prefix (default /opke/), drawn and named in
// keys.go and only there: every package builds its keys with [Keys].
// Cluster names are DNS-1123 labels, so keys starting with "_" never
// clash with them.
//
// Sealed values are encrypted at rest with AES-256-GCM under the key of
// --encryption-key-file, with the value's key as additional data, so a
// sealed value copied to another key does not open. Without the encryption
// key they cannot be read: [ErrSealed].
//
// [Store.Acquire] takes a cluster's lease; every write through the
// [Lease] is a transaction that checks it is still held (fencing), so an
// applier that lost its lease writes nothing.
//
// [Store.Elect] makes one of several daemons the leader; its writes
// ([Leadership.Put]) are fenced like a lease's. [Store.Leader] names it.
// [Store.Join] makes a daemon a member of those sharing the fleet while
// its session lives ([Store.WatchMembers] follows them); its writes are
// fenced on its membership.
//
// [Store.Changes] follows every write below the prefix with one watch:
// a planner keeps what it read (ledgers, material fingerprints) until the
// watch says a key of it was written, and [Changes.Sync] says when the
// watch has delivered every write up to the store's revision.
//
// [Store.ReadOnly] returns an overlay that reads through to the store and
// keeps every write in memory: a pull-request plan renders with it and
// persists nothing.
package state

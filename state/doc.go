// Package state is OPKE's state store: etcd, embedded (server/v3/embed, in
// the data dir) by default or external endpoints with TLS. It has a
// top-level folder because it is a boundary of its own: everything OPKE
// must remember between two reconciles lives here and nowhere else.
//
// One key layout under a prefix (default /opke/). Cluster names are
// DNS-1123 labels, so keys starting with "_" never clash with them:
//
//	/opke/_meta/installation-id             the installation id (opke-owner tag)
//	/opke/_applied/<cluster>                last applied spec and its commit (the ledger)
//	/opke/_locks/<cluster>/<lease>          the apply lease of a cluster (etcd's lock keys)
//	/opke/_open/<cluster>                   the plan an apply of the cluster is running
//	/opke/_journal/<cluster>/<plan>/plan    that plan (JSON) and how it ended
//	/opke/_journal/<cluster>/<plan>/<step>  the apply journal: each step before and after it ran
//	/opke/_locks/_daemon/<lease>            the daemons' election (Store.Elect)
//	/opke/_reports/<commit>                 the daemon's note on a commit (JSON)
//	/opke/_status/<cluster>                 the daemon's view of a cluster (status page, API)
//	/opke/_daemon/seen/<ref>                the last commit the daemon handled of a ref
//	/opke/_reported/<forge>/<commit>/<ctx>  the commit statuses posted (deduplication)
//	/opke/<cluster>/pki/<name>.crt          certificates, PEM
//	/opke/<cluster>/pki/<name>.key          private keys, PEM, sealed
//	/opke/<cluster>/ssh/id_ed25519          OPKE's SSH private key, sealed
//	/opke/<cluster>/ssh/id_ed25519.pub      ... and its public half
//	/opke/<cluster>/hostkeys/<host>         pinned SSH host key (authorized_keys form)
//	/opke/<cluster>/infra/<kind>/<name>     applied resource: {"id", "attrs"} (the ledger)
//	/opke/<cluster>/hosts/<host>/files/<path> pushed file: {"sha256"} (the ledger)
//	/opke/<cluster>/hosts/<host>/version    the Kubernetes version the host runs (the ledger)
//	/opke/<cluster>/cloud/application-credential-secret  its cloud.conf secret, sealed
//	/opke/<cluster>/kubeconfig              admin kubeconfig, sealed (it holds a key)
//	/opke/<cluster>/backups/<id>            backup records
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
//
// [Store.ReadOnly] returns an overlay that reads through to the store and
// keeps every write in memory: a pull-request plan renders with it and
// persists nothing.
package state

package state

// Every key OPKE keeps in its store is named here, and only here. Under
// the store's prefix (DefaultPrefix, /opke/):
//
//	<cluster>/infra/<kind>/<name>          ledger: a resource as applied, {"id", "attrs"}
//	<cluster>/hosts/<host>/files<path>     ledger: a file as pushed, {"sha256"}
//	<cluster>/hosts/<host>/version         ledger: the Kubernetes version the host runs
//	<cluster>/hosts/<host>/etcd            ledger: how a controller's etcd member first started, {"join", "members"}
//	<cluster>/kubernetes/<manifest>        ledger: a manifest as applied to the API, {"sha256"}
//	<cluster>/backups/<id>                 an etcd snapshot's record
//	<cluster>/hostkeys/<host>              a host's SSH host key, pinned at first contact (authorized_keys form)
//	<cluster>/cloud/application-credential-secret
//	                                       its cloud.conf secret, sealed
//	<cluster>/pki/<name>.crt, .key, ...    certificates (PEM) and keys (PEM, sealed)
//	<cluster>/ssh/id_ed25519, .pub         OPKE's SSH key for the cluster's hosts (the private half sealed)
//	<cluster>/kubeconfig                   the admin kubeconfig, sealed (it holds a key)
//	_applied/<cluster>                     the spec last applied and its commit (the ledger)
//	_open/<cluster>                        the id of the plan an apply of the cluster runs
//	_journal/<cluster>/<plan>/plan, <step> that plan and how it ended; each step, before and after it ran
//	_status/<cluster>                      the daemon's view of a cluster (status page, API)
//	_reports/<commit>                      the daemons' note on a commit, but its clusters' entries:
//	_reports/<commit>/<cluster>            a cluster's entry in it (written by the cluster's owner)
//	_daemon/seen/<ref>                     the last commit the daemon handled of a ref
//	_daemon/accepted/<ref>                 the last commit the commit policy accepted
//	_daemon/planning/<ref>                 a pull request head being planned
//	_daemon/dispatched/<ref>               the last commit the leader dispatched to the daemons' shares
//	_members/<daemon>                      a daemon sharing the fleet (its session's lease)
//	_reported/<forge>/<commit>/<context>   the commit statuses a forge reporter posted
//	_locks/<cluster>/<lease>               a cluster's apply lease (etcd's lock keys)
//	_locks/_daemon/<lease>                 the daemons' election
//	_meta/installation-id                  the installation id (the opke-owner tag)
//
// A prefix (a name ending in s, or Cluster) ends with "/".

// Keyer names keys under a store's prefix: a [Store], a [Lease], an
// [Overlay] or a read-only view.
type Keyer interface{ Key(parts ...string) string }

// Keys names the keys of the store k writes to.
type Keys struct{ k Keyer }

// KeysOf returns the names of k's keys.
func KeysOf(k Keyer) Keys { return Keys{k} }

// Cluster is the prefix of everything a cluster has in the store.
func (k Keys) Cluster(cluster string) string { return k.k.Key(cluster) + "/" }

// Resources is the prefix of a cluster's applied resources.
func (k Keys) Resources(cluster string) string { return k.k.Key(cluster, "infra") + "/" }

// Resource is an applied resource's record.
func (k Keys) Resource(cluster, kind, name string) string {
	return k.k.Key(cluster, "infra", kind, name)
}

// Hosts is the prefix of a cluster's hosts' records.
func (k Keys) Hosts(cluster string) string { return k.k.Key(cluster, "hosts") + "/" }

// Host is the prefix of a host's records.
func (k Keys) Host(cluster, host string) string { return k.k.Key(cluster, "hosts", host) + "/" }

// HostFiles is the prefix of a host's pushed files.
func (k Keys) HostFiles(cluster, host string) string {
	return k.k.Key(cluster, "hosts", host, "files") + "/"
}

// HostFile is a pushed file's record, by its absolute path.
func (k Keys) HostFile(cluster, host, path string) string {
	return k.k.Key(cluster, "hosts", host, "files"+path)
}

// HostVersion is the version a host runs.
func (k Keys) HostVersion(cluster, host string) string {
	return k.k.Key(cluster, "hosts", host, "version")
}

// HostEtcd is how a controller's etcd member first started.
func (k Keys) HostEtcd(cluster, host string) string {
	return k.k.Key(cluster, "hosts", host, "etcd")
}

// Manifests is the prefix of a cluster's applied manifests.
func (k Keys) Manifests(cluster string) string { return k.k.Key(cluster, "kubernetes") + "/" }

// Manifest is an applied manifest's record.
func (k Keys) Manifest(cluster, name string) string { return k.k.Key(cluster, "kubernetes", name) }

// ManifestObjects are the objects an applied manifest holds (what is
// deleted when it no longer does), apart from the manifests' records.
func (k Keys) ManifestObjects(cluster, name string) string {
	return k.k.Key(cluster, "kubernetes-objects", name)
}

// Backups is the prefix of a cluster's snapshot records.
func (k Keys) Backups(cluster string) string { return k.k.Key(cluster, "backups") + "/" }

// HostKeys are a host's pinned SSH host keys.
func (k Keys) HostKeys(cluster, host string) string { return k.k.Key(cluster, "hostkeys", host) }

// AppCredentialSecret is the secret of a cluster's application credential.
func (k Keys) AppCredentialSecret(cluster string) string {
	return k.k.Key(cluster, "cloud", "application-credential-secret")
}

// PKI is the prefix of a cluster's keys and certificates.
func (k Keys) PKI(cluster string) string { return k.k.Key(cluster, "pki") + "/" }

// PKIFile is one of a cluster's keys or certificates ("ca.crt", "sa.key").
func (k Keys) PKIFile(cluster, file string) string { return k.k.Key(cluster, "pki", file) }

// SSHKey is OPKE's SSH key for a cluster's hosts: its private and public
// halves.
func (k Keys) SSHKey(cluster string) (private, public string) {
	return k.k.Key(cluster, "ssh", "id_ed25519"), k.k.Key(cluster, "ssh", "id_ed25519.pub")
}

// Material is the key range of a cluster's material, [from, to): its
// keys and certificates (pki/) and its SSH key (ssh/), which sort next to
// each other (no other key of a cluster starts with q, r, or s before
// ssh/): what a render reads of the store.
func (k Keys) Material(cluster string) (from, to string) {
	return k.PKI(cluster), k.k.Key(cluster, "ssh") + "0" // "0" follows "/"
}

// Ledger is the key range of a cluster's ledger, [from, to): its hosts'
// records (hosts/), its resources' (infra/) and its manifests'
// (kubernetes/), which sort next to each other with only the kubeconfig
// between them.
func (k Keys) Ledger(cluster string) (from, to string) {
	return k.Hosts(cluster), k.k.Key(cluster, "kubernetes") + "0" // "0" follows "/"
}

// Kubeconfig is a cluster's admin kubeconfig.
func (k Keys) Kubeconfig(cluster string) string { return k.k.Key(cluster, "kubeconfig") }

// AppliedSpecs is the prefix of the applied specs.
func (k Keys) AppliedSpecs() string { return k.k.Key("_applied") + "/" }

// AppliedSpec is a cluster's applied spec.
func (k Keys) AppliedSpec(cluster string) string { return k.k.Key("_applied", cluster) }

// OpenPlans is the prefix of the unfinished plans' ids.
func (k Keys) OpenPlans() string { return k.k.Key("_open") + "/" }

// OpenPlan is the id of a cluster's unfinished plan.
func (k Keys) OpenPlan(cluster string) string { return k.k.Key("_open", cluster) }

// Journals is the prefix of a cluster's journals.
func (k Keys) Journals(cluster string) string { return k.k.Key("_journal", cluster) + "/" }

// Journal is a key of a cluster's journal: Journal(c, id, "plan"), or a
// step's Journal(c, id, changeID).
func (k Keys) Journal(cluster string, parts ...string) string {
	return k.k.Key(append([]string{"_journal", cluster}, parts...)...)
}

// Statuses is the prefix of the clusters' statuses.
func (k Keys) Statuses() string { return k.k.Key("_status") + "/" }

// Status is a cluster's status.
func (k Keys) Status(cluster string) string { return k.k.Key("_status", cluster) }

// Report is a commit's note, without its clusters' entries.
func (k Keys) Report(commit string) string { return k.k.Key("_reports", commit) }

// ReportEntry is a cluster's entry in a commit's note.
func (k Keys) ReportEntry(commit, cluster string) string { return k.k.Key("_reports", commit, cluster) }

// SeenRefs is the prefix of the refs the daemon handled.
func (k Keys) SeenRefs() string { return k.k.Key("_daemon", "seen") + "/" }

// SeenRef is the last commit of a ref the daemon handled.
func (k Keys) SeenRef(ref string) string { return k.k.Key("_daemon", "seen", ref) }

// Accepted is the last commit of a ref the commit policy accepted.
func (k Keys) Accepted(ref string) string { return k.k.Key("_daemon", "accepted", ref) }

// Dispatched is the last commit of a ref the leader dispatched: its
// note lists what each daemon's share is to do.
func (k Keys) Dispatched(ref string) string { return k.k.Key("_daemon", "dispatched", ref) }

// Members is the prefix of the daemons sharing the fleet.
func (k Keys) Members() string { return k.k.Key("_members") + "/" }

// Member is a daemon's membership key.
func (k Keys) Member(id string) string { return k.k.Key("_members", id) }

// Plannings is the prefix of the pull request heads under way.
func (k Keys) Plannings() string { return k.k.Key("_daemon", "planning") + "/" }

// Planning is the pull request head the daemon is planning.
func (k Keys) Planning(ref string) string { return k.k.Key("_daemon", "planning", ref) }

// Reported is what a forge reporter posted, by its own key.
func (k Keys) Reported(key string) string { return k.k.Key("_reported", key) }

// Locks is the prefix of the leases and the election.
func (k Keys) Locks() string { return k.k.Key("_locks") + "/" }

// Lock is a lease's or the election's key.
func (k Keys) Lock(name string) string { return k.k.Key("_locks", name) }

// InstallationID is this installation's id.
func (k Keys) InstallationID() string { return k.k.Key("_meta", "installation-id") }

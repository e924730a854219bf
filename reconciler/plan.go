package reconciler

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// Clouds gives the clients of a cloud (an entry of clouds.yaml) in a
// region; [cloud.Pool] is the implementation.
type Clouds interface {
	Clients(ctx context.Context, cloud, region string) (*cloud.Clients, error)
}

// HostReader reads the sha256 of files on a cluster's hosts (a resync).
type HostReader interface {
	// Checksums returns, by host and path, the sha256 of each file of
	// paths found on the host; a missing file is absent from the result.
	Checksums(ctx context.Context, t HostTarget, paths map[string][]string) (map[string]map[string]string, error)
	// ObjectDrift returns, by manifest, what changed outside OPKE in the
	// objects of recorded (what each manifest applied): those the
	// cluster's API no longer has, and those whose fields OPKE applied
	// another manager changed.
	ObjectDrift(ctx context.Context, t HostTarget, recorded map[string][]recordedObject) (map[string][]string, error)
	// FieldChanges returns, for each of objs the cluster's API has, the
	// fields applying it would change there (a dry run).
	FieldChanges(ctx context.Context, t HostTarget, objs []object) (map[objectRef][]string, error)
}

// HostTarget is how a cluster's hosts are reached: through its gateway's
// floating IP, as OPKE's SSH identity for the cluster.
type HostTarget struct {
	Cluster string
	Clients *cloud.Clients
	// Gateway is the gateway server, Address its floating IP.
	Gateway diff.Resource
	Address netip.Addr
	// Hosts are the hosts' servers and fixed IPs, by name.
	Hosts map[string]HostAddr
	// KV reads the cluster's SSH key and pinned host keys.
	KV state.KV
}

// HostAddr is a host's server id and fixed IP.
type HostAddr struct {
	ServerID string
	IP       netip.Addr
}

// Planner works out a fleet's plan with no side effects: each cluster is
// rendered on a read-only view of the store (material a new cluster or
// host needs is issued in memory and planned as known after apply), each
// cloud is listed once, what was applied comes from the ledger, and the
// hosts are read only when a resync asks.
type Planner struct {
	Store  *state.Store
	Clouds Clouds
	// Hosts reads the hosts on a resync; nil refuses a resync.
	Hosts HostReader
	// Health reads the health of the Nodes of clusters that ask for
	// remediation (spec.remediation), and of the etcd members of the
	// controllers a plan would make again; nil: none is read, the plan
	// warns that nothing is remediated, and a controller's replacement
	// is left to the apply to refuse while its member answers.
	Health HealthReader
	Logger *slog.Logger
	// Now is the clock certificates are checked against (time.Now).
	Now func() time.Time
	// MirrorAuth is the login to the clusters' registry mirror, if any
	// (the spec names the mirror; the login is the daemon's).
	MirrorAuth *assets.MirrorAuth
	// RenewWithin reissues certificates that expire within it
	// (pki.DefaultRenew, 30 days); the hosts get them as an upgrade does.
	RenewWithin time.Duration

	// desired keeps the clusters' settled desired states; ledgers,
	// material and secrets what plans read of the store, until it is
	// written.
	desired  desireCache
	ledgers  kept[*records]
	material kept[[32]byte]
	secrets  kept[string]
	facts    kept[*schemas.TransitionFacts]
}

// Facts returns the transition facts of clusters (see [Facts]), kept
// between calls as the ledgers are: a cluster's are read again only once
// the store's changes say its hosts or backups were written. Judging a
// 10,000-cluster commit read them all, 20,000 reads, at every commit.
func (p *Planner) Facts(ctx context.Context, clusters []string) (map[string]*schemas.TransitionFacts, error) {
	changes, rev, err := p.synced(ctx)
	if err != nil {
		return nil, err
	}
	keys := state.KeysOf(p.Store)
	out := make(map[string]*schemas.TransitionFacts, len(clusters))
	names := make(map[string]bool, len(clusters))
	var missing []string
	for _, name := range clusters {
		names[name] = true
		if f, ok := p.facts.get(changes, name, keys.Hosts(name), keys.Backups(name)); ok {
			out[name] = f
		} else {
			missing = append(missing, name)
		}
	}
	p.facts.forget(names)
	read, err := Facts(ctx, p.Store, missing)
	if err != nil {
		return nil, err
	}
	for name, f := range read {
		out[name] = f
		p.facts.put(name, rev, f)
	}
	return out, nil
}

// synced returns the store's changes, caught up with its revision rev:
// what they say was not written since an earlier plan read it is kept
// from that plan (the ledgers, the material's fingerprints, the
// transition facts). When the watch cannot say (not caught up), changes
// is nil, and all is read again.
func (p *Planner) synced(ctx context.Context) (changes *state.Changes, rev int64, err error) {
	changes = p.Store.Changes()
	rev, err = changes.Sync(ctx)
	if errors.Is(err, state.ErrBehind) {
		p.log().Debug("the store's changes are behind: reading every ledger", "err", err)
		changes = nil
		rev, err = p.Store.Current(ctx)
	}
	if err != nil {
		return nil, 0, err
	}
	return changes, rev, nil
}

// Request is what to plan.
type Request struct {
	// Clusters are the fleet's valid clusters, by name.
	Clusters map[string]*schemas.Cluster
	// Only plans one cluster (of the fleet, or one that left it).
	Only string
	// Share, if set, plans only the clusters it holds: a daemon's share
	// of a fleet several daemons apply.
	Share func(cluster string) bool
	// Resync checks the files on the hosts instead of trusting the ledger.
	Resync bool
	// Commit is the fleet's commit, recorded in the plan.
	Commit string
}

// Planned is one cluster as the planner saw it.
type Planned struct {
	Desired  *diff.Desired
	Observed *diff.Observed
	Ledger   *Ledger
	// Renders counts the renders its desired state took.
	Renders int

	// changes tell what the planner keeps of the store is still what it
	// holds; nil: nothing kept is used. rev is the store's revision
	// changes were synced to (0 without).
	changes *state.Changes
	rev     int64
	// changed are, by manifest and by their index in its Objects, the
	// objects the render changed since the last apply recorded them: what
	// a plan asks the API about (tellFieldChanges).
	changed map[string]map[int]object
}

// Result is a plan and what it was made from.
type Result struct {
	Plan     *diff.Plan
	Clusters map[string]*Planned
	// Renders counts the clusters' renders the plan made: none for a
	// cluster whose desired state was kept from a plan before (the same
	// spec, options and material).
	Renders int
	// LedgerReads counts the ledgers read from the store: none for a
	// cluster whose ledger records were not written since a plan before
	// read them.
	LedgerReads int
}

// ErrNoResync is a resync asked of a planner that cannot reach hosts.
var ErrNoResync = errors.New("resync needs SSH access to the hosts")

// Plan plans req.
func (p *Planner) Plan(ctx context.Context, req Request) (*Result, error) {
	if req.Resync && p.Hosts == nil {
		return nil, ErrNoResync
	}
	log := p.log()
	owner, err := p.Store.InstallationID(ctx)
	if err != nil {
		return nil, err
	}
	changes, rev, err := p.synced(ctx)
	if err != nil {
		return nil, err
	}
	specs, err := AppliedSpecs(ctx, p.Store)
	if err != nil {
		return nil, err
	}
	// The clusters in scope, and the cloud each lives in: the fleet's
	// spec says, or for a cluster that left the fleet its applied spec.
	type where struct{ cloud, region string }
	clouds := map[where][]string{}
	inScope := func(name string) bool {
		return (req.Only == "" || req.Only == name) && (req.Share == nil || req.Share(name))
	}
	names := map[string]bool{}
	for name, c := range req.Clusters {
		if inScope(name) {
			names[name] = true
			w := where{c.Spec.Cloud, c.Spec.Region}
			clouds[w] = append(clouds[w], name)
		}
	}
	for name, a := range specs {
		if inScope(name) && !names[name] {
			names[name] = true
			w := where{a.Spec.Spec.Cloud, a.Spec.Spec.Region}
			clouds[w] = append(clouds[w], name)
		}
	}
	// The ledgers not kept are read a few at a time: each is a read of
	// the store, whose latency, not its work, was most of a 1,000-cluster
	// plan's time when they were read one after another.
	res := &Result{Clusters: map[string]*Planned{}}
	if req.Only == "" {
		p.ledgers.forget(names)
		p.material.forget(names)
		p.secrets.forget(names)
	}
	var synced int64
	if changes != nil {
		synced = rev
	}
	var resMu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(planParallel)
	for name := range names {
		if r, ok := p.ledgers.get(changes, name, ledgerKeys(p.Store, name)...); ok {
			resMu.Lock()
			res.Clusters[name] = &Planned{Ledger: r.ledger(specs[name]), changes: changes, rev: synced}
			resMu.Unlock()
			continue
		}
		res.LedgerReads++
		g.Go(func() error {
			r, at, err := readRecords(gctx, p.Store, name)
			if err != nil {
				return err
			}
			r = r.planned()
			p.ledgers.put(name, at, r)
			resMu.Lock()
			res.Clusters[name] = &Planned{Ledger: r.ledger(specs[name]), changes: changes, rev: synced}
			resMu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	// Each cloud is listed once. A cluster found by its tags that neither
	// the fleet nor the ledger knows is planned as one that left the fleet.
	observed := map[string][]diff.Resource{}
	clientsOf := map[string]*cloud.Clients{}
	for _, w := range slices.SortedFunc(maps.Keys(clouds), func(a, b where) int {
		return cmp.Or(cmp.Compare(a.cloud, b.cloud), cmp.Compare(a.region, b.region))
	}) {
		clients, err := p.Clouds.Clients(ctx, w.cloud, w.region)
		if err != nil {
			return nil, err
		}
		known := map[string]diff.Resource{}
		for _, name := range clouds[w] {
			clientsOf[name] = clients
			maps.Copy(known, res.Clusters[name].Ledger.members)
		}
		started := time.Now()
		// One cluster's plan lists its own resources only: its cost does
		// not grow with the fleet.
		var obs *cloud.Observation
		if req.Share != nil && req.Only == "" {
			obs, err = cloud.ObserveShare(ctx, clients, owner, inScope, known)
		} else {
			obs, err = cloud.ObserveCluster(ctx, clients, owner, req.Only, known)
		}
		if err != nil {
			return nil, fmt.Errorf("observe cloud %s: %w", w.cloud, err)
		}
		log.Debug("observed", "cloud", w.cloud, "region", w.region, "clusters", len(obs.Clusters), "took", time.Since(started))
		for name, rs := range obs.Clusters {
			if !inScope(name) {
				continue
			}
			observed[name] = rs
			clientsOf[name] = clients
			if res.Clusters[name] == nil {
				res.Clusters[name] = &Planned{Ledger: &Ledger{Resources: map[diff.Address]diff.Resource{}}, changes: changes, rev: synced}
			}
		}
	}

	// Each cluster's desired state, a few clusters at a time (a kept one
	// costs two reads of the store; a render is let go once its cluster
	// is done: 1,000 clusters' files and material held to the end of a
	// plan were most of opke serve's peak memory, and only what the diff
	// needs is kept).
	order := slices.Sorted(maps.Keys(res.Clusters))
	observations := make([]*diff.Observed, len(order))
	desiredAt := make([]*diff.Desired, len(order))
	for i, name := range order {
		pl := res.Clusters[name]
		pl.Observed = &diff.Observed{Cluster: name, Cloud: observed[name], Applied: pl.Ledger.Applied}
		observations[i] = pl.Observed
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(renderParallel())
	for i, name := range order {
		g.Go(func() error {
			d, err := p.plannedCluster(gctx, req, name, res.Clusters[name], clientsOf[name], observed[name])
			desiredAt[i] = d
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var desired []*diff.Desired
	for _, d := range desiredAt {
		if d != nil {
			desired = append(desired, d)
		}
	}
	plan := diff.Diff(desired, observations)
	plan.Commit, plan.StateRevision = req.Commit, rev
	res.Plan = plan
	for _, pl := range res.Clusters {
		res.Renders += pl.Renders
	}
	return res, nil
}

// planParallel is how many clusters' ledgers a plan reads at once.
const planParallel = 8

// renderParallel is how many clusters a plan renders (or finds kept) at
// once: as many as there are cores, a render being work, not waiting;
// each more holds a render's files and material (at 8, opke serve
// settling 1,000 clusters peaked 70 MiB higher).
func renderParallel() int { return max(runtime.GOMAXPROCS(0), 1) }

// plannedCluster fills in what a plan knows of one cluster once the
// cloud is observed, and returns its desired state (nil for a cluster
// no longer in the fleet): the Service load balancers of one being
// deleted, the Nodes' health where remediation asks, the render (kept
// or made), a scheduled backup due, and on a resync the hosts' files.
func (p *Planner) plannedCluster(ctx context.Context, req Request, name string, pl *Planned, clients *cloud.Clients, observed []diff.Resource) (*diff.Desired, error) {
	var err error
	c := req.Clusters[name]
	if c == nil {
		if deleting(pl.Ledger) && clients != nil {
			// What its cloud controller manager made goes with it.
			if pl.Observed.Services, err = cloud.ServiceLoadBalancers(ctx, clients, name, observed); err != nil {
				return nil, fmt.Errorf("observe %s's Service load balancers: %w", name, err)
			}
			// And what its Cinder CSI driver made.
			if pl.Observed.Volumes, err = cloud.ClusterVolumes(ctx, clients, name); err != nil {
				return nil, fmt.Errorf("observe %s's Cinder CSI volumes: %w", name, err)
			}
		}
		return nil, nil
	}
	if c.Spec.Remediation != nil && pl.Ledger.Applied != nil {
		// Read before the render: the hosts it replaces are rendered
		// without their material (diff.Renewed).
		pl.Observed.Nodes, pl.Observed.NodesUnread = p.nodeHealth(ctx, pl, clients)
	}
	pl.changed = nil
	if pl.Desired, err = p.desire(ctx, c, clients, pl); err != nil {
		return nil, err
	}
	if len(pl.changed) > 0 && p.Hosts != nil {
		// The render's changed addon objects, asked of the cluster's API.
		p.tellFieldChanges(ctx, pl, clients)
	}
	if pl.Ledger.Spec != nil {
		// A scheduled backup of a cluster that exists.
		if pl.Desired.BackupDue, err = backupDue(ctx, p.Store, c, p.now()); err != nil {
			return nil, err
		}
	}
	if req.Resync {
		if pl.Observed.HostFiles, err = p.resync(ctx, pl, clients); err != nil {
			return nil, fmt.Errorf("resync %s: %w", name, err)
		}
		pl.Observed.RebootRequired = rebootAwaited(pl.Observed.HostFiles)
		pl.Observed.ObjectDrift = p.objectDrift(ctx, pl, clients)
	}
	return pl.Desired, nil
}

// deleting says a cluster out of the fleet is to be deleted: its last
// applied spec said deletionPolicy Delete.
func deleting(l *Ledger) bool {
	return l.Applied != nil && l.Applied.DeletionPolicy == string(schemas.DeletionDelete)
}

// desire renders c on a read-only view of the store and lists what it
// asks for. A render that had to issue material (in memory) is made again
// on another view, which tells the bytes that depend on it: those are
// unknown until apply issues it for good. Controllers whose etcd members
// join the etcd that runs (diff.Joins) are rendered again to join it.
func (p *Planner) desire(ctx context.Context, c *schemas.Cluster, clients *cloud.Clients, pl *Planned) (*diff.Desired, error) {
	d, err := p.desireWith(ctx, c, clients, pl, nil, nil)
	if err != nil {
		return nil, err
	}
	if ctl := diff.ControllersToRenew(d, pl.Observed); len(ctl) > 0 {
		// A controller whose etcd member answers keeps its server: ask.
		pl.Observed.EtcdAnswers = p.etcdAnswers(ctx, pl, clients)
	}
	// Rendered again: the members that join the etcd that runs, and the
	// hosts whose servers are made again, whose material the apply issues
	// anew (known after apply).
	joins, renewed := diff.Joins(d, pl.Observed), diff.Renewed(d, pl.Observed)
	if len(joins) > 0 || len(renewed) > 0 {
		return p.desireWith(ctx, c, clients, pl, joins, renewed)
	}
	return d, nil
}

// desireWith renders c with the etcd members that join as joins say, and
// without the material of the renewed hosts.
func (p *Planner) desireWith(ctx context.Context, c *schemas.Cluster, clients *cloud.Clients, pl *Planned, joins []diff.Join, renewed []string) (*diff.Desired, error) {
	view := func() (*state.Overlay, error) {
		kv := p.Store.ReadOnly()
		for _, host := range renewed {
			for _, key := range hostMaterialKeys(kv, c.Metadata.Name, host) {
				if err := kv.Delete(ctx, key); err != nil {
					return nil, err
				}
			}
		}
		return kv, nil
	}
	kv, err := view()
	if err != nil {
		return nil, err
	}
	secret, err := p.credSecret(ctx, pl, kv, c.Metadata.Name)
	if err != nil {
		return nil, err
	}
	opts, placeholder := p.optionsWith(secret, c, clients, pl.Observed.Cloud)
	opts.Etcd = etcdStarts(c.Metadata.Name, pl.Ledger, joins)
	key, err := p.desireKey(ctx, pl.changes, c, opts, joins, renewed)
	if err != nil {
		return nil, err
	}
	if d := p.desired.get(c.Metadata.Name, key, p.now()); d != nil {
		return d, nil
	}
	out, err := render.Cluster(ctx, kv, c, opts)
	if err != nil {
		return nil, err
	}
	pl.Renders++
	in := diff.Inputs{UserData: out.UserData, Assets: out.Assets, APIFloatingIP: opts.APIFloatingIP.IsValid()}
	if len(out.Issued) > 0 || placeholder {
		opts2 := opts
		if placeholder {
			cred := *opts.Cloud
			cred.Secret += "'" // another placeholder
			opts2.Cloud = &cred
		}
		kv2, err := view()
		if err != nil {
			return nil, err
		}
		again, err := render.Cluster(ctx, kv2, c, opts2)
		if err != nil {
			return nil, err
		}
		pl.Renders++
		in.UnsettledUserData, in.UnsettledFiles = unsettled(out, again)
	}
	d, err := diff.Desire(c, in)
	if err != nil {
		return nil, err
	}
	shareWithLedger(d, pl.Ledger)
	told, changed, err := tellObjectChanges(ctx, kv, c.Metadata.Name, d, out.Assets, pl.Ledger)
	if err != nil {
		return nil, err
	}
	pl.changed = changed
	// What a changed manifest changes is read against the objects its last
	// apply recorded: such a desired state is not kept (the records move).
	if len(out.Issued) == 0 && !placeholder && !told {
		// Settled: the same inputs render the same bytes.
		p.desired.put(c.Metadata.Name, key, p.now(), d)
	}
	return d, nil
}

// tellObjectChanges says, for each manifest of d that changed since its
// last apply, which of its objects the apply adds, changes or removes
// (diff.Manifest.Objects), from the render's bytes and the objects the
// last apply recorded; told is whether any manifest was told, changed the
// objects said changed, by manifest and index (objectChanges).
func tellObjectChanges(ctx context.Context, kv ledgerKV, cluster string, d *diff.Desired, a *assets.Set, l *Ledger) (told bool, changed map[string]map[int]object, err error) {
	if a == nil || l == nil || l.Applied == nil {
		return false, nil, nil
	}
	for i := range d.Manifests {
		m := &d.Manifests[i]
		had := l.Applied.Manifests[m.Name]
		if had == "" || had == m.SHA256 || m.Unknown {
			continue
		}
		objs, ok, err := renderedObjects(a, m.Name)
		if err != nil {
			return false, nil, err
		}
		if !ok {
			continue
		}
		rec, err := recordedObjects(ctx, kv, cluster, m.Name)
		if err != nil {
			return false, nil, err
		}
		var ch map[int]object
		if m.Objects, ch, err = objectChanges(rec, installOrder(objs)); err != nil {
			return false, nil, err
		}
		told = told || len(m.Objects) > 0
		if len(ch) > 0 {
			if changed == nil {
				changed = map[string]map[int]object{}
			}
			changed[m.Name] = ch
		}
	}
	return told, changed, nil
}

// shareWithLedger points each desired file's and manifest's sha256, and
// each desired resource's attributes, at the ledger's copy where the two
// are equal, as they are for a quiet cluster: a planner keeps both
// between plans (read only), and 1,000 clusters' quarter of a million
// digests and 60,000 attribute maps were held twice.
func shareWithLedger(d *diff.Desired, l *Ledger) {
	if l == nil || l.Applied == nil {
		return
	}
	for i := range d.Infra {
		r := &d.Infra[i]
		if a, ok := l.Applied.Infra[r.Address()]; ok && maps.Equal(a, r.Attrs) {
			r.Attrs = a
		}
	}
	for i := range d.Hosts {
		files := l.Applied.Files[d.Hosts[i].Name]
		for j := range d.Hosts[i].Files {
			f := &d.Hosts[i].Files[j]
			if sha, ok := files[f.Path]; ok && sha == f.SHA256 {
				f.SHA256 = sha
			}
		}
	}
	for i := range d.Manifests {
		m := &d.Manifests[i]
		if sha, ok := l.Applied.Manifests[m.Name]; ok && sha == m.SHA256 {
			m.SHA256 = sha
		}
	}
}

// desireKey is what a cluster's desired state is rendered from: its
// spec, the render's options but the clock, the members that join and
// the hosts made again, and its material as the store has it (each
// key's revision).
func (p *Planner) desireKey(ctx context.Context, changes *state.Changes, c *schemas.Cluster, opts render.Options, joins []diff.Join, renewed []string) ([32]byte, error) {
	name := c.Metadata.Name
	k := state.KeysOf(p.Store)
	ssh, _ := k.SSHKey(name)
	material, ok := p.material.get(changes, name, k.PKI(name), ssh)
	if !ok {
		from, to := k.Material(name)
		fp, at, err := p.Store.Fingerprint(ctx, from, to)
		if err != nil {
			return [32]byte{}, err
		}
		p.material.put(name, at, fp)
		material = fp
	}
	opts.Now = time.Time{}
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, v := range []any{c, opts, joins, renewed} {
		if err := enc.Encode(v); err != nil {
			return [32]byte{}, fmt.Errorf("desire %s: %w", c.Metadata.Name, err)
		}
	}
	h.Write(material[:])
	return [32]byte(h.Sum(nil)), nil
}

// desireTTL is how long a cached desired state serves, by the planner's
// clock: a certificate that comes due for renewal (RenewWithin before it
// expires) is planned at most this late.
const desireTTL = time.Hour

// desireCache keeps each cluster's desired state of its last settled
// render (no material issued, no placeholder credential), by the inputs
// it was rendered from (desireKey): a quiet fleet's plan renders nothing
// again, only what changed. A state is shared by the plans that take it:
// nothing changes a Desired once made but its copy's BackupDue.
type desireCache struct {
	mu sync.Mutex
	m  map[string]desireEntry
}

type desireEntry struct {
	key     [32]byte
	at      time.Time
	desired *diff.Desired
}

// get returns a copy of the cluster's desired state if it was rendered
// from key less than desireTTL before now.
func (dc *desireCache) get(cluster string, key [32]byte, now time.Time) *diff.Desired {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	e, ok := dc.m[cluster]
	if !ok || e.key != key || now.Sub(e.at) >= desireTTL || now.Before(e.at) {
		return nil
	}
	d := *e.desired
	return &d
}

func (dc *desireCache) put(cluster string, key [32]byte, now time.Time, d *diff.Desired) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.m == nil {
		dc.m = map[string]desireEntry{}
	}
	c := *d
	dc.m[cluster] = desireEntry{key: key, at: now, desired: &c}
}

// etcdStarts is how a cluster's etcd members start in a render: as the
// ledger (if any) recorded, or joining as joins say (diff.Starts).
func etcdStarts(cluster string, l *Ledger, joins []diff.Join) map[string]assets.EtcdStart {
	if l == nil {
		return diff.Starts(cluster, nil, nil, joins)
	}
	var versions map[string]string
	if l.Applied != nil {
		versions = l.Applied.Versions
	}
	return diff.Starts(cluster, versions, l.Etcd, joins)
}

// renderOptions are the options c renders with on kv: the API's floating
// IP comes from what is observed (its certificate names it), cloud.conf's
// credential from kv (placeholder: none yet).
func (p *Planner) renderOptions(ctx context.Context, kv state.KV, c *schemas.Cluster, clients *cloud.Clients, observed []diff.Resource) (opts render.Options, placeholder bool, err error) {
	secret, err := appCredSecret(ctx, kv, c.Metadata.Name)
	if err != nil {
		return render.Options{}, false, err
	}
	opts, placeholder = p.optionsWith(secret, c, clients, observed)
	return opts, placeholder, nil
}

// optionsWith are the options c renders with, its application
// credential's secret given.
func (p *Planner) optionsWith(secret string, c *schemas.Cluster, clients *cloud.Clients, observed []diff.Resource) (opts render.Options, placeholder bool) {
	opts = render.Options{Now: p.now(), MirrorAuth: p.MirrorAuth, RenewWithin: p.RenewWithin, APIFloatingIP: apiFloatingIP(c.Metadata.Name, observed)}
	opts.Cloud, placeholder = cloudCredential(secret, c, clients, observed)
	return opts, placeholder
}

// credSecret is a cluster's application credential secret, kept from a
// plan before while the store's changes say it was not written (read,
// and unsealed, once rather than at every plan).
func (p *Planner) credSecret(ctx context.Context, pl *Planned, kv state.KV, cluster string) (string, error) {
	key := state.KeysOf(p.Store).AppCredentialSecret(cluster)
	if v, ok := p.secrets.get(pl.changes, cluster, key); ok {
		return v, nil
	}
	v, err := appCredSecret(ctx, kv, cluster)
	if err != nil {
		return "", err
	}
	// Read after the plan's revision: at least as new as it.
	p.secrets.put(cluster, pl.rev, v)
	return v, nil
}

// apiFloatingIP is the observed floating IP of cluster's API; zero if none.
func apiFloatingIP(cluster string, observed []diff.Resource) netip.Addr {
	for _, r := range observed {
		if r.Kind == diff.KindFloatingIP && r.Name == cluster+"-api" {
			a, _ := netip.ParseAddr(r.Attrs["address"].Value)
			return a
		}
	}
	return netip.Addr{}
}

// unsettled lists the user_data and files two renders disagree on.
func unsettled(a, b *render.Output) (map[schemas.Role]bool, map[string]map[string]bool) {
	userData := map[schemas.Role]bool{}
	for role, u := range a.UserData {
		if !bytes.Equal(u, b.UserData[role]) {
			userData[role] = true
		}
	}
	files := map[string]map[string]bool{}
	for i, h := range a.Assets.Hosts {
		for j, f := range h.Files {
			if f.SHA256 != b.Assets.Hosts[i].Files[j].SHA256 {
				if files[h.Name] == nil {
					files[h.Name] = map[string]bool{}
				}
				files[h.Name][f.Path] = true
			}
		}
	}
	return userData, files
}

// nodeHealth reads the health of a cluster's Nodes for its remediation,
// or says why it could not: a plan goes on without it (a commit's
// changes do not wait for an API that does not answer), and nothing is
// remediated.
func (p *Planner) nodeHealth(ctx context.Context, pl *Planned, clients *cloud.Clients) (map[string]diff.NodeHealth, string) {
	t, err := p.healthTarget(pl, clients)
	if err != nil {
		return nil, err.Error()
	}
	nodes, err := p.Health.NodeHealth(ctx, t, p.now())
	if err != nil {
		p.log().Warn("could not read the health of the Nodes", "cluster", t.Cluster, "err", err)
		return nil, err.Error()
	}
	return nodes, ""
}

// etcdAnswers reads which etcd members of a cluster answer; nil when it
// cannot tell (the apply refuses the removal of a member that answers).
func (p *Planner) etcdAnswers(ctx context.Context, pl *Planned, clients *cloud.Clients) map[string]bool {
	t, err := p.healthTarget(pl, clients)
	var answers map[string]bool
	if err == nil {
		answers, err = p.Health.EtcdAnswers(ctx, t)
	}
	if err != nil && !errors.Is(err, errNoHealth) {
		p.log().Warn("could not read which etcd members answer", "cluster", pl.Observed.Cluster, "err", err)
	}
	return answers
}

// errNoHealth is a health read asked of a planner that reaches no API.
var errNoHealth = errors.New("this planner does not reach the clusters' APIs")

// healthTarget is how the planner reaches a cluster's API and etcd for
// its health reads.
func (p *Planner) healthTarget(pl *Planned, clients *cloud.Clients) (HostTarget, error) {
	if p.Health == nil || clients == nil {
		return HostTarget{}, errNoHealth
	}
	return hostTarget(pl.Observed.Cluster, clients, pl.Observed.Cloud, p.Store.ReadOnly())
}

func (p *Planner) log() *slog.Logger { return cmp.Or(p.Logger, slog.New(slog.DiscardHandler)) }

func (p *Planner) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"opke.dev/opke/backup"
	"opke.dev/opke/diff"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/state"
)

// ClusterStatus is a cluster as the status page and the API show it.
type ClusterStatus struct {
	Name    string       `json:"name"`
	Commit  string       `json:"commit"`
	Ref     string       `json:"ref"`
	State   report.State `json:"state"`
	Summary string       `json:"summary"`
	// Applied is the last commit applied with changes.
	Applied string `json:"applied,omitempty"`
	// Drift counts the changes made outside OPKE that the last drift
	// check found and that are not corrected (yet, or at all:
	// driftCorrection false, a failed repair); DriftCorrected those it
	// found and corrected.
	Drift          int       `json:"drift"`
	DriftCorrected int       `json:"driftCorrected,omitempty"`
	Paused         bool      `json:"paused,omitempty"`
	Updated        time.Time `json:"updated,omitzero"`
	LastResync     time.Time `json:"lastResync,omitzero"`
	// ResyncError is why the last drift check could not look, if it could not.
	ResyncError string `json:"resyncError,omitempty"`
	// ResyncWarnings is what the last drift check that changed nothing
	// warned of (unhealthy hosts it does not replace: an outage, a
	// controller whose etcd member answers), if anything.
	ResyncWarnings string `json:"resyncWarnings,omitempty"`
	// Retrying is the transient error the running apply last tried a step
	// again after (the cloud or a host unreachable for now), or why a step
	// still waits (a health gate not passed yet, no API server ready to
	// apply a manifest to); cleared when the apply ends.
	Retrying string `json:"retrying,omitempty"`
	// Rollout is where the hosts are: the version each runs, and the
	// gate (or drain) that halted the last apply, if one did.
	Rollout *Rollout `json:"rollout,omitempty"`
	// LastBackup is the newest etcd snapshot stored.
	LastBackup *BackupStatus `json:"lastBackup,omitempty"`
	// Daemon is the daemon that last worked on the cluster (its owner
	// among the daemons sharing the fleet); Taken is when a daemon last
	// took the cluster over and found it converged.
	Daemon string    `json:"daemon,omitempty"`
	Taken  time.Time `json:"taken,omitzero"`
}

// Rollout is a cluster's rollout as the ledger and the last apply say.
type Rollout struct {
	// Version is the spec's; Done counts the hosts that run it.
	Version string        `json:"version"`
	Done    int           `json:"done"`
	Hosts   []HostVersion `json:"hosts"`
	// Halted names the step that stopped the last apply and why.
	Halted string `json:"halted,omitempty"`
}

// tally counts the hosts at the rollout's version.
func (r *Rollout) tally() {
	r.Done = 0
	for _, h := range r.Hosts {
		if h.Version == r.Version {
			r.Done++
		}
	}
}

// HostVersion is the Kubernetes version a host runs.
type HostVersion struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// BackupStatus is a cluster's newest snapshot.
type BackupStatus struct {
	ID     string    `json:"id"`
	Reason string    `json:"reason"`
	Taken  time.Time `json:"taken"`
	Size   int64     `json:"size"`
	// Drill is the last restore drill's outcome ("" if none ran).
	Drill string `json:"drill,omitempty"`
}

// A cluster's status changes only through statusAfter, a pure function
// of the status as it was, what happened, and what the ledger says; the
// daemon reaches it through one exit, record. As Flux summarises a
// reconcile in one deferred call, no code path sets a field of its own.

// eventKind is what happened to a cluster.
type eventKind int

const (
	// evRefused: a commit was judged and not dispatched to the cluster
	// (its spec invalid, the fleet invalid, the commit policy's refusal).
	evRefused eventKind = iota + 1
	// evReconciled: the cluster's entry in a commit's note changed (its
	// reconcile ended, or began applying), by a commit or a drift check.
	evReconciled
	// evChecked: a drift check found nothing to change, could not look,
	// or took only a scheduled backup.
	evChecked
	// evStep: the applier told of a step: retried, or a gate passed or
	// failed.
	evStep
	// evTaken: a daemon took the cluster over (it started, or the
	// cluster's last owner left or died) and found it converged.
	evTaken
)

// event is what happened to a cluster, as its status learns it.
type event struct {
	kind eventKind
	at   time.Time
	// by is the daemon the event happened in.
	by string
	// commit and ref are the commit the event is about (evRefused,
	// evReconciled) and its ref.
	commit, ref string
	// entry is the cluster's entry in the commit's note (evRefused,
	// evReconciled); after a drift check, entry.Drift is the check's.
	entry *report.Cluster
	// resync marks an evReconciled of a drift check.
	resync bool
	// paused is the spec's spec.paused (evReconciled).
	paused bool
	// checkErr is why a drift check could not look (evChecked), and
	// checkWarn what one that changed nothing warned of; backup marks one
	// that took a scheduled backup.
	checkErr, checkWarn string
	backup              bool
	// step is the applier's (evStep).
	step *reconciler.Step
	// version is the spec's Kubernetes version, "" without a spec: with
	// it, the rollout is read from the ledger (evReconciled, and an
	// evChecked that took a backup).
	version string
}

// readsLedger tells whether record reads the ledger for the event: the
// hosts' versions and the newest backup.
func (e event) readsLedger() bool {
	return e.kind == evReconciled || e.kind == evChecked && e.backup
}

// ledgerFacts are what the ledger says of a cluster when an event comes.
type ledgerFacts struct {
	// versions are the Kubernetes versions the hosts run, by host.
	versions map[string]string
	// backup is the newest snapshot, if any.
	backup *backup.Record
}

// statusAfter is the status s becomes once e happened, with l the
// ledger's facts when e reads them. It is pure: it changes no input
// (the status's rollout and backup are new values when they change).
func statusAfter(s ClusterStatus, e event, l *ledgerFacts) ClusterStatus {
	switch e.kind {
	case evRefused:
		s.Commit, s.Ref, s.State, s.Summary, s.Updated = e.commit, e.ref, e.entry.State, e.entry.Summary, e.at
	case evChecked:
		s.LastResync, s.ResyncError, s.ResyncWarnings = e.at, e.checkErr, e.checkWarn
		if e.backup {
			s.Retrying = ""
			s = withLedger(s, e, l, nil)
		}
	case evReconciled:
		entry := e.entry
		s.Commit, s.Ref, s.State, s.Summary, s.Updated = e.commit, e.ref, entry.State, entry.Summary, e.at
		if entry.State != report.Pending {
			s.Retrying = "" // the apply (or the resume) that retried is over
		}
		s.Paused = e.paused
		if e.resync {
			s.LastResync, s.ResyncError, s.ResyncWarnings = e.at, "", ""
			s.Drift, s.DriftCorrected = 0, 0
			if d := entry.Drift; d != nil && d.State == report.Success && !e.paused {
				s.DriftCorrected = drifted(d.Plan)
			} else if d != nil {
				s.Drift = drifted(d.Plan)
			}
		} else if entry.State == report.Success {
			s.Drift = 0
		}
		// Applied with changes: by this daemon, by Resume when a dead
		// leader had started (its steps are in the journal, not the note),
		// or by a drift check that finished what the commit's apply could
		// not (the commit is then the head, the entry the commit's).
		if entry.State == report.Success && entry.Plan != nil && !entry.Plan.Empty() && !s.Paused {
			s.Applied = e.commit
		}
		s = withLedger(s, e, l, entry)
	case evStep:
		s = afterStep(s, e)
	case evTaken:
		s.Taken = e.at
	}
	if e.by != "" {
		s.Daemon = e.by
	}
	return s
}

// withLedger sets the rollout (for a cluster with a spec and hosts) and
// the newest backup from the ledger's facts. The rollout halts at the
// first gate or drain that failed in a failed entry; an entry under way
// (or none) keeps the halt the steps reported.
func withLedger(s ClusterStatus, e event, l *ledgerFacts, entry *report.Cluster) ClusterStatus {
	if l == nil {
		return s
	}
	if e.version != "" && len(l.versions) > 0 {
		r := &Rollout{Version: e.version}
		for _, h := range slices.Sorted(maps.Keys(l.versions)) {
			r.Hosts = append(r.Hosts, HostVersion{Name: h, Version: l.versions[h]})
		}
		r.tally()
		if entry != nil && entry.State == report.Failure {
			for _, st := range entry.Steps {
				if st.State == string(reconciler.StepFailed) && (st.Action == diff.ActionCheck || st.Action == diff.ActionDrain) {
					r.Halted = st.Address + ": " + st.Error
					break
				}
			}
		} else if s.Rollout != nil && (entry == nil || entry.State == report.Pending) {
			r.Halted = s.Rollout.Halted
		}
		s.Rollout = r
	}
	if b := l.backup; b != nil {
		s.LastBackup = &BackupStatus{ID: b.ID, Reason: b.Reason, Taken: b.Taken, Size: b.Size}
		if b.Drill != nil {
			s.LastBackup.Drill = b.Drill.String()
		}
	}
	return s
}

// afterStep is the status once the applier told of a step: a step
// retried says why on the status while the apply waits it out; a gate
// that passed or failed moves the rollout host by host as it goes.
func afterStep(s ClusterStatus, e event) ClusterStatus {
	st := e.step
	switch {
	case st.State == reconciler.StepRetrying:
		s.Retrying, s.Updated = st.Change.Address.String()+": "+st.Err.Error(), e.at
		return s
	case st.Change.Action != diff.ActionCheck || st.State == reconciler.StepStarted:
		return s
	}
	version := st.Change.After["version"].Value
	r := &Rollout{Version: version}
	if s.Rollout != nil {
		r.Hosts, r.Halted = slices.Clone(s.Rollout.Hosts), s.Rollout.Halted
	}
	host := st.Change.Address.Host
	i := slices.IndexFunc(r.Hosts, func(h HostVersion) bool { return h.Name == host })
	if i < 0 {
		r.Hosts = append(r.Hosts, HostVersion{Name: host})
		i = len(r.Hosts) - 1
	}
	switch st.State {
	case reconciler.StepDone:
		r.Hosts[i].Version, r.Halted = version, ""
	case reconciler.StepFailed:
		msg := ""
		if st.Err != nil {
			msg = st.Err.Error()
		}
		r.Halted = st.Change.Address.String() + ": " + msg
	}
	r.tally()
	s.Rollout = r
	return s
}

// record is the one exit through which a cluster's status changes: it
// reads the status (and the ledger when the event asks), folds the event
// in with statusAfter, writes it through the leadership, and moves the
// metrics that follow the status (a scrape right after agrees with the
// page). Each cluster's records are made one at a time: parallel steps
// report on one cluster.
func (d *Daemon) record(ctx context.Context, name string, e event) {
	if e.at.IsZero() {
		e.at = time.Now()
	}
	e.by = d.cfg.ID
	mu, _ := d.statusMu.LoadOrStore(name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	key := state.KeysOf(d.cfg.Store).Status(name)
	s, err := d.status(ctx, name)
	if err != nil {
		// A status written from a blank one would lose what it said.
		d.log.Error("read the cluster's status; not updated", "cluster", name, "err", err)
		return
	}
	var l *ledgerFacts
	if e.readsLedger() {
		l = d.ledgerFacts(ctx, name, e.version != "")
	}
	next := statusAfter(s, e, l)
	if err := d.putStatus(ctx, key, next); err != nil && ctx.Err() == nil {
		d.log.Error("store the cluster's status", "cluster", name, "err", err)
	}
	gate := e.kind == evStep && e.step.Change.Action == diff.ActionCheck && e.step.State != reconciler.StepRetrying
	if r := next.Rollout; r != nil && (gate || l != nil && e.version != "" && len(l.versions) > 0) {
		d.cfg.Metrics.rollout(name, r.Done, len(r.Hosts))
	}
	if l != nil && l.backup != nil {
		d.cfg.Metrics.backup(name, l.backup)
	}
}

// status reads a cluster's status: a blank one if there is none, an
// error if it cannot be read.
func (d *Daemon) status(ctx context.Context, name string) (ClusterStatus, error) {
	s := ClusterStatus{Name: name}
	data, err := d.cfg.Store.Get(ctx, state.KeysOf(d.cfg.Store).Status(name))
	switch {
	case errors.Is(err, state.ErrNotFound):
		return s, nil
	case err != nil:
		return s, err
	}
	_ = json.Unmarshal(data, &s)
	return s, nil
}

// ledgerFacts reads what the ledger says of a cluster for its status:
// the hosts' versions (when versions) and the newest backup. What cannot
// be read is left out: the status keeps what it said.
func (d *Daemon) ledgerFacts(ctx context.Context, name string, versions bool) *ledgerFacts {
	l := &ledgerFacts{}
	if versions {
		l.versions, _ = reconciler.HostVersions(ctx, d.cfg.Store, name)
	}
	if recs, err := reconciler.Backups(ctx, d.cfg.Store, name); err == nil && len(recs) > 0 {
		l.backup = recs[len(recs)-1]
	}
	return l
}

package reconciler

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// clusterApply is one cluster's apply: what its phases share. The plan
// it is given is what it executes, the infrastructure phase then the host
// phase, nothing planned again; an infrastructure change that waits for a
// host change (a rolled server waits for the gate of the one before it)
// runs with the host phase, once what it waits for is done. Its values
// known only after apply (the API's floating IP, the bytes that carry
// keys and certificates issued now) come from one render made through
// the lease, which issues what the cluster lacks for good; it is made
// again only when what it was made from moved in an infrastructure step
// (the API's floating IP or the cloud credential created, a host made
// again: renderKey). The cloud is observed once for the infrastructure
// phase and once more, for the real addresses, after each infrastructure
// step that ran before a host step.
type clusterApply struct {
	a       *Applier
	j       *journal
	name    string
	spec    *schemas.Cluster // nil: the cluster left the fleet
	plan    *diff.Plan       // the cluster's part of the plan
	done    map[string]string
	sum     *Summary
	ctx     context.Context // no step starts once it is done
	stepCtx context.Context // the steps run on it
	clients *cloud.Clients

	// mu guards what the host phase's steps share with the
	// infrastructure steps that run beside them: observed is the cloud as
	// last observed, ledger the ledger read with it; stale once an
	// infrastructure step ran. hs is the host steps' context, made from
	// them, and made again once stale; made lists the hosts whose servers
	// were made since it was (what they have is not what hs read). owner
	// is the installation id the observations filter by.
	mu       sync.Mutex
	observed []diff.Resource
	ledger   *Ledger
	stale    bool
	hs       *hostStep
	made     []string
	uploads  map[string][]string
	owner    string
	// out is the render the steps use, made with the options in key;
	// renderMu makes the steps that run at once share one (two renders
	// at once would each issue the material a new cluster lacks).
	renderMu sync.Mutex
	out      *render.Output
	key      renderKey
	// renewed counts the hosts made again whose material the
	// infrastructure phase forgot (under renderMu).
	renewed int
}

// renderKey is what a render's bytes depend on that the infrastructure
// phase can change: the API's floating IP, cloud.conf's credential, and
// the material of hosts made again (a render made before holds their old
// certificates; the next issues their new ones).
type renderKey struct {
	apiFIP  netip.Addr
	cloud   assets.CloudCredential
	renewed int
}

// ErrInconsistent is a plan whose known values the apply finds otherwise:
// a file or manifest the plan says has some bytes renders as others (the
// plan was made from another state; plan again).
var ErrInconsistent = errors.New("the plan does not match what apply renders")

// consistent checks the bytes a step pushes (their sha256) against the
// plan's change: a known, shown value must be those bytes'.
func consistent(c diff.Change, sum string) error {
	if want := c.After["sha256"]; !want.Unknown && !want.Sensitive && want.Value != sum {
		return fmt.Errorf("%s: %w: the plan's sha256 is %s, the render's %s", c.Address, ErrInconsistent, want.Value, sum)
	}
	return nil
}

// phases runs the infrastructure phase, then the host phase. It returns
// how the apply ended: done or failed. The infrastructure changes that
// wait for a host change run in the host phase (laterInfra).
func (ca *clusterApply) phases() (string, error) {
	var infra, hosts []diff.Change
	for _, c := range slices.Concat(ca.plan.Changes, ca.plan.Drift) {
		if c.Phase == diff.PhaseInfrastructure {
			infra = append(infra, c)
		} else {
			hosts = append(hosts, c)
		}
	}
	early, later := laterInfra(infra, hosts)
	var step func(context.Context, diff.Change) error
	if len(infra) > 0 {
		var err error
		if step, err = ca.infra(); err != nil {
			return resultFailed, err
		}
		if states := ca.run(early, step); !allDone(states) {
			return resultFailed, nil // the failed steps are in the summary
		}
	}
	if ca.spec == nil {
		// A cluster that left the fleet: its forget step, if any.
		states := ca.run(hosts, func(ctx context.Context, c diff.Change) error {
			if c.Action != diff.ActionForget {
				return fmt.Errorf("%w: %s of a cluster no longer in the fleet", errors.ErrUnsupported, c.Action)
			}
			return forget(ctx, ca.j.w, ca.name)
		})
		if !allDone(states) {
			return resultFailed, nil
		}
		return resultDone, nil
	}
	return ca.hosts(hosts, later, step)
}

// laterInfra splits a plan's infrastructure changes into those that run
// first and those that wait for a host change, directly or through
// another: a worker rolled to a new server is drained once the one
// before it passed its gate, a controller leaves etcd's membership once
// the one before it joined again.
func laterInfra(infra, hosts []diff.Change) (early, later []diff.Change) {
	wait := map[string]bool{}
	for _, c := range hosts {
		wait[c.ID] = true
	}
	for moved := true; moved; {
		moved = false
		for _, c := range infra {
			if !wait[c.ID] && slices.ContainsFunc(c.DependsOn, func(id string) bool { return wait[id] }) {
				wait[c.ID], moved = true, true
			}
		}
	}
	for _, c := range infra {
		if wait[c.ID] {
			later = append(later, c)
		} else {
			early = append(early, c)
		}
	}
	return early, later
}

// observe returns the cloud's resources of the cluster, observed again
// when an infrastructure step changed them. The caller holds mu, or no
// step runs.
func (ca *clusterApply) observe() ([]diff.Resource, error) {
	if ca.observed != nil && !ca.stale {
		return ca.observed, nil
	}
	store := ca.a.Planner.Store
	if ca.owner == "" {
		owner, err := store.InstallationID(ca.stepCtx)
		if err != nil {
			return nil, err
		}
		ca.owner = owner
	}
	// The ledger as it is now: the load balancer's members it knows are
	// resolved by their ids, as a plan's are (no listing of the pool's
	// members), and the infrastructure phase finds ids in it.
	ledger, err := readLedger(ca.stepCtx, store, ca.name, nil)
	if err != nil {
		return nil, err
	}
	obs, err := cloud.ObserveCluster(ca.stepCtx, ca.clients, ca.owner, ca.name, ledger.members)
	if err != nil {
		return nil, err
	}
	ca.ledger = ledger
	ca.sum.Observations++
	ca.observed, ca.stale = obs.Clusters[ca.name], false
	if ca.observed == nil {
		ca.observed = []diff.Resource{}
	}
	return ca.observed, nil
}

// render returns the cluster rendered through the lease from what was
// last observed, rendering again only when what it depends on moved since
// (renderKey). cloud.conf waits for the credential: it
// is not rendered while there is none.
func (ca *clusterApply) render(observed []diff.Resource, ledger *Ledger) (*render.Output, error) {
	ca.renderMu.Lock()
	defer ca.renderMu.Unlock()
	opts, placeholder, err := ca.a.Planner.renderOptions(ca.stepCtx, ca.j.w, ca.spec, ca.clients, observed)
	if err != nil {
		return nil, err
	}
	if placeholder {
		opts.Cloud = nil
	}
	// The etcd members the plan joins start as it says; the others as
	// the ledger recorded.
	var joins []diff.Join
	for _, c := range slices.Concat(ca.plan.Changes, ca.plan.Drift) {
		if start, ok := diff.MemberChange(c); ok {
			joins = append(joins, diff.Join{Host: c.Address.Host, Members: start.Members})
		}
	}
	opts.Etcd = etcdStarts(ca.name, ledger, joins)
	key := renderKey{apiFIP: opts.APIFloatingIP, renewed: ca.renewed}
	if opts.Cloud != nil {
		key.cloud = *opts.Cloud
	}
	if ca.out != nil && key == ca.key {
		return ca.out, nil
	}
	out, err := render.Cluster(ca.stepCtx, ca.j.w, ca.spec, opts)
	if err != nil {
		return nil, err
	}
	ca.sum.Renders++
	ca.out, ca.key = out, key
	return out, nil
}

// infra prepares the cluster's infrastructure steps: with the ids of
// what the cloud and the ledger hold (as they are before the first step)
// and, for servers, the user_data of the render. The step it returns
// marks the observation stale: the host steps that follow observe again.
func (ca *clusterApply) infra() (func(context.Context, diff.Change) error, error) {
	name := ca.name
	ca.mu.Lock()
	defer ca.mu.Unlock()
	found, err := ca.observe()
	if err != nil {
		return nil, err
	}
	ledger := ca.ledger
	// The plan deletes what the cluster made itself (with the cluster):
	// its cloud controller manager's load balancers, its CSI driver's
	// volumes: listed again here for their ids.
	var services, volumes bool
	for _, c := range slices.Concat(ca.plan.Changes, ca.plan.Drift) {
		if c.Action == diff.ActionDelete {
			services = services || strings.HasPrefix(c.Address.Name, cloud.ServicePrefix(name))
			volumes = volumes || c.Address.Kind == diff.KindVolume || c.Address.Kind == diff.KindSnapshot
		}
	}
	if services {
		made, err := cloud.ServiceLoadBalancers(ca.stepCtx, ca.clients, name, found)
		if err != nil {
			return nil, err
		}
		found = slices.Concat(found, made)
	}
	if volumes {
		made, err := cloud.ClusterVolumes(ca.stepCtx, ca.clients, name)
		if err != nil {
			return nil, err
		}
		found = slices.Concat(found, made)
	}
	// What the ledger knows comes first: a resource the cloud does not
	// list by tags (a server group before its servers) made by a step
	// done before a crash.
	ops := cloud.NewApplier(ca.clients, ca.owner, name, slices.Concat(slices.Collect(maps.Values(ledger.Resources)), found))
	byAddr := map[diff.Address]diff.Resource{}
	for _, r := range found {
		byAddr[r.Address()] = r
	}
	ca.stale = true
	return func(ctx context.Context, c diff.Change) error {
		defer ca.changed(c)
		switch c.Address.Target {
		case diff.TargetDrain, diff.TargetNode, diff.TargetMember:
			return ca.nodeStep(ctx, c)
		}
		return ca.infraStep(ctx, ops, ledger, byAddr[c.Address], c)
	}, nil
}

// changed marks what an infrastructure step changed: the cloud is
// observed again, and the host steps' context made again, before the
// next host step; a server made anew has nothing of what was read of
// its host.
func (ca *clusterApply) changed(c diff.Change) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	ca.stale = true
	if c.Address.Kind == diff.KindServer && (c.Action == diff.ActionCreate || c.Action == diff.ActionReplace) {
		ca.made = append(ca.made, c.Address.Name)
	}
}

// current returns the cloud as last observed and the ledger read with it.
func (ca *clusterApply) current() ([]diff.Resource, *Ledger) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	return ca.observed, ca.ledger
}

// nodeStep drains a node, uncordons or deletes a Node object, or removes
// an etcd member, through the API or etcd with the render's credentials.
func (ca *clusterApply) nodeStep(ctx context.Context, c diff.Change) error {
	if ca.spec == nil {
		return fmt.Errorf("%s: no spec to reach the cluster's API with", c.Address)
	}
	observed, ledger := ca.current()
	out, err := ca.render(observed, ledger)
	if err != nil {
		return err
	}
	t, err := hostTarget(ca.name, ca.clients, observed, ca.j.w)
	if err != nil {
		return err
	}
	switch c.Address.Target {
	case diff.TargetDrain:
		return ca.a.drain(ctx, t, out.PKI, ca.spec, c.Address.Host, diff.BestEffort(c))
	case diff.TargetMember:
		return ca.a.memberStep(ctx, ca.j, t, out.PKI, ca.spec, c)
	}
	if c.Action == diff.ActionUpdate {
		if err := nodeUpdate(c); err != nil {
			return err
		}
		return ca.a.uncordon(ctx, t, out.PKI, c.Address.Host)
	}
	if err := ca.a.deleteNode(ctx, t, out.PKI, c.Address.Host); err != nil {
		return err
	}
	return forgetNode(ctx, ca.j.w, ca.name, c.Address.Host)
}

// resourceOf turns an infrastructure change back into the resource it
// is about, with the id observed of it.
func resourceOf(c diff.Change, observed diff.Resource) (diff.Resource, error) {
	if c.Address.Target != diff.TargetResource {
		return diff.Resource{}, fmt.Errorf("%s: not an OpenStack address", c.Address)
	}
	attrs := c.After
	if c.Action == diff.ActionDelete {
		attrs = c.Before
	}
	return diff.Resource{Kind: c.Address.Kind, Name: c.Address.Name, Attrs: attrs, ID: observed.ID}, nil
}

// infraStep creates, updates, replaces or deletes one resource, and
// records it in the ledger.
func (ca *clusterApply) infraStep(ctx context.Context, ops *cloud.Applier, ledger *Ledger, observed diff.Resource, c diff.Change) error {
	j, store := ca.j, ca.j.w
	r, err := resourceOf(c, observed)
	if err != nil {
		return err
	}
	if c.Action == diff.ActionDelete || c.Action == diff.ActionReplace {
		if err := ops.Delete(ctx, r); err != nil {
			return err
		}
		if err := j.hook("deleted " + c.Address.String()); err != nil {
			return err
		}
	}
	if r.Kind == diff.KindServer {
		// A server deleted, or made (again, after one deleted by hand), is
		// a host the ledger knows nothing of; a deleted node's version
		// stays until its Node object is deleted.
		keep := c.Action == diff.ActionDelete && schemas.RoleOf(c.Cluster, r.Name) != schemas.RoleGateway
		// A host the ledger knew before the apply had material issued for
		// it, which goes; one it did not know has only what this apply's
		// render issued for it, which stays.
		knew := ledger != nil && ledger.Applied.Knows(r.Name)
		if err := forgetHost(ctx, store, c.Cluster, r.Name, keep, knew); err != nil {
			return err
		}
		if knew && c.Action != diff.ActionDelete {
			ca.renderMu.Lock()
			ca.renewed++ // moves the render's key (renderKey)
			ca.renderMu.Unlock()
		}
	}
	if c.Action == diff.ActionDelete {
		if r.Kind == diff.KindAppCredential {
			if err := store.Delete(ctx, state.KeysOf(store).AppCredentialSecret(c.Cluster)); err != nil {
				return err
			}
		}
		return store.Delete(ctx, state.KeysOf(store).Resource(c.Cluster, string(r.Kind), r.Name))
	}
	switch {
	case r.Kind == diff.KindAppCredential && c.Action == diff.ActionCreate:
		if r.ID, err = createAppCred(ctx, store, ops, r, c.Cluster); err != nil {
			return err
		}
	case c.Action == diff.ActionCreate, c.Action == diff.ActionReplace:
		// What is known after apply is the cloud's to choose.
		r.Attrs = maps.Clone(r.Attrs)
		maps.DeleteFunc(r.Attrs, func(_ string, v diff.Value) bool { return v.Unknown })
		var userData []byte
		if r.Kind == diff.KindServer {
			if ca.spec == nil {
				return fmt.Errorf("%s: no spec to render its user_data from", c.Address)
			}
			out, err := ca.render(ca.current())
			if err != nil {
				return err
			}
			userData = out.UserData[schemas.RoleOf(c.Cluster, r.Name)]
			sum := sha256.Sum256(userData)
			r.Attrs["user_data"] = diff.Known(hex.EncodeToString(sum[:]))
		}
		if r.ID, err = ops.Create(ctx, r, userData); err != nil {
			return err
		}
	case c.Action == diff.ActionUpdate:
		if err := ops.Update(ctx, r); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: %s in the infrastructure phase", errors.ErrUnsupported, c.Action)
	}
	if err := j.hook("applied " + c.Address.String()); err != nil {
		return err
	}
	return RecordResource(ctx, store, c.Cluster, r)
}

// hosts runs the plan's host phase: its uploads, restarts, gates,
// backups and manifests, with the bytes of the render made from the real
// addresses, and the infrastructure changes that wait for some of them
// (later, run by infraStep); then records the hosts' versions, the
// kubeconfig and the spec.
func (ca *clusterApply) hosts(changes, later []diff.Change, infraStep func(context.Context, diff.Change) error) (string, error) {
	name, w := ca.name, ca.j.w
	var hostChanges, stateChanges []diff.Change
	uploads := map[string][]string{}
	for _, c := range changes {
		if c.Address.Target == diff.TargetState {
			stateChanges = append(stateChanges, c)
			continue
		}
		hostChanges = append(hostChanges, c)
		if c.Action == diff.ActionUpload {
			uploads[c.Address.Host] = append(uploads[c.Address.Host], c.Address.Name)
		}
	}
	ca.uploads = uploads
	states := map[string]StepState{}
	if len(hostChanges) > 0 || len(later) > 0 {
		if _, err := ca.hostContext(); err != nil {
			return resultFailed, err
		}
		states = ca.run(slices.Concat(hostChanges, later), func(ctx context.Context, c diff.Change) error {
			if c.Phase == diff.PhaseInfrastructure {
				return infraStep(ctx, c)
			}
			hs, err := ca.hostContext()
			if err != nil {
				return err
			}
			return hs.do(ctx, c)
		})
	}
	ca.mu.Lock()
	observed, err := ca.observe()
	var out *render.Output
	if err == nil {
		out, err = ca.render(observed, ca.ledger)
	}
	ca.mu.Unlock()
	if err != nil {
		return resultFailed, err
	}
	// A change of what only the store keeps (the deletion policy) is made
	// by recording the spec, below.
	stateDone := allDone(ca.run(stateChanges, func(_ context.Context, c diff.Change) error {
		if c.Action != diff.ActionUpdate {
			return fmt.Errorf("%w: %s of %s", errors.ErrUnsupported, c.Action, c.Address)
		}
		return nil
	}))
	notDone := map[string]bool{} // hosts with a step not done
	for _, c := range hostChanges {
		if states[c.ID] != StepDone {
			notDone[c.Address.Host] = true
		}
	}
	laterDone := !slices.ContainsFunc(later, func(c diff.Change) bool { return states[c.ID] != StepDone })
	versions, err := recordedVersions(ca.stepCtx, w, name)
	if err != nil {
		return resultFailed, err
	}
	for _, h := range out.Assets.Hosts {
		if !notDone[h.Name] && versions[h.Name] != out.Assets.Version {
			if err := recordVersion(ca.stepCtx, w, name, h.Name, out.Assets.Version); err != nil {
				return resultFailed, err
			}
		}
	}
	if len(notDone) > 0 || !stateDone || !laterDone {
		return resultFailed, nil
	}
	if fip := apiFloatingIP(name, observed); fip.IsValid() {
		// The admin kubeconfig, for the API's floating IP, sealed in the
		// store (opke kubeconfig prints it); written when it changed.
		if err := out.PKI.StoreAdminKubeconfig(ca.stepCtx, w, name, "https://"+netip.AddrPortFrom(fip, 6443).String()); err != nil {
			return resultFailed, err
		}
	}
	return resultDone, RecordSpec(ca.stepCtx, w, ca.spec, ca.plan.Commit)
}

// hostContext returns what the host steps run with: the hosts' target,
// the render's files and material, and what the hosts have of the files
// to upload. It is made again when an infrastructure step ran since (a
// server made again, whose new certificates the render issues anew:
// renderKey); what was read of a host whose server was made since is
// dropped (it is a new machine).
func (ca *clusterApply) hostContext() (*hostStep, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if ca.hs != nil && !ca.stale {
		return ca.hs, nil
	}
	observed, err := ca.observe()
	if err != nil {
		return nil, err
	}
	out, err := ca.render(observed, ca.ledger)
	if err != nil {
		return nil, err
	}
	target, err := hostTarget(ca.name, ca.clients, observed, ca.j.w)
	if err != nil {
		return nil, err
	}
	files := map[string]map[string]assets.File{}
	etcd := map[string]assets.EtcdStart{}
	for _, h := range out.Assets.Hosts {
		files[h.Name] = map[string]assets.File{}
		for _, f := range h.Files {
			files[h.Name][f.Path] = f
		}
		if h.Etcd != nil {
			etcd[h.Name] = *h.Etcd
		}
	}
	var have map[string]map[string]string
	if ca.hs == nil {
		// A host that already has a file's bytes (a step that ran before a
		// crash) is not sent them again: one sha256sum per host says.
		if have, err = ca.a.Hosts.Checksums(ca.stepCtx, target, ca.uploads); err != nil {
			ca.a.log().Warn("reading the hosts' files before uploading; sending them all", "cluster", ca.name, "err", err)
		}
	} else {
		have = maps.Clone(ca.hs.have)
		for _, host := range ca.made {
			delete(have, host)
		}
	}
	ca.made = nil
	ca.hs = &hostStep{a: ca.a, j: ca.j, t: target, files: files, etcd: etcd, have: have, uploads: ca.uploads, pki: out.PKI, spec: ca.spec,
		desired: &desiredObjects{}}
	return ca.hs, nil
}

// run executes changes in dependency order, Parallel at once, each
// journaled before and after; a change whose dependency did not pass is
// skipped, and one the journal says is done is not run again. No step
// starts once ctx is done; steps run on stepCtx. It returns each
// change's end state by id.
func (ca *clusterApply) run(changes []diff.Change, step func(context.Context, diff.Change) error) map[string]StepState {
	a, j, done, sum, ctx, stepCtx := ca.a, ca.j, ca.done, ca.sum, ca.ctx, ca.stepCtx
	state := make(map[string]StepState, len(changes))
	inPhase := map[string]bool{}
	for _, c := range changes {
		inPhase[c.ID] = true
		if f, ok := done[c.ID]; ok && f == fingerprint(c) {
			state[c.ID] = StepDone
		}
	}
	var reportMu sync.Mutex
	report := func(s Step) {
		reportMu.Lock()
		defer reportMu.Unlock()
		if s.State != StepStarted && s.State != StepRetrying {
			sum.Counts[s.State]++
		}
		if s.State == StepFailed || s.State == StepSkipped {
			sum.Failed = append(sum.Failed, s)
		}
		if a.Progress != nil {
			a.Progress(stepCtx, s)
		}
	}
	results := make(chan Step)
	sem := make(chan struct{}, cmp.Or(a.Parallel, 8))
	running := 0
	for {
		stopping := ctx.Err() != nil || stepCtx.Err() != nil
		for _, c := range changes {
			if state[c.ID] != "" || stopping {
				continue
			}
			ready, blocked := true, false
			for _, d := range c.DependsOn {
				// Another phase's or cluster's changes ran before this phase.
				switch st := state[d]; {
				case !inPhase[d] || st == StepDone:
				case st == StepFailed || st == StepSkipped:
					blocked = true
				default:
					ready = false
				}
			}
			switch {
			case blocked:
				state[c.ID] = StepSkipped
				_ = j.step(stepCtx, c, StepSkipped, nil, 0)
				report(Step{Change: c, State: StepSkipped})
			case ready:
				state[c.ID] = StepStarted
				running++
				go func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					report(Step{Change: c, State: StepStarted})
					t0 := time.Now()
					err := j.step(stepCtx, c, StepStarted, nil, 0)
					if err == nil {
						retrying := func(err error) { report(Step{Change: c, State: StepRetrying, Err: err}) }
						ctx := withWaitNote(stepCtx, retrying)
						err = a.retry(ctx, func() error { return step(ctx, c) }, func(err error) {
							a.log().Warn("step failed on a transient error; trying again", "cluster", c.Cluster, "address", c.Address, "err", err)
							retrying(err)
						})
					}
					st := StepDone
					if err != nil {
						st = StepFailed
						a.log().Error("step failed", "cluster", c.Cluster, "address", c.Address, "action", c.Action.String(), "err", err)
					}
					if jerr := j.step(stepCtx, c, st, err, time.Since(t0)); jerr != nil && err == nil {
						st, err = StepFailed, jerr
					}
					results <- Step{Change: c, State: st, Err: err, Duration: time.Since(t0)}
				}()
			}
		}
		if running == 0 {
			for _, c := range changes {
				if state[c.ID] == "" {
					state[c.ID] = StepPending
					sum.Counts[StepPending]++
				}
			}
			return state
		}
		r := <-results
		running--
		state[r.Change.ID] = r.State
		report(r)
	}
}

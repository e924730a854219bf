package daemon

import (
	"cmp"
	"context"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// Source is the fleet repository as the daemon reads it; [source.Mirror]
// is the implementation.
type Source interface {
	Sync(ctx context.Context) (map[string]string, error)
	FetchPullRequest(ctx context.Context, ref, commit string) error
	Read(ctx context.Context, commit string, fn func(fs.FS) error) error
	Verify(commit, keyring string) error
	Since(ctx context.Context, base, head string, limit int) ([]string, bool, error)
	Branch() string
	IsPullRequest(ref string) bool
	LocalPath() string
	Commit(commit string) (source.CommitInfo, error)
	Log(head string, limit int) ([]string, error)
}

// Defaults of Config.
const (
	DefaultInterval       = 60 * time.Second
	DefaultResyncInterval = 10 * time.Minute
)

// Config is what a daemon runs with.
type Config struct {
	// ID names this daemon in the election (host name and pid).
	ID      string
	Source  Source
	Store   *state.Store
	Planner *reconciler.Planner
	// Applier applies the tracked branch; its Planner is Planner. The
	// daemon applies with a copy that also tells it of the steps
	// (WithProgress) and applies only the clusters it owns (Owns): the
	// Applier given is not changed.
	Applier   *reconciler.Applier
	Reporters []report.Reporter
	// Interval is the poll period (DefaultInterval), with up to 10 %
	// jitter; ResyncInterval the period of drift checks
	// (DefaultResyncInterval).
	Interval, ResyncInterval time.Duration
	// LeaderTTL is how long the leadership and the daemon's membership
	// (its share of the fleet) outlive a daemon that died
	// (state.DefaultLeaseTTL).
	LeaderTTL time.Duration
	// Keyring, if set (armored OpenPGP public keys), is the signature
	// policy: a head is applied only if it and every commit since the
	// last one applied are signed by one of its keys.
	Keyring string
	// AllowRewrite names the one commit that may be applied although it
	// does not descend from the last commit applied (the operator's
	// consent to a force push); every other such head is refused.
	AllowRewrite string
	// Limits bound the fleet read at a commit (schemas.DefaultLimits()).
	Limits schemas.Limits
	// MaxPullRequestServers bounds the servers a pull request may add to
	// the fleet (DefaultMaxPullRequestServers): one over it is not
	// planned, and fails saying so. A plan's work and memory grow with the
	// servers it makes, and anyone who can open a pull request can ask
	// for thousands in a few lines.
	MaxPullRequestServers int
	// Today, if set, is the day each minor's upstream support is judged
	// at (schemas.Fleet.CheckLifecycle: a new cluster on an end-of-life
	// minor refused, an existing one warned); else the planner's clock.
	// Tests fix it, so that a minor's end of life does not fail them.
	Today   func() time.Time
	Logger  *slog.Logger
	Metrics *Metrics
}

// Daemon is OPKE's GitOps loop: it follows the fleet repository, applies
// the tracked branch cluster by cluster (a queue per cluster, so one slow
// cluster does not hold the others), plans pull requests without
// persisting anything, corrects drift every ResyncInterval, and reports
// on every commit. Several daemons on one store elect one leader; only
// the leader acts, and a new leader first resumes any journaled apply.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	trigger chan struct{}
	applier *reconciler.Applier // cfg.Applier, telling progress

	mu     sync.Mutex
	leader *state.Leadership
	member *state.Membership
	// members are the live members (sorted), whose shares split the
	// fleet; this daemon owns the clusters owner gives it.
	members []string
	queues  map[string]*queue
	head    string                      // the tracked branch's commit this member applies
	fleet   map[string]*schemas.Cluster // its valid clusters
	// taken is the revision of the dispatch of head this member took.
	taken   int64
	seen    map[string]string // ref -> last dispatched commit (the leader's)
	lastErr error             // the last sync's error
	missing string            // the missing branch last warned of
	synced  time.Time         // the last sync that succeeded

	pubMu sync.Mutex // one note stored and reported at a time
	// shareMu orders what moves the member's head and queues: a
	// dispatch, a change of members, a drift check.
	shareMu sync.Mutex
	// statusMu holds a mutex per cluster: each status change is a whole
	// read, change and write, and parallel steps report on one cluster.
	statusMu sync.Map
	steps    sync.Map       // cluster -> *stepLog, while it is applied
	work     sync.WaitGroup // the member's queues
	leading  sync.WaitGroup // the leader's goroutines
	prs      *prQueue
	// memberLost is set when the membership's session ended.
	memberLost atomic.Bool
	// published holds the revisions of the note writes the leader
	// reported itself, until its watch of the notes passed them.
	published sync.Map
}

// New returns a daemon; Run starts it.
func New(cfg Config) *Daemon {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	cfg.ResyncInterval = cmp.Or(cfg.ResyncInterval, DefaultResyncInterval)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	cfg.Limits.MaxClusters = cmp.Or(cfg.Limits.MaxClusters, schemas.DefaultLimits().MaxClusters)
	cfg.Limits.MaxBytes = cmp.Or(cfg.Limits.MaxBytes, schemas.DefaultLimits().MaxBytes)
	d := &Daemon{cfg: cfg, log: cfg.Logger, trigger: make(chan struct{}, 1)}
	d.applier = cfg.Applier.WithProgress(d.progress)
	d.applier.Owns = d.mine
	return d
}

// Trigger asks for a sync now (a webhook, a watched file); it never
// blocks.
func (d *Daemon) Trigger() {
	select {
	case d.trigger <- struct{}{}:
	default:
	}
}

// Leading tells whether this daemon leads (takes the commits in).
func (d *Daemon) Leading() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leader != nil
}

// Run joins the daemons that share the fleet and, while it is a member,
// applies its share (follow) and campaigns for the leadership, whose
// loop (lead) takes each commit in for every member; it returns when ctx
// ends.
func (d *Daemon) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		m, err := d.cfg.Store.Join(ctx, d.cfg.ID, d.cfg.LeaderTTL)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			// ErrMemberTaken: a daemon of this id died a moment ago and
			// its key lives until its TTL.
			d.log.Warn("join the daemons sharing the fleet", "err", err)
			d.cfg.Metrics.errorAt("election")
			sleep(ctx, time.Second)
			continue
		}
		d.log.Info("joined: applying this daemon's share of the fleet", "id", d.cfg.ID)
		memberCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-m.Lost():
				d.memberLost.Store(true)
				d.log.Warn("the membership is lost: the other daemons take this one's share over")
			case <-memberCtx.Done():
			}
			cancel()
		}()
		d.mu.Lock()
		d.member = m
		d.mu.Unlock()
		d.memberLost.Store(false)
		var roles sync.WaitGroup
		roles.Go(func() { d.follow(memberCtx) })
		d.campaign(memberCtx)
		cancel()
		roles.Wait()
		d.mu.Lock()
		d.member = nil
		d.mu.Unlock()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = m.Leave(rctx)
		rcancel()
	}
	return nil
}

// campaign campaigns for the leadership and, while it leads, runs the
// leader's loop; it returns when ctx ends.
func (d *Daemon) campaign(ctx context.Context) {
	for ctx.Err() == nil {
		d.log.Info("campaigning for the leadership", "id", d.cfg.ID)
		l, err := d.cfg.Store.Elect(ctx, d.cfg.ID, d.cfg.LeaderTTL)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Error("election", "err", err)
			d.cfg.Metrics.errorAt("election")
			sleep(ctx, time.Second)
			continue
		}
		d.log.Info("leading: this daemon takes the commits in", "id", d.cfg.ID)
		d.cfg.Metrics.leader.Set(1)
		leadCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-l.Lost():
				d.log.Warn("the leadership is lost: another daemon may lead now")
			case <-leadCtx.Done():
				if d.memberLost.Load() {
					// Its session expired with the membership's (a daemon
					// paused or cut off past its TTL).
					d.log.Warn("the leadership is lost with the membership: another daemon may lead now")
				}
			}
			cancel()
		}()
		d.mu.Lock()
		d.leader = l
		d.mu.Unlock()
		d.lead(leadCtx)
		cancel()
		d.leading.Wait()
		d.mu.Lock()
		d.leader, d.seen = nil, nil
		d.mu.Unlock()
		d.cfg.Metrics.leader.Set(0)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = l.Resign(rctx)
		rcancel()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// lead runs the leader's loop: it follows the fleet repository, takes
// each new head of the tracked branch in (judged, the commit policy, its
// note) and dispatches it to the members' shares, plans pull requests,
// and hands the notes the other members write to the reporters.
func (d *Daemon) lead(ctx context.Context) {
	seen, err := d.loadSeen(ctx)
	if err != nil {
		d.log.Error("read the refs already handled", "err", err)
	}
	d.migrateAccepted(ctx, d.cfg.Source.Branch(), seen)
	d.migrateDispatched(ctx, d.cfg.Source.Branch(), seen)
	d.mu.Lock()
	d.seen = seen
	d.mu.Unlock()
	d.prs = newPRQueue()
	d.unfinishedPRs(ctx)
	d.leading.Go(func() { d.pullRequests(ctx) })
	d.leading.Go(func() { d.reportNotes(ctx) })
	if dir := d.cfg.Source.LocalPath(); dir != "" {
		d.leading.Go(func() {
			if err := source.Watch(ctx, dir, d.Trigger); err != nil {
				d.log.Warn("watching the local repository failed; polling only", "err", err)
			}
		})
	}
	first := true
	for {
		d.poll(ctx, first)
		first = false
		poll := time.NewTimer(jitter(d.cfg.Interval))
		select {
		case <-ctx.Done():
			poll.Stop()
			return
		case <-d.trigger:
		case <-poll.C:
		}
		poll.Stop()
	}
}

// jitter spreads polls over up to 10 % more than the interval, so that
// daemons started together do not poll together.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/10+1))
}

// Health is what /readyz and the status page say of the daemon.
type Health struct {
	ID     string `json:"id"`
	Leader bool   `json:"leader"`
	// Members are the daemons sharing the fleet; Share counts the
	// clusters of the head this one owns.
	Members   []string  `json:"members,omitempty"`
	Share     int       `json:"share"`
	Head      string    `json:"head,omitempty"`
	LastSync  time.Time `json:"lastSync,omitzero"`
	SyncError string    `json:"syncError,omitempty"`
}

// Health reports the daemon's state.
func (d *Daemon) Health() Health {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := Health{ID: d.cfg.ID, Leader: d.leader != nil, Members: d.members, Head: d.head, LastSync: d.synced}
	for name := range d.fleet {
		if owner(d.members, name) == d.cfg.ID {
			h.Share++
		}
	}
	if d.lastErr != nil {
		h.SyncError = d.lastErr.Error()
	}
	return h
}

// AddReporter adds a reporter (one that needs the daemon, such as a forge
// remembering through [Daemon.Memo]); call it before Run.
func (d *Daemon) AddReporter(r ...report.Reporter) { d.cfg.Reporters = append(d.cfg.Reporters, r...) }

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/spf13/cobra"

	"opke.dev/opke/cloudsim"
	"opke.dev/opke/internal/atomicfile"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/schemas"
)

// endpointsFile is where a running daemon says where it answers, in its
// data dir: CLI commands on the same data dir attach to its etcd.
const endpointsFile = "endpoints.json"

// endpoints is endpoints.json.
type endpoints struct {
	PID  int      `json:"pid"`
	ID   string   `json:"id"`
	Etcd []string `json:"etcd"`
	API  string   `json:"api"`
	// SimState is the simulator's state dir, in-process (--sim) or not
	// (--sim-state), if any.
	SimState string `json:"simState,omitempty"`
	// CloudConfig and SocksProxy are the daemon's clouds.yaml (absolute)
	// and proxy to floating IPs, when it was given them: the commands run
	// on its data dir reach the clouds it reaches.
	CloudConfig string `json:"cloudConfig,omitempty"`
	SocksProxy  string `json:"socksProxy,omitempty"`
	// Repo (credentials redacted), Branch and Cache (its git cache, a bare
	// repository) are the fleet it tracks: plan and apply on its data dir
	// work on that fleet unless given --repo.
	Repo   string `json:"repo,omitempty"`
	Branch string `json:"branch,omitempty"`
	Cache  string `json:"cache,omitempty"`
}

func (a *app) serveCommand() *cobra.Command {
	cfg := newServeConfig()
	var configFile string
	cmd := &cobra.Command{
		Use:   "serve [--config FILE] [--repo URL]",
		Short: "Run the GitOps daemon",
		Long: `Run OPKE's daemon: follow the fleet repository (--repo), apply each new commit
of the tracked branch cluster by cluster, plan pull requests (refs/pull/*/head,
refs/merge-requests/*/head and --pr-branches) without applying them, check for
drift every --resync-interval and correct it, and report on every commit: a git
note under refs/notes/opke pushed to the remote, and forge commit statuses.

It polls every --interval; a local repository is also watched, and a forge's
webhook (POST /hooks/git, signed with the --webhook-secret-file secret) makes
it sync at once. Several daemons on one etcd elect a leader: only the leader
applies; the others serve the status page and take over if it dies.

The status page is at / on --listen, with the JSON API under /api/v1,
/metrics, /healthz and /readyz. DATA_DIR/endpoints.json says where the daemon
answers; opke commands run on the same data dir attach to its etcd.

With --sim ADDR the OpenStack simulator runs in-process (state, clouds.yaml
and sim.json in DATA_DIR/sim); with --seed DIR a missing local --repo is
created from DIR's clusters/: make run does both.`,
		Example: `  opke serve --sim 127.0.0.1:5050 --repo .opke/fleet --seed .
  opke serve --config /etc/opke/config.yaml
  opke serve --repo https://github.com/acme/fleet.git --cloud-config clouds.yaml --encryption-key-file key --etcd https://etcd:2379`,
		Args: argsAtMost(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile != "" {
				file := newServeConfig()
				if err := file.fromFile(configFile); err != nil {
					return usageError{err}
				}
				cfg.merge(cmd.Flags(), file)
			}
			if err := cfg.Validate(); err != nil {
				return usagef("invalid configuration:\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "))
			}
			return a.serve(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "YAML config file (flags given win over it)")
	cfg.addFlags(cmd.Flags())
	return cmd
}

func (a *app) serve(ctx context.Context, cfg *serveConfig) error {
	if cfg.Seed != "" {
		created, err := seedRepo(cfg.Repo, cfg.Seed)
		if err != nil {
			return fmt.Errorf("--seed: %w", err)
		}
		if created {
			a.logger.Info("created the fleet repository from the seed", "repo", cfg.Repo, "seed", cfg.Seed)
		}
	}
	st, cf := cfg.stateFlags(), cfg.cloudFlags()
	var sim *cloudsim.Sim
	if cfg.Sim != "" {
		var err error
		if cf.simState, err = filepath.Abs(filepath.Join(cfg.DataDir, "sim")); err != nil {
			return err
		}
		edge := cmp.Or(cfg.SimEdge, edgeBeside(cfg.Sim))
		sim, err = cloudsim.Start(ctx, cloudsim.Options{Listen: cfg.Sim, EdgeListen: edge, StateDir: cf.simState, Hosts: cfg.SimHosts,
			Logger: a.logger.With("component", "sim")})
		if err != nil {
			return fmt.Errorf("start the simulator (APIs on %s, edge on %s: --sim-edge for another): %w", cfg.Sim, edge, err)
		}
		defer sim.Close()
	}
	clouds, err := cf.resolve("")
	if err != nil {
		return err
	}
	store, err := st.open(ctx, a)
	if err != nil {
		return err
	}
	defer store.Close()
	auth, err := cfg.gitAuth()
	if err != nil {
		return usageError{err}
	}
	mirror, err := source.OpenMirror(ctx, source.MirrorOptions{URL: repoURL(cfg.Repo), Dir: source.CacheDir(filepath.Join(cfg.DataDir, "git"), cfg.Repo),
		Branch: cfg.Branch, Patterns: cfg.PullRequestBranches, Auth: auth, Logger: a.logger,
		Forks: cfg.ForkPullRequests, MaxFetchBytes: int64(cfg.Limits.MaxFetchMiB) << 20,
		Pack: source.PackLimits{MaxObject: int64(cfg.Limits.MaxObjectMiB) << 20, MaxTotal: int64(cfg.Limits.MaxInflatedMiB) << 20}})
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s-%d", host, os.Getpid())
	metrics := daemon.NewMetrics()
	clouds.pool.OnRequest = metrics.APICall
	// The cloud's logs (and the simulator's write log) tell which daemon
	// sent each request.
	clouds.pool.UserAgent = fmt.Sprintf("opke (daemon %s)", id)
	hosts := &reconciler.HostSessions{Dialer: clouds.dialer}
	defer hosts.Close()
	planner := &reconciler.Planner{Store: store, Clouds: clouds.pool, Hosts: hosts, Health: hosts, Logger: a.logger}
	if cfg.RegistryMirrorCredentialsFile != "" {
		if planner.MirrorAuth, err = readMirrorAuth(cfg.RegistryMirrorCredentialsFile); err != nil {
			return usagef("registry mirror credentials: %w", err)
		}
	}
	applier := &reconciler.Applier{Planner: planner, Hosts: hosts, Logger: a.logger, LeaseTTL: cfg.LeaderTTL}
	var keyring string
	if cfg.SignaturePolicy.KeyringFile != "" {
		b, err := os.ReadFile(cfg.SignaturePolicy.KeyringFile)
		if err != nil {
			return usagef("keyring: %w", err)
		}
		keyring = string(b)
	}
	d := daemon.New(daemon.Config{ID: id, Source: mirror, Store: store, Planner: planner, Applier: applier,
		Interval: cfg.Interval, ResyncInterval: cfg.ResyncInterval, LeaderTTL: cfg.LeaderTTL, Keyring: keyring,
		AllowRewrite:          cfg.SignaturePolicy.AllowRewrite,
		Limits:                schemas.Limits{MaxClusters: cfg.Limits.MaxClusters, MaxBytes: int64(cfg.Limits.MaxFleetMiB) << 20},
		MaxPullRequestServers: cfg.Limits.MaxPullRequestServers,
		Logger:                a.logger, Metrics: metrics})
	if cfg.Reporters.Notes == nil || *cfg.Reporters.Notes {
		d.AddReporter(report.Notes{Git: mirror})
	}
	listener, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	api := "http://" + listener.Addr().String()
	external := strings.TrimSuffix(cmp.Or(cfg.ExternalURL, api), "/")
	for _, f := range cfg.Reporters.Forges {
		tok, err := readSecret(f.TokenFile)
		if err != nil {
			return usagef("forge %s %s: %w", f.Kind, f.Repo, err)
		}
		d.AddReporter(&report.Forge{Kind: f.Kind, API: f.API, Repo: f.Repo, Token: tok, ExternalURL: external, Memo: d.Memo()})
	}
	var secret string
	if cfg.WebhookSecretFile != "" {
		if secret, err = readSecret(cfg.WebhookSecretFile); err != nil {
			return usagef("webhook secret: %w", err)
		}
	}
	if cfg.SkipForkPullRequests {
		a.logger.Warn("skipForkPullRequests is what forks' pull requests are by default; forkPullRequests: true turns them on", "fork_prs", cfg.ForkPullRequests)
	}
	if pct, from := gcPercent(cfg.GCPercent, os.Getenv("GOGC")); from != "GOGC" {
		debug.SetGCPercent(pct)
		a.logger.Info("the collector's target set", "gc_percent", pct, "from", from)
	}
	if cfg.PprofListen != "" {
		stop, err := servePprof(cfg.PprofListen)
		if err != nil {
			return err
		}
		defer stop()
	}
	limits := daemon.HTTPLimits{MaxConnsPerClient: cfg.Limits.MaxConnsPerClient}
	srv := limits.Server(d.Handler(secret))
	go func() { _ = srv.Serve(limits.Listener(listener)) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	ep := endpoints{PID: os.Getpid(), ID: id, Etcd: store.Endpoints(), API: api, SimState: cf.simState, SocksProxy: cf.socksProxy,
		Repo: source.Redact(repoURL(cfg.Repo)), Branch: cfg.Branch, Cache: mirror.Dir()}
	if cf.cloudConfig != "" {
		if ep.CloudConfig, err = filepath.Abs(cf.cloudConfig); err != nil {
			return err
		}
	}
	if ep.Cache, err = filepath.Abs(ep.Cache); err != nil {
		return err
	}
	epPath := filepath.Join(cfg.DataDir, endpointsFile)
	data, _ := json.MarshalIndent(ep, "", "  ")
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(epPath, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", epPath, err)
	}
	defer os.Remove(epPath)

	fmt.Fprintf(a.stdout, "OPKE is serving %s (branch %s) as %s.\n", cfg.Repo, cfg.Branch, id)
	fmt.Fprintf(a.stdout, "  Status page:  %s/\n  API:          %s/api/v1/clusters\n  Metrics:      %s/metrics\n", external, external, external)
	if secret != "" {
		fmt.Fprintf(a.stdout, "  Webhook:      POST %s/hooks/git\n", external)
	}
	if path := mirror.LocalPath(); path != "" {
		fmt.Fprintf(a.stdout, "  Change the fleet: edit %s/clusters/<name>/cluster.yaml, then git -C %s commit -am 'scale' (applied at once)\n", path, path)
		fmt.Fprintf(a.stdout, "  Audit trail:  git -C %s log --notes=opke\n", path)
	}
	if sim != nil {
		fmt.Fprintf(a.stdout, "  Servers:      OS_CLIENT_CONFIG_FILE=%s OS_CLOUD=sim openstack server list\n", filepath.Join(cf.simState, "clouds.yaml"))
		fmt.Fprintf(a.stdout, "  Floating IPs: through the simulator's SOCKS5 edge, socks5://%s (opke kubeconfig sets it)\n", sim.Info().Edge)
	}
	err = d.Run(ctx)
	a.logger.Info("the daemon stopped", "id", id, "reason", cmp.Or(context.Cause(ctx), err))
	return err
}

// edgeBeside is the default address of the in-process simulator's edge:
// the port two past the simulator's (opke sim's 5052 beside its 5050), a
// fixed address that saved ssh and kubeconfig settings can name; any free
// port when the simulator's is (":0").
func edgeBeside(sim string) string {
	host, port, err := net.SplitHostPort(sim)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil || p == 0 || p+2 > 65535 {
		return "127.0.0.1:0"
	}
	return net.JoinHostPort(host, strconv.Itoa(p+2))
}

// repoURL makes a local path absolute: the mirror's remote outlives the
// working folder.
func repoURL(repo string) string {
	if strings.Contains(repo, "://") || strings.Contains(repo, "@") {
		return repo
	}
	if abs, err := filepath.Abs(repo); err == nil {
		return abs
	}
	return repo
}

// seedRepo creates the git repository at repo (a local path) with seed's
// clusters/ committed on main, unless it exists; it tells whether it
// made it.
func seedRepo(repo, seed string) (bool, error) {
	if strings.Contains(repo, "://") {
		return false, fmt.Errorf("%s is not a local path", repo)
	}
	if _, err := os.Stat(repo); err == nil {
		return false, nil
	}
	r, err := git.PlainInitWithOptions(repo, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	if err != nil {
		return false, err
	}
	wt, err := r.Worktree()
	if err != nil {
		return false, err
	}
	src, closeFS, err := folderFS(seed)
	if err != nil {
		return false, err
	}
	defer closeFS()
	err = fs.WalkDir(src, schemas.ClustersDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(repo, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
		_, err = wt.Add(p)
		return err
	})
	if err != nil {
		return false, err
	}
	sig := &object.Signature{Name: "OPKE", Email: "opke@localhost", When: time.Now()}
	if _, err := wt.Commit("The example fleet, seeded by opke serve --seed", &git.CommitOptions{Author: sig}); err != nil {
		return false, err
	}
	return true, nil
}

// attach reads the endpoints of a daemon running on dataDir.
func attach(dataDir string) (*endpoints, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, endpointsFile))
	if err != nil {
		return nil, err
	}
	var ep endpoints
	if err := json.Unmarshal(b, &ep); err != nil || len(ep.Etcd) == 0 {
		return nil, errors.New(endpointsFile + ": not a daemon's")
	}
	// A daemon killed (-9) leaves its file behind: its process is gone.
	if err := syscall.Kill(ep.PID, 0); ep.PID <= 0 || err != nil && !errors.Is(err, syscall.EPERM) {
		return nil, fmt.Errorf("%s: its daemon (pid %d) is not running", endpointsFile, ep.PID)
	}
	return &ep, nil
}

// defaultGCPercent is the daemon's collector target (GOGC) unless
// --gc-percent or GOGC says otherwise. The daemon keeps each cluster's
// ledger and desired state between plans, most of its live heap (about
// 75 MB at 1,000 clusters), and Go's default of 100 lets the heap grow to
// twice the live size before it collects: `opke serve` settling 1,000
// clusters peaked at 289 MiB with 100 and at 238-243 MiB with 50, its
// settle taking 5.2 s instead of 4.8 s (make bench). Prometheus, which
// also keeps a large state, made 50 its default for the same reason
// (v2.53).
const defaultGCPercent = 50

// gcPercent is the collector target for serve and where it comes from:
// the config (--gc-percent or gcPercent:), else the environment's GOGC
// (the runtime applied it already), else defaultGCPercent.
func gcPercent(config int, env string) (int, string) {
	switch {
	case config > 0:
		return config, "config"
	case env != "":
		return 0, "GOGC"
	}
	return defaultGCPercent, "default"
}

// servePprof serves Go's profiles on addr, a loopback address: they tell
// what the process does and holds, so they are never on --listen.
func servePprof(addr string) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usagef("--pprof-listen %q: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return nil, usagef("--pprof-listen %q: want a loopback address (127.0.0.1:PORT)", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return func() { _ = srv.Close() }, nil
}

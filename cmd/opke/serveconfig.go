package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"opke.dev/opke/cloudsim"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// serveConfig is opke serve's configuration: a YAML file (--config),
// then the flags, which win. Secrets are named by file, never inline, so
// the file can live in a ConfigMap.
type serveConfig struct {
	Repo   string `yaml:"repo"`
	Branch string `yaml:"branch"`
	// PullRequestBranches are branch name globs planned as pull requests
	// are (refs/pull/*/head and refs/merge-requests/*/head always are).
	PullRequestBranches []string `yaml:"pullRequestBranches"`
	// ForkPullRequests plans the pull requests from forks too (heads no
	// branch of the repository holds, which anyone can open); off, only
	// those whose head someone with write access pushed to a branch.
	ForkPullRequests bool `yaml:"forkPullRequests"`
	// Limits bound what a commit may make the daemon read.
	Limits struct {
		MaxClusters int `yaml:"maxClusters"`
		MaxFleetMiB int `yaml:"maxFleetMiB"`
		MaxFetchMiB int `yaml:"maxFetchMiB"`
		// MaxObjectMiB and MaxInflatedMiB bound what a fetched pack holds
		// once inflated: each object, and all of them.
		MaxObjectMiB   int `yaml:"maxObjectMiB"`
		MaxInflatedMiB int `yaml:"maxInflatedMiB"`
		// MaxPullRequestServers bounds the servers a pull request may add
		// to the fleet: one over it is not planned.
		MaxPullRequestServers int `yaml:"maxPullRequestServers"`
		// MaxConnsPerClient bounds the HTTP connections one client
		// address holds at once (behind a proxy or load balancer that
		// hides the clients' addresses, every client is one).
		MaxConnsPerClient int `yaml:"maxConnsPerClient"`
	} `yaml:"limits"`
	// SkipForkPullRequests is the setting of before forkPullRequests,
	// whose default it now is: accepted, with a warning, so that an older
	// configuration still starts.
	SkipForkPullRequests bool          `yaml:"skipForkPullRequests"`
	Interval             time.Duration `yaml:"interval"`
	ResyncInterval       time.Duration `yaml:"resyncInterval"`
	LeaderTTL            time.Duration `yaml:"leaderTTL"`
	// GCPercent is Go's collector target (GOGC) for the daemon; 0: GOGC
	// from the environment when set, else defaultGCPercent.
	GCPercent   int    `yaml:"gcPercent"`
	DataDir     string `yaml:"dataDir"`
	Listen      string `yaml:"listen"`
	ExternalURL string `yaml:"externalURL"`
	Sim         string `yaml:"sim"`
	// SimHosts is what the in-process simulator's servers are: in-process
	// or real (cloudsim.Options.Hosts).
	SimHosts string `yaml:"simHosts"`
	// SimEdge is the in-process simulator's SOCKS5 edge; default: the
	// port two past --sim's, as opke sim lays them out (5050, 5052), so
	// that saved ssh and kubeconfig settings outlive a restart.
	SimEdge string `yaml:"simEdge"`
	// PprofListen serves Go's profiles (net/http/pprof) on a loopback
	// address of their own, for a diagnosis; a flag only.
	PprofListen string `yaml:"-"`
	Seed        string `yaml:"seed"`
	Etcd        struct {
		Endpoints []string `yaml:"endpoints"`
		CA        string   `yaml:"ca"`
		Cert      string   `yaml:"cert"`
		Key       string   `yaml:"key"`
		Prefix    string   `yaml:"prefix"`
	} `yaml:"etcd"`
	EncryptionKeyFile string `yaml:"encryptionKeyFile"`
	CloudConfig       string `yaml:"cloudConfig"`
	SimState          string `yaml:"simState"`
	SocksProxy        string `yaml:"socksProxy"`
	// RegistryMirrorCredentialsFile holds USERNAME:PASSWORD, the login to
	// the registry mirror the specs name (spec.registryMirror).
	RegistryMirrorCredentialsFile string `yaml:"registryMirrorCredentialsFile"`
	Git                           struct {
		// Username and TokenFile authenticate over https.
		Username  string `yaml:"username"`
		TokenFile string `yaml:"tokenFile"`
		// SSHKeyFile (a deploy key) and KnownHostsFile (required with it)
		// authenticate over ssh.
		SSHKeyFile     string `yaml:"sshKeyFile"`
		KnownHostsFile string `yaml:"knownHostsFile"`
	} `yaml:"git"`
	WebhookSecretFile string `yaml:"webhookSecretFile"`
	SignaturePolicy   struct {
		// KeyringFile holds the armored OpenPGP public keys whose
		// signatures are trusted; set, unsigned commits are not applied.
		KeyringFile string `yaml:"keyringFile"`
		// AllowRewrite is the one commit (its full hash) applied although
		// it does not descend from the last commit applied: the
		// operator's consent to a force push of the tracked branch.
		AllowRewrite string `yaml:"allowRewrite"`
	} `yaml:"signaturePolicy"`
	Reporters struct {
		// Notes pushes a git note per commit (default true).
		Notes  *bool         `yaml:"notes"`
		Forges []forgeConfig `yaml:"forges"`
	} `yaml:"reporters"`
}

type forgeConfig struct {
	Kind      string `yaml:"kind"`
	API       string `yaml:"api"`
	Repo      string `yaml:"repo"`
	TokenFile string `yaml:"tokenFile"`
}

var fullHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// newServeConfig returns the defaults.
func newServeConfig() *serveConfig {
	c := &serveConfig{Branch: "main", Interval: daemon.DefaultInterval, ResyncInterval: daemon.DefaultResyncInterval,
		LeaderTTL: state.DefaultLeaseTTL, DataDir: ".opke", Listen: "127.0.0.1:8080"}
	c.Limits.MaxClusters = schemas.DefaultLimits().MaxClusters
	c.Limits.MaxFleetMiB = int(schemas.DefaultLimits().MaxBytes >> 20)
	c.Limits.MaxFetchMiB = source.DefaultMaxFetchBytes >> 20
	c.Limits.MaxObjectMiB = source.DefaultMaxObjectBytes >> 20
	c.Limits.MaxInflatedMiB = source.DefaultMaxInflatedBytes >> 20
	c.Limits.MaxPullRequestServers = daemon.DefaultMaxPullRequestServers
	c.Limits.MaxConnsPerClient = daemon.DefaultMaxConnsPerClient
	return c
}

// fromFile reads a config file over the defaults; unknown fields are
// errors.
func (c *serveConfig) fromFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	return nil
}

// addFlags binds the flags to c; a flag given wins over the file.
func (c *serveConfig) addFlags(fl *pflag.FlagSet) {
	fl.StringVar(&c.Repo, "repo", c.Repo, "the fleet repository: a path, file://, git://, https:// or ssh:// URL")
	fl.StringVar(&c.Branch, "branch", c.Branch, "the tracked branch, applied")
	fl.StringSliceVar(&c.PullRequestBranches, "pr-branches", nil, "branch globs planned (never applied) like pull requests")
	fl.BoolVar(&c.ForkPullRequests, "fork-prs", false, "plan pull requests from forks too (off: only those whose head a branch of the repository holds; forks' are not fetched)")
	fl.IntVar(&c.Limits.MaxClusters, "max-clusters", c.Limits.MaxClusters, "most cluster folders a commit may hold")
	fl.IntVar(&c.Limits.MaxFleetMiB, "max-fleet-mib", c.Limits.MaxFleetMiB, "most MiB of specs read at a commit (a file several folders share counts each time)")
	fl.IntVar(&c.Limits.MaxFetchMiB, "max-fetch-mib", c.Limits.MaxFetchMiB, "largest pack one fetch may bring, in MiB (the tracked branch and each pull request apart)")
	fl.IntVar(&c.Limits.MaxObjectMiB, "max-object-mib", c.Limits.MaxObjectMiB, "largest object a fetched pack may hold once inflated, in MiB (a delta: the object it makes)")
	fl.IntVar(&c.Limits.MaxInflatedMiB, "max-inflated-mib", c.Limits.MaxInflatedMiB, "most MiB the objects of one fetched pack may make once inflated")
	fl.IntVar(&c.Limits.MaxPullRequestServers, "max-pr-servers", c.Limits.MaxPullRequestServers, "most servers a pull request may add to the fleet; one that adds more is not planned")
	fl.IntVar(&c.Limits.MaxConnsPerClient, "max-conns-per-client", c.Limits.MaxConnsPerClient, "most HTTP connections one client address holds at once (behind a proxy that hides the clients' addresses, raise it)")
	fl.BoolVar(&c.SkipForkPullRequests, "skip-fork-prs", false, "what forks' pull requests are by default now")
	_ = fl.MarkDeprecated("skip-fork-prs", "forks' pull requests are skipped by default; --fork-prs turns them on")
	fl.DurationVar(&c.Interval, "interval", c.Interval, "poll period (with up to 10% jitter)")
	fl.DurationVar(&c.ResyncInterval, "resync-interval", c.ResyncInterval, "period of the drift checks (cloud and hosts' files)")
	fl.DurationVar(&c.LeaderTTL, "leader-ttl", c.LeaderTTL, "how long the leadership and the clusters' leases outlive a daemon that died")
	fl.IntVar(&c.GCPercent, "gc-percent", 0, fmt.Sprintf("Go's collector target, as GOGC (default: GOGC from the environment, else %d: the daemon keeps every cluster's state between plans)", defaultGCPercent))
	fl.StringVar(&c.DataDir, "data-dir", c.DataDir, "data dir: the embedded etcd, the git cache, the encryption key, endpoints.json")
	fl.StringVar(&c.Listen, "listen", c.Listen, "address of the status page, API, webhook and metrics")
	fl.StringVar(&c.PprofListen, "pprof-listen", "", "serve Go's profiles (/debug/pprof/) on this loopback address, for a diagnosis")
	fl.StringVar(&c.ExternalURL, "external-url", "", "the daemon's URL as people reach it (forge statuses link there; default http://LISTEN)")
	fl.StringVar(&c.Sim, "sim", "", "run the OpenStack simulator in-process on this address (state in DATA_DIR/sim) and use it as the cloud")
	fl.StringVar(&c.SimEdge, "sim-edge", "", "with --sim: the address of its SOCKS5 edge to the floating IPs (default: --sim's port + 2, as opke sim's 5052 beside 5050)")
	fl.StringVar(&c.SimHosts, "hosts", "", "with --sim: what a server is, in-process (default) or real (a machine: root only)")
	fl.StringVar(&c.Seed, "seed", "", "create --repo (a local path) from this folder's clusters/ when it does not exist")
	fl.StringSliceVar(&c.Etcd.Endpoints, "etcd", nil, "external etcd client URLs instead of the embedded etcd")
	fl.StringVar(&c.Etcd.CA, "etcd-ca", "", "CA bundle of the external etcd")
	fl.StringVar(&c.Etcd.Cert, "etcd-cert", "", "client certificate for the external etcd")
	fl.StringVar(&c.Etcd.Key, "etcd-key", "", "client key for the external etcd")
	fl.StringVar(&c.Etcd.Prefix, "etcd-prefix", "", "prefix of every key OPKE writes (default "+state.DefaultPrefix+")")
	fl.StringVar(&c.EncryptionKeyFile, "encryption-key-file", "", "key that seals private keys in the store (default DATA_DIR/"+defaultKeyFile+")")
	fl.StringVar(&c.CloudConfig, "cloud-config", "", "clouds.yaml")
	fl.StringVar(&c.SimState, "sim-state", "", "a running simulator's state dir (opke sim --state)")
	fl.StringVar(&c.SocksProxy, "socks-proxy", "", "SOCKS5 proxy to floating IPs (socks5://127.0.0.1:PORT)")
	fl.StringVar(&c.RegistryMirrorCredentialsFile, "registry-mirror-credentials", "", "file holding USERNAME:PASSWORD, the login to the registry mirror the specs name (pushed to the hosts over SSH)")
	fl.StringVar(&c.WebhookSecretFile, "webhook-secret-file", "", "file holding the webhook secret (no secret: the webhook is off)")
	fl.StringVar(&c.SignaturePolicy.KeyringFile, "keyring", "", "apply only commits signed by a key of this armored OpenPGP keyring (the head and every commit since the last one applied)")
	fl.StringVar(&c.SignaturePolicy.AllowRewrite, "allow-rewrite", "", "apply this commit (full hash) although it does not descend from the last commit applied (a force push); any other such head is refused")
}

// merge fills what the flags did not set from the file's config.
func (c *serveConfig) merge(fl *pflag.FlagSet, file *serveConfig) {
	set := func(name string, apply func()) {
		if !fl.Changed(name) {
			apply()
		}
	}
	set("repo", func() { c.Repo = file.Repo })
	set("branch", func() { c.Branch = file.Branch })
	set("pr-branches", func() { c.PullRequestBranches = file.PullRequestBranches })
	set("fork-prs", func() { c.ForkPullRequests = file.ForkPullRequests })
	set("max-clusters", func() { c.Limits.MaxClusters = file.Limits.MaxClusters })
	set("max-fleet-mib", func() { c.Limits.MaxFleetMiB = file.Limits.MaxFleetMiB })
	set("max-fetch-mib", func() { c.Limits.MaxFetchMiB = file.Limits.MaxFetchMiB })
	set("max-object-mib", func() { c.Limits.MaxObjectMiB = file.Limits.MaxObjectMiB })
	set("max-inflated-mib", func() { c.Limits.MaxInflatedMiB = file.Limits.MaxInflatedMiB })
	set("max-pr-servers", func() { c.Limits.MaxPullRequestServers = file.Limits.MaxPullRequestServers })
	set("max-conns-per-client", func() { c.Limits.MaxConnsPerClient = file.Limits.MaxConnsPerClient })
	set("skip-fork-prs", func() { c.SkipForkPullRequests = file.SkipForkPullRequests })
	set("interval", func() { c.Interval = file.Interval })
	set("resync-interval", func() { c.ResyncInterval = file.ResyncInterval })
	set("leader-ttl", func() { c.LeaderTTL = file.LeaderTTL })
	set("gc-percent", func() { c.GCPercent = file.GCPercent })
	set("data-dir", func() { c.DataDir = file.DataDir })
	set("listen", func() { c.Listen = file.Listen })
	set("external-url", func() { c.ExternalURL = file.ExternalURL })
	set("sim", func() { c.Sim = file.Sim })
	set("hosts", func() { c.SimHosts = file.SimHosts })
	set("sim-edge", func() { c.SimEdge = file.SimEdge })
	set("seed", func() { c.Seed = file.Seed })
	set("etcd", func() { c.Etcd.Endpoints = file.Etcd.Endpoints })
	set("etcd-ca", func() { c.Etcd.CA = file.Etcd.CA })
	set("etcd-cert", func() { c.Etcd.Cert = file.Etcd.Cert })
	set("etcd-key", func() { c.Etcd.Key = file.Etcd.Key })
	set("etcd-prefix", func() { c.Etcd.Prefix = file.Etcd.Prefix })
	set("encryption-key-file", func() { c.EncryptionKeyFile = file.EncryptionKeyFile })
	set("cloud-config", func() { c.CloudConfig = file.CloudConfig })
	set("sim-state", func() { c.SimState = file.SimState })
	set("socks-proxy", func() { c.SocksProxy = file.SocksProxy })
	set("registry-mirror-credentials", func() { c.RegistryMirrorCredentialsFile = file.RegistryMirrorCredentialsFile })
	set("webhook-secret-file", func() { c.WebhookSecretFile = file.WebhookSecretFile })
	set("keyring", func() { c.SignaturePolicy.KeyringFile = file.SignaturePolicy.KeyringFile })
	set("allow-rewrite", func() { c.SignaturePolicy.AllowRewrite = file.SignaturePolicy.AllowRewrite })
	c.Git, c.Reporters = file.Git, file.Reporters
}

// Validate reports every problem of the config at once.
func (c *serveConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Repo == "" {
		bad("repo: required (--repo or repo: in --config)")
	} else if _, err := transport.NewEndpoint(c.Repo); err != nil {
		bad("repo %q: %v", c.Repo, err)
	}
	if u, err := url.Parse(c.Repo); err == nil && u.User != nil {
		// A user name is a token's place as much as a password (https's
		// "token@host"); ssh's user (git@) is only a name.
		if _, has := u.User.Password(); has || u.Scheme != "ssh" {
			bad("repo: the URL carries a user name, password or token (only an ssh:// URL may name its user): put a token in git.tokenFile and the user in git.username (in the URL it would be printed and kept in the git cache's config)")
		}
	}
	if c.Git.TokenFile != "" && !strings.HasPrefix(c.Repo, "https://") {
		bad("git.tokenFile: a token is sent over https only (repo %s)", source.Redact(c.Repo))
	}
	for i, f := range c.Reporters.Forges {
		if u, err := url.Parse(f.API); err == nil && u.Scheme == "http" && !state.IsLoopbackHost(u.Hostname()) {
			bad("reporters.forges[%d].api %s: a token is sent over https only (http is allowed to a loopback address)", i, f.API)
		}
	}
	if c.Branch == "" || strings.ContainsAny(c.Branch, " ~^:?*[\\") {
		bad("branch %q: not a branch name", c.Branch)
	}
	if c.Interval < time.Second {
		bad("interval %s: at least 1s", c.Interval)
	}
	if c.ResyncInterval < time.Second {
		bad("resyncInterval %s: at least 1s", c.ResyncInterval)
	}
	if c.Limits.MaxClusters < 1 || c.Limits.MaxFleetMiB < 1 || c.Limits.MaxFetchMiB < 1 || c.Limits.MaxObjectMiB < 1 || c.Limits.MaxInflatedMiB < 1 ||
		c.Limits.MaxPullRequestServers < 1 || c.Limits.MaxConnsPerClient < 1 {
		bad("limits: maxClusters, maxFleetMiB, maxFetchMiB, maxObjectMiB, maxInflatedMiB, maxPullRequestServers and maxConnsPerClient must be at least 1")
	}
	if c.LeaderTTL < time.Second {
		bad("leaderTTL %s: at least 1s", c.LeaderTTL)
	}
	if c.GCPercent < 0 {
		bad("gcPercent %d: at least 1 (0: the default)", c.GCPercent)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen %q: want HOST:PORT", c.Listen)
	}
	if c.ExternalURL != "" {
		if u, err := url.Parse(c.ExternalURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("externalURL %q: want an http(s) URL", c.ExternalURL)
		}
	}
	clouds := 0
	for _, v := range []string{c.Sim, c.SimState, c.CloudConfig} {
		if v != "" {
			clouds++
		}
	}
	if clouds > 1 {
		bad("sim, simState and cloudConfig exclude each other")
	}
	if c.Sim != "" && !strings.HasPrefix(c.Sim, "127.0.0.1:") {
		bad("sim %q: the simulator listens on 127.0.0.1 only", c.Sim)
	}
	switch {
	case c.SimEdge != "" && c.Sim == "":
		bad("simEdge: only with sim (the in-process simulator)")
	case c.SimEdge != "" && !strings.HasPrefix(c.SimEdge, "127.0.0.1:"):
		bad("simEdge %q: the edge listens on 127.0.0.1 only", c.SimEdge)
	case c.SimHosts != "" && c.Sim == "":
		bad("simHosts: only with sim (the in-process simulator)")
	case c.SimHosts != "" && c.SimHosts != cloudsim.HostsInProcess && c.SimHosts != cloudsim.HostsReal:
		bad("simHosts %q: want %s or %s", c.SimHosts, cloudsim.HostsInProcess, cloudsim.HostsReal)
	}
	if c.Sim == "" && c.SimState == "" && c.EncryptionKeyFile == "" {
		bad("encryptionKeyFile: required unless the cloud is the simulator")
	}
	for _, f := range []struct{ name, path string }{
		{"git.tokenFile", c.Git.TokenFile}, {"git.sshKeyFile", c.Git.SSHKeyFile}, {"git.knownHostsFile", c.Git.KnownHostsFile},
		{"webhookSecretFile", c.WebhookSecretFile}, {"signaturePolicy.keyringFile", c.SignaturePolicy.KeyringFile},
		{"encryptionKeyFile", c.EncryptionKeyFile}, {"cloudConfig", c.CloudConfig},
		{"registryMirrorCredentialsFile", c.RegistryMirrorCredentialsFile},
	} {
		if f.path != "" {
			if _, err := os.Stat(f.path); err != nil {
				bad("%s: %v", f.name, err)
			}
		}
	}
	if r := c.SignaturePolicy.AllowRewrite; r != "" && !fullHash.MatchString(r) {
		bad("signaturePolicy.allowRewrite %q: want a commit's full hash (40 hex digits)", r)
	}
	if c.Git.SSHKeyFile != "" && c.Git.KnownHostsFile == "" {
		bad("git.knownHostsFile: required with git.sshKeyFile (host keys are always verified)")
	}
	if c.Seed != "" {
		if st, err := os.Stat(filepath.Join(c.Seed, "clusters")); err != nil || !st.IsDir() {
			bad("seed %q: no clusters/ folder", c.Seed)
		}
	}
	for i, f := range c.Reporters.Forges {
		if !slices.Contains(report.Kinds(), f.Kind) {
			bad("reporters.forges[%d].kind %q: want one of %s", i, f.Kind, strings.Join(report.Kinds(), ", "))
		}
		if u, err := url.Parse(f.API); err != nil || u.Host == "" {
			bad("reporters.forges[%d].api %q: want the API's base URL", i, f.API)
		}
		if f.Repo == "" {
			bad("reporters.forges[%d].repo: required", i)
		}
		if _, err := os.Stat(f.TokenFile); f.TokenFile == "" || err != nil {
			bad("reporters.forges[%d].tokenFile: required and readable", i)
		}
	}
	if len(c.Reporters.Forges) > 0 && c.ExternalURL == "" {
		bad("externalURL: required with forge reporters (their statuses link to it)")
	}
	return errors.Join(errs...)
}

// readSecret reads a secret file, trimmed.
// readMirrorAuth reads a registry login file: USERNAME:PASSWORD on one
// line. Its errors never quote the file.
func readMirrorAuth(path string) (*assets.MirrorAuth, error) {
	s, err := readSecret(path)
	if err != nil {
		return nil, err
	}
	user, pass, ok := strings.Cut(s, ":")
	if !ok || user == "" || pass == "" || strings.ContainsAny(s, "\r\n") {
		return nil, fmt.Errorf("%s: want one line USERNAME:PASSWORD", path)
	}
	return &assets.MirrorAuth{Username: user, Password: pass}, nil
}

func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// gitAuth is the remote's authentication the config describes.
func (c *serveConfig) gitAuth() (transport.AuthMethod, error) {
	switch {
	case c.Git.SSHKeyFile != "":
		keys, err := gitssh.NewPublicKeysFromFile("git", c.Git.SSHKeyFile, "")
		if err != nil {
			return nil, fmt.Errorf("git.sshKeyFile: %w", err)
		}
		cb, err := gitssh.NewKnownHostsCallback(c.Git.KnownHostsFile)
		if err != nil {
			return nil, fmt.Errorf("git.knownHostsFile: %w", err)
		}
		keys.HostKeyCallback = cb
		return keys, nil
	case c.Git.TokenFile != "":
		tok, err := readSecret(c.Git.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("git.tokenFile: %w", err)
		}
		user := c.Git.Username
		if user == "" {
			user = "x-access-token"
		}
		return &githttp.BasicAuth{Username: user, Password: tok}, nil
	}
	return nil, nil
}

// stateFlags and cloudFlags as the shared helpers take them.
func (c *serveConfig) stateFlags() *stateFlags {
	return &stateFlags{dataDir: c.DataDir, endpoints: c.Etcd.Endpoints, etcdCA: c.Etcd.CA, etcdCert: c.Etcd.Cert, etcdKey: c.Etcd.Key,
		prefix: cmp.Or(c.Etcd.Prefix, state.DefaultPrefix), encryptionKey: c.EncryptionKeyFile}
}

func (c *serveConfig) cloudFlags() *cloudFlags {
	return &cloudFlags{cloudConfig: c.CloudConfig, simState: c.SimState, socksProxy: c.SocksProxy}
}

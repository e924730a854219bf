package state

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"opke.dev/opke/internal/localtls"
)

// DefaultPrefix is the prefix of every key OPKE writes.
const DefaultPrefix = "/opke/"

// Errors of the store, matched with errors.Is.
var (
	// ErrNotFound is returned for a key with no value.
	ErrNotFound = errors.New("not found in the state store")
	// ErrSealed is returned when a sealed value is read without the
	// encryption key, or with the wrong one.
	ErrSealed = errors.New("sealed value: the encryption key is missing or wrong")
	// ErrLocked is returned when another process holds the data dir.
	ErrLocked = errors.New("data dir is in use by another opke process")
)

// Options say where the state lives.
type Options struct {
	// DataDir holds the embedded etcd (DataDir/etcd) and its lock file.
	// Ignored when Endpoints is set.
	DataDir string
	// Endpoints are external etcd client URLs.
	Endpoints []string
	// TLS secures the connection to external endpoints.
	TLS *tls.Config
	// Prefix of every key; default DefaultPrefix.
	Prefix string
	// EncryptionKey (32 bytes) seals private keys; without it sealed values
	// can be neither written nor read.
	EncryptionKey []byte
	// Logger receives the store's logs.
	Logger *slog.Logger
}

// Store is the state store. It is safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	tls    *tls.Config
	prefix string
	seal   *sealer
	log    *slog.Logger
	etcd   *embed.Etcd
	lock   *os.File

	changesOnce sync.Once
	changes     *Changes

	closeOnce sync.Once
	closeErr  error
}

// ErrPlainEndpoint is an external etcd endpoint that would carry the state
// (the journal, pinned host keys, sealed keys) in the clear off the
// machine, or whose TLS settings would go unused.
var ErrPlainEndpoint = errors.New("plain http etcd endpoint")

// checkEndpoints refuses an http:// endpoint that is not on a loopback
// address, and any http:// endpoint when TLS is configured (its CA and
// client certificate would silently not be used).
func checkEndpoints(endpoints []string, withTLS bool) error {
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			return fmt.Errorf("etcd endpoint %q: not a URL (https://HOST:PORT)", ep)
		}
		switch u.Scheme {
		case "https", "unix", "unixs":
		case "http":
			if withTLS {
				return fmt.Errorf("%w: %s with a CA or client certificate configured: use https://", ErrPlainEndpoint, u.Host)
			}
			if !IsLoopbackHost(u.Hostname()) {
				return fmt.Errorf("%w: %s is not on this machine: use https:// (with --etcd-ca, --etcd-cert, --etcd-key)", ErrPlainEndpoint, u.Host)
			}
		default:
			return fmt.Errorf("etcd endpoint %q: scheme %q, want https:// (or http:// on a loopback address)", ep, u.Scheme)
		}
	}
	return nil
}

// IsLoopbackHost reports whether a URL's host name is this machine's
// loopback: where a secret may go over plain http.
func IsLoopbackHost(h string) bool {
	ip, err := netip.ParseAddr(h)
	return h == "localhost" || err == nil && ip.IsLoopback()
}

// Open connects to the state: an embedded etcd in DataDir, started here,
// or the external Endpoints.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{prefix: opts.Prefix, log: opts.Logger}
	if opts.EncryptionKey != nil {
		seal, err := newSealer(opts.EncryptionKey)
		if err != nil {
			return nil, err
		}
		s.seal = seal
	}
	if err := checkEndpoints(opts.Endpoints, opts.TLS != nil); err != nil {
		return nil, err
	}
	endpoints := opts.Endpoints
	if len(endpoints) == 0 {
		if opts.DataDir == "" {
			return nil, errors.New("open state: a data dir or etcd endpoints are required")
		}
		if err := s.startEmbedded(ctx, opts.DataDir); err != nil {
			return nil, err
		}
		endpoints = []string{"https://" + s.etcd.Clients[0].Addr().String()}
	} else {
		s.tls = opts.TLS
	}
	// ctx bounds the opening only: the client lives until Close.
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: s.tls, DialTimeout: 5 * time.Second,
		Logger: etcdLogger(s.log)})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	s.cli = cli
	// A first read proves the endpoints answer, with the caller's deadline.
	if _, err := cli.Get(ctx, s.prefix+"_meta/installation-id"); err != nil {
		s.Close()
		return nil, fmt.Errorf("reach etcd %v: %w", endpoints, err)
	}
	return s, nil
}

// snapshotCount is how many raft entries the embedded etcd applies between
// two snapshots on disk, and so the most a restart replays (give or take
// the batch that crossed it): well below what etcd keeps in memory for a
// slow follower (embed's SnapshotCatchUpEntries, 5,000).
//
// With etcd's default (10,000) a restart could panic ("error scanning
// unapplied entries ... requested index is unavailable due to
// compaction"; etcd 3.7.3, raft 3.7.0): the restarted member is a follower
// whose raft has applied nothing past the last snapshot; etcd hands it the
// whole replay in one batch (up to 1 MiB of entries: ~9,000 small ones),
// applies it and compacts its in-memory log to 5,000 below what it applied
// before raft is told the batch was applied; a tick landing in between
// starts an election, whose scan for unapplied configuration changes
// begins below the compacted index and panics. A leader never scans, so
// only a restart is exposed. Forcing that interleaving in a patched etcd
// panicked on a data dir 9,000 entries past its snapshot, and not on one
// written with this count (TestRestartReplaysLessThanEtcdKeeps holds the
// bound). A snapshot is a commit of the database and a small file: cheap.
const snapshotCount = 2500

// lockWait is how long opening a data dir waits for its lock.
const lockWait = 2 * time.Second

// startEmbedded starts a single-member etcd in dir/etcd on 127.0.0.1, with
// ports chosen by the kernel, after taking dir/lock.
func (s *Store) startEmbedded(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("data dir lock: %w", err)
	}
	// A lock just released may linger a moment: a child process another
	// goroutine forked holds a copy of the descriptor until its exec
	// closes it (O_CLOEXEC), and the lock goes with the last copy. A few
	// tries over lockWait tell that from another opke holding it.
	for deadline := time.Now().Add(lockWait); ; {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			lock.Close()
			return fmt.Errorf("%s: %w", dir, ErrLocked)
		}
		select {
		case <-ctx.Done():
			lock.Close()
			return fmt.Errorf("%s: %w", dir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.lock = lock
	// Certificates issued anew into the 0700 data dir: without them no
	// other local user reads or writes the state (or joins as a peer).
	certs, err := localtls.Issue(filepath.Join(dir, localTLSDir))
	if err != nil {
		return err
	}
	if s.tls, err = localtls.ClientConfig(certs.Dir); err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.Name = "opke"
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = certs.TLSInfo(), certs.TLSInfo()
	local := func() []url.URL { return []url.URL{{Scheme: "https", Host: "127.0.0.1:0"}} }
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = local(), local()
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = local(), local()
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ListenMetricsUrls = nil
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "1h"
	cfg.SnapshotCount = snapshotCount
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdLogger(s.log))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start embedded etcd in %s: %w", cfg.Dir, err)
	}
	s.etcd = e
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("embedded etcd: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("embedded etcd did not start: %w", ctx.Err())
	case <-time.After(60 * time.Second):
		return errors.New("embedded etcd did not start within 60s")
	}
}

// Close disconnects and, for an embedded etcd, stops it and frees the data
// dir; it is done once (a second Close returns the first one's error).
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.cli != nil {
			s.closeErr = s.cli.Close()
		}
		if s.etcd != nil {
			s.etcd.Close()
		}
		if s.lock != nil {
			s.closeErr = errors.Join(s.closeErr, s.lock.Close())
		}
	})
	return s.closeErr
}

// localTLSDir is where, in the data dir, the embedded etcd's certificates
// are (internal/localtls).
const localTLSDir = "etcd-tls"

// LocalTLS is the client TLS configuration for the embedded etcd of the
// daemon running on dataDir (opke's commands attaching to it): readable
// only by the user the data dir belongs to.
func LocalTLS(dataDir string) (*tls.Config, error) {
	return localtls.ClientConfig(filepath.Join(dataDir, localTLSDir))
}

// LocalTLSFiles are the paths of the embedded etcd's CA, client
// certificate and client key in dataDir, as --etcd-ca, --etcd-cert and
// --etcd-key take them.
func LocalTLSFiles(dataDir string) (ca, cert, key string) {
	f := localtls.Files{Dir: filepath.Join(dataDir, localTLSDir)}
	return f.Path(localtls.CAFile), f.Path(localtls.ClientCertFile), f.Path(localtls.ClientKeyFile)
}

// TLS is the client TLS configuration of the etcd in use (nil: plain).
func (s *Store) TLS() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Clone()
}

// Endpoints are the client URLs of the etcd in use.
func (s *Store) Endpoints() []string { return s.cli.Endpoints() }

// Client is the etcd client, for leases and transactions of other packages.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Key is a key below the prefix: Key("prod", "pki", "ca.crt") is /opke/prod/pki/ca.crt.
func (s *Store) Key(parts ...string) string { return s.prefix + strings.Join(parts, "/") }

// Get returns the value of key, or ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	return resp.Kvs[0].Value, nil
}

// Put sets the value of key.
func (s *Store) Put(ctx context.Context, key string, value []byte) error {
	if _, err := s.cli.Put(ctx, key, string(value)); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Delete removes key; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if _, err := s.cli.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// List returns every key below prefix with its value.
func (s *Store) List(ctx context.Context, prefix string) (map[string][]byte, error) {
	out, _, err := s.values(ctx, "list", prefix, clientv3.WithPrefix())
	return out, err
}

// Range returns the keys in [from, to) and their values, in one read,
// and the revision it read the store at.
func (s *Store) Range(ctx context.Context, from, to string) (map[string][]byte, int64, error) {
	return s.values(ctx, "range", from, clientv3.WithRange(to))
}

// values reads the keys from key as opt says, with their values, and the
// revision it read at.
func (s *Store) values(ctx context.Context, what, key string, opt clientv3.OpOption) (map[string][]byte, int64, error) {
	resp, err := s.cli.Get(ctx, key, opt)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", what, key, err)
	}
	out := make(map[string][]byte, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.Value
	}
	return out, resp.Header.Revision, nil
}

// Fingerprint is a digest of the keys in [from, to) and the revisions
// they were last written at, read without their values: it changes when
// a key is written, added or deleted, and only then. rev is the revision
// it was read at.
func (s *Store) Fingerprint(ctx context.Context, from, to string) (digest [32]byte, rev int64, err error) {
	resp, err := s.cli.Get(ctx, from, clientv3.WithRange(to), clientv3.WithKeysOnly())
	if err != nil {
		return [32]byte{}, 0, fmt.Errorf("fingerprint %s: %w", from, err)
	}
	h := sha256.New()
	for _, kv := range resp.Kvs {
		fmt.Fprintf(h, "%s\x00%d\x00%d\n", kv.Key, kv.ModRevision, kv.Version)
	}
	return [32]byte(h.Sum(nil)), resp.Header.Revision, nil
}

// GetSecret returns the opened value of a sealed key.
func (s *Store) GetSecret(ctx context.Context, key string) ([]byte, error) {
	sealed, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return s.seal.open(key, sealed)
}

// PutSecret seals value and stores it under key.
func (s *Store) PutSecret(ctx context.Context, key string, value []byte) error {
	sealed, err := s.seal.seal(key, value)
	if err != nil {
		return err
	}
	return s.Put(ctx, key, sealed)
}

// Entry is one value of a PutMany; Secret values are sealed.
type Entry struct {
	Key    string
	Value  []byte
	Secret bool
}

// maxTxnOps stays under etcd's default --max-txn-ops (128).
const maxTxnOps = 100

// PutMany writes entries in as few transactions as etcd allows, in order:
// each run of up to maxTxnOps entries is atomic.
func (s *Store) PutMany(ctx context.Context, entries []Entry) error {
	_, err := s.putMany(ctx, entries)
	return err
}

// putMany writes entries in runs of transactions that each commit only if
// every one of conds holds; it reports whether they all did.
func (s *Store) putMany(ctx context.Context, entries []Entry, conds ...clientv3.Cmp) (bool, error) {
	for chunk := range slices.Chunk(entries, maxTxnOps-len(conds)) {
		ops := make([]clientv3.Op, 0, len(chunk))
		for _, e := range chunk {
			v := e.Value
			if e.Secret {
				var err error
				if v, err = s.seal.seal(e.Key, v); err != nil {
					return false, err
				}
			}
			ops = append(ops, clientv3.OpPut(e.Key, string(v)))
		}
		resp, err := s.cli.Txn(ctx).If(conds...).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("put %d keys from %s: %w", len(ops), chunk[0].Key, err)
		}
		if !resp.Succeeded {
			return false, nil
		}
	}
	return true, nil
}

// Open opens a sealed value read with List.
func (s *Store) Open(key string, sealed []byte) ([]byte, error) { return s.seal.open(key, sealed) }

// InstallationID returns the installation's id, creating it on first use.
// A transaction makes two processes starting at once agree on one id.
func (s *Store) InstallationID(ctx context.Context) (string, error) {
	key := KeysOf(s).InstallationID()
	id := newInstallationID()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, id)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return "", fmt.Errorf("installation id: %w", err)
	}
	if resp.Succeeded {
		s.log.Info("new installation", "id", id)
		return id, nil
	}
	return string(resp.Responses[0].GetResponseRange().Kvs[0].Value), nil
}

// Revision is the revision of the newest write below the prefix (0 for an
// empty store): what tests compare to say that nothing was written. Writes
// of other programs sharing an external etcd outside the prefix do not
// count, nor do leases taken and given back (the _locks keys). It sorts
// every key of the store: a plan records [Store.Current] instead.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	locks := KeysOf(s).Locks()
	var rev int64
	for _, r := range [][2]string{{s.prefix, locks}, {clientv3.GetPrefixRangeEnd(locks), clientv3.GetPrefixRangeEnd(s.prefix)}} {
		resp, err := s.cli.Get(ctx, r[0], clientv3.WithRange(r[1]), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
		if err != nil {
			return 0, fmt.Errorf("state revision: %w", err)
		}
		if len(resp.Kvs) > 0 {
			rev = max(rev, resp.Kvs[0].ModRevision)
		}
	}
	return rev, nil
}

// RevisionOf is the revision of the newest write among keys: a key that
// ends in "/" stands for every key below it.
func (s *Store) RevisionOf(ctx context.Context, keys ...string) (int64, error) {
	var rev int64
	for _, k := range keys {
		opts := []clientv3.OpOption{clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1), clientv3.WithKeysOnly()}
		if strings.HasSuffix(k, "/") {
			opts = append(opts, clientv3.WithPrefix())
		}
		resp, err := s.cli.Get(ctx, k, opts...)
		if err != nil {
			return 0, fmt.Errorf("revision of %s: %w", k, err)
		}
		if len(resp.Kvs) > 0 {
			rev = max(rev, resp.Kvs[0].ModRevision)
		}
	}
	return rev, nil
}

// DeletePrefix removes every key below prefix.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) error {
	if !strings.HasPrefix(prefix, s.prefix) || len(prefix) <= len(s.prefix) {
		return fmt.Errorf("delete %s: %w", prefix, errOutsidePrefix)
	}
	if _, err := s.cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("delete %s: %w", prefix, err)
	}
	return nil
}

var errOutsidePrefix = errors.New("not below the store's prefix")

package backup

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"

	"opke.dev/opke/internal/localtls"
	"opke.dev/opke/state"
)

// Source is an etcd cluster to snapshot: a client of OPKE's (its own
// store), or endpoints with TLS reached through Dial (a cluster's etcd,
// through its gateway).
type Source struct {
	Client    *clientv3.Client
	Endpoints []string
	TLS       *tls.Config
	Dial      func(ctx context.Context, address string) (net.Conn, error)
}

// Snapshot is a snapshot taken into a local file.
type Snapshot struct {
	Path   string
	Size   int64
	SHA256 string
	Status snapshot.Status
	// Keys is the count of live keys at Status.Revision on the source.
	Keys int64
}

// client returns the source's client and how to let it go.
func (s Source) client(ctx context.Context) (*clientv3.Client, func(), error) {
	if s.Client != nil {
		return s.Client, func() {}, nil
	}
	cfg := clientv3.Config{Endpoints: s.Endpoints, TLS: s.TLS, DialTimeout: 15 * time.Second, Context: ctx, Logger: state.QuietEtcdLogger()}
	if s.Dial != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(s.Dial)}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd %v: %w", s.Endpoints, err)
	}
	return cli, func() { _ = cli.Close() }, nil
}

// Take snapshots the source into a new file in dir and checks it with
// etcdutl's status.
func Take(ctx context.Context, src Source, dir string) (*Snapshot, error) {
	cli, done, err := src.client(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot: %w", err)
	}
	defer resp.Snapshot.Close()
	f, err := os.CreateTemp(dir, "snapshot-*.db")
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot: %w", err)
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), resp.Snapshot)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("etcd snapshot: %w", err)
	}
	s := &Snapshot{Path: f.Name(), Size: n, SHA256: hex.EncodeToString(sum.Sum(nil))}
	if s.Status, err = Status(s.Path); err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	count, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly(), clientv3.WithRev(s.Status.Revision))
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("count the keys at revision %d: %w", s.Status.Revision, err)
	}
	s.Keys = count.Count
	return s, nil
}

// Status is etcdutl's `snapshot status` of a file: hash, revision, keys.
func Status(path string) (st snapshot.Status, err error) {
	defer func() {
		// bbolt panics on some damaged files rather than returning an error.
		if r := recover(); r != nil {
			err = fmt.Errorf("snapshot status: %v: %w", r, ErrCorrupt)
		}
	}()
	st, err = snapshot.NewV3(state.QuietEtcdLogger()).Status(path)
	if err != nil {
		return st, fmt.Errorf("snapshot status: %w: %w", err, ErrCorrupt)
	}
	return st, nil
}

// Restore writes a single-member etcd data dir from a snapshot file: dir
// must not exist. The member is named name and advertises peerURL.
func Restore(path, dir, name, peerURL string) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("restore into %s: %w", dir, os.ErrExist)
	}
	err := snapshot.NewV3(state.QuietEtcdLogger()).Restore(snapshot.RestoreConfig{
		SnapshotPath: path, Name: name, OutputDataDir: dir,
		PeerURLs: []string{peerURL}, InitialCluster: name + "=" + peerURL, InitialClusterToken: "opke-restore-" + name,
	})
	if err != nil {
		return fmt.Errorf("restore %s: %w", filepath.Base(path), err)
	}
	return nil
}

// Restored restores a snapshot into a throwaway embedded etcd on
// 127.0.0.1 and calls fn with a client of it; the etcd and its data dir
// go when fn returns. An etcd that does not come up is an error.
func Restored(ctx context.Context, path string, fn func(*clientv3.Client) error) error {
	tmp, err := os.MkdirTemp("", "opke-drill-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// The cluster's data is in it: only clients with the certificates
	// issued into the 0700 temporary folder get in.
	certs, err := localtls.Issue(filepath.Join(tmp, "tls"))
	if err != nil {
		return err
	}
	clientTLS, err := localtls.ClientConfig(certs.Dir)
	if err != nil {
		return err
	}
	peer, err := freeURL()
	if err != nil {
		return err
	}
	dir := filepath.Join(tmp, "etcd")
	if err := Restore(path, dir, "drill", peer.String()); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "drill", dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = "drill=" + peer.String()
	local := []url.URL{{Scheme: "https", Host: "127.0.0.1:0"}}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = local, local
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = certs.TLSInfo(), certs.TLSInfo()
	cfg.ListenMetricsUrls = nil
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(state.QuietEtcdLogger())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start the restored etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("the restored etcd: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(60 * time.Second):
		return errors.New("the restored etcd was not ready within 60s")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + e.Clients[0].Addr().String()}, TLS: clientTLS,
		DialTimeout: 10 * time.Second, Logger: state.QuietEtcdLogger()})
	if err != nil {
		return err
	}
	defer cli.Close()
	return fn(cli)
}

// Drill restores a snapshot into a throwaway embedded etcd on 127.0.0.1
// and checks that it serves the recorded revision and key count.
func Drill(ctx context.Context, path string, want *Record, now time.Time) (*DrillResult, error) {
	res := &DrillResult{At: now}
	err := Restored(ctx, path, func(cli *clientv3.Client) error {
		count, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("read the restored etcd: %w", err)
		}
		res.Revision, res.Keys = count.Header.Revision, count.Count
		return nil
	})
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		res.Message = err.Error()
		return res, nil
	// etcd counts revisions from 1: a snapshot of an etcd that never
	// stored a key has status revision 0 and restores at revision 1.
	case res.Revision != max(want.Revision, 1):
		res.Message = fmt.Sprintf("restored revision %d, the snapshot was taken at %d", res.Revision, want.Revision)
	case res.Keys != want.Keys:
		res.Message = fmt.Sprintf("restored %d keys, the source had %d at revision %d", res.Keys, want.Keys, want.Revision)
	default:
		res.Passed = true
		res.Message = fmt.Sprintf("restored revision %d with %d keys", res.Revision, res.Keys)
	}
	return res, nil
}

// freeURL is an https URL on a loopback port free now.
func freeURL() (url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	defer ln.Close()
	return url.URL{Scheme: "https", Host: "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}, nil
}

// Record describes the snapshot as stored for cluster in container.
func (s *Snapshot) Record(cluster, reason string, taken time.Time, container string) *Record {
	id := newID(taken, s.Status.Revision)
	return &Record{ID: id, Cluster: cluster, Reason: reason, Taken: taken, Revision: s.Status.Revision, Hash: s.Status.Hash,
		TotalKeys: s.Status.TotalKey, Keys: s.Keys, Size: s.Size, SHA256: s.SHA256, Container: container, Object: objectName(cluster, id)}
}

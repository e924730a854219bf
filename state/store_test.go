package state

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"

	"opke.dev/opke/internal/localtls"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func openStore(t *testing.T, dir string, key []byte) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{DataDir: dir, EncryptionKey: key})
	if err != nil {
		t.Fatalf("open store in %s: %v", dir, err)
	}
	// Closed before its data dir is removed (a cleanup registered after
	// t.TempDir's runs first): an etcd still running then fails to purge
	// its snapshots there, and ends the test binary.
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreEmbedded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, testKey(1))
	if _, err := s.Get(ctx, s.Key("prod", "spec")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of a missing key: %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, s.Key("prod", "spec"), []byte(`{"name":"prod"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, s.Key("prod", "commit"), []byte("abc123")); err != nil {
		t.Fatal(err)
	}
	got, err := s.List(ctx, s.Key("prod")+"/")
	if err != nil || len(got) != 2 || string(got["/opke/prod/commit"]) != "abc123" {
		t.Fatalf("list: %v %v", got, err)
	}
	id, err := s.InstallationID(ctx)
	if err != nil || len(id) != 16 {
		t.Fatalf("installation id: %q %v", id, err)
	}

	// A second process on the same data dir is refused while the first runs.
	if _, err := Open(ctx, Options{DataDir: dir}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open of the data dir: %v, want ErrLocked", err)
	}
	// External mode: a client of the same etcd sees the same state.
	ext, err := Open(ctx, Options{Endpoints: s.Endpoints(), TLS: s.TLS()})
	if err != nil {
		t.Fatalf("open external endpoints: %v", err)
	}
	if v, err := ext.Get(ctx, ext.Key("prod", "commit")); err != nil || string(v) != "abc123" {
		t.Errorf("external read: %q %v", v, err)
	}
	ext.Close()

	// A restart keeps everything, the installation id included.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, testKey(1))
	defer s.Close()
	if again, err := s.InstallationID(ctx); err != nil || again != id {
		t.Errorf("installation id after restart: %q, want %q (%v)", again, id, err)
	}
	if v, err := s.Get(ctx, s.Key("prod", "commit")); err != nil || string(v) != "abc123" {
		t.Errorf("value after restart: %q %v", v, err)
	}
}

func TestSecretsSealedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, testKey(1))
	key := s.Key("prod", "pki", "ca.key")
	secret := []byte("-----BEGIN EC PRIVATE KEY-----\nsecret material\n-----END EC PRIVATE KEY-----\n")
	if err := s.PutSecret(ctx, key, secret); err != nil {
		t.Fatal(err)
	}
	raw, err := s.Get(ctx, key)
	if err != nil || bytes.Contains(raw, []byte("secret material")) || bytes.Contains(raw, []byte("PRIVATE KEY")) {
		t.Fatalf("the stored value shows the secret: %q %v", raw, err)
	}
	if got, err := s.GetSecret(ctx, key); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("GetSecret: %q %v", got, err)
	}
	// Moving a sealed value to another key does not open it.
	other := s.Key("demo", "pki", "ca.key")
	if err := s.Put(ctx, other, raw); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSecret(ctx, other); !errors.Is(err, ErrSealed) {
		t.Errorf("a sealed value moved to another key: %v, want ErrSealed", err)
	}
	s.Close()

	for name, k := range map[string][]byte{"without the key": nil, "with the wrong key": testKey(2)} {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, dir, k)
			defer s.Close()
			if _, err := s.GetSecret(ctx, key); !errors.Is(err, ErrSealed) {
				t.Errorf("GetSecret: %v, want ErrSealed", err)
			}
			if k == nil {
				if err := s.PutSecret(ctx, key, secret); !errors.Is(err, ErrSealed) {
					t.Errorf("PutSecret without a key: %v, want ErrSealed", err)
				}
			}
		})
	}
}

func TestOverlayPersistsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()
	if err := s.Put(ctx, s.Key("prod", "pki", "ca.crt"), []byte("ca")); err != nil {
		t.Fatal(err)
	}
	o := s.ReadOnly()
	if v, err := o.Get(ctx, o.Key("prod", "pki", "ca.crt")); err != nil || string(v) != "ca" {
		t.Fatalf("overlay reads through: %q %v", v, err)
	}
	if err := o.PutSecret(ctx, o.Key("prod", "pki", "new.key"), []byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := o.Put(ctx, o.Key("prod", "pki", "ca.crt"), []byte("changed")); err != nil {
		t.Fatal(err)
	}
	if v, _ := o.GetSecret(ctx, o.Key("prod", "pki", "new.key")); string(v) != "k" {
		t.Errorf("overlay reads its own writes: %q", v)
	}
	list, err := o.List(ctx, o.Key("prod", "pki")+"/")
	if err != nil || len(list) != 2 || string(list["/opke/prod/pki/ca.crt"]) != "changed" {
		t.Errorf("overlay list: %q %v", list, err)
	}
	all, err := s.List(ctx, s.Key(""))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || string(all["/opke/prod/pki/ca.crt"]) != "ca" {
		t.Errorf("the store changed under the overlay: %q", all)
	}
	if len(o.Written()) != 2 {
		t.Errorf("overlay written keys: %v", o.Written())
	}
	// A delete in the overlay hides the store's value, from Get, GetSecret
	// and List, until written again; the store keeps it.
	d := s.ReadOnly()
	key := d.Key("prod", "pki", "ca.crt")
	if err := d.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a key deleted in the overlay: %v", err)
	}
	if _, err := d.GetSecret(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSecret of a key deleted in the overlay: %v", err)
	}
	if list, _ := d.List(ctx, d.Key("prod")+"/"); len(list) != 0 {
		t.Errorf("List shows a key deleted in the overlay: %q", list)
	}
	if err := d.Put(ctx, key, []byte("again")); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Get(ctx, key); err != nil || string(v) != "again" {
		t.Errorf("a key written again after its delete: %q %v", v, err)
	}
	if v, err := s.Get(ctx, key); err != nil || string(v) != "ca" {
		t.Errorf("the store after a delete in the overlay: %q %v", v, err)
	}
}

func TestKeyFiles(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/key"
	k1, err := EnsureKeyFile(path)
	if err != nil || len(k1) != KeySize {
		t.Fatalf("EnsureKeyFile: %v", err)
	}
	k2, err := EnsureKeyFile(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("the key changed on the second call: %v", err)
	}
	if _, err := ReadKeyFile(t.TempDir() + "/missing"); err == nil {
		t.Error("a missing key file is an error")
	}
}

// TestClientOutlivesOpenContext: the context given to Open bounds the
// opening only; the client (and the leases and watches built on it later)
// lives until Close.
func TestClientOutlivesOpenContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	s, err := Open(ctx, Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cancel()
	if err := s.Client().Ctx().Err(); err != nil {
		t.Fatalf("the client died with Open's context: %v", err)
	}
	if err := s.Put(context.Background(), s.Key("prod", "commit"), []byte("abc")); err != nil {
		t.Fatalf("put after Open's context ended: %v", err)
	}
}

// TestPutManyAndOpen: a batch larger than one transaction lands whole,
// secrets sealed; List returns them sealed on the store and on an overlay
// alike, and Open opens them.
func TestPutManyAndOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()
	var entries []Entry
	for i := range 2*maxTxnOps + 7 {
		entries = append(entries, Entry{Key: s.Key("prod", "pki", fmt.Sprintf("k%03d", i)), Value: []byte(fmt.Sprint(i)), Secret: i%2 == 0})
	}
	for name, kv := range map[string]KV{"store": s, "overlay": s.ReadOnly()} {
		t.Run(name, func(t *testing.T) {
			prefix := kv.Key(name) + "/"
			batch := make([]Entry, len(entries))
			for i, e := range entries {
				e.Key = prefix + e.Key
				batch[i] = e
			}
			if err := kv.PutMany(ctx, batch); err != nil {
				t.Fatal(err)
			}
			got, err := kv.List(ctx, prefix)
			if err != nil || len(got) != len(batch) {
				t.Fatalf("list: %d values, %v; want %d", len(got), err, len(batch))
			}
			for _, e := range batch {
				raw := got[e.Key]
				if !e.Secret {
					if !bytes.Equal(raw, e.Value) {
						t.Fatalf("%s: %q", e.Key, raw)
					}
					continue
				}
				if bytes.Equal(raw, e.Value) {
					t.Fatalf("%s is not sealed", e.Key)
				}
				if v, err := kv.Open(e.Key, raw); err != nil || !bytes.Equal(v, e.Value) {
					t.Fatalf("open %s: %q %v", e.Key, v, err)
				}
			}
		})
	}
	if all, _ := s.List(ctx, s.Key("overlay")); len(all) != 0 {
		t.Errorf("the overlay's batch reached the store: %d keys", len(all))
	}
}

func TestRevisionCountsWritesBelowThePrefixOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir(), testKey(1))
	defer s.Close()
	rev := func() int64 {
		t.Helper()
		r, err := s.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	start := rev()
	if err := s.Put(ctx, s.Key("prod", "spec"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	afterPut := rev()
	if afterPut <= start {
		t.Fatalf("revision %d after a write, %d before", afterPut, start)
	}
	if _, err := s.Client().Put(ctx, "/elsewhere/key", "x"); err != nil {
		t.Fatal(err)
	}
	if got := rev(); got != afterPut {
		t.Errorf("a write outside the prefix moved the revision: %d, want %d", got, afterPut)
	}
	if err := s.ReadOnly().Put(ctx, s.Key("prod", "spec"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if got := rev(); got != afterPut {
		t.Errorf("a write to the read-only overlay moved the revision: %d, want %d", got, afterPut)
	}
	l, err := s.Acquire(ctx, "prod", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rev(); got != afterPut {
		t.Errorf("taking a lease moved the revision: %d, want %d", got, afterPut)
	}
	if err := l.Put(ctx, s.Key("zzz"), []byte("after the locks")); err != nil {
		t.Fatal(err)
	}
	if got := rev(); got <= afterPut {
		t.Errorf("a write sorting after _locks/ did not move the revision: %d", got)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPlainEndpoints: the state goes over plain http only to this
// machine; a remote http endpoint, or one beside TLS settings it would not
// use, is refused before anything is dialled.
func TestPlainEndpoints(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		endpoint string
		tls      bool
		ok       bool
	}{
		{endpoint: "http://127.0.0.1:2379", ok: true},
		{endpoint: "http://[::1]:2379", ok: true},
		{endpoint: "http://localhost:2379", ok: true},
		{endpoint: "https://etcd.example:2379", ok: true},
		{endpoint: "https://etcd.example:2379", tls: true, ok: true},
		{endpoint: "http://10.0.0.5:2379"},
		{endpoint: "http://etcd.example:2379"},
		{endpoint: "http://127.0.0.1:2379", tls: true},
		{endpoint: "ftp://127.0.0.1:2379"},
		{endpoint: "127.0.0.1:2379"},
	} {
		t.Run(tt.endpoint, func(t *testing.T) {
			err := checkEndpoints([]string{tt.endpoint}, tt.tls)
			if (err == nil) != tt.ok {
				t.Fatalf("checkEndpoints(%s, tls %v) = %v, want ok %v", tt.endpoint, tt.tls, err, tt.ok)
			}
		})
	}
	// Through Open: refused at once, naming the endpoint.
	_, err := Open(context.Background(), Options{Endpoints: []string{"http://192.0.2.1:2379"}})
	if !errors.Is(err, ErrPlainEndpoint) || !strings.Contains(err.Error(), "192.0.2.1:2379") {
		t.Errorf("Open with a remote http endpoint: %v", err)
	}
}

// TestEmbeddedEtcdRefusesStrangers: another local user's process reaches
// the embedded etcd's port on 127.0.0.1 but, without the certificates in
// the 0700 data dir, reads and writes nothing: not in plain http, not in
// TLS without a client certificate, not with a certificate of its own CA.
// The certificates are there for OPKE's own commands (LocalTLS).
func TestEmbeddedEtcdRefusesStrangers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openStore(t, dir, testKey(1))
	defer s.Close()
	ctx := context.Background()
	if err := s.Put(ctx, s.Key("demo", "journal"), []byte("resume me")); err != nil {
		t.Fatal(err)
	}
	ep := s.Endpoints()[0]
	if !strings.HasPrefix(ep, "https://127.0.0.1:") {
		t.Fatalf("the embedded etcd answers on %s, want https on 127.0.0.1", ep)
	}
	// The certificates are OPKE's user's only, whatever the data dir's mode.
	if st, err := os.Stat(filepath.Join(dir, "etcd-tls")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("etcd-tls: %v, want mode 0700", err)
	}
	other, err := localtls.Issue(t.TempDir()) // a CA of the stranger's own
	if err != nil {
		t.Fatal(err)
	}
	strangerTLS, err := localtls.ClientConfig(other.Dir)
	if err != nil {
		t.Fatal(err)
	}
	strangerTLS.InsecureSkipVerify = true // it does not care whom it talks to
	noCert := &tls.Config{InsecureSkipVerify: true}
	plain := "http://" + strings.TrimPrefix(ep, "https://")
	for _, tt := range []struct {
		name     string
		endpoint string
		tls      *tls.Config
	}{
		{"plain http", plain, nil},
		{"tls without a client certificate", ep, noCert},
		{"a certificate of another CA", ep, strangerTLS},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{tt.endpoint}, TLS: tt.tls, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				return // refused at the door
			}
			defer cli.Close()
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if r, err := cli.Get(rctx, s.Key("demo", "journal")); err == nil {
				t.Errorf("read the journal: %q", r.Kvs)
			}
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := cli.Put(wctx, s.Key("demo", "journal"), "rewritten"); err == nil {
				t.Error("rewrote the journal")
			}
		})
	}
	// OPKE's own command on the data dir, with the certificates there.
	cfg, err := LocalTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	own, err := Open(ctx, Options{Endpoints: s.Endpoints(), TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if v, err := own.Get(ctx, own.Key("demo", "journal")); err != nil || string(v) != "resume me" {
		t.Errorf("with the data dir's certificates: %q %v", v, err)
	}
}

// TestOpenWaitsForALingeringLock: a data dir's lock outlives Close while a
// child process another goroutine forked still holds a copy of its
// descriptor (until its exec closes it); the next Open waits it out
// rather than report another opke. Seen as "data dir is in use" between
// two commands of one test process.
func TestOpenWaitsForALingeringLock(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s, err := Open(ctx, Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "0.5")
	child.ExtraFiles = []*os.File{s.lock} // the lock's descriptor, copied
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Wait() })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, Options{DataDir: dir})
	if err != nil {
		t.Fatalf("open after close, the lock lingering in a child: %v", err)
	}
	again.Close()
}

// TestFingerprint: a cluster's material range holds its pki/ and ssh/
// keys and none of its other keys; its fingerprint moves when a key in
// it is written (even with the same bytes), added or deleted, and not
// for a key outside it.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, t.TempDir(), testKey(1))
	k := KeysOf(s)
	from, to := k.Material("prod")
	priv, pub := k.SSHKey("prod")
	in := []string{k.PKIFile("prod", "ca.crt"), k.PKIFile("prod", "etcd/ca.crt"), priv, pub}
	out := []string{k.Resource("prod", "server", "prod-general-0"), k.HostFile("prod", "prod-general-0", "/etc/kubernetes/kubelet.env"),
		k.Manifest("prod", "00-kube-proxy.yaml"), k.HostKeys("prod", "prod-gateway-0"), k.AppCredentialSecret("prod"),
		k.Kubeconfig("prod"), k.Backups("prod") + "x", k.PKIFile("prod2", "ca.crt"), k.Status("prod")}
	for _, key := range in {
		if key < from || key >= to {
			t.Errorf("%s is outside the material range [%s, %s)", key, from, to)
		}
	}
	for _, key := range out {
		if key >= from && key < to {
			t.Errorf("%s is inside the material range [%s, %s)", key, from, to)
		}
	}
	for _, key := range slices.Concat(in, out) {
		if err := s.Put(ctx, key, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	fp := func() [32]byte {
		t.Helper()
		f, _, err := s.Fingerprint(ctx, from, to)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// The tracker's revision of the material's groups (what a planner
	// keeps a fingerprint by) moves with the fingerprint.
	changes := s.Changes()
	tracked := func() int64 {
		t.Helper()
		if _, err := changes.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		return changes.RevisionOf(k.PKI("prod"), priv)
	}
	last, lastTracked := fp(), tracked()
	for _, tc := range []struct {
		what  string
		do    func() error
		moves bool
	}{
		{"nothing", func() error { return nil }, false},
		{"a key outside written", func() error { return s.Put(ctx, out[0], []byte("w")) }, false},
		{"a key inside written with its own bytes", func() error { return s.Put(ctx, in[0], []byte("v")) }, true},
		{"a key added", func() error { return s.Put(ctx, k.PKIFile("prod", "ca.2.crt"), []byte("v")) }, true},
		{"a key deleted", func() error { return s.Delete(ctx, in[1]) }, true},
	} {
		if err := tc.do(); err != nil {
			t.Fatal(err)
		}
		if now := fp(); (now != last) != tc.moves {
			t.Errorf("%s: the fingerprint moved %v, want %v", tc.what, now != last, tc.moves)
		} else {
			last = now
		}
		if now := tracked(); (now != lastTracked) != tc.moves {
			t.Errorf("%s: the tracked revision moved %v, want %v", tc.what, now != lastTracked, tc.moves)
		} else {
			lastTracked = now
		}
	}
}

// TestRestartReplaysLessThanEtcdKeeps: after many writes, the entries a
// restart replays (those past the last snapshot on disk) stay well below
// what etcd keeps in memory; past it, a restarted member could compact
// its log under raft's feet and panic (see snapshotCount). With etcd's
// default snapshot count, 9,000 writes leave no snapshot at all.
func TestRestartReplaysLessThanEtcdKeeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, testKey(1))
	const writes, writers = 9000, 16
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < writes; i += writers {
				if err := s.Put(ctx, s.Key("restart", fmt.Sprint(i%100)), []byte("v")); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	server := s.etcd.Server
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	applied := server.AppliedIndex()

	snaps, err := wal.ValidSnapshotEntries(zap.NewNop(), filepath.Join(dir, "etcd", "member", "wal"))
	if err != nil {
		t.Fatal(err)
	}
	last := snaps[len(snaps)-1].GetIndex()
	catchUp := embed.NewConfig().SnapshotCatchUpEntries
	// A snapshot follows the batch that crossed the count: a margin for it.
	if replay := applied - last; replay > catchUp-1000 {
		t.Errorf("a restart replays %d entries (applied %d, last snapshot %d): want at most %d, 1,000 below what etcd keeps in memory",
			replay, applied, last, catchUp-1000)
	}

	s = openStore(t, dir, testKey(1))
	defer s.Close()
	if v, err := s.Get(ctx, s.Key("restart", "99")); err != nil || string(v) != "v" {
		t.Errorf("after the restart: %q %v", v, err)
	}
}

// TestStoreQuietWhenHealthy: opening and closing the embedded store logs
// nothing at info: etcd's notices about how it is set up on purpose (one
// member, one loopback port, no auth) and its listeners' ends on close
// are debug, so that a CLI command that opens the store prints only its
// own output. A warning of etcd's own still gets through (zaplog's
// benign list is checked by name).
func TestStoreQuietWhenHealthy(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{DataDir: t.TempDir(), EncryptionKey: testKey(1),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, s.Key("prod", "spec"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if out := logs.String(); out != "" {
		t.Errorf("a healthy store's open and close logged at info and above:\n%s", out)
	}
	for _, tc := range []struct {
		msg    string
		fields map[string]any
		want   bool
	}{
		{"simple token is not cryptographically signed", nil, true},
		{"stopped secure grpc server due to error", map[string]any{"error": "accept tcp 127.0.0.1:46215: use of closed network connection"}, true},
		{"setting up serving from embedded etcd failed.", map[string]any{"error": "http: Server closed"}, true},
		{"setting up serving from embedded etcd failed.", map[string]any{"error": "listen tcp 127.0.0.1:2379: bind: address already in use"}, false},
		{"slow fdatasync", map[string]any{"took": "1.2s"}, false},
	} {
		if got := benign(tc.msg, tc.fields); got != tc.want {
			t.Errorf("benign(%q, %v) = %v, want %v", tc.msg, tc.fields, got, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for etcd's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

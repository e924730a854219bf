package backup_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"opke.dev/opke/backup"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/internal/statetest"
)

// TestSnapshotLifecycle takes snapshots of a real etcd, stores them in the
// simulator's Swift, lists them back from the metadata alone, prunes,
// drills, and catches a corrupted object.
func TestSnapshotLifecycle(t *testing.T) {
	ctx := t.Context()
	store := statetest.Open(t)
	_, clients, _ := cloudtest.Start(t)
	box := backup.Objects{Client: clients.ObjectStore, Container: "opke-backups"}
	base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var taken []*backup.Record
	for i := range 5 {
		if err := store.Put(ctx, store.Key("test", fmt.Sprint(i)), []byte("value")); err != nil {
			t.Fatal(err)
		}
		s, err := backup.Take(ctx, backup.Source{Client: store.Client()}, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		rec := s.Record("demo", backup.ReasonScheduled, base.Add(time.Duration(i)*time.Minute), box.Container)
		if err := box.Put(ctx, rec, s.Path); err != nil {
			t.Fatal(err)
		}
		taken = append(taken, rec)
	}
	listed, err := box.List(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range taken {
		r.Taken = r.Taken.UTC()
	}
	if d := cmp.Diff(taken, listed); d != "" {
		t.Fatalf("records read back from Swift (-taken +listed):\n%s", d)
	}
	expired := backup.Expired(listed, 3)
	if d := cmp.Diff(taken[:2], expired); d != "" {
		t.Errorf("retain 3 of 5 (-want +got):\n%s", d)
	}
	last := listed[4]
	path, err := box.Download(ctx, last, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	res, err := backup.Drill(ctx, path, last, base)
	if err != nil || !res.Passed || res.Revision != last.Revision || res.Keys != last.Keys {
		t.Fatalf("drill: %+v, %v (record: revision %d, %d keys)", res, err, last.Revision, last.Keys)
	}
	// The throwaway etcd holding the cluster's data answers only its own
	// client: another local process gets nothing, over http or TLS.
	if err := backup.Restored(ctx, path, func(cli *clientv3.Client) error {
		ep := cli.Endpoints()[0]
		if !strings.HasPrefix(ep, "https://127.0.0.1:") {
			return fmt.Errorf("the drill's etcd answers on %s, want https on 127.0.0.1", ep)
		}
		for _, c := range []clientv3.Config{
			{Endpoints: []string{"http://" + strings.TrimPrefix(ep, "https://")}},
			{Endpoints: []string{ep}, TLS: &tls.Config{InsecureSkipVerify: true}},
		} {
			c.DialTimeout, c.Logger = time.Second, zap.NewNop()
			stranger, err := clientv3.New(c)
			if err != nil {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err = stranger.Get(rctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
			cancel()
			stranger.Close()
			if err == nil {
				return fmt.Errorf("a client without the drill's certificate read it (%s)", c.Endpoints[0])
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	// A record that does not match what the file restores fails the drill.
	wrong := *last
	wrong.Keys++
	if res, err := backup.Drill(ctx, path, &wrong, base); err != nil || res.Passed {
		t.Errorf("a drill against a wrong key count passed: %+v, %v", res, err)
	}
	// An object whose bytes changed is refused by its sha256.
	cloudtest.CorruptObject(t, clients, box.Container, last.Object)
	if _, err := box.Download(ctx, last, t.TempDir()); !errors.Is(err, backup.ErrCorrupt) {
		t.Errorf("a corrupted object downloaded: %v", err)
	}
	if _, err := backup.Status(os.DevNull); !errors.Is(err, backup.ErrCorrupt) {
		t.Errorf("status of an empty file: %v", err)
	}

}

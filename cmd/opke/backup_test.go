package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/objects"

	"opke.dev/opke/cloud"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/state"
)

// TestBackupCommands: on an applied cluster, opke backup now takes a
// snapshot through the gateway, list shows it, verify passes its drill,
// restore writes a data dir; a corrupted object fails verify with exit 1
// and says why. OPKE's own store is backed up sealed, and its restored
// data dir opens as a store with the same key.
func TestBackupCommands(t *testing.T) {
	t.Parallel()
	e := newPlanEnv(t)
	if code, out, stderr := e.apply(t, "", "--auto-approve"); code != exitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	flags := []string{"--sim-state", e.simDir, "--data-dir", e.dataDir, "--encryption-key-file", e.keyFile}
	run := func(args ...string) (int, string, string) { return opke(t, append(args, flags...)...) }

	code, out, stderr := run("backup", "now", "--cluster", "demo")
	stored := regexp.MustCompile(`Stored opke-backups/(demo/(\S+)\.db): revision \d+, \d+ keys, [0-9.]+ [KM]?i?B, sha256 [0-9a-f]{64}\.\n`).FindStringSubmatch(out)
	if code != exitOK || stored == nil {
		t.Fatalf("backup now: exit %d\n%s\n%s", code, out, stderr)
	}
	object, id := stored[1], stored[2]
	if code, out, stderr = run("backup", "list", "--cluster", "demo"); code != exitOK || !strings.Contains(out, id+"  manual") {
		t.Errorf("backup list: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = run("backup", "verify", "--cluster", "demo")
	if code != exitOK || !strings.Contains(out, "Snapshot "+id+" of cluster demo's etcd verified") || !strings.Contains(out, "drill: restored revision") {
		t.Errorf("backup verify: exit %d\n%s\n%s", code, out, stderr)
	}
	if code, out, _ = run("backup", "list", "--cluster", "demo"); code != exitOK || !strings.Contains(out, "passed ") {
		t.Errorf("backup list does not show the drill: exit %d\n%s", code, out)
	}
	to := filepath.Join(t.TempDir(), "restored")
	code, out, stderr = run("restore", "--cluster", "demo", "--snapshot", id, "--to", to)
	if code != exitOK || !strings.Contains(out, "as member demo-controller-0") {
		t.Errorf("restore: exit %d\n%s\n%s", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(to, "member", "snap", "db")); err != nil {
		t.Errorf("restore wrote no etcd data dir: %v", err)
	}
	if code, _, stderr = run("restore", "--cluster", "demo", "--snapshot", id, "--to", to); code != exitUsage || !strings.Contains(stderr, "exists") {
		t.Errorf("restore over an existing dir: exit %d, %s", code, stderr)
	}

	// A bad disk: one byte of the object flipped, its metadata kept.
	ctx := context.Background()
	clients, err := cloud.Connect(ctx, cloud.Target{File: filepath.Join(e.simDir, "clouds.yaml"), Cloud: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	cloudtest.CorruptObject(t, clients, "opke-backups", object)
	code, _, stderr = run("backup", "verify", "--cluster", "demo", "--snapshot", id)
	if code != exitFailure || !strings.Contains(stderr, "snapshot "+id+" of cluster demo's etcd FAILED verification") || !strings.Contains(stderr, "snapshot corrupt") {
		t.Errorf("verify of a corrupted snapshot: exit %d, %s", code, stderr)
	}

	// OPKE's own store, sealed.
	code, out, stderr = run("backup", "now", "--store", "--cloud", "sim")
	stored = regexp.MustCompile(`Stored opke-backups/(_opke/(\S+)\.db)`).FindStringSubmatch(out)
	if code != exitOK || stored == nil {
		t.Fatalf("backup now --store: exit %d\n%s\n%s", code, out, stderr)
	}
	dl := objects.Download(ctx, clients.ObjectStore, "opke-backups", stored[1], nil)
	sealed, err := dl.ExtractContent()
	if err != nil || !bytes.HasPrefix(sealed, []byte("opke-sealed-v1:")) {
		t.Errorf("the store's snapshot is not sealed in Swift (%v): %q", err, sealed[:min(len(sealed), 20)])
	}
	if code, out, stderr = run("backup", "verify", "--store", "--cloud", "sim"); code != exitOK || !strings.Contains(out, "of OPKE's state store verified") {
		t.Errorf("backup verify --store: exit %d\n%s\n%s", code, out, stderr)
	}
	data := t.TempDir()
	code, out, stderr = run("restore", "--store", "--cloud", "sim", "--snapshot", stored[2], "--to", filepath.Join(data, "etcd"))
	if code != exitOK || !strings.Contains(out, "mv DATA/etcd DATA/etcd.old") {
		t.Fatalf("restore --store: exit %d\n%s\n%s", code, out, stderr)
	}
	restored, err := state.Open(ctx, state.Options{DataDir: data, EncryptionKey: statetest.Key()})
	if err != nil {
		t.Fatalf("the restored store does not open: %v", err)
	}
	defer restored.Close()
	if kc, err := restored.GetSecret(ctx, restored.Key("demo", "kubeconfig")); err != nil || !bytes.Contains(kc, []byte("admin@demo")) {
		t.Errorf("the restored store lacks demo's kubeconfig: %v", err)
	}
	if code, _, stderr = run("backup", "now"); code != exitUsage || !strings.Contains(stderr, "name one of --cluster NAME and --store") {
		t.Errorf("backup now without a target: exit %d, %s", code, stderr)
	}
}

//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"opke.dev/opke/cloud"
	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/state"
)

const (
	cluster = "demo"
	// leaderTTL is the daemons' --leader-ttl: how long a dead or paused
	// daemon's leadership and cluster leases outlive it.
	leaderTTL = 2 * time.Second
	v1, v2    = "v1.36.1", "v1.36.2"
)

// demo is the example fleet's demo cluster (one controller, two workers
// and the gateway), the cluster every scenario makes.
var demo = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile(filepath.Join("..", "clusters", cluster, "cluster.yaml"))
	return string(b), err
})

// spec is the demo cluster at a Kubernetes version.
func spec(t *testing.T, version string) string {
	t.Helper()
	s, err := demo()
	if err != nil {
		t.Fatal(err)
	}
	const example = "version: " + v1
	if !strings.Contains(s, example) {
		t.Fatalf("clusters/demo/cluster.yaml does not say %q: the scenarios need a version to upgrade from", example)
	}
	return strings.Replace(s, example, "version: "+version, 1)
}

// world is one scenario's run: a simulator, an etcd, a fleet repository
// and its remote (a bare repository, served over git:// if asked), and
// the daemons, each a process of its own.
type world struct {
	t   *testing.T
	dir string
	bin string

	simAddr, simAdmin, simEdge string
	sim                        *proctest.Proc

	etcdClient, etcdPeer string
	etcd                 *proctest.Proc
	// store is the test's own client of the etcd, for the checks; cloud
	// its own connection to the simulator.
	store *state.Store
	cloud *cloud.Clients

	bare, work string
	gitAddr    string // served over git:// when set
	gitd       *proctest.Proc
	key        string

	daemons map[string]*serveProc
	commits []string
	// spec is the spec last committed.
	spec string
}

// serveProc is a running opke serve.
type serveProc struct {
	*proctest.Proc
	api string
}

// id is the daemon's id, as it names itself to the store and the cloud.
func (s *serveProc) id() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, s.Cmd.Process.Pid)
}

type worldOptions struct {
	// gitDaemon serves the remote over git:// (a remote that can go away).
	gitDaemon bool
}

func newWorld(t *testing.T, opts worldOptions) *world {
	t.Helper()
	addrs := proctest.FreeAddrs(t, 5)
	w := &world{t: t, dir: t.TempDir(), bin: proctest.Opke(t), daemons: map[string]*serveProc{},
		simAddr: addrs[0], simAdmin: addrs[1], simEdge: addrs[2], etcdClient: addrs[3], etcdPeer: addrs[4]}
	// Registered first, run last: after every process stopped.
	t.Cleanup(func() {
		if t.Failed() {
			w.dump()
		}
	})
	w.startSim()
	w.startEtcd()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := state.Open(ctx, state.Options{Endpoints: []string{"http://" + w.etcdClient}, EncryptionKey: statetest.Key()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	w.store = store
	w.key = filepath.Join(w.dir, "key")
	if err := os.WriteFile(w.key, fmt.Appendf(nil, "%x\n", statetest.Key()), 0o600); err != nil {
		t.Fatal(err)
	}
	w.bare, w.work = gittest.Remote(t)
	if opts.gitDaemon {
		w.gitAddr = proctest.FreeAddr(t)
		w.startGit()
	}
	return w
}

func (w *world) startSim() {
	w.t.Helper()
	w.sim = proctest.Start(w.t, w.dir, "sim", exec.Command(w.bin, "sim", "--listen", w.simAddr, "--admin-listen", w.simAdmin,
		"--edge-listen", w.simEdge, "--state", filepath.Join(w.dir, "sim"), "--boot-delay", "300ms"))
	proctest.WaitListening(w.t, w.simAddr)
	proctest.WaitListening(w.t, w.simAdmin)
}

// startGit serves the remote over git:// on its address (again).
func (w *world) startGit() { w.gitd = gittest.Daemon(w.t, filepath.Dir(w.bare), w.gitAddr) }

// stopSim stops the simulator gracefully: it saves its state, and its
// APIs and hosts are gone until startSim.
func (w *world) stopSim() { w.sim.Stop(30 * time.Second) }

func (w *world) startEtcd() {
	w.t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), etcdEnv+"="+strings.Join([]string{filepath.Join(w.dir, "etcd"), w.etcdClient, w.etcdPeer}, " "))
	w.etcd = proctest.Start(w.t, w.dir, "etcd", cmd)
	proctest.WaitListening(w.t, w.etcdClient)
}

// serve starts (or starts again) the daemon called name, with its data
// dir and API address kept across restarts.
func (w *world) serve(name string) *serveProc {
	w.t.Helper()
	api := ""
	if old := w.daemons[name]; old != nil {
		api = old.api
	} else {
		api = proctest.FreeAddr(w.t)
	}
	remote := "file://" + w.bare
	if w.gitAddr != "" {
		remote = "git://" + w.gitAddr + "/fleet.git"
	}
	p := proctest.Start(w.t, w.dir, "serve-"+name, exec.Command(w.bin, "serve", "--repo", remote,
		"--etcd", "http://"+w.etcdClient, "--encryption-key-file", w.key, "--sim-state", filepath.Join(w.dir, "sim"),
		"--data-dir", filepath.Join(w.dir, "serve-"+name), "--listen", api, "--leader-ttl", leaderTTL.String(),
		"--interval", "1s", "--resync-interval", "3s", "--log-format", "json"))
	s := &serveProc{Proc: p, api: api}
	w.daemons[name] = s
	proctest.WaitListening(w.t, api)
	return s
}

// commit commits the cluster at version and pushes it to the remote's
// folder (which works whether the git daemon serves it or not).
func (w *world) commit(version string) string {
	w.t.Helper()
	return w.commitSpec(version, spec(w.t, version))
}

// commitSpec commits the cluster's spec as data (at version) and pushes
// it to the remote.
func (w *world) commitSpec(version, data string) string {
	w.t.Helper()
	file := filepath.Join(w.work, "clusters", cluster, "cluster.yaml")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		w.t.Fatal(err)
	}
	gittest.Git(w.t, w.work, "add", "-A")
	gittest.Git(w.t, w.work, "commit", "-qm", "demo at "+version)
	gittest.Git(w.t, w.work, "push", "-q", "origin", "main")
	c := gittest.Git(w.t, w.work, "rev-parse", "HEAD")
	w.commits, w.spec = append(w.commits, c), data
	return c
}

// status is the cluster's status as the daemon last wrote it.
func (w *world) status(ctx context.Context) (*daemon.ClusterStatus, error) {
	return get[daemon.ClusterStatus](ctx, w.store, w.store.Key("_status", cluster))
}

// note is a commit's report in the store.
func (w *world) note(ctx context.Context, commit string) (*report.Note, error) {
	return daemon.ReadNote(ctx, w.store, commit)
}

// get reads a JSON value of the store.
func get[T any](ctx context.Context, store *state.Store, key string) (*T, error) {
	b, err := store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	var v T
	return &v, json.Unmarshal(b, &v)
}

// applying tells whether an apply of the cluster is under way: its
// journal is open.
func (w *world) applying(ctx context.Context) bool {
	_, err := w.store.Get(ctx, w.store.Key("_open", cluster))
	return err == nil
}

// settled waits up to timeout for the cluster's status to be success at
// commit; it returns false if it is not by then.
func (w *world) settled(commit string, timeout time.Duration) bool {
	return waitFor(timeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := w.status(ctx)
		return err == nil && s.Commit == commit && s.State == report.Success && s.Applied == commit
	})
}

// waitFor polls ok every 50 ms for up to timeout.
func waitFor(timeout time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ok() {
			return true
		}
	}
	return ok()
}

// ready is the daemon's /readyz: its code and the health it tells.
func (s *serveProc) ready() (int, daemon.Health, error) {
	resp, err := httpClient.Get("http://" + s.api + "/readyz")
	if err != nil {
		return 0, daemon.Health{}, err
	}
	defer resp.Body.Close()
	var body struct {
		Health daemon.Health `json:"health"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Health, err
}

// logs is what the daemon called name wrote, over all its lives (one
// log file, appended to).
func (w *world) logs(name string) string {
	b, _ := os.ReadFile(w.daemons[name].Log)
	return string(b)
}

// dump logs the end of every process's log, for a run that went wrong.
func (w *world) dump() {
	entries, _ := os.ReadDir(w.dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			b, _ := os.ReadFile(filepath.Join(w.dir, e.Name()))
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			w.t.Logf("== %s (the end):\n%s", e.Name(), b)
		}
	}
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

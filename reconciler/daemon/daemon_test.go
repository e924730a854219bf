package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/internal/gittest"
	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	"opke.dev/opke/reconciler/source"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

const (
	secret = "hook-secret"
	main   = "refs/heads/main"
)

// commitSpec writes a cluster's spec and commits it; it returns the commit.
func commitSpec(t *testing.T, work, name, spec, msg string) string {
	t.Helper()
	dir := filepath.Join(work, "clusters", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, work, "add", "-A")
	gittest.Git(t, work, "commit", "-qm", msg)
	return gittest.Git(t, work, "rev-parse", "HEAD")
}

func demoSpec(workers int) string {
	return strings.Replace(`apiVersion: opke.dev/v1alpha1
kind: Cluster
metadata:
  name: demo
spec:
  cloud: sim
  region: RegionOne
  image: flatcar
  kubernetes:
    version: v1.35.1
  network:
    hostCIDR: 192.168.10.0/24
    externalNetwork: public
  controllers:
    count: 1
    flavor: m1.medium
  workerPools:
    - name: default
      count: WORKERS
      flavor: m1.small
  gateway:
    flavor: m1.small
`, "WORKERS", string(rune('0'+workers)), 1)
}

// statuses records the commit statuses a GitHub-like forge receives.
type statuses struct {
	mu  sync.Mutex
	got []map[string]string
}

func (s *statuses) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]string
	_ = json.NewDecoder(r.Body).Decode(&body)
	body["sha"] = r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	s.mu.Lock()
	s.got = append(s.got, body)
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

// final waits until the forge's last status for the commit is no longer
// pending (the daemon tells the forge after it writes the git note) and
// returns them all.
func (s *statuses) final(t *testing.T, sha, context string) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := s.of(sha, context)
		if len(got) > 0 && !strings.HasPrefix(got[len(got)-1], "pending") || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *statuses) of(sha, context string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, b := range s.got {
		if b["sha"] == sha && b["context"] == context {
			out = append(out, b["state"]+": "+b["description"])
		}
	}
	return out
}

// env is a daemon on the simulator, a real store and a bare repository.
type env struct {
	logs    proctest.Buffer
	sim     *cloudsim.Sim
	clients *cloud.Clients
	store   *state.Store
	d       *daemon.Daemon
	mirror  *source.Mirror
	forge   *statuses
	srv     *httptest.Server
	bare    string
	work    string
	// clock is the planner's: tests move it on.
	clock *clock
	// today is the daemon's day of upstream support (daemon.Config.Today).
	today day
	// simDir holds the simulator's clouds.yaml.
	simDir string
	// cfg is the daemon's configuration, forgeURL its forge's; stop ends
	// the running daemon.
	cfg      daemon.Config
	forgeURL string
	stop     func()
}

func newEnv(t *testing.T, resync time.Duration, keyring string) *env {
	t.Helper()
	sim, clients, dir := cloudtest.Start(t)
	store := statetest.Open(t)
	bare, work := gittest.Remote(t)
	mirror, err := source.OpenMirror(context.Background(), source.MirrorOptions{URL: "file://" + bare, Dir: filepath.Join(t.TempDir(), "cache"), Branch: "main", Forks: true})
	if err != nil {
		t.Fatal(err)
	}
	metrics := daemon.NewMetrics()
	pool := &cloud.Pool{File: filepath.Join(dir, "clouds.yaml"), Budget: cloud.Unlimited(), OnRequest: metrics.APICall}
	hosts := &reconciler.HostSessions{Dialer: sshx.Dialer{Proxy: sim.Edge()}}
	t.Cleanup(hosts.Close)
	clk := &clock{}
	planner := &reconciler.Planner{Store: store, Clouds: pool, Hosts: hosts, Health: hosts, Now: clk.now}
	e := &env{sim: sim, clients: clients, store: store, mirror: mirror, forge: &statuses{}, bare: bare, work: work, clock: clk, simDir: dir}
	forgeSrv := httptest.NewServer(e.forge)
	t.Cleanup(forgeSrv.Close)
	// The leases' TTLs are short, for tests, but past the stalls of a
	// loaded CI machine running every package with the race detector
	// (2 s lapsed there): a lapse is tested on purpose
	// (TestDaemonResumesAnApplyWhoseLeaseLapsed), not left to the load.
	e.cfg = daemon.Config{ID: "test", Source: mirror, Store: store, Planner: planner,
		Applier:  &reconciler.Applier{Planner: planner, Hosts: hosts, LeaseTTL: 6 * time.Second, GateTimeout: 3 * time.Second, GateInterval: 200 * time.Millisecond},
		Interval: time.Hour, ResyncInterval: resync, LeaderTTL: 6 * time.Second, Metrics: metrics, Keyring: keyring,
		Today:  e.today.at,
		Logger: slog.New(slog.NewJSONHandler(&e.logs, nil))}
	e.forgeURL = forgeSrv.URL
	t.Cleanup(func() {
		if t.Failed() {
			logs := e.logs.String()
			t.Logf("the daemon's log (last 8 KiB):\n%s", logs[max(0, len(logs)-8192):])
		}
	})
	e.start(t)
	return e
}

// day is the day the daemon judges upstream's support of each minor at
// (daemon.Config.Today): testDay unless a test sets another, so that a
// minor's end of life does not fail the tests that do not test it.
type day struct{ unix atomic.Int64 }

// testDay is the day the tests' specs are on supported minors.
var testDay = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

func (d *day) at() time.Time {
	if u := d.unix.Load(); u != 0 {
		return time.Unix(u, 0).UTC()
	}
	return testDay
}
func (d *day) set(t time.Time) { d.unix.Store(t.Unix()) }

// clock is the wall clock moved on by what tests advance it.
type clock struct{ ahead atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *clock) advance(d time.Duration) { c.ahead.Add(int64(d)) }

// start runs a daemon of e.cfg, serving its handler at e.srv; it stops at
// the test's end or at the next start.
func (e *env) start(t *testing.T) {
	t.Helper()
	if e.stop != nil {
		e.stop()
	}
	e.d = daemon.New(e.cfg)
	forge := &report.Forge{Kind: report.GitHub, API: e.forgeURL, Repo: "acme/fleet", Token: "t", ExternalURL: "http://opke.example", Memo: e.d.Memo()}
	// Reporters are set after New: the forge's memo is the daemon's.
	e.d.AddReporter(report.Notes{Git: e.mirror}, forge)
	e.srv = httptest.NewServer(e.d.Handler(secret))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.d.Run(ctx)
	}()
	var once sync.Once
	e.stop = func() { once.Do(func() { cancel(); <-done; e.srv.Close() }) }
	t.Cleanup(e.stop)
}

// push pushes the work clone's HEAD to ref of the bare repository and
// calls the webhook, as a forge would.
func (e *env) push(t *testing.T, ref string) {
	t.Helper()
	gittest.Git(t, e.work, "push", "-q", "-f", "origin", "HEAD:"+ref)
	gittest.Hook(t, e.srv.URL, secret, ref, gittest.Git(t, e.work, "rev-parse", "HEAD"))
}

// gitNote reads the record of commit as git itself shows it, and checks
// that the text beside it (git log --notes=opke) is the record's.
func (e *env) gitNote(t *testing.T, commit string) *report.Note {
	t.Helper()
	// The daemon may push newer notes between two reads: the record is
	// compared with a text read before and after it, the same. One push
	// updates the two refs one after the other (the remote's refs are
	// not updated at once), so a read between them sees one ahead of the
	// other: read again, for up to 2 s, before calling it a mismatch.
	for try := 0; ; try++ {
		before, _ := gittest.Note(t, e.bare, commit)
		out, ok := gittest.Record(t, e.bare, commit)
		if !ok {
			return nil
		}
		var n report.Note
		if err := json.Unmarshal(out, &n); err != nil {
			t.Fatalf("note of %s: %v\n%s", commit, err, out)
		}
		after, _ := gittest.Note(t, e.bare, commit)
		if (!bytes.Equal(before, after) || string(after) != report.Text(&n)) && try < 40 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if string(after) != report.Text(&n) {
			t.Errorf("the text note of %s is not its record's:\n%s\nwant:\n%s", commit, after, report.Text(&n))
		}
		return &n
	}
}

// waitNote waits until the commit's note, pushed to the bare repository,
// has a final state for ref (a commit on a pull request and then on main
// has one note: main's replaces the pull request's).
func (e *env) waitNote(t *testing.T, commit, ref string) *report.Note {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if n := e.gitNote(t, commit); n != nil && n.State != report.Pending && n.Ref == ref {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no final note on %s", commit)
	return nil
}

// servers lists the names of the simulator's servers.
func (e *env) servers(t *testing.T) []string {
	t.Helper()
	pages, err := servers.List(e.clients.Compute, nil).AllPages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	all, err := servers.ExtractServers(pages)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

func (e *env) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(e.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDaemonEndToEnd: a new cluster committed on main is created (its
// servers in the simulator, its hosts' files in place, a success note);
// a pull request scaling it gets a plan note and status and changes
// nothing; merged, it is applied; a server deleted by hand is recreated
// within the resync interval; an invalid spec fails naming the file and
// field, and changes nothing.
func TestDaemonEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3*time.Second, "")
	demo := []string{"demo-controller-0", "demo-default-0", "demo-default-1", "demo-gateway-0"}

	// 1. A new cluster on main.
	c1 := commitSpec(t, e.work, "demo", demoSpec(2), "add demo")
	e.push(t, "refs/heads/main")
	n := e.waitNote(t, c1, main)
	if n.State != report.Success || !n.Applied || n.Clusters["demo"] == nil || n.Clusters["demo"].State != report.Success {
		t.Fatalf("note of the new cluster:\n%s", noteText(n))
	}
	if len(n.Clusters["demo"].Steps) == 0 || n.Clusters["demo"].Plan == nil {
		t.Errorf("the note has no steps or plan: %+v", n.Clusters["demo"])
	}
	if got := e.servers(t); !slices.Equal(got, demo) {
		t.Fatalf("servers %v, want %v", got, demo)
	}
	root, err := e.sim.HostRoot("demo-default-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "kubernetes", "kubelet.env")); err != nil {
		t.Errorf("the worker has no kubelet.env: %v", err)
	}
	if got := e.forge.final(t, c1, "opke/demo"); len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "success: applied") {
		t.Errorf("statuses of %s: %v", c1, got)
	}

	// 1b. A drift check that cannot look (the cloud refuses the listing)
	// says so on the status, keeps the commit's result, and clears once
	// the cloud answers again.
	e.sim.SetFaults(cloudsim.Fault{Match: "GET /compute/v2.1/servers/detail", Status: http.StatusBadRequest})
	waitStatus := func(what string, ok func(daemon.ClusterStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			_, body := e.get(t, "/api/v1/clusters/demo")
			var st daemon.ClusterStatus
			if json.Unmarshal([]byte(body), &st) == nil && ok(st) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %s", what, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitStatus("a failed drift check is not reported", func(st daemon.ClusterStatus) bool {
		return st.ResyncError != "" && st.State == report.Success && st.Commit == c1
	})
	if n := e.gitNote(t, c1); n.State != report.Success {
		t.Errorf("a failed drift check changed the commit's note: %s", n.State)
	}
	e.sim.SetFaults()
	waitStatus("the drift check does not recover", func(st daemon.ClusterStatus) bool { return st.ResyncError == "" })

	// 2. A pull request scaling it: planned, not applied.
	gittest.Git(t, e.work, "checkout", "-q", "-b", "scale")
	c2 := commitSpec(t, e.work, "demo", demoSpec(3), "scale demo to 3 workers")
	e.push(t, "refs/pull/1/head")
	n = e.waitNote(t, c2, "refs/pull/1/head")
	pr := n.Clusters["demo"]
	if n.State != report.Success || n.Applied || n.Ref != "refs/pull/1/head" || pr == nil || pr.Plan == nil {
		t.Fatalf("note of the pull request:\n%s", noteText(n))
	}
	planned := false
	for _, c := range pr.Plan.Changes {
		planned = planned || c.Address.String() == "openstack/server/demo-default-2"
	}
	if !planned {
		t.Errorf("the pull request's plan does not create demo-default-2: %s", pr.Summary)
	}
	if got := e.forge.final(t, c2, "opke/demo"); len(got) != 1 || !strings.HasPrefix(got[0], "success: plan: ") {
		t.Errorf("statuses of the pull request: %v", got)
	}
	if got := e.servers(t); !slices.Equal(got, demo) {
		t.Fatalf("the pull request changed the servers: %v", got)
	}

	// 3. Merged: applied.
	gittest.Git(t, e.work, "checkout", "-q", "main")
	gittest.Git(t, e.work, "merge", "-q", "--ff-only", "scale")
	e.push(t, "refs/heads/main")
	if n = e.waitNote(t, c2, main); !n.Applied || n.State != report.Success {
		t.Fatalf("note of the merge:\n%s", noteText(n))
	}
	demo = append(demo, "demo-default-2")
	slices.Sort(demo)
	if got := e.servers(t); !slices.Equal(got, demo) {
		t.Fatalf("servers after the merge %v, want %v", got, demo)
	}

	// 4. Drift: a server deleted by hand comes back within the resync
	// interval.
	cloudtest.DeleteServer(t, e.clients, "demo-default-1")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body := e.get(t, "/api/v1/clusters/demo")
		var st daemon.ClusterStatus
		_ = json.Unmarshal([]byte(body), &st)
		if code == 200 && st.DriftCorrected > 0 && st.Drift == 0 && st.State == report.Success && slices.Equal(e.servers(t), demo) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drift not corrected: servers %v, status %s", e.servers(t), body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, body := e.get(t, "/metrics"); !strings.Contains(body, `opke_drift_detected_total{cluster="demo"}`) ||
		!strings.Contains(body, `opke_openstack_api_calls_total{service="compute"}`) ||
		!strings.Contains(body, `opke_last_applied_commit_timestamp_seconds{cluster="demo",commit="`+c2+`"}`) {
		t.Errorf("metrics lack drift, API calls or the last applied commit:\n%s", body)
	}

	// 5. An invalid spec fails naming the file and field; nothing changes.
	c3 := commitSpec(t, e.work, "demo", strings.Replace(demoSpec(3), "count: 1", "count: 2", 1), "two controllers")
	e.push(t, "refs/heads/main")
	n = e.waitNote(t, c3, main)
	if n.State != report.Failure || n.Clusters["demo"] == nil || n.Clusters["demo"].State != report.Failure {
		t.Fatalf("note of the invalid spec:\n%s", noteText(n))
	}
	sum := n.Clusters["demo"].Summary
	if !strings.Contains(sum, "clusters/demo/cluster.yaml") || !strings.Contains(sum, "spec.controllers.count") {
		t.Errorf("the failure does not name the file and field: %q", sum)
	}
	if got := e.forge.final(t, c3, "opke/demo"); len(got) != 1 || !strings.HasPrefix(got[0], "failure: ") {
		t.Errorf("statuses of the invalid spec: %v", got)
	}
	if got := e.servers(t); !slices.Equal(got, demo) {
		t.Fatalf("an invalid spec changed the servers: %v", got)
	}
	if logs := e.logs.String(); !regexp.MustCompile(`"level":"WARN","msg":"invalid spec: the cluster's change is not applied","commit":"` + c3 + `","cluster":"demo","findings":"[^"]*spec.controllers.count`).MatchString(logs) {
		t.Errorf("the invalid spec is not logged as a warning with its findings:\n%s", logs)
	}

	// The status page and the API show the cluster, its head commit and
	// the applied one (the head failed), and link the cluster's page.
	if code, body := e.get(t, "/"); code != 200 || !strings.Contains(body, `<a href="/clusters/demo"><b>demo</b></a>`) ||
		!strings.Contains(body, `<a href="/commits/`+c3+`">`) || !strings.Contains(body, `applied: <a href="/commits/`+c2+`">`) ||
		!strings.Contains(body, `<meta http-equiv="refresh" content="5">`) {
		t.Errorf("status page: %d\n%s", code, body)
	}
	// The cluster's page: the head commit's subject and the failure, the
	// applied commit apart, the hosts at their versions.
	if code, body := e.get(t, "/clusters/demo"); code != 200 || !strings.Contains(body, "“two controllers” by ") ||
		!strings.Contains(body, "invalid spec, nothing applied") || !strings.Contains(body, "(the head is not applied)") ||
		!strings.Contains(body, "<td>demo-default-2</td>") || !strings.Contains(body, "<h2>Recent commits</h2>") ||
		!strings.Contains(body, `<a href="/plans/`+c1+`/demo">`) || !strings.Contains(body, `<a href="/plans/`+c2+`/demo">`) {
		t.Errorf("cluster page: %d\n%s", code, body)
	}
	if code, _ := e.get(t, "/clusters/nope"); code != 404 {
		t.Errorf("the page of a cluster that is not: %d", code)
	}
	// The commit's page: its message and author.
	if code, body := e.get(t, "/commits/"+c3); code != 200 || !strings.Contains(body, "<pre>two controllers</pre>") || !strings.Contains(body, "<dt>Author</dt><dd>") {
		t.Errorf("commit page: %d\n%s", code, body)
	}
	if code, body := e.get(t, "/plans/"+c2+"/demo"); code != 200 || !strings.Contains(body, "openstack/server/demo-default-2") {
		t.Errorf("plan page: %d\n%s", code, body)
	}
	if code, body := e.get(t, "/api/v1/plans/"+c2+"/demo"); code != 200 || !strings.Contains(body, `"address": "openstack/server/demo-default-2"`) {
		t.Errorf("plan API: %d\n%s", code, body)
	}
}

// TestDaemonAppliesOnlySignedCommits: with a keyring, an unsigned commit
// fails its status and nothing is applied; the same change signed by a
// key of the keyring is applied.
func TestDaemonAppliesOnlySignedCommits(t *testing.T) {
	t.Parallel()
	key, err := openpgp.NewEntity("dev", "", "dev@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	var keyring bytes.Buffer
	w, err := armor.Encode(&keyring, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := key.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	e := newEnv(t, time.Hour, keyring.String())

	unsigned := commitSpec(t, e.work, "demo", demoSpec(2), "add demo, unsigned")
	e.push(t, main)
	n := e.waitNote(t, unsigned, main)
	if n.State != report.Failure || !strings.Contains(n.Message, "not signed") || n.Clusters["demo"].State != report.Failure {
		t.Fatalf("note of the unsigned commit:\n%s", noteText(n))
	}
	if got := e.servers(t); len(got) != 0 {
		t.Fatalf("an unsigned commit was applied: %v", got)
	}

	signed := signedCommit(t, e.work, key, "clusters/demo/README", "signed\n")
	e.push(t, main)
	if n := e.waitNote(t, signed, main); n.State != report.Success {
		t.Fatalf("note of the signed commit:\n%s", noteText(n))
	}
	if got := e.servers(t); len(got) != 4 {
		t.Fatalf("the signed commit was not applied: %v", got)
	}

	// Every commit since the one applied must be signed: a signed head on
	// top of an unsigned commit is refused, naming the unsigned one.
	sneaked := commitSpec(t, e.work, "demo", demoSpec(3), "scale out, unsigned")
	head := signedCommit(t, e.work, key, "clusters/demo/README", "signed again\n")
	e.push(t, main)
	n = e.waitNote(t, head, main)
	if n.State != report.Failure || !strings.Contains(n.Message, sneaked[:12]) || !strings.Contains(n.Message, "not signed") {
		t.Fatalf("note of a signed head over an unsigned commit:\n%s", noteText(n))
	}
	if got := e.servers(t); len(got) != 4 {
		t.Fatalf("a commit with an unsigned commit under it was applied: %v", got)
	}
}

// signedCommit writes body to file in the work clone and commits it
// signed by key; it returns the commit.
func signedCommit(t *testing.T, work string, key *openpgp.Entity, file, body string) string {
	t.Helper()
	repo, err := gogit.PlainOpen(work)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, file), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Add(file); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "dev", Email: "dev@example.com", When: time.Now()}
	h, err := wt.Commit("signed: "+file, &gogit.CommitOptions{Author: sig, SignKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// TestDaemonHoldsBack: a paused cluster is planned and not applied; with
// driftCorrection false, drift is reported (failure status) and left as
// it is; a cluster whose file is removed under deletionPolicy Retain is
// forgotten, its servers kept, and its status says so.
func TestDaemonHoldsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2*time.Second, "")
	// The fleet keeps its clusters/ folder when the last spec goes.
	if err := os.MkdirAll(filepath.Join(e.work, "clusters"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.work, "clusters", "README"), []byte("one folder per cluster\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	paused := commitSpec(t, e.work, "demo", demoSpec(2)+"  paused: true\n", "demo, paused")
	e.push(t, main)
	n := e.waitNote(t, paused, main)
	if c := n.Clusters["demo"]; n.State != report.Success || c == nil || !strings.HasPrefix(c.Summary, "paused: not applied: ") || c.Plan == nil || len(c.Steps) != 0 {
		t.Fatalf("note of the paused cluster: %+v", c)
	}
	if got := e.servers(t); len(got) != 0 {
		t.Fatalf("a paused cluster was applied: %v", got)
	}

	manual := commitSpec(t, e.work, "demo", demoSpec(2)+"  driftCorrection: false\n", "demo, drift reported only")
	e.push(t, main)
	if n := e.waitNote(t, manual, main); n.State != report.Success {
		t.Fatalf("note of the unpaused cluster:\n%s", noteText(n))
	}
	cloudtest.DeleteServer(t, e.clients, "demo-default-1")
	deadline := time.Now().Add(time.Minute)
	for {
		_, body := e.get(t, "/api/v1/clusters/demo")
		var st daemon.ClusterStatus
		_ = json.Unmarshal([]byte(body), &st)
		if st.State == report.Failure && st.Drift > 0 && strings.HasPrefix(st.Summary, "drift not corrected (driftCorrection: false)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drift not reported: %s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := e.gitNote(t, manual); n.Clusters["demo"].Drift == nil || n.State != report.Failure {
		t.Errorf("the note does not carry the drift: %+v", n.Clusters["demo"])
	}
	left := []string{"demo-controller-0", "demo-default-0", "demo-gateway-0"}
	if got := e.servers(t); !slices.Equal(got, left) {
		t.Fatalf("drift was corrected though driftCorrection is false: %v", got)
	}

	gittest.Git(t, e.work, "rm", "-q", "-r", "clusters/demo")
	gittest.Git(t, e.work, "commit", "-qm", "remove demo")
	removed := gittest.Git(t, e.work, "rev-parse", "HEAD")
	e.push(t, main)
	n = e.waitNote(t, removed, main)
	if c := n.Clusters["demo"]; c == nil || c.State != report.Success || !strings.Contains(c.Summary, "deletionPolicy Retain keeps") {
		t.Fatalf("note of the removal: %+v", c)
	}
	if got := e.servers(t); !slices.Equal(got, left) {
		t.Fatalf("a retained cluster's servers changed: %v", got)
	}
	if specs, err := reconciler.AppliedSpecs(context.Background(), e.store); err != nil || specs["demo"] != nil {
		t.Errorf("the store still manages demo (%v)", err)
	}
}

// status polls a cluster's status until ok accepts it, for up to a minute.
func (e *env) status(t *testing.T, name string, ok func(daemon.ClusterStatus) bool) daemon.ClusterStatus {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, body := e.get(t, "/api/v1/clusters/"+name)
		var st daemon.ClusterStatus
		_ = json.Unmarshal([]byte(body), &st)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of %s never came: %s", name, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDaemonDayTwo: the daemon takes a cluster's first scheduled backup
// at the next drift check and shows it (time, size, drill) on the status,
// the page and the metrics; a version bump rolls and the status shows
// every host at the new version; a gate that fails halts the rollout and
// the status, the page and the note say where and why.
func TestDaemonDayTwo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second, "")
	withBackup := func(version string) string {
		return strings.Replace(demoSpec(1), "v1.35.1", version, 1) + "  backup:\n    interval: 1h\n    retain: 2\n    drill: true\n"
	}
	first := commitSpec(t, e.work, "demo", withBackup("v1.35.1"), "demo with backups")
	e.push(t, main)
	if n := e.waitNote(t, first, main); n.State != report.Success {
		t.Fatalf("note: %+v", n.Clusters["demo"])
	}
	st := e.status(t, "demo", func(s daemon.ClusterStatus) bool { return s.LastBackup != nil })
	if b := st.LastBackup; b.Reason != "scheduled" || b.Size == 0 || !strings.HasPrefix(b.Drill, "passed: restored revision") {
		t.Errorf("last backup: %+v", b)
	}
	if n := e.gitNote(t, first); n.Clusters["demo"].Drift != nil {
		t.Errorf("a scheduled backup is reported as drift: %+v", n.Clusters["demo"].Drift)
	}
	_, page := e.get(t, "/")
	_, metrics := e.get(t, "/metrics")
	if !strings.Contains(page, "drill passed: restored revision") || !strings.Contains(metrics, `opke_last_backup_drill_passed{cluster="demo"} 1`) ||
		!strings.Contains(metrics, `opke_last_backup_size_bytes{cluster="demo"}`) || strings.Contains(metrics, `opke_drift_detected_total{cluster="demo"}`) {
		t.Errorf("the page or the metrics lack the backup:\n%s\n%s", page, metrics)
	}

	bumped := commitSpec(t, e.work, "demo", withBackup("v1.35.2"), "demo v1.35.2")
	e.push(t, main)
	if n := e.waitNote(t, bumped, main); n.State != report.Success {
		t.Fatalf("upgrade note: %+v", n.Clusters["demo"])
	}
	st = e.status(t, "demo", func(s daemon.ClusterStatus) bool { return s.Rollout != nil && s.Rollout.Version == "v1.35.2" })
	if r := st.Rollout; r.Done != 2 || len(r.Hosts) != 2 || r.Halted != "" {
		t.Errorf("rollout after the upgrade: %+v", r)
	}
	_, metrics = e.get(t, "/metrics")
	if !strings.Contains(metrics, `opke_rollout_hosts{cluster="demo",state="done"} 2`) {
		t.Errorf("metrics lack the rollout:\n%s", metrics)
	}

	e.sim.CrashKubelet("demo-default-0", "v1.35.3")
	broken := commitSpec(t, e.work, "demo", withBackup("v1.35.3"), "demo v1.35.3")
	e.push(t, main)
	n := e.waitNote(t, broken, main)
	if c := n.Clusters["demo"]; n.State != report.Failure || !strings.Contains(c.Summary, "host/demo-default-0/health") {
		t.Errorf("note of the halted rollout: %+v", c)
	}
	st = e.status(t, "demo", func(s daemon.ClusterStatus) bool { return s.Rollout != nil && s.Rollout.Halted != "" })
	if r := st.Rollout; r.Version != "v1.35.3" || r.Done != 1 || !strings.Contains(r.Halted, "kubelet.service is activating") {
		t.Errorf("rollout after the halt: %+v", r)
	}
	_, page = e.get(t, "/")
	if !strings.Contains(page, "halted: host/demo-default-0/health") {
		t.Errorf("the page does not show the halt:\n%s", page)
	}
}

// TestDaemonRemediatesAWorker: with spec.remediation, a worker whose
// kubelet stopped is left while its Node has not been not Ready for
// unhealthyAfter, then the drift check replaces it without a commit: its
// server made again, its new kubelet registered; the status counts the
// drift and ends in success. A server Nova has in ERROR is replaced too.
// Both workers unhealthy at once are an outage: nothing is replaced, and
// the status and the page say so.
func TestDaemonRemediatesAWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second, "")
	first := commitSpec(t, e.work, "demo", demoSpec(2)+"  remediation:\n    unhealthyAfter: 5m\n", "demo, its workers remediated")
	e.push(t, main)
	if n := e.waitNote(t, first, main); n.State != report.Success {
		t.Fatalf("note: %+v", n.Clusters["demo"])
	}
	id := e.serverID(t, "demo-default-1")
	cloudtest.HostRun(t, e.store, e.clients, e.sim.Edge(), "demo", "demo-default-1", sshx.Sudo("systemctl stop kubelet"))
	// A few drift checks: the Node is not Ready, not for long enough.
	time.Sleep(3 * time.Second)
	if got := e.serverID(t, "demo-default-1"); got != id {
		t.Fatalf("demo-default-1 was replaced before unhealthyAfter")
	}
	e.clock.advance(6 * time.Minute)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := e.status(t, "demo", func(daemon.ClusterStatus) bool { return true })
		if got := e.serverID(t, "demo-default-1"); got != id && st.State == report.Success && st.DriftCorrected > 0 && st.Drift == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo-default-1 not remediated: its server %s (was %s), status %+v", e.serverID(t, "demo-default-1"), id, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := e.serverID(t, "demo-default-0"); got == "" {
		t.Errorf("demo-default-0 is gone")
	}
	objs, err := e.sim.KubeObjects("demo-controller-0")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := objs.Nodes["demo-default-1"]; !ok {
		t.Errorf("the new demo-default-1 did not register its Node: %v", slices.Sorted(maps.Keys(objs.Nodes)))
	}

	// A server Nova has in ERROR (an administrator's reset-state: its
	// machine runs on) is made again by the next drift check.
	admin, err := cloud.Connect(context.Background(), cloud.Target{File: filepath.Join(e.simDir, "clouds.yaml"), Cloud: "sim-admin"})
	if err != nil {
		t.Fatal(err)
	}
	id = e.serverID(t, "demo-default-0")
	if err := servers.ResetState(context.Background(), admin.Compute, id, servers.StateError).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	reset := time.Now()
	deadline = time.Now().Add(2 * time.Minute)
	for {
		// The drift correction's own status: its apply is over.
		st := e.status(t, "demo", func(daemon.ClusterStatus) bool { return true })
		if got := e.serverID(t, "demo-default-0"); got != id && got != "" && st.State == report.Success && st.Updated.After(reset) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo-default-0, in ERROR, not replaced: its server %s (was %s), status %+v", e.serverID(t, "demo-default-0"), id, st)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Both workers unhealthy at once (the clock held back while their
	// kubelets stop): more than maxUnhealthy, an outage; the drift checks
	// replace nothing and the status and the page say why.
	e.clock.advance(-6 * time.Minute)
	ids := map[string]string{}
	for _, w := range []string{"demo-default-0", "demo-default-1"} {
		ids[w] = e.serverID(t, w)
		cloudtest.HostRun(t, e.store, e.clients, e.sim.Edge(), "demo", w, sshx.Sudo("systemctl stop kubelet"))
	}
	e.clock.advance(6 * time.Minute)
	st := e.status(t, "demo", func(s daemon.ClusterStatus) bool {
		return strings.Contains(s.ResyncWarnings, "2 workers have been unhealthy")
	})
	time.Sleep(2 * time.Second) // a drift check or two more
	for w, id := range ids {
		if got := e.serverID(t, w); got != id {
			t.Errorf("%s was replaced in an outage: %s, was %s (status %+v)", w, got, id, st)
		}
	}
	if _, page := e.get(t, "/"); !strings.Contains(page, "2 workers have been unhealthy") {
		t.Errorf("the status page does not show the outage's warning:\n%s", page)
	}
}

// TestDaemonRebootsForOSUpdates: a worker whose staged OS update waits
// for a reboot is rebooted by the daemon's drift check without a commit
// (drained, rebooted, gated, uncordoned): the file and the rest of its
// /run are gone and the status counts the correction. With
// spec.upgrade.osReboots manual, nothing is rebooted and the drift
// check's warning says which host waits.
func TestDaemonRebootsForOSUpdates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second, "")
	first := commitSpec(t, e.work, "demo", demoSpec(1), "demo")
	e.push(t, main)
	if n := e.waitNote(t, first, main); n.State != report.Success {
		t.Fatalf("note: %+v", n.Clusters["demo"])
	}
	root, err := e.sim.HostRoot("demo-default-0")
	if err != nil {
		t.Fatal(err)
	}
	waiting := func() bool {
		_, err := os.Stat(filepath.Join(root, "run", "reboot-required"))
		return err == nil
	}
	cloudtest.HostRun(t, e.store, e.clients, e.sim.Edge(), "demo", "demo-default-0", sshx.Sudo("touch /run/reboot-required /run/booted-before"))
	st := e.status(t, "demo", func(s daemon.ClusterStatus) bool {
		return !waiting() && s.State == report.Success && s.DriftCorrected > 0 && s.Drift == 0
	})
	if _, err := os.Stat(filepath.Join(root, "run", "booted-before")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("demo-default-0 was not rebooted: its /run/booted-before %v (status %+v)", err, st)
	}

	manual := commitSpec(t, e.work, "demo", demoSpec(1)+"  upgrade:\n    osReboots: manual\n", "demo: OS reboots by hand")
	e.push(t, main)
	if n := e.waitNote(t, manual, main); n.State != report.Success {
		t.Fatalf("note: %+v", n.Clusters["demo"])
	}
	cloudtest.HostRun(t, e.store, e.clients, e.sim.Edge(), "demo", "demo-default-0", sshx.Sudo("touch /run/reboot-required"))
	e.status(t, "demo", func(s daemon.ClusterStatus) bool {
		return strings.Contains(s.ResyncWarnings, "demo-default-0 wait for a reboot to finish an OS update; spec.upgrade.osReboots is manual")
	})
	time.Sleep(2 * time.Second) // a drift check or two more
	if !waiting() {
		t.Error("demo-default-0 was rebooted with spec.upgrade.osReboots manual")
	}
}

// serverID is the id of the simulator's server named name; empty if none.
func (e *env) serverID(t *testing.T, name string) string {
	return cloudtest.ServerID(t, e.clients, name)
}

// TestDaemonSettlesAConvergedFleetInOnePlan: a commit that changes no
// cluster of a converged fleet is settled by one plan of the whole fleet:
// every cluster's entry says so, each cloud is listed once, and no
// cluster is planned again on its own.
func TestDaemonSettlesAConvergedFleetInOnePlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0, "")
	var specs []*schemas.Cluster
	for i, name := range []string{"east", "north", "west"} {
		spec := strings.NewReplacer("name: demo", "name: "+name, "192.168.10.0/24", fmt.Sprintf("192.168.%d.0/24", 20+i)).Replace(demoSpec(1))
		f := schemas.Parse(name, []byte(spec))
		if f.Cluster == nil || f.Findings.HasErrors() {
			t.Fatalf("%s: %v", name, f.Findings)
		}
		specs = append(specs, f.Cluster)
		commitSpec(t, e.work, name, spec, "add "+name)
	}
	cloudtest.Converge(t, e.store, e.clients, time.Now(), specs...)
	e.sim.ResetCounters()
	e.push(t, main)
	head := gittest.Git(t, e.work, "rev-parse", "HEAD")
	n := e.waitNote(t, head, main)
	for _, c := range specs {
		entry := n.Clusters[c.Metadata.Name]
		if entry == nil || entry.State != report.Success || entry.Summary != "no changes" || entry.Plan == nil || !entry.Plan.Empty() {
			t.Errorf("%s: %+v, want a success with no changes", c.Metadata.Name, entry)
		}
	}
	if got := e.sim.Counters()["GET /compute/v2.1/servers/detail"]; got != 1 {
		t.Errorf("the servers were listed %d times, want once for the fleet", got)
	}
	s := e.status(t, "west", func(s daemon.ClusterStatus) bool { return s.Commit == head })
	if s.State != report.Success {
		t.Errorf("west's status: %+v", s)
	}
}

// TestDaemonRetriesAFailedCreate: a new cluster whose create failed (the
// cloud refusing servers for a while) is tried again by the next drift
// check, without a new commit: its note turns to success and its status
// says it is applied.
func TestDaemonRetriesAFailedCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second, "")
	e.sim.SetFaults(cloudsim.Fault{Match: "POST /compute/v2.1/servers", Status: 500})
	c1 := commitSpec(t, e.work, "demo", demoSpec(1), "add demo")
	e.push(t, "refs/heads/main")
	if n := e.waitNote(t, c1, main); n.Clusters["demo"] == nil || n.Clusters["demo"].State != report.Failure {
		t.Fatalf("note of a create the cloud refused:\n%s", noteText(n))
	}
	e.sim.SetFaults()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n := e.gitNote(t, c1)
		if c := n.Clusters["demo"]; c != nil && c.State == report.Success {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failed create was not tried again: %+v", n.Clusters["demo"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, want := e.servers(t), []string{"demo-controller-0", "demo-default-0", "demo-gateway-0"}; !slices.Equal(got, want) {
		t.Errorf("servers %v, want %v", got, want)
	}
	// The status is written after the note is published: wait for it.
	for {
		b, err := e.store.Get(context.Background(), e.store.Key("_status", "demo"))
		var s daemon.ClusterStatus
		if err == nil && json.Unmarshal(b, &s) == nil && s.State == report.Success && s.Applied == c1 && s.Retrying == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after the retry: %+v (%v), want success, %s applied, nothing retrying", s, err, c1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDaemonSaysTheBranchIsMissing: a fleet repository without the
// tracked branch (made by git init with master, the daemon on main) is a
// sync error on the status and the API, not silence; once the branch is pushed, the error goes and the commit is
// applied.
func TestDaemonSaysTheBranchIsMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0, "")
	commitSpec(t, e.work, "demo", demoSpec(1), "add demo")
	e.push(t, "master")
	want := "the repository has no such branch: main (--branch names the one to apply)"
	deadline := time.Now().Add(time.Minute)
	for e.d.Health().SyncError != want {
		if time.Now().After(deadline) {
			t.Fatalf("sync error %q, want %q", e.d.Health().SyncError, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := e.get(t, "/api/v1/clusters"); code != http.StatusOK || !strings.Contains(body, `"syncError": "`+want) {
		t.Errorf("the API: %d %s", code, body)
	}
	e.push(t, main)
	head := gittest.Git(t, e.work, "rev-parse", "HEAD")
	if n := e.waitNote(t, head, main); n.State != report.Success {
		t.Errorf("the commit once on main:\n%s", noteText(n))
	}
	if got := e.d.Health().SyncError; got != "" {
		t.Errorf("the sync error stays after the branch came: %q", got)
	}
}

// TestDaemonDeletesTheLastCluster: removing the last cluster's file takes
// clusters/ with it (git keeps no empty folder). That commit deletes
// nothing, and its note says how to remove the last cluster; with the
// folder kept (clusters/.gitkeep), the cluster is deleted as its spec
// asks (deletionPolicy Delete).
func TestDaemonDeletesTheLastCluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0, "")
	created := commitSpec(t, e.work, "demo", demoSpec(1)+"  deletionPolicy: Delete\n", "demo")
	e.push(t, main)
	if n := e.waitNote(t, created, main); n.State != report.Success {
		t.Fatalf("create:\n%s", noteText(n))
	}
	gittest.Git(t, e.work, "rm", "-q", "-r", "clusters/demo")
	gittest.Git(t, e.work, "commit", "-qm", "remove demo")
	e.push(t, main)
	gone := gittest.Git(t, e.work, "rev-parse", "HEAD")
	n := e.waitNote(t, gone, main)
	if !strings.Contains(n.Message, "to remove the last cluster, keep the folder (clusters/.gitkeep)") || len(n.Clusters) != 0 {
		t.Errorf("the commit without clusters/:\n%s", noteText(n))
	}
	if got := e.servers(t); len(got) == 0 {
		t.Fatal("a commit without clusters/ deleted the cluster")
	}
	if err := os.MkdirAll(filepath.Join(e.work, "clusters"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.work, "clusters", ".gitkeep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, e.work, "add", "-A")
	gittest.Git(t, e.work, "commit", "-qm", "keep clusters/")
	e.push(t, main)
	kept := gittest.Git(t, e.work, "rev-parse", "HEAD")
	if n := e.waitNote(t, kept, main); n.State != report.Success || n.Clusters["demo"] == nil {
		t.Errorf("the commit with clusters/ kept:\n%s", noteText(n))
	}
	if got := e.servers(t); len(got) != 0 {
		t.Errorf("servers left: %v", got)
	}
}

// TestDaemonRecordsWhatADeadLeaderEnded: a leader killed after it stored
// a reconcile's entry in the note but before it recorded the status (the
// reporters run in between) left the status pending on an apply that
// ended. The next leader records the status from the note and hands the
// note to the reporters again, at its first poll, with no new commit.
func TestDaemonRecordsWhatADeadLeaderEnded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0, "")
	head := commitSpec(t, e.work, "demo", demoSpec(1), "demo")
	e.push(t, main)
	if n := e.waitNote(t, head, main); n.State != report.Success {
		t.Fatalf("create:\n%s", noteText(n))
	}
	done := e.status(t, "demo", func(s daemon.ClusterStatus) bool { return s.Commit == head && s.State == report.Success })
	e.stop()

	// The status as the dead leader left it: the apply under way.
	ctx := context.Background()
	key := state.KeysOf(e.store).Status("demo")
	left := done
	left.State, left.Summary, left.Applied = report.Pending, "applying: "+report.PlanSummary(e.gitNote(t, head).Clusters["demo"].Plan), ""
	data, err := json.Marshal(left)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Put(ctx, key, data); err != nil {
		t.Fatal(err)
	}
	// And the forge's last post the pending one: what it was told last is
	// forgotten.
	if err := e.store.Delete(ctx, state.KeysOf(e.store).Reported(string(report.GitHub)+"/"+head+"/opke/demo")); err != nil {
		t.Fatal(err)
	}
	reported := len(e.forge.of(head, "opke/demo"))

	e.start(t)
	got := e.status(t, "demo", func(s daemon.ClusterStatus) bool { return s.State != report.Pending })
	if diff := cmp.Diff(done, got, cmpopts.IgnoreFields(daemon.ClusterStatus{}, "Updated", "LastResync", "Taken")); diff != "" {
		t.Errorf("the status recorded from the note (-after the apply +after the next leader):\n%s", diff)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(e.forge.of(head, "opke/demo")) == reported && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if all := e.forge.of(head, "opke/demo"); len(all) == reported || !strings.HasPrefix(all[len(all)-1], "success: applied") {
		t.Errorf("the forge was not told again: %q", all)
	}
}

// noteText is a note as a person reads it (its clusters' states, failed
// steps and their errors), for a test's failure message.
func noteText(n *report.Note) string {
	if n == nil {
		return "no note"
	}
	return report.Text(n)
}

// TestDaemonJudgesUpstreamSupport: the daemon holds every commit to
// upstream's support of each minor on its day (daemon.Config.Today): a
// new cluster on an end-of-life minor is refused, naming the minor, its
// end of life and the minors to start on, and nothing is created; a
// cluster it already applied is applied again once its minor's end of
// life passed, with a warning on the note naming the upgrade path.
func TestDaemonJudgesUpstreamSupport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Hour, "")
	eol := commitSpec(t, e.work, "demo", strings.Replace(demoSpec(1), "v1.35.1", "v1.34.4", 1), "demo on 1.34")
	e.push(t, main)
	n := e.waitNote(t, eol, main)
	if n.State != report.Failure || n.Clusters["demo"] == nil || n.Clusters["demo"].State != report.Failure {
		t.Fatalf("note of a new cluster on an end-of-life minor:\n%s", noteText(n))
	}
	const refusal = "spec.kubernetes.version: Kubernetes 1.34 reached its end of life on 2026-10-27: a new cluster starts on a minor upstream supports (1.35, 1.36, 1.37)"
	if sum := n.Clusters["demo"].Summary; !strings.Contains(sum, refusal) {
		t.Errorf("the refusal says %q, want %q in it", sum, refusal)
	}
	if got := e.servers(t); len(got) != 0 {
		t.Fatalf("a cluster on an end-of-life minor was created: %v", got)
	}

	ok := commitSpec(t, e.work, "demo", demoSpec(1), "demo on 1.35")
	e.push(t, main)
	if n := e.waitNote(t, ok, main); n.State != report.Success || len(n.Findings) != 0 {
		t.Fatalf("note of a cluster on a supported minor:\n%s", noteText(n))
	}

	// 1.35's end of life passes: the next commit still applies, warned.
	e.today.set(time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC))
	late := commitSpec(t, e.work, "demo", demoSpec(2), "demo: a second worker")
	e.push(t, main)
	n = e.waitNote(t, late, main)
	if n.State != report.Success {
		t.Fatalf("an applied cluster past its minor's end of life was not applied:\n%s", noteText(n))
	}
	var warned []string
	for _, f := range n.Findings {
		warned = append(warned, string(f.Severity)+": "+f.Path+": "+f.Message)
	}
	want := []string{"warning: spec.kubernetes.version: Kubernetes 1.35 reached its end of life on 2027-02-28 and gets no more fixes: upgrade one minor at a time: v1.36 (the latest patch of each)"}
	if d := cmp.Diff(want, warned); d != "" {
		t.Errorf("findings (-want +got):\n%s", d)
	}
	if got := e.servers(t); len(got) != 4 {
		t.Errorf("the second worker was not created: %v", got)
	}
}

// TestDaemonBoundsPullRequestServers: a pull request may add at most
// MaxPullRequestServers servers to the fleet, counted from its specs
// before anything is planned: one at the bound is planned, one past it
// fails alone, saying which bound, and changes nothing.
func TestDaemonBoundsPullRequestServers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Hour, "")
	e.cfg.MaxPullRequestServers = 6
	e.start(t)
	c1 := commitSpec(t, e.work, "demo", demoSpec(2), "add demo")
	e.push(t, "refs/heads/main")
	if n := e.waitNote(t, c1, main); n.State != report.Success {
		t.Fatalf("note of the new cluster:\n%s", noteText(n))
	}
	applied := e.servers(t)

	gittest.Git(t, e.work, "checkout", "-q", "-b", "at-the-bound")
	c2 := commitSpec(t, e.work, "demo", demoSpec(8), "six more workers")
	e.push(t, "refs/pull/1/head")
	if n := e.waitNote(t, c2, "refs/pull/1/head"); n.State != report.Success || n.Clusters["demo"] == nil || n.Clusters["demo"].Plan == nil {
		t.Fatalf("a pull request adding 6 servers, the bound:\n%s", noteText(n))
	}

	gittest.Git(t, e.work, "checkout", "-q", "-b", "past-the-bound")
	c3 := commitSpec(t, e.work, "demo", demoSpec(9), "seven more workers")
	e.push(t, "refs/pull/2/head")
	n := e.waitNote(t, c3, "refs/pull/2/head")
	want := "not planned: the pull request adds 7 servers to the fleet, over the daemon's bound of 6 (--max-pr-servers)"
	if pr := n.Clusters["demo"]; n.State != report.Failure || pr == nil || pr.Summary != want || pr.Plan != nil {
		t.Fatalf("a pull request adding 7 servers: want a failure saying %q:\n%s", want, noteText(n))
	}
	if got := e.forge.final(t, c3, "opke/demo"); len(got) != 1 || !strings.Contains(got[0], "--max-pr-servers") {
		t.Errorf("statuses of the pull request past the bound: %v", got)
	}
	if got := e.servers(t); !slices.Equal(got, applied) {
		t.Errorf("servers after the pull requests: %v, want %v", got, applied)
	}
}

// TestDaemonRefusesAFetchBomb: a pull request whose pack is small but
// whose blob inflates past the object bound (40 MiB of zeros, the
// review's bomb, at source.DefaultMaxObjectBytes) fails alone, saying so,
// before git's indexer holds it; the tracked branch's next commit is
// applied as if it were not there.
func TestDaemonRefusesAFetchBomb(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Hour, "")
	c1 := commitSpec(t, e.work, "demo", demoSpec(1), "add demo")
	e.push(t, "refs/heads/main")
	if n := e.waitNote(t, c1, main); n.State != report.Success {
		t.Fatalf("note of the new cluster:\n%s", noteText(n))
	}

	gittest.Git(t, e.work, "checkout", "-q", "-b", "bomb")
	if err := os.WriteFile(filepath.Join(e.work, "zeros"), make([]byte, 40<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, e.work, "add", "zeros")
	gittest.Git(t, e.work, "commit", "-q", "-m", "40 MiB of zeros")
	bomb := gittest.Git(t, e.work, "rev-parse", "HEAD")
	e.push(t, "refs/pull/1/head")
	n := e.waitNote(t, bomb, "refs/pull/1/head")
	if n.State == report.Success || !strings.Contains(n.Message, "not planned: ") || !strings.Contains(n.Message, "once inflated: it declares 40 MiB, over 32 MiB") {
		t.Fatalf("the bomb's note: want a failure naming the object bound:\n%s", noteText(n))
	}

	gittest.Git(t, e.work, "checkout", "-q", "main")
	c2 := commitSpec(t, e.work, "demo", demoSpec(2), "a second worker")
	e.push(t, "refs/heads/main")
	if n := e.waitNote(t, c2, main); n.State != report.Success || !n.Applied {
		t.Fatalf("the tracked branch's next commit beside the bomb:\n%s", noteText(n))
	}
}

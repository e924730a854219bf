package bench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/diff"
	"opke.dev/opke/internal/cloudtest"
	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/internal/statetest"
	"opke.dev/opke/reconciler"
	"opke.dev/opke/render"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// fleetSpec is every seeded cluster's spec: three controllers and three
// workers. Clusters share the host CIDR: each has a network of its own.
const fleetSpec = `apiVersion: opke.dev/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  cloud: sim
  region: RegionOne
  image: flatcar
  kubernetes:
    version: v1.35.1
  network:
    hostCIDR: 192.168.10.0/24
    externalNetwork: internet
  controllers:
    count: 3
    flavor: m1.medium
  workerPools:
    - name: default
      count: 3
      flavor: m1.small
  gateway:
    flavor: m1.small
`

// clusterName is the i-th cluster's name. The template is the 0th; its
// name has letters no id or base64 text holds ("l", "t", "-"), so it is
// found and replaced in the snapshot's JSON without a false match.
func clusterName(i int) string { return fmt.Sprintf("fleet-%04d", i) }

// seedNow is the clock certificates are issued and checked against.
var seedNow = time.Now()

// parse parses a seeded cluster's spec.
func parse(name string) (*schemas.Cluster, []byte, error) {
	data := fmt.Appendf(nil, fleetSpec, name)
	f := schemas.Parse(name, data)
	if f.Cluster == nil || f.Findings.HasErrors() {
		return nil, nil, fmt.Errorf("%s: %v", name, f.Findings)
	}
	return f.Cluster, data, nil
}

// seed is a seeded fleet on disk: sim/ (state.json, clouds.yaml), state/
// (the embedded etcd) and fleet/ (the specs, clusters/<name>/cluster.yaml).
type seed struct {
	dir string
	n   int
}

// cacheRoot is where seeds are kept between runs.
func cacheRoot() string {
	if root := os.Getenv("OPKE_BENCH_CACHE"); root != "" {
		return root
	}
	return filepath.Join(os.TempDir(), "opke-bench")
}

// seedFleet returns the seed of n clusters under root, made now unless
// there already; the seeds another build made are removed.
func seedFleet(tb testing.TB, root string, n int) *seed {
	tb.Helper()
	dir := filepath.Join(root, fmt.Sprintf("fleet-%d-%s", n, binaryHash(tb)))
	s := &seed{dir: dir, n: n}
	if seeded(tb, dir) {
		return s
	}
	took := makeCached(tb, dir, filepath.Join(root, fmt.Sprintf("fleet-%d-*", n)), func(build string) { makeSeed(tb, build, n) })
	tb.Logf("seeded a fleet of %d clusters in %s (cached in %s)", n, took.Round(time.Millisecond), dir)
	return s
}

// makeCached makes a seed in dir with make, which fills the folder it is
// given (dir.tmp, renamed to dir once done), after removing the seeds of
// other builds (stale, a glob); it returns how long it took.
func makeCached(tb testing.TB, dir, stale string, make func(build string)) time.Duration {
	tb.Helper()
	old, _ := filepath.Glob(stale)
	for _, d := range old {
		_ = os.RemoveAll(d)
	}
	started := time.Now()
	build := dir + ".tmp"
	if err := os.RemoveAll(build); err != nil {
		tb.Fatal(err)
	}
	make(build)
	if err := os.WriteFile(filepath.Join(build, "done"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(build, dir); err != nil {
		tb.Fatal(err)
	}
	return time.Since(started)
}

// seeded reports whether the seed in dir is complete and, if it pinned
// its simulator's address (a file "listen"), that address is free. A
// fleet seed's simulator must listen where it was made (the address is in
// every controller's cloud.conf): a seed whose address is taken now, by a
// simulator a killed run left or by anything else, is made again on a
// free one rather than fail the benchmark.
func seeded(tb testing.TB, dir string) bool {
	tb.Helper()
	if _, err := os.Stat(filepath.Join(dir, "done")); err != nil {
		return false
	}
	addr, err := os.ReadFile(filepath.Join(dir, "listen"))
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", string(addr))
	if err != nil {
		tb.Logf("the seed %s listens on %s, which is taken (%v): seeding again on a free address", filepath.Base(dir), addr, err)
		return false
	}
	ln.Close()
	return true
}

var (
	hashOnce sync.Once
	hashOf   string
)

// binaryHash keys the cache: another build of OPKE may render another
// way, and its seed would not be converged.
func binaryHash(tb testing.TB) string {
	hashOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			tb.Fatal(err)
		}
		f, err := os.Open(exe)
		if err != nil {
			tb.Fatal(err)
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			tb.Fatal(err)
		}
		hashOf = hex.EncodeToString(h.Sum(nil))[:16]
	})
	return hashOf
}

// makeSeed builds a seed of n clusters in dir: the template converged by
// hand (cloudtest.Converge: its infrastructure through the API, its
// ledger recorded), then cloned n-1 times in the simulator's snapshot,
// each clone rendered for real (its own PKI, its own user_data) and its
// ledger recorded from what the simulator then shows.
func makeSeed(tb testing.TB, dir string, n int) {
	tb.Helper()
	ctx := context.Background()
	simDir, stateDir := filepath.Join(dir, "sim"), filepath.Join(dir, "state")
	// The API's address is in every controller's cloud.conf: the seed's
	// simulator always listens on the one it was made with.
	listen := proctest.FreeAddr(tb)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "listen"), []byte(listen), 0o644); err != nil {
		tb.Fatal(err)
	}
	sim, err := cloudsim.Start(ctx, cloudsim.Options{StateDir: simDir, Listen: listen})
	if err != nil {
		tb.Fatal(err)
	}
	clients, err := cloud.Connect(ctx, cloud.Target{File: filepath.Join(simDir, "clouds.yaml"), Cloud: "sim", Budget: cloud.Unlimited()})
	if err != nil {
		tb.Fatal(err)
	}
	cloudtest.RoomFor(tb, simDir, clients)
	store := openStore(tb, stateDir)
	defer store.Close()
	owner, err := store.InstallationID(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl, _, err := parse(clusterName(0))
	if err != nil {
		tb.Fatal(err)
	}
	cloudtest.Converge(tb, store, clients, seedNow, tmpl)
	obs, err := cloud.Observe(ctx, clients, owner, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var tmplFIP, tmplSubnet, tmplCred string
	for _, r := range obs.Clusters[tmpl.Metadata.Name] {
		switch {
		case r.Kind == diff.KindFloatingIP && r.Name == tmpl.Metadata.Name+"-api":
			tmplFIP = r.Attrs["address"].Value
		case r.Kind == diff.KindSubnet && r.Name == tmpl.Metadata.Name:
			tmplSubnet = r.ID
		case r.Kind == diff.KindAppCredential:
			tmplCred = r.ID
		}
	}
	if err := sim.Close(); err != nil {
		tb.Fatal(err)
	}

	snap := readSnapshot(tb, filepath.Join(simDir, "state.json"))
	t := snap.template(tmpl.Metadata.Name)
	// An overlay per clone: a render lists its cluster's material, and
	// one overlay for all would scan every clone's writes each time.
	overlays := map[string]*state.Overlay{}
	var mu sync.Mutex
	g := new(errgroup.Group)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := 1; i < n; i++ {
		name := clusterName(i)
		ids, ips := t.fresh(&mu, snap)
		ov := store.ReadOnly()
		overlays[name] = ov
		g.Go(func() error {
			c, _, err := parse(name)
			if err != nil {
				return err
			}
			creds := &assets.CloudCredential{AuthURL: clients.AuthURL, Region: clients.Region, ID: ids[tmplCred],
				Secret: cloudtest.AppCredentialSecret(name), SubnetID: ids[tmplSubnet]}
			out, err := render.Cluster(ctx, ov, c, render.Options{Now: seedNow, APIFloatingIP: netip.MustParseAddr(ips[tmplFIP]), Cloud: creds})
			if err != nil {
				return fmt.Errorf("render %s: %w", name, err)
			}
			objs := t.clone(name, ids, ips, out.UserData)
			mu.Lock()
			snap.add(objs)
			mu.Unlock()
			if err := reconciler.RecordAppCredential(ctx, ov, name, creds.Secret); err != nil {
				return err
			}
			if err := reconciler.RecordRendered(ctx, ov, name, out.Assets); err != nil {
				return err
			}
			return reconciler.RecordSpec(ctx, ov, c, "0123456789abcdef0123456789abcdef01234567")
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
	snap.write(tb, filepath.Join(simDir, "state.json"))

	// The clones' infrastructure as the simulator shows it, into the
	// ledger: as Converge records the template's.
	sim, err = cloudsim.Start(ctx, cloudsim.Options{StateDir: simDir, Listen: listen})
	if err != nil {
		tb.Fatal(err)
	}
	defer sim.Close()
	clients, err = cloud.Connect(ctx, cloud.Target{File: filepath.Join(simDir, "clouds.yaml"), Cloud: "sim", Budget: cloud.Unlimited()})
	if err != nil {
		tb.Fatal(err)
	}
	if obs, err = cloud.Observe(ctx, clients, owner, nil); err != nil {
		tb.Fatal(err)
	}
	if len(obs.Clusters) != n {
		tb.Fatalf("the cloned cloud shows %d clusters, want %d", len(obs.Clusters), n)
	}
	for name, rs := range obs.Clusters {
		if name == tmpl.Metadata.Name {
			continue
		}
		for _, r := range rs {
			if err := reconciler.RecordResource(ctx, overlays[name], name, r); err != nil {
				tb.Fatal(err)
			}
		}
	}
	for _, ov := range overlays {
		load(tb, store, ov)
	}
	writeFleet(tb, filepath.Join(dir, "fleet"), n)
}

// load writes what an overlay holds into the store, 128 keys a
// transaction (etcd's default limit): secrets are sealed already.
func load(tb testing.TB, store *state.Store, ov *state.Overlay) {
	tb.Helper()
	ctx := context.Background()
	keys := ov.Written()
	slices.Sort(keys)
	for batch := range slices.Chunk(keys, 128) {
		ops := make([]clientv3.Op, 0, len(batch))
		for _, k := range batch {
			v, err := ov.Get(ctx, k)
			if err != nil {
				tb.Fatal(err)
			}
			ops = append(ops, clientv3.OpPut(k, string(v)))
		}
		if _, err := store.Client().Txn(ctx).Then(ops...).Commit(); err != nil {
			tb.Fatalf("load the store: %v", err)
		}
	}
}

// writeFleet writes the specs of n clusters.
func writeFleet(tb testing.TB, dir string, n int) {
	tb.Helper()
	for i := range n {
		name := clusterName(i)
		_, data, err := parse(name)
		if err != nil {
			tb.Fatal(err)
		}
		p := filepath.Join(dir, schemas.ClustersDir, name, schemas.SpecFile)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// snapshot is the simulator's state.json, each collection by id as raw
// objects.
type snapshot struct {
	top   map[string]json.RawMessage
	colls map[string]map[string]json.RawMessage
	seq   int64
	used  map[netip.Addr]bool // external addresses taken
	next  netip.Addr
}

// cloned are the collections a cluster's resources live in. Tokens,
// projects, images and the rest are the cloud's own; Swift accounts,
// Kubernetes objects and peer ports are not seeded.
var cloned = []string{"servers", "server_groups", "networks", "subnets", "routers", "ports", "security_groups",
	"security_group_rules", "floating_ips", "load_balancers", "listeners", "pools", "members", "health_monitors",
	"app_creds", "keypairs"}

var externalAddr = regexp.MustCompile(`"198\.18\.\d+\.\d+"`)

func readSnapshot(tb testing.TB, file string) *snapshot {
	tb.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	s := &snapshot{colls: map[string]map[string]json.RawMessage{}, used: map[netip.Addr]bool{}}
	if err := json.Unmarshal(data, &s.top); err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(s.top["seq"], &s.seq); err != nil {
		tb.Fatal(err)
	}
	for _, c := range cloned {
		m := map[string]json.RawMessage{}
		if err := json.Unmarshal(s.top[c], &m); err != nil {
			tb.Fatalf("state.json: %s: %v", c, err)
		}
		s.colls[c] = m
	}
	for _, m := range externalAddr.FindAll(data, -1) {
		s.used[netip.MustParseAddr(strings.Trim(string(m), `"`))] = true
	}
	s.next = netip.MustParseAddr("198.18.0.2")
	return s
}

func (s *snapshot) write(tb testing.TB, file string) {
	tb.Helper()
	for c, m := range s.colls {
		b, err := json.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		s.top[c] = b
	}
	s.top["seq"], _ = json.Marshal(s.seq)
	data, err := json.Marshal(s.top)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// add puts a clone's objects in, with the snapshot's next sequence
// numbers (the simulator lists by them).
func (s *snapshot) add(objs map[string]map[string]map[string]any) {
	for _, c := range cloned {
		for key, o := range objs[c] {
			if _, ok := o["seq"]; ok {
				s.seq++
				o["seq"] = s.seq
			}
			b, _ := json.Marshal(o)
			s.colls[c][key] = b
		}
	}
}

// template is one cluster's objects in a snapshot.
type template struct {
	name  string
	objs  map[string]map[string]string // collection -> key -> JSON
	ids   []string
	addrs []string
}

// template finds the objects of cluster: those that name it, and those
// that hold the id of one found (a rule its group's, a member its
// pool's), until no more are found.
func (s *snapshot) template(cluster string) *template {
	t := &template{name: cluster, objs: map[string]map[string]string{}}
	found := map[string]bool{}
	for grew := true; grew; {
		grew = false
		for _, c := range cloned {
			for key, raw := range s.colls[c] {
				if t.objs[c][key] != "" {
					continue
				}
				text := string(raw)
				in := strings.Contains(text, cluster)
				for id := range found {
					if in {
						break
					}
					in = strings.Contains(text, id)
				}
				if !in {
					continue
				}
				if t.objs[c] == nil {
					t.objs[c] = map[string]string{}
				}
				t.objs[c][key] = text
				var o struct {
					ID string `json:"id"`
				}
				if json.Unmarshal(raw, &o) == nil && o.ID != "" {
					found[o.ID] = true
				}
				grew = true
			}
		}
	}
	for id := range found {
		t.ids = append(t.ids, id)
	}
	for _, m := range t.objs {
		for _, text := range m {
			for _, a := range externalAddr.FindAllString(text, -1) {
				if !slices.Contains(t.addrs, a) {
					t.addrs = append(t.addrs, a)
				}
			}
		}
	}
	return t
}

// fresh gives a clone new ids (of the same form) and new external
// addresses, by the template's (addresses unquoted).
func (t *template) fresh(mu *sync.Mutex, s *snapshot) (ids, addrs map[string]string) {
	ids, addrs = map[string]string{}, map[string]string{}
	for _, id := range t.ids {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		x := hex.EncodeToString(b)
		if len(id) == 36 {
			x = x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
		}
		ids[id] = x[:min(len(x), len(id))]
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range t.addrs {
		for s.used[s.next] {
			s.next = s.next.Next()
		}
		s.used[s.next] = true
		addrs[strings.Trim(a, `"`)] = s.next.String()
	}
	return ids, addrs
}

// clone is the template's objects as cluster name's: the name, the ids and
// the addresses replaced, and each server given its role's user_data.
func (t *template) clone(name string, ids, addrs map[string]string, userData map[schemas.Role][]byte) map[string]map[string]map[string]any {
	pairs := []string{t.name, name}
	for old, id := range ids {
		pairs = append(pairs, old, id)
	}
	for old, a := range addrs {
		pairs = append(pairs, `"`+old+`"`, `"`+a+`"`)
	}
	r := strings.NewReplacer(pairs...)
	out := map[string]map[string]map[string]any{}
	for c, m := range t.objs {
		out[c] = map[string]map[string]any{}
		for key, text := range m {
			d := json.NewDecoder(strings.NewReader(r.Replace(text)))
			d.UseNumber()
			var o map[string]any
			if err := d.Decode(&o); err != nil {
				panic(fmt.Sprintf("clone %s %s: %v", c, key, err))
			}
			if c == "servers" {
				role := roleOf(o["name"].(string), name)
				u := userData[role]
				sum := sha256.Sum256(u)
				o["user_data"] = base64.StdEncoding.EncodeToString(u)
				o["metadata"].(map[string]any)[cloud.MetaUserData] = hex.EncodeToString(sum[:])
			}
			out[c][r.Replace(key)] = o
		}
	}
	return out
}

// roleOf is a server's role, by its name.
func roleOf(server, cluster string) schemas.Role {
	for _, role := range []schemas.Role{schemas.RoleController, schemas.RoleGateway} {
		if strings.HasPrefix(server, cluster+"-"+string(role)+"-") {
			return role
		}
	}
	return schemas.RoleWorker
}

// openStore opens the store of a seed (or a copy of one) in dir.
func openStore(tb testing.TB, dir string) *state.Store {
	tb.Helper()
	store, err := state.Open(context.Background(), state.Options{DataDir: dir, EncryptionKey: statetest.Key()})
	if err != nil {
		tb.Fatalf("open the seed's store: %v", err)
	}
	return store
}

// copyTree copies a seed's folder to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			// tofu's working folder links its providers.
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, to)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o600)
		if info, err := d.Info(); err == nil && info.Mode()&0o100 != 0 {
			mode = 0o700
		}
		return os.WriteFile(to, data, mode)
	})
}

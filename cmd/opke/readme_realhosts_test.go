//go:build realhosts

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"opke.dev/opke/internal/proctest"
	"opke.dev/opke/reconciler/daemon"
	"opke.dev/opke/reconciler/report"
	kworld "opke.dev/opke/world"
	"opke.dev/opke/world/worldtest"
)

// TestREADMEFirstSession runs the README's first session as a new user
// does, on a fresh copy of the example fleet: make run's recipe, read from
// the Makefile, in the background, then each command of the README's
// block in a shell, in order, as written, with this opke and make world's
// kubectl on PATH. Only the daemon's addresses are moved to free ports
// (the README's 127.0.0.1:8080 and 5050 with them). Each command must
// exit 0 and say what the test expects of it; a command the test does not
// know, or one the README lost, fails the test: the block and this test
// change together. (It is a realhosts test for make world's kubectl; its
// hosts are make run's, in-process.)
func TestREADMEFirstSession(t *testing.T) {
	built := worldtest.E2E(t, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	kubectl, ok := built.Binary("kubernetes-"+kworld.KubernetesVersions()[0], "kubectl")
	if !ok {
		t.Fatal("make world built no kubectl")
	}
	work := t.TempDir()
	if err := os.CopyFS(filepath.Join(work, "clusters"), os.DirFS(filepath.Join("..", "..", "clusters"))); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// bin/opke is this test binary being opke (TestMain).
	if err := os.WriteFile(filepath.Join(bin, "opke"), []byte("#!/bin/sh\nOPKE_TEST_MAIN=1 exec '"+os.Args[0]+"' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kubectl, filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	api, sim := proctest.FreeAddr(t), simAddrWithEdge(t)
	moved := strings.NewReplacer("127.0.0.1:8080", api, "127.0.0.1:5050", sim)
	env := append(os.Environ(), "HOME="+work, "GIT_AUTHOR_NAME=operator", "GIT_AUTHOR_EMAIL=op@example.com",
		"GIT_COMMITTER_NAME=operator", "GIT_COMMITTER_EMAIL=op@example.com")
	shell := func(line string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir, cmd.Env = work, env
		return cmd
	}

	// make run, as the Makefile says, the daemon left running.
	for _, line := range makeRecipe(t, "run") {
		line = moved.Replace(line)
		if !strings.Contains(line, " serve ") {
			if out, err := shell(line).CombinedOutput(); err != nil {
				t.Fatalf("make run: %s: %v\n%s", line, err, out)
			}
			continue
		}
		serve := shell("exec " + line)
		out := &proctest.Buffer{}
		serve.Stdout, serve.Stderr = out, out
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = serve.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = serve.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = serve.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("make run's daemon said:\n%s", out)
			}
		})
	}
	fleet := filepath.Join(work, ".opke", "fleet")
	applied := func(what string) {
		t.Helper()
		waitApplied(t, "http://"+api, fleet, what, "demo", "prod")
	}
	applied("make run's first commit")

	// Each command of the README's block, and what it must say.
	type step struct {
		prefix string
		check  func(t *testing.T, out string)
	}
	// The exit status the README says a command ends with, when not 0.
	exits := map[string]int{"opke apply --cluster demo ": 1}
	says := func(want ...string) func(*testing.T, string) {
		return func(t *testing.T, out string) {
			t.Helper()
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("the output lacks %q", w)
				}
			}
		}
	}
	steps := []step{
		{"export PATH=$PWD/bin:$PATH", nil},
		{"curl -s 127.0.0.1:8080/api/v1/clusters/demo", says(`"name":"demo"`, `"state":"success"`)},
		{"opke plan --cluster demo ", says("Working on the fleet the daemon on .opke tracks: "+fleet+", branch main", "No changes. The fleet matches its specs.")},
		{"sed -i 's/count: 2/count: 3/' .opke/fleet/clusters/demo/cluster.yaml", nil},
		{"git -C .opke/fleet commit -qam 'demo: a third worker'", func(t *testing.T, _ string) { applied("the third worker's commit") }},
		{"opke plan --cluster demo --detailed-exitcode", says("No changes.")},
		{"opke apply --cluster demo ", says("leads on this state and applies the fleet itself: commit to its repository instead")},
		{"opke kubeconfig --cluster demo --out demo.kubeconfig", func(t *testing.T, _ string) {
			kc, err := os.ReadFile(filepath.Join(work, "demo.kubeconfig"))
			if err != nil || !bytes.Contains(kc, []byte("proxy-url: socks5://127.0.0.1:")) {
				t.Errorf("demo.kubeconfig (%v) has no proxy-url to the edge:\n%s", err, kc)
			}
		}},
		{"kubectl --kubeconfig demo.kubeconfig get nodes", says("demo-controller-0", "demo-default-0", "demo-default-1", "demo-default-2")},
		{"opke ssh --cluster demo demo-default-2 -- cat /etc/opke/role", func(t *testing.T, out string) {
			if out != "worker\n" {
				t.Errorf("want %q", "worker\n")
			}
		}},
		{"opke backup now --cluster demo", says("Stored opke-backups/demo/")},
		{"opke backup list --cluster demo", says("  manual")},
		{"git -C .opke/fleet log --notes=opke -1", says("demo: a third worker", " of main applied; 2 clusters: 2 success")},
	}
	commands := readmeBlock(t, "TestREADMEFirstSession")
	for i, c := range commands {
		if i >= len(steps) || !strings.HasPrefix(c, steps[i].prefix) {
			t.Fatalf("README command %d, %q, is not the one this test knows (%d known): change the test with the README", i+1, c, len(steps))
		}
		if strings.HasPrefix(c, "export ") {
			env = append(env, "PATH="+bin+":"+os.Getenv("PATH"))
			continue
		}
		var stdout, stderr bytes.Buffer
		cmd := shell(moved.Replace(c))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exits[steps[i].prefix] {
			t.Fatalf("$ %s: %v, want exit %d\n%s%s", c, err, exits[steps[i].prefix], stdout.String(), stderr.String())
		}
		if steps[i].check != nil {
			t.Run(fmt.Sprintf("%d", i+1), func(t *testing.T) {
				steps[i].check(t, stdout.String()+stderr.String())
				if t.Failed() {
					t.Logf("$ %s\n%s%s", c, stdout.String(), stderr.String())
				}
			})
		}
	}
	if len(commands) < len(steps) {
		t.Errorf("the README's block has %d commands, the test %d: the README lost %q", len(commands), len(steps), steps[len(commands)].prefix)
	}
}

// simAddrWithEdge is a free address for make run's simulator whose port
// two past it (its edge's, by default) is free too.
func simAddrWithEdge(t *testing.T) string {
	t.Helper()
	for range 20 {
		addr := proctest.FreeAddr(t)
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p+2))); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatal("no free port pair for the simulator and its edge")
	return ""
}

// makeRecipe is a Makefile target's recipe, its variables replaced as
// make would (the ones the recipe uses).
func makeRecipe(t *testing.T, target string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$(BIN)", "bin/opke")
	var lines []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, target+":"):
			in = true
		case in && strings.HasPrefix(line, "\t"):
			lines = append(lines, vars.Replace(strings.TrimPrefix(line, "\t")))
		case in:
			if len(lines) == 0 {
				t.Fatalf("the Makefile's %s has no recipe", target)
			}
			return lines
		}
	}
	t.Fatalf("the Makefile has no target %s", target)
	return nil
}

// readmeBlock is the commands ("$ " lines) of the README's console block
// that follows the comment naming test.
func readmeBlock(t *testing.T, test string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	marked, in := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- "+test+" "):
			marked = true
		case marked && !in && line == "```console":
			in = true
		case in && line == "```":
			return cmds
		case in && strings.HasPrefix(line, "$ "):
			cmds = append(cmds, strings.TrimPrefix(line, "$ "))
		}
	}
	t.Fatalf("the README has no console block marked <!-- %s ... -->", test)
	return nil
}

// waitApplied waits until the daemon at api says each cluster is applied
// at the fleet repository's head, with success.
func waitApplied(t *testing.T, api, fleet, what string, clusters ...string) {
	t.Helper()
	var head string
	var last []daemon.ClusterStatus
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		// make run's daemon makes the fleet repository as it starts.
		out, err := exec.Command("git", "-C", fleet, "rev-parse", "HEAD").Output()
		if err != nil {
			continue
		}
		head = strings.TrimSpace(string(out))
		last = last[:0]
		done := 0
		for _, name := range clusters {
			resp, err := http.Get(api + "/api/v1/clusters/" + name)
			if err != nil {
				break
			}
			var st daemon.ClusterStatus
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil {
				break
			}
			last = append(last, st)
			if st.Applied == head && st.State == report.Success {
				done++
			}
		}
		if done == len(clusters) {
			return
		}
	}
	t.Fatalf("%s: not applied at %s within 5 minutes; the daemon says %+v", what, head, last)
}

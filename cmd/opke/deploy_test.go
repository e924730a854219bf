package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// decodeStrict reads a manifest into v, refusing unknown fields.
func decodeStrict(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestDeployManifests: the Kubernetes manifests decode strictly with the
// API's types; the Deployment runs two replicas that must share an
// external etcd (the config names one), its probes hit the daemon's
// endpoints, the Service reaches its port, and the ConfigMap's config is
// one opke serve accepts.
func TestDeployManifests(t *testing.T) {
	var dep appsv1.Deployment
	var svc corev1.Service
	var cm corev1.ConfigMap
	decodeStrict(t, "deployment.yaml", &dep)
	decodeStrict(t, "service.yaml", &svc)
	decodeStrict(t, "configmap.yaml", &cm)
	if dep.Kind != "Deployment" || svc.Kind != "Service" || cm.Kind != "ConfigMap" {
		t.Fatalf("kinds %q %q %q", dep.Kind, svc.Kind, cm.Kind)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
	}
	for k, v := range dep.Spec.Selector.MatchLabels {
		if dep.Spec.Template.Labels[k] != v || svc.Spec.Selector[k] != v {
			t.Errorf("label %s=%s: the pod template or the Service does not carry it", k, v)
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || svc.Spec.Ports[0].TargetPort.StrVal != "http" {
		t.Errorf("the Service does not reach the container's port: %+v %+v", c.Ports, svc.Spec.Ports)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes %s %s", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "serve --config /etc/opke/config.yaml") {
		t.Errorf("args %v", c.Args)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
	}) || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("the Go runtime's soft limit is not the container's memory limit (%v, env %v)", c.Resources.Limits.Memory(), c.Env)
	}

	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := newServeConfig()
	if err := cfg.fromFile(path); err != nil {
		t.Fatalf("the ConfigMap's config: %v", err)
	}
	if len(cfg.Etcd.Endpoints) == 0 {
		t.Error("two replicas need an external etcd: the config names none")
	}
	if _, port, _ := net.SplitHostPort(cfg.Listen); port != "8080" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("listen %s, container port %d", cfg.Listen, c.Ports[0].ContainerPort)
	}
	if len(cfg.Reporters.Forges) == 0 || cfg.ExternalURL == "" {
		t.Error("the example config has no forge or external URL")
	}

	unit, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "opke.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/opke serve --config /etc/opke/config.yaml") {
		t.Error("the systemd unit does not run opke serve with its config")
	}
	docker, err := os.ReadFile(filepath.Join("..", "..", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docker), "install -y --no-install-recommends git") {
		t.Error("the image has no git (file:// repositories need it)")
	}
}

// TestServeConfigErrors: a bad config is refused with every problem at
// once, before anything starts.
func TestServeConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("repo: /nowhere\ninterval: 10ms\nlisten: nope\nsignaturePolicy:\n  allowRewrite: abc123\nreporters:\n  forges:\n    - kind: bitbucket\n      api: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := opke(t, "serve", "--config", cfgPath, "--data-dir", filepath.Join(dir, "data"))
	if code != exitUsage {
		t.Fatalf("exit %d, want %d\n%s", code, exitUsage, stderr)
	}
	for _, want := range []string{"interval 10ms: at least 1s", `listen "nope"`, `kind "bitbucket"`, "encryptionKeyFile: required", `allowRewrite "abc123": want a commit's full hash`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("a refused config created the data dir")
	}
	// Tokens: never in the URL (it is printed and kept in the git cache),
	// never over plain http.
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cr3t-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ config, want string }{
		{"repo: https://bot:s3cr3t-token@git.example/fleet.git\n", "the URL carries a user name, password or token"},
		{"repo: https://s3cr3t-token@git.example/fleet.git\n", "the URL carries a user name, password or token"},
		{"repo: git://s3cr3t-token@git.example/fleet.git\n", "the URL carries a user name, password or token"},
		{"repo: ssh://git:s3cr3t-token@git.example/fleet.git\n", "the URL carries a user name, password or token"},
		{"repo: http://git.example/fleet.git\ngit:\n  tokenFile: " + tokenFile + "\n", "git.tokenFile: a token is sent over https only"},
		{"repo: x\nsimHosts: real\n", "simHosts: only with sim"},
		{"repo: x\nsimEdge: 127.0.0.1:6000\n", "simEdge: only with sim"},
		{"repo: x\nsim: 127.0.0.1:0\nsimEdge: 0.0.0.0:6000\n", `simEdge "0.0.0.0:6000": the edge listens on 127.0.0.1 only`},
		{"repo: x\nsim: 127.0.0.1:0\nsimHosts: vm\n", `simHosts "vm": want in-process or real`},
	} {
		if err := os.WriteFile(cfgPath, []byte(tc.config), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := opke(t, "serve", "--config", cfgPath, "--data-dir", filepath.Join(dir, "data"))
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "s3cr3t-token") {
			t.Errorf("config %q: exit %d\n%s", tc.config, code, stderr)
		}
	}
	if err := os.WriteFile(cfgPath, []byte("repo: x\nrepoo: y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := opke(t, "serve", "--config", cfgPath); code != exitUsage || !strings.Contains(stderr, "field repoo not found") {
		t.Errorf("an unknown field: exit %d\n%s", code, stderr)
	}
}

// TestServeConfigMerge: the hardening settings reach the daemon's config
// from the file, and a flag given wins over the file.
func TestServeConfigMerge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	hash := strings.Repeat("ab", 20)
	body := "repo: https://git.example/fleet.git\nforkPullRequests: true\nlimits:\n  maxClusters: 5\n  maxFleetMiB: 6\n  maxFetchMiB: 7\n  maxObjectMiB: 3\n  maxInflatedMiB: 50\n  maxPullRequestServers: 12\nsignaturePolicy:\n  allowRewrite: " + hash + "\ngcPercent: 40\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	file := newServeConfig()
	if err := file.fromFile(path); err != nil {
		t.Fatal(err)
	}
	cfg := newServeConfig()
	fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	cfg.addFlags(fl)
	if err := fl.Parse([]string{"--max-fetch-mib", "9", "--max-inflated-mib", "60"}); err != nil {
		t.Fatal(err)
	}
	cfg.merge(fl, file)
	type merged struct {
		Forks                                               bool
		Clusters, Fleet, Fetch, Object, Inflated, PRs, GCPc int
		Rewrite                                             string
	}
	got := merged{cfg.ForkPullRequests, cfg.Limits.MaxClusters, cfg.Limits.MaxFleetMiB, cfg.Limits.MaxFetchMiB, cfg.Limits.MaxObjectMiB, cfg.Limits.MaxInflatedMiB,
		cfg.Limits.MaxPullRequestServers, cfg.GCPercent, cfg.SignaturePolicy.AllowRewrite}
	want := merged{true, 5, 6, 9, 3, 60, 12, 40, hash}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("merged config (-want +got):\n%s", d)
	}
	if defaults := newServeConfig(); defaults.Limits.MaxClusters != 20_000 || defaults.Limits.MaxFleetMiB != 32 || defaults.Limits.MaxFetchMiB != 128 ||
		defaults.Limits.MaxObjectMiB != 32 || defaults.Limits.MaxInflatedMiB != 256 || defaults.Limits.MaxPullRequestServers != 1000 ||
		defaults.Limits.MaxConnsPerClient != 32 {
		t.Errorf("default limits %+v", defaults.Limits)
	}
	// The setting and flag of before, now the default, still start.
	if err := os.WriteFile(path, []byte("repo: https://git.example/fleet.git\nskipForkPullRequests: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := newServeConfig()
	if err := old.fromFile(path); err != nil || !old.SkipForkPullRequests || old.ForkPullRequests {
		t.Errorf("an older config with skipForkPullRequests: %v, %+v", err, old)
	}
	fl = pflag.NewFlagSet("serve", pflag.ContinueOnError)
	newServeConfig().addFlags(fl)
	if err := fl.Parse([]string{"--skip-fork-prs"}); err != nil {
		t.Errorf("--skip-fork-prs: %v", err)
	}
}

// TestGCPercent: the collector's target is the config's, else the
// environment's GOGC (left as the runtime applied it), else the default.
func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		config   int
		env      string
		want     int
		wantFrom string
	}{
		{0, "", defaultGCPercent, "default"},
		{0, "200", 0, "GOGC"},
		{0, "off", 0, "GOGC"},
		{80, "", 80, "config"},
		{80, "200", 80, "config"},
	} {
		pct, from := gcPercent(tc.config, tc.env)
		if pct != tc.want || from != tc.wantFrom {
			t.Errorf("gcPercent(%d, %q) = %d, %q; want %d, %q", tc.config, tc.env, pct, from, tc.want, tc.wantFrom)
		}
	}
}

// TestEdgeBeside: the in-process simulator's edge is two ports past its
// APIs (make run's 5050 and 5052, as opke sim's), any free port when
// theirs is.
func TestEdgeBeside(t *testing.T) {
	for sim, want := range map[string]string{
		"127.0.0.1:5050":  "127.0.0.1:5052",
		"127.0.0.1:0":     "127.0.0.1:0",
		"127.0.0.1:65534": "127.0.0.1:0",
		"nonsense":        "127.0.0.1:0",
	} {
		if got := edgeBeside(sim); got != want {
			t.Errorf("edgeBeside(%q) = %q, want %q", sim, got, want)
		}
	}
}

// TestNoCloudsFileSaysWhere: a command that finds no clouds.yaml says how
// to name one.
func TestNoCloudsFileSaysWhere(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("OS_CLIENT_CONFIG_FILE", "")
	dir := t.TempDir()
	code, _, stderr := opke(t, "backup", "list", "--store", "--cloud", "prod", "--data-dir", dir)
	if code != exitFailure || !strings.Contains(stderr, "no clouds.yaml") || !strings.Contains(stderr, "--cloud-config FILE") {
		t.Errorf("exit %d, want the clouds named and how:\n%s", code, stderr)
	}
}

// TestAttachNeedsALiveDaemon: a data dir's endpoints.json is a running
// daemon's only while its process lives (one killed -9 leaves it).
func TestAttachNeedsALiveDaemon(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for pid, alive := range map[int]bool{os.Getpid(): true, dead.Process.Pid: false} {
		b, _ := json.Marshal(endpoints{PID: pid, Etcd: []string{"https://127.0.0.1:2379"}, Repo: "/fleet", Branch: "main", Cache: "/cache"})
		if err := os.WriteFile(filepath.Join(dir, endpointsFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if ep, err := attach(dir); (err == nil) != alive || alive && ep.Cache != "/cache" {
			t.Errorf("pid %d (alive %v): %+v, %v", pid, alive, ep, err)
		}
	}
}

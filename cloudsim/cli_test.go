package cloudsim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOpenStackCLI drives the simulator with the upstream openstack CLI
// (Debian's python3-openstackclient, python3-octaviaclient and
// python3-swiftclient, which .ci/run installs). `make sim-cli` runs it.
func TestOpenStackCLI(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("openstack")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the openstack CLI is not installed: %v", err)
		}
		t.Skip("the openstack CLI is not installed here; .ci/run installs it")
	}
	e := startEnv(t, Options{BootDelay: time.Second, Now: time.Now})
	file := filepath.Join(t.TempDir(), "etcd-snapshot.db")
	if err := os.WriteFile(file, []byte("snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(cloud string, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "OS_CLIENT_CONFIG_FILE="+filepath.Join(e.dir, "clouds.yaml"), "OS_CLOUD="+cloud, "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	as := func(cloud string, args ...string) string {
		t.Helper()
		out, err := run(cloud, args...)
		if err != nil {
			t.Fatalf("openstack %s (%s): %v\n%s", strings.Join(args, " "), cloud, err, out)
		}
		return out
	}
	osc := func(args ...string) string { t.Helper(); return as("sim", args...) }
	expect := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}
	expect(osc("token", "issue", "-f", "value", "-c", "expires"), "20")
	// The CLI's default columns of flavor list; it reads each flavor's
	// extra specs (os-extra_specs), which an admin sets.
	table := osc("flavor", "list")
	if got, want := tableHeader(table), []string{"ID", "Name", "RAM", "Disk", "Ephemeral", "VCPUs", "Is Public"}; !slices.Equal(got, want) {
		t.Errorf("flavor list's columns: %q, want %q\n%s", got, want, table)
	}
	expect(table, "m1.small")
	if out, err := run("sim", "flavor", "set", "--property", "hw:cpu_policy=dedicated", "m1.large"); err == nil || !strings.Contains(out, "403") {
		t.Errorf("a member's flavor set: %v\n%s, want refused (403)", err, out)
	}
	as("sim-admin", "flavor", "set", "--property", "hw:cpu_policy=dedicated", "--property", "trait:CUSTOM_GPU=required", "m1.large")
	expect(osc("flavor", "show", "m1.large", "-f", "value", "-c", "properties"), "hw:cpu_policy", "dedicated", "CUSTOM_GPU")
	as("sim-admin", "flavor", "unset", "--property", "hw:cpu_policy", "m1.large")
	if out := osc("flavor", "show", "m1.large", "-f", "json", "-c", "properties"); strings.Contains(out, "cpu_policy") || !strings.Contains(out, "CUSTOM_GPU") {
		t.Errorf("flavor show after unset: %s, want trait:CUSTOM_GPU only", out)
	}
	expect(osc("flavor", "list", "--long", "-f", "value", "-c", "Name", "-c", "Properties"), "m1.large", "CUSTOM_GPU")
	expect(osc("network", "create", "prod", "-f", "value", "-c", "status"), "ACTIVE")
	expect(osc("subnet", "create", "--network", "prod", "--subnet-range", "192.168.20.0/24", "prod", "-f", "value", "-c", "gateway_ip"), "192.168.20.1")
	expect(osc("server", "create", "--flavor", "m1.small", "--image", "flatcar", "--network", "prod", "--wait", "prod-worker-0", "-f", "value", "-c", "status"), "ACTIVE")
	expect(osc("--os-compute-api-version", "2.52", "server", "create", "--flavor", "m1.small", "--image", "flatcar", "--network", "prod",
		"--tag", "opke-cluster=prod", "--wait", "prod-worker-1", "-f", "value", "-c", "status"), "ACTIVE")
	tagged := osc("--os-compute-api-version", "2.26", "server", "list", "--tags", "opke-cluster=prod", "-f", "value", "-c", "Name")
	if strings.TrimSpace(tagged) != "prod-worker-1" {
		t.Errorf("server list --tags: %q, want only prod-worker-1", tagged)
	}
	expect(osc("loadbalancer", "create", "--name", "prod-api", "--vip-subnet-id", "prod", "--wait", "-f", "value", "-c", "provisioning_status"), "ACTIVE")
	// Octavia deletes the whole tree with --cascade (the CLI sends cascade=True).
	osc("loadbalancer", "listener", "create", "--name", "prod-api-6443", "--protocol", "TCP", "--protocol-port", "6443", "--wait", "prod-api")
	osc("loadbalancer", "pool", "create", "--name", "prod-api-pool", "--listener", "prod-api-6443", "--protocol", "TCP", "--lb-algorithm", "ROUND_ROBIN", "--wait")
	osc("loadbalancer", "delete", "--cascade", "--wait", "prod-api")
	if out := osc("loadbalancer", "list", "-f", "value", "-c", "name"); strings.Contains(out, "prod-api") {
		t.Errorf("the load balancer is still listed after a cascade delete:\n%s", out)
	}
	// A real cloud lists its external network under --external.
	expect(osc("network", "list", "--external", "-f", "value", "-c", "Name"), "public")
	if out := osc("network", "list", "--internal", "-f", "value", "-c", "Name"); strings.Contains(out, "public") {
		t.Errorf("network list --internal lists the external network:\n%s", out)
	}
	// A server on a port of its own shows the port's groups, not default.
	osc("security", "group", "create", "prod-nodes")
	osc("port", "create", "--network", "prod", "--security-group", "prod-nodes", "prod-port")
	osc("server", "create", "--flavor", "m1.small", "--image", "flatcar", "--port", "prod-port", "--wait", "prod-worker-2")
	if out := osc("server", "show", "prod-worker-2", "-f", "value", "-c", "security_groups"); !strings.Contains(out, "prod-nodes") || strings.Contains(out, "default") {
		t.Errorf("server show: security groups %q, want the port's (prod-nodes)", out)
	}
	expect(osc("container", "create", "opke-backups"), "opke-backups")
	expect(osc("object", "create", "opke-backups", file), file)
	// Cinder through the CLI's volume commands, and Nova's attachments.
	expect(osc("volume", "create", "--size", "1", "prod-data", "-f", "value", "-c", "status"), "creating")
	// As against a real Cinder, a volume's status moves on its own time
	// (a warm CLI asks sooner than the simulator's delays): a script waits
	// for it, as this one does.
	volumeStatus := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			got := strings.TrimSpace(osc("volume", "show", "prod-data", "-f", "value", "-c", "status"))
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the volume prod-data is %s after a minute, want %s", got, want)
			}
		}
	}
	volumeStatus("available")
	osc("server", "add", "volume", "prod-worker-0", "prod-data")
	volumeStatus("in-use")
	id := strings.TrimSpace(osc("server", "show", "prod-worker-0", "-f", "value", "-c", "id"))
	if out := osc("volume", "list", "-f", "value", "-c", "Attached to"); !strings.Contains(out, id) || !strings.Contains(out, "'/dev/vdb'") {
		t.Errorf("volume list: attached to %q, want %s at /dev/vdb", out, id)
	}
	osc("server", "delete", "--wait", "prod-worker-0")
	volumeStatus("available")
	expect(osc("server", "list", "-f", "value", "-c", "Name"), "prod-worker-1")
	if out := osc("server", "list", "-f", "value", "-c", "Name"); strings.Contains(out, "prod-worker-0") {
		t.Errorf("prod-worker-0 still listed after delete:\n%s", out)
	}
}

// tableHeader is the column names of the CLI's table output.
func tableHeader(out string) []string {
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		var cols []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cols = append(cols, strings.TrimSpace(c))
		}
		return cols
	}
	return nil
}

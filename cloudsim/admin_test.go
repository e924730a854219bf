package cloudsim

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/quotas"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
)

func adminCall(t *testing.T, method, url, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAdminControls drives the admin endpoint's counters reset, boot delay
// and snapshot over HTTP, as a benchmark harness in another process would.
func TestAdminControls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	admin := e.sim.AdminURL()

	if code := adminCall(t, http.MethodDelete, admin+"/counters", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE /counters: %d", code)
	}
	if n := len(e.sim.Counters()); n != 0 {
		t.Errorf("counters after reset: %d routes", n)
	}

	if code := adminCall(t, http.MethodPut, admin+"/boot-delay", `{"boot_delay": "1m"}`); code != http.StatusNoContent {
		t.Fatalf("PUT /boot-delay: %d", code)
	}
	net := makeTenantNet(t, e.user, "prod", "192.168.20.0/24")
	sv, err := servers.Create(ctx, e.user.compute, servers.CreateOpts{Name: "prod-worker-0", FlavorRef: "2",
		ImageRef: imageID(t, e.user, "flatcar"), Networks: []servers.Network{{UUID: net.network}}}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := servers.Get(ctx, e.user.compute, sv.ID).Extract(); got.Status != "BUILD" {
		t.Errorf("with a 1m boot delay: %s, want BUILD", got.Status)
	}
	e.clock.Advance(time.Minute)
	if got, _ := servers.Get(ctx, e.user.compute, sv.ID).Extract(); got.Status != "ACTIVE" {
		t.Errorf("after the boot delay: %s, want ACTIVE", got.Status)
	}
	// The write log has the server's create, with its client's agent, and
	// none of the reads: a console read is a POST that changes nothing.
	if _, err := servers.ShowConsoleOutput(ctx, e.user.compute, sv.ID, servers.ShowConsoleOutputOpts{Length: 10}).Extract(); err != nil {
		t.Fatalf("console output: %v", err)
	}
	resp, err := http.Get(admin + "/writes")
	if err != nil {
		t.Fatal(err)
	}
	var writes []Write
	if err := json.NewDecoder(resp.Body).Decode(&writes); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var routes []string
	for _, w := range writes {
		if !strings.Contains(w.Agent, "gophercloud") {
			t.Errorf("write %s by agent %q, want gophercloud's", w.Route, w.Agent)
		}
		routes = append(routes, w.Route)
	}
	if slices.Contains(routes, "POST /compute/v2.1/servers/{id}/action") {
		t.Errorf("write log %v holds the console read", routes)
	}
	if want := []string{"POST /compute/v2.1/servers"}; len(routes) == 0 || !slices.Equal(routes[len(routes)-1:], want) || slices.Contains(routes, "GET /compute/v2.1/servers/{id}") {
		t.Errorf("write log %v, want it to end with %v and hold no read", routes, want)
	}

	if code := adminCall(t, http.MethodPut, admin+"/boot-delay", `{"boot_delay": "soon"}`); code != http.StatusBadRequest {
		t.Errorf("a bad boot delay: %d, want 400", code)
	}

	if code := adminCall(t, http.MethodPost, admin+"/snapshot", ""); code != http.StatusNoContent {
		t.Fatalf("POST /snapshot: %d", code)
	}
	state, err := os.ReadFile(filepath.Join(e.dir, "state.json"))
	if err != nil || !strings.Contains(string(state), sv.ID) {
		t.Errorf("state.json after a snapshot lacks the server (%v)", err)
	}
}

// TestQuotasOfNeutronAndOctavia: an admin sets a project's limits through
// the real quota API; the next create over them is refused as each service
// refuses it (Neutron 409 OverQuota, Octavia 403).
func TestQuotasOfNeutronAndOctavia(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	project := tokenProject(t, e.user)
	net := makeTenantNet(t, e.user, "prod", "192.168.20.0/24")
	one := 1
	q, err := quotas.Update(ctx, e.admin.network, project, quotas.UpdateOpts{Network: &one}).Extract()
	if err != nil || q.Network != 1 {
		t.Fatalf("set the network quota: %+v %v", q, err)
	}
	if _, err := quotas.Update(ctx, e.user.network, project, quotas.UpdateOpts{Network: &one}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Errorf("a member sets quotas: %v, want 403", err)
	}
	_, err = networks.Create(ctx, e.user.network, networks.CreateOpts{Name: "second"}).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusConflict) || !strings.Contains(err.Error(), "OverQuota") {
		t.Errorf("a network over quota: %v, want 409 OverQuota", err)
	}

	e.sim.mu.Lock()
	(*e.sim.w.Quotas[project])["load_balancer"] = 0 // Octavia's quota API is not simulated
	e.sim.mu.Unlock()
	_, err = loadbalancers.Create(ctx, e.user.lb, loadbalancers.CreateOpts{Name: "prod-api", VipSubnetID: net.subnet}).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Errorf("a load balancer over quota: %v, want 403", err)
	}
}

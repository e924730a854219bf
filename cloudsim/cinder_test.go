package cloudsim

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/snapshots"
	"github.com/gophercloud/gophercloud/v2/openstack/blockstorage/v3/volumes"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/volumeattach"
)

// What the contract suite cannot hold the simulator to (a real cloud's
// timing, quotas and restarts are its own): volumes and snapshots take
// Options.BootDelay to settle, and an attachment too; Cinder's quotas
// refuse with 413; the state survives a restart; delete_on_termination
// deletes a volume with its server; the microversion is checked.

func volumeStatus(t *testing.T, c *clients, id string) string {
	t.Helper()
	v, err := volumes.Get(context.Background(), c.volume, id).Extract()
	if err != nil {
		t.Fatalf("get volume %s: %v", id, err)
	}
	return v.Status
}

func TestCinderTakesItsTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{BootDelay: 10 * time.Second})
	v, err := volumes.Create(ctx, e.user.volume, volumes.CreateOpts{Name: "data", Size: 1}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	net := makeTenantNet(t, e.user, "vol", "10.9.0.0/24")
	sv, err := servers.Create(ctx, e.user.compute, servers.CreateOpts{Name: "w", FlavorRef: "2", ImageRef: imageID(t, e.user, "flatcar"),
		Networks: []servers.Network{{UUID: net.network}}}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	got = append(got, volumeStatus(t, e.user, v.ID))
	e.clock.Advance(10 * time.Second)
	got = append(got, volumeStatus(t, e.user, v.ID))
	if _, err := volumeattach.Create(ctx, e.user.compute, sv.ID, volumeattach.CreateOpts{VolumeID: v.ID}).Extract(); err != nil {
		t.Fatal(err)
	}
	got = append(got, volumeStatus(t, e.user, v.ID))
	e.clock.Advance(10 * time.Second)
	got = append(got, volumeStatus(t, e.user, v.ID))
	sn, err := snapshots.Create(ctx, e.user.volume, snapshots.CreateOpts{VolumeID: v.ID, Force: true}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, "snapshot "+sn.Status)
	e.clock.Advance(10 * time.Second)
	if sn, err = snapshots.Get(ctx, e.user.volume, sn.ID).Extract(); err != nil {
		t.Fatal(err)
	}
	got = append(got, "snapshot "+sn.Status)
	if err := volumeattach.Delete(ctx, e.user.compute, sv.ID, v.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	got = append(got, volumeStatus(t, e.user, v.ID))
	e.clock.Advance(10 * time.Second)
	got = append(got, volumeStatus(t, e.user, v.ID))
	want := []string{"creating", "available", "attaching", "in-use", "snapshot creating", "snapshot available", "detaching", "available"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
}

func TestCinderQuotas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	if _, err := volumes.Create(ctx, e.user.volume, volumes.CreateOpts{Name: "huge", Size: 1001}, nil).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusRequestEntityTooLarge) {
		t.Errorf("a volume over the gigabytes quota: %v, want 413", err)
	}
	for i := range 10 {
		if _, err := volumes.Create(ctx, e.user.volume, volumes.CreateOpts{Size: 1}, nil).Extract(); err != nil {
			t.Fatalf("volume %d: %v", i, err)
		}
	}
	if _, err := volumes.Create(ctx, e.user.volume, volumes.CreateOpts{Size: 1}, nil).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusRequestEntityTooLarge) {
		t.Errorf("an 11th volume: %v, want 413", err)
	}
	// the admin's project has its own
	if _, err := volumes.Create(ctx, e.admin.volume, volumes.CreateOpts{Size: 1}, nil).Extract(); err != nil {
		t.Errorf("the admin project's first volume: %v", err)
	}
}

func TestCinderSurvivesARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	net := makeTenantNet(t, e.user, "vol", "10.9.1.0/24")
	sv, err := servers.Create(ctx, e.user.compute, servers.CreateOpts{Name: "w", FlavorRef: "2", ImageRef: imageID(t, e.user, "flatcar"),
		Networks: []servers.Network{{UUID: net.network}}}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	keep, err := volumes.Create(ctx, e.user.volume, volumes.CreateOpts{Name: "keep", Size: 1}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	gone, err := volumes.Create(ctx, e.user.volume, volumes.CreateOpts{Name: "gone", Size: 1}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	volumeStatus(t, e.user, keep.ID) // settles both
	if _, err := volumeattach.Create(ctx, e.user.compute, sv.ID, volumeattach.CreateOpts{VolumeID: keep.ID}).Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := volumeattach.Create(ctx, e.user.compute, sv.ID, volumeattach.CreateOpts{VolumeID: gone.ID, DeleteOnTermination: true}).Extract(); err != nil {
		t.Fatal(err)
	}
	volumeStatus(t, e.user, keep.ID)
	e.restart(t)
	pages, err := volumeattach.List(e.user.compute, sv.ID).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	atts, _ := volumeattach.ExtractVolumeAttachments(pages)
	devices := map[string]string{}
	for _, a := range atts {
		devices[a.VolumeID] = a.Device
	}
	if d := cmp.Diff(map[string]string{keep.ID: "/dev/vdb", gone.ID: "/dev/vdc"}, devices); d != "" {
		t.Errorf("attachments after a restart (-want +got):\n%s", d)
	}
	if err := servers.Delete(ctx, e.user.compute, sv.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if s := volumeStatus(t, e.user, keep.ID); s != "available" {
		t.Errorf("the deleted server's volume is %s, want available", s)
	}
	if _, err := volumes.Get(ctx, e.user.volume, gone.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("the volume attached with delete_on_termination: %v, want 404", err)
	}
}

func TestCinderRequests(t *testing.T) {
	t.Parallel()
	e := startEnv(t, Options{})
	token := e.user.provider.Token()
	project := inspect(e.sim, func(w *world) string { return w.DemoProject })
	for _, tc := range []struct {
		name, path, version string
		want                int
	}{
		{"the newest microversion", "/volume/v3/" + project + "/volumes", "volume 3.70", http.StatusOK},
		{"past Zed's", "/volume/v3/" + project + "/volumes", "volume 3.71", http.StatusNotAcceptable},
		{"another project", "/volume/v3/" + newHex() + "/volumes", "", http.StatusBadRequest},
		{"a missing snapshot", "/volume/v3/" + project + "/snapshots/" + newID(), "", http.StatusNotFound},
		{"the default type", "/volume/v3/" + project + "/types/default", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, e.sim.URL()+tc.path, nil)
			req.Header.Set("X-Auth-Token", token)
			if tc.version != "" {
				req.Header.Set("OpenStack-API-Version", tc.version)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s: %s, want %d", tc.path, resp.Status, tc.want)
			}
		})
	}
}

func TestCinderActions(t *testing.T) {
	t.Parallel()
	e := startEnv(t, Options{})
	ctx := context.Background()
	v, err := volumes.Create(ctx, e.user.volume, volumes.CreateOpts{Name: "data", Size: 1}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	volumeStatus(t, e.user, v.ID)
	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"an unknown action", map[string]any{"os-reset_status": map[string]any{"status": "error"}}, "There is no such action: os-reset_status"},
		{"a size that is no number", map[string]any{"os-extend": map[string]any{"new_size": "two"}}, "Invalid input for field/attribute new_size"},
		{"a smaller size", map[string]any{"os-extend": map[string]any{"new_size": 1}}, "New size for extend must be greater than current size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.user.volume.Post(ctx, e.user.volume.ServiceURL("volumes", v.ID, "action"), tc.body, nil, &gophercloud.RequestOpts{OkCodes: []int{202}})
			if !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want 400 %q", tc.body, err, tc.want)
			}
		})
	}
}

package cloudsim

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/containers"
	"github.com/gophercloud/gophercloud/v2/openstack/objectstorage/v1/objects"
)

func TestSwiftObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startEnv(t, Options{})
	c := e.user.swift
	if _, err := containers.Create(ctx, c, "opke-backups", nil).Extract(); err != nil {
		t.Fatalf("create container: %v", err)
	}
	for _, name := range []string{"prod/2026-11-21T10:00:00Z.db", "prod/2026-11-21T11:00:00Z.db", "demo/2026-11-21T10:00:00Z.db"} {
		if _, err := objects.Create(ctx, c, "opke-backups", name, objects.CreateOpts{Content: strings.NewReader("snapshot of " + name)}).Extract(); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	pages, err := objects.List(c, "opke-backups", objects.ListOpts{Prefix: "prod/"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := objects.ExtractNames(pages)
	if diff := cmp.Diff([]string{"prod/2026-11-21T10:00:00Z.db", "prod/2026-11-21T11:00:00Z.db"}, names); diff != "" {
		t.Errorf("list with prefix (-want +got):\n%s", diff)
	}
	res := objects.Download(ctx, c, "opke-backups", "prod/2026-11-21T11:00:00Z.db", nil)
	body, err := res.ExtractContent()
	if err != nil || string(body) != "snapshot of prod/2026-11-21T11:00:00Z.db" {
		t.Fatalf("get: %q %v", body, err)
	}
	if _, err := containers.Delete(ctx, c, "opke-backups").Extract(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("delete a container with objects: %v, want 409", err)
	}
	if _, err := objects.Delete(ctx, c, "opke-backups", "demo/2026-11-21T10:00:00Z.db", nil).Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Download(ctx, c, "opke-backups", "demo/2026-11-21T10:00:00Z.db", nil).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("get after delete: %v, want 404", err)
	}

	// Another project's account is forbidden.
	req, _ := http.NewRequest(http.MethodGet, e.sim.URL()+"/object-store/v1/AUTH_someoneelse/opke-backups", nil)
	req.Header.Set("X-Auth-Token", e.user.provider.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("another account: %s, want 403", resp.Status)
	}
}

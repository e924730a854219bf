package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"opke.dev/opke/internal/proctest"
)

// identity is a CSI plugin's Identity service, as the Cinder CSI node
// plugin answers it.
type identity struct {
	csi.UnimplementedIdentityServer
	name string
}

func (i identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.name, VendorVersion: "v1.35.0"}, nil
}

// servePlugin serves a CSI plugin's Identity on sock until the test ends.
func servePlugin(t *testing.T, sock, name string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, identity{name: name})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
}

// shortDir is a folder whose sockets' paths fit a unix socket's 107 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// kubelet dials the registration socket as the kubelet's plugin watcher
// does, once it answers.
func kubelet(t *testing.T, sock string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := registerapi.NewRegistrationClient(conn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.GetInfo(ctx, &registerapi.InfoRequest{})
		cancel()
		if err == nil {
			return client
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registration socket %s does not answer: %v", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func healthz(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestRegistration: the plugin's name read from its socket (which comes
// up after the registrar), the kubelet told the plugin and its endpoint,
// /healthz 503 until the kubelet registered it, 200 after; the socket
// gone when the registrar stops.
func TestRegistration(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	plugin, registry := filepath.Join(dir, "csi.sock"), filepath.Join(dir, "registry")
	if err := os.Mkdir(registry, 0o700); err != nil {
		t.Fatal(err)
	}
	// a stale socket of an earlier run
	if err := os.WriteFile(filepath.Join(registry, "cinder.csi.openstack.org-reg.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	health := proctest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, options{csiAddress: plugin, pluginRegistrationPath: registry, httpEndpoint: health,
			kubeletRegistrationPath: "/var/lib/kubelet/plugins/cinder.csi.openstack.org/csi.sock"}, slog.New(slog.DiscardHandler))
	}()
	time.Sleep(300 * time.Millisecond) // the registrar waits for the plugin
	servePlugin(t, plugin, "cinder.csi.openstack.org")

	sock := filepath.Join(registry, "cinder.csi.openstack.org-reg.sock")
	k := kubelet(t, sock)
	info, err := k.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &registerapi.PluginInfo{Type: "CSIPlugin", Name: "cinder.csi.openstack.org",
		Endpoint: "/var/lib/kubelet/plugins/cinder.csi.openstack.org/csi.sock", SupportedVersions: []string{"1.0.0"}}
	if d := cmp.Diff(want, info, protocmp.Transform()); d != "" {
		t.Errorf("GetInfo (-want +got):\n%s", d)
	}
	if code := healthz(t, health); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz before the registration: %d, want 503", code)
	}
	if _, err := k.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if code := healthz(t, health); code != http.StatusOK {
		t.Errorf("/healthz once registered: %d, want 200", code)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("run: %v, want it cancelled", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the registration socket after the stop: %v, want it gone", err)
	}
}

// TestRefusedByTheKubelet: a refusal ends the registrar with the
// kubelet's reason.
func TestRefusedByTheKubelet(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	plugin := filepath.Join(dir, "csi.sock")
	servePlugin(t, plugin, "cinder.csi.openstack.org")
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), options{csiAddress: plugin, pluginRegistrationPath: dir,
			kubeletRegistrationPath: "/var/lib/kubelet/plugins/x/csi.sock"}, slog.New(slog.DiscardHandler))
	}()
	k := kubelet(t, filepath.Join(dir, "cinder.csi.openstack.org-reg.sock"))
	if _, err := k.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{Error: "no supported version"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "no supported version") {
			t.Errorf("run: %v, want the kubelet's refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the registrar goes on after the kubelet refused the plugin")
	}
}

// TestRunRefuses: no kubelet registration path, a plugin with no name,
// a plugin that never comes.
func TestRunRefuses(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	nameless := filepath.Join(dir, "nameless.sock")
	servePlugin(t, nameless, "")
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		o    options
		want string
	}{
		{"no registration path", context.Background(), options{csiAddress: nameless, pluginRegistrationPath: dir}, "--kubelet-registration-path is required"},
		{"a nameless plugin", context.Background(), options{csiAddress: nameless, pluginRegistrationPath: dir, kubeletRegistrationPath: "/k"}, "has no name"},
		{"no plugin", short, options{csiAddress: filepath.Join(dir, "none.sock"), pluginRegistrationPath: dir, kubeletRegistrationPath: "/k"}, "never answered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.ctx, tc.o, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want %q", err, tc.want)
			}
		})
	}
}

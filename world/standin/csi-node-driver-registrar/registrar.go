package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type options struct {
	csiAddress              string
	kubeletRegistrationPath string
	pluginRegistrationPath  string
	httpEndpoint            string
	timeout                 time.Duration
}

// supportedVersions are the CSI spec versions the kubelet is told the
// plugin speaks, as the upstream registrar tells it.
var supportedVersions = []string{"1.0.0"}

// errRefused is the kubelet's refusal of the plugin.
var errRefused = errors.New("the kubelet refused the plugin")

// run registers the plugin and serves the registration API until ctx ends
// or the kubelet refuses the plugin; the registration socket is removed
// when it returns.
func run(ctx context.Context, o options, log *slog.Logger) error {
	if o.kubeletRegistrationPath == "" {
		return errors.New("--kubelet-registration-path is required: the plugin's socket as the kubelet sees it")
	}
	if o.timeout <= 0 {
		o.timeout = time.Second
	}
	name, err := pluginName(ctx, o, log)
	if err != nil {
		return err
	}
	log.Info("the CSI plugin answered", "driver", name, "socket", o.csiAddress)
	sock := filepath.Join(o.pluginRegistrationPath, name+"-reg.sock")
	// A socket left by an earlier run would refuse the bind.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the old registration socket: %w", err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("the registration socket: %w", err)
	}
	defer os.Remove(sock)
	reg := &registrar{name: name, endpoint: o.kubeletRegistrationPath, log: log, refused: make(chan error, 1)}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, reg)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		// The kubelet's call under way (its refusal's) gets its answer.
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(time.Second):
			srv.Stop()
		}
	}()
	log.Info("serving the kubelet's plugin registration", "socket", sock, "endpoint", o.kubeletRegistrationPath)

	if o.httpEndpoint != "" {
		hl, err := net.Listen("tcp", o.httpEndpoint)
		if err != nil {
			return fmt.Errorf("the health endpoint: %w", err)
		}
		hs := &http.Server{Handler: reg.health(sock), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(hl) }()
		defer hs.Close()
	}
	select {
	case <-ctx.Done():
		log.Info("stopping: the registration socket goes")
		return ctx.Err()
	case err := <-reg.refused:
		return err
	case err := <-served:
		return fmt.Errorf("the registration server: %w", err)
	}
}

// pluginName asks the CSI plugin its name, waiting for its socket (the
// plugin may start after this container).
func pluginName(ctx context.Context, o options, log *slog.Logger) (string, error) {
	conn, err := grpc.NewClient("unix://"+o.csiAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("the CSI plugin's socket %s: %w", o.csiAddress, err)
	}
	defer conn.Close()
	client := csi.NewIdentityClient(conn)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		callCtx, cancel := context.WithTimeout(ctx, o.timeout)
		info, err := client.GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			if info.GetName() == "" {
				return "", fmt.Errorf("the CSI plugin at %s has no name", o.csiAddress)
			}
			return info.GetName(), nil
		}
		log.Info("waiting for the CSI plugin", "socket", o.csiAddress, "err", err)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the CSI plugin at %s never answered: %w", o.csiAddress, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// registrar serves the kubelet's registration API for one plugin.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
	log            *slog.Logger
	registered     atomic.Bool
	refused        chan error
	once           sync.Once
}

// GetInfo names the plugin and its socket, as the kubelet dials it.
func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	r.log.Info("the kubelet asks for the plugin's information")
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint, SupportedVersions: supportedVersions}, nil
}

// NotifyRegistrationStatus hears the kubelet's answer: a refusal ends
// the registrar (its pod's restart registers again).
func (r *registrar) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.GetPluginRegistered() {
		r.registered.Store(true)
		r.log.Info("the kubelet registered the plugin", "driver", r.name)
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	r.registered.Store(false)
	err := fmt.Errorf("%w %s: %s", errRefused, r.name, st.GetError())
	r.log.Error("the kubelet refused the plugin; stopping, to be started again", "driver", r.name, "err", st.GetError())
	r.once.Do(func() { r.refused <- err })
	return &registerapi.RegistrationStatusResponse{}, nil
}

// health answers /healthz: 200 while the registration socket is there and
// the kubelet registered the plugin.
func (r *registrar) health(sock string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if _, err := os.Stat(sock); err != nil {
			http.Error(w, "the registration socket is gone: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !r.registered.Load() {
			http.Error(w, "the kubelet has not registered the plugin", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

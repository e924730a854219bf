// Command csi-node-driver-registrar is the test world's stand-in for
// kubernetes-csi's csi-node-driver-registrar, built by make world into
// the image the product names (registry.k8s.io/sig-storage/
// csi-node-driver-registrar, at /csi-node-driver-registrar as upstream's
// image has it). It registers a CSI node plugin with the kubelet as
// upstream's does: it runs beside the plugin
// in its DaemonSet's pod, asks the plugin its name (CSI Identity
// GetPluginInfo) on the plugin's socket, and serves the kubelet's plugin
// registration API (pluginregistration.v1) on a socket in the kubelet's
// plugins_registry folder: GetInfo names the plugin and the plugin's
// socket as the kubelet sees it, NotifyRegistrationStatus hears whether
// the kubelet took it (a refusal ends the process, so that the pod starts
// it again). It stands in for upstream's because the module proxy serves no
// version of kubernetes-csi/node-driver-registrar (its v2 releases have no
// /v2 module path), and every image of the test world is built from
// source (cloudsim/machine/LIMITS.md). No real host runs it.
//
//	csi-node-driver-registrar --csi-address=/csi/csi.sock \
//	  --kubelet-registration-path=/var/lib/kubelet/plugins/cinder.csi.openstack.org/csi.sock \
//	  --plugin-registration-path=/registration --http-endpoint=:9809
//
// /healthz on the HTTP endpoint answers 200 while the registration socket
// is there and the kubelet took the plugin, 503 otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.csiAddress, "csi-address", "/run/csi/socket", "the CSI plugin's socket, as this container sees it")
	flag.StringVar(&o.kubeletRegistrationPath, "kubelet-registration-path", "", "the CSI plugin's socket as the kubelet sees it, on the node (required)")
	flag.StringVar(&o.pluginRegistrationPath, "plugin-registration-path", "/registration", "the kubelet's plugins_registry folder, as this container sees it")
	flag.StringVar(&o.httpEndpoint, "http-endpoint", "", "host:port of the /healthz endpoint (none when empty)")
	flag.DurationVar(&o.timeout, "timeout", time.Second, "each call to the CSI plugin's timeout")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "csi-node-driver-registrar:", err)
		os.Exit(1)
	}
}

package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"opke.dev/opke/cloudsim"
)

func (a *app) simCommand() *cobra.Command {
	opts := cloudsim.Options{}
	var state string
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the OpenStack simulator",
		Long: `Run OPKE's OpenStack simulator: Keystone, Nova, Glance, Neutron, Octavia and Swift
over their real REST APIs on 127.0.0.1, so that gophercloud and the openstack CLI
work against it unchanged. It writes STATE/clouds.yaml (clouds "sim" and
"sim-admin") and STATE/sim.json (the admin endpoint for counters and faults,
and the edge: the SOCKS5 proxy on 127.0.0.1 that alone reaches simulated
floating IPs), keeps its resources in STATE/state.json and its hosts' roots in
STATE/hosts across restarts, and runs until interrupted.

With --hosts real (root only) every server is a real Linux machine: a container
with systemd booted from OPKE's host image (built from Debian's packages on first
use, then cached), its user_data applied by Debian's Ignition, on networks,
routers, security groups and load balancers made of network namespaces and
nftables. They are reached as a cloud's are: through floating IPs, here by the
edge. Stopping the simulator stops them (a restart boots them again) and
removes every namespace.`,
		Example: `  opke sim --listen 127.0.0.1:5050 --state .opke/sim
  OS_CLIENT_CONFIG_FILE=.opke/sim/clouds.yaml OS_CLOUD=sim openstack server list

  sudo opke sim --hosts real --state .opke/sim
  ssh -o ProxyCommand='nc -X 5 -x 127.0.0.1:5052 %h %p' core@FLOATING_IP`,
		Args: argsAtMost(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.StateDir = state
			opts.Logger = a.logger
			sim, err := cloudsim.Start(cmd.Context(), opts)
			if err != nil {
				return fmt.Errorf("start simulator: %w", err)
			}
			fmt.Fprintf(a.stdout, "OpenStack simulator at %s (admin %s, SOCKS5 edge %s)\nclouds.yaml: %s (clouds sim, sim-admin)\n",
				sim.URL(), sim.AdminURL(), sim.Edge(), filepath.Join(state, "clouds.yaml"))
			<-cmd.Context().Done()
			if err := sim.Close(); err != nil {
				return fmt.Errorf("stop simulator: %w", err)
			}
			a.logger.Info("simulator stopped; state saved", "state", state)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", "127.0.0.1:5050", "address of the APIs (127.0.0.1 only)")
	f.StringVar(&opts.AdminListen, "admin-listen", "127.0.0.1:0", "address of the admin endpoint (127.0.0.1 only)")
	f.StringVar(&opts.EdgeListen, "edge-listen", "127.0.0.1:5052", "address of the SOCKS5 edge to the simulated floating IPs (127.0.0.1 only)")
	f.StringVar(&state, "state", filepath.Join(".opke", "sim"), "state folder: clouds.yaml, sim.json, state.json")
	f.DurationVar(&opts.BootDelay, "boot-delay", 2*time.Second, "time a server stays in BUILD and a load balancer in PENDING_*")
	f.DurationVar(&opts.TokenTTL, "token-ttl", time.Hour, "lifetime of a Keystone token")
	f.IntVar(&opts.Hypervisors, "hypervisors", 8, "compute hosts that anti-affinity groups spread over")
	f.StringVar(&opts.Hosts, "hosts", cloudsim.HostsInProcess, "what a server is: in-process (a simulated host) or real (a machine: root, runc, nftables)")
	f.StringVar(&opts.ImageCache, "image-cache", "", "where the real hosts' image is cached (default $OPKE_CACHE/images or ~/.cache/opke/images)")
	return cmd
}

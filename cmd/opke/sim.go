package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"opke.dev/opke/cloudsim"
	"opke.dev/opke/cloudsim/machine"
	"opke.dev/opke/schemas"
	worldbuild "opke.dev/opke/world"
)

func (a *app) simCommand() *cobra.Command {
	opts := cloudsim.Options{}
	var state string
	var mirror, clean bool
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
removes every namespace.

With --mirror (real hosts only) a registry on the public network serves the images
of make world's e2e set (taken from its cache, or built: over an hour the first
time on two cores), and a file mirror beside it the kubelet and the CNI plugins
as upstream lays out their downloads, as an air-gapped cloud's mirrors:
STATE/mirror.yaml holds the registryMirror and downloadMirror a spec names to
take from them (their CA kept across restarts).

With --clean-hosts (root) it starts nothing: it removes what real-host
simulators killed instead of stopped left on this machine (their machines,
mounts and network namespaces) and exits. Run it only when no simulator
with real hosts runs here: theirs would go too.`,
		Example: `  opke sim --listen 127.0.0.1:5050 --state .opke/sim
  OS_CLIENT_CONFIG_FILE=.opke/sim/clouds.yaml OS_CLOUD=sim openstack server list

  sudo opke sim --hosts real --state .opke/sim
  ssh -o ProxyCommand='nc -X 5 -x 127.0.0.1:5052 %h %p' core@FLOATING_IP

  sudo opke sim --hosts real --mirror --state .opke/sim
  cat .opke/sim/mirror.yaml   # the registryMirror and downloadMirror for a spec

  sudo opke sim --clean-hosts   # after a simulator or make e2e was killed`,
		Args: argsAtMost(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if clean {
				swept, err := machine.Sweep(cmd.Context(), cloudsim.NamespacePrefix)
				fmt.Fprintf(a.stdout, "Removed %d machines, %d mounts, %d volumes' loop devices and %d network namespaces left by real-host simulators\n",
					swept.Machines, swept.Mounts, swept.Loops, swept.Namespaces)
				return err
			}
			if mirror && opts.Hosts != cloudsim.HostsReal {
				return usagef("--mirror: only with --hosts real (the mirror serves real machines)")
			}
			opts.StateDir = state
			opts.Logger = a.logger
			sim, err := cloudsim.Start(cmd.Context(), opts)
			if err != nil {
				return fmt.Errorf("start simulator: %w", err)
			}
			fmt.Fprintf(a.stdout, "OpenStack simulator at %s (admin %s, SOCKS5 edge %s)\nclouds.yaml: %s (clouds sim, sim-admin)\n",
				sim.URL(), sim.AdminURL(), sim.Edge(), filepath.Join(state, "clouds.yaml"))
			if mirror {
				m, err := startMirror(cmd.Context(), sim, state, a.logger)
				if err != nil {
					return errors.Join(fmt.Errorf("registry mirror: %w", err), sim.Close())
				}
				fmt.Fprintf(a.stdout, "Registry mirror at %s and file mirror at %s, serving make world's e2e set; a spec takes from them with the registryMirror and downloadMirror in %s\n",
					m.RegistryMirror.Endpoint, m.DownloadMirror.Endpoint, filepath.Join(state, MirrorFile))
			}
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
	f.BoolVar(&clean, "clean-hosts", false, "remove what killed real-host simulators left on this machine (root), then exit")
	f.BoolVar(&mirror, "mirror", false, "with --hosts real: serve make world's e2e set from a registry on the public network (STATE/mirror.yaml names it for a spec)")
	return cmd
}

// MirrorFile is the file in the simulator's state dir that holds the
// registryMirror of its registry and the downloadMirror of the file
// mirror beside it (opke sim --mirror).
const MirrorFile = "mirror.yaml"

// mirrors are what MirrorFile holds: a spec's registryMirror and
// downloadMirror, as YAML under spec.
type mirrors struct {
	RegistryMirror *schemas.RegistryMirror `yaml:"registryMirror"`
	DownloadMirror *schemas.DownloadMirror `yaml:"downloadMirror"`
}

// startMirror runs a registry on the simulator's public network, loads it
// with make world's e2e set (from the cache, else built), serves the set's
// downloads from the file mirror beside it, and writes the registryMirror
// and downloadMirror that name them into STATE/mirror.yaml.
func startMirror(ctx context.Context, sim *cloudsim.Sim, state string, log *slog.Logger) (*mirrors, error) {
	arts, err := worldbuild.Targets(worldbuild.E2E)
	if err != nil {
		return nil, err
	}
	log.Info("registry mirror: taking make world's e2e set from its cache (building what is missing)", "cache", worldbuild.DefaultCacheDir())
	built, err := worldbuild.New(worldbuild.DefaultCacheDir(), log).Ensure(ctx, arts)
	if err != nil {
		return nil, err
	}
	bin, ok := built.Binary("distribution-"+worldbuild.DistributionVersion, "registry")
	if !ok {
		return nil, errors.New("make world built no registry")
	}
	reg, err := sim.StartRegistry(ctx, cloudsim.PublicNetwork, bin, filepath.Join(state, "registry"))
	if err != nil {
		return nil, err
	}
	started := time.Now()
	if err := built.PushAll(ctx, reg.Client, reg.URL(), "", nil); err != nil {
		return nil, err
	}
	reg.ServeFiles(built.Files())
	log.Info("registry mirror loaded", "images", len(built.Images()), "files", len(built.Files()), "took", time.Since(started).Round(time.Second))
	m := &mirrors{
		RegistryMirror: &schemas.RegistryMirror{Endpoint: reg.URL(), CACert: string(reg.CACert)},
		DownloadMirror: &schemas.DownloadMirror{Endpoint: reg.FilesURL(), CACert: string(reg.CACert)},
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	header := "# The simulator's registry and file mirrors (opke sim --mirror): put under a cluster's spec.\n"
	if err := os.WriteFile(filepath.Join(state, MirrorFile), append([]byte(header), b...), 0o644); err != nil {
		return nil, err
	}
	return m, nil
}

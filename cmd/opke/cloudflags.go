package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"opke.dev/opke/cloud"
	"opke.dev/opke/cloudsim"
	"opke.dev/opke/sshx"
)

// cloudFlags are the flags of the commands that reach OpenStack and the
// hosts: which clouds.yaml, and how to reach floating IPs.
type cloudFlags struct {
	cloudConfig string
	simState    string
	socksProxy  string
}

func (f *cloudFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.cloudConfig, "cloud-config", "", "clouds.yaml (each spec's cloud picks its entry; default: OS_CLIENT_CONFIG_FILE or the standard locations)")
	fl.StringVar(&f.simState, "sim-state", "", "a running simulator's state dir: its clouds.yaml, and its SOCKS5 edge for the hosts")
	fl.StringVar(&f.socksProxy, "socks-proxy", "", "SOCKS5 proxy to floating IPs (socks5://127.0.0.1:PORT)")
}

// resolved is what the cloud flags come to.
type resolved struct {
	pool *cloud.Pool
	// dialer reaches floating IPs: through the proxy, or directly.
	dialer sshx.Dialer
	// simulator is set when the clouds are the simulator's.
	simulator bool
	// fromDaemon is set when the clouds are those of the daemon running on
	// the data dir (no cloud flag was given).
	fromDaemon bool
}

// resolve checks the flags and reads sim.json when --sim-state is set.
// Given none of the cloud flags, a command run on the data dir of a
// running daemon (dataDir; "" for serve itself) reaches the clouds the
// daemon reaches: its simulator, clouds.yaml and proxy.
func (f *cloudFlags) resolve(dataDir string) (*resolved, error) {
	if f.simState != "" && f.cloudConfig != "" {
		return nil, usagef("--sim-state and --cloud-config exclude each other (the simulator's state dir has its clouds.yaml)")
	}
	fromDaemon := false
	if f.simState == "" && f.cloudConfig == "" && f.socksProxy == "" && dataDir != "" {
		if ep, err := attach(dataDir); err == nil && (ep.SimState != "" || ep.CloudConfig != "") {
			own := *f
			own.simState, own.cloudConfig, own.socksProxy = ep.SimState, ep.CloudConfig, ep.SocksProxy
			f, fromDaemon = &own, true
		}
	}
	r := &resolved{pool: &cloud.Pool{File: f.cloudConfig}, fromDaemon: fromDaemon}
	if f.simState != "" {
		b, err := os.ReadFile(filepath.Join(f.simState, "sim.json"))
		if errors.Is(err, os.ErrNotExist) {
			return nil, usagef("--sim-state %s: no sim.json (is opke sim running with --state %s?)", f.simState, f.simState)
		}
		if err != nil {
			return nil, fmt.Errorf("--sim-state: %w", err)
		}
		var info cloudsim.Info
		if err := json.Unmarshal(b, &info); err != nil || info.Edge == "" {
			return nil, usagef("--sim-state %s: sim.json is not a simulator's", f.simState)
		}
		r.pool.File, r.simulator = filepath.Join(f.simState, "clouds.yaml"), true
		r.dialer.Proxy = info.Edge
	}
	if f.socksProxy != "" {
		u, err := url.Parse(f.socksProxy)
		if err != nil || (u.Scheme != "socks5" && u.Scheme != "socks5h") || u.Host == "" {
			return nil, usagef("--socks-proxy %q: want socks5://HOST:PORT", f.socksProxy)
		}
		r.dialer.Proxy = u.Host
	}
	return r, nil
}

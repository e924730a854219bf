package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/cloud"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

// HostUser is the account OPKE's key opens on every host (Ignition's).
const HostUser = "core"

// SSHHosts reaches a cluster's hosts over SSH through its gateway: the
// gateway's floating IP through Dialer (the SOCKS5 edge of the simulator,
// or direct under the allow list), then each host's fixed IP through the
// gateway. Host keys are the pinned ones in the store, or before any
// apply pinned them, the keys the server printed on its console.
type SSHHosts struct {
	Dialer sshx.Dialer
	// Parallel is how many hosts are read at once (default 8).
	Parallel int
}

// Checksums implements [HostReader]: one sha256sum per host, every path
// of the host in one command.
func (s SSHHosts) Checksums(ctx context.Context, t HostTarget, paths map[string][]string) (map[string]map[string]string, error) {
	signer, _, err := pki.SSHKey(ctx, t.KV, t.Cluster)
	if err != nil {
		return nil, err
	}
	gwKeys, err := hostKeys(ctx, t, t.Gateway.Name, t.Gateway.ID)
	if err != nil {
		return nil, err
	}
	gw, err := sshx.Dial(ctx, s.Dialer, netip.AddrPortFrom(t.Address, 22).String(), sshx.Auth{User: HostUser, Signer: signer, HostKeys: gwKeys})
	if err != nil {
		return nil, fmt.Errorf("gateway of %s: %w", t.Cluster, err)
	}
	defer gw.Close()

	out := map[string]map[string]string{}
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, cmp.Or(s.Parallel, 8))
	var wg sync.WaitGroup
	for _, host := range slices.Sorted(maps.Keys(paths)) {
		addr, ok := t.Hosts[host]
		if !ok || len(paths[host]) == 0 {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sums, err := s.read(ctx, t, gw, signer, host, addr, paths[host])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", host, err))
				return
			}
			out[host] = sums
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func (s SSHHosts) read(ctx context.Context, t HostTarget, gw *ssh.Client, signer ssh.Signer, host string, addr HostAddr, paths []string) (map[string]string, error) {
	keys, err := hostKeys(ctx, t, host, addr.ServerID)
	if err != nil {
		return nil, err
	}
	c, err := sshx.Jump(ctx, gw, netip.AddrPortFrom(addr.IP, 22).String(), sshx.Auth{User: HostUser, Signer: signer, HostKeys: keys})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stdout, err := sshx.Run(ctx, c, "sha256sum -- "+strings.Join(paths, " "))
	// sha256sum exits 1 when a file is missing and still sums the others.
	var exit *ssh.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitStatus() == 1) {
		return nil, err
	}
	return parseSums(stdout, paths)
}

// parseSums reads sha256sum's output: "<hex>  <path>" per line, for the
// paths asked only.
func parseSums(out []byte, paths []string) (map[string]string, error) {
	sums := map[string]string{}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\n")
		sum, path, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 || !slices.Contains(paths, path) {
			return nil, fmt.Errorf("sha256sum printed %s", strconv.Quote(line))
		}
		sums[path] = sum
	}
	return sums, nil
}

// hostKeys are a host's pinned keys, or its console's.
func hostKeys(ctx context.Context, t HostTarget, host, serverID string) ([]ssh.PublicKey, error) {
	pinned, err := t.KV.Get(ctx, t.KV.Key(t.Cluster, "hostkeys", host))
	switch {
	case err == nil:
		var keys []ssh.PublicKey
		for rest := pinned; len(rest) > 0; {
			k, _, _, r, err := ssh.ParseAuthorizedKey(rest)
			if err != nil {
				return nil, fmt.Errorf("pinned host key of %s: %w", host, err)
			}
			keys, rest = append(keys, k), r
		}
		return keys, nil
	case !errors.Is(err, state.ErrNotFound):
		return nil, err
	}
	console, err := servers.ShowConsoleOutput(ctx, t.Clients.Compute, serverID, servers.ShowConsoleOutputOpts{}).Extract()
	if err != nil {
		return nil, fmt.Errorf("console of %s: %w", host, err)
	}
	keys, err := sshx.HostKeysFromConsole(console)
	if err != nil {
		return nil, fmt.Errorf("console of %s: %w", host, err)
	}
	return keys, nil
}

// resync reads the files of a cluster's existing hosts: those the plan
// wants and those the ledger says were pushed.
func (p *Planner) resync(ctx context.Context, pl *Planned, clients *cloud.Clients) (map[string]map[string]string, error) {
	t, err := hostTarget(pl.Observed.Cluster, clients, pl.Observed.Cloud, p.Store.ReadOnly())
	if errors.Is(err, errNoGateway) {
		return nil, nil // no way in yet: nothing on the hosts to read
	}
	paths := map[string][]string{}
	addPath := func(host, path string) {
		if _, ok := t.Hosts[host]; ok && !slices.Contains(paths[host], path) {
			paths[host] = append(paths[host], path)
		}
	}
	for _, h := range pl.Desired.Hosts {
		for _, f := range h.Files {
			addPath(h.Name, f.Path)
		}
	}
	if pl.Ledger.Applied != nil {
		for host, files := range pl.Ledger.Applied.Files {
			for path := range files {
				addPath(host, path)
			}
		}
	}
	for host := range paths {
		slices.Sort(paths[host])
	}
	return p.Hosts.Checksums(ctx, t, paths)
}

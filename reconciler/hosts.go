package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

// HostUser is the account OPKE's key opens on every host (Ignition's).
const HostUser = "core"

// HostSessions reaches clusters' hosts over SSH through their gateways:
// the gateway's floating IP through Dialer (the SOCKS5 edge of the
// simulator, or direct under the allow list), then each host's fixed IP
// through the gateway. Connections are kept for the next step; hosts are
// dialled at once, each once however many steps want it. A host key is
// read from the server's console at first contact and pinned in the
// target's store (a plan's read-only view keeps it in memory), then
// checked on every connection.
type HostSessions struct {
	Dialer sshx.Dialer
	// Console reads a server's console output; nil: Nova's. A cloud whose
	// console cannot show host keys (Nova's fake driver, with hosts of the
	// simulator attached: cloudsim.Sim.ConsoleOutput) names another.
	Console func(ctx context.Context, serverID string) (string, error)
	// Parallel is how many hosts Checksums reads at once (default 8).
	Parallel int
	// BootTimeout bounds the wait for a new server's host at first
	// contact (default 5m): a server just created boots for a while
	// before its host keys are on its console and its sshd answers.
	BootTimeout time.Duration
	// KeepAlive is how often an idle connection is asked whether its
	// peer is still there (default 15s); one that does not answer within
	// as long is closed, so the next step dials afresh rather than wait on
	// a machine that rebooted or a path that broke.
	KeepAlive time.Duration

	mu      sync.Mutex
	signers map[string]ssh.Signer // by cluster
	conns   map[string]*hostConn  // by cluster/host
}

// hostConn is a connection to a host, or the dial that makes it.
type hostConn struct {
	ready chan struct{} // closed once ssh or err is set
	ssh   *ssh.Client
	err   error
	// sessions bounds the sessions open at once on the connection below
	// OpenSSH's MaxSessions (10): a session closed here is freed on the
	// server a moment later, so steps in parallel on one host would
	// otherwise be refused ("open failed").
	sessions chan struct{}
}

// maxSessions is how many sessions OPKE opens at once on one connection.
const maxSessions = 5

// runInput runs a command on the host in one of the connection's
// session slots.
func (c *hostConn) runInput(ctx context.Context, command string, stdin []byte) ([]byte, error) {
	select {
	case c.sessions <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.sessions }()
	return sshx.RunInput(ctx, c.ssh, command, stdin)
}

func (c *hostConn) close() {
	select {
	case <-c.ready:
	default:
		return // still dialling: its dialler keeps it or drops it
	}
	if c.ssh != nil {
		c.ssh.Close()
	}
}

// Close closes every connection.
func (h *HostSessions) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.close()
	}
	h.conns = nil
}

var errNoGateway = errors.New("no gateway with a floating IP to reach the hosts through")

// hostTarget says how to reach a cluster's hosts, from what is observed.
func hostTarget(cluster string, clients *cloud.Clients, observed []diff.Resource, kv state.KV) (HostTarget, error) {
	byAddr := map[diff.Address]diff.Resource{}
	for _, r := range observed {
		byAddr[r.Address()] = r
	}
	gwName := schemas.GatewayName(cluster)
	gw, okGW := byAddr[diff.ResourceAddress(diff.KindServer, gwName)]
	fip := byAddr[diff.ResourceAddress(diff.KindFloatingIP, gwName)]
	address, err := netip.ParseAddr(fip.Attrs["address"].Value)
	if !okGW || err != nil {
		return HostTarget{}, fmt.Errorf("%s: %w", cluster, errNoGateway)
	}
	t := HostTarget{Cluster: cluster, Clients: clients, Gateway: gw, Address: address, Hosts: map[string]HostAddr{}, KV: kv}
	for _, r := range observed {
		if r.Kind != diff.KindServer {
			continue
		}
		port := byAddr[diff.ResourceAddress(diff.KindPort, r.Name)]
		if ip, err := netip.ParseAddr(port.Attrs["fixed_ip"].Value); err == nil {
			t.Hosts[r.Name] = HostAddr{ServerID: r.ID, IP: ip}
		}
	}
	return t, nil
}

// hostKeys returns a host's pinned keys, or at first contact (fresh) the
// console's, which dial pins once the host passed firstContact: until
// deadline it waits for the host to print them, as a server just created
// prints them only once booted.
func (h *HostSessions) hostKeys(ctx context.Context, t HostTarget, host, serverID string, deadline time.Time) (keys []ssh.PublicKey, fresh bool, err error) {
	key := state.KeysOf(t.KV).HostKeys(t.Cluster, host)
	pinned, err := t.KV.Get(ctx, key)
	switch {
	case err == nil:
		for rest := pinned; len(rest) > 0; {
			k, _, _, r, err := ssh.ParseAuthorizedKey(rest)
			if err != nil {
				return nil, false, fmt.Errorf("pinned host key of %s: %w", host, err)
			}
			keys, rest = append(keys, k), r
		}
		return keys, false, nil
	case !errors.Is(err, state.ErrNotFound):
		return nil, false, err
	}
	for {
		var console string
		if h.Console != nil {
			console, err = h.Console(ctx, serverID)
		} else {
			console, err = servers.ShowConsoleOutput(ctx, t.Clients.Compute, serverID, servers.ShowConsoleOutputOpts{}).Extract()
		}
		if err == nil {
			keys, err = sshx.HostKeysFromConsole(console)
		}
		if err == nil {
			break
		}
		// Still booting: no key printed yet, or Nova's 409 while building;
		// unless the server failed.
		booting := errors.Is(err, sshx.ErrNoHostKey) || gophercloud.ResponseCodeIs(err, http.StatusConflict)
		if !booting {
			return nil, false, fmt.Errorf("console of %s: %w", host, err)
		}
		if sv, gerr := t.server(ctx, serverID); gerr == nil && sv.Status == "ERROR" {
			return nil, false, fmt.Errorf("host %s: its server is in ERROR: %v", host, sv.Fault.Message)
		}
		if time.Now().After(deadline) {
			return nil, false, fmt.Errorf("console of %s: still no host key after %v (does its user_data print them?): %w", host, h.bootTimeout(), err)
		}
		if err := cloud.Sleep(ctx, 2*time.Second); err != nil {
			return nil, false, fmt.Errorf("console of %s: %w", host, err)
		}
	}
	return keys, true, nil
}

// pin keeps a host's keys, read from its console at first contact, in
// t's store: every later connection checks them.
func pin(ctx context.Context, t HostTarget, host string, keys []ssh.PublicKey) error {
	var b []byte
	for _, k := range keys {
		b = append(b, ssh.MarshalAuthorizedKey(k)...)
	}
	return t.KV.Put(ctx, state.KeysOf(t.KV).HostKeys(t.Cluster, host), b)
}

// firstContact checks a host met for the first time: it runs what OPKE
// renders (assets.CheckOSRelease, its /etc/os-release), and only then
// are its host keys pinned. A host refused is met again, and checked
// again, by the next plan.
func firstContact(ctx context.Context, t HostTarget, host string, c *ssh.Client, keys []ssh.PublicKey) error {
	out, err := sshx.RunInput(ctx, c, "cat /etc/os-release", nil)
	if err != nil {
		var exit *ssh.ExitError
		if !errors.As(err, &exit) {
			return fmt.Errorf("host %s: read its /etc/os-release: %w", host, err)
		}
		out = nil // no os-release: CheckOSRelease says what that means
	}
	if err := assets.CheckOSRelease(out); err != nil {
		return fmt.Errorf("host %s: %w", host, err)
	}
	return pin(ctx, t, host, keys)
}

func (h *HostSessions) bootTimeout() time.Duration { return cmp.Or(h.BootTimeout, 5*time.Minute) }

// conn returns the connection to a host of t (the gateway included),
// dialling it unless another step is or did.
func (h *HostSessions) conn(ctx context.Context, t HostTarget, host string) (*hostConn, error) {
	signer, err := h.signer(ctx, t)
	if err != nil {
		return nil, err
	}
	var gw *hostConn
	if host != t.Gateway.Name {
		if gw, err = h.conn(ctx, t, t.Gateway.Name); err != nil {
			return nil, err
		}
	}
	key := t.Cluster + "/" + host
	h.mu.Lock()
	if h.conns == nil {
		h.conns = map[string]*hostConn{}
	}
	c := h.conns[key]
	if c == nil {
		c = &hostConn{ready: make(chan struct{}), sessions: make(chan struct{}, maxSessions)}
		h.conns[key] = c
		h.mu.Unlock()
		c.ssh, c.err = h.dial(ctx, t, host, signer, gw)
		if c.err == nil {
			go h.watch(key, c)
		} else {
			h.forget(key, c)
			if gw != nil {
				// The gateway's connection may be the one that broke.
				h.drop(t, t.Gateway.Name)
			}
		}
		close(c.ready)
	} else {
		h.mu.Unlock()
	}
	select {
	case <-c.ready:
		return c, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Client is a connection to host (a host of t, or its gateway) through
// the gateway, its host key checked against the pinned one, for sessions
// of the caller's (opke ssh). It stays open until Close.
func (h *HostSessions) Client(ctx context.Context, t HostTarget, host string) (*ssh.Client, error) {
	if _, ok := t.Hosts[host]; !ok && host != t.Gateway.Name {
		names := slices.Sorted(maps.Keys(t.Hosts))
		if _, ok := t.Hosts[t.Gateway.Name]; !ok {
			names = append(names, t.Gateway.Name)
			slices.Sort(names)
		}
		return nil, fmt.Errorf("cluster %s has no host %s (its hosts: %s): %w", t.Cluster, host, strings.Join(names, ", "), state.ErrNotFound)
	}
	c, err := h.conn(ctx, t, host)
	if err != nil {
		return nil, err
	}
	return c.ssh, nil
}

// watch forgets a connection once it ends (its host rebooted, its path
// broke, or it was closed), and closes it when its peer stops answering
// keepalives: a step after that dials again instead of failing on it.
func (h *HostSessions) watch(key string, c *hostConn) {
	ended := make(chan struct{})
	go func() {
		_ = c.ssh.Wait()
		close(ended)
	}()
	every := cmp.Or(h.KeepAlive, 15*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ended:
			h.forget(key, c)
			return
		case <-tick.C:
			if !sshx.Alive(c.ssh, every) {
				c.ssh.Close()
			}
		}
	}
}

// signer is OPKE's SSH key for t's cluster.
func (h *HostSessions) signer(ctx context.Context, t HostTarget) (ssh.Signer, error) {
	h.mu.Lock()
	signer := h.signers[t.Cluster]
	h.mu.Unlock()
	if signer != nil {
		return signer, nil
	}
	signer, _, err := pki.SSHKey(ctx, t.KV, t.Cluster)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.signers == nil {
		h.signers = map[string]ssh.Signer{}
	}
	h.signers[t.Cluster] = signer
	return signer, nil
}

// dial connects to a host with its pinned keys: the gateway through the
// dialer, another host through the gateway's connection gw.
func (h *HostSessions) dial(ctx context.Context, t HostTarget, host string, signer ssh.Signer, gw *hostConn) (*ssh.Client, error) {
	deadline := time.Now().Add(h.bootTimeout())
	name, id := t.Gateway.Name, t.Gateway.ID
	addr := netip.AddrPortFrom(t.Address, 22)
	if gw != nil {
		a, ok := t.Hosts[host]
		if !ok {
			return nil, fmt.Errorf("host %s: no server with a fixed IP", host)
		}
		name, id, addr = host, a.ServerID, netip.AddrPortFrom(a.IP, 22)
	}
	keys, fresh, err := h.hostKeys(ctx, t, name, id, deadline)
	if err != nil {
		return nil, err
	}
	auth := sshx.Auth{User: HostUser, Signer: signer, HostKeys: keys}
	// A host met for the first time may have printed its keys a moment
	// before its sshd listens: a refused connection is tried again for a
	// minute. Anything else (no route, a key or a login refused) fails at
	// once, for the next plan to see to.
	if soon := time.Now().Add(time.Minute); soon.Before(deadline) {
		deadline = soon
	}
	for {
		var c *ssh.Client
		if gw == nil {
			c, err = sshx.Dial(ctx, h.Dialer, addr.String(), auth)
		} else {
			c, err = sshx.Jump(ctx, gw.ssh, addr.String(), auth)
		}
		// Through an OpenSSH gateway a refused port is a channel the
		// gateway could not open ("connect failed").
		var open *ssh.OpenChannelError
		notYet := err != nil && (strings.Contains(strings.ToLower(err.Error()), "connection refused") ||
			errors.As(err, &open) && open.Reason == ssh.ConnectionFailed)
		if err == nil && fresh {
			if err = firstContact(ctx, t, name, c, keys); err != nil {
				c.Close()
				return nil, err
			}
		}
		if err == nil || !fresh || !notYet || time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil && gw == nil {
				return nil, fmt.Errorf("gateway of %s: %w", t.Cluster, err)
			}
			return c, err
		}
		if err := cloud.Sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
}

// drop closes and forgets a host's connection after an error, so a retry
// redials.
func (h *HostSessions) drop(t HostTarget, host string) {
	key := t.Cluster + "/" + host
	h.mu.Lock()
	c := h.conns[key]
	h.mu.Unlock()
	if c != nil && h.forget(key, c) {
		c.close()
	}
}

// forget removes c from the connections if it is still key's.
func (h *HostSessions) forget(key string, c *hostConn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns[key] != c {
		return false
	}
	delete(h.conns, key)
	return true
}

// run runs a command on a host, dropping the connection if it failed.
func (h *HostSessions) run(ctx context.Context, t HostTarget, host, command string) ([]byte, error) {
	c, err := h.conn(ctx, t, host)
	if err != nil {
		return nil, err
	}
	out, err := c.runInput(ctx, command, nil)
	var exit *ssh.ExitError
	if err != nil && !errors.As(err, &exit) {
		h.drop(t, host)
	}
	return out, err
}

// Checksums implements [HostReader]: one sha256sum per host, every path
// of the host in one command, Parallel hosts at once.
func (h *HostSessions) Checksums(ctx context.Context, t HostTarget, paths map[string][]string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, cmp.Or(h.Parallel, 8))
	var wg sync.WaitGroup
	for _, host := range slices.Sorted(maps.Keys(paths)) {
		if _, ok := t.Hosts[host]; !ok || len(paths[host]) == 0 {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			stdout, err := h.run(ctx, t, host, sshx.Sudo("sha256sum -- "+strings.Join(paths[host], " ")))
			// sha256sum exits 1 when a file is missing and still sums the others.
			var exit *ssh.ExitError
			if errors.As(err, &exit) && exit.ExitStatus() == 1 {
				err = nil
			}
			var sums map[string]string
			if err == nil {
				sums, err = parseSums(stdout, paths[host])
			}
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

// upload puts a file on a host atomically, as root: core is unprivileged
// on Flatcar (passwordless sudo), so the bytes go over the command's
// stdin (never its command line) to install(1) behind sudo, which makes a
// temporary file beside the target with its final mode and owner, then
// sync and a rename over the target. Files under core's home stay core's.
func (h *HostSessions) upload(ctx context.Context, t HostTarget, host string, f assets.File) error {
	c, err := h.conn(ctx, t, host)
	if err != nil {
		return err
	}
	_, group, _ := strings.Cut(f.Owner, ":")
	if group == "root" || group == HostUser {
		group = "" // the owner's, as Install sets it
	}
	cmd, tmp, err := sshx.InstallGroup(HostUser, f.Path, group, f.Mode)
	if err != nil {
		return err
	}
	if _, err := c.runInput(ctx, cmd, f.Data); err != nil {
		var exit *ssh.ExitError
		if errors.As(err, &exit) {
			_, _ = c.runInput(ctx, sshx.Sudo("rm -f -- "+tmp), nil)
		}
		// The next try dials again: the host may not be the one this
		// connection reached (a server replaced under the same name).
		h.drop(t, host)
		return fmt.Errorf("upload %s: %w", f.Path, err)
	}
	return nil
}

// resync reads the files of a cluster's existing hosts: those the plan
// wants and those the ledger says were pushed; not those of the hosts
// the plan makes again for their health (diff.Remediated), which may not
// answer.
func (p *Planner) resync(ctx context.Context, pl *Planned, clients *cloud.Clients) (map[string]map[string]string, error) {
	t, err := hostTarget(pl.Observed.Cluster, clients, pl.Observed.Cloud, p.Store.ReadOnly())
	if errors.Is(err, errNoGateway) {
		return nil, nil // no way in yet: nothing on the hosts to read
	}
	paths := map[string][]string{}
	remedied := diff.Remediated(pl.Desired, pl.Observed)
	addPath := func(host, path string) {
		if _, ok := t.Hosts[host]; ok && !slices.Contains(paths[host], path) && !slices.Contains(remedied, host) {
			paths[host] = append(paths[host], path)
		}
	}
	for _, h := range pl.Desired.Hosts {
		for _, f := range h.Files {
			addPath(h.Name, f.Path)
		}
		// Whether its staged OS update waits for a reboot, in the same
		// command.
		addPath(h.Name, assets.PathRebootRequired)
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

// server reads a server of t's cloud.
func (t HostTarget) server(ctx context.Context, id string) (*servers.Server, error) {
	if t.Clients == nil {
		return nil, errors.New("no cloud clients")
	}
	return servers.Get(ctx, t.Clients.Compute, id).Extract()
}

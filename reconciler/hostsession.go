package reconciler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

// HostSessions keeps SSH connections to a cluster's hosts for an apply:
// one to the gateway (through Dialer), one per host through it. A host key
// read from the console at first contact is pinned in the store and
// checked on every later connection.
type HostSessions struct {
	Dialer sshx.Dialer

	mu    sync.Mutex
	conns map[string]*ssh.Client // cluster/host -> client
}

// Close closes every connection.
func (h *HostSessions) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

// hostTarget says how to reach a cluster's hosts, from what is observed.
func hostTarget(cluster string, clients *cloud.Clients, observed []diff.Resource, kv state.KV) (HostTarget, error) {
	byAddr := map[string]diff.Resource{}
	for _, r := range observed {
		byAddr[r.Address()] = r
	}
	gwName := cluster + "-gateway-0"
	gw, okGW := byAddr[diff.Resource{Kind: diff.KindServer, Name: gwName}.Address()]
	fip := byAddr[diff.Resource{Kind: diff.KindFloatingIP, Name: gwName}.Address()]
	address, err := netip.ParseAddr(fip.Attrs["address"].Value)
	if !okGW || err != nil {
		return HostTarget{}, fmt.Errorf("%s: %w", cluster, errNoGateway)
	}
	t := HostTarget{Cluster: cluster, Clients: clients, Gateway: gw, Address: address, Hosts: map[string]HostAddr{}, KV: kv}
	for _, r := range observed {
		if r.Kind != diff.KindServer {
			continue
		}
		port := byAddr[diff.Resource{Kind: diff.KindPort, Name: r.Name}.Address()]
		if ip, err := netip.ParseAddr(port.Attrs["fixed_ip"].Value); err == nil {
			t.Hosts[r.Name] = HostAddr{ServerID: r.ID, IP: ip}
		}
	}
	return t, nil
}

var errNoGateway = errors.New("no gateway with a floating IP to reach the hosts through")

func (a *Applier) hostTarget(cluster string, clients *cloud.Clients, observed []diff.Resource) (HostTarget, error) {
	return hostTarget(cluster, clients, observed, a.Planner.Store)
}

// pinnedKeys returns a host's pinned keys, pinning the console's at first
// contact.
func pinnedKeys(ctx context.Context, t HostTarget, host, serverID string) ([]ssh.PublicKey, error) {
	key := t.KV.Key(t.Cluster, "hostkeys", host)
	if _, err := t.KV.Get(ctx, key); errors.Is(err, state.ErrNotFound) {
		keys, err := hostKeys(ctx, t, host, serverID)
		if err != nil {
			return nil, err
		}
		var b []byte
		for _, k := range keys {
			b = append(b, ssh.MarshalAuthorizedKey(k)...)
		}
		if err := t.KV.Put(ctx, key, b); err != nil {
			return nil, err
		}
		return keys, nil
	} else if err != nil {
		return nil, err
	}
	return hostKeys(ctx, t, host, serverID)
}

// client returns the connection to a host of t (the gateway included).
func (h *HostSessions) client(ctx context.Context, t HostTarget, host string) (*ssh.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns == nil {
		h.conns = map[string]*ssh.Client{}
	}
	signer, _, err := pki.SSHKey(ctx, t.KV, t.Cluster)
	if err != nil {
		return nil, err
	}
	gwKey := t.Cluster + "/" + t.Gateway.Name
	gw := h.conns[gwKey]
	if gw == nil {
		keys, err := pinnedKeys(ctx, t, t.Gateway.Name, t.Gateway.ID)
		if err != nil {
			return nil, err
		}
		if gw, err = sshx.Dial(ctx, h.Dialer, netip.AddrPortFrom(t.Address, 22).String(), sshx.Auth{User: HostUser, Signer: signer, HostKeys: keys}); err != nil {
			return nil, err
		}
		h.conns[gwKey] = gw
	}
	if host == t.Gateway.Name {
		return gw, nil
	}
	if c := h.conns[t.Cluster+"/"+host]; c != nil {
		return c, nil
	}
	addr, ok := t.Hosts[host]
	if !ok {
		return nil, fmt.Errorf("host %s: no server with a fixed IP", host)
	}
	keys, err := pinnedKeys(ctx, t, host, addr.ServerID)
	if err != nil {
		return nil, err
	}
	c, err := sshx.Jump(ctx, gw, netip.AddrPortFrom(addr.IP, 22).String(), sshx.Auth{User: HostUser, Signer: signer, HostKeys: keys})
	if err != nil {
		// The gateway's connection may be the one that broke.
		gw.Close()
		delete(h.conns, gwKey)
		return nil, err
	}
	h.conns[t.Cluster+"/"+host] = c
	return c, nil
}

// drop forgets a host's connection after an error, so a retry redials.
func (h *HostSessions) drop(t HostTarget, host string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.conns[t.Cluster+"/"+host]; c != nil {
		c.Close()
		delete(h.conns, t.Cluster+"/"+host)
	}
}

// hostStep runs an upload or a restart on a host.
func (a *Applier) hostStep(ctx context.Context, t HostTarget, files map[string]map[string]renderFile, c diff.Change) error {
	host := hostOf(c.Address)
	rest := strings.TrimPrefix(c.Address, "host/"+host)
	switch c.Action {
	case diff.ActionUpload:
		f, ok := files[host][rest]
		if !ok {
			return fmt.Errorf("%s: not in the render", c.Address)
		}
		cl, err := a.Hosts.client(ctx, t, host)
		if err != nil {
			return err
		}
		if err := upload(ctx, cl, rest, f); err != nil {
			a.Hosts.drop(t, host)
			return err
		}
		return RecordFile(ctx, a.Planner.Store, c.Cluster, host, rest, f.sha)
	case diff.ActionRestart:
		unit, ok := strings.CutPrefix(rest, "/units/")
		if !ok {
			return fmt.Errorf("%s: not a unit", c.Address)
		}
		cl, err := a.Hosts.client(ctx, t, host)
		if err != nil {
			return err
		}
		if _, err := sshx.Run(ctx, cl, "systemctl restart "+unit); err != nil {
			a.Hosts.drop(t, host)
			return err
		}
		return nil
	}
	return fmt.Errorf("%w: %s on a host", errors.ErrUnsupported, c.Action)
}

// upload puts a file on a host atomically, unless it already has it: a
// temporary file beside the target gets its final mode before any byte,
// the bytes, an fsync (or sync(1) where the server lacks the extension),
// then a POSIX rename over the target.
func upload(ctx context.Context, c *ssh.Client, file string, f renderFile) error {
	out, err := sshx.Run(ctx, c, "sha256sum -- "+file)
	if err == nil && strings.HasPrefix(string(out), f.sha+"  ") {
		return nil
	}
	fc, err := sftp.NewClient(c)
	if err != nil {
		return fmt.Errorf("sftp: %w", err)
	}
	defer fc.Close()
	if err := fc.MkdirAll(path.Dir(file)); err != nil {
		return fmt.Errorf("mkdir %s: %w", path.Dir(file), err)
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := path.Join(path.Dir(file), "."+path.Base(file)+".opke-"+hex.EncodeToString(suffix[:]))
	w, err := fc.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	cleanup := func(err error) error {
		w.Close()
		_ = fc.Remove(tmp)
		return err
	}
	if err := w.Chmod(os.FileMode(f.mode)); err != nil {
		return cleanup(fmt.Errorf("chmod %s: %w", tmp, err))
	}
	if _, err := w.Write(f.data); err != nil {
		return cleanup(fmt.Errorf("write %s: %w", tmp, err))
	}
	if err := w.Sync(); err != nil {
		if _, err := sshx.Run(ctx, c, "sync"); err != nil {
			return cleanup(fmt.Errorf("sync %s: %w", tmp, err))
		}
	}
	if err := w.Close(); err != nil {
		return cleanup(fmt.Errorf("close %s: %w", tmp, err))
	}
	if err := fc.PosixRename(tmp, file); err != nil {
		_ = fc.Remove(tmp)
		return fmt.Errorf("rename %s: %w", file, err)
	}
	return nil
}

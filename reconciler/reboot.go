package reconciler

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
)

// rebootAwaited takes the hosts that wait for a reboot out of what a
// resync read (their assets.PathRebootRequired), sorted.
func rebootAwaited(files map[string]map[string]string) []string {
	var hosts []string
	for host, sums := range files {
		if _, ok := sums[assets.PathRebootRequired]; ok {
			hosts = append(hosts, host)
			delete(sums, assets.PathRebootRequired)
		}
	}
	if len(hosts) == 0 {
		return nil
	}
	slices.Sort(hosts)
	return hosts
}

// rebootWaits reads whether a host waits for a reboot.
func (h *HostSessions) rebootWaits(ctx context.Context, t HostTarget, host string) (bool, error) {
	sums, err := h.Checksums(ctx, t, map[string][]string{host: {assets.PathRebootRequired}})
	if err != nil {
		return false, err
	}
	_, ok := sums[host][assets.PathRebootRequired]
	return ok, nil
}

// reboot reboots a host whose staged OS update waits for it, through
// Nova: a soft reboot (the guest shuts down as `systemctl reboot` does,
// then the hypervisor starts it again; Nova goes on to a hard one if it
// does not), and waits, up to the gate timeout, until the host answers
// SSH again without assets.PathRebootRequired (a tmpfs's: the boot took
// it). A host without it is rebooted already (the step resumed after a
// crash): done; one Nova is rebooting (the step resumed during its
// reboot) is waited for.
func (a *Applier) reboot(ctx context.Context, t HostTarget, b *pki.Bundle, host string) error {
	addr, ok := t.Hosts[host]
	if !ok {
		return fmt.Errorf("reboot %s: no server", host)
	}
	sv, err := t.server(ctx, addr.ServerID)
	if err != nil {
		return fmt.Errorf("reboot %s: %w", host, err)
	}
	if rebooting := sv.Status == "REBOOT" || sv.Status == "HARD_REBOOT"; !rebooting {
		waits, err := a.Hosts.rebootWaits(ctx, t, host)
		if err != nil {
			return fmt.Errorf("reboot %s: %w", host, err)
		}
		if !waits {
			a.log().Info("host rebooted already", "cluster", t.Cluster, "host", host)
			return nil
		}
		if schemas.RoleOf(t.Cluster, host) == schemas.RoleController {
			if err := a.handOver(ctx, t, b, host); err != nil {
				// The reboot goes on: a graceful one hands it over too.
				a.log().Warn("etcd leadership not handed over before a reboot", "cluster", t.Cluster, "host", host, "err", err)
			}
		}
		err = servers.Reboot(ctx, t.Clients.Compute, addr.ServerID, servers.RebootOpts{Type: servers.SoftReboot}).ExtractErr()
		if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
			return fmt.Errorf("reboot %s: %w", host, err)
		}
	}
	a.log().Info("host rebooting", "cluster", t.Cluster, "host", host)
	// Its connections end with it; the next check dials again.
	a.Hosts.drop(t, host)
	return a.pollUntil(ctx, "the reboot of "+host, func() (pending, err error) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		sv, err := t.server(ctx, addr.ServerID)
		switch {
		case err != nil && !cloud.Transient(err):
			return nil, fmt.Errorf("reboot %s: %w", host, err)
		case err != nil:
			return err, nil
		case sv.Status != "ACTIVE":
			return fmt.Errorf("its server is %s", sv.Status), nil
		}
		waits, err := a.Hosts.rebootWaits(ctx, t, host)
		switch {
		case err != nil:
			return fmt.Errorf("it does not answer yet: %w", err), nil
		case waits:
			return fmt.Errorf("%s is still there (not rebooted yet)", assets.PathRebootRequired), nil
		}
		a.log().Info("host rebooted", "cluster", t.Cluster, "host", host)
		return nil, nil
	})
}

// handOver moves etcd's leadership off a controller about to reboot to
// another voting member that answers, as etcd does itself when it stops
// gracefully (etcdctl move-leader, as etcd's maintenance guide has it
// before a member's downtime): a reboot that is not graceful (a
// hypervisor's reset, Nova's hard reboot) would cost the cluster an
// election and its clients their retries. A member that does not lead,
// or has no other voter to hand to, keeps what it has.
func (a *Applier) handOver(ctx context.Context, t HostTarget, b *pki.Bundle, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	m, err := a.etcdMembers(ctx, t, b, "")
	if err != nil {
		return err
	}
	defer m.close()
	self := "https://" + netip.AddrPortFrom(t.Hosts[host].IP, etcdClientPort).String()
	st, err := m.cli.Status(ctx, self)
	if err != nil {
		return fmt.Errorf("etcd member of %s: %w", host, err)
	}
	if st.Leader != st.Header.MemberId {
		return nil
	}
	list, err := listMembers(ctx, m.cli)
	if err != nil {
		return err
	}
	for _, x := range list.members {
		if x.ID == st.Leader || x.IsLearner || !list.answers[x.ID] {
			continue
		}
		// Only the leader takes a move-leader request.
		m.cli.SetEndpoints(self)
		if _, err := m.cli.MoveLeader(ctx, x.ID); err != nil {
			return fmt.Errorf("move etcd's leadership from %s to %s: %w", host, x.Name, err)
		}
		a.log().Info("etcd leadership handed over before a reboot", "cluster", t.Cluster, "from", host, "to", x.Name)
		return nil
	}
	return nil
}

// uncordon makes a node schedulable again, through the API; a node
// gone has nothing to uncordon.
func (a *Applier) uncordon(ctx context.Context, t HostTarget, b *pki.Bundle, host string) error {
	p := &apiAt{h: a.Hosts, t: t, b: b}
	defer p.close()
	if _, err := p.schedulable(ctx, host, true); err != nil {
		return err
	}
	a.log().Info("node uncordoned", "cluster", t.Cluster, "host", host)
	return nil
}

// nodeUpdate is the one update of a Node object a plan makes: its
// uncordon after a reboot.
func nodeUpdate(c diff.Change) error {
	if c.After["unschedulable"] != diff.Known("false") {
		return fmt.Errorf("%s: only an uncordon updates a node, not %v", c.Address, c.After)
	}
	return nil
}

package render

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/ignition"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/state"
)

// Options are the inputs of a render besides the spec and the store.
type Options struct {
	// Now is the time certificates are checked against and issued at.
	Now time.Time
	// RenewWithin reissues certificates that expire within it
	// (pki.DefaultRenew).
	RenewWithin time.Duration
	// Hosts overrides the planned hosts (assets.PlannedHosts), for example
	// with the observed addresses of workers.
	Hosts []assets.Host
	// APIFloatingIP is the API's floating IP once known; zero before the
	// cluster exists, which leaves it out of the serving certs' SANs.
	APIFloatingIP netip.Addr
	// Cloud is the application credential for cloud.conf, if any.
	Cloud *assets.CloudCredential
	// MirrorAuth is the login to the spec's registry mirror, if any.
	MirrorAuth *assets.MirrorAuth
	// Etcd is how controllers' etcd members first start, by host
	// (assets.Input.Etcd).
	Etcd map[string]assets.EtcdStart
}

// Output is a cluster rendered.
type Output struct {
	Cluster string
	// UserData is each role's Ignition config, by role.
	UserData map[schemas.Role][]byte
	Assets   *assets.Set
	// PKI is the cluster's certificates and keys, for OPKE's own clients
	// (etcd-opke-client, admin). Never logged or printed.
	PKI *pki.Bundle
	// Issued names the PKI material created by this render.
	Issued []string
	// SSHPublicKey is OPKE's key for the cluster, authorized_keys form.
	SSHPublicKey string
}

// Cluster renders c, which must be valid and defaulted.
func Cluster(ctx context.Context, kv state.KV, c *schemas.Cluster, o Options) (*Output, error) {
	name := c.Metadata.Name
	hosts := o.Hosts
	if hosts == nil {
		var err error
		if hosts, err = assets.PlannedHosts(c); err != nil {
			return nil, fmt.Errorf("render %s: %w", name, err)
		}
	}
	vip, err := c.APIVIP()
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	svc, err := c.ServicePrefix()
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	req := pki.Request{Cluster: name, APIVIP: vip, APIFloatingIP: o.APIFloatingIP, ServiceCIDR: svc, Now: o.Now, RenewWithin: o.RenewWithin,
		Rotation: pki.Rotation{Trusted: c.Spec.CAGenerations()}}
	for _, h := range hosts {
		switch h.Role {
		case schemas.RoleController:
			req.Controllers = append(req.Controllers, pki.Host{Name: h.Name, IP: h.IP})
		case schemas.RoleWorker:
			req.Workers = append(req.Workers, pki.Host{Name: h.Name, IP: h.IP})
		}
	}
	bundle, issued, err := pki.Issue(ctx, kv, req)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	_, pub, err := pki.SSHKey(ctx, kv, name)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	out := &Output{Cluster: name, UserData: map[schemas.Role][]byte{}, PKI: bundle, Issued: issued, SSHPublicKey: pub}
	for _, role := range schemas.Roles() {
		if out.UserData[role], err = ignition.Render(ignition.Input{Role: role, OPKEPublicKey: pub}); err != nil {
			return nil, fmt.Errorf("render %s: %w", name, err)
		}
	}
	if out.Assets, err = assets.Render(assets.Input{Cluster: c, PKI: bundle, Hosts: hosts, Cloud: o.Cloud, MirrorAuth: o.MirrorAuth, Etcd: o.Etcd}); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return out, nil
}

package cloud

import (
	"context"
	"fmt"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
)

// ComputeMicroversion is the Nova microversion OPKE speaks: server tags
// (2.26, at create 2.52), flavor names in servers (2.47).
const ComputeMicroversion = "2.79"

// Clients are the service clients of one cloud, sharing one token.
type Clients struct {
	Provider     *gophercloud.ProviderClient
	Compute      *gophercloud.ServiceClient
	Network      *gophercloud.ServiceClient
	Image        *gophercloud.ServiceClient
	LoadBalancer *gophercloud.ServiceClient
	ObjectStore  *gophercloud.ServiceClient
}

// Connect authenticates as the named cloud of a clouds.yaml. The token is
// reused until Keystone refuses it, then renewed (AllowReauth).
func Connect(ctx context.Context, cloudsYAML, cloud string) (*Clients, error) {
	ao, eo, tlsConfig, err := clouds.Parse(clouds.WithCloudName(cloud), clouds.WithLocations(cloudsYAML))
	if err != nil {
		return nil, fmt.Errorf("cloud %s: %w", cloud, err)
	}
	ao.AllowReauth = true
	pc, err := config.NewProviderClient(ctx, ao, config.WithTLSConfig(tlsConfig))
	if err != nil {
		return nil, fmt.Errorf("cloud %s: authenticate: %w", cloud, err)
	}
	c := &Clients{Provider: pc}
	for _, s := range []struct {
		dst **gophercloud.ServiceClient
		new func(*gophercloud.ProviderClient, gophercloud.EndpointOpts) (*gophercloud.ServiceClient, error)
		svc string
	}{
		{&c.Compute, openstack.NewComputeV2, "compute"},
		{&c.Network, openstack.NewNetworkV2, "network"},
		{&c.Image, openstack.NewImageV2, "image"},
		{&c.LoadBalancer, openstack.NewLoadBalancerV2, "load-balancer"},
		{&c.ObjectStore, openstack.NewObjectStorageV1, "object-store"},
	} {
		if *s.dst, err = s.new(pc, eo); err != nil {
			return nil, fmt.Errorf("cloud %s: %s endpoint: %w", cloud, s.svc, err)
		}
	}
	c.Compute.Microversion = ComputeMicroversion
	return c, nil
}

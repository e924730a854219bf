package cloud

// The observation's views of Neutron's and Octavia's resources: the
// fields it reads, named as gophercloud names them, decoded once as a
// listing streams in (gophercloud's types decode each item twice more,
// for their times: at 1,000 clusters most of the security groups' and
// ports' listing time).

type portView struct {
	ID             string   `json:"id"`
	Name           string   `json:"name"`
	NetworkID      string   `json:"network_id"`
	DeviceID       string   `json:"device_id"`
	SecurityGroups []string `json:"security_groups"`
	Tags           []string `json:"tags"`
	FixedIPs       []struct {
		SubnetID  string `json:"subnet_id"`
		IPAddress string `json:"ip_address"`
	} `json:"fixed_ips"`
}

type secGroupView struct {
	ID    string   `json:"id"`
	Name  string   `json:"name"`
	Tags  []string `json:"tags"`
	Rules []struct {
		ID             string `json:"id"`
		Direction      string `json:"direction"`
		Protocol       string `json:"protocol"`
		PortRangeMin   int    `json:"port_range_min"`
		PortRangeMax   int    `json:"port_range_max"`
		RemoteIPPrefix string `json:"remote_ip_prefix"`
		RemoteGroupID  string `json:"remote_group_id"`
	} `json:"security_group_rules"`
}

type networkView struct {
	ID   string   `json:"id"`
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

type subnetView struct {
	ID             string   `json:"id"`
	Name           string   `json:"name"`
	NetworkID      string   `json:"network_id"`
	CIDR           string   `json:"cidr"`
	DNSNameservers []string `json:"dns_nameservers"`
	Tags           []string `json:"tags"`
}

type routerView struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Tags        []string `json:"tags"`
	GatewayInfo struct {
		NetworkID string `json:"network_id"`
	} `json:"external_gateway_info"`
}

type floatingIPView struct {
	ID                string   `json:"id"`
	Description       string   `json:"description"`
	FloatingNetworkID string   `json:"floating_network_id"`
	FloatingIP        string   `json:"floating_ip_address"`
	PortID            string   `json:"port_id"`
	Tags              []string `json:"tags"`
}

type loadBalancerView struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	VipPortID   string   `json:"vip_port_id"`
	VipSubnetID string   `json:"vip_subnet_id"`
	VipAddress  string   `json:"vip_address"`
	Tags        []string `json:"tags"`
}

package diff

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"opke.dev/opke/internal/intern"

	"opke.dev/opke/render/assets"
	"opke.dev/opke/schemas"
)

// APIIdleTimeout is how long, in milliseconds, the API's listener lets a
// connection sit idle on either side: 4 hours. Octavia's 50 s default cut
// watches, kubectl logs -f and exec sessions that had nothing to say for
// 50 s; the API server ends its own long requests well before this
// (watches within --min-request-timeout's 30 to 60 minutes).
const APIIdleTimeout = 4 * 3600 * 1000

// Inputs are what Desire needs besides the spec: the rendered output.
type Inputs struct {
	// UserData is each role's Ignition config.
	UserData map[schemas.Role][]byte
	// Assets are the hosts' files; nil plans no host phase.
	Assets *assets.Set
	// APIFloatingIP is false while the API's floating IP does not exist:
	// the files that carry it are then unknown until apply.
	APIFloatingIP bool
	// BackupDue asks for an etcd snapshot.
	BackupDue bool
	// UnsettledUserData and UnsettledFiles (by host, then path) are bytes
	// that depend on keys and certificates not issued yet: a plan renders
	// without persisting anything, so a new cluster's or host's material
	// is issued again, differently, at apply. They are known after apply.
	UnsettledUserData map[schemas.Role]bool
	UnsettledFiles    map[string]map[string]bool
}

// Ports and settings of the cluster's network design.
const (
	portSSH     = 22
	portEtcd    = 2379
	portAPI     = 6443
	anyIPv4     = "0.0.0.0/0"
	policyAntiA = "anti-affinity"
	// nodePorts is Kubernetes' default Service node port range.
	nodePorts = "30000-32767"
)

// filesWithAPIFloatingIP are the files whose bytes carry the API's
// floating IP: unknown until it exists (the API server's certificate, and
// its static pod, which carries the certificate's sha256).
var filesWithAPIFloatingIP = []string{"/etc/kubernetes/pki/apiserver.crt", "/etc/kubernetes/manifests/kube-apiserver.yaml"}

// modes are the permission bits as the plan writes them ("0644"), one
// string each.
var modes = func() (out [0o1000]string) {
	for m := range out {
		out[m] = fmt.Sprintf("%04o", m)
	}
	return out
}()

// Desire lists what a valid, defaulted cluster spec asks for: every
// OpenStack resource, named and tagged deterministically, and every host's
// files.
func Desire(c *schemas.Cluster, in Inputs) (*Desired, error) {
	n := c.Metadata.Name
	s := c.Spec
	d := &Desired{Cluster: n, DeletionPolicy: string(s.DeletionPolicy), BackupDue: in.BackupDue, MaxUnavailable: s.Upgrade.MaxUnavailable,
		OSReboots: s.Upgrade.OSReboots}
	if r := s.Remediation; r != nil {
		d.Remediation = &Remediation{UnhealthyAfter: r.UnhealthyAfter.Duration, MaxUnhealthy: r.MaxUnhealthy}
	}
	add := func(kind Kind, name string, attrs Attrs, forceNew []string, deps ...Address) {
		d.Infra = append(d.Infra, Resource{Kind: kind, Name: name, Attrs: attrs, ForceNew: forceNew, DependsOn: deps})
	}
	addr := ResourceAddress

	vip, err := c.APIVIP()
	if err != nil {
		return nil, fmt.Errorf("desire %s: %w", n, err)
	}
	gwIP, err := c.GatewayIP()
	if err != nil {
		return nil, fmt.Errorf("desire %s: %w", n, err)
	}
	net, subnet, router := addr(KindNetwork, n), addr(KindSubnet, n), addr(KindRouter, n)
	add(KindAppCredential, n, Attrs{}, nil)
	add(KindNetwork, n, Attrs{}, nil)
	dns := slices.Clone(s.Network.DNSNameservers)
	slices.Sort(dns)
	add(KindSubnet, n, Attrs{"network": Known(n), "cidr": Known(s.Network.HostCIDR), "dns_nameservers": Known(strings.Join(dns, ","))},
		[]string{"network", "cidr"}, net)
	add(KindRouter, n, Attrs{"external_network": Known(s.Network.ExternalNetwork)}, nil)
	add(KindInterface, n, Attrs{"router": Known(n), "subnet": Known(n)}, []string{"router", "subnet"}, router, subnet)

	// Security groups: the gateway lets SSH in from anywhere; the nodes
	// talk freely among themselves and let the gateway reach SSH, etcd
	// and the API, and the load balancer reach the API.
	gwSG, nodesSG := n+"-gateway", n+"-nodes"
	add(KindSecurityGroup, gwSG, Attrs{}, nil)
	add(KindSecurityGroup, nodesSG, Attrs{}, nil)
	rule := func(sg, proto string, ports string, remoteIP, remoteGroup string) {
		remote := remoteIP
		if remoteGroup != "" {
			remote = "group:" + remoteGroup
		}
		name := fmt.Sprintf("%s/ingress-%s-%s-%s", sg, proto, ports, strings.ReplaceAll(remote, "/", "_"))
		deps := []Address{addr(KindSecurityGroup, sg)}
		if remoteGroup != "" && remoteGroup != sg {
			deps = append(deps, addr(KindSecurityGroup, remoteGroup))
		}
		add(KindRule, name, Attrs{"security_group": Known(sg), "direction": Known("ingress"), "protocol": Known(proto),
			"ports": Known(ports), "remote": Known(remote)}, []string{"security_group", "direction", "protocol", "ports", "remote"}, deps...)
	}
	sshSources := s.Gateway.SSHSources
	if len(sshSources) == 0 {
		sshSources = []string{anyIPv4}
	}
	for _, src := range sshSources {
		rule(gwSG, "tcp", strconv.Itoa(portSSH), src, "")
	}
	rule(nodesSG, "any", "any", "", nodesSG)
	for _, p := range []int{portSSH, portEtcd, portAPI} {
		rule(nodesSG, "tcp", strconv.Itoa(p), "", gwSG)
	}
	rule(nodesSG, "tcp", strconv.Itoa(portAPI), s.Network.HostCIDR, "")
	// Octavia's members and health monitors reach a LoadBalancer
	// Service's NodePorts from the subnet (its amphorae's addresses).
	for _, proto := range []string{"tcp", "udp"} {
		rule(nodesSG, proto, nodePorts, s.Network.HostCIDR, "")
	}

	sgName := n + "-controllers"
	add(KindServerGroup, sgName, Attrs{"policy": Known(policyAntiA)}, []string{"policy"})

	userData := func(role schemas.Role) Value {
		if in.UnsettledUserData[role] {
			return Value{Unknown: true}
		}
		sum := sha256.Sum256(in.UserData[role])
		return Known(hex.EncodeToString(sum[:]))
	}
	// The API's load balancer, its floating IP the cluster's endpoint. Its
	// VIP is a fixed address of the subnet.
	api := n + "-api"
	add(KindLoadBalancer, api, Attrs{"subnet": Known(n), "vip_address": Known(vip.String())}, []string{"subnet", "vip_address"}, subnet)

	// A port with no fixed IP takes any free address: it waits for
	// portsAfter, the ports whose addresses are fixed and the load
	// balancer (its VIP), so that it never takes one of them (the
	// seeded fleet's third worker took the VIP).
	portsAfter := []Address{addr(KindLoadBalancer, api)}
	server := func(name string, role schemas.Role, flavor, fixedIP, group string, sgs string, zone string) {
		portAttrs := Attrs{"network": Known(n), "security_groups": Known(sgs), "fixed_ip": Known(fixedIP)}
		portDeps := []Address{subnet, addr(KindSecurityGroup, strings.Split(sgs, ",")[0])}
		if fixedIP == "" {
			portAttrs["fixed_ip"] = Value{Unknown: true}
			portDeps = append(portDeps, portsAfter...)
		} else {
			portsAfter = append(portsAfter, addr(KindPort, name))
		}
		add(KindPort, name, portAttrs, []string{"network", "fixed_ip"}, portDeps...)
		attrs := Attrs{"flavor": Known(flavor), "image": Known(s.Image), "port": Known(name), "user_data": userData(role)}
		force := []string{"flavor", "image", "port", "user_data"}
		deps := []Address{addr(KindPort, name)}
		if group != "" {
			attrs["server_group"] = Known(group)
			force = append(force, "server_group")
			deps = append(deps, addr(KindServerGroup, group))
		}
		if zone != "" {
			attrs["availability_zone"] = Known(zone)
			force = append(force, "availability_zone")
		}
		if s.SSHKeyName != "" {
			attrs["key_name"] = Known(s.SSHKeyName)
			force = append(force, "key_name")
		}
		add(KindServer, name, attrs, force, deps...)
	}
	zone := func(zones []string, i int) string {
		if len(zones) == 0 {
			return ""
		}
		return zones[i%len(zones)]
	}
	gwName := schemas.GatewayName(n)
	server(gwName, schemas.RoleGateway, s.Gateway.Flavor, gwIP.String(), "", gwSG, "")
	add(KindFloatingIP, gwName, Attrs{"network": Known(s.Network.ExternalNetwork), "port": Known(gwName), "address": {Unknown: true}},
		[]string{"network", "port"}, addr(KindServer, gwName), addr(KindInterface, n))
	var controllers []string
	for i := range s.Controllers.Count {
		name := schemas.ControllerName(n, i)
		cip, err := c.ControllerIP(i)
		if err != nil {
			return nil, fmt.Errorf("desire %s: %w", n, err)
		}
		server(name, schemas.RoleController, s.Controllers.Flavor, cip.String(), sgName, nodesSG, zone(s.Controllers.AvailabilityZones, i))
		controllers = append(controllers, name)
	}
	for _, p := range s.WorkerPools {
		for i := range p.Count {
			server(schemas.ServerName(n, p.Name, i), schemas.RoleWorker, p.Flavor, "", "", nodesSG, zone(p.AvailabilityZones, i))
		}
	}

	// The load balancer's children, once the controllers are there.
	listener := fmt.Sprintf("%s-%d", api, portAPI)
	idle := strconv.Itoa(APIIdleTimeout)
	add(KindListener, listener, Attrs{"load_balancer": Known(api), "protocol": Known("TCP"), "port": Known(strconv.Itoa(portAPI)),
		"timeout_client_data": Known(idle), "timeout_member_data": Known(idle), "allowed_cidrs": Known(allowedCIDRs(&s))},
		[]string{"load_balancer", "protocol", "port"}, addr(KindLoadBalancer, api))
	add(KindPool, api, Attrs{"listener": Known(listener), "protocol": Known("TCP"), "algorithm": Known("ROUND_ROBIN")},
		[]string{"listener", "protocol"}, addr(KindListener, listener))
	for i, name := range controllers {
		cip, _ := c.ControllerIP(i)
		add(KindMember, name, Attrs{"pool": Known(api), "address": Known(cip.String()), "port": Known(strconv.Itoa(portAPI))},
			[]string{"pool", "address", "port"}, addr(KindPool, api))
	}
	add(KindMonitor, api, Attrs{"pool": Known(api), "type": Known("TCP"), "delay": Known("5"), "timeout": Known("5"), "max_retries": Known("3")},
		[]string{"pool", "type"}, addr(KindPool, api))
	add(KindFloatingIP, api, Attrs{"network": Known(s.Network.ExternalNetwork), "load_balancer": Known(api), "address": {Unknown: true}},
		[]string{"network", "load_balancer"}, addr(KindLoadBalancer, api), addr(KindInterface, n))

	if in.Assets != nil {
		manifests := map[string]bool{}
		for _, h := range in.Assets.Hosts {
			host := Host{Name: h.Name, Role: h.Role, Version: in.Assets.Version, Files: make([]File, 0, len(h.Files))}
			for _, f := range h.Files {
				// A desired state is kept between plans: the paths every
				// cluster shares are held once.
				df := File{Path: intern.Shared.String(f.Path), SHA256: f.SHA256, Mode: modes[f.Mode.Perm()], Secret: f.Secret, Restart: intern.Shared.List(f.Restart)}
				df.NeedsAPIFloatingIP = !in.APIFloatingIP && slices.Contains(filesWithAPIFloatingIP, f.Path) && h.Role == schemas.RoleController
				df.Unknown = df.NeedsAPIFloatingIP || in.UnsettledFiles[h.Name][f.Path]
				host.Files = append(host.Files, df)
				// Every controller keeps the cluster's manifests; they are
				// applied once, from the first.
				if name, ok := strings.CutPrefix(f.Path, assets.PathAddons+"/"); ok && h.Role == schemas.RoleController && !manifests[name] {
					manifests[name] = true
					d.Manifests = append(d.Manifests, Manifest{Name: name, SHA256: f.SHA256, Unknown: in.UnsettledFiles[h.Name][f.Path]})
				}
			}
			d.Hosts = append(d.Hosts, host)
		}
		slices.SortFunc(d.Manifests, func(a, b Manifest) int { return strings.Compare(a.Name, b.Name) })
	}
	return d, nil
}

// allowedCIDRs are the sources the API's listener lets in, as its
// allowed_cidrs attribute has them (sorted, comma-separated): the spec's
// api.allowedCIDRs and the cluster's own network, whose nodes reach the
// API at its VIP; "" (anywhere) when the spec names none.
func allowedCIDRs(s *schemas.Spec) string {
	if s.API == nil || len(s.API.AllowedCIDRs) == 0 {
		return ""
	}
	return JoinCIDRs(append([]string{s.Network.HostCIDR}, s.API.AllowedCIDRs...))
}

// JoinCIDRs is a listener's allowed_cidrs as an attribute: sorted, each
// once, comma-separated.
func JoinCIDRs(list []string) string {
	out := slices.Clone(list)
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

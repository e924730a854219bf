package schemas

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Bounds of durations the schema cannot express.
const (
	MinBackupInterval = 5 * time.Minute
	// MinUnhealthyAfter is the shortest spec.remediation.unhealthyAfter.
	MinUnhealthyAfter = 30 * time.Second
	MaxDrainTimeout   = 24 * time.Hour
	// podSubnetBits is the prefix of the pod range each node gets.
	podSubnetBits = 24
)

// reservedPoolNames would make worker names clash with other roles' names.
var reservedPoolNames = map[string]bool{string(RoleController): true, string(RoleGateway): true}

var (
	labelNameRE  = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// check applies the rules of a single spec that the schema cannot express.
// It is pure and reports every problem it finds.
func (c *Cluster) check() []Problem {
	var out []Problem
	add := func(p Path, format string, args ...any) {
		out = append(out, Problem{Path: p, Message: fmt.Sprintf(format, args...)})
	}
	spec := Path{"spec"}
	s := &c.Spec

	if v, err := ParseVersion(s.Kubernetes.Version); err == nil && !v.Supported() {
		add(spec.Field("kubernetes").Field("version"), "minor %s is not supported; supported minors: %s", v.MinorString(), supportedList())
	}

	c.checkNetwork(add)
	sources := func(at Path, list []string) {
		for i, src := range list {
			switch p, err := netip.ParsePrefix(src); {
			case err != nil || !p.Addr().Is4():
				add(at.Index(i), "%q is not an IPv4 CIDR such as 203.0.113.0/24", src)
			case p.Masked() != p:
				add(at.Index(i), "%s is not a network address; did you mean %s?", p, p.Masked())
			}
		}
		uniqueStrings(at, list, add)
	}
	sources(spec.Field("gateway").Field("sshSources"), s.Gateway.SSHSources)
	if s.API != nil {
		sources(spec.Field("api").Field("allowedCIDRs"), s.API.AllowedCIDRs)
	}

	uniqueStrings(spec.Field("controllers").Field("availabilityZones"), s.Controllers.AvailabilityZones, add)
	pools := map[string]int{}
	for i, p := range s.WorkerPools {
		pp := spec.Field("workerPools").Index(i)
		if first, dup := pools[p.Name]; dup {
			add(pp.Field("name"), "pool name %q is also the name of spec.workerPools[%d]", p.Name, first)
		} else {
			pools[p.Name] = i
		}
		if reservedPoolNames[p.Name] {
			add(pp.Field("name"), "%q is reserved for the %s servers", p.Name, p.Name)
		}
		if n := len(ServerName(c.Metadata.Name, p.Name, max(p.Count, 1))); n > MaxHostnameLen && c.Metadata.Name != "" && p.Name != "" {
			add(pp.Field("name"), "server names %s would be %d characters, over the %d of a host name",
				ServerName(c.Metadata.Name, p.Name, p.Count), n, MaxHostnameLen)
		}
		for _, k := range sortedKeys(p.Labels) {
			checkLabel(pp.Field("labels").Field(k), k, p.Labels[k], add)
			checkNodeLabel(pp.Field("labels").Field(k), k, add)
		}
		uniqueStrings(pp.Field("availabilityZones"), p.AvailabilityZones, add)
	}

	addons := map[string]int{}
	for i, a := range s.Addons {
		if first, dup := addons[a.Name]; dup {
			add(spec.Field("addons").Index(i).Field("name"), "addon %q is listed already at spec.addons[%d]", a.Name, first)
		} else {
			addons[a.Name] = i
		}
	}

	for i, line := range s.SSHAuthorizedKeys {
		// One key per item, with no options: an item carrying a second
		// line (command="...", from="...") would add a key, or a forced
		// command, nobody reviewed as a key.
		_, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(line))
		switch {
		case err != nil:
			add(spec.Field("sshAuthorizedKeys").Index(i), "not an SSH public key in authorized_keys form (type, base64 key, comment)")
		case strings.ContainsAny(line, "\r\n") || len(rest) > 0:
			add(spec.Field("sshAuthorizedKeys").Index(i), "one key per item, on one line")
		case len(options) > 0:
			add(spec.Field("sshAuthorizedKeys").Index(i), "authorized_keys options (%s) are not allowed: give the key alone", strings.Join(options, ","))
		}
	}
	uniqueStrings(spec.Field("sshAuthorizedKeys"), s.SSHAuthorizedKeys, add)

	if d := s.Upgrade.DrainTimeout.Duration; d <= 0 || d > MaxDrainTimeout {
		add(spec.Field("upgrade").Field("drainTimeout"), "must be more than 0 and at most %s", formatDuration(MaxDrainTimeout))
	}
	if r := s.Remediation; r != nil && r.UnhealthyAfter.Duration < MinUnhealthyAfter {
		add(spec.Field("remediation").Field("unhealthyAfter"), "must be at least %s: a Node is not Ready for a moment when its kubelet restarts", formatDuration(MinUnhealthyAfter))
	}
	if k := s.PKI; k != nil && k.Generation == 1 && k.Phase != RotationComplete && k.Phase != "" {
		add(spec.Field("pki").Field("phase"), "generation 1 is the first: a rotation goes to generation 2 (phase %s)", RotationTrust)
	}
	if b := s.Backup; b != nil && b.Interval.Duration < MinBackupInterval {
		add(spec.Field("backup").Field("interval"), "must be at least %s", formatDuration(MinBackupInterval))
	}
	if m := s.RegistryMirror; m != nil {
		checkMirror(spec.Field("registryMirror"), m.Endpoint, m.CACert, true, add)
	}
	if m := s.DownloadMirror; m != nil {
		checkMirror(spec.Field("downloadMirror"), m.Endpoint, m.CACert, false, add)
	}
	return out
}

// checkMirror checks a registry mirror's or a download mirror's endpoint
// and CA: a URL the hosts can use, with no credentials in it (the spec is
// in git), and a CA that parses.
func checkMirror(p Path, endpoint, caCert string, registry bool, add func(Path, string, ...any)) {
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		add(p.Field("endpoint"), "not a URL: %v", errors.Unwrap(err))
	case u.Scheme != "https" && u.Scheme != "http":
		add(p.Field("endpoint"), "must be https://host[:port][/path] (or http:// for a trusted network), not %q", u.Scheme)
	case u.User != nil && registry:
		add(p.Field("endpoint"), "must not carry credentials: the spec is in git; give them to the daemon (--registry-mirror-credentials)")
	case u.User != nil:
		add(p.Field("endpoint"), "must not carry credentials: the spec is in git")
	case u.Host == "" || u.Hostname() == "":
		add(p.Field("endpoint"), "has no host")
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		add(p.Field("endpoint"), "must not have a query or fragment")
	case registry && (strings.HasSuffix(u.Path, "/v2") || strings.Contains(u.Path, "/v2/")):
		add(p.Field("endpoint"), "names the registry's base, without /v2 (the hosts add it)")
	}
	if caCert != "" {
		rest, n := []byte(caCert), 0
		for {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			if _, err := x509.ParseCertificate(b.Bytes); b.Type != "CERTIFICATE" || err != nil {
				add(p.Field("caCert"), "block %d is not a certificate", n+1)
				return
			}
			n++
		}
		if n == 0 || strings.TrimSpace(string(rest)) != "" {
			add(p.Field("caCert"), "must be PEM certificates and nothing else")
		}
	}
}

func (c *Cluster) checkNetwork(add func(Path, string, ...any)) {
	n := &c.Spec.Network
	np := Path{"spec", "network"}
	type cidr struct {
		field  string
		prefix netip.Prefix
	}
	var parsed []cidr
	for _, f := range []struct{ field, value string }{
		{"hostCIDR", n.HostCIDR}, {"podCIDR", n.PodCIDR}, {"serviceCIDR", n.ServiceCIDR},
	} {
		p, err := netip.ParsePrefix(f.value)
		switch {
		case err != nil || !p.Addr().Is4():
			add(np.Field(f.field), "%q is not an IPv4 CIDR such as 192.168.10.0/24", f.value)
			continue
		case p.Masked() != p:
			add(np.Field(f.field), "%s is not a network address; did you mean %s?", p, p.Masked())
			continue
		}
		for _, other := range parsed {
			if other.prefix.Overlaps(p) {
				add(np.Field(f.field), "%s overlaps spec.network.%s %s", p, other.field, other.prefix)
			}
		}
		parsed = append(parsed, cidr{f.field, p})
	}
	for _, cp := range parsed {
		switch cp.field {
		case "hostCIDR":
			room, need := DHCPRoom(cp.prefix), c.Spec.DHCPRoomNeeded()
			if room < need {
				add(np.Field("hostCIDR"), "%s leaves %d addresses for DHCP, the spec needs %d (%d workers, one surge per pool, %d ports); use a /%d or larger",
					cp.prefix, room, need, c.Spec.WorkerCount(), PortsReserve, prefixFor(need+DHCPStartOffset+1))
			}
		case "podCIDR":
			nodes := c.Spec.Controllers.Count + c.Spec.WorkerCount() + len(c.Spec.WorkerPools)
			if b := cp.prefix.Bits(); b > podSubnetBits || 1<<(podSubnetBits-b) < nodes {
				add(np.Field("podCIDR"), "%s has room for %d nodes at a /%d each, the spec can run %d; use a /%d or larger",
					cp.prefix, podRoom(b), podSubnetBits, nodes, podSubnetBits-(bits.Len(uint(nodes-1))))
			}
		case "serviceCIDR":
			if b := cp.prefix.Bits(); b < 12 || b > 24 {
				add(np.Field("serviceCIDR"), "must be between a /12 and a /24 (the API server's limits), not a /%d", b)
			}
		}
	}
	for i, ns := range n.DNSNameservers {
		if a, err := netip.ParseAddr(ns); err != nil || !a.Is4() {
			add(np.Field("dnsNameservers").Index(i), "%q is not an IPv4 address", ns)
		}
	}
	uniqueStrings(np.Field("dnsNameservers"), n.DNSNameservers, add)
}

func podRoom(prefixBits int) int {
	if prefixBits > podSubnetBits {
		return 0
	}
	return 1 << (podSubnetBits - prefixBits)
}

// prefixFor is the longest IPv4 prefix holding n addresses.
func prefixFor(n int) int { return 32 - bits.Len(uint(n-1)) }

// checkLabel applies Kubernetes' rules for label keys and values.
func checkLabel(p Path, key, value string, add func(Path, string, ...any)) {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		prefix, name = "", key
	}
	switch {
	case hasPrefix && (len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)):
		add(p, "label key prefix %q must be a DNS subdomain", prefix)
	case len(name) > 63 || !labelNameRE.MatchString(name):
		add(p, "label name %q must be at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit", name)
	}
	if value != "" && (len(value) > 63 || !labelNameRE.MatchString(value)) {
		add(p, "label value %q must be empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit", value)
	}
}

// kubeletLabels and kubeletLabelNamespaces are the labels in the
// kubernetes.io and k8s.io namespaces a kubelet may set on its own node
// (k8s.io/kubelet/pkg/apis, well_known_labels.go); it refuses to start
// with any other of those namespaces in --node-labels, and the
// NodeRestriction admission plugin refuses them too.
var (
	kubeletLabels = []string{
		"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
		"topology.kubernetes.io/zone", "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
		"beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
	}
	kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}
)

// checkNodeLabel refuses a node label the kubelet may not set: one in the
// kubernetes.io or k8s.io namespaces (or their subdomains) that is not a
// kubelet label, such as node-role.kubernetes.io/worker, which would stop
// every kubelet of the pool.
func checkNodeLabel(p Path, key string, add func(Path, string, ...any)) {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return
	}
	restricted := false
	for _, r := range []string{"kubernetes.io", "k8s.io"} {
		if ns == r || strings.HasSuffix(ns, "."+r) {
			restricted = true
		}
	}
	if !restricted || slices.Contains(kubeletLabels, key) {
		return
	}
	for _, allowed := range kubeletLabelNamespaces {
		if ns == allowed || strings.HasSuffix(ns, "."+allowed) {
			return
		}
	}
	add(p, "the kubelet may not set a label of the %s namespace (it would refuse to start): use a domain of your own, or node.kubernetes.io/", ns)
}

func uniqueStrings(p Path, values []string, add func(Path, string, ...any)) {
	seen := map[string]int{}
	for i, v := range values {
		if first, dup := seen[v]; dup {
			add(p.Index(i), "repeats item %d", first)
			continue
		}
		seen[v] = i
	}
}

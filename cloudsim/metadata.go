package cloudsim

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Nova's metadata service, as real hosts reach it: an instance asks
// http://169.254.169.254 through its router, whose namespace redirects
// the request to a proxy there (machine.Fabric.ListenMetadata), as
// Neutron's L3 agent does; the proxy knows the instance by the request's
// source address on one of the router's networks, as Neutron's metadata
// agent does before it asks Nova. Served: the OpenStack tree
// (/openstack/<version>/meta_data.json, user_data, network_data.json)
// that Ignition's and cloud-init's OpenStack providers and the Cinder
// CSI node plugin read (its instance id: meta_data.json's uuid), and
// the EC2 tree's usual keys (/latest/meta-data/…), which Flatcar's
// afterburn reads. Tagged devices are not listed (devices is empty).

// metadataVersions are the OpenStack metadata versions Zed's Nova
// serves, oldest first.
var metadataVersions = []string{"2012-08-10", "2013-04-04", "2013-10-17", "2015-10-15", "2016-06-30",
	"2016-10-06", "2017-02-22", "2018-08-27", "2020-10-14", "latest"}

// metadataServer is the metadata proxy of one router.
func (s *Sim) metadataServer(routerID string) *http.Server {
	return &http.Server{
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			s.serveMetadata(rw, r, routerID)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
	}
}

// metadataInstance is what the metadata service says of an instance.
type metadataInstance struct {
	sv             *server
	fixed, public  string
	flavor         string
	keyName, keyPK string
}

func (s *Sim) serveMetadata(rw http.ResponseWriter, r *http.Request, routerID string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(rw, "405 Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	addr, err := netip.ParseAddr(host)
	if err != nil {
		http.NotFound(rw, r)
		return
	}
	s.mu.Lock()
	in, ok := s.w.metadataInstance(routerID, addr.Unmap())
	s.mu.Unlock()
	if !ok {
		http.NotFound(rw, r)
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	text := func(v string) {
		rw.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = fmt.Fprint(rw, v)
	}
	userData := func() {
		data, err := base64.StdEncoding.DecodeString(in.sv.UserData)
		if err != nil || len(data) == 0 {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "application/octet-stream")
		_, _ = rw.Write(data)
	}
	if path == "/openstack" {
		text(strings.Join(metadataVersions, "\n"))
		return
	}
	if path == "/latest/user-data" {
		userData()
		return
	}
	if rest, ok := strings.CutPrefix(path, "/openstack/"); ok {
		version, file, _ := strings.Cut(rest, "/")
		if !slices.Contains(metadataVersions, version) {
			http.NotFound(rw, r)
			return
		}
		switch file {
		case "":
			text("meta_data.json\npassword\nvendor_data.json\nnetwork_data.json\nvendor_data2.json\nuser_data")
		case "meta_data.json":
			writeJSON(rw, http.StatusOK, in.openstackMeta())
		case "user_data":
			userData()
		case "vendor_data.json", "vendor_data2.json":
			writeJSON(rw, http.StatusOK, map[string]any{})
		case "network_data.json":
			writeJSON(rw, http.StatusOK, map[string]any{"links": []any{}, "networks": []any{}, "services": []any{}})
		case "password":
			text("")
		default:
			http.NotFound(rw, r)
		}
		return
	}
	rest, ok := strings.CutPrefix(path, "/latest/meta-data")
	if !ok {
		http.NotFound(rw, r)
		return
	}
	// A key's value, or a folder's entries (the tree's root is one).
	ec2 := in.ec2Meta()
	key := strings.TrimPrefix(rest, "/")
	if v, ok := ec2[key]; ok {
		text(v)
		return
	}
	prefix := key + "/"
	if key == "" {
		prefix = ""
	}
	var entries []string
	for k := range ec2 {
		if sub, ok := strings.CutPrefix(k, prefix); ok {
			if first, _, nested := strings.Cut(sub, "/"); nested {
				sub = first + "/"
			}
			if !slices.Contains(entries, sub) {
				entries = append(entries, sub)
			}
		}
	}
	if len(entries) == 0 {
		http.NotFound(rw, r)
		return
	}
	slices.Sort(entries)
	text(strings.Join(entries, "\n"))
}

// metadataInstance finds the server that has addr on a network the
// router has a leg on.
func (w *world) metadataInstance(routerID string, addr netip.Addr) (metadataInstance, bool) {
	legs := map[string]bool{}
	for _, p := range w.Ports {
		if p.DeviceOwner == "network:router_interface" && p.DeviceID == routerID {
			legs[p.NetworkID] = true
		}
	}
	for _, p := range w.Ports {
		if !legs[p.NetworkID] || !strings.HasPrefix(p.DeviceOwner, "compute:") {
			continue
		}
		for _, f := range p.FixedIPs {
			if f.IPAddress != addr.String() {
				continue
			}
			sv := w.Servers[p.DeviceID]
			if sv == nil {
				return metadataInstance{}, false
			}
			in := metadataInstance{sv: sv, fixed: f.IPAddress}
			for _, fip := range w.FloatingIPs {
				if fip.PortID != nil && *fip.PortID == p.ID && fip.FixedIPAddress != nil && *fip.FixedIPAddress == f.IPAddress {
					in.public = fip.FloatingIPAddress
				}
			}
			if fl := w.Flavors[sv.FlavorID]; fl != nil {
				in.flavor = fl.Name
			}
			if kp := w.Keypairs[sv.UserID+"/"+sv.KeyName]; sv.KeyName != "" && kp != nil {
				in.keyName, in.keyPK = kp.Name, kp.PublicKey
			}
			return in, true
		}
	}
	return metadataInstance{}, false
}

// openstackMeta is meta_data.json, as Zed's Nova writes it.
func (in metadataInstance) openstackMeta() map[string]any {
	meta := in.sv.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	out := map[string]any{
		"uuid": in.sv.ID, "name": in.sv.Name, "hostname": hostname(in.sv.Name) + ".novalocal",
		"launch_index": 0, "availability_zone": in.sv.AZ, "project_id": in.sv.ProjectID,
		"meta": meta, "devices": []any{}, "dedicated_cpus": []any{},
	}
	if in.keyName != "" {
		out["public_keys"] = map[string]string{in.keyName: in.keyPK}
		out["keys"] = []any{map[string]string{"name": in.keyName, "type": "ssh", "data": in.keyPK}}
	}
	return out
}

// ec2Meta is the EC2 tree's keys under /latest/meta-data/.
func (in metadataInstance) ec2Meta() map[string]string {
	host := hostname(in.sv.Name) + ".novalocal"
	out := map[string]string{
		"instance-id": fmt.Sprintf("i-%08x", in.sv.Seq), "ami-launch-index": "0",
		"hostname": host, "local-hostname": host, "public-hostname": host,
		"local-ipv4": in.fixed, "public-ipv4": in.public, "instance-type": in.flavor,
		"placement/availability-zone": in.sv.AZ, "reservation-id": "r-" + in.sv.ID[:8],
	}
	if in.keyName != "" {
		out["public-keys/0/openssh-key"] = in.keyPK
	}
	return out
}

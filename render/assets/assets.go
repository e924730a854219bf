package assets

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
)

// Units a pushed file can ask to restart.
const (
	UnitKubelet    = "kubelet.service"
	unitEtcd       = "etcd-member.service"
	UnitContainerd = "containerd.service"
)

// Errors Render reports; match them with errors.Is.
var (
	ErrUnsupportedVersion = errors.New("unsupported kubernetes version")
	ErrMissingMaterial    = errors.New("PKI material missing")
	ErrBadInput           = errors.New("invalid render input")
)

// Host is a server that receives files.
type Host struct {
	Name string       `json:"name"`
	Role schemas.Role `json:"role"`
	Pool string       `json:"pool,omitempty"`
	// IP is the host's fixed IP; zero for a worker not created yet (its
	// address comes from DHCP), which no rendered file needs.
	IP netip.Addr `json:"ip,omitzero"`
}

// PlannedHosts lists the hosts the spec asks for with their planned
// addresses: controllers and the gateway at their fixed IPs, workers by
// pool and index without one. The order is controllers, workers pool by
// pool, gateway.
func PlannedHosts(c *schemas.Cluster) ([]Host, error) {
	var hosts []Host
	for i := range c.Spec.Controllers.Count {
		ip, err := c.ControllerIP(i)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		hosts = append(hosts, Host{Name: schemas.ControllerName(c.Metadata.Name, i), Role: schemas.RoleController, IP: ip})
	}
	for _, p := range c.Spec.WorkerPools {
		for i := range p.Count {
			hosts = append(hosts, Host{Name: schemas.ServerName(c.Metadata.Name, p.Name, i), Role: schemas.RoleWorker, Pool: p.Name})
		}
	}
	gw, err := c.GatewayIP()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return append(hosts, Host{Name: schemas.GatewayName(c.Metadata.Name), Role: schemas.RoleGateway, IP: gw}), nil
}

// CloudCredential is the OpenStack application credential the cluster's
// cloud provider and CSI driver use; it goes into cloud.conf (0600) and
// nowhere else. SubnetID and FloatingNetworkID are optional hints for
// load balancers (known after the network exists).
type CloudCredential struct {
	AuthURL           string `json:"auth_url"`
	Region            string `json:"region,omitempty"`
	ID                string `json:"application_credential_id"`
	Secret            string `json:"application_credential_secret"`
	SubnetID          string `json:"subnet_id,omitempty"`
	FloatingNetworkID string `json:"floating_network_id,omitempty"`
}

// Input is everything a cluster's files depend on.
type Input struct {
	// Cluster is the spec, defaulted.
	Cluster *schemas.Cluster
	// PKI holds the material of every host in Hosts.
	PKI *pki.Bundle
	// Hosts are the hosts to render for (see PlannedHosts).
	Hosts []Host
	// Cloud, when set, renders cloud.conf.
	Cloud *CloudCredential
	// MirrorAuth, when set, is the login to the spec's registry mirror
	// (the daemon's, never the spec's): it goes into the hosts' registry
	// configuration, which is then secret.
	MirrorAuth *MirrorAuth
	// Etcd is how each controller's etcd member first starts, by host;
	// a controller not in it founds the cluster with the spec's
	// controllers (see EtcdStart).
	Etcd map[string]EtcdStart
}

// EtcdStart is how a controller's etcd member starts with an empty data
// dir: founding the cluster with the other members (Join false), or
// joining the cluster that runs once it was added to its membership
// (Join true). Members are the controllers the membership holds then,
// the host itself included. etcd reads these settings only on that first
// start (ETCD_INITIAL_CLUSTER and ETCD_INITIAL_CLUSTER_STATE); a member
// keeps the ones it started with (the ledger holds them), so that a
// change of the membership later changes no running member's files.
type EtcdStart struct {
	Join    bool     `json:"join,omitempty"`
	Members []string `json:"members"`
}

// Equal reports whether two starts are the same.
func (e EtcdStart) Equal(o EtcdStart) bool {
	return e.Join == o.Join && slices.Equal(e.Members, o.Members)
}

// MirrorAuth is a registry login. String prints no password.
type MirrorAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// String implements fmt.Stringer without the password.
func (a MirrorAuth) String() string { return a.Username + ":(sensitive)" }

// File is one file to push. Data is never serialised: the JSON form
// (manifest.json, plans) carries the checksum only.
type File struct {
	Path   string      `json:"path"`
	Mode   fs.FileMode `json:"-"`
	Owner  string      `json:"owner"`
	SHA256 string      `json:"sha256"`
	Size   int         `json:"size"`
	Secret bool        `json:"secret,omitempty"`
	// Restart lists the units to restart once the file changed.
	Restart []string `json:"restart,omitempty"`
	Data    []byte   `json:"-"`
}

// MarshalJSON writes the mode in octal, as people read modes.
func (f File) MarshalJSON() ([]byte, error) {
	type plain File
	return json.Marshal(struct {
		plain
		Mode string `json:"mode"`
	}{plain(f), fmt.Sprintf("%04o", uint32(f.Mode.Perm()))})
}

// UnmarshalJSON reads what MarshalJSON wrote (without the data).
func (f *File) UnmarshalJSON(b []byte) error {
	type plain File
	var v struct {
		plain
		Mode string `json:"mode"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("file: %w", err)
	}
	m, err := strconv.ParseUint(v.Mode, 8, 32)
	if err != nil {
		return fmt.Errorf("file %s: mode %q: %w", v.Path, v.Mode, err)
	}
	*f = File(v.plain)
	f.Mode = fs.FileMode(m)
	return nil
}

// HostFiles is a host and the files it receives, sorted by path.
type HostFiles struct {
	Host
	Files []File `json:"files"`
	// Etcd is how a controller's etcd member was rendered to start.
	Etcd *EtcdStart `json:"etcd,omitempty"`
}

// Set is the rendered files of one cluster.
type Set struct {
	Cluster string      `json:"cluster"`
	Version string      `json:"version"`
	Hosts   []HostFiles `json:"hosts"`
}

// Host returns the files of the named host.
func (s *Set) Host(name string) (HostFiles, bool) {
	for _, h := range s.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return HostFiles{}, false
}

// Manifest returns the bytes of the cluster manifest named name
// ("00-kube-proxy.yaml"), as the controllers keep it.
func (s *Set) Manifest(name string) ([]byte, bool) {
	for _, h := range s.Hosts {
		if h.Role != schemas.RoleController {
			continue
		}
		if f, ok := h.File(PathAddons + "/" + name); ok {
			return f.Data, true
		}
	}
	return nil, false
}

// File returns the file at path on the named host.
func (h HostFiles) File(path string) (File, bool) {
	for _, f := range h.Files {
		if f.Path == path {
			return f, true
		}
	}
	return File{}, false
}

// Paths of the pushed files; kubeadm's where kubeadm has one.
const (
	PathKubeletEnv       = "/etc/kubernetes/kubelet.env"
	pathKubeletConfig    = "/var/lib/kubelet/config.yaml"
	pathKubeletConf      = "/etc/kubernetes/kubelet.conf"
	PathEtcdEnv          = "/etc/kubernetes/etcd.env"
	PathCloudConf        = "/etc/kubernetes/cloud.conf"
	PathManifests        = "/etc/kubernetes/manifests"
	PathAddons           = "/etc/kubernetes/addons"
	PathPKI              = "/etc/kubernetes/pki"
	pathOperatorKeys     = "/home/core/.ssh/authorized_keys.d/opke-operators"
	PathContainerdConfig = "/etc/containerd/config.toml"
	PathContainerdDropIn = "/etc/systemd/system/containerd.service.d/10-opke.conf"
	PathRegistryHosts    = "/etc/containerd/certs.d"
	PathMirrorCA         = "/etc/containerd/opke-mirror-ca.crt"
	// PathDownloadCA is the CA of spec.downloadMirror, which install-kubelet
	// trusts for its downloads.
	PathDownloadCA       = "/etc/opke/download-mirror-ca.crt"
	ownerRoot, ownerCore = "root:root", "core:core"
)

// PathRebootRequired is the file whose presence says a host waits for a
// reboot to finish an update: Debian's and Ubuntu's convention (what a
// package's postinst writes, what kured watches), which a host's
// Ignition config writes on Flatcar when its update engine staged an
// update (UPDATE_STATUS_UPDATED_NEED_REBOOT). /run is a tmpfs: a reboot
// takes it away. A drift check reads it; nothing pushes it.
const PathRebootRequired = "/run/reboot-required"

// Render renders every file of every host in in.Hosts.
func Render(in Input) (*Set, error) {
	r, err := newRenderer(in)
	if err != nil {
		return nil, err
	}
	set := &Set{Cluster: r.c.Metadata.Name, Version: r.version.String()}
	var clusterManifests []File
	for _, h := range in.Hosts {
		var files []File
		var etcd *EtcdStart
		switch h.Role {
		case schemas.RoleController:
			if clusterManifests == nil {
				if clusterManifests, err = r.clusterManifests(); err != nil {
					return nil, err
				}
			}
			start := r.etcdStart(h.Name)
			etcd = &start
			files, err = r.controller(h, start)
			files = append(files, clusterManifests...)
		case schemas.RoleWorker:
			files, err = r.worker(h)
		case schemas.RoleGateway:
			files = nil
		default:
			err = fmt.Errorf("%w: host %s has unknown role %q", ErrBadInput, h.Name, h.Role)
		}
		if err != nil {
			return nil, err
		}
		if keys := r.operatorKeys(); keys != nil {
			files = append(files, *keys)
		}
		slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
		for i := 1; i < len(files); i++ {
			if files[i].Path == files[i-1].Path {
				return nil, fmt.Errorf("render %s: two files at %s", h.Name, files[i].Path)
			}
		}
		set.Hosts = append(set.Hosts, HostFiles{Host: h, Files: files, Etcd: etcd})
	}
	return set, nil
}

// newFile fills in the checksum.
func newFile(path string, mode fs.FileMode, data []byte, restart ...string) File {
	sum := sha256.Sum256(data)
	return File{Path: path, Mode: mode, Owner: ownerRoot, Data: data, SHA256: hex.EncodeToString(sum[:]), Size: len(data), Restart: restart}
}

func secretFile(path string, data []byte, restart ...string) File {
	f := newFile(path, 0o600, data, restart...)
	f.Secret = true
	return f
}

// operatorKeys is the core user's extra authorized_keys file, or nil.
func (r *renderer) operatorKeys() *File {
	if len(r.c.Spec.SSHAuthorizedKeys) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("# Operators' keys from spec.sshAuthorizedKeys of " + r.c.Metadata.Name + ", pushed by OPKE.\n")
	for _, k := range r.c.Spec.SSHAuthorizedKeys {
		b.WriteString(strings.TrimSpace(k) + "\n")
	}
	f := newFile(pathOperatorKeys, 0o600, b.Bytes())
	f.Owner = ownerCore
	return &f
}

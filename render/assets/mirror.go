package assets

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// upstreamServers are the registries whose host differs from the one
// image names use.
var upstreamServers = map[string]string{"docker.io": "https://registry-1.docker.io"}

// registryOf returns the registry host of an image reference, as
// containerd resolves it (no host: docker.io).
func registryOf(ref string) string {
	host, _, ok := strings.Cut(ref, "/")
	if !ok || (!strings.ContainsAny(host, ".:") && host != "localhost") {
		return "docker.io"
	}
	return host
}

// Registries lists the registries the cluster's images come from, sorted:
// the Kubernetes components' and every image of the minor's matrix row (addons the spec does not select included, so that
// adding one needs no new registry configuration).
func (r *renderer) registries() []string {
	seen := map[string]bool{registryOf(KubernetesRegistry + "/x"): true}
	for _, ref := range r.images.refs() {
		seen[registryOf(ref)] = true
	}
	// cloud-provider-openstack's images are registry.k8s.io/provider-os/...
	out := make([]string, 0, len(seen))
	for h := range seen {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// MirrorRepository is where a registry mirror whose endpoint has path
// keeps repo, an image's name with its registry (registry.k8s.io/pause):
// PATH/registry.k8s.io/pause. The hosts' hosts.toml and whatever loads a
// mirror (opke-world push) agree through it.
func MirrorRepository(path, repo string) string {
	if p := strings.Trim(path, "/"); p != "" {
		return p + "/" + repo
	}
	return repo
}

// runtimeFiles are a node's container runtime configuration:
// containerd's configuration (Flatcar's defaults kept: its OOM score,
// SELinux labelling, the systemd cgroup driver; the sandbox image of the
// matrix pinned, as kubeadm expects the runtime's to be the one its minor
// pins; its CRI reading each registry's hosts.toml) and the drop-in that
// makes Flatcar's containerd read it; when the spec names a registry mirror, a
// hosts.toml per upstream registry sending every pull to the mirror.
// Without one, images come from the upstream registries.
func (r *renderer) runtimeFiles() ([]File, error) {
	m := r.c.Spec.RegistryMirror
	from := "Images come from their upstream registries (no registry mirror)."
	var base *url.URL
	if m != nil {
		var err error
		base, err = url.Parse(strings.TrimSuffix(m.Endpoint, "/"))
		if err != nil || base.Host == "" {
			return nil, fmt.Errorf("%w: spec.registryMirror.endpoint %q", ErrBadInput, m.Endpoint)
		}
		from = fmt.Sprintf("Every image comes from the registry mirror %s (hosts.toml per registry\n# under %s).", base.Redacted(), PathRegistryHosts)
	}
	config := fmt.Sprintf(`# containerd of %s; rendered and pushed by OPKE.
# Flatcar's own settings (/usr/share/containerd/config.toml, which has no
# imports: Flatcar's documented way to change it is a copy read instead of
# it), in containerd 2's version 3, then OPKE's: the sandbox image this
# Kubernetes minor pins, each registry's hosts.toml.
# %s
# Site settings of the host's own go in /etc/containerd/conf.d.
version = 3
imports = ["/etc/containerd/conf.d/*.toml"]
root = "/var/lib/containerd"
state = "/run/containerd"
subreaper = true
oom_score = -999
disabled_plugins = []

[grpc]
  address = "/run/containerd/containerd.sock"
  uid = 0
  gid = 0

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %s
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %s

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true
`, r.c.Metadata.Name, from, strconv.Quote(r.images.Pause), strconv.Quote(PathRegistryHosts))
	// Flatcar's containerd.service reads $CONTAINERD_CONFIG (its own
	// configuration by default): this points it at OPKE's.
	dropIn := "# Rendered and pushed by OPKE: containerd reads " + PathContainerdConfig + ", Flatcar's settings and OPKE's.\n[Service]\nEnvironment=CONTAINERD_CONFIG=" + PathContainerdConfig + "\n"
	files := []File{
		newFile(PathContainerdConfig, 0o644, []byte(config), UnitContainerd),
		newFile(PathContainerdDropIn, 0o644, []byte(dropIn), UnitContainerd),
	}
	if m == nil {
		return files, nil
	}
	if m.CACert != "" {
		files = append(files, newFile(PathMirrorCA, 0o644, []byte(strings.TrimSpace(m.CACert)+"\n")))
	}
	for _, reg := range r.registries() {
		server, ok := upstreamServers[reg]
		if !ok {
			server = "https://" + reg
		}
		host := *base
		// The image registry.k8s.io/pause:3.10.1 is ENDPOINT/registry.k8s.io/
		// pause:3.10.1 in the mirror: its API path is /v2/PATH/registry.k8s.io/
		// pause, whatever path the endpoint has (a project of the registry).
		host.Path = "/v2/" + MirrorRepository(base.Path, reg)
		var b strings.Builder
		fmt.Fprintf(&b, "# Images of %s come from the registry mirror; rendered and pushed by OPKE.\n", reg)
		fmt.Fprintf(&b, "server = %s\n\n[host.%s]\n  capabilities = [\"pull\", \"resolve\"]\n  override_path = true\n", strconv.Quote(server), strconv.Quote(host.String()))
		if m.CACert != "" {
			fmt.Fprintf(&b, "  ca = %s\n", strconv.Quote(PathMirrorCA))
		}
		path := PathRegistryHosts + "/" + reg + "/hosts.toml"
		if a := r.in.MirrorAuth; a != nil {
			token := base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))
			fmt.Fprintf(&b, "  [host.%s.header]\n    Authorization = [%s]\n", strconv.Quote(host.String()), strconv.Quote("Basic "+token))
			files = append(files, secretFile(path, []byte(b.String())))
			continue
		}
		files = append(files, newFile(path, 0o644, []byte(b.String())))
	}
	return files, nil
}

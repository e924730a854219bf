package assets

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"text/template"

	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
)

//go:embed manifests
var manifestFS embed.FS

var templates = template.Must(template.New("").Option("missingkey=error").Funcs(template.FuncMap{
	"quote": func(s string) string { return fmt.Sprintf("%q", s) },
	"tag": func(ref string) (string, error) { // an image reference's tag
		if v, ok := ImageTag(ref); ok {
			return v, nil
		}
		return "", fmt.Errorf("image %q has no tag", ref)
	},
}).ParseFS(manifestFS, "manifests/*.yaml", "manifests/static/*.yaml"))

// manifestCRDs are, by manifest, the custom resource definitions it
// needs, upstream's files unchanged (not templates):
// manifests/crds/NAME.yaml. They are a manifest of their own, applied just
// before it (NN-NAME.crds.yaml sorts before NN-NAME.yaml), whose apply
// waits for them to be established. Their bytes and digest are the same
// for every cluster, held once: the monitoring addon's are 2.4 MB.
var manifestCRDs = func() map[string]File {
	out := map[string]File{}
	entries, err := fs.ReadDir(manifestFS, "manifests/crds")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(manifestFS, "manifests/crds/"+e.Name())
		if err != nil {
			panic(err)
		}
		out[strings.TrimSuffix(e.Name(), ".yaml")] = newFile("", 0o644, b)
	}
	return out
}()

// coreManifests are applied to every cluster.
var coreManifests = []string{"kube-proxy", "coredns", "flannel", "control-plane"}

// addonManifests are the optional addons the spec can select.
var addonManifests = []string{"openstack-cloud-controller-manager", "cinder-csi", "ingress-nginx", "metrics-server", "dashboard", "monitoring", "gateway"}

// manifestOrder is every manifest in the order they are applied, each
// named NN-NAME.yaml by its place here: a manifest keeps its name
// whatever else the spec selects. The apply waits for each manifest's
// workloads to roll out before the next, so each comes after what its
// pods need: kube-proxy (on the hosts' network) first, for the Service
// network; flannel, the pods' network; the control-plane nodes' labels;
// the NetworkPolicy agent (spec.network.networkPolicy) and the cloud
// controller manager, which initializes the nodes (a kubelet with an
// external cloud provider registers its node tainted uninitialized until
// it does), both on the hosts' network; then CoreDNS, whose pods need all
// of that, then the other addons.
var manifestOrder = []string{"kube-proxy", "flannel", "control-plane", schemas.NetworkPolicyKubeRouter,
	"openstack-cloud-controller-manager", "coredns", "cinder-csi", "ingress-nginx", "metrics-server", "dashboard", "monitoring", "gateway"}

// renderer holds what every file of a cluster derives from.
type renderer struct {
	in      Input
	c       *schemas.Cluster
	version schemas.Version
	images  Images
	data    tmplData
	addons  map[string]bool
}

// tmplData is what templates see.
type tmplData struct {
	Cluster        string
	Version        string
	Images         Images
	CSI            CSIImages
	Registry       string
	PodCIDR        string
	ServiceCIDR    string
	DNSIP          string
	APIServer      string // https://VIP:6443
	APIVIP         string
	ClusterDomain  string
	CloudProvider  bool   // openstack-cloud-controller-manager selected
	CinderCSI      bool   // cinder-csi selected: Cinder volumes for the addons' data
	ControllerHost string // for static pods
	Controllers    []string
	ControllerIPs  []string // their addresses, in the same order
	Flags          []string
	Inputs         string // a static pod's files' sha256
}

func newRenderer(in Input) (*renderer, error) {
	if in.Cluster == nil || in.PKI == nil {
		return nil, fmt.Errorf("%w: cluster and PKI are required", ErrBadInput)
	}
	c := in.Cluster
	v, err := schemas.ParseVersion(c.Spec.Kubernetes.Version)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupportedVersion, err)
	}
	images, err := ImagesFor(v)
	if err != nil {
		return nil, err
	}
	vip, err := c.APIVIP()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	dns, err := c.ClusterDNSIP()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	r := &renderer{in: in, c: c, version: v, images: images, addons: map[string]bool{}}
	for _, a := range c.Spec.Addons {
		r.addons[a.Name] = true
	}
	r.data = tmplData{
		Cluster: c.Metadata.Name, Version: v.String(), Images: images, CSI: csi, Registry: KubernetesRegistry,
		PodCIDR: c.Spec.Network.PodCIDR, ServiceCIDR: c.Spec.Network.ServiceCIDR, DNSIP: dns.String(),
		APIServer: "https://" + netip.AddrPortFrom(vip, 6443).String(), APIVIP: vip.String(),
		ClusterDomain: pki.ClusterDomain, CloudProvider: r.addons["openstack-cloud-controller-manager"], CinderCSI: r.addons["cinder-csi"],
	}
	for i := range c.Spec.Controllers.Count {
		r.data.Controllers = append(r.data.Controllers, schemas.ControllerName(c.Metadata.Name, i))
		ip, err := c.ControllerIP(i)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		r.data.ControllerIPs = append(r.data.ControllerIPs, ip.String())
	}
	if r.data.PodCIDR == "" {
		return nil, fmt.Errorf("%w: the spec is not defaulted (podCIDR empty)", ErrBadInput)
	}
	return r, nil
}

// execute renders a template with data.
func execute(name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// material returns the named PKI material or ErrMissingMaterial.
func (r *renderer) material(name string) (pki.Material, error) {
	m, ok := r.in.PKI.Get(name)
	if !ok {
		return pki.Material{}, fmt.Errorf("render %s: %s: %w", r.c.Metadata.Name, name, ErrMissingMaterial)
	}
	return m, nil
}

// tlsFiles maps material to kubeadm's file names under dir: NAME.crt is
// the cert only, NAME.key the key only, a bare NAME both. Keys are secret;
// every TLS file is 0600.
func (r *renderer) tlsFiles(dir string, pairs [][2]string, restart ...string) ([]File, error) {
	var out []File
	for _, p := range pairs {
		m, err := r.material(p[0])
		if err != nil {
			return nil, err
		}
		base := dir + "/" + p[1]
		switch {
		case strings.HasSuffix(base, ".crt"): // a CA's: every generation trusted
			out = append(out, newFile(base, 0o600, r.in.PKI.Trust(p[0]), restart...))
			continue
		case strings.HasSuffix(base, ".key"):
			out = append(out, secretFile(base, m.Key, restart...))
			continue
		}
		out = append(out, newFile(base+".crt", 0o600, m.Cert, restart...), secretFile(base+".key", m.Key, restart...))
	}
	return out, nil
}

// kubeletFiles are every node's kubelet env, config, kubeconfig and CA.
func (r *renderer) kubeletFiles(h Host, server string, labels map[string]string, controller bool) ([]File, error) {
	args := []string{"--hostname-override=" + h.Name}
	if h.IP.IsValid() {
		args = append(args, "--node-ip="+h.IP.String())
	}
	if len(labels) > 0 {
		kv := make([]string, 0, len(labels))
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			kv = append(kv, k+"="+labels[k])
		}
		args = append(args, "--node-labels="+strings.Join(kv, ","))
	}
	if controller {
		args = append(args, "--register-with-taints=node-role.kubernetes.io/control-plane:NoSchedule")
	}
	if r.data.CloudProvider {
		args = append(args, "--cloud-provider=external")
	}
	env := r.kubeletEnv(h.Name, args)
	d := r.data
	if controller {
		d.ControllerHost = h.Name
	}
	config, err := execute("kubelet-config.yaml", d)
	if err != nil {
		return nil, err
	}
	kubeconf, err := r.in.PKI.Kubeconfig(r.c.Metadata.Name, pki.Kubelet(h.Name), server)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMissingMaterial, err)
	}
	if _, err := r.material(pki.CA); err != nil {
		return nil, err
	}
	runtime, err := r.runtimeFiles()
	if err != nil {
		return nil, err
	}
	files := []File{
		newFile(PathKubeletEnv, 0o644, []byte(env), UnitKubelet),
		newFile(pathKubeletConfig, 0o644, config, UnitKubelet),
		secretFile(pathKubeletConf, kubeconf, UnitKubelet),
		newFile(PathPKI+"/ca.crt", 0o600, r.in.PKI.Trust(pki.CA), UnitKubelet),
	}
	if m := r.c.Spec.DownloadMirror; m != nil && m.CACert != "" {
		files = append(files, newFile(PathDownloadCA, 0o644, []byte(strings.TrimSpace(m.CACert)+"\n"), UnitKubelet))
	}
	return append(files, runtime...), nil
}

// kubeletEnv is a node's kubelet.env: the kubelet and the CNI plugins the
// host installs (install-kubelet, from Ignition: upstream's release files,
// each checked against the sha256 published beside it, from the spec's
// download mirror when it names one) and the kubelet's flags.
func (r *renderer) kubeletEnv(host string, args []string) string {
	mirror, from := "", "from their upstream sites"
	if m := r.c.Spec.DownloadMirror; m != nil {
		mirror, from = m.Endpoint, "from the download mirror"
	}
	v := r.version.String()
	var b strings.Builder
	fmt.Fprintf(&b, "# kubelet of %s, Kubernetes %s; rendered and pushed by OPKE.\n", host, v)
	fmt.Fprintf(&b, "# The kubelet and the CNI plugins as upstream releases them, %s,\n# each checked against the sha256 published beside it.\n", from)
	fmt.Fprintf(&b, "KUBELET_VERSION=%s\nKUBELET_URL=%s\n", v, KubeletDownload(v).URL(mirror))
	fmt.Fprintf(&b, "CNI_PLUGINS_VERSION=%s\nCNI_PLUGINS_URL=%s\n", CNIPluginsVersion, CNIPluginsDownload(CNIPluginsVersion).URL(mirror))
	if m := r.c.Spec.DownloadMirror; m != nil && m.CACert != "" {
		fmt.Fprintf(&b, "DOWNLOAD_CA=%s\n", PathDownloadCA)
	}
	fmt.Fprintf(&b, "KUBELET_ARGS=%q\n", strings.Join(args, " "))
	return b.String()
}

// worker renders a worker's files. Workers talk to the API's VIP.
func (r *renderer) worker(h Host) ([]File, error) {
	labels := map[string]string{"opke.dev/pool": h.Pool}
	for _, p := range r.c.Spec.WorkerPools {
		if p.Name == h.Pool {
			for k, v := range p.Labels {
				labels[k] = v
			}
		}
	}
	files, err := r.kubeletFiles(h, r.data.APIServer, labels, false)
	if err != nil {
		return nil, err
	}
	if r.in.Cloud != nil && r.addons["cinder-csi"] { // the CSI node plugin reads it
		files = append(files, r.cloudConf())
	}
	return files, nil
}

// controller renders a controller's files: kubeadm's layout. The control
// plane of a controller talks to its own API server.
func (r *renderer) controller(h Host, start EtcdStart) ([]File, error) {
	if !h.IP.IsValid() {
		return nil, fmt.Errorf("%w: controller %s has no fixed IP", ErrBadInput, h.Name)
	}
	local := "https://" + netip.AddrPortFrom(h.IP, 6443).String()
	// As kubeadm labels its control-plane nodes: no Service load balancer
	// sends traffic to them (the label is one a kubelet may set).
	files, err := r.kubeletFiles(h, local, map[string]string{"opke.dev/role": string(schemas.RoleController), "node.kubernetes.io/exclude-from-external-load-balancers": ""}, true)
	if err != nil {
		return nil, err
	}
	tls, err := r.tlsFiles(PathPKI, [][2]string{
		{pki.CA, "ca.key"}, {pki.APIServer(h.Name), "apiserver"}, {pki.APIServerKubelet, "apiserver-kubelet-client"},
		{pki.APIServerEtcdClient, "apiserver-etcd-client"}, {pki.FrontProxyCA, "front-proxy-ca.crt"},
		{pki.FrontProxyClient, "front-proxy-client"},
	}, UnitKubelet) // read by the static pods at start: the kubelet's restart restarts those whose files changed
	if err != nil {
		return nil, err
	}
	files = append(files, tls...)
	if r.rotating() {
		// The controller-manager's CSR signer takes one certificate, the
		// one of its key: ca.crt holds two during a rotation.
		ca, err := r.material(pki.CA)
		if err != nil {
			return nil, err
		}
		files = append(files, newFile(pathSigningCA, 0o600, ca.Cert))
	}
	sa, err := r.material(pki.ServiceAccount)
	if err != nil {
		return nil, err
	}
	// The API servers verify tokens signed with any key trusted; they
	// and the controller-manager sign with the signing generation's.
	files = append(files, secretFile(PathPKI+"/sa.key", sa.Key), newFile(PathPKI+"/sa.pub", 0o600, r.in.PKI.Trust(pki.ServiceAccount)))
	enc, err := r.material(pki.SecretsEncryption)
	if err != nil {
		return nil, err
	}
	files = append(files, secretFile(pathEncryptionConfig, encryptionConfig(enc)), newFile(pathAuditPolicy, 0o600, []byte(auditPolicy)))
	etcdTLS, err := r.tlsFiles(PathPKI+"/etcd", [][2]string{
		{pki.EtcdCA, "ca.crt"}, {pki.EtcdServer(h.Name), "server"}, {pki.EtcdPeer(h.Name), "peer"},
	}, unitEtcd)
	if err != nil {
		return nil, err
	}
	files = append(files, etcdTLS...)
	etcdEnv, err := r.etcdEnv(h, start)
	if err != nil {
		return nil, err
	}
	files = append(files, newFile(PathEtcdEnv, 0o644, etcdEnv, unitEtcd))
	for _, kc := range []struct{ name, file string }{
		{pki.Admin, "admin.conf"}, {pki.ControllerManager, "controller-manager.conf"}, {pki.Scheduler, "scheduler.conf"},
	} {
		b, err := r.in.PKI.Kubeconfig(r.c.Metadata.Name, kc.name, local)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMissingMaterial, err)
		}
		files = append(files, secretFile("/etc/kubernetes/"+kc.file, b, UnitKubelet))
	}
	pods, err := r.staticPods(h, files)
	if err != nil {
		return nil, err
	}
	files = append(files, pods...)
	if r.in.Cloud != nil {
		files = append(files, r.cloudConf())
	}
	return files, nil
}

// pathSigningCA is the cluster CA's certificate alone, for the
// controller-manager's CSR signer, while ca.crt holds two generations
// (a rotation's trust and reissue phases). It stays after the rotation,
// unread.
const pathSigningCA = PathPKI + "/ca-signing.crt"

// rotating reports whether the cluster's CAs are in a rotation: two
// generations trusted.
func (r *renderer) rotating() bool {
	ca, _ := r.in.PKI.Get(pki.CA)
	return !bytes.Equal(ca.Cert, r.in.PKI.Trust(pki.CA))
}

// pathEncryptionConfig is the API server's encryption configuration, in
// the folder its static pod mounts.
const pathEncryptionConfig = PathPKI + "/encryption-config.yaml"

// The API server's audit policy, and where it writes the audit log (a
// folder of the host, kept across the pod's restarts and the host's).
const (
	pathAuditPolicy = "/etc/kubernetes/audit/policy.yaml"
	pathAuditLog    = "/var/log/kubernetes/audit/audit.log"
)

// auditPolicy is what the API server records of each request, as the
// usual policies (kube-up's, GKE's) have it: nothing of the health
// probes, events and the control plane's own lease and endpoint
// traffic; Secrets, ConfigMaps and token requests at Metadata only, so
// their contents never reach the log; the body of every other write
// (Request); and who did what to what (Metadata) for every other
// request. Mutable: pushed over SSH, its change restarts the API server.
const auditPolicy = `# The API server's audit policy; rendered and pushed by OPKE.
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
  - RequestReceived
rules:
  - level: None
    nonResourceURLs:
      - /healthz*
      - /livez*
      - /readyz*
      - /version
      - /metrics
  - level: None
    resources:
      - group: ""
        resources: ["events"]
      - group: events.k8s.io
        resources: ["events"]
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
    resources:
      - group: ""
        resources: ["endpoints", "services", "services/status"]
      - group: discovery.k8s.io
        resources: ["endpointslices"]
  - level: None
    users: ["system:kube-controller-manager", "system:kube-scheduler", "system:serviceaccount:kube-system:endpoint-controller"]
    verbs: ["get", "update"]
    namespaces: ["kube-system"]
    resources:
      - group: ""
        resources: ["endpoints"]
      - group: coordination.k8s.io
        resources: ["leases"]
  - level: None
    userGroups: ["system:nodes"]
    verbs: ["get", "update", "patch"]
    resources:
      - group: ""
        resources: ["nodes/status"]
      - group: coordination.k8s.io
        resources: ["leases"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps", "serviceaccounts/token"]
      - group: authentication.k8s.io
        resources: ["tokenreviews"]
  - level: Request
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: Metadata
`

// encryptionConfig encrypts Secrets in etcd with the cluster's key
// (secretbox: XSalsa20 and Poly1305), and still reads those written in
// the clear before (identity), as the API server's documentation has it.
// A secret itself: pushed over SSH, 0600, never in user_data.
func encryptionConfig(key pki.Material) []byte {
	return []byte(`# Encryption of Secrets at rest; rendered and pushed by OPKE.
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources:
      - secrets
    providers:
      - secretbox:
          keys:
            - name: ` + string(key.Cert) + `
              secret: ` + string(key.Key) + `
      - identity: {}
`)
}

// etcdStart is how a controller's member starts: as the input says, or
// founding the cluster with the spec's controllers.
func (r *renderer) etcdStart(host string) EtcdStart {
	if s, ok := r.in.Etcd[host]; ok {
		return s
	}
	return EtcdStart{Members: slices.Clone(r.data.Controllers)}
}

// etcdEnv is the etcd member's environment: etcd's own ETCD_* settings,
// kubeadm's paths, and the image the etcd-member unit runs. The initial
// cluster and its state are start's: read by etcd on its first start
// only, with an empty data dir.
func (r *renderer) etcdEnv(h Host, start EtcdStart) ([]byte, error) {
	var initial []string
	for _, name := range start.Members {
		i, ok := schemas.ControllerIndex(r.c.Metadata.Name, name)
		if !ok {
			return nil, fmt.Errorf("%w: etcd member %s of %s is not one of its controllers", ErrBadInput, name, h.Name)
		}
		ip, err := r.c.ControllerIP(i)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		initial = append(initial, name+"=https://"+netip.AddrPortFrom(ip, 2380).String())
	}
	if !slices.Contains(start.Members, h.Name) {
		return nil, fmt.Errorf("%w: the etcd members %s starts with do not include it", ErrBadInput, h.Name)
	}
	state := "new"
	if start.Join {
		state = "existing"
	}
	ip := h.IP.String()
	const dir = PathPKI + "/etcd/"
	var b bytes.Buffer
	fmt.Fprintf(&b, "# etcd member %s of %s; rendered and pushed by OPKE.\n", h.Name, r.c.Metadata.Name)
	for _, kv := range [][2]string{
		{"ETCD_IMAGE", r.images.Etcd},
		{"ETCD_NAME", h.Name},
		{"ETCD_DATA_DIR", "/var/lib/etcd"},
		{"ETCD_LISTEN_CLIENT_URLS", "https://127.0.0.1:2379,https://" + ip + ":2379"},
		{"ETCD_ADVERTISE_CLIENT_URLS", "https://" + ip + ":2379"},
		{"ETCD_LISTEN_PEER_URLS", "https://" + ip + ":2380"},
		{"ETCD_INITIAL_ADVERTISE_PEER_URLS", "https://" + ip + ":2380"},
		{"ETCD_INITIAL_CLUSTER", strings.Join(initial, ",")},
		{"ETCD_INITIAL_CLUSTER_STATE", state},
		{"ETCD_INITIAL_CLUSTER_TOKEN", r.c.Metadata.Name},
		// Metrics (no secrets; plain HTTP, as kubeadm serves them) on the
		// host's address too, for the monitoring addon's Prometheus: only
		// the cluster's nodes reach it (security group).
		{"ETCD_LISTEN_METRICS_URLS", "http://127.0.0.1:2381,http://" + ip + ":2381"},
		{"ETCD_SNAPSHOT_COUNT", "10000"},
		{"ETCD_CLIENT_CERT_AUTH", "true"},
		{"ETCD_TRUSTED_CA_FILE", dir + "ca.crt"},
		{"ETCD_CERT_FILE", dir + "server.crt"},
		{"ETCD_KEY_FILE", dir + "server.key"},
		{"ETCD_PEER_CLIENT_CERT_AUTH", "true"},
		{"ETCD_PEER_TRUSTED_CA_FILE", dir + "ca.crt"},
		{"ETCD_PEER_CERT_FILE", dir + "peer.crt"},
		{"ETCD_PEER_KEY_FILE", dir + "peer.key"},
	} {
		fmt.Fprintf(&b, "%s=%s\n", kv[0], kv[1])
	}
	return b.Bytes(), nil
}

// staticPods renders kubeadm's control-plane static pods with their flags
// sorted, as kubeadm writes them.
//
// Each pod carries the sha256 of the files its flags name (its
// certificates, keys and kubeconfigs) in an annotation: a renewed
// certificate changes its manifest, and the kubelet starts the pod again
// with it (a kubelet restart alone keeps a static pod whose manifest did
// not change, and its old certificates in memory).
func (r *renderer) staticPods(h Host, inputs []File) ([]File, error) {
	etcd := make([]string, 0, r.c.Spec.Controllers.Count)
	for i := range r.c.Spec.Controllers.Count {
		ip, err := r.c.ControllerIP(i)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		etcd = append(etcd, "https://"+netip.AddrPortFrom(ip, 2379).String())
	}
	const p = PathPKI + "/"
	flags := map[string]map[string]string{
		"kube-apiserver": {
			"advertise-address": h.IP.String(), "allow-privileged": "true", "authorization-mode": "Node,RBAC",
			"client-ca-file": p + "ca.crt", "enable-admission-plugins": "NodeRestriction",
			"etcd-cafile": p + "etcd/ca.crt", "etcd-certfile": p + "apiserver-etcd-client.crt", "etcd-keyfile": p + "apiserver-etcd-client.key",
			"etcd-servers":               strings.Join(etcd, ","),
			"kubelet-client-certificate": p + "apiserver-kubelet-client.crt", "kubelet-client-key": p + "apiserver-kubelet-client.key",
			"kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
			"proxy-client-cert-file":          p + "front-proxy-client.crt", "proxy-client-key-file": p + "front-proxy-client.key",
			"requestheader-allowed-names": "front-proxy-client", "requestheader-client-ca-file": p + "front-proxy-ca.crt",
			"requestheader-extra-headers-prefix": "X-Remote-Extra-", "requestheader-group-headers": "X-Remote-Group",
			"requestheader-username-headers": "X-Remote-User", "secure-port": "6443",
			"service-account-issuer":   "https://kubernetes.default.svc." + pki.ClusterDomain,
			"service-account-key-file": p + "sa.pub", "service-account-signing-key-file": p + "sa.key",
			"service-cluster-ip-range": r.data.ServiceCIDR, "tls-cert-file": p + "apiserver.crt", "tls-private-key-file": p + "apiserver.key",
			"encryption-provider-config": pathEncryptionConfig,
			"audit-policy-file":          pathAuditPolicy, "audit-log-path": pathAuditLog,
			"audit-log-maxage": "30", "audit-log-maxbackup": "10", "audit-log-maxsize": "100",
		},
		"kube-controller-manager": {
			"allocate-node-cidrs": "true", "authentication-kubeconfig": "/etc/kubernetes/controller-manager.conf",
			"authorization-kubeconfig": "/etc/kubernetes/controller-manager.conf", "bind-address": "127.0.0.1",
			"client-ca-file": p + "ca.crt", "cluster-cidr": r.data.PodCIDR, "cluster-name": r.c.Metadata.Name,
			"cluster-signing-cert-file": p + "ca.crt", "cluster-signing-key-file": p + "ca.key",
			"controllers": "*,bootstrapsigner,tokencleaner", "kubeconfig": "/etc/kubernetes/controller-manager.conf",
			"leader-elect": "true", "requestheader-client-ca-file": p + "front-proxy-ca.crt", "root-ca-file": p + "ca.crt",
			"service-account-private-key-file": p + "sa.key", "service-cluster-ip-range": r.data.ServiceCIDR,
			"use-service-account-credentials": "true",
		},
		"kube-scheduler": {
			"authentication-kubeconfig": "/etc/kubernetes/scheduler.conf", "authorization-kubeconfig": "/etc/kubernetes/scheduler.conf",
			"bind-address": "127.0.0.1", "kubeconfig": "/etc/kubernetes/scheduler.conf", "leader-elect": "true",
		},
	}
	if r.data.CloudProvider {
		flags["kube-controller-manager"]["cloud-provider"] = "external"
	}
	if r.rotating() {
		flags["kube-controller-manager"]["cluster-signing-cert-file"] = pathSigningCA
	}
	var out []File
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		d := r.data
		d.ControllerHost = h.IP.String()
		read := map[string]bool{}
		for _, k := range slices.Sorted(maps.Keys(flags[name])) {
			d.Flags = append(d.Flags, "--"+k+"="+flags[name][k])
			read[flags[name][k]] = true
		}
		sum := sha256.New()
		for _, f := range inputs { // sorted by the caller's order: stable
			if read[f.Path] {
				fmt.Fprintf(sum, "%s %s\n", f.Path, f.SHA256)
			}
		}
		d.Inputs = hex.EncodeToString(sum.Sum(nil))
		b, err := execute(name+".yaml", d)
		if err != nil {
			return nil, err
		}
		out = append(out, newFile(PathManifests+"/"+name+".yaml", 0o600, b))
	}
	return out, nil
}

// clusterManifests are the API objects the applier sends to the cluster,
// one file per component, kept on every controller.
func (r *renderer) clusterManifests() ([]File, error) {
	var out []File
	for i, name := range manifestOrder {
		if !slices.Contains(coreManifests, name) && !r.addons[name] && name != r.c.Spec.Network.NetworkPolicy {
			continue
		}
		b, err := execute(name+".yaml", r.data)
		if err != nil {
			return nil, err
		}
		if crds, ok := manifestCRDs[name]; ok {
			crds.Path = fmt.Sprintf("%s/%02d-%s.crds.yaml", PathAddons, i, name)
			out = append(out, crds)
		}
		out = append(out, newFile(fmt.Sprintf("%s/%02d-%s.yaml", PathAddons, i, name), 0o644, b))
	}
	return out, nil
}

// cloudConf is the OpenStack cloud provider's configuration (INI).
func (r *renderer) cloudConf() File {
	c := r.in.Cloud
	var b strings.Builder
	b.WriteString("# OpenStack cloud provider configuration of " + r.c.Metadata.Name + "; rendered and pushed by OPKE.\n[Global]\n")
	kv := func(k, v string) {
		if v != "" {
			b.WriteString(k + "=" + v + "\n")
		}
	}
	kv("auth-url", c.AuthURL)
	kv("region", c.Region)
	kv("application-credential-id", c.ID)
	kv("application-credential-secret", c.Secret)
	b.WriteString("\n[LoadBalancer]\n")
	kv("subnet-id", c.SubnetID)
	kv("floating-network-id", c.FloatingNetworkID)
	b.WriteString("create-monitor=true\n")
	if s := r.c.Spec.Storage; s != nil && s.IgnoreVolumeAZ {
		// The Cinder CSI plugin: volumes' zones are not Nova's.
		b.WriteString("\n[BlockStorage]\nignore-volume-az=true\n")
	}
	// The cloud controller manager runs as uid and gid 1001, as upstream's
	// image does: the file is its group's to read, no one else's.
	f := secretFile(PathCloudConf, []byte(b.String()))
	f.Mode, f.Owner = 0o640, "root:"+cloudProviderGID
	return f
}

// cloudProviderGID is the group the OpenStack cloud controller manager
// runs as (upstream's image: uid and gid 1001), the group of cloud.conf.
const cloudProviderGID = "1001"

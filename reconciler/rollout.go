package reconciler

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"opke.dev/opke/cloud"
	"opke.dev/opke/diff"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/pki"
	"opke.dev/opke/schemas"
	"opke.dev/opke/sshx"
	"opke.dev/opke/state"
)

// DefaultGateTimeout is how long a host's health gate may take to pass.
const DefaultGateTimeout = 5 * time.Minute

// ErrGate is a health gate that did not pass: the rollout halts there.
var ErrGate = errors.New("health gate did not pass")

// ErrDrain is a drain that did not finish within the drain timeout.
var ErrDrain = errors.New("drain did not finish")

// Ports OPKE reaches on the hosts, through the gateway.
const (
	etcdClientPort = 2379
	apiPort        = 6443
)

// Dial opens a TCP connection to address (a host's fixed IP and port)
// through the cluster's gateway: SSH's direct-tcpip, nothing dialled
// from here but the gateway.
func (h *HostSessions) Dial(ctx context.Context, t HostTarget, address string) (net.Conn, error) {
	gw, err := h.conn(ctx, t, t.Gateway.Name)
	if err != nil {
		return nil, err
	}
	c, err := sshx.Forward(ctx, gw.ssh, address)
	if err != nil {
		// A channel the gateway refused says it is there; a connection
		// lost is made anew by the next dial (a transient error).
		if errors.Is(err, sshx.ErrConnectionLost) {
			h.drop(t, t.Gateway.Name)
		}
		return nil, fmt.Errorf("through the gateway of %s to %s: %w", t.Cluster, address, err)
	}
	return c, nil
}

// controllerIPs are the fixed IPs of t's controllers, by index.
func controllerIPs(t HostTarget) []netip.Addr {
	var out []netip.Addr
	for i := range len(t.Hosts) {
		if h, ok := t.Hosts[schemas.ControllerName(t.Cluster, i)]; ok {
			out = append(out, h.IP)
		}
	}
	return out
}

// kubeClient talks to one kube-apiserver through the gateway, as admin.
type kubeClient struct {
	base string
	http *http.Client
}

func (h *HostSessions) kube(t HostTarget, b *pki.Bundle, ip netip.Addr) (*kubeClient, error) {
	cfg, err := b.TLS(pki.CA, pki.Admin)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext:     func(ctx context.Context, _, addr string) (net.Conn, error) { return h.Dial(ctx, t, addr) },
		TLSClientConfig: cfg, ForceAttemptHTTP2: false, MaxIdleConnsPerHost: 2,
	}
	return &kubeClient{base: "https://" + netip.AddrPortFrom(ip, apiPort).String(), http: &http.Client{Transport: tr, Timeout: 15 * time.Second}}, nil
}

func (k *kubeClient) close() { k.http.CloseIdleConnections() }

// do sends a request; out, if set, receives a 2xx body as JSON.
func (k *kubeClient) do(ctx context.Context, method, path, contentType string, body any, out any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.base+path, r)
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, b, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, b, nil
}

// gateSpec is what a host's gate checks, from its change.
type gateSpec struct {
	host, version string
	role          schemas.Role
	units         []string
	// node: the host's Node must be Ready and report the version (a
	// worker's always; a controller's once its cluster runs).
	node bool
	// pods are the static pods whose manifests the apply pushed to the
	// host: each must run as pushed.
	pods []staticPod
}

func gateOf(c diff.Change) gateSpec {
	g := gateSpec{host: c.Address.Host, role: schemas.Role(c.After["role"].Value), version: c.After["version"].Value}
	if u := c.After["units"].Value; u != "" {
		g.units = strings.Split(u, ",")
	}
	g.node = g.role == schemas.RoleWorker || c.After["node"].Value == "Ready"
	return g
}

// gate waits until the host's health gate passes, probing every second
// up to the gate timeout; then it records the version the host runs.
func (h hostStep) gate(ctx context.Context, c diff.Change) error {
	a, g := h.a, gateOf(c)
	for _, path := range slices.Sorted(slices.Values(h.uploads[g.host])) {
		if !strings.HasPrefix(path, assets.PathManifests+"/") {
			continue
		}
		pod, err := parseStaticPod(h.files[g.host][path].Data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		g.pods = append(g.pods, pod)
	}
	timeout := cmp.Or(a.GateTimeout, DefaultGateTimeout)
	probe := &prober{a: a, apiAt: &apiAt{h: a.Hosts, t: h.t, b: h.pki}, g: g}
	defer probe.close()
	deadline := time.Now().Add(timeout)
	for {
		err := probe.run(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		if time.Now().After(deadline) {
			return waitedOut{fmt.Errorf("%w: %s (%s) within %s: %w", ErrGate, g.host, g.role, timeout, err)}
		}
		a.log().Debug("health gate not passed yet", "cluster", c.Cluster, "host", g.host, "why", err)
		waiting(ctx, fmt.Errorf("health gate not passed yet: %w", err))
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(cmp.Or(a.GateInterval, time.Second)):
		}
	}
	if err := h.j.hook("gate passed " + c.Address.String()); err != nil {
		return err
	}
	a.log().Info("health gate passed", "cluster", c.Cluster, "host", g.host, "version", g.version)
	return recordVersion(ctx, h.j.w, c.Cluster, g.host, g.version)
}

// prober runs a gate's checks, keeping its clients between probes.
type prober struct {
	*apiAt
	a    *Applier
	g    gateSpec
	etcd *clientv3.Client
}

func (p *prober) close() {
	if p.etcd != nil {
		_ = p.etcd.Close()
	}
	p.apiAt.close()
}

// apiAt reaches a cluster's API servers through its gateway, as admin.
type apiAt struct {
	h    *HostSessions
	t    HostTarget
	b    *pki.Bundle
	kube map[netip.Addr]*kubeClient // by controller
}

func (c *apiAt) close() {
	for _, k := range c.kube {
		k.close()
	}
}

// client is the API client of the controller at ip, made once.
func (c *apiAt) client(ip netip.Addr) (*kubeClient, error) {
	if k := c.kube[ip]; k != nil {
		return k, nil
	}
	k, err := c.h.kube(c.t, c.b, ip)
	if err != nil {
		return nil, err
	}
	if c.kube == nil {
		c.kube = map[netip.Addr]*kubeClient{}
	}
	c.kube[ip] = k
	return k, nil
}

func (p *prober) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, u := range p.g.units {
		out, err := p.a.Hosts.run(ctx, p.t, p.g.host, "systemctl is-active "+u)
		if state := strings.TrimSpace(string(out)); err != nil || state != "active" {
			return fmt.Errorf("%s is %s", u, cmp.Or(state, "not active: "+fmt.Sprint(err)))
		}
	}
	switch p.g.role {
	case schemas.RoleController:
		ip := p.t.Hosts[p.g.host].IP
		if err := p.etcdHealthy(ctx, ip); err != nil {
			return err
		}
		if err := p.apiServes(ctx, ip); err != nil {
			return err
		}
		k, err := p.client(ip)
		if err != nil {
			return err
		}
		if err := p.staticPodsRun(ctx, k); err != nil {
			return err
		}
	}
	if p.g.node {
		return p.nodeReady(ctx)
	}
	return nil
}

// etcdHealthy checks every member of the etcd cluster answers its status.
func (p *prober) etcdHealthy(ctx context.Context, ip netip.Addr) error {
	if p.etcd == nil {
		cfg, err := p.b.TLS(pki.EtcdCA, pki.EtcdOPKEClient)
		if err != nil {
			return err
		}
		p.etcd, err = clientv3.New(clientv3.Config{
			Endpoints: []string{"https://" + netip.AddrPortFrom(ip, etcdClientPort).String()}, TLS: cfg,
			DialTimeout: 10 * time.Second, Logger: state.QuietEtcdLogger(),
			DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return p.a.Hosts.Dial(ctx, p.t, addr)
			})},
		})
		if err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
	}
	members, err := p.etcd.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("etcd member list: %w", err)
	}
	for _, m := range members.Members {
		if len(m.ClientURLs) == 0 {
			return fmt.Errorf("etcd member %s has not started", cmp.Or(m.Name, fmt.Sprintf("%x", m.ID)))
		}
		st, err := p.etcd.Status(ctx, m.ClientURLs[0])
		if err != nil {
			return fmt.Errorf("etcd member %s: %w", m.Name, err)
		}
		if len(st.Errors) > 0 {
			return fmt.Errorf("etcd member %s: %s", m.Name, strings.Join(st.Errors, "; "))
		}
		if st.Leader == 0 {
			return fmt.Errorf("etcd member %s: no leader", m.Name)
		}
	}
	return nil
}

// apiServes checks the host's API server is ready and runs the version.
func (p *prober) apiServes(ctx context.Context, ip netip.Addr) error {
	k, err := p.client(ip)
	if err != nil {
		return err
	}
	code, body, err := k.do(ctx, http.MethodGet, "/readyz", "", nil, nil)
	switch {
	case err != nil:
		return fmt.Errorf("API server: %w", err)
	case code != http.StatusOK:
		return fmt.Errorf("API server /readyz: %d %s", code, firstLine(body))
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if _, _, err := k.do(ctx, http.MethodGet, "/version", "", nil, &v); err != nil {
		return fmt.Errorf("API server: %w", err)
	}
	if v.GitVersion != p.g.version {
		return fmt.Errorf("API server /version reports %s, want %s", cmp.Or(v.GitVersion, "nothing"), p.g.version)
	}
	return nil
}

// nodeReady checks, through a controller's API, that the node is Ready
// and its kubelet reports the version.
func (p *prober) nodeReady(ctx context.Context) error {
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
			NodeInfo   struct {
				KubeletVersion string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	}
	code, body, err := p.api(ctx, http.MethodGet, "/api/v1/nodes/"+p.g.host, "", nil, &node)
	switch {
	case err != nil:
		return err
	case code != http.StatusOK:
		return fmt.Errorf("node %s: %d %s", p.g.host, code, firstLine(body))
	}
	ready := slices.ContainsFunc(node.Status.Conditions, func(c struct{ Type, Status string }) bool { return c.Type == "Ready" && c.Status == "True" })
	if !ready {
		return fmt.Errorf("node %s is not Ready", p.g.host)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != p.g.version {
		return fmt.Errorf("node %s runs kubelet %s, want %s", p.g.host, cmp.Or(v, "(none)"), p.g.version)
	}
	return nil
}

// api calls the first controller's API server that answers, and goes on
// to the next one on a server error: an API server whose etcd connection
// broke (a member just removed from the membership) answers 500
// "Unavailable" for a moment while the others serve. When every one
// answers with a server error, it asks them all again, up to
// apiRounds times a second apart, then returns the last answer.
func (c *apiAt) api(ctx context.Context, method, path, contentType string, body, out any) (int, []byte, error) {
	for round := 1; ; round++ {
		var errs []error
		var lastCode int
		var lastBody []byte
		for _, ip := range controllerIPs(c.t) {
			k, err := c.client(ip)
			if err != nil {
				return 0, nil, err
			}
			code, b, err := k.do(ctx, method, path, contentType, body, out)
			switch {
			case err == nil && code < 500:
				return code, b, nil
			case err == nil:
				lastCode, lastBody = code, b
			default:
				errs = append(errs, err)
			}
		}
		switch {
		case lastCode != 0 && round < apiRounds:
			if err := cloud.Sleep(ctx, time.Second); err != nil {
				return lastCode, lastBody, nil
			}
			continue
		case lastCode != 0:
			return lastCode, lastBody, nil
		case len(errs) == 0:
			return 0, nil, errors.New("no controller to ask")
		}
		return 0, nil, fmt.Errorf("API server: %w", errors.Join(errs...))
	}
}

// apiRounds is how many times api asks every API server while all of
// them answer with a server error.
const apiRounds = 5

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// drain cordons a worker and evicts its pods through the API, as kubectl
// drain --ignore-daemonsets does: a DaemonSet's pods and static pods'
// mirrors are left (they would come straight back), finished pods are
// not waited for. An eviction a disruption budget refuses is retried, and
// a pod whose eviction was taken is waited for, up to the spec's drain
// timeout; then the drain fails naming the pods still there.
//
// A best-effort drain (a remediation's: the node's kubelet may be gone)
// does not wait for pods that are terminating, which a kubelet that does
// not answer cannot confirm (the pod garbage collector deletes them once
// the Node object goes), and goes on after the drain timeout with the
// pods a budget kept, saying so in the log.
func (a *Applier) drain(ctx context.Context, t HostTarget, b *pki.Bundle, spec *schemas.Cluster, host string, bestEffort bool) error {
	p := &apiAt{h: a.Hosts, t: t, b: b}
	defer p.close()
	if found, err := p.schedulable(ctx, host, false); err != nil || !found {
		return err // no node: nothing runs there
	}
	timeout := spec.Spec.Upgrade.DrainTimeout.Duration
	deadline := time.Now().Add(timeout)
	for {
		var pods struct {
			Items []drainPod `json:"items"`
		}
		code, body, err := p.api(ctx, http.MethodGet, "/api/v1/pods?fieldSelector=spec.nodeName%3D"+host, "", nil, &pods)
		switch {
		case err != nil:
			return fmt.Errorf("pods of %s: %w", host, err)
		case code != http.StatusOK:
			return fmt.Errorf("pods of %s: %d %s", host, code, firstLine(body))
		}
		var waiting []string
		for _, pod := range pods.Items {
			if pod.left() {
				continue
			}
			ref := pod.Metadata.Namespace + "/" + pod.Metadata.Name
			if pod.Metadata.DeletionTimestamp != "" {
				if !bestEffort {
					waiting = append(waiting, "pod "+ref+": terminating")
				}
				continue
			}
			ev := map[string]any{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": map[string]string{"name": pod.Metadata.Name, "namespace": pod.Metadata.Namespace}}
			code, body, err := p.api(ctx, http.MethodPost, "/api/v1/namespaces/"+pod.Metadata.Namespace+"/pods/"+pod.Metadata.Name+"/eviction", "application/json", ev, nil)
			switch {
			case err != nil:
				return fmt.Errorf("evict %s: %w", ref, err)
			case code == http.StatusNotFound:
			case code/100 == 2 && bestEffort:
			case code/100 == 2:
				waiting = append(waiting, "pod "+ref+": evicted, terminating")
			case code == http.StatusTooManyRequests:
				waiting = append(waiting, fmt.Sprintf("pod %s: %s", ref, budgetCause(body)))
			default:
				return fmt.Errorf("evict %s: %d %s", ref, code, firstLine(body))
			}
		}
		if len(waiting) == 0 {
			a.log().Info("drained", "cluster", t.Cluster, "host", host)
			return nil
		}
		if time.Now().After(deadline) && bestEffort {
			a.log().Warn("drain timeout passed; going on (best effort)", "cluster", t.Cluster, "host", host, "left", strings.Join(waiting, "; "))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s still has pods after the drain timeout %s: %s", ErrDrain, host, schemas.Duration{Duration: timeout}, strings.Join(waiting, "; "))
		}
		a.log().Debug("draining", "cluster", t.Cluster, "host", host, "waiting", waiting[0], "pods", len(waiting))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cmp.Or(a.GateInterval, time.Second)):
		}
	}
}

// schedulable uncordons a node (on) or cordons it, as kubectl does: a
// merge patch of spec.unschedulable (null takes it away). found is false
// for a node that does not exist.
func (p *apiAt) schedulable(ctx context.Context, host string, on bool) (found bool, err error) {
	verb, unschedulable := "cordon", any(true)
	if on {
		verb, unschedulable = "uncordon", nil
	}
	code, body, err := p.api(ctx, http.MethodPatch, "/api/v1/nodes/"+host, "application/merge-patch+json",
		map[string]any{"spec": map[string]any{"unschedulable": unschedulable}}, nil)
	switch {
	case err != nil:
		return false, fmt.Errorf("%s %s: %w", verb, host, err)
	case code == http.StatusNotFound:
		return false, nil
	case code/100 != 2:
		return false, fmt.Errorf("%s %s: %d %s", verb, host, code, firstLine(body))
	}
	return true, nil
}

// deleteNode deletes a host's Node object through the API; one already
// gone is done.
func (a *Applier) deleteNode(ctx context.Context, t HostTarget, b *pki.Bundle, host string) error {
	p := &apiAt{h: a.Hosts, t: t, b: b}
	defer p.close()
	code, body, err := p.api(ctx, http.MethodDelete, "/api/v1/nodes/"+host, "", nil, nil)
	switch {
	case err != nil:
		return fmt.Errorf("delete node %s: %w", host, err)
	case code == http.StatusNotFound, code/100 == 2:
		a.log().Info("node deleted", "cluster", t.Cluster, "host", host)
		return nil
	}
	return fmt.Errorf("delete node %s: %d %s", host, code, firstLine(body))
}

// drainPod is what a drain reads of a pod.
type drainPod struct {
	Metadata struct {
		Namespace         string            `json:"namespace"`
		Name              string            `json:"name"`
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp string            `json:"deletionTimestamp"`
		OwnerReferences   []struct {
			Kind       string `json:"kind"`
			Controller *bool  `json:"controller"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// left reports whether a drain leaves the pod: a DaemonSet's, a static
// pod's mirror, or one that finished.
func (p drainPod) left() bool {
	if _, mirror := p.Metadata.Annotations["kubernetes.io/config.mirror"]; mirror {
		return true
	}
	for _, o := range p.Metadata.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed"
}

// budgetCause is why an eviction was refused, from the API's Status.
func budgetCause(body []byte) string {
	var st struct {
		Message string `json:"message"`
		Details struct {
			Causes []struct{ Message string } `json:"causes"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &st) != nil {
		return firstLine(body)
	}
	if len(st.Details.Causes) > 0 && st.Details.Causes[0].Message != "" {
		return st.Details.Causes[0].Message
	}
	return st.Message
}

package reconciler

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"opke.dev/opke/cloud"
	"opke.dev/opke/render/assets"
	"opke.dev/opke/render/pki"
)

// The smoke checks of CheckCluster, in the order they run.
const (
	CheckPods         = "pods"
	CheckPodNetwork   = "pod-network"
	CheckService      = "service"
	CheckDNS          = "dns"
	CheckLoadBalancer = "load-balancer"
	CheckVolume       = "volume"
)

// Outcomes of a check.
const (
	CheckPassed  = "passed"
	CheckFailed  = "failed"
	CheckSkipped = "skipped"
)

// CheckOptions bound CheckCluster.
type CheckOptions struct {
	// Timeout is how long each check may wait for what it made (pods
	// ready, a load balancer's address, a volume attached); default 3m.
	Timeout time.Duration
	// Interval is the time between polls; default 2s.
	Interval time.Duration
	// Skip names checks not to run (those that need one are skipped
	// with it).
	Skip   []string
	Logger *slog.Logger
}

// Checks are the names of CheckCluster's checks, in their order.
var Checks = []string{CheckPods, CheckPodNetwork, CheckService, CheckDNS, CheckLoadBalancer, CheckVolume}

// CheckResult is one check's outcome: Detail says what it saw when it
// passed, why it failed, or why it did not run.
type CheckResult struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	// TookMillis is the check's own time.
	TookMillis int64  `json:"tookMillis"`
	Detail     string `json:"detail"`
}

// CheckReport is CheckCluster's account of a cluster.
type CheckReport struct {
	Cluster string `json:"cluster"`
	// Namespace is the check's own, deleted before the report returns
	// (Cleanup says how that went).
	Namespace  string        `json:"namespace"`
	Checks     []CheckResult `json:"checks"`
	Cleanup    string        `json:"cleanup"`
	TookMillis int64         `json:"tookMillis"`
}

// Passed: no check failed and the namespace was deleted.
func (r *CheckReport) Passed() bool {
	return r.Cleanup == "deleted" && !slices.ContainsFunc(r.Checks, func(c CheckResult) bool { return c.Status == CheckFailed })
}

// CheckImage runs the checks' pods: upstream's e2e test image, whose
// netexec serves its host name and dials others on request (what
// Kubernetes' own network e2e tests use it for).
const CheckImage = assets.CheckImage

// CheckCluster runs a bounded smoke test against an applied cluster, as
// the seed managed-k8s did after every deploy, through the paths OPKE
// uses: the API through the cluster's gateway, and a Service's load
// balancer at its address through hosts' Dialer (as from the Internet).
// In a namespace of its own, which it deletes at the end:
//   - pods: two netexec pods, on two schedulable nodes where there are
//     two, scheduled, pulled and ready;
//   - pod-network: the first pod reaches the second at its pod IP
//     (across nodes when they are on two);
//   - service: the first reaches the second through a Service's
//     cluster IP (kube-proxy);
//   - dns: the same through the Service's name (the cluster's DNS);
//   - load-balancer, when the cloud controller manager addon is on: a
//     Service of type LoadBalancer gets an address from Octavia, which
//     answers with the pod's name;
//   - volume, when the cinder-csi addon is on: a claim of the default
//     class is bound, attached and written by a pod.
//
// A check that cannot run because an earlier one failed is skipped, and
// says which. The error is for what kept the checks from running at
// all (the cluster not applied, its API unreachable).
func CheckCluster(ctx context.Context, p *Planner, hosts *HostSessions, cluster string, o CheckOptions) (*CheckReport, error) {
	started := time.Now()
	t, applied, err := ClusterHosts(ctx, p, cluster)
	if err != nil {
		return nil, err
	}
	api, err := hosts.asAdmin(ctx, t)
	if err != nil {
		return nil, err
	}
	defer api.close()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	c := &checker{api: api, hosts: hosts, t: t, o: o, ns: "opke-check-" + hex.EncodeToString(suffix[:]), report: &CheckReport{Cluster: cluster}}
	c.report.Namespace = c.ns
	c.o.Timeout = cmp.Or(o.Timeout, 3*time.Minute)
	c.o.Interval = cmp.Or(o.Interval, 2*time.Second)
	c.o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	addons := map[string]bool{}
	for _, a := range applied.Spec.Spec.Addons {
		addons[a.Name] = true
	}

	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": c.ns,
		"labels": map[string]string{"app.kubernetes.io/managed-by": "opke", "opke.dev/check": cluster,
			"pod-security.kubernetes.io/enforce": "restricted"}}}
	created := false
	defer func() {
		// The namespace goes with everything in it: the load balancer's
		// Service holds it until the cloud controller manager deleted the
		// load balancer, the claim until its volume is released. Tried
		// even when its creation's answer was lost (a 404 is done), and
		// after the caller gave up, within a bound of its own.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout+time.Minute)
		defer cancel()
		cleanup := c.deleteNamespace(ctx)
		if created {
			c.report.Cleanup = cleanup
		}
		c.report.TookMillis = time.Since(started).Milliseconds()
	}()
	if err := c.create(ctx, "/api/v1/namespaces", ns); err != nil {
		return nil, fmt.Errorf("check %s: %w", cluster, err)
	}
	created = true

	c.run(ctx, CheckPods, "", c.pods)
	c.run(ctx, CheckPodNetwork, CheckPods, c.podNetwork)
	c.run(ctx, CheckService, CheckPods, c.service)
	c.run(ctx, CheckDNS, CheckService, c.dns)
	if addons["openstack-cloud-controller-manager"] {
		c.run(ctx, CheckLoadBalancer, CheckPods, c.loadBalancer)
	} else {
		c.skip(CheckLoadBalancer, "the openstack-cloud-controller-manager addon is off: no Service gets a load balancer")
	}
	if addons["cinder-csi"] {
		c.run(ctx, CheckVolume, "", c.volume)
	} else {
		c.skip(CheckVolume, "the cinder-csi addon is off: no claim gets a volume")
	}
	return c.report, nil
}

// cleanupTimeout bounds the wait for the check's namespace to go.
const cleanupTimeout = 5 * time.Minute

// checker holds one CheckCluster's state.
type checker struct {
	api   *apiAt
	hosts *HostSessions
	t     HostTarget
	// deadline is the running check's: its polls end there.
	deadline time.Time
	o        CheckOptions
	ns       string
	report   *CheckReport
	// What the pods check found, for the ones after it.
	nodes     [2]string
	podIPs    [2]string
	serviceIP string
	passed    map[string]bool
}

// run runs one check unless the one it needs did not pass.
func (c *checker) run(ctx context.Context, name, needs string, fn func(context.Context) (string, error)) {
	if slices.Contains(c.o.Skip, name) {
		c.skip(name, "skipped as asked")
		return
	}
	if needs != "" && !c.passed[needs] {
		why := "did not pass"
		if slices.Contains(c.o.Skip, needs) {
			why = "was skipped"
		}
		c.skip(name, "needs the "+needs+" check, which "+why)
		return
	}
	// The check's whole time is bounded, however many waits it has; a
	// call that hangs past it ends with its context.
	started := time.Now()
	c.deadline = started.Add(c.o.Timeout)
	cctx, cancel := context.WithDeadline(ctx, c.deadline.Add(30*time.Second))
	defer cancel()
	detail, err := fn(cctx)
	r := CheckResult{Name: name, Status: CheckPassed, Detail: detail, TookMillis: time.Since(started).Milliseconds()}
	if err != nil {
		r.Status, r.Detail = CheckFailed, err.Error()
	} else {
		if c.passed == nil {
			c.passed = map[string]bool{}
		}
		c.passed[name] = true
	}
	c.o.Logger.Info("check", "cluster", c.report.Cluster, "check", name, "status", r.Status, "took", time.Duration(r.TookMillis)*time.Millisecond, "detail", r.Detail)
	c.report.Checks = append(c.report.Checks, r)
}

func (c *checker) skip(name, why string) {
	c.report.Checks = append(c.report.Checks, CheckResult{Name: name, Status: CheckSkipped, Detail: why})
}

// create posts an object; one that exists already is an error (the
// namespace is new).
func (c *checker) create(ctx context.Context, path string, obj any) error {
	code, body, err := c.api.api(ctx, http.MethodPost, path, "application/json", obj, nil)
	if err != nil {
		return err
	}
	if code/100 != 2 {
		return fmt.Errorf("POST %s: %d: %s", path, code, statusMessage(body))
	}
	return nil
}

// poll calls check every interval until it returns "" (done) or an
// error, or the timeout passes: then the last reason is the error.
func (c *checker) poll(ctx context.Context, what string, check func() (string, error)) error {
	deadline := c.deadline
	for {
		why, err := check()
		if err != nil {
			return err
		}
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not within the check's %s: %s", what, c.o.Timeout, why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (%s)", what, ctx.Err(), why)
		case <-time.After(c.o.Interval):
		}
	}
}

// checkPod is a netexec pod under the restricted Pod Security profile,
// ready when netexec's /healthz says its servers are (its UDP server on
// 8081 among them: without it /healthz never does).
func checkPod(name, node string, extra map[string]any) map[string]any {
	container := map[string]any{
		"name": "netexec", "image": CheckImage, "args": []string{"netexec", "--http-port=8080"},
		"ports":          []map[string]any{{"containerPort": 8080, "name": "http"}},
		"readinessProbe": map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": 8080}, "periodSeconds": 2},
		"securityContext": map[string]any{"allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 65534,
			"capabilities": map[string]any{"drop": []string{"ALL"}}, "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
		"resources": map[string]any{"requests": map[string]string{"cpu": "10m", "memory": "16Mi"}},
	}
	// A controller is a node of the cluster's network too: where there is
	// one worker, the server runs on a controller, across nodes still.
	spec := map[string]any{"containers": []any{container}, "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": false,
		"tolerations": []map[string]any{{"key": controlPlaneTaint, "operator": "Exists", "effect": "NoSchedule"}}}
	if node != "" {
		spec["nodeSelector"] = map[string]string{"kubernetes.io/hostname": node}
	}
	for k, v := range extra {
		switch k {
		case "volumeMounts":
			container[k] = v
		case "command":
			container["command"], container["args"] = v, nil
		default:
			spec[k] = v
		}
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"app.kubernetes.io/name": "opke-check", "opke.dev/check": name}},
		"spec":     spec}
}

// controlPlaneTaint is kubeadm's taint of its control-plane nodes, which
// the checks' pods tolerate.
const controlPlaneTaint = "node-role.kubernetes.io/control-plane"

// schedulable are the nodes a pod may land on: Ready, not cordoned,
// without a NoSchedule or NoExecute taint but the control plane's,
// workers first.
func (c *checker) schedulable(ctx context.Context) ([]string, error) {
	var nodes struct {
		Items []struct {
			Metadata struct {
				Name   string
				Labels map[string]string
			}
			Spec struct {
				Unschedulable bool
				Taints        []struct{ Key, Effect string }
			}
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
	}
	code, body, err := c.api.api(ctx, http.MethodGet, "/api/v1/nodes", "", nil, &nodes)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v1/nodes: %d: %s", code, statusMessage(body))
	}
	var workers, others []string
	for _, n := range nodes.Items {
		ready := slices.ContainsFunc(n.Status.Conditions, func(c struct{ Type, Status string }) bool { return c.Type == "Ready" && c.Status == "True" })
		tainted := slices.ContainsFunc(n.Spec.Taints, func(t struct{ Key, Effect string }) bool {
			return t.Effect == "NoExecute" || (t.Effect == "NoSchedule" && t.Key != controlPlaneTaint)
		})
		if !ready || tainted || n.Spec.Unschedulable {
			continue
		}
		if _, cp := n.Metadata.Labels["node-role.kubernetes.io/control-plane"]; cp {
			others = append(others, n.Metadata.Name)
		} else {
			workers = append(workers, n.Metadata.Name)
		}
	}
	return append(workers, others...), nil
}

// pods places a netexec pod on each of two schedulable nodes and waits
// until both are ready.
func (c *checker) pods(ctx context.Context) (string, error) {
	nodes, err := c.schedulable(ctx)
	if err != nil {
		return "", err
	}
	switch len(nodes) {
	case 0:
		return "", errors.New("no node is Ready and schedulable")
	case 1:
		nodes = append(nodes, nodes[0])
	}
	c.nodes = [2]string{nodes[0], nodes[1]}
	for i, name := range []string{"client", "server"} {
		if err := c.create(ctx, "/api/v1/namespaces/"+c.ns+"/pods", checkPod(name, c.nodes[i], nil)); err != nil {
			return "", err
		}
	}
	for i, name := range []string{"client", "server"} {
		ip, err := c.podReady(ctx, name)
		if err != nil {
			return "", err
		}
		c.podIPs[i] = ip
	}
	if c.nodes[0] == c.nodes[1] {
		return fmt.Sprintf("both pods ready on %s, the one schedulable node", c.nodes[0]), nil
	}
	return fmt.Sprintf("client ready on %s, server on %s", c.nodes[0], c.nodes[1]), nil
}

// podReady waits for a pod's Ready condition and returns its IP; while
// it waits, the reason is the pod's own (a pull that fails, a scheduler
// that cannot place it).
func (c *checker) podReady(ctx context.Context, name string) (string, error) {
	var ip string
	err := c.poll(ctx, "pod "+name+" ready", func() (string, error) {
		var pod struct {
			Status struct {
				Phase      string
				PodIP      string
				Conditions []struct{ Type, Status, Reason, Message string }
				// The first container's waiting reason: ErrImagePull, ...
				ContainerStatuses []struct {
					RestartCount int
					State        struct {
						Waiting    *struct{ Reason, Message string }
						Terminated *struct {
							Reason   string
							ExitCode int
						}
					}
					LastState struct {
						Terminated *struct {
							Reason   string
							ExitCode int
						}
					}
				}
			}
		}
		code, body, err := c.api.api(ctx, http.MethodGet, "/api/v1/namespaces/"+c.ns+"/pods/"+name, "", nil, &pod)
		if err != nil {
			return err.Error(), nil
		}
		if code != http.StatusOK {
			return fmt.Sprintf("%d: %s", code, statusMessage(body)), nil
		}
		for _, cond := range pod.Status.Conditions {
			switch {
			case cond.Type == "Ready" && cond.Status == "True":
				ip = pod.Status.PodIP
				return "", nil
			case cond.Type == "PodScheduled" && cond.Status != "True":
				return "not scheduled: " + cond.Message, nil
			}
		}
		for _, s := range pod.Status.ContainerStatuses {
			// A container that ended says why in its last lines.
			if x := cmp.Or(s.State.Terminated, s.LastState.Terminated); x != nil {
				return fmt.Sprintf("its container ended (%s, exit %d, %d restarts): %s", x.Reason, x.ExitCode, s.RestartCount, c.logTail(ctx, name, s.State.Terminated == nil)), nil
			}
			if w := s.State.Waiting; w != nil && w.Reason != "" {
				return fmt.Sprintf("%s: %s", w.Reason, firstLine([]byte(w.Message))), nil
			}
		}
		return "phase " + cmp.Or(pod.Status.Phase, "unknown") + ", not ready" + c.events(ctx, "Pod", name), nil
	})
	return ip, err
}

// logTail is the last lines of a pod's container's log (its previous
// run's, when it restarted), joined, for a reason.
func (c *checker) logTail(ctx context.Context, pod string, previous bool) string {
	q := url.Values{"tailLines": {"3"}, "previous": {fmt.Sprint(previous)}}
	code, body, err := c.api.api(ctx, http.MethodGet, "/api/v1/namespaces/"+c.ns+"/pods/"+pod+"/log?"+q.Encode(), "", nil, nil)
	if err != nil || code != http.StatusOK {
		return "no log"
	}
	return strings.Join(strings.Fields(strings.TrimSpace(string(body))), " ")
}

// dial asks the client pod's netexec, through the API's pod proxy, to
// fetch /hostname from host:port, and wants the server pod's name.
func (c *checker) dial(ctx context.Context, what, host string, port int) (string, error) {
	q := url.Values{"host": {host}, "port": {fmt.Sprint(port)}, "request": {"hostname"}, "protocol": {"http"}, "tries": {"1"}}
	path := "/api/v1/namespaces/" + c.ns + "/pods/client:8080/proxy/dial?" + q.Encode()
	var last string
	err := c.poll(ctx, what, func() (string, error) {
		var out struct{ Responses, Errors []string }
		code, body, err := c.api.api(ctx, http.MethodGet, path, "", nil, &out)
		switch {
		case err != nil:
			last = err.Error()
		case code != http.StatusOK:
			// netexec's own answer when it could not dial (a name it
			// could not resolve), or the proxy's.
			last = fmt.Sprintf("%d: %s", code, firstLine(body))
		case slices.Contains(out.Responses, "server"):
			return "", nil
		case len(out.Errors) > 0:
			last = out.Errors[0]
		default:
			last = fmt.Sprintf("answered %q, not the server pod's name", out.Responses)
		}
		return last, nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("client on %s reached server on %s at %s", c.nodes[0], c.nodes[1], net.JoinHostPort(host, fmt.Sprint(port))), nil
}

func (c *checker) podNetwork(ctx context.Context) (string, error) {
	return c.dial(ctx, "the server pod at its IP", c.podIPs[1], 8080)
}

// service makes a ClusterIP Service of the server pod and reaches it
// through its cluster IP.
func (c *checker) service(ctx context.Context) (string, error) {
	svc := map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "server"},
		"spec": map[string]any{"selector": map[string]string{"opke.dev/check": "server"},
			"ports": []map[string]any{{"name": "http", "port": 80, "targetPort": 8080}}}}
	if err := c.create(ctx, "/api/v1/namespaces/"+c.ns+"/services", svc); err != nil {
		return "", err
	}
	var got struct{ Spec struct{ ClusterIP string } }
	code, body, err := c.api.api(ctx, http.MethodGet, "/api/v1/namespaces/"+c.ns+"/services/server", "", nil, &got)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK || got.Spec.ClusterIP == "" {
		return "", fmt.Errorf("the Service server has no cluster IP: %d: %s", code, statusMessage(body))
	}
	c.serviceIP = got.Spec.ClusterIP
	return c.dial(ctx, "the server through its Service's cluster IP", c.serviceIP, 80)
}

// dns reaches the Service by its name in the cluster's domain, fully
// qualified (no search domains: one query, whose failure netexec
// reports within the API's timeout).
func (c *checker) dns(ctx context.Context) (string, error) {
	return c.dial(ctx, "the server through its Service's name", "server."+c.ns+".svc."+pki.ClusterDomain+".", 80)
}

// loadBalancer makes a Service of type LoadBalancer of the server pod,
// waits for its address from the cloud controller manager and fetches
// the pod's name through it, as a client on the Internet would.
func (c *checker) loadBalancer(ctx context.Context) (string, error) {
	svc := map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "server-lb"},
		"spec": map[string]any{"type": "LoadBalancer", "selector": map[string]string{"opke.dev/check": "server"},
			"ports": []map[string]any{{"name": "http", "port": 80, "targetPort": 8080}}}}
	if err := c.create(ctx, "/api/v1/namespaces/"+c.ns+"/services", svc); err != nil {
		return "", err
	}
	var addr string
	err := c.poll(ctx, "a load balancer's address for the Service server-lb", func() (string, error) {
		var got struct {
			Status struct {
				LoadBalancer struct {
					Ingress []struct{ IP, Hostname string }
				}
			}
		}
		code, body, err := c.api.api(ctx, http.MethodGet, "/api/v1/namespaces/"+c.ns+"/services/server-lb", "", nil, &got)
		if err != nil {
			return err.Error(), nil
		}
		if code != http.StatusOK {
			return fmt.Sprintf("%d: %s", code, statusMessage(body)), nil
		}
		if in := got.Status.LoadBalancer.Ingress; len(in) > 0 {
			addr = cmp.Or(in[0].IP, in[0].Hostname)
			return "", nil
		}
		return "no address yet" + c.events(ctx, "Service", "server-lb"), nil
	})
	if err != nil {
		return "", err
	}
	// The address is the cluster's to write: it is dialled only when it
	// is the Octavia load balancer's, as the cloud says.
	name := cloud.ServicePrefix(c.report.Cluster) + c.ns + "_server-lb"
	known, err := cloud.ServiceAddresses(ctx, c.t.Clients, name)
	if err != nil {
		return "", err
	}
	if !slices.Contains(known, addr) {
		return "", fmt.Errorf("the Service server-lb says its address is %s, which is not its load balancer %s's in Octavia (%v)", addr, name, known)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: c.hosts.Dialer.DialContext, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	target := "http://" + net.JoinHostPort(addr, "80") + "/hostname"
	err = c.poll(ctx, "an answer through the load balancer "+addr, func() (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err.Error(), nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "server" {
			return fmt.Sprintf("%d %q", resp.StatusCode, firstLine(b)), nil
		}
		return "", nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("the Service server-lb got %s from the cloud controller manager; the server answered through it", addr), nil
}

// events are the last warning on an object of the check's, for a
// wait's reason: the cloud controller manager says there why it made no
// load balancer, the kubelet why a pod is not ready, a provisioner why
// a claim has no volume.
func (c *checker) events(ctx context.Context, kind, name string) string {
	var list struct {
		Items []struct{ Type, Reason, Message string }
	}
	q := url.Values{"fieldSelector": {"involvedObject.kind=" + kind + ",involvedObject.name=" + name}}
	if code, _, err := c.api.api(ctx, http.MethodGet, "/api/v1/namespaces/"+c.ns+"/events?"+q.Encode(), "", nil, &list); err != nil || code != http.StatusOK {
		return ""
	}
	for _, e := range slices.Backward(list.Items) {
		if e.Type == "Warning" {
			return fmt.Sprintf(" (%s: %s)", e.Reason, firstLine([]byte(e.Message)))
		}
	}
	return ""
}

// volume claims a volume of the default class and has a pod write to
// it; the pod is ready once the file is written.
func (c *checker) volume(ctx context.Context) (string, error) {
	pvc := map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": map[string]any{"name": "data"},
		"spec": map[string]any{"accessModes": []string{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]string{"storage": "1Gi"}}}}
	if err := c.create(ctx, "/api/v1/namespaces/"+c.ns+"/persistentvolumeclaims", pvc); err != nil {
		return "", err
	}
	pod := checkPod("volume", "", map[string]any{
		"command":         []string{"/bin/sh", "-c", "echo opke > /data/check && exec /agnhost netexec --http-port=8080"},
		"volumeMounts":    []map[string]any{{"name": "data", "mountPath": "/data"}},
		"volumes":         []map[string]any{{"name": "data", "persistentVolumeClaim": map[string]string{"claimName": "data"}}},
		"securityContext": map[string]any{"fsGroup": 65534},
	})
	if err := c.create(ctx, "/api/v1/namespaces/"+c.ns+"/pods", pod); err != nil {
		return "", err
	}
	if _, err := c.podReady(ctx, "volume"); err != nil {
		return "", fmt.Errorf("%w%s", err, c.events(ctx, "PersistentVolumeClaim", "data"))
	}
	var got struct {
		Spec   struct{ VolumeName, StorageClassName string }
		Status struct{ Capacity map[string]string }
	}
	code, body, err := c.api.api(ctx, http.MethodGet, "/api/v1/namespaces/"+c.ns+"/persistentvolumeclaims/data", "", nil, &got)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK || got.Spec.VolumeName == "" {
		return "", fmt.Errorf("the claim data, its pod ready: %d: %s", code, statusMessage(body))
	}
	return fmt.Sprintf("the claim got %s (%s, class %s), attached and written by a pod", got.Spec.VolumeName, got.Status.Capacity["storage"], got.Spec.StorageClassName), nil
}

// deleteNamespace deletes the check's namespace and waits until it is
// gone, so that nothing it made (a load balancer, a volume) outlives
// the check; it says how that went.
func (c *checker) deleteNamespace(ctx context.Context) string {
	path := "/api/v1/namespaces/" + c.ns
	code, body, err := c.api.api(ctx, http.MethodDelete, path, "application/json", map[string]any{"propagationPolicy": "Background"}, nil)
	if err != nil {
		return "not deleted: " + err.Error()
	}
	if code/100 != 2 && code != http.StatusNotFound {
		return fmt.Sprintf("not deleted: %d: %s", code, statusMessage(body))
	}
	o := *c
	o.o.Timeout, o.deadline = cleanupTimeout, time.Now().Add(cleanupTimeout)
	err = o.poll(ctx, "the namespace "+c.ns+" deleted", func() (string, error) {
		var ns struct {
			Status struct {
				Phase      string
				Conditions []struct{ Type, Status, Message string }
			}
		}
		code, _, err := c.api.api(ctx, http.MethodGet, path, "", nil, &ns)
		switch {
		case err != nil:
			return err.Error(), nil
		case code == http.StatusNotFound:
			return "", nil
		}
		for _, cond := range ns.Status.Conditions {
			if cond.Status == "True" && strings.HasSuffix(cond.Type, "Remaining") {
				return cond.Message, nil
			}
		}
		return "phase " + ns.Status.Phase, nil
	})
	if err != nil {
		return "not deleted: " + err.Error()
	}
	return "deleted"
}

// String is a report as opke check prints it.
func (r *CheckReport) String() string {
	var b strings.Builder
	passed, failed := 0, 0
	for _, c := range r.Checks {
		switch c.Status {
		case CheckPassed:
			passed++
		case CheckFailed:
			failed++
		}
	}
	fmt.Fprintf(&b, "cluster %s: %d passed, %d failed, %d skipped in %s (namespace %s: %s)\n", r.Cluster, passed, failed,
		len(r.Checks)-passed-failed, (time.Duration(r.TookMillis) * time.Millisecond).Round(100*time.Millisecond), r.Namespace, r.Cleanup)
	for _, c := range r.Checks {
		took := "-"
		if c.Status != CheckSkipped {
			took = (time.Duration(c.TookMillis) * time.Millisecond).Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "  %-14s %-8s %7s  %s\n", c.Name, c.Status, took, printable(c.Detail))
	}
	return b.String()
}

// printable is s without what a terminal would act on: a detail quotes
// what the cluster says (events, logs, API messages), which is the
// cluster's to write.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsGraphic(r) {
			return r
		}
		return '?'
	}, s)
}

// JSON is a report as opke check --output json prints it.
func (r *CheckReport) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

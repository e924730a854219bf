package reconciler

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"opke.dev/opke/diff"
	"opke.dev/opke/render/pki"
)

// annotationTrust is the pod template annotation a workloads restart
// sets, as kubectl rollout restart sets its restartedAt: its value is
// the digest of what the pods are to trust (the CA bundle and the
// service account keys), so a restart resumed after a crash does not
// restart again what it restarted before.
const annotationTrust = "opke.dev/trust-sha256"

// workloadKinds are the workloads a restart restarts, by resource.
var workloadKinds = []struct{ resource, kind string }{
	{"deployments", "Deployment"}, {"daemonsets", "DaemonSet"}, {"statefulsets", "StatefulSet"},
}

// workload is what a restart reads of a Deployment, DaemonSet or
// StatefulSet.
type workload struct {
	Metadata struct {
		Namespace  string `json:"namespace"`
		Name       string `json:"name"`
		Generation int64  `json:"generation"`
	} `json:"metadata"`
	Spec struct {
		Replicas *int32 `json:"replicas"`
		Template struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		} `json:"template"`
	} `json:"spec"`
	Status struct {
		ObservedGeneration int64 `json:"observedGeneration"`
		// Deployment, StatefulSet.
		Replicas          int32 `json:"replicas"`
		UpdatedReplicas   int32 `json:"updatedReplicas"`
		ReadyReplicas     int32 `json:"readyReplicas"`
		AvailableReplicas int32 `json:"availableReplicas"`
		// StatefulSet.
		CurrentRevision string `json:"currentRevision"`
		UpdateRevision  string `json:"updateRevision"`
		// DaemonSet.
		DesiredNumberScheduled int32 `json:"desiredNumberScheduled"`
		UpdatedNumberScheduled int32 `json:"updatedNumberScheduled"`
		NumberAvailable        int32 `json:"numberAvailable"`
	} `json:"status"`
}

// want is how many pods the workload asks for.
func (w *workload) want(kind string) int32 {
	if kind == "DaemonSet" {
		return w.Status.DesiredNumberScheduled
	}
	if w.Spec.Replicas == nil {
		return 1
	}
	return *w.Spec.Replicas
}

// available reports whether every pod the workload asks for is up.
func (w *workload) available(kind string) bool {
	switch kind {
	case "DaemonSet":
		return w.Status.NumberAvailable >= w.want(kind)
	case "StatefulSet":
		return w.Status.ReadyReplicas >= w.want(kind)
	}
	return w.Status.AvailableReplicas >= w.want(kind)
}

// rolledOut reports whether the workload's pods are all of its current
// template and up, as kubectl rollout status says.
func (w *workload) rolledOut(kind string) bool {
	if w.Status.ObservedGeneration < w.Metadata.Generation || !w.available(kind) {
		return false
	}
	n := w.want(kind)
	switch kind {
	case "DaemonSet":
		return w.Status.UpdatedNumberScheduled >= n
	case "StatefulSet":
		return w.Status.UpdatedReplicas >= n && w.Status.CurrentRevision == w.Status.UpdateRevision
	}
	return w.Status.UpdatedReplicas >= n && w.Status.Replicas == n
}

// restartWorkloads restarts the cluster's workloads after a roll that
// changed what its controllers trust (diff's workloads step): once the
// controller-manager has published the CA bundle the controllers trust
// (kube-root-ca.crt in kube-system, which every new pod mounts), every
// Deployment, DaemonSet and StatefulSet gets a new pod template
// annotation, as kubectl rollout restart does, and those whose pods were
// all up are waited for until they have rolled out, up to the gate
// timeout. A workload that was not up before is restarted, not waited
// for. A bare pod is left as it is: it keeps what it trusted at start.
func (a *Applier) restartWorkloads(ctx context.Context, j *journal, t HostTarget, b *pki.Bundle, c diff.Change) error {
	p := &apiAt{h: a.Hosts, t: t, b: b}
	defer p.close()
	bundle := b.Trust(pki.CA)
	sum := sha256.Sum256(slices.Concat(bundle, b.Trust(pki.ServiceAccount)))
	digest := hex.EncodeToString(sum[:])
	timeout := cmp.Or(a.GateTimeout, DefaultGateTimeout)
	deadline := time.Now().Add(timeout)
	interval := cmp.Or(a.GateInterval, time.Second)
	const rootCA = "/api/v1/namespaces/kube-system/configmaps/kube-root-ca.crt"
	for {
		var cm struct {
			Data map[string]string `json:"data"`
		}
		code, body, err := p.api(ctx, http.MethodGet, rootCA, "", nil, &cm)
		var why string
		switch {
		case err != nil:
			why = err.Error()
		case code != http.StatusOK:
			why = fmt.Sprintf("%d %s", code, firstLine(body))
		case cm.Data["ca.crt"] != string(bundle):
			why = "it holds another bundle"
		}
		if why == "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the controller-manager has not published the controllers' CA bundle (kube-root-ca.crt in kube-system) after %s: %s",
				c.Address, timeout, why)
		}
		if err := sleepCtx(ctx, interval); err != nil {
			return err
		}
	}
	type ref struct{ resource, kind, namespace, name string }
	var wait []ref
	restarted := 0
	for _, k := range workloadKinds {
		var list struct {
			Items []workload `json:"items"`
		}
		code, body, err := p.api(ctx, http.MethodGet, "/apis/apps/v1/"+k.resource, "", nil, &list)
		switch {
		case err != nil:
			return fmt.Errorf("list %s: %w", k.resource, err)
		case code != http.StatusOK:
			return fmt.Errorf("list %s: %d %s", k.resource, code, firstLine(body))
		}
		for _, w := range list.Items {
			r := ref{k.resource, k.kind, w.Metadata.Namespace, w.Metadata.Name}
			if w.available(k.kind) && w.want(k.kind) > 0 {
				wait = append(wait, r)
			}
			if w.Spec.Template.Metadata.Annotations[annotationTrust] == digest {
				continue // restarted before a crash
			}
			patch := map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
				"annotations": map[string]string{annotationTrust: digest}}}}}
			code, body, err := p.api(ctx, http.MethodPatch, workloadPath(r.resource, r.namespace, r.name), "application/merge-patch+json", patch, nil)
			switch {
			case err != nil:
				return fmt.Errorf("restart %s %s/%s: %w", k.kind, r.namespace, r.name, err)
			case code == http.StatusNotFound:
				continue // gone since the list
			case code/100 != 2:
				return fmt.Errorf("restart %s %s/%s: %d %s", k.kind, r.namespace, r.name, code, firstLine(body))
			}
			restarted++
		}
	}
	a.log().Info("workloads restarted", "cluster", t.Cluster, "restarted", restarted, "waiting", len(wait))
	if err := j.hook("workloads restarted " + c.Address.String()); err != nil {
		return err
	}
	for len(wait) > 0 {
		var left []ref
		var why []string
		for _, r := range wait {
			var w workload
			code, body, err := p.api(ctx, http.MethodGet, workloadPath(r.resource, r.namespace, r.name), "", nil, &w)
			switch {
			case err != nil:
				return fmt.Errorf("%s %s/%s: %w", r.kind, r.namespace, r.name, err)
			case code == http.StatusNotFound:
				continue
			case code != http.StatusOK:
				return fmt.Errorf("%s %s/%s: %d %s", r.kind, r.namespace, r.name, code, firstLine(body))
			case !w.rolledOut(r.kind):
				left = append(left, r)
				why = append(why, fmt.Sprintf("%s %s/%s", r.kind, r.namespace, r.name))
			}
		}
		if wait = left; len(wait) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not rolled out after %s: %s", c.Address, timeout, strings.Join(why, ", "))
		}
		if err := sleepCtx(ctx, interval); err != nil {
			return err
		}
	}
	a.log().Info("workloads rolled out", "cluster", t.Cluster)
	return nil
}

// workloadPath is the API path of a namespaced apps/v1 object.
func workloadPath(resource, namespace, name string) string {
	return "/apis/apps/v1/namespaces/" + namespace + "/" + resource + "/" + name
}

package reconciler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"opke.dev/opke/diff"
	"opke.dev/opke/internal/kubestatus"
	"opke.dev/opke/render/pki"
)

// annotationTrust is the pod template annotation a workloads restart
// sets, as kubectl rollout restart sets its restartedAt: its value is
// the digest of what the pods are to trust (the CA bundle and the
// service account keys), so a restart resumed after a crash does not
// restart again what it restarted before.
const annotationTrust = "opke.dev/trust-sha256"

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
	// raw is the object as the API gave it.
	raw json.RawMessage
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

// rolledOut says whether the workload's pods are all of its current
// template and up, as kubectl rollout status says (internal/kubestatus),
// and if not, why.
func (w *workload) rolledOut(kind string) (bool, string) {
	done, why, err := kubestatus.RolledOut(kind, w.raw, 0)
	if err != nil {
		return false, err.Error()
	}
	return done, why
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
	api := &apiAt{h: a.Hosts, t: t, b: b}
	defer api.close()
	bundle := b.Trust(pki.CA)
	sum := sha256.Sum256(slices.Concat(bundle, b.Trust(pki.ServiceAccount)))
	digest := hex.EncodeToString(sum[:])
	err := a.pollUntil(ctx, "the controller-manager to publish the controllers' CA bundle (kube-root-ca.crt in kube-system)", func() (error, error) {
		var cm struct {
			Data map[string]string `json:"data"`
		}
		code, body, err := api.api(ctx, http.MethodGet, "/api/v1/namespaces/kube-system/configmaps/kube-root-ca.crt", "", nil, &cm)
		switch {
		case err != nil:
			return err, nil
		case code != http.StatusOK:
			return fmt.Errorf("%d %s", code, firstLine(body)), nil
		case cm.Data["ca.crt"] != string(bundle):
			return errors.New("it holds another bundle"), nil
		}
		return nil, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", c.Address, err)
	}
	wait := map[string]bool{} // the workloads that were up, by ref
	restarted := 0
	for _, k := range kubestatus.Workloads() {
		items, err := listWorkloads(ctx, api, k.Resource)
		if err != nil {
			return err
		}
		for _, w := range items {
			ref := w.ref(k.Kind)
			if w.available(k.Kind) && w.want(k.Kind) > 0 {
				wait[ref] = true
			}
			if w.Spec.Template.Metadata.Annotations[annotationTrust] == digest {
				continue // restarted before a crash
			}
			patch := map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
				"annotations": map[string]string{annotationTrust: digest}}}}}
			path, _ := kubestatus.Path("apps/v1", k.Kind, w.Metadata.Namespace, w.Metadata.Name)
			code, body, err := api.api(ctx, http.MethodPatch, path, "application/merge-patch+json", patch, nil)
			switch {
			case err != nil:
				return fmt.Errorf("restart %s: %w", ref, err)
			case code == http.StatusNotFound:
				continue // gone since the list
			case code/100 != 2:
				return fmt.Errorf("restart %s: %d %s", ref, code, firstLine(body))
			}
			restarted++
		}
	}
	a.log().Info("workloads restarted", "cluster", t.Cluster, "restarted", restarted, "waiting", len(wait))
	if err := j.hook("workloads restarted " + c.Address.String()); err != nil {
		return err
	}
	err = a.pollUntil(ctx, "the restarted workloads to roll out", func() (error, error) {
		var left []string
		for _, k := range kubestatus.Workloads() {
			items, err := listWorkloads(ctx, api, k.Resource)
			if err != nil {
				return nil, err
			}
			for _, w := range items {
				if ref := w.ref(k.Kind); wait[ref] {
					if done, why := w.rolledOut(k.Kind); !done {
						left = append(left, ref+": "+why)
					}
				}
			}
		}
		if len(left) > 0 {
			return errors.New(strings.Join(left, ", ")), nil
		}
		return nil, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", c.Address, err)
	}
	a.log().Info("workloads rolled out", "cluster", t.Cluster)
	return nil
}

// ref names a workload in messages: "DaemonSet kube-system/kube-proxy".
func (w *workload) ref(kind string) string {
	return kind + " " + w.Metadata.Namespace + "/" + w.Metadata.Name
}

// listWorkloads lists an apps/v1 resource in every namespace.
func listWorkloads(ctx context.Context, api *apiAt, resource string) ([]workload, error) {
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	code, body, err := api.api(ctx, http.MethodGet, "/apis/apps/v1/"+resource, "", nil, &list)
	switch {
	case err != nil:
		return nil, fmt.Errorf("list %s: %w", resource, err)
	case code != http.StatusOK:
		return nil, fmt.Errorf("list %s: %d %s", resource, code, firstLine(body))
	}
	out := make([]workload, len(list.Items))
	for i, raw := range list.Items {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("list %s: %w", resource, err)
		}
		out[i].raw = raw
	}
	return out, nil
}

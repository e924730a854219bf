package kubestub

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// The workloads' status. Nothing behind the stub runs pods, so the status
// a Deployment, DaemonSet or StatefulSet shows is what its controller
// would write were each pod running at once on a node it fits: a node
// whose labels its nodeSelector and required node affinity select, whose
// NoSchedule and NoExecute taints it tolerates (a DaemonSet's pods also
// tolerate a cordon, a node not ready or unreachable, as the DaemonSet
// controller adds those tolerations), and, for a pod to be available, a
// Ready node (its kubelet active). Not modelled: images pulled, probes,
// the time pods take to start, the scheduler's resources and spreading,
// a Deployment's progress deadline. The stub never reports a workload
// available that the real cluster could not run on the same nodes; make
// e2e meets the rest.

// objectStatus is obj, an applied Deployment, DaemonSet or StatefulSet,
// with the status its controller would give it on nodes, or a custom
// resource definition established (crd.go). Another kind is returned as
// it is.
func objectStatus(t target, obj json.RawMessage, nodes []corev1.Node) (json.RawMessage, error) {
	if t.gv == crdGV {
		return crdStatus(obj, !t.establishing)
	}
	if t.gv != appsv1.SchemeGroupVersion.String() {
		return obj, nil
	}
	switch t.res.Kind {
	case "Deployment":
		var d appsv1.Deployment
		if err := json.Unmarshal(obj, &d); err != nil {
			return nil, fmt.Errorf("stored deployment: %w", err)
		}
		replicas, running := pods(d.Spec.Replicas, &d.Spec.Template.Spec, nodes)
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas,
			ReadyReplicas: running, AvailableReplicas: running, UnavailableReplicas: replicas - running,
			Conditions: []appsv1.DeploymentCondition{available(running == replicas)},
		}
		return json.Marshal(d)
	case "DaemonSet":
		var d appsv1.DaemonSet
		if err := json.Unmarshal(obj, &d); err != nil {
			return nil, fmt.Errorf("stored daemon set: %w", err)
		}
		var desired, ready int32
		for i := range nodes {
			if fits(&d.Spec.Template.Spec, &nodes[i], true) {
				desired++
				if isReady(&nodes[i]) {
					ready++
				}
			}
		}
		d.Status = appsv1.DaemonSetStatus{
			ObservedGeneration: d.Generation, DesiredNumberScheduled: desired, CurrentNumberScheduled: desired,
			UpdatedNumberScheduled: desired, NumberReady: ready, NumberAvailable: ready, NumberUnavailable: desired - ready,
		}
		return json.Marshal(d)
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err := json.Unmarshal(obj, &s); err != nil {
			return nil, fmt.Errorf("stored stateful set: %w", err)
		}
		replicas, running := pods(s.Spec.Replicas, &s.Spec.Template.Spec, nodes)
		revision := s.Name + "-" + strconv.FormatInt(s.Generation, 10)
		s.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: s.Generation, Replicas: replicas, ReadyReplicas: running, AvailableReplicas: running,
			CurrentReplicas: running, UpdatedReplicas: running, CurrentRevision: revision, UpdateRevision: revision,
		}
		return json.Marshal(s)
	}
	return obj, nil
}

// pods are how many pods a Deployment's or StatefulSet's spec asks for
// (the API server's default: 1) and how many run: all of them once a
// Ready node they fit is there (the scheduler's spreading aside), else
// none.
func pods(replicas *int32, spec *corev1.PodSpec, nodes []corev1.Node) (want, running int32) {
	want = 1
	if replicas != nil {
		want = *replicas
	}
	if slices.ContainsFunc(nodes, func(n corev1.Node) bool { return isReady(&n) && fits(spec, &n, false) }) {
		running = want
	}
	return want, running
}

func available(ok bool) appsv1.DeploymentCondition {
	c := appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
		Message: "Deployment has minimum availability."}
	if !ok {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, "MinimumReplicasUnavailable", "Deployment does not have minimum availability."
	}
	return c
}

func isReady(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
}

// daemonTolerations are what the DaemonSet controller adds to its pods
// (k8s.io/kubernetes pkg/controller/daemon/util: AddOrUpdateDaemonPodTolerations).
var daemonTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// fits says whether a pod of spec may be placed on n: its node selector,
// its required node affinity and its tolerations (with the DaemonSet
// controller's for a daemon's pod; a cordon keeps out other pods).
func fits(spec *corev1.PodSpec, n *corev1.Node, daemon bool) bool {
	for k, v := range spec.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if !slices.ContainsFunc(terms, func(term corev1.NodeSelectorTerm) bool { return termSelects(term, n) }) {
			return false
		}
	}
	tolerations := spec.Tolerations
	if daemon {
		tolerations = slices.Concat(tolerations, daemonTolerations)
	} else if n.Spec.Unschedulable {
		return false
	}
	for i := range n.Spec.Taints {
		taint := &n.Spec.Taints[i]
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), taint, false) }) {
			return false
		}
	}
	return true
}

// termSelects: every expression of term holds for n's labels (matchFields:
// metadata.name only, as the scheduler supports).
func termSelects(term corev1.NodeSelectorTerm, n *corev1.Node) bool {
	fields := map[string]string{"metadata.name": n.Name}
	for _, r := range term.MatchExpressions {
		if !requirement(r, n.Labels) {
			return false
		}
	}
	for _, r := range term.MatchFields {
		if !requirement(r, fields) {
			return false
		}
	}
	return len(term.MatchExpressions)+len(term.MatchFields) > 0 // an empty term selects nothing
}

func requirement(r corev1.NodeSelectorRequirement, labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return ok && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !ok || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return ok
	case corev1.NodeSelectorOpDoesNotExist:
		return !ok
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !ok || len(r.Values) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		return (r.Operator == corev1.NodeSelectorOpGt && have > want) || (r.Operator == corev1.NodeSelectorOpLt && have < want)
	}
	return false
}

// generation is the metadata.generation an apply gives obj: 1 when it is
// new, one more than before when its spec changed (as the API server
// counts for the workloads and every kind with a spec), else unchanged.
func generation(had json.RawMessage, obj map[string]any) {
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		return
	}
	var before map[string]any
	if had == nil || json.Unmarshal(had, &before) != nil {
		md["generation"] = 1
		return
	}
	g := int64(1)
	if bmd, ok := before["metadata"].(map[string]any); ok {
		if f, ok := bmd["generation"].(float64); ok && f >= 1 {
			g = int64(f)
		}
	}
	if !reflect.DeepEqual(normalise(before["spec"]), normalise(obj["spec"])) {
		g++
	}
	md["generation"] = g
}

// normalise makes a decoded value comparable whatever decoder read it
// (YAML's ints against JSON's float64s).
func normalise(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// servedNodes are the cluster's Node objects as the API serves them now.
func (h *handler) servedNodes(o *Objects, live map[string]Node) []corev1.Node {
	out := make([]corev1.Node, 0, len(o.Nodes))
	for _, name := range slices.Sorted(maps.Keys(o.Nodes)) {
		out = append(out, h.node(lookup(o, live, name), o))
	}
	return out
}

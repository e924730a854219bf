// Package kubestatus reads what OPKE asks of the API's objects: whether a
// workload has finished rolling out, as `kubectl rollout status` reads a
// Deployment, a DaemonSet or a StatefulSet
// (k8s.io/kubectl pkg/polymorphichelpers/rollout_status.go), with one
// difference for DaemonSets, below; and who manages an object's fields
// ([Fields]). OPKE waits on the first after each manifest it applies and
// finds hand edits of its objects by the second; the stand-in API
// server's contract (internal/kubecontract) holds the stand-in to a real
// cluster by the same readings, which is why it is a package of its own.
package kubestatus

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ErrStuck is a rollout that will not finish by waiting (a Deployment past
// its progress deadline).
var ErrStuck = errors.New("rollout stuck")

// Workload is a kind that rolls out, and its resource in apps/v1.
type Workload struct{ Kind, Resource string }

// Workloads are the kinds RolledOut reads, in the order kubectl lists them.
func Workloads() []Workload {
	return []Workload{{"Deployment", "deployments"}, {"DaemonSet", "daemonsets"}, {"StatefulSet", "statefulsets"}}
}

// Path is the apps/v1 API path of a workload object, and whether an
// object of this apiVersion and kind is one (one that rolls out).
func Path(apiVersion, kind, namespace, name string) (string, bool) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || gv.Group != appsv1.GroupName {
		return "", false
	}
	for _, w := range Workloads() {
		if w.Kind == kind {
			return "/apis/" + appsv1.SchemeGroupVersion.String() + "/namespaces/" + url.PathEscape(namespace) + "/" + w.Resource + "/" + url.PathEscape(name), true
		}
	}
	return "", false
}

// NotReady counts the nodes of a NodeList (the API's JSON) whose Ready
// condition is not True: what RolledOut allows a DaemonSet.
func NotReady(nodeList []byte) (int, error) {
	var list corev1.NodeList
	if err := json.Unmarshal(nodeList, &list); err != nil {
		return 0, fmt.Errorf("read a NodeList: %w", err)
	}
	n := 0
	for _, node := range list.Items {
		if !slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}) {
			n++
		}
	}
	return n, nil
}

// RolledOut reads obj, the JSON of a Deployment, DaemonSet or StatefulSet
// as the API returns it, and says whether its rollout is done, and if not
// why (kubectl's words). notReady is how many of the cluster's nodes are
// not Ready: a DaemonSet's pods on them cannot become available, so a
// DaemonSet counts done when all but that many of its pods are (kubectl
// would wait until the nodes come back or are deleted, which a node being
// replaced, or down, makes an outage of every addon's apply). An error is
// a body that is not the kind, or ErrStuck.
func RolledOut(kind string, obj []byte, notReady int) (bool, string, error) {
	switch kind {
	case "Deployment":
		var d appsv1.Deployment
		if err := json.Unmarshal(obj, &d); err != nil {
			return false, "", fmt.Errorf("read a Deployment: %w", err)
		}
		return deployment(&d)
	case "DaemonSet":
		var d appsv1.DaemonSet
		if err := json.Unmarshal(obj, &d); err != nil {
			return false, "", fmt.Errorf("read a DaemonSet: %w", err)
		}
		return daemonSet(&d, notReady)
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err := json.Unmarshal(obj, &s); err != nil {
			return false, "", fmt.Errorf("read a StatefulSet: %w", err)
		}
		return statefulSet(&s)
	}
	return false, "", fmt.Errorf("no rollout status for a %s", kind)
}

func deployment(d *appsv1.Deployment) (bool, string, error) {
	if d.Generation > d.Status.ObservedGeneration {
		return false, "waiting for the deployment spec update to be observed", nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, "", fmt.Errorf("%w: deployment %q exceeded its progress deadline", ErrStuck, d.Name)
		}
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	switch s := d.Status; {
	case s.UpdatedReplicas < replicas:
		return false, fmt.Sprintf("%d out of %d new replicas have been updated", s.UpdatedReplicas, replicas), nil
	case s.Replicas > s.UpdatedReplicas:
		return false, fmt.Sprintf("%d old replicas are pending termination", s.Replicas-s.UpdatedReplicas), nil
	case s.AvailableReplicas < s.UpdatedReplicas:
		return false, fmt.Sprintf("%d of %d updated replicas are available", s.AvailableReplicas, s.UpdatedReplicas), nil
	}
	return true, "", nil
}

func daemonSet(d *appsv1.DaemonSet, notReady int) (bool, string, error) {
	if d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		// kubectl: rollout status is only available for RollingUpdate.
		return true, "", nil
	}
	if d.Generation > d.Status.ObservedGeneration {
		return false, "waiting for the daemon set spec update to be observed", nil
	}
	s, allow := d.Status, int32(max(notReady, 0))
	switch {
	case s.UpdatedNumberScheduled+allow < s.DesiredNumberScheduled:
		return false, fmt.Sprintf("%d out of %d new pods have been updated", s.UpdatedNumberScheduled, s.DesiredNumberScheduled), nil
	case s.NumberAvailable+allow < s.DesiredNumberScheduled:
		return false, fmt.Sprintf("%d of %d updated pods are available", s.NumberAvailable, s.DesiredNumberScheduled), nil
	}
	return true, "", nil
}

func statefulSet(s *appsv1.StatefulSet) (bool, string, error) {
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return true, "", nil
	}
	if s.Status.ObservedGeneration == 0 || s.Generation > s.Status.ObservedGeneration {
		return false, "waiting for the statefulset spec update to be observed", nil
	}
	replicas := int32(1)
	if s.Spec.Replicas != nil {
		replicas = *s.Spec.Replicas
	}
	if s.Status.ReadyReplicas < replicas {
		return false, fmt.Sprintf("waiting for %d pods to be ready", replicas-s.Status.ReadyReplicas), nil
	}
	// As kubectl: with a partition (the API server sets 0 by default),
	// the pods past it updated is done; without, the revisions must meet.
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		if want := replicas - *ru.Partition; s.Status.UpdatedReplicas < want {
			return false, fmt.Sprintf("waiting for partitioned roll out to finish: %d out of %d new pods have been updated", s.Status.UpdatedReplicas, want), nil
		}
		return true, "", nil
	}
	if s.Status.UpdateRevision != s.Status.CurrentRevision {
		return false, fmt.Sprintf("waiting for statefulset rolling update to complete %d pods at revision %s", s.Status.UpdatedReplicas, s.Status.UpdateRevision), nil
	}
	return true, "", nil
}

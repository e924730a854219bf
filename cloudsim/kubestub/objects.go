package kubestub

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrNotFound is a node or pod the cluster does not have.
var ErrNotFound = errors.New("not found")

// notFound is a missing object of a resource ("nodes", "pods"), worded
// as the API server's NotFound Status is.
type notFound struct{ resource, name string }

func (e *notFound) Error() string        { return fmt.Sprintf("%s %q not found", e.resource, e.name) }
func (e *notFound) Is(target error) bool { return target == ErrNotFound }

// BudgetError is an eviction a disruption budget refuses.
type BudgetError struct {
	Namespace, Budget              string
	DesiredHealthy, CurrentHealthy int
}

// Error is worded as the API server words the refusal's cause (naming the
// budget without its namespace).
func (e *BudgetError) Error() string {
	return fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", e.Budget, e.DesiredHealthy, e.CurrentHealthy)
}

// Node is a cluster node as the simulator sees its host: as it runs now
// (from the backend), or as it last registered (kept in [Objects]).
type Node struct {
	Name           string `json:"name"`
	InternalIP     string `json:"internalIP,omitempty"`
	Ready          bool   `json:"-"`                        // the host's kubelet unit is active
	KubeletVersion string `json:"kubeletVersion,omitempty"` // the tag of the kubelet image it runs
	// Since is when its kubelet last started or stopped: its Ready
	// condition's last transition. The stub's condition turns at once; a
	// real node lifecycle controller marks a silent kubelet's node
	// Unknown only after its grace period (40 s to 50 s), which only
	// makes the real world's wait longer.
	Since time.Time `json:"-"`
	gone  bool      // registered, its host gone
	// Labels and Taints are what its kubelet registers it with
	// (--node-labels, --register-with-taints; [KubeletRegistration]).
	Labels map[string]string `json:"labels,omitempty"`
	Taints []corev1.Taint    `json:"taints,omitempty"`
}

// Pod is a pod bound to a node; tests set them through the admin endpoint.
type Pod struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Node      string            `json:"node"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Owner is its controller, "DaemonSet/NAME" or "ReplicaSet/NAME".
	// A DaemonSet's pod comes straight back on its node when evicted, as
	// the DaemonSet controller makes it again there (it tolerates the
	// cordon).
	Owner string `json:"owner,omitempty"`
	// Mirror marks a static pod's mirror: its kubelet makes it again when
	// it is deleted. The kubelet's own carry the manifest's annotations
	// and containers, as a kubelet copies them.
	Mirror      bool              `json:"mirror,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Containers  []Container       `json:"containers,omitempty"`
	// Phase is Running unless set (Succeeded and Failed pods are done).
	Phase string `json:"phase,omitempty"`
	// Stuck is a pod whose eviction is taken but which never terminates
	// (a finalizer, a hung preStop hook).
	Stuck bool `json:"stuck,omitempty"`
	// Terminating is set once a Stuck pod's eviction was taken.
	Terminating bool `json:"terminating,omitempty"`
}

// Container is a pod's container as a static pod's manifest names it.
type Container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
}

// SetMirrors replaces node's mirror pods, as its kubelet keeps one per
// static pod it runs.
func (o *Objects) SetMirrors(node string, pods []Pod) {
	o.Pods = slices.DeleteFunc(o.Pods, func(p Pod) bool { return p.Node == node && p.Mirror })
	o.Pods = append(o.Pods, pods...)
}

// Budget is a pod disruption budget reduced to what eviction consults: the
// pods it selects (matchLabels) and how many may still go.
type Budget struct {
	Namespace          string            `json:"namespace"`
	Name               string            `json:"name"`
	Selector           map[string]string `json:"selector"`
	DisruptionsAllowed int               `json:"disruptionsAllowed"`
	// DesiredHealthy and CurrentHealthy are its status's, for the message
	// of a refusal.
	DesiredHealthy int `json:"desiredHealthy,omitempty"`
	CurrentHealthy int `json:"currentHealthy,omitempty"`
}

// Objects is what the API keeps of a cluster: nodes, cordons, pods and
// budgets. It is a value the simulator keeps with its state.
type Objects struct {
	// Nodes are the Node objects, by name. A kubelet registers its node
	// when it starts; the object stays when the host is gone (its Ready
	// condition Unknown, as the node lifecycle controller marks it), until
	// it is deleted through the API, as a real cluster keeps it.
	Nodes         map[string]Node `json:"nodes,omitempty"`
	Unschedulable map[string]bool `json:"unschedulable,omitempty"`
	Pods          []Pod           `json:"pods,omitempty"`
	Budgets       []Budget        `json:"budgets,omitempty"`
	// Applied are the objects server-side applies made, as applied, by
	// group version, resource, namespace and name.
	Applied map[string]json.RawMessage `json:"applied,omitempty"`
	// NodeLabels are the labels server-side applies gave nodes, by node.
	NodeLabels map[string]map[string]string `json:"nodeLabels,omitempty"`
	// Established is when each applied custom resource definition, by
	// name, is established (crd.go).
	Established map[string]time.Time `json:"established,omitempty"`
	// NodeManaged are the managedFields of those applies, by node.
	NodeManaged map[string][]metav1.ManagedFieldsEntry `json:"nodeManaged,omitempty"`
	// Recreated counts the DaemonSet pods made again, for their names.
	Recreated int `json:"recreated,omitempty"`
	// RootCA is what the controller-manager publishes as kube-root-ca.crt
	// in every namespace: the content of its --root-ca-file. The
	// simulator sets it from the controller-manager's static pod of the
	// controller whose kubelet last started it.
	RootCA string `json:"rootCA,omitempty"`
}

// PodsOn returns the pods bound to node, or every pod when node is empty,
// in a stable order.
func (o *Objects) PodsOn(node string) []Pod {
	var out []Pod
	for _, p := range o.Pods {
		if node == "" || p.Node == node {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Pod) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Pod returns the named pod.
func (o *Objects) Pod(namespace, name string) (Pod, error) {
	for _, p := range o.Pods {
		if p.Namespace == namespace && p.Name == name {
			return p, nil
		}
	}
	return Pod{}, &notFound{"pods", name}
}

// Register keeps the Node object a starting kubelet registers.
func (o *Objects) Register(n Node) {
	if o.Nodes == nil {
		o.Nodes = map[string]Node{}
	}
	n.Ready = false
	o.Nodes[n.Name] = n
}

// DeleteNode deletes a Node object, with what the API keeps of it (its
// cordon and labels) and the pods bound to it, as the pod garbage
// collector deletes the pods of a node that is gone.
func (o *Objects) DeleteNode(name string) error {
	if _, ok := o.Nodes[name]; !ok {
		return &notFound{"nodes", name}
	}
	delete(o.Nodes, name)
	delete(o.Unschedulable, name)
	delete(o.NodeLabels, name)
	delete(o.NodeManaged, name)
	o.Pods = slices.DeleteFunc(o.Pods, func(p Pod) bool { return p.Node == name })
	return nil
}

// Evict removes a pod unless a budget selecting it allows no disruption;
// each budget that selects it then allows one disruption less, as the
// evicted pod is not replaced here.
func (o *Objects) Evict(namespace, name string) error {
	i := slices.IndexFunc(o.Pods, func(p Pod) bool { return p.Namespace == namespace && p.Name == name })
	if i < 0 {
		return &notFound{"pods", name}
	}
	var covering []int
	for j, b := range o.Budgets {
		if b.Namespace == namespace && selects(b.Selector, o.Pods[i].Labels) {
			if b.DisruptionsAllowed <= 0 {
				return &BudgetError{Namespace: b.Namespace, Budget: b.Name, DesiredHealthy: b.DesiredHealthy, CurrentHealthy: b.CurrentHealthy}
			}
			covering = append(covering, j)
		}
	}
	for _, j := range covering {
		o.Budgets[j].DisruptionsAllowed--
	}
	p := o.Pods[i]
	switch {
	case p.Stuck:
		o.Pods[i].Terminating = true
	case p.Mirror:
		// Its kubelet makes it again at once.
	case strings.HasPrefix(p.Owner, "DaemonSet/"):
		// Made again under a new name, as the controller names its pods.
		o.Recreated++
		o.Pods[i].Name = fmt.Sprintf("%s-r%d", strings.TrimPrefix(p.Owner, "DaemonSet/"), o.Recreated)
	default:
		o.Pods = slices.Delete(o.Pods, i, i+1)
	}
	return nil
}

// selects reports whether matchLabels selects labels; an empty selector
// selects every pod of the namespace, as policy/v1 does.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Clone returns a deep copy.
func (o *Objects) Clone() *Objects {
	c := &Objects{Nodes: maps.Clone(o.Nodes), Unschedulable: maps.Clone(o.Unschedulable), Applied: maps.Clone(o.Applied), Recreated: o.Recreated, RootCA: o.RootCA}
	for n, l := range o.NodeLabels {
		if c.NodeLabels == nil {
			c.NodeLabels = map[string]map[string]string{}
		}
		c.NodeLabels[n] = maps.Clone(l)
	}
	c.Established = maps.Clone(o.Established)
	for n, m := range o.NodeManaged {
		if c.NodeManaged == nil {
			c.NodeManaged = map[string][]metav1.ManagedFieldsEntry{}
		}
		c.NodeManaged[n] = slices.Clone(m) // entries are replaced, never changed in place
	}
	for _, p := range o.Pods {
		p.Labels, p.Annotations = maps.Clone(p.Labels), maps.Clone(p.Annotations)
		p.Containers = slices.Clone(p.Containers)
		for i := range p.Containers {
			p.Containers[i].Command = slices.Clone(p.Containers[i].Command)
		}
		c.Pods = append(c.Pods, p)
	}
	for _, b := range o.Budgets {
		b.Selector = maps.Clone(b.Selector)
		c.Budgets = append(c.Budgets, b)
	}
	return c
}

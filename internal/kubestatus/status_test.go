package kubestatus

import (
	"errors"
	"testing"
)

func TestRolledOut(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, kind, obj string
		notReady        int
		done            bool
		why             string
		err             error
	}{
		{"a deployment whose spec update is not observed yet", "Deployment",
			`{"metadata":{"generation":2},"spec":{"replicas":2},"status":{"observedGeneration":1,"replicas":2,"updatedReplicas":2,"availableReplicas":2}}`,
			0, false, "waiting for the deployment spec update to be observed", nil},
		{"a deployment updating", "Deployment",
			`{"metadata":{"generation":2},"spec":{"replicas":3},"status":{"observedGeneration":2,"replicas":4,"updatedReplicas":1,"availableReplicas":3}}`,
			0, false, "1 out of 3 new replicas have been updated", nil},
		{"a deployment's old replicas terminating", "Deployment",
			`{"metadata":{"generation":2},"spec":{"replicas":2},"status":{"observedGeneration":2,"replicas":3,"updatedReplicas":2,"availableReplicas":2}}`,
			0, false, "1 old replicas are pending termination", nil},
		{"a deployment's new replicas not available", "Deployment",
			`{"metadata":{"generation":1},"spec":{"replicas":2},"status":{"observedGeneration":1,"replicas":2,"updatedReplicas":2,"availableReplicas":1}}`,
			0, false, "1 of 2 updated replicas are available", nil},
		{"a deployment rolled out", "Deployment",
			`{"metadata":{"generation":1},"spec":{"replicas":2},"status":{"observedGeneration":1,"replicas":2,"updatedReplicas":2,"availableReplicas":2}}`,
			0, true, "", nil},
		{"a deployment past its progress deadline", "Deployment",
			`{"metadata":{"name":"web","generation":1},"spec":{"replicas":1},"status":{"observedGeneration":1,"conditions":[{"type":"Progressing","status":"False","reason":"ProgressDeadlineExceeded"}]}}`,
			0, false, "", ErrStuck},
		{"a daemon set not observed yet", "DaemonSet",
			`{"metadata":{"generation":3},"spec":{"updateStrategy":{"type":"RollingUpdate"}},"status":{"observedGeneration":2,"desiredNumberScheduled":3,"updatedNumberScheduled":3,"numberAvailable":3}}`,
			0, false, "waiting for the daemon set spec update to be observed", nil},
		{"a daemon set updating", "DaemonSet",
			`{"metadata":{"generation":3},"spec":{"updateStrategy":{"type":"RollingUpdate"}},"status":{"observedGeneration":3,"desiredNumberScheduled":3,"updatedNumberScheduled":2,"numberAvailable":3}}`,
			0, false, "2 out of 3 new pods have been updated", nil},
		{"a daemon set's pods not available", "DaemonSet",
			`{"metadata":{"generation":1},"spec":{"updateStrategy":{"type":"RollingUpdate"}},"status":{"observedGeneration":1,"desiredNumberScheduled":3,"updatedNumberScheduled":3,"numberAvailable":2}}`,
			0, false, "2 of 3 updated pods are available", nil},
		{"a daemon set whose missing pod is on a node not Ready", "DaemonSet",
			`{"metadata":{"generation":1},"spec":{"updateStrategy":{"type":"RollingUpdate"}},"status":{"observedGeneration":1,"desiredNumberScheduled":3,"updatedNumberScheduled":3,"numberAvailable":2}}`,
			1, true, "", nil},
		{"a daemon set missing more pods than nodes not Ready", "DaemonSet",
			`{"metadata":{"generation":1},"spec":{"updateStrategy":{"type":"RollingUpdate"}},"status":{"observedGeneration":1,"desiredNumberScheduled":3,"updatedNumberScheduled":3,"numberAvailable":1}}`,
			1, false, "1 of 3 updated pods are available", nil},
		{"a daemon set updated on delete", "DaemonSet",
			`{"metadata":{"generation":2},"spec":{"updateStrategy":{"type":"OnDelete"}},"status":{"observedGeneration":1}}`,
			0, true, "", nil},
		{"a stateful set never observed", "StatefulSet",
			`{"metadata":{"generation":1},"spec":{"replicas":1},"status":{}}`,
			0, false, "waiting for the statefulset spec update to be observed", nil},
		{"a stateful set's pods not ready", "StatefulSet",
			`{"metadata":{"generation":1},"spec":{"replicas":3,"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":0}}},"status":{"observedGeneration":1,"readyReplicas":1}}`,
			0, false, "waiting for 2 pods to be ready", nil},
		{"a stateful set's partition not updated", "StatefulSet",
			`{"metadata":{"generation":2},"spec":{"replicas":3,"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":1}}},"status":{"observedGeneration":2,"readyReplicas":3,"updatedReplicas":1}}`,
			0, false, "waiting for partitioned roll out to finish: 1 out of 2 new pods have been updated", nil},
		{"a stateful set rolled out", "StatefulSet",
			`{"metadata":{"generation":2},"spec":{"replicas":3,"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":0}}},"status":{"observedGeneration":2,"readyReplicas":3,"updatedReplicas":3}}`,
			0, true, "", nil},
		{"a stateful set without a partition, revisions apart", "StatefulSet",
			`{"metadata":{"generation":2},"spec":{"replicas":1,"updateStrategy":{"type":"RollingUpdate"}},"status":{"observedGeneration":2,"readyReplicas":1,"updatedReplicas":0,"currentRevision":"a","updateRevision":"b"}}`,
			0, false, "waiting for statefulset rolling update to complete 0 pods at revision b", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done, why, err := RolledOut(tt.kind, []byte(tt.obj), tt.notReady)
			if done != tt.done || why != tt.why || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Errorf("RolledOut = %t, %q, %v; want %t, %q, %v", done, why, err, tt.done, tt.why, tt.err)
			}
		})
	}
	if _, _, err := RolledOut("Deployment", []byte(`[]`), 0); err == nil {
		t.Error("a body that is no Deployment: no error")
	}
	if _, _, err := RolledOut("ConfigMap", []byte(`{}`), 0); err == nil {
		t.Error("a ConfigMap: no error")
	}
}

func TestPath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		apiVersion, kind, want string
		ok                     bool
	}{
		{"apps/v1", "Deployment", "/apis/apps/v1/namespaces/kube-system/deployments/web", true},
		{"apps/v1", "DaemonSet", "/apis/apps/v1/namespaces/kube-system/daemonsets/web", true},
		{"apps/v1", "StatefulSet", "/apis/apps/v1/namespaces/kube-system/statefulsets/web", true},
		{"apps/v1", "ReplicaSet", "", false},
		{"v1", "Service", "", false},
		{"example.com/v1", "Deployment", "", false},
	} {
		if got, ok := Path(tt.apiVersion, tt.kind, "kube-system", "web"); got != tt.want || ok != tt.ok {
			t.Errorf("Path(%s, %s) = %q, %t, want %q, %t", tt.apiVersion, tt.kind, got, ok, tt.want, tt.ok)
		}
	}
}

func TestNotReady(t *testing.T) {
	t.Parallel()
	list := `{"items":[
		{"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":"True"}]}},
		{"metadata":{"name":"b"},"status":{"conditions":[{"type":"Ready","status":"Unknown"}]}},
		{"metadata":{"name":"c"},"status":{"conditions":[{"type":"MemoryPressure","status":"False"}]}}]}`
	if n, err := NotReady([]byte(list)); n != 2 || err != nil {
		t.Errorf("NotReady = %d, %v; want 2 (Unknown, and no Ready condition)", n, err)
	}
	if _, err := NotReady([]byte(`[]`)); err == nil {
		t.Error("a body that is no NodeList: no error")
	}
}

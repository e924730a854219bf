// Package kubestub stands in for Kubernetes in the simulator. It is not
// Kubernetes: it is the kube-apiserver's front door as OPKE's health gates
// and drains see it, and nothing behind it schedules, runs or stores pods.
//
// A [Server] is what the simulator starts when a controller's kubelet finds
// the kube-apiserver static pod manifest: an HTTPS endpoint with the pushed
// serving certificate that requires a client certificate from the
// cluster's CA, as the real API server does with --client-ca-file. It
// serves
//
//   - /readyz, /livez and /healthz ("ok", or 500 naming the failed check
//     when the backend reports etcd unreachable, as the real checks do);
//   - /version, with the gitVersion of the manifest's image tag;
//   - discovery: /api, /apis, /api/v1 and /apis/{group}/{version}, as
//     client-go and kubectl read it;
//   - GET /api/v1/nodes and /api/v1/nodes/{name}, PATCH of a node's
//     spec.unschedulable (merge, strategic-merge or JSON patch, as kubectl
//     cordon sends), DELETE of a node (its pods go with it);
//   - GET /api/v1/pods and /api/v1/namespaces/{ns}/pods with the
//     fieldSelector spec.nodeName=NODE, GET of one pod;
//   - POST /api/v1/namespaces/{ns}/pods/{name}/eviction (policy/v1): 201
//     and the pod is gone, or 429 when a disruption budget forbids it, with
//     the real API server's message and cause;
//   - server-side apply (with dryRun=All too), a JSON merge patch, GET,
//     list and DELETE of the kinds a rendered cluster's manifests hold, a
//     generation counted as the API server counts it, and managedFields
//     moved between field managers as the API server moves them
//     (managed.go says how far); custom resource definitions, whose kinds
//     are served a moment after their apply (crd.go); a Deployment,
//     DaemonSet or StatefulSet
//     shows the status its controller would write were its pods running
//     at once on the nodes they fit (workloads.go says what is and is not
//     modelled).
//
// A node carries the labels and taints its kubelet's flags register it
// with (--node-labels, --register-with-taints). Not modelled: the
// uninitialized taint a kubelet with --cloud-provider=external registers
// until the cloud controller manager initializes the node (no such manager
// runs in-process).
//
// The objects come from a [Backend]: a node is registered when its
// host's kubelet starts and stays until it is deleted through the API,
// whatever becomes of its host (Ready while the kubelet unit is active,
// Unknown once the host is gone), as a real cluster keeps it; pods and
// disruption budgets are set by tests through the simulator's admin
// endpoint. The wire format is k8s.io/api's, so client-go works unchanged.
//
// [ParseManifest] reads the kube-apiserver static pod manifest for what the
// stub honours: the image tag, --secure-port, --tls-cert-file,
// --tls-private-key-file, --client-ca-file and --etcd-servers.
package kubestub

// Package pki issues a cluster's TLS material with kubeadm's names and
// SANs: three CAs (cluster, etcd, front-proxy), etcd server and peer certs
// per controller, the kube-apiserver serving cert per controller, client
// certs (apiserver to etcd and kubelets, controller-manager, scheduler,
// admin, OPKE and the backups to etcd, each kubelet to the apiserver), the
// service-account key pair and the admin kubeconfig. Keys are ECDSA P-256;
// never RSA.
//
// Material is created once and kept in the state store (keys sealed).
// [Issue] takes what the store holds and issues only what is missing,
// expires within the renewal window, no longer chains to its CA, or whose
// SANs changed, so issuing twice with the same store yields identical bytes:
//
//	b, issued, err := pki.Issue(ctx, store, pki.Request{Cluster: "prod", ...})
//	// b.Get("apiserver-prod-controller-0") is the cert and key of that host;
//	// issued names what was new this time.
//
// The CAs and the service account key have generations (ca, ca.2, ...),
// rotated in phases ([Rotation]): the new generation trusted beside the
// old, then signing every leaf, then alone (the old one deleted from the
// store). [Bundle.Get] of a CA is the
// generation that signs; [Bundle.Trust] every generation trusted, the
// signing one first, which the hosts' CA files, the kubeconfigs and
// OPKE's own clients hold.
package pki

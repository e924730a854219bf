// Package ignition renders one Ignition config (spec 3.3.0, the newest
// Debian's ignition accepts) per role: controller, worker, gateway. It is
// the user_data of the role's servers, so it holds immutable content only:
// the core user with OPKE's public key, the units that run what SSH pushes
// later (the kubelet from the image named in /etc/kubernetes/kubelet.env,
// the etcd member from /etc/kubernetes/etcd.env), sysctls, kernel modules
// and the folders the pushed files go to. No Kubernetes version, no
// private key, no token: a Kubernetes upgrade never changes user_data, so
// it never recreates a server, and nothing secret rides in the
// unencrypted metadata service.
//
//	cfg, err := ignition.Render(ignition.Input{Role: schemas.RoleWorker, OPKEPublicKey: pub})
//	// cfg is JSON, checked with Ignition's own parser, under MaxUserData bytes.
package ignition

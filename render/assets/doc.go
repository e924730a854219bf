// Package assets renders the files OPKE pushes to a cluster's hosts over
// SSH: everything mutable, versioned or secret, which the seeds' rules keep
// out of user_data. Each file is a (path, mode, owner, bytes, sha256) value
// with the units to restart when it changes:
//
//   - every node: /etc/kubernetes/kubelet.env (the kubelet image, so the
//     version, and its flags), the KubeletConfiguration, the kubelet's
//     kubeconfig and the cluster CA;
//   - controllers: kubeadm's layout, /etc/kubernetes/pki/** and the
//     kubeconfigs of the control plane, static-pod manifests for
//     kube-apiserver, kube-controller-manager and kube-scheduler,
//     /etc/kubernetes/etcd.env for the etcd member, and the cluster's
//     manifests under /etc/kubernetes/addons (kube-proxy, CoreDNS, flannel
//     and the addons the spec selects), which the applier sends to the API;
//   - where a cloud credential is given: /etc/kubernetes/cloud.conf;
//   - every host, the gateway too: the operators' sshAuthorizedKeys.
//
// etcd runs as the etcd-member unit that Ignition installs, reading the
// pushed etcd.env, rather than as a static pod: the unit is part of the
// immutable user_data (as the seed ran etcd "in service mode" and Typhoon
// does on Flatcar), it keeps the datastore's lifecycle apart from the
// kubelet that upgrades restart, and a static pod as well would run a
// second member. Its flags, certificate paths and data dir are kubeadm's.
//
// Image versions come from one table, [Matrix], keyed by Kubernetes minor,
// as kubeadm's constants pin them. Rendering is a pure function of its
// [Input]: the same spec, PKI and hosts give byte-identical files.
//
//	set, err := assets.Render(assets.Input{Cluster: c, PKI: bundle, Hosts: assets.PlannedHosts(c)})
//	for _, h := range set.Hosts { for _, f := range h.Files { ... f.Path, f.Mode, f.SHA256 ... } }
package assets

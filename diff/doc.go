// Package diff turns what a cluster should be and what is observed into a
// Plan, and prints plans. It does no I/O: Diff is a pure function, so the
// same inputs always give the same plan, byte for byte.
//
// A Plan is a value. Its changes come in two phases, the infrastructure
// (OpenStack resources) and then the hosts (files pushed over SSH, unit
// restarts, backups); each has a stable id, the ids it depends on, an
// [Address] (a typed value: what it names, its host or resource; its
// string form is openstack/server/prod-general-3,
// host/prod-controller-0/etc/kubernetes/kubelet.env), a closed Action,
// before and after values, and a reason that is for people only. Values
// not known until an earlier change is applied (a floating IP, the bytes of
// a certificate that carries it) are marked unknown and print as
// "(known after apply)"; secret ones print as "(sensitive)" and never carry
// their content. Drift, what changed outside OPKE since the last apply, is
// a list of its own, of the corrective changes.
//
//	desired, err := diff.Desire(cluster, diff.Inputs{UserData: out.UserData, Assets: out.Assets})
//	if err != nil { ... }
//	plan := diff.Diff([]*diff.Desired{desired}, observed)
//	data, _ := json.Marshal(plan)   // the plan's JSON form, format_version 1
//	diff.Text(os.Stdout, data)      // the human view, printed from it
package diff

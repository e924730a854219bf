// Package reconciler is OPKE's loop: read the fleet from git (package
// source), observe OpenStack and the state store, plan, apply, report.
//
// [Planner] makes a plan with no side effects. It renders each cluster on
// a read-only view of the store, so material a new cluster or host needs
// (keys, certificates) is issued in memory only and the bytes that carry
// it are planned as known after apply; it lists each cloud once
// ([cloud.Observe]); it reads what was last applied from the ledger
// (ledger.go; its keys are named in state/keys.go), and the files on the
// hosts only when a resync asks, one sha256sum per host over SSH through
// the cluster's gateway ([HostSessions]). [diff.Diff] turns the two sides into the plan.
//
// [Applier] executes the plan it is given, nothing planned again: a
// cluster's infrastructure steps in dependency order ([cloud.Applier]),
// then its host steps (uploads, restarts, gates, backups, manifests over
// [HostSessions]). What the plan could only mark known after apply comes
// from one render through the cluster's lease, which issues the material
// it needs for good, made again only if the infrastructure phase made
// what the files carry (the API's floating IP, the cloud credential); a
// known value that renders otherwise fails its step ([ErrInconsistent]),
// as Terraform refuses an inconsistent final plan. The per-cluster state
// of an apply is one value (clusterApply, clusterapply.go). Every step is
// journaled before and after it runs, and the ledger is written by the
// step that made it true.
package reconciler

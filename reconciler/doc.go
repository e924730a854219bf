// Package reconciler is OPKE's loop: read the fleet from git (package
// source), observe OpenStack and the state store, plan, apply, report.
//
// [Planner] makes a plan with no side effects. It renders each cluster on
// a read-only view of the store, so material a new cluster or host needs
// (keys, certificates) is issued in memory only and the bytes that carry
// it are planned as known after apply; it lists each cloud once
// ([cloud.Observe]); it reads what was last applied from the ledger (see
// ledger.go for the key layout), and the files on the hosts only when a
// resync asks, one sha256sum per host over SSH through the cluster's
// gateway ([SSHHosts]). [diff.Diff] turns the two sides into the plan.
package reconciler

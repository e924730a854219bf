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
// gateway ([HostSessions]). [diff.Diff] turns the two sides into the plan.
//
// [Applier] executes a plan: a cluster's infrastructure steps in
// dependency order ([cloud.Applier]), then its host phase planned again
// from what they made (rendering on the store, so the material it needs
// is issued for good): uploads and restarts over [HostSessions]. Every
// step is journaled before and after it runs, and the ledger is written
// by the step that made it true.
package reconciler

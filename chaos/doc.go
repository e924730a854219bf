// Package chaos is OPKE's proof that it loses nothing under faults: real
// processes (opke serve, opke sim, etcd, git daemon) are killed, stopped,
// paused and cut off while a cluster is created or upgraded, and each run
// checks that the cluster converged with no duplicate and no orphaned
// resource in the cloud, no lost record in the state store or the audit
// trail, and that two daemons never both wrote to the cloud.
//
// It is a package of its own because it crosses every boundary at once,
// from the outside: the daemon under test is the opke binary, the etcd is
// a process of its own (this test binary, started again as an etcd), and
// every check reads what the cloud, the store and the git remote hold, as
// an operator would. `make chaos` runs every scenario (20 kills of a
// create and of an upgrade) and prints one table; CI runs a short form
// (OPKE_CHAOS=short).
//
// The package has no code outside its tests, and they build only with
// the tag chaos: make test does not run them, make chaos does.
package chaos

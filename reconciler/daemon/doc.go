// Package daemon is OPKE's GitOps daemon (opke serve): it follows the
// fleet repository ([source.Mirror]: polls with jitter, a webhook or
// fsnotify make it sync at once), applies each new commit of the tracked
// branch cluster by cluster, each cluster in a queue of its own, plans
// pull request heads without applying or persisting anything, checks for
// drift every resync interval, and reports on every commit through the
// [report.Reporter]s (git notes, forge statuses). Several daemons on one
// state store elect a leader (etcd's election); the others stand by and
// serve the status page and the API from the store. A new leader first
// resumes the applies a dead one journaled.
//
//	d := daemon.New(daemon.Config{ID: id, Source: mirror, Store: store,
//		Planner: planner, Applier: applier, Reporters: reporters})
//	go http.Serve(listener, d.Handler(webhookSecret))
//	err := d.Run(ctx)
//
// The files follow the data: daemon.go the election and the loop;
// commits.go a new commit of the tracked branch (sync, policy, the fleet
// judged, the whole fleet settled in one plan); queues.go the per-cluster
// queues; reconcile.go one cluster's plan and apply, reported through one
// exit (finish); status.go the cluster's status, changed only by
// statusAfter, a pure function of what happened (an event), reached
// through record; notes.go the notes and the writes through the
// leadership; policy.go the signature and ancestry checks;
// pullrequests.go the pull request planner; server.go the status page
// and the API.
//
// What the daemon keeps in the store (its keys named in state/keys.go):
// _reports/<commit> (each commit's note), _status/<cluster> (each
// cluster's last state), _daemon/seen, accepted and planning/<ref> (the
// refs handled, accepted, being planned), _reported/<forge>/<commit>/
// <context> (the statuses posted), and the election under _locks/_daemon.
package daemon

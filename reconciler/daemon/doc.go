// Package daemon is OPKE's GitOps daemon (opke serve): it follows the
// fleet repository ([source.Mirror]: polls with jitter, a webhook or
// fsnotify make it sync at once), applies each new commit of the tracked
// branch cluster by cluster, each cluster in a queue of its own, plans
// pull request heads without applying or persisting anything, checks for
// drift every resync interval, and reports on every commit through the
// [report.Reporter]s (git notes, forge statuses). Several daemons on one
// state store share the fleet (shares.go): each is a member while its
// etcd session lives, each cluster is owned by one member (rendezvous
// hashing over the members), and one member, elected leader, takes each
// commit in (the policy, the judgement, the note) and dispatches it;
// every member plans and applies its own share, adopts the clusters it
// gains when another joins, leaves or dies (their journals resumed), and
// serves the status page and the API from the store.
//
//	d := daemon.New(daemon.Config{ID: id, Source: mirror, Store: store,
//		Planner: planner, Applier: applier, Reporters: reporters})
//	go http.Serve(listener, d.Handler(webhookSecret))
//	err := d.Run(ctx)
//
// The files follow the data: daemon.go the membership, the election and
// the leader's loop; shares.go the shares (owners, the member's loop,
// takeovers, the leader's reports of the others' notes); commits.go a new
// commit of the tracked branch (sync, policy, the fleet judged, the
// leader's share settled in one plan, the dispatch); queues.go the per-cluster
// queues; reconcile.go one cluster's plan and apply, reported through one
// exit (finish); status.go the cluster's status, changed only by
// statusAfter, a pure function of what happened (an event), reached
// through record; notes.go the notes and the writes through the
// leadership; policy.go the signature and ancestry checks;
// pullrequests.go the pull request planner; server.go the status page
// and the API.
//
// What the daemon keeps in the store (its keys named in state/keys.go):
// _reports/<commit> and _reports/<commit>/<cluster> (each commit's note,
// a key per cluster's entry), _status/<cluster> (each cluster's last
// state), _daemon/seen, accepted, dispatched and planning/<ref> (the refs
// handled, accepted, dispatched to the shares, being planned),
// _reported/<forge>/<commit>/<context> (the statuses posted), the
// members under _members/ and the election under _locks/_daemon.
package daemon

// Package cloud is OPKE's OpenStack adapter: it connects through
// gophercloud with clouds.yaml and observes what OPKE owns in a cloud. It
// has a top-level folder because it is a boundary of its own: the only
// code that speaks to OpenStack, against a real cloud or the simulator
// alike.
//
// Observe lists each resource type once per cloud, filtered by OPKE's
// owner tag and read page by page, never one GET per resource, so a no-op
// reconcile of N clusters costs a number of API calls that does not grow
// with N (one page per 1,000 items aside). It returns each cluster's
// resources, grouped by the opke-cluster tag, flattened to what the diff
// compares, with references by name:
//
//	clients, err := cloud.Connect(ctx, cloud.Target{File: "clouds.yaml", Cloud: "sim"})
//	obs, err := cloud.Observe(ctx, clients, installationID, previous)
//	resources := obs.Clusters["prod"] // []diff.Resource
//
// What the package does with each kind is in one file per kind
// (kind_network.go, kind_server.go, kind_loadbalancer.go, ...): how a
// resource is created (found by name and tags first, so a lost answer
// never makes a second), updated in place, deleted and observed, and its
// entry in kinds.go's table, which Create, Update, Delete and the
// observation dispatch on. Adding a kind (Cinder volumes) is its file,
// its entry, and its row in package diff's kinds.go (its references).
//
// Three kinds carry no tags in OpenStack and are found otherwise: server
// groups by name (<cluster>-controllers), router interfaces by their
// router, load balancer members through their pool, by the ids a previous
// observation (the state store's) resolved; only a pool with a member of
// an unknown id costs a call of its own.
package cloud

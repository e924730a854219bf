// Package schemas is the cluster spec model: the Go types of
// clusters/<name>/cluster.yaml, their defaults, validation, the transition
// rules between two specs of a cluster, and cluster.schema.json, the JSON
// Schema (2020-12) that is the spec's contract for editors and tools.
//
// Validation reads YAML with line numbers (duplicate keys, aliases and merge
// keys handled, hostile files bounded in size, depth and alias expansion),
// checks the document against the embedded schema, then applies the rules a
// schema cannot express (CIDRs that parse, do not overlap and have room,
// supported Kubernetes minors, unique pool names, label syntax, SSH keys).
// Every problem is reported at once as a [Finding]:
//
//	clusters/prod/cluster.yaml:18: spec.workerPools[0].count: must be <= 500
//
// A fleet is a folder with clusters/<name>/cluster.yaml files:
//
//	fl, err := schemas.LoadFleet(os.DirFS(root), root)
//	if err != nil { ... }           // not a fleet root, or unreadable
//	for _, f := range fl.Findings { fmt.Println(f) }
//	clusters := fl.Clusters()       // the valid specs, by name
//
// Names and addresses OPKE derives from a spec are deterministic: servers are
// <cluster>-<role>-<index> (roles: controller, gateway, or a pool's name),
// tagged opke-cluster=<cluster> and opke-owner=<installation id>; in
// hostCIDR the router is the 1st address, the API VIP the 5th, the gateway
// the 6th, controller i the (10+i)th, and the subnet's DHCP pool starts at
// the 16th.
//
// [Compare] lists what a change between two specs does (the field-change
// table of the README) and [CheckTransition] refuses the changes that
// cannot be made to a live cluster.
package schemas

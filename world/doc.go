// Package world builds, from upstream source through the Go module proxy,
// the components a cluster OPKE renders runs, and the host runtime and
// registry the test world serves them with: the binaries, stamped with
// their versions as upstream's builds stamp them, and OCI images named
// and tagged exactly as the rendered manifests name them.
//
// It is a top-level folder because it is a boundary: nothing in it is
// OPKE's own logic; it is how this project gets real Kubernetes on
// machines that reach no registry, as an air-gapped cloud gets it from
// its operator's mirror. `make world` (cmd/opke-world) calls it.
//
// Everything is cached by version outside the repository
// ($OPKE_CACHE/world, else ~/.cache/opke/world); an artifact is rebuilt
// only when its pin, or this package's recipe for it, changes.
//
//	w := world.New(world.DefaultCacheDir(), log)
//	built, err := w.Ensure(ctx, world.Targets(world.E2E))
//	img := built.Image("registry.k8s.io/kube-apiserver:v1.35.1") // an OCI layout
package world

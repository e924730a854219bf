package assets

import (
	"maps"
	"slices"
)

// AddonManifests are the optional addons, for the package's tests.
func AddonManifests() []string { return slices.Clone(addonManifests) }

// Matrix is the images of each minor, for the package's tests.
func Matrix() map[string]Images { return maps.Clone(matrix) }

// CoreManifests and ManifestOrder are the core manifests and the apply
// order, for the package's tests.
func CoreManifests() []string { return slices.Clone(coreManifests) }
func ManifestOrder() []string { return slices.Clone(manifestOrder) }

// Package source reads fleets from git. [TreeFS] presents a commit's tree
// as an io/fs.FS, so a revision is validated, planned and rendered straight
// from the object store, with no worktree and no checkout:
//
//	fsys, err := source.OpenRevision(ctx, ".", "origin/main")
//	if err != nil { ... }
//	fleet, err := schemas.LoadFleet(fsys, "origin/main")
package source

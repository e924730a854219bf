// Package render turns one cluster spec into everything its servers and
// hosts need, by composing its three parts: [pki] (the TLS material, issued
// once and kept in the state store), [ignition] (one immutable user_data
// per role) and [assets] (the mutable, versioned and secret files pushed
// over SSH). Rendering reads and writes the state store only to issue
// missing material, so a second render with the same store is
// byte-identical, and a render on [state.Store.ReadOnly] persists nothing.
//
//	out, err := render.Cluster(ctx, store, spec, render.Options{Now: time.Now()})
//	// out.UserData[schemas.RoleWorker] is the workers' user_data;
//	// out.Assets.Hosts[i].Files the files of a host.
//
// [pki]: opke.dev/opke/render/pki
// [ignition]: opke.dev/opke/render/ignition
// [assets]: opke.dev/opke/render/assets
// [state.Store.ReadOnly]: opke.dev/opke/state
package render

// Package bench is OPKE's proof at fleet scale: benchmarks of a fleet of
// up to 1,000 clusters (3 controllers and 3 workers each) held by the
// simulator and the state store, and the driver (bench/report) that runs
// them repeatedly and prints one table of medians and spreads.
//
// It is a package of its own because it crosses every boundary at once:
// a fleet is seeded here, not in any one package's tests. The seed is made
// by converging one cluster by hand and cloning it in the simulator's
// snapshot (state.json) and in a state-store load, so a fleet of 1,000
// clusters costs seconds, not the apply of 7,000 hosts; every benchmark
// checks first that the seeded fleet plans nothing, which is what makes
// the seed honest. Seeds are cached, keyed by the test binary, under
// $OPKE_BENCH_CACHE (default: the system's temporary folder).
//
// The package has no code outside its tests: `make bench` runs it.
package bench

//go:build race

package kserve

// raceEnabled: the race detector's instrumentation allocates on its own, so
// allocation counts are asserted only in plain builds.
const raceEnabled = true

// Package racebuild tells whether the program was built with -race. Tests
// that count allocations consult it: the race detector's instrumentation
// allocates on its own, and sync.Pool drops items at random under it, so
// counts are asserted only in plain builds.
package racebuild

//go:build race

package racebuild

// Enabled reports whether the build runs under the race detector.
const Enabled = true

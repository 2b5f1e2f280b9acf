// Package version holds the Nereid release reported in server metadata.
package version

// Version is Nereid's release; release builds set it with
// -ldflags "-X github.com/nereid-io/nereid/pkg/version.Version=...".
var Version = "0.1.0"

// Package busv1 holds the messages Nereid's services exchange over NATS
// (package nereid.bus.v1) other than Triton's own inference messages:
// executor heartbeats and catalogs, and the requests that ask for them.
//
// Subjects, headers and chunking live in pkg/bus; this package only defines
// payloads. Regenerate with `make proto` (bash api/gen.sh).
package busv1

// Package observability runs Triton's trace extension (and, with it, the
// settings that every service of the constellation applies) against real
// gateways and executors over a real NATS server.
package observability

import (
	"os"
	"testing"

	"github.com/nereid-io/nereid/e2e/constellation"
)

func TestMain(m *testing.M) { os.Exit(constellation.Main(m)) }

// Package metrics checks the Prometheus metrics of a real constellation
// (nats-server, sequence router, shm registry, executors, gateway, each its
// own process) against traffic whose outcome is known: Triton's per-model
// metrics summed on the gateway's endpoint, and every service's own.
package metrics

import (
	"os"
	"testing"

	"github.com/nereid-io/nereid/e2e/constellation"
)

func TestMain(m *testing.M) { os.Exit(constellation.Main(m)) }

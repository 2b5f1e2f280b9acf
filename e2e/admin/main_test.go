// Package admin tests the cluster admin API (nereid.admin.v1) end to end:
// real nats-server, redis-server and service binaries, the API over gRPC
// and over REST (grpc-gateway), nereidctl, and the drain of an executor
// with sequences in flight.
package admin

import (
	"os"
	"testing"

	"github.com/nereid-io/nereid/e2e/constellation"
)

func TestMain(m *testing.M) { os.Exit(constellation.Main(m)) }

package binary

import (
	"testing"
	"time"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// TestStandaloneLargeTensors: in the standalone server the gateway and the
// executor share one process, and a large tensor is handed over as it is,
// with the request message (the in-process bus) or as slices beside NATS
// (--in-process-bus false): the process holds about one copy of a 256 MiB
// tensor over HTTP (the body it read) and two over gRPC (the received
// frames and the decoded tensor).
func TestStandaloneLargeTensors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grpc   bool
		copies float64
		flags  []string
	}{
		{"HTTP binary", false, 1.5, nil},
		{"gRPC", true, 2.5, nil},
		{"HTTP binary over NATS", false, 1.5, []string{"--in-process-bus", "false"}},
		{"gRPC over NATS", true, 2.5, []string{"--in-process-bus", "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := constellation.Standalone(t, constellation.RepoPath(t, "e2e/binary/testdata/models"), tc.flags...)
			pid := g.Proc.Pid()
			resetPeak(t, pid)
			before := readMemory(t, pid)
			start := time.Now()
			if tc.grpc {
				largeGRPC(t, g.GRPC(), "identity_fp32")
			} else {
				largeHTTP(t, g.HTTP(), "identity_fp32")
			}
			m := readMemory(t, pid)
			grew := float64(m.peak-before.rss) / largeSize
			t.Logf("nereid (standalone): %s, %.2f payloads above its RSS before (%d MiB); round trip %v",
				m, grew, before.rss>>20, time.Since(start))
			if grew > tc.copies {
				t.Errorf("held %.2f copies of the payload at its peak, want at most %.1f", grew, tc.copies)
			}
		})
	}
}

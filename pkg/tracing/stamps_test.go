package tracing

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/pkg/bus"
)

// The mark a triton-mode gateway puts on a request crosses NATS headers,
// starts no span in a service that exports OpenTelemetry, and the
// executor's answer reads back exactly.
func TestAskTimestampsTravels(t *testing.T) {
	if TimestampsAsked(context.Background()) {
		t.Fatal("asked without a mark")
	}
	hdr := nats.Header{}
	Propagator.Inject(AskTimestamps(context.Background()), bus.HeaderCarrier(hdr))
	got := Propagator.Extract(context.Background(), bus.HeaderCarrier(hdr))
	if !TimestampsAsked(got) {
		t.Fatalf("mark lost over headers %v", hdr)
	}
	if _, span := newTracer(t).StartChild(got, "simple", "simple"); span != nil {
		t.Fatal("a span started for a request that only asks for timestamps")
	}

	base := time.Unix(1_700_000_000, 123)
	ts := Timestamps{QueueStart: base, ExecStart: base.Add(1), ComputeStart: base.Add(2), ComputeEnd: base.Add(3), ExecEnd: base.Add(4)}
	back, ok := DecodeTimestamps(ts.Encode())
	if !ok || !back.Complete() || !back.QueueStart.Equal(ts.QueueStart) || !back.ExecEnd.Equal(ts.ExecEnd) || !back.ComputeEnd.Equal(ts.ComputeEnd) {
		t.Fatalf("round trip of %q: %+v %v", ts.Encode(), back, ok)
	}
	for _, bad := range []string{"", "1 2 3 4", "1 2 3 4 x"} {
		if _, ok := DecodeTimestamps(bad); ok {
			t.Errorf("DecodeTimestamps(%q) accepted", bad)
		}
	}
}

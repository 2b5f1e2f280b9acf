package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func TestSendOutcome(t *testing.T) {
	noResponders := tritonerr.Unavailablef("no responders on subject 'nereid.seq.infer.m.1'")
	tests := []struct {
		name       string
		err, cause error
		want       notRun
	}{
		{"answered", nil, nil, ran},
		{"answered as the takeover resolved it", nil, errRouterLost, ran},
		{"a failure of the model", tritonerr.InvalidArgf("inference request for sequence 1 to model 'm' must specify the START flag"), nil, ran},
		{"no router listens", noResponders, nil, notTaken},
		{"a router stepping down", bus.NotTaken("the sequence router serving model 'm' stopped serving it (its lease lapsed); the request was not run"), nil, notTaken},
		{"wrapped refusal", fmt.Errorf("send: %w", bus.NotTaken("cannot record the start")), nil, notTaken},
		{"held by a router that was lost", context.Canceled, errRouterLost, heldAndLost},
		{"refused, then resolved lost", noResponders, errRouterLost, heldAndLost},
		{"responder lost, not resolved", tritonerr.Unavailablef("request to subject 'x' failed: the sequence router or executor handling it was lost while it was in flight (it stopped answering liveness probes); the request may or may not have run"), nil, ran},
		{"timed out", tritonerr.Unavailablef("request to subject 'x' timed out"), context.DeadlineExceeded, ran},
		{"the client cancelled", context.Canceled, context.Canceled, ran},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sendOutcome(tt.err, tt.cause); got != tt.want {
				t.Fatalf("sendOutcome(%v, %v) = %v, want %v", tt.err, tt.cause, got, tt.want)
			}
		})
	}
}

func TestResendAfter(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := time.Second
	tests := []struct {
		name      string
		nr        notRun
		elapsed   time.Duration // now - began
		deadline  time.Duration // after began; 0: none
		delay     time.Duration
		wantWait  time.Duration
		wantAgain bool
	}{
		{"ran: never again", ran, 0, 0, 50 * time.Millisecond, 0, false},
		{"ran, even with time left", ran, 0, 10 * s, 50 * time.Millisecond, 0, false},
		{"not taken, no deadline", notTaken, 2 * s, 0, 200 * time.Millisecond, 200 * time.Millisecond, true},
		{"held and lost, no deadline", heldAndLost, 4 * s, 0, 100 * time.Millisecond, 100 * time.Millisecond, true},
		{"no deadline: the limit", notTaken, ResendLimit - 500*time.Millisecond, 0, 400 * time.Millisecond, 400 * time.Millisecond, true},
		{"no deadline: past the limit", notTaken, ResendLimit - 500*time.Millisecond, 0, 500 * time.Millisecond, 0, false},
		{"no deadline: long after", heldAndLost, ResendLimit + s, 0, 50 * time.Millisecond, 0, false},
		{"deadline ahead", notTaken, 2 * s, 10 * s, s, s, true},
		{"the wait would end at the deadline", notTaken, 9 * s, 10 * s, s, 0, false},
		{"the wait would end past the deadline", heldAndLost, 9500 * time.Millisecond, 10 * s, s, 0, false},
		{"deadline passed", notTaken, 11 * s, 10 * s, 50 * time.Millisecond, 0, false},
		{"deadline beyond the limit: the limit", notTaken, ResendLimit, 2 * ResendLimit, 50 * time.Millisecond, 0, false},
		{"deadline beyond the limit, within it", notTaken, 20 * s, 2 * ResendLimit, 50 * time.Millisecond, 50 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var deadline time.Time
			if tt.deadline > 0 {
				deadline = t0.Add(tt.deadline)
			}
			wait, again := resendAfter(tt.nr, t0, deadline, t0.Add(tt.elapsed), tt.delay)
			if wait != tt.wantWait || again != tt.wantAgain {
				t.Fatalf("resendAfter(%v, elapsed %v, deadline %v, delay %v) = %v, %v; want %v, %v",
					tt.nr, tt.elapsed, tt.deadline, tt.delay, wait, again, tt.wantWait, tt.wantAgain)
			}
		})
	}
}

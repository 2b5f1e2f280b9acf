package builtin

import (
	"context"
	"time"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// computeSlice bounds one uninterrupted wait of compute, so that an
// executor shutting down ends a long execution within about this long.
const computeSlice = 5 * time.Millisecond

// compute stands for a model's work of d: the execution takes d, and gives
// up with the executor's shutdown error when ctx ends. c keeps the time
// (see computeClock); a nil c waits on Go timers.
func compute(ctx context.Context, c *computeClock, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if ctx.Err() != nil {
			return tritonerr.Unavailablef("executor is shutting down")
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		c.sleep(min(left, computeSlice))
	}
}

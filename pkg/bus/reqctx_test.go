package bus

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

// TestRequestCtx: a handler's context behaves as the context.WithDeadline
// under a context.WithCancelCause it stands for, for itself and for the
// contexts derived from it.
func TestRequestCtx(t *testing.T) {
	if cancelCtxKey == nil {
		t.Fatal("context.Cause no longer asks for its cancelCtx: causes would be lost")
	}
	parent := context.WithValue(context.Background(), ctxKey{}, "v")

	t.Run("deadline", func(t *testing.T) {
		d := time.Now().Add(20 * time.Millisecond)
		rc := newRequestCtx(parent, d, true)
		defer rc.cancel(nil)
		if got, ok := rc.Deadline(); !ok || !got.Equal(d) {
			t.Fatalf("Deadline() = %v, %v", got, ok)
		}
		if rc.Value(ctxKey{}) != "v" {
			t.Fatal("parent's value lost")
		}
		child, cancel := context.WithCancel(rc)
		defer cancel()
		grand, cancelGrand := context.WithCancelCause(context.WithValue(child, ctxKey{}, "w"))
		defer cancelGrand(nil)
		stopped := context.AfterFunc(rc, func() { t.Error("stopped AfterFunc ran") })
		ran := make(chan struct{})
		context.AfterFunc(rc, func() { close(ran) })
		if !stopped() {
			t.Fatal("AfterFunc not stopped")
		}
		<-rc.Done()
		<-child.Done()
		<-grand.Done()
		<-ran
		for _, c := range []context.Context{rc, child, grand} {
			if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
				t.Fatalf("%v: Err %v, Cause %v", c, c.Err(), context.Cause(c))
			}
		}
		rc.cancel(errRequesterCancelled) // too late: the deadline came first
		if !errors.Is(context.Cause(rc), context.DeadlineExceeded) {
			t.Fatalf("Cause %v after a late cancellation", context.Cause(rc))
		}
	})

	t.Run("deadline passed, Done never asked for", func(t *testing.T) {
		rc := newRequestCtx(parent, time.Now().Add(-time.Millisecond), true)
		defer rc.cancel(nil)
		if !errors.Is(rc.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() = %v", rc.Err())
		}
		select {
		case <-rc.Done():
		default:
			t.Fatal("Done not closed")
		}
	})

	t.Run("cancelled with a cause", func(t *testing.T) {
		rc := newRequestCtx(parent, time.Now().Add(time.Hour), true)
		child, cancel := context.WithCancel(rc)
		defer cancel()
		if rc.Err() != nil || context.Cause(rc) != nil {
			t.Fatalf("ended early: %v", rc.Err())
		}
		rc.cancel(errRequesterCancelled)
		<-rc.Done()
		<-child.Done()
		for _, c := range []context.Context{rc, child, context.WithValue(rc, ctxKey{}, "w")} {
			if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), errRequesterCancelled) {
				t.Fatalf("%v: Err %v, Cause %v", c, c.Err(), context.Cause(c))
			}
		}
		late, cancelLate := context.WithCancel(rc)
		defer cancelLate()
		<-late.Done()
		if !errors.Is(context.Cause(late), errRequesterCancelled) {
			t.Fatalf("derived after the end: Cause %v", context.Cause(late))
		}
		rc.cancel(nil)
		if !errors.Is(context.Cause(rc), errRequesterCancelled) {
			t.Fatalf("Cause %v after the handler's own end", context.Cause(rc))
		}
	})

	t.Run("ended by its handler", func(t *testing.T) {
		rc := newRequestCtx(parent, time.Time{}, false)
		if _, ok := rc.Deadline(); ok {
			t.Fatal("a deadline without one")
		}
		ran := make(chan struct{})
		context.AfterFunc(rc, func() { close(ran) })
		rc.cancel(nil)
		<-ran
		if !errors.Is(rc.Err(), context.Canceled) || !errors.Is(context.Cause(rc), context.Canceled) {
			t.Fatalf("Err %v, Cause %v", rc.Err(), context.Cause(rc))
		}
	})
}

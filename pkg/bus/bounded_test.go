package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nereid-io/nereid/internal/testutil/racebuild"
)

var errClientGone = errors.New("client went away")

// TestBounded: a Bounded behaves as the context.WithTimeout (parent
// without a deadline) or context.WithCancel (parent with one) it stands
// for, whichever way its end is observed: on Done asked for before the
// end, on Err alone (Done never made), or by a reply's wait (inbox.next,
// which waits on its parts); and so do the contexts derived from it.
func TestBounded(t *testing.T) {
	if cancelCtxKey == nil {
		t.Fatal("context.Cause no longer asks for its cancelCtx: causes would be lost")
	}
	type scenario struct {
		name    string
		timeout time.Duration
		// parent makes the parent context and the function that ends it
		// (nil: the test ends nothing but the Bounded's own deadline).
		parent func() (context.Context, func())
		// cancel: the owner calls Cancel (the event under test).
		cancel bool
	}
	valued := func() context.Context { return context.WithValue(context.Background(), ctxKey{}, "v") }
	scenarios := []scenario{
		{name: "own deadline", timeout: 10 * time.Millisecond,
			parent: func() (context.Context, func()) { return valued(), nil }},
		{name: "cancelled by its owner", timeout: time.Hour, cancel: true,
			parent: func() (context.Context, func()) { return valued(), nil }},
		{name: "parent cancelled with a cause", timeout: time.Hour,
			parent: func() (context.Context, func()) {
				p, cancel := context.WithCancelCause(valued())
				return p, func() { cancel(errClientGone) }
			}},
		{name: "parent's deadline", timeout: time.Hour,
			parent: func() (context.Context, func()) {
				p, cancel := context.WithTimeout(valued(), 10*time.Millisecond)
				_ = cancel // ends at its deadline; released by the GC
				return p, nil
			}},
		{name: "parent with a deadline, cancelled by the owner", timeout: time.Hour, cancel: true,
			parent: func() (context.Context, func()) {
				p, cancel := context.WithTimeout(valued(), time.Minute)
				return p, cancel
			}},
	}
	// std is what Bounded stands for.
	std := func(parent context.Context, timeout time.Duration) (context.Context, func()) {
		if _, ok := parent.Deadline(); ok {
			return context.WithCancel(parent)
		}
		return context.WithTimeout(parent, timeout)
	}
	type outcome struct {
		err, cause     error
		deadline       bool
		value          any
		child, derived error // of a context.WithCancel of it, and its Cause
	}
	// run plays the scenario on a Bounded or the standard library's
	// context and observes its end by how.
	run := func(t *testing.T, sc scenario, how string, bounded bool) outcome {
		parent, endParent := sc.parent()
		var ctx context.Context
		var cancel func()
		if bounded {
			b := Bound(parent, sc.timeout)
			ctx, cancel = b, b.Cancel
		} else {
			ctx, cancel = std(parent, sc.timeout)
		}
		// Derived contexts ask for Done: made before the end only where
		// Done is asked for first anyway.
		var child context.Context
		ran := make(chan struct{})
		derive := func() {
			var cancelChild func()
			child, cancelChild = context.WithCancel(context.WithValue(ctx, ctxKey{}, "w"))
			t.Cleanup(cancelChild)
			context.AfterFunc(ctx, func() { close(ran) })
		}
		if how == "Done first" {
			derive()
		}
		waited := make(chan error, 1)
		onParts := false
		if how == "awaited" {
			in := &inbox{signal: make(chan struct{}, 1)}
			go func() {
				_, err := in.next(ctx, 0)
				waited <- err
			}()
			if b, ok := ctx.(*Bounded); ok {
				// Until the wait is under way (a deadline may come first:
				// Done is waited on then).
				for b.Err() == nil && !b.awaiting() {
					time.Sleep(100 * time.Microsecond)
				}
				onParts = b.awaiting()
			}
		}
		switch {
		case sc.cancel:
			cancel()
		case endParent != nil:
			endParent()
		}
		switch how {
		case "awaited":
			if err := <-waited; !errors.Is(err, ctx.Err()) {
				t.Fatalf("the wait ended with %v, the context with %v", err, ctx.Err())
			}
			if b, ok := ctx.(*Bounded); ok && onParts && b.madeDone() {
				t.Fatal("a wait on the Bounded's parts made its Done channel")
			}
		case "Err only":
			for ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
		}
		if how != "Done first" {
			derive()
		}
		<-ctx.Done()
		<-child.Done()
		<-ran
		_, hasDeadline := ctx.Deadline()
		out := outcome{err: ctx.Err(), cause: context.Cause(ctx), deadline: hasDeadline, value: ctx.Value(ctxKey{}),
			child: child.Err(), derived: context.Cause(child)}
		cancel() // late: changes nothing
		if ctx.Err() != out.err || context.Cause(ctx) != out.cause {
			t.Fatalf("a late Cancel changed Err %v / Cause %v to %v / %v", out.err, out.cause, ctx.Err(), context.Cause(ctx))
		}
		if endParent != nil {
			endParent()
		}
		return out
	}
	for _, sc := range scenarios {
		for _, how := range []string{"Done first", "Err only", "awaited"} {
			t.Run(sc.name+"/"+how, func(t *testing.T) {
				want := run(t, sc, how, false)
				got := run(t, sc, how, true)
				if got != want {
					t.Fatalf("Bounded: %+v\nstandard library: %+v", got, want)
				}
			})
		}
	}
}

// TestBoundedDeadline: the timeout applies only to a parent without a
// deadline, as the gateway's RequestTimeout does.
func TestBoundedDeadline(t *testing.T) {
	before := time.Now()
	b := Bound(context.Background(), time.Minute)
	defer b.Cancel()
	if d, ok := b.Deadline(); !ok || d.Before(before.Add(time.Minute)) || d.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Deadline() = %v, %v; want a minute from now", d, ok)
	}
	pd := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.Background(), pd)
	defer cancel()
	b = Bound(parent, time.Minute)
	defer b.Cancel()
	if d, ok := b.Deadline(); !ok || !d.Equal(pd) {
		t.Fatalf("Deadline() = %v, %v; want the parent's %v", d, ok, pd)
	}
}

// TestBoundedAwaitAllocs: awaiting a reply under a Bounded makes neither
// its Done channel nor its timer: the Bounded is the one allocation.
func TestBoundedAwaitAllocs(t *testing.T) {
	if racebuild.Enabled {
		t.Skip("allocation counts are not those of a plain build under the race detector")
	}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = parent.Done() // as a server's request context has it
	in := &inbox{signal: make(chan struct{}, 1)}
	m := &nats.Msg{}
	n := testing.AllocsPerRun(100, func() {
		in.q = in.first[:0]
		b := Bound(parent, time.Minute)
		in.put(m)
		if _, err := in.next(b, 0); err != nil {
			t.Fatal(err)
		}
		b.Cancel()
		<-in.signal
	})
	if n != 1 {
		t.Fatalf("a wait under a Bounded: %v allocations, want 1", n)
	}
}

// awaiting reports whether a wait on c's parts is under way.
func (c *Bounded) awaiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiter != nil
}

// madeDone reports whether c's Done channel was made.
func (c *Bounded) madeDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done != nil
}

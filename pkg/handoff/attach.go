package handoff

import (
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/nereid-io/nereid/api/inference"
)

// Attachments let hand-off state ride along with a protobuf message through
// code that only passes the message around: the gRPC codec decodes a
// request's large inputs into a Region that the gateway's forwarding finds
// again, and a response whose outputs live in mapped memory carries the
// Outgoing to release once the response is written. Keys are weak, and a
// message garbage-collected with its attachment still in place releases
// it, so paths that drop a message early leak nothing.

type attachment struct {
	value   any
	release func()
	cleanup runtime.Cleanup
}

var attached = struct {
	sync.Mutex
	m map[any]*attachment
}{m: map[any]*attachment{}}

// live counts attachments, so that the look-up every request makes costs
// one atomic load while no large tensor is in flight.
var live atomic.Int64

func attach[T any](msg *T, value any, release func()) {
	key := weak.Make(msg)
	a := &attachment{value: value, release: release}
	attached.Lock()
	old := attached.m[key]
	attached.m[key] = a
	if old == nil {
		live.Add(1)
	}
	// Registered under the lock, so that a detach cannot see a without its
	// cleanup.
	a.cleanup = runtime.AddCleanup(msg, func(k weak.Pointer[T]) {
		attached.Lock()
		a := attached.m[k]
		if a != nil {
			delete(attached.m, k)
			live.Add(-1)
		}
		attached.Unlock()
		if a != nil {
			a.release()
		}
	}, key)
	attached.Unlock()
	if old != nil {
		old.cleanup.Stop()
		old.release()
	}
}

func detach[T any](msg *T) any {
	if msg == nil || live.Load() == 0 {
		return nil
	}
	key := weak.Make(msg)
	attached.Lock()
	a := attached.m[key]
	if a != nil {
		delete(attached.m, key)
		live.Add(-1)
	}
	attached.Unlock()
	if a == nil {
		return nil
	}
	a.cleanup.Stop()
	return a.value
}

// attachedCount is the number of live attachments (tests check for leaks).
func attachedCount() int {
	attached.Lock()
	defer attached.Unlock()
	return len(attached.m)
}

// AttachRegion hands a reference on r, the memory req's inputs lie in, to
// whoever calls TakeRegion(req). If nobody does, the reference is released
// when req is garbage-collected.
func AttachRegion(req *inference.ModelInferRequest, r *Region) {
	if r == nil {
		return
	}
	attach(req, r, r.Release)
}

// TakeRegion returns the Region attached to req, or nil; the caller owns
// its reference.
func TakeRegion(req *inference.ModelInferRequest) *Region {
	r, _ := detach(req).(*Region)
	return r
}

// AttachResponse ties o, whose memory resp's outputs may lie in, to resp
// until TakeResponse(resp) (or resp's collection) releases it. An o that
// holds no mapped memory any more (a finished exchange within this process,
// whose outputs are heap slices) is released at once: attaching costs
// more than the release it would defer.
func AttachResponse(resp *inference.ModelInferResponse, o *Outgoing) {
	if o == nil {
		return
	}
	if !o.holdsMemory() {
		o.Release()
		return
	}
	attach(resp, o, o.Release)
}

// TakeResponse returns the Outgoing attached to resp, or nil; the caller
// must Release it once resp's outputs are no longer read.
func TakeResponse(resp *inference.ModelInferResponse) *Outgoing {
	o, _ := detach(resp).(*Outgoing)
	return o
}

// ResponseRegions returns a new reference on each region that resp's
// handed-off outputs may lie in (the files of its Outgoing: the request's,
// when an output is an input, and the response's); nil when it has none.
// The caller releases them. A region kept for later requests
// (Outgoing.KeepOutputs: Region.Kept) may be named by them.
func ResponseRegions(resp *inference.ModelInferResponse) []*Region {
	if resp == nil || live.Load() == 0 {
		return nil
	}
	key := weak.Make(resp)
	attached.Lock()
	defer attached.Unlock()
	// Under the lock: the attachment, and so the Outgoing's references,
	// cannot be released meanwhile.
	a := attached.m[key]
	if a == nil {
		return nil
	}
	o, _ := a.value.(*Outgoing)
	if o == nil {
		return nil
	}
	var rs []*Region
	for _, r := range append([]*Region{o.req, o.resp}, o.held...) {
		if r != nil {
			rs = append(rs, r.Retain())
		}
	}
	return rs
}

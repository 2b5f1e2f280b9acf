package cbackend

import (
	"math"
	"sync"
	"unsafe"
)

// handleTable gives Go objects the integer handles that C structures
// carry. A handle is a slot's index (plus one, so that 0 is no handle) in
// its low 32 bits and the slot's generation in its high 32: a slot's
// generation moves on when its object is removed, so a stale handle finds
// nothing instead of the slot's next object, and a slot whose generation
// has run out is retired rather than reused — no handle is ever given out
// twice. Unlike a map keyed by a counter, adding and removing a handle
// hashes nothing and allocates nothing once the table has grown to the
// objects alive at once (a request per execution in flight, the models,
// instances and metrics).
type handleTable struct {
	// mu is a plain mutex: every execution adds and removes a handle per
	// request, for which sync.RWMutex's write lock costs three times as
	// much, and lookups are few (calls into Go, which the recorded
	// executions mostly spare).
	mu    sync.Mutex
	slots []handleSlot
	free  []uint32 // indexes of empty slots
}

type handleSlot struct {
	v   any
	gen uint32
	// found is set once get has returned the object: remove reports
	// whether anything may still hold it from a lookup.
	found bool
}

// Handles need 64 bits: this fails to compile where uintptr is narrower.
var _ [unsafe.Sizeof(uintptr(0)) - 8]struct{}

func (t *handleTable) add(v any) uintptr {
	t.mu.Lock()
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		i = uint32(len(t.slots))
		t.slots = append(t.slots, handleSlot{})
	}
	s := &t.slots[i]
	s.v = v
	s.found = false
	h := uintptr(s.gen)<<32 | uintptr(i+1)
	t.mu.Unlock()
	return h
}

// slot returns the slot handle h names while it holds h's object; t.mu
// held.
func (t *handleTable) slot(h uintptr) *handleSlot {
	i := uint32(h) - 1
	if uint64(i) >= uint64(len(t.slots)) {
		return nil
	}
	s := &t.slots[i]
	if s.gen != uint32(h>>32) || s.v == nil {
		return nil
	}
	return s
}

// remove ends handle h. It reports whether get ever returned h's object:
// once remove has returned, no lookup can find it anymore, and one that
// found it before has been counted.
func (t *handleTable) remove(h uintptr) (found bool) {
	t.mu.Lock()
	if s := t.slot(h); s != nil {
		found = s.found
		s.v = nil
		if s.gen < math.MaxUint32 {
			s.gen++
			t.free = append(t.free, uint32(h)-1)
		}
	}
	t.mu.Unlock()
	return found
}

func (t *handleTable) get(h uintptr) any {
	t.mu.Lock()
	var v any
	if s := t.slot(h); s != nil {
		v = s.v
		s.found = true
	}
	t.mu.Unlock()
	return v
}

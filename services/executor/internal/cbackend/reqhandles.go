//go:build cgo

package cbackend

import (
	"math"
	"sync"
	"sync/atomic"
)

// requestTable gives the requests of executions their handles, as
// handleTable gives other objects theirs, without a lock on an execution's
// path: every execution adds and removes a handle per request, and the
// table's mutex, taken twice for it, cost more than the rest of the work.
//
// A slot holds one request object at a time, and stays with the object
// while the instance keeps the object for its next executions
// (keepRequests): adding the object again then only marks the slot live in
// its next generation. The slot's state word, changed by compare-and-swap,
// is its generation, whether it is live, and whether a lookup found its
// object: a lookup returns the object only while the state it read still
// holds, so a stale handle finds nothing, and a removal reports what
// handleTable.remove reports. Slots lie in pages that never move, so that
// lookups from other threads read them without a lock; the lock guards
// making slots and the list of free ones, which an execution takes only
// for an object that has none.
//
// A request's handle has requestTag set in its low half, which holds the
// slot's index; the generation is its high half, as in handleTable.
type requestTable struct {
	mu    sync.Mutex
	made  uint32   // slots made; their indexes are 1..made
	free  []uint32 // indexes of slots no object holds
	pages [reqPages]atomic.Pointer[reqPage]
}

const (
	requestTag  = 1 << 31
	reqPageBits = 8
	reqPageSize = 1 << reqPageBits
	reqPages    = 1 << 12 // 1M slots: beyond them, requests take handleTable's handles

	slotLive  = 2
	slotFound = 1
)

type reqPage [reqPageSize]reqSlot

type reqSlot struct {
	state atomic.Uint64 // generation<<2 | slotLive | slotFound
	cr    atomic.Pointer[cRequest]
	i     uint32 // its index
}

// requests holds the handles of executions' requests.
var requests requestTable

// isRequestHandle reports whether h is requestTable's.
func isRequestHandle(h uintptr) bool { return h&requestTag != 0 }

// slotOf is the index of h's slot, 0 for none.
func slotOf(h uintptr) uint32 {
	if !isRequestHandle(h) {
		return 0
	}
	return uint32(h) &^ requestTag
}

// slot returns slot i, nil when it was never made.
func (t *requestTable) slot(i uint32) *reqSlot {
	if i == 0 || i>>reqPageBits >= reqPages {
		return nil
	}
	p := t.pages[i>>reqPageBits].Load()
	if p == nil {
		return nil
	}
	return &p[i&(reqPageSize-1)]
}

// newSlot returns a slot no object holds, nil when the table is full.
func (t *requestTable) newSlot() *reqSlot {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.free); n > 0 {
		i := t.free[n-1]
		t.free = t.free[:n-1]
		return t.slot(i)
	}
	i := t.made + 1
	if i>>reqPageBits >= reqPages {
		return nil
	}
	p := t.pages[i>>reqPageBits].Load()
	if p == nil {
		p = new(reqPage)
		for j := range p {
			p[j].i = i&^(reqPageSize-1) | uint32(j)
		}
		t.pages[i>>reqPageBits].Store(p)
	}
	t.made = i
	return &p[i&(reqPageSize-1)]
}

// add makes cr live in slot s (nil: a new one; else one cr held before,
// not live) and returns its handle and slot; 0 and nil when the table is
// full.
func (t *requestTable) add(cr *cRequest, s *reqSlot) (uintptr, *reqSlot) {
	if s == nil {
		if s = t.newSlot(); s == nil {
			return 0, nil
		}
		s.cr.Store(cr)
	}
	gen := s.state.Load() >> 2
	s.state.Store(gen<<2 | slotLive)
	return uintptr(gen)<<32 | requestTag | uintptr(s.i), s
}

// remove ends handle h of slot s, as handleTable.remove does. The slot
// stays with its object (release gives it up); one whose generations have
// run out is retired: exhausted reports it, and the slot is never live
// again.
func (t *requestTable) remove(s *reqSlot, h uintptr) (found, exhausted bool) {
	for {
		st := s.state.Load()
		gen := st >> 2
		if st&slotLive == 0 || gen != uint64(uint32(h>>32)) {
			return false, false
		}
		next := (gen + 1) << 2
		if gen == math.MaxUint32 {
			next = gen << 2 // not live again: add refuses it (owner drops it)
		}
		if s.state.CompareAndSwap(st, next) {
			return st&slotFound != 0, gen == math.MaxUint32
		}
	}
}

// get returns h's object while h is live, noting that a lookup found it.
func (t *requestTable) get(h uintptr) *cRequest {
	s := t.slot(slotOf(h))
	if s == nil {
		return nil
	}
	for {
		st := s.state.Load()
		if st&slotLive == 0 || st>>2 != uint64(uint32(h>>32)) {
			return nil
		}
		cr := s.cr.Load()
		if st&slotFound != 0 {
			if s.state.Load() == st { // cr is still the object of st
				return cr
			}
			continue
		}
		if s.state.CompareAndSwap(st, st|slotFound) {
			return cr
		}
	}
}

// release gives up slot s (nil: none), which no live handle names
// (removed), for another object; a retired slot is kept from reuse.
func (t *requestTable) release(s *reqSlot) {
	if s == nil {
		return
	}
	s.cr.Store(nil) // keeps nothing alive
	if s.state.Load()>>2 == math.MaxUint32 {
		return
	}
	t.mu.Lock()
	t.free = append(t.free, s.i)
	t.mu.Unlock()
}

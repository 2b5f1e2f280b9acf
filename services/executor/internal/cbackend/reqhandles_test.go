//go:build cgo

package cbackend

import (
	"math"
	"testing"
)

func TestRequestTable(t *testing.T) {
	var tab requestTable
	a, b := &cRequest{}, &cRequest{}
	ha, sa := tab.add(a, nil)
	hb, sb := tab.add(b, nil)
	if ha == 0 || hb == 0 || ha == hb || !isRequestHandle(ha) || !isRequestHandle(hb) {
		t.Fatalf("handles %#x and %#x: want two distinct request handles", ha, hb)
	}
	if got := tab.get(ha); got != a {
		t.Fatalf("get(%#x) = %p, want a", ha, got)
	}
	if found, _ := tab.remove(sa, ha); !found {
		t.Fatal("remove after a lookup reported no lookup")
	}
	if got := tab.get(ha); got != nil {
		t.Fatalf("get of a removed handle = %p, want nothing", got)
	}
	if found, _ := tab.remove(sa, ha); found {
		t.Fatal("a second removal reported a lookup")
	}
	// a keeps its slot: its next handle is the slot's next generation.
	ha2, _ := tab.add(a, sa)
	if ha2 == ha || slotOf(ha2) != slotOf(ha) {
		t.Fatalf("handle %#x after %#x: want the same slot, a new generation", ha2, ha)
	}
	if got := tab.get(ha); got != nil {
		t.Fatalf("a stale handle found %p in its slot's next generation", got)
	}
	if found, _ := tab.remove(sa, ha2); found {
		t.Fatal("remove reported a lookup none made")
	}
	// A slot given up goes to another object, in its next generation.
	tab.release(sa)
	c := &cRequest{}
	hc, sc := tab.add(c, nil)
	if sc != sa || hc == ha || hc == ha2 {
		t.Fatalf("handle %#x: want slot %d reused in a new generation", hc, slotOf(ha))
	}
	if got := tab.get(ha2); got != nil {
		t.Fatalf("a's stale handle found %p", got)
	}
	if got := tab.get(hc); got != c {
		t.Fatalf("get(%#x) = %p, want c", hc, got)
	}
	for _, h := range []uintptr{0, requestTag, requestTag | 1<<30, hb + 1<<32} {
		if got := tab.get(h); got != nil {
			t.Fatalf("get(%#x) = %p, want nothing", h, got)
		}
	}
	if got := tab.get(hb); got != b {
		t.Fatalf("get(%#x) = %p, want b", hb, got)
	}
	_ = sb
}

func TestRequestTableRetiresExhaustedSlots(t *testing.T) {
	var tab requestTable
	v := &cRequest{}
	h, s := tab.add(v, nil)
	s.state.Store(math.MaxUint32<<2 | slotLive) // as after 2^32-1 reuses
	h = uintptr(math.MaxUint32)<<32 | h&math.MaxUint32
	if _, exhausted := tab.remove(s, h); !exhausted {
		t.Fatal("the last generation's removal did not retire the slot")
	}
	tab.release(s)
	h2, s2 := tab.add(v, nil)
	if s2 == s || slotOf(h2) == slotOf(h) {
		t.Fatalf("an exhausted slot was reused: handle %#x after %#x", h2, h)
	}
	if got := tab.get(h); got != nil {
		t.Fatalf("the retired slot's last handle found %p", got)
	}
}

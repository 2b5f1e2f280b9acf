package cbackend

import (
	"math"
	"testing"
)

func TestHandleTable(t *testing.T) {
	var tab handleTable
	a, b := "a", "b"
	ha := tab.add(&a)
	hb := tab.add(&b)
	if ha == 0 || hb == 0 || ha == hb {
		t.Fatalf("handles %#x and %#x: want two distinct non-zero ones", ha, hb)
	}
	if v, _ := tab.get(ha).(*string); v != &a {
		t.Fatalf("get(%#x) = %v, want a's object", ha, v)
	}
	tab.remove(ha)
	if v := tab.get(ha); v != nil {
		t.Fatalf("get of a removed handle = %v, want nothing", v)
	}
	tab.remove(ha) // a second removal changes nothing
	c := "c"
	hc := tab.add(&c) // takes a's slot, in its next generation
	if hc == ha {
		t.Fatalf("a removed handle %#x was given out again", ha)
	}
	if v := tab.get(ha); v != nil {
		t.Fatalf("a stale handle found %v in its slot's next object", v)
	}
	if v, _ := tab.get(hc).(*string); v != &c {
		t.Fatalf("get(%#x) = %v, want c's object", hc, v)
	}
	for _, h := range []uintptr{0, 1 << 40, hb + 1<<32} {
		if v := tab.get(h); v != nil {
			t.Fatalf("get(%#x) = %v, want nothing", h, v)
		}
	}
}

func TestHandleTableRetiresExhaustedSlots(t *testing.T) {
	var tab handleTable
	v := "v"
	h := tab.add(&v)
	tab.slots[0].gen = math.MaxUint32 // as after 2^32-1 reuses
	h = uintptr(math.MaxUint32)<<32 | h&math.MaxUint32
	tab.remove(h)
	h2 := tab.add(&v)
	if uint32(h2) == uint32(h) {
		t.Fatalf("an exhausted slot was reused: handle %#x after %#x", h2, h)
	}
}

func TestHandleTableReportsFoundObjects(t *testing.T) {
	var tab handleTable
	v := "v"
	for _, looked := range []bool{false, true} {
		h := tab.add(&v)
		if looked {
			tab.get(h)
		}
		tab.get(h + 1<<32) // a stale handle of the slot finds nothing, and counts for nothing
		if found := tab.remove(h); found != looked {
			t.Fatalf("remove after a lookup: %v; found = %v", looked, found)
		}
	}
}

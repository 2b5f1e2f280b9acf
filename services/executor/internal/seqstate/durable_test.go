package seqstate

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// fence is a batch fence: lease epoch and batch number.
func fence(epoch, batch uint64) uint64 { return epoch<<32 | batch }

func TestSaveFencing(t *testing.T) {
	cur := &Record{Fence: fence(3, 10), Token: "t5", State: []byte("s5"), Prev: []byte("s4"), HasPrev: true}
	for _, tc := range []struct {
		name string
		r    *Record
		w    Write
		want Verdict
		keep *Record // the record afterwards
	}{
		{"next request", cur, Write{Fence: fence(3, 11), Token: "t6", After: "t5", State: []byte("s6")}, Saved,
			&Record{Fence: fence(3, 11), Token: "t6", State: []byte("s6"), Prev: []byte("s5"), HasPrev: true}},
		{"an older batch of the same lease is refused", cur, Write{Fence: fence(3, 9), Token: "t6", After: "t5", State: []byte("x")}, Stale, cur},
		{"a batch of an older lease epoch is refused", cur, Write{Fence: fence(2, 500), Token: "t6", After: "t5", State: []byte("x")}, Stale, cur},
		{"a stale START is refused too", cur, Write{Fence: fence(2, 1), Token: "t0", Start: true, State: []byte("x")}, Stale, cur},
		{"a newer lease epoch writes", cur, Write{Fence: fence(4, 0), Token: "t6", After: "t5", State: []byte("s6")}, Saved,
			&Record{Fence: fence(4, 0), Token: "t6", State: []byte("s6"), Prev: []byte("s5"), HasPrev: true}},
		{"the stored request run again keeps Prev", cur, Write{Fence: fence(3, 12), Token: "t5", After: "t4", State: []byte("s5")}, Saved,
			&Record{Fence: fence(3, 12), Token: "t5", State: []byte("s5"), Prev: []byte("s4"), HasPrev: true}},
		{"input from another state is stale", cur, Write{Fence: fence(3, 12), Token: "t6", After: "t4", State: []byte("x")}, Stale, cur},
		{"START replaces an older sequence's record", cur, Write{Fence: fence(3, 11), Token: "u0", Start: true, State: []byte("i")}, Saved,
			&Record{Fence: fence(3, 11), Token: "u0", State: []byte("i")}},
		{"START without a record", nil, Write{Fence: 1, Token: "u0", Start: true, State: []byte("i")}, Saved,
			&Record{Fence: 1, Token: "u0", State: []byte("i")}},
		{"no record: gone", nil, Write{Fence: fence(3, 11), Token: "t6", After: "t5", State: []byte("x")}, Gone, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, got := Save(tc.r, tc.w)
			if v != tc.want {
				t.Fatalf("verdict %v, want %v", v, tc.want)
			}
			if !reflect.DeepEqual(got, tc.keep) {
				t.Fatalf("record %+v, want %+v", got, tc.keep)
			}
		})
	}
}

func TestMayDrop(t *testing.T) {
	r := &Record{Fence: fence(3, 10), Token: "t5"}
	for _, tc := range []struct {
		name         string
		r            *Record
		fence        uint64
		token, after string
		want         bool
	}{
		{"END after the stored request", r, fence(3, 11), "t6", "t5", true},
		{"END whose state was stored", r, fence(3, 11), "t5", "t4", true},
		{"an older batch's END", r, fence(3, 9), "t6", "t5", false},
		{"another sequence's record", r, fence(3, 11), "u6", "u5", false},
		{"nothing stored", nil, fence(3, 11), "t6", "t5", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MayDrop(tc.r, tc.fence, tc.token, tc.after); got != tc.want {
				t.Fatalf("MayDrop = %v", got)
			}
		})
	}
}

func TestResume(t *testing.T) {
	r := &Record{Fence: 1, Token: "t5", State: []byte("s5"), Prev: []byte("s4"), HasPrev: true}
	if st, after, ok := Resume(r, "t6"); !ok || string(st) != "s5" || after != "t5" {
		t.Fatalf("next request: %q %q %v", st, after, ok)
	}
	if st, _, ok := Resume(r, "t5"); !ok || string(st) != "s4" {
		t.Fatalf("the stored request again: %q %v", st, ok)
	}
	if _, _, ok := Resume(&Record{Token: "t0", State: []byte("s0")}, "t0"); ok {
		t.Fatal("a request whose previous state is unknown resumed")
	}
}

func TestEncodeDecode(t *testing.T) {
	s := Restore(map[string]Tensor{
		"INPUT_STATE": {DataType: tensor.Int32, Shape: []int64{1, 3}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}},
		"STR":         {DataType: tensor.Bytes, Shape: []int64{1}, Data: []byte{2, 0, 0, 0, 'h', 'i'}},
		"EMPTY":       {DataType: tensor.FP32, Shape: []int64{1, 0}, Data: nil},
	})
	b := Encode(s)
	if !bytes.Equal(b, Encode(s)) {
		t.Fatal("encoding is not deterministic")
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range s.Tensors() {
		g := got.Tensors()[name]
		if g.DataType != want.DataType || !reflect.DeepEqual(g.Shape, want.Shape) || !bytes.Equal(g.Data, want.Data) {
			t.Fatalf("%s: %+v, want %+v", name, g, want)
		}
	}
	for i := range len(b) - 1 {
		if _, err := Decode(b[:i]); err == nil {
			t.Fatalf("a state cut at %d bytes decoded", i)
		}
	}
	if _, err := Decode(append(b, 0)); err == nil {
		t.Fatal("trailing bytes decoded")
	}
	// Encoding runs on every durable request: its bytes are its only
	// allocation.
	if n := testing.AllocsPerRun(100, func() { b = Encode(s) }); n != 1 {
		t.Fatalf("Encode of 3 tensors: %.0f allocations, want 1", n)
	}
}

func TestNextLeavesTheSlot(t *testing.T) {
	c := &Config{States: []State{{Input: "IN", Output: "OUT", DataType: tensor.Int32}}}
	s := Restore(map[string]Tensor{"IN": {DataType: tensor.Int32, Shape: []int64{1}, Data: []byte{1, 0, 0, 0}}})
	n := c.Next(s, []*backend.State{{Name: "OUT", DataType: tensor.Int32, Shape: []int64{1}, Data: []byte{2, 0, 0, 0}}})
	if s.Tensors()["IN"].Data[0] != 1 || n.Tensors()["IN"].Data[0] != 2 {
		t.Fatalf("slot %v, next %v", s.Tensors(), n.Tensors())
	}
}

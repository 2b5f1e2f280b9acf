package seqstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// Durable state (the model parameter state_durability "redis") keeps a
// copy of every sequence's state in a store, so that another executor can
// continue the sequence when the one running it is lost. The rules below
// decide what the store accepts; the executor's stores (memory, and Redis
// as a Lua script) apply them atomically, and one contract test holds both
// to them.
//
// A store Record holds the state after the sequence's last request that
// changed it, that request's token (the gateway's per-request token) and
// the fence of the batch that ran it: the sequence router's lease epoch in
// the high 32 bits and the batch's number under that lease in the low
// ones, so fences grow with every batch any router hands out. It also
// keeps the state before that request (Prev): when the executor running a
// request dies after writing its state but before its answer left, the
// router runs the request again elsewhere, and the new executor, finding
// the request's own token in the store, runs it from Prev, giving the
// answer the first run would have given.

// Record is one sequence's durable state.
type Record struct {
	Fence uint64
	Token string
	State []byte // Encode of the state after the request Token
	// Prev is the state before the request Token; HasPrev is false after a
	// START (whose input is the initial state) or when it was never known.
	Prev    []byte
	HasPrev bool
}

// Write is one request's new state.
type Write struct {
	Fence uint64
	Token string
	// After is the token of the record the request's input state came
	// from ("" for a START, whose input is the initial state).
	After string
	Start bool
	State []byte
}

// Verdict is the store's answer to a write.
type Verdict uint8

const (
	// Saved: the state is the sequence's durable state now.
	Saved Verdict = iota
	// Stale: the store holds a state written by a newer batch, or one that
	// follows neither this request's input nor the request itself: the
	// sequence moved on without this executor (it was declared lost and
	// the request ran again elsewhere). Its answer must not be sent.
	Stale
	// Gone: the store holds no state for the sequence (it ended, timed out,
	// or the store lost its data), and the write is not a START.
	Gone
)

// String names the verdict in logs and errors.
func (v Verdict) String() string {
	switch v {
	case Saved:
		return "saved"
	case Stale:
		return "stale"
	case Gone:
		return "gone"
	}
	return "unknown verdict"
}

// Save applies w to r (nil when the store has no record) and returns the
// verdict and the record to keep (r itself when the write is refused):
//
//   - a fence older than the record's is Stale, whatever else (a batch of
//     a router or an executor the sequence has left behind);
//   - the request the record already holds (its token) running again
//     replaces the state and keeps Prev;
//   - a START replaces any record;
//   - no record is Gone;
//   - the record the request's input came from (After) becomes Prev;
//   - anything else is Stale.
func Save(r *Record, w Write) (Verdict, *Record) {
	if r != nil && r.Fence > w.Fence {
		return Stale, r
	}
	switch {
	case r != nil && r.Token == w.Token:
		return Saved, &Record{Fence: w.Fence, Token: w.Token, State: w.State, Prev: r.Prev, HasPrev: r.HasPrev}
	case w.Start:
		return Saved, &Record{Fence: w.Fence, Token: w.Token, State: w.State}
	case r == nil:
		return Gone, nil
	case r.Token == w.After:
		return Saved, &Record{Fence: w.Fence, Token: w.Token, State: w.State, Prev: r.State, HasPrev: true}
	}
	return Stale, r
}

// MayDrop reports whether the END request token, whose input came from the
// record After, with fence, may delete r: not when a newer batch wrote it,
// nor when it is another sequence's (the id reused since).
func MayDrop(r *Record, fence uint64, token, after string) bool {
	return r != nil && r.Fence <= fence && (r.Token == after || r.Token == token)
}

// Resume is the input state and the After token of a request of a moved
// sequence, from its record: the state before the request when the record
// is the request's own (it ran on the lost executor, which wrote its
// state), the record's state otherwise. ok is false when the record holds
// the request's own state without the one before it.
func Resume(r *Record, token string) (state []byte, after string, ok bool) {
	if r.Token == token {
		return r.Prev, "", r.HasPrev
	}
	return r.State, r.Token, true
}

// Encode writes a slot's tensors in a self-describing binary form: a count,
// then per tensor its input name, data type, shape and data, every length
// and number little-endian, the tensors in name order so that equal states
// encode equally.
func Encode(s *Slot) []byte {
	// Names gathered on the stack: a state of a few tensors, written on
	// every durable request, allocates only its bytes.
	var buf [4]string
	names := buf[:0]
	for name := range s.tensors {
		names = append(names, name)
	}
	slices.Sort(names)
	n := 4
	for _, name := range names {
		t := s.tensors[name]
		n += 4 + len(name) + 4 + len(t.DataType.String()) + 4 + 8*len(t.Shape) + 8 + len(t.Data)
	}
	b := make([]byte, 0, n)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(names)))
	for _, name := range names {
		t := s.tensors[name]
		b = appendString(b, name)
		b = appendString(b, t.DataType.String())
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Shape)))
		for _, d := range t.Shape {
			b = binary.LittleEndian.AppendUint64(b, uint64(d))
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(len(t.Data)))
		b = append(b, t.Data...)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// errCorrupt is Decode's error for bytes Encode did not write.
var errCorrupt = errors.New("corrupt durable state")

// Decode reads what Encode wrote, checking every length against the bytes
// there are; the tensors alias b.
func Decode(b []byte) (*Slot, error) {
	d := decoder{b: b}
	count := d.u32()
	if d.err != nil || uint64(count) > uint64(len(b)) {
		return nil, errCorrupt
	}
	s := &Slot{tensors: make(map[string]Tensor, count)}
	for range count {
		name := d.str()
		dt, known := tensor.ParseDataType(d.str())
		rank := d.u32()
		if d.err != nil || uint64(rank)*8 > uint64(len(d.b)) {
			return nil, errCorrupt
		}
		shape := make([]int64, rank)
		for i := range shape {
			shape[i] = int64(d.u64())
		}
		data := d.bytes(d.u64())
		if d.err != nil || !known {
			return nil, fmt.Errorf("%w (tensor %q)", errCorrupt, name)
		}
		s.tensors[name] = Tensor{DataType: dt, Shape: shape, Data: data}
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errCorrupt
	}
	return s, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errCorrupt
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) str() string { return string(d.bytes(uint64(d.u32()))) }

// Next returns a new slot: s with the states the backend updated replaced
// (Update on a copy), leaving s as it was, so that a state is made the
// sequence's only once it is durable.
func (c *Config) Next(s *Slot, updated []*backend.State) *Slot {
	n := &Slot{tensors: maps.Clone(s.tensors)}
	c.Update(n, updated)
	return n
}

package builtin

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// seqReq is a request of sequence id to sequence_repeat_int32 with its
// control tensors as the sequence batcher sets them; its responses go to
// the returned channel, closed after the final one.
func seqReq(id uint64, start, end, ready bool, in ...int32) (*backend.Request, <-chan *backend.Response) {
	ch := make(chan *backend.Response, len(in)+1)
	r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) {
		ch <- resp
		if resp.Final {
			close(ch)
		}
	})
	r.Decoupled = true
	r.CorrelationID = backend.CorrelationUint(id)
	control := func(name string, v bool) backend.Input {
		b := []byte{0, 0, 0, 0}
		if v {
			b[0] = 1
		}
		return backend.Input{Name: name, DataType: tensor.Int32, Shape: []int64{1}, Data: b}
	}
	r.Inputs = []backend.Input{
		{Name: "IN", DataType: tensor.Int32, Shape: []int64{int64(len(in))}, Data: tensor.AppendInt32s(nil, in...)},
		control("START", start), control("END", end), control("READY", ready),
	}
	r.RequestedOutputs = []string{"OUT", "IDX"}
	return r, ch
}

// outsOf drains a request's responses: the OUT values, checking IDX and
// that the request ends with the final flag alone.
func outsOf(t *testing.T, ch <-chan *backend.Response) []int32 {
	t.Helper()
	var got []int32
	timeout := time.After(10 * time.Second)
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				return got
			}
			if r.Err != nil {
				t.Fatalf("error response: %v", r.Err)
			}
			if r.Final {
				if !r.FlagOnly {
					t.Fatalf("the last response is not the final flag alone: %+v", r)
				}
				continue
			}
			if idx := binary.LittleEndian.Uint32(output(t, r, "IDX").Data); int(idx) != len(got) {
				t.Fatalf("IDX %d, want %d", idx, len(got))
			}
			got = append(got, int32(binary.LittleEndian.Uint32(output(t, r, "OUT").Data)))
		case <-timeout:
			t.Fatal("no final response")
		}
	}
}

func TestSequenceRepeat(t *testing.T) {
	cfg := repoConfig(t, "sequence_repeat_int32")
	inst, _, err := load(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Two sequences interleaved in one batch, then their ends; a padding
	// entry (READY false) gets the final flag alone.
	a1, ca1 := seqReq(1, true, false, true, 1, 2)
	b1, cb1 := seqReq(2, true, false, true, 10)
	pad, cpad := seqReq(0, false, false, false, 99)
	if err := inst.Execute(context.Background(), []*backend.Request{a1, b1, pad}); err != nil {
		t.Fatal(err)
	}
	a2, ca2 := seqReq(1, false, true, true, 3)
	b2, cb2 := seqReq(2, false, true, true, 5, 5)
	if err := inst.Execute(context.Background(), []*backend.Request{a2, b2}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ch   <-chan *backend.Response
		want []int32
	}{
		{"a1", ca1, []int32{1, 3}}, {"b1", cb1, []int32{10}}, {"padding", cpad, nil},
		{"a2", ca2, []int32{6}}, {"b2", cb2, []int32{15, 20}},
	} {
		got := outsOf(t, c.ch)
		if len(got) != len(c.want) {
			t.Errorf("%s: OUT %v, want %v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: OUT %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
	// END forgot sequence 1: a new START begins from zero.
	a3, ca3 := seqReq(1, true, true, true, 7)
	if err := inst.Execute(context.Background(), []*backend.Request{a3}); err != nil {
		t.Fatal(err)
	}
	if got := outsOf(t, ca3); len(got) != 1 || got[0] != 7 {
		t.Errorf("after END and a new START: OUT %v, want [7]", got)
	}
}

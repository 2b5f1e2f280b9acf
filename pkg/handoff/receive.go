package handoff

import (
	"bytes"
	"context"
	"syscall"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// orphanGrace is how long after the request's deadline an executor removes
// a response file the gateway never took (it gave up waiting).
var orphanGrace = 5 * time.Second

// defaultOrphanAfter bounds a response file's life when the request has no
// deadline.
const defaultOrphanAfter = 2 * time.Minute

// Incoming is the receiving side of one request's hand-off, in the
// executor: Accept puts the handed-off inputs into the request, Reply hands
// off the large outputs of the response, Release unmaps the inputs once
// the response is encoded. Methods are nil-safe: a nil Incoming (a request
// without Param) does nothing.
type Incoming struct {
	mode Mode
	req  *Region // the request's file, mapped; or the memory of a process exchange
	key  string
	ex   *exchange
}

// Accept resolves req's hand-off descriptor, if any: the inputs it names
// are sliced from the request's file (mapped once, no copy; the file is
// unlinked at once, since both sides have it mapped now) or taken from the
// gateway of this process. Param is removed from req.
func Accept(req *inference.ModelInferRequest) (*Incoming, error) {
	return AcceptInto(nil, req, "")
}

// AcceptInto is Accept with the Incoming it returns, when not nil, being
// into (a zero Incoming, never used before, that the caller allocated
// with other things of the request's; a nil into is allocated), and
// descriptor, when not "", being req's Param, which its decoder took out
// of req's parameters (infercodec.UnmarshalRequestTaking).
func AcceptInto(into *Incoming, req *inference.ModelInferRequest, descriptor string) (*Incoming, error) {
	if descriptor == "" {
		p, ok := req.GetParameters()[Param]
		if !ok {
			return nil, nil
		}
		delete(req.Parameters, Param)
		descriptor = p.GetStringParam()
	}
	raw := req.GetRawInputContents()
	d, err := ParseDescriptor(descriptor, len(req.GetInputs()), -1)
	if err != nil {
		return nil, tritonerr.InvalidArgf("%v", err)
	}
	if len(raw) != len(req.GetInputs()) {
		return nil, tritonerr.InvalidArgf("handoff: request has %d raw inputs for %d inputs", len(raw), len(req.GetInputs()))
	}
	in := into
	if in == nil {
		in = &Incoming{}
	}
	in.mode = d.Mode
	switch d.Mode {
	case ModeProcess:
		ex := lookupExchange(d.Name)
		if ex == nil {
			// Not run: the gateway may send it again over the bus.
			return nil, bus.NotTaken("handoff: no tensors under key %s in this process (the gateway gave up, or the request reached another process)", d.Name)
		}
		ex.mu.Lock()
		if ex.closed || ex.taken {
			ex.mu.Unlock()
			return nil, bus.NotTaken("handoff: the tensors under key %s are gone", d.Name)
		}
		ex.taken = true
		in.req, ex.region = ex.region, nil
		inputs := ex.inputs
		ex.mu.Unlock()
		in.key, in.ex = d.Name, ex
		for i, b := range inputs {
			if b != nil && i < len(raw) {
				raw[i] = b
			}
		}
	case ModeFile, ModeKept:
		if d.Name == "" {
			return in, nil
		}
		open := Open
		if d.Mode == ModeKept {
			open = openKept // the gateway keeps the file for other requests
		}
		r, err := open(d.Name, d.Size)
		if err != nil {
			// Not run: the gateway may send it again over the bus (this
			// executor claims the gateway's node but does not share its
			// /dev/shm, or the gateway gave up).
			return nil, bus.NotTaken("%v", err)
		}
		r.Unlink()
		in.req = r
		for _, s := range d.Spans {
			raw[s.Index] = r.data[s.Offset : s.Offset+s.Len : s.Offset+s.Len]
		}
	}
	return in, nil
}

// Passive reports whether Reply leaves a response whose outputs are all
// below Threshold as it is: no hand-off, or one within this process that
// lent no mapped memory. Such a response may be encoded without Reply.
func (in *Incoming) Passive() bool {
	return in == nil || (in.mode == ModeProcess && in.req == nil)
}

// Reply hands off the outputs of resp of at least Threshold bytes to the
// gateway: as slices to a gateway of this process, else as spans of the
// request's file (an output that lies in an input, as an identity model
// returns) or of a new file holding the others. Small outputs stay in resp;
// those that lie in the request's file are copied out, since the file is
// unmapped before the reply is encoded. A response file the gateway does
// not take (it gave up) is removed shortly after ctx's deadline. If no file
// can be made, the outputs stay in resp and the bus carries them.
func (in *Incoming) Reply(ctx context.Context, resp *inference.ModelInferResponse) {
	if in == nil {
		return
	}
	raw := resp.GetRawOutputContents()
	if in.mode == ModeProcess {
		var outs [][]byte // nil while no output is large
		for i, b := range raw {
			if len(b) >= Threshold {
				if outs == nil {
					outs = make([][]byte, len(raw))
				}
				outs[i] = b
			}
		}
		in.ex.mu.Lock()
		if !in.ex.closed {
			in.ex.outputs = outs
			for i := range outs {
				if outs[i] != nil {
					raw[i] = []byte{}
				}
			}
		}
		in.ex.mu.Unlock()
		in.copySmall(raw)
		return
	}
	d := Descriptor{Mode: ModeFile}
	total := 0
	for i, b := range raw {
		if len(b) < Threshold {
			continue
		}
		if off, ok := in.req.Offset(b); ok && !in.req.borrowed {
			d.Spans = append(d.Spans, Span{Index: i, Source: SourceRequest, Offset: int64(off), Len: int64(len(b))})
			continue
		}
		total += len(b)
	}
	var out *Region
	if total > 0 {
		var err error
		if out, err = Create(total, true); err == nil {
			d.Name, d.Size = out.name, int64(total)
			off := 0
			for i, b := range raw {
				if len(b) >= Threshold {
					if _, ok := in.req.Offset(b); !ok || in.req.borrowed {
						copy(out.data[off:], b)
						d.Spans = append(d.Spans, Span{Index: i, Source: SourceFile, Offset: int64(off), Len: int64(len(b))})
						off += len(b)
					}
				}
			}
		}
	}
	for _, s := range d.Spans {
		raw[s.Index] = []byte{}
	}
	in.copySmall(raw)
	if len(d.Spans) > 0 {
		if resp.Parameters == nil {
			resp.Parameters = map[string]*inference.InferParameter{}
		}
		resp.Parameters[Param] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: d.String()}}
	}
	if out != nil {
		out.unmapKeepFile()
		removeLater(ctx, out.path)
	}
}

// copySmall copies the outputs left in raw that lie in the request's
// memory, which may be unmapped before the reply is encoded.
func (in *Incoming) copySmall(raw [][]byte) {
	for i, b := range raw {
		if _, ok := in.req.Offset(b); ok {
			raw[i] = bytes.Clone(b)
		}
	}
}

// removeLater removes a response file once the gateway can no longer want
// it: it gives up at the request's deadline.
func removeLater(ctx context.Context, path string) {
	after := defaultOrphanAfter
	if d, ok := ctx.Deadline(); ok {
		after = time.Until(d) + orphanGrace
	}
	time.AfterFunc(max(after, 0), func() { _ = syscall.Unlink(path) })
}

// Release unmaps the request's file, or drops this side's hold on the
// memory of a process exchange. Call it once nothing reads the inputs any
// more (an execution still running on them must finish first); the reply
// need not be encoded yet, since Reply left nothing of it in that memory.
func (in *Incoming) Release() {
	if in == nil {
		return
	}
	in.req.Release()
	in.req = nil
}

package handoff

import (
	"sync"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// DefaultThreshold is the size from which a tensor is handed off rather
// than carried by the bus.
const DefaultThreshold = 1 << 20

// Threshold is the size from which an executor hands off an output, when
// the request says its gateway can take one. A variable for tests.
var Threshold = DefaultThreshold

// Route is how a gateway reaches the executor of a request.
type Route int

const (
	// RouteBus: no executor on this node; the bus carries every byte
	// (chunked beyond its max payload).
	RouteBus Route = iota
	// RouteNode: an executor in another process on this node; large
	// tensors travel through files in Dir.
	RouteNode
	// RouteProcess: an executor in this process; large tensors are handed
	// over as slices, with no copy.
	RouteProcess
)

func (r Route) String() string {
	switch r {
	case RouteNode:
		return "node"
	case RouteProcess:
		return "process"
	}
	return "bus"
}

// Outgoing is the sending side of one request's hand-off, in the gateway:
// Prepare moves the large inputs out of the request, Finish puts the large
// outputs into the response, Release frees what is left once the response
// is written. Methods are nil-safe: a nil Outgoing hands off nothing.
type Outgoing struct {
	mode Mode
	req  *Region // the request's file (ModeFile) or memory; one reference
	resp *Region // the response's file, once mapped; one reference

	key   string // ModeProcess
	ex    *exchange
	exch  exchange    // what ex points to, and
	param stringParam // the request's Param: one allocation with o
	pbuf  paramBuf    // ModeProcess: the bytes of param's string
	// ownMap: setParam made the request's parameters map (Unset).
	ownMap bool
	// keepOutputs: the response's file is kept (KeepOutputs).
	keepOutputs bool
	// held: regions a response made of other requests' outputs lies in
	// (Holding); one reference each.
	held  []*Region
	spans []Span // ModeFile: where the inputs went, for Undo

	// sent and received are the tensor bytes handed off: inputs by
	// Prepare, outputs taken by Finish.
	sent, received int64

	once sync.Once
}

// Bytes are the tensor bytes o handed off: the request's inputs and, once
// Finish took them, the response's outputs (0, 0 for a nil Outgoing).
func (o *Outgoing) Bytes() (inputs, outputs int64) {
	if o == nil {
		return 0, 0
	}
	return o.sent, o.received
}

// KeepOutputs makes Finish keep the file of the response's outputs
// (Region.Keep) rather than remove it once mapped, so that later requests
// can name them (ModeKept) instead of copying them into files of their
// own: the steps of an ensemble that read an earlier step's outputs.
func (o *Outgoing) KeepOutputs() {
	if o != nil {
		o.keepOutputs = true
	}
}

// Mode is how o hands tensors off.
func (o *Outgoing) Mode() Mode {
	if o == nil {
		return 0
	}
	return o.mode
}

// Prepare hands off every raw input of req of at least threshold bytes
// along route, and records in req's parameters (Param) that the gateway
// can take handed-off outputs. body, when not nil, is memory the inputs may
// already lie in (an HTTP body read into a Region); Prepare takes its own
// reference. For RouteBus it returns nil and leaves req alone.
//
// A parameter named Param from the client is refused: the descriptor would
// make the executor read files or tensors that are not the client's.
func Prepare(req *inference.ModelInferRequest, route Route, body *Region, threshold int) (*Outgoing, error) {
	return PrepareInto(nil, req, route, body, threshold)
}

// PrepareInto is Prepare with the Outgoing it returns, when not nil, being
// o (a zero Outgoing, never used before, which the caller allocated with
// other things of the request's: it must stay valid as long as the
// returned pointer is used, which the garbage collector sees to). A nil o
// is allocated.
func PrepareInto(o *Outgoing, req *inference.ModelInferRequest, route Route, body *Region, threshold int) (*Outgoing, error) {
	if _, ok := req.GetParameters()[Param]; ok {
		return nil, tritonerr.InvalidArgf("parameter '%s' is reserved for Nereid's internal use and should not be specified.", Param)
	}
	if route == RouteBus {
		return nil, nil
	}
	raw := req.GetRawInputContents()
	if len(raw) != len(req.GetInputs()) {
		return nil, nil // not all-raw (shared-memory inputs): leave it to the bus
	}
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	var d Descriptor
	if o == nil {
		o = &Outgoing{}
	}
	switch route {
	case RouteProcess:
		o.mode = ModeProcess
		ex := &o.exch
		for i, b := range raw {
			if len(b) >= threshold {
				if ex.inputs == nil {
					ex.inputs = make([][]byte, len(raw))
				}
				ex.inputs[i] = b
				o.sent += int64(len(b))
				raw[i] = []byte{}
			}
		}
		if body != nil {
			// One reference for the executor, which may still read the
			// inputs after the gateway is done; one for the gateway, whose
			// response may alias them (an identity model).
			ex.region = body.Retain()
			o.req = body.Retain()
		}
		o.ex = ex
		param := openExchange(ex, &o.pbuf)
		o.key = param[len("p;"):]
		o.setParam(req, param)
		return o, nil
	case RouteNode:
		o.mode = ModeFile
		d = Descriptor{Mode: ModeFile}
		inBody, total := true, 0
		for _, b := range raw {
			if len(b) >= threshold {
				total += len(b)
				if _, ok := body.Offset(b); !ok || !body.Shared() {
					inBody = false
				}
			}
		}
		switch {
		case total == 0:
		case inBody:
			if body.Kept() {
				// Other requests may name the file too: the executor
				// leaves it, and the gateway's last release removes it.
				o.mode, d.Mode = ModeKept, ModeKept
			}
			o.req = body.Retain()
			for i, b := range raw {
				if len(b) >= threshold {
					off, _ := body.Offset(b)
					d.Spans = append(d.Spans, Span{Index: i, Source: SourceFile, Offset: int64(off), Len: int64(len(b))})
				}
			}
		default:
			r, err := Create(total, true)
			if err != nil {
				return nil, nil // no room in Dir: the bus carries it
			}
			o.req = r
			off := 0
			for i, b := range raw {
				if len(b) >= threshold {
					copy(r.data[off:], b)
					d.Spans = append(d.Spans, Span{Index: i, Source: SourceFile, Offset: int64(off), Len: int64(len(b))})
					off += len(b)
				}
			}
		}
		if o.req != nil {
			d.Name, d.Size = o.req.name, int64(len(o.req.data))
		}
		for _, s := range d.Spans {
			raw[s.Index] = []byte{}
			o.sent += s.Len
		}
		o.spans = d.Spans
	}
	o.setParam(req, d.String())
	return o, nil
}

// paramMaps are parameter maps setParam made for requests that had none,
// given back by Unset: most requests have no parameters of their own, and
// a map costs two allocations.
var paramMaps = sync.Pool{New: func() any { return make(map[string]*inference.InferParameter, 1) }}

// setParam puts the encoded descriptor into req's parameters.
func (o *Outgoing) setParam(req *inference.ModelInferRequest, descriptor string) {
	if req.Parameters == nil {
		req.Parameters = paramMaps.Get().(map[string]*inference.InferParameter)
		o.ownMap = true
	}
	o.param.s.StringParam = descriptor
	o.param.p.ParameterChoice = &o.param.s
	req.Parameters[Param] = &o.param.p
}

// Unset takes the descriptor out of req's parameters (where Prepare put
// it) and gives the parameters map back for later requests when Prepare
// made it. For a request that went out encoded and is no longer read: one
// handed to its executor as a message (bus.Local) must keep its map.
func (o *Outgoing) Unset(req *inference.ModelInferRequest) {
	if o == nil {
		return
	}
	delete(req.Parameters, Param)
	if m := req.Parameters; o.ownMap && m != nil && len(m) == 0 {
		req.Parameters = nil
		paramMaps.Put(m)
	}
	o.ownMap = false
}

// stringParam is a string parameter with its oneof case.
type stringParam struct {
	p inference.InferParameter
	s inference.InferParameter_StringParam
}

// holdsMemory reports whether o still holds mapped memory a response's
// outputs may lie in (a request or response file, a body Region).
func (o *Outgoing) holdsMemory() bool { return o.req != nil || o.resp != nil || len(o.held) > 0 }

// Holding returns an Outgoing that hands nothing off and holds rs
// (references the caller gives up) until it is released: for a response
// whose outputs lie in the files of other requests (an ensemble's, made of
// its steps' outputs), to attach to it (AttachResponse) so that its writer
// releases them once it is written. Nil when rs is empty.
func Holding(rs ...*Region) *Outgoing {
	if len(rs) == 0 {
		return nil
	}
	return &Outgoing{held: rs}
}

// Undo puts the handed-off inputs back into req and removes Param, so that
// the request can go over the bus after all: the executors of this node went
// away, or do not share its /dev/shm (bus.IsNoResponders on the node
// subject, or the executor's bus.NotTaken from Accept). The inputs still
// lie in o's memory: release o only once req has been sent. It reports
// false when the tensors can no longer be taken back (an executor of this
// process took them).
func (o *Outgoing) Undo(req *inference.ModelInferRequest) bool {
	if o == nil {
		return false
	}
	raw := req.GetRawInputContents()
	switch o.mode {
	case ModeProcess:
		ex := o.ex
		ex.mu.Lock()
		taken := ex.taken
		ex.mu.Unlock()
		if taken {
			return false
		}
		closeExchange(o.key, ex) // no executor can take them now
		for i, b := range ex.inputs {
			if b != nil && i < len(raw) {
				raw[i] = b
			}
		}
	case ModeFile, ModeKept:
		for _, s := range o.spans {
			if s.Index < len(raw) {
				raw[s.Index] = o.req.data[s.Offset : s.Offset+s.Len : s.Offset+s.Len]
			}
		}
	}
	delete(req.Parameters, Param)
	o.sent = 0 // the bus carries them after all
	return true
}

// OutputsHandedOver reports whether an executor of this process handed
// outputs over for Finish to put into the response (ModeProcess); until
// then the response's encoding holds all of them. (In ModeFile the
// response's parameters say so: Param.)
func (o *Outgoing) OutputsHandedOver() bool {
	if o == nil || o.mode != ModeProcess {
		return false
	}
	o.ex.mu.Lock()
	defer o.ex.mu.Unlock()
	return o.ex.outputs != nil
}

// Finish moves the outputs the executor handed off into
// resp.RawOutputContents and removes Param from resp. The outputs may lie
// in mapped memory: Release o only once they have been written out.
func (o *Outgoing) Finish(resp *inference.ModelInferResponse) error {
	if o == nil {
		return nil
	}
	p, hasParam := resp.GetParameters()[Param]
	delete(resp.Parameters, Param)
	if o.req != nil && !o.req.Kept() {
		o.req.Unlink() // the executor has mapped it by now, or never will
	}
	n := len(resp.GetOutputs())
	switch o.mode {
	case ModeProcess:
		ex := o.ex
		closeExchange(o.key, ex)
		ex.mu.Lock()
		outs := ex.outputs
		ex.mu.Unlock()
		for i, b := range outs {
			if b != nil {
				if i >= n || i >= len(resp.RawOutputContents) {
					return tritonerr.Internalf("handoff: output %d handed off for a response of %d outputs", i, n)
				}
				resp.RawOutputContents[i] = b
				o.received += int64(len(b))
			}
		}
	case ModeFile, ModeKept:
		if !hasParam {
			return nil
		}
		reqSize := int64(-1)
		if o.req != nil {
			reqSize = int64(len(o.req.data))
		}
		d, err := ParseDescriptor(p.GetStringParam(), n, reqSize)
		if err != nil || d.Mode != ModeFile {
			return tritonerr.Internalf("%v", err)
		}
		if len(resp.RawOutputContents) != n {
			return tritonerr.Internalf("handoff: response has %d raw outputs for %d outputs", len(resp.RawOutputContents), n)
		}
		if d.Name != "" {
			r, err := Open(d.Name, d.Size)
			if err != nil {
				return tritonerr.Internalf("%v", err)
			}
			if o.keepOutputs {
				r.Keep() // for later requests to name (ModeKept)
			} else {
				r.Unlink() // both sides have mapped it now
			}
			o.resp = r
		}
		for _, s := range d.Spans {
			src := o.req
			if s.Source == SourceFile {
				src = o.resp
			}
			resp.RawOutputContents[s.Index] = src.data[s.Offset : s.Offset+s.Len : s.Offset+s.Len]
			o.received += s.Len
		}
	}
	return nil
}

// Release frees the hand-off: the request's file and exchange, and the
// response's file (whose memory resp's outputs may lie in: call it only
// after they are written out). Safe to call more than once.
func (o *Outgoing) Release() {
	if o == nil {
		return
	}
	o.once.Do(func() {
		if o.ex != nil {
			closeExchange(o.key, o.ex)
		}
		o.req.Release()
		o.resp.Release()
		for _, r := range o.held {
			r.Release()
		}
	})
}

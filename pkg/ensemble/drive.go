package ensemble

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/shm"
	tensortype "github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// StepFunc runs one step's request: a decoupled model's responses go to
// got as they stream, another model's one response is returned, as is the
// request's failure. The gateway routes it like a client's request to the
// step's model; an executor serving every step's model runs it in-process.
type StepFunc func(ctx context.Context, s Step, req *inference.ModelInferRequest, got func(*inference.ModelInferResponse, error)) (*inference.ModelInferResponse, error)

// EmitFunc takes one response of the ensemble (nil with final: the final
// flag alone).
type EmitFunc func(resp *inference.ModelInferResponse, final bool) error

// tensor is a value of an ensemble tensor in one request: what a step's
// input needs, as it came from the client or from the response that
// wrote it.
type tensor struct {
	datatype string
	shape    []int64
	params   map[string]*inference.InferParameter // a client's shared-memory reference
	data     []byte
	shmErr   error // why a step cannot read it (inShm)
}

// stepEvent is what one step's request came back with: a response (resp,
// or err) and, on the last, final with the time the request took. A
// decoupled step's request has any number of events before its final one.
type stepEvent struct {
	launch Launch
	resp   *inference.ModelInferResponse
	err    error
	final  bool
	took   time.Duration
}

// Drive runs a request (checked against the ensemble's configuration) to
// the ensemble of version: each step's request, made by run, starts once
// the tensors it reads exist, independent ones concurrently, and each set
// of the wanted outputs (none: all) goes to emit under the ensemble's
// names as soon as it is complete: once for an ensemble that is not
// decoupled; for a decoupled one, once per response of a decoupled step
// that reaches the outputs, the last response final or, when the last
// request ends without one, the final flag alone (Triton's rules). The
// first step to fail fails the request with the step's error, as Triton
// passes it on, after the responses already made; the steps still running
// are cancelled, and so are they when ctx is or emit fails (whose error is
// returned). It returns the time the steps' requests took together (the
// ensemble's compute time), once every step's request has returned.
func (p *Plan) Drive(ctx context.Context, req *inference.ModelInferRequest, version string, wanted []string, run StepFunc, emit EmitFunc) (time.Duration, error) {
	tensors := make(map[Key]*tensor, len(req.GetInputs())+len(wanted))
	provided := make([]string, 0, len(req.GetInputs()))
	raw := req.GetRawInputContents()
	given := make([]tensor, len(req.GetInputs()))
	for i, in := range req.GetInputs() {
		t := &given[i]
		t.datatype, t.shape, t.params = in.GetDatatype(), in.GetShape(), in.GetParameters()
		if i < len(raw) {
			t.data = raw[i]
		}
		tensors[Key{Tensor: in.GetName()}] = t
		provided = append(provided, in.GetName())
	}
	if len(wanted) == 0 {
		wanted = p.Outputs()
	}
	placed, err := shmOutputs(req)
	if err != nil {
		return 0, err
	}

	// The steps' context is made cancellable when the first step goes to a
	// goroutine of its own: steps run inline have nothing running beside
	// them to cancel, and a chain of them spares each request the
	// context's registration with its parent.
	parent, cancel := ctx, context.CancelFunc(func() {})
	defer func() { cancel() }()
	r, ready := p.Start(provided, wanted)
	events := make(chan stepEvent, len(p.Steps))
	var wg sync.WaitGroup
	defer wg.Wait() // every step's request has returned before this does
	running := 0
	// inline holds the event of a step run in this goroutine: a lone step
	// that is not decoupled, with no other step running, has nothing to
	// run concurrently with, and a goroutine and a channel hop of its own
	// would only add their wake-ups to every link of a chain.
	var inline []stepEvent
	launch := func(ls []Launch) {
		for _, l := range ls {
			sreq, err := stepRequest(req, p.Steps[l.Step], l.Iter, tensors, placed)
			running++
			if err != nil {
				inline = append(inline, stepEvent{launch: l, err: err, final: true})
				continue
			}
			if len(ls) == 1 && running == 1 && !p.Steps[l.Step].Decoupled {
				t0 := time.Now()
				// Responses streamed by a model that became decoupled
				// after the plan was made are kept in order for the loop.
				var mu sync.Mutex
				resp, err := run(ctx, p.Steps[l.Step], sreq, func(resp *inference.ModelInferResponse, err error) {
					mu.Lock()
					inline = append(inline, stepEvent{launch: l, resp: resp, err: err})
					mu.Unlock()
				})
				mu.Lock()
				inline = append(inline, stepEvent{launch: l, resp: resp, err: err, final: true, took: time.Since(t0)})
				mu.Unlock()
				continue
			}
			if ctx == parent {
				ctx, cancel = context.WithCancel(parent)
			}
			sctx := ctx
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				resp, err := run(sctx, p.Steps[l.Step], sreq, func(resp *inference.ModelInferResponse, err error) {
					events <- stepEvent{launch: l, resp: resp, err: err}
				})
				events <- stepEvent{launch: l, resp: resp, err: err, final: true, took: time.Since(t0)}
			}()
		}
	}
	launch(ready)
	var firstErr error
	var compute time.Duration
	finalSent := false
	for running > 0 {
		var ev stepEvent
		if len(inline) > 0 {
			ev, inline = inline[0], inline[1:]
		} else {
			ev = <-events
		}
		if ev.final {
			running--
			compute += ev.took
		}
		if firstErr != nil {
			continue
		}
		if ev.err != nil {
			firstErr = ev.err
			cancel() // the steps still running
			continue
		}
		if ev.resp == nil && !ev.final {
			continue
		}
		pr := r.Response(ev.launch, ev.resp != nil, ev.final)
		for i, k := range pr.Written {
			t := stepOutput(p.Steps[ev.launch.Step].Outputs[i].Model, ev.resp)
			if ref, ok := placed[k.Tensor]; ok && t != nil {
				t.inShm(ref)
			}
			tensors[k] = t
		}
		launch(pr.Launch)
		if pr.Answer >= 0 {
			out := ensembleResponse(req, version, wanted, pr.Answer, tensors)
			finalSent = pr.Final
			if err := emit(out, pr.Final); err != nil {
				firstErr = err
				cancel()
			}
		}
		for _, k := range pr.Drop {
			delete(tensors, k)
		}
	}
	if firstErr != nil {
		return compute, firstErr
	}
	if err := ctx.Err(); err != nil {
		return compute, tritonerr.From(err)
	}
	if !finalSent {
		if err := emit(nil, true); err != nil {
			return compute, err
		}
	}
	return compute, nil
}

// ensembleResponse is the ensemble's response made of the wanted outputs'
// values of iteration it; an output no step produced is left out, as
// Triton does.
func ensembleResponse(req *inference.ModelInferRequest, version string, wanted []string, it int, tensors map[Key]*tensor) *inference.ModelInferResponse {
	out := &inference.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: version, Id: req.GetId(),
		Outputs:           make([]*inference.ModelInferResponse_InferOutputTensor, 0, len(wanted)),
		RawOutputContents: make([][]byte, 0, len(wanted))}
	ts := make([]inference.ModelInferResponse_InferOutputTensor, len(wanted))
	for i, name := range wanted {
		t := tensors[Key{Tensor: name, Iter: it}]
		if t == nil {
			continue
		}
		o := &ts[i]
		o.Name, o.Datatype, o.Shape = name, t.datatype, t.shape
		out.Outputs = append(out.Outputs, o)
		out.RawOutputContents = append(out.RawOutputContents, t.data)
	}
	return out
}

// stepRequest is the request of one step reading iteration it of its
// inputs: the ensemble request's id and parameters (correlation id and
// sequence flags, priority, timeout and the client's own), the step's
// inputs from the ensemble tensors it maps, and every output it maps
// requested.
func stepRequest(req *inference.ModelInferRequest, s Step, it int, tensors map[Key]*tensor, placed map[string]shm.Ref) (*inference.ModelInferRequest, error) {
	sreq := &inference.ModelInferRequest{ModelName: s.Model, ModelVersion: s.Version, Id: req.GetId(),
		Inputs:           make([]*inference.ModelInferRequest_InferInputTensor, 0, len(s.Inputs)),
		RawInputContents: make([][]byte, 0, len(s.Inputs)),
		Outputs:          make([]*inference.ModelInferRequest_InferRequestedOutputTensor, 0, len(s.Outputs))}
	if len(req.GetParameters()) > 0 {
		sreq.Parameters = maps.Clone(req.GetParameters()) // forwarding may add its own
	}
	// The step's tensors in one allocation each (inputs, outputs).
	ins := make([]inference.ModelInferRequest_InferInputTensor, len(s.Inputs))
	outs := make([]inference.ModelInferRequest_InferRequestedOutputTensor, len(s.Outputs))
	for i, b := range s.Inputs {
		t := tensors[Key{Tensor: b.Ensemble, Iter: it}]
		if t == nil {
			continue // an optional input the request left out
		}
		in := &ins[i]
		in.Name, in.Datatype, in.Shape = b.Model, t.datatype, t.shape
		if len(t.params) > 0 {
			in.Parameters = maps.Clone(t.params)
		}
		if t.shmErr != nil {
			return nil, t.shmErr
		}
		sreq.Inputs = append(sreq.Inputs, in)
		sreq.RawInputContents = append(sreq.RawInputContents, t.data)
	}
	for i, b := range s.Outputs {
		o := &outs[i]
		o.Name = b.Model
		if ref, ok := placed[b.Ensemble]; ok {
			// The step writes the ensemble's output into the client's
			// region itself, on the region's node.
			o.Parameters = shm.Params(ref)
		}
		sreq.Outputs = append(sreq.Outputs, o)
	}
	return sreq, nil
}

// shmOutputs are the outputs of the ensemble request to be written to the
// client's shared memory, by ensemble tensor name; nil when none.
func shmOutputs(req *inference.ModelInferRequest) (map[string]shm.Ref, error) {
	var placed map[string]shm.Ref
	for _, o := range req.GetOutputs() {
		ref, ok, err := shm.FromParams(o.GetName(), o.GetParameters(), false)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if placed == nil {
			placed = map[string]shm.Ref{}
		}
		placed[o.GetName()] = ref
	}
	return placed, nil
}

// inShm makes t, the value of an ensemble output its step wrote into the
// client's region ref (its response carries no data), readable by the
// steps that consume it: as an input in that region, of the size its
// datatype and shape give. A BYTES tensor's size is not known from its
// shape: a step that reads it fails.
func (t *tensor) inShm(ref shm.Ref) {
	if len(t.data) > 0 {
		return // not written to the region after all
	}
	dt, ok := tensortype.ParseDataType(t.datatype)
	if !ok || dt.Size() == 0 {
		t.shmErr = tritonerr.Unsupportedf("a %s tensor written to shared memory region '%s' cannot be read by a later step of the ensemble: request it without shared memory", t.datatype, ref.Region)
		return
	}
	n := uint64(dt.Size())
	for _, d := range t.shape {
		n *= uint64(max(d, 0))
	}
	t.params = shm.Params(shm.Ref{Region: ref.Region, Offset: ref.Offset, ByteSize: n})
}

// stepOutput is the value a step's response gives its output name; nil
// (a placeholder) when the response lacks it.
func stepOutput(name string, resp *inference.ModelInferResponse) *tensor {
	raw := resp.GetRawOutputContents()
	for i, o := range resp.GetOutputs() {
		if o.GetName() != name {
			continue
		}
		t := &tensor{datatype: o.GetDatatype(), shape: o.GetShape()}
		if i < len(raw) {
			t.data = raw[i]
		}
		return t
	}
	return nil
}

// ErrDeadlock is Triton's error when an ensemble that is not decoupled
// ends without its response.
func ErrDeadlock(name string) error {
	return tritonerr.InvalidArgf("in ensemble '%s', unexpected deadlock, at least one output is not set while no more ensemble steps can be made", name)
}

package backend

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Flags are a request's sequence flags (TRITONSERVER_RequestFlag).
type Flags uint32

// The sequence flags, with Triton's values.
const (
	SequenceStart Flags = 1
	SequenceEnd   Flags = 2
)

// CorrelationID is a request's sequence (correlation) id: either an unsigned
// integer or a string, never both. The zero value means "no sequence".
type CorrelationID struct {
	u        uint64
	s        string
	isString bool
}

// CorrelationUint returns a numeric correlation id.
func CorrelationUint(v uint64) CorrelationID { return CorrelationID{u: v} }

// CorrelationString returns a string correlation id.
func CorrelationString(s string) CorrelationID { return CorrelationID{s: s, isString: true} }

// IsString reports whether the id is a string id.
func (c CorrelationID) IsString() bool { return c.isString }

// IsZero reports whether there is no correlation id (0 or "").
func (c CorrelationID) IsZero() bool { return c.u == 0 && c.s == "" }

// Uint64 returns a numeric id; a string id is an error, with the message of
// TRITONBACKEND_RequestCorrelationId.
func (c CorrelationID) Uint64() (uint64, error) {
	if c.isString {
		return 0, tritonerr.InvalidArgf("correlation ID in request is not an unsigned int")
	}
	return c.u, nil
}

// StringID returns a string id; a numeric id is an error, with the message
// of TRITONBACKEND_RequestCorrelationIdString.
func (c CorrelationID) StringID() (string, error) {
	if !c.isString {
		return "", tritonerr.InvalidArgf("correlation ID in request is not a string")
	}
	return c.s, nil
}

// String prints the id either way, for logs.
func (c CorrelationID) String() string {
	if c.isString {
		return c.s
	}
	return strconv.FormatUint(c.u, 10)
}

// Input is one input tensor of a request. Shape includes the batch
// dimension when the model batches (max_batch_size > 0) and is already
// reshaped per the config's reshape. Data is the tensor in Triton's binary
// layout (little-endian, row-major; BYTES as 4-byte length + bytes per
// element); it aliases the incoming message and must not be modified or
// kept after the request is answered.
type Input struct {
	Name     string
	DataType tensor.DataType
	Shape    []int64
	Data     []byte
	// Device, for an input that came in CUDA shared memory, is that memory
	// on its GPU, for a backend that reads it on the device. Data is a
	// host copy of it, except for a model that reads every input on the
	// device (a C backend whose instances are all of kind GPU): there Data
	// only stands for it, of its size, reading as zeros.
	Device *Device
}

// Device is tensor memory on a GPU: an address in the executor's CUDA
// context of device ordinal ID (Triton's TRITONSERVER_MEMORY_GPU with
// memory type id ID). Only code running on that GPU may touch it.
type Device struct {
	Ptr uintptr
	ID  int64
}

// Output is one output tensor of a response, in the same layout as Input.
// The executor takes ownership of Data. Data may alias an input's Data (an
// identity model need not copy): the executor encodes the response before
// the request's memory is released.
type Output struct {
	Name     string
	DataType tensor.DataType
	Shape    []int64
	Data     []byte
}

// ResponseFlags are the flags sent with a response
// (TRITONSERVER_ResponseCompleteFlag).
type ResponseFlags uint32

// ResponseFinal marks a request's last response
// (TRITONSERVER_RESPONSE_COMPLETE_FINAL): nothing is sent for the request
// after it.
const ResponseFinal ResponseFlags = 1

// Response is one response of a request, as the executor receives it:
// outputs or an error. A model that is not decoupled sends exactly one,
// final; a decoupled model sends any number, the last one Final.
type Response struct {
	Outputs []Output
	Err     *tritonerr.Error
	// Final marks the request's last response.
	Final bool
	// Parameters are the response's parameters
	// (TRITONBACKEND_ResponseSet*Parameter): bool, int64, float64 or string
	// values, sent to the client with the response.
	Parameters map[string]any
	// FlagOnly is a final flag without a response
	// (TRITONBACKEND_ResponseFactorySendFlags): it has no outputs and no
	// error, ends the request, and is not a response of its own; clients
	// see it only when they ask for an empty final response.
	FlagOnly bool
}

// Request is one inference request as a backend sees it. Its exported
// fields are filled (and validated against the model config) by the
// executor before the backend gets it; backends read them and answer with
// Respond or RespondError, exactly once.
type Request struct {
	// ID is the client's request id, echoed in the response.
	ID            string
	CorrelationID CorrelationID
	Flags         Flags
	// BatchSize is the size of the request's batch dimension, 0 for models
	// with max_batch_size 0.
	BatchSize int
	Inputs    []Input
	// RequestedOutputs names the outputs the client asked for; all of the
	// config's outputs when it asked for none. Outputs outside this list are
	// dropped from the response, so a backend may produce them all.
	RequestedOutputs []string
	// Parameters are the request's parameters other than the reserved ones
	// (sequence_id, priority, ...): bool, int64, uint64, float64 or string.
	Parameters map[string]any
	// Decoupled is the model's transaction policy
	// (model_transaction_policy { decoupled: true }): the request may get
	// any number of responses, sent through its ResponseSender.
	Decoupled bool
	// OutputPlace, when set, returns the memory an output of size bytes
	// is bound for (the client's shared-memory region it goes to), for a
	// backend that can produce the output there instead of in a buffer of
	// its own; nil when the output is not bound to such memory or does not
	// fit. Data in it is the response's output as any other.
	OutputPlace func(name string, size int) []byte
	// OutputDevice, when set, returns the GPU memory an output of size
	// bytes is bound for (the client's CUDA shared-memory region), for a
	// backend that produces the output there on the device; false when
	// the output is not bound to such memory or does not fit. Such an
	// output goes in the response with its shape and empty Data: the
	// region holds it.
	OutputDevice func(name string, size int) (Device, bool)

	ctx       context.Context
	completer Completer   // where its answers go (NewRequest's, InitRequest's)
	sendMu    sync.Mutex  // serializes sends so they arrive in order
	final     atomic.Bool // the final response or flag has been sent
	sent      atomic.Int64
	// respIndex numbers the responses whose statistics are reported
	// (NextResponseIndex).
	respIndex atomic.Int64

	// Implicit state (state.go).
	stateModel   string
	stateOutputs []string
	stateMu      sync.Mutex
	updated      []*State
}

// NewRequest makes an empty request whose answer goes to complete (called
// once, from the goroutine that responds). It is for schedulers: backends
// receive requests, they do not make them. A nil ctx means Background.
func NewRequest(ctx context.Context, complete func(*Request, *Response)) *Request {
	var c Completer
	if complete != nil {
		c = completeFunc(complete)
	}
	return InitRequest(new(Request), ctx, c)
}

// Completer takes a request's answers, as NewRequest's complete does.
type Completer interface {
	Complete(*Request, *Response)
}

// completeFunc is NewRequest's complete as a Completer.
type completeFunc func(*Request, *Response)

func (f completeFunc) Complete(r *Request, resp *Response) { f(r, resp) }

// InitRequest is NewRequest into r, a zero Request that a scheduler
// allocated with its own entry for the request, answered through c: a
// request then costs neither an allocation of its own nor one for a
// method value as complete. r must not be copied afterwards.
func InitRequest(r *Request, ctx context.Context, c Completer) *Request {
	if ctx == nil {
		ctx = context.Background()
	}
	r.ctx, r.completer = ctx, c
	return r
}

// Context is the request's context: it ends when the client gives up
// (its deadline passes) or the request is cancelled.
func (r *Request) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}

// IsCancelled is TRITONBACKEND_RequestIsCancelled: the client has gone
// (closed its stream or connection, or its deadline passed), so a backend
// may stop working on the request. It must still end it: respond with an
// error, or for a decoupled model send the final flag.
func (r *Request) IsCancelled() bool { return r.Context().Err() != nil }

// Input returns the named input, or nil when the request does not have it
// (an optional input).
func (r *Request) Input(name string) *Input {
	for i := range r.Inputs {
		if r.Inputs[i].Name == name {
			return &r.Inputs[i]
		}
	}
	return nil
}

// OutputRequested reports whether the client wants the named output.
func (r *Request) OutputRequested(name string) bool {
	return slices.Contains(r.RequestedOutputs, name)
}

// ErrAlreadyResponded is returned by a send after the request's final
// response.
var ErrAlreadyResponded = tritonerr.Internalf("response already sent for this request")

// Respond completes the request successfully with outputs
// (TRITONBACKEND_ResponseSend with COMPLETE_FINAL). For a decoupled model it
// is the same as ResponseSender().Send(ResponseFinal, outputs...).
func (r *Request) Respond(outputs ...Output) error {
	return r.send(&Response{Outputs: outputs, Final: true})
}

// RespondError completes the request with an error. A plain error becomes
// INTERNAL; a *tritonerr.Error keeps its kind.
func (r *Request) RespondError(err error) error {
	return r.send(&Response{Err: errorOf(err), Final: true})
}

// Responded reports whether the request has been answered: its final
// response, or final flag, has been sent.
func (r *Request) Responded() bool { return r.final.Load() }

// ResponseSender returns the request's response sender, Triton's response
// factory (TRITONBACKEND_ResponseFactoryNew). Every call returns a sender
// for the same stream of responses.
func (r *Request) ResponseSender() *ResponseSender { return &ResponseSender{r: r} }

// ResponseSender sends a request's responses (TRITONBACKEND_ResponseFactory).
// A decoupled model may keep it after Execute returns and send from any
// goroutine; sends are delivered in the order they are made. A send may
// block while the client is slower than the model: the executor lets a
// bounded number of responses be in flight per request, and a slow reader
// slows the sender instead of growing buffers.
type ResponseSender struct{ r *Request }

// Request returns the request the sender answers.
func (s *ResponseSender) Request() *Request { return s.r }

// Send sends one response with outputs (TRITONBACKEND_ResponseSend). flags
// is ResponseFinal for the request's last response, 0 before it; a model
// that is not decoupled sends exactly one response (final, or followed by
// SendFlags(ResponseFinal)). After the
// client has gone a non-final Send drops the response and returns a
// CANCELLED error, so a producing loop can stop there.
func (s *ResponseSender) Send(flags ResponseFlags, outputs ...Output) error {
	return s.r.send(&Response{Outputs: outputs, Final: flags&ResponseFinal != 0})
}

// SendResponse sends a response built in full (outputs, parameters, or an
// error); flags decide whether it is the last, as for Send.
func (s *ResponseSender) SendResponse(flags ResponseFlags, resp Response) error {
	resp.Final = flags&ResponseFinal != 0
	resp.FlagOnly = false
	return s.r.send(&resp)
}

// SendError sends an error response (TRITONBACKEND_ResponseSend with an
// error). With ResponseFinal it ends the request; without, a decoupled
// model may keep sending (the error reaches the client as one response of
// the stream).
func (s *ResponseSender) SendError(flags ResponseFlags, err error) error {
	return s.r.send(&Response{Err: errorOf(err), Final: flags&ResponseFinal != 0})
}

// SendFlags sends flags without a response
// (TRITONBACKEND_ResponseFactorySendFlags). ResponseFinal ends the request
// after the responses already sent, which may be none: this is how a
// decoupled model finishes a request that produced zero responses, or
// finishes one whose last response it did not know was last.
func (s *ResponseSender) SendFlags(flags ResponseFlags) error {
	if flags&ResponseFinal == 0 {
		return nil // no flag to deliver
	}
	return s.r.send(&Response{Final: true, FlagOnly: true})
}

// IsCancelled is TRITONBACKEND_ResponseFactoryIsCancelled, the same as the
// request's IsCancelled.
func (s *ResponseSender) IsCancelled() bool { return s.r.IsCancelled() }

// ResponsesSent is how many responses (not counting a final flag sent on
// its own) have been sent for the request.
func (r *Request) ResponsesSent() int { return int(r.sent.Load()) }

// NextResponseIndex returns the index, in Triton's response_stats, of the
// next response whose statistics are reported for the request: 0, then 1,
// and so on (Triton's response factory counts them the same way).
func (r *Request) NextResponseIndex() int { return int(r.respIndex.Add(1) - 1) }

func (r *Request) send(resp *Response) error {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	if r.final.Load() {
		return ErrAlreadyResponded
	}
	if !r.Decoupled {
		// Triton's frontends take one response for such a model; a backend
		// may still send it without the flag and then the flag alone.
		switch {
		case resp.FlagOnly && r.sent.Load() == 0:
			return tritonerr.Internalf("model is not decoupled: the final flag alone cannot answer a request, it needs one response")
		case !resp.FlagOnly && r.sent.Load() > 0:
			return tritonerr.Internalf("model is not decoupled: a request takes exactly one response")
		}
	}
	if resp.Final {
		r.final.Store(true)
	}
	if !resp.FlagOnly {
		r.sent.Add(1)
	}
	if r.completer != nil {
		r.completer.Complete(r, resp) // may block: the executor's flow control
	}
	if !resp.Final && r.IsCancelled() {
		return tritonerr.New(tritonerr.Cancelled, "request cancelled: the client is gone")
	}
	return nil
}

func errorOf(err error) *tritonerr.Error {
	if err == nil {
		err = errors.New("backend responded with a nil error")
	}
	return tritonerr.From(err)
}

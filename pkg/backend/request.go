package backend

import (
	"context"
	"errors"
	"slices"
	"strconv"
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

// Response is what a request completes with: outputs, or an error.
type Response struct {
	Outputs []Output
	Err     *tritonerr.Error
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

	ctx       context.Context
	complete  func(*Request, *Response)
	responded atomic.Bool
}

// NewRequest makes an empty request whose answer goes to complete (called
// once, from the goroutine that responds). It is for schedulers: backends
// receive requests, they do not make them. A nil ctx means Background.
func NewRequest(ctx context.Context, complete func(*Request, *Response)) *Request {
	if ctx == nil {
		ctx = context.Background()
	}
	return &Request{ctx: ctx, complete: complete}
}

// Context is the request's context: it ends when the client gives up
// (its deadline passes) or the request is cancelled.
func (r *Request) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}

// IsCancelled is TRITONBACKEND_RequestIsCancelled: a backend may stop work
// on a request nobody waits for anymore (it must still respond).
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

// ErrAlreadyResponded is returned by a second Respond or RespondError.
var ErrAlreadyResponded = tritonerr.Internalf("response already sent for this request")

// Respond completes the request successfully with outputs
// (TRITONBACKEND_ResponseSend with COMPLETE_FINAL).
func (r *Request) Respond(outputs ...Output) error {
	if !r.responded.CompareAndSwap(false, true) {
		return ErrAlreadyResponded
	}
	if r.complete != nil {
		r.complete(r, &Response{Outputs: outputs})
	}
	return nil
}

// RespondError completes the request with an error. A plain error becomes
// INTERNAL; a *tritonerr.Error keeps its kind.
func (r *Request) RespondError(err error) error {
	if err == nil {
		err = errors.New("backend responded with a nil error")
	}
	if !r.responded.CompareAndSwap(false, true) {
		return ErrAlreadyResponded
	}
	if r.complete != nil {
		r.complete(r, &Response{Err: tritonerr.From(err)})
	}
	return nil
}

// Responded reports whether the request has been answered.
func (r *Request) Responded() bool { return r.responded.Load() }

package gateway

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/seqbatch"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// maxStringIDLength is Triton's bound on string correlation ids.
const maxStringIDLength = 128

// seqParams are a request's sequence parameters.
type seqParams struct {
	id         seqbatch.ID
	start, end bool
	timeoutUs  uint64
}

// sequenceParams reads sequence_id, sequence_start, sequence_end and
// timeout with the checks and messages of Triton's gRPC front end (HTTP's
// codec produces the same parameter types): numeric ids come as int64_param
// (read as uint64), a uint64_param is refused; string ids are at most 128
// characters (UNSUPPORTED).
func sequenceParams(req *inference.ModelInferRequest) (seqParams, error) {
	var sp seqParams
	for key, p := range req.GetParameters() {
		switch key {
		case "sequence_id":
			switch c := p.GetParameterChoice().(type) {
			case *inference.InferParameter_Int64Param:
				sp.id = seqbatch.UintID(uint64(c.Int64Param))
			case *inference.InferParameter_StringParam:
				if len(c.StringParam) > maxStringIDLength {
					return sp, tritonerr.Unsupportedf("string correlation ID cannot be longer than 128 characters")
				}
				sp.id = seqbatch.StringID(c.StringParam)
			default:
				return sp, tritonerr.InvalidArgf("invalid value type for 'sequence_id' parameter, expected int64_param or string_param.")
			}
		case "sequence_start", "sequence_end":
			c, ok := p.GetParameterChoice().(*inference.InferParameter_BoolParam)
			if !ok {
				return sp, tritonerr.InvalidArgf("invalid value type for '%s' parameter, expected bool_param.", key)
			}
			if key == "sequence_start" {
				sp.start = c.BoolParam
			} else {
				sp.end = c.BoolParam
			}
		case "timeout":
			switch c := p.GetParameterChoice().(type) {
			case *inference.InferParameter_Int64Param:
				if c.Int64Param > 0 {
					sp.timeoutUs = uint64(c.Int64Param)
				}
			case *inference.InferParameter_Uint64Param:
				sp.timeoutUs = c.Uint64Param
			default:
				return sp, tritonerr.InvalidArgf("invalid value type for 'timeout' parameter, expected int64_param.")
			}
		}
	}
	return sp, nil
}

// routeSequence sends a request for a model with a sequence batcher to the
// sequence router (handled true); other models keep the direct path. The
// checks run in Triton's order: parameters, normalization (incl. the
// CORRID datatype), then the sequence batcher's batch size and id checks.
func (g *Gateway) routeSequence(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (*inference.ModelInferResponse, bool, error) {
	sp, err := sequenceParams(req)
	if err != nil {
		return nil, true, err
	}
	cfg := vv.config
	if cfg.GetSequenceBatching() == nil {
		return nil, false, nil
	}
	model := req.GetModelName()
	r := backend.NewRequest(nil, nil)
	if err := infer.Normalize(cfg, req, r); err != nil {
		return nil, true, err
	}
	if err := seqbatch.ValidateCorrelationID(cfg, sp.id); err != nil {
		return nil, true, err
	}
	if r.BatchSize > 1 {
		return nil, true, tritonerr.InvalidArgf("inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher", model)
	}
	if sp.id.IsZero() {
		return nil, true, tritonerr.InvalidArgf("inference request to model '%s' must specify a non-zero or non-empty correlation ID", model)
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, true, tritonerr.Internalf("cannot encode the request for model '%s': %v", model, err)
	}
	sr := &busv1.SequenceRequest{Id: sp.id.Proto(), Start: sp.start, End: sp.end, TimeoutUs: sp.timeoutUs, Request: body}
	subject := bus.SequenceInferSubject(model, req.GetModelVersion())
	var resp inference.ModelInferResponse
	for {
		err = g.bus.Request(ctx, subject, sr, &resp)
		// Nobody received it (no router yet, or a takeover in progress):
		// sending again cannot run it twice.
		if err == nil || !bus.IsNoResponders(err) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, true, tritonerr.Unavailablef("no sequence router is serving model '%s'", model)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, true, err
	}
	return &resp, true, nil
}

// streamOrder keeps the requests of one sequence in order on one
// ModelStreamInfer stream: the stream runs requests concurrently, so a
// request waits until the previous request of its sequence (same model,
// same typed id) has been answered before it is sent. Other sequences and
// stateless requests are not held back.
type streamOrder struct {
	mu   sync.Mutex
	last map[streamSeqKey]chan struct{}
}

type streamSeqKey struct {
	model string
	id    seqbatch.ID
}

// wait is called in stream order, before the request goes out; it returns
// after the previous request of the same sequence finished, and done must
// be called when this one has.
func (o *streamOrder) enter(req *inference.ModelInferRequest) (wait <-chan struct{}, done func()) {
	sp, err := sequenceParams(req)
	if err != nil || sp.id.IsZero() {
		return nil, func() {}
	}
	k := streamSeqKey{model: req.GetModelName(), id: sp.id}
	ch := make(chan struct{})
	o.mu.Lock()
	if o.last == nil {
		o.last = map[streamSeqKey]chan struct{}{}
	}
	prev := o.last[k]
	o.last[k] = ch
	o.mu.Unlock()
	return prev, func() {
		o.mu.Lock()
		if o.last[k] == ch {
			delete(o.last, k)
		}
		o.mu.Unlock()
		close(ch)
	}
}

package executor

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/tracing"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Decoupled models answer a request with any number of responses. Each one
// goes to the gateway as it is sent, as the next message of the request's
// bus stream (bus.StreamOf); the stream's flow control blocks the sending
// backend while the gateway's client is slower than the model. The
// handler returns, ending the stream, once the backend has sent the final
// response or flag.

// responseSink takes a decoupled request's responses as they are made:
// the request's bus stream (*bus.StreamWriter), or the ensemble step of
// this executor that made the request (stepSink).
type responseSink interface {
	Send(ctx context.Context, m proto.Message, final bool) error
	SendEncoded(ctx context.Context, body []byte, final bool) error
	SendError(ctx context.Context, err error, final bool) error
}

// stepSink hands the responses of an ensemble step's request to a
// decoupled model of this executor straight to the step's consumer
// (ensemble.StepFunc's got): the tensors between the steps of an ensemble
// this executor runs whole never leave it, a decoupled step's included.
type stepSink struct {
	req *inference.ModelInferRequest // the step's request: only its serving uses the sink
	got func(*inference.ModelInferResponse, error)
}

type stepSinkKey struct{}

// withStepSink is ctx for the step request s.req, whose responses go to
// s.got.
func withStepSink(ctx context.Context, s *stepSink) context.Context {
	return context.WithValue(ctx, stepSinkKey{}, s)
}

// stepSinkFor is the sink of ctx when req is the request it was made for
// (not another request served under that context: a backend's call
// inside the step, in this process).
func stepSinkFor(ctx context.Context, req *inference.ModelInferRequest) *stepSink {
	s, _ := ctx.Value(stepSinkKey{}).(*stepSink)
	if s == nil || s.req != req {
		return nil
	}
	return s
}

func (s *stepSink) Send(_ context.Context, m proto.Message, _ bool) error {
	if r, ok := m.(*inference.ModelInferResponse); ok && r != nil {
		s.got(r, nil)
	}
	return nil
}

func (s *stepSink) SendEncoded(_ context.Context, body []byte, _ bool) error {
	r := &inference.ModelInferResponse{}
	if err := infercodec.UnmarshalResponse(body, r); err != nil {
		s.got(nil, tritonerr.Internalf("a response of an ensemble step did not decode: %v", err))
		return nil
	}
	s.got(r, nil)
	return nil
}

func (s *stepSink) SendError(_ context.Context, err error, _ bool) error {
	s.got(nil, err)
	return nil
}

// streamResponses makes p's responses go out through w as the backend
// sends them (p.onResponse), with their statistics; the returned channel
// is closed once the final response or flag has been taken. The final
// flag alone and what follows a cancellation are not sent: the stream's
// end is the caller's.
func (mv *modelVersion) streamResponses(ctx context.Context, w responseSink, req *inference.ModelInferRequest, p *pending, sh *shmRequest) <-chan struct{} {
	final := make(chan struct{})
	index, first := 0, true
	var last time.Time // when the previous response went out
	// Read once: every response of the request uses them.
	classes, classErr := infer.ClassificationCounts(req.GetOutputs())
	p.onResponse = func(resp *backend.Response) {
		if resp.Final {
			defer close(final)
		}
		t := responseTimes{start: last, output: time.Now()}
		if t.start.IsZero() {
			t.start = p.execStart()
		}
		kind := responseSuccess
		switch {
		case resp.FlagOnly:
			kind = responseEmpty
		case ctx.Err() != nil:
			kind = responseCancelled
		case resp.Err != nil:
			kind = responseFail
		}
		if first && !resp.FlagOnly {
			// The final flag alone is no response (Triton observes the
			// first one sent).
			first = false
			mv.stats.firstResponse(t.output.Sub(p.received))
		}
		send := !resp.FlagOnly && ctx.Err() == nil // nobody reads after a cancel
		var out *inference.ModelInferResponse
		var enc []byte
		var err error
		if resp.Err != nil {
			err = resp.Err // a nil *tritonerr.Error must not become a non-nil error
		}
		// A request whose gateway asks for its timestamps gets them on
		// its final message, held until its execution has returned
		// (sendHeld): made as a message, to take the parameter.
		hold := p.stamps != nil && resp.Final && ctx.Err() == nil && err == nil
		_, local := w.(*stepSink) // takes the message itself
		plain := len(classes) == 0 && classErr == nil && sh == nil && !hold && !local
		if send && err == nil && plain {
			var ok bool
			if enc, ok = mv.encodeResponse(nil, req, p.req, resp); !ok {
				enc = nil
			}
		}
		if send && err == nil && enc == nil {
			out, err = mv.responseWith(classes, req, p.req, resp)
			if classErr != nil {
				err = classErr
			}
			if err == nil {
				err = sh.finish(out)
			}
			if err != nil {
				kind = responseFail
			}
		}
		t.end = time.Now()
		if !mv.ownResponseStats {
			mv.stats.response(index, kind, t)
		}
		index++
		switch {
		case hold && err == nil:
			p.held, p.holding = out, true // out is nil for the flag alone
		case !send:
			// The end goes out as the caller ends the stream.
		case err != nil:
			_ = w.SendError(ctx, err, resp.Final)
		case enc != nil:
			_ = w.SendEncoded(ctx, enc, resp.Final)
		default:
			_ = w.Send(ctx, out, resp.Final)
		}
		// Waiting for the client's credit is not the model's time: the
		// next response starts when this one has gone out.
		last = time.Now()
	}
	return final
}

// serveDecoupled queues a validated request of a decoupled model and
// streams its responses until the final one.
func (mv *modelVersion) serveDecoupled(ctx context.Context, req *inference.ModelInferRequest, p *pending, sh *shmRequest) (proto.Message, error) {
	var w responseSink
	if s := stepSinkFor(ctx, req); s != nil {
		w = s // an ensemble step of this executor (ensemblerun.go)
	} else if bw := bus.StreamOf(ctx); bw != nil {
		w = bw
	} else {
		mv.stats.failed(p.received, reasonOther)
		return nil, tritonerr.Unsupportedf("model '%s' is decoupled: its responses need a stream (gRPC ModelStreamInfer or HTTP generate)", mv.name)
	}
	final := mv.streamResponses(ctx, w, req, p, sh)
	done := p.doneCh()
	if err := mv.sched.enqueue(p); err != nil {
		mv.stats.failed(p.received, refusal(err))
		return nil, err
	}
	select {
	case <-final:
		if p.holding { // its timestamps are taken once the execution returns
			select {
			case <-done:
			case <-ctx.Done():
			}
		}
		mv.sendHeld(ctx, w, p)
		return nil, nil
	case <-done:
	case <-ctx.Done():
		// A request still queued is dropped; one executing sees the
		// cancellation (Request.IsCancelled) and ends itself.
		p.giveUp(ctx)
		mv.sched.wake()
		select {
		case <-final:
			mv.sendHeld(ctx, w, p)
			return nil, nil
		case <-done:
		}
	}
	if !p.executed.Load() {
		return nil, tritonerr.New(tritonerr.Cancelled, "inference request for model '%s' was cancelled", mv.name)
	}
	// Execute has returned; the backend may still be sending.
	<-final
	mv.sendHeld(ctx, w, p)
	return nil, nil
}

// sendHeld sends the final message held back for the request's
// timestamps (streamResponses), once its execution has returned: the
// final response with them in tracing.TimestampsParameter, or for the
// final flag alone a message of nothing but tracing.TimestampsAloneParameter
// (nothing, leaving the end to the caller, when the backend reported no
// statistics).
func (mv *modelVersion) sendHeld(ctx context.Context, w responseSink, p *pending) {
	if !p.holding {
		return
	}
	out, name := p.held, tracing.TimestampsParameter
	if out == nil {
		if !p.stamps.Complete() {
			return
		}
		out, name = &inference.ModelInferResponse{}, tracing.TimestampsAloneParameter
	}
	withStamps(out, name, p.stamps)
	_ = w.Send(ctx, out, true)
}

package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
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
	token, w, rctx, done := g.seq.track(g, model, req.GetModelVersion(), ctx)
	defer done()
	sr := &busv1.SequenceRequest{Id: sp.id.Proto(), Start: sp.start, End: sp.end, TimeoutUs: sp.timeoutUs, Request: body, Token: token}
	subject := bus.SequenceInferSubject(model, req.GetModelVersion())
	var resp inference.ModelInferResponse
	for {
		w.sent.Store(true)
		err = g.bus.Request(rctx, subject, sr, &resp)
		if err != nil && errors.Is(context.Cause(rctx), errRouterLost) {
			return nil, true, tritonerr.Unavailablef("the sequence router holding this request of model '%s' was lost before running it; the request was not run", model)
		}
		// Nobody received it (no router yet, or a takeover in progress):
		// sending again cannot run it twice.
		if err == nil || !bus.IsNoResponders(err) {
			break
		}
		w.sent.Store(false)
		select {
		case <-rctx.Done():
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

// errRouterLost cancels a request the new sequence router says the old one
// held and lost.
var errRouterLost = errors.New("sequence router lost the request")

// seqTracker follows the gateway's sequence requests across a router
// takeover. Each request carries a token; when a router announces that it
// took a model over, the gateway sends it the tokens of the model's
// requests still waiting, and fails at once (UNAVAILABLE) those the router
// says the previous one held: nobody would ever answer them.
type seqTracker struct {
	once   sync.Once
	prefix string
	next   atomic.Uint64

	mu    sync.Mutex
	waits map[string]map[string]*seqWait // model key -> token -> request
}

// seqWait is one sequence request waiting for its answer.
type seqWait struct {
	cancel context.CancelCauseFunc
	// sent is true while a send may have reached a router (not while the
	// request waits to be sent again after "no responders").
	sent atomic.Bool
}

// track registers one request; done unregisters it.
func (t *seqTracker) track(g *Gateway, model, version string, ctx context.Context) (string, *seqWait, context.Context, func()) {
	t.once.Do(func() { t.start(g) })
	token := t.prefix + strconv.FormatUint(t.next.Add(1), 36)
	key := bus.Token(model) + "." + bus.Token(version)
	rctx, cancel := context.WithCancelCause(ctx)
	t.mu.Lock()
	waits := t.waits[key]
	if waits == nil {
		waits = map[string]*seqWait{}
		t.waits[key] = waits
	}
	w := &seqWait{cancel: cancel}
	waits[token] = w
	t.mu.Unlock()
	return token, w, rctx, func() {
		t.mu.Lock()
		delete(waits, token)
		if len(waits) == 0 {
			delete(t.waits, key)
		}
		t.mu.Unlock()
		cancel(nil)
	}
}

func (t *seqTracker) start(g *Gateway) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	t.prefix = hex.EncodeToString(b[:]) + "."
	t.waits = map[string]map[string]*seqWait{}
	if g.bc == nil {
		return
	}
	_, err := g.bc.NATS().Subscribe(bus.SequenceTakeoverWildcard, func(m *nats.Msg) {
		name, version, _, ok := bus.ParseSequenceSubject(m.Subject)
		if !ok {
			return
		}
		key := bus.Token(name) + "." + bus.Token(version)
		t.mu.Lock()
		var tokens []string
		for tok, w := range t.waits[key] {
			if w.sent.Load() {
				tokens = append(tokens, tok)
			}
		}
		t.mu.Unlock()
		if len(tokens) > 0 {
			go t.resolve(g, name, version, key, tokens)
		}
	})
	if err != nil {
		g.log.Warn("cannot follow sequence router takeovers", "err", err)
	}
}

// resolve asks the router that took a model over about tokens, and fails
// the requests it says are lost.
func (t *seqTracker) resolve(g *Gateway, name, version, key string, tokens []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out busv1.SequenceResolved
	for {
		err := g.bus.Request(ctx, bus.SequenceResolveSubject(name, version), &busv1.SequenceResolve{Tokens: tokens}, &out)
		if err == nil {
			break
		}
		if !bus.IsNoResponders(err) || ctx.Err() != nil {
			g.log.Warn("sequence takeover: cannot resolve waiting requests", "model", name, "err", err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.mu.Lock()
	for _, tok := range out.GetLost() {
		if w := t.waits[key][tok]; w != nil {
			w.cancel(errRouterLost)
		}
	}
	t.mu.Unlock()
	if n := len(out.GetLost()); n > 0 {
		g.log.Warn("sequence router lost requests in a takeover; failing them", "model", name, "count", n)
	}
}

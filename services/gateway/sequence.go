package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/backoff"
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
// sequence router (handled true); other models keep the direct path.
func (g *Gateway) routeSequence(ctx context.Context, vv *versionView, req *inference.ModelInferRequest) (*inference.ModelInferResponse, bool, error) {
	sp, err := sequenceParams(req)
	if err != nil {
		return nil, true, err
	}
	if vv.config.GetSequenceBatching() == nil {
		return nil, false, nil
	}
	var resp inference.ModelInferResponse
	err = g.sendSequence(ctx, vv, req, sp, 0, func(rctx context.Context, subject string, sr *busv1.SequenceRequest) error {
		return g.bus.Request(rctx, subject, sr, &resp)
	})
	if err != nil {
		return nil, true, err
	}
	return &resp, true, nil
}

// sendSequence checks a request of a sequence model in Triton's order
// (parameters, normalization incl. the CORRID datatype, then the sequence
// batcher's batch size and id checks), and sends it to the sequence router
// with send, again while it was provably not run (resendAfter: no router
// took it, a router refused it without acting on it, or the router holding
// it was lost before running it), within the request's deadline and at
// most ResendLimit. window > 0 asks the executor to stream the responses
// (a decoupled model). The request's shared-memory regions are held until
// send returns.
func (g *Gateway) sendSequence(ctx context.Context, vv *versionView, req *inference.ModelInferRequest, sp seqParams, window int,
	send func(rctx context.Context, subject string, sr *busv1.SequenceRequest) error) error {
	cfg := vv.config
	model := req.GetModelName()
	// Tensors in shared memory: hold their regions and check the ranges
	// as for a stateless request (shm.go); the lease travels inside the
	// encoded request through the router to the executor, which reads the
	// inputs from and writes the outputs into the regions. The router's
	// executors must be on the regions' node: the executor refuses the
	// request otherwise (UNAVAILABLE, naming the node).
	_, _, release, err := g.shmHold(ctx, req)
	if err != nil {
		return err
	}
	defer release()
	r := backend.NewRequest(nil, nil)
	if err := infer.NormalizeShm(cfg, req, r, shmInputSizes(req)); err != nil {
		return err
	}
	if err := seqbatch.ValidateCorrelationID(cfg, sp.id); err != nil {
		return err
	}
	if r.BatchSize > 1 {
		return tritonerr.InvalidArgf("inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher", model)
	}
	if sp.id.IsZero() {
		return tritonerr.InvalidArgf("inference request to model '%s' must specify a non-zero or non-empty correlation ID", model)
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return tritonerr.Internalf("cannot encode the request for model '%s': %v", model, err)
	}
	sr := &busv1.SequenceRequest{Id: sp.id.Proto(), Start: sp.start, End: sp.end, TimeoutUs: sp.timeoutUs, Request: body,
		Shape: shapeKey(cfg, r), StreamWindow: uint32(window)}
	if st, ok := ctx.Value(streamStampKey{}).(streamStamp); ok {
		sr.Stream, sr.StreamSeq = st.stream, st.seq
	}
	subject := bus.SequenceInferSubject(model, req.GetModelVersion())
	deadline, _ := ctx.Deadline()
	retry := backoff.Backoff{Min: resendMin, Max: resendMax}
	began := time.Now()
	for {
		var nr notRun
		nr, err = g.sendTracked(ctx, model, req.GetModelVersion(), subject, sr, send)
		if nr == ran {
			return err
		}
		wait, again := resendAfter(nr, began, deadline, time.Now(), retry.Next())
		if !again {
			if nr == heldAndLost {
				return errLost(model)
			}
			return errNoRouter(model, time.Since(began), err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if nr == heldAndLost {
				return errLost(model)
			}
			return errNoRouter(model, time.Since(began), err)
		case <-t.C:
		}
	}
}

// sendTracked sends a sequence request once, under a token of its own
// that a router takeover can resolve, and says whether it was provably not
// run. A request sent again gets a new token: the router that took over
// never runs one whose token it declared lost.
func (g *Gateway) sendTracked(ctx context.Context, model, version, subject string, sr *busv1.SequenceRequest,
	send func(rctx context.Context, subject string, sr *busv1.SequenceRequest) error) (notRun, error) {
	token, w, rctx, done := g.seq.track(model, version, ctx)
	defer done()
	sr.Token = token
	w.sent.Store(true)
	err := send(rctx, subject, sr)
	if bus.IsResponderLost(err) {
		// Neither a router nor an executor holds it any more (a router
		// lost with it, or cut off: the router holds a request until its
		// executor has answered it, and decides itself when the executor
		// is lost). A router taking the model over says soon whether it
		// was run (resolve); until then it may or may not have run.
		waitResolve(rctx)
	}
	return sendOutcome(err, context.Cause(rctx)), err
}

// waitResolve waits at most SequenceRouterWait for a takeover to resolve
// the request of rctx (or for rctx to end otherwise).
func waitResolve(rctx context.Context) {
	t := time.NewTimer(SequenceRouterWait)
	defer t.Stop()
	select {
	case <-rctx.Done():
	case <-t.C:
	}
}

// shapeKey names a request's input shapes, leaving out the inputs that
// allow a ragged batch: the sequence batcher batches only requests with
// equal keys, as Triton batches only equal shapes.
func shapeKey(cfg *inference.ModelConfig, r *backend.Request) string {
	ragged := map[string]bool{}
	for _, in := range cfg.GetInput() {
		if in.GetAllowRaggedBatch() {
			ragged[in.GetName()] = true
		}
	}
	parts := make([]string, 0, len(r.Inputs))
	for _, in := range r.Inputs {
		if ragged[in.Name] {
			continue
		}
		b := append([]byte(nil), in.Name...)
		for _, d := range in.Shape {
			b = append(b, ',')
			b = strconv.AppendInt(b, d, 10)
		}
		parts = append(parts, string(b))
	}
	slices.Sort(parts) // the key does not depend on the request's input order
	return strings.Join(parts, ";")
}

// streamOrder keeps the requests of one sequence in order on one
// ModelStreamInfer stream without holding them back: the stream runs
// requests concurrently, so enter, called in stream order, numbers the
// requests of each sequence (same model, same typed id), and the router
// enqueues them in that order. Like Triton, a stream's requests of one
// sequence thus queue up at once and batch with other sequences' requests.
type streamOrder struct {
	mu     sync.Mutex
	id     string
	next   map[streamSeqKey]uint64
	stamps map[*inference.ModelInferRequest]uint64
}

type streamSeqKey struct {
	model string
	id    seqbatch.ID
}

// streamStamp is a request's place in its sequence on its stream.
type streamStamp struct {
	stream string
	seq    uint64
}

type streamStampKey struct{}

// streamIDs names streams uniquely within the gateway process.
var (
	streamIDs      atomic.Uint64
	streamIDPrefix = func() string {
		var b [6]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:]) + "."
	}()
)

// enter is called in stream order, before the request goes out; it never
// waits (wait is nil) and done must be called when the request finished.
func (o *streamOrder) enter(req *inference.ModelInferRequest) (wait <-chan struct{}, done func()) {
	sp, err := sequenceParams(req)
	if err != nil || sp.id.IsZero() {
		return nil, func() {}
	}
	k := streamSeqKey{model: req.GetModelName(), id: sp.id}
	o.mu.Lock()
	if o.next == nil {
		o.id = streamIDPrefix + strconv.FormatUint(streamIDs.Add(1), 36)
		o.next = map[streamSeqKey]uint64{}
		o.stamps = map[*inference.ModelInferRequest]uint64{}
	}
	o.next[k]++
	o.stamps[req] = o.next[k]
	o.mu.Unlock()
	return nil, func() {
		o.mu.Lock()
		delete(o.stamps, req)
		o.mu.Unlock()
	}
}

// context carries req's stamp to routeSequence.
func (o *streamOrder) context(ctx context.Context, req *inference.ModelInferRequest) context.Context {
	o.mu.Lock()
	n, ok := o.stamps[req]
	id := o.id
	o.mu.Unlock()
	if !ok {
		return ctx
	}
	return context.WithValue(ctx, streamStampKey{}, streamStamp{stream: id, seq: n})
}

// SequenceRouterWait bounds how long a sequence request whose router was
// lost while holding it waits for the router taking the model over to say
// whether it ran (resolve).
const SequenceRouterWait = 5 * time.Second

// errNoRouter is the answer for a request no router took in time; last is
// the last refusal, which says why (no responders, a router stepping down
// or unable to record a START in its store, an executor refusing an old
// epoch).
func errNoRouter(model string, waited time.Duration, last error) error {
	return tritonerr.Unavailablef("no sequence router took the request for model '%s' in %v (a takeover may be in progress; last answer: %s); the request was not run",
		model, waited.Round(time.Millisecond), tritonerr.From(last).Msg)
}

// errLost is the answer for a request the router that took the model over
// says the previous one held (nobody will run it), when there is no time
// left to send it again.
func errLost(model string) error {
	return tritonerr.Unavailablef("the sequence router holding this request of model '%s' was lost before running it; the request was not run", model)
}

// resolveTimeout bounds the resolve of one takeover.
const resolveTimeout = 5 * time.Second

// errRouterLost cancels a request the new sequence router says the old one
// held and lost.
var errRouterLost = errors.New("sequence router lost the request")

// seqTracker follows the gateway's sequence requests across a router
// takeover. Each send of a request carries a token; when a router
// announces that it took a model over, the gateway sends it the tokens of
// the model's requests still waiting, and ends at once the sends the router
// says the previous one held: nobody would ever answer them, and the
// request is sent again under a new token (sendSequence).
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
	// sent is true once the send may have reached a router.
	sent atomic.Bool
}

// init names the gateway's tokens; once.
func (t *seqTracker) init() {
	t.once.Do(func() {
		var b [6]byte
		_, _ = rand.Read(b[:])
		t.prefix = hex.EncodeToString(b[:]) + "."
		t.waits = map[string]map[string]*seqWait{}
	})
}

// track registers one request; done unregisters it.
func (t *seqTracker) track(model, version string, ctx context.Context) (string, *seqWait, context.Context, func()) {
	t.init()
	token := t.prefix + strconv.FormatUint(t.next.Add(1), 36)
	key := bus.ModelKey(model, version)
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

// start follows the routers' takeover announcements until the returned
// subscription is unsubscribed: for each, the model's requests that may
// have reached a router are resolved with the new one (in g's group).
func (t *seqTracker) start(g *Gateway) (*bus.Subscription, error) {
	t.init()
	return g.bus.SubscribeAll(bus.SequenceTakeoverWildcard, func(_ context.Context, subject string, _ []byte) {
		name, version, _, ok := bus.ParseSequenceSubject(subject)
		if !ok {
			return
		}
		key := bus.ModelKey(name, version)
		t.mu.Lock()
		var tokens []string
		for tok, w := range t.waits[key] {
			if w.sent.Load() {
				tokens = append(tokens, tok)
			}
		}
		t.mu.Unlock()
		if len(tokens) > 0 {
			g.group.Go(func(ctx context.Context) { t.resolve(ctx, g, name, version, key, tokens) })
		}
	})
}

// resolve asks the router that took a model over about tokens, and ends
// the sends it says are lost (sendSequence sends those requests again).
func (t *seqTracker) resolve(ctx context.Context, g *Gateway, name, version, key string, tokens []string) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	var out busv1.SequenceResolved
	var retry backoff.Backoff
	for {
		// On the infer subject: the router sees it after every request
		// sent before it.
		err := g.bus.Request(ctx, bus.SequenceInferSubject(name, version), &busv1.SequenceRequest{Resolve: tokens}, &out)
		if err == nil {
			break
		}
		if !bus.IsNoResponders(err) || ctx.Err() != nil {
			g.log.Warn("sequence takeover: cannot resolve waiting requests", "model", name, "err", err)
			return
		}
		if retry.Wait(ctx) != nil {
			return
		}
	}
	t.mu.Lock()
	for _, tok := range out.GetLost() {
		if w := t.waits[key][tok]; w != nil {
			w.cancel(errRouterLost)
		}
	}
	t.mu.Unlock()
	if n := len(out.GetLost()); n > 0 {
		g.log.Warn("sequence router lost requests in a takeover; sending them again", "model", name, "count", n)
	}
}

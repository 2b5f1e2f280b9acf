package gateway

import (
	"io"
	"net/http"
	"runtime"
	"strconv"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/kserve"
)

// Large tensors (pkg/handoff): a request whose executor runs on this
// gateway's node hands its large tensors over through /dev/shm (another
// process) or as slices (this process) instead of the bus. The hooks:
// readInferBody reads an HTTP body straight into a shared file when that is
// where it is going; the gRPC codec (grpccodec.go) decodes large raw inputs
// into one; forwardInfer calls prepareHandoff and handoffState.finish
// around the bus request; whoever writes the response out releases what it
// points into (writeInferResponse, the codec's Marshal).

// handoffThreshold is the tensor size from which requests hand off.
func (g *Gateway) handoffThreshold() int {
	if g.cfg.HandoffThreshold > 0 {
		return g.cfg.HandoffThreshold
	}
	return handoff.DefaultThreshold
}

// handoffRoute says how a request for version vv of model reaches its
// executor: through this process when the bus serves it in this process
// (bus.Local) or every executor of vv on this node runs in it, through
// the node's shared memory when some executor of vv is on this node, else
// over the bus. Large tensors then prefer the node's executors.
func (g *Gateway) handoffRoute(model string, vv *versionView) handoff.Route {
	if g.cfg.HandoffThreshold < 0 {
		return handoff.RouteBus
	}
	if routeForTest != nil {
		return *routeForTest
	}
	if g.bus.InProcess(vv.inferSubject(model)) {
		// Tensors stay on the heap: the executor takes them as they are.
		return handoff.RouteProcess
	}
	same, local := 0, 0
	for id, node := range vv.execNodes {
		if node != g.cfg.Node {
			continue
		}
		same++
		if handoff.LocalExecutor(id) {
			local++
		}
	}
	switch {
	case same == 0:
		return handoff.RouteBus
	case local == same:
		return handoff.RouteProcess
	}
	return handoff.RouteNode
}

// busGCSize is the request size from which prepareHandoff collects garbage
// before a request goes over the bus.
const busGCSize = 64 << 20

// usesSharedMemory reports whether an input or output of req lies in a
// registered shared-memory region.
func usesSharedMemory(req *inference.ModelInferRequest) bool {
	for _, in := range req.GetInputs() {
		if _, ok := in.GetParameters()["shared_memory_region"]; ok {
			return true
		}
	}
	for _, out := range req.GetOutputs() {
		if _, ok := out.GetParameters()["shared_memory_region"]; ok {
			return true
		}
	}
	return false
}

func rawSize(req *inference.ModelInferRequest) int {
	n := 0
	for _, b := range req.GetRawInputContents() {
		n += len(b)
	}
	return n
}

// routeForTest, when set, overrides the route (tests run the executor in
// the gateway's process, which alone would always give RouteProcess).
var routeForTest *handoff.Route

// handoffState is one forwarded request's hand-off.
type handoffState struct {
	body *handoff.Region   // memory the request's inputs lie in, attached by the decoder
	out  *handoff.Outgoing // nil: the bus carries everything
}

// prepareHandoff moves req's large inputs aside when its executor is on
// this node, and says which subject to send it to. The Outgoing, if any,
// is into (a fresh one, of the request's forwarding).
func (g *Gateway) prepareHandoff(vv *versionView, req *inference.ModelInferRequest, into *handoff.Outgoing) (string, handoffState, error) {
	hs := handoffState{body: handoff.TakeRegion(req)}
	route := g.handoffRoute(req.GetModelName(), vv)
	subject := vv.inferSubject(req.GetModelName()) // req.ModelVersion is vv's
	if !usesSharedMemory(req) && g.bus.InProcess(subject) {
		// An executor of this process takes the request message itself
		// (bus.Local): its tensors need no hand-off, unless they lie in a
		// region whose reference must pass to the executor with them
		// (route is RouteProcess then).
		if hs.body == nil {
			return subject, hs, nil
		}
	}
	if usesSharedMemory(req) {
		// The request goes to its regions' node (shmRoute), which need not
		// be this one: its other tensors ride the bus.
		route = handoff.RouteBus
	}
	if route == handoff.RouteBus && rawSize(req) >= busGCSize {
		// A large gRPC request leaves its received frames in gRPC's buffer
		// pool; the reply about to be reassembled is as large. Two
		// collections (a pool survives one) hand those pages back first,
		// so the process holds two copies of the tensor, not three. (An
		// HTTP request has no such garbage; the collections cost little,
		// tensors being pointer-free.)
		runtime.GC()
		runtime.GC()
	}
	out, err := handoff.PrepareInto(into, req, route, hs.body, g.handoffThreshold())
	if err != nil {
		hs.body.Release()
		return "", handoffState{}, err
	}
	hs.out = out
	if out != nil {
		return vv.inferNodeSubject(req.GetModelName(), g.cfg.Node), hs, nil
	}
	return subject, hs, nil
}

// finish takes the handed-off outputs into resp once the request returned
// (err is its outcome) and ties what they point into to resp, for the
// writer of the response to release (TakeResponse). On failure everything
// is released at once.
func (hs *handoffState) finish(resp *inference.ModelInferResponse, err error) error {
	defer hs.body.Release()
	if err == nil {
		err = hs.out.Finish(resp)
	}
	if err != nil {
		hs.out.Release()
		return err
	}
	handoff.AttachResponse(resp, hs.out)
	return nil
}

// finishEncoded is finish for a response passed on encoded, which
// received no output (forwardEncoded checked) and points into nothing of
// the hand-off's: everything is released at once.
func (hs *handoffState) finishEncoded() error {
	defer hs.body.Release()
	var none inference.ModelInferResponse
	err := hs.out.Finish(&none)
	hs.out.Release()
	return err
}

// readInferBody reads an uncompressed body of known length into a buffer
// of exactly that size: a shared file when its tensors are bound for
// another process on this node (no copy until the executor reads them),
// else the heap. Other bodies go through readBody. The Region, when not
// nil, holds the body; the caller releases it.
func (g *Gateway) readInferBody(r *http.Request, enc string, limit int64, model string, vv *versionView) ([]byte, *handoff.Region, error) {
	n := r.ContentLength
	if enc != encIdentity || n < 0 || n > limit {
		b, err := readBodyAs(r.Body, enc, limit, n, r.Header.Get(kserve.HeaderLength) == "")
		return b, nil, err
	}
	var region *handoff.Region
	if n >= int64(g.handoffThreshold()) && g.handoffRoute(model, vv) == handoff.RouteNode {
		// Pages are allocated as the body arrives: a length announced and
		// never sent costs nothing, and read(2) reports a full /dev/shm as
		// an error rather than a fault.
		region, _ = handoff.Create(int(n), false)
	}
	if region == nil {
		// On the heap, the announced length is allocated only once the
		// body has begun to arrive, and counted in the budget (intake.go).
		b, err := readAnnounced(r.Body, n, reserveFunc(r))
		if err != nil {
			return nil, nil, bodyError(err, "failed to read request body: %v")
		}
		return b, nil, nil
	}
	if _, err := io.ReadFull(r.Body, region.Bytes()); err != nil {
		region.Release()
		return nil, nil, bodyError(err, "failed to read request body: %v")
	}
	return region.Bytes(), region, nil
}

// inferHeaderValues are the values of an infer response's headers that
// vary: the JSON header's length and the body's, in one allocation with
// the request's forwarding (httpInfer) rather than one slice each
// (Header.Set's).
type inferHeaderValues struct{ length, size [1]string }

// The values of the Content-Type headers of infer responses, shared
// (capacity 1: appending to one copies it).
var (
	contentTypeOctetStream = []string{"application/octet-stream"}
	contentTypeJSON        = []string{"application/json"}
	headerLengthKey        = http.CanonicalHeaderKey(kserve.HeaderLength)
)

// writeInferResponse writes an infer response: the JSON header, then the
// binary outputs straight from where they lie (no copy into one body),
// then releases the hand-off memory they may lie in.
func (g *Gateway) writeInferResponse(w http.ResponseWriter, r *http.Request, resp *inference.ModelInferResponse, outs *kserve.OutputOptions, vals *inferHeaderValues) {
	defer handoff.TakeResponse(resp).Release()
	header, blobs, err := kserve.EncodeInferResponseParts(resp, outs)
	if err != nil {
		writeError(w, err)
		return
	}
	g.writeInferParts(w, r, header, blobs, vals)
}

// writeInferParts writes an infer response's JSON header and the binary
// outputs after it (EncodeInferResponseParts), compressed if the client
// asks for it. The headers' values go into vals (the request's: httpInfer).
func (g *Gateway) writeInferParts(w http.ResponseWriter, r *http.Request, header []byte, blobs [][]byte, vals *inferHeaderValues) {
	h := w.Header()
	if blobs != nil {
		vals.length[0] = strconv.Itoa(len(header))
		h[headerLengthKey] = vals.length[:]
		h["Content-Type"] = contentTypeOctetStream
	} else {
		h["Content-Type"] = contentTypeJSON
	}
	parts := blobs // written after header, unless compressed into it
	if renc := responseEncoding(headerValue(r.Header, "Accept-Encoding")); renc != encIdentity {
		if c, err := compressParts(renc, append([][]byte{header}, blobs...)); err == nil {
			header, parts = c, nil
			h.Set("Content-Encoding", renc)
		} else {
			g.log.Warn("compressing infer response failed; sending it uncompressed", "err", err)
		}
	}
	size := len(header)
	for _, p := range parts {
		size += len(p)
	}
	vals.size[0] = strconv.Itoa(size)
	h["Content-Length"] = vals.size[:]
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(header); err != nil {
		return
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return
		}
	}
}

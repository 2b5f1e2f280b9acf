package gateway

import (
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/handoff"
	"github.com/nereid-io/nereid/pkg/infercodec"
	"github.com/nereid-io/nereid/pkg/kserve"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// maxRawBody bounds an uncompressed infer body. Triton itself sets no bound
// beyond the JSON header's (--http-max-input-size, enforced by the codec);
// this one only keeps a lying client from making us buffer without end.
const maxRawBody = math.MaxInt32

// handleInfer serves POST /v2/models/{model}[/versions/{version}]/infer:
// decompress, decode (JSON, binary blocks or a raw binary request), forward
// to an executor, encode, compress.
func (g *Gateway) handleInfer(w http.ResponseWriter, r *http.Request) {
	v, _ := pathVersion(r)
	g.serveInfer(w, r, r.PathValue("model"), v)
}

// serveInfer is handleInfer for the model and version its path names
// (httpHandler reads them without the mux).
func (g *Gateway) serveInfer(w http.ResponseWriter, r *http.Request, name, v string) {
	front := g.httpFileFront(name) // nil unless name may be traced into Triton's trace file
	vv, err := g.resolveInfer(r.Context(), name, v)
	if err != nil {
		writeError(w, err)
		return
	}
	if vv.config.GetModelTransactionPolicy().GetDecoupled() {
		writeError(w, tritonerr.Unsupportedf("HTTP end point doesn't support models with decoupled transaction policy"))
		return
	}
	enc, err := requestEncoding(r.Header)
	if err != nil {
		w.Header().Set("Accept-Encoding", "gzip, deflate")
		writeError(w, err)
		return
	}
	limit := int64(maxRawBody)
	if enc != encIdentity {
		limit = g.cfg.HTTPMaxInputSize
	}
	body, region, err := g.readInferBody(r, enc, limit, name, vv)
	if err != nil {
		writeError(w, err)
		return
	}
	defer region.Release()

	opts := kserve.DecodeOptions{MaxInputSize: int(min(g.cfg.HTTPMaxInputSize, math.MaxInt32))}
	var (
		req  *inference.ModelInferRequest
		outs *kserve.OutputOptions
	)
	headerLen := -1 // no header: the whole body is JSON
	if hv, ok := r.Header[headerLengthKey]; ok && len(hv) > 0 {
		if headerLen, err = kserve.ParseHeaderLength(hv[0], len(body)); err != nil {
			writeError(w, err)
			return
		}
	}
	if headerLen == 0 {
		req, outs, err = kserve.DecodeRawRequest(body, name, vv.versionString(), vv.config, opts)
	} else {
		req, outs, err = kserve.DecodeInferRequest(body, headerLen, name, vv.versionString(), opts)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	req.ModelName = name
	front.readDone()
	if region.Shared() { // the body is in a file an executor of this node can map
		handoff.AttachRegion(req, region.Retain())
	}

	// The executor's encoding of the response, when it comes as it is, is
	// written out without being decoded first.
	hi := new(httpInfer)
	resp, encoded, err := g.forwardInfer(withFileFront(g.withClientHeaders(r.Context(), name, r.Header), front), vv, req, true, &hi.fw)
	if front.traced() {
		defer g.sent(front, time.Now()) // HTTP_SEND_START now, HTTP_SEND_END once the response is written
	}
	g.orcaLoad(r.Context(), w.Header(), r.Header, name) // endpoint-load-metrics (orca.go)
	if err != nil {
		writeError(w, err)
		return
	}
	if encoded != nil {
		var buf [4][]byte // the binary outputs' list, on the stack
		hb := headerBufs.Get().(*[]byte)
		if header, blobs, ok := kserve.EncodeInferResponseEncodedTo(*hb, encoded.reply.Bytes, outs, buf[:0]); ok {
			g.writeInferParts(w, r, header, blobs, &hi.vals)
			if cap(header) <= maxHeaderBuf {
				*hb = header[:0]
			}
			headerBufs.Put(hb)
			return
		}
		headerBufs.Put(hb)
		resp = &inference.ModelInferResponse{}
		if err := infercodec.UnmarshalResponse(encoded.reply.Bytes, resp); err != nil {
			writeError(w, tritonerr.Internalf("gateway: cannot decode the reply of model '%s': %v", name, err))
			return
		}
	}
	g.writeInferResponse(w, r, resp, outs, &hi.vals)
}

// headerBufs hold the JSON headers of responses written from the
// executor's encoding: the response writer copies what it is given, so a
// buffer serves the next response once writeInferParts returned.
// Buffers grown beyond maxHeaderBuf (a response of many outputs or large
// JSON data) are left to the collector.
var headerBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 512)
	return &b
}}

const maxHeaderBuf = 16 << 10

// httpInfer is what an HTTP infer request allocates once decoded: its
// forwarding and its response's header values, together.
type httpInfer struct {
	fw   forwarding
	vals inferHeaderValues
}

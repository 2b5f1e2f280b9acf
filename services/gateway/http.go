package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/kserve"
	"github.com/nereid-io/nereid/pkg/modelconfig"
	"github.com/nereid-io/nereid/pkg/tensor/jsonlex"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// The HTTP/REST endpoint speaks Triton's JSON (written by hand, not
// protojson) on Triton's routes; see http_server.cc. Errors are
// {"error":"..."} with the status from the error's Triton kind; routes that
// do not exist are 404 {"error":"Not Found"}, wrong methods 405
// {"error":"Method Not Allowed"}, as Triton answers them.

// statusError is an HTTP error that has no Triton kind (routing errors).
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func httpError(status int, msg string) error { return &statusError{status, msg} }

var (
	errNotFound         = httpError(http.StatusNotFound, "Not Found")
	errMethodNotAllowed = httpError(http.StatusMethodNotAllowed, "Method Not Allowed")
)

// writeError maps err to its status once, at the edge.
func writeError(w http.ResponseWriter, err error) {
	status, msg := http.StatusInternalServerError, err.Error()
	var se *statusError
	if errors.As(err, &se) {
		status, msg = se.status, se.msg
	} else {
		te := tritonerr.From(err)
		status, msg = te.Kind.HTTPStatus(), te.Msg
	}
	body := kserve.JSONError(msg)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, v any) {
	// Triton writes '<', '>' and '&' as they are; encoding/json's default
	// \u003c escaping would make reasons such as "must be >= 1" unreadable.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		writeError(w, tritonerr.Internalf("encoding response: %v", err))
		return
	}
	writeRawJSON(w, bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

func writeRawJSON(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// method wraps h so that other methods get Triton's 405.
func method(m string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m {
			writeError(w, errMethodNotAllowed)
			return
		}
		h(w, r)
	}
}

// pathVersion reads the {version} path segment, which Triton's route only
// matches when it is all digits; anything else is not a route.
func pathVersion(r *http.Request) (string, bool) {
	v := r.PathValue("version")
	if v == "" {
		return "", true
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return "", false
		}
	}
	return v, true
}

func (g *Gateway) httpHandler() http.Handler {
	mux := g.httpMux()
	// Infer requests, the one route on the hot path, skip the mux's
	// pattern matching (and the path values it allocates) when their path
	// is one the mux would take as it is; anything else goes to the mux.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.RawPath == "" {
			if model, version, ok := inferRoute(r.URL.Path); ok {
				g.serveInfer(w, r, model, version)
				return
			}
			if emptyControlName(r.URL.Path) {
				// The mux would redirect the path cleaned of its empty
				// segment; Triton answers that the name is empty.
				writeError(w, checkControlName(""))
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// Patterns of the infer route (handleInfer), in httpMux.
const (
	patternModel        = "/v2/models/{model}/{kind}"
	patternModelVersion = "/v2/models/{model}/versions/{version}/{kind}"
)

func (g *Gateway) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeError(w, errNotFound) })

	mux.HandleFunc("/v2", method(http.MethodGet, g.handleServerMetadata))
	mux.HandleFunc("/v2/health/live", method(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	mux.HandleFunc("/v2/health/ready", method(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		if g.serverReady() {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))

	mux.HandleFunc("/v2/models/stats", method(http.MethodGet, g.handleStats))
	mux.HandleFunc("/v2/models/{model}", method(http.MethodGet, g.handleModelMetadata))
	mux.HandleFunc("/v2/models/{model}/versions/{version}", method(http.MethodGet, g.handleModelMetadata))
	model := func(w http.ResponseWriter, r *http.Request) {
		if _, ok := pathVersion(r); !ok {
			writeError(w, errNotFound)
			return
		}
		switch r.PathValue("kind") {
		case "ready":
			method(http.MethodGet, g.handleModelReady)(w, r)
		case "config":
			method(http.MethodGet, g.handleModelConfig)(w, r)
		case "stats":
			method(http.MethodGet, g.handleStats)(w, r)
		case "infer":
			method(http.MethodPost, g.handleInfer)(w, r)
		case "generate":
			method(http.MethodPost, g.handleGenerate(false))(w, r)
		case "generate_stream":
			method(http.MethodPost, g.handleGenerate(true))(w, r)
		default:
			writeError(w, errNotFound)
		}
	}
	mux.HandleFunc(patternModel, model)
	mux.HandleFunc(patternModelVersion, model)
	mux.HandleFunc("/v2/models/{model}/trace/setting", g.handleTraceSetting)

	mux.HandleFunc("/v2/repository/index", method(http.MethodPost, g.handleRepositoryIndex))
	mux.HandleFunc("/v2/repository/{repo}/index", method(http.MethodPost, g.handleRepositoryIndex))
	mux.HandleFunc("/v2/repository/models/{model}/{action}", g.repositoryControl)
	mux.HandleFunc("/v2/repository/{repo}/models/{model}/{action}", g.repositoryControl)

	g.shmRoutes(mux) // shmhttp.go
	mux.HandleFunc("/v2/trace/setting", g.handleTraceSetting)
	mux.HandleFunc("/v2/logging", g.handleLogging)
	return mux
}

// emptyControlName reports whether path is a load or unload of a model
// with an empty name: /v2/repository/models//load (or unload), with or
// without a repository name.
func emptyControlName(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v2/repository/")
	if !ok {
		return false
	}
	if i := strings.Index(rest, "/"); i > 0 && !strings.HasPrefix(rest, "models/") {
		rest = rest[i+1:] // <repo>/
	}
	return rest == "models//load" || rest == "models//unload"
}

// inferRoute reads /v2/models/<model>/infer and
// /v2/models/<model>/versions/<version>/infer paths that the mux would
// route to handleInfer unchanged: a model name of unreserved characters
// only (nothing for the mux to unescape), not "." or ".." (which it would
// clean away), and an all-digit version.
func inferRoute(path string) (model, version string, ok bool) {
	const prefix, suffix = "/v2/models/", "/infer"
	if len(path) <= len(prefix)+len(suffix) || path[:len(prefix)] != prefix || path[len(path)-len(suffix):] != suffix {
		return "", "", false
	}
	rest := path[len(prefix) : len(path)-len(suffix)] // <model> or <model>/versions/<version>
	i := 0
	for i < len(rest) && rest[i] != '/' {
		if !unreserved(rest[i]) {
			return "", "", false
		}
		i++
	}
	model = rest[:i]
	if model == "" || model == "." || model == ".." {
		return "", "", false
	}
	if i == len(rest) {
		return model, "", true
	}
	const versions = "/versions/"
	v := rest[i:]
	if len(v) <= len(versions) || v[:len(versions)] != versions {
		return "", "", false
	}
	version = v[len(versions):]
	for j := 0; j < len(version); j++ {
		if version[j] < '0' || version[j] > '9' {
			return "", "", false
		}
	}
	return model, version, true
}

// unreserved reports whether c stands for itself in a URL path (RFC 3986).
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

type serverMetadataJSON struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

func (g *Gateway) handleServerMetadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, serverMetadataJSON{Name: g.cfg.ServerID, Version: g.cfg.Version, Extensions: g.exts})
}

// resolveRequest reads the version string and finds the ready model version
// a request addresses.
func (g *Gateway) resolveRequest(name, versionStr string) (*versionView, error) {
	version, err := parseVersion(versionStr)
	if err != nil {
		return nil, err
	}
	vv, err := g.cat.current().resolve(name, version)
	if err != nil && g.cat.waitSettled() {
		// A gateway that has just started does not call a model unknown
		// (or unserved) before it has heard the constellation's catalog.
		return g.cat.current().resolve(name, version)
	}
	return vv, err
}

func (g *Gateway) handleModelReady(w http.ResponseWriter, r *http.Request) {
	// Triton answers a model that is unknown or not ready alike, and only a
	// bad version string with its own error.
	v, _ := pathVersion(r)
	if _, err := parseVersion(v); err != nil {
		writeError(w, err)
		return
	}
	if !modelReady(g.resolveRequest(r.PathValue("model"), v)) {
		writeError(w, tritonerr.InvalidArgf("Model version not ready"))
		return
	}
	w.WriteHeader(http.StatusOK)
}

type tensorMetadataJSON struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

type modelMetadataJSON struct {
	Name     string               `json:"name"`
	Versions []string             `json:"versions"`
	Platform string               `json:"platform"`
	Inputs   []tensorMetadataJSON `json:"inputs"`
	Outputs  []tensorMetadataJSON `json:"outputs"`
}

func (g *Gateway) handleModelMetadata(w http.ResponseWriter, r *http.Request) {
	v, ok := pathVersion(r)
	if !ok {
		writeError(w, errNotFound)
		return
	}
	md, err := g.modelMetadata(r.PathValue("model"), v)
	if err != nil {
		writeError(w, err)
		return
	}
	out := modelMetadataJSON{Name: md.Name, Versions: md.Versions, Platform: md.Platform,
		Inputs: tensorsJSON(md.Inputs), Outputs: tensorsJSON(md.Outputs)}
	if out.Versions == nil {
		out.Versions = []string{}
	}
	writeJSON(w, out)
}

func tensorsJSON(ts []*inference.ModelMetadataResponse_TensorMetadata) []tensorMetadataJSON {
	out := make([]tensorMetadataJSON, 0, len(ts))
	for _, t := range ts {
		shape := t.GetShape()
		if shape == nil {
			shape = []int64{}
		}
		out = append(out, tensorMetadataJSON{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: shape})
	}
	return out
}

// modelMetadata builds model metadata as Triton's
// TRITONSERVER_ServerModelMetadata does: the requested version, or every
// ready version; platform, or backend when platform is empty; shapes with a
// leading -1 when the model batches.
func (g *Gateway) modelMetadata(name, versionStr string) (*inference.ModelMetadataResponse, error) {
	version, err := parseVersion(versionStr)
	if err != nil {
		return nil, err
	}
	v := g.cat.current()
	vv, err := v.resolve(name, version)
	if err != nil && g.cat.waitSettled() { // a gateway just started: see resolveRequest
		v = g.cat.current()
		vv, err = v.resolve(name, version)
	}
	if err != nil {
		return nil, err
	}
	md := &inference.ModelMetadataResponse{Name: name}
	if version != latestVersion {
		md.Versions = []string{strconv.FormatInt(version, 10)}
	} else {
		for _, n := range v.readyVersions(name) {
			md.Versions = append(md.Versions, strconv.FormatInt(n, 10))
		}
	}
	cfg := vv.config
	if cfg == nil {
		return md, nil
	}
	md.Platform = cfg.GetPlatform()
	if md.Platform == "" {
		md.Platform = cfg.GetBackend()
	}
	shape := func(dims []int64) []int64 {
		s := make([]int64, 0, len(dims)+1)
		if cfg.GetMaxBatchSize() >= 1 {
			s = append(s, -1)
		}
		return append(s, dims...)
	}
	for _, in := range cfg.GetInput() {
		md.Inputs = append(md.Inputs, &inference.ModelMetadataResponse_TensorMetadata{
			Name: in.GetName(), Datatype: protocolDataType(in.GetDataType()), Shape: shape(in.GetDims())})
	}
	for _, out := range cfg.GetOutput() {
		md.Outputs = append(md.Outputs, &inference.ModelMetadataResponse_TensorMetadata{
			Name: out.GetName(), Datatype: protocolDataType(out.GetDataType()), Shape: shape(out.GetDims())})
	}
	return md, nil
}

// protocolDataType names a config datatype as the protocol does
// (TYPE_STRING is BYTES), like Triton's DataTypeToProtocolString.
func protocolDataType(dt inference.DataType) string {
	switch dt {
	case inference.DataType_TYPE_STRING:
		return "BYTES"
	case inference.DataType_TYPE_INVALID:
		return ""
	}
	return strings.TrimPrefix(dt.String(), "TYPE_")
}

// modelConfig returns the configuration of the addressed ready version.
func (g *Gateway) modelConfig(name, versionStr string) (*inference.ModelConfig, error) {
	vv, err := g.resolveRequest(name, versionStr)
	if err != nil {
		return nil, err
	}
	if vv.config == nil {
		return nil, tritonerr.Internalf("no configuration known for model '%s' version %d", name, vv.version)
	}
	return vv.config, nil
}

func (g *Gateway) handleModelConfig(w http.ResponseWriter, r *http.Request) {
	v, _ := pathVersion(r)
	cfg, err := g.modelConfig(r.PathValue("model"), v)
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := modelconfig.JSON(cfg)
	if err != nil {
		writeError(w, tritonerr.Internalf("rendering model configuration: %v", err))
		return
	}
	writeRawJSON(w, body)
}

func (g *Gateway) handleRepositoryIndex(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r.Body, encIdentity, g.cfg.HTTPMaxInputSize, r.ContentLength)
	if err != nil {
		writeError(w, err)
		return
	}
	ready, err := indexReady(body)
	if err != nil {
		writeError(w, err)
		return
	}
	g.cat.refresh(r.Context())
	writeJSON(w, g.cat.current().index(ready))
}

// indexReady reads the "ready" member of a repository index request (an
// empty body means false). The whole document is parsed, under the
// parser's depth limit, and a "ready" that is not a boolean is refused
// once the document proved to be JSON, as Triton does. The one exception:
// a "ready" nested past the depth limit gets the message about 'ready'
// rather than the depth error, since nothing in it could make it a
// boolean.
func indexReady(body []byte) (bool, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return false, nil
	}
	errNotBool := tritonerr.InvalidArgf("Invalid value for 'ready': expected a boolean")
	lx := jsonlex.New(body)
	depthErr := jsonlex.DepthError(lx.MaxDepth).Msg
	t, err := lx.Next()
	if err != nil {
		return false, err
	}
	if t.Kind != jsonlex.BeginObject {
		if _, err := lx.SkipValue(t); err != nil {
			return false, err
		}
		_, err := lx.Next() // nothing may follow the value
		return false, err   // Triton finds no 'ready' in a non-object
	}
	var ready, seen bool
	var notBool error
	for {
		k, err := lx.Next()
		if err != nil {
			return false, err
		}
		if k.Kind == jsonlex.EndObject {
			break
		}
		v, err := lx.Next()
		if err != nil {
			return false, err
		}
		if seen || jsonlex.StringValue(k) != "ready" {
			if _, err := lx.SkipValue(v); err != nil {
				return false, err
			}
			continue
		}
		seen = true // the first member of a name wins, as in rapidjson's Find
		switch v.Kind {
		case jsonlex.True, jsonlex.False:
			ready = v.Kind == jsonlex.True
			continue
		}
		notBool = errNotBool
		if _, err := lx.SkipValue(v); err != nil {
			if te := tritonerr.From(err); te.Msg == depthErr {
				return false, errNotBool
			}
			return false, err
		}
	}
	if _, err := lx.Next(); err != nil { // nothing may follow the object
		return false, err
	}
	if notBool != nil {
		return false, notBool
	}
	return ready, nil
}

// jsonErrorText shortens encoding/json's messages for clients.
func jsonErrorText(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of JSON input"
	}
	return err.Error()
}

func (g *Gateway) handleStats(w http.ResponseWriter, r *http.Request) {
	v, _ := pathVersion(r)
	resp, err := g.statistics(r.Context(), r.PathValue("model"), v)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, statsJSON(resp))
}

type durationJSON struct {
	Count uint64 `json:"count"`
	Ns    uint64 `json:"ns"`
}

func dur(d *inference.StatisticDuration) durationJSON {
	return durationJSON{Count: d.GetCount(), Ns: d.GetNs()}
}

type inferStatsJSON struct {
	Success       durationJSON `json:"success"`
	Fail          durationJSON `json:"fail"`
	Queue         durationJSON `json:"queue"`
	ComputeInput  durationJSON `json:"compute_input"`
	ComputeInfer  durationJSON `json:"compute_infer"`
	ComputeOutput durationJSON `json:"compute_output"`
	CacheHit      durationJSON `json:"cache_hit"`
	CacheMiss     durationJSON `json:"cache_miss"`
}

type responseStatsJSON struct {
	ComputeInfer  durationJSON `json:"compute_infer"`
	ComputeOutput durationJSON `json:"compute_output"`
	Success       durationJSON `json:"success"`
	Fail          durationJSON `json:"fail"`
	EmptyResponse durationJSON `json:"empty_response"`
	Cancel        durationJSON `json:"cancel"`
}

type batchStatsJSON struct {
	BatchSize     uint64       `json:"batch_size"`
	ComputeInput  durationJSON `json:"compute_input"`
	ComputeInfer  durationJSON `json:"compute_infer"`
	ComputeOutput durationJSON `json:"compute_output"`
}

type memoryUsageJSON struct {
	Type     string `json:"type"`
	ID       int64  `json:"id"`
	ByteSize uint64 `json:"byte_size"`
}

type modelStatsJSON struct {
	Name           string                       `json:"name"`
	Version        string                       `json:"version"`
	LastInference  uint64                       `json:"last_inference"`
	InferenceCount uint64                       `json:"inference_count"`
	ExecutionCount uint64                       `json:"execution_count"`
	InferenceStats inferStatsJSON               `json:"inference_stats"`
	ResponseStats  map[string]responseStatsJSON `json:"response_stats"`
	BatchStats     []batchStatsJSON             `json:"batch_stats"`
	MemoryUsage    []memoryUsageJSON            `json:"memory_usage"`
}

// statsJSON renders statistics in the shape of Triton's JSON.
func statsJSON(resp *inference.ModelStatisticsResponse) any {
	out := struct {
		ModelStats []modelStatsJSON `json:"model_stats"`
	}{ModelStats: []modelStatsJSON{}}
	for _, s := range resp.GetModelStats() {
		is := s.GetInferenceStats()
		m := modelStatsJSON{
			Name: s.GetName(), Version: s.GetVersion(), LastInference: s.GetLastInference(),
			InferenceCount: s.GetInferenceCount(), ExecutionCount: s.GetExecutionCount(),
			InferenceStats: inferStatsJSON{
				Success: dur(is.GetSuccess()), Fail: dur(is.GetFail()), Queue: dur(is.GetQueue()),
				ComputeInput: dur(is.GetComputeInput()), ComputeInfer: dur(is.GetComputeInfer()),
				ComputeOutput: dur(is.GetComputeOutput()), CacheHit: dur(is.GetCacheHit()), CacheMiss: dur(is.GetCacheMiss()),
			},
			ResponseStats: map[string]responseStatsJSON{},
			BatchStats:    []batchStatsJSON{},
			MemoryUsage:   []memoryUsageJSON{},
		}
		for k, rs := range s.GetResponseStats() {
			m.ResponseStats[k] = responseStatsJSON{
				ComputeInfer: dur(rs.GetComputeInfer()), ComputeOutput: dur(rs.GetComputeOutput()),
				Success: dur(rs.GetSuccess()), Fail: dur(rs.GetFail()),
				EmptyResponse: dur(rs.GetEmptyResponse()), Cancel: dur(rs.GetCancel()),
			}
		}
		for _, b := range s.GetBatchStats() {
			m.BatchStats = append(m.BatchStats, batchStatsJSON{BatchSize: b.GetBatchSize(),
				ComputeInput: dur(b.GetComputeInput()), ComputeInfer: dur(b.GetComputeInfer()), ComputeOutput: dur(b.GetComputeOutput())})
		}
		for _, mu := range s.GetMemoryUsage() {
			m.MemoryUsage = append(m.MemoryUsage, memoryUsageJSON{Type: mu.GetType(), ID: mu.GetId(), ByteSize: mu.GetByteSize()})
		}
		out.ModelStats = append(out.ModelStats, m)
	}
	return out
}

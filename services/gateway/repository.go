package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/busv1"
	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/placementbus"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// controlTimeout bounds how long a repository load or unload waits for the
// executors: loading a large model takes a while, a lost executor must not
// hang the caller forever.
const controlTimeout = 5 * time.Minute

// fileParamPrefix starts the parameters of a load that carry model files
// ("file:1/model.onnx"), as Triton names them.
const fileParamPrefix = "file:"

// modelControl sends a repository load or unload to every executor and
// waits until each known one has answered. The executors' catalogs in
// the answers update the gateway's view before the caller hears back, so
// a model is READY (or gone) for the very next request. The error is the
// first executor's, in id order, named with the executor when the
// constellation has more than one.
func (g *Gateway) modelControl(ctx context.Context, req *busv1.ModelControlRequest) error {
	var ids []string
	if !g.cfg.Placement {
		g.cat.waitSettled()
		if ids = g.cat.executorIDs(); len(ids) == 0 {
			return tritonerr.Unavailablef("failed to %s '%s', no executor serves the model repository", action(req), req.GetName())
		}
	}
	if err := g.checkControlSize(req); err != nil {
		return err
	}
	// The model's cached responses: unreachable while it loads and again
	// once it has (what was stored meanwhile may be the old model's).
	g.invalidateCache(ctx, req.GetName())
	defer g.invalidateCache(ctx, req.GetName())
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	if g.cfg.Placement {
		return g.placedControl(ctx, req)
	}
	pending := map[string]bool{}
	for _, id := range ids {
		pending[id] = true
	}
	errs := map[string]*busv1.ModelControlReply{}
	err := g.bus.Gather(ctx, bus.ModelControlSubject, req, func(data []byte) bool {
		var rep busv1.ModelControlReply
		if proto.Unmarshal(data, &rep) != nil {
			return true
		}
		if rep.GetCatalog() != nil {
			g.cat.apply(rep.GetCatalog())
		}
		if rep.GetError() != "" {
			errs[rep.GetExecutorId()] = &rep
		}
		delete(pending, rep.GetExecutorId())
		return len(pending) > 0
	})
	if err != nil {
		return err
	}
	named := len(ids) > 1
	failed := make([]string, 0, len(errs))
	for id := range errs {
		failed = append(failed, id)
	}
	slices.Sort(failed)
	if len(failed) > 0 {
		rep := errs[failed[0]]
		msg := rep.GetError()
		if named {
			msg += " (executor '" + rep.GetExecutorId() + "')"
		}
		return tritonerr.New(tritonerr.ParseKind(rep.GetErrorKind()), "%s", msg)
	}
	if len(pending) > 0 {
		missing := make([]string, 0, len(pending))
		for id := range pending {
			missing = append(missing, id)
		}
		slices.Sort(missing)
		return tritonerr.Unavailablef("failed to %s '%s', executor '%s' did not answer", action(req), req.GetName(), missing[0])
	}
	return nil
}

// placedControl is modelControl under placement: the placement controller
// loads the model in the cluster (placed on an executor and READY) or
// unloads it everywhere, and answers as an executor would; the gateway
// then reads every executor's catalog, so that the model is READY (or
// gone) for the very next request.
func (g *Gateway) placedControl(ctx context.Context, req *busv1.ModelControlRequest) error {
	rep, err := placementbus.NewController(g.bus).Control(ctx, req)
	if err != nil {
		return err
	}
	if rep.GetCatalog() != nil {
		g.cat.apply(rep.GetCatalog())
	}
	g.cat.refresh(ctx)
	if rep.GetError() != "" {
		return tritonerr.New(tritonerr.ParseKind(rep.GetErrorKind()), "%s", rep.GetError())
	}
	return nil
}

// controlHeadroom is what a load's bus message carries beside the request
// itself: its headers (a deadline and the trace context, some hundred
// bytes).
const controlHeadroom = 1 << 10

// checkControlSize refuses a load whose files and configuration do not fit
// in one bus message, in words a user can act on, before it is sent (the
// bus would refuse it naming its own subject and limit).
func (g *Gateway) checkControlSize(req *busv1.ModelControlRequest) error {
	nc := g.bus.NATS()
	if nc == nil || len(req.GetFiles()) == 0 {
		return nil
	}
	limit := nc.MaxPayload() - controlHeadroom
	if n := int64(proto.Size(req)); limit > 0 && n > limit {
		return loadTooLargeError{tritonerr.InvalidArgf("failed to load '%s': the files and configuration in the load request take %d bytes, over the %d bytes a load request can carry (the NATS server's max_payload); put large model files in the model repository, or raise max_payload", req.GetName(), n, limit)}
	}
	return nil
}

// loadTooLargeError is a load refused by checkControlSize. Triton has no
// limit of its own on a load's files, only its transports': a load over
// --http-max-input-size is an INVALID_ARG (400, EVBufferToJson's check),
// a RepositoryModelLoad message over the gRPC server's max message size
// (MAX_GRPC_MESSAGE_SIZE) gRPC's RESOURCE_EXHAUSTED. The bus's limit is
// answered with those statuses, in Nereid's words: 400 over HTTP (the
// INVALID_ARG it wraps), RESOURCE_EXHAUSTED over gRPC.
type loadTooLargeError struct{ err *tritonerr.Error }

func (e loadTooLargeError) Error() string { return e.err.Msg }
func (e loadTooLargeError) Unwrap() error { return e.err }

func (e loadTooLargeError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.err.Msg)
}

func action(req *busv1.ModelControlRequest) string {
	if req.GetLoad() {
		return "load"
	}
	return "unload"
}

// repositoryControl serves POST /v2/repository/models/{model}/load|unload.
func (g *Gateway) repositoryControl(w http.ResponseWriter, r *http.Request) {
	act := r.PathValue("action")
	if act != "load" && act != "unload" {
		writeError(w, errNotFound)
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, errMethodNotAllowed)
		return
	}
	body, err := readBody(r.Body, encIdentity, g.cfg.HTTPMaxInputSize, r.ContentLength)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := controlRequestJSON(r.PathValue("model"), act == "load", body)
	if err == nil {
		err = g.modelControl(r.Context(), req)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
}

// checkControlName refuses, as Triton does, the name of a model to load or
// unload that is empty (or only white space) or could name a directory
// outside the model repository.
func checkControlName(model string) error {
	if strings.TrimSpace(model) == "" {
		return tritonerr.InvalidArgf("Model name cannot be empty. Please enter a valid name to deploy.")
	}
	if strings.Contains(model, "..") || strings.ContainsAny(model, `/\`) {
		return tritonerr.InvalidArgf("model name must not contain path traversal characters")
	}
	return nil
}

// controlRequestJSON reads the body of a load or unload:
// {"parameters": {"config": "<JSON>", "file:1/model.onnx": "<base64>",
// "unload_dependents": true}}; an empty body has no parameters.
func controlRequestJSON(model string, load bool, body []byte) (*busv1.ModelControlRequest, error) {
	if err := checkControlName(model); err != nil {
		return nil, err
	}
	req := &busv1.ModelControlRequest{Name: model, Load: load}
	if len(strings.TrimSpace(string(body))) == 0 {
		return req, nil
	}
	var doc struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, tritonerr.InvalidArgf("failed to parse the request JSON buffer: %v", err)
	}
	for k, raw := range doc.Parameters {
		switch {
		case k == "unload_dependents":
			if err := json.Unmarshal(raw, &req.UnloadDependents); err != nil {
				return nil, tritonerr.InvalidArgf("Unable to parse 'unload_dependents', expect bool")
			}
		case !load:
			// Triton ignores other parameters of an unload.
		case k == "config":
			if err := json.Unmarshal(raw, &req.Config); err != nil {
				return nil, tritonerr.InvalidArgf("Unable to parse 'config', expect string")
			}
		case strings.HasPrefix(k, fileParamPrefix):
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, tritonerr.InvalidArgf("Unable to parse '%s', expect string", k)
			}
			data, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, tritonerr.InvalidArgf("Unable to decode '%s': %v", k, err)
			}
			if req.Files == nil {
				req.Files = map[string][]byte{}
			}
			req.Files[strings.TrimPrefix(k, fileParamPrefix)] = data
		}
	}
	return req, nil
}

// controlRequestGRPC reads the parameters of RepositoryModelLoad/Unload.
func controlRequestGRPC(model string, load bool, params map[string]*inference.ModelRepositoryParameter) (*busv1.ModelControlRequest, error) {
	if err := checkControlName(model); err != nil {
		return nil, err
	}
	req := &busv1.ModelControlRequest{Name: model, Load: load}
	for k, p := range params {
		switch {
		case k == "unload_dependents":
			b, ok := p.GetParameterChoice().(*inference.ModelRepositoryParameter_BoolParam)
			if !ok {
				return nil, tritonerr.InvalidArgf("invalid value type for 'unload_dependents' parameter, expected bool_param")
			}
			req.UnloadDependents = b.BoolParam
		case !load:
		case k == "config":
			s, ok := p.GetParameterChoice().(*inference.ModelRepositoryParameter_StringParam)
			if !ok {
				return nil, tritonerr.InvalidArgf("invalid value type for load parameter 'config', expected string_param")
			}
			req.Config = s.StringParam
		case strings.HasPrefix(k, fileParamPrefix):
			b, ok := p.GetParameterChoice().(*inference.ModelRepositoryParameter_BytesParam)
			if !ok {
				return nil, tritonerr.InvalidArgf("invalid value type for load parameter '%s', expected bytes_param", k)
			}
			if req.Files == nil {
				req.Files = map[string][]byte{}
			}
			req.Files[strings.TrimPrefix(k, fileParamPrefix)] = b.BytesParam
		}
	}
	return req, nil
}

func (s *grpcService) RepositoryModelLoad(ctx context.Context, in *inference.RepositoryModelLoadRequest) (*inference.RepositoryModelLoadResponse, error) {
	req, err := controlRequestGRPC(in.GetModelName(), true, in.GetParameters())
	if err != nil {
		return nil, err
	}
	if err := s.g.modelControl(ctx, req); err != nil {
		return nil, err
	}
	return &inference.RepositoryModelLoadResponse{}, nil
}

func (s *grpcService) RepositoryModelUnload(ctx context.Context, in *inference.RepositoryModelUnloadRequest) (*inference.RepositoryModelUnloadResponse, error) {
	req, err := controlRequestGRPC(in.GetModelName(), false, in.GetParameters())
	if err != nil {
		return nil, err
	}
	if err := s.g.modelControl(ctx, req); err != nil {
		return nil, err
	}
	return &inference.RepositoryModelUnloadResponse{}, nil
}

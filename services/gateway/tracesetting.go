package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/settingbus"
	"github.com/nereid-io/nereid/pkg/tracesetting"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// settingsTimeout bounds the wait for every executor to acknowledge a
// settings change.
const settingsTimeout = 5 * time.Second

// newInstanceID names this gateway process in the settings versions it
// makes and acknowledges: the host and a random suffix.
func newInstanceID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	return "gateway-" + host + "-" + hex.EncodeToString(b[:])
}

// traceModel checks the model of a model-scoped trace setting request:
// Triton answers only for a ready model.
func (g *Gateway) traceModel(model string) error {
	if model == "" {
		return nil
	}
	if _, err := g.resolveRequest(model, ""); err != nil {
		return tritonerr.InvalidArgf("Request for unknown model : %s", model)
	}
	return nil
}

// updateTrace applies u on this gateway and spreads the new configuration
// to the constellation, waiting for the executors it knows.
func (g *Gateway) updateTrace(ctx context.Context, model string, u tracesetting.Update) error {
	if u.Empty() {
		return nil
	}
	snap, err := g.trace.Update(model, u)
	if err != nil {
		return err
	}
	g.spreadSettings(ctx, bus.SettingsTrace, snap)
	return nil
}

// spreadSettings publishes a configuration of kind and waits for the
// executors this gateway knows to acknowledge. The change has been made
// here already; an executor that does not answer is logged, and picks the
// configuration up when it restarts.
func (g *Gateway) spreadSettings(ctx context.Context, kind string, cfg proto.Message) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settingsTimeout)
	defer cancel()
	want := g.cat.executorIDs()
	acked, err := settingbus.Spread(ctx, g.bus, kind, cfg, want)
	if err != nil {
		missing := []string{}
		for _, id := range want {
			if _, ok := acked[id]; !ok {
				missing = append(missing, id)
			}
		}
		g.log.Warn("settings change not acknowledged by every executor", "kind", kind, "missing", missing, "err", err)
	}
}

// traceResponseJSON renders a trace setting report as Triton's HTTP JSON:
// trace_level an array, the others strings, in report order.
func traceResponseJSON(settings []tracesetting.Setting) []byte {
	buf := []byte{'{'}
	for i, s := range settings {
		if i > 0 {
			buf = append(buf, ',')
		}
		k, _ := json.Marshal(s.Name)
		buf = append(buf, k...)
		buf = append(buf, ':')
		var v []byte
		if s.List {
			v, _ = json.Marshal(s.Values)
		} else {
			v, _ = json.Marshal(s.Values[0])
		}
		buf = append(buf, v...)
	}
	return append(buf, '}')
}

// parseTraceJSON reads an HTTP trace setting request body.
func parseTraceJSON(body []byte) (tracesetting.Update, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return tracesetting.Update{}, tritonerr.InvalidArgf("failed to parse the request JSON buffer: %v", jsonErrorText(err))
	}
	members := make(map[string]tracesetting.JSONValue, len(raw))
	for k, v := range raw {
		members[k] = jsonMember(v)
	}
	return tracesetting.ParseHTTP(members)
}

func jsonMember(raw json.RawMessage) tracesetting.JSONValue {
	var v any
	_ = json.Unmarshal(raw, &v)
	switch x := v.(type) {
	case nil:
		return tracesetting.JSONValue{Null: true}
	case string:
		return tracesetting.JSONValue{String: &x}
	case []any:
		out := tracesetting.JSONValue{IsArray: true, Array: make([]string, 0, len(x))}
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return tracesetting.JSONValue{Kind: "an array holding a non-string"}
			}
			out.Array = append(out.Array, s)
		}
		return out
	case bool:
		return tracesetting.JSONValue{Kind: "a boolean"}
	case float64:
		return tracesetting.JSONValue{Kind: "a number"}
	}
	return tracesetting.JSONValue{Kind: "an object"}
}

// maxSettingsBody bounds a settings request body.
const maxSettingsBody = 1 << 20

func (g *Gateway) handleTraceSetting(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		writeError(w, errMethodNotAllowed)
		return
	}
	model := r.PathValue("model")
	if err := g.traceModel(model); err != nil {
		writeError(w, err)
		return
	}
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxSettingsBody+1))
		if err != nil {
			writeError(w, tritonerr.InvalidArgf("reading the request body: %v", err))
			return
		}
		if len(body) > maxSettingsBody {
			writeError(w, tritonerr.InvalidArgf("trace setting request body larger than %d bytes", maxSettingsBody))
			return
		}
		u, err := parseTraceJSON(body)
		if err == nil {
			err = g.updateTrace(r.Context(), model, u)
		}
		if err != nil {
			writeError(w, err)
			return
		}
	}
	writeRawJSON(w, traceResponseJSON(g.trace.Report(model)))
}

// TraceSetting is the gRPC form of the trace extension.
func (s *grpcService) TraceSetting(ctx context.Context, req *inference.TraceSettingRequest) (*inference.TraceSettingResponse, error) {
	g := s.g
	model := req.GetModelName()
	if err := g.traceModel(model); err != nil {
		return nil, err
	}
	if len(req.GetSettings()) > 0 {
		settings := make(map[string][]string, len(req.GetSettings()))
		for k, v := range req.GetSettings() {
			settings[k] = v.GetValue()
		}
		u, err := tracesetting.ParseGRPC(settings)
		if err != nil {
			return nil, err
		}
		if err := g.updateTrace(ctx, model, u); err != nil {
			return nil, err
		}
	}
	resp := &inference.TraceSettingResponse{Settings: map[string]*inference.TraceSettingResponse_SettingValue{}}
	for _, st := range g.trace.Report(model) {
		resp.Settings[st.Name] = &inference.TraceSettingResponse_SettingValue{Value: st.Values}
	}
	return resp, nil
}

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/bus"
	"github.com/nereid-io/nereid/pkg/logsetting"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// updateLogging applies a logging change here and spreads it.
func (g *Gateway) updateLogging(ctx context.Context, u logsetting.Update) {
	g.spreadSettings(ctx, bus.SettingsLogging, g.logging.Update(u))
}

// logJSON is Triton's logging response, in Triton's member order.
type logJSON struct {
	File    string `json:"log_file"`
	Info    bool   `json:"log_info"`
	Warning bool   `json:"log_warning"`
	Error   bool   `json:"log_error"`
	Verbose uint32 `json:"log_verbose_level"`
	Format  string `json:"log_format"`
}

func (g *Gateway) handleLogging(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		writeError(w, errMethodNotAllowed)
		return
	}
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxSettingsBody+1))
		if err != nil || len(body) > maxSettingsBody {
			writeError(w, tritonerr.InvalidArgf("log setting request body unreadable or larger than %d bytes", maxSettingsBody))
			return
		}
		u, err := parseLoggingJSON(body)
		if err != nil {
			writeError(w, err)
			return
		}
		g.updateLogging(r.Context(), u)
	}
	v := g.logging.Get()
	writeJSON(w, logJSON{File: v.File, Info: v.Info, Warning: v.Warning, Error: v.Error, Verbose: v.VerboseLevel, Format: string(v.Format)})
}

func parseLoggingJSON(body []byte) (logsetting.Update, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return logsetting.Update{}, tritonerr.InvalidArgf("failed to parse the request JSON buffer: %v", jsonErrorText(err))
	}
	params := make(map[string]logsetting.Param, len(raw))
	for k, v := range raw {
		var p logsetting.Param
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		var x any
		_ = dec.Decode(&x)
		switch t := x.(type) {
		case nil:
			p.Null = true
		case bool:
			p.Bool = &t
		case string:
			p.String = &t
		case json.Number:
			var n uint64
			if json.Unmarshal([]byte(t.String()), &n) == nil {
				p.Uint = &n
			}
		}
		params[k] = p
	}
	return logsetting.Parse(params, false)
}

// LogSettings is the gRPC form of the logging extension.
func (s *grpcService) LogSettings(ctx context.Context, req *inference.LogSettingsRequest) (*inference.LogSettingsResponse, error) {
	g := s.g
	if len(req.GetSettings()) > 0 {
		params := make(map[string]logsetting.Param, len(req.GetSettings()))
		for k, v := range req.GetSettings() {
			var p logsetting.Param
			switch c := v.GetParameterChoice().(type) {
			case *inference.LogSettingsRequest_SettingValue_BoolParam:
				p.Bool = &c.BoolParam
			case *inference.LogSettingsRequest_SettingValue_Uint32Param:
				n := uint64(c.Uint32Param)
				p.Uint = &n
			case *inference.LogSettingsRequest_SettingValue_StringParam:
				p.String = &c.StringParam
			default:
				p.Null = true
			}
			params[k] = p
		}
		u, err := logsetting.Parse(params, true)
		if err != nil {
			return nil, err
		}
		g.updateLogging(ctx, u)
	}
	v := g.logging.Get()
	b := func(x bool) *inference.LogSettingsResponse_SettingValue {
		return &inference.LogSettingsResponse_SettingValue{ParameterChoice: &inference.LogSettingsResponse_SettingValue_BoolParam{BoolParam: x}}
	}
	str := func(x string) *inference.LogSettingsResponse_SettingValue {
		return &inference.LogSettingsResponse_SettingValue{ParameterChoice: &inference.LogSettingsResponse_SettingValue_StringParam{StringParam: x}}
	}
	return &inference.LogSettingsResponse{Settings: map[string]*inference.LogSettingsResponse_SettingValue{
		"log_file": str(v.File), "log_info": b(v.Info), "log_warning": b(v.Warning), "log_error": b(v.Error),
		"log_verbose_level": {ParameterChoice: &inference.LogSettingsResponse_SettingValue_Uint32Param{Uint32Param: v.VerboseLevel}},
		"log_format":        str(string(v.Format)),
	}}, nil
}

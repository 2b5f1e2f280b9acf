package logsetting

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func TestParse(t *testing.T) {
	yes, no := true, false
	s := func(v string) *string { return &v }
	n := func(v uint64) *uint64 { return &v }
	tests := []struct {
		name   string
		params map[string]Param
		grpc   bool
		kind   tritonerr.Kind
		msg    string
	}{
		{"file", map[string]Param{"log_file": {String: s("x")}}, false, tritonerr.Unsupported, "log file location can not be updated through network protocol"},
		{"file null is fine over HTTP", map[string]Param{"log_file": {Null: true}}, false, 0, ""},
		{"bool", map[string]Param{"log_info": {String: s("yes")}}, true, tritonerr.InvalidArg, "expect boolean for 'log_info'"},
		{"verbose grpc", map[string]Param{"log_verbose_level": {Bool: &yes}}, true, tritonerr.InvalidArg, "expect int32 for 'log_verbose_level'"},
		{"format type", map[string]Param{"log_format": {Uint: n(1)}}, true, tritonerr.InvalidArg, "expect string for 'log_format'"},
		{"format grpc", map[string]Param{"log_format": {String: s("XML")}}, true, tritonerr.InvalidArg, "invalid argument for log_format, got: XML"},
		{"format http", map[string]Param{"log_format": {String: s("XML")}}, false, tritonerr.Unavailable, "invalid argument for --log_format, got: XML"},
		{"all good", map[string]Param{"log_info": {Bool: &no}, "log_verbose_level": {Uint: n(2)}, "log_format": {String: s("ISO8601")}}, false, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := Parse(tt.params, tt.grpc)
			if tt.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tt.name == "all good" && (*u.Info != false || *u.VerboseLevel != 2 || *u.Format != FormatISO8601) {
					t.Fatalf("update %+v", u)
				}
				return
			}
			te := tritonerr.From(err)
			if err == nil || te.Kind != tt.kind || te.Msg != tt.msg {
				t.Fatalf("err %v, want %v %q", err, tt.kind, tt.msg)
			}
		})
	}
}

func TestHandlerFollowsSettings(t *testing.T) {
	m := New(Defaults, "p1")
	var buf bytes.Buffer
	log := slog.New(NewHandler(m, &buf)).With("service", "test")
	log.Debug("hidden")
	log.Info("shown", "k", "v")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "] msg=shown service=test k=v") || out[0] != 'I' {
		t.Fatalf("default format: %q", out)
	}
	buf.Reset()
	// A caller's own attribute named like slog's source key is kept (Triton
	// backends' lines carry source=backend).
	log.Info("from a backend", "source", "backend", "line", 41)
	if out := buf.String(); !strings.Contains(out, `msg="from a backend" service=test source=backend line=41`) {
		t.Fatalf("caller's source attribute: %q", out)
	}
	buf.Reset()

	no, lvl, iso := false, uint32(1), FormatISO8601
	peer := New(Defaults, "p2")
	peer.Apply(m.Update(Update{Info: &no, VerboseLevel: &lvl, Format: &iso}))
	if peer.Get() != m.Get() {
		t.Fatalf("peer %+v, origin %+v", peer.Get(), m.Get())
	}
	log.Info("info off")
	log.Debug("verbose on")
	log.Warn("warning")
	out := buf.String()
	if strings.Contains(out, "info off") || !strings.Contains(out, "verbose on") || !strings.Contains(out, " W ") {
		t.Fatalf("after the change: %q", out)
	}
	if !strings.HasPrefix(out, "20") || !strings.Contains(out, "Z V ") {
		t.Fatalf("not ISO8601: %q", out)
	}
	buf.Reset()

	js := FormatJSON
	m.Update(Update{Format: &js})
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	log.WarnContext(WithRequestID(ctx, "req-7"), "about a request")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("JSON line %q: %v", buf.String(), err)
	}
	if line["trace_id"] != tid.String() || line["span_id"] != sid.String() || line["request_id"] != "req-7" || line["service"] != "test" {
		t.Fatalf("line %v lacks the request's ids", line)
	}
}

func TestFlags(t *testing.T) {
	f := Flags{format: "bogus"}
	if _, _, err := f.Build(); err == nil {
		t.Fatal("bad --log-format accepted")
	}
	f = Flags{format: "ISO8601", verbose: 3, info: true}
	m, _, err := f.Build()
	if err != nil {
		t.Fatal(err)
	}
	if v := m.Get(); v.Format != FormatISO8601 || v.VerboseLevel != 3 || !v.Info || v.Warning {
		t.Fatalf("values %+v", v)
	}
}

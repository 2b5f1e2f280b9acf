package observability

import (
	"fmt"
	"testing"

	"github.com/nereid-io/nereid/e2e/constellation"
)

// receiver is the OTLP/gRPC trace collector of e2e/constellation, its
// spans in this package's form.
type receiver struct {
	*constellation.OTLPReceiver
	addr string
}

// span is a received span with the service that sent it.
type span struct {
	service               string
	traceID, id, parentID string
	name                  string
	events                []string
	failed                bool
	start, end            uint64
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	r := constellation.StartOTLPReceiver(t)
	return &receiver{OTLPReceiver: r, addr: r.Addr}
}

func spansOf(in []constellation.Span) []span {
	out := make([]span, 0, len(in))
	for _, s := range in {
		out = append(out, span{service: s.Service, traceID: s.TraceID, id: s.ID, parentID: s.ParentID, name: s.Name,
			events: s.Events, failed: s.Failed, start: s.Start, end: s.End})
	}
	return out
}

// trace returns the spans of one trace.
func (r *receiver) trace(id string) []span { return spansOf(r.Trace(id)) }

// traces returns the ids of the traces whose root span (no parent) the
// gateway sent.
func (r *receiver) rootTraces() []string {
	var out []string
	for _, s := range r.Spans() {
		if s.Service == "nereid-gateway" && s.ParentID == "" {
			out = append(out, s.TraceID)
		}
	}
	return out
}

// waitTrace waits until trace id holds at least n spans.
func (r *receiver) waitTrace(t *testing.T, id string, n int) []span {
	t.Helper()
	return spansOf(r.WaitTrace(t, id, n))
}

func byName(spans []span, name string) (span, bool) {
	for _, s := range spans {
		if s.name == name {
			return s, true
		}
	}
	return span{}, false
}

func mustSpan(t *testing.T, spans []span, name string) span {
	t.Helper()
	s, ok := byName(spans, name)
	if !ok {
		names := []string{}
		for _, s := range spans {
			names = append(names, s.service+":"+s.name)
		}
		t.Fatalf("no span %q among %v", name, names)
	}
	return s
}

func describe(spans []span) string {
	out := ""
	for _, s := range spans {
		out += fmt.Sprintf("\n  %s %s id=%s parent=%s events=%v failed=%v", s.service, s.name, s.id, s.parentID, s.events, s.failed)
	}
	return out
}

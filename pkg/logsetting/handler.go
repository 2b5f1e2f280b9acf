package logsetting

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

type requestIDKey struct{}

// WithRequestID marks ctx as being about the request id: lines logged with
// it carry request_id.
func WithRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// Handler is a slog.Handler that follows a Manager: a record is written
// when its level is on (Debug: log_verbose_level > 0, Info: log_info,
// Warn: log_warning, Error: log_error), in the current format. Records
// logged with a context of a traced request carry trace_id and span_id,
// and request_id when the context has one (WithRequestID).
type Handler struct {
	m    *Manager
	out  *lineWriter
	text slog.Handler // key=value attributes after Triton's line header
	json slog.Handler
}

// lineWriter puts the header of the record being written before the
// attributes the inner text handler writes in one Write.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	header []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	buf := append(l.header, p...)
	l.header = buf[:0]
	_, err := l.w.Write(buf)
	return len(p), err
}

// dropBuiltins leaves the text handler the message and the attributes,
// as key=value pairs (msg="..." first, so lines stay greppable as slog's
// text lines are): Handler writes time, level and the caller's file and
// line itself. The text handler is not asked to add the source, so an
// attribute a caller names "source" (a Triton backend's log lines carry
// source=backend) is the caller's own and stays.
func dropBuiltins(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 {
		switch a.Key {
		case slog.TimeKey, slog.LevelKey:
			return slog.Attr{}
		}
	}
	return a
}

// NewHandler returns a handler writing to w under m's settings.
func NewHandler(m *Manager, w io.Writer) *Handler {
	lw := &lineWriter{w: w}
	return &Handler{
		m:    m,
		out:  lw,
		text: slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: dropBuiltins}),
		json: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug, AddSource: true}),
	}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool {
	v := h.m.cur.Load()
	switch {
	case l >= slog.LevelError:
		return v.Error
	case l >= slog.LevelWarn:
		return v.Warning
	case l >= slog.LevelInfo:
		return v.Info
	}
	return v.VerboseLevel > 0
}

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		r.AddAttrs(slog.String("request_id", id))
	}
	v := h.m.cur.Load()
	if v.Format == FormatJSON {
		h.out.mu.Lock()
		defer h.out.mu.Unlock()
		return h.json.Handle(ctx, r)
	}
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.header = appendHeader(h.out.header[:0], v.Format, r)
	return h.text.Handle(ctx, r)
}

func levelLetter(l slog.Level) byte {
	switch {
	case l >= slog.LevelError:
		return 'E'
	case l >= slog.LevelWarn:
		return 'W'
	case l >= slog.LevelInfo:
		return 'I'
	}
	return 'V'
}

var pid = os.Getpid()

// appendHeader writes Triton's line header: "I1124 00:21:00.123456 42
// file.go:12] " (default) or "2026-11-24T00:21:00Z I file.go:12] "
// (ISO8601).
func appendHeader(b []byte, f Format, r slog.Record) []byte {
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	src := "?"
	if r.PC != 0 {
		fr, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		src = fmt.Sprintf("%s:%d", filepath.Base(fr.File), fr.Line)
	}
	if f == FormatISO8601 {
		b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05Z")
		b = append(b, ' ', levelLetter(r.Level), ' ')
	} else {
		b = append(b, levelLetter(r.Level))
		b = t.AppendFormat(b, "0102 15:04:05.000000")
		b = fmt.Appendf(b, " %d ", pid)
	}
	b = append(b, src...)
	return append(b, "] "...)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{m: h.m, out: h.out, text: h.text.WithAttrs(as), json: h.json.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{m: h.m, out: h.out, text: h.text.WithGroup(name), json: h.json.WithGroup(name)}
}

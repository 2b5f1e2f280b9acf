package builtin

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func init() {
	backend.Register("words", func(context.Context) (backend.Backend, error) { return words{}, nil })
}

// words is a small text model for the generate extension: it streams the
// words of its BYTES input text_input back as text_output, one response per
// word (every word after the first with its leading space, so that the
// responses concatenate to the text with its spacing normalised). The
// request parameter max_tokens bounds the number of words; delay_ms (or
// the model parameter token_delay_ms) waits before each word, as a
// language model takes time per token. A model that is not decoupled gets
// the words in one response.
type words struct{}

func (words) Finalize() error { return nil }

func (words) NewModel(_ context.Context, m backend.ModelInfo) (backend.Model, error) {
	var delay time.Duration
	if p, ok := m.Config.GetParameters()["token_delay_ms"]; ok {
		ms, err := strconv.ParseUint(p.GetStringValue(), 10, 32)
		if err != nil {
			return nil, tritonerr.InvalidArgf("words backend: model '%s': parameter 'token_delay_ms' must be a number of milliseconds, got '%s'", m.Name, p.GetStringValue())
		}
		delay = time.Duration(ms) * time.Millisecond
	}
	return decoupledModel{execute: func(p *producers, _ context.Context, r *backend.Request) error {
		return wordsExecute(p, r, delay)
	}}, nil
}

// intParam reads a numeric request parameter (JSON numbers arrive as
// int64, uint64 or float64).
func intParam(r *backend.Request, name string) (int64, bool, error) {
	v, ok := r.Parameters[name]
	if !ok {
		return 0, false, nil
	}
	switch n := v.(type) {
	case int64:
		return n, true, nil
	case uint64:
		return int64(min(n, 1<<62)), true, nil
	case float64:
		if n == float64(int64(n)) {
			return int64(n), true, nil
		}
	}
	return 0, false, tritonerr.InvalidArgf("words backend: parameter '%s' must be an integer, got %v", name, v)
}

func wordsExecute(p *producers, r *backend.Request, delay time.Duration) error {
	in := r.Input("text_input")
	if in == nil {
		return tritonerr.InvalidArgf("words backend: the request needs input 'text_input'")
	}
	count := int64(1)
	for _, d := range in.Shape {
		count *= d
	}
	elems, err := tensor.SplitBytes("text_input", "words", in.Data, count)
	if err != nil {
		return err
	}
	var text []string
	for _, e := range elems {
		text = append(text, string(e))
	}
	ws := strings.Fields(strings.Join(text, " "))
	if n, ok, err := intParam(r, "max_tokens"); err != nil {
		return err
	} else if ok {
		if n < 0 {
			return tritonerr.InvalidArgf("words backend: parameter 'max_tokens' must not be negative, got %d", n)
		}
		ws = ws[:min(int64(len(ws)), n)]
	}
	if ms, ok, err := intParam(r, "delay_ms"); err != nil {
		return err
	} else if ok {
		delay = time.Duration(max(ms, 0)) * time.Millisecond
	}
	for i := 1; i < len(ws); i++ {
		ws[i] = " " + ws[i]
	}
	text1 := func(s string) backend.Output {
		return backend.Output{Name: "text_output", DataType: tensor.Bytes, Shape: []int64{1}, Data: tensor.AppendBytesString(nil, s)}
	}
	if !r.Decoupled {
		for range ws {
			if !p.sleep(r, delay) {
				return tritonerr.New(tritonerr.Cancelled, "words backend: request cancelled")
			}
		}
		return r.Respond(text1(strings.Join(ws, "")))
	}
	p.run(r, func(s *backend.ResponseSender) {
		for _, w := range ws {
			if !p.sleep(r, delay) {
				return
			}
			if err := s.Send(0, text1(w)); err != nil {
				return
			}
		}
	})
	return nil
}

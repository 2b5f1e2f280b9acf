//go:build cgo

package cbackend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// ownershipModel loads the nownership test backend with a logger whose
// lines the test reads back.
func ownershipModel(t *testing.T) (backend.Model, func() []string) {
	t.Helper()
	dir, stub := buildBackends(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	l := NewLoader(Config{Directory: dir, ServerLibrary: stub, Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))})
	f, ok := l.Find("nownership", t.TempDir(), 1)
	if !ok {
		t.Fatal("nownership not found in the backend directory")
	}
	b, err := l.Factory(f)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Finalize() })
	m, err := b.NewModel(context.Background(), backend.ModelInfo{Name: "own", Version: 1, Dir: t.TempDir(), Config: identityConfig("own", "nownership")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Finalize() })
	messages := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		sc := bufio.NewScanner(bytes.NewReader(logs.Bytes()))
		for sc.Scan() {
			var line struct{ Msg string }
			if json.Unmarshal(sc.Bytes(), &line) == nil {
				out = append(out, line.Msg)
			}
		}
		logs.Reset()
		return out
	}
	return m, messages
}

// ownershipOutcome is what one scenario did: the backend's calls and what
// they returned, the responses, the statistics.
type ownershipOutcome struct {
	steps     []string
	responses []string
	requests  []bool
	batches   []int
}

// runOwnership runs one request of the scenario in mode on a new instance,
// finalized before the outcome is read (which waits for the backend's
// thread).
func runOwnership(t *testing.T, m backend.Model, messages func() []string, scenario, mode string, input []byte) (ownershipOutcome, error) {
	t.Helper()
	stats := &statsRecorder{}
	inst, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "own_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	out, execErr := executeOwnership(inst, scenario, mode, input)
	if err := inst.Finalize(); err != nil {
		t.Fatal(err)
	}
	out.collect(messages(), scenario, mode, stats)
	return out, execErr
}

// collect takes the scenario's steps from the log messages, and the
// statistics.
func (out *ownershipOutcome) collect(messages []string, scenario, mode string, stats *statsRecorder) {
	prefix := "ownership " + scenario + " " + mode + ": "
	for _, msg := range messages {
		if s, ok := strings.CutPrefix(msg, prefix); ok {
			out.steps = append(out.steps, s)
		}
	}
	stats.mu.Lock()
	out.requests, out.batches = slices.Clone(stats.requests), slices.Clone(stats.batches)
	stats.requests, stats.batches = nil, nil
	stats.mu.Unlock()
}

// executeOwnership executes one request of the scenario in mode.
func executeOwnership(inst backend.Instance, scenario, mode string, input []byte) (ownershipOutcome, error) {
	var out ownershipOutcome
	var mu sync.Mutex
	r := backend.NewRequest(context.Background(), func(_ *backend.Request, resp *backend.Response) {
		mu.Lock()
		defer mu.Unlock()
		s := "response"
		if resp.Final {
			s += " final"
		}
		if resp.FlagOnly {
			s += " flag"
		}
		if resp.Err != nil {
			s += " error " + resp.Err.Kind.String() + ": " + resp.Err.Msg
		}
		for _, o := range resp.Outputs {
			s += fmt.Sprintf(" %s[%d]=%s", o.Name, len(o.Data), o.Data)
		}
		out.responses = append(out.responses, s)
	})
	r.BatchSize = 1
	r.Inputs = []backend.Input{{Name: "INPUT0", DataType: tensor.FP32, Shape: []int64{1, int64(len(input) / 4)}, Data: input}}
	r.RequestedOutputs = []string{"OUTPUT0"}
	r.Parameters = map[string]any{"scenario": scenario, "mode": mode}
	err := inst.Execute(context.Background(), []*backend.Request{r})
	mu.Lock()
	defer mu.Unlock()
	return ownershipOutcome{responses: slices.Clone(out.responses)}, err
}

// TestOwnershipRules runs the ownership scenarios in Execute and on a
// thread during it, where the calls are recorded (exec.c), on a thread
// after Execute has returned, where each goes to Go at once, and split
// between the two (the calls after the request is answered made after
// Execute, which find the record replayed): every call returns the same
// in the four, the responses and statistics are the same, and the rules
// are Triton's.
func TestOwnershipRules(t *testing.T) {
	m, messages := ownershipModel(t)
	small := []byte("abcdefgh")
	big := bytes.Repeat([]byte("0123456789abcdef"), 1024) // above the size C allocates itself
	for _, tc := range []struct {
		scenario string
		input    []byte
		want     []string // steps, in order, among the others
		response string
	}{
		{"plain", small, []string{"stats: ok", "batch stats: ok", "send: ok", "release: ok"}, "response final OUTPUT0[8]=abcdefgh"},
		{"big", big, []string{"send: ok", "release: ok"}, "response final OUTPUT0[16384]=" + string(big)},
		{"release_first", small, []string{"release: ok", "buffer: ok", "send: ok"}, "response final OUTPUT0[8]=\a\a\a\a\a\a\a\a"},
		{"twice", small, []string{"send first: ok", "send second: Internal: response already sent for this request", "release: ok"},
			"response final OUTPUT0[8]=abcdefgh"},
		{"after_end", small, []string{"send first: ok", "release: ok", "buffer after: Invalid argument: output's request is no longer valid",
			"send after: Invalid argument: response's request is no longer valid"}, "response final OUTPUT0[8]=abcdefgh"},
		{"flag_alone", small, []string{
			"flags: Internal: model is not decoupled: the final flag alone cannot answer a request, it needs one response",
			"send: ok", "cancelled: false", "release: ok", "flags after: Invalid argument: response factory is no longer valid",
			"cancelled after: true", "factory delete: ok"}, "response final OUTPUT0[8]=abcdefgh"},
		{"nonfinal", small, []string{"flags not final: ok", "send not final: ok", "flags: ok", "release: ok",
			"flags after: Invalid argument: response factory is no longer valid"}, "response OUTPUT0[8]=abcdefgh"},
		{"reschedule", small, []string{
			"reschedule: Invalid argument: Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.",
			"send: ok", "release: ok"}, "response final OUTPUT0[8]=abcdefgh"},
		{"double_buffer", small, []string{"output: ok", "buffer again: Already exists: output 'OUTPUT0' already has a buffer", "send: ok"},
			"response final OUTPUT0[8]=abcdefgh"},
		{"missing_buffer", small, []string{"output: ok", "send: ok"}, "response final OUTPUT0[0]="},
		{"error", small, []string{"send: ok", "release: ok"}, "response final error INVALID_ARG: the backend refuses"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			var first ownershipOutcome
			for i, mode := range []string{"after", "inline", "during", "split"} {
				got, err := runOwnership(t, m, messages, tc.scenario, mode, tc.input)
				if err != nil {
					t.Fatalf("%s: Execute: %v", mode, err)
				}
				if len(got.responses) == 0 || got.responses[0] != tc.response {
					t.Errorf("%s: responses %.200q, want first %.200q", mode, got.responses, tc.response)
				}
				if !inOrder(got.steps, tc.want) {
					t.Errorf("%s: steps\n%s\nwant, in order, among them\n%s", mode, strings.Join(got.steps, "\n"), strings.Join(tc.want, "\n"))
				}
				if len(got.requests) == 0 || len(got.batches) == 0 {
					t.Errorf("%s: statistics %v %v not reported", mode, got.requests, got.batches)
				}
				if i == 0 {
					first = got
					continue
				}
				// The calls handled by Go at once are the reference.
				if !slices.Equal(got.steps, first.steps) || !slices.Equal(got.responses, first.responses) ||
					!slices.Equal(got.requests, first.requests) || !slices.Equal(got.batches, first.batches) {
					t.Errorf("%s differs from after:\n%s\n%.300q %v %v\nafter:\n%s\n%.300q %v %v", mode,
						strings.Join(got.steps, "\n"), got.responses, got.requests, got.batches,
						strings.Join(first.steps, "\n"), first.responses, first.requests, first.batches)
				}
			}
		})
	}
}

// inOrder reports whether want are elements of got, in order.
func inOrder(got, want []string) bool {
	i := 0
	for _, s := range got {
		if i < len(want) && s == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestFailedExecuteAfterASend: a backend that sends a response and then
// fails Execute without releasing its request hands the request back (the
// error is Execute's) while the response it sent stands, as with Triton;
// the instance goes on executing.
func TestFailedExecuteAfterASend(t *testing.T) {
	m, messages := ownershipModel(t)
	stats := &statsRecorder{}
	inst, err := m.NewInstance(context.Background(), backend.InstanceInfo{Name: "own_0", Kind: inference.ModelInstanceGroup_KIND_CPU, Stats: stats})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Finalize()
	got, err := executeOwnership(inst, "fail", "inline", []byte("abcdefgh"))
	got.collect(messages(), "fail", "inline", stats)
	if te := tritonerr.From(err); te == nil || te.Kind != tritonerr.Unavailable || te.Msg != "the backend fails the execution" {
		t.Fatalf("Execute: %v", err)
	}
	if !slices.Equal(got.responses, []string{"response final OUTPUT0[8]=abcdefgh"}) || !slices.Equal(got.steps, []string{"send: ok"}) {
		t.Fatalf("responses %q, steps %q", got.responses, got.steps)
	}
	for _, in := range []string{"ijklmnop", "qrstuvwx"} {
		got, err = executeOwnership(inst, "plain", "inline", []byte(in))
		if err != nil || !slices.Equal(got.responses, []string{"response final OUTPUT0[8]=" + in}) {
			t.Fatalf("after a failed Execute: %v %q", err, got.responses)
		}
	}
}

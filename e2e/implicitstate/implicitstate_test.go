// Package implicitstate tests implicit state management
// (sequence_batching.state) end to end: gateway, sequence router and
// executor as separate processes over real NATS and Redis, driven over
// HTTP, gRPC and the gRPC stream. The cases follow Triton's
// qa/L0_implicit_state where they need no ONNX/TensorRT/PyTorch model.
package implicitstate

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

var models = []string{
	"implicit_accumulate", "implicit_accumulate_zero", "implicit_accumulate_file", "implicit_accumulate_oldest",
	"no_implicit_state", "wrong_internal_state", "no_state_update", "nobatch_sequence_int32", "implicit_idle",
	"implicit_string",
}

type env struct {
	g    *constellation.Gateway
	grpc inference.GRPCInferenceServiceClient
}

var (
	once   sync.Once
	shared *env
)

// start runs one constellation for the package's tests: each test uses its
// own correlation ids.
func start(t *testing.T) *env {
	t.Helper()
	c := constellation.NewCluster(t)
	redis, _ := constellation.Redis(t)
	constellation.Start(t, "router", c.Bin.Path("nereid-sequence-router"), "--nats-url", c.NATSURL, "--redis-url", redis, "--id", "router0")
	repo := constellation.RepoPath(t, "e2e/implicitstate/testdata/model_repository")
	var extra []string
	for _, m := range append(models, "bad_initial_file", "bad_initial_dims") {
		extra = append(extra, "--load-model", m)
	}
	// bad_initial_* fail to load on purpose: the executor lists them.
	c.Executor(repo, "exec0", append(extra, "--exit-on-error", "false")...)
	e := &env{g: c.Gateway()}
	for _, m := range models {
		if !constellation.WaitFor(30*time.Second, func() bool {
			r, err := http.Get(e.g.HTTP() + "/v2/models/" + m + "/ready")
			if err != nil {
				return false
			}
			r.Body.Close()
			return r.StatusCode == 200
		}) {
			t.Fatalf("model %s not ready", m)
		}
	}
	conn, err := grpc.NewClient(e.g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e.grpc = inference.NewGRPCInferenceServiceClient(conn)
	return e
}

// seq is one request of a sequence: its INPUT values and flags.
type req struct {
	values     []int32
	start, end bool
	outputs    []string // requested outputs; none: all
	testCase   *int32
	noBatchDim bool
}

type result struct {
	outputs map[string][]int32
	shapes  map[string][]int64
	err     string
}

func httpInfer(t *testing.T, base, model string, id any, r req) result {
	t.Helper()
	params := map[string]any{"sequence_id": id}
	if r.start {
		params["sequence_start"] = true
	}
	if r.end {
		params["sequence_end"] = true
	}
	shape := []int{1, len(r.values)}
	if r.noBatchDim {
		shape = []int{len(r.values)}
	}
	inputs := []any{map[string]any{"name": "INPUT", "datatype": "INT32", "shape": shape, "data": r.values}}
	if r.testCase != nil {
		inputs = append(inputs, map[string]any{"name": "TEST_CASE", "datatype": "INT32", "shape": []int{1}, "data": []int32{*r.testCase}})
	}
	body := map[string]any{"parameters": params, "inputs": inputs}
	if len(r.outputs) > 0 {
		var outs []any
		for _, o := range r.outputs {
			outs = append(outs, map[string]any{"name": o})
		}
		body["outputs"] = outs
	}
	raw, _ := json.Marshal(body)
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post(base+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("http infer: %v", err)
	}
	defer resp.Body.Close()
	raw, _ = io.ReadAll(resp.Body)
	var out struct {
		Error   string `json:"error"`
		Outputs []struct {
			Name  string  `json:"name"`
			Shape []int64 `json:"shape"`
			Data  []int32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("bad body %s", raw)
	}
	res := result{outputs: map[string][]int32{}, shapes: map[string][]int64{}, err: out.Error}
	for _, o := range out.Outputs {
		res.outputs[o.Name], res.shapes[o.Name] = o.Data, o.Shape
	}
	return res
}

func grpcRequest(model string, id uint64, r req) *inference.ModelInferRequest {
	p := map[string]*inference.InferParameter{
		"sequence_id":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(id)}},
		"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: r.start}},
		"sequence_end":   {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: r.end}},
	}
	var raw []byte
	for _, v := range r.values {
		raw = binary.LittleEndian.AppendUint32(raw, uint32(v))
	}
	m := &inference.ModelInferRequest{ModelName: model, Parameters: p,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT", Datatype: "INT32", Shape: []int64{1, int64(len(r.values))}}},
		RawInputContents: [][]byte{raw}}
	for _, o := range r.outputs {
		m.Outputs = append(m.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: o})
	}
	return m
}

func grpcResult(resp *inference.ModelInferResponse, err error) result {
	res := result{outputs: map[string][]int32{}, shapes: map[string][]int64{}}
	if err != nil {
		res.err = err.Error()
		return res
	}
	for i, o := range resp.GetOutputs() {
		var v []int32
		b := resp.GetRawOutputContents()[i]
		for k := 0; k+4 <= len(b); k += 4 {
			v = append(v, int32(binary.LittleEndian.Uint32(b[k:])))
		}
		res.outputs[o.GetName()], res.shapes[o.GetName()] = v, o.GetShape()
	}
	return res
}

func equal(a, b []int32) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// accumulate is what the accumulator answers to a sequence of inputs when
// it starts from initial: the running element-wise sum, an element the
// state lacks counting as 0.
func accumulate(initial []int32, inputs [][]int32) [][]int32 {
	state := initial
	var out [][]int32
	for _, in := range inputs {
		next := make([]int32, len(in))
		for i, v := range in {
			next[i] = v
			if i < len(state) {
				next[i] += state[i]
			}
		}
		state = next
		out = append(out, next)
	}
	return out
}

// TestImplicitState shares one constellation between the cases.
func TestImplicitState(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The accumulator over the three protocols: variable dims (the state's
	// shape follows the input's), the output state returned when asked.
	inputs := [][]int32{{1}, {2}, {3, 4}, {5, 6, 7}, {1}, {8, 9}}
	want := accumulate(nil, inputs)
	t.Run("http", func(t *testing.T) {
		for i, in := range inputs {
			r := httpInfer(t, e.g.HTTP(), "implicit_accumulate", 100, req{values: in, start: i == 0, end: i == len(inputs)-1, outputs: []string{"OUTPUT", "OUTPUT_STATE"}})
			if r.err != "" || !equal(r.outputs["OUTPUT"], want[i]) || !equal(r.outputs["OUTPUT_STATE"], want[i]) {
				t.Fatalf("request %d: %+v, want %v", i, r, want[i])
			}
			if fmt.Sprint(r.shapes["OUTPUT_STATE"]) != fmt.Sprint([]int64{1, int64(len(in))}) {
				t.Fatalf("request %d: state shape %v", i, r.shapes["OUTPUT_STATE"])
			}
		}
	})
	t.Run("grpc", func(t *testing.T) {
		for i, in := range inputs {
			r := grpcResult(e.grpc.ModelInfer(ctx, grpcRequest("implicit_accumulate", 101, req{values: in, start: i == 0, end: i == len(inputs)-1, outputs: []string{"OUTPUT"}})))
			if r.err != "" || !equal(r.outputs["OUTPUT"], want[i]) {
				t.Fatalf("request %d: %+v, want %v", i, r, want[i])
			}
			if _, ok := r.outputs["OUTPUT_STATE"]; ok {
				t.Fatalf("request %d: state returned without being asked for", i)
			}
		}
	})
	t.Run("grpc stream", func(t *testing.T) {
		s, err := e.grpc.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range inputs {
			if err := s.Send(grpcRequest("implicit_accumulate_oldest", 102, req{values: in, start: i == 0, end: i == len(inputs)-1})); err != nil {
				t.Fatal(err)
			}
		}
		for i := range inputs {
			m, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if m.GetErrorMessage() != "" {
				t.Fatalf("request %d: %s", i, m.GetErrorMessage())
			}
			r := grpcResult(m.GetInferResponse(), nil)
			if !equal(r.outputs["OUTPUT"], want[i]) {
				t.Fatalf("request %d: %v, want %v", i, r.outputs, want[i])
			}
		}
		s.CloseSend()
	})

	t.Run("initial state", func(t *testing.T) {
		for _, tc := range []struct {
			model   string
			initial []int32
		}{
			{"implicit_accumulate_zero", []int32{0, 0, 0, 0}},
			{"implicit_accumulate_file", []int32{10, 20, 30, 40}},
		} {
			in := [][]int32{{1, 2, 3, 4}, {1, 1, 1, 1}, {5, 5, 5, 5}}
			want := accumulate(tc.initial, in)
			for round := range 2 { // a second sequence starts from the initial state again
				for i, v := range in {
					r := httpInfer(t, e.g.HTTP(), tc.model, 200+round, req{values: v, start: i == 0, end: i == len(in)-1})
					if r.err != "" || !equal(r.outputs["OUTPUT"], want[i]) {
						t.Fatalf("%s round %d request %d: %+v, want %v", tc.model, round, i, r, want[i])
					}
				}
			}
		}
	})

	t.Run("start resets", func(t *testing.T) {
		// A new START on a running sequence's id starts from the initial
		// state, not from the old sequence's.
		httpInfer(t, e.g.HTTP(), "implicit_accumulate", 300, req{values: []int32{7}, start: true})
		httpInfer(t, e.g.HTTP(), "implicit_accumulate", 300, req{values: []int32{7}})
		r := httpInfer(t, e.g.HTTP(), "implicit_accumulate", 300, req{values: []int32{1}, start: true})
		if r.err != "" || !equal(r.outputs["OUTPUT"], []int32{1}) {
			t.Fatalf("after a new START: %+v, want [1]", r)
		}
		r = httpInfer(t, e.g.HTTP(), "implicit_accumulate", 300, req{values: []int32{2}, end: true})
		if !equal(r.outputs["OUTPUT"], []int32{3}) {
			t.Fatalf("%+v, want [3]", r)
		}
		// After END the sequence and its state are gone.
		r = httpInfer(t, e.g.HTTP(), "implicit_accumulate", 300, req{values: []int32{2}})
		if !strings.Contains(r.err, "must specify the START flag") {
			t.Fatalf("after END: %+v", r)
		}
	})

	t.Run("idle timeout frees the state", func(t *testing.T) {
		httpInfer(t, e.g.HTTP(), "implicit_idle", 310, req{values: []int32{5}, start: true})
		// max_sequence_idle_microseconds is 300 ms: stay quiet well past it
		// (every accepted request restarts the idle clock), then look.
		timedOut := false
		for range 10 {
			time.Sleep(time.Second)
			r := httpInfer(t, e.g.HTTP(), "implicit_idle", 310, req{values: []int32{1}})
			if timedOut = strings.Contains(r.err, "must specify the START flag"); timedOut {
				break
			}
		}
		if !timedOut {
			t.Fatal("the sequence never timed out")
		}
		r := httpInfer(t, e.g.HTTP(), "implicit_idle", 310, req{values: []int32{4}, start: true})
		if r.err != "" || !equal(r.outputs["OUTPUT"], []int32{4}) {
			t.Fatalf("START after the timeout: %+v, want [4]", r)
		}
	})

	t.Run("request output not allowed", func(t *testing.T) {
		r := httpInfer(t, e.g.HTTP(), "nobatch_sequence_int32", 400, req{values: []int32{1}, start: true, end: true, outputs: []string{"OUTPUT_STATE"}, noBatchDim: true})
		if !strings.HasPrefix(r.err, "unexpected inference output 'OUTPUT_STATE' for model") {
			t.Fatalf("got %+v", r)
		}
		g := grpcResult(e.grpc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "nobatch_sequence_int32",
			Parameters: map[string]*inference.InferParameter{
				"sequence_id":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 401}},
				"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}},
			},
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT", Datatype: "INT32", Shape: []int64{1}}},
			RawInputContents: [][]byte{{1, 0, 0, 0}},
			Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT_STATE"}}}))
		if !strings.Contains(g.err, "unexpected inference output 'OUTPUT_STATE' for model 'nobatch_sequence_int32'") {
			t.Fatalf("grpc: %+v", g)
		}
	})

	t.Run("request output", func(t *testing.T) {
		r := httpInfer(t, e.g.HTTP(), "implicit_accumulate", 410, req{values: []int32{1}, start: true, end: true, outputs: []string{"OUTPUT_STATE", "OUTPUT"}})
		if r.err != "" || !equal(r.outputs["OUTPUT_STATE"], []int32{1}) || !equal(r.outputs["OUTPUT"], []int32{1}) {
			t.Fatalf("got %+v", r)
		}
	})

	t.Run("no update", func(t *testing.T) {
		one := int32(1)
		for i := range 12 {
			r := httpInfer(t, e.g.HTTP(), "no_state_update", 500, req{values: []int32{1}, start: i == 0, end: i == 11, testCase: &one, noBatchDim: true})
			if r.err != "" || !equal(r.outputs["OUTPUT"], []int32{1}) {
				t.Fatalf("request %d: %+v, want [1]", i, r)
			}
		}
	})

	t.Run("backend api errors", func(t *testing.T) {
		zero := int32(0)
		for model, want := range map[string]string{
			"no_implicit_state":    "unable to add state 'undefined_state'. State configuration is missing for model 'no_implicit_state'.",
			"wrong_internal_state": "state 'undefined_state' is not a valid state name.",
		} {
			r := httpInfer(t, e.g.HTTP(), model, 600, req{values: []int32{1}, start: true, end: true, testCase: &zero, noBatchDim: true})
			if r.err != want {
				t.Errorf("%s: error %q, want %q", model, r.err, want)
			}
		}
	})

	t.Run("concurrent sequences in batches", func(t *testing.T) {
		for _, model := range []string{"implicit_accumulate", "implicit_accumulate_oldest"} {
			const n, steps = 16, 8
			var wg sync.WaitGroup
			errs := make(chan string, n)
			for s := range n {
				wg.Go(func() {
					id := uint64(1000 + s)
					var ins [][]int32
					for k := range steps {
						// sequences of different widths: their states differ in shape
						w := 1 + s%3
						v := make([]int32, w)
						for j := range v {
							v[j] = int32(s*100 + k + j)
						}
						ins = append(ins, v)
					}
					want := accumulate(nil, ins)
					for k, in := range ins {
						r := grpcResult(e.grpc.ModelInfer(ctx, grpcRequest(model, id, req{values: in, start: k == 0, end: k == steps-1})))
						if r.err != "" || !equal(r.outputs["OUTPUT"], want[k]) {
							errs <- fmt.Sprintf("%s sequence %d request %d: %+v, want %v", model, id, k, r, want[k])
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for m := range errs {
				t.Error(m)
			}
		}
	})

	t.Run("string state with variable dims", func(t *testing.T) {
		// A STRING state concatenated element-wise, on a string sequence
		// id, over the gRPC stream: the state's BYTES framing and shape
		// change from request to request.
		s, err := e.grpc.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		steps := [][]string{{"a"}, {"b", "x"}, {"c", ""}, {"d", "y", "z"}}
		want := [][]string{{"a"}, {"ab", "x"}, {"abc", "x"}, {"abcd", "xy", "z"}}
		for i, in := range steps {
			var raw []byte
			for _, v := range in {
				raw = binary.LittleEndian.AppendUint32(raw, uint32(len(v)))
				raw = append(raw, v...)
			}
			if err := s.Send(&inference.ModelInferRequest{ModelName: "implicit_string",
				Parameters: map[string]*inference.InferParameter{
					"sequence_id":    {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "str-seq"}},
					"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: i == 0}},
					"sequence_end":   {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: i == len(steps)-1}},
				},
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT", Datatype: "BYTES", Shape: []int64{1, int64(len(in))}}},
				RawInputContents: [][]byte{raw},
				Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT_STATE"}},
			}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range steps {
			m, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if m.GetErrorMessage() != "" {
				t.Fatalf("request %d: %s", i, m.GetErrorMessage())
			}
			resp := m.GetInferResponse()
			var got []string
			b := resp.GetRawOutputContents()[0]
			for len(b) >= 4 {
				n := binary.LittleEndian.Uint32(b)
				got = append(got, string(b[4:4+n]))
				b = b[4+n:]
			}
			if resp.GetOutputs()[0].GetName() != "OUTPUT_STATE" || fmt.Sprint(got) != fmt.Sprint(want[i]) {
				t.Fatalf("request %d: %s %q, want OUTPUT_STATE %q", i, resp.GetOutputs()[0].GetName(), got, want[i])
			}
		}
		s.CloseSend()
	})

	t.Run("config endpoints", func(t *testing.T) {
		resp, err := http.Get(e.g.HTTP() + "/v2/models/implicit_accumulate_file/config")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var cfg struct {
			SequenceBatching struct {
				State []map[string]any `json:"state"`
			} `json:"sequence_batching"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(cfg.SequenceBatching.State)
		want := `[{"data_type":"TYPE_INT32","dims":[4],"initial_state":[{"data_file":"start_values","data_type":"TYPE_INT32","dims":[4],"name":"start values"}],"input_name":"INPUT_STATE","output_name":"OUTPUT_STATE","use_growable_memory":false,"use_same_buffer_for_input_output":false}]`
		if string(got) != want {
			t.Errorf("HTTP config state\n got %s\nwant %s", got, want)
		}
		g, err := e.grpc.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "implicit_accumulate_file"})
		if err != nil {
			t.Fatal(err)
		}
		st := g.GetConfig().GetSequenceBatching().GetState()
		if len(st) != 1 || st[0].GetInputName() != "INPUT_STATE" || st[0].GetOutputName() != "OUTPUT_STATE" ||
			len(st[0].GetInitialState()) != 1 || st[0].GetInitialState()[0].GetDataFile() != "start_values" || st[0].GetInitialState()[0].GetName() != "start values" {
			t.Errorf("gRPC config state %v", st)
		}
	})

	t.Run("load errors", func(t *testing.T) {
		resp, err := http.Post(e.g.HTTP()+"/v2/repository/index", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var idx []struct{ Name, State, Reason string }
		if err := json.NewDecoder(resp.Body).Decode(&idx); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"bad_initial_file": "initial_state setting expects 16 bytes, but the data provided from shortonly has 7 bytes.",
			"bad_initial_dims": "'initial_state' dim for input name 'INPUT_STATE' doesn't match 'state' dim description. 3 != 4",
		}
		for _, m := range idx {
			if w, ok := want[m.Name]; ok {
				if m.State != "UNAVAILABLE" || !strings.Contains(m.Reason, w) {
					t.Errorf("%s: %s %q, want UNAVAILABLE with %q", m.Name, m.State, m.Reason, w)
				}
				delete(want, m.Name)
			}
		}
		for m := range want {
			t.Errorf("%s missing from the repository index", m)
		}
	})
}

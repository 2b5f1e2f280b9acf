package observability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// Triton's trace file for the requests that do not take the unary path:
// gRPC streams (decoupled models and others), generate and
// generate_stream, sequences through the sequence router, and ensembles,
// whose steps are child traces.

// traceNode is one trace of a file with its parent, in file order.
type traceNode struct {
	id, parent uint64
	model      string
	requestID  string
	names      []string
	ns         []int64
}

// readTraceNodes reads a trace file's traces, in the order of their model
// records, with their parent_id.
func readTraceNodes(t *testing.T, path string) []*traceNode {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []traceRecord
	if err := json.Unmarshal(raw, &recs); err != nil {
		t.Fatalf("%s is not a JSON array of records: %v\n%s", path, err, raw)
	}
	byID := map[uint64]*traceNode{}
	var out []*traceNode
	for _, r := range recs {
		if r.ID == nil {
			t.Fatalf("record without an id: %+v", r)
		}
		n := byID[*r.ID]
		if n == nil {
			n = &traceNode{id: *r.ID}
			byID[*r.ID] = n
		}
		if r.ModelName != nil {
			n.model = *r.ModelName
			if r.RequestID != nil {
				n.requestID = *r.RequestID
			}
			if r.ParentID != nil {
				n.parent = *r.ParentID
			}
			out = append(out, n)
		}
		for _, ts := range r.Timestamps {
			n.names = append(n.names, ts.Name)
			n.ns = append(n.ns, ts.NS)
		}
	}
	if len(out) != len(byID) {
		t.Fatalf("%d traces have a model record, of %d in %s", len(out), len(byID), raw)
	}
	return out
}

func (n *traceNode) at(t *testing.T, name string, i int) int64 {
	t.Helper()
	for k, s := range n.names {
		if s == name {
			if i == 0 {
				return n.ns[k]
			}
			i--
		}
	}
	t.Fatalf("trace %d (%s) has no %s #%d: %v", n.id, n.model, name, i, n.names)
	return 0
}

// checkNode checks a trace's model, request id and timestamp names, and
// that the instants follow each other in the order given by chain (one
// machine's wall clock here).
func checkNode(t *testing.T, n *traceNode, model, requestID string, names []string, chain ...string) {
	t.Helper()
	if n.model != model || n.requestID != requestID {
		t.Fatalf("trace %d of model %q request %q, want %q %q", n.id, n.model, n.requestID, model, requestID)
	}
	if !slices.Equal(n.names, names) {
		t.Fatalf("trace %d (%s): timestamps %v, want %v", n.id, model, n.names, names)
	}
	for i := 1; i < len(chain); i++ {
		if a, b := n.at(t, chain[i-1], 0), n.at(t, chain[i], 0); b < a {
			t.Fatalf("trace %d (%s): %s (%d) before %s (%d)", n.id, model, chain[i], b, chain[i-1], a)
		}
	}
}

// checkSends checks that a trace has k sends (start, end) after its
// request started, each ending after it starts.
func checkSends(t *testing.T, n *traceNode, start, end string, k int) {
	t.Helper()
	for i := range k {
		s, e := n.at(t, start, i), n.at(t, end, i)
		if e < s || s < n.at(t, "REQUEST_START", 0) {
			t.Fatalf("trace %d send %d: %s %d, %s %d, REQUEST_START %d", n.id, i, start, s, end, e, n.at(t, "REQUEST_START", 0))
		}
	}
}

var (
	requestStamps = []string{"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
		"COMPUTE_END", "REQUEST_END"}
	chainGRPC = append(append([]string{"GRPC_WAITREAD_START", "GRPC_WAITREAD_END"}, requestStamps...), "GRPC_SEND_START", "GRPC_SEND_END")
	chainHTTP = append(append([]string{"HTTP_RECV_START", "HTTP_RECV_END"}, requestStamps...), "HTTP_SEND_START", "HTTP_SEND_END")
)

func repeated(pair []string, k int) []string {
	var out []string
	for range k {
		out = append(out, pair...)
	}
	return out
}

// tritonTraceSetups start a standalone server and a constellation
// (gateway, executor, and the sequence router) writing Triton's trace
// file, with models loaded.
func tritonTraceSetups(models ...string) []struct {
	name  string
	start func(t *testing.T, file string) *constellation.Gateway
} {
	var load []string
	for _, m := range models {
		load = append(load, "--load-model", m)
	}
	return []struct {
		name  string
		start func(t *testing.T, file string) *constellation.Gateway
	}{
		{"standalone", func(t *testing.T, file string) *constellation.Gateway {
			repo := constellation.RepoPath(t, "deploy/model_repository")
			return constellation.Standalone(t, repo, append(append(tritonTraceFileFlags(file), "--model-control-mode", "explicit"), load...)...)
		}},
		{"constellation", func(t *testing.T, file string) *constellation.Gateway {
			repo := constellation.RepoPath(t, "deploy/model_repository")
			c := constellation.NewCluster(t)
			// Neither the executor nor the router has tracing flags: the
			// gateway asks for the timestamps with the request.
			constellation.Start(t, "router", c.Bin.Path("nereid-sequence-router"), "--nats-url", c.NATSURL, "--id", "router-1")
			c.Executor(repo, "ex-1", load...)
			gw := c.Gateway(tritonTraceFileFlags(file)...)
			for _, m := range models {
				waitReady(t, gw.HTTP()+"/v2/models/"+m+"/ready")
			}
			return gw
		}},
	}
}

func stopForTrace(t *testing.T, gw *constellation.Gateway) {
	t.Helper()
	gw.Stop() // SIGTERM: what is gathered is written, and the file closed
	if !gw.Exited() {
		t.Fatalf("the server did not exit:\n%s", gw.Output())
	}
}

func le32(vs ...uint32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func postBody(t *testing.T, url, body string) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	return raw
}

// The requests of a ModelStreamInfer stream, to a model that is not
// decoupled and to a decoupled one, and generate and generate_stream to a
// decoupled model: each traced with its front end's timestamps, the
// executor's, and a send per response where each response is sent as it
// comes; no trace parameter reaches the client.
func TestTritonTraceStreamsAndGenerate(t *testing.T) {
	for _, setup := range tritonTraceSetups("simple", "repeat_int32", "text_words") {
		t.Run(setup.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "trace.json")
			gw := setup.start(t, file)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stream, err := grpcClient(t, gw.GRPC()).ModelStreamInfer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			zeros := make([]byte, 64)
			if err := stream.Send(&inference.ModelInferRequest{ModelName: "simple", Id: "stream-simple",
				Inputs: []*inference.ModelInferRequest_InferInputTensor{
					{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
					{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
				RawInputContents: [][]byte{zeros, zeros}}); err != nil {
				t.Fatal(err)
			}
			r, err := stream.Recv()
			if err != nil || r.GetErrorMessage() != "" || len(r.GetInferResponse().GetOutputs()) != 2 || len(r.GetInferResponse().GetParameters()) != 0 {
				t.Fatalf("simple on the stream: %v %v", r, err)
			}
			if err := stream.Send(&inference.ModelInferRequest{ModelName: "repeat_int32", Id: "stream-repeat",
				Inputs: []*inference.ModelInferRequest_InferInputTensor{
					{Name: "IN", Datatype: "INT32", Shape: []int64{3}},
					{Name: "DELAY", Datatype: "UINT32", Shape: []int64{3}},
					{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}}},
				RawInputContents: [][]byte{le32(4, 5, 6), le32(1, 1, 1), le32(0)}}); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				r, err := stream.Recv()
				if err != nil || r.GetErrorMessage() != "" || len(r.GetInferResponse().GetParameters()) != 0 {
					t.Fatalf("repeat_int32 response %d: %v %v", i, r, err)
				}
			}
			stream.CloseSend()
			if r, err := stream.Recv(); err != io.EOF {
				t.Fatalf("after the last response: %v %v", r, err)
			}

			events := 0
			sc := bufio.NewScanner(bytes.NewReader(postBody(t, gw.HTTP()+"/v2/models/text_words/generate_stream",
				`{"text_input": "traced three words", "delay_ms": 1}`)))
			for sc.Scan() {
				if line := sc.Text(); strings.HasPrefix(line, "data: ") {
					events++
					if strings.Contains(line, "nereid") || strings.Contains(line, "error") {
						t.Fatalf("event %s", line)
					}
				}
			}
			if events != 3 {
				t.Fatalf("%d events, want 3", events)
			}
			if one := postBody(t, gw.HTTP()+"/v2/models/text_words/generate", `{"text_input": "hello"}`); strings.Contains(string(one), "nereid") {
				t.Fatalf("generate: %s", one)
			}

			stopForTrace(t, gw)
			nodes := readTraceNodes(t, file)
			if len(nodes) != 4 {
				t.Fatalf("%d traces, want 4", len(nodes))
			}
			for i, n := range nodes {
				if n.id != uint64(i+1) || n.parent != 0 {
					t.Fatalf("trace %d: id %d parent %d", i, n.id, n.parent)
				}
			}
			// A model that is not decoupled, on a stream: as a unary request.
			checkNode(t, nodes[0], "simple", "stream-simple", grpcStamps, grpcStamps...)
			// A decoupled model: one set of the executor's timestamps, and
			// a send per response.
			sendsGRPC := repeated([]string{"GRPC_SEND_START", "GRPC_SEND_END"}, 3)
			checkNode(t, nodes[1], "repeat_int32", "stream-repeat", append(append([]string{"GRPC_WAITREAD_START", "GRPC_WAITREAD_END"}, requestStamps...), sendsGRPC...),
				chainGRPC[:len(chainGRPC)-2]...)
			checkSends(t, nodes[1], "GRPC_SEND_START", "GRPC_SEND_END", 3)
			sendsHTTP := repeated([]string{"HTTP_SEND_START", "HTTP_SEND_END"}, 3)
			checkNode(t, nodes[2], "text_words", "", append(append([]string{"HTTP_RECV_START", "HTTP_RECV_END"}, requestStamps...), sendsHTTP...),
				chainHTTP[:len(chainHTTP)-2]...)
			checkSends(t, nodes[2], "HTTP_SEND_START", "HTTP_SEND_END", 3)
			// generate: one response, sent once.
			checkNode(t, nodes[3], "text_words", "", httpStamps, chainHTTP...)
		})
	}
}

// Requests of a sequence model go through the sequence router to the
// executor: their traces have the executor's timestamps (QUEUE_START the
// router's receipt), over HTTP and gRPC, and so do those of a decoupled
// sequence model on a gRPC stream, with a send per response.
func TestTritonTraceSequence(t *testing.T) {
	for _, setup := range tritonTraceSetups("simple_sequence", "sequence_repeat_int32") {
		t.Run(setup.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "trace.json")
			gw := setup.start(t, file)
			out := postBody(t, gw.HTTP()+"/v2/models/simple_sequence/infer",
				`{"id":"seq-http","parameters":{"sequence_id":7,"sequence_start":true},"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[5]}]}`)
			if strings.Contains(string(out), "nereid") {
				t.Fatalf("response %s", out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := grpcClient(t, gw.GRPC()).ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple_sequence", Id: "seq-grpc",
				Parameters: map[string]*inference.InferParameter{
					"sequence_id":  {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 7}},
					"sequence_end": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}},
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT", Datatype: "INT32", Shape: []int64{1, 1}}},
				RawInputContents: [][]byte{le32(6)}})
			if err != nil || len(resp.GetParameters()) != 0 {
				t.Fatalf("gRPC: %v %v", resp, err)
			}
			stream, err := grpcClient(t, gw.GRPC()).ModelStreamInfer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&inference.ModelInferRequest{ModelName: "sequence_repeat_int32", Id: "seq-stream",
				Parameters: map[string]*inference.InferParameter{
					"sequence_id":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 9}},
					"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}},
					"sequence_end":   {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}},
				Inputs: []*inference.ModelInferRequest_InferInputTensor{
					{Name: "IN", Datatype: "INT32", Shape: []int64{2}},
					{Name: "DELAY", Datatype: "UINT32", Shape: []int64{1}}},
				RawInputContents: [][]byte{le32(1, 2), le32(1)}}); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				r, err := stream.Recv()
				if err != nil || r.GetErrorMessage() != "" || len(r.GetInferResponse().GetParameters()) != 0 {
					t.Fatalf("sequence_repeat_int32 response %d: %v %v", i, r, err)
				}
			}
			stream.CloseSend()
			if r, err := stream.Recv(); err != io.EOF {
				t.Fatalf("after the last response: %v %v", r, err)
			}
			stopForTrace(t, gw)
			nodes := readTraceNodes(t, file)
			if len(nodes) != 3 {
				t.Fatalf("%d traces, want 3", len(nodes))
			}
			checkNode(t, nodes[0], "simple_sequence", "seq-http", httpStamps, httpStamps...)
			checkNode(t, nodes[1], "simple_sequence", "seq-grpc", grpcStamps, grpcStamps...)
			checkNode(t, nodes[2], "sequence_repeat_int32", "seq-stream",
				append(append([]string{"GRPC_WAITREAD_START", "GRPC_WAITREAD_END"}, requestStamps...), repeated([]string{"GRPC_SEND_START", "GRPC_SEND_END"}, 2)...),
				chainGRPC[:len(chainGRPC)-2]...)
			checkSends(t, nodes[2], "GRPC_SEND_START", "GRPC_SEND_END", 2)
		})
	}
}

// An ensemble's request is one trace (its front end's timestamps,
// REQUEST_START, QUEUE_START, REQUEST_END: no compute of its own) and each
// step's request a child trace naming it as parent_id, with the
// executor's timestamps, written together: as Triton spawns a child trace
// per composing model's request. The steps are traced even though the
// step model's own setting is OFF, and a composing model's request is
// never sampled on its own.
func TestTritonTraceEnsemble(t *testing.T) {
	for _, setup := range tritonTraceSetups("simple", "simple_ensemble") {
		t.Run(setup.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "trace.json")
			gw := setup.start(t, file)
			if code, got := call(t, http.MethodPost, gw.HTTP()+"/v2/models/simple/trace/setting", `{"trace_level":["OFF"]}`); code != 200 {
				t.Fatalf("simple OFF: %d %v", code, got)
			}
			inferHTTP(t, gw.HTTP(), "not-traced") // simple itself
			body := `{"id":"ens-http",` + simpleBody[1:]
			out := postBody(t, gw.HTTP()+"/v2/models/simple_ensemble/infer", body)
			if strings.Contains(string(out), "nereid") {
				t.Fatalf("response %s", out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			zeros := make([]byte, 64)
			resp, err := grpcClient(t, gw.GRPC()).ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple_ensemble", Id: "ens-grpc",
				Inputs: []*inference.ModelInferRequest_InferInputTensor{
					{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
					{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
				RawInputContents: [][]byte{zeros, zeros}})
			if err != nil || len(resp.GetOutputs()) != 2 || len(resp.GetParameters()) != 0 {
				t.Fatalf("gRPC: %v %v", resp, err)
			}
			stopForTrace(t, gw)
			raw, _ := os.ReadFile(file)
			if n := strings.Count(string(raw), `"parent_id"`); n != 2 {
				t.Fatalf("%d parent_id fields, want 2:\n%s", n, raw)
			}
			nodes := readTraceNodes(t, file)
			if len(nodes) != 4 {
				t.Fatalf("%d traces, want 4:\n%s", len(nodes), raw)
			}
			ens := []string{"REQUEST_START", "QUEUE_START", "REQUEST_END"}
			for i, fe := range [][]string{
				{"HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"},
				{"GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"},
			} {
				root, step := nodes[2*i], nodes[2*i+1]
				names := append(append(append([]string{}, fe[:2]...), ens...), fe[2:]...)
				id := []string{"ens-http", "ens-grpc"}[i]
				checkNode(t, root, "simple_ensemble", id, names, names...)
				if root.parent != 0 || step.parent != root.id || step.id != root.id+1 {
					t.Fatalf("root %d (parent %d), step %d (parent %d)", root.id, root.parent, step.id, step.parent)
				}
				checkNode(t, step, "simple", id, requestStamps, requestStamps...)
				if step.at(t, "REQUEST_START", 0) < root.at(t, "QUEUE_START", 0) || step.at(t, "REQUEST_END", 0) > root.at(t, "REQUEST_END", 0) {
					t.Fatalf("the step's request is not within the ensemble's: %v %v / %v %v", step.names, step.ns, root.names, root.ns)
				}
			}
		})
	}
}

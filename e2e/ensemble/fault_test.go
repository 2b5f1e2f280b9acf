package ensemble

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// lostBound is how long after its executor is killed a step in flight on
// it may take to end the ensemble request: the bus's liveness probes with
// room for a loaded machine (as e2e/stateless's inflightBound), far below
// the gateway's deadline.
const lostBound = 20 * time.Second

func int32sOf(v []int32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func seq16From(base int32) []int32 {
	out := make([]int32, 16)
	for i := range out {
		out[i] = base + int32(i)
	}
	return out
}

// TestEnsembleStepExecutorKilled: ensembles whose second step runs on an
// executor that is killed (SIGKILL) while the step is in flight. A
// stateless step (chain_rerun's step_rerun) runs again on the executor
// that survives and the ensemble request gets its answer; a step whose
// model opts out of reruns (chain_kept's step_kept) fails the ensemble
// request with UNAVAILABLE saying the executor was lost, over HTTP and
// gRPC; a decoupled step's stream (repeat_pipeline's repeat_int32) ends
// with an error after the responses already sent. None waits for a
// deadline, and the next requests succeed on the survivor.
func TestEnsembleStepExecutorKilled(t *testing.T) {
	c := constellation.NewCluster(t)
	ens := c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/fault/ens"), "ex-ens")
	slow := c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/fault/slow"), "ex-slow")
	g := c.Gateway()
	for _, m := range []string{"chain_rerun", "chain_kept", "repeat_pipeline"} {
		if err := constellation.WaitHTTP(g.HTTP()+"/v2/models/"+m+"/ready", 200, 30*time.Second); err != nil {
			t.Fatalf("%s never became ready: %v\n%s\n%s", m, err, ens.Output(), slow.Output())
		}
	}
	inFlight := c.WatchInFlight()

	conn, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := inference.NewGRPCInferenceServiceClient(conn)
	httpc := &http.Client{Timeout: 2 * time.Minute}

	type result struct {
		model, via string
		input      []int32
		status     int // HTTP status; a gRPC OK / UNAVAILABLE as 200 / 503
		msg        string
		output     []int32
		err        error
	}
	viaHTTP := func(model string, input []int32) (r result) {
		r = result{model: model, via: "HTTP", input: input}
		body, _ := json.Marshal(map[string]any{"inputs": []any{
			map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{16}, "data": input}}})
		resp, err := httpc.Post(g.HTTP()+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(body))
		if err != nil {
			r.err = err
			return r
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Error   string `json:"error"`
			Outputs []struct {
				Data []int32 `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			r.err = fmt.Errorf("%d %q: %v", resp.StatusCode, raw, err)
			return r
		}
		r.status, r.msg = resp.StatusCode, out.Error
		if len(out.Outputs) == 1 {
			r.output = out.Outputs[0].Data
		}
		return r
	}
	viaGRPC := func(model string, input []int32) (r result) {
		r = result{model: model, via: "gRPC", input: input}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		resp, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: model,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{16}}},
			RawInputContents: [][]byte{int32sOf(input)}})
		if err != nil {
			r.status, r.msg = 503, err.Error()
			if !strings.Contains(err.Error(), "code = Unavailable") {
				r.err = err
			}
			return r
		}
		r.status = 200
		if out := resp.GetRawOutputContents(); len(out) == 1 {
			for b := out[0]; len(b) >= 4; b = b[4:] {
				r.output = append(r.output, int32(binary.LittleEndian.Uint32(b)))
			}
		}
		return r
	}

	results := make(chan result, 4)
	go func() { results <- viaHTTP("chain_rerun", seq16From(100)) }()
	go func() { results <- viaGRPC("chain_rerun", seq16From(200)) }()
	go func() { results <- viaHTTP("chain_kept", seq16From(300)) }()
	go func() { results <- viaGRPC("chain_kept", seq16From(400)) }()

	// A stream whose decoupled step sends one response, then waits ten
	// minutes before the next.
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer scancel()
	stream := func(delays []uint32) inference.GRPCInferenceService_ModelStreamInferClient {
		st, err := client.ModelStreamInfer(sctx)
		if err != nil {
			t.Fatal(err)
		}
		delay := make([]byte, 0, 4*len(delays))
		for _, d := range delays {
			delay = binary.LittleEndian.AppendUint32(delay, d)
		}
		err = st.Send(&inference.ModelInferRequest{ModelName: "repeat_pipeline", Id: "s",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "IN", Datatype: "INT32", Shape: []int64{int64(len(delays))}},
				{Name: "DELAY", Datatype: "UINT32", Shape: []int64{int64(len(delays))}},
				{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}}},
			RawInputContents: [][]byte{int32sOf([]int32{7, 8}[:len(delays)]), delay, make([]byte, 4)}})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := stream([]uint32{0, 600000})
	if r, err := st.Recv(); err != nil || r.GetErrorMessage() != "" || len(r.GetInferResponse().GetOutputs()) != 2 {
		t.Fatalf("first streamed response: %v %v", r, err)
	}
	if !constellation.WaitFor(time.Minute, func() bool { return inFlight() >= 4 }) {
		t.Fatalf("liveness traffic for %d requests, want the 4 steps in flight", inFlight())
	}

	// The survivor is up before the kill.
	probe := constellation.Addr(constellation.FreePort(t))
	fast := c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/fault/fast"), "ex-fast", "--probe-addr", probe)
	if err := constellation.WaitHTTP("http://"+probe+"/readyz", 200, 20*time.Second); err != nil {
		t.Fatalf("the second executor never became ready: %v\n%s", err, fast.Output())
	}
	slow.Kill()
	killed := time.Now()

	streamErr := make(chan string, 1)
	go func() {
		r, err := st.Recv()
		switch {
		case err != nil:
			streamErr <- "stream: " + err.Error()
		default:
			streamErr <- r.GetErrorMessage()
		}
	}()
	for range 4 {
		r := <-results
		took := time.Since(killed).Round(time.Millisecond)
		switch {
		case r.err != nil:
			t.Errorf("%s %s: %v (%v after the kill)", r.via, r.model, r.err, took)
		case r.model == "chain_rerun" && (r.status != 200 || !slices.Equal(r.output, r.input)):
			t.Errorf("%s chain_rerun after the kill: %d %q, output %v, want its input %v", r.via, r.status, r.msg, r.output, r.input)
		case r.model == "chain_kept" && (r.status != 503 || !strings.Contains(r.msg, "the executor handling it was lost") ||
			!strings.Contains(r.msg, "may or may not have run")):
			t.Errorf("%s chain_kept after the kill: %d %q, want 503 saying it was lost", r.via, r.status, r.msg)
		case took > lostBound:
			t.Errorf("%s %s ended %v after the kill, bound %v", r.via, r.model, took, lostBound)
		}
	}
	select {
	case msg := <-streamErr:
		if !strings.Contains(msg, "repeat_int32") || !strings.Contains(msg, "went away before its last response") {
			t.Errorf("the stream after the kill: %q, want an error saying repeat_int32's executor went away", msg)
		}
	case <-time.After(lostBound - time.Since(killed)):
		t.Errorf("the stream had no answer %v after the kill", lostBound)
	}

	// The next requests run on the survivor.
	if r := viaHTTP("chain_kept", seq16From(500)); r.status != 200 || !slices.Equal(r.output, r.input) {
		t.Errorf("chain_kept on the survivor: %d %q %v %v", r.status, r.msg, r.output, r.err)
	}
	if r := viaGRPC("chain_rerun", seq16From(600)); r.status != 200 || !slices.Equal(r.output, r.input) {
		t.Errorf("chain_rerun on the survivor: %d %q %v %v", r.status, r.msg, r.output, r.err)
	}
	st = stream([]uint32{0, 0})
	n := 0
	for {
		r, err := st.Recv()
		if err != nil || r.GetErrorMessage() != "" {
			t.Fatalf("repeat_pipeline on the survivor: %v %v after %d responses", r, err, n)
		}
		if n++; n == 2 {
			break
		}
	}
}

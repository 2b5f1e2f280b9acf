package ensemble

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
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

// waitReady waits until each model is ready at the gateway.
func waitReady(t *testing.T, g *constellation.Gateway, models ...string) {
	t.Helper()
	for _, m := range models {
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, err := http.Get(g.HTTP() + "/v2/models/" + m + "/ready")
			if err == nil {
				r.Body.Close()
				if r.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready", m)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestDecoupledEnsembleAcrossExecutors: repeat_pipeline and its
// pre/post-processing model identity_int32 are in executor ex-a's
// repository, its decoupled step repeat_int32 in ex-b's. Over a gRPC
// stream every response of repeat_int32 runs the post-processing step on
// ex-a and comes back as one ensemble response (OUT paired with its own
// IDX), then the final flag alone; generate_stream answers the same as
// events.
func TestDecoupledEnsembleAcrossExecutors(t *testing.T) {
	c := constellation.NewCluster(t)
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/exa"), "ex-a")
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/exb"), "ex-b")
	g := c.Gateway()
	waitReady(t, g, "repeat_int32", "identity_int32", "repeat_pipeline")

	conn, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := inference.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := []int32{11, 22, 33}
	raw := make([]byte, 4*len(in))
	for i, v := range in {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	wait := binary.LittleEndian.AppendUint32(nil, 300) // repeat_int32's request ends after the post-processing
	err = st.Send(&inference.ModelInferRequest{ModelName: "repeat_pipeline", Id: "s1",
		Parameters: map[string]*inference.InferParameter{
			"triton_enable_empty_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}},
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "IN", Datatype: "INT32", Shape: []int64{3}},
			{Name: "DELAY", Datatype: "UINT32", Shape: []int64{3}},
			{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}}},
		RawInputContents: [][]byte{raw, make([]byte, 12), wait}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("stream: %v after %v", err, got)
		}
		if r.GetErrorMessage() != "" {
			t.Fatalf("error response: %s", r.GetErrorMessage())
		}
		resp := r.GetInferResponse()
		if resp.GetParameters()["triton_final_response"].GetBoolParam() {
			if len(resp.GetOutputs()) != 0 {
				t.Errorf("final response with outputs: %v", resp)
			}
			break
		}
		vals := map[string]uint32{}
		for i, o := range resp.GetOutputs() {
			vals[o.GetName()] = binary.LittleEndian.Uint32(resp.GetRawOutputContents()[i])
		}
		got = append(got, fmt.Sprintf("%d/%d", vals["OUT"], vals["IDX"]))
	}
	slices.Sort(got)
	if want := []string{"11/0", "22/1", "33/2"}; !slices.Equal(got, want) {
		t.Errorf("gRPC stream: %v, want %v", got, want)
	}

	r, err := http.Post(g.HTTP()+"/v2/models/repeat_pipeline/generate_stream", "application/json",
		strings.NewReader(`{"IN":[5,6],"DELAY":[0,0],"WAIT":0}`))
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, ev)
		}
	}
	r.Body.Close()
	slices.Sort(events)
	want := []string{
		`{"model_name":"repeat_pipeline","model_version":"1","OUT":5,"IDX":0}`,
		`{"model_name":"repeat_pipeline","model_version":"1","OUT":6,"IDX":1}`}
	if !slices.Equal(events, want) {
		t.Errorf("generate_stream: %q, want %q", events, want)
	}
}

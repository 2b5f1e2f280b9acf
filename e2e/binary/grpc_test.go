package binary

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nereid-io/nereid/api/inference"
)

func grpcClient(t *testing.T, target string, opts ...grpc.DialOption) inference.GRPCInferenceServiceClient {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30))}, opts...)
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return inference.NewGRPCInferenceServiceClient(cc)
}

func fp32Request(model, id string, n int, seed byte) *inference.ModelInferRequest {
	data := make([]byte, 4*n)
	for i := range data {
		data[i] = byte(i) ^ seed
	}
	return &inference.ModelInferRequest{ModelName: model, Id: id,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1, int64(n)}}},
		RawInputContents: [][]byte{data}}
}

// TestStreamInfer: requests on one ModelStreamInfer stream are answered in
// order with their ids, whatever their sizes (small ones inline, large ones
// handed off, finishing out of order); a failed request is reported in
// error_message and the stream goes on; a client half-close ends it
// cleanly.
func TestStreamInfer(t *testing.T) {
	c := startCluster(t)
	client := grpcClient(t, c.gw.GRPC())
	stream, err := client.ModelStreamInfer(timeout(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{1, 3 << 18, 2, 16, 1 << 19, 7, 0, 1 << 18, 5}
	var sent []*inference.ModelInferRequest
	for i, n := range sizes {
		req := fp32Request("identity_fp32", "req-"+strconv.Itoa(i), n, byte(i))
		if i == 4 {
			// Declares 1<<19 elements but carries 12 bytes: it fails.
			req.RawInputContents[0] = req.RawInputContents[0][:12]
		}
		sent = append(sent, req)
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i, req := range sent {
		out, err := stream.Recv()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		resp := out.GetInferResponse()
		if resp.GetId() != req.GetId() {
			t.Fatalf("response %d has id %q, want %q: out of order", i, resp.GetId(), req.GetId())
		}
		if i == 4 {
			want := "[request id: req-4] input byte size mismatch for input 'INPUT0' for model 'identity_fp32'. Expected 2097152, got 12"
			if out.GetErrorMessage() != want {
				t.Fatalf("failed request: error_message %q, want %q", out.GetErrorMessage(), want)
			}
			continue
		}
		if out.GetErrorMessage() != "" || len(resp.GetRawOutputContents()) != 1 || !bytes.Equal(resp.GetRawOutputContents()[0], req.RawInputContents[0]) {
			t.Fatalf("response %d: %q, %d outputs", i, out.GetErrorMessage(), len(resp.GetRawOutputContents()))
		}
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after the half-close: %v, want io.EOF", err)
	}

	// triton_grpc_error: the failure ends the stream with its status.
	ctx := metadata.AppendToOutgoingContext(timeout(t, time.Minute), "triton_grpc_error", "true")
	stream, err = client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := fp32Request("identity_fp32", "bad", 4, 0)
	bad.RawInputContents[0] = bad.RawInputContents[0][:3]
	if err := stream.Send(bad); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument {
		t.Fatalf("with triton_grpc_error: %v", err)
	}
}

// modelStats reads a model's execution and success counts over HTTP.
func modelStats(t *testing.T, base, model string) (executions, successes int) {
	t.Helper()
	resp, err := http.Get(base + "/v2/models/" + model + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		ModelStats []struct {
			ExecutionCount int `json:"execution_count"`
			InferenceStats struct {
				Success struct {
					Count int `json:"count"`
				} `json:"success"`
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || len(s.ModelStats) != 1 {
		t.Fatalf("stats: %v %+v", err, s)
	}
	return s.ModelStats[0].ExecutionCount, s.ModelStats[0].InferenceStats.Success.Count
}

// TestStreamCancel: a client that cancels its stream stops the work that
// has not started. Six requests queue behind one 300 ms execution of the
// single-instance "slow" model; the client cancels during the first; only
// the first ever executes.
func TestStreamCancel(t *testing.T) {
	c := startCluster(t)
	client := grpcClient(t, c.gw.GRPC())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if err := stream.Send(fp32Request("slow", strconv.Itoa(i), 4, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(150 * time.Millisecond) // the first is executing, the others wait
	cancel()
	if out, err := stream.Recv(); status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v %v", out, err)
	}
	time.Sleep(1200 * time.Millisecond) // long enough for all six, had they run
	if execs, ok := modelStats(t, c.gw.HTTP(), "slow"); execs != 1 || ok != 1 {
		t.Fatalf("%d executions, %d successes after cancelling: the queued requests ran", execs, ok)
	}
	// The model still serves.
	resp, err := client.ModelInfer(timeout(t, 10*time.Second), fp32Request("slow", "after", 4, 9))
	if err != nil || resp.GetId() != "after" {
		t.Fatalf("after the cancelled stream: %v", err)
	}
}

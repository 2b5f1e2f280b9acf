package standalone

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
)

// TestLargeEnsembleRunsInExecutor: a request of 4 MiB (over the hand-off
// threshold) to a three-step identity chain whose steps one executor
// serves goes to that executor whole, as a small one does: with the
// in-process bus, one request crosses it; over NATS, the input is handed
// to the executor once (not once per step) and the output comes back
// intact.
func TestLargeEnsembleRunsInExecutor(t *testing.T) {
	const identity = `name: "identity_int32"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
`
	step := func(in, out string) string {
		return `{ model_name: "identity_int32" model_version: -1 input_map { key: "INPUT0" value: "` + in +
			`" } output_map { key: "OUTPUT0" value: "` + out + `" } }`
	}
	chain := `name: "chain3"
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
ensemble_scheduling { step [ ` + strings.Join([]string{step("INPUT0", "a"), step("a", "b"), step("b", "OUTPUT0")}, ", ") + ` ] }
`
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	for _, inProcess := range []bool{true, false} {
		t.Run("in-process bus "+strconv.FormatBool(inProcess), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.ModelRepository = writeRepo(t, map[string]string{"identity_int32": identity, "chain3": chain})
			cfg.Models = nil
			cfg.InProcessBus = inProcess
			srv, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			runReady(t, srv)
			base := "http://" + srv.Gateway().HTTPAddr()
			waitModel(t, base, "chain3")
			conn, err := grpc.NewClient(srv.Gateway().GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := inference.NewGRPCInferenceServiceClient(conn)

			before, handedBefore := srv.InProcess(), handedOff(t, srv)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "chain3",
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{int64(len(data) / 4)}}},
				RawInputContents: [][]byte{data}})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetRawOutputContents()) != 1 || !bytes.Equal(resp.GetRawOutputContents()[0], data) {
				t.Fatal("chain3's output differs from its input")
			}
			if inProcess {
				if carried := srv.InProcess() - before; carried != 1 {
					t.Errorf("the gateway's bus carried %d requests for a three-step chain on one executor, want 1 (the ensemble's)", carried)
				}
				return
			}
			if handed := handedOff(t, srv) - handedBefore; handed != float64(len(data)) {
				t.Errorf("the gateway handed %v input bytes to executors for a 4 MiB request, want %d (once, to the executor running every step)", handed, len(data))
			}
		})
	}
}

// handedOff is the gateway's nereid_handoff_bytes for requests, whatever
// the mode.
func handedOff(t *testing.T, srv *Server) float64 {
	t.Helper()
	r, err := http.Get("http://" + srv.Gateway().MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, `nereid_handoff_bytes{direction="request"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

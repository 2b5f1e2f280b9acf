package ensemble

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// TestSpreadStepsShareFiles: spread_chain's steps run on two executors of
// this node (identity_a on ex-a, identity_b on ex-b), and a 4 MiB tensor
// goes a → b → a, the first step's output read by two steps. Each step's
// executor maps its input where it lies — the request's body, or the
// response file of the step that produced it — so the gateway copies no
// tensor into a file of its own: every byte it hands off is named in a
// shared (kept) file. Over HTTP and gRPC. And chain_a, whose steps are
// both on ex-a, goes there whole with its large input.
func TestSpreadStepsShareFiles(t *testing.T) {
	c := constellation.NewCluster(t)
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/spread-a"), "ex-a")
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/spread-b"), "ex-b")
	g := c.Gateway()
	waitReady(t, g, "identity_a", "identity_b", "spread_chain", "chain_a")

	const n = 1 << 20 // INT32 values: 4 MiB, over the hand-off threshold
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(i*2654435761))
	}
	// Four steps read a 4 MiB tensor each: the request's input, the first
	// step's output twice, the second's once.
	const stepInputs = 4 * 4 * n

	check := func(t *testing.T, how string, infer func() [][]byte) {
		before := handoffBytes(t, g)
		outs := infer()
		if len(outs) != 2 || !bytes.Equal(outs[0], data) || !bytes.Equal(outs[1], data) {
			t.Fatalf("%s: outputs differ from the input (%d outputs)", how, len(outs))
		}
		after := handoffBytes(t, g)
		kept := after[`direction="request",mode="kept"`] - before[`direction="request",mode="kept"`]
		copied := after[`direction="request",mode="file"`] - before[`direction="request",mode="file"`]
		if kept != stepInputs || copied != 0 {
			t.Errorf("%s: the steps' inputs were named in kept files for %v bytes and copied into new files for %v; want %d and 0",
				how, kept, copied, stepInputs)
		}
	}

	t.Run("HTTP", func(t *testing.T) {
		check(t, "HTTP", func() [][]byte {
			header, err := json.Marshal(map[string]any{
				"inputs": []any{map[string]any{"name": "INPUT0", "datatype": "INT32", "shape": []int{n},
					"parameters": map[string]any{"binary_data_size": len(data)}}},
				"outputs": []any{
					map[string]any{"name": "OUTPUT0", "parameters": map[string]any{"binary_data": true}},
					map[string]any{"name": "OUTPUT1", "parameters": map[string]any{"binary_data": true}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequest(http.MethodPost, g.HTTP()+"/v2/models/spread_chain/infer", bytes.NewReader(append(header, data...)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(header)))
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Body.Close()
			body, err := io.ReadAll(r.Body)
			if err != nil || r.StatusCode != http.StatusOK {
				t.Fatalf("HTTP: %d %v %.300s", r.StatusCode, err, body)
			}
			hl, err := strconv.Atoi(r.Header.Get("Inference-Header-Content-Length"))
			if err != nil || hl > len(body) {
				t.Fatalf("HTTP: header length %q", r.Header.Get("Inference-Header-Content-Length"))
			}
			var resp struct {
				Outputs []struct {
					Name       string `json:"name"`
					Parameters struct {
						Size int `json:"binary_data_size"`
					} `json:"parameters"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(body[:hl], &resp); err != nil {
				t.Fatal(err)
			}
			var outs [][]byte
			rest := body[hl:]
			for _, o := range resp.Outputs {
				if o.Parameters.Size > len(rest) {
					t.Fatalf("HTTP: output %s of %d bytes, %d left", o.Name, o.Parameters.Size, len(rest))
				}
				outs = append(outs, rest[:o.Parameters.Size])
				rest = rest[o.Parameters.Size:]
			}
			return outs
		})
	})

	// chain_a's two steps are both on ex-a: the request goes there whole,
	// its input handed off once, and neither step's tensors leave ex-a
	// (identity outputs are named where the input lies).
	t.Run("whole on one executor", func(t *testing.T) {
		conn, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		before := handoffBytes(t, g)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := inference.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "chain_a",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{n}}},
			RawInputContents: [][]byte{data}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetRawOutputContents()) != 1 || !bytes.Equal(resp.GetRawOutputContents()[0], data) {
			t.Fatal("chain_a: the output differs from the input")
		}
		after := handoffBytes(t, g)
		var sent, received float64
		for labels, v := range after {
			if strings.HasPrefix(labels, `direction="request"`) {
				sent += v - before[labels]
			} else {
				received += v - before[labels]
			}
		}
		if sent != float64(len(data)) || received != float64(len(data)) {
			t.Errorf("chain_a: %v bytes handed to executors and %v back, want %d each (one request for both steps)", sent, received, len(data))
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		conn, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := inference.NewGRPCInferenceServiceClient(conn)
		check(t, "gRPC", func() [][]byte {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "spread_chain",
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{n}}},
				Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}, {Name: "OUTPUT1"}},
				RawInputContents: [][]byte{data}})
			if err != nil {
				t.Fatal(err)
			}
			return resp.GetRawOutputContents()
		})
	})
}

// handoffBytes are the gateway's nereid_handoff_bytes, by their labels.
func handoffBytes(t *testing.T, g *constellation.Gateway) map[string]float64 {
	t.Helper()
	r, err := http.Get(g.Metrics())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "nereid_handoff_bytes{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			t.Fatalf("metric line %q", sc.Text())
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", sc.Text(), err)
		}
		out[labels] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(fmt.Errorf("reading %s: %w", g.Metrics(), err))
	}
	return out
}

package cbackend

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

// compileBackend compiles one C test backend of
// services/executor/internal/cbackend/testdata/backends into backendDir
// under its installed name, against bin/libtritonserver.so.
func compileBackend(t *testing.T, backendDir, name, file string) {
	t.Helper()
	bin, err := constellation.Build()
	if err != nil {
		t.Fatal(err)
	}
	src := constellation.RepoPath(t, "services/executor/internal/cbackend")
	out := filepath.Join(backendDir, name, "libtriton_"+name+".so")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cc", "-Wall", "-Werror", "-shared", "-fPIC", "-I"+filepath.Join(src, "include"), "-o", out,
		filepath.Join(src, "testdata", "backends", file), "-L"+bin.Dir, "-ltritonserver", "-lpthread")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", file, err, b)
	}
}

// writeModel writes a model's config.pbtxt (and an empty version 1) into repo.
func writeModel(t *testing.T, repo, name, config string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(repo, name, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

const blsDecoupledConfig = `
name: "cblsdec"
backend: "nblsdec"
max_batch_size: 0
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [1] }]
output [{ name: "OUTPUT0", data_type: TYPE_INT32, dims: [-1] }]
`

// tritonErrorCancelled is TRITONSERVER_ERROR_CANCELLED.
const tritonErrorCancelled = 7

// blsOutcome is what the BLS test backend (blsdecoupled.c) reports of its
// call to the decoupled model.
type blsOutcome struct {
	values     []int32
	responses  int64
	starts     int64
	finalAlone bool
	errorCode  int64
}

// TestBLSToDecoupledModel: the BLS test backend (cblsdec, on an executor
// of its own) calls the decoupled C backend (cdec, on another executor
// process) through TRITONSERVER_ServerInferAsync. Each of cdec's N
// responses reaches the caller's response callback in order, each one's
// output through the caller's allocator (its start function once per
// response), then the final flag alone (a null response with
// TRITONSERVER_RESPONSE_COMPLETE_FINAL), then the request's release; N
// beyond the stream's window included. A call the backend cancels with
// TRITONSERVER_InferenceRequestCancel from its K-th response's callback
// gets no response after it, and ends with a CANCELLED final response.
// Over HTTP and gRPC through a gateway.
func TestBLSToDecoupledModel(t *testing.T) {
	backendDir, repo := setup(t)
	compileBackend(t, backendDir, "nblsdec", "blsdecoupled.c")
	writeModel(t, repo, "cdec", decoupledConfig)
	writeModel(t, repo, "cblsdec", blsDecoupledConfig)
	c := constellation.NewCluster(t)
	dec := c.Executor(repo, "exec-dec", "--backend-directory", backendDir, "--load-model", "cdec")
	bls := c.Executor(repo, "exec-bls", "--backend-directory", backendDir, "--load-model", "cblsdec")
	gw := c.Gateway()
	for _, m := range []string{"cdec", "cblsdec"} {
		if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/"+m+"/ready", 200, 30*time.Second); err != nil {
			t.Fatalf("model %s: %v\n%s\n%s", m, err, dec.Output(), bls.Output())
		}
	}
	cc, err := grpc.NewClient(gw.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := inference.NewGRPCInferenceServiceClient(cc)

	httpCall := func(t *testing.T, n int32, cancelAfter int64) blsOutcome {
		params := ""
		if cancelAfter > 0 {
			params = fmt.Sprintf(`,"parameters":{"cancel_after":%d}`, cancelAfter)
		}
		code, body := post(t, gw.HTTP()+"/v2/models/cblsdec/infer",
			fmt.Sprintf(`{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[%d]}]%s}`, n, params))
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var r struct {
			Outputs []struct {
				Name  string  `json:"name"`
				Shape []int64 `json:"shape"`
				Data  []int32 `json:"data"`
			} `json:"outputs"`
			Parameters struct {
				Responses  int64 `json:"bls_responses"`
				Starts     int64 `json:"bls_starts"`
				FinalAlone bool  `json:"bls_final_alone"`
				ErrorCode  int64 `json:"bls_error_code"`
			} `json:"parameters"`
		}
		if err := json.Unmarshal(body, &r); err != nil || len(r.Outputs) != 1 || r.Outputs[0].Name != "OUTPUT0" {
			t.Fatalf("response %s: %v", body, err)
		}
		p := r.Parameters
		return blsOutcome{values: r.Outputs[0].Data, responses: p.Responses, starts: p.Starts, finalAlone: p.FinalAlone, errorCode: p.ErrorCode}
	}
	grpcCall := func(t *testing.T, n int32, cancelAfter int64) blsOutcome {
		req := &inference.ModelInferRequest{
			ModelName:        "cblsdec",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}}},
			RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(n))},
		}
		if cancelAfter > 0 {
			req.Parameters = map[string]*inference.InferParameter{"cancel_after": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: cancelAfter}}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := client.ModelInfer(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetOutputs()) != 1 || len(resp.GetRawOutputContents()) != 1 {
			t.Fatalf("response %v", resp)
		}
		raw := resp.GetRawOutputContents()[0]
		out := blsOutcome{values: make([]int32, len(raw)/4)}
		for i := range out.values {
			out.values[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		p := resp.GetParameters()
		out.responses, out.starts = p["bls_responses"].GetInt64Param(), p["bls_starts"].GetInt64Param()
		out.finalAlone, out.errorCode = p["bls_final_alone"].GetBoolParam(), p["bls_error_code"].GetInt64Param()
		return out
	}

	for proto, call := range map[string]func(*testing.T, int32, int64) blsOutcome{"HTTP": httpCall, "gRPC": grpcCall} {
		t.Run(proto, func(t *testing.T) {
			for _, n := range []int32{0, 1, 5, 200} {
				t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
					got := call(t, n, 0)
					if got.responses != int64(n) || got.starts != int64(n) || !got.finalAlone || got.errorCode != -1 || len(got.values) != int(n) {
						t.Fatalf("n=%d: %+v", n, got)
					}
					for i, v := range got.values {
						if v != int32(i) {
							t.Fatalf("response %d carries %d", i, v)
						}
					}
				})
			}
			t.Run("cancel", func(t *testing.T) {
				got := call(t, 10000, 3)
				if got.responses != 3 || got.finalAlone || got.errorCode != tritonErrorCancelled || len(got.values) != 3 {
					t.Fatalf("cancelled after 3: %+v", got)
				}
			})
		})
	}
}

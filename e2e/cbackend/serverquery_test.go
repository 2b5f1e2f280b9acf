package cbackend

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

const serverQueryConfig = `
name: "csrvq"
backend: "nsrvq"
max_batch_size: 0
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [1] }]
output [{ name: "REPORT", data_type: TYPE_UINT8, dims: [-1] }]
`

// serverReport is what the server query test backend (serverquery.c)
// reports.
type serverReport struct {
	Server            json.RawMessage `json:"server"`
	Metadata          json.RawMessage `json:"metadata"`
	Config            json.RawMessage `json:"config"`
	ConfigV2          string          `json:"config_v2"`
	Index             json.RawMessage `json:"index"`
	Stats             json.RawMessage `json:"stats"`
	BatchCid          uint32          `json:"batch_cid"`
	BatchSelf         uint32          `json:"batch_self"`
	Metrics           string          `json:"metrics"`
	InitMetadataError string          `json:"init_metadata_error"`
	BLS               struct {
		ResponseID      string `json:"response_id"`
		ResponseModel   string `json:"response_model"`
		ResponseVersion int64  `json:"response_version"`
		RequestStart    int    `json:"request_start"`
		RequestEnd      int    `json:"request_end"`
		QueueInputs     int    `json:"queue_inputs"`
		BackendOutputs  int    `json:"backend_outputs"`
		InputTensor     string `json:"input_tensor"`
		ParameterType   string `json:"parameter_type"`
	} `json:"bls"`
}

// sameJSON fails unless a and b are the same JSON value.
func sameJSON(t *testing.T, what string, a, b []byte) {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v: %s", what, err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v: %s", what, err, b)
	}
	if !reflect.DeepEqual(x, y) {
		t.Errorf("%s from the backend:\n%s\nfrom the gateway:\n%s", what, a, b)
	}
}

// TestServerQueriesFromABackend: a C backend (csrvq, on an executor of its
// own) asks the server, from its Execute, for the server's metadata, the
// metadata, configuration (JSON config version 1; version 2 refused with
// Triton's message), statistics and batch properties of a model served by
// another executor (cid), the index of ready models, and the metrics
// text, and makes a BLS call to cid built with the request accessors and
// setters (id, flags, correlation ids, priorities, timeout, cancellation,
// a double parameter, inputs and outputs added and removed, a raw input
// whose name, datatype and shape come from cid's configuration, data by
// host policy and by buffer attributes) carrying a trace of its own (its
// activity, tensor and release callbacks called). What it got equals what
// the gateway's HTTP API answers a client. Over HTTP and gRPC.
func TestServerQueriesFromABackend(t *testing.T) {
	backendDir, repo := setup(t)
	compileBackend(t, backendDir, "nsrvq", "serverquery.c")
	writeModel(t, repo, "csrvq", serverQueryConfig)
	c := constellation.NewCluster(t)
	a := c.Executor(repo, "exec-cid", "--backend-directory", backendDir, "--load-model", "cid")
	b := c.Executor(repo, "exec-srvq", "--backend-directory", backendDir, "--load-model", "csrvq")
	gw := c.Gateway()
	for _, m := range []string{"cid", "csrvq"} {
		if err := constellation.WaitHTTP(gw.HTTP()+"/v2/models/"+m+"/ready", 200, 30*time.Second); err != nil {
			t.Fatalf("model %s: %v\n%s\n%s", m, err, a.Output(), b.Output())
		}
	}
	for range 3 {
		if code, body := post(t, gw.HTTP()+"/v2/models/cid/infer", `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"data":[1,2]}]}`); code != 200 {
			t.Fatalf("cid: %d %s", code, body)
		}
	}
	cc, err := grpc.NewClient(gw.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := inference.NewGRPCInferenceServiceClient(cc)

	httpCall := func(t *testing.T) []byte {
		code, body := post(t, gw.HTTP()+"/v2/models/csrvq/infer", `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[0]}]}`)
		if code != 200 {
			t.Fatalf("%d %s\n%s", code, body, b.Output())
		}
		var r struct {
			Outputs []struct {
				Data []int `json:"data"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(body, &r); err != nil || len(r.Outputs) != 1 {
			t.Fatalf("response %s: %v", body, err)
		}
		out := make([]byte, len(r.Outputs[0].Data))
		for i, v := range r.Outputs[0].Data {
			out[i] = byte(v)
		}
		return out
	}
	grpcCall := func(t *testing.T) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := client.ModelInfer(ctx, &inference.ModelInferRequest{
			ModelName:        "csrvq",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}}},
			RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, 0)},
		})
		if err != nil {
			t.Fatalf("%v\n%s", err, b.Output())
		}
		if len(resp.GetRawOutputContents()) != 1 {
			t.Fatalf("response %v", resp)
		}
		return resp.GetRawOutputContents()[0]
	}

	for _, tc := range []struct {
		proto string
		call  func(*testing.T) []byte
	}{{"HTTP", httpCall}, {"gRPC", grpcCall}} {
		t.Run(tc.proto, func(t *testing.T) {
			_, stats := get(t, gw.HTTP()+"/v2/models/cid/stats")
			raw := tc.call(t)
			var r serverReport
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatalf("report %s: %v", raw, err)
			}
			_, server := get(t, gw.HTTP()+"/v2")
			sameJSON(t, "server metadata", r.Server, server)
			_, md := get(t, gw.HTTP()+"/v2/models/cid")
			sameJSON(t, "model metadata", r.Metadata, md)
			_, cfg := get(t, gw.HTTP()+"/v2/models/cid/config")
			sameJSON(t, "model config", r.Config, cfg)
			_, idx := post(t, gw.HTTP()+"/v2/repository/index", `{"ready":true}`)
			sameJSON(t, "ready index", r.Index, idx)
			// The backend asked before its BLS call to cid: the statistics
			// the gateway gave just before the call.
			sameJSON(t, "model statistics", r.Stats, stats)
			if want := "model configuration version 2 not supported, supported versions are: 1"; r.ConfigV2 != want {
				t.Errorf("config version 2: %q, want %q", r.ConfigV2, want)
			}
			const batchUnknown, batchFirstDim = 1, 2
			if r.BatchCid != batchFirstDim || r.BatchSelf != batchUnknown {
				t.Errorf("batch properties: cid %d (want FIRST_DIM), csrvq %d (want UNKNOWN)", r.BatchCid, r.BatchSelf)
			}
			if !strings.Contains(r.Metrics, "# TYPE nereid_nats_round_trip_seconds histogram") {
				t.Errorf("metrics text lacks the executor's families:\n%s", r.Metrics)
			}
			if r.InitMetadataError == "none" || r.InitMetadataError == "" {
				t.Errorf("the model's own metadata was served during its initialization: %q", r.InitMetadataError)
			}
			bls := r.BLS
			if bls.ResponseID != "bls-1" || bls.ResponseModel != "cid" || bls.ResponseVersion != 1 {
				t.Errorf("BLS response id %q, model %q version %d", bls.ResponseID, bls.ResponseModel, bls.ResponseVersion)
			}
			if bls.RequestStart != 1 || bls.RequestEnd != 1 || bls.QueueInputs != 1 || bls.BackendOutputs != 1 {
				t.Errorf("trace callbacks: %+v", bls)
			}
			// The raw input took cid's input's name and datatype, and the
			// shape [1, 3] (batch dimension, 12 bytes of FP32).
			if bls.InputTensor != "INPUT0/FP32/12/2" || bls.ParameterType != "DOUBLE" {
				t.Errorf("traced input %q, parameter type %q", bls.InputTensor, bls.ParameterType)
			}
		})
	}
}

package ensemble

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/e2e/constellation"
)

func int32s(f func(i int) int32) []byte {
	b := make([]byte, 64)
	for i := 0; i < 16; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(f(i)))
	}
	return b
}

// TestEnsembleAcrossExecutors: simple_ensemble and nested_ensemble are in
// executor ex-a's repository, simple only in ex-b's; the gateway validates
// them against the constellation's catalog and runs their steps on ex-b,
// over HTTP and gRPC.
func TestEnsembleAcrossExecutors(t *testing.T) {
	c := constellation.NewCluster(t)
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/exa"), "ex-a")
	c.Executor(constellation.RepoPath(t, "e2e/ensemble/testdata/exb"), "ex-b")
	g := c.Gateway()
	for _, m := range []string{"simple", "simple_ensemble", "nested_ensemble"} {
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

	for _, model := range []string{"simple_ensemble", "nested_ensemble"} {
		body := `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
			`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`
		r, err := http.Post(g.HTTP()+"/v2/models/"+model+"/infer", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		var resp struct {
			Outputs []struct {
				Name string  `json:"name"`
				Data []int32 `json:"data"`
			} `json:"outputs"`
		}
		err = json.NewDecoder(r.Body).Decode(&resp)
		r.Body.Close()
		if err != nil || r.StatusCode != http.StatusOK || len(resp.Outputs) != 2 {
			t.Fatalf("%s over HTTP: %d %v %+v", model, r.StatusCode, err, resp)
		}
		for _, o := range resp.Outputs {
			for i, v := range o.Data {
				want := int32(i + 1)
				if o.Name == "OUTPUT1" {
					want = int32(i - 1)
				}
				if v != want {
					t.Fatalf("%s over HTTP: %s = %v", model, o.Name, o.Data)
				}
			}
		}
	}

	conn, err := grpc.NewClient(g.GRPC(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := inference.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "nested_ensemble",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
		RawInputContents: [][]byte{int32s(func(i int) int32 { return int32(i) }), int32s(func(int) int32 { return 2 })}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(resp.GetRawOutputContents()) != fmt.Sprint([][]byte{int32s(func(i int) int32 { return int32(i + 2) }), int32s(func(i int) int32 { return int32(i - 2) })}) {
		t.Errorf("nested_ensemble over gRPC: %v", resp)
	}
}

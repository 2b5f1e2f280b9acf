package respcache

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

func baseRequest() *inference.ModelInferRequest {
	return &inference.ModelInferRequest{
		ModelName: "m",
		Id:        "req-1",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "A", Datatype: "INT32", Shape: []int64{1, 2}},
			{Name: "B", Datatype: "FP32", Shape: []int64{2}},
		},
		RawInputContents: [][]byte{{1, 0, 0, 0, 2, 0, 0, 0}, {0, 0, 128, 63, 0, 0, 0, 64}},
	}
}

func TestSum(t *testing.T) {
	base, err := Sum(baseRequest(), "1", 0)
	if err != nil {
		t.Fatal(err)
	}
	param := func(v any) *inference.InferParameter {
		switch v := v.(type) {
		case bool:
			return &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: v}}
		case int64:
			return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: v}}
		case string:
			return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: v}}
		}
		panic(v)
	}
	cases := []struct {
		name    string
		version string
		gen     uint64
		change  func(r *inference.ModelInferRequest)
		same    bool
	}{
		{name: "another id", same: true, change: func(r *inference.ModelInferRequest) { r.Id = "other" }},
		{name: "inputs in another order", same: true, change: func(r *inference.ModelInferRequest) {
			r.Inputs[0], r.Inputs[1] = r.Inputs[1], r.Inputs[0]
			r.RawInputContents[0], r.RawInputContents[1] = r.RawInputContents[1], r.RawInputContents[0]
		}},
		{name: "transport and scheduling parameters", same: true, change: func(r *inference.ModelInferRequest) {
			r.Parameters = map[string]*inference.InferParameter{"binary_data_output": param(true), "priority": param(int64(2)), "timeout": param(int64(100))}
			r.Inputs[0].Parameters = map[string]*inference.InferParameter{"binary_data_size": param(int64(8))}
		}},
		{name: "another model", change: func(r *inference.ModelInferRequest) { r.ModelName = "n" }},
		{name: "another version", version: "2"},
		{name: "another generation", gen: 1},
		{name: "another shape", change: func(r *inference.ModelInferRequest) { r.Inputs[0].Shape = []int64{2, 1} }},
		{name: "another datatype", change: func(r *inference.ModelInferRequest) { r.Inputs[0].Datatype = "UINT32" }},
		{name: "another input name", change: func(r *inference.ModelInferRequest) { r.Inputs[0].Name = "C" }},
		{name: "other bytes", change: func(r *inference.ModelInferRequest) { r.RawInputContents[1][0] = 9 }},
		{name: "bytes moved between inputs", change: func(r *inference.ModelInferRequest) {
			r.RawInputContents[0] = append(r.RawInputContents[0], r.RawInputContents[1][0])
			r.RawInputContents[1] = r.RawInputContents[1][1:]
		}},
		{name: "an output requested", change: func(r *inference.ModelInferRequest) {
			r.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT0"}}
		}},
		{name: "classification asked", change: func(r *inference.ModelInferRequest) {
			r.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT0", Parameters: map[string]*inference.InferParameter{"classification": param(int64(2))}}}
		}},
		{name: "a backend parameter", change: func(r *inference.ModelInferRequest) {
			r.Parameters = map[string]*inference.InferParameter{"temperature": param("0.5")}
		}},
		{name: "a parameter's kind", change: func(r *inference.ModelInferRequest) {
			r.Parameters = map[string]*inference.InferParameter{"n": param(int64(1))}
		}},
	}
	seen := map[Key]string{base: "base"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := baseRequest()
			if tc.change != nil {
				tc.change(r)
			}
			v := "1"
			if tc.version != "" {
				v = tc.version
			}
			k, err := Sum(r, v, tc.gen)
			if err != nil {
				t.Fatal(err)
			}
			if tc.same {
				if k != base {
					t.Fatal("key changed")
				}
				return
			}
			if other, dup := seen[k]; dup {
				t.Fatalf("same key as %s", other)
			}
			seen[k] = tc.name
		})
	}
	// A parameter's kind: the string "1" and the integer 1 differ.
	a, b := baseRequest(), baseRequest()
	a.Parameters = map[string]*inference.InferParameter{"n": param("1")}
	b.Parameters = map[string]*inference.InferParameter{"n": param(int64(1))}
	ka, _ := Sum(a, "1", 0)
	kb, _ := Sum(b, "1", 0)
	if ka == kb {
		t.Error("string and integer parameters share a key")
	}
	// All outputs and a list of them differ; so do two classification counts.
	c1, c2 := baseRequest(), baseRequest()
	c1.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "O", Parameters: map[string]*inference.InferParameter{"classification": param(int64(1))}}}
	c2.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "O", Parameters: map[string]*inference.InferParameter{"classification": param(int64(2))}}}
	k1, _ := Sum(c1, "1", 0)
	k2, _ := Sum(c2, "1", 0)
	if k1 == k2 {
		t.Error("classification counts share a key")
	}
}

func TestSumNotCacheable(t *testing.T) {
	shm := &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: "region"}}
	cases := map[string]func(r *inference.ModelInferRequest){
		"input in shared memory": func(r *inference.ModelInferRequest) {
			r.Inputs[0].Parameters = map[string]*inference.InferParameter{"shared_memory_region": shm}
		},
		"output in shared memory": func(r *inference.ModelInferRequest) {
			r.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "O", Parameters: map[string]*inference.InferParameter{"shared_memory_region": shm}}}
		},
		"typed contents": func(r *inference.ModelInferRequest) {
			r.Inputs[0].Contents = &inference.InferTensorContents{IntContents: []int32{1, 2}}
			r.RawInputContents = r.RawInputContents[1:]
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			r := baseRequest()
			change(r)
			if _, err := Sum(r, "1", 0); !errors.Is(err, ErrNotCacheable) {
				t.Fatalf("err %v, want ErrNotCacheable", err)
			}
		})
	}
}

func TestEntryWithID(t *testing.T) {
	resp := &inference.ModelInferResponse{
		ModelName: "m", ModelVersion: "1", Id: "first",
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "O", Datatype: "INT32", Shape: []int64{1}}},
		RawOutputContents: [][]byte{{7, 0, 0, 0}},
	}
	enc, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Entry(enc)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "second"} {
		var got inference.ModelInferResponse
		if err := proto.Unmarshal(WithID(e, id), &got); err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(resp).(*inference.ModelInferResponse)
		want.Id = id
		if !proto.Equal(&got, want) {
			t.Errorf("id %q: got %v, want %v", id, &got, want)
		}
	}
	if !bytes.Equal(WithID(e, ""), e) {
		t.Error("WithID without an id should be the entry")
	}
	if _, err := Entry([]byte{0xff}); err == nil {
		t.Error("a truncated encoding was taken")
	}
}

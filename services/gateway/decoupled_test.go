package gateway

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// An executor's encoded response wrapped for the stream decodes as the
// stream response the gateway would have built from the decoded one.
func TestWrapStreamResponse(t *testing.T) {
	resp := &inference.ModelInferResponse{
		ModelName: "m", ModelVersion: "1", Id: "r7",
		Parameters:        map[string]*inference.InferParameter{"p": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 3}}},
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "OUT", Datatype: "INT32", Shape: []int64{1}}},
		RawOutputContents: [][]byte{{1, 2, 3, 4}},
	}
	enc, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ emptyFinal, final bool }{{false, false}, {true, false}, {true, true}} {
		var got inference.ModelStreamInferResponse
		if err := proto.Unmarshal(wrapStreamResponse(enc, tc.emptyFinal, tc.final).bytes(), &got); err != nil {
			t.Fatal(err)
		}
		want := &inference.ModelStreamInferResponse{InferResponse: proto.Clone(resp).(*inference.ModelInferResponse)}
		if tc.emptyFinal {
			want.InferResponse.Parameters["triton_final_response"] = &inference.InferParameter{
				ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: tc.final}}
		}
		if !proto.Equal(&got, want) {
			t.Errorf("emptyFinal %v final %v:\n got %v\nwant %v", tc.emptyFinal, tc.final, &got, want)
		}
	}
}

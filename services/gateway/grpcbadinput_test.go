package gateway

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

// badUTF8 marshals req and puts a byte that is not UTF-8 in place of the
// first byte of mark (a string of req, unique in its encoding): protobuf
// would refuse to marshal the invalid string itself.
func badUTF8(t *testing.T, req *inference.ModelInferRequest, mark string) []byte {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(b, []byte(mark)) != 1 {
		t.Fatalf("%q is not unique in the message", mark)
	}
	i := bytes.Index(b, []byte(mark))
	b[i] = 0xff
	return b
}

// TestGRPCBadRequestMessage: an infer request whose message does not
// decode (a string that is not UTF-8, or malformed protobuf) is answered
// INVALID_ARGUMENT naming what is wrong, over a unary call and in its turn
// on a stream, which goes on; the gateway serves on.
func TestGRPCBadRequestMessage(t *testing.T) {
	ns := startNATS(t)
	g := startGateway(t, ns)
	c := simpleServing(t, ns, g)

	withInput := func(name string) *inference.ModelInferRequest {
		r := simpleRequest()
		r.Inputs[0].Name = name
		return r
	}
	large := withInput("XNPUT0")
	large.RawInputContents[0] = make([]byte, 2<<20) // the codec's large path
	withOutput := simpleRequest()
	withOutput.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "XUTPUT0"}}
	withParam := simpleRequest()
	withParam.Parameters = map[string]*inference.InferParameter{"Xparam": {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "v"}}}
	withID := simpleRequest()
	withID.Id = "Xid"
	truncated, _ := proto.Marshal(simpleRequest())
	truncated = truncated[:len(truncated)-3]

	cases := []struct {
		name string
		msg  []byte
		want []string
	}{
		{"input name", badUTF8(t, withInput("XNPUT0"), "XNPUT0"), []string{"input name", "not valid UTF-8"}},
		{"input name, large", badUTF8(t, large, "XNPUT0"), []string{"input name", "not valid UTF-8"}},
		{"output name", badUTF8(t, withOutput, "XUTPUT0"), []string{"output name", "not valid UTF-8"}},
		{"parameter name", badUTF8(t, withParam, "Xparam"), []string{"parameter name", "not valid UTF-8"}},
		{"request id", badUTF8(t, withID, "Xid"), []string{"request id", "not valid UTF-8"}},
		{"truncated", truncated, []string{"malformed ModelInferRequest message"}},
	}
	cc, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, tc := range cases {
		t.Run("unary/"+tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var resp inference.ModelInferResponse
			err := cc.Invoke(ctx, inference.GRPCInferenceService_ModelInfer_FullMethodName, tc.msg, &resp, grpc.ForceCodecV2(rawCodec{}))
			wantCode(t, err, codes.InvalidArgument, tc.want...)
			if _, err := c.ModelInfer(ctx, simpleRequest()); err != nil {
				t.Fatalf("a request after the bad one: %v", err)
			}
		})
		t.Run("stream/"+tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, inference.GRPCInferenceService_ModelStreamInfer_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
			if err != nil {
				t.Fatal(err)
			}
			good, _ := proto.Marshal(simpleRequest())
			for _, m := range [][]byte{tc.msg, good} {
				if err := st.SendMsg(m); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			var bad, next inference.ModelStreamInferResponse
			if err := st.RecvMsg(&bad); err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.want {
				if !bytes.Contains([]byte(bad.ErrorMessage), []byte(s)) {
					t.Fatalf("stream error %q does not name %q", bad.ErrorMessage, s)
				}
			}
			if err := st.RecvMsg(&next); err != nil {
				t.Fatalf("the request after the bad one: %v", err)
			}
			if next.ErrorMessage != "" || len(next.GetInferResponse().GetRawOutputContents()) == 0 {
				t.Fatalf("the request after the bad one: %q", next.ErrorMessage)
			}
		})
	}
}

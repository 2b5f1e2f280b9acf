package infercodec

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/api/inference"
)

func replyResponse() *inference.ModelInferResponse {
	return &inference.ModelInferResponse{ModelName: "m", ModelVersion: "1", Id: "req-1",
		Parameters: map[string]*inference.InferParameter{"p": {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "v"}}},
		Outputs: []*inference.ModelInferResponse_InferOutputTensor{
			{Name: "OUT0", Datatype: "FP32", Shape: []int64{1, 16},
				Parameters: map[string]*inference.InferParameter{"z": {ParameterChoice: &inference.InferParameter_Int64Param{}}}},
			{Name: "OUT1", Datatype: "BYTES", Shape: []int64{-1, 300}},
		},
		RawOutputContents: [][]byte{big(64, 1), {}},
	}
}

// TestCanonical: what the encoders of the executor and of protobuf write is
// canonical, and Codec.Unmarshal into a Reply keeps those bytes; what
// protobuf would write differently after decoding is not, and is decoded.
func TestCanonical(t *testing.T) {
	resp := replyResponse()
	vt, err := resp.MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	pb, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{vt, pb, {}, mustVT(t, &inference.ModelInferResponse{ModelName: "m", Parameters: map[string]*inference.InferParameter{"": {}}})} {
		if !Canonical(b) {
			t.Fatalf("%x: not canonical", b)
		}
		var r Reply
		if err := (Codec{}).Unmarshal(b, &r); err != nil || r.ModelInferResponse != nil || !bytes.Equal(r.Bytes, b) {
			t.Fatalf("%x: Reply %+v, %v; want the bytes kept", b, r, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty string":      {0x0a, 0x00},
		"field twice":       {0x0a, 0x01, 'a', 0x0a, 0x01, 'b'},
		"out of order":      {0x12, 0x01, '1', 0x0a, 0x01, 'm'},
		"unknown field":     {0x3a, 0x01, 'x'},
		"invalid UTF-8":     {0x0a, 0x01, 0xff},
		"long varint":       {0x0a, 0x81, 0x00, 'a'},
		"bool 2":            {0x22, 0x07, 0x0a, 0x01, 'k', 0x12, 0x02, 0x08, 0x02},
		"entry without key": {0x22, 0x04, 0x12, 0x02, 0x08, 0x01},
		"contents":          {0x2a, 0x02, 0x2a, 0x00},
		"truncated":         {0x0a, 0x05, 'a'},
	} {
		if Canonical(b) {
			t.Errorf("%s (%x): canonical", name, b)
		}
		var r Reply
		var want inference.ModelInferResponse
		err, wantErr := (Codec{}).Unmarshal(b, &r), proto.Unmarshal(b, &want)
		if (err == nil) != (wantErr == nil) {
			t.Errorf("%s: Reply error %v, protobuf's %v", name, err, wantErr)
		}
		if err == nil && (r.Bytes != nil || !proto.Equal(r.ModelInferResponse, &want)) {
			t.Errorf("%s: not decoded as protobuf does", name)
		}
	}
}

func mustVT(t *testing.T, m *inference.ModelInferResponse) []byte {
	b, err := m.MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzCanonical: bytes Canonical accepts decode, and encode again (protobuf)
// into the same bytes. Maps of one entry keep the order fixed.
func FuzzCanonical(f *testing.F) {
	resp := replyResponse()
	f.Add(mustVT(&testing.T{}, resp))
	resp.Parameters = nil
	f.Add(mustVT(&testing.T{}, resp))
	f.Add([]byte{0x22, 0x07, 0x0a, 0x01, 'k', 0x12, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		if !Canonical(b) {
			return
		}
		var m inference.ModelInferResponse
		if err := proto.Unmarshal(b, &m); err != nil {
			t.Fatalf("canonical but protobuf refuses it: %v", err)
		}
		if len(m.Parameters) > 1 {
			return
		}
		for _, o := range m.Outputs {
			if len(o.Parameters) > 1 {
				return
			}
		}
		again, err := proto.Marshal(&m)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("canonical %x encodes again as %x (%v)", b, again, err)
		}
	})
}

// FuzzUnmarshalResponse: UnmarshalResponse accepts what protobuf accepts,
// with the same result.
func FuzzUnmarshalResponse(f *testing.F) {
	f.Add(mustVT(&testing.T{}, replyResponse()))
	// A parameters entry whose key's tag has wire type 6, which does not
	// exist: protobuf refuses it.
	f.Add([]byte{0x0a, 0x01, '0', 0x22, 0x08, 0x32, 0x01, '0', 0x0e, 0x0a, '0', '0', '0'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want inference.ModelInferResponse
		err := UnmarshalResponse(b, &got)
		errW := proto.Unmarshal(b, &want)
		if (err == nil) != (errW == nil) {
			t.Fatalf("UnmarshalResponse error %v, protobuf %v", err, errW)
		}
		if err == nil && !proto.Equal(&got, &want) {
			t.Fatal("decoders disagree")
		}
	})
}

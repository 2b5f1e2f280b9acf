package kserve

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tensor"
)

// FuzzParseHeaderLength: Inference-Header-Content-Length is parsed as C++
// stoi does, never panics, and an accepted length lies within the body.
func FuzzParseHeaderLength(f *testing.F) {
	for _, s := range []string{"0", "12", " 7abc", "+3", "-1", "2147483647", "2147483648", "99999999999", "", "x", "-0"} {
		f.Add(s, 100)
	}
	f.Fuzz(func(t *testing.T, v string, bodyLen int) {
		if bodyLen < 0 {
			bodyLen = -bodyLen
		}
		n, err := ParseHeaderLength(v, bodyLen)
		if err != nil {
			return
		}
		if n < 0 || n > bodyLen {
			t.Fatalf("%q with a %d-byte body gave %d", v, bodyLen, n)
		}
		// Whatever follows the digits is ignored, as stoi does.
		s := strings.TrimLeft(v, " \t\n\v\f\r")
		s = strings.TrimPrefix(strings.TrimPrefix(s, "+"), "-")
		end := 0
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		if want, err := strconv.Atoi(s[:end]); err != nil || want != n {
			t.Fatalf("%q gave %d", v, n)
		}
	})
}

// FuzzDecodeRawRequest: a raw binary request against any one-input model
// configuration never panics, allocates at most the body plus a length
// prefix, and an accepted request's data is the body (framed as one
// element for BYTES).
func FuzzDecodeRawRequest(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, int32(inference.DataType_TYPE_FP32), []byte{0xff}, int32(8), uint8(1))
	f.Add([]byte("hello"), int32(inference.DataType_TYPE_STRING), []byte{1}, int32(0), uint8(1))
	f.Add([]byte{}, int32(inference.DataType_TYPE_INT8), []byte{0xff, 0xff}, int32(0), uint8(3))
	f.Fuzz(func(t *testing.T, body []byte, dt int32, dims []byte, maxBatch int32, inputs uint8) {
		cfg := &inference.ModelConfig{MaxBatchSize: maxBatch}
		var d []int64
		for i, b := range dims {
			if i == 8 {
				break
			}
			d = append(d, int64(int8(b)))
		}
		for i := range int(inputs % 4) {
			cfg.Input = append(cfg.Input, &inference.ModelInput{Name: "IN" + strconv.Itoa(i), DataType: inference.DataType(dt % 16), Dims: d})
		}
		req, out, err := DecodeRawRequest(body, "m", "1", cfg, DecodeOptions{MaxInputSize: 1 << 20})
		if err != nil {
			return
		}
		if len(req.Inputs) != 1 || len(req.RawInputContents) != 1 || out == nil || !out.BinaryDefault {
			t.Fatalf("accepted raw request: %d inputs, %d raw", len(req.Inputs), len(req.RawInputContents))
		}
		data := req.RawInputContents[0]
		if req.Inputs[0].Datatype == tensor.Bytes.String() {
			if want := tensor.AppendBytesElement(nil, body); string(data) != string(want) {
				t.Fatal("BYTES raw input not framed as one element")
			}
		} else if string(data) != string(body) {
			t.Fatal("raw input is not the body")
		}
		if maxBatch > 0 && (len(req.Inputs[0].Shape) == 0 || req.Inputs[0].Shape[0] != 1) {
			t.Fatalf("batched model: shape %v is not batch 1", req.Inputs[0].Shape)
		}
	})
}

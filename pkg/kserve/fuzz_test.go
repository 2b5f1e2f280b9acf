package kserve

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unicode/utf8"

	"github.com/nereid-io/nereid/pkg/tensor"
)

// FuzzDecodeInferRequest feeds arbitrary bodies and header lengths (JSON
// header plus binary blocks) to the decoder: it must never panic, every
// input it accepts must carry data consistent with its declaration, and the
// memory it allocates must stay proportional to the body, whatever sizes
// and shapes the body claims.
func FuzzDecodeInferRequest(f *testing.F) {
	files, _ := filepath.Glob("testdata/bad/*.txt")
	for _, file := range files {
		raw, _ := os.ReadFile(file)
		if _, js, ok := bytes.Cut(raw, []byte("\n---\n")); ok {
			f.Add(js, int32(-1))
		}
	}
	ok := `{"inputs":[{"name":"A","datatype":"INT32","shape":[1,2],"parameters":{"binary_data_size":8}},` +
		`{"name":"B","datatype":"BYTES","shape":[2],"data":["x","y"]}],"outputs":[{"name":"O","parameters":{"binary_data":true}}]}`
	f.Add(append([]byte(ok), tensor.AppendInt32s(nil, 1, 2)...), int32(len(ok)))
	f.Add([]byte(`{"inputs":[{"name":"A","datatype":"FP32","shape":[1099511627776],"data":[1]}]}`), int32(-1))
	f.Add([]byte(`{"inputs":[{"name":"A","datatype":"FP64","shape":[3],"data":[1,2,3]}],"parameters":{"sequence_id":"s"}}`), int32(-1))
	f.Fuzz(func(t *testing.T, body []byte, headerLen int32) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var binary []bool
		req, out, err := decodeInferRequest(body, int(headerLen), "m", "1", DecodeOptions{}, &binary)
		runtime.ReadMemStats(&after)
		// Per byte of JSON the decoder may build protobuf structs, maps and
		// decoded tensors; a shape alone must never make it allocate.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64*uint64(len(body))+256<<10 {
			t.Fatalf("allocated %d bytes for a %d-byte body", alloc, len(body))
		}
		if err != nil {
			return
		}
		hl := int(headerLen)
		if hl < 0 {
			hl = len(body)
		}
		if h := body[:hl]; !json.Valid(h) && utf8.Valid(h) {
			t.Fatalf("accepted invalid JSON header %q", h)
		}
		if out == nil || len(req.RawInputContents) != len(req.Inputs) {
			t.Fatalf("%d raw entries for %d inputs", len(req.RawInputContents), len(req.Inputs))
		}
		for i, in := range req.Inputs {
			data := req.RawInputContents[i]
			if _, shm := in.Parameters["shared_memory_region"]; shm {
				continue
			}
			if binary[i] {
				continue // checked against the shape by the executor, as in Triton
			}
			dt, _ := tensor.ParseDataType(in.Datatype)
			if err := tensor.ValidateInput("", in.Name, "m", dt, in.Shape, data); err != nil {
				t.Fatalf("accepted JSON input %s with inconsistent data: %v", in.Name, err)
			}
		}
	})
}

package tensor

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeJSONData feeds arbitrary JSON `data` for every datatype and
// shape: no panic, the result is exactly the shape's size for fixed types,
// and BYTES results frame exactly the element count. Encoding the result
// back to JSON and decoding again must give the same bytes.
func FuzzDecodeJSONData(f *testing.F) {
	seeds := []struct {
		dt   uint8
		dims []byte
		data string
	}{
		{uint8(Int32), []byte{2, 2}, "[[1,2],[3,4]]"},
		{uint8(FP32), []byte{3}, "[0.5,-1e3,3]"},
		{uint8(Bool), []byte{2}, "[true,false]"},
		{uint8(Bytes), []byte{2}, `["a","\u00e9"]`},
		{uint8(Int8), []byte{1}, "[300]"},
		{uint8(Uint64), []byte{1}, "[18446744073709551615]"},
		{uint8(FP64), []byte{1}, "[1e400]"},
		{uint8(Bytes), []byte{1}, `["\ud800"]`},
		{uint8(Int64), []byte{0}, "[]"},
	}
	for _, s := range seeds {
		f.Add(s.dt, s.dims, []byte(s.data))
	}
	f.Fuzz(func(t *testing.T, dt uint8, dims []byte, data []byte) {
		d := DataType(dt % uint8(Bytes+1))
		shape := make([]int64, 0, 4)
		for i, b := range dims {
			if i == 4 {
				break
			}
			shape = append(shape, int64(int8(b))) // negative dims too
		}
		out, err := DecodeJSONData("IN", d, shape, data)
		if err != nil {
			return
		}
		if !json.Valid(data) && utf8.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		n, _ := ElementCount("IN", shape)
		if d == Bytes {
			if err := ValidateBytes("IN", "m", out, n); err != nil {
				t.Fatalf("decoded BYTES do not frame: %v", err)
			}
		} else if int64(len(out)) != n*int64(d.Size()) {
			t.Fatalf("decoded %d bytes for %d elements of %v", len(out), n, d)
		}
		js, err := AppendJSON(nil, "OUT", d, n, out)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		back, err := DecodeJSONData("IN", d, []int64{n}, js)
		if err != nil {
			t.Fatalf("re-decode %s: %v", js, err)
		}
		if !bytes.Equal(back, out) {
			t.Fatalf("round trip changed bytes: %q -> %s", data, js)
		}
	})
}

// FuzzSplitBytes checks the BYTES framing validator: no panic, no
// allocation beyond the buffer, and an accepted buffer re-encodes to itself.
func FuzzSplitBytes(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 'a', 0, 0, 0, 0}, int64(2))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, int64(1))
	f.Add([]byte{1, 0}, int64(1))
	f.Add([]byte{}, int64(1<<62))
	f.Add([]byte{0, 0, 0, 0}, int64(-1))
	f.Fuzz(func(t *testing.T, buf []byte, expected int64) {
		parts, err := SplitBytes("IN", "m", buf, expected)
		if err != nil {
			return
		}
		if int64(len(parts)) != expected {
			t.Fatalf("%d parts, expected %d", len(parts), expected)
		}
		var re []byte
		for _, p := range parts {
			re = AppendBytesElement(re, p)
		}
		if !bytes.Equal(re, buf) {
			t.Fatal("re-encoding differs")
		}
	})
}

package kserve

import (
	"testing"
)

func binaryBody(n int) ([]byte, int) {
	header := []byte(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,` + itoa(n) + `],"parameters":{"binary_data_size":` + itoa(4*n) + `}}],` +
		`"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`)
	return append(header, make([]byte, 4*n)...), len(header)
}

func itoa(n int) string { return fmtInt(n) }

func fmtInt(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func BenchmarkDecodeBinary16(b *testing.B) {
	body, hl := binaryBody(16)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeInferRequest(body, hl, "identity", "1", DecodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeJSON1M(b *testing.B) {
	n := 1 << 18 // 1 MiB of FP32
	data := make([]byte, 0, 6*n)
	data = append(data, '[')
	for i := 0; i < n; i++ {
		if i > 0 {
			data = append(data, ',')
		}
		data = append(data, "1.5"...)
	}
	data = append(data, ']')
	body := append([]byte(`{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,`+fmtInt(n)+`],"data":`), data...)
	body = append(body, "}]}"...)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeInferRequest(body, -1, "identity", "1", DecodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

package gateway

import (
	"bytes"
	"compress/gzip"
	"testing"
)

// FuzzReadBody: whatever a body holds, compressed or not, readBody returns
// at most limit bytes, and what a gzip body inflates to in full when that
// fits.
func FuzzReadBody(f *testing.F) {
	gz := func(b []byte) []byte {
		var out bytes.Buffer
		w := gzip.NewWriter(&out)
		w.Write(b)
		w.Close()
		return out.Bytes()
	}
	f.Add(gz([]byte("{}")), uint16(2))
	f.Add(gz(make([]byte, 5000)), uint16(4999))
	f.Add([]byte("not gzip"), uint16(100))
	f.Add([]byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, body []byte, limit16 uint16) {
		limit := int64(limit16)
		for _, enc := range []string{encIdentity, encGzip, encDeflate} {
			got, err := readBody(bytes.NewReader(body), enc, limit, int64(len(body)))
			if err == nil && int64(len(got)) > limit {
				t.Fatalf("%s: %d bytes past the limit of %d", enc, len(got), limit)
			}
			if enc == encIdentity && (err == nil) != (int64(len(body)) <= limit) {
				t.Fatalf("identity body of %d bytes, limit %d: %v", len(body), limit, err)
			}
		}
		if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
			var want bytes.Buffer
			if _, err := want.ReadFrom(zr); err == nil && int64(want.Len()) <= limit {
				if got, err := readBody(bytes.NewReader(body), encGzip, limit, -1); err == nil && !bytes.Equal(got, want.Bytes()) {
					t.Fatalf("inflated %q, want %q", got, want.Bytes())
				}
			}
		}
	})
}

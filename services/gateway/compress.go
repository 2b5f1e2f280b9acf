package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// HTTP compression follows Triton's /infer endpoint: a request body may be
// gzip or deflate encoded, anything else is refused with 501 and an
// Accept-Encoding header naming what is supported; the response is encoded
// per the client's Accept-Encoding with q-values.

const (
	encIdentity = "identity"
	encGzip     = "gzip"
	encDeflate  = "deflate"
)

// errUnsupportedEncoding is Triton's answer to an unknown Content-Encoding.
var errUnsupportedEncoding = tritonerr.Unsupportedf("Unsupported compression type")

// headerValue is h.Get(key) for a key in canonical form, which Get would
// canonicalize again: a few hundred instructions per header of every
// request. The keys of a request's Header were canonicalized when the
// server read them, so both find the same values.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// requestEncoding returns the request's Content-Encoding, normalised, or
// errUnsupportedEncoding.
func requestEncoding(h http.Header) (string, error) {
	v := strings.ToLower(strings.TrimSpace(headerValue(h, "Content-Encoding")))
	switch v {
	case "", encIdentity:
		return encIdentity, nil
	case encGzip, encDeflate:
		return v, nil
	}
	return "", errUnsupportedEncoding
}

// readBody reads an (optionally compressed) request body, refusing more than
// limit bytes after decompression so a small compressed body cannot expand
// into an arbitrarily large allocation: inflation stops at the byte past the
// limit, and the bytes it produces count in the in-flight budget as they
// come, as received ones do (when r is under the intake limits). declared
// is the body's Content-Length (-1: unknown), for the message about an
// uncompressed body that is too large.
func readBody(r io.Reader, encoding string, limit, declared int64) ([]byte, error) {
	return readBodyAs(r, encoding, limit, declared, false)
}

// readBodyAs is readBody for a body that is all JSON (an infer request
// without binary tensors) when json is true: one that inflates past the
// limit is refused as a JSON request too large, as Triton words it, rather
// than as decompressed data too large.
func readBodyAs(r io.Reader, encoding string, limit, declared int64, json bool) ([]byte, error) {
	var src io.Reader = r
	if encoding == encGzip || encoding == encDeflate {
		dec, err := newDecompressor(r)
		if err != nil {
			return nil, bodyError(err, "failed to decompress request body: %v")
		}
		defer dec.Close()
		tooLarge := tritonerr.InvalidArgf(
			"Decompressed data size exceeds the maximum allowed value of %d bytes. Use --http-max-input-size to increase the limit.", limit)
		if json {
			// Inflation stops at the byte past the limit: the size is
			// known to be at least that.
			tooLarge = tritonerr.InvalidArgf(
				"request JSON size of %d bytes exceeds the maximum allowed input size of %d bytes. Use --http-max-input-size to increase the limit.",
				limit+1, limit)
		}
		z := &inflater{r: dec, limit: limit, tooLarge: tooLarge}
		if b, ok := r.(*intakeBody); ok {
			z.count = b.hold
		}
		src = z
	}
	body, over, err := readAtMost(src, limit)
	if err != nil {
		if encoding != encIdentity {
			return nil, bodyError(err, "failed to decompress request body: %v")
		}
		return nil, bodyError(err, "failed to read request body: %v")
	}
	if over {
		return nil, tritonerr.InvalidArgf(
			"request JSON size of %d bytes exceeds the maximum allowed input size of %d bytes. Use --http-max-input-size to increase the limit.",
			max(declared, limit+1), limit)
	}
	return body, nil
}

// readAtMost reads r to its end, or to the byte past limit (over). Its
// buffer doubles as the bytes come but never grows past limit bytes, so a
// body beyond the limit costs the limit, not a doubling after it.
func readAtMost(r io.Reader, limit int64) (buf []byte, over bool, err error) {
	const first = 512
	buf = make([]byte, 0, min(limit, first))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= limit {
				var one [1]byte
				for {
					n, err := r.Read(one[:])
					switch {
					case n > 0:
						return nil, true, nil
					case err == io.EOF:
						return buf, false, nil
					case err != nil:
						return nil, false, err
					}
				}
			}
			next := make([]byte, len(buf), min(limit, max(2*int64(cap(buf)), first)))
			copy(next, buf)
			buf = next
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, false, nil
		case err != nil:
			return nil, false, err
		}
	}
}

// inflater is a decompressor's output bounded and counted: it yields at
// most limit bytes, failing with tooLarge at the first byte past them
// instead of inflating further, and passes each byte it produces to count
// (nil: none) as it comes, whose error ends the reading. A compressed
// message a thousand times smaller than what it inflates to thus costs no
// more than limit, and counts in the in-flight budget what it makes the
// server hold.
type inflater struct {
	r        io.Reader
	limit    int64 // negative: none
	tooLarge error
	count    func(n int64) error
	n        int64 // bytes produced
	err      error
}

func (z *inflater) Read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	if z.limit >= 0 && int64(len(p)) > z.limit-z.n+1 {
		p = p[:z.limit-z.n+1] // no further than the byte that says the limit is passed
	}
	n, err := z.r.Read(p)
	z.n += int64(n)
	if z.limit >= 0 && z.n > z.limit {
		z.err = z.tooLarge
		return 0, z.err
	}
	if n > 0 && z.count != nil {
		if cerr := z.count(int64(n)); cerr != nil {
			z.err = cerr
			return 0, cerr
		}
	}
	return n, err
}

// newDecompressor sniffs the stream instead of trusting the header's name:
// clients disagree on whether "deflate" means zlib (RFC 1950, what Triton and
// tritonclient send) or raw deflate (RFC 1951), and Triton's own inflate
// auto-detects gzip and zlib headers.
func newDecompressor(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch {
	case len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b:
		return gzip.NewReader(br)
	case len(head) == 2 && head[0]&0x0f == 8 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0:
		return zlib.NewReader(br)
	case len(head) < 2:
		return nil, io.ErrUnexpectedEOF
	default:
		return flate.NewReader(br), nil
	}
}

// responseEncoding picks the response encoding from Accept-Encoding as
// Triton's CompressionTypeUsed does: the supported coding with the highest
// q-value wins, ties go to the first listed, q=0 never wins, and nothing
// usable means identity. Unlike Triton we also accept spaces around ';'.
func responseEncoding(acceptEncoding string) string {
	best, bestQ := encIdentity, 0.0
	for part := range strings.SplitSeq(acceptEncoding, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name != encIdentity && name != encGzip && name != encDeflate {
			continue
		}
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.TrimSpace(k) == "q" {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					q = -1
					break
				}
				q = f
			}
		}
		if q > bestQ {
			best, bestQ = name, q
		}
	}
	return best
}

// compress encodes body with the given coding (gzip or deflate = zlib, as
// Triton's DataCompressor writes it).
func compress(encoding string, body []byte) ([]byte, error) {
	if encoding != encGzip && encoding != encDeflate {
		return body, nil
	}
	return compressParts(encoding, [][]byte{body})
}

// compressParts compresses parts as one body (gzip, or deflate = zlib as
// Triton writes it) without joining them first.
func compressParts(encoding string, parts [][]byte) ([]byte, error) {
	var buf bytes.Buffer
	var w io.WriteCloser
	switch encoding {
	case encGzip:
		w = gzip.NewWriter(&buf)
	case encDeflate:
		w = zlib.NewWriter(&buf)
	default:
		return nil, fmt.Errorf("unknown encoding %q", encoding)
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

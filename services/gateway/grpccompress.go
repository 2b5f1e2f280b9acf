package gateway

import (
	"io"

	"github.com/klauspost/compress/zlib"
	"google.golang.org/grpc/encoding"
)

// Triton's gRPC server (gRPC C++) accepts "gzip" and "deflate" message
// compression, and tritonclient offers both. grpc-go ships only gzip
// (registered by importing grpc/encoding/gzip), so deflate is added here.
// gRPC's "deflate" is the zlib format (RFC 1950), as gRPC core writes it.
func init() { encoding.RegisterCompressor(deflateCompressor{}) }

type deflateCompressor struct{}

func (deflateCompressor) Name() string { return "deflate" }

func (deflateCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return zlib.NewWriter(w), nil
}

func (deflateCompressor) Decompress(r io.Reader) (io.Reader, error) {
	return zlib.NewReader(r)
}

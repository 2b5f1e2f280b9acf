package gateway

import (
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zlib"
	"google.golang.org/grpc/encoding"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
)

// Triton's gRPC server (gRPC C++) accepts "gzip" and "deflate" message
// compression, and tritonclient offers both. grpc-go ships only gzip, so
// deflate is added here. gRPC's "deflate" is the zlib format (RFC 1950), as
// gRPC core writes it.
//
// Both are registered bounded (boundedCompressor): grpc-go itself bounds a
// message's inflation only by the message size limit (2 GiB, Triton's), so
// a message of a megabyte could make the gateway hold a gigabyte.
func init() {
	encoding.RegisterCompressor(boundedCompressor{encoding.GetCompressor(grpcgzip.Name)})
	encoding.RegisterCompressor(boundedCompressor{deflateCompressor{}})
}

type deflateCompressor struct{}

func (deflateCompressor) Name() string { return "deflate" }

func (deflateCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return zlib.NewWriter(w), nil
}

func (deflateCompressor) Decompress(r io.Reader) (io.Reader, error) {
	return zlib.NewReader(r)
}

// boundedCompressor decompresses through an inflater with the bound and
// the budget of grpcInflation: inflation stops at the first byte past
// --grpc-max-input-size, and the bytes it produces count in the in-flight
// budget while the message is being inflated.
type boundedCompressor struct{ encoding.Compressor }

func (c boundedCompressor) Decompress(r io.Reader) (io.Reader, error) {
	dec, err := c.Compressor.Decompress(r)
	if err != nil {
		return nil, err
	}
	limit, budget := grpcInflation.current()
	if limit < 0 && budget == nil {
		return dec, nil
	}
	z := &grpcInflater{inflater: inflater{r: dec, limit: limit, tooLarge: errGRPCInflateLimit(limit)}, dec: dec, budget: budget}
	if budget != nil {
		z.count = z.take
	}
	return z, nil
}

// grpcInflater is an inflater whose counted bytes go back to the budget
// when grpc-go closes it, once the message is inflated.
type grpcInflater struct {
	inflater
	dec     io.Reader
	budget  *inflightBudget
	charged int64
}

func (z *grpcInflater) take(n int64) error {
	if !z.budget.take(z.charged, n) {
		return fmt.Errorf("request refused: the server is already holding %d bytes of requests in flight, its limit (--http-max-inflight-body-size %d); retry later",
			z.budget.used.Load(), z.budget.limit)
	}
	z.charged += n
	return nil
}

func (z *grpcInflater) Close() error {
	if z.budget != nil {
		z.budget.give(z.charged)
		z.charged = 0
	}
	if c, ok := z.dec.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// grpcInflation is the bound and the budget of gRPC decompression. grpc-go
// looks compressors up by name in a registry of the process's and hands
// them the compressed bytes alone, nothing of the server or the call, so
// the bound is the process's too: a gateway serving gRPC installs its
// --grpc-max-input-size and its in-flight budget while it runs. A process
// runs one gateway; should it run several (tests do), the one started
// last sets them. With none (a client alone), inflation is grpc-go's.
var grpcInflation inflationGuard

type inflationGuard struct {
	mu   sync.Mutex
	regs []*inflationReg
}

type inflationReg struct {
	limit  int64
	budget *inflightBudget
}

// add installs limit and budget until the returned function is called.
func (g *inflationGuard) add(limit int64, budget *inflightBudget) (remove func()) {
	r := &inflationReg{limit: limit, budget: budget}
	g.mu.Lock()
	g.regs = append(g.regs, r)
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for i, x := range g.regs {
			if x == r {
				g.regs = append(g.regs[:i], g.regs[i+1:]...)
				return
			}
		}
	}
}

// current is the bound (negative: none) and the budget (nil: none) that
// apply now.
func (g *inflationGuard) current() (int64, *inflightBudget) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.regs) == 0 {
		return -1, nil
	}
	r := g.regs[len(g.regs)-1]
	return r.limit, r.budget
}

// errGRPCInflateLimit is the inflater's error past --grpc-max-input-size.
// grpc-go answers the message with INTERNAL "grpc: failed to read
// decompressed data: <error>", and sends that status itself, before any
// handler could give it another code: RESOURCE_EXHAUSTED, its code for
// its own size limit, is not ours to give.
func errGRPCInflateLimit(limit int64) error {
	return fmt.Errorf("Decompressed message size exceeds the maximum allowed value of %d bytes. Use --grpc-max-input-size to increase the limit.", limit)
}

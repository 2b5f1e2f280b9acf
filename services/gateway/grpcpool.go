package gateway

import "google.golang.org/grpc/mem"

// grpcBufferPool is the gRPC server's mem.BufferPool: the buffers that
// received frames, decompressed messages and encoded answers pass
// through. grpc-go's default pool keeps every buffer returned to it in a
// sync.Pool, which a collection empties only halfway: a 512 MiB request
// left 512 MiB of 16 KiB frame buffers there, held until two collections
// passed, minutes on an idle server. This one keeps a few buffers of each
// size class, at most grpcPoolClassBytes a class, drops the others to the
// collector, and never keeps a buffer larger than its largest class.
type grpcBufferPool struct {
	classes []grpcPoolClass
}

type grpcPoolClass struct {
	size int
	free chan *[]byte
}

// grpcPoolClassBytes bounds what each size class keeps.
const grpcPoolClassBytes = 4 << 20

// grpcPoolSizes are the size classes: small messages, a page, an HTTP/2
// frame as gRPC sends them (16 KiB), decompression's chunks (32 KiB), and
// 1 MiB, beyond which buffers are allocated for the one use.
var grpcPoolSizes = []int{256, 4 << 10, 16 << 10, 32 << 10, 1 << 20}

func newGRPCBufferPool() *grpcBufferPool {
	p := &grpcBufferPool{}
	for _, size := range grpcPoolSizes {
		p.classes = append(p.classes, grpcPoolClass{size: size, free: make(chan *[]byte, max(grpcPoolClassBytes/size, 1))})
	}
	return p
}

// class is the smallest class that holds n bytes, or nil.
func (p *grpcBufferPool) class(n int) *grpcPoolClass {
	for i := range p.classes {
		if n <= p.classes[i].size {
			return &p.classes[i]
		}
	}
	return nil
}

// Get implements mem.BufferPool.
func (p *grpcBufferPool) Get(n int) *[]byte {
	c := p.class(n)
	if c == nil {
		b := make([]byte, n)
		return &b
	}
	select {
	case b := <-c.free:
		*b = (*b)[:n]
		return b
	default:
		b := make([]byte, n, c.size)
		return &b
	}
}

// Put implements mem.BufferPool: a buffer of a class's size is kept while
// the class has room; any other is left to the collector.
func (p *grpcBufferPool) Put(b *[]byte) {
	c := p.class(cap(*b))
	if c == nil || cap(*b) != c.size {
		return
	}
	select {
	case c.free <- b:
	default:
	}
}

var _ mem.BufferPool = (*grpcBufferPool)(nil)

package handoff

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Dir is where hand-off files live: the node's POSIX shared-memory file
// system, which every process on the node sees.
var Dir = "/dev/shm"

// filePrefix starts every hand-off file name: "nereid-handoff-<pid>-<hex>".
// The pid lets Sweep find the files of processes that died.
const filePrefix = "nereid-handoff-"

// Region is tensor memory that can be handed to another process on the node:
// a file in Dir mapped into this process (or, when no file is needed, plain
// heap memory). It is reference counted: the memory is unmapped and the
// file removed when the last reference is released, so whoever still reads
// the bytes holds a reference.
type Region struct {
	name string // file name in Dir; "" for heap and anonymous memory
	path string // the file's path, fixed when it was made
	anon bool   // anonymous mapping (NewAnon)
	data []byte
	refs atomic.Int32
	// kept: the file stays linked until the last reference is released,
	// for requests that name it with ModeKept; borrowed: mapped privately
	// from a file another process keeps, and never removed here.
	kept, borrowed bool

	unlinkOnce sync.Once
}

// ErrNoSharedMemory is returned by Create when Dir cannot hold the region
// (missing, full, or not writable); the caller falls back to the bus.
var ErrNoSharedMemory = errors.New("handoff: no shared memory available")

// NewHeap wraps heap memory of size bytes in a Region, for code paths that
// treat hand-off memory uniformly. Release is a no-op for it beyond the
// count: the garbage collector owns the bytes.
func NewHeap(size int) *Region {
	r := &Region{data: make([]byte, size)}
	r.refs.Store(1)
	return r
}

// NewAnon maps size bytes of anonymous memory, outside the Go heap, in a
// Region with one reference: memory that goes back to the system the
// moment it is released, for a large tensor that no other process needs
// to see (the garbage collector would keep a freed heap tensor resident,
// and its pages might not be reusable for the next one).
func NewAnon(size int) (*Region, error) {
	if size <= 0 {
		return NewHeap(max(size, 0)), nil
	}
	data, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("handoff: map %d bytes: %w", size, err)
	}
	r := &Region{anon: true, data: data}
	r.refs.Store(1)
	return r, nil
}

// Create makes a new file of exactly size bytes in Dir and maps it
// read-write, with one reference. With reserve, the file's pages are
// allocated at once (fallocate), so that writing into the mapping can never
// fault on a full file system; without it (the caller fills the region with
// read(2), which reports EFAULT instead of faulting) pages are allocated as
// they are written, so a size announced but never sent costs nothing.
func Create(size int, reserve bool) (*Region, error) {
	if size < 0 {
		return nil, fmt.Errorf("handoff: negative size %d", size)
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	name := filePrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(rnd[:])
	path := filepath.Join(Dir, name)
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSharedMemory, err)
	}
	defer syscall.Close(fd)
	fail := func(err error) (*Region, error) {
		_ = syscall.Unlink(path)
		return nil, fmt.Errorf("%w: %s: %w", ErrNoSharedMemory, path, err)
	}
	if err := syscall.Ftruncate(fd, int64(size)); err != nil {
		return fail(err)
	}
	if reserve && size > 0 {
		if err := syscall.Fallocate(fd, 0, 0, int64(size)); err != nil {
			return fail(err)
		}
	}
	data, err := mmap(fd, size)
	if err != nil {
		return fail(err)
	}
	r := &Region{name: name, path: path, data: data}
	r.refs.Store(1)
	return r, nil
}

// Open maps the hand-off file name, which must hold exactly size bytes,
// read-write (a backend may write into its inputs), with one reference.
// The file stays linked: the receiver calls Unlink once it has mapped it.
func Open(name string, size int64) (*Region, error) { return openAs(name, size, syscall.MAP_SHARED) }

func openAs(name string, size int64, flags int) (*Region, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("handoff: invalid hand-off file name %q", name)
	}
	path := filepath.Join(Dir, name)
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("handoff: hand-off file %s does not exist (the sender gave up, or sender and receiver claim the same node but do not share %s)", path, Dir)
		}
		return nil, fmt.Errorf("handoff: open %s: %w", path, err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("handoff: stat %s: %w", path, err)
	}
	if st.Size != size || size > int64(maxInt) {
		return nil, fmt.Errorf("handoff: hand-off file %s holds %d bytes, expected %d", path, st.Size, size)
	}
	data, err := mmapAs(fd, int(size), flags)
	if err != nil {
		return nil, fmt.Errorf("handoff: map %s: %w", path, err)
	}
	r := &Region{name: name, path: path, data: data}
	r.refs.Store(1)
	return r, nil
}

// openKept maps the hand-off file name, which another process keeps
// (ModeKept), privately: copy-on-write, so that a backend writing into its
// inputs changes only its own pages, and never removed from this side.
func openKept(name string, size int64) (*Region, error) {
	r, err := openAs(name, size, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	r.borrowed = true
	return r, nil
}

const maxInt = int(^uint(0) >> 1)

func mmap(fd, size int) ([]byte, error) { return mmapAs(fd, size, syscall.MAP_SHARED) }

func mmapAs(fd, size, flags int) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	return syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, flags)
}

// ValidName reports whether name can be a hand-off file name: the prefix,
// then only digits, lower-case hex and '-' (so no path can be smuggled in).
func ValidName(name string) bool {
	rest, ok := strings.CutPrefix(name, filePrefix)
	if !ok || rest == "" || len(name) > 128 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}

// Name is the file's name in Dir ("" for heap memory).
func (r *Region) Name() string { return r.name }

// Shared reports whether the region is a file another process can map.
func (r *Region) Shared() bool { return r != nil && r.name != "" }

// Bytes is the mapped memory. It is valid while a reference is held.
func (r *Region) Bytes() []byte { return r.data }

// Size is the region's size in bytes (0 for a nil region).
func (r *Region) Size() int {
	if r == nil {
		return 0
	}
	return len(r.data)
}

// Keep leaves the file linked until the last reference is released
// rather than until whoever maps it next unlinks it, so that several
// requests can name it (ModeKept): an ensemble request's body, or a step's
// response file, that later steps read. Call it before the region is
// handed to another goroutine.
func (r *Region) Keep() {
	if r.Shared() {
		r.kept = true
	}
}

// Kept reports whether Keep was called.
func (r *Region) Kept() bool { return r != nil && r.kept }

// Unlink removes the file (the mapping stays valid). Safe to call more than
// once and from either side of a hand-off: whoever comes second finds the
// file gone. A region borrowed from another process's kept file is never
// removed from this side.
func (r *Region) Unlink() {
	if r.name == "" || r.borrowed {
		return
	}
	r.unlinkOnce.Do(func() { _ = syscall.Unlink(r.path) })
}

// Retain adds a reference and returns r.
func (r *Region) Retain() *Region {
	r.refs.Add(1)
	return r
}

// Release drops a reference; the last one removes the file and unmaps the
// memory. Nil-safe.
func (r *Region) Release() {
	if r == nil {
		return
	}
	switch n := r.refs.Add(-1); {
	case n > 0:
		return
	case n < 0:
		panic("handoff: Region released more often than retained")
	}
	r.Unlink()
	if (r.name != "" || r.anon) && len(r.data) > 0 {
		_ = syscall.Munmap(r.data)
	}
	r.data = nil
}

// Offset reports where b lies in the region, if it lies entirely inside.
func (r *Region) Offset(b []byte) (int, bool) {
	if r == nil || len(b) == 0 || len(r.data) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(r.data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p-base+uintptr(len(b)) > uintptr(len(r.data)) {
		return 0, false
	}
	return int(p - base), true
}

// Sweep removes the hand-off files left in Dir by processes that no longer
// exist (a sender that crashed between creating a file and handing it
// over). Services call it when they start. It returns how many it removed.
func Sweep() int {
	entries, err := os.ReadDir(Dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !ValidName(name) {
			continue
		}
		pidText, _, ok := strings.Cut(strings.TrimPrefix(name, filePrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			if os.Remove(filepath.Join(Dir, name)) == nil {
				n++
			}
		}
	}
	return n
}

// unmapKeepFile unmaps a region its creator has filled and handed over by
// name, leaving the file for the receiver (who unlinks it).
func (r *Region) unmapKeepFile() {
	if r.name != "" && len(r.data) > 0 {
		_ = syscall.Munmap(r.data)
	}
	r.data = nil
	r.refs.Store(0)
}

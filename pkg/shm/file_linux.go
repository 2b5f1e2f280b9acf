package shm

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// open opens the object a key names for reading and writing, as shm_open
// does (O_NOFOLLOW, O_CLOEXEC), and returns it with its size. Only regular
// files count: a FIFO or device someone put in /dev/shm is "invalid".
func open(key string) (fd int, size int64, err error) {
	p, ok := path(key)
	if !ok {
		return -1, 0, tritonerr.Internalf("Unable to open shared memory region: '%s'", key)
	}
	fd, err = syscall.Open(p, syscall.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return -1, 0, tritonerr.Internalf("Unable to open shared memory region: '%s': %s", key, permissionHint(p))
		}
		return -1, 0, tritonerr.Internalf("Unable to open shared memory region: '%s'", key)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size < 0 {
		_ = syscall.Close(fd)
		return -1, 0, tritonerr.Internalf("Invalid shared memory region: '%s'", key)
	}
	return fd, st.Size, nil
}

// permissionHint says why the server may not open the object at p and
// what fixes it. It is the usual failure when the client and the server
// run as different users (a container's default user against a host
// process's regions, which clients create with mode 0600).
func permissionHint(p string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return fmt.Sprintf("permission denied to the server (uid %d, gid %d)", os.Geteuid(), os.Getegid())
	}
	return fmt.Sprintf("permission denied: the region is owned by uid %d, gid %d with mode %04o, and the server runs as uid %d, gid %d; "+
		"run the server as the client's user (with compose: NEREID_UID and NEREID_GID, see docs/shared-memory.md) or make the region readable and writable by the server's user",
		st.Uid, st.Gid, st.Mode&0o7777, os.Geteuid(), os.Getegid())
}

// strerror renders an errno as C's strerror does (Go's texts are the same
// words, starting lower case).
func strerror(err error) string {
	s := err.Error()
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// Inspect is the check Triton makes when region name is registered with
// key, offset and byteSize (RegisterSystemSharedMemory after the key and
// duplicate checks): the object opens (INTERNAL "Unable to open shared
// memory region"), its size is known (INTERNAL "Invalid shared memory
// region"), offset+byteSize fits in it (INVALID_ARG "invalid args"), and it
// can be mapped there (INVALID_ARG "unable to process address space...",
// which is how a non page-aligned offset or a zero size fails). The test
// mapping is undone at once.
func Inspect(name, key string, offset, byteSize uint64) error {
	fd, size, err := open(key)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if offset > uint64(size) || byteSize > uint64(size)-offset {
		return tritonerr.InvalidArgf("failed to register shared memory region '%s': invalid args", name)
	}
	b, err := mmap(fd, offset, byteSize, 0)
	if err != nil {
		return tritonerr.InvalidArgf("failed to register shared memory region '%s': unable to process address space%s", name, strerror(err))
	}
	_ = syscall.Munmap(b)
	return nil
}

func mmap(fd int, offset, byteSize uint64, extra int) ([]byte, error) {
	if byteSize == 0 || byteSize > uint64(maxInt) || offset > uint64(maxInt64) {
		return nil, syscall.EINVAL
	}
	return syscall.Mmap(fd, int64(offset), int(byteSize), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|extra)
}

const (
	maxInt   = int(^uint(0) >> 1)
	maxInt64 = 1<<63 - 1
)

// Mapping is a region mapped into this process (MAP_SHARED: writes reach
// the client at once). Data is the region; it stays valid until Close.
//
// The client owns the object and may truncate it at any moment, after
// which touching Data raises SIGBUS: read and write Data only inside Guard
// (or with Read, Write and Copy, which guard themselves), and Poison the
// mapping when a guarded access faults in it.
type Mapping struct {
	Data     []byte
	key      string
	fd       int
	offset   uint64
	poisoned atomic.Bool
	w        Watch // nil: not watched (see Watcher)
}

// Map maps byteSize bytes of the object key names, from offset (which must
// be page-aligned, as Inspect ensured at register). The pages are faulted
// in now (MAP_POPULATE): first-touch faults run near 1 GB/s, several times
// slower than the copies that follow, so they are paid once, here. The
// object stays open so that Check can tell when a client has shrunk it.
func Map(key string, offset, byteSize uint64) (*Mapping, error) {
	fd, size, err := open(key)
	if err != nil {
		return nil, err
	}
	m := &Mapping{key: key, fd: fd, offset: offset}
	if offset > uint64(size) || byteSize > uint64(size)-offset {
		_ = syscall.Close(fd)
		return nil, errTruncated(key)
	}
	if byteSize == 0 {
		m.Data = []byte{}
		return m, nil
	}
	if m.Data, err = mmap(fd, offset, byteSize, syscall.MAP_POPULATE); err != nil {
		_ = syscall.Close(fd)
		return nil, tritonerr.Internalf("unable to map shared memory region '%s': %s", key, strerror(err))
	}
	m.w = watch(m.Data)
	return m, nil
}

// Check reports an error when the object no longer covers the mapping (a
// client truncated it): touching the missing pages would raise SIGBUS. A
// poisoned mapping fails for good, whatever the object's size now.
func (m *Mapping) Check() error {
	if m.Poisoned() {
		return m.errPoisoned()
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(m.fd, &st); err != nil || st.Size < 0 {
		return tritonerr.Internalf("Invalid shared memory region: '%s'", m.key)
	}
	if uint64(st.Size) < m.offset+uint64(len(m.Data)) {
		return errTruncated(m.key)
	}
	return nil
}

// errTruncated is the answer for an object that no longer covers the range
// registered on it: its owner shrank it after registering. The request is
// refused before anything touches the missing pages; it is the client's
// doing (INVALID_ARG, HTTP 400), as a fault while in use is.
func errTruncated(key string) error {
	return tritonerr.InvalidArgf("shared memory object '%s' was truncated by its owner: it no longer covers the registered region; unregister the region and register it again", key)
}

// Close unmaps the region and closes the object.
func (m *Mapping) Close() error {
	var err error
	if m.w != nil {
		m.w.Unwatch() // before the address range can be reused
		m.w = nil
	}
	if len(m.Data) > 0 {
		err = syscall.Munmap(m.Data)
		m.Data = nil
	}
	if m.fd >= 0 {
		err = errors.Join(err, syscall.Close(m.fd))
		m.fd = -1
	}
	return err
}

// Contains reports whether addr lies in the mapping: whether a Fault at
// addr was this mapping's.
func (m *Mapping) Contains(addr uintptr) bool {
	if len(m.Data) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(m.Data)))
	return addr >= start && addr-start < uintptr(len(m.Data))
}

// Poison marks the mapping unusable: an access faulted in it, so its
// owner truncated the object while it was in use, and whatever it holds
// now cannot be trusted even if the object grows back. Check fails from
// then on; the client registers the region again to get a fresh mapping.
func (m *Mapping) Poison() { m.poisoned.Store(true) }

// Poisoned reports whether Poison was called or the Watcher's handler
// absorbed a fault in the mapping.
func (m *Mapping) Poisoned() bool {
	if m.poisoned.Load() {
		return true
	}
	if m.w != nil && m.w.Poisoned() {
		m.poisoned.Store(true)
		return true
	}
	return false
}

func (m *Mapping) errPoisoned() error {
	return tritonerr.InvalidArgf("shared memory object '%s' was truncated while the server used it; regions on it are unusable until unregistered and registered again", m.key)
}

// Read copies len(dst) bytes from the mapping at off into dst (private
// memory, safe to hand to code that Guard cannot protect, such as C). A
// fault poisons the mapping and returns the Check error.
func (m *Mapping) Read(dst []byte, off uint64) error {
	if off > uint64(len(m.Data)) || uint64(len(dst)) > uint64(len(m.Data))-off {
		return tritonerr.Internalf("read of %d bytes at %d past the end of a shared memory mapping of %d bytes", len(dst), off, len(m.Data))
	}
	return m.guarded(func() { copy(dst, m.Data[off:]) })
}

// Write copies src into the mapping at off; a fault poisons the mapping.
func (m *Mapping) Write(off uint64, src []byte) error {
	if off > uint64(len(m.Data)) || uint64(len(src)) > uint64(len(m.Data))-off {
		return tritonerr.Internalf("write of %d bytes at %d past the end of a shared memory mapping of %d bytes", len(src), off, len(m.Data))
	}
	return m.guarded(func() { copy(m.Data[off:], src) })
}

func (m *Mapping) guarded(fn func()) error {
	if m.Poisoned() {
		return m.errPoisoned()
	}
	err := Guard(func() error { fn(); return nil })
	if f, ok := AsFault(err); ok && m.Contains(f.Addr) {
		m.Poison()
		return m.errPoisoned()
	}
	if err == nil && m.Poisoned() {
		// A Watcher's handler absorbed the fault: what was read is zeros.
		return m.errPoisoned()
	}
	return err
}

// Copy copies src to dst (either may be a mapping) and turns a fault on a
// mapped page (the object was shrunk under us) into an error instead of a
// crash. Prefer Read and Write when the mapping is at hand: they also
// poison it.
func Copy(dst, src []byte) (n int, err error) {
	err = Guard(func() error { n = copy(dst, src); return nil })
	if err != nil {
		return 0, tritonerr.Internalf("shared memory fault while copying: %v", err)
	}
	return n, nil
}

// Create makes a new shared-memory object of size bytes under key and maps
// all of it, as a client's create_shared_memory_region does. It fails when
// the key exists. Remove the object with Unlink.
func Create(key string, size int) (*Mapping, error) {
	p, ok := path(key)
	if !ok {
		return nil, fmt.Errorf("shm: invalid key %q", key)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		_ = os.Remove(p)
		return nil, err
	}
	m, err := Map(key, 0, uint64(size))
	if err != nil {
		_ = os.Remove(p)
		return nil, err
	}
	return m, nil
}

// Unlink removes the object key names (shm_unlink); mappings stay valid.
func Unlink(key string) error {
	p, ok := path(key)
	if !ok {
		return fmt.Errorf("shm: invalid key %q", key)
	}
	return os.Remove(p)
}

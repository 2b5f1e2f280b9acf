package shm

import (
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

func wantErr(t *testing.T, err error, kind tritonerr.Kind, msg string) {
	t.Helper()
	if msg == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want %s %q", kind, msg)
	}
	te := tritonerr.From(err)
	if te.Kind != kind || !strings.Contains(te.Msg, msg) {
		t.Fatalf("error %s %q, want %s %q", te.Kind, te.Msg, kind, msg)
	}
}

func TestValidateKey(t *testing.T) {
	for _, tc := range []struct{ key, err string }{
		{"/input0", ""},
		{"input0", ""},
		{"//input0", ""},
		{"", "cannot register shared memory region 'r' - invalid shm key ''"},
		{"/", "invalid shm key '/'"},
		{"///", "invalid shm key '///'"},
		{"/../etc/passwd", "invalid shm key"},
		{"..", "invalid shm key"},
		{"/.", "invalid shm key"},
		{"/a/b", "invalid shm key"},
		{"/a/", "invalid shm key"},
		{"/a\x00b", "invalid shm key"},
		{"/" + strings.Repeat("k", 256), "invalid shm key"},
		{"/triton_python_backend_shm_region_x", "cannot register shared memory region 'r' with key '/triton_python_backend_shm_region_x' as the key contains the reserved prefix 'triton_python_backend_shm_region_'"},
		{"triton_python_backend_shm_region_", "reserved prefix"},
		{"/xtriton_python_backend_shm_region_", ""},
	} {
		t.Run(fmt.Sprintf("%q", tc.key), func(t *testing.T) {
			wantErr(t, ValidateKey("r", tc.key), tritonerr.InvalidArg, tc.err)
			if _, ok := path(tc.key); ok != (tc.err == "" || strings.Contains(tc.err, "reserved")) {
				t.Fatalf("path(%q) ok=%v", tc.key, ok)
			}
		})
	}
}

func TestCheckRange(t *testing.T) {
	for _, tc := range []struct {
		size, off, n uint64
		err          string
	}{
		{64, 0, 64, ""},
		{64, 32, 32, ""},
		{64, 63, 1, ""},
		{64, 64, 0, "Invalid offset for shared memory region: 'r'"},
		{0, 0, 0, "Invalid offset for shared memory region: 'r'"},
		{64, 0, 65, "Invalid offset + byte size for shared memory region: 'r'"},
		{64, 32, 33, "Invalid offset + byte size"},
		{64, 1, math.MaxUint64, "Integer overflow detected: byte_size (18446744073709551615) + offset (1) exceeds maximum value (18446744073709551615) for region 'r'"},
	} {
		wantErr(t, CheckRange("r", tc.size, tc.off, tc.n), tritonerr.InvalidArg, tc.err)
	}
	// Triton's HTTP test: offset 2^64-32 in a 64-byte region fails the
	// offset check first.
	wantErr(t, CheckRange("r", 64, math.MaxUint64-31, 64), tritonerr.InvalidArg, "Invalid offset")
}

func str(s string) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: s}}
}
func i64(v int64) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: v}}
}
func u64(v uint64) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: v}}
}

func TestFromParams(t *testing.T) {
	type P = map[string]*inference.InferParameter
	for _, tc := range []struct {
		name   string
		params P
		strict bool
		want   Ref
		ok     bool
		err    string
	}{
		{"none", P{"x": i64(1)}, true, Ref{}, false, ""},
		{"all", P{ParamRegion: str("r"), ParamOffset: i64(8), ParamByteSize: i64(16)}, true, Ref{"r", 8, 16}, true, ""},
		{"no offset", P{ParamRegion: str("r"), ParamByteSize: i64(16)}, true, Ref{"r", 0, 16}, true, ""},
		{"negative offset", P{ParamRegion: str("r"), ParamOffset: i64(-1), ParamByteSize: i64(16)}, true, Ref{"r", math.MaxUint64, 16}, true, ""},
		{"region not string", P{ParamRegion: i64(1), ParamByteSize: i64(16)}, true, Ref{}, false,
			"invalid value type for 'shared_memory_region' parameter for tensor 't', expected string_param."},
		{"offset not int64", P{ParamRegion: str("r"), ParamOffset: str("1"), ParamByteSize: i64(16)}, true, Ref{}, false,
			"invalid value type for 'shared_memory_offset' parameter for tensor 't', expected int64_param."},
		{"size uint64 strict", P{ParamRegion: str("r"), ParamByteSize: u64(16)}, true, Ref{}, false,
			"invalid value type for 'shared_memory_byte_size' parameter for tensor 't', expected int64_param."},
		{"size uint64 lenient", P{ParamRegion: str("r"), ParamByteSize: u64(math.MaxUint64)}, false, Ref{"r", 0, math.MaxUint64}, true, ""},
		{"no size", P{ParamRegion: str("r")}, true, Ref{}, false,
			"'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 't'"},
		{"no size lenient", P{ParamRegion: str("r")}, false, Ref{"r", 0, 0}, true, ""},
		{"size without region", P{ParamByteSize: i64(16)}, true, Ref{}, false,
			"'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 't'"},
		{"offset without region", P{ParamOffset: i64(16)}, true, Ref{}, false,
			"'shared_memory_offset' can not be specified without 'shared_memory_region' parameter for tensor 't'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, ok, err := FromParams("t", tc.params, tc.strict)
			wantErr(t, err, tritonerr.InvalidArg, tc.err)
			if ref != tc.want || ok != tc.ok {
				t.Fatalf("got %+v %v, want %+v %v", ref, ok, tc.want, tc.ok)
			}
		})
	}
	ref := Ref{"r", 1 << 63, 4}
	back, ok, err := FromParams("t", Params(ref), false)
	if err != nil || !ok || back != ref {
		t.Fatalf("round trip: %+v %v %v", back, ok, err)
	}
}

func testKey(t *testing.T) string {
	return fmt.Sprintf("/nereid-shm-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"))
}

func TestInspect(t *testing.T) {
	key := testKey(t)
	m, err := Create(key, 3*os.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer Unlink(key)
	page := uint64(os.Getpagesize())
	size := 3 * page

	fifo := testKey(t) + "-fifo"
	if err := syscall.Mkfifo(Dir+fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	defer Unlink(fifo)
	link := testKey(t) + "-link"
	if err := os.Symlink(Dir+key, Dir+link); err != nil {
		t.Fatal(err)
	}
	defer Unlink(link)

	for _, tc := range []struct {
		name   string
		key    string
		off, n uint64
		kind   tritonerr.Kind
		err    string
	}{
		{"whole", key, 0, size, 0, ""},
		{"second page", key, page, page, 0, ""},
		{"missing", "/nereid-no-such-key", 0, 1, tritonerr.Internal, "Unable to open shared memory region: '/nereid-no-such-key'"},
		{"escape", "/../../etc/passwd", 0, 1, tritonerr.Internal, "Unable to open shared memory region"},
		{"fifo", fifo, 0, 1, tritonerr.Internal, "Invalid shared memory region: '" + fifo + "'"},
		{"symlink", link, 0, 1, tritonerr.Internal, "Unable to open shared memory region"},
		{"size+1", key, 0, size + 1, tritonerr.InvalidArg, "failed to register shared memory region 'r': invalid args"},
		{"offset 1 full size", key, 1, size, tritonerr.InvalidArg, "invalid args"},
		{"offset size, size 1", key, size, 1, tritonerr.InvalidArg, "invalid args"},
		{"offset size+1, size 0", key, size + 1, 0, tritonerr.InvalidArg, "invalid args"},
		{"overflow", key, page, math.MaxUint64, tritonerr.InvalidArg, "invalid args"},
		{"unaligned", key, 8, 8, tritonerr.InvalidArg, "failed to register shared memory region 'r': unable to process address spaceInvalid argument"},
		{"zero size", key, 0, 0, tritonerr.InvalidArg, "unable to process address spaceInvalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, Inspect("r", tc.key, tc.off, tc.n), tc.kind, tc.err)
		})
	}
}

func TestMapSeesClientWrites(t *testing.T) {
	key := testKey(t)
	client, err := Create(key, 2*os.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	defer Unlink(key)
	page := os.Getpagesize()
	server, err := Map(key, uint64(page), uint64(page))
	if err != nil {
		t.Fatal(err)
	}
	copy(client.Data[page:], "hello")
	if string(server.Data[:5]) != "hello" {
		t.Fatalf("server sees %q", server.Data[:5])
	}
	if _, err := Copy(server.Data[8:], []byte("world")); err != nil {
		t.Fatal(err)
	}
	if string(client.Data[page+8:page+13]) != "world" {
		t.Fatalf("client sees %q", client.Data[page+8:page+13])
	}
	if err := server.Check(); err != nil {
		t.Fatal(err)
	}
	// A client that shrinks the object under a mapping: Check notices, and
	// a copy that touches the lost pages fails instead of crashing.
	if err := os.Truncate(Dir+key, int64(page)); err != nil {
		t.Fatal(err)
	}
	wantErr(t, server.Check(), tritonerr.InvalidArg, "shared memory object '"+key+"' was truncated by its owner")
	_, err = Copy(make([]byte, 16), server.Data)
	wantErr(t, err, tritonerr.Internal, "shared memory fault")
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Map(key, uint64(page), uint64(page)); err == nil {
		t.Fatal("mapped past the end of a shrunk object")
	}
}

// A client truncating its object under a mapping: guarded reads and writes
// fail with an error instead of killing the process, the faulted mapping
// stays unusable even once the object grows back, and another mapping of
// the same object is untouched until it faults itself.
func TestGuardTruncatedObject(t *testing.T) {
	key := testKey(t)
	page := os.Getpagesize()
	client, err := Create(key, 2*page)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	defer Unlink(key)
	a, err := Map(key, 0, uint64(2*page))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Map(key, 0, uint64(2*page))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	copy(client.Data, "hello")
	buf := make([]byte, 5)
	if err := a.Read(buf, 0); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}

	if err := os.Truncate(Dir+key, 0); err != nil {
		t.Fatal(err)
	}
	wantErr(t, a.Read(buf, 0), tritonerr.InvalidArg, "was truncated while the server used it; regions on it are unusable until unregistered and registered again")
	if !a.Poisoned() || b.Poisoned() {
		t.Fatalf("poisoned: a %v, b %v; want only a", a.Poisoned(), b.Poisoned())
	}
	// A raw access under Guard reports the address, which names the mapping.
	err = Guard(func() error { b.Data[page] = 1; return nil })
	f, ok := AsFault(err)
	if !ok || !b.Contains(f.Addr) || a.Contains(f.Addr) {
		t.Fatalf("Guard: %v (fault %v); want a fault inside b only", err, ok)
	}

	if err := os.Truncate(Dir+key, int64(2*page)); err != nil {
		t.Fatal(err)
	}
	wantErr(t, a.Check(), tritonerr.InvalidArg, "unusable until unregistered and registered again")
	wantErr(t, a.Write(0, []byte("x")), tritonerr.InvalidArg, "unusable")
	if err := b.Check(); err != nil {
		t.Fatalf("unpoisoned mapping of the regrown object: %v", err)
	}
	if err := b.Write(0, []byte("again")); err != nil || string(client.Data[:5]) != "again" {
		t.Fatalf("write through b: %v, client sees %q", err, client.Data[:5])
	}
	wantErr(t, b.Read(make([]byte, 1), uint64(2*page)), tritonerr.Internal, "past the end")
}

func TestGuardPassesOtherPanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func() error
	}{
		{"value", func() error { panic("boom") }},
		{"nil dereference", func() error { var p *int; return fmt.Errorf("%d", *p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("Guard swallowed a panic that is not a fault")
				}
			}()
			_ = Guard(tc.fn)
		})
	}
	if err := Guard(func() error { return os.ErrClosed }); err != os.ErrClosed {
		t.Fatalf("Guard returned %v, want fn's error", err)
	}
}

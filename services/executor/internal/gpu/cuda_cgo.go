//go:build linux && cgo

package gpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The few CUDA driver types we use, declared here so that no CUDA header
// is needed to build.
typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 1

static void* nereid_cuda_lib;
static CUresult (*p_cuInit)(unsigned int);
static CUresult (*p_cuDeviceGetCount)(int*);
static CUresult (*p_cuDeviceGet)(CUdevice*, int);
static CUresult (*p_cuDeviceGetPCIBusId)(char*, int, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRelease)(CUdevice);
static CUresult (*p_cuCtxPushCurrent)(CUcontext);
static CUresult (*p_cuCtxPopCurrent)(CUcontext*);
static CUresult (*p_cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned int);
static CUresult (*p_cuIpcCloseMemHandle)(CUdeviceptr);
static CUresult (*p_cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
static CUresult (*p_cuMemGetAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr);
static CUresult (*p_cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
static CUresult (*p_cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
static CUresult (*p_cuMemAlloc)(CUdeviceptr*, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuGetErrorName)(CUresult, const char**);

// nereid_cuda_load opens the driver library (libcuda.so.1) and resolves
// every symbol; it returns NULL on success, else what failed. Nothing is
// called before all resolve.
static const char* nereid_cuda_load(const char* path) {
	static char msg[512];
	nereid_cuda_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!nereid_cuda_lib) {
		const char* e = dlerror();
		snprintf(msg, sizeof msg, "%s", e ? e : "dlopen of the CUDA driver failed");
		return msg;
	}
#define SYM(var, name) \
	*(void**)(&var) = dlsym(nereid_cuda_lib, name); \
	if (!var) { snprintf(msg, sizeof msg, "%s has no symbol %s", path, name); return msg; }
	SYM(p_cuInit, "cuInit");
	SYM(p_cuDeviceGetCount, "cuDeviceGetCount");
	SYM(p_cuDeviceGet, "cuDeviceGet");
	SYM(p_cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId");
	SYM(p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(p_cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	SYM(p_cuCtxPushCurrent, "cuCtxPushCurrent_v2");
	SYM(p_cuCtxPopCurrent, "cuCtxPopCurrent_v2");
	SYM(p_cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2");
	SYM(p_cuIpcCloseMemHandle, "cuIpcCloseMemHandle");
	SYM(p_cuIpcGetMemHandle, "cuIpcGetMemHandle");
	SYM(p_cuMemGetAddressRange, "cuMemGetAddressRange_v2");
	SYM(p_cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(p_cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	SYM(p_cuMemAlloc, "cuMemAlloc_v2");
	SYM(p_cuMemFree, "cuMemFree_v2");
	SYM(p_cuGetErrorName, "cuGetErrorName");
#undef SYM
	return NULL;
}

static CUresult nereid_cuInit(void) { return p_cuInit(0); }
static CUresult nereid_device_count(int* n) { return p_cuDeviceGetCount(n); }

static CUresult nereid_bus_id(int ordinal, char* buf, int len) {
	CUdevice dev;
	CUresult r = p_cuDeviceGet(&dev, ordinal);
	if (r) return r;
	return p_cuDeviceGetPCIBusId(buf, len, dev);
}

static CUresult nereid_ctx_retain(int ordinal, CUcontext* ctx) {
	CUdevice dev;
	CUresult r = p_cuDeviceGet(&dev, ordinal);
	if (r) return r;
	return p_cuDevicePrimaryCtxRetain(ctx, dev);
}

static CUresult nereid_ctx_release(int ordinal) {
	CUdevice dev;
	CUresult r = p_cuDeviceGet(&dev, ordinal);
	if (r) return r;
	return p_cuDevicePrimaryCtxRelease(dev);
}

// Every operation below runs with ctx pushed on this thread and popped
// again before returning, all in one cgo call (so on one OS thread).
#define WITH_CTX(ctx, body) \
	CUresult r = p_cuCtxPushCurrent(ctx); \
	if (r) return r; \
	body; \
	CUcontext old; \
	CUresult r2 = p_cuCtxPopCurrent(&old); \
	return r ? r : r2;

static CUresult nereid_ipc_open(CUcontext ctx, const void* handle, CUdeviceptr* ptr, size_t* size) {
	CUipcMemHandle h;
	memcpy(&h, handle, sizeof h);
	WITH_CTX(ctx, {
		r = p_cuIpcOpenMemHandle(ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		if (!r) {
			CUdeviceptr base;
			r = p_cuMemGetAddressRange(&base, size, *ptr);
			if (r) p_cuIpcCloseMemHandle(*ptr);
		}
	})
}

static CUresult nereid_ipc_close(CUcontext ctx, CUdeviceptr ptr) {
	WITH_CTX(ctx, { r = p_cuIpcCloseMemHandle(ptr); })
}

static CUresult nereid_dtoh(CUcontext ctx, void* dst, CUdeviceptr src, size_t n) {
	WITH_CTX(ctx, { r = p_cuMemcpyDtoH(dst, src, n); })
}

static CUresult nereid_htod(CUcontext ctx, CUdeviceptr dst, const void* src, size_t n) {
	WITH_CTX(ctx, { r = p_cuMemcpyHtoD(dst, src, n); })
}

static CUresult nereid_alloc(CUcontext ctx, size_t n, CUdeviceptr* ptr, void* handle) {
	WITH_CTX(ctx, {
		r = p_cuMemAlloc(ptr, n);
		if (!r) {
			CUipcMemHandle h;
			r = p_cuIpcGetMemHandle(&h, *ptr);
			if (r) p_cuMemFree(*ptr); else memcpy(handle, &h, sizeof h);
		}
	})
}

static CUresult nereid_free(CUcontext ctx, CUdeviceptr ptr) {
	WITH_CTX(ctx, { r = p_cuMemFree(ptr); })
}

static const char* nereid_error_name(CUresult r) {
	const char* s = NULL;
	if (p_cuGetErrorName == NULL || p_cuGetErrorName(r, &s) != 0 || s == NULL) return "CUDA_ERROR_UNKNOWN";
	return s;
}
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// Driver is the CUDA driver, loaded and initialised.
type Driver struct {
	mu   sync.Mutex
	ctxs map[int]C.CUcontext // primary contexts retained, by ordinal
}

var (
	loadOnce sync.Once
	loaded   *Driver
	loadErr  error
)

// cuError is a failed driver call.
type cuError struct {
	call string
	code C.CUresult
}

func (e *cuError) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.call, C.GoString(C.nereid_error_name(e.code)), int(e.code))
}

func check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &cuError{call, r}
}

// cudaErrorNoDevice is CUDA_ERROR_NO_DEVICE, cuInit's answer on a machine
// with a driver but no GPU.
const cudaErrorNoDevice = 100

// Load opens libcuda.so.1 and initialises the driver, once per process.
// Without a driver or a device it returns an error wrapping ErrNoGPU, and
// no further driver function is ever called.
func Load() (*Driver, error) {
	loadOnce.Do(func() { loaded, loadErr = load("libcuda.so.1") })
	return loaded, loadErr
}

// LoadLibrary is Load from the driver library at path, not once: for tests
// that run the CUDA paths on a stand-in of the driver where there is no
// GPU. The driver's functions are the process's: no other may be in use.
func LoadLibrary(path string) (*Driver, error) { return load(path) }

func load(path string) (*Driver, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if msg := C.nereid_cuda_load(cpath); msg != nil {
		return nil, fmt.Errorf("%w: %s", ErrNoGPU, C.GoString(msg))
	}
	if r := C.nereid_cuInit(); r != 0 {
		return nil, fmt.Errorf("%w: %w", ErrNoGPU, check("cuInit", r))
	}
	var n C.int
	if err := check("cuDeviceGetCount", C.nereid_device_count(&n)); err != nil || n == 0 {
		return nil, fmt.Errorf("%w: no CUDA device (%w)", ErrNoGPU, err)
	}
	return &Driver{ctxs: map[int]C.CUcontext{}}, nil
}

// DeviceCount is the number of CUDA devices this process sees.
func (d *Driver) DeviceCount() (int, error) {
	var n C.int
	if err := check("cuDeviceGetCount", C.nereid_device_count(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// BusID is the PCI bus id of CUDA device ordinal, in NVML's spelling.
func (d *Driver) BusID(ordinal int) (string, error) {
	buf := make([]byte, 64)
	if err := check("cuDeviceGetPCIBusId", C.nereid_bus_id(C.int(ordinal), (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))); err != nil {
		return "", err
	}
	return normalizeBusID(C.GoString((*C.char)(unsafe.Pointer(&buf[0])))), nil
}

// ctx retains (once) and returns the primary context of ordinal.
func (d *Driver) ctx(ordinal int) (C.CUcontext, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.ctxs[ordinal]; ok {
		return c, nil
	}
	var c C.CUcontext
	if err := check("cuDevicePrimaryCtxRetain", C.nereid_ctx_retain(C.int(ordinal), &c)); err != nil {
		return nil, err
	}
	d.ctxs[ordinal] = c
	return c, nil
}

// Close releases the primary contexts retained.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []string
	for o := range d.ctxs {
		if err := check("cuDevicePrimaryCtxRelease", C.nereid_ctx_release(C.int(o))); err != nil {
			errs = append(errs, err.Error())
		}
		delete(d.ctxs, o)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// IPCMem is device memory of another process, opened from its IPC handle.
type IPCMem struct {
	ctx     C.CUcontext
	ptr     C.CUdeviceptr
	ordinal int
	// Size is the size of the allocation the handle points into, from the
	// handle's pointer on (cuMemGetAddressRange).
	Size uint64
}

// OpenIPC opens handle (a cudaIpcMemHandle_t) on CUDA device ordinal.
func (d *Driver) OpenIPC(ordinal int, handle []byte) (*IPCMem, error) {
	if len(handle) != HandleSize {
		return nil, fmt.Errorf("CUDA IPC handle of %d bytes, want %d", len(handle), HandleSize)
	}
	c, err := d.ctx(ordinal)
	if err != nil {
		return nil, err
	}
	m := &IPCMem{ctx: c, ordinal: ordinal}
	var size C.size_t
	if err := check("cuIpcOpenMemHandle_v2", C.nereid_ipc_open(c, unsafe.Pointer(&handle[0]), &m.ptr, &size)); err != nil {
		return nil, err
	}
	m.Size = uint64(size)
	return m, nil
}

// Ptr is the memory's device address in this process (in the primary
// context of its device), where a kernel or a backend reads and writes it.
func (m *IPCMem) Ptr() uintptr { return uintptr(m.ptr) }

// Ordinal is the CUDA device the memory is on, as this process numbers
// devices.
func (m *IPCMem) Ordinal() int { return m.ordinal }

func (m *IPCMem) span(offset uint64, n int) error {
	if offset > m.Size || uint64(n) > m.Size-offset {
		return fmt.Errorf("copy of %d bytes at offset %d passes the end of a %d-byte allocation", n, offset, m.Size)
	}
	return nil
}

// CopyToHost copies len(dst) bytes from offset into dst.
func (m *IPCMem) CopyToHost(dst []byte, offset uint64) error {
	if len(dst) == 0 {
		return nil
	}
	if err := m.span(offset, len(dst)); err != nil {
		return err
	}
	return check("cuMemcpyDtoH_v2", C.nereid_dtoh(m.ctx, unsafe.Pointer(&dst[0]), m.ptr+C.CUdeviceptr(offset), C.size_t(len(dst))))
}

// CopyFromHost copies src to offset.
func (m *IPCMem) CopyFromHost(offset uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := m.span(offset, len(src)); err != nil {
		return err
	}
	return check("cuMemcpyHtoD_v2", C.nereid_htod(m.ctx, m.ptr+C.CUdeviceptr(offset), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// Close closes the handle (cuIpcCloseMemHandle).
func (m *IPCMem) Close() error {
	if m.ptr == 0 {
		return nil
	}
	err := check("cuIpcCloseMemHandle", C.nereid_ipc_close(m.ctx, m.ptr))
	m.ptr = 0
	return err
}

// DeviceMem is memory this process allocated and exported, as a client
// does before registering CUDA shared memory (tests use it as the client).
type DeviceMem struct {
	ctx    C.CUcontext
	ptr    C.CUdeviceptr
	Handle []byte // the cudaIpcMemHandle_t to register
	Size   uint64
}

// Alloc allocates size bytes on device ordinal and exports an IPC handle.
func (d *Driver) Alloc(ordinal int, size uint64) (*DeviceMem, error) {
	c, err := d.ctx(ordinal)
	if err != nil {
		return nil, err
	}
	m := &DeviceMem{ctx: c, Handle: make([]byte, HandleSize), Size: size}
	if err := check("cuMemAlloc_v2/cuIpcGetMemHandle", C.nereid_alloc(c, C.size_t(size), &m.ptr, unsafe.Pointer(&m.Handle[0]))); err != nil {
		return nil, err
	}
	return m, nil
}

// Ptr is the allocation's device address.
func (m *DeviceMem) Ptr() uintptr { return uintptr(m.ptr) }

// Write copies src to offset of the allocation.
func (m *DeviceMem) Write(offset uint64, src []byte) error {
	return (&IPCMem{ctx: m.ctx, ptr: m.ptr, Size: m.Size}).CopyFromHost(offset, src)
}

// Read copies from offset into dst.
func (m *DeviceMem) Read(dst []byte, offset uint64) error {
	return (&IPCMem{ctx: m.ctx, ptr: m.ptr, Size: m.Size}).CopyToHost(dst, offset)
}

// Free frees the allocation.
func (m *DeviceMem) Free() error {
	if m.ptr == 0 {
		return nil
	}
	err := check("cuMemFree_v2", C.nereid_free(m.ctx, m.ptr))
	m.ptr = 0
	return err
}

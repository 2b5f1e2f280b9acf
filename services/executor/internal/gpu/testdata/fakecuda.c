/*
 * A stand-in of the CUDA driver (libcuda.so.1) for tests on machines
 * without a GPU, loaded with gpu.LoadLibrary: one device whose memory is
 * this process's host memory. An IPC handle carries the allocation's
 * address, so it opens only in the process that made it. Every
 * device-to-host copy is counted: a line appended to the file named by
 * NEREID_FAKE_CUDA_LOG, when set.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_INVALID_HANDLE 400

static int ctx_token;

/* The allocations, to answer cuMemGetAddressRange. */
static struct { CUdeviceptr base; size_t size; } allocs[256];

CUresult cuInit(unsigned int flags) { (void)flags; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
  *d = 0;
  return 0;
}
CUresult cuDeviceGetPCIBusId(char* buf, int len, CUdevice d) {
  (void)d;
  snprintf(buf, len, "0000:00:00.0");
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  (void)d;
  *c = &ctx_token;
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return 0; }
CUresult cuCtxPushCurrent_v2(CUcontext c) { (void)c; return 0; }
CUresult cuCtxPopCurrent_v2(CUcontext* c) {
  *c = &ctx_token;
  return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  for (int i = 0; i < 256; i++) {
    if (allocs[i].base == 0) {
      allocs[i].base = (CUdeviceptr)(uintptr_t)calloc(1, n ? n : 1);
      allocs[i].size = n;
      *p = allocs[i].base;
      return 0;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  for (int i = 0; i < 256; i++) {
    if (allocs[i].base == p) {
      free((void*)(uintptr_t)p);
      allocs[i].base = 0;
      return 0;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  for (int i = 0; i < 256; i++) {
    if (allocs[i].base != 0 && p >= allocs[i].base && p < allocs[i].base + allocs[i].size) {
      *base = allocs[i].base;
      *size = allocs[i].size - (size_t)(p - allocs[i].base);
      return 0;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) {
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &p, sizeof p);
  return 0;
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle h, unsigned int flags) {
  (void)flags;
  memcpy(p, h.reserved, sizeof *p);
  CUdeviceptr base;
  size_t size;
  return cuMemGetAddressRange_v2(&base, &size, *p) ? CUDA_ERROR_INVALID_HANDLE : 0;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr p) { (void)p; return 0; }

CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  memcpy(dst, (const void*)(uintptr_t)src, n);
  const char* log = getenv("NEREID_FAKE_CUDA_LOG");
  if (log != NULL) {
    FILE* f = fopen(log, "a");
    if (f != NULL) {
      fprintf(f, "dtoh %zu\n", n);
      fclose(f);
    }
  }
  return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  memcpy((void*)(uintptr_t)dst, src, n);
  return 0;
}
CUresult cuGetErrorName(CUresult r, const char** s) {
  (void)r;
  *s = "CUDA_ERROR_FAKE";
  return 0;
}

/*
 * A test backend for memory-type negotiation. For each request it asks
 * where OUTPUT0 will go (TRITONBACKEND_RequestOutputBufferProperties),
 * asks for OUTPUT0's buffer preferring GPU memory on device 0, and reads
 * INPUT0's buffer preferring GPU memory; it answers with what it was
 * given as the parameters "properties", "output" and "input", each
 * "TYPE:id" (CPU:0, GPU:3). Memory it got on the host it fills (OUTPUT0 =
 * INPUT0); GPU memory it leaves alone (it runs no device code).
 */
#include <stdio.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)

static TRITONSERVER_Error* where(TRITONBACKEND_Response* resp, const char* key, TRITONSERVER_MemoryType mt, int64_t id) {
  char v[64];
  snprintf(v, sizeof v, "%s:%lld", TRITONSERVER_MemoryTypeString(mt), (long long)id);
  return TRITONBACKEND_ResponseSetStringParameter(resp, key, v);
}

static TRITONSERVER_Error* respond(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  size_t size = 0;
  TRITONSERVER_MemoryType pmt = TRITONSERVER_MEMORY_CPU;
  int64_t pmid = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestOutputBufferProperties(request, "OUTPUT0", &size, &pmt, &pmid));
  RETURN_IF_ERROR(where(response, "properties", pmt, pmid));

  TRITONBACKEND_Input* input;
  const int64_t* shape;
  uint32_t dims;
  uint64_t byte_size;
  TRITONSERVER_DataType dt;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "INPUT0", &input));
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, NULL, &dt, &shape, &dims, &byte_size, NULL));
  const void* src;
  uint64_t n;
  TRITONSERVER_MemoryType imt = TRITONSERVER_MEMORY_GPU;
  int64_t imid = 0;
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &src, &n, &imt, &imid));
  RETURN_IF_ERROR(where(response, "input", imt, imid));

  TRITONBACKEND_Output* output;
  void* dst;
  TRITONSERVER_MemoryType omt = TRITONSERVER_MEMORY_GPU;
  int64_t omid = 0;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", dt, shape, dims));
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &dst, byte_size, &omt, &omid));
  RETURN_IF_ERROR(where(response, "output", omt, omid));
  TRITONSERVER_BufferAttributes* attrs;
  TRITONSERVER_MemoryType amt;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBufferAttributes(output, &attrs));
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesMemoryType(attrs, &amt));
  if (amt != omt) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "buffer attributes disagree with the buffer's memory type");
  if (omt != TRITONSERVER_MEMORY_GPU && imt != TRITONSERVER_MEMORY_GPU) memcpy(dst, src, n);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  (void)instance;
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err == NULL) {
      TRITONSERVER_Error* rerr = respond(requests[r], response);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, rerr);
      TRITONSERVER_ErrorDelete(rerr);
    }
    TRITONSERVER_ErrorDelete(err);
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return NULL;
}

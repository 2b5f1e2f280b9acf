/*
 * A BLS test backend: each request's INPUT0 is sent to the model named by
 * "cid" through
 * TRITONSERVER_ServerInferAsync; the caller's thread waits for the answer
 * and returns the called model's OUTPUT0 as its own OUTPUT0. It checks the
 * target's readiness and transaction policy first.
 *
 * A traced request (TRITONBACKEND_RequestTrace not null) answers with its
 * trace context and id as the parameters "trace_context" and "trace_id",
 * reports the activities BLS_CALL_START, BLS_CALL_END (a span "BLS_CALL")
 * and BLS_FORWARDED (an event), and hands the call a child trace spawned
 * from its own.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  TRITONSERVER_InferenceResponse* response;
  bool responded, released;
} call;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static TRITONSERVER_Error* alloc_fn(TRITONSERVER_ResponseAllocator* a, const char* name, size_t size, TRITONSERVER_MemoryType mt, int64_t mid, void* userp, void** buffer, void** buffer_userp, TRITONSERVER_MemoryType* amt, int64_t* amid) {
  (void)a; (void)name; (void)mt; (void)mid; (void)userp;
  *buffer = malloc(size ? size : 1);
  *buffer_userp = NULL;
  *amt = TRITONSERVER_MEMORY_CPU;
  *amid = 0;
  return NULL;
}

static TRITONSERVER_Error* release_fn(TRITONSERVER_ResponseAllocator* a, void* buffer, void* buffer_userp, size_t size, TRITONSERVER_MemoryType mt, int64_t mid) {
  (void)a; (void)buffer_userp; (void)size; (void)mt; (void)mid;
  free(buffer);
  return NULL;
}

static void response_fn(TRITONSERVER_InferenceResponse* response, const uint32_t flags, void* userp) {
  call* c = userp;
  pthread_mutex_lock(&c->mu);
  if (response) c->response = response;
  if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) c->responded = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void request_release_fn(TRITONSERVER_InferenceRequest* request, const uint32_t flags, void* userp) {
  call* c = userp;
  (void)flags;
  TRITONSERVER_InferenceRequestDelete(request);
  pthread_mutex_lock(&c->mu);
  c->released = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static TRITONSERVER_Error* forward(TRITONSERVER_Server* server, TRITONSERVER_ResponseAllocator* allocator, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  bool ready = false;
  RETURN_IF_ERROR(TRITONSERVER_ServerModelIsReady(server, "cid", -1, &ready));
  if (!ready) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "model cid is not ready");
  uint32_t txn;
  RETURN_IF_ERROR(TRITONSERVER_ServerModelTransactionProperties(server, "cid", -1, &txn, NULL));
  if (txn != TRITONSERVER_TXN_ONE_TO_ONE) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "cid is not one-to-one");

  TRITONBACKEND_Input* input;
  const char* name;
  TRITONSERVER_DataType dt;
  const int64_t* shape;
  uint32_t dims;
  uint64_t size;
  const void* data;
  TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
  int64_t mid = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "INPUT0", &input));
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, &name, &dt, &shape, &dims, &size, NULL));
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &size, &mt, &mid));

  call c = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  TRITONSERVER_InferenceRequest* req;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestNew(&req, server, "cid", -1));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetId(req, "bls"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddInput(req, "INPUT0", dt, shape, dims));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAppendInputData(req, "INPUT0", data, size, TRITONSERVER_MEMORY_CPU, 0));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddRequestedOutput(req, "OUTPUT0"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetReleaseCallback(req, request_release_fn, &c));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetResponseCallback(req, allocator, NULL, response_fn, &c));
  TRITONSERVER_InferenceTrace* trace = NULL;
  TRITONSERVER_InferenceTrace* child = NULL;
  RETURN_IF_ERROR(TRITONBACKEND_RequestTrace(request, &trace));
  if (trace != NULL) {
    const char* ctx;
    uint64_t id, parent;
    RETURN_IF_ERROR(TRITONSERVER_InferenceTraceContext(trace, &ctx));
    RETURN_IF_ERROR(TRITONSERVER_InferenceTraceId(trace, &id));
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSetStringParameter(response, "trace_context", ctx));
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSetIntParameter(response, "trace_id", (int64_t)id));
    RETURN_IF_ERROR(TRITONSERVER_InferenceTraceReportActivity(trace, now_ns(), "BLS_CALL_START"));
    RETURN_IF_ERROR(TRITONSERVER_InferenceTraceSpawnChildTrace(trace, &child));
    RETURN_IF_ERROR(TRITONSERVER_InferenceTraceParentId(child, &parent));
    if (parent != id) {
      char msg[128];
      snprintf(msg, sizeof msg, "child trace has parent %llu, want %llu", (unsigned long long)parent, (unsigned long long)id);
      return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, msg);
    }
  }
  RETURN_IF_ERROR(TRITONSERVER_ServerInferAsync(server, req, child));

  pthread_mutex_lock(&c.mu);
  while (!c.responded || !c.released) pthread_cond_wait(&c.cv, &c.mu);
  pthread_mutex_unlock(&c.mu);

  TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(c.response);
  uint32_t n = 0;
  if (err == NULL) err = TRITONSERVER_InferenceResponseOutputCount(c.response, &n);
  if (err == NULL && n != 1) err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "cid answered without exactly one output");
  if (err == NULL) {
    const char* oname;
    TRITONSERVER_DataType odt;
    const int64_t* oshape;
    uint64_t odims;
    const void* base;
    size_t obytes;
    TRITONSERVER_MemoryType omt;
    int64_t omid;
    void* userp;
    err = TRITONSERVER_InferenceResponseOutput(c.response, 0, &oname, &odt, &oshape, &odims, &base, &obytes, &omt, &omid, &userp);
    TRITONBACKEND_Output* output;
    void* dst;
    if (err == NULL) err = TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", odt, oshape, (uint32_t)odims);
    if (err == NULL) err = TRITONBACKEND_OutputBuffer(output, &dst, obytes, &mt, &mid);
    if (err == NULL) memcpy(dst, base, obytes);
  }
  TRITONSERVER_InferenceResponseDelete(c.response);
  if (err == NULL && trace != NULL) {
    err = TRITONSERVER_InferenceTraceReportActivity(trace, now_ns(), "BLS_CALL_END");
    if (err == NULL) err = TRITONSERVER_InferenceTraceReportActivity(trace, now_ns(), "BLS_FORWARDED");
  }
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  TRITONBACKEND_Model* model;
  TRITONSERVER_Server* server;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &server));
  TRITONSERVER_ResponseAllocator* allocator;
  RETURN_IF_ERROR(TRITONSERVER_ResponseAllocatorNew(&allocator, alloc_fn, release_fn, NULL));
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err == NULL) {
      TRITONSERVER_Error* ferr = forward(server, allocator, requests[r], response);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, ferr);
      TRITONSERVER_ErrorDelete(ferr);
    }
    TRITONSERVER_ErrorDelete(err);
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return TRITONSERVER_ResponseAllocatorDelete(allocator);
}

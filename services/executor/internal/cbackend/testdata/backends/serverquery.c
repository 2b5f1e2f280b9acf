/*
 * A test backend that asks the server what a backend may ask it and
 * answers REPORT (UINT8 [-1]): a JSON object of what it got, for the test
 * to compare with what the gateway's APIs say.
 *   server     TRITONSERVER_ServerMetadata's message
 *   metadata   TRITONSERVER_ServerModelMetadata of model "cid" (-1)
 *   config     TRITONSERVER_ServerModelConfig of "cid" (config version 1)
 *   config_v2  the message of the same for config version 2 (refused)
 *   index      TRITONSERVER_ServerModelIndex (TRITONSERVER_INDEX_FLAG_READY)
 *   stats      TRITONSERVER_ServerModelStatistics of "cid"
 *   batch_cid, batch_self  TRITONSERVER_ServerModelBatchProperties' flags
 *   metrics    TRITONSERVER_ServerMetrics' TRITONSERVER_MetricsFormatted text
 *   init_metadata_error  the message ServerModelMetadata of its own model
 *              gave in TRITONBACKEND_ModelInitialize (not loaded yet)
 *   bls        a BLS call to "cid" built with the request accessors and
 *              setters, a raw input and a trace of its own: what its
 *              trace callbacks heard, the response's id and model.
 * Any value the server gets wrong by Triton's rules fails the request with
 * the reason.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)
#define FAIL(...) do { char m__[512]; snprintf(m__, sizeof m__, __VA_ARGS__); return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, m__); } while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)

static char init_error[512];

typedef struct { char* b; size_t n, cap; } buf;

static void put(buf* s, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (s->n + (size_t)k + 1 > s->cap) {
    s->cap = (s->n + (size_t)k + 1) * 2;
    s->b = realloc(s->b, s->cap);
  }
  vsnprintf(s->b + s->n, (size_t)k + 1, fmt, ap2);
  va_end(ap2);
  s->n += (size_t)k;
}

/* put_json appends a JSON string literal of text. */
static void put_json(buf* s, const char* text, size_t n) {
  put(s, "\"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '"' || c == '\\') put(s, "\\%c", c);
    else if (c < 0x20) put(s, "\\u%04x", c);
    else put(s, "%c", c);
  }
  put(s, "\"");
}

static TRITONSERVER_Error* put_message(buf* s, const char* key, TRITONSERVER_Message* m) {
  const char* base;
  size_t n;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(m, &base, &n));
  CHECK(base[n] == 0, "%s: message is not NUL-terminated", key);
  put(s, "\"%s\":%.*s,", key, (int)n, base);
  return TRITONSERVER_MessageDelete(m);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  TRITONSERVER_Server* server;
  const char* name;
  RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &server));
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  TRITONSERVER_Message* m = NULL;
  TRITONSERVER_Error* err = TRITONSERVER_ServerModelMetadata(server, name, -1, &m);
  if (err == NULL) {
    snprintf(init_error, sizeof init_error, "none");
    TRITONSERVER_MessageDelete(m);
  } else {
    snprintf(init_error, sizeof init_error, "%s", TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
  }
  return NULL;
}

/* ---- the BLS call ---- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool final, released, trace_released;
  int request_start, request_end, queue_inputs, backend_outputs;
  char tensor_input_name[64];
  char resp_id[64], resp_model[64];
  int64_t resp_version;
  float out[4];
  size_t out_size;
  char broken[256];
} call;

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
  if (response != NULL) {
    TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(response);
    if (err != NULL) {
      snprintf(c->broken, sizeof c->broken, "BLS response error: %s", TRITONSERVER_ErrorMessage(err));
      TRITONSERVER_ErrorDelete(err);
    } else {
      const char* id = NULL;
      const char* model = NULL;
      TRITONSERVER_InferenceResponseId(response, &id);
      TRITONSERVER_InferenceResponseModel(response, &model, &c->resp_version);
      snprintf(c->resp_id, sizeof c->resp_id, "%s", id ? id : "(null)");
      snprintf(c->resp_model, sizeof c->resp_model, "%s", model ? model : "(null)");
      const void* base = NULL;
      size_t size = 0;
      if (TRITONSERVER_InferenceResponseOutput(response, 0, NULL, NULL, NULL, NULL, &base, &size, NULL, NULL, NULL) == NULL && size <= sizeof c->out) {
        memcpy(c->out, base, size);
        c->out_size = size;
      }
    }
    TRITONSERVER_InferenceResponseDelete(response);
  }
  if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) c->final = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void request_release_fn(TRITONSERVER_InferenceRequest* request, const uint32_t flags, void* userp) {
  call* c = userp;
  (void)flags;
  pthread_mutex_lock(&c->mu);
  TRITONSERVER_InferenceRequestDelete(request);
  c->released = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void trace_activity_fn(TRITONSERVER_InferenceTrace* trace, TRITONSERVER_InferenceTraceActivity activity, uint64_t ns, void* userp) {
  call* c = userp;
  (void)trace; (void)ns;
  pthread_mutex_lock(&c->mu);
  if (activity == TRITONSERVER_TRACE_REQUEST_START) c->request_start++;
  if (activity == TRITONSERVER_TRACE_REQUEST_END) c->request_end++;
  pthread_mutex_unlock(&c->mu);
}

static void trace_tensor_fn(TRITONSERVER_InferenceTrace* trace, TRITONSERVER_InferenceTraceActivity activity, const char* name, TRITONSERVER_DataType dt,
                            const void* base, size_t size, const int64_t* shape, uint64_t dims, TRITONSERVER_MemoryType mt, int64_t mid, void* userp) {
  call* c = userp;
  (void)trace; (void)base; (void)shape; (void)mt; (void)mid;
  pthread_mutex_lock(&c->mu);
  if (activity == TRITONSERVER_TRACE_TENSOR_QUEUE_INPUT) {
    c->queue_inputs++;
    snprintf(c->tensor_input_name, sizeof c->tensor_input_name, "%s/%s/%zu/%llu", name, TRITONSERVER_DataTypeString(dt), size, (unsigned long long)dims);
  }
  if (activity == TRITONSERVER_TRACE_TENSOR_BACKEND_OUTPUT) c->backend_outputs++;
  pthread_mutex_unlock(&c->mu);
}

static void trace_release_fn(TRITONSERVER_InferenceTrace* trace, void* userp) {
  call* c = userp;
  pthread_mutex_lock(&c->mu);
  TRITONSERVER_Error* err = TRITONSERVER_InferenceTraceDelete(trace);
  if (err != NULL) {
    snprintf(c->broken, sizeof c->broken, "deleting the released trace: %s", TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
  }
  c->trace_released = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static TRITONSERVER_Error* expect_error(TRITONSERVER_Error* err, TRITONSERVER_Error_Code code, const char* what) {
  CHECK(err != NULL, "%s: no error", what);
  TRITONSERVER_Error_Code got = TRITONSERVER_ErrorCode(err);
  TRITONSERVER_ErrorDelete(err);
  CHECK(got == code, "%s: error code %d, want %d", what, (int)got, (int)code);
  return NULL;
}

static TRITONSERVER_Error* bls(TRITONSERVER_Server* server, buf* s) {
  TRITONSERVER_InferenceRequest* req;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestNew(&req, server, "cid", -1));

  /* Accessors read back what the setters set. */
  const char* id;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetId(req, "bls-1"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestId(req, &id));
  CHECK(strcmp(id, "bls-1") == 0, "request id '%s'", id);
  uint32_t flags = 99;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestFlags(req, &flags));
  CHECK(flags == 0, "flags of a new request %u", flags);
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetFlags(req, TRITONSERVER_REQUEST_FLAG_SEQUENCE_START | TRITONSERVER_REQUEST_FLAG_SEQUENCE_END));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestFlags(req, &flags));
  CHECK(flags == (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START | TRITONSERVER_REQUEST_FLAG_SEQUENCE_END), "flags %u", flags);
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetFlags(req, 0));
  uint64_t cid = 0;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetCorrelationId(req, 42));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestCorrelationId(req, &cid));
  CHECK(cid == 42, "correlation id %llu", (unsigned long long)cid);
  const char* cids;
  RETURN_IF_ERROR(expect_error(TRITONSERVER_InferenceRequestCorrelationIdString(req, &cids), TRITONSERVER_ERROR_INVALID_ARG, "string id of an integer correlation id"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetCorrelationIdString(req, "seq-a"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestCorrelationIdString(req, &cids));
  CHECK(strcmp(cids, "seq-a") == 0, "correlation id string '%s'", cids);
  RETURN_IF_ERROR(expect_error(TRITONSERVER_InferenceRequestCorrelationId(req, &cid), TRITONSERVER_ERROR_INVALID_ARG, "integer id of a string correlation id"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetCorrelationId(req, 0));
  uint32_t prio = 0;
  uint64_t prio64 = 0;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetPriority(req, 3));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestPriority(req, &prio));
  CHECK(prio == 3, "priority %u", prio);
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetPriorityUInt64(req, 5));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestPriorityUInt64(req, &prio64));
  CHECK(prio64 == 5, "priority %llu", (unsigned long long)prio64);
  uint64_t timeout = 0;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(req, 30000000));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestTimeoutMicroseconds(req, &timeout));
  CHECK(timeout == 30000000, "timeout %llu", (unsigned long long)timeout);
  bool cancelled = true;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestIsCancelled(req, &cancelled));
  CHECK(!cancelled, "a new request is cancelled");
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetDoubleParameter(req, "ratio", 0.5));

  /* Inputs and outputs added and removed. */
  int64_t shape[2] = {1, 2};
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddInput(req, "GONE", TRITONSERVER_TYPE_FP32, shape, 2));
  RETURN_IF_ERROR(expect_error(TRITONSERVER_InferenceRequestAddRawInput(req, "RAW"), TRITONSERVER_ERROR_INVALID_ARG, "raw input beside another"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestRemoveInput(req, "GONE"));
  RETURN_IF_ERROR(expect_error(TRITONSERVER_InferenceRequestRemoveInput(req, "GONE"), TRITONSERVER_ERROR_INVALID_ARG, "removing a removed input"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddInput(req, "GONE", TRITONSERVER_TYPE_FP32, shape, 2));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestRemoveAllInputs(req));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddRawInput(req, "RAW"));
  RETURN_IF_ERROR(expect_error(TRITONSERVER_InferenceRequestAddInput(req, "OTHER", TRITONSERVER_TYPE_FP32, shape, 2), TRITONSERVER_ERROR_INVALID_ARG, "input beside a raw one"));
  float junk[3] = {9, 9, 9};
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAppendInputData(req, "RAW", junk, sizeof junk, TRITONSERVER_MEMORY_CPU, 0));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestRemoveAllInputData(req, "RAW"));
  float data[3] = {1.5f, 2.5f, 3.5f};
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy(req, "RAW", data, sizeof(float), TRITONSERVER_MEMORY_CPU, 0, "cpu"));
  TRITONSERVER_BufferAttributes* ba;
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesNew(&ba));
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetMemoryType(ba, TRITONSERVER_MEMORY_CPU_PINNED));
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetMemoryTypeId(ba, 0));
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetByteSize(ba, 2 * sizeof(float)));
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetCudaIpcHandle(ba, NULL));
  TRITONSERVER_MemoryType bmt;
  int64_t bmid = -1;
  size_t bsize = 0;
  void* handle = (void*)1;
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesMemoryType(ba, &bmt));
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesMemoryTypeId(ba, &bmid));
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesByteSize(ba, &bsize));
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesCudaIpcHandle(ba, &handle));
  CHECK(bmt == TRITONSERVER_MEMORY_CPU_PINNED && bmid == 0 && bsize == 2 * sizeof(float) && handle == NULL, "buffer attributes read back %d %lld %zu %p", (int)bmt, (long long)bmid, bsize, handle);
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(req, "RAW", data + 1, ba));
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesDelete(ba));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddRequestedOutput(req, "NOPE"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestRemoveRequestedOutput(req, "NOPE"));
  RETURN_IF_ERROR(expect_error(TRITONSERVER_InferenceRequestRemoveRequestedOutput(req, "NOPE"), TRITONSERVER_ERROR_INVALID_ARG, "removing a removed output"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddRequestedOutput(req, "NOPE"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(req));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddRequestedOutput(req, "OUTPUT0"));

  call* c = calloc(1, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  TRITONSERVER_InferenceTrace* trace;
  RETURN_IF_ERROR(TRITONSERVER_InferenceTraceTensorNew(&trace, TRITONSERVER_TRACE_LEVEL_TIMESTAMPS | TRITONSERVER_TRACE_LEVEL_TENSORS, 0,
                                                       trace_activity_fn, trace_tensor_fn, trace_release_fn, c));
  uint64_t trace_id = 0;
  RETURN_IF_ERROR(TRITONSERVER_InferenceTraceId(trace, &trace_id));
  CHECK(trace_id > 0, "trace id 0");
  /* Its own trace is not traced: an activity reported on it is dropped. */
  RETURN_IF_ERROR(TRITONSERVER_InferenceTraceReportActivity(trace, 1, "CUSTOM_ACTIVITY"));
  TRITONSERVER_ResponseAllocator* allocator;
  RETURN_IF_ERROR(TRITONSERVER_ResponseAllocatorNew(&allocator, alloc_fn, release_fn, NULL));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetReleaseCallback(req, request_release_fn, c));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetResponseCallback(req, allocator, c, response_fn, c));
  RETURN_IF_ERROR(TRITONSERVER_ServerInferAsync(server, req, trace));
  pthread_mutex_lock(&c->mu);
  while (!c->final || !c->released || !c->trace_released) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  TRITONSERVER_ResponseAllocatorDelete(allocator);
  TRITONSERVER_Error* err = NULL;
  if (c->broken[0]) err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, c->broken);
  else if (c->out_size != 3 * sizeof(float) || c->out[0] != 1.5f || c->out[1] != 2.5f || c->out[2] != 3.5f)
    err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the raw input did not come back from cid");
  put(s, "\"bls\":{\"response_id\":\"%s\",\"response_model\":\"%s\",\"response_version\":%lld,\"request_start\":%d,\"request_end\":%d,"
         "\"queue_inputs\":%d,\"backend_outputs\":%d,\"input_tensor\":\"%s\",\"parameter_type\":\"%s\"}",
      c->resp_id, c->resp_model, (long long)c->resp_version, c->request_start, c->request_end, c->queue_inputs, c->backend_outputs,
      c->tensor_input_name, TRITONSERVER_ParameterTypeString(TRITONSERVER_PARAMETER_DOUBLE));
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
  return err;
}

static TRITONSERVER_Error* report(TRITONSERVER_Server* server, const char* self, buf* s) {
  TRITONSERVER_Message* m;
  put(s, "{");
  RETURN_IF_ERROR(TRITONSERVER_ServerMetadata(server, &m));
  RETURN_IF_ERROR(put_message(s, "server", m));
  RETURN_IF_ERROR(TRITONSERVER_ServerModelMetadata(server, "cid", -1, &m));
  RETURN_IF_ERROR(put_message(s, "metadata", m));
  RETURN_IF_ERROR(TRITONSERVER_ServerModelConfig(server, "cid", -1, 1, &m));
  RETURN_IF_ERROR(put_message(s, "config", m));
  TRITONSERVER_Error* err = TRITONSERVER_ServerModelConfig(server, "cid", -1, 2, &m);
  CHECK(err != NULL && TRITONSERVER_ErrorCode(err) == TRITONSERVER_ERROR_INVALID_ARG, "config version 2 was not refused");
  put(s, "\"config_v2\":");
  put_json(s, TRITONSERVER_ErrorMessage(err), strlen(TRITONSERVER_ErrorMessage(err)));
  put(s, ",");
  TRITONSERVER_ErrorDelete(err);
  RETURN_IF_ERROR(TRITONSERVER_ServerModelIndex(server, TRITONSERVER_INDEX_FLAG_READY, &m));
  RETURN_IF_ERROR(put_message(s, "index", m));
  RETURN_IF_ERROR(TRITONSERVER_ServerModelStatistics(server, "cid", -1, &m));
  RETURN_IF_ERROR(put_message(s, "stats", m));
  uint32_t flags = 0;
  void* voidp = (void*)1;
  RETURN_IF_ERROR(TRITONSERVER_ServerModelBatchProperties(server, "cid", -1, &flags, &voidp));
  CHECK(voidp == NULL, "batch properties left voidp set");
  put(s, "\"batch_cid\":%u,", flags);
  RETURN_IF_ERROR(TRITONSERVER_ServerModelBatchProperties(server, self, -1, &flags, NULL));
  put(s, "\"batch_self\":%u,", flags);
  TRITONSERVER_Metrics* metrics;
  RETURN_IF_ERROR(TRITONSERVER_ServerMetrics(server, &metrics));
  const char* text;
  size_t n;
  RETURN_IF_ERROR(TRITONSERVER_MetricsFormatted(metrics, TRITONSERVER_METRIC_PROMETHEUS, &text, &n));
  put(s, "\"metrics\":");
  put_json(s, text, n);
  put(s, ",");
  RETURN_IF_ERROR(TRITONSERVER_MetricsDelete(metrics));
  put(s, "\"init_metadata_error\":");
  put_json(s, init_error, strlen(init_error));
  put(s, ",");
  RETURN_IF_ERROR(bls(server, s));
  put(s, "}");
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  TRITONBACKEND_Model* model;
  TRITONSERVER_Server* server;
  const char* self;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &server));
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &self));
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err == NULL) {
      buf s = {0};
      TRITONSERVER_Error* rerr = report(server, self, &s);
      TRITONBACKEND_Output* output;
      void* dst;
      TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
      int64_t mid = 0;
      int64_t shape[1] = {(int64_t)s.n};
      if (rerr == NULL) rerr = TRITONBACKEND_ResponseOutput(response, &output, "REPORT", TRITONSERVER_TYPE_UINT8, shape, 1);
      if (rerr == NULL) rerr = TRITONBACKEND_OutputBuffer(output, &dst, s.n, &mt, &mid);
      if (rerr == NULL) memcpy(dst, s.b, s.n);
      free(s.b);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, rerr);
      TRITONSERVER_ErrorDelete(rerr);
    }
    TRITONSERVER_ErrorDelete(err);
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return NULL;
}

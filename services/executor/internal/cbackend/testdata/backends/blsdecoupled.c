/*
 * A BLS test backend that calls a decoupled model: each request's INPUT0
 * (INT32 [1], N) goes to model "cdec" (which answers N responses 0..N-1
 * and then the final flag alone) through TRITONSERVER_ServerInferAsync.
 * The caller's thread waits for the final flag and the request's release,
 * then answers OUTPUT0 = the values received, in order, with parameters:
 *   bls_responses    responses received (not counting a final flag alone)
 *   bls_starts       calls of the allocator's start function
 *   bls_final_alone  whether the final flag came without a response
 *   bls_error_code   the TRITONSERVER_Error_Code of an error response, -1
 *                    when none
 * A request parameter "cancel_after" (int) K makes it cancel its call with
 * TRITONSERVER_InferenceRequestCancel from the response callback of the
 * K-th response. It fails the request when the server breaks Triton's
 * rules: a response after the final one, responses out of order, the
 * release before the final response.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)
#define MAX_VALUES 4096

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  TRITONSERVER_InferenceRequest* request;
  int64_t cancel_after;
  int32_t values[MAX_VALUES];
  int64_t responses, starts;
  bool final, final_alone, released;
  int error_code;
  char broken[256];
} call;

static TRITONSERVER_Error* start_fn(TRITONSERVER_ResponseAllocator* a, void* userp) {
  (void)a;
  call* c = userp;
  pthread_mutex_lock(&c->mu);
  c->starts++;
  pthread_mutex_unlock(&c->mu);
  return NULL;
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
  bool cancel = false;
  pthread_mutex_lock(&c->mu);
  if (c->final) snprintf(c->broken, sizeof c->broken, "a response came after the final one");
  if (c->released) snprintf(c->broken, sizeof c->broken, "the request was released before its final response");
  if (response != NULL) {
    TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(response);
    if (err != NULL) {
      c->error_code = TRITONSERVER_ErrorCode(err);
      TRITONSERVER_ErrorDelete(err);
    } else {
      uint32_t n = 0;
      const void* base = NULL;
      size_t size = 0;
      TRITONSERVER_InferenceResponseOutputCount(response, &n);
      if (n != 1 || TRITONSERVER_InferenceResponseOutput(response, 0, NULL, NULL, NULL, NULL, &base, &size, NULL, NULL, NULL) != NULL || size != sizeof(int32_t)) {
        snprintf(c->broken, sizeof c->broken, "response %lld has no INT32 output", (long long)c->responses);
      } else if (c->responses < MAX_VALUES) {
        int32_t v;
        memcpy(&v, base, sizeof v);
        if (v != (int32_t)c->responses) snprintf(c->broken, sizeof c->broken, "response %lld carries %d", (long long)c->responses, v);
        c->values[c->responses] = v;
      }
      c->responses++;
      cancel = c->cancel_after > 0 && c->responses == c->cancel_after;
    }
    TRITONSERVER_InferenceResponseDelete(response);
  }
  if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) {
    c->final = true;
    c->final_alone = response == NULL;
  }
  TRITONSERVER_InferenceRequest* request = c->request;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (cancel) TRITONSERVER_ErrorDelete(TRITONSERVER_InferenceRequestCancel(request));
}

static void request_release_fn(TRITONSERVER_InferenceRequest* request, const uint32_t flags, void* userp) {
  call* c = userp;
  (void)flags;
  pthread_mutex_lock(&c->mu);
  TRITONSERVER_InferenceRequestDelete(request);
  c->request = NULL;
  c->released = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static int64_t cancel_after(TRITONBACKEND_Request* request) {
  uint32_t n = 0;
  if (TRITONBACKEND_RequestParameterCount(request, &n)) return 0;
  for (uint32_t i = 0; i < n; i++) {
    const char* key;
    TRITONSERVER_ParameterType type;
    const void* v;
    if (TRITONBACKEND_RequestParameter(request, i, &key, &type, &v) == NULL && strcmp(key, "cancel_after") == 0 && type == TRITONSERVER_PARAMETER_INT)
      return *(const int64_t*)v;
  }
  return 0;
}

static TRITONSERVER_Error* forward(TRITONSERVER_Server* server, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  uint32_t txn;
  RETURN_IF_ERROR(TRITONSERVER_ServerModelTransactionProperties(server, "cdec", -1, &txn, NULL));
  if (txn != TRITONSERVER_TXN_DECOUPLED) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "cdec is not decoupled");

  TRITONBACKEND_Input* input;
  const void* data;
  uint64_t size;
  TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
  int64_t mid = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "INPUT0", &input));
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &size, &mt, &mid));
  if (size != sizeof(int32_t)) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "INPUT0 must be one INT32");

  call* c = calloc(1, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->cancel_after = cancel_after(request);
  c->error_code = -1;
  TRITONSERVER_ResponseAllocator* allocator;
  RETURN_IF_ERROR(TRITONSERVER_ResponseAllocatorNew(&allocator, alloc_fn, release_fn, start_fn));
  TRITONSERVER_InferenceRequest* req;
  int64_t shape[1] = {1};
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestNew(&req, server, "cdec", -1));
  c->request = req;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddInput(req, "INPUT0", TRITONSERVER_TYPE_INT32, shape, 1));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAppendInputData(req, "INPUT0", data, size, TRITONSERVER_MEMORY_CPU, 0));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddRequestedOutput(req, "OUTPUT0"));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetReleaseCallback(req, request_release_fn, c));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetResponseCallback(req, allocator, c, response_fn, c));
  RETURN_IF_ERROR(TRITONSERVER_ServerInferAsync(server, req, NULL));

  pthread_mutex_lock(&c->mu);
  while (!c->final || !c->released) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  TRITONSERVER_ResponseAllocatorDelete(allocator);

  TRITONSERVER_Error* err = NULL;
  if (c->broken[0]) err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, c->broken);
  int64_t n = c->responses < MAX_VALUES ? c->responses : MAX_VALUES;
  TRITONBACKEND_Output* output;
  void* dst;
  int64_t oshape[1] = {n};
  if (err == NULL) err = TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", TRITONSERVER_TYPE_INT32, oshape, 1);
  if (err == NULL) err = TRITONBACKEND_OutputBuffer(output, &dst, (uint64_t)n * sizeof(int32_t), &mt, &mid);
  if (err == NULL && n > 0) memcpy(dst, c->values, (size_t)n * sizeof(int32_t));
  if (err == NULL) err = TRITONBACKEND_ResponseSetIntParameter(response, "bls_responses", c->responses);
  if (err == NULL) err = TRITONBACKEND_ResponseSetIntParameter(response, "bls_starts", c->starts);
  if (err == NULL) err = TRITONBACKEND_ResponseSetBoolParameter(response, "bls_final_alone", c->final_alone);
  if (err == NULL) err = TRITONBACKEND_ResponseSetIntParameter(response, "bls_error_code", c->error_code);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  TRITONBACKEND_Model* model;
  TRITONSERVER_Server* server;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &server));
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err == NULL) {
      TRITONSERVER_Error* ferr = forward(server, requests[r], response);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, ferr);
      TRITONSERVER_ErrorDelete(ferr);
    }
    TRITONSERVER_ErrorDelete(err);
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return NULL;
}

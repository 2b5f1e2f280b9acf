/*
 * A decoupled test backend that reports response statistics with Triton's
 * API 1.19 calls (TRITONBACKEND_ModelInstanceResponseStatistics*, then
 * TRITONBACKEND_ModelInstanceReportResponseStatistics with the one object),
 * as Triton's square backend does. For INPUT0 (INT32 [1]) = N it answers N
 * responses from a thread of its own; response i is
 *   i % 4 == 1: an error response (outputs made, then failed),
 *   i % 4 == 2: empty (nothing sent; no compute-output start reported),
 *   otherwise:  OUTPUT0 = i,
 * then the final flag alone. Its reported times are synthetic, so that the
 * statistics are exact: each response starts at T, starts its outputs at
 * T + 2 ms and ends at T + 3 ms.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)
#define MUST(x) do { TRITONSERVER_Error* e__ = (x); if (e__) abort(); } while (0)

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct {
  TRITONBACKEND_ModelInstance* instance;
  TRITONBACKEND_ResponseFactory* factory;
  int32_t n;
} job;

static void* run(void* arg) {
  job* j = arg;
  for (int32_t i = 0; i < j->n; i++) {
    uint64_t start = now_ns() - 3000000;
    uint64_t output_start = start + 2000000, end = start + 3000000;
    TRITONSERVER_Error* error = NULL;
    if (i % 4 == 2) {
      output_start = 0; /* an empty response */
    } else {
      TRITONBACKEND_Response* response;
      TRITONBACKEND_Output* output;
      int64_t shape[1] = {1};
      void* buf;
      TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
      int64_t mid = 0;
      MUST(TRITONBACKEND_ResponseNewFromFactory(&response, j->factory));
      MUST(TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", TRITONSERVER_TYPE_INT32, shape, 1));
      MUST(TRITONBACKEND_OutputBuffer(output, &buf, sizeof(int32_t), &mt, &mid));
      memcpy(buf, &i, sizeof i);
      if (i % 4 == 1) error = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "simulated failure");
      MUST(TRITONBACKEND_ResponseSend(response, 0, error));
    }
    TRITONBACKEND_ModelInstanceResponseStatistics* rs;
    MUST(TRITONBACKEND_ModelInstanceResponseStatisticsNew(&rs));
    MUST(TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(rs, j->instance));
    MUST(TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(rs, j->factory));
    MUST(TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(rs, start));
    MUST(TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(rs, output_start));
    MUST(TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(rs, end));
    MUST(TRITONBACKEND_ModelInstanceResponseStatisticsSetError(rs, error));
    MUST(TRITONBACKEND_ModelInstanceReportResponseStatistics(rs));
    MUST(TRITONBACKEND_ModelInstanceResponseStatisticsDelete(rs));
    if (error) TRITONSERVER_ErrorDelete(error); /* the backend's, as in square */
  }
  MUST(TRITONBACKEND_ResponseFactorySendFlags(j->factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL));
  MUST(TRITONBACKEND_ResponseFactoryDelete(j->factory));
  free(j);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  for (uint32_t r = 0; r < count; r++) {
    job* j = calloc(1, sizeof *j);
    TRITONBACKEND_Input* input;
    const void* src;
    uint64_t size;
    TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
    int64_t mid = 0;
    RETURN_IF_ERROR(TRITONBACKEND_RequestInput(requests[r], "INPUT0", &input));
    RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &src, &size, &mt, &mid));
    memcpy(&j->n, src, sizeof j->n);
    j->instance = instance;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseFactoryNew(&j->factory, requests[r]));
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
    pthread_t t;
    if (pthread_create(&t, NULL, run, j) != 0) abort();
    pthread_detach(t);
  }
  return NULL;
}

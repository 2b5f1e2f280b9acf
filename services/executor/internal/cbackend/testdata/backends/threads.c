/*
 * A test backend that reports where it runs. Each response has OUTPUT0
 * (INT64 [1,3]): the thread that ran the instance's
 * ModelInstanceInitialize, the thread running this Execute, and the
 * number of times an Execute of the instance found another one of the
 * same instance running (Triton never runs two at once).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)

typedef struct {
  int64_t init_tid;
  atomic_int running;
  atomic_long overlaps;
} instance_state;

static int64_t tid(void) { return (int64_t)syscall(SYS_gettid); }

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  instance_state* s = calloc(1, sizeof *s);
  s->init_tid = tid();
  return TRITONBACKEND_ModelInstanceSetState(instance, s);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  void* s;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &s));
  free(s);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  instance_state* s;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, (void**)&s));
  if (atomic_fetch_add(&s->running, 1) != 0) atomic_fetch_add(&s->overlaps, 1);
  usleep(200); /* widens the window in which a second Execute would overlap */
  int64_t out[3] = {s->init_tid, tid(), 0};
  for (uint32_t r = 0; r < count; r++) {
    out[2] = atomic_load(&s->overlaps);
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err == NULL) {
      int64_t shape[2] = {1, 3};
      TRITONBACKEND_Output* o;
      void* buf;
      TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
      int64_t mid = 0;
      err = TRITONBACKEND_ResponseOutput(response, &o, "OUTPUT0", TRITONSERVER_TYPE_INT64, shape, 2);
      if (err == NULL) err = TRITONBACKEND_OutputBuffer(o, &buf, sizeof out, &mt, &mid);
      if (err == NULL) memcpy(buf, out, sizeof out);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
      TRITONSERVER_ErrorDelete(err);
    } else {
      TRITONSERVER_ErrorDelete(err);
    }
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  atomic_fetch_sub(&s->running, 1);
  return NULL;
}

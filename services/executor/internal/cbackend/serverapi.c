/*
 * What the executor's server queries and traces need of C: messages made
 * from Go bytes, and calls of the callbacks a backend gave
 * TRITONSERVER_InferenceTraceNew / ...TensorNew (serverapi.go).
 */
#include <stdlib.h>
#include <string.h>

#include "abi.h"

TRITONSERVER_Message* nereid_message_new(const char* base, size_t n) {
  TRITONSERVER_Message* m = NULL;
  TRITONSERVER_Error* e = TRITONSERVER_MessageNewFromSerializedJson(&m, base, n);
  if (e != NULL) {
    TRITONSERVER_ErrorDelete(e);
    return NULL;
  }
  return m;
}

void nereid_trace_activity(TRITONSERVER_InferenceTrace* t, TRITONSERVER_InferenceTraceActivity a, uint64_t ns) {
  if (t->activity_fn != NULL) t->activity_fn(t, a, ns, t->userp);
}

void nereid_trace_tensor(TRITONSERVER_InferenceTrace* t, TRITONSERVER_InferenceTraceActivity a, const char* name, TRITONSERVER_DataType dt,
                         const void* base, size_t size, const int64_t* shape, uint64_t dims) {
  if (t->tensor_fn != NULL) t->tensor_fn(t, a, name, dt, base, size, shape, dims, TRITONSERVER_MEMORY_CPU, 0, t->userp);
}

void nereid_trace_release(TRITONSERVER_InferenceTrace* t) {
  if (t->release_fn != NULL) t->release_fn(t, t->userp);
}

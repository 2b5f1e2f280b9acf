/*
 * A test backend: every input INPUTn comes back as OUTPUTn. It reports
 * per-request and per-batch statistics, logs, counts requests in a custom
 * metric, sets a response parameter, and crashes (a segmentation fault) on
 * a request carrying the parameter "crash" = true. A request carrying
 * "copy_on_thread" = true is copied by a thread the backend starts (not one
 * of the server's); one carrying "reschedule" = true is first released with
 * TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, and the server's answer is the
 * response parameter "reschedule_error". A model whose configuration has
 * the parameter "plain" is a bare identity: no response parameter, no
 * custom metric (the work of the built-in Go identity, for benchmarks).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)

static TRITONSERVER_MetricFamily* family;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  uint32_t major, minor;
  RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  if (major != TRITONBACKEND_API_VERSION_MAJOR || minor < TRITONBACKEND_API_VERSION_MINOR)
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNSUPPORTED, "triton backend API version does not support this backend");
  const char* name;
  RETURN_IF_ERROR(TRITONBACKEND_BackendName(backend, &name));
  TRITONSERVER_Message* cfg;
  RETURN_IF_ERROR(TRITONBACKEND_BackendConfig(backend, &cfg));
  const char* js;
  size_t n;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(cfg, &js, &n));
  char msg[1024];
  snprintf(msg, sizeof msg, "backend %s initialized with configuration %s", name, js);
  RETURN_IF_ERROR(TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, msg));
  return TRITONSERVER_MetricFamilyNew(&family, TRITONSERVER_METRIC_KIND_COUNTER, "nereid_test_identity_requests",
                                      "Requests executed by the test identity backend");
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  return TRITONSERVER_MetricFamilyDelete(family);
}

/* memory_check allocates through the server's memory manager: host memory
 * must work; GPU memory works on a GPU and fails with Triton's error
 * without one. The outcome is logged. */
static TRITONSERVER_Error* memory_check(TRITONBACKEND_Model* model) {
  TRITONBACKEND_Backend* backend;
  TRITONBACKEND_MemoryManager* manager;
  RETURN_IF_ERROR(TRITONBACKEND_ModelBackend(model, &backend));
  RETURN_IF_ERROR(TRITONBACKEND_BackendMemoryManager(backend, &manager));
  void* p;
  RETURN_IF_ERROR(TRITONBACKEND_MemoryManagerAllocate(manager, &p, TRITONSERVER_MEMORY_CPU, 0, 4096));
  memset(p, 1, 4096);
  RETURN_IF_ERROR(TRITONBACKEND_MemoryManagerFree(manager, p, TRITONSERVER_MEMORY_CPU, 0));
  char msg[512];
  TRITONSERVER_Error* err = TRITONBACKEND_MemoryManagerAllocate(manager, &p, TRITONSERVER_MEMORY_GPU, 0, 4096);
  if (err == NULL) {
    snprintf(msg, sizeof msg, "GPU memory: allocated");
    RETURN_IF_ERROR(TRITONBACKEND_MemoryManagerFree(manager, p, TRITONSERVER_MEMORY_GPU, 0));
  } else {
    snprintf(msg, sizeof msg, "GPU memory: %s: %s", TRITONSERVER_ErrorCodeString(err), TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
  }
  return TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, msg);
}

typedef struct {
  TRITONSERVER_Metric* metric;
  bool plain;
} model_state;

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name;
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  RETURN_IF_ERROR(memory_check(model));
  TRITONSERVER_Message* cfg;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &cfg));
  const char* js;
  size_t n;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(cfg, &js, &n));
  if (strstr(js, "\"max_batch_size\"") == NULL) {
    TRITONSERVER_MessageDelete(cfg);
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "model configuration JSON lacks max_batch_size");
  }
  model_state* state = calloc(1, sizeof *state);
  state->plain = strstr(js, "\"plain\"") != NULL;
  TRITONSERVER_MessageDelete(cfg);
  TRITONSERVER_Parameter* label = TRITONSERVER_ParameterNew("model", TRITONSERVER_PARAMETER_STRING, name);
  const TRITONSERVER_Parameter* labels[] = {label};
  TRITONSERVER_Error* err = TRITONSERVER_MetricNew(&state->metric, family, labels, 1);
  TRITONSERVER_ParameterDelete(label);
  if (err != NULL) {
    free(state);
    return err;
  }
  return TRITONBACKEND_ModelSetState(model, state);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* p;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &p));
  model_state* state = p;
  TRITONSERVER_Error* err = TRITONSERVER_MetricDelete(state->metric);
  free(state);
  return err;
}

static bool flag(TRITONBACKEND_Request* request, const char* name) {
  uint32_t n = 0;
  if (TRITONBACKEND_RequestParameterCount(request, &n)) return false;
  for (uint32_t i = 0; i < n; i++) {
    const char* key;
    TRITONSERVER_ParameterType type;
    const void* v;
    if (TRITONBACKEND_RequestParameter(request, i, &key, &type, &v) == NULL && strcmp(key, name) == 0 &&
        type == TRITONSERVER_PARAMETER_BOOL && *(const bool*)v)
      return true;
  }
  return false;
}

static bool crash_requested(TRITONBACKEND_Request* request) { return flag(request, "crash"); }

typedef struct {
  void* dst;
  const void* src;
  uint64_t n;
} copy_job;

static void* copy_run(void* arg) {
  copy_job* j = arg;
  memcpy(j->dst, j->src, j->n);
  return NULL;
}

static void copy(void* dst, const void* src, uint64_t n, bool on_thread) {
  pthread_t t;
  copy_job j = {dst, src, n};
  if (on_thread && pthread_create(&t, NULL, copy_run, &j) == 0) {
    pthread_join(t, NULL);
    return;
  }
  memcpy(dst, src, n);
}

/* output_name writes the name of input name's output, OUTPUTn for INPUTn,
 * into out (cap bytes, truncated to fit): without snprintf, whose
 * formatting would cost more than the rest of a small request's work. */
static void output_name(char* out, size_t cap, const char* name) {
  if (strncmp(name, "INPUT", 5) == 0) name += 5;
  size_t n = strlen(name);
  if (n > cap - 7) n = cap - 7;
  memcpy(out, "OUTPUT", 6);
  memcpy(out + 6, name, n);
  out[6 + n] = 0;
}

static TRITONSERVER_Error* respond(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response, uint64_t* batch, bool plain) {
  uint32_t count;
  bool on_thread = flag(request, "copy_on_thread");
  RETURN_IF_ERROR(TRITONBACKEND_RequestInputCount(request, &count));
  for (uint32_t i = 0; i < count; i++) {
    TRITONBACKEND_Input* input;
    RETURN_IF_ERROR(TRITONBACKEND_RequestInputByIndex(request, i, &input));
    const char* name;
    TRITONSERVER_DataType dt;
    const int64_t* shape;
    uint32_t dims, buffers;
    uint64_t size;
    RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, &name, &dt, &shape, &dims, &size, &buffers));
    if (i == 0) *batch += dims > 0 ? (uint64_t)shape[0] : 1;
    char out_name[256];
    output_name(out_name, sizeof out_name, name);
    TRITONBACKEND_Output* output;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, out_name, dt, shape, dims));
    void* dst;
    TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
    int64_t mid = 0;
    RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &dst, size, &mt, &mid));
    uint64_t off = 0;
    for (uint32_t b = 0; b < buffers; b++) {
      const void* src;
      uint64_t n;
      TRITONSERVER_MemoryType imt = TRITONSERVER_MEMORY_CPU;
      int64_t imid = 0;
      RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, b, &src, &n, &imt, &imid));
      copy((char*)dst + off, src, n, on_thread);
      off += n;
    }
  }
  if (plain) return NULL;
  return TRITONBACKEND_ResponseSetStringParameter(response, "backend", "nereid-test-identity");
}

/* try_reschedule asks for the request to be executed again
 * (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) and answers with what the
 * server said, as the parameter "reschedule_error" ("" when it took the
 * request back, which leaves this backend nothing more to do with it). */
static TRITONSERVER_Error* try_reschedule(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  TRITONSERVER_Error* err = TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE);
  char msg[1024] = "";
  if (err != NULL) {
    snprintf(msg, sizeof msg, "%s: %s", TRITONSERVER_ErrorCodeString(err), TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
  }
  return TRITONBACKEND_ResponseSetStringParameter(response, "reschedule_error", msg);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  TRITONBACKEND_Model* model;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* p;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &p));
  model_state* state = p;
  uint64_t exec_start = now_ns(), batch = 0;
  for (uint32_t r = 0; r < count; r++) {
    if (crash_requested(requests[r])) {
      TRITONSERVER_LogMessage(TRITONSERVER_LOG_ERROR, __FILE__, __LINE__, "crashing as the request asks");
      raise(SIGSEGV);
    }
  }
  /* Plain, the clock is read where the Go identity reads it: once at the
   * start (exec and compute start, and each request's start), once per
   * request at its end, once at the end. */
  uint64_t compute_start = state->plain ? exec_start : now_ns();
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Request* request = requests[r];
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, request);
    if (err == NULL) {
      uint64_t start = state->plain ? compute_start : now_ns();
      TRITONSERVER_Error* rerr = respond(request, response, &batch, state->plain);
      if (rerr == NULL && flag(request, "reschedule")) rerr = try_reschedule(request, response);
      uint64_t end = now_ns();
      TRITONBACKEND_ModelInstanceReportStatistics(instance, request, rerr == NULL, start, start, end, end);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, rerr);
      TRITONSERVER_ErrorDelete(rerr);
    } else {
      TRITONSERVER_ErrorDelete(err);
    }
    if (!state->plain) TRITONSERVER_MetricIncrement(state->metric, 1);
    TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  uint64_t end = now_ns();
  if (TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE))
    TRITONSERVER_LogMessage(TRITONSERVER_LOG_VERBOSE, __FILE__, __LINE__, "executed a batch");
  return TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, batch, exec_start, compute_start, end, end);
}

/*
 * The functions of Triton's C API that need nothing of the executor: API
 * version, names of enum values, buffer attributes, response accessors,
 * metrics text objects, and the server lifecycle a program embedding Triton
 * would use, which Nereid answers with TRITONSERVER_ERROR_UNSUPPORTED.
 */
#include <stdlib.h>
#include <string.h>

#include "abi.h"

TRITONSERVER_Error* TRITONSERVER_ApiVersion(uint32_t* major, uint32_t* minor) {
  if (major) *major = TRITONSERVER_API_VERSION_MAJOR;
  if (minor) *minor = TRITONSERVER_API_VERSION_MINOR;
  return NULL;
}

const char* TRITONSERVER_ParameterTypeString(TRITONSERVER_ParameterType t) {
  switch (t) {
    case TRITONSERVER_PARAMETER_STRING: return "STRING";
    case TRITONSERVER_PARAMETER_INT: return "INT";
    case TRITONSERVER_PARAMETER_BOOL: return "BOOL";
    case TRITONSERVER_PARAMETER_DOUBLE: return "DOUBLE";
    case TRITONSERVER_PARAMETER_BYTES: return "BYTES";
  }
  return "<invalid>";
}

const char* TRITONSERVER_InferenceTraceLevelString(TRITONSERVER_InferenceTraceLevel level) {
  switch (level) {
    case TRITONSERVER_TRACE_LEVEL_DISABLED: return "DISABLED";
    case TRITONSERVER_TRACE_LEVEL_MIN: return "MIN";
    case TRITONSERVER_TRACE_LEVEL_MAX: return "MAX";
    case TRITONSERVER_TRACE_LEVEL_TIMESTAMPS: return "TIMESTAMPS";
    case TRITONSERVER_TRACE_LEVEL_TENSORS: return "TENSORS";
  }
  return "<unknown>";
}

const char* TRITONSERVER_InferenceTraceActivityString(TRITONSERVER_InferenceTraceActivity a) {
  switch (a) {
    case TRITONSERVER_TRACE_REQUEST_START: return "REQUEST_START";
    case TRITONSERVER_TRACE_QUEUE_START: return "QUEUE_START";
    case TRITONSERVER_TRACE_COMPUTE_START: return "COMPUTE_START";
    case TRITONSERVER_TRACE_COMPUTE_INPUT_END: return "COMPUTE_INPUT_END";
    case TRITONSERVER_TRACE_COMPUTE_OUTPUT_START: return "COMPUTE_OUTPUT_START";
    case TRITONSERVER_TRACE_COMPUTE_END: return "COMPUTE_END";
    case TRITONSERVER_TRACE_REQUEST_END: return "REQUEST_END";
    case TRITONSERVER_TRACE_TENSOR_QUEUE_INPUT: return "TENSOR_QUEUE_INPUT";
    case TRITONSERVER_TRACE_TENSOR_BACKEND_INPUT: return "TENSOR_BACKEND_INPUT";
    case TRITONSERVER_TRACE_TENSOR_BACKEND_OUTPUT: return "TENSOR_BACKEND_OUTPUT";
  }
  return "<unknown>";
}

/* ---- buffer attributes ---- */

#define NEED(p, what) do { if ((p) == NULL) return nereid_error(TRITONSERVER_ERROR_INVALID_ARG, what " must not be null"); } while (0)

TRITONSERVER_Error* TRITONSERVER_BufferAttributesNew(TRITONSERVER_BufferAttributes** ba) {
  NEED(ba, "buffer attributes");
  *ba = calloc(1, sizeof(**ba));
  if (*ba == NULL) return nereid_error(TRITONSERVER_ERROR_INTERNAL, "out of memory for buffer attributes");
  (*ba)->memory_type = TRITONSERVER_MEMORY_CPU;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesDelete(TRITONSERVER_BufferAttributes* ba) {
  free(ba);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryTypeId(TRITONSERVER_BufferAttributes* ba, int64_t id) {
  NEED(ba, "buffer attributes");
  ba->memory_type_id = id;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryType(TRITONSERVER_BufferAttributes* ba, TRITONSERVER_MemoryType t) {
  NEED(ba, "buffer attributes");
  ba->memory_type = t;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetCudaIpcHandle(TRITONSERVER_BufferAttributes* ba, void* handle) {
  NEED(ba, "buffer attributes");
  ba->cuda_ipc_handle = handle;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetByteSize(TRITONSERVER_BufferAttributes* ba, size_t n) {
  NEED(ba, "buffer attributes");
  ba->byte_size = n;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorSetBufferAttributesFunction(TRITONSERVER_ResponseAllocator* a, TRITONSERVER_ResponseAllocatorBufferAttributesFn_t fn) {
  NEED(a, "response allocator");
  a->buffer_attributes_fn = fn;
  return NULL;
}

/* A state's buffer is host memory the executor holds (TRITONBACKEND_StateBuffer). */
TRITONSERVER_Error* TRITONBACKEND_StateBufferAttributes(TRITONBACKEND_State* state, TRITONSERVER_BufferAttributes** ba) {
  NEED(state, "state");
  NEED(ba, "buffer attributes");
  state->attributes.memory_type = TRITONSERVER_MEMORY_CPU;
  state->attributes.memory_type_id = 0;
  state->attributes.byte_size = state->byte_size;
  state->attributes.cuda_ipc_handle = NULL;
  *ba = &state->attributes;
  return NULL;
}

/* ---- responses a backend's inference requests got (BLS) ---- */

TRITONSERVER_Error* TRITONSERVER_InferenceResponseModel(TRITONSERVER_InferenceResponse* r, const char** name, int64_t* version) {
  NEED(r, "inference response");
  if (name) *name = r->model ? r->model : "";
  if (version) *version = r->version;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseId(TRITONSERVER_InferenceResponse* r, const char** id) {
  NEED(r, "inference response");
  if (id) *id = r->id ? r->id : "";
  return NULL;
}

/* Classification results come back as the labels' strings themselves
 * (the request's classification parameter), so no output has a label
 * by index: nullptr, as Triton answers for an output without labels. */
TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutputClassificationLabel(TRITONSERVER_InferenceResponse* r, const uint32_t index, const size_t class_index, const char** label) {
  (void)class_index;
  NEED(r, "inference response");
  if (index >= r->n_outputs)
    return nereid_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index for response output");
  if (label) *label = NULL;
  return NULL;
}

/* ---- a response's outputs, read back by the backend that made them ---- */

static TRITONSERVER_Error* output_props(TRITONBACKEND_Output* o, const char** name, TRITONSERVER_DataType* dt, const int64_t** shape, uint64_t* dims) {
  if (name) *name = o->name;
  if (dt) *dt = o->datatype;
  if (shape) *shape = o->shape;
  if (dims) *dims = o->dims_count;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_InferenceResponseOutputByName(TRITONBACKEND_Response* r, const char* name, TRITONSERVER_DataType* dt, const int64_t** shape, uint64_t* dims) {
  NEED(r, "response");
  NEED(name, "output name");
  for (uint32_t i = 0; i < r->n_outputs; i++)
    if (strcmp(r->outputs[i]->name, name) == 0) return output_props(r->outputs[i], NULL, dt, shape, dims);
  return nereid_error(TRITONSERVER_ERROR_NOT_FOUND, "Output name not found");
}

TRITONSERVER_Error* TRITONBACKEND_InferenceResponseOutput(TRITONBACKEND_Response* r, const uint32_t index, const char** name, TRITONSERVER_DataType* dt, const int64_t** shape, uint64_t* dims) {
  NEED(r, "response");
  if (index >= r->n_outputs) return nereid_error(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index for response output");
  return output_props(r->outputs[index], name, dt, shape, dims);
}

/* ---- metrics as text (TRITONSERVER_ServerMetrics makes them) ---- */

struct TRITONSERVER_Metrics {
  char* text;
  size_t size;
};

TRITONSERVER_Metrics* nereid_metrics_new(const char* text, size_t size) {
  TRITONSERVER_Metrics* m = calloc(1, sizeof(*m));
  if (m == NULL) return NULL;
  m->text = malloc(size + 1);
  if (m->text == NULL) { free(m); return NULL; }
  memcpy(m->text, text, size);
  m->text[size] = 0;
  m->size = size;
  return m;
}

TRITONSERVER_Error* TRITONSERVER_MetricsDelete(TRITONSERVER_Metrics* m) {
  if (m) free(m->text);
  free(m);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MetricsFormatted(TRITONSERVER_Metrics* m, TRITONSERVER_MetricFormat format, const char** base, size_t* size) {
  NEED(m, "metrics");
  if (format != TRITONSERVER_METRIC_PROMETHEUS) return nereid_error(TRITONSERVER_ERROR_INVALID_ARG, "unknown metrics format");
  if (base) *base = m->text;
  if (size) *size = m->size;
  return NULL;
}

/* ---- the server lifecycle: a program embedding Triton ---- */

static TRITONSERVER_Error* embedding(const char* fn) {
  char msg[256];
  strcpy(msg, fn);
  strcat(msg, " is not supported: Nereid's executor is the server; run nereid or nereid-executor rather than embedding it through the C API");
  return nereid_error(TRITONSERVER_ERROR_UNSUPPORTED, msg);
}

#define U(x) (void)(x)

TRITONSERVER_Error* TRITONSERVER_ServerOptionsNew(TRITONSERVER_ServerOptions** o) { if (o) *o = NULL; return embedding("TRITONSERVER_ServerOptionsNew"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsDelete(TRITONSERVER_ServerOptions* o) { U(o); return embedding("TRITONSERVER_ServerOptionsDelete"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetServerId(TRITONSERVER_ServerOptions* o, const char* a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetServerId"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelRepositoryPath(TRITONSERVER_ServerOptions* o, const char* a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetModelRepositoryPath"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelControlMode(TRITONSERVER_ServerOptions* o, TRITONSERVER_ModelControlMode a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetModelControlMode"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetStartupModel(TRITONSERVER_ServerOptions* o, const char* a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetStartupModel"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetStrictModelConfig(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetStrictModelConfig"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelConfigName(TRITONSERVER_ServerOptions* o, const char* a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetModelConfigName"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetRateLimiterMode(TRITONSERVER_ServerOptions* o, TRITONSERVER_RateLimitMode a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetRateLimiterMode"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsAddRateLimiterResource(TRITONSERVER_ServerOptions* o, const char* a, const size_t b, const int c) { U(o); U(a); U(b); U(c); return embedding("TRITONSERVER_ServerOptionsAddRateLimiterResource"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetPinnedMemoryPoolByteSize(TRITONSERVER_ServerOptions* o, uint64_t a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetPinnedMemoryPoolByteSize"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCudaMemoryPoolByteSize(TRITONSERVER_ServerOptions* o, int a, uint64_t b) { U(o); U(a); U(b); return embedding("TRITONSERVER_ServerOptionsSetCudaMemoryPoolByteSize"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCudaVirtualAddressSize(TRITONSERVER_ServerOptions* o, int a, size_t b) { U(o); U(a); U(b); return embedding("TRITONSERVER_ServerOptionsSetCudaVirtualAddressSize"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetResponseCacheByteSize(TRITONSERVER_ServerOptions* o, uint64_t a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetResponseCacheByteSize"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCacheConfig(TRITONSERVER_ServerOptions* o, const char* a, const char* b) { U(o); U(a); U(b); return embedding("TRITONSERVER_ServerOptionsSetCacheConfig"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCacheDirectory(TRITONSERVER_ServerOptions* o, const char* a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetCacheDirectory"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability(TRITONSERVER_ServerOptions* o, double a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetExitOnError(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetExitOnError"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetStrictReadiness(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetStrictReadiness"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetExitTimeout(TRITONSERVER_ServerOptions* o, unsigned int a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetExitTimeout"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetBufferManagerThreadCount(TRITONSERVER_ServerOptions* o, unsigned int a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetBufferManagerThreadCount"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelLoadThreadCount(TRITONSERVER_ServerOptions* o, unsigned int a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetModelLoadThreadCount"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelLoadRetryCount(TRITONSERVER_ServerOptions* o, unsigned int a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetModelLoadRetryCount"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelNamespacing(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetModelNamespacing"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogFile(TRITONSERVER_ServerOptions* o, const char* a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetLogFile"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogInfo(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetLogInfo"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogWarn(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetLogWarn"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogError(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetLogError"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogFormat(TRITONSERVER_ServerOptions* o, const TRITONSERVER_LogFormat a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetLogFormat"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetLogVerbose(TRITONSERVER_ServerOptions* o, int a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetLogVerbose"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetMetrics(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetMetrics"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetGpuMetrics(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetGpuMetrics"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetCpuMetrics(TRITONSERVER_ServerOptions* o, bool a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetCpuMetrics"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetMetricsInterval(TRITONSERVER_ServerOptions* o, uint64_t a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetMetricsInterval"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetBackendDirectory(TRITONSERVER_ServerOptions* o, const char* a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetBackendDirectory"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetRepoAgentDirectory(TRITONSERVER_ServerOptions* o, const char* a) { U(o); U(a); return embedding("TRITONSERVER_ServerOptionsSetRepoAgentDirectory"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit(TRITONSERVER_ServerOptions* o, const TRITONSERVER_InstanceGroupKind a, const int b, const double c) { U(o); U(a); U(b); U(c); return embedding("TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetBackendConfig(TRITONSERVER_ServerOptions* o, const char* a, const char* b, const char* c) { U(o); U(a); U(b); U(c); return embedding("TRITONSERVER_ServerOptionsSetBackendConfig"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetHostPolicy(TRITONSERVER_ServerOptions* o, const char* a, const char* b, const char* c) { U(o); U(a); U(b); U(c); return embedding("TRITONSERVER_ServerOptionsSetHostPolicy"); }
TRITONSERVER_Error* TRITONSERVER_ServerOptionsSetMetricsConfig(TRITONSERVER_ServerOptions* o, const char* a, const char* b, const char* c) { U(o); U(a); U(b); U(c); return embedding("TRITONSERVER_ServerOptionsSetMetricsConfig"); }
TRITONSERVER_Error* TRITONSERVER_ServerNew(TRITONSERVER_Server** s, TRITONSERVER_ServerOptions* o) { if (s) *s = NULL; U(o); return embedding("TRITONSERVER_ServerNew"); }
TRITONSERVER_Error* TRITONSERVER_ServerDelete(TRITONSERVER_Server* s) { U(s); return embedding("TRITONSERVER_ServerDelete"); }
TRITONSERVER_Error* TRITONSERVER_ServerStop(TRITONSERVER_Server* s) { U(s); return embedding("TRITONSERVER_ServerStop"); }
TRITONSERVER_Error* TRITONSERVER_ServerSetExitTimeout(TRITONSERVER_Server* s, unsigned int a) { U(s); U(a); return embedding("TRITONSERVER_ServerSetExitTimeout"); }

static TRITONSERVER_Error* one_repository(const char* fn) {
  char msg[256];
  strcpy(msg, fn);
  strcat(msg, " is not supported: an executor serves the one model repository given on its command line");
  return nereid_error(TRITONSERVER_ERROR_UNSUPPORTED, msg);
}
TRITONSERVER_Error* TRITONSERVER_ServerRegisterModelRepository(TRITONSERVER_Server* s, const char* p, const TRITONSERVER_Parameter** m, const uint32_t n) { U(s); U(p); U(m); U(n); return one_repository("TRITONSERVER_ServerRegisterModelRepository"); }
TRITONSERVER_Error* TRITONSERVER_ServerUnregisterModelRepository(TRITONSERVER_Server* s, const char* p) { U(s); U(p); return one_repository("TRITONSERVER_ServerUnregisterModelRepository"); }
TRITONSERVER_Error* TRITONSERVER_ServerPollModelRepository(TRITONSERVER_Server* s) { U(s); return one_repository("TRITONSERVER_ServerPollModelRepository"); }

/* A backend runs only in a live executor that is serving its model. */
TRITONSERVER_Error* TRITONSERVER_ServerIsLive(TRITONSERVER_Server* s, bool* live) {
  NEED(s, "server");
  if (live) *live = true;
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_ServerIsReady(TRITONSERVER_Server* s, bool* ready) {
  NEED(s, "server");
  if (ready) *ready = true;
  return NULL;
}

// The parts of Triton's backend API that need nothing from the Go side:
// errors, messages, parameters, data types, and the accessors of objects
// whose content the executor filled in before handing them to a backend.
// The calls a backend makes on the requests of a running execution are
// recorded in exec.c; functions that reach the executor (responses sent
// outside a recorded execution, logging, metrics, BLS) are cgo exports in
// exports.go.

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

#include "abi.h"

#define ERR(code, msg) nereid_error(code, msg)
#define NONNULL(p, what) \
  if ((p) == NULL) return ERR(TRITONSERVER_ERROR_INVALID_ARG, what " must not be null")

char* nereid_strdup(const char* s) {
  if (s == NULL) return NULL;
  size_t n = strlen(s);
  char* d = malloc(n + 1);
  memcpy(d, s, n + 1);
  return d;
}

TRITONSERVER_Error* nereid_error(TRITONSERVER_Error_Code code, const char* msg) {
  TRITONSERVER_Error* e = malloc(sizeof *e);
  e->code = code;
  e->msg = nereid_strdup(msg ? msg : "");
  return e;
}

void* nereid_ptr(uintptr_t p) { return (void*)p; }

uint64_t nereid_steady_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- errors ---- */

TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg) { return nereid_error(code, msg); }

void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* e) {
  if (e == NULL) return;
  free(e->msg);
  free(e);
}

TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* e) { return e ? e->code : TRITONSERVER_ERROR_UNKNOWN; }

const char* TRITONSERVER_ErrorCodeString(TRITONSERVER_Error* e) {
  switch (e ? e->code : TRITONSERVER_ERROR_UNKNOWN) {
    case TRITONSERVER_ERROR_INTERNAL: return "Internal";
    case TRITONSERVER_ERROR_NOT_FOUND: return "Not found";
    case TRITONSERVER_ERROR_INVALID_ARG: return "Invalid argument";
    case TRITONSERVER_ERROR_UNAVAILABLE: return "Unavailable";
    case TRITONSERVER_ERROR_UNSUPPORTED: return "Unsupported";
    case TRITONSERVER_ERROR_ALREADY_EXISTS: return "Already exists";
    case TRITONSERVER_ERROR_CANCELLED: return "Cancelled";
    default: return "Unknown";
  }
}

const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* e) { return e ? e->msg : ""; }

/* ---- messages ---- */

static TRITONSERVER_Message* message_new(const char* base, size_t n) {
  TRITONSERVER_Message* m = malloc(sizeof *m);
  m->json = malloc(n + 1);
  memcpy(m->json, base, n);
  m->json[n] = 0;
  m->size = n;
  return m;
}

TRITONSERVER_Error* TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message** message, const char* base, size_t byte_size) {
  NONNULL(message, "message");
  if (base == NULL && byte_size > 0) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "serialized JSON must not be null");
  *message = message_new(base ? base : "", byte_size);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* m) {
  if (m != NULL) {
    free(m->json);
    free(m);
  }
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* m, const char** base, size_t* byte_size) {
  NONNULL(m, "message");
  if (base) *base = m->json;
  if (byte_size) *byte_size = m->size;
  return NULL;
}

/* ---- data types ---- */

static const char* dtype_names[] = {"<invalid>", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
                                    "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16"};

const char* TRITONSERVER_DataTypeString(TRITONSERVER_DataType t) {
  if ((int)t < 0 || (int)t > TRITONSERVER_TYPE_BF16) return "<invalid>";
  return dtype_names[t];
}

TRITONSERVER_DataType TRITONSERVER_StringToDataType(const char* s) {
  if (s == NULL) return TRITONSERVER_TYPE_INVALID;
  for (int i = 1; i <= TRITONSERVER_TYPE_BF16; i++)
    if (strcmp(s, dtype_names[i]) == 0) return (TRITONSERVER_DataType)i;
  return TRITONSERVER_TYPE_INVALID;
}

uint32_t TRITONSERVER_DataTypeByteSize(TRITONSERVER_DataType t) {
  switch (t) {
    case TRITONSERVER_TYPE_BOOL: case TRITONSERVER_TYPE_UINT8: case TRITONSERVER_TYPE_INT8: return 1;
    case TRITONSERVER_TYPE_UINT16: case TRITONSERVER_TYPE_INT16: case TRITONSERVER_TYPE_FP16: case TRITONSERVER_TYPE_BF16: return 2;
    case TRITONSERVER_TYPE_UINT32: case TRITONSERVER_TYPE_INT32: case TRITONSERVER_TYPE_FP32: return 4;
    case TRITONSERVER_TYPE_UINT64: case TRITONSERVER_TYPE_INT64: case TRITONSERVER_TYPE_FP64: return 8;
    default: return 0;
  }
}

const char* TRITONSERVER_MemoryTypeString(TRITONSERVER_MemoryType t) {
  switch (t) {
    case TRITONSERVER_MEMORY_CPU: return "CPU";
    case TRITONSERVER_MEMORY_CPU_PINNED: return "CPU_PINNED";
    case TRITONSERVER_MEMORY_GPU: return "GPU";
    default: return "<invalid>";
  }
}

const char* TRITONSERVER_InstanceGroupKindString(TRITONSERVER_InstanceGroupKind k) {
  switch (k) {
    case TRITONSERVER_INSTANCEGROUPKIND_AUTO: return "AUTO";
    case TRITONSERVER_INSTANCEGROUPKIND_CPU: return "CPU";
    case TRITONSERVER_INSTANCEGROUPKIND_GPU: return "GPU";
    case TRITONSERVER_INSTANCEGROUPKIND_MODEL: return "MODEL";
    default: return "<invalid>";
  }
}

/* ---- parameters ---- */

TRITONSERVER_Parameter* TRITONSERVER_ParameterNew(const char* name, const TRITONSERVER_ParameterType type, const void* value) {
  if (name == NULL || value == NULL || type == TRITONSERVER_PARAMETER_BYTES) return NULL;
  TRITONSERVER_Parameter* p = calloc(1, sizeof *p);
  p->name = nereid_strdup(name);
  p->type = type;
  switch (type) {
    case TRITONSERVER_PARAMETER_STRING: p->s = nereid_strdup((const char*)value); break;
    case TRITONSERVER_PARAMETER_INT: p->i = *(const int64_t*)value; break;
    case TRITONSERVER_PARAMETER_BOOL: p->b = *(const bool*)value; break;
    case TRITONSERVER_PARAMETER_DOUBLE: p->d = *(const double*)value; break;
    default: break;
  }
  return p;
}

TRITONSERVER_Parameter* TRITONSERVER_ParameterBytesNew(const char* name, const void* byte_ptr, const uint64_t size) {
  if (name == NULL) return NULL;
  TRITONSERVER_Parameter* p = calloc(1, sizeof *p);
  p->name = nereid_strdup(name);
  p->type = TRITONSERVER_PARAMETER_BYTES;
  p->bytes = byte_ptr; /* shallow, as Triton's */
  p->size = size;
  return p;
}

void nereid_free_parameter(TRITONSERVER_Parameter* p) {
  if (p == NULL) return;
  free(p->name);
  free(p->s);
}

void TRITONSERVER_ParameterDelete(TRITONSERVER_Parameter* p) {
  nereid_free_parameter(p);
  free(p);
}

/* The value pointer of a parameter, as TRITONBACKEND_RequestParameter and
 * TRITONSERVER_InferenceResponseParameter return it. */
static const void* parameter_value(const TRITONSERVER_Parameter* p) {
  switch (p->type) {
    case TRITONSERVER_PARAMETER_STRING: return p->s;
    case TRITONSERVER_PARAMETER_INT: return &p->i;
    case TRITONSERVER_PARAMETER_BOOL: return &p->b;
    case TRITONSERVER_PARAMETER_DOUBLE: return &p->d;
    default: return p->bytes;
  }
}

/* ---- buffer attributes ---- */

TRITONSERVER_Error* TRITONSERVER_BufferAttributesCudaIpcHandle(TRITONSERVER_BufferAttributes* a, void** h) {
  NONNULL(a, "buffer attributes");
  if (h) *h = a->cuda_ipc_handle;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryType(TRITONSERVER_BufferAttributes* a, TRITONSERVER_MemoryType* t) {
  NONNULL(a, "buffer attributes");
  if (t) *t = a->memory_type;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryTypeId(TRITONSERVER_BufferAttributes* a, int64_t* id) {
  NONNULL(a, "buffer attributes");
  if (id) *id = a->memory_type_id;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_BufferAttributesByteSize(TRITONSERVER_BufferAttributes* a, size_t* n) {
  NONNULL(a, "buffer attributes");
  if (n) *n = a->byte_size;
  return NULL;
}

/* ---- traces: the accessors; the rest is in trace.go ---- */

TRITONSERVER_Error* TRITONSERVER_InferenceTraceContext(TRITONSERVER_InferenceTrace* t, const char** ctx) {
  NONNULL(t, "trace");
  NONNULL(ctx, "trace context");
  *ctx = t->context ? t->context : "";
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceTraceId(TRITONSERVER_InferenceTrace* t, uint64_t* id) {
  NONNULL(t, "trace");
  NONNULL(id, "trace id");
  *id = t->id;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceTraceParentId(TRITONSERVER_InferenceTrace* t, uint64_t* id) {
  NONNULL(t, "trace");
  NONNULL(id, "trace parent id");
  *id = t->parent_id;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceTraceModelName(TRITONSERVER_InferenceTrace* t, const char** name) {
  NONNULL(t, "trace");
  NONNULL(name, "model name");
  *name = t->model_name ? t->model_name : "";
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceTraceModelVersion(TRITONSERVER_InferenceTrace* t, int64_t* v) {
  NONNULL(t, "trace");
  NONNULL(v, "model version");
  *v = t->model_version;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceTraceRequestId(TRITONSERVER_InferenceTrace* t, const char** id) {
  NONNULL(t, "trace");
  NONNULL(id, "request id");
  *id = t->request_id ? t->request_id : "";
  return NULL;
}

/* ---- API version ---- */

TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor) {
  if (major) *major = TRITONBACKEND_API_VERSION_MAJOR;
  if (minor) *minor = TRITONBACKEND_API_VERSION_MINOR;
  return NULL;
}

/* ---- backend ---- */

TRITONSERVER_Error* TRITONBACKEND_BackendName(TRITONBACKEND_Backend* b, const char** name) {
  NONNULL(b, "backend");
  *name = b->name;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_BackendConfig(TRITONBACKEND_Backend* b, TRITONSERVER_Message** cfg) {
  NONNULL(b, "backend");
  *cfg = &b->config; /* owned by the server */
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_BackendExecutionPolicy(TRITONBACKEND_Backend* b, TRITONBACKEND_ExecutionPolicy* p) {
  NONNULL(b, "backend");
  *p = b->policy;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_BackendSetExecutionPolicy(TRITONBACKEND_Backend* b, TRITONBACKEND_ExecutionPolicy p) {
  NONNULL(b, "backend");
  b->policy = p;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_BackendArtifacts(TRITONBACKEND_Backend* b, TRITONBACKEND_ArtifactType* t, const char** loc) {
  NONNULL(b, "backend");
  if (t) *t = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  if (loc) *loc = b->location;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_BackendMemoryManager(TRITONBACKEND_Backend* b, TRITONBACKEND_MemoryManager** m) {
  NONNULL(b, "backend");
  *m = &b->manager;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_BackendState(TRITONBACKEND_Backend* b, void** s) {
  NONNULL(b, "backend");
  *s = b->state;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_BackendSetState(TRITONBACKEND_Backend* b, void* s) {
  NONNULL(b, "backend");
  b->state = s;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(TRITONBACKEND_BackendAttribute* a, const TRITONSERVER_InstanceGroupKind kind, const uint64_t count, const uint64_t* device_ids, const uint64_t id_count) {
  (void)device_ids;
  (void)id_count;
  NONNULL(a, "backend attributes");
  if (a->n_groups < sizeof a->groups / sizeof a->groups[0]) {
    a->groups[a->n_groups].kind = kind;
    a->groups[a->n_groups].count = count;
    a->n_groups++;
  }
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(TRITONBACKEND_BackendAttribute* a, bool enabled) {
  NONNULL(a, "backend attributes");
  a->parallel_instance_loading = enabled;
  return NULL;
}

/* ---- model ---- */

TRITONSERVER_Error* TRITONBACKEND_ModelName(TRITONBACKEND_Model* m, const char** name) {
  NONNULL(m, "model");
  *name = m->name;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* m, uint64_t* v) {
  NONNULL(m, "model");
  *v = m->version;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelRepository(TRITONBACKEND_Model* m, TRITONBACKEND_ArtifactType* t, const char** loc) {
  NONNULL(m, "model");
  if (t) *t = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  if (loc) *loc = m->location;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model* m, bool* ac) {
  NONNULL(m, "model");
  *ac = m->auto_complete;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelServer(TRITONBACKEND_Model* m, TRITONSERVER_Server** s) {
  NONNULL(m, "model");
  *s = m->server;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelBackend(TRITONBACKEND_Model* m, TRITONBACKEND_Backend** b) {
  NONNULL(m, "model");
  *b = m->backend;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* m, void** s) {
  NONNULL(m, "model");
  *s = m->state;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* m, void* s) {
  NONNULL(m, "model");
  m->state = s;
  return NULL;
}

/* ---- model instance ---- */

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance* i, const char** name) {
  NONNULL(i, "model instance");
  *name = i->name;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance* i, TRITONSERVER_InstanceGroupKind* k) {
  NONNULL(i, "model instance");
  *k = i->kind;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance* i, int32_t* d) {
  NONNULL(i, "model instance");
  *d = i->device_id;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceHostPolicy(TRITONBACKEND_ModelInstance* i, TRITONSERVER_Message** p) {
  NONNULL(i, "model instance");
  *p = &i->host_policy;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceIsPassive(TRITONBACKEND_ModelInstance* i, bool* p) {
  NONNULL(i, "model instance");
  *p = false;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileCount(TRITONBACKEND_ModelInstance* i, uint32_t* n) {
  NONNULL(i, "model instance");
  *n = 0;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileName(TRITONBACKEND_ModelInstance* i, const uint32_t index, const char** name) {
  (void)i;
  (void)index;
  (void)name;
  return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: the instance has no optimization profiles");
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceCount(TRITONBACKEND_ModelInstance* i, uint32_t* n) {
  NONNULL(i, "model instance");
  *n = 0;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(TRITONBACKEND_ModelInstance* i, uint32_t index, const char** kind, int64_t* id) {
  (void)i;
  (void)index;
  (void)kind;
  (void)id;
  return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: the instance has no secondary devices");
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* i, TRITONBACKEND_Model** m) {
  NONNULL(i, "model instance");
  *m = i->model;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* i, void** s) {
  NONNULL(i, "model instance");
  *s = i->state;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* i, void* s) {
  NONNULL(i, "model instance");
  i->state = s;
  return NULL;
}

/* ---- requests ---- */

#define REQ(r) \
  NONNULL(r, "request"); \
  if ((r)->released) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "request has been released")

TRITONSERVER_Error* TRITONBACKEND_RequestId(TRITONBACKEND_Request* r, const char** id) {
  REQ(r);
  *id = r->id;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationId(TRITONBACKEND_Request* r, uint64_t* id) {
  REQ(r);
  if (r->correlation_is_string) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "correlation ID in request is not an unsigned int");
  *id = r->correlation_id;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationIdString(TRITONBACKEND_Request* r, const char** id) {
  REQ(r);
  if (!r->correlation_is_string) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "correlation ID in request is not a string");
  *id = r->correlation_id_string;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_InferenceRequestTimeoutMicroseconds(TRITONBACKEND_Request* r, uint64_t* t) {
  REQ(r);
  *t = r->timeout_us;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestFlags(TRITONBACKEND_Request* r, uint32_t* f) {
  REQ(r);
  *f = r->flags;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestParameterCount(TRITONBACKEND_Request* r, uint32_t* n) {
  REQ(r);
  *n = r->n_params;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestParameter(TRITONBACKEND_Request* r, const uint32_t index, const char** key, TRITONSERVER_ParameterType* type, const void** v) {
  REQ(r);
  if (index >= r->n_params) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: parameter index must be less than the parameter count");
  TRITONSERVER_Parameter* p = &r->params[index];
  if (key) *key = p->name;
  if (type) *type = p->type;
  if (v) *v = parameter_value(p);
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* r, uint32_t* n) {
  REQ(r);
  *n = r->n_inputs;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestInputName(TRITONBACKEND_Request* r, const uint32_t index, const char** name) {
  REQ(r);
  if (index >= r->n_inputs) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: input index must be less than the input count");
  *name = r->inputs[index].name;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestInput(TRITONBACKEND_Request* r, const char* name, TRITONBACKEND_Input** in) {
  REQ(r);
  NONNULL(name, "input name");
  for (uint32_t i = 0; i < r->n_inputs; i++) {
    if (strcmp(r->inputs[i].name, name) == 0) {
      *in = &r->inputs[i];
      return NULL;
    }
  }
  char msg[512];
  snprintf(msg, sizeof msg, "unknown request input name %s", name);
  return ERR(TRITONSERVER_ERROR_INVALID_ARG, msg);
}
TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex(TRITONBACKEND_Request* r, const uint32_t index, TRITONBACKEND_Input** in) {
  REQ(r);
  if (index >= r->n_inputs) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: input index must be less than the input count");
  *in = &r->inputs[index];
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* r, uint32_t* n) {
  REQ(r);
  *n = r->n_outputs;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request* r, const uint32_t index, const char** name) {
  REQ(r);
  if (index >= r->n_outputs) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: requested output index must be less than the requested output count");
  *name = r->outputs[index];
  return NULL;
}

/* ---- inputs ---- */

TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* in, const char** name, TRITONSERVER_DataType* dt, const int64_t** shape, uint32_t* dims, uint64_t* byte_size, uint32_t* buffers) {
  NONNULL(in, "input");
  if (name) *name = in->name;
  if (dt) *dt = in->datatype;
  if (shape) *shape = in->shape;
  if (dims) *dims = in->dims_count;
  if (byte_size) *byte_size = in->byte_size;
  if (buffers) *buffers = 1; /* always one contiguous buffer */
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_InputPropertiesForHostPolicy(TRITONBACKEND_Input* in, const char* policy, const char** name, TRITONSERVER_DataType* dt, const int64_t** shape, uint32_t* dims, uint64_t* byte_size, uint32_t* buffers) {
  (void)policy; /* one set of buffers serves every host policy */
  return TRITONBACKEND_InputProperties(in, name, dt, shape, dims, byte_size, buffers);
}
TRITONSERVER_Error* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* in, const uint32_t index, const void** buffer, uint64_t* size, TRITONSERVER_MemoryType* mt, int64_t* mid) {
  NONNULL(in, "input");
  if (index != 0) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: input buffer index must be less than the buffer count");
  *buffer = in->buffer;
  if (size) *size = in->byte_size;
  if (mt) *mt = in->attributes.memory_type;
  if (mid) *mid = in->attributes.memory_type_id;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_InputBufferForHostPolicy(TRITONBACKEND_Input* in, const char* policy, const uint32_t index, const void** buffer, uint64_t* size, TRITONSERVER_MemoryType* mt, int64_t* mid) {
  (void)policy;
  return TRITONBACKEND_InputBuffer(in, index, buffer, size, mt, mid);
}
TRITONSERVER_Error* TRITONBACKEND_InputBufferAttributes(TRITONBACKEND_Input* in, const uint32_t index, const void** buffer, TRITONSERVER_BufferAttributes** attrs) {
  NONNULL(in, "input");
  if (index != 0) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: input buffer index must be less than the buffer count");
  if (buffer) *buffer = in->buffer;
  if (attrs) *attrs = &in->attributes;
  return NULL;
}

/* ---- responses ---- */

/* A response carries its request's Go handle and, while the request is
 * recorded (exec.c), the request itself. */
static TRITONBACKEND_Response* response_new(uintptr_t h, TRITONBACKEND_Request* req, struct nereid_exec* x, uint64_t gen) {
  TRITONBACKEND_Response* r = x ? nereid_exec_take_response(x) : NULL;
  if (r == NULL) r = malloc(sizeof *r);
  /* Every field but the spare outputs' array, which n_outputs covers. */
  r->n_outputs = 0;
  r->n_params = r->cap_params = 0;
  r->params = NULL;
  r->next_spare = NULL;
  r->outputs = r->first_outputs;
  r->cap_outputs = sizeof r->first_outputs / sizeof r->first_outputs[0];
  r->h = h;
  r->req = req;
  r->exec = x;
  r->gen = gen;
  return r;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** resp, TRITONBACKEND_Request* r) {
  REQ(r);
  NONNULL(resp, "response");
  *resp = response_new(r->h, r, r->exec, r->gen);
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ResponseNewFromFactory(TRITONBACKEND_Response** resp, TRITONBACKEND_ResponseFactory* f) {
  NONNULL(f, "response factory");
  NONNULL(resp, "response");
  *resp = response_new(f->h, f->req, f->exec, f->gen);
  return NULL;
}

/* nereid_free_output frees an output with its shape and name, and the
 * buffers it owns. */
void nereid_free_output(TRITONBACKEND_Output* o) {
  if (o->owned) free(o->buffer);
  free(o->spare);
  free(o);
}

TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* r) {
  nereid_free_response(r);
  return NULL;
}

static TRITONSERVER_Error* add_param(TRITONBACKEND_Response* r, TRITONSERVER_Parameter* p) {
  if (p == NULL) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "parameter name and value must not be null");
  if (r->n_params == r->cap_params) {
    r->cap_params = r->cap_params ? 2 * r->cap_params : 4;
    r->params = realloc(r->params, r->cap_params * sizeof *r->params);
  }
  r->params[r->n_params++] = p;
  return NULL;
}
TRITONSERVER_Error* TRITONBACKEND_ResponseSetStringParameter(TRITONBACKEND_Response* r, const char* name, const char* value) {
  NONNULL(r, "response");
  return add_param(r, TRITONSERVER_ParameterNew(name, TRITONSERVER_PARAMETER_STRING, value));
}
TRITONSERVER_Error* TRITONBACKEND_ResponseSetIntParameter(TRITONBACKEND_Response* r, const char* name, const int64_t value) {
  NONNULL(r, "response");
  return add_param(r, TRITONSERVER_ParameterNew(name, TRITONSERVER_PARAMETER_INT, &value));
}
TRITONSERVER_Error* TRITONBACKEND_ResponseSetBoolParameter(TRITONBACKEND_Response* r, const char* name, const bool value) {
  NONNULL(r, "response");
  return add_param(r, TRITONSERVER_ParameterNew(name, TRITONSERVER_PARAMETER_BOOL, &value));
}
TRITONSERVER_Error* TRITONBACKEND_ResponseSetDoubleParameter(TRITONBACKEND_Response* r, const char* name, const double value) {
  NONNULL(r, "response");
  return add_param(r, TRITONSERVER_ParameterNew(name, TRITONSERVER_PARAMETER_DOUBLE, &value));
}

TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* r, TRITONBACKEND_Output** out, const char* name, const TRITONSERVER_DataType dt, const int64_t* shape, const uint32_t dims) {
  NONNULL(r, "response");
  NONNULL(out, "output");
  NONNULL(name, "output name");
  for (uint32_t i = 0; i < r->n_outputs; i++) {
    if (strcmp(r->outputs[i]->name, name) == 0) {
      char msg[512];
      snprintf(msg, sizeof msg, "response already has an output named '%s'", name);
      return ERR(TRITONSERVER_ERROR_ALREADY_EXISTS, msg);
    }
  }
  /* One allocation: the output, its shape, its name. */
  size_t n = strlen(name) + 1;
  size_t size = sizeof(TRITONBACKEND_Output) + (dims ? dims : 1) * sizeof(int64_t) + n;
  TRITONBACKEND_Output* o = r->exec ? nereid_exec_take_output(r->exec, size) : NULL;
  if (o == NULL) {
    o = calloc(1, size);
    o->size = size;
  }
  o->shape = (int64_t*)(o + 1);
  o->name = (char*)(o->shape + (dims ? dims : 1));
  memcpy(o->name, name, n);
  o->name_len = (uint32_t)(n - 1);
  o->datatype = dt;
  o->dims_count = dims;
  if (dims) memcpy(o->shape, shape, dims * sizeof(int64_t));
  else o->shape[0] = 0;
  o->response = r;
  if (r->n_outputs == r->cap_outputs) {
    TRITONBACKEND_Output** grown = malloc(2 * r->cap_outputs * sizeof *r->outputs);
    memcpy(grown, r->outputs, r->n_outputs * sizeof *r->outputs);
    if (r->outputs != r->first_outputs) free(r->outputs);
    r->outputs = grown;
    r->cap_outputs *= 2;
  }
  r->outputs[r->n_outputs++] = o;
  *out = o;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_OutputBufferAttributes(TRITONBACKEND_Output* o, TRITONSERVER_BufferAttributes** attrs) {
  NONNULL(o, "output");
  *attrs = &o->attributes;
  return NULL;
}

/* ---- response allocators (BLS) ---- */

TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorNew(TRITONSERVER_ResponseAllocator** a, TRITONSERVER_ResponseAllocatorAllocFn_t alloc_fn, TRITONSERVER_ResponseAllocatorReleaseFn_t release_fn, TRITONSERVER_ResponseAllocatorStartFn_t start_fn) {
  NONNULL(a, "allocator");
  *a = calloc(1, sizeof **a);
  (*a)->alloc_fn = alloc_fn;
  (*a)->release_fn = release_fn;
  (*a)->start_fn = start_fn;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorSetQueryFunction(TRITONSERVER_ResponseAllocator* a, TRITONSERVER_ResponseAllocatorQueryFn_t q) {
  NONNULL(a, "allocator");
  a->query_fn = q;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorDelete(TRITONSERVER_ResponseAllocator* a) {
  free(a);
  return NULL;
}

TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetReleaseCallback(TRITONSERVER_InferenceRequest* r, TRITONSERVER_InferenceRequestReleaseFn_t fn, void* userp) {
  NONNULL(r, "inference request");
  r->cb.release_fn = fn;
  r->cb.release_userp = userp;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetResponseCallback(TRITONSERVER_InferenceRequest* r, TRITONSERVER_ResponseAllocator* a, void* a_userp, TRITONSERVER_InferenceResponseCompleteFn_t fn, void* userp) {
  NONNULL(r, "inference request");
  r->cb.allocator = a;
  r->cb.allocator_userp = a_userp;
  r->cb.response_fn = fn;
  r->cb.response_userp = userp;
  return NULL;
}

/* nereid_bls_start tells the caller's allocator that the allocations that
 * follow are for a new response, as Triton does when it creates each one. */
void nereid_bls_start(TRITONSERVER_InferenceRequest* req) {
  if (req->cb.allocator && req->cb.allocator->start_fn)
    TRITONSERVER_ErrorDelete(req->cb.allocator->start_fn(req->cb.allocator, req->cb.allocator_userp));
}

/* nereid_bls_alloc asks the caller's allocator for an output buffer. */
TRITONSERVER_Error* nereid_bls_alloc(TRITONSERVER_InferenceRequest* req, nereid_bls_output* o) {
  TRITONSERVER_ResponseAllocator* a = req->cb.allocator;
  if (a == NULL || a->alloc_fn == NULL) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "inference request has no response allocator");
  o->memory_type = TRITONSERVER_MEMORY_CPU;
  o->memory_type_id = 0;
  o->buffer = NULL;
  o->buffer_userp = NULL;
  TRITONSERVER_Error* err = a->alloc_fn(a, o->name, o->byte_size, TRITONSERVER_MEMORY_CPU, 0, req->cb.allocator_userp, &o->buffer, &o->buffer_userp, &o->memory_type, &o->memory_type_id);
  if (err == NULL && a->buffer_attributes_fn != NULL) {
    /* Triton calls it after each allocation with the buffer's attributes. */
    TRITONSERVER_BufferAttributes attrs = {o->memory_type, o->memory_type_id, o->byte_size, NULL};
    err = a->buffer_attributes_fn(a, o->name, &attrs, req->cb.allocator_userp, o->buffer_userp);
  }
  return err;
}

/* nereid_bls_complete hands one response (NULL: the final flag alone) to
 * the caller's response callback; the callback owns it. */
void nereid_bls_complete(TRITONSERVER_InferenceRequest* req, TRITONSERVER_InferenceResponse* resp, uint32_t flags) {
  if (resp) resp->allocator = req->cb.allocator;
  if (req->cb.response_fn) req->cb.response_fn(resp, flags, req->cb.response_userp);
  else if (resp) TRITONSERVER_InferenceResponseDelete(resp);
}

void nereid_bls_release(TRITONSERVER_InferenceRequest* req) {
  if (req->cb.release_fn) req->cb.release_fn(req, TRITONSERVER_REQUEST_RELEASE_ALL, req->cb.release_userp);
}

TRITONSERVER_Error* TRITONSERVER_InferenceResponseDelete(TRITONSERVER_InferenceResponse* r) {
  if (r == NULL) return NULL;
  for (uint32_t i = 0; i < r->n_outputs; i++) {
    nereid_bls_output* o = &r->outputs[i];
    if (o->buffer && r->allocator && r->allocator->release_fn)
      TRITONSERVER_ErrorDelete(r->allocator->release_fn(r->allocator, o->buffer, o->buffer_userp, o->byte_size, o->memory_type, o->memory_type_id));
    free(o->name);
    free(o->shape);
  }
  free(r->outputs);
  for (uint32_t i = 0; i < r->n_params; i++) nereid_free_parameter(&r->params[i]);
  free(r->params);
  TRITONSERVER_ErrorDelete(r->error);
  free(r->model);
  free(r->id);
  free(r);
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceResponseError(TRITONSERVER_InferenceResponse* r) {
  if (r == NULL || r->error == NULL) return NULL;
  /* owned by the response in Triton; a copy keeps callers that delete it safe */
  return nereid_error(r->error->code, r->error->msg);
}
TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameterCount(TRITONSERVER_InferenceResponse* r, uint32_t* n) {
  NONNULL(r, "inference response");
  *n = r->n_params;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameter(TRITONSERVER_InferenceResponse* r, const uint32_t index, const char** name, TRITONSERVER_ParameterType* type, const void** v) {
  NONNULL(r, "inference response");
  if (index >= r->n_params) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: parameter index must be less than the parameter count");
  TRITONSERVER_Parameter* p = &r->params[index];
  if (name) *name = p->name;
  if (type) *type = p->type;
  if (v) *v = parameter_value(p);
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutputCount(TRITONSERVER_InferenceResponse* r, uint32_t* n) {
  NONNULL(r, "inference response");
  *n = r->n_outputs;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutput(TRITONSERVER_InferenceResponse* r, const uint32_t index, const char** name, TRITONSERVER_DataType* dt, const int64_t** shape, uint64_t* dims, const void** base, size_t* byte_size, TRITONSERVER_MemoryType* mt, int64_t* mid, void** userp) {
  NONNULL(r, "inference response");
  if (index >= r->n_outputs) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index: output index must be less than the output count");
  nereid_bls_output* o = &r->outputs[index];
  if (name) *name = o->name;
  if (dt) *dt = o->datatype;
  if (shape) *shape = o->shape;
  if (dims) *dims = o->dims_count;
  if (base) *base = o->buffer;
  if (byte_size) *byte_size = o->byte_size;
  if (mt) *mt = o->memory_type;
  if (mid) *mid = o->memory_type_id;
  if (userp) *userp = o->buffer_userp;
  return NULL;
}

/* ---- metric arguments ---- */

struct TRITONSERVER_MetricArgs {
  double* buckets;
  uint64_t n;
};
TRITONSERVER_Error* TRITONSERVER_MetricArgsNew(TRITONSERVER_MetricArgs** a) {
  NONNULL(a, "metric args");
  *a = calloc(1, sizeof **a);
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_MetricArgsSetHistogram(TRITONSERVER_MetricArgs* a, const double* buckets, const uint64_t n) {
  NONNULL(a, "metric args");
  free(a->buckets);
  a->buckets = malloc((n ? n : 1) * sizeof(double));
  if (n) memcpy(a->buckets, buckets, n * sizeof(double));
  a->n = n;
  return NULL;
}
TRITONSERVER_Error* TRITONSERVER_MetricArgsDelete(TRITONSERVER_MetricArgs* a) {
  if (a) {
    free(a->buckets);
    free(a);
  }
  return NULL;
}
const double* nereid_metric_args_buckets(const TRITONSERVER_MetricArgs* a, uint64_t* n) {
  if (a == NULL) {
    *n = 0;
    return NULL;
  }
  *n = a->n;
  return a->buckets;
}

/* ---- calling a backend ---- */

TRITONSERVER_Error* nereid_call_backend(void* fn, TRITONBACKEND_Backend* b) { return ((nereid_backend_fn)fn)(b); }
TRITONSERVER_Error* nereid_call_model(void* fn, TRITONBACKEND_Model* m) { return ((nereid_model_fn)fn)(m); }
TRITONSERVER_Error* nereid_call_instance(void* fn, TRITONBACKEND_ModelInstance* i) { return ((nereid_instance_fn)fn)(i); }
TRITONSERVER_Error* nereid_call_attr(void* fn, TRITONBACKEND_Backend* b, TRITONBACKEND_BackendAttribute* a) { return ((nereid_attr_fn)fn)(b, a); }

void* nereid_dlopen(const char* path, int global, char** err) {
  dlerror();
  void* h = dlopen(path, RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
  if (h == NULL) {
    const char* e = dlerror();
    *err = nereid_strdup(e ? e : "dlopen failed");
  }
  return h;
}
void* nereid_dlsym(void* h, const char* name) { return dlsym(h, name); }
void nereid_dlclose(void* h) { dlclose(h); }

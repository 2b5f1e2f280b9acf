/*
 * The server-side objects behind the opaque handles of Triton's backend API,
 * as Nereid lays them out. Everything a backend can hold a pointer to is
 * allocated here in C memory; the Go side keeps its own objects behind a
 * cgo.Handle stored in the field `h`.
 */
#ifndef NEREID_ABI_H
#define NEREID_ABI_H

#include "triton/core/tritonbackend.h"

struct TRITONSERVER_Error {
  TRITONSERVER_Error_Code code;
  char* msg;
};

struct TRITONSERVER_Message {
  char* json; /* NUL-terminated: some backends read it as a C string */
  size_t size;
};

struct TRITONSERVER_Parameter {
  char* name;
  TRITONSERVER_ParameterType type;
  int64_t i;
  bool b;
  double d;
  char* s;
  const void* bytes;
  uint64_t size;
};

struct TRITONSERVER_BufferAttributes {
  TRITONSERVER_MemoryType memory_type;
  int64_t memory_type_id;
  size_t byte_size;
  void* cuda_ipc_handle;
};

struct TRITONSERVER_Server {
  uintptr_t h;
};

struct TRITONSERVER_MetricFamily {
  uintptr_t h;
};

struct TRITONSERVER_Metric {
  uintptr_t h;
};

struct TRITONBACKEND_MemoryManager {
  uintptr_t h;
};

struct TRITONBACKEND_Backend {
  char* name;
  char* location;
  TRITONSERVER_Message config;
  void* state;
  TRITONBACKEND_ExecutionPolicy policy;
  TRITONBACKEND_MemoryManager manager;
  uintptr_t h;
};

struct TRITONBACKEND_BackendAttribute {
  bool parallel_instance_loading;
  uint32_t n_groups;
  struct {
    TRITONSERVER_InstanceGroupKind kind;
    uint64_t count;
  } groups[8];
};

struct TRITONBACKEND_Model {
  char* name;
  uint64_t version;
  char* location;
  void* state;
  TRITONBACKEND_Backend* backend;
  TRITONSERVER_Server* server;
  bool auto_complete;
  uintptr_t h;
};

struct TRITONBACKEND_ModelInstance {
  char* name;
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device_id;
  void* state;
  TRITONBACKEND_Model* model;
  TRITONSERVER_Message host_policy;
  uintptr_t h;
};

struct TRITONBACKEND_Input {
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t dims_count;
  const void* buffer;
  uint64_t byte_size;
  TRITONSERVER_BufferAttributes attributes;
};

struct TRITONBACKEND_Request {
  uintptr_t h;
  TRITONBACKEND_ModelInstance* instance;
  char* id;
  uint64_t correlation_id;
  char* correlation_id_string;
  bool correlation_is_string;
  uint32_t flags;
  uint64_t timeout_us;
  uint32_t n_inputs;
  TRITONBACKEND_Input* inputs;
  uint32_t n_outputs;
  char** outputs; /* requested output names, sorted */
  uint32_t n_params;
  TRITONSERVER_Parameter* params;
  bool released;
};

/* A trace: the request's (owned by the request) or one spawned from it
 * (owned by the backend until TRITONSERVER_ServerInferAsync takes it).
 * The strings are the executor's; context is NULL until the trace has a
 * span. */
struct TRITONSERVER_InferenceTrace {
  uintptr_t h;
  uint64_t id;
  uint64_t parent_id;
  char* model_name;
  int64_t model_version;
  char* request_id;
  char* context;
};

struct TRITONBACKEND_ResponseFactory {
  uintptr_t h;
};

struct TRITONBACKEND_Output {
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t dims_count;
  void* buffer;
  uint64_t byte_size;
  TRITONSERVER_BufferAttributes attributes;
  struct TRITONBACKEND_Response* response;
};

struct TRITONBACKEND_Response {
  uintptr_t h; /* the request's Go object */
  uint32_t n_outputs, cap_outputs;
  TRITONBACKEND_Output** outputs;
  uint32_t n_params, cap_params;
  TRITONSERVER_Parameter** params;
};

struct TRITONBACKEND_State {
  uintptr_t h;
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t dims_count;
  void* buffer;
  uint64_t byte_size;
};

/* Helpers the Go side uses. */
TRITONSERVER_Error* nereid_error(TRITONSERVER_Error_Code code, const char* msg);
char* nereid_strdup(const char* s);
void nereid_free_request(TRITONBACKEND_Request* r);
void nereid_free_response(TRITONBACKEND_Response* r);
void nereid_free_parameter(TRITONSERVER_Parameter* p);
uint64_t nereid_steady_ns(void);
void* nereid_ptr(uintptr_t p);

/* Calls through a backend's entry points (fn may not be NULL). */
typedef TRITONSERVER_Error* (*nereid_backend_fn)(TRITONBACKEND_Backend*);
typedef TRITONSERVER_Error* (*nereid_model_fn)(TRITONBACKEND_Model*);
typedef TRITONSERVER_Error* (*nereid_instance_fn)(TRITONBACKEND_ModelInstance*);
typedef TRITONSERVER_Error* (*nereid_execute_fn)(TRITONBACKEND_ModelInstance*, TRITONBACKEND_Request**, const uint32_t);
typedef TRITONSERVER_Error* (*nereid_attr_fn)(TRITONBACKEND_Backend*, TRITONBACKEND_BackendAttribute*);
TRITONSERVER_Error* nereid_call_backend(void* fn, TRITONBACKEND_Backend* b);
TRITONSERVER_Error* nereid_call_model(void* fn, TRITONBACKEND_Model* m);
TRITONSERVER_Error* nereid_call_instance(void* fn, TRITONBACKEND_ModelInstance* i);
TRITONSERVER_Error* nereid_call_execute(void* fn, TRITONBACKEND_ModelInstance* i, TRITONBACKEND_Request** r, uint32_t n);
TRITONSERVER_Error* nereid_call_attr(void* fn, TRITONBACKEND_Backend* b, TRITONBACKEND_BackendAttribute* a);

/* Library loading. */
void* nereid_dlopen(const char* path, int global, char** err);
void* nereid_dlsym(void* handle, const char* name);
void nereid_dlclose(void* handle);
const double* nereid_metric_args_buckets(const TRITONSERVER_MetricArgs* a, uint64_t* n);

/* BLS: the callbacks a backend registered on its request. */
typedef struct nereid_bls_callbacks {
  TRITONSERVER_ResponseAllocator* allocator;
  void* allocator_userp;
  TRITONSERVER_InferenceResponseCompleteFn_t response_fn;
  void* response_userp;
  TRITONSERVER_InferenceRequestReleaseFn_t release_fn;
  void* release_userp;
} nereid_bls_callbacks;

struct TRITONSERVER_ResponseAllocator {
  TRITONSERVER_ResponseAllocatorAllocFn_t alloc_fn;
  TRITONSERVER_ResponseAllocatorReleaseFn_t release_fn;
  TRITONSERVER_ResponseAllocatorStartFn_t start_fn;
  TRITONSERVER_ResponseAllocatorQueryFn_t query_fn;
};

struct TRITONSERVER_InferenceRequest {
  uintptr_t h;
  nereid_bls_callbacks cb;
};

typedef struct nereid_bls_output {
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint64_t dims_count;
  void* buffer;
  size_t byte_size;
  TRITONSERVER_MemoryType memory_type;
  int64_t memory_type_id;
  void* buffer_userp;
} nereid_bls_output;

struct TRITONSERVER_InferenceResponse {
  TRITONSERVER_Error* error;
  char* model;
  int64_t version;
  char* id;
  uint32_t n_outputs;
  nereid_bls_output* outputs;
  uint32_t n_params;
  TRITONSERVER_Parameter* params;
  TRITONSERVER_ResponseAllocator* allocator;
};

TRITONSERVER_Error* nereid_bls_alloc(TRITONSERVER_InferenceRequest* req, nereid_bls_output* out);
void nereid_bls_complete(TRITONSERVER_InferenceRequest* req, TRITONSERVER_InferenceResponse* resp);
void nereid_bls_release(TRITONSERVER_InferenceRequest* req);

#endif

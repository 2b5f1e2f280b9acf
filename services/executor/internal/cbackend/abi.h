/*
 * The server-side objects behind the opaque handles of Triton's backend API,
 * as Nereid lays them out. Everything a backend can hold a pointer to is
 * allocated here in C memory; the Go side keeps its own objects behind a
 * cgo.Handle stored in the field `h`.
 */
#ifndef NEREID_ABI_H
#define NEREID_ABI_H

#include "triton/core/tritonbackend.h"

struct nereid_exec;
struct nereid_arena;

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
  struct nereid_exec* exec; /* its executions' record (exec.c) */
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
  uintptr_t h; /* 0 once released and answered in a recorded execution */
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
  struct nereid_arena* arena; /* the memory the request lies in */
  /* The execution that records what the backend does to the request
   * (exec.c): exec is NULL for a request whose calls all go to Go at once
   * (a decoupled model's), and the record is on while exec->gen == gen. */
  struct nereid_exec* exec;
  uint64_t gen;
  uint32_t index;       /* in the execution's batch */
  uint32_t first, last; /* its events in exec->events, as index + 1; 0: none */
  /* Its first send, its release and its first statistics are recorded
   * here rather than as events: a request that is not decoupled has one
   * of each. Go replays the first send, then its other sends in order
   * (events), then the release, and the statistics first: what Go's side
   * makes of them does not depend on the order of a send and the release,
   * nor of statistics and either. */
  bool has_send;
  uint32_t send_flags;
  TRITONBACKEND_Response* send_resp;   /* NULL for the factory's flags */
  TRITONSERVER_Error* send_error;      /* a copy of the backend's, freed with the record */
  bool release_recorded;
  bool has_stats;
  bool stats_success;
  TRITONBACKEND_ModelInstance* stats_instance;
  uint64_t stats_ts[4];
  /* What the executor's side knows once the record is replayed: the
   * responses sent and whether the final one was (backend.Request's sent
   * and final), whether a send with the final flag was made at all
   * (cRequest.final), and whether the request is released and answered
   * (gone: its handle is 0). */
  uint32_t sent;
  bool answered;
  bool final;
  bool ended;
  /* Outputs may have a place of their own (a client's shared-memory
   * region): TRITONBACKEND_OutputBuffer asks Go. */
  bool outputs_bound;
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
  /* A trace a backend made (TRITONSERVER_InferenceTraceNew): its level
   * and callbacks, called while a request carries it (serverapi.c). */
  TRITONSERVER_InferenceTraceLevel level;
  TRITONSERVER_InferenceTraceActivityFn_t activity_fn;
  TRITONSERVER_InferenceTraceTensorActivityFn_t tensor_fn;
  TRITONSERVER_InferenceTraceReleaseFn_t release_fn;
  void* userp;
};

/* Responses and factories made from a recorded request carry it, its
 * execution and generation: their sends are recorded while that
 * execution runs, and go to Go (through h) after it. */
struct TRITONBACKEND_ResponseFactory {
  uintptr_t h;
  TRITONBACKEND_Request* req;
  struct nereid_exec* exec;
  uint64_t gen;
};

struct TRITONBACKEND_Output {
  char* name;
  uint32_t name_len; /* strlen(name), for Go to match it without a scan */
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t dims_count;
  void* buffer;
  uint64_t byte_size;
  TRITONSERVER_BufferAttributes attributes;
  bool owned; /* buffer is malloc'd here (a small output): freed with the response */
  struct TRITONBACKEND_Response* response;
  /* Kept for reuse by the instance's executions (exec.c): the bytes of
   * this allocation (the output, its shape and name), and a small buffer
   * of spare_cap bytes an earlier response owned. */
  size_t size;
  void* spare;
  size_t spare_cap;
  struct TRITONBACKEND_Output* next_spare;
};

struct TRITONBACKEND_Response {
  uintptr_t h; /* the request's Go object */
  TRITONBACKEND_Request* req;
  struct nereid_exec* exec;
  uint64_t gen;
  uint32_t n_outputs, cap_outputs;
  TRITONBACKEND_Output** outputs; /* first_outputs until there are more */
  TRITONBACKEND_Output* first_outputs[4];
  uint32_t n_params, cap_params;
  TRITONSERVER_Parameter** params;
  struct TRITONBACKEND_Response* next_spare; /* exec.c */
};

struct TRITONBACKEND_State {
  uintptr_t h;
  char* name;
  TRITONSERVER_DataType datatype;
  int64_t* shape;
  uint32_t dims_count;
  void* buffer;
  uint64_t byte_size;
  TRITONSERVER_BufferAttributes attributes; /* TRITONBACKEND_StateBufferAttributes (api.c) */
};

/* ---- recorded executions (exec.c) ---- */

/* Outputs up to this size get host memory allocated in C, with no call
 * into Go, while their request is recorded; the bytes are copied into the
 * response when it is replayed. Larger ones get memory from Go (pinned Go
 * memory, or their place in a client's region), where a copy would cost
 * more than the call. */
#define NEREID_SMALL_OUTPUT 4096

/* The calls recorded as events: a request's sends after its first, its
 * statistics after the first, the execution's batch statistics after the
 * first (the firsts, and the release, are recorded in the request and the
 * record themselves). */
enum {
  NEREID_EVENT_SEND = 1,  /* TRITONBACKEND_ResponseSend */
  NEREID_EVENT_FLAGS,     /* TRITONBACKEND_ResponseFactorySendFlags */
  NEREID_EVENT_STATS,     /* TRITONBACKEND_ModelInstanceReportStatistics */
  NEREID_EVENT_BATCH      /* TRITONBACKEND_ModelInstanceReportBatchStatistics */
};

/* A response sent in a recorded execution, and the copy of the error it
 * carried: the server's, freed with the record. */
typedef struct nereid_sent {
  TRITONBACKEND_Response* response;
  TRITONSERVER_Error* error;
} nereid_sent;

/* One call a backend made during a recorded execution. */
typedef struct nereid_event {
  uint32_t kind;
  uint32_t flags; /* SEND, FLAGS */
  uint32_t next;  /* the next event of its request (of the instance for BATCH), index + 1; 0: none */
  bool success;   /* STATS */
  TRITONBACKEND_Request* request;          /* NULL for BATCH */
  TRITONBACKEND_Response* response;        /* SEND: the server's (sent) */
  TRITONSERVER_Error* error;               /* SEND: a copy of the backend's (sent) */
  TRITONBACKEND_ModelInstance* instance;   /* STATS, BATCH */
  uint64_t batch_size;                     /* BATCH */
  uint64_t ts[4];                          /* STATS, BATCH */
} nereid_event;

/* The record of an instance's executions. One exists per instance and is
 * never freed (a finalized instance's goes back to a pool), so that a
 * response or factory that outlives its instance can still be checked
 * against it. The lock (a spin lock: it is held for a few instructions,
 * and taken several times per request) guards the rest. */
typedef struct nereid_exec {
  /* What nereid_execute calls: the backend's Execute, with the requests
   * in `requests` (set by Go). */
  void* fn;
  TRITONBACKEND_Request** requests;
  int lock;
  uint64_t gen; /* the execution being recorded, 0 when none */
  uint32_t n_events, cap_events;
  nereid_event* events;
  uint32_t n_sent, cap_sent;
  nereid_sent* sent; /* the responses the record's sends made, freed with it */
  uint32_t batch_first, batch_last; /* the instance's events (BATCH), as a request's */
  /* The execution's first batch statistics, recorded here rather than as
   * an event, as a request's first statistics are. */
  bool has_batch;
  TRITONBACKEND_ModelInstance* batch_instance;
  uint64_t batch_size;
  uint64_t batch_ts[4];
  /* Set by TRITONSERVER_LogIsEnabled once an execution's answers are past
   * half their life: Go asks its log again before the next execution. */
  bool log_refresh;
  struct nereid_exec* next_free;
  /* Responses and outputs freed, kept for the next ones made from the
   * instance's requests: an execution then allocates no C memory for its
   * responses once the instance has made as many before. */
  TRITONBACKEND_Response* spare_responses;
  TRITONBACKEND_Output* spare_outputs;
  uint32_t n_spare_responses, n_spare_outputs;
} nereid_exec;

/* Requests of one execution lie in one arena: refs counts the requests
 * not yet disposed of plus one for the instance that reuses it. The bytes
 * follow the header at NEREID_ARENA_HEADER. */
typedef struct nereid_arena {
  uint32_t refs;
} nereid_arena;
#define NEREID_ARENA_HEADER 16

nereid_exec* nereid_exec_new(void);
void nereid_exec_free(nereid_exec* x);
TRITONSERVER_Error* nereid_execute(uintptr_t instance, uint32_t n, uint64_t gen, uint32_t log_levels, uint64_t log_levels_at);
/* How long an answer of TRITONSERVER_LogIsEnabled given to an execution
 * serves (exec.c). */
#define LOG_CACHE_NS 1000000
void nereid_arena_unref(nereid_arena* a);

TRITONBACKEND_Response* nereid_exec_take_response(nereid_exec* x);
TRITONBACKEND_Output* nereid_exec_take_output(nereid_exec* x, size_t size);
void nereid_free_output(TRITONBACKEND_Output* o);

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
  TRITONSERVER_ResponseAllocatorBufferAttributesFn_t buffer_attributes_fn; /* called after alloc_fn */
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

void nereid_bls_start(TRITONSERVER_InferenceRequest* req);
TRITONSERVER_Error* nereid_bls_alloc(TRITONSERVER_InferenceRequest* req, nereid_bls_output* out);
void nereid_bls_complete(TRITONSERVER_InferenceRequest* req, TRITONSERVER_InferenceResponse* resp, uint32_t flags);
void nereid_bls_release(TRITONSERVER_InferenceRequest* req);

/* Server queries and backends' own traces (serverapi.c, api.c). */
TRITONSERVER_Message* nereid_message_new(const char* base, size_t n);
TRITONSERVER_Metrics* nereid_metrics_new(const char* text, size_t size);
void nereid_trace_activity(TRITONSERVER_InferenceTrace* t, TRITONSERVER_InferenceTraceActivity a, uint64_t ns);
void nereid_trace_tensor(TRITONSERVER_InferenceTrace* t, TRITONSERVER_InferenceTraceActivity a, const char* name, TRITONSERVER_DataType dt,
                         const void* base, size_t size, const int64_t* shape, uint64_t dims);
void nereid_trace_release(TRITONSERVER_InferenceTrace* t);

#endif

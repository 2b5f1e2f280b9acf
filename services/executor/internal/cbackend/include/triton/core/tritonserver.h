/*
 * Nereid's declarations of the server side of Triton's in-process C API
 * (the TRITONSERVER_* part that backends call), written from the API's
 * published names, signatures and values so that Triton backends built
 * against Triton's own headers run against Nereid's implementation.
 */
#ifndef NEREID_TRITONSERVER_H
#define NEREID_TRITONSERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* NEREID_PROTO wraps every function declaration, so that code defining the
 * functions with other pointer qualifiers (Nereid's cgo exports) can include
 * the types alone by defining NEREID_TYPES_ONLY. */
#ifndef NEREID_PROTO
#ifdef NEREID_TYPES_ONLY
#define NEREID_PROTO(...)
#else
#define NEREID_PROTO(...) __VA_ARGS__
#endif
#endif

#define TRITONSERVER_API_VERSION_MAJOR 1
#define TRITONSERVER_API_VERSION_MINOR 33

typedef struct TRITONSERVER_BufferAttributes TRITONSERVER_BufferAttributes;
typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_InferenceRequest TRITONSERVER_InferenceRequest;
typedef struct TRITONSERVER_InferenceResponse TRITONSERVER_InferenceResponse;
typedef struct TRITONSERVER_InferenceTrace TRITONSERVER_InferenceTrace;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONSERVER_Metrics TRITONSERVER_Metrics;
typedef struct TRITONSERVER_Parameter TRITONSERVER_Parameter;
typedef struct TRITONSERVER_ResponseAllocator TRITONSERVER_ResponseAllocator;
typedef struct TRITONSERVER_Server TRITONSERVER_Server;
typedef struct TRITONSERVER_MetricFamily TRITONSERVER_MetricFamily;
typedef struct TRITONSERVER_Metric TRITONSERVER_Metric;
typedef struct TRITONSERVER_MetricArgs TRITONSERVER_MetricArgs;

typedef enum TRITONSERVER_datatype_enum {
  TRITONSERVER_TYPE_INVALID,
  TRITONSERVER_TYPE_BOOL,
  TRITONSERVER_TYPE_UINT8,
  TRITONSERVER_TYPE_UINT16,
  TRITONSERVER_TYPE_UINT32,
  TRITONSERVER_TYPE_UINT64,
  TRITONSERVER_TYPE_INT8,
  TRITONSERVER_TYPE_INT16,
  TRITONSERVER_TYPE_INT32,
  TRITONSERVER_TYPE_INT64,
  TRITONSERVER_TYPE_FP16,
  TRITONSERVER_TYPE_FP32,
  TRITONSERVER_TYPE_FP64,
  TRITONSERVER_TYPE_BYTES,
  TRITONSERVER_TYPE_BF16
} TRITONSERVER_DataType;

typedef enum TRITONSERVER_memorytype_enum {
  TRITONSERVER_MEMORY_CPU,
  TRITONSERVER_MEMORY_CPU_PINNED,
  TRITONSERVER_MEMORY_GPU
} TRITONSERVER_MemoryType;

typedef enum TRITONSERVER_parametertype_enum {
  TRITONSERVER_PARAMETER_STRING,
  TRITONSERVER_PARAMETER_INT,
  TRITONSERVER_PARAMETER_BOOL,
  TRITONSERVER_PARAMETER_DOUBLE,
  TRITONSERVER_PARAMETER_BYTES
} TRITONSERVER_ParameterType;

typedef enum TRITONSERVER_instancegroupkind_enum {
  TRITONSERVER_INSTANCEGROUPKIND_AUTO,
  TRITONSERVER_INSTANCEGROUPKIND_CPU,
  TRITONSERVER_INSTANCEGROUPKIND_GPU,
  TRITONSERVER_INSTANCEGROUPKIND_MODEL
} TRITONSERVER_InstanceGroupKind;

typedef enum TRITONSERVER_loglevel_enum {
  TRITONSERVER_LOG_INFO,
  TRITONSERVER_LOG_WARN,
  TRITONSERVER_LOG_ERROR,
  TRITONSERVER_LOG_VERBOSE
} TRITONSERVER_LogLevel;

typedef enum TRITONSERVER_errorcode_enum {
  TRITONSERVER_ERROR_UNKNOWN,
  TRITONSERVER_ERROR_INTERNAL,
  TRITONSERVER_ERROR_NOT_FOUND,
  TRITONSERVER_ERROR_INVALID_ARG,
  TRITONSERVER_ERROR_UNAVAILABLE,
  TRITONSERVER_ERROR_UNSUPPORTED,
  TRITONSERVER_ERROR_ALREADY_EXISTS,
  TRITONSERVER_ERROR_CANCELLED
} TRITONSERVER_Error_Code;

typedef enum tritonserver_requestflag_enum {
  TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1,
  TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
} TRITONSERVER_RequestFlag;

typedef enum tritonserver_requestreleaseflag_enum {
  TRITONSERVER_REQUEST_RELEASE_ALL = 1,
  TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
} TRITONSERVER_RequestReleaseFlag;

typedef enum tritonserver_responsecompleteflag_enum {
  TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
} TRITONSERVER_ResponseCompleteFlag;

typedef enum tritonserver_txn_property_flag_enum {
  TRITONSERVER_TXN_ONE_TO_ONE = 1,
  TRITONSERVER_TXN_DECOUPLED = 2
} TRITONSERVER_ModelTxnPropertyFlag;

typedef enum TRITONSERVER_metrickind_enum {
  TRITONSERVER_METRIC_KIND_COUNTER,
  TRITONSERVER_METRIC_KIND_GAUGE,
  TRITONSERVER_METRIC_KIND_HISTOGRAM
} TRITONSERVER_MetricKind;

/* Data types, memory types, kinds. */
NEREID_PROTO(const char* TRITONSERVER_DataTypeString(TRITONSERVER_DataType datatype));
NEREID_PROTO(TRITONSERVER_DataType TRITONSERVER_StringToDataType(const char* dtype));
NEREID_PROTO(uint32_t TRITONSERVER_DataTypeByteSize(TRITONSERVER_DataType datatype));
NEREID_PROTO(const char* TRITONSERVER_MemoryTypeString(TRITONSERVER_MemoryType memtype));
NEREID_PROTO(const char* TRITONSERVER_InstanceGroupKindString(TRITONSERVER_InstanceGroupKind kind));

/* Parameters. */
NEREID_PROTO(TRITONSERVER_Parameter* TRITONSERVER_ParameterNew(const char* name, const TRITONSERVER_ParameterType type, const void* value));
NEREID_PROTO(TRITONSERVER_Parameter* TRITONSERVER_ParameterBytesNew(const char* name, const void* byte_ptr, const uint64_t size));
NEREID_PROTO(void TRITONSERVER_ParameterDelete(TRITONSERVER_Parameter* parameter));

/* Logging. */
NEREID_PROTO(bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char* filename, const int line, const char* msg));

/* Errors. */
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg));
NEREID_PROTO(void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error));
NEREID_PROTO(TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error));
NEREID_PROTO(const char* TRITONSERVER_ErrorCodeString(TRITONSERVER_Error* error));
NEREID_PROTO(const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error));

/* Response allocators. */
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorAllocFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, const char* tensor_name, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id, void* userp, void** buffer,
    void** buffer_userp, TRITONSERVER_MemoryType* actual_memory_type, int64_t* actual_memory_type_id);
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorQueryFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, void* userp, const char* tensor_name, size_t* byte_size,
    TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id);
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorReleaseFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, void* buffer, void* buffer_userp, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id);
typedef TRITONSERVER_Error* (*TRITONSERVER_ResponseAllocatorStartFn_t)(
    TRITONSERVER_ResponseAllocator* allocator, void* userp);
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorNew(TRITONSERVER_ResponseAllocator** allocator, TRITONSERVER_ResponseAllocatorAllocFn_t alloc_fn, TRITONSERVER_ResponseAllocatorReleaseFn_t release_fn, TRITONSERVER_ResponseAllocatorStartFn_t start_fn));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorSetQueryFunction(TRITONSERVER_ResponseAllocator* allocator, TRITONSERVER_ResponseAllocatorQueryFn_t query_fn));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ResponseAllocatorDelete(TRITONSERVER_ResponseAllocator* allocator));

/* Messages (JSON). */
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message** message, const char* base, size_t byte_size));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* message, const char** base, size_t* byte_size));

/* Buffer attributes. */
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_BufferAttributesCudaIpcHandle(TRITONSERVER_BufferAttributes* buffer_attributes, void** cuda_ipc_handle));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryType(TRITONSERVER_BufferAttributes* buffer_attributes, TRITONSERVER_MemoryType* memory_type));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_BufferAttributesMemoryTypeId(TRITONSERVER_BufferAttributes* buffer_attributes, int64_t* memory_type_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_BufferAttributesByteSize(TRITONSERVER_BufferAttributes* buffer_attributes, size_t* byte_size));

/* Traces. */
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceTraceContext(TRITONSERVER_InferenceTrace* trace, const char** trace_context));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceTraceSpawnChildTrace(TRITONSERVER_InferenceTrace* trace, TRITONSERVER_InferenceTrace** child_trace));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceTraceDelete(TRITONSERVER_InferenceTrace* trace));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceTraceId(TRITONSERVER_InferenceTrace* trace, uint64_t* id));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceTraceParentId(TRITONSERVER_InferenceTrace* trace, uint64_t* parent_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceTraceModelName(TRITONSERVER_InferenceTrace* trace, const char** model_name));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceTraceModelVersion(TRITONSERVER_InferenceTrace* trace, int64_t* model_version));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceTraceRequestId(TRITONSERVER_InferenceTrace* trace, const char** request_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceTraceReportActivity(TRITONSERVER_InferenceTrace* trace, uint64_t timestamp, const char* activity_name));

/* Inference requests made by a backend (BLS). */
typedef void (*TRITONSERVER_InferenceRequestReleaseFn_t)(TRITONSERVER_InferenceRequest* request, const uint32_t flags, void* userp);
typedef void (*TRITONSERVER_InferenceResponseCompleteFn_t)(TRITONSERVER_InferenceResponse* response, const uint32_t flags, void* userp);
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestNew(TRITONSERVER_InferenceRequest** inference_request, TRITONSERVER_Server* server, const char* model_name, const int64_t model_version));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestDelete(TRITONSERVER_InferenceRequest* inference_request));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetId(TRITONSERVER_InferenceRequest* inference_request, const char* id));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetFlags(TRITONSERVER_InferenceRequest* inference_request, uint32_t flags));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetCorrelationId(TRITONSERVER_InferenceRequest* inference_request, uint64_t correlation_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetCorrelationIdString(TRITONSERVER_InferenceRequest* inference_request, const char* correlation_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(TRITONSERVER_InferenceRequest* inference_request, uint64_t timeout_us));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddInput(TRITONSERVER_InferenceRequest* inference_request, const char* name, const TRITONSERVER_DataType datatype, const int64_t* shape, uint64_t dim_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestAppendInputData(TRITONSERVER_InferenceRequest* inference_request, const char* name, const void* base, size_t byte_size, TRITONSERVER_MemoryType memory_type, int64_t memory_type_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestAddRequestedOutput(TRITONSERVER_InferenceRequest* inference_request, const char* name));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetReleaseCallback(TRITONSERVER_InferenceRequest* inference_request, TRITONSERVER_InferenceRequestReleaseFn_t request_release_fn, void* request_release_userp));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetResponseCallback(TRITONSERVER_InferenceRequest* inference_request, TRITONSERVER_ResponseAllocator* response_allocator, void* response_allocator_userp, TRITONSERVER_InferenceResponseCompleteFn_t response_fn, void* response_userp));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetStringParameter(TRITONSERVER_InferenceRequest* request, const char* key, const char* value));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetIntParameter(TRITONSERVER_InferenceRequest* request, const char* key, const int64_t value));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestSetBoolParameter(TRITONSERVER_InferenceRequest* request, const char* key, const bool value));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceRequestCancel(TRITONSERVER_InferenceRequest* inference_request));

/* Their responses. */
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceResponseDelete(TRITONSERVER_InferenceResponse* inference_response));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceResponseError(TRITONSERVER_InferenceResponse* inference_response));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameterCount(TRITONSERVER_InferenceResponse* inference_response, uint32_t* count));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceResponseParameter(TRITONSERVER_InferenceResponse* inference_response, const uint32_t index, const char** name, TRITONSERVER_ParameterType* type, const void** vvalue));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutputCount(TRITONSERVER_InferenceResponse* inference_response, uint32_t* count));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_InferenceResponseOutput(TRITONSERVER_InferenceResponse* inference_response, const uint32_t index, const char** name, TRITONSERVER_DataType* datatype, const int64_t** shape, uint64_t* dim_count, const void** base, size_t* byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id, void** userp));

/* The server. */
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ServerModelIsReady(TRITONSERVER_Server* server, const char* model_name, const int64_t model_version, bool* ready));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ServerModelTransactionProperties(TRITONSERVER_Server* server, const char* model_name, const int64_t model_version, uint32_t* txn_flags, void** voidp));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ServerLoadModel(TRITONSERVER_Server* server, const char* model_name));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ServerLoadModelWithParameters(TRITONSERVER_Server* server, const char* model_name, const TRITONSERVER_Parameter** parameters, const uint64_t parameter_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ServerUnloadModel(TRITONSERVER_Server* server, const char* model_name));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ServerUnloadModelAndDependents(TRITONSERVER_Server* server, const char* model_name));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_ServerInferAsync(TRITONSERVER_Server* server, TRITONSERVER_InferenceRequest* inference_request, TRITONSERVER_InferenceTrace* trace));

/* Custom metrics. */
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricFamilyNew(TRITONSERVER_MetricFamily** family, const TRITONSERVER_MetricKind kind, const char* name, const char* description));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricFamilyDelete(TRITONSERVER_MetricFamily* family));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_GetMetricFamilyKind(TRITONSERVER_MetricFamily* family, TRITONSERVER_MetricKind* kind));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricArgsNew(TRITONSERVER_MetricArgs** args));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricArgsSetHistogram(TRITONSERVER_MetricArgs* args, const double* buckets, const uint64_t buckets_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricArgsDelete(TRITONSERVER_MetricArgs* args));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricNew(TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family, const TRITONSERVER_Parameter** labels, const uint64_t label_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricNewWithArgs(TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family, const TRITONSERVER_Parameter** labels, const uint64_t label_count, const TRITONSERVER_MetricArgs* args));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricDelete(TRITONSERVER_Metric* metric));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricValue(TRITONSERVER_Metric* metric, double* value));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricIncrement(TRITONSERVER_Metric* metric, double value));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricSet(TRITONSERVER_Metric* metric, double value));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_MetricObserve(TRITONSERVER_Metric* metric, double value));
NEREID_PROTO(TRITONSERVER_Error* TRITONSERVER_GetMetricKind(TRITONSERVER_Metric* metric, TRITONSERVER_MetricKind* kind));

#ifdef __cplusplus
}
#endif
#endif

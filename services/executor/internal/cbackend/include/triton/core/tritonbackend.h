/*
 * Nereid's declarations of Triton's backend API (TRITONBACKEND_*), API
 * version 1.19: the functions the server provides to backends and the entry
 * points a backend exports.
 */
#ifndef NEREID_TRITONBACKEND_H
#define NEREID_TRITONBACKEND_H

#include "triton/core/tritonserver.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRITONBACKEND_API_VERSION_MAJOR 1
#define TRITONBACKEND_API_VERSION_MINOR 19

#if defined(__GNUC__)
#define TRITONBACKEND_ISPEC __attribute__((__visibility__("default")))
#else
#define TRITONBACKEND_ISPEC
#endif

typedef struct TRITONBACKEND_MemoryManager TRITONBACKEND_MemoryManager;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;
typedef struct TRITONBACKEND_State TRITONBACKEND_State;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_ResponseFactory TRITONBACKEND_ResponseFactory;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_BackendAttribute TRITONBACKEND_BackendAttribute;
typedef struct TRITONBACKEND_Batcher TRITONBACKEND_Batcher;
typedef struct TRITONBACKEND_ModelInstanceResponseStatistics TRITONBACKEND_ModelInstanceResponseStatistics;

typedef enum TRITONBACKEND_artifacttype_enum { TRITONBACKEND_ARTIFACT_FILESYSTEM } TRITONBACKEND_ArtifactType;
typedef enum TRITONBACKEND_execpolicy_enum {
  TRITONBACKEND_EXECUTION_BLOCKING,
  TRITONBACKEND_EXECUTION_DEVICE_BLOCKING
} TRITONBACKEND_ExecutionPolicy;

NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor));

/* Memory manager. */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_MemoryManagerAllocate(TRITONBACKEND_MemoryManager* manager, void** buffer, const TRITONSERVER_MemoryType memory_type, const int64_t memory_type_id, const uint64_t byte_size));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_MemoryManagerFree(TRITONBACKEND_MemoryManager* manager, void* buffer, const TRITONSERVER_MemoryType memory_type, const int64_t memory_type_id));

/* Inputs and outputs. */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* input, const char** name, TRITONSERVER_DataType* datatype, const int64_t** shape, uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_InputPropertiesForHostPolicy(TRITONBACKEND_Input* input, const char* host_policy_name, const char** name, TRITONSERVER_DataType* datatype, const int64_t** shape, uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* input, const uint32_t index, const void** buffer, uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_InputBufferForHostPolicy(TRITONBACKEND_Input* input, const char* host_policy_name, const uint32_t index, const void** buffer, uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_InputBufferAttributes(TRITONBACKEND_Input* input, const uint32_t index, const void** buffer, TRITONSERVER_BufferAttributes** buffer_attributes));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* output, void** buffer, const uint64_t buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_OutputBufferAttributes(TRITONBACKEND_Output* output, TRITONSERVER_BufferAttributes** buffer_attributes));

/* Requests. */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestId(TRITONBACKEND_Request* request, const char** id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestIsCancelled(TRITONBACKEND_Request* request, bool* is_cancelled));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationId(TRITONBACKEND_Request* request, uint64_t* id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestCorrelationIdString(TRITONBACKEND_Request* request, const char** id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_InferenceRequestTimeoutMicroseconds(TRITONBACKEND_Request* request, uint64_t* timeout));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestFlags(TRITONBACKEND_Request* request, uint32_t* flags));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestParameterCount(TRITONBACKEND_Request* request, uint32_t* count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestParameter(TRITONBACKEND_Request* request, const uint32_t index, const char** key, TRITONSERVER_ParameterType* type, const void** vvalue));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* request, uint32_t* count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestInputName(TRITONBACKEND_Request* request, const uint32_t index, const char** input_name));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestInput(TRITONBACKEND_Request* request, const char* name, TRITONBACKEND_Input** input));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex(TRITONBACKEND_Request* request, const uint32_t index, TRITONBACKEND_Input** input));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* request, uint32_t* count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request* request, const uint32_t index, const char** output_name));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestOutputBufferProperties(TRITONBACKEND_Request* request, const char* name, size_t* byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request, uint32_t release_flags));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_RequestTrace(TRITONBACKEND_Request* request, TRITONSERVER_InferenceTrace** trace));

/* Responses. */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryNew(TRITONBACKEND_ResponseFactory** factory, TRITONBACKEND_Request* request));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryDelete(TRITONBACKEND_ResponseFactory* factory));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseFactorySendFlags(TRITONBACKEND_ResponseFactory* factory, const uint32_t send_flags));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryIsCancelled(TRITONBACKEND_ResponseFactory* factory, bool* is_cancelled));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response, TRITONBACKEND_Request* request));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseNewFromFactory(TRITONBACKEND_Response** response, TRITONBACKEND_ResponseFactory* factory));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseSetStringParameter(TRITONBACKEND_Response* response, const char* name, const char* value));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseSetIntParameter(TRITONBACKEND_Response* response, const char* name, const int64_t value));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseSetBoolParameter(TRITONBACKEND_Response* response, const char* name, const bool value));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseSetDoubleParameter(TRITONBACKEND_Response* response, const char* name, const double value));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* response, TRITONBACKEND_Output** output, const char* name, const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* response, const uint32_t send_flags, TRITONSERVER_Error* error));

/* Implicit state. */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_StateNew(TRITONBACKEND_State** state, TRITONBACKEND_Request* request, const char* name, const TRITONSERVER_DataType datatype, const int64_t* shape, const uint32_t dims_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_StateUpdate(TRITONBACKEND_State* state));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_StateBuffer(TRITONBACKEND_State* state, void** buffer, const uint64_t buffer_byte_size, TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_StateBufferAttributes(TRITONBACKEND_State* state, TRITONSERVER_BufferAttributes** buffer_attributes));

/* Backend. */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendName(TRITONBACKEND_Backend* backend, const char** name));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendConfig(TRITONBACKEND_Backend* backend, TRITONSERVER_Message** backend_config));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendExecutionPolicy(TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy* policy));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendSetExecutionPolicy(TRITONBACKEND_Backend* backend, TRITONBACKEND_ExecutionPolicy policy));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendArtifacts(TRITONBACKEND_Backend* backend, TRITONBACKEND_ArtifactType* artifact_type, const char** location));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendMemoryManager(TRITONBACKEND_Backend* backend, TRITONBACKEND_MemoryManager** manager));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendState(TRITONBACKEND_Backend* backend, void** state));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendSetState(TRITONBACKEND_Backend* backend, void* state));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(TRITONBACKEND_BackendAttribute* backend_attributes, const TRITONSERVER_InstanceGroupKind kind, const uint64_t count, const uint64_t* device_ids, const uint64_t id_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(TRITONBACKEND_BackendAttribute* backend_attributes, bool enabled));

/* Model. */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelName(TRITONBACKEND_Model* model, const char** name));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* model, uint64_t* version));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelRepository(TRITONBACKEND_Model* model, TRITONBACKEND_ArtifactType* artifact_type, const char** location));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelConfig(TRITONBACKEND_Model* model, const uint32_t config_version, TRITONSERVER_Message** model_config));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model* model, bool* auto_complete_config));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model* model, const uint32_t config_version, TRITONSERVER_Message* model_config));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelServer(TRITONBACKEND_Model* model, TRITONSERVER_Server** server));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelBackend(TRITONBACKEND_Model* model, TRITONBACKEND_Backend** backend));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelReportMemoryUsage(TRITONBACKEND_Model* model, TRITONSERVER_BufferAttributes** usage, uint32_t usage_size));

/* Model instance. */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance* instance, const char** name));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance* instance, TRITONSERVER_InstanceGroupKind* kind));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance* instance, int32_t* device_id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceHostPolicy(TRITONBACKEND_ModelInstance* instance, TRITONSERVER_Message** host_policy));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceIsPassive(TRITONBACKEND_ModelInstance* instance, bool* is_passive));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileCount(TRITONBACKEND_ModelInstance* instance, uint32_t* count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceProfileName(TRITONBACKEND_ModelInstance* instance, const uint32_t index, const char** profile_name));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceCount(TRITONBACKEND_ModelInstance* instance, uint32_t* count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(TRITONBACKEND_ModelInstance* instance, uint32_t index, const char** kind, int64_t* id));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model** model));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* instance, void** state));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* instance, void* state));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportMemoryUsage(TRITONBACKEND_ModelInstance* instance, TRITONSERVER_BufferAttributes** usage, uint32_t usage_size));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request* request, const bool success, const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns, const uint64_t exec_end_ns));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance* instance, const uint64_t batch_size, const uint64_t exec_start_ns, const uint64_t compute_start_ns, const uint64_t compute_end_ns, const uint64_t exec_end_ns));

/* Response statistics (API 1.19): a backend fills one object per response
 * and reports it; Triton's response_stats count it at the factory's next
 * response index. */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsNew(TRITONBACKEND_ModelInstanceResponseStatistics** response_statistics));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsDelete(TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, TRITONBACKEND_ModelInstance* model_instance));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, TRITONBACKEND_ResponseFactory* response_factory));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, uint64_t response_start));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, uint64_t compute_output_start));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, uint64_t response_end));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetError(TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, TRITONSERVER_Error* error));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportResponseStatistics(TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics));

/* Reading a response's outputs back (Triton declares these beside the
 * custom batching entry points). */
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_InferenceResponseOutputByName(TRITONBACKEND_Response* response, const char* name, TRITONSERVER_DataType* datatype, const int64_t** shape, uint64_t* dim_count));
NEREID_PROTO(TRITONSERVER_Error* TRITONBACKEND_InferenceResponseOutput(TRITONBACKEND_Response* response, const uint32_t index, const char** name, TRITONSERVER_DataType* datatype, const int64_t** shape, uint64_t* dim_count));

/* Entry points a backend exports. Only ModelInstanceExecute is required. */
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReady(TRITONBACKEND_ModelInstance* instance));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_GetBackendAttribute(TRITONBACKEND_Backend* backend, TRITONBACKEND_BackendAttribute* backend_attributes));
/* Custom batching: declared so that backends compile; Nereid calls none. */
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelBatcherInitialize(TRITONBACKEND_Batcher** batcher, TRITONBACKEND_Model* model));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelBatcherFinalize(TRITONBACKEND_Batcher* batcher));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelBatchIncludeRequest(TRITONBACKEND_Request* request, void* userp, bool* should_include));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelBatchInitialize(const TRITONBACKEND_Batcher* batcher, void** userp));
NEREID_PROTO(TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelBatchFinalize(void* userp));

#ifdef __cplusplus
}
#endif
#endif

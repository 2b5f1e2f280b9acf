/*
 * A test backend that reports KV-cache blocks as the TensorRT-LLM backend
 * does, in the gauge family nv_trt_llm_kv_cache_block_metrics with the
 * label kv_cache_block_type ("max", "used", "tokens_per") beside model and
 * version. Each model starts with max = 100 blocks of tokens_per = 64
 * tokens and used = 0; each request adds one used block. It answers INPUT0
 * (FP32) as OUTPUT0.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)

static TRITONSERVER_MetricFamily* blocks;

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  return TRITONSERVER_MetricFamilyNew(&blocks, TRITONSERVER_METRIC_KIND_GAUGE, "nv_trt_llm_kv_cache_block_metrics",
                                      "TRT LLM KV cache block metrics");
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  return TRITONSERVER_MetricFamilyDelete(blocks);
}

typedef struct {
  TRITONSERVER_Metric *max, *used, *tokens_per;
} model_state;

static TRITONSERVER_Error* gauge(TRITONSERVER_Metric** m, const char* name, const char* version, const char* type, double v) {
  TRITONSERVER_Parameter* lt = TRITONSERVER_ParameterNew("kv_cache_block_type", TRITONSERVER_PARAMETER_STRING, type);
  TRITONSERVER_Parameter* lm = TRITONSERVER_ParameterNew("model", TRITONSERVER_PARAMETER_STRING, name);
  TRITONSERVER_Parameter* lv = TRITONSERVER_ParameterNew("version", TRITONSERVER_PARAMETER_STRING, version);
  const TRITONSERVER_Parameter* labels[] = {lt, lm, lv};
  TRITONSERVER_Error* err = TRITONSERVER_MetricNew(m, blocks, labels, 3);
  if (err == NULL) err = TRITONSERVER_MetricSet(*m, v);
  TRITONSERVER_ParameterDelete(lt);
  TRITONSERVER_ParameterDelete(lm);
  TRITONSERVER_ParameterDelete(lv);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name;
  uint64_t version;
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  RETURN_IF_ERROR(TRITONBACKEND_ModelVersion(model, &version));
  char v[32];
  snprintf(v, sizeof v, "%" PRIu64, version);
  model_state* s = calloc(1, sizeof *s);
  RETURN_IF_ERROR(gauge(&s->max, name, v, "max", 100));
  RETURN_IF_ERROR(gauge(&s->used, name, v, "used", 0));
  RETURN_IF_ERROR(gauge(&s->tokens_per, name, v, "tokens_per", 64));
  return TRITONBACKEND_ModelSetState(model, s);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* p;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &p));
  model_state* s = p;
  RETURN_IF_ERROR(TRITONSERVER_MetricDelete(s->max));
  RETURN_IF_ERROR(TRITONSERVER_MetricDelete(s->used));
  RETURN_IF_ERROR(TRITONSERVER_MetricDelete(s->tokens_per));
  free(s);
  return NULL;
}

static TRITONSERVER_Error* execute(model_state* s, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  TRITONBACKEND_Input* input;
  const char* name;
  TRITONSERVER_DataType dt;
  const int64_t* shape;
  uint32_t dims;
  uint64_t size;
  const void* data;
  TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
  int64_t mid = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "INPUT0", &input));
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, &name, &dt, &shape, &dims, &size, NULL));
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &size, &mt, &mid));
  TRITONBACKEND_Output* output;
  void* out;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", dt, shape, dims));
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &out, size, &mt, &mid));
  memcpy(out, data, size);
  double used;
  RETURN_IF_ERROR(TRITONSERVER_MetricValue(s->used, &used));
  return TRITONSERVER_MetricSet(s->used, used + 1);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  TRITONBACKEND_Model* model;
  void* p;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &p));
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err == NULL) {
      TRITONSERVER_Error* eerr = execute(p, requests[r], response);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, eerr);
      TRITONSERVER_ErrorDelete(eerr);
    }
    TRITONSERVER_ErrorDelete(err);
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return NULL;
}

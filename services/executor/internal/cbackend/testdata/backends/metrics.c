/*
 * A test backend that registers a custom metric family of each kind, as
 * Triton's Python backend's custom_metrics example does, and updates them
 * per request. It answers INPUT0 (FP32) as OUTPUT0. At backend
 * initialization it registers
 *   nereid_test_metric_requests   counter    requests executed
 *   nereid_test_metric_elements   gauge      INPUT0 elements seen
 *   nereid_test_metric_input_sum  histogram  the sum of each INPUT0,
 *                                            buckets 1, 10, 100
 * and per model one metric of each with the labels model=<name> and
 * version=<version>. Each request increments the counter by 1, sets the
 * gauge to the elements seen so far (read back through
 * TRITONSERVER_MetricValue and raised), and observes its input's sum.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)

static TRITONSERVER_MetricFamily *requests, *elements, *input_sum;

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  RETURN_IF_ERROR(TRITONSERVER_MetricFamilyNew(&requests, TRITONSERVER_METRIC_KIND_COUNTER, "nereid_test_metric_requests",
                                               "Requests executed by the metrics test backend"));
  RETURN_IF_ERROR(TRITONSERVER_MetricFamilyNew(&elements, TRITONSERVER_METRIC_KIND_GAUGE, "nereid_test_metric_elements",
                                               "INPUT0 elements seen by the metrics test backend"));
  return TRITONSERVER_MetricFamilyNew(&input_sum, TRITONSERVER_METRIC_KIND_HISTOGRAM, "nereid_test_metric_input_sum",
                                      "Sum of each request's INPUT0");
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  RETURN_IF_ERROR(TRITONSERVER_MetricFamilyDelete(requests));
  RETURN_IF_ERROR(TRITONSERVER_MetricFamilyDelete(elements));
  return TRITONSERVER_MetricFamilyDelete(input_sum);
}

typedef struct {
  TRITONSERVER_Metric *requests, *elements, *input_sum;
} model_state;

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name;
  uint64_t version;
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  RETURN_IF_ERROR(TRITONBACKEND_ModelVersion(model, &version));
  char v[32];
  snprintf(v, sizeof v, "%" PRIu64, version);
  TRITONSERVER_Parameter* lm = TRITONSERVER_ParameterNew("model", TRITONSERVER_PARAMETER_STRING, name);
  TRITONSERVER_Parameter* lv = TRITONSERVER_ParameterNew("version", TRITONSERVER_PARAMETER_STRING, v);
  const TRITONSERVER_Parameter* labels[] = {lm, lv};
  model_state* s = calloc(1, sizeof *s);
  TRITONSERVER_Error* err = TRITONSERVER_MetricNew(&s->requests, requests, labels, 2);
  if (err == NULL) err = TRITONSERVER_MetricNew(&s->elements, elements, labels, 2);
  TRITONSERVER_MetricArgs* args = NULL;
  const double buckets[] = {1, 10, 100};
  if (err == NULL) err = TRITONSERVER_MetricArgsNew(&args);
  if (err == NULL) err = TRITONSERVER_MetricArgsSetHistogram(args, buckets, 3);
  if (err == NULL) err = TRITONSERVER_MetricNewWithArgs(&s->input_sum, input_sum, labels, 2, args);
  if (args != NULL) TRITONSERVER_MetricArgsDelete(args);
  TRITONSERVER_ParameterDelete(lm);
  TRITONSERVER_ParameterDelete(lv);
  if (err != NULL) return err;
  return TRITONBACKEND_ModelSetState(model, s);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* p;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &p));
  model_state* s = p;
  RETURN_IF_ERROR(TRITONSERVER_MetricDelete(s->requests));
  RETURN_IF_ERROR(TRITONSERVER_MetricDelete(s->elements));
  RETURN_IF_ERROR(TRITONSERVER_MetricDelete(s->input_sum));
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

  size_t n = size / sizeof(float);
  double sum = 0;
  for (size_t i = 0; i < n; i++) {
    float f;
    memcpy(&f, (const char*)data + i * sizeof f, sizeof f);
    sum += f;
  }
  double seen;
  RETURN_IF_ERROR(TRITONSERVER_MetricIncrement(s->requests, 1));
  RETURN_IF_ERROR(TRITONSERVER_MetricValue(s->elements, &seen));
  RETURN_IF_ERROR(TRITONSERVER_MetricSet(s->elements, seen + (double)n));
  return TRITONSERVER_MetricObserve(s->input_sum, sum);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests_, const uint32_t count) {
  TRITONBACKEND_Model* model;
  void* p;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &p));
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, requests_[r]);
    if (err == NULL) {
      TRITONSERVER_Error* eerr = execute(p, requests_[r], response);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, eerr);
      TRITONSERVER_ErrorDelete(eerr);
    }
    TRITONSERVER_ErrorDelete(err);
    TRITONBACKEND_RequestRelease(requests_[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return NULL;
}

/*
 * Response statistics (backend API 1.19): a backend fills one
 * TRITONBACKEND_ModelInstanceResponseStatistics per response of a request
 * and reports it; Triton counts it in the model's response_stats at the
 * request's next response index. The object is the backend's and holds
 * only what it was given; the report goes to Go with its values.
 */
#include <stdlib.h>

#include "abi.h"

struct TRITONBACKEND_ModelInstanceResponseStatistics {
  TRITONBACKEND_ModelInstance* instance;
  TRITONBACKEND_ResponseFactory* factory;
  uint64_t response_start, compute_output_start, response_end;
  TRITONSERVER_Error* error; /* the backend's: read at the report, never freed here */
};

/* code is the response's error code, or -1 for a success (response.go). */
extern TRITONSERVER_Error* nereid_report_response_statistics(TRITONBACKEND_ModelInstance* i, TRITONBACKEND_ResponseFactory* f,
                                                             uint64_t start, uint64_t output_start, uint64_t end, int code);

static TRITONSERVER_Error* null_statistics(void) {
  return nereid_error(TRITONSERVER_ERROR_INVALID_ARG, "response statistics must not be null");
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsNew(TRITONBACKEND_ModelInstanceResponseStatistics** rs) {
  if (rs == NULL) return null_statistics();
  *rs = calloc(1, sizeof(**rs));
  if (*rs == NULL) return nereid_error(TRITONSERVER_ERROR_INTERNAL, "out of memory for response statistics");
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsDelete(TRITONBACKEND_ModelInstanceResponseStatistics* rs) {
  free(rs);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(TRITONBACKEND_ModelInstanceResponseStatistics* rs, TRITONBACKEND_ModelInstance* instance) {
  if (rs == NULL) return null_statistics();
  rs->instance = instance;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(TRITONBACKEND_ModelInstanceResponseStatistics* rs, TRITONBACKEND_ResponseFactory* factory) {
  if (rs == NULL) return null_statistics();
  rs->factory = factory;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(TRITONBACKEND_ModelInstanceResponseStatistics* rs, uint64_t ns) {
  if (rs == NULL) return null_statistics();
  rs->response_start = ns;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(TRITONBACKEND_ModelInstanceResponseStatistics* rs, uint64_t ns) {
  if (rs == NULL) return null_statistics();
  rs->compute_output_start = ns;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(TRITONBACKEND_ModelInstanceResponseStatistics* rs, uint64_t ns) {
  if (rs == NULL) return null_statistics();
  rs->response_end = ns;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetError(TRITONBACKEND_ModelInstanceResponseStatistics* rs, TRITONSERVER_Error* error) {
  if (rs == NULL) return null_statistics();
  rs->error = error;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportResponseStatistics(TRITONBACKEND_ModelInstanceResponseStatistics* rs) {
  if (rs == NULL) return null_statistics();
  if (rs->instance == NULL || rs->factory == NULL)
    return nereid_error(TRITONSERVER_ERROR_INVALID_ARG, "response statistics need a model instance and a response factory");
  return nereid_report_response_statistics(rs->instance, rs->factory, rs->response_start, rs->compute_output_start, rs->response_end,
                                           rs->error ? (int)rs->error->code : -1);
}

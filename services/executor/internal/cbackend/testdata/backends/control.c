/*
 * A model-control test backend: each request names a model in its string
 * parameter "target" and what to do with it in "action":
 *
 *   load               TRITONSERVER_ServerLoadModel
 *   load_config        TRITONSERVER_ServerLoadModelWithParameters with the
 *                      request's string parameter "config" as "config"
 *   load_file          ...WithParameters with "config" and the request's
 *                      string parameter "file_data" as the bytes of
 *                      "file:" + the string parameter "file_path"
 *   unload             TRITONSERVER_ServerUnloadModel
 *   unload_dependents  TRITONSERVER_ServerUnloadModelAndDependents
 *
 * The response carries the target's readiness after the call in the BOOL
 * output READY, or the server's error.
 */
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)

static const char* param(TRITONBACKEND_Request* request, const char* name) {
  uint32_t n = 0;
  if (TRITONBACKEND_RequestParameterCount(request, &n)) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    const char* key;
    TRITONSERVER_ParameterType type;
    const void* v;
    if (TRITONBACKEND_RequestParameter(request, i, &key, &type, &v) == NULL && strcmp(key, name) == 0 &&
        type == TRITONSERVER_PARAMETER_STRING)
      return v;
  }
  return NULL;
}

static TRITONSERVER_Error* load_with(TRITONSERVER_Server* server, const char* target, TRITONBACKEND_Request* request, bool with_file) {
  const char* config = param(request, "config");
  if (config == NULL) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "load_config needs a config parameter");
  const TRITONSERVER_Parameter* params[2];
  uint64_t n = 0;
  params[n++] = TRITONSERVER_ParameterNew("config", TRITONSERVER_PARAMETER_STRING, config);
  char key[512];
  if (with_file) {
    const char* path = param(request, "file_path");
    const char* data = param(request, "file_data");
    if (path == NULL || data == NULL) {
      TRITONSERVER_ParameterDelete((TRITONSERVER_Parameter*)params[0]);
      return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "load_file needs file_path and file_data parameters");
    }
    strcpy(key, "file:");
    strncat(key, path, sizeof key - 6);
    params[n++] = TRITONSERVER_ParameterBytesNew(key, data, strlen(data));
  }
  TRITONSERVER_Error* err = TRITONSERVER_ServerLoadModelWithParameters(server, target, params, n);
  for (uint64_t i = 0; i < n; i++) TRITONSERVER_ParameterDelete((TRITONSERVER_Parameter*)params[i]);
  return err;
}

static TRITONSERVER_Error* act(TRITONSERVER_Server* server, TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  const char* action = param(request, "action");
  const char* target = param(request, "target");
  if (action == NULL || target == NULL)
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "the request needs string parameters action and target");
  if (strcmp(action, "load") == 0) {
    RETURN_IF_ERROR(TRITONSERVER_ServerLoadModel(server, target));
  } else if (strcmp(action, "load_config") == 0) {
    RETURN_IF_ERROR(load_with(server, target, request, false));
  } else if (strcmp(action, "load_file") == 0) {
    RETURN_IF_ERROR(load_with(server, target, request, true));
  } else if (strcmp(action, "unload") == 0) {
    RETURN_IF_ERROR(TRITONSERVER_ServerUnloadModel(server, target));
  } else if (strcmp(action, "unload_dependents") == 0) {
    RETURN_IF_ERROR(TRITONSERVER_ServerUnloadModelAndDependents(server, target));
  } else {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "unknown action");
  }
  bool ready = false;
  RETURN_IF_ERROR(TRITONSERVER_ServerModelIsReady(server, target, -1, &ready));
  TRITONBACKEND_Output* output;
  const int64_t shape[1] = {1};
  RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, "READY", TRITONSERVER_TYPE_BOOL, shape, 1));
  void* buf;
  TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
  int64_t mid = 0;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buf, 1, &mt, &mid));
  *(bool*)buf = ready;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  TRITONBACKEND_Model* model;
  TRITONSERVER_Server* server;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &server));
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Response* response;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, requests[r]);
    if (err == NULL) {
      TRITONSERVER_Error* aerr = act(server, requests[r], response);
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, aerr);
      TRITONSERVER_ErrorDelete(aerr);
    }
    TRITONSERVER_ErrorDelete(err);
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return NULL;
}

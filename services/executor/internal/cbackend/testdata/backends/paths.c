/*
 * A test backend that answers what paths it was given: OUTPUT0 (BYTES [1])
 * holds "<backend-directory>|<artifacts>|<model location>|<same>" where the
 * first is the "backend-directory" setting of TRITONBACKEND_BackendConfig,
 * the second TRITONBACKEND_BackendArtifacts, the third
 * TRITONBACKEND_ModelRepository, and the last "same" when the artifacts
 * are exactly <backend-directory>/npaths (the comparison Triton's Python
 * backend makes to tell its own models from Python-based backends'),
 * "different" otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)

static char answer[8192];

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  TRITONBACKEND_Backend* backend;
  RETURN_IF_ERROR(TRITONBACKEND_ModelBackend(model, &backend));
  TRITONSERVER_Message* msg;
  const char* js;
  size_t n;
  RETURN_IF_ERROR(TRITONBACKEND_BackendConfig(backend, &msg));
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(msg, &js, &n));
  char dir[4096] = "";
  const char* key = "\"backend-directory\":\"";
  const char* p = strstr(js, key);
  if (p) {
    p += strlen(key);
    size_t i = 0;
    while (p[i] && p[i] != '"' && i < sizeof dir - 1) { dir[i] = p[i]; i++; }
    dir[i] = 0;
  }
  TRITONBACKEND_ArtifactType type;
  const char *artifacts, *location;
  RETURN_IF_ERROR(TRITONBACKEND_BackendArtifacts(backend, &type, &artifacts));
  RETURN_IF_ERROR(TRITONBACKEND_ModelRepository(model, &type, &location));
  char expect[4200];
  snprintf(expect, sizeof expect, "%s/npaths", dir);
  snprintf(answer, sizeof answer, "%s|%s|%s|%s", dir, artifacts, location, strcmp(expect, artifacts) == 0 ? "same" : "different");
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  (void)instance;
  for (uint32_t r = 0; r < count; r++) {
    TRITONBACKEND_Response* response;
    TRITONBACKEND_Output* output;
    int64_t shape[1] = {1};
    void* buf;
    TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
    int64_t mid = 0;
    uint32_t len = (uint32_t)strlen(answer);
    RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, requests[r]));
    RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", TRITONSERVER_TYPE_BYTES, shape, 1));
    RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buf, 4 + len, &mt, &mid));
    memcpy(buf, &len, 4);
    memcpy((char*)buf + 4, answer, len);
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL));
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}

/*
 * A test backend for Triton's ownership rules, for a model that is not
 * decoupled. Each request names a scenario (the parameter "scenario"): a
 * sequence of calls on the request, its responses and its response
 * factory, ending with OUTPUT0 = INPUT0 sent and the request released, and
 * a mode (the parameter "mode"): where the sequence runs — "inline" in
 * Execute, "during" on a thread of its own that Execute waits for, "after"
 * on a thread of its own that goes on after Execute has returned (joined
 * by the next Execute or ModelInstanceFinalize), "split" its first part in
 * Execute and the rest (the calls after the request is answered, for the
 * scenarios that have such) on a thread after Execute. What each call returned
 * is logged, one line per step: "ownership <scenario> <mode>: <step>:
 * <result>", the result "ok", "true"/"false", or "<code>: <message>".
 * The scenario "fail" (inline) sends its response and then fails Execute
 * without releasing the request.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x) do { TRITONSERVER_Error* e__ = (x); if (e__) return e__; } while (0)

typedef struct {
  pthread_t thread;
  bool running;
} instance_state;

typedef struct {
  TRITONBACKEND_ModelInstance* instance;
  TRITONBACKEND_Request* request;
  char scenario[64], mode[16];
  /* what the first part leaves to the second */
  TRITONBACKEND_Response* second;
  TRITONBACKEND_Output* second_output;
  TRITONBACKEND_ResponseFactory* factory;
} job;

static void step(const job* j, const char* what, TRITONSERVER_Error* err) {
  char msg[1024];
  if (err == NULL) {
    snprintf(msg, sizeof msg, "ownership %s %s: %s: ok", j->scenario, j->mode, what);
  } else {
    snprintf(msg, sizeof msg, "ownership %s %s: %s: %s: %s", j->scenario, j->mode, what, TRITONSERVER_ErrorCodeString(err),
             TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
  }
  TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, msg);
}

static void step_bool(const job* j, const char* what, bool v, TRITONSERVER_Error* err) {
  if (err != NULL) {
    step(j, what, err);
    return;
  }
  char msg[512];
  snprintf(msg, sizeof msg, "ownership %s %s: %s: %s", j->scenario, j->mode, what, v ? "true" : "false");
  TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, msg);
}

static const char* string_parameter(TRITONBACKEND_Request* r, const char* name) {
  uint32_t n = 0;
  if (TRITONBACKEND_RequestParameterCount(r, &n)) return "";
  for (uint32_t i = 0; i < n; i++) {
    const char* key;
    TRITONSERVER_ParameterType type;
    const void* v;
    if (TRITONBACKEND_RequestParameter(r, i, &key, &type, &v) == NULL && strcmp(key, name) == 0 && type == TRITONSERVER_PARAMETER_STRING)
      return v;
  }
  return "";
}

/* output makes OUTPUT0 of response like INPUT0 of the request; with fill,
 * it gets a buffer holding INPUT0's bytes. */
static TRITONSERVER_Error* output(TRITONBACKEND_Request* r, TRITONBACKEND_Response* resp, bool fill, TRITONBACKEND_Output** out) {
  TRITONBACKEND_Input* in;
  const int64_t* shape;
  uint32_t dims;
  uint64_t size;
  TRITONSERVER_DataType dt;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(r, "INPUT0", &in));
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(in, NULL, &dt, &shape, &dims, &size, NULL));
  RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(resp, out, "OUTPUT0", dt, shape, dims));
  if (!fill) return NULL;
  const void* src;
  uint64_t n;
  TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
  int64_t mid = 0;
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(in, 0, &src, &n, &mt, &mid));
  void* dst;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(*out, &dst, size, &mt, &mid));
  memcpy(dst, src, n);
  return NULL;
}

/* respond makes a response with OUTPUT0 = INPUT0 and sends it. */
static void respond(const job* j, const char* what, uint32_t flags) {
  TRITONBACKEND_Response* resp;
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&resp, j->request);
  if (err != NULL) {
    step(j, what, err);
    return;
  }
  TRITONBACKEND_Output* o;
  TRITONSERVER_Error* oerr = output(j->request, resp, true, &o);
  step(j, what, TRITONBACKEND_ResponseSend(resp, flags, oerr));
  TRITONSERVER_ErrorDelete(oerr);
}

static void report(const job* j) {
  step(j, "stats", TRITONBACKEND_ModelInstanceReportStatistics(j->instance, j->request, true, 1, 2, 3, 4));
  step(j, "batch stats", TRITONBACKEND_ModelInstanceReportBatchStatistics(j->instance, 1, 1, 2, 3, 4));
}

/* first runs the scenario up to the calls after the request is answered,
 * which second makes. */
static void first(job* j) {
  TRITONBACKEND_Request* r = j->request;
  const char* s = j->scenario;
  if (strcmp(s, "release_first") == 0) {
    TRITONBACKEND_Response* resp;
    step(j, "new", TRITONBACKEND_ResponseNew(&resp, r));
    report(j);
    TRITONBACKEND_Output* o;
    TRITONSERVER_Error* oerr = output(r, resp, false, &o);
    step(j, "output", oerr);
    step(j, "release", TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_ALL));
    /* The request's inputs are gone with it: the buffer is filled with a
     * pattern. */
    void* dst;
    TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
    int64_t mid = 0;
    TRITONSERVER_Error* berr = TRITONBACKEND_OutputBuffer(o, &dst, 8, &mt, &mid);
    if (berr == NULL) memset(dst, 7, 8);
    step(j, "buffer", berr);
    step(j, "send", TRITONBACKEND_ResponseSend(resp, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL));
  } else if (strcmp(s, "twice") == 0 || strcmp(s, "after_end") == 0) {
    step(j, "new second", TRITONBACKEND_ResponseNew(&j->second, r));
    step(j, "second output", output(r, j->second, false, &j->second_output));
    report(j);
    respond(j, "send first", TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    if (strcmp(s, "after_end") == 0) step(j, "release", TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_ALL));
  } else if (strcmp(s, "flag_alone") == 0 || strcmp(s, "nonfinal") == 0) {
    step(j, "factory", TRITONBACKEND_ResponseFactoryNew(&j->factory, r));
    report(j);
    if (strcmp(s, "flag_alone") == 0) {
      step(j, "flags", TRITONBACKEND_ResponseFactorySendFlags(j->factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL));
      respond(j, "send", TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    } else {
      step(j, "flags not final", TRITONBACKEND_ResponseFactorySendFlags(j->factory, 0));
      respond(j, "send not final", 0);
      step(j, "flags", TRITONBACKEND_ResponseFactorySendFlags(j->factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL));
    }
    bool c = false;
    step_bool(j, "cancelled", c, TRITONBACKEND_ResponseFactoryIsCancelled(j->factory, &c));
    step(j, "release", TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_ALL));
  } else if (strcmp(s, "reschedule") == 0) {
    step(j, "reschedule", TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE));
    report(j);
    respond(j, "send", TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    step(j, "release", TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_ALL));
  } else if (strcmp(s, "double_buffer") == 0 || strcmp(s, "missing_buffer") == 0) {
    TRITONBACKEND_Response* resp;
    step(j, "new", TRITONBACKEND_ResponseNew(&resp, r));
    TRITONBACKEND_Output* o;
    bool fill = strcmp(s, "double_buffer") == 0;
    step(j, "output", output(r, resp, fill, &o));
    if (fill) {
      void* dst;
      TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
      int64_t mid = 0;
      step(j, "buffer again", TRITONBACKEND_OutputBuffer(o, &dst, 8, &mt, &mid));
    }
    report(j);
    step(j, "send", TRITONBACKEND_ResponseSend(resp, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL));
    step(j, "release", TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_ALL));
  } else if (strcmp(s, "error") == 0) {
    TRITONBACKEND_Response* resp;
    step(j, "new", TRITONBACKEND_ResponseNew(&resp, r));
    report(j);
    TRITONSERVER_Error* err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "the backend refuses");
    step(j, "send", TRITONBACKEND_ResponseSend(resp, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err));
    TRITONSERVER_ErrorDelete(err);
    step(j, "release", TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_ALL));
  } else {
    /* plain, and a large INPUT0 for the big scenario */
    report(j);
    respond(j, "send", TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    step(j, "release", TRITONBACKEND_RequestRelease(r, TRITONSERVER_REQUEST_RELEASE_ALL));
  }
}

/* second makes the calls after the request is answered: on its responses
 * and factory only, for after_end and flag_alone, whose request is gone. */
static void second(job* j) {
  const char* s = j->scenario;
  if (strcmp(s, "twice") == 0) {
    step(j, "send second", TRITONBACKEND_ResponseSend(j->second, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL));
    step(j, "release", TRITONBACKEND_RequestRelease(j->request, TRITONSERVER_REQUEST_RELEASE_ALL));
  } else if (strcmp(s, "after_end") == 0) {
    /* The request is gone; the response is still the backend's. */
    void* dst;
    TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
    int64_t mid = 0;
    step(j, "buffer after", TRITONBACKEND_OutputBuffer(j->second_output, &dst, 8, &mt, &mid));
    step(j, "send after", TRITONBACKEND_ResponseSend(j->second, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL));
  } else if (strcmp(s, "flag_alone") == 0 || strcmp(s, "nonfinal") == 0) {
    step(j, "flags after", TRITONBACKEND_ResponseFactorySendFlags(j->factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL));
    bool c = false;
    step_bool(j, "cancelled after", c, TRITONBACKEND_ResponseFactoryIsCancelled(j->factory, &c));
    step(j, "factory delete", TRITONBACKEND_ResponseFactoryDelete(j->factory));
  }
}

static void run(job* j) {
  first(j);
  second(j);
}

static void* run_thread(void* arg) {
  run(arg);
  free(arg);
  return NULL;
}

static void* second_thread(void* arg) {
  second(arg);
  free(arg);
  return NULL;
}

static void join(instance_state* s) {
  if (s->running) {
    pthread_join(s->thread, NULL);
    s->running = false;
  }
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  return TRITONBACKEND_ModelInstanceSetState(instance, calloc(1, sizeof(instance_state)));
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  void* s;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &s));
  join(s);
  free(s);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  instance_state* s;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, (void**)&s));
  join(s);
  for (uint32_t i = 0; i < count; i++) {
    job* j = calloc(1, sizeof *j);
    j->instance = instance;
    j->request = requests[i];
    snprintf(j->scenario, sizeof j->scenario, "%s", string_parameter(requests[i], "scenario"));
    snprintf(j->mode, sizeof j->mode, "%s", string_parameter(requests[i], "mode"));
    if (strcmp(j->scenario, "fail") == 0) {
      respond(j, "send", TRITONSERVER_RESPONSE_COMPLETE_FINAL);
      free(j);
      return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "the backend fails the execution");
    }
    if (strcmp(j->mode, "inline") == 0) {
      run(j);
      free(j);
      continue;
    }
    bool split = strcmp(j->mode, "split") == 0;
    if (split) first(j);
    if (pthread_create(&s->thread, NULL, split ? second_thread : run_thread, j) != 0) {
      free(j);
      return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "cannot start a thread");
    }
    s->running = true;
    if (strcmp(j->mode, "during") == 0) join(s);
  }
  return NULL;
}

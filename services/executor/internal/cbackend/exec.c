// Recorded executions: the calls a backend makes on the requests of a
// running TRITONBACKEND_ModelInstanceExecute — responses sent, requests
// released, statistics reported, small output buffers allocated — stay in
// C. Each is checked here as Go would check it (the same errors), and
// appended to the instance's record, which Go replays in one pass once
// Execute has returned (model.go). A call into Go costs more than the rest
// of a small request's bridge; with the record, an execution that answers
// every request before returning makes none.
//
// The executor gives a model that is not decoupled its responses once
// Execute has returned, so a response replayed then reaches the client as
// early as one handed over at once. A decoupled model's responses stream
// as they are sent: its requests are not recorded.
//
// The record of a request ends with its execution: calls made after
// Execute has returned (a response sent later from the backend's own
// thread) go to Go at once, as do the calls the record cannot answer
// (larger output buffers, buffers bound for a client's region). Go replays
// a request's record before handling a call on it made after the record
// ended, so that the executor sees the calls in the order the backend
// made them and a request the record ended is gone.

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"

#define ERR(code, msg) nereid_error(code, msg)

/* Go's halves (exports.go): the calls as they are handled when they are
 * not recorded. */
extern TRITONSERVER_Error* nereid_response_send(TRITONBACKEND_Response* r, uint32_t flags, TRITONSERVER_Error* err);
extern TRITONSERVER_Error* nereid_request_release(TRITONBACKEND_Request* r, uint32_t flags, bool* free);
extern TRITONSERVER_Error* nereid_factory_send_flags(TRITONBACKEND_ResponseFactory* f, uint32_t flags);
extern TRITONSERVER_Error* nereid_factory_is_cancelled(TRITONBACKEND_ResponseFactory* f, bool* out, bool replay);
extern TRITONSERVER_Error* nereid_output_buffer(TRITONBACKEND_Output* o, void** buf, uint64_t size, TRITONSERVER_MemoryType* mt, int64_t* mid, bool replay);
extern TRITONSERVER_Error* nereid_report_statistics(TRITONBACKEND_ModelInstance* i, TRITONBACKEND_Request* r, bool success, uint64_t a, uint64_t b, uint64_t c, uint64_t d);
extern TRITONSERVER_Error* nereid_report_batch_statistics(TRITONBACKEND_ModelInstance* i, uint64_t n, uint64_t a, uint64_t b, uint64_t c, uint64_t d);
extern bool nereid_request_cancelled(uintptr_t h);
extern bool nereid_log_is_enabled(TRITONSERVER_LogLevel level);

/* ---- the records ---- */

static void lock(nereid_exec* x) {
  while (__atomic_exchange_n(&x->lock, 1, __ATOMIC_ACQUIRE))
    while (__atomic_load_n(&x->lock, __ATOMIC_RELAXED)) sched_yield();
}

static void unlock(nereid_exec* x) { __atomic_store_n(&x->lock, 0, __ATOMIC_RELEASE); }

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static nereid_exec* pool;

nereid_exec* nereid_exec_new(void) {
  pthread_mutex_lock(&pool_mu);
  nereid_exec* x = pool;
  if (x != NULL) pool = x->next_free;
  pthread_mutex_unlock(&pool_mu);
  if (x == NULL) {
    x = calloc(1, sizeof *x);
  }
  x->next_free = NULL;
  return x;
}

/* ---- spare responses ---- */

/* Responses made from an instance's requests, and their outputs, are kept
 * when freed (up to MAX_SPARE of each) for the next ones: most executions
 * make as many as the one before. An output keeps the small buffer it
 * owned, for the next output's TRITONBACKEND_OutputBuffer. */
#define MAX_SPARE 64

/* recycle frees r into x's spares; x locked. */
static inline __attribute__((always_inline)) void recycle(nereid_exec* x, TRITONBACKEND_Response* r) {
  for (uint32_t i = 0; i < r->n_outputs; i++) {
    TRITONBACKEND_Output* o = r->outputs[i];
    if (x->n_spare_outputs >= MAX_SPARE) {
      nereid_free_output(o);
      continue;
    }
    if (o->owned) {
      if (o->spare != NULL) free(o->spare); /* the usual spare became the buffer */
      o->spare = o->buffer;
      o->spare_cap = o->byte_size > 0 ? o->byte_size : 1;
    }
    o->buffer = NULL; /* not the server's to keep: Go's memory, or a client's */
    o->owned = false;
    o->next_spare = x->spare_outputs;
    x->spare_outputs = o;
    x->n_spare_outputs++;
  }
  if (r->outputs != r->first_outputs) free(r->outputs);
  for (uint32_t i = 0; i < r->n_params; i++) TRITONSERVER_ParameterDelete(r->params[i]);
  free(r->params);
  if (x->n_spare_responses >= MAX_SPARE) {
    free(r);
    return;
  }
  r->next_spare = x->spare_responses;
  x->spare_responses = r;
  x->n_spare_responses++;
}

TRITONBACKEND_Response* nereid_exec_take_response(nereid_exec* x) {
  lock(x);
  TRITONBACKEND_Response* r = x->spare_responses;
  if (r != NULL) {
    x->spare_responses = r->next_spare;
    x->n_spare_responses--;
  }
  unlock(x);
  return r; /* response_new writes each field a response starts with */
}

/* nereid_exec_take_output returns a spare output of at least size bytes,
 * with no buffer and its size and spare buffer kept (its name, type, shape
 * and response are the caller's to write); NULL when the next spare is
 * smaller. recycle left it without a buffer: the rest is cleared here
 * field by field, cheaper than clearing the struct. */
TRITONBACKEND_Output* nereid_exec_take_output(nereid_exec* x, size_t size) {
  lock(x);
  TRITONBACKEND_Output* o = x->spare_outputs;
  if (o != NULL && o->size >= size) {
    x->spare_outputs = o->next_spare;
    x->n_spare_outputs--;
  } else {
    o = NULL;
  }
  unlock(x);
  if (o != NULL) {
    o->byte_size = 0;
    o->attributes = (TRITONSERVER_BufferAttributes){0};
    o->next_spare = NULL;
  }
  return o;
}

void nereid_free_response(TRITONBACKEND_Response* r) {
  if (r == NULL) return;
  nereid_exec* x = r->exec;
  if (x != NULL) {
    lock(x);
    recycle(x, r);
    unlock(x);
    return;
  }
  for (uint32_t i = 0; i < r->n_outputs; i++) nereid_free_output(r->outputs[i]);
  if (r->outputs != r->first_outputs) free(r->outputs);
  for (uint32_t i = 0; i < r->n_params; i++) TRITONSERVER_ParameterDelete(r->params[i]);
  free(r->params);
  free(r);
}

/* clear frees what the last execution's record holds: the responses it
 * sent and the errors they carried (Go has replayed them); x locked. */
static void clear(nereid_exec* x) {
  for (uint32_t i = 0; i < x->n_sent; i++) {
    recycle(x, x->sent[i].response);
    if (x->sent[i].error != NULL) TRITONSERVER_ErrorDelete(x->sent[i].error);
  }
  x->n_sent = 0;
  x->n_events = 0;
  x->batch_first = x->batch_last = 0;
  x->has_batch = false;
}

void nereid_exec_free(nereid_exec* x) {
  lock(x);
  clear(x);
  x->gen = 0;
  while (x->spare_responses != NULL) {
    TRITONBACKEND_Response* r = x->spare_responses;
    x->spare_responses = r->next_spare;
    free(r);
  }
  while (x->spare_outputs != NULL) {
    TRITONBACKEND_Output* o = x->spare_outputs;
    x->spare_outputs = o->next_spare;
    nereid_free_output(o);
  }
  x->n_spare_responses = x->n_spare_outputs = 0;
  unlock(x);
  pthread_mutex_lock(&pool_mu);
  x->next_free = pool;
  pool = x;
  pthread_mutex_unlock(&pool_mu);
}

/* recording reports whether calls on an object of execution gen are
 * recorded; x locked. */
static bool recording(const nereid_exec* x, uint64_t gen) { return gen != 0 && x->gen == gen; }

/* add appends an event for r (NULL: the instance's) to the record, with
 * its kind, request and link set, the fields of its kind for the caller to
 * set (nereid_event); x locked. */
static inline __attribute__((always_inline)) nereid_event* add(nereid_exec* x, TRITONBACKEND_Request* r, uint32_t kind) {
  if (x->n_events == x->cap_events) {
    x->cap_events = x->cap_events ? 2 * x->cap_events : 32;
    x->events = realloc(x->events, x->cap_events * sizeof *x->events);
  }
  nereid_event* e = &x->events[x->n_events++];
  e->kind = kind;
  e->next = 0;
  e->request = r;
  uint32_t at = x->n_events;
  uint32_t* first = r ? &r->first : &x->batch_first;
  uint32_t* last = r ? &r->last : &x->batch_last;
  if (*last) x->events[*last - 1].next = at;
  else *first = at;
  *last = at;
  return e;
}

/* settle marks r gone once it is released and its final send made, as Go
 * disposes of it then: later calls on it find no request. */
static void settle(TRITONBACKEND_Request* r) {
  if (r->released && r->final) {
    r->ended = true;
    r->h = 0;
  }
}

/* The thread's cached answers of TRITONSERVER_LogIsEnabled: the executor's
 * log settings can change at any time, so an answer is used for a
 * millisecond (LOG_CACHE_NS) at most from when Go asked its log, and only
 * within an execution it was given to. An answer past half its life marks
 * the execution's instance (log_exec) for Go to ask its log again before
 * the next execution: Go reads no clock per execution, and an execution
 * finds the answers stale, and calls into Go for them, only when its
 * instance has been idle or the execution is long. */
static __thread uint64_t log_stamp;
static __thread uint32_t log_levels;
static __thread nereid_exec* log_exec;

/* nereid_execute runs instance's Execute on the n requests of
 * i->exec->requests, recorded as execution gen (0: not recorded), with
 * levels the answers of TRITONSERVER_LogIsEnabled as Go had them at
 * levels_at (nereid_steady_ns). The instance comes as an integer: a
 * pointer argument costs the call cgo's pointer check. */
TRITONSERVER_Error* nereid_execute(uintptr_t instance, uint32_t n, uint64_t gen, uint32_t levels, uint64_t levels_at) {
  TRITONBACKEND_ModelInstance* i = (TRITONBACKEND_ModelInstance*)instance;
  nereid_exec* x = i->exec;
  lock(x);
  clear(x);
  x->gen = gen;
  unlock(x);
  uint64_t stamp = log_stamp;
  uint32_t saved = log_levels;
  nereid_exec* saved_exec = log_exec;
  log_levels = levels;
  log_stamp = levels_at;
  log_exec = x;
  TRITONSERVER_Error* err = ((nereid_execute_fn)x->fn)(i, x->requests, n);
  log_stamp = stamp;
  log_levels = saved;
  log_exec = saved_exec;
  lock(x);
  x->gen = 0;
  unlock(x);
  return err;
}

bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level) {
  uint64_t now;
  if (log_stamp != 0 && (unsigned)level <= TRITONSERVER_LOG_VERBOSE && (now = nereid_steady_ns()) >= log_stamp) {
    uint64_t age = now - log_stamp;
    if (age >= LOG_CACHE_NS / 2) log_exec->log_refresh = true;
    if (age < LOG_CACHE_NS) return (log_levels >> level) & 1;
  }
  return nereid_log_is_enabled(level);
}

void nereid_arena_unref(nereid_arena* a) {
  if (__atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) == 0) free(a);
}

/* A request's memory is its arena's. */
void nereid_free_request(TRITONBACKEND_Request* r) { nereid_arena_unref(r->arena); }

/* ---- sends ---- */

/* send records a send on r (resp NULL: the factory's flags, final) and
 * returns what Go's send returns (backend.Request.send); x locked. The
 * record keeps every send, refused ones too: replayed, each has the same
 * effect on Go's side as it has here. */
static TRITONSERVER_Error* send(nereid_exec* x, TRITONBACKEND_Request* r, TRITONBACKEND_Response* resp, uint32_t flags, TRITONSERVER_Error* err) {
  bool final = flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL;
  TRITONSERVER_Error* e = NULL;
  TRITONSERVER_Error* copy = err != NULL ? nereid_error(err->code, err->msg) : NULL; /* err stays the backend's */
  if (r->answered) e = ERR(TRITONSERVER_ERROR_INTERNAL, "response already sent for this request");
  else if (resp == NULL && r->sent == 0)
    e = ERR(TRITONSERVER_ERROR_INTERNAL, "model is not decoupled: the final flag alone cannot answer a request, it needs one response");
  else if (resp != NULL && r->sent > 0) e = ERR(TRITONSERVER_ERROR_INTERNAL, "model is not decoupled: a request takes exactly one response");
  else {
    r->answered = final;
    if (resp != NULL) r->sent++;
  }
  if (resp != NULL) {
    if (x->n_sent == x->cap_sent) {
      x->cap_sent = x->cap_sent ? 2 * x->cap_sent : 16;
      x->sent = realloc(x->sent, x->cap_sent * sizeof *x->sent);
    }
    x->sent[x->n_sent++] = (nereid_sent){resp, copy};
  }
  if (!r->has_send) {
    r->has_send = true;
    r->send_flags = flags;
    r->send_resp = resp;
    r->send_error = copy;
  } else {
    nereid_event* ev = add(x, r, resp ? NEREID_EVENT_SEND : NEREID_EVENT_FLAGS);
    ev->flags = flags;
    ev->response = resp;
    ev->error = copy;
  }
  if (final) {
    r->final = true;
    settle(r);
  }
  return e;
}

/* cancelled is what Go's send adds for a response that is not the last:
 * CANCELLED once the client is gone. */
static TRITONSERVER_Error* cancelled(uintptr_t h) {
  if (nereid_request_cancelled(h)) return ERR(TRITONSERVER_ERROR_CANCELLED, "request cancelled: the client is gone");
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* resp, const uint32_t flags, TRITONSERVER_Error* err) {
  if (resp == NULL) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "response must not be null");
  nereid_exec* x = resp->exec;
  if (x != NULL) {
    lock(x);
    if (recording(x, resp->gen)) {
      TRITONBACKEND_Request* r = resp->req;
      TRITONSERVER_Error* e;
      bool ask = false;
      uintptr_t h = resp->h;
      if (r->ended) {
        e = ERR(TRITONSERVER_ERROR_INVALID_ARG, "response's request is no longer valid");
        recycle(x, resp);
      } else {
        e = send(x, r, resp, flags, err);
        ask = e == NULL && !(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL);
      }
      unlock(x);
      return ask ? cancelled(h) : e;
    }
    unlock(x);
  }
  TRITONSERVER_Error* e = nereid_response_send(resp, flags, err);
  /* The response is the server's now; err stays the backend's. */
  nereid_free_response(resp);
  return e;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseFactorySendFlags(TRITONBACKEND_ResponseFactory* f, const uint32_t flags) {
  if (f == NULL) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "response factory must not be null");
  nereid_exec* x = f->exec;
  if (x != NULL) {
    lock(x);
    if (recording(x, f->gen)) {
      TRITONSERVER_Error* e = NULL;
      if (f->req->ended) e = ERR(TRITONSERVER_ERROR_INVALID_ARG, "response factory is no longer valid");
      else if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) e = send(x, f->req, NULL, flags, NULL);
      /* flags without the final one deliver nothing */
      unlock(x);
      return e;
    }
    unlock(x);
  }
  return nereid_factory_send_flags(f, flags);
}

TRITONSERVER_Error* TRITONBACKEND_ResponseFactoryIsCancelled(TRITONBACKEND_ResponseFactory* f, bool* out) {
  if (f == NULL) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "response factory must not be null");
  nereid_exec* x = f->exec;
  bool rec = false, gone = false;
  if (x != NULL) {
    lock(x);
    rec = recording(x, f->gen);
    gone = rec && f->req->ended;
    unlock(x);
  }
  if (gone) {
    *out = true; /* as for a factory whose request is gone */
    return NULL;
  }
  return nereid_factory_is_cancelled(f, out, !rec);
}

/* ---- release ---- */

TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* r, uint32_t flags) {
  if (r == NULL) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "request must not be null");
  nereid_exec* x = r->exec;
  if (x != NULL) {
    lock(x);
    if (recording(x, r->gen)) {
      TRITONSERVER_Error* e = NULL;
      if (r->ended) e = ERR(TRITONSERVER_ERROR_INVALID_ARG, "request is no longer valid");
      else if (flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        /* as Go answers it (exports.go) */
        e = ERR(TRITONSERVER_ERROR_INVALID_ARG, "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.");
      else if (!r->released) {
        r->released = true;
        r->release_recorded = true;
        settle(r);
      }
      unlock(x);
      return e;
    }
    unlock(x);
  }
  bool free_it = false;
  TRITONSERVER_Error* e = nereid_request_release(r, flags, &free_it);
  if (free_it) nereid_free_request(r);
  return e;
}

/* ---- output buffers ---- */

TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* o, void** buf, const uint64_t size, TRITONSERVER_MemoryType* mt, int64_t* mid) {
  if (o == NULL || o->response == NULL) return ERR(TRITONSERVER_ERROR_INVALID_ARG, "output must not be null");
  TRITONBACKEND_Response* resp = o->response;
  nereid_exec* x = resp->exec;
  bool rec = false;
  if (x != NULL) {
    lock(x);
    rec = recording(x, resp->gen);
    if (rec) {
      TRITONBACKEND_Request* r = resp->req;
      TRITONSERVER_Error* e = NULL;
      if (r->ended) {
        e = ERR(TRITONSERVER_ERROR_INVALID_ARG, "output's request is no longer valid");
      } else if (o->buffer != NULL) {
        char msg[512];
        snprintf(msg, sizeof msg, "output '%s' already has a buffer", o->name);
        e = ERR(TRITONSERVER_ERROR_ALREADY_EXISTS, msg);
      } else if (r->outputs_bound || size > NEREID_SMALL_OUTPUT) {
        goto ask_go; /* Go decides where it goes */
      } else {
        /* Host memory, as Go's allocator gives any output not bound
         * for a client's region, whatever the backend preferred. */
        if (o->spare != NULL && o->spare_cap >= size) {
          o->buffer = o->spare;
          o->spare = NULL;
        } else {
          o->buffer = malloc(size ? size : 1);
        }
        o->owned = true;
        o->byte_size = size;
        o->attributes.memory_type = TRITONSERVER_MEMORY_CPU;
        o->attributes.memory_type_id = 0;
        o->attributes.byte_size = size;
        *buf = o->buffer;
        if (mt) *mt = TRITONSERVER_MEMORY_CPU;
        if (mid) *mid = 0;
      }
      unlock(x);
      return e;
    }
  ask_go:
    unlock(x);
  }
  return nereid_output_buffer(o, buf, size, mt, mid, !rec);
}

/* ---- statistics ---- */

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance* i, TRITONBACKEND_Request* r, const bool success, const uint64_t a, const uint64_t b, const uint64_t c, const uint64_t d) {
  if (i != NULL && r != NULL && r->exec != NULL) {
    nereid_exec* x = r->exec;
    lock(x);
    if (recording(x, r->gen)) {
      TRITONSERVER_Error* e = NULL;
      if (r->ended) {
        e = ERR(TRITONSERVER_ERROR_INVALID_ARG, "request is no longer valid");
      } else if (!r->has_stats) {
        r->has_stats = true;
        r->stats_instance = i;
        r->stats_success = success;
        r->stats_ts[0] = a, r->stats_ts[1] = b, r->stats_ts[2] = c, r->stats_ts[3] = d;
      } else {
        nereid_event* ev = add(x, r, NEREID_EVENT_STATS);
        ev->instance = i;
        ev->success = success;
        ev->ts[0] = a, ev->ts[1] = b, ev->ts[2] = c, ev->ts[3] = d;
      }
      unlock(x);
      return e;
    }
    unlock(x);
  }
  return nereid_report_statistics(i, r, success, a, b, c, d);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance* i, const uint64_t n, const uint64_t a, const uint64_t b, const uint64_t c, const uint64_t d) {
  if (i != NULL && i->exec != NULL) {
    nereid_exec* x = i->exec;
    lock(x);
    if (x->gen != 0) {
      if (!x->has_batch) {
        x->has_batch = true;
        x->batch_instance = i;
        x->batch_size = n;
        x->batch_ts[0] = a, x->batch_ts[1] = b, x->batch_ts[2] = c, x->batch_ts[3] = d;
      } else {
        nereid_event* ev = add(x, NULL, NEREID_EVENT_BATCH);
        ev->instance = i;
        ev->batch_size = n;
        ev->ts[0] = a, ev->ts[1] = b, ev->ts[2] = c, ev->ts[3] = d;
      }
      unlock(x);
      return NULL;
    }
    unlock(x);
  }
  return nereid_report_batch_statistics(i, n, a, b, c, d);
}

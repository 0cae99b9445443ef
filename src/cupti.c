/* cupti.c — CUPTI's activity API for kernel records (see cupti.h). Built against the toolkit's
 * cupti_activity.h when the build finds it (the record layout is the header's CUpti_ActivityKernel10, CUDA 13);
 * libcupti itself is opened with dlopen, so a machine without it runs everything else. */
#include "cupti.h"

#include "dl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<cupti_activity.h>)
#define EM_HAVE_CUPTI 1
#endif
#endif

#ifndef EM_HAVE_CUPTI

em_status em_cupti_start(char *err) {
  return em_fail(err, EM_ERUN, "CUPTI: emmy was built without cupti_activity.h (CUDA toolkit headers)");
}
em_status em_cupti_stop(em_cupti_rec **recs, int *n, int *dropped, char *err) {
  *recs = NULL, *n = 0, *dropped = 0;
  return em_fail(err, EM_ERUN, "CUPTI: emmy was built without cupti_activity.h (CUDA toolkit headers)");
}

#else
#include <cupti_activity.h>

typedef CUptiResult (*fn_register)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
typedef CUptiResult (*fn_kind)(CUpti_ActivityKind);
typedef CUptiResult (*fn_flush)(uint32_t);
typedef CUptiResult (*fn_next)(uint8_t *, size_t, CUpti_Activity **);
typedef CUptiResult (*fn_dropped)(CUcontext, uint32_t, size_t *);
typedef CUptiResult (*fn_str)(CUptiResult, const char **);

static struct {
  fn_register reg;
  fn_kind enable, disable;
  fn_flush flush;
  fn_next next;
  fn_dropped dropped;
  fn_str str;
  int registered;
} api;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static EM_VEC(em_cupti_rec) got;
static size_t n_dropped;

#define BUF_BYTES (4u << 20)

static void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = aligned_alloc(8, BUF_BYTES);
  *size = *buffer ? BUF_BYTES : 0;
  *max_records = 0;
}

static void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  CUpti_Activity *r = NULL;
  pthread_mutex_lock(&mu);
  while (valid > 0 && api.next(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
    em_cupti_rec x = {{0}, k->start, k->end, k->correlationId, k->graphNodeId};
    snprintf(x.name, sizeof x.name, "%s", k->name ? k->name : "?");
    EM_VEC_PUSH(got, x);
  }
  size_t d = 0;
  if (api.dropped && api.dropped(ctx, stream, &d) == CUPTI_SUCCESS) n_dropped += d;
  pthread_mutex_unlock(&mu);
  free(buffer);
}

static em_status cupti_fail(CUptiResult rc, const char *what, char *err) {
  const char *s = NULL;
  if (api.str) api.str(rc, &s);
  return em_fail(err, EM_ERUN, "CUPTI: %s: %s (%d)", what, s ? s : "error", (int)rc);
}

em_status em_cupti_start(char *err) {
  if (!api.reg) {
#define SYM(field, type, name)                                   \
  if (!(api.field = (type)em_dl_sym(EM_LIB_CUPTI, name, err))) \
    return EM_ERUN;
    SYM(reg, fn_register, "cuptiActivityRegisterCallbacks")
    SYM(enable, fn_kind, "cuptiActivityEnable")
    SYM(disable, fn_kind, "cuptiActivityDisable")
    SYM(flush, fn_flush, "cuptiActivityFlushAll")
    SYM(next, fn_next, "cuptiActivityGetNextRecord")
    SYM(str, fn_str, "cuptiGetResultString")
#undef SYM
    api.dropped = (fn_dropped)em_dl_sym(EM_LIB_CUPTI, "cuptiActivityGetNumDroppedRecords", NULL);
  }
  CUptiResult rc;
  if (!api.registered) {
    if ((rc = api.reg(on_request, on_complete)) != CUPTI_SUCCESS) return cupti_fail(rc, "register callbacks", err);
    api.registered = 1;
  }
  pthread_mutex_lock(&mu);
  got.n = 0;
  n_dropped = 0;
  pthread_mutex_unlock(&mu);
  if ((rc = api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS) return cupti_fail(rc, "enable kernel records", err);
  return EM_OK;
}

static int by_start(const void *a, const void *b) {
  const em_cupti_rec *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

em_status em_cupti_stop(em_cupti_rec **recs, int *n, int *dropped, char *err) {
  *recs = NULL, *n = 0, *dropped = 0;
  if (!api.reg) return em_fail(err, EM_ERUN, "CUPTI: stop without start");
  CUptiResult rc = api.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  CUptiResult rd = api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (rc != CUPTI_SUCCESS) return cupti_fail(rc, "flush", err);
  if (rd != CUPTI_SUCCESS) return cupti_fail(rd, "disable kernel records", err);
  pthread_mutex_lock(&mu);
  *n = got.n;
  *dropped = (int)n_dropped;
  if (got.n) {
    *recs = em_alloc((size_t)got.n * sizeof **recs);
    memcpy(*recs, got.v, (size_t)got.n * sizeof **recs);
    qsort(*recs, (size_t)got.n, sizeof **recs, by_start);
  }
  got.n = 0;
  pthread_mutex_unlock(&mu);
  return EM_OK;
}
#endif

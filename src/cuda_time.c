/* cuda_time.c — timing GPU work (em_cu_time): warm-up by count and by time, samples chained on events or each after
 * an L2-flushing memset, short bodies batched into one graph replay; over cuda.c's public driver API only. */
#include "cuda.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Linear interpolation between order statistics of sorted v[0..n). */
static double quantile(const double *v, int n, double p) {
  double k = p * (n - 1);
  int i = (int)k;
  if (i >= n - 1) return v[n - 1];
  return v[i] + (k - i) * (v[i + 1] - v[i]);
}

typedef struct {
  em_cu_graph *g;
  em_cu_body body;
  void *ud;
} runner;

static em_status run_once(runner *r, char *err) { return r->g ? em_cu_graph_launch(r->g, err) : r->body(r->ud, err); }

/* The body n times back to back: what one replay of a batched graph holds. */
typedef struct {
  em_cu_body body;
  void *ud;
  int n;
} repeat_body;

static em_status run_repeat(void *ud, char *err) {
  repeat_body *b = ud;
  em_status st = EM_OK;
  for (int i = 0; i < b->n && !st; i++) st = b->body(b->ud, err);
  return st;
}

/* Graph timing with batch runs a sample: the body captured min(batch, 1024) times into one graph, as torch's timer
 * captures its k calls (tools/torchref/bench.py), so that a short kernel carries no graph launch gap per run.
 * Returns the replays a sample needs; *batch becomes copies * replays. */
static em_status batch_graph(em_cu_ctx *c, runner *r, int *batch, int *replays, char *err) {
  *replays = *batch;
  if (!r->g || *batch < 2) return EM_OK;
  repeat_body rb = {r->body, r->ud, *batch < 1024 ? *batch : 1024};
  em_cu_graph *g = em_cu_graph_capture(c, run_repeat, &rb, err);
  if (!g) return EM_ERUN;
  em_cu_graph_free(r->g);
  r->g = g;
  *replays = (*batch + rb.n - 1) / rb.n;
  *batch = rb.n * *replays;
  return run_once(r, err); /* (its first replay untimed) */
}

/* The L2 flush between flushed samples. A memset (the default) leaves the L2 full of dirty lines, so the timed run
 * also pays their write-back to HBM as it evicts them; EMMY_FLUSH=read (an experiment, docs/formats.md) reads the
 * buffer instead (em_l2_flush below, PTX the driver compiles: no NVRTC), so the L2 holds clean lines of it and the
 * run's operands still come from HBM. The buffer is filled once so that its pages exist. */
static const char l2_flush_ptx[] =
    "// emmy l2 flush\n"
    ".version 7.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry em_l2_flush(.param .u64 p_buf, .param .u64 p_n16)\n"
    "{\n"
    "  .reg .pred %p<3>;\n"
    "  .reg .b32 %r<12>;\n"
    "  .reg .b64 %rd<12>;\n"
    "  ld.param.u64 %rd1, [p_buf];\n"
    "  ld.param.u64 %rd2, [p_n16];\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mov.u32 %r4, %nctaid.x;\n"
    "  mul.wide.u32 %rd4, %r1, %r2;\n"
    "  cvt.u64.u32 %rd5, %r3;\n"
    "  add.s64 %rd4, %rd4, %rd5;\n"
    "  mul.wide.u32 %rd6, %r4, %r2;\n"
    "  mov.u32 %r10, 0;\n"
    "  setp.ge.u64 %p1, %rd4, %rd2;\n"
    "  @%p1 bra DONE;\n"
    "LOOP:\n"
    "  shl.b64 %rd7, %rd4, 4;\n"
    "  add.s64 %rd8, %rd1, %rd7;\n"
    "  ld.global.cg.v4.u32 {%r5, %r6, %r7, %r8}, [%rd8];\n"
    "  xor.b32 %r10, %r10, %r5;\n"
    "  xor.b32 %r10, %r10, %r6;\n"
    "  xor.b32 %r10, %r10, %r7;\n"
    "  xor.b32 %r10, %r10, %r8;\n"
    "  add.s64 %rd4, %rd4, %rd6;\n"
    "  setp.lt.u64 %p1, %rd4, %rd2;\n"
    "  @%p1 bra LOOP;\n"
    "DONE:\n"
    "  setp.ne.u32 %p2, %r10, 1511518221;\n"
    "  @%p2 bra END;\n"
    "  st.global.u32 [%rd1], %r10;\n"
    "END:\n"
    "  ret;\n"
    "}\n";

typedef struct {
  em_cu_buf *buf;
  em_cu_module *m;
  em_cu_fn *f; /* NULL: memset */
  unsigned blocks;
} l2_flusher;

/* how: 1 read, 2 memset, 0 $EMMY_FLUSH's (memset unless "read") */
static em_status flusher_open(em_cu_ctx *c, size_t bytes, int how, l2_flusher *F, char *err) {
  memset(F, 0, sizeof *F);
  const char *mode = getenv("EMMY_FLUSH");
  int read = how == 1;
  if (!how && mode && *mode && strcmp(mode, "memset")) {
    if (strcmp(mode, "read")) return em_fail(err, EM_EINPUT, "EMMY_FLUSH=%s: memset or read", mode);
    read = 1;
  }
  if (!(F->buf = em_cu_alloc(c, bytes, err))) return EM_ERUN;
  if (!read) return EM_OK;
  if (em_cu_fill(F->buf, 0, err) || !(F->m = em_cu_module_load(c, l2_flush_ptx, err)) ||
      !(F->f = em_cu_fn_get(F->m, "em_l2_flush", err)))
    return EM_ERUN;
  int sms = em_cu_ctx_info(c)->sm_count;
  F->blocks = (unsigned)(sms > 0 ? 8 * sms : 1024);
  return EM_OK;
}

static em_status flusher_run(l2_flusher *F, int s, char *err) {
  if (!F->f) return em_cu_fill_async(F->buf, (unsigned char)s, err);
  em_cu_launch_cfg cfg = {{F->blocks, 1, 1}, {256, 1, 1}, 0, NULL, 0};
  em_cu_arg a[2] = {{.kind = EM_CU_ARG_PTR, .v.ptr = em_cu_buf_ptr(F->buf)},
                    {.kind = EM_CU_ARG_I64, .v.i64 = (int64_t)(em_cu_buf_bytes(F->buf) / 16)}};
  return em_cu_launch(F->f, &cfg, a, 2, err);
}

static void flusher_close(l2_flusher *F) {
  em_cu_fn_free(F->f);
  em_cu_module_free(F->m);
  em_cu_free(F->buf);
  memset(F, 0, sizeof *F);
}

em_status em_cu_time(em_cu_ctx *c, em_cu_body body, void *ud, const em_cu_time_opts *o, em_cu_timing *out, char *err) {
  memset(out, 0, sizeof *out);
  int reps = o->reps, warmup = o->warmup;
  double min_us = o->min_sample_us > 0 ? o->min_sample_us : o->graph ? 200.0 : 20.0;
  if (reps < 1 || reps > 100000) return em_fail(err, EM_EINPUT, "timing: reps=%d (1 to 100000)", reps);
  if (warmup < 0 || warmup > 100000) return em_fail(err, EM_EINPUT, "timing: warmup=%d (0 to 100000)", warmup);
  if (o->warmup_ms < 0 || o->warmup_ms > 60000) return em_fail(err, EM_EINPUT, "timing: warmup_ms=%g (0 to 60000)", o->warmup_ms);
  if (em_cu_usable(c, "timing", err)) return EM_ERUN;
  em_status st = EM_OK;
  runner r = {NULL, body, ud};
  em_cu_event **ev = NULL;
  l2_flusher flush = {0};
  double *us = NULL, *sorted = NULL;
  int nev = 0, flushing = o->flush_bytes > 0;
  /* flushed samples need a start and an end event each (the memset between them is not timed) */
  int need = flushing ? 2 * reps : reps + 1;
  if (o->graph && !(r.g = em_cu_graph_capture(c, body, ud, err))) return EM_ERUN;
  for (int i = 0; i < warmup; i++)
    if ((st = run_once(&r, err))) goto cleanup;
  ev = em_alloc(sizeof *ev * (size_t)(need > 2 ? need : 2));
  for (nev = 0; nev < (need > 2 ? need : 2); nev++)
    if (!(ev[nev] = em_cu_event_new(c, err))) {
      st = EM_ERUN;
      goto cleanup;
    }
  float ms = 0;
  /* Warm-up by time: groups of runs until warmup_ms of GPU time has passed (clocks up, caches and TLBs warm). */
  if (o->warmup_ms > 0) {
    double spent = 0;
    for (int n = 0; spent < o->warmup_ms && n < 100000; n += 8) {
      if ((st = em_cu_event_record(ev[0], NULL, err))) goto cleanup;
      for (int i = 0; i < 8; i++)
        if ((st = run_once(&r, err))) goto cleanup;
      if ((st = em_cu_event_record(ev[1], NULL, err)) || (st = em_cu_event_sync(ev[1], err)) ||
          (st = em_cu_event_elapsed_ms(ev[0], ev[1], &ms, err)))
        goto cleanup;
      spent += ms;
    }
  }
  int batch = 1;
  if (flushing) {
    /* L2 flushed between samples: flush_bytes (more than the L2) written or read before each run, one run a sample */
    if ((st = flusher_open(c, o->flush_bytes, o->flush_mode, &flush, err))) goto cleanup;
    for (int s = 0; s < reps; s++) {
      if ((st = flusher_run(&flush, s, err))) goto cleanup;
      if ((st = em_cu_event_record(ev[2 * s], NULL, err)) || (st = run_once(&r, err)) ||
          (st = em_cu_event_record(ev[2 * s + 1], NULL, err)))
        goto cleanup;
    }
    if ((st = em_cu_event_sync(ev[2 * reps - 1], err))) goto cleanup;
  } else {
    /* Calibration: three runs between two events, after the warmup has drained. */
    enum { NCAL = 3 };
    if ((st = em_cu_event_record(ev[0], NULL, err))) goto cleanup;
    for (int i = 0; i < NCAL; i++)
      if ((st = run_once(&r, err))) goto cleanup;
    if ((st = em_cu_event_record(ev[1], NULL, err)) || (st = em_cu_event_sync(ev[1], err)) ||
        (st = em_cu_event_elapsed_ms(ev[0], ev[1], &ms, err)))
      goto cleanup;
    double once = (double)ms * 1000.0 / NCAL;
    if (once < min_us) {
      double b = ceil(min_us / (once > 0.1 ? once : 0.1));
      batch = b > 10000 ? 10000 : (int)b;
    }
    int replays = batch;
    if ((st = batch_graph(c, &r, &batch, &replays, err))) goto cleanup;
    /* Chained samples: the end event of one is the start of the next, so the stream never waits on the host. */
    if ((st = em_cu_event_record(ev[0], NULL, err))) goto cleanup;
    for (int s = 0; s < reps; s++) {
      for (int b = 0; b < replays; b++)
        if ((st = run_once(&r, err))) goto cleanup;
      if ((st = em_cu_event_record(ev[s + 1], NULL, err))) goto cleanup;
    }
    if ((st = em_cu_event_sync(ev[reps], err))) goto cleanup;
  }
  us = em_alloc(sizeof *us * (size_t)reps);
  sorted = em_alloc(sizeof *sorted * (size_t)reps);
  double sum = 0;
  for (int s = 0; s < reps; s++) {
    if (flushing) st = em_cu_event_elapsed_ms(ev[2 * s], ev[2 * s + 1], &ms, err);
    else st = em_cu_event_elapsed_ms(ev[s], ev[s + 1], &ms, err);
    if (st) goto cleanup;
    us[s] = sorted[s] = (double)ms * 1000.0 / batch;
    sum += us[s];
  }
  qsort(sorted, (size_t)reps, sizeof *sorted, cmp_double);
  out->median_us = quantile(sorted, reps, 0.5);
  out->p20_us = quantile(sorted, reps, 0.2);
  out->p80_us = quantile(sorted, reps, 0.8);
  out->min_us = sorted[0];
  out->mean_us = sum / reps;
  out->samples = reps;
  out->batch = batch;
  out->graph = o->graph ? 1 : 0;
  out->flushed = flushing;
  out->all_us = us;
  us = NULL;
cleanup:
  for (int i = 0; i < nev; i++) em_cu_event_free(ev[i]);
  free(ev);
  free(us);
  free(sorted);
  flusher_close(&flush);
  em_cu_graph_free(r.g);
  return st;
}

void em_cu_timing_free(em_cu_timing *t) {
  free(t->all_us);
  t->all_us = NULL;
}

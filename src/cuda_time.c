/* cuda_time.c — timing GPU work (em_cu_time): warm-up by count and by time, samples chained on events or each after
 * an L2-flushing memset, short bodies batched into one graph replay; over cuda.c's public driver API only. */
#include "cuda.h"

#include <math.h>
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
  em_cu_buf *flush = NULL;
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
    /* L2 flushed between samples: a memset of flush_bytes (more than the L2) before each run, one run a sample */
    if (!(flush = em_cu_alloc(c, o->flush_bytes, err))) {
      st = EM_ERUN;
      goto cleanup;
    }
    for (int s = 0; s < reps; s++) {
      if ((st = em_cu_fill_async(flush, (unsigned char)s, err))) goto cleanup;
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
  em_cu_free(flush);
  em_cu_graph_free(r.g);
  return st;
}

void em_cu_timing_free(em_cu_timing *t) {
  free(t->all_us);
  t->all_us = NULL;
}

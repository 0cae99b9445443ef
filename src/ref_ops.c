/* ref_ops.c — the CPU reference's op implementations: every op of the vocabulary on host tensors at a
 * concrete symbol binding, with PyTorch's semantics. Elementwise ops compute in double from values already
 * exact in their dtype and round once to the output dtype; reductions, softmax, contractions and attention
 * accumulate in double. Every view op materializes a contiguous copy, so each value is one plain tensor.
 * The interpreter that runs a graph node by node is ref.c. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_impl.h"

#define R EM_TENSOR_MAX_RANK

int64_t ref_ev(const rctx *c, const em_dim *d) { return em_dim_eval(&c->g->syms, d, c->sym); }

static double scalar(const rctx *c, const em_arg *a) { return a->is_float ? a->f : (double)ref_ev(c, &a->i); }

char *ref_fmt_shape(int rank, const int64_t *s, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)s[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
  return buf;
}
#define SHAPE(t) ref_fmt_shape((t)->rank, (t)->shape, (char[160]){0}, 160)

static em_status norm_axis(int64_t d, int rank, const char *what, int *out, char *err) {
  *out = 0;
  if (rank == 0 || d < -rank || d >= rank)
    return em_fail(err, EM_EINPUT, "%s=%lld is out of range for rank %d", what, (long long)d, rank);
  *out = (int)(d < 0 ? d + rank : d);
  return EM_OK;
}

static em_tensor *new_t(em_dtype dt, int rank, const int64_t *shape, char *err) {
  return em_tensor_new(dt, rank, shape, err);
}

static void cstrides(int rank, const int64_t *shape, int64_t *st) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= shape[i];
  }
}

/* Scratch storage of n elements of es bytes (at least one element): NULL with err filled, one line, when
 * it cannot be had (more than the machine's memory, or the allocation fails). Never aborts. */
static void *scratch(int64_t n, size_t es, char *err) {
  int64_t bytes;
  if (n < 1) n = 1;
  if (__builtin_mul_overflow(n, (int64_t)es, &bytes)) {
    em_fail(err, EM_ERUN, "a scratch buffer of %lld elements is more than 2^63-1 bytes", (long long)n);
    return NULL;
  }
  return em_tensor_alloc_bytes(bytes, "a scratch buffer", err);
}

/* A float tensor's values as doubles: the storage itself when it already is double, else a converted
 * copy returned in *owned (free it); NULL with err filled when the copy cannot be allocated. */
static const double *as_f64(const em_tensor *t, double **owned, char *err) {
  *owned = NULL;
  if (!t->is_f32) return t->data;
  double *d = scratch(t->numel, sizeof(double), err);
  if (!d) return NULL;
  const float *f = t->data;
  for (int64_t i = 0; i < t->numel; i++) d[i] = f[i];
  *owned = d;
  return d;
}

/* Stores n doubles into t from element off on, rounded as t's dtype requires. */
static void store_f64(em_tensor *t, int64_t off, const double *v, int64_t n) {
  if (t->dtype == EM_F32) {
    float *f = (float *)t->data + off;
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
  } else if (t->dtype == EM_F64) {
    memcpy((double *)t->data + off, v, sizeof(double) * (size_t)n);
  } else {
    for (int64_t i = 0; i < n; i++) em_t_set(t, off + i, v[i]);
  }
}

/* ---- parallel for ------------------------------------------------------------------------------------ */

typedef void (*par_fn)(void *ctx, int64_t lo, int64_t hi);
typedef struct {
  par_fn fn;
  void *ctx;
  int64_t lo, hi;
} par_job;

static void *par_thread(void *p) {
  par_job *j = p;
  j->fn(j->ctx, j->lo, j->hi);
  return NULL;
}

/* Runs fn over [0, n) split into nthreads contiguous chunks; the caller's thread takes the first. */
static void par_for(int nthreads, int64_t n, par_fn fn, void *ctx) {
  if (nthreads > n) nthreads = (int)n;
  if (nthreads > 64) nthreads = 64;
  if (nthreads <= 1) {
    if (n > 0) fn(ctx, 0, n);
    return;
  }
  par_job jobs[64];
  pthread_t tid[64];
  int started[64] = {0};
  for (int t = 0; t < nthreads; t++) jobs[t] = (par_job){fn, ctx, n * t / nthreads, n * (t + 1) / nthreads};
  for (int t = 1; t < nthreads; t++) started[t] = pthread_create(&tid[t], NULL, par_thread, &jobs[t]) == 0;
  par_thread(&jobs[0]);
  for (int t = 1; t < nthreads; t++) {
    if (started[t]) pthread_join(tid[t], NULL);
    else par_thread(&jobs[t]);
  }
}

/* ---- strided iteration ------------------------------------------------------------------------------- */

/* Up to three operands walked together over one index space; strides are in elements. */
typedef struct {
  int rank, nops;
  int64_t n[R];
  int64_t st[3][R];
} nditer;

/* Drops size-1 dims and merges neighbours that are contiguous for every operand, so a same-shape
 * elementwise op becomes one flat loop. Leaves rank >= 1. */
static void nd_coalesce(nditer *it) {
  nditer o = *it;
  o.rank = 0;
  for (int d = 0; d < it->rank; d++) {
    if (it->n[d] == 1) continue;
    int merge = o.rank > 0;
    for (int k = 0; merge && k < it->nops; k++)
      if (o.st[k][o.rank - 1] != it->st[k][d] * it->n[d]) merge = 0;
    if (merge) {
      o.n[o.rank - 1] *= it->n[d];
      for (int k = 0; k < it->nops; k++) o.st[k][o.rank - 1] = it->st[k][d];
    } else {
      o.n[o.rank] = it->n[d];
      for (int k = 0; k < it->nops; k++) o.st[k][o.rank] = it->st[k][d];
      o.rank++;
    }
  }
  if (o.rank == 0) {
    o.rank = 1;
    o.n[0] = 1;
    for (int k = 0; k < it->nops; k++) o.st[k][0] = 0;
  }
  *it = o;
}

/* Advances the odometer over every dim but the innermost; returns 0 after the last row. */
static int nd_next(const nditer *it, int64_t *idx, int64_t *off) {
  for (int d = it->rank - 2; d >= 0; d--) {
    for (int k = 0; k < it->nops; k++) off[k] += it->st[k][d];
    if (++idx[d] < it->n[d]) return 1;
    for (int k = 0; k < it->nops; k++) off[k] -= it->st[k][d] * it->n[d];
    idx[d] = 0;
  }
  return 0;
}

/* dst[dbase + Σ i·dst_st] = src[sbase + Σ i·src_st] over shape n; converts when dtypes differ. */
static void strided_copy(em_tensor *dst, int64_t dbase, const int64_t *dst_st, const em_tensor *src, int64_t sbase,
                         const int64_t *src_st, int rank, const int64_t *n) {
  nditer it = {.rank = rank, .nops = 2};
  int64_t total = 1;
  for (int d = 0; d < rank; d++) {
    it.n[d] = n[d];
    it.st[0][d] = dst_st[d];
    it.st[1][d] = src_st[d];
    total *= n[d];
  }
  if (total == 0) return;
  nd_coalesce(&it);
  int64_t idx[R] = {0}, off[3] = {dbase, sbase, 0};
  int64_t len = it.n[it.rank - 1], sd = it.st[0][it.rank - 1], ss = it.st[1][it.rank - 1];
  int raw = dst->dtype == src->dtype;
  size_t es = dst->is_f32 ? 4 : 8;
  do {
    if (raw && sd == 1 && ss == 1) {
      memcpy((char *)dst->data + (size_t)off[0] * es, (const char *)src->data + (size_t)off[1] * es, es * (size_t)len);
    } else if (raw && es == 4) {
      float *d = (float *)dst->data + off[0];
      const float *s = (const float *)src->data + off[1];
      for (int64_t i = 0; i < len; i++) d[i * sd] = s[i * ss];
    } else if (raw) {
      double *d = (double *)dst->data + off[0];
      const double *s = (const double *)src->data + off[1];
      for (int64_t i = 0; i < len; i++) d[i * sd] = s[i * ss];
    } else {
      for (int64_t i = 0; i < len; i++) em_t_set(dst, off[0] + i * sd, em_t_get(src, off[1] + i * ss));
    }
  } while (nd_next(&it, idx, off));
}

/* out (new, contiguous, given shape) gathers from src at sbase with strides src_st. */
static em_tensor *gather(const em_tensor *src, int64_t sbase, const int64_t *src_st, int rank, const int64_t *shape,
                         char *err) {
  em_tensor *o = new_t(src->dtype, rank, shape, err);
  if (!o) return NULL;
  int64_t dst_st[R];
  cstrides(rank, shape, dst_st);
  strided_copy(o, 0, dst_st, src, sbase, src_st, rank, shape);
  return o;
}

/* A contiguous copy of src under a new shape of the same element count. */
static em_tensor *reshaped(const em_tensor *src, int rank, const int64_t *shape, char *err) {
  em_tensor *o = new_t(src->dtype, rank, shape, err);
  if (!o) return NULL;
  if (o->numel != src->numel) {
    em_fail(err, EM_ERUN, "reshape of %s to %s changes the element count", SHAPE(src), SHAPE(o));
    em_tensor_free(o);
    return NULL;
  }
  memcpy(o->data, src->data, (size_t)src->numel * (src->is_f32 ? 4 : 8));
  return o;
}

/* ---- elementwise ------------------------------------------------------------------------------------- */

static em_status bcast_shape(const em_tensor *a, const em_tensor *b, int *rank, int64_t *shape, char *err) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return em_fail(err, EM_EINPUT, "shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", SHAPE(a), SHAPE(b), i,
                     (long long)da, (long long)db);
    shape[i] = da == 1 ? db : da;
  }
  *rank = r;
  return EM_OK;
}

/* PyTorch converts a Python scalar to the op's compute type: f32 for bf16/f16/f32 results. */
static double opmath_scalar(em_dtype out, double v) {
  return (out == EM_BF16 || out == EM_F16 || out == EM_F32) ? (double)(float)v : v;
}

static em_status op_binary(rctx *c, const em_node *nd, em_dtype odt, em_tensor **out, char *err) {
  const em_arg *a = nd->args;
  const em_tensor *x = c->vals[a[0].tensor], *y = a[1].is_tensor ? c->vals[a[1].tensor] : NULL;
  double sv = y ? 0 : opmath_scalar(odt, scalar(c, &a[1]));
  double alpha = 1;
  if (nd->op == EM_OP_ADD || nd->op == EM_OP_SUB) alpha = opmath_scalar(odt, scalar(c, &a[2]));
  if (nd->op == EM_OP_SUB) alpha = -alpha;
  int rank = 0;
  int64_t shape[R];
  if (y) {
    if (bcast_shape(x, y, &rank, shape, err)) return EM_EINPUT;
  } else {
    rank = x->rank;
    memcpy(shape, x->shape, sizeof shape);
  }
  em_tensor *o = new_t(odt, rank, shape, err);
  if (!o) return EM_ERUN;
  *out = o;
  if (o->numel == 0) return EM_OK;
  nditer it = {.rank = rank, .nops = 3};
  memcpy(it.n, shape, sizeof shape);
  cstrides(rank, shape, it.st[0]);
  em_tensor_bcast_strides(x, rank, it.st[1]);
  if (y) em_tensor_bcast_strides(y, rank, it.st[2]);
  else memset(it.st[2], 0, sizeof it.st[2]);
  nd_coalesce(&it);
  int64_t idx[R] = {0}, off[3] = {0, 0, 0};
  int64_t len = it.n[it.rank - 1], so = it.st[0][it.rank - 1], sx = it.st[1][it.rank - 1], sy = it.st[2][it.rank - 1];
  double buf[256];
  do {
    for (int64_t i0 = 0; i0 < len; i0 += 256) {
      int64_t n = len - i0 < 256 ? len - i0 : 256;
      int64_t ox = off[1] + i0 * sx, oy = off[2] + i0 * sy;
      for (int64_t i = 0; i < n; i++) {
        double u = em_t_get(x, ox + i * sx), v = y ? em_t_get(y, oy + i * sy) : sv;
        switch (nd->op) {
        case EM_OP_ADD:
        case EM_OP_SUB: buf[i] = alpha == 1 ? u + v : u + alpha * v; break;
        case EM_OP_MUL: buf[i] = u * v; break;
        default: buf[i] = u / v; break;
        }
      }
      if (so == 1) store_f64(o, off[0] + i0, buf, n);
      else
        for (int64_t i = 0; i < n; i++) em_t_set(o, off[0] + (i0 + i) * so, buf[i]);
    }
  } while (nd_next(&it, idx, off));
  return EM_OK;
}

static double silu(double x) { return x / (1.0 + exp(-x)); }
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static em_status op_unary(rctx *c, const em_node *nd, em_dtype odt, em_tensor **out, char *err) {
  const em_tensor *x = c->vals[nd->args[0].tensor];
  em_tensor *o = new_t(odt, x->rank, x->shape, err);
  if (!o) return EM_ERUN;
  *out = o;
  double p = 0;
  if (nd->op == EM_OP_POW || nd->op == EM_OP_CLAMP_MIN) p = opmath_scalar(odt, scalar(c, &nd->args[1]));
  double buf[256];
  for (int64_t i0 = 0; i0 < x->numel; i0 += 256) {
    int64_t n = x->numel - i0 < 256 ? x->numel - i0 : 256;
    for (int64_t i = 0; i < n; i++) buf[i] = em_t_get(x, i0 + i);
    switch (nd->op) {
    case EM_OP_NEG: for (int64_t i = 0; i < n; i++) buf[i] = -buf[i]; break;
    case EM_OP_RECIPROCAL: for (int64_t i = 0; i < n; i++) buf[i] = 1.0 / buf[i]; break;
    case EM_OP_RSQRT: for (int64_t i = 0; i < n; i++) buf[i] = 1.0 / sqrt(buf[i]); break;
    case EM_OP_SQRT: for (int64_t i = 0; i < n; i++) buf[i] = sqrt(buf[i]); break;
    case EM_OP_EXP: for (int64_t i = 0; i < n; i++) buf[i] = exp(buf[i]); break;
    case EM_OP_SILU: for (int64_t i = 0; i < n; i++) buf[i] = silu(buf[i]); break;
    case EM_OP_SIGMOID: for (int64_t i = 0; i < n; i++) buf[i] = sigmoid(buf[i]); break;
    case EM_OP_TANH: for (int64_t i = 0; i < n; i++) buf[i] = tanh(buf[i]); break;
    case EM_OP_COS: for (int64_t i = 0; i < n; i++) buf[i] = cos(buf[i]); break;
    case EM_OP_SIN: for (int64_t i = 0; i < n; i++) buf[i] = sin(buf[i]); break;
    case EM_OP_POW:
      if (p == 2.0) for (int64_t i = 0; i < n; i++) buf[i] *= buf[i];
      else for (int64_t i = 0; i < n; i++) buf[i] = pow(buf[i], p);
      break;
    case EM_OP_CLAMP_MIN: /* NaN propagates, as in torch.clamp_min */
      for (int64_t i = 0; i < n; i++) buf[i] = buf[i] < p ? p : buf[i];
      break;
    case EM_OP_CONTIGUOUS:
    case EM_OP_CLONE:
    case EM_OP_TO_COPY: break;
    default: return em_fail(err, EM_ERUN, "not an elementwise op");
    }
    store_f64(o, i0, buf, n);
  }
  return EM_OK;
}

/* ---- reductions and softmax -------------------------------------------------------------------------- */

/* x converted to dtype dt (rounded), or NULL when it already is dt. */
static em_tensor *cast_copy(const em_tensor *x, em_dtype dt, char *err, int *fail) {
  *fail = 0;
  if (x->dtype == dt) return NULL;
  em_tensor *o = new_t(dt, x->rank, x->shape, err);
  if (!o) {
    *fail = 1;
    return NULL;
  }
  for (int64_t i = 0; i < x->numel; i++) em_t_set(o, i, em_t_get(x, i));
  return o;
}

static em_status op_reduce(rctx *c, const em_node *nd, em_dtype odt, em_tensor **out, char *err) {
  const em_arg *a = nd->args;
  const em_tensor *x0 = c->vals[a[0].tensor], *x = x0;
  em_tensor *cast = NULL, *o = NULL;
  int64_t *roff = NULL;
  em_status st = EM_OK;
  int fail;
  /* argument positions: mean/sum/amax (self, dim, keepdim, dtype); linalg_vector_norm (self, ord, dim, keepdim, dtype) */
  int vn = nd->op == EM_OP_VECTOR_NORM, di = vn ? 2 : 1, ki = di + 1, ti = di + 2;
  if (nd->op != EM_OP_AMAX && a[ti].present) {
    cast = cast_copy(x0, (em_dtype)a[ti].dtype, err, &fail);
    if (fail) return EM_ERUN;
    if (cast) x = cast;
  }
  int mark[R] = {0};
  if (!a[di].present || a[di].n == 0) {
    for (int i = 0; i < x->rank; i++) mark[i] = 1;
  } else {
    for (int k = 0; k < a[di].n; k++) {
      int ax = 0;
      if ((st = norm_axis(ref_ev(c, &a[di].ilist[k]), x->rank, "dim", &ax, err))) goto cleanup;
      mark[ax] = 1;
    }
  }
  int keepdim = a[ki].b, orank = 0;
  int64_t oshape[R], xst[R];
  cstrides(x->rank, x->shape, xst);
  nditer kept = {.rank = 0, .nops = 1}, red = {.rank = 0, .nops = 1};
  int64_t nred = 1;
  for (int i = 0; i < x->rank; i++) {
    if (!mark[i]) oshape[orank++] = x->shape[i];
    else if (keepdim) oshape[orank++] = 1;
    nditer *it = mark[i] ? &red : &kept;
    it->n[it->rank] = x->shape[i];
    it->st[0][it->rank++] = xst[i];
    if (mark[i]) nred *= x->shape[i];
  }
  o = new_t(odt, orank, oshape, err);
  if (!o) {
    st = EM_ERUN;
    goto cleanup;
  }
  if (nd->op == EM_OP_AMAX && nred == 0 && o->numel > 0) {
    st = em_fail(err, EM_EINPUT, "amax over an empty dimension of %s", SHAPE(x));
    goto cleanup;
  }
  /* offsets of the reduced elements relative to each output element's base */
  roff = scratch(nred, sizeof(int64_t), err);
  if (!roff) {
    st = EM_ERUN;
    goto cleanup;
  }
  if (nred > 0) {
    nd_coalesce(&red);
    int64_t idx[R] = {0}, off[3] = {0}, k = 0;
    do {
      for (int64_t i = 0; i < red.n[red.rank - 1]; i++) roff[k++] = off[0] + i * red.st[0][red.rank - 1];
    } while (nd_next(&red, idx, off));
  }
  if (o->numel > 0) {
    nd_coalesce(&kept);
    int64_t idx[R] = {0}, off[3] = {0}, k = 0;
    do {
      for (int64_t i = 0; i < kept.n[kept.rank - 1]; i++) {
        int64_t base = off[0] + i * kept.st[0][kept.rank - 1];
        double acc;
        if (nd->op == EM_OP_AMAX) {
          acc = -INFINITY;
          for (int64_t j = 0; j < nred; j++) {
            double v = em_t_get(x, base + roff[j]);
            if (v > acc || isnan(v)) acc = v;
            if (isnan(v)) break;
          }
        } else if (vn) {
          acc = 0;
          for (int64_t j = 0; j < nred; j++) {
            double v = em_t_get(x, base + roff[j]);
            acc += v * v;
          }
          acc = sqrt(acc);
        } else {
          acc = 0;
          if (x->is_f32) {
            const float *f = (const float *)x->data + base;
            for (int64_t j = 0; j < nred; j++) acc += f[roff[j]];
          } else {
            const double *d = (const double *)x->data + base;
            for (int64_t j = 0; j < nred; j++) acc += d[roff[j]];
          }
          if (nd->op == EM_OP_MEAN) acc /= (double)nred;
        }
        em_t_set(o, k++, acc);
      }
    } while (nd_next(&kept, idx, off));
  }
  *out = o;
  o = NULL;
cleanup:
  em_tensor_free(cast);
  em_tensor_free(o);
  free(roff);
  return st;
}

static em_status op_softmax(rctx *c, const em_node *nd, em_dtype odt, em_tensor **out, char *err) {
  const em_arg *a = nd->args;
  const em_tensor *x = c->vals[a[0].tensor];
  em_tensor *cast = NULL;
  int fail, ax;
  if (nd->op == EM_OP_SOFTMAX_INT && a[2].present) {
    cast = cast_copy(x, (em_dtype)a[2].dtype, err, &fail);
    if (fail) return EM_ERUN;
    if (cast) x = cast;
  }
  if (norm_axis(ref_ev(c, &a[1].i), x->rank, "dim", &ax, err)) {
    em_tensor_free(cast);
    return EM_EINPUT;
  }
  em_tensor *o = new_t(odt, x->rank, x->shape, err);
  if (!o) {
    em_tensor_free(cast);
    return EM_ERUN;
  }
  int64_t outer = 1, n = x->shape[ax], inner = 1;
  for (int i = 0; i < ax; i++) outer *= x->shape[i];
  for (int i = ax + 1; i < x->rank; i++) inner *= x->shape[i];
  double *buf = scratch(n, sizeof(double), err);
  if (!buf) {
    em_tensor_free(o);
    em_tensor_free(cast);
    return EM_ERUN;
  }
  for (int64_t p = 0; p < outer; p++)
    for (int64_t q = 0; q < inner; q++) {
      int64_t base = p * n * inner + q;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; j++) {
        buf[j] = em_t_get(x, base + j * inner);
        if (buf[j] > mx || isnan(buf[j])) mx = buf[j];
      }
      for (int64_t j = 0; j < n; j++) sum += (buf[j] = exp(buf[j] - mx));
      for (int64_t j = 0; j < n; j++) em_t_set(o, base + j * inner, buf[j] / sum);
    }
  free(buf);
  em_tensor_free(cast);
  *out = o;
  return EM_OK;
}

/* ---- contractions ------------------------------------------------------------------------------------ */

/* Bt[b][n][k] = B[b][k][n] for nb batches of a K×N matrix, in double; NULL with err filled when it cannot
 * be allocated. */
static double *transpose_f64(const em_tensor *b, int64_t nb, int64_t K, int64_t N, char *err) {
  double *t = scratch(nb * K * N, sizeof(double), err); /* the elements of b: no overflow */
  if (!t) return NULL;
  for (int64_t q = 0; q < nb; q++) {
    double *tq = t + q * K * N;
    int64_t base = q * K * N;
    for (int64_t k0 = 0; k0 < K; k0 += 64)
      for (int64_t n0 = 0; n0 < N; n0 += 64) {
        int64_t k1 = k0 + 64 < K ? k0 + 64 : K, n1 = n0 + 64 < N ? n0 + 64 : N;
        for (int64_t k = k0; k < k1; k++)
          for (int64_t n = n0; n < n1; n++) tq[n * K + k] = em_t_get(b, base + k * N + n);
      }
  }
  return t;
}

typedef struct {
  int64_t M, N, K;
  const double *A, *Bt;
  double *C;
  const int64_t *aoff, *boff; /* per output batch: offsets of its A and Bt matrices */
} bmm_job;

static void bmm_part(void *p, int64_t lo, int64_t hi) {
  const bmm_job *j = p;
  for (int64_t q = lo; q < hi; q++)
    em_gemm_nt(j->M, j->N, j->K, j->A + j->aoff[q], j->K, j->Bt + j->boff[q], j->K, j->C + q * j->M * j->N, j->N, 1);
}

/* mm, bmm and matmul: torch.matmul's rules (1-d operands get a dim of 1 that is then dropped; batch dims
 * broadcast). */
static em_status op_matmul(rctx *c, const em_node *nd, em_dtype odt, em_tensor **out, char *err) {
  const em_tensor *a = c->vals[nd->args[0].tensor], *b = c->vals[nd->args[1].tensor];
  em_status st = EM_OK;
  double *aown = NULL, *bt = NULL, *cd = NULL;
  int64_t *aoff = NULL, *boff = NULL;
  em_tensor *o = NULL;
  if (a->rank == 0 || b->rank == 0) return em_fail(err, EM_EINPUT, "matmul of a 0-d tensor");
  int sqa = a->rank == 1, sqb = b->rank == 1;
  int64_t M = sqa ? 1 : a->shape[a->rank - 2], K = a->shape[a->rank - 1];
  int64_t Kb = sqb ? b->shape[0] : b->shape[b->rank - 2], N = sqb ? 1 : b->shape[b->rank - 1];
  if (K != Kb) return em_fail(err, EM_EINPUT, "inner dims differ: %s @ %s", SHAPE(a), SHAPE(b));
  int ra = sqa ? 0 : a->rank - 2, rb = sqb ? 0 : b->rank - 2, r = ra > rb ? ra : rb;
  int64_t bshape[R], ast[R], bst[R];
  int64_t nbo = 1, nba = 1, nbb = 1;
  for (int i = 0; i < ra; i++) nba *= a->shape[i];
  for (int i = 0; i < rb; i++) nbb *= b->shape[i];
  {
    int64_t sa = 1, sb = 1;
    for (int i = r - 1; i >= 0; i--) {
      int ia = i - (r - ra), ib = i - (r - rb);
      int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
      if (da != db && da != 1 && db != 1)
        return em_fail(err, EM_EINPUT, "batch dims of %s and %s do not broadcast", SHAPE(a), SHAPE(b));
      bshape[i] = da == 1 ? db : da;
      ast[i] = da == 1 ? 0 : sa;
      bst[i] = db == 1 ? 0 : sb;
      sa *= da;
      sb *= db;
      nbo *= bshape[i];
    }
  }
  int orank = r;
  int64_t oshape[R];
  memcpy(oshape, bshape, sizeof(int64_t) * (size_t)r);
  if (!sqa) oshape[orank++] = M;
  if (!sqb) oshape[orank++] = N;
  o = new_t(odt, orank, oshape, err);
  if (!o) return EM_ERUN;
  if (o->numel == 0) goto done;
  const double *ad = as_f64(a, &aown, err);
  if (!ad || !(bt = transpose_f64(b, nbb, K, N, err)) || !(cd = scratch(nbo * M * N, sizeof(double), err))) {
    st = EM_ERUN;
    em_tensor_free(o);
    o = NULL;
    goto done;
  }
  if (nbb == 1 && nba == nbo) {
    /* one shared right operand: fold the batch into M */
    em_gemm_nt(nbo * M, N, K, ad, K, bt, K, cd, N, c->nthreads);
  } else {
    aoff = scratch(nbo, sizeof(int64_t), err);
    boff = aoff ? scratch(nbo, sizeof(int64_t), err) : NULL;
    if (!boff) {
      st = EM_ERUN;
      em_tensor_free(o);
      o = NULL;
      goto done;
    }
    int64_t idx[R] = {0}, ia = 0, ib = 0;
    for (int64_t q = 0; q < nbo; q++) {
      aoff[q] = ia * M * K;
      boff[q] = ib * N * K;
      for (int d = r - 1; d >= 0; d--) {
        ia += ast[d];
        ib += bst[d];
        if (++idx[d] < bshape[d]) break;
        ia -= ast[d] * bshape[d];
        ib -= bst[d] * bshape[d];
        idx[d] = 0;
      }
    }
    bmm_job j = {M, N, K, ad, bt, cd, aoff, boff};
    if (nbo >= c->nthreads) par_for(c->nthreads, nbo, bmm_part, &j);
    else
      for (int64_t q = 0; q < nbo; q++)
        em_gemm_nt(M, N, K, ad + aoff[q], K, bt + boff[q], K, cd + q * M * N, N, c->nthreads);
  }
  store_f64(o, 0, cd, o->numel);
done:
  *out = o; /* NULL on failure */
  free(aown);
  free(bt);
  free(cd);
  free(aoff);
  free(boff);
  return st;
}

static em_status op_linear(rctx *c, const em_node *nd, em_dtype odt, em_tensor **out, char *err) {
  const em_tensor *x = c->vals[nd->args[0].tensor], *w = c->vals[nd->args[1].tensor];
  const em_tensor *bias = nd->args[2].present ? c->vals[nd->args[2].tensor] : NULL;
  if (x->rank < 1 || w->rank != 2 || x->shape[x->rank - 1] != w->shape[1])
    return em_fail(err, EM_EINPUT, "input %s does not match weight %s", SHAPE(x), SHAPE(w));
  int64_t K = w->shape[1], N = w->shape[0], M = K ? x->numel / K : 0;
  if (bias && (bias->rank != 1 || bias->shape[0] != N))
    return em_fail(err, EM_EINPUT, "bias %s does not match weight %s", SHAPE(bias), SHAPE(w));
  int64_t oshape[R];
  memcpy(oshape, x->shape, sizeof oshape);
  oshape[x->rank - 1] = N;
  em_tensor *o = new_t(odt, x->rank, oshape, err);
  if (!o) return EM_ERUN;
  if (K == 0) {
    int64_t m = 1;
    for (int i = 0; i < x->rank - 1; i++) m *= x->shape[i];
    M = m;
  }
  double *xo = NULL, *wo = NULL, *cd = NULL;
  const double *xd = as_f64(x, &xo, err), *wd = xd ? as_f64(w, &wo, err) : NULL;
  if (!wd || !(cd = scratch(M * N, sizeof(double), err))) { /* M * N: the output's elements */
    free(xo);
    free(wo);
    em_tensor_free(o);
    return EM_ERUN;
  }
  em_gemm_nt(M, N, K, xd, K, wd, K, cd, N, c->nthreads);
  if (bias)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) cd[i * N + j] += em_t_get(bias, j);
  store_f64(o, 0, cd, M * N);
  free(xo);
  free(wo);
  free(cd);
  *out = o;
  return EM_OK;
}

/* ---- attention --------------------------------------------------------------------------------------- */

typedef struct {
  const em_tensor *q, *k, *v, *mask, *pos; /* pos: seq_pos (row l sees keys l - pos[b, l] .. l), or NULL */
  em_tensor *o;
  int64_t L, S, E, Ev;
  int nbd;                   /* batch dims (rank - 2) */
  int64_t qshape[R], kvshape[R];
  int64_t mst[R + 2];        /* mask strides over (batch dims, L, S), 0 where broadcast */
  double scale;
  int causal;
  int failed; /* set (atomically) by a part that could not allocate its scratch */
  char err[EM_ERR_MAX];
} sdpa_job;

static void sdpa_part(void *p, int64_t lo, int64_t hi) {
  sdpa_job *j = p;
  int64_t L = j->L, S = j->S, E = j->E, Ev = j->Ev, ls;
  char e2[EM_ERR_MAX] = "";
  /* L * S is the one product that is not the size of a tensor the run holds */
  if (__builtin_mul_overflow(L, S, &ls)) ls = INT64_MAX;
  double *Q = scratch(L * E, sizeof(double), e2), *Kd = Q ? scratch(S * E, sizeof(double), e2) : NULL;
  double *Vt = Kd ? scratch(Ev * S, sizeof(double), e2) : NULL, *P = Vt ? scratch(ls, sizeof(double), e2) : NULL;
  double *O = P ? scratch(L * Ev, sizeof(double), e2) : NULL;
  if (!O) {
    if (!__atomic_exchange_n(&j->failed, 1, __ATOMIC_SEQ_CST)) memcpy(j->err, e2, sizeof e2);
    lo = hi; /* computes nothing; the buffers that were allocated are freed below */
  }
  for (int64_t h = lo; h < hi; h++) {
    /* decompose the query batch index; the kv batch index maps head dim (nbd-1) for GQA */
    int64_t rem = h, kvb = 0, mbase = 0, kvmul = 1, idx[R];
    for (int d = j->nbd - 1; d >= 0; d--) {
      idx[d] = rem % j->qshape[d];
      rem /= j->qshape[d];
    }
    for (int d = j->nbd - 1; d >= 0; d--) {
      int64_t kd = idx[d];
      if (d == j->nbd - 1 && j->kvshape[d] != j->qshape[d]) kd = idx[d] / (j->qshape[d] / j->kvshape[d]);
      kvb += kd * kvmul;
      kvmul *= j->kvshape[d];
      mbase += idx[d] * j->mst[d];
    }
    for (int64_t i = 0; i < L * E; i++) Q[i] = em_t_get(j->q, h * L * E + i);
    for (int64_t i = 0; i < S * E; i++) Kd[i] = em_t_get(j->k, kvb * S * E + i);
    for (int64_t s = 0; s < S; s++)
      for (int64_t e = 0; e < Ev; e++) Vt[e * S + s] = em_t_get(j->v, kvb * S * Ev + s * Ev + e);
    em_gemm_nt(L, S, E, Q, E, Kd, E, P, S, 1);
    for (int64_t i = 0; i < L; i++) {
      double *row = P + i * S, mx = -INFINITY, sum = 0;
      /* seq_pos: the row's position in its sequence ([1 or B, L]: the first batch index where it has one) */
      const int64_t lstart = j->pos ? (int64_t)em_t_get(j->pos, (j->pos->shape[0] > 1 ? idx[0] : 0) * L + i) : 0;
      for (int64_t s = 0; s < S; s++) {
        double x = row[s] * j->scale;
        if (j->causal && s > i) x = -INFINITY;
        if (j->pos && s < i - lstart) x = -INFINITY;
        if (j->mask) {
          double m = em_t_get(j->mask, mbase + i * j->mst[j->nbd] + s * j->mst[j->nbd + 1]);
          if (j->mask->dtype == EM_BOOL) x = m != 0 ? x : -INFINITY;
          else x += m;
        }
        row[s] = x;
        if (x > mx || isnan(x)) mx = x;
      }
      /* a row with every score -inf attends to nothing and gives zeros, as PyTorch >= 2.5's math path does */
      if (mx == -INFINITY) {
        for (int64_t s = 0; s < S; s++) row[s] = 0;
        continue;
      }
      for (int64_t s = 0; s < S; s++) sum += (row[s] = exp(row[s] - mx));
      for (int64_t s = 0; s < S; s++) row[s] /= sum;
    }
    em_gemm_nt(L, Ev, S, P, S, Vt, S, O, Ev, 1);
    store_f64(j->o, h * L * Ev, O, L * Ev);
  }
  free(Q);
  free(Kd);
  free(Vt);
  free(P);
  free(O);
}

static em_status op_sdpa(rctx *c, const em_node *nd, em_dtype odt, em_tensor **out, char *err) {
  const em_arg *a = nd->args;
  sdpa_job j;
  memset(&j, 0, sizeof j);
  j.q = c->vals[a[0].tensor];
  j.k = c->vals[a[1].tensor];
  j.v = c->vals[a[2].tensor];
  j.mask = a[3].present ? c->vals[a[3].tensor] : NULL;
  j.pos = a[8].present ? c->vals[a[8].tensor] : NULL;
  int r = j.q->rank;
  if (r < 2 || j.k->rank != r || j.v->rank != r)
    return em_fail(err, EM_EINPUT, "query %s, key %s and value %s must have the same rank >= 2", SHAPE(j.q), SHAPE(j.k),
                   SHAPE(j.v));
  j.L = j.q->shape[r - 2];
  j.E = j.q->shape[r - 1];
  j.S = j.k->shape[r - 2];
  j.Ev = j.v->shape[r - 1];
  if (j.k->shape[r - 1] != j.E || j.v->shape[r - 2] != j.S)
    return em_fail(err, EM_EINPUT, "query %s, key %s and value %s do not agree", SHAPE(j.q), SHAPE(j.k), SHAPE(j.v));
  j.nbd = r - 2;
  int64_t nq = 1;
  for (int d = 0; d < j.nbd; d++) {
    j.qshape[d] = j.q->shape[d];
    j.kvshape[d] = j.k->shape[d];
    nq *= j.qshape[d];
    if (j.k->shape[d] != j.v->shape[d])
      return em_fail(err, EM_EINPUT, "key %s and value %s differ in dim %d", SHAPE(j.k), SHAPE(j.v), d);
    if (j.qshape[d] == j.kvshape[d]) continue;
    if (d == j.nbd - 1 && a[7].b && j.kvshape[d] > 0 && j.qshape[d] % j.kvshape[d] == 0) continue;
    return em_fail(err, EM_EINPUT, "query %s and key %s differ in dim %d", SHAPE(j.q), SHAPE(j.k), d);
  }
  if (j.mask) {
    /* broadcast the mask to (query batch dims, L, S) */
    int64_t want[R + 2], mst[R];
    for (int d = 0; d < j.nbd; d++) want[d] = j.qshape[d];
    want[j.nbd] = j.L;
    want[j.nbd + 1] = j.S;
    int tr = j.nbd + 2, mr = j.mask->rank;
    if (mr > tr) return em_fail(err, EM_EINPUT, "attn_mask %s has a higher rank than the scores", SHAPE(j.mask));
    cstrides(mr, j.mask->shape, mst);
    for (int d = 0; d < tr; d++) {
      int im = d - (tr - mr);
      int64_t md = im >= 0 ? j.mask->shape[im] : 1;
      if (md != want[d] && md != 1)
        return em_fail(err, EM_EINPUT, "attn_mask %s does not broadcast to the scores (dim %d: %lld vs %lld)",
                       SHAPE(j.mask), d, (long long)md, (long long)want[d]);
      j.mst[d] = (im >= 0 && md != 1) ? mst[im] : 0;
    }
  }
  j.scale = a[6].present ? a[6].f : 1.0 / sqrt((double)j.E);
  j.causal = a[5].b;
  if (j.pos && (!j.causal || j.mask || j.S != j.L || j.pos->rank != 2 || j.pos->shape[1] != j.L ||
                (j.pos->shape[0] != 1 && (j.nbd < 1 || j.pos->shape[0] != j.qshape[0]))))
    return em_fail(err, EM_EINPUT, "seq_pos %s: [1 or the first batch dim, L] with is_causal, no attn_mask and S = L", SHAPE(j.pos));
  int64_t oshape[R];
  memcpy(oshape, j.q->shape, sizeof oshape);
  oshape[r - 1] = j.Ev;
  j.o = new_t(odt, r, oshape, err);
  if (!j.o) return EM_ERUN;
  if (j.o->numel > 0) par_for(c->nthreads, nq, sdpa_part, &j);
  if (j.failed) {
    em_tensor_free(j.o);
    return em_fail(err, EM_ERUN, "attention: %s", j.err);
  }
  *out = j.o;
  return EM_OK;
}

/* ---- shape ops --------------------------------------------------------------------------------------- */

static em_status op_view(rctx *c, const em_node *nd, em_tensor **out, char *err) {
  const em_tensor *x = c->vals[nd->args[0].tensor];
  const em_arg *sz = &nd->args[1];
  if (sz->n > R) return em_fail(err, EM_EINPUT, "rank %d is over %d", sz->n, R);
  int64_t shape[R], known = 1;
  int infer = -1;
  for (int i = 0; i < sz->n; i++) {
    shape[i] = ref_ev(c, &sz->ilist[i]);
    if (shape[i] == -1 && infer < 0) infer = i;
    else if (shape[i] < 0) return em_fail(err, EM_EINPUT, "size %lld is invalid", (long long)shape[i]);
    else known *= shape[i];
  }
  if (infer >= 0) {
    if (known == 0 || x->numel % known)
      return em_fail(err, EM_EINPUT, "cannot view %s with a -1 over %lld elements", SHAPE(x), (long long)known);
    shape[infer] = x->numel / known;
  } else if (known != x->numel) {
    return em_fail(err, EM_EINPUT, "cannot view %s (%lld elements) as %s", SHAPE(x), (long long)x->numel,
                   ref_fmt_shape(sz->n, shape, (char[160]){0}, 160));
  }
  *out = reshaped(x, sz->n, shape, err);
  return *out ? EM_OK : EM_ERUN;
}

static em_status op_permute(rctx *c, const em_node *nd, em_tensor **out, char *err) {
  const em_tensor *x = c->vals[nd->args[0].tensor];
  int perm[R];
  for (int i = 0; i < x->rank; i++) perm[i] = i;
  if (nd->op == EM_OP_PERMUTE) {
    const em_arg *d = &nd->args[1];
    int seen[R] = {0};
    if (d->n != x->rank) return em_fail(err, EM_EINPUT, "dims has %d entries for %s", d->n, SHAPE(x));
    for (int i = 0; i < d->n; i++) {
      if (norm_axis(ref_ev(c, &d->ilist[i]), x->rank, "dims entry", &perm[i], err)) return EM_EINPUT;
      if (seen[perm[i]]++) return em_fail(err, EM_EINPUT, "dims repeats %d", perm[i]);
    }
  } else if (nd->op == EM_OP_TRANSPOSE) {
    int d0, d1;
    if (norm_axis(ref_ev(c, &nd->args[1].i), x->rank, "dim0", &d0, err) ||
        norm_axis(ref_ev(c, &nd->args[2].i), x->rank, "dim1", &d1, err))
      return EM_EINPUT;
    perm[d0] = d1;
    perm[d1] = d0;
  } else { /* t */
    if (x->rank > 2) return em_fail(err, EM_EINPUT, "t() expects rank <= 2, got %s", SHAPE(x));
    if (x->rank == 2) perm[0] = 1, perm[1] = 0;
  }
  int64_t xst[R], st[R], shape[R];
  cstrides(x->rank, x->shape, xst);
  for (int i = 0; i < x->rank; i++) {
    shape[i] = x->shape[perm[i]];
    st[i] = xst[perm[i]];
  }
  *out = gather(x, 0, st, x->rank, shape, err);
  return *out ? EM_OK : EM_ERUN;
}

static em_status op_expand(rctx *c, const em_node *nd, em_tensor **out, char *err) {
  const em_tensor *x = c->vals[nd->args[0].tensor];
  const em_arg *sz = &nd->args[1];
  int r = sz->n, off = r - x->rank;
  if (off < 0 || r > R) return em_fail(err, EM_EINPUT, "size has %d entries for %s", r, SHAPE(x));
  int64_t xst[R], st[R], shape[R];
  cstrides(x->rank, x->shape, xst);
  for (int i = 0; i < r; i++) {
    int64_t want = ref_ev(c, &sz->ilist[i]);
    if (i < off) {
      if (want < 0) return em_fail(err, EM_EINPUT, "size %lld is invalid for a new leading dim", (long long)want);
      shape[i] = want;
      st[i] = 0;
      continue;
    }
    int64_t have = x->shape[i - off];
    if (want == -1 || want == have) {
      shape[i] = have;
      st[i] = xst[i - off];
    } else if (have == 1 && want >= 0) {
      shape[i] = want;
      st[i] = 0;
    } else {
      return em_fail(err, EM_EINPUT, "cannot expand %s to size %lld at dim %d", SHAPE(x), (long long)want, i);
    }
  }
  *out = gather(x, 0, st, r, shape, err);
  return *out ? EM_OK : EM_ERUN;
}

static em_status op_unsqueeze(rctx *c, const em_node *nd, em_tensor **out, char *err) {
  const em_tensor *x = c->vals[nd->args[0].tensor];
  int64_t shape[R];
  int rank = x->rank, ax;
  memcpy(shape, x->shape, sizeof shape);
  if (nd->op == EM_OP_UNSQUEEZE) {
    if (rank == R) return em_fail(err, EM_EINPUT, "rank would exceed %d", R);
    if (norm_axis(ref_ev(c, &nd->args[1].i), rank + 1, "dim", &ax, err)) return EM_EINPUT;
    memmove(&shape[ax + 1], &shape[ax], sizeof(int64_t) * (size_t)(rank - ax));
    shape[ax] = 1;
    rank++;
  } else if (rank > 0) {
    if (norm_axis(ref_ev(c, &nd->args[1].i), rank, "dim", &ax, err)) return EM_EINPUT;
    /* the graph decided at trace time: a symbolic dim that happens to be 1 at this binding stays */
    if (shape[ax] == 1 && c->g->values.v[nd->out].shape.rank < rank) {
      memmove(&shape[ax], &shape[ax + 1], sizeof(int64_t) * (size_t)(rank - ax - 1));
      rank--;
    }
  }
  *out = reshaped(x, rank, shape, err);
  return *out ? EM_OK : EM_ERUN;
}

/* Python slice clamping: negative bounds count from the end, then both clamp to [0, n]. */
static int64_t clamp_bound(int64_t v, int64_t n) {
  if (v < 0) v += n;
  return v < 0 ? 0 : v > n ? n : v;
}

static em_status op_slice(rctx *c, const em_node *nd, em_tensor **out, char *err) {
  const em_arg *a = nd->args;
  const em_tensor *x = c->vals[a[0].tensor];
  int ax;
  if (norm_axis(ref_ev(c, &a[1].i), x->rank, "dim", &ax, err)) return EM_EINPUT;
  int64_t n = x->shape[ax], step = ref_ev(c, &a[4].i);
  if (step <= 0) return em_fail(err, EM_EINPUT, "step %lld must be positive", (long long)step);
  int64_t start = a[2].present ? clamp_bound(ref_ev(c, &a[2].i), n) : 0;
  int64_t end = a[3].present ? clamp_bound(ref_ev(c, &a[3].i), n) : n;
  int64_t len = end > start ? (end - start + step - 1) / step : 0;
  int64_t st[R], shape[R];
  cstrides(x->rank, x->shape, st);
  memcpy(shape, x->shape, sizeof shape);
  shape[ax] = len;
  int64_t base = start * st[ax];
  st[ax] *= step;
  *out = gather(x, base, st, x->rank, shape, err);
  return *out ? EM_OK : EM_ERUN;
}

static em_status op_select(rctx *c, const em_node *nd, em_tensor **out, char *err) {
  const em_tensor *x = c->vals[nd->args[0].tensor];
  int ax;
  if (norm_axis(ref_ev(c, &nd->args[1].i), x->rank, "dim", &ax, err)) return EM_EINPUT;
  int64_t n = x->shape[ax], i = ref_ev(c, &nd->args[2].i);
  if (i < -n || i >= n)
    return em_fail(err, EM_EINPUT, "index %lld is out of range for dim %d of %s", (long long)i, ax, SHAPE(x));
  if (i < 0) i += n;
  int64_t st[R], shape[R];
  cstrides(x->rank, x->shape, st);
  int64_t base = i * st[ax];
  memcpy(shape, x->shape, sizeof shape);
  memmove(&shape[ax], &shape[ax + 1], sizeof(int64_t) * (size_t)(x->rank - ax - 1));
  memmove(&st[ax], &st[ax + 1], sizeof(int64_t) * (size_t)(x->rank - ax - 1));
  *out = gather(x, base, st, x->rank - 1, shape, err);
  return *out ? EM_OK : EM_ERUN;
}

static em_status op_cat(rctx *c, const em_node *nd, em_dtype odt, em_tensor **out, char *err) {
  const em_arg *a = nd->args;
  if (a[0].n == 0) return em_fail(err, EM_EINPUT, "tensors is empty");
  const em_tensor *f = c->vals[a[0].tlist[0]];
  int ax;
  if (norm_axis(ref_ev(c, &a[1].i), f->rank, "dim", &ax, err)) return EM_EINPUT;
  int64_t shape[R];
  memcpy(shape, f->shape, sizeof shape);
  shape[ax] = 0;
  for (int k = 0; k < a[0].n; k++) {
    const em_tensor *t = c->vals[a[0].tlist[k]];
    if (t->rank != f->rank) return em_fail(err, EM_EINPUT, "tensors[%d] %s and tensors[0] %s differ in rank", k, SHAPE(t), SHAPE(f));
    for (int i = 0; i < f->rank; i++)
      if (i != ax && t->shape[i] != f->shape[i])
        return em_fail(err, EM_EINPUT, "tensors[%d] %s does not match tensors[0] %s outside dim %d", k, SHAPE(t),
                       SHAPE(f), ax);
    shape[ax] += t->shape[ax];
  }
  em_tensor *o = new_t(odt, f->rank, shape, err);
  if (!o) return EM_ERUN;
  int64_t ost[R], at = 0;
  cstrides(o->rank, o->shape, ost);
  for (int k = 0; k < a[0].n; k++) {
    const em_tensor *t = c->vals[a[0].tlist[k]];
    int64_t tst[R];
    cstrides(t->rank, t->shape, tst);
    strided_copy(o, at * ost[ax], ost, t, 0, tst, t->rank, t->shape);
    at += t->shape[ax];
  }
  *out = o;
  return EM_OK;
}

/* Gathers rows of x along ax by integer indices; embedding is the ax = 0 case with any index shape. */
static em_status gather_rows(const em_tensor *x, int ax, const em_tensor *ix, int orank, const int64_t *oshape,
                             em_tensor **out, char *err) {
  int64_t outer = 1, n = x->shape[ax], inner = 1;
  for (int i = 0; i < ax; i++) outer *= x->shape[i];
  for (int i = ax + 1; i < x->rank; i++) inner *= x->shape[i];
  for (int64_t j = 0; j < ix->numel; j++) {
    double v = em_t_get(ix, j);
    if (!(v >= 0 && v < (double)n))
      return em_fail(err, EM_EINPUT, "index %.0f at position %lld is out of range for size %lld", v, (long long)j,
                     (long long)n);
  }
  em_tensor *o = new_t(x->dtype, orank, oshape, err);
  if (!o) return EM_ERUN;
  size_t es = x->is_f32 ? 4 : 8;
  for (int64_t p = 0; p < outer; p++)
    for (int64_t j = 0; j < ix->numel; j++) {
      int64_t row = (int64_t)em_t_get(ix, j);
      memcpy((char *)o->data + (size_t)((p * ix->numel + j) * inner) * es,
             (const char *)x->data + (size_t)((p * n + row) * inner) * es, es * (size_t)inner);
    }
  *out = o;
  return EM_OK;
}

static em_status op_index(rctx *c, const em_node *nd, em_tensor **out, char *err) {
  if (nd->op == EM_OP_EMBEDDING) {
    const em_tensor *w = c->vals[nd->args[0].tensor], *ix = c->vals[nd->args[1].tensor];
    if (w->rank != 2) return em_fail(err, EM_EINPUT, "weight must be 2-d, got %s", SHAPE(w));
    if (ix->rank + 1 > R) return em_fail(err, EM_EINPUT, "indices rank too high");
    int64_t shape[R];
    memcpy(shape, ix->shape, sizeof(int64_t) * (size_t)ix->rank);
    shape[ix->rank] = w->shape[1];
    return gather_rows(w, 0, ix, ix->rank + 1, shape, out, err);
  }
  const em_tensor *x = c->vals[nd->args[0].tensor], *ix = c->vals[nd->args[2].tensor];
  int ax;
  if (norm_axis(ref_ev(c, &nd->args[1].i), x->rank, "dim", &ax, err)) return EM_EINPUT;
  if (ix->rank > 1) return em_fail(err, EM_EINPUT, "index must be 0-d or 1-d, got %s", SHAPE(ix));
  int64_t shape[R];
  memcpy(shape, x->shape, sizeof shape);
  shape[ax] = ix->numel;
  return gather_rows(x, ax, ix, x->rank, shape, out, err);
}

static em_status op_arange(rctx *c, const em_node *nd, em_dtype odt, em_tensor **out, char *err) {
  const em_arg *a = nd->args;
  const em_arg *sa = nd->op == EM_OP_ARANGE ? NULL : &a[0], *ea = nd->op == EM_OP_ARANGE ? &a[0] : &a[1];
  double s = sa ? scalar(c, sa) : 0, e = scalar(c, ea);
  double len = ceil(e - s);
  int64_t n = len > 0 ? (int64_t)len : 0;
  em_tensor *o = new_t(odt, 1, &n, err);
  if (!o) return EM_ERUN;
  for (int64_t i = 0; i < n; i++) em_t_set(o, i, s + (double)i);
  *out = o;
  return EM_OK;
}

/* ---- one node ---------------------------------------------------------------------------------------- */

em_status ref_exec_node(rctx *c, const em_node *nd, em_tensor **out, char *err) {
  em_dtype odt = c->g->values.v[nd->out].dtype;
  switch (nd->op) {
  case EM_OP_EMBEDDING:
  case EM_OP_INDEX_SELECT: return op_index(c, nd, out, err);
  case EM_OP_MM:
  case EM_OP_BMM:
  case EM_OP_MATMUL: return op_matmul(c, nd, odt, out, err);
  case EM_OP_LINEAR: return op_linear(c, nd, odt, out, err);
  case EM_OP_ADD:
  case EM_OP_SUB:
  case EM_OP_MUL:
  case EM_OP_DIV: return op_binary(c, nd, odt, out, err);
  case EM_OP_POW:
  case EM_OP_CLAMP_MIN:
  case EM_OP_NEG:
  case EM_OP_RECIPROCAL:
  case EM_OP_RSQRT:
  case EM_OP_SQRT:
  case EM_OP_EXP:
  case EM_OP_SILU:
  case EM_OP_SIGMOID:
  case EM_OP_TANH:
  case EM_OP_COS:
  case EM_OP_SIN:
  case EM_OP_CONTIGUOUS:
  case EM_OP_CLONE:
  case EM_OP_TO_COPY: return op_unary(c, nd, odt, out, err);
  case EM_OP_MEAN:
  case EM_OP_SUM:
  case EM_OP_AMAX:
  case EM_OP_VECTOR_NORM: return op_reduce(c, nd, odt, out, err);
  case EM_OP_SOFTMAX:
  case EM_OP_SOFTMAX_INT: return op_softmax(c, nd, odt, out, err);
  case EM_OP_SDPA: return op_sdpa(c, nd, odt, out, err);
  case EM_OP_CAT: return op_cat(c, nd, odt, out, err);
  case EM_OP_SLICE: return op_slice(c, nd, out, err);
  case EM_OP_SELECT: return op_select(c, nd, out, err);
  case EM_OP_VIEW:
  case EM_OP_RESHAPE:
  case EM_OP_UNSAFE_VIEW: return op_view(c, nd, out, err);
  case EM_OP_TRANSPOSE:
  case EM_OP_T:
  case EM_OP_PERMUTE: return op_permute(c, nd, out, err);
  case EM_OP_EXPAND: return op_expand(c, nd, out, err);
  case EM_OP_UNSQUEEZE:
  case EM_OP_SQUEEZE: return op_unsqueeze(c, nd, out, err);
  case EM_OP_ARANGE:
  case EM_OP_ARANGE_START: return op_arange(c, nd, odt, out, err);
  case EM_NOPS: break;
  }
  return em_fail(err, EM_ERUN, "no reference implementation");
}

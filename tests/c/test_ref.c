/* test_ref.c — the CPU reference interpreter, host tensors and the gemm, against values worked out by hand
 * on tiny tensors; plus .npy round trips, seeded fills, symbol binding errors and a gemm speed check. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ref.h"
#include "unit.h"

/* ---- helpers ---------------------------------------------------------------------------------------- */

static em_shape shp(int rank, const int64_t *d) {
  em_shape s;
  memset(&s, 0, sizeof s);
  s.rank = rank;
  for (int i = 0; i < rank; i++) s.d[i] = em_dim_const(d[i]);
  return s;
}

static int input(em_graph *g, const char *name, em_dtype dt, int rank, const int64_t *d) {
  em_shape s = shp(rank, d);
  char err[EM_ERR_MAX];
  return em_graph_add_input(g, name, EM_V_INPUT, NULL, dt, &s, err);
}

/* Arguments of op at their schema defaults; set the ones a test needs afterwards. */
static void defaults(em_op op, em_arg *a) {
  const em_opspec *sp = em_op_spec(op);
  memset(a, 0, sizeof(em_arg) * EM_MAX_ARGS);
  for (int i = 0; i < sp->nargs; i++) em_arg_set_default(&sp->args[i], &a[i]);
}

static void aT(em_arg *a, int id) {
  a->present = 1;
  a->is_tensor = 1;
  a->tensor = id;
}
static void aI(em_arg *a, int64_t v) {
  a->present = 1;
  a->is_tensor = 0;
  a->is_float = 0;
  a->i = em_dim_const(v);
}
static void aF(em_arg *a, double v) { /* a float scalar (s, TS) or float (f, f?) */
  a->present = 1;
  a->is_tensor = 0;
  a->is_float = 1;
  a->f = v;
}
static void aB(em_arg *a, int b) {
  a->present = 1;
  a->b = b;
}
static void aD(em_arg *a, em_dtype dt) {
  a->present = 1;
  a->dtype = (int)dt;
}
static void aIL(em_arg *a, int n, ...) {
  va_list ap;
  va_start(ap, n);
  a->present = 1;
  a->n = n;
  a->ilist = malloc(sizeof(em_dim) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) a->ilist[i] = em_dim_const(va_arg(ap, int));
  va_end(ap);
}
static void aTL(em_arg *a, int n, ...) {
  va_list ap;
  va_start(ap, n);
  a->present = 1;
  a->n = n;
  a->tlist = malloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) a->tlist[i] = va_arg(ap, int);
  va_end(ap);
}

static int node(em_graph *g, em_op op, em_arg *a) {
  char err[EM_ERR_MAX];
  int v = em_graph_add_node(g, op, a, NULL, NULL, NULL, err);
  if (v < 0) fprintf(stderr, "    add_node: %s\n", err);
  return v;
}

static em_tensor *tens(em_dtype dt, int rank, const int64_t *shape, const double *v) {
  em_tensor *t = em_tensor_new(dt, rank, shape, NULL);
  for (int64_t i = 0; v && i < t->numel; i++) em_t_set(t, i, v[i]);
  return t;
}

/* Runs g with outputs = {out} at the symbols' hints; returns the status, result in *res. */
static em_status run(em_graph *g, int out, em_tensor **ins, em_ref_result *res, char *err) {
  int64_t vals[EM_MAX_SYMS];
  em_status st = em_ref_bind(g, NULL, vals, err);
  if (st) return st;
  if (out >= 0) em_graph_add_output(g, out, err);
  em_ref_opts o = {2, 0};
  return em_ref_run(g, vals, ins, &o, res, err);
}

#define CHECK_VALS(t, n, ...)                                                                  \
  do {                                                                                         \
    const double want_[] = {__VA_ARGS__};                                                      \
    CHECK((t) && (t)->numel == (n));                                                           \
    for (int64_t k_ = 0; (t) && k_ < (n) && k_ < (t)->numel; k_++) CHECK_NEAR(em_t_get((t), k_), want_[k_], 1e-6 * fmax(1.0, fabs(want_[k_]))); \
  } while (0)

#define CHECK_SHAPE(t, r, ...)                                                                 \
  do {                                                                                         \
    const int64_t ws_[] = {__VA_ARGS__};                                                       \
    CHECK((t) && (t)->rank == (r));                                                            \
    for (int k_ = 0; (t) && k_ < (r) && k_ < (t)->rank; k_++) CHECK((t)->shape[k_] == ws_[k_]); \
  } while (0)

/* ---- tensors ---------------------------------------------------------------------------------------- */

TEST(ref_bf16_rounding) {
  int64_t n = 6;
  em_tensor *t = em_tensor_new(EM_BF16, 1, &n, NULL);
  em_t_set(t, 0, 1.0 + 0x1p-8);     /* halfway between 1 and 1+2^-7: ties to even, 1 */
  em_t_set(t, 1, 1.0 + 3 * 0x1p-9); /* 0.75 ulp above 1: up to 1+2^-7 */
  em_t_set(t, 2, 1.0 + 3 * 0x1p-8); /* halfway between 1+2^-7 (odd) and 1+2^-6 (even) */
  em_t_set(t, 3, -1.0 - 0x1p-8);
  em_t_set(t, 4, 3.0e38 * 10); /* overflow */
  em_t_set(t, 5, NAN);
  CHECK(em_t_get(t, 0) == 1.0);
  CHECK(em_t_get(t, 1) == 1.0 + 0x1p-7);
  CHECK(em_t_get(t, 2) == 1.0 + 0x1p-6);
  CHECK(em_t_get(t, 3) == -1.0);
  CHECK(isinf(em_t_get(t, 4)));
  CHECK(isnan(em_t_get(t, 5)));
  em_tensor_free(t);

  em_tensor *h = em_tensor_new(EM_F16, 1, &n, NULL);
  em_t_set(h, 0, 1.0 + 0x1p-11); /* f16 ulp at 1 is 2^-10: tie to even */
  em_t_set(h, 1, 1.0 + 3 * 0x1p-12);
  em_t_set(h, 2, 70000.0); /* over f16's max 65504 */
  CHECK(em_t_get(h, 0) == 1.0);
  CHECK(em_t_get(h, 1) == 1.0 + 0x1p-10);
  CHECK(isinf(em_t_get(h, 2)));
  em_tensor_free(h);

  em_tensor *i = em_tensor_new(EM_I32, 1, &n, NULL);
  em_t_set(i, 0, 2.7);
  em_t_set(i, 1, -2.7);
  em_t_set(i, 2, 2147483648.0); /* out of range: INT32_MIN, as PyTorch's CPU cast */
  em_t_set(i, 3, NAN);
  CHECK(em_t_get(i, 0) == 2);
  CHECK(em_t_get(i, 1) == -2);
  CHECK(em_t_get(i, 2) == -2147483648.0 && em_t_get(i, 3) == -2147483648.0);
  em_tensor_free(i);

  em_tensor *b = em_tensor_new(EM_BOOL, 1, &n, NULL);
  em_t_set(b, 0, 0.5);
  em_t_set(b, 1, 0.0);
  em_t_set(b, 2, -3);
  CHECK(em_t_get(b, 0) == 1 && em_t_get(b, 1) == 0 && em_t_get(b, 2) == 1);
  em_tensor_free(b);
}

TEST(ref_tensor_new_limits) {
  char err[EM_ERR_MAX] = "";
  int64_t big[2] = {(int64_t)1 << 30, (int64_t)1 << 20};
  CHECK(em_tensor_new(EM_F32, 2, big, err) == NULL);
  CHECK(strstr(err, "a f32 tensor [1073741824, 1048576] needs 4194304.0 GiB, more than the ") != NULL);
  int64_t huge[3] = {(int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31}; /* 2^93 elements: wraps to 0 */
  CHECK(em_tensor_new(EM_F32, 3, huge, err) == NULL && strstr(err, "more than 2^63-1 elements") != NULL);
  int64_t bytes[2] = {(int64_t)1 << 31, (int64_t)1 << 31}; /* 2^62 elements fit, their 2^64 bytes do not */
  CHECK(em_tensor_new(EM_F64, 2, bytes, err) == NULL && strstr(err, "more than 2^63-1 bytes") != NULL);
  int64_t neg = -1;
  CHECK(em_tensor_new(EM_F32, 1, &neg, err) == NULL);
  em_tensor *s = em_tensor_new(EM_F64, 0, NULL, err);
  CHECK(s && s->numel == 1 && s->rank == 0);
  em_tensor *c = em_tensor_clone(s, err);
  CHECK(c && c->data != s->data);
  em_tensor_free(s);
  em_tensor_free(c);
}

TEST(ref_fill_deterministic) {
  int64_t n = 10000;
  em_tensor *a = em_tensor_new(EM_F32, 1, &n, NULL), *b = em_tensor_new(EM_F32, 1, &n, NULL);
  em_tensor *c = em_tensor_new(EM_F32, 1, &n, NULL);
  em_tensor_fill_normal(a, 42, 0, 1);
  em_tensor_fill_normal(b, 42, 0, 1);
  em_tensor_fill_normal(c, 43, 0, 1);
  CHECK(memcmp(a->data, b->data, sizeof(float) * (size_t)n) == 0);
  CHECK(memcmp(a->data, c->data, sizeof(float) * (size_t)n) != 0);
  double s = 0, s2 = 0, mn = 1e9, mx = -1e9;
  for (int64_t i = 0; i < n; i++) {
    double v = em_t_get(a, i);
    s += v;
    s2 += v * v;
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  double mean = s / n, sd = sqrt(s2 / n - mean * mean);
  CHECK_NEAR(mean, 0.0, 0.05);
  CHECK_NEAR(sd, 1.0, 0.05);
  CHECK(mn < -3 && mx > 3);
  /* a pinned value: the stream must not change between machines or releases */
  em_tensor *p = em_tensor_new(EM_F64, 1, &n, NULL);
  em_tensor_fill_normal(p, 1, 0, 1);
  double p0 = em_t_get(p, 0), p1 = em_t_get(p, 1);
  em_tensor_fill_normal(p, 1, 0, 1);
  CHECK(p0 == em_t_get(p, 0) && p1 == em_t_get(p, 1) && p0 != p1);

  em_tensor *i = em_tensor_new(EM_I64, 1, &n, NULL);
  em_tensor_fill_int(i, 7, -3, 5);
  int seen[8] = {0}, ok = 1;
  for (int64_t k = 0; k < n; k++) {
    double v = em_t_get(i, k);
    if (v < -3 || v >= 5 || v != floor(v)) ok = 0;
    else seen[(int)v + 3] = 1;
  }
  CHECK(ok);
  for (int k = 0; k < 8; k++) CHECK(seen[k]);
  em_tensor *bo = em_tensor_new(EM_BOOL, 1, &n, NULL);
  em_tensor_fill_int(bo, 7, 0, 2);
  double ones = 0;
  for (int64_t k = 0; k < n; k++) ones += em_t_get(bo, k);
  CHECK(ones > 4500 && ones < 5500);
  em_tensor *bf = em_tensor_new(EM_BF16, 1, &n, NULL);
  em_tensor_fill_normal(bf, 3, 1.0, 0.5);
  int exact = 1;
  for (int64_t k = 0; k < n; k++)
    if (em_t_get(bf, k) != em_round_bf16((float)em_t_get(bf, k))) exact = 0;
  CHECK(exact);
  em_tensor_fill_const(bf, 1.0 + 0x1p-8);
  CHECK(em_t_get(bf, 17) == 1.0);
  em_tensor_free(a);
  em_tensor_free(b);
  em_tensor_free(c);
  em_tensor_free(p);
  em_tensor_free(i);
  em_tensor_free(bo);
  em_tensor_free(bf);
}

TEST(ref_npy_roundtrip) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/emmy_test_%d.npy", (int)getpid());
  int64_t shape[3] = {2, 3, 2};
  for (int dt = 0; dt < EM_NDTYPES; dt++) {
    char err[EM_ERR_MAX] = "";
    em_tensor *t = em_tensor_new((em_dtype)dt, 3, shape, NULL);
    if (dt == EM_BOOL) em_tensor_fill_int(t, 5, 0, 2);
    else if (em_dtype_is_float((em_dtype)dt)) em_tensor_fill_normal(t, 5, 0, 3);
    else em_tensor_fill_int(t, 5, -1000000, 1000000);
    CHECK(em_tensor_save_npy(t, path, err) == EM_OK);
    em_tensor *u = em_tensor_load_npy(path, (em_dtype)dt, err);
    CHECK(u != NULL);
    if (!u) {
      fprintf(stderr, "    %s: %s\n", em_dtype_name((em_dtype)dt), err);
      em_tensor_free(t);
      continue;
    }
    CHECK(u->dtype == (em_dtype)dt && u->rank == 3 && u->shape[0] == 2 && u->shape[1] == 3 && u->shape[2] == 2);
    int same = 1;
    for (int64_t i = 0; i < t->numel; i++)
      if (em_t_get(t, i) != em_t_get(u, i)) same = 0;
    CHECK(same);
    em_tensor_free(u);
    em_tensor_free(t);
  }
  /* conversion on load: f32 file into bf16 rounds; 0-d and 1-d shapes */
  {
    char err[EM_ERR_MAX];
    int64_t one = 1;
    em_tensor *t = em_tensor_new(EM_F32, 1, &one, NULL);
    em_t_set(t, 0, 1.0 + 0x1p-8 + 0x1p-12);
    em_tensor_save_npy(t, path, err);
    em_tensor *u = em_tensor_load_npy(path, EM_BF16, err);
    CHECK(u && em_t_get(u, 0) == 1.0 + 0x1p-7);
    CHECK(u && u->rank == 1 && u->shape[0] == 1);
    em_tensor_free(u);
    em_tensor_free(t);
    em_tensor *s = em_tensor_new(EM_I64, 0, NULL, NULL);
    em_t_set(s, 0, -5);
    em_tensor_save_npy(s, path, err);
    u = em_tensor_load_npy(path, EM_F32, err);
    CHECK(u && u->rank == 0 && em_t_get(u, 0) == -5);
    em_tensor_free(u);
    em_tensor_free(s);
  }
  /* the header is what numpy writes: 64-byte aligned, a 'shape' tuple */
  {
    char err[EM_ERR_MAX];
    em_tensor *t = em_tensor_new(EM_F32, 2, shape, NULL);
    em_tensor_save_npy(t, path, err);
    FILE *f = fopen(path, "rb");
    unsigned char h[128];
    size_t n = fread(h, 1, sizeof h, f);
    fclose(f);
    CHECK(n == 128 && h[6] == 1 && h[7] == 0 && (10 + h[8] + 256 * h[9]) % 64 == 0);
    CHECK(memmem(h, n, "'shape': (2, 3)", 15) != NULL);
    CHECK(memmem(h, n, "'descr': '<f4'", 14) != NULL);
    em_tensor_free(t);
  }
  remove(path);
}

TEST(ref_npy_bad_file) {
  char path[64], err[EM_ERR_MAX] = "";
  snprintf(path, sizeof path, "/tmp/emmy_bad_%d.npy", (int)getpid());
  FILE *f = fopen(path, "wb");
  fputs("this is not numpy", f);
  fclose(f);
  CHECK(em_tensor_load_npy(path, EM_F32, err) == NULL);
  CHECK(strstr(err, path) != NULL && strstr(err, "magic") != NULL);
  CHECK(strchr(err, '\n') == NULL);
  /* a valid header with a dtype emmy does not read */
  const char *hdr = "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }";
  f = fopen(path, "wb");
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)strlen(hdr), 0};
  fwrite(pre, 1, 10, f);
  fputs(hdr, f);
  fclose(f);
  CHECK(em_tensor_load_npy(path, EM_F32, err) == NULL);
  CHECK(strstr(err, "'>f4'") != NULL);
  /* truncated data */
  int64_t n = 100;
  em_tensor *t = em_tensor_new(EM_F32, 1, &n, NULL);
  em_tensor_save_npy(t, path, err);
  em_tensor_free(t);
  CHECK(truncate(path, 200) == 0);
  CHECK(em_tensor_load_npy(path, EM_F32, err) == NULL);
  CHECK(strstr(err, "shorter") != NULL);
  remove(path);
  CHECK(em_tensor_load_npy("/nonexistent/x.npy", EM_F32, err) == NULL);
  CHECK(strstr(err, "/nonexistent/x.npy") != NULL);
}

TEST(ref_tolerance_compare) {
  double rt, at;
  em_tolerance(EM_BF16, &rt, &at);
  CHECK(rt > 0x1p-8 && rt < 0.05);
  em_tolerance(EM_F32, &rt, &at);
  CHECK(rt <= 1e-4 && rt > 1e-7);
  em_tolerance(EM_I64, &rt, &at);
  CHECK(rt == 0 && at == 0);
  int64_t n = 4;
  em_tensor *a = tens(EM_F32, 1, &n, (double[]){1, 2, NAN, INFINITY});
  em_tensor *b = tens(EM_F32, 1, &n, (double[]){1, 2.5, NAN, INFINITY});
  em_cmp c = em_tensor_compare(a, b, 1e-3, 1e-3);
  CHECK(c.shape_ok && c.mismatches == 1 && c.numel == 4);
  CHECK_NEAR(c.max_abs, 0.5, 1e-12);
  CHECK_NEAR(c.max_rel, 0.2, 1e-12);
  em_t_set(b, 2, 0); /* NaN against a number mismatches whatever the tolerance */
  c = em_tensor_compare(a, b, 1, 1);
  CHECK(c.mismatches == 1);
  int64_t n3 = 3;
  em_tensor *d = em_tensor_new(EM_F32, 1, &n3, NULL);
  c = em_tensor_compare(a, d, 1, 1);
  CHECK(!c.shape_ok && c.mismatches > 0);
  em_tensor_free(a);
  em_tensor_free(b);
  em_tensor_free(d);
}

/* ---- gemm ------------------------------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

TEST(ref_gemm_matches_naive) {
  /* odd sizes exercise every edge tile; strided leading dimensions too */
  int64_t M = 13, N = 29, K = 301, lda = K + 3, ldb = K + 1, ldc = N + 5;
  double *A = malloc(sizeof(double) * (size_t)(M * lda)), *B = malloc(sizeof(double) * (size_t)(N * ldb));
  double *C = malloc(sizeof(double) * (size_t)(M * ldc));
  for (int64_t i = 0; i < M * lda; i++) A[i] = sin(0.7 * (double)i);
  for (int64_t i = 0; i < N * ldb; i++) B[i] = cos(0.3 * (double)i);
  for (int64_t i = 0; i < M * ldc; i++) C[i] = 12345;
  for (int th = 1; th <= 3; th++) {
    em_gemm_nt(M, N, K, A, lda, B, ldb, C, ldc, th);
    double md = 0;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += A[i * lda + k] * B[j * ldb + k];
        md = fmax(md, fabs(s - C[i * ldc + j]));
      }
    CHECK(md < 1e-12);
    CHECK(C[N] == 12345); /* padding between rows untouched */
  }
  free(A);
  free(B);
  free(C);
}

TEST(ref_gemm_speed) {
  int64_t M = 512, N = 2048, K = 1024;
  double *A = malloc(sizeof(double) * (size_t)(M * K)), *B = malloc(sizeof(double) * (size_t)(N * K));
  double *C = malloc(sizeof(double) * (size_t)(M * N));
  for (int64_t i = 0; i < M * K; i++) A[i] = (double)(i % 7) - 3;
  for (int64_t i = 0; i < N * K; i++) B[i] = (double)(i % 5) - 2;
  double t0 = now_s();
  em_gemm_nt(M, N, K, A, K, B, K, C, N, 0);
  double dt = now_s() - t0;
  fprintf(stderr, "    em_gemm_nt 512x2048x1024: %.3f s\n", dt);
  CHECK(dt < 2.0);
  /* integer-valued operands: the result is exact */
  int ok = 1;
  for (int64_t i = 0; i < M; i += 97)
    for (int64_t j = 0; j < N; j += 301) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += A[i * K + k] * B[j * K + k];
      if (s != C[i * N + j]) ok = 0;
    }
  CHECK(ok);
  free(A);
  free(B);
  free(C);
}

/* ---- ops -------------------------------------------------------------------------------------------- */

TEST(ref_op_mm_bmm_matmul) {
  em_graph *g = em_graph_new("mm");
  int a = input(g, "a", EM_F32, 2, (int64_t[]){2, 3}), b = input(g, "b", EM_F32, 2, (int64_t[]){3, 2});
  int v1 = input(g, "v1", EM_F32, 1, (int64_t[]){3}), ba = input(g, "ba", EM_F32, 3, (int64_t[]){2, 1, 2});
  int bb = input(g, "bb", EM_F32, 3, (int64_t[]){2, 2, 1});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_MM, x), aT(&x[0], a), aT(&x[1], b);
  int mm = node(g, EM_OP_MM, x);
  defaults(EM_OP_BMM, x), aT(&x[0], ba), aT(&x[1], bb);
  int bmm = node(g, EM_OP_BMM, x);
  defaults(EM_OP_MATMUL, x), aT(&x[0], a), aT(&x[1], v1); /* [2,3] @ [3] -> [2] */
  int mv = node(g, EM_OP_MATMUL, x);
  defaults(EM_OP_MATMUL, x), aT(&x[0], v1), aT(&x[1], b); /* [3] @ [3,2] -> [2] */
  int vm = node(g, EM_OP_MATMUL, x);
  defaults(EM_OP_MATMUL, x), aT(&x[0], v1), aT(&x[1], v1); /* dot -> [] */
  int vv = node(g, EM_OP_MATMUL, x);
  defaults(EM_OP_MATMUL, x), aT(&x[0], bb), aT(&x[1], ba); /* [2,2,1] @ [2,1,2] -> [2,2,2] */
  int bm = node(g, EM_OP_MATMUL, x);
  em_graph_add_output(g, mm, NULL);
  em_graph_add_output(g, bmm, NULL);
  em_graph_add_output(g, mv, NULL);
  em_graph_add_output(g, vm, NULL);
  em_graph_add_output(g, vv, NULL);
  em_graph_add_output(g, bm, NULL);
  em_tensor *ins[5] = {tens(EM_F32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}),
                       tens(EM_F32, 2, (int64_t[]){3, 2}, (double[]){7, 8, 9, 10, 11, 12}),
                       tens(EM_F32, 1, (int64_t[]){3}, (double[]){1, -1, 2}),
                       tens(EM_F32, 3, (int64_t[]){2, 1, 2}, (double[]){1, 2, 3, 4}),
                       tens(EM_F32, 3, (int64_t[]){2, 2, 1}, (double[]){5, 6, 7, 8})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, -1, ins, &r, err) == EM_OK);
  CHECK_SHAPE(r.vals[mm], 2, 2, 2);
  CHECK_VALS(r.vals[mm], 4, 58, 64, 139, 154);
  CHECK_SHAPE(r.vals[bmm], 3, 2, 1, 1);
  CHECK_VALS(r.vals[bmm], 2, 1 * 5 + 2 * 6, 3 * 7 + 4 * 8);
  CHECK_SHAPE(r.vals[mv], 1, 2);
  CHECK_VALS(r.vals[mv], 2, 1 - 2 + 6, 4 - 5 + 12);
  CHECK_VALS(r.vals[vm], 2, 7 - 9 + 22, 8 - 10 + 24);
  CHECK(r.vals[vv] && r.vals[vv]->rank == 0);
  CHECK_VALS(r.vals[vv], 1, 6);
  CHECK_SHAPE(r.vals[bm], 3, 2, 2, 2);
  CHECK_VALS(r.vals[bm], 8, 5, 10, 6, 12, 21, 28, 24, 32);
  em_ref_result_free(&r);
  for (int i = 0; i < 5; i++) em_tensor_free(ins[i]);
  em_graph_free(g);
}

TEST(ref_op_matmul_broadcast_batch) {
  /* [2,1,2,3] @ [3,3,2] -> [2,3,2,2]: batch dims broadcast both ways */
  em_graph *g = em_graph_new("bmm");
  int a = input(g, "a", EM_F64, 4, (int64_t[]){2, 1, 2, 3}), b = input(g, "b", EM_F64, 3, (int64_t[]){3, 3, 2});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_MATMUL, x), aT(&x[0], a), aT(&x[1], b);
  int m = node(g, EM_OP_MATMUL, x);
  em_tensor *ins[2] = {tens(EM_F64, 4, (int64_t[]){2, 1, 2, 3}, NULL), tens(EM_F64, 3, (int64_t[]){3, 3, 2}, NULL)};
  em_tensor_fill_normal(ins[0], 1, 0, 1);
  em_tensor_fill_normal(ins[1], 2, 0, 1);
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, m, ins, &r, err) == EM_OK);
  em_tensor *o = r.vals[m];
  CHECK_SHAPE(o, 4, 2, 3, 2, 2);
  double md = 0;
  for (int p = 0; p < 2; p++)
    for (int q = 0; q < 3; q++)
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
          double s = 0;
          for (int k = 0; k < 3; k++) s += em_t_get(ins[0], (p * 2 + i) * 3 + k) * em_t_get(ins[1], (q * 3 + k) * 2 + j);
          md = fmax(md, fabs(s - em_t_get(o, ((p * 3 + q) * 2 + i) * 2 + j)));
        }
  CHECK(md < 1e-12);
  em_ref_result_free(&r);
  em_tensor_free(ins[0]);
  em_tensor_free(ins[1]);
  em_graph_free(g);
}

TEST(ref_op_linear) {
  em_graph *g = em_graph_new("linear");
  int xi = input(g, "x", EM_BF16, 3, (int64_t[]){1, 2, 3}), w = input(g, "w", EM_BF16, 2, (int64_t[]){2, 3});
  int b = input(g, "b", EM_BF16, 1, (int64_t[]){2});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_LINEAR, x), aT(&x[0], xi), aT(&x[1], w), aT(&x[2], b);
  int y = node(g, EM_OP_LINEAR, x);
  defaults(EM_OP_LINEAR, x), aT(&x[0], xi), aT(&x[1], w);
  int y2 = node(g, EM_OP_LINEAR, x);
  em_graph_add_output(g, y2, NULL);
  em_tensor *ins[3] = {tens(EM_BF16, 3, (int64_t[]){1, 2, 3}, (double[]){1, 2, 3, 4, 5, 6}),
                       tens(EM_BF16, 2, (int64_t[]){2, 3}, (double[]){1, 0, -1, 2, 1, 0}),
                       tens(EM_BF16, 1, (int64_t[]){2}, (double[]){0.5, -1})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, y, ins, &r, err) == EM_OK);
  CHECK_SHAPE(r.vals[y], 3, 1, 2, 2);
  CHECK_VALS(r.vals[y], 4, -1.5, 3, -1.5, 12);
  CHECK_VALS(r.vals[y2], 4, -2, 4, -2, 13);
  em_ref_result_free(&r);
  /* the sum is rounded to bf16 once: 256 + 1 + 0.5 -> 257.5 is not bf16 (ulp 2 at 256): 258 */
  em_t_set(ins[0], 0, 256), em_t_set(ins[0], 1, 1), em_t_set(ins[0], 2, 0.5);
  em_t_set(ins[1], 0, 1), em_t_set(ins[1], 1, 1), em_t_set(ins[1], 2, 1);
  em_t_set(ins[2], 0, 0);
  CHECK(run(g, -1, ins, &r, err) == EM_OK);
  CHECK(em_t_get(r.vals[y], 0) == 258);
  em_ref_result_free(&r);
  for (int i = 0; i < 3; i++) em_tensor_free(ins[i]);
  em_graph_free(g);
}

TEST(ref_op_binary_broadcast) {
  em_graph *g = em_graph_new("bin");
  int a = input(g, "a", EM_F32, 2, (int64_t[]){2, 3}), b = input(g, "b", EM_F32, 1, (int64_t[]){3});
  int c = input(g, "c", EM_F32, 2, (int64_t[]){2, 1}), n = input(g, "n", EM_I64, 1, (int64_t[]){3});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_ADD, x), aT(&x[0], a), aT(&x[1], b), aI(&x[2], 2); /* a + 2*b */
  int add = node(g, EM_OP_ADD, x);
  defaults(EM_OP_SUB, x), aT(&x[0], a), aT(&x[1], c); /* a - c, c broadcast along dim 1 */
  int sub = node(g, EM_OP_SUB, x);
  defaults(EM_OP_MUL, x), aT(&x[0], c), aT(&x[1], b); /* [2,1] * [3] -> [2,3] */
  int mul = node(g, EM_OP_MUL, x);
  defaults(EM_OP_DIV, x), aT(&x[0], a), aF(&x[1], 4.0);
  int dv = node(g, EM_OP_DIV, x);
  defaults(EM_OP_ADD, x), aT(&x[0], n), aF(&x[1], 0.5); /* int + float scalar -> f32 */
  int addf = node(g, EM_OP_ADD, x);
  defaults(EM_OP_DIV, x), aT(&x[0], n), aI(&x[1], 2); /* int / int -> true division, f32 */
  int idiv = node(g, EM_OP_DIV, x);
  defaults(EM_OP_MUL, x), aT(&x[0], n), aI(&x[1], 3); /* stays i64 */
  int imul = node(g, EM_OP_MUL, x);
  defaults(EM_OP_SUB, x), aT(&x[0], a), aF(&x[1], 1.5), aI(&x[2], 2); /* a - 2*1.5 */
  int subs = node(g, EM_OP_SUB, x);
  int outs[] = {add, sub, mul, dv, addf, idiv, imul, subs};
  for (int i = 0; i < 8; i++) em_graph_add_output(g, outs[i], NULL);
  CHECK(g->values.v[addf].dtype == EM_F32 && g->values.v[idiv].dtype == EM_F32 && g->values.v[imul].dtype == EM_I64);
  em_tensor *ins[4] = {tens(EM_F32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}),
                       tens(EM_F32, 1, (int64_t[]){3}, (double[]){10, 20, 30}),
                       tens(EM_F32, 2, (int64_t[]){2, 1}, (double[]){1, 2}),
                       tens(EM_I64, 1, (int64_t[]){3}, (double[]){1, 2, 3})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, -1, ins, &r, err) == EM_OK);
  CHECK_VALS(r.vals[add], 6, 21, 42, 63, 24, 45, 66);
  CHECK_VALS(r.vals[sub], 6, 0, 1, 2, 2, 3, 4);
  CHECK_SHAPE(r.vals[mul], 2, 2, 3);
  CHECK_VALS(r.vals[mul], 6, 10, 20, 30, 20, 40, 60);
  CHECK_VALS(r.vals[dv], 6, 0.25, 0.5, 0.75, 1, 1.25, 1.5);
  CHECK_VALS(r.vals[addf], 3, 1.5, 2.5, 3.5);
  CHECK_VALS(r.vals[idiv], 3, 0.5, 1, 1.5);
  CHECK_VALS(r.vals[imul], 3, 3, 6, 9);
  CHECK_VALS(r.vals[subs], 6, -2, -1, 0, 1, 2, 3);
  CHECK(r.vals[imul]->dtype == EM_I64);
  em_ref_result_free(&r);
  for (int i = 0; i < 4; i++) em_tensor_free(ins[i]);
  em_graph_free(g);
}

TEST(ref_op_binary_bf16) {
  /* bf16 results are rounded once: 1 + 2^-8 ties to 1; 1 + 3·2^-9 goes to 1 + 2^-7 */
  em_graph *g = em_graph_new("binbf");
  int a = input(g, "a", EM_BF16, 1, (int64_t[]){2}), b = input(g, "b", EM_BF16, 1, (int64_t[]){2});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_ADD, x), aT(&x[0], a), aT(&x[1], b);
  int add = node(g, EM_OP_ADD, x);
  em_tensor *ins[2] = {tens(EM_BF16, 1, (int64_t[]){2}, (double[]){1, 1}),
                       tens(EM_BF16, 1, (int64_t[]){2}, (double[]){0x1p-8, 3 * 0x1p-9})};
  CHECK(em_t_get(ins[1], 1) == 3 * 0x1p-9);
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, add, ins, &r, err) == EM_OK);
  CHECK(em_t_get(r.vals[add], 0) == 1.0);
  CHECK(em_t_get(r.vals[add], 1) == 1.0 + 0x1p-7);
  em_ref_result_free(&r);
  em_tensor_free(ins[0]);
  em_tensor_free(ins[1]);
  em_graph_free(g);
}

TEST(ref_op_unary) {
  em_graph *g = em_graph_new("unary");
  int a = input(g, "a", EM_F32, 1, (int64_t[]){3});
  em_op ops[] = {EM_OP_NEG, EM_OP_RECIPROCAL, EM_OP_RSQRT, EM_OP_SQRT, EM_OP_EXP, EM_OP_SILU,
                 EM_OP_SIGMOID, EM_OP_TANH, EM_OP_COS, EM_OP_SIN, EM_OP_CONTIGUOUS, EM_OP_CLONE};
  int ids[12];
  em_arg x[EM_MAX_ARGS];
  for (int i = 0; i < 12; i++) {
    defaults(ops[i], x), aT(&x[0], a);
    ids[i] = node(g, ops[i], x);
    em_graph_add_output(g, ids[i], NULL);
  }
  defaults(EM_OP_POW, x), aT(&x[0], a), aI(&x[1], 2);
  int p2 = node(g, EM_OP_POW, x);
  defaults(EM_OP_POW, x), aT(&x[0], a), aF(&x[1], 0.5);
  int ph = node(g, EM_OP_POW, x);
  defaults(EM_OP_CLAMP_MIN, x), aT(&x[0], a), aF(&x[1], 1.5);
  int cm = node(g, EM_OP_CLAMP_MIN, x);
  em_graph_add_output(g, p2, NULL);
  em_graph_add_output(g, ph, NULL);
  em_graph_add_output(g, cm, NULL);
  em_tensor *in = tens(EM_F32, 1, (int64_t[]){3}, (double[]){4, 1, 0.25});
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, -1, &in, &r, err) == EM_OK);
  em_tensor **v = r.vals;
  CHECK_VALS(v[ids[0]], 3, -4, -1, -0.25);
  CHECK_VALS(v[ids[1]], 3, 0.25, 1, 4);
  CHECK_VALS(v[ids[2]], 3, 0.5, 1, 2);
  CHECK_VALS(v[ids[3]], 3, 2, 1, 0.5);
  CHECK_VALS(v[ids[4]], 3, 54.59815003, 2.718281828, 1.284025417);
  CHECK_VALS(v[ids[5]], 3, 4 / (1 + exp(-4.0)), 0.7310585786, 0.25 / (1 + exp(-0.25)));
  CHECK_VALS(v[ids[6]], 3, 0.9820137900, 0.7310585786, 0.5621765009);
  CHECK_VALS(v[ids[7]], 3, 0.9993292997, 0.7615941560, 0.2449186624);
  CHECK_VALS(v[ids[8]], 3, -0.6536436209, 0.5403023059, 0.9689124217);
  CHECK_VALS(v[ids[9]], 3, -0.7568024953, 0.8414709848, 0.2474039593);
  CHECK_VALS(v[ids[10]], 3, 4, 1, 0.25);
  CHECK_VALS(v[ids[11]], 3, 4, 1, 0.25);
  CHECK_VALS(v[p2], 3, 16, 1, 0.0625);
  CHECK_VALS(v[ph], 3, 2, 1, 0.5);
  CHECK_VALS(v[cm], 3, 4, 1.5, 1.5);
  /* f32 storage: the result is the f32 rounding of the exact value */
  CHECK(em_t_get(v[ids[4]], 1) == (double)(float)exp(1.0));
  em_ref_result_free(&r);
  em_tensor_free(in);
  em_graph_free(g);
}

TEST(ref_op_reductions) {
  em_graph *g = em_graph_new("red");
  int a = input(g, "a", EM_F32, 2, (int64_t[]){2, 3}), n = input(g, "n", EM_I32, 1, (int64_t[]){3});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_MEAN, x), aT(&x[0], a), aIL(&x[1], 1, 1), aB(&x[2], 1);
  int mean = node(g, EM_OP_MEAN, x);
  defaults(EM_OP_SUM, x), aT(&x[0], a), aIL(&x[1], 1, 0);
  int sum0 = node(g, EM_OP_SUM, x);
  defaults(EM_OP_AMAX, x), aT(&x[0], a), aIL(&x[1], 1, -1);
  int amax = node(g, EM_OP_AMAX, x);
  defaults(EM_OP_SUM, x), aT(&x[0], a); /* dim None: everything */
  int sall = node(g, EM_OP_SUM, x);
  defaults(EM_OP_MEAN, x), aT(&x[0], a), aIL(&x[1], 2, 0, 1), aB(&x[2], 1);
  int mall = node(g, EM_OP_MEAN, x);
  defaults(EM_OP_AMAX, x), aT(&x[0], a), aIL(&x[1], 1, 0), aB(&x[2], 1);
  int amk = node(g, EM_OP_AMAX, x);
  defaults(EM_OP_SUM, x), aT(&x[0], n), aIL(&x[1], 1, 0);
  int isum = node(g, EM_OP_SUM, x);
  defaults(EM_OP_MEAN, x), aT(&x[0], a), aIL(&x[1], 1, 1), aD(&x[3], EM_F64);
  int m64 = node(g, EM_OP_MEAN, x);
  int outs[] = {mean, sum0, amax, sall, mall, amk, isum, m64};
  for (int i = 0; i < 8; i++) em_graph_add_output(g, outs[i], NULL);
  em_tensor *ins[2] = {tens(EM_F32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, -6}),
                       tens(EM_I32, 1, (int64_t[]){3}, (double[]){7, 8, 9})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, -1, ins, &r, err) == EM_OK);
  CHECK_SHAPE(r.vals[mean], 2, 2, 1);
  CHECK_VALS(r.vals[mean], 2, 2, 1);
  CHECK_SHAPE(r.vals[sum0], 1, 3);
  CHECK_VALS(r.vals[sum0], 3, 5, 7, -3);
  CHECK_SHAPE(r.vals[amax], 1, 2);
  CHECK_VALS(r.vals[amax], 2, 3, 5);
  CHECK(r.vals[sall]->rank == 0);
  CHECK_VALS(r.vals[sall], 1, 9);
  CHECK_SHAPE(r.vals[mall], 2, 1, 1);
  CHECK_VALS(r.vals[mall], 1, 1.5);
  CHECK_SHAPE(r.vals[amk], 2, 1, 3);
  CHECK_VALS(r.vals[amk], 3, 4, 5, 3);
  CHECK(r.vals[isum]->dtype == EM_I64);
  CHECK_VALS(r.vals[isum], 1, 24);
  CHECK(r.vals[m64]->dtype == EM_F64);
  CHECK_VALS(r.vals[m64], 2, 2, 1);
  em_ref_result_free(&r);
  em_tensor_free(ins[0]);
  em_tensor_free(ins[1]);
  em_graph_free(g);
}

TEST(ref_op_softmax) {
  em_graph *g = em_graph_new("softmax");
  int a = input(g, "a", EM_F32, 2, (int64_t[]){2, 3}), h = input(g, "h", EM_BF16, 1, (int64_t[]){3});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_SOFTMAX, x), aT(&x[0], a), aI(&x[1], -1), aB(&x[2], 0);
  int s1 = node(g, EM_OP_SOFTMAX, x);
  defaults(EM_OP_SOFTMAX_INT, x), aT(&x[0], a), aI(&x[1], 0);
  int s0 = node(g, EM_OP_SOFTMAX_INT, x);
  defaults(EM_OP_SOFTMAX, x), aT(&x[0], h), aI(&x[1], 0), aB(&x[2], 1); /* half_to_float */
  int sh = node(g, EM_OP_SOFTMAX, x);
  defaults(EM_OP_SOFTMAX_INT, x), aT(&x[0], h), aI(&x[1], 0), aD(&x[2], EM_F32);
  int sd = node(g, EM_OP_SOFTMAX_INT, x);
  int outs[] = {s1, s0, sh, sd};
  for (int i = 0; i < 4; i++) em_graph_add_output(g, outs[i], NULL);
  em_tensor *ins[2] = {tens(EM_F32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 0, 0, -INFINITY}),
                       tens(EM_BF16, 1, (int64_t[]){3}, (double[]){1, 2, 3})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, -1, ins, &r, err) == EM_OK);
  CHECK_VALS(r.vals[s1], 6, 0.09003057317, 0.2447284711, 0.6652409558, 0.5, 0.5, 0);
  /* along dim 0: columns (1,0), (2,0), (3,-inf) */
  CHECK_VALS(r.vals[s0], 6, 0.7310585786, 0.8807970780, 1, 0.2689414214, 0.1192029220, 0);
  CHECK(r.vals[sh]->dtype == EM_F32 && r.vals[sd]->dtype == EM_F32);
  CHECK_VALS(r.vals[sh], 3, 0.09003057317, 0.2447284711, 0.6652409558);
  CHECK_VALS(r.vals[sd], 3, 0.09003057317, 0.2447284711, 0.6652409558);
  em_ref_result_free(&r);
  em_tensor_free(ins[0]);
  em_tensor_free(ins[1]);
  em_graph_free(g);
}

/* Builds q, k, v inputs [1, H, L, E] etc. and one SDPA node; returns the node's value id. */
static int sdpa_graph(em_graph *g, int64_t hq, int64_t hk, int64_t L, int64_t S, int64_t E, int mask_kind,
                      int causal, int gqa) {
  int q = input(g, "q", EM_F32, 4, (int64_t[]){1, hq, L, E}), k = input(g, "k", EM_F32, 4, (int64_t[]){1, hk, S, E});
  int v = input(g, "v", EM_F32, 4, (int64_t[]){1, hk, S, E});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_SDPA, x), aT(&x[0], q), aT(&x[1], k), aT(&x[2], v);
  if (mask_kind) aT(&x[3], input(g, "m", mask_kind == 1 ? EM_BOOL : EM_F32, 2, (int64_t[]){L, S}));
  aB(&x[5], causal);
  aB(&x[7], gqa);
  return node(g, EM_OP_SDPA, x);
}

TEST(ref_op_sdpa_causal) {
  /* L = S = 2, E = 1, scale 1: row 0 sees only key 0; row 1 weighs (e^1, e^2) over values (10, 20) */
  em_graph *g = em_graph_new("sdpa");
  int o = sdpa_graph(g, 1, 1, 2, 2, 1, 0, 1, 0);
  int64_t s[4] = {1, 1, 2, 1};
  em_tensor *ins[3] = {tens(EM_F32, 4, s, (double[]){1, 1}), tens(EM_F32, 4, s, (double[]){1, 2}),
                       tens(EM_F32, 4, s, (double[]){10, 20})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, o, ins, &r, err) == EM_OK);
  double w = exp(1.0) / (exp(1.0) + exp(2.0));
  CHECK_SHAPE(r.vals[o], 4, 1, 1, 2, 1);
  CHECK_VALS(r.vals[o], 2, 10, 10 * w + 20 * (1 - w));
  em_ref_result_free(&r);
  for (int i = 0; i < 3; i++) em_tensor_free(ins[i]);
  em_graph_free(g);

  /* not causal, E = 4: the default scale is 1/sqrt(4); scores 0.5·(q·k) */
  g = em_graph_new("sdpa2");
  o = sdpa_graph(g, 1, 1, 1, 2, 4, 0, 0, 0);
  int64_t sq[4] = {1, 1, 1, 4}, sk[4] = {1, 1, 2, 4};
  em_tensor *in2[3] = {tens(EM_F32, 4, sq, (double[]){1, 1, 0, 0}), tens(EM_F32, 4, sk, (double[]){1, 0, 0, 0, 1, 1, 0, 0}),
                       tens(EM_F32, 4, sk, (double[]){1, 2, 3, 4, 5, 6, 7, 8})};
  CHECK(run(g, o, in2, &r, err) == EM_OK);
  w = exp(0.5) / (exp(0.5) + exp(1.0));
  CHECK_VALS(r.vals[o], 4, 1 * w + 5 * (1 - w), 2 * w + 6 * (1 - w), 3 * w + 7 * (1 - w), 4 * w + 8 * (1 - w));
  em_ref_result_free(&r);
  for (int i = 0; i < 3; i++) em_tensor_free(in2[i]);
  em_graph_free(g);
}

TEST(ref_op_sdpa_causal_rectangular) {
  /* L = 2 < S = 3: PyTorch's causal mask is tril(ones(L, S)), top-left aligned: row i sees keys 0..i */
  em_graph *g = em_graph_new("sdpa");
  int o = sdpa_graph(g, 1, 1, 2, 3, 1, 0, 1, 0);
  em_tensor *ins[3] = {tens(EM_F32, 4, (int64_t[]){1, 1, 2, 1}, (double[]){0, 0}),
                       tens(EM_F32, 4, (int64_t[]){1, 1, 3, 1}, (double[]){0, 0, 0}),
                       tens(EM_F32, 4, (int64_t[]){1, 1, 3, 1}, (double[]){3, 6, 30})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, o, ins, &r, err) == EM_OK);
  CHECK_VALS(r.vals[o], 2, 3, 4.5);
  em_ref_result_free(&r);
  for (int i = 0; i < 3; i++) em_tensor_free(ins[i]);
  em_graph_free(g);
}

TEST(ref_op_sdpa_gqa) {
  /* 4 query heads over 2 kv heads, L = S = 1: each output is its kv head's value; head h uses kv h/2 */
  em_graph *g = em_graph_new("gqa");
  int o = sdpa_graph(g, 4, 2, 1, 1, 1, 0, 0, 1);
  em_tensor *ins[3] = {tens(EM_F32, 4, (int64_t[]){1, 4, 1, 1}, (double[]){1, 2, 3, 4}),
                       tens(EM_F32, 4, (int64_t[]){1, 2, 1, 1}, (double[]){1, 1}),
                       tens(EM_F32, 4, (int64_t[]){1, 2, 1, 1}, (double[]){100, 200})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, o, ins, &r, err) == EM_OK);
  CHECK_SHAPE(r.vals[o], 4, 1, 4, 1, 1);
  CHECK_VALS(r.vals[o], 4, 100, 100, 200, 200);
  em_ref_result_free(&r);
  for (int i = 0; i < 3; i++) em_tensor_free(ins[i]);
  em_graph_free(g);

  /* with S = 2 and distinct keys per kv head the grouping shows in the weights too */
  g = em_graph_new("gqa2");
  o = sdpa_graph(g, 2, 1, 1, 2, 1, 0, 0, 1);
  em_tensor *in2[3] = {tens(EM_F32, 4, (int64_t[]){1, 2, 1, 1}, (double[]){0, 1}),
                       tens(EM_F32, 4, (int64_t[]){1, 1, 2, 1}, (double[]){0, 1}),
                       tens(EM_F32, 4, (int64_t[]){1, 1, 2, 1}, (double[]){0, 1})};
  CHECK(run(g, o, in2, &r, err) == EM_OK);
  CHECK_VALS(r.vals[o], 2, 0.5, exp(1.0) / (1 + exp(1.0)));
  em_ref_result_free(&r);
  for (int i = 0; i < 3; i++) em_tensor_free(in2[i]);
  em_graph_free(g);
}

TEST(ref_op_sdpa_masks) {
  /* q = 0: uniform scores; a bool mask keeps key 0 only; a float mask of (0, ln 3) weighs (1/4, 3/4) */
  em_tensor *qkv[3] = {tens(EM_F32, 4, (int64_t[]){1, 1, 1, 1}, (double[]){0}),
                       tens(EM_F32, 4, (int64_t[]){1, 1, 2, 1}, (double[]){1, 2}),
                       tens(EM_F32, 4, (int64_t[]){1, 1, 2, 1}, (double[]){4, 8})};
  for (int kind = 1; kind <= 2; kind++) {
    em_graph *g = em_graph_new("mask");
    int o = sdpa_graph(g, 1, 1, 1, 2, 1, kind, 0, 0);
    em_tensor *m = kind == 1 ? tens(EM_BOOL, 2, (int64_t[]){1, 2}, (double[]){1, 0})
                             : tens(EM_F32, 2, (int64_t[]){1, 2}, (double[]){0, log(3.0)});
    em_tensor *ins[4] = {qkv[0], qkv[1], qkv[2], m};
    em_ref_result r;
    char err[EM_ERR_MAX];
    CHECK(run(g, o, ins, &r, err) == EM_OK);
    if (kind == 1) CHECK_VALS(r.vals[o], 1, 4);
    else CHECK_VALS(r.vals[o], 1, 4 * 0.25 + 8 * 0.75);
    em_ref_result_free(&r);
    em_tensor_free(m);
    em_graph_free(g);
  }
  /* a fully masked row attends to nothing: zeros, as PyTorch >= 2.5's math path */
  em_graph *g = em_graph_new("mask0");
  int o = sdpa_graph(g, 1, 1, 1, 2, 1, 1, 0, 0);
  em_tensor *m = tens(EM_BOOL, 2, (int64_t[]){1, 2}, (double[]){0, 0});
  em_tensor *ins[4] = {qkv[0], qkv[1], qkv[2], m};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, o, ins, &r, err) == EM_OK);
  CHECK(em_t_get(r.vals[o], 0) == 0.0);
  em_ref_result_free(&r);
  em_tensor_free(m);
  em_graph_free(g);
  for (int i = 0; i < 3; i++) em_tensor_free(qkv[i]);
}

TEST(ref_op_sdpa_matches_explicit) {
  /* random bf16 attention with GQA and causal mask against a direct double loop */
  int64_t H = 4, Hk = 2, L = 7, E = 5;
  em_graph *g = em_graph_new("sdpa_rand");
  int q = input(g, "q", EM_BF16, 4, (int64_t[]){1, H, L, E}), k = input(g, "k", EM_BF16, 4, (int64_t[]){1, Hk, L, E});
  int v = input(g, "v", EM_BF16, 4, (int64_t[]){1, Hk, L, E});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_SDPA, x), aT(&x[0], q), aT(&x[1], k), aT(&x[2], v), aB(&x[5], 1), aB(&x[7], 1), aF(&x[6], 0.3);
  int o = node(g, EM_OP_SDPA, x);
  em_tensor *ins[3] = {tens(EM_BF16, 4, (int64_t[]){1, H, L, E}, NULL), tens(EM_BF16, 4, (int64_t[]){1, Hk, L, E}, NULL),
                       tens(EM_BF16, 4, (int64_t[]){1, Hk, L, E}, NULL)};
  for (int i = 0; i < 3; i++) em_tensor_fill_normal(ins[i], 10 + (uint64_t)i, 0, 1);
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, o, ins, &r, err) == EM_OK);
  int exact = 1;
  for (int64_t h = 0; h < H; h++) {
    int64_t kh = h / (H / Hk);
    for (int64_t i = 0; i < L; i++) {
      double sc[16], mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; j++) {
        double s = 0;
        for (int64_t e = 0; e < E; e++) s += em_t_get(ins[0], (h * L + i) * E + e) * em_t_get(ins[1], (kh * L + j) * E + e);
        sc[j] = 0.3 * s;
        mx = fmax(mx, sc[j]);
      }
      for (int64_t j = 0; j <= i; j++) sum += (sc[j] = exp(sc[j] - mx));
      for (int64_t e = 0; e < E; e++) {
        double acc = 0;
        for (int64_t j = 0; j <= i; j++) acc += sc[j] / sum * em_t_get(ins[2], (kh * L + j) * E + e);
        double got = em_t_get(r.vals[o], (h * L + i) * E + e);
        if (fabs(got - acc) > 0x1p-8 * fabs(acc) + 1e-6) exact = 0;
      }
    }
  }
  CHECK(exact);
  em_ref_result_free(&r);
  for (int i = 0; i < 3; i++) em_tensor_free(ins[i]);
  em_graph_free(g);
}

TEST(ref_op_shape_ops) {
  em_graph *g = em_graph_new("shape");
  int a = input(g, "a", EM_F32, 3, (int64_t[]){2, 3, 4}), c = input(g, "c", EM_F32, 2, (int64_t[]){3, 1});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_PERMUTE, x), aT(&x[0], a), aIL(&x[1], 3, 2, 0, 1);
  int perm = node(g, EM_OP_PERMUTE, x);
  defaults(EM_OP_TRANSPOSE, x), aT(&x[0], a), aI(&x[1], 0), aI(&x[2], -1);
  int tr = node(g, EM_OP_TRANSPOSE, x);
  defaults(EM_OP_T, x), aT(&x[0], c);
  int tt = node(g, EM_OP_T, x);
  defaults(EM_OP_EXPAND, x), aT(&x[0], c), aIL(&x[1], 3, 2, -1, 2);
  int ex = node(g, EM_OP_EXPAND, x);
  defaults(EM_OP_VIEW, x), aT(&x[0], a), aIL(&x[1], 2, -1, 4);
  int vw = node(g, EM_OP_VIEW, x);
  defaults(EM_OP_RESHAPE, x), aT(&x[0], a), aIL(&x[1], 1, 24);
  int rs = node(g, EM_OP_RESHAPE, x);
  defaults(EM_OP_UNSQUEEZE, x), aT(&x[0], c), aI(&x[1], -1);
  int us = node(g, EM_OP_UNSQUEEZE, x);
  defaults(EM_OP_SQUEEZE, x), aT(&x[0], c), aI(&x[1], 1);
  int sq = node(g, EM_OP_SQUEEZE, x);
  defaults(EM_OP_SQUEEZE, x), aT(&x[0], c), aI(&x[1], 0); /* size 3: no-op */
  int sq0 = node(g, EM_OP_SQUEEZE, x);
  int outs[] = {perm, tr, tt, ex, vw, rs, us, sq, sq0};
  for (int i = 0; i < 9; i++) em_graph_add_output(g, outs[i], NULL);
  em_tensor *ins[2] = {tens(EM_F32, 3, (int64_t[]){2, 3, 4}, NULL), tens(EM_F32, 2, (int64_t[]){3, 1}, (double[]){7, 8, 9})};
  for (int i = 0; i < 24; i++) em_t_set(ins[0], i, i);
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, -1, ins, &r, err) == EM_OK);
  em_tensor **v = r.vals;
  CHECK_SHAPE(v[perm], 3, 4, 2, 3);
  /* out[k][i][j] = a[i][j][k] = 12i + 4j + k */
  CHECK(em_t_get(v[perm], 0) == 0 && em_t_get(v[perm], 1) == 4 && em_t_get(v[perm], 3) == 12);
  CHECK(em_t_get(v[perm], (3 * 2 + 1) * 3 + 2) == 12 + 8 + 3);
  CHECK_SHAPE(v[tr], 3, 4, 3, 2);
  CHECK(em_t_get(v[tr], (1 * 3 + 2) * 2 + 1) == 12 + 8 + 1);
  CHECK_SHAPE(v[tt], 2, 1, 3);
  CHECK_VALS(v[tt], 3, 7, 8, 9);
  CHECK_SHAPE(v[ex], 3, 2, 3, 2);
  CHECK_VALS(v[ex], 12, 7, 7, 8, 8, 9, 9, 7, 7, 8, 8, 9, 9);
  CHECK_SHAPE(v[vw], 2, 6, 4);
  CHECK(em_t_get(v[vw], 23) == 23);
  CHECK_SHAPE(v[rs], 1, 24);
  CHECK_SHAPE(v[us], 3, 3, 1, 1);
  CHECK_SHAPE(v[sq], 1, 3);
  CHECK_VALS(v[sq], 3, 7, 8, 9);
  CHECK_SHAPE(v[sq0], 2, 3, 1);
  em_ref_result_free(&r);
  em_tensor_free(ins[0]);
  em_tensor_free(ins[1]);
  em_graph_free(g);
}

TEST(ref_op_slice_select_cat) {
  em_graph *g = em_graph_new("slice");
  int a = input(g, "a", EM_F32, 1, (int64_t[]){5}), m = input(g, "m", EM_F32, 2, (int64_t[]){2, 3});
  int m2 = input(g, "m2", EM_F32, 2, (int64_t[]){2, 1});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_SLICE, x), aT(&x[0], a), aI(&x[2], -2);
  int s1 = node(g, EM_OP_SLICE, x);
  defaults(EM_OP_SLICE, x), aT(&x[0], a), aI(&x[2], 0), aI(&x[3], 100), aI(&x[4], 2);
  int s2 = node(g, EM_OP_SLICE, x);
  defaults(EM_OP_SLICE, x), aT(&x[0], m), aI(&x[1], 1), aI(&x[2], 1), aI(&x[3], -1);
  int s3 = node(g, EM_OP_SLICE, x);
  defaults(EM_OP_SLICE, x), aT(&x[0], a), aI(&x[2], -100), aI(&x[3], 2);
  int s4 = node(g, EM_OP_SLICE, x);
  defaults(EM_OP_SELECT, x), aT(&x[0], m), aI(&x[1], 1), aI(&x[2], -1);
  int se = node(g, EM_OP_SELECT, x);
  defaults(EM_OP_CAT, x), aTL(&x[0], 2, m2, m), aI(&x[1], -1);
  int ct = node(g, EM_OP_CAT, x);
  defaults(EM_OP_CAT, x), aTL(&x[0], 2, m, m);
  int c0 = node(g, EM_OP_CAT, x);
  int outs[] = {s1, s2, s3, s4, se, ct, c0};
  for (int i = 0; i < 7; i++) em_graph_add_output(g, outs[i], NULL);
  em_tensor *ins[3] = {tens(EM_F32, 1, (int64_t[]){5}, (double[]){0, 1, 2, 3, 4}),
                       tens(EM_F32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}),
                       tens(EM_F32, 2, (int64_t[]){2, 1}, (double[]){-1, -2})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, -1, ins, &r, err) == EM_OK);
  em_tensor **v = r.vals;
  CHECK_VALS(v[s1], 2, 3, 4);
  CHECK_VALS(v[s2], 3, 0, 2, 4);
  CHECK_SHAPE(v[s3], 2, 2, 1);
  CHECK_VALS(v[s3], 2, 2, 5);
  CHECK_VALS(v[s4], 2, 0, 1);
  CHECK_SHAPE(v[se], 1, 2);
  CHECK_VALS(v[se], 2, 3, 6);
  CHECK_SHAPE(v[ct], 2, 2, 4);
  CHECK_VALS(v[ct], 8, -1, 1, 2, 3, -2, 4, 5, 6);
  CHECK_SHAPE(v[c0], 2, 4, 3);
  CHECK_VALS(v[c0], 12, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6);
  em_ref_result_free(&r);
  for (int i = 0; i < 3; i++) em_tensor_free(ins[i]);
  em_graph_free(g);
}

TEST(ref_op_cat_promotes) {
  em_graph *g = em_graph_new("catp");
  int a = input(g, "a", EM_BF16, 1, (int64_t[]){1}), b = input(g, "b", EM_F32, 1, (int64_t[]){2});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_CAT, x), aTL(&x[0], 2, a, b);
  int c = node(g, EM_OP_CAT, x);
  em_tensor *ins[2] = {tens(EM_BF16, 1, (int64_t[]){1}, (double[]){1.5}),
                       tens(EM_F32, 1, (int64_t[]){2}, (double[]){1 + 0x1p-20, 2})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, c, ins, &r, err) == EM_OK);
  CHECK(r.vals[c]->dtype == EM_F32);
  CHECK(em_t_get(r.vals[c], 0) == 1.5 && em_t_get(r.vals[c], 1) == 1 + 0x1p-20 && em_t_get(r.vals[c], 2) == 2);
  em_ref_result_free(&r);
  em_tensor_free(ins[0]);
  em_tensor_free(ins[1]);
  em_graph_free(g);
}

TEST(ref_op_embedding_index_select) {
  em_graph *g = em_graph_new("emb");
  int w = input(g, "w", EM_BF16, 2, (int64_t[]){3, 2}), ix = input(g, "ix", EM_I64, 2, (int64_t[]){1, 2});
  int i1 = input(g, "i1", EM_I32, 1, (int64_t[]){3});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_EMBEDDING, x), aT(&x[0], w), aT(&x[1], ix);
  int e = node(g, EM_OP_EMBEDDING, x);
  defaults(EM_OP_INDEX_SELECT, x), aT(&x[0], w), aI(&x[1], 1), aT(&x[2], i1);
  int is = node(g, EM_OP_INDEX_SELECT, x);
  em_graph_add_output(g, is, NULL);
  em_tensor *ins[3] = {tens(EM_BF16, 2, (int64_t[]){3, 2}, (double[]){1, 2, 3, 4, 5, 6}),
                       tens(EM_I64, 2, (int64_t[]){1, 2}, (double[]){2, 0}),
                       tens(EM_I32, 1, (int64_t[]){3}, (double[]){1, 1, 0})};
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, e, ins, &r, err) == EM_OK);
  CHECK_SHAPE(r.vals[e], 3, 1, 2, 2);
  CHECK_VALS(r.vals[e], 4, 5, 6, 1, 2);
  CHECK_SHAPE(r.vals[is], 2, 3, 3);
  CHECK_VALS(r.vals[is], 9, 2, 2, 1, 4, 4, 3, 6, 6, 5);
  em_ref_result_free(&r);
  /* an index out of range is an input error naming the node */
  em_t_set(ins[1], 1, 3);
  CHECK(run(g, -1, ins, &r, err) == EM_EINPUT);
  CHECK(strstr(err, "node 'v3' (aten.embedding.default)") != NULL && strstr(err, "out of range") != NULL);
  em_t_set(ins[1], 1, -1);
  CHECK(run(g, -1, ins, &r, err) == EM_EINPUT);
  em_t_set(ins[1], 1, 0);
  em_t_set(ins[2], 0, 2);
  CHECK(run(g, -1, ins, &r, err) == EM_EINPUT);
  CHECK(strstr(err, "aten.index_select.default") != NULL);
  for (int i = 0; i < 3; i++) em_tensor_free(ins[i]);
  em_graph_free(g);
}

TEST(ref_op_arange_to_copy) {
  em_graph *g = em_graph_new("arange");
  int a = input(g, "a", EM_F32, 1, (int64_t[]){4});
  em_arg x[EM_MAX_ARGS];
  defaults(EM_OP_ARANGE, x), aI(&x[0], 5);
  int r1 = node(g, EM_OP_ARANGE, x);
  defaults(EM_OP_ARANGE_START, x), aI(&x[0], 2), aI(&x[1], 5), aD(&x[2], EM_F32);
  int r2 = node(g, EM_OP_ARANGE_START, x);
  defaults(EM_OP_ARANGE, x), aF(&x[0], 2.5);
  int r3 = node(g, EM_OP_ARANGE, x);
  defaults(EM_OP_TO_COPY, x), aT(&x[0], a), aD(&x[1], EM_BF16);
  int tb = node(g, EM_OP_TO_COPY, x);
  defaults(EM_OP_TO_COPY, x), aT(&x[0], a), aD(&x[1], EM_I32);
  int ti = node(g, EM_OP_TO_COPY, x);
  defaults(EM_OP_TO_COPY, x), aT(&x[0], a), aD(&x[1], EM_BOOL);
  int tbo = node(g, EM_OP_TO_COPY, x);
  defaults(EM_OP_TO_COPY, x), aT(&x[0], a);
  int same = node(g, EM_OP_TO_COPY, x);
  int outs[] = {r1, r2, r3, tb, ti, tbo, same};
  for (int i = 0; i < 7; i++) em_graph_add_output(g, outs[i], NULL);
  em_tensor *in = tens(EM_F32, 1, (int64_t[]){4}, (double[]){1 + 0x1p-8, 1 + 3 * 0x1p-9, -2.7, 0});
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, -1, &in, &r, err) == EM_OK);
  em_tensor **v = r.vals;
  CHECK(v[r1]->dtype == EM_I64);
  CHECK_VALS(v[r1], 5, 0, 1, 2, 3, 4);
  CHECK(v[r2]->dtype == EM_F32);
  CHECK_VALS(v[r2], 3, 2, 3, 4);
  CHECK(v[r3]->dtype == EM_F32);
  CHECK_VALS(v[r3], 3, 0, 1, 2);
  CHECK(em_t_get(v[tb], 0) == 1.0 && em_t_get(v[tb], 1) == 1.0 + 0x1p-7);
  CHECK(em_t_get(v[tb], 2) == -2.703125); /* -2.7 to bf16: ulp 2^-6 at 2 */
  CHECK_VALS(v[ti], 4, 1, 1, -2, 0);
  CHECK_VALS(v[tbo], 4, 1, 1, 1, 0);
  CHECK(em_t_get(v[same], 0) == 1 + 0x1p-8);
  em_ref_result_free(&r);
  em_tensor_free(in);
  em_graph_free(g);
}

/* ---- binding, checks, lifetimes ------------------------------------------------------------------- */

TEST(ref_bind) {
  char err[EM_ERR_MAX] = "";
  em_graph *g = em_graph_new("bind");
  int s = em_symtab_add(&g->syms, "seq_len", 512, 1, 4096, err);
  int b = em_symtab_add(&g->syms, "batch", -1, 1, 8, err);
  em_dim sd = em_dim_sym(s), cd;
  CHECK(em_dim_cdiv(&g->syms, &sd, 64, &cd, err) == EM_OK); /* a derived symbol cdiv(seq_len, 64) */
  int64_t given[EM_MAX_SYMS], out[EM_MAX_SYMS];
  for (int i = 0; i < EM_MAX_SYMS; i++) given[i] = EM_SYM_UNBOUND;
  CHECK(em_ref_bind(g, given, out, err) == EM_EINPUT);
  CHECK(strstr(err, "symbol 'batch' is unbound") != NULL && strstr(err, "--bind batch=N") != NULL);
  given[b] = 9;
  CHECK(em_ref_bind(g, given, out, err) == EM_EINPUT);
  CHECK(strstr(err, "'batch'") != NULL && strstr(err, "9") != NULL && strstr(err, "[1, 8]") != NULL);
  given[b] = 2;
  given[s] = 100;
  CHECK(em_ref_bind(g, given, out, err) == EM_OK);
  CHECK(out[s] == 100 && out[b] == 2);
  CHECK(em_dim_eval(&g->syms, &cd, out) == 2);
  if (g->syms.n == 3) CHECK(out[2] == 2);
  given[s] = EM_SYM_UNBOUND; /* the hint */
  CHECK(em_ref_bind(g, given, out, err) == EM_OK && out[s] == 512);
  /* a given value is checked, never replaced by the hint: negative, 0 under min 1, over max */
  int64_t bad[] = {-5, 0, 4097, INT64_MAX, INT64_MIN + 1};
  for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
    given[s] = bad[i];
    CHECK(em_ref_bind(g, given, out, err) == EM_EINPUT && strstr(err, "symbol 'seq_len' = ") != NULL &&
          strstr(err, "outside its range [1, 4096]") != NULL);
  }
  em_graph_free(g);
}

TEST(ref_symbolic_run_and_input_checks) {
  char err[EM_ERR_MAX] = "";
  em_graph *g = em_graph_new("sym");
  int s = em_symtab_add(&g->syms, "seq", 4, 1, 64, err);
  em_shape sh;
  memset(&sh, 0, sizeof sh);
  sh.rank = 2;
  sh.d[0] = em_dim_sym(s);
  sh.d[1] = em_dim_const(2);
  int x = em_graph_add_input(g, "x", EM_V_INPUT, NULL, EM_BF16, &sh, err);
  em_arg a[EM_MAX_ARGS];
  defaults(EM_OP_SLICE, a), aT(&a[0], x), aI(&a[2], 1), a[3].present = 1, a[3].i = em_dim_sym(s); /* x[1:seq] */
  int sl = node(g, EM_OP_SLICE, a);
  defaults(EM_OP_SUM, a), aT(&a[0], sl), aIL(&a[1], 1, 0);
  int su = node(g, EM_OP_SUM, a);
  em_graph_add_output(g, su, NULL);
  int64_t given[EM_MAX_SYMS] = {3, EM_SYM_UNBOUND, EM_SYM_UNBOUND, EM_SYM_UNBOUND, EM_SYM_UNBOUND, EM_SYM_UNBOUND,
                                EM_SYM_UNBOUND, EM_SYM_UNBOUND}, vals[EM_MAX_SYMS];
  CHECK(em_ref_bind(g, given, vals, err) == EM_OK);
  em_tensor *in = tens(EM_BF16, 2, (int64_t[]){3, 2}, (double[]){1, 2, 3, 4, 5, 6});
  em_ref_result r;
  em_ref_opts o = {1, 0};
  CHECK(em_ref_run(g, vals, &in, &o, &r, err) == EM_OK);
  CHECK_SHAPE(r.vals[su], 1, 2);
  CHECK_VALS(r.vals[su], 2, 8, 10);
  CHECK(r.vals[sl] == NULL); /* freed after its last use */
  CHECK(r.vals[x] && r.vals[x]->data == in->data); /* inputs are borrowed */
  CHECK(r.symvals[s] == 3);
  em_ref_result_free(&r);
  o.keep_all = 1;
  CHECK(em_ref_run(g, vals, &in, &o, &r, err) == EM_OK);
  CHECK(r.vals[sl] != NULL);
  CHECK_SHAPE(r.vals[sl], 2, 2, 2);
  em_ref_result_free(&r);
  /* wrong shape at the binding, wrong dtype, missing */
  given[0] = 4;
  em_ref_bind(g, given, vals, err);
  CHECK(em_ref_run(g, vals, &in, &o, &r, err) == EM_EINPUT);
  CHECK(strstr(err, "input 'x'") != NULL && strstr(err, "[4, 2]") != NULL && strstr(err, "[3, 2]") != NULL);
  em_tensor *f = tens(EM_F32, 2, (int64_t[]){4, 2}, NULL);
  CHECK(em_ref_run(g, vals, &f, &o, &r, err) == EM_EINPUT);
  CHECK(strstr(err, "expected bf16") != NULL && strstr(err, "got f32") != NULL);
  em_tensor *none = NULL;
  CHECK(em_ref_run(g, vals, &none, &o, &r, err) == EM_EINPUT);
  CHECK(strstr(err, "'x' is missing") != NULL);
  em_tensor_free(f);
  em_tensor_free(in);
  em_graph_free(g);
}

TEST(ref_rmsnorm_chain) {
  /* the HF RMSNorm pattern in bf16, checked against the same arithmetic done by hand */
  em_graph *g = em_graph_new("rms");
  int xi = input(g, "x", EM_BF16, 2, (int64_t[]){2, 4}), wi = input(g, "w", EM_BF16, 1, (int64_t[]){4});
  em_arg a[EM_MAX_ARGS];
  defaults(EM_OP_TO_COPY, a), aT(&a[0], xi), aD(&a[1], EM_F32);
  int x32 = node(g, EM_OP_TO_COPY, a);
  defaults(EM_OP_POW, a), aT(&a[0], x32), aI(&a[1], 2);
  int sq = node(g, EM_OP_POW, a);
  defaults(EM_OP_MEAN, a), aT(&a[0], sq), aIL(&a[1], 1, -1), aB(&a[2], 1);
  int var = node(g, EM_OP_MEAN, a);
  defaults(EM_OP_ADD, a), aT(&a[0], var), aF(&a[1], 1e-6);
  int ve = node(g, EM_OP_ADD, a);
  defaults(EM_OP_RSQRT, a), aT(&a[0], ve);
  int rs = node(g, EM_OP_RSQRT, a);
  defaults(EM_OP_MUL, a), aT(&a[0], x32), aT(&a[1], rs);
  int nx = node(g, EM_OP_MUL, a);
  defaults(EM_OP_TO_COPY, a), aT(&a[0], nx), aD(&a[1], EM_BF16);
  int nb = node(g, EM_OP_TO_COPY, a);
  defaults(EM_OP_MUL, a), aT(&a[0], wi), aT(&a[1], nb);
  int y = node(g, EM_OP_MUL, a);
  em_tensor *ins[2] = {tens(EM_BF16, 2, (int64_t[]){2, 4}, NULL), tens(EM_BF16, 1, (int64_t[]){4}, NULL)};
  em_tensor_fill_normal(ins[0], 1, 0, 1);
  em_tensor_fill_normal(ins[1], 2, 1, 0.1);
  em_ref_result r;
  char err[EM_ERR_MAX];
  CHECK(run(g, y, ins, &r, err) == EM_OK);
  for (int i = 0; i < 2; i++) {
    double ss = 0; /* f32 squares, summed in double, mean stored as f32 */
    for (int j = 0; j < 4; j++) ss += (float)(em_t_get(ins[0], i * 4 + j) * em_t_get(ins[0], i * 4 + j));
    float var = (float)(ss / 4), ve = (float)((double)var + (double)(float)1e-6);
    float rsq = (float)(1.0 / sqrt((double)ve));
    for (int j = 0; j < 4; j++) {
      float n = em_round_bf16((float)(em_t_get(ins[0], i * 4 + j) * rsq));
      float want = em_round_bf16((float)(em_t_get(ins[1], j) * n));
      CHECK(em_t_get(r.vals[y], i * 4 + j) == want);
    }
  }
  em_ref_result_free(&r);
  em_tensor_free(ins[0]);
  em_tensor_free(ins[1]);
  em_graph_free(g);
}

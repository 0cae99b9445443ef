/* gemm.c — the reference interpreter's one contraction: C = A·Bᵀ in double, BLIS-style. Operands are packed
 * into MR-row and NR-column panels per KC×NC block and a 6×8 register-blocked micro-kernel runs over them;
 * an AVX2+FMA kernel is picked at run time when the CPU has it (no -march flags, so the binary runs on any
 * x86-64), and threads split C into disjoint rectangles. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EM_HAVE_X86 1
#endif

#define MR 6
#define NR 8
#define KC 256
#define MC 96   /* multiple of MR: an A block of MC×KC doubles stays in L2 */
#define NC 1024 /* multiple of NR: a B block of KC×NC doubles stays in L3 */

typedef void (*kern_fn)(int64_t kc, const double *A, const double *B, double *C, int64_t ldc, int m, int n,
                        int accumulate);

/* Writes (or adds) the valid m×n corner of a full MR×NR accumulator tile. */
static void store_tile(const double *t, double *C, int64_t ldc, int m, int n, int accumulate) {
  for (int r = 0; r < m; r++)
    for (int j = 0; j < n; j++) {
      if (accumulate) C[r * ldc + j] += t[r * NR + j];
      else C[r * ldc + j] = t[r * NR + j];
    }
}

typedef double v2d __attribute__((vector_size(16)));

/* Portable kernel: GCC vector extensions in 16-byte vectors, which every x86-64 (SSE2) and arm64 (NEON)
 * has; the 6×8 tile is done as two 6×4 halves so the accumulators fit in 16 registers. */
static void kern_generic(int64_t kc, const double *A, const double *B, double *C, int64_t ldc, int m, int n,
                         int accumulate) {
  double t[MR * NR];
  for (int h = 0; h < 2; h++) {
    v2d c[MR][2];
    memset(c, 0, sizeof c);
    const double *a = A, *b = B + 4 * h;
    for (int64_t k = 0; k < kc; k++) {
      v2d b0, b1;
      memcpy(&b0, b, sizeof b0);
      memcpy(&b1, b + 2, sizeof b1);
      for (int r = 0; r < MR; r++) {
        v2d ar = {a[r], a[r]};
        c[r][0] += ar * b0;
        c[r][1] += ar * b1;
      }
      a += MR;
      b += NR;
    }
    for (int r = 0; r < MR; r++) memcpy(&t[r * NR + 4 * h], c[r], sizeof c[r]);
  }
  store_tile(t, C, ldc, m, n, accumulate);
}

#ifdef EM_HAVE_X86
/* AVX2+FMA kernel: 12 accumulators, 2 B vectors and a broadcast fit the 16 ymm registers. */
__attribute__((target("avx2,fma"))) static void kern_avx2(int64_t kc, const double *A, const double *B, double *C,
                                                          int64_t ldc, int m, int n, int accumulate) {
  __m256d c00 = _mm256_setzero_pd(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
          c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t k = 0; k < kc; k++) {
    __m256d b0 = _mm256_load_pd(B), b1 = _mm256_load_pd(B + 4), a;
    a = _mm256_broadcast_sd(A + 0);
    c00 = _mm256_fmadd_pd(a, b0, c00);
    c01 = _mm256_fmadd_pd(a, b1, c01);
    a = _mm256_broadcast_sd(A + 1);
    c10 = _mm256_fmadd_pd(a, b0, c10);
    c11 = _mm256_fmadd_pd(a, b1, c11);
    a = _mm256_broadcast_sd(A + 2);
    c20 = _mm256_fmadd_pd(a, b0, c20);
    c21 = _mm256_fmadd_pd(a, b1, c21);
    a = _mm256_broadcast_sd(A + 3);
    c30 = _mm256_fmadd_pd(a, b0, c30);
    c31 = _mm256_fmadd_pd(a, b1, c31);
    a = _mm256_broadcast_sd(A + 4);
    c40 = _mm256_fmadd_pd(a, b0, c40);
    c41 = _mm256_fmadd_pd(a, b1, c41);
    a = _mm256_broadcast_sd(A + 5);
    c50 = _mm256_fmadd_pd(a, b0, c50);
    c51 = _mm256_fmadd_pd(a, b1, c51);
    A += MR;
    B += NR;
  }
  __m256d acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (m == MR && n == NR) {
    for (int r = 0; r < MR; r++) {
      double *row = C + r * ldc;
      if (accumulate) {
        acc[r][0] = _mm256_add_pd(acc[r][0], _mm256_loadu_pd(row));
        acc[r][1] = _mm256_add_pd(acc[r][1], _mm256_loadu_pd(row + 4));
      }
      _mm256_storeu_pd(row, acc[r][0]);
      _mm256_storeu_pd(row + 4, acc[r][1]);
    }
    return;
  }
  double t[MR * NR];
  for (int r = 0; r < MR; r++) {
    _mm256_storeu_pd(&t[r * NR], acc[r][0]);
    _mm256_storeu_pd(&t[r * NR + 4], acc[r][1]);
  }
  store_tile(t, C, ldc, m, n, accumulate);
}
#endif

static kern_fn kern = kern_generic;
static pthread_once_t kern_once = PTHREAD_ONCE_INIT;

static void pick_kernel(void) {
#ifdef EM_HAVE_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) kern = kern_avx2;
#endif
}

/* Packs rows [0, rows) × cols [0, kc) of X (row stride ld) into panels of P rows, k-major, zero-padded. */
static void pack(int64_t rows, int64_t kc, const double *X, int64_t ld, int P, double *out) {
  for (int64_t i0 = 0; i0 < rows; i0 += P) {
    int p = rows - i0 < P ? (int)(rows - i0) : P;
    const double *x = X + i0 * ld;
    for (int64_t k = 0; k < kc; k++) {
      int r = 0;
      for (; r < p; r++) out[r] = x[r * ld + k];
      for (; r < P; r++) out[r] = 0.0;
      out += P;
    }
  }
}

typedef struct {
  int64_t M, N, K, lda, ldb, ldc;
  const double *A, *B;
  double *C;
  int64_t m0, m1, n0, n1; /* this worker's rectangle of C */
  kern_fn kern;
} gemm_job;

static void *gemm_rect(void *arg) {
  const gemm_job *j = arg;
  double *Ap = aligned_alloc(64, sizeof(double) * MC * KC);
  double *Bp = aligned_alloc(64, sizeof(double) * NC * KC);
  if (!Ap || !Bp) abort();
  for (int64_t jc = j->n0; jc < j->n1; jc += NC) {
    int64_t nc = j->n1 - jc < NC ? j->n1 - jc : NC;
    for (int64_t pc = 0; pc < j->K; pc += KC) {
      int64_t kc = j->K - pc < KC ? j->K - pc : KC;
      pack(nc, kc, j->B + jc * j->ldb + pc, j->ldb, NR, Bp);
      for (int64_t ic = j->m0; ic < j->m1; ic += MC) {
        int64_t mc = j->m1 - ic < MC ? j->m1 - ic : MC;
        pack(mc, kc, j->A + ic * j->lda + pc, j->lda, MR, Ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          int n = nc - jr < NR ? (int)(nc - jr) : NR;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            int m = mc - ir < MR ? (int)(mc - ir) : MR;
            j->kern(kc, Ap + ir * kc, Bp + jr * kc, j->C + (ic + ir) * j->ldc + jc + jr, j->ldc, m, n, pc > 0);
          }
        }
      }
    }
  }
  free(Ap);
  free(Bp);
  return NULL;
}

void em_gemm_nt(int64_t M, int64_t N, int64_t K, const double *A, int64_t lda, const double *B, int64_t ldb,
                double *C, int64_t ldc, int nthreads) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, sizeof(double) * (size_t)N);
    return;
  }
  pthread_once(&kern_once, pick_kernel);
  if (nthreads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = n > 0 ? (int)n : 1;
  }
  if ((double)M * (double)N * (double)K < 262144.0) nthreads = 1;
  /* Split C along the dimension with more micro-tiles, so each worker packs only its own share of it. */
  int64_t tm = (M + MR - 1) / MR, tn = (N + NR - 1) / NR;
  int split_n = tn >= tm;
  int64_t tiles = split_n ? tn : tm;
  if (nthreads > tiles) nthreads = (int)tiles;
  if (nthreads > 64) nthreads = 64;
  gemm_job jobs[64];
  pthread_t tid[64];
  int started[64] = {0};
  for (int t = 0; t < nthreads; t++) {
    gemm_job *j = &jobs[t];
    *j = (gemm_job){M, N, K, lda, ldb, ldc, A, B, C, 0, M, 0, N, kern};
    int64_t lo = tiles * t / nthreads, hi = tiles * (t + 1) / nthreads;
    int64_t unit = split_n ? NR : MR, lim = split_n ? N : M;
    lo *= unit;
    hi = hi * unit < lim ? hi * unit : lim;
    if (split_n) j->n0 = lo, j->n1 = hi;
    else j->m0 = lo, j->m1 = hi;
  }
  for (int t = 1; t < nthreads; t++) started[t] = pthread_create(&tid[t], NULL, gemm_rect, &jobs[t]) == 0;
  gemm_rect(&jobs[0]);
  for (int t = 1; t < nthreads; t++) {
    if (started[t]) pthread_join(tid[t], NULL);
    else gemm_rect(&jobs[t]); /* no thread available: do its share here */
  }
}

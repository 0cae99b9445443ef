/* tensor.h — host tensors for the CPU reference: contiguous row-major storage, seeded random fill, .npy I/O.
 * bf16/f16/f32 tensors store float values already rounded to their dtype; f64, i32, i64 and bool tensors
 * store double (integers are exact up to 2^53, far above any index or size a graph uses). */
#ifndef EM_TENSOR_H
#define EM_TENSOR_H

#include <stdint.h>

#include "base.h"
#include "dtype.h"

#define EM_TENSOR_MAX_RANK 6

typedef struct em_tensor {
  em_dtype dtype;
  int rank;
  int64_t shape[EM_TENSOR_MAX_RANK];
  int64_t numel;
  int is_f32;  /* storage: 1 float, 0 double */
  void *data;  /* owned unless borrowed */
  int borrowed;
} em_tensor;

/* Allocates a zero-filled tensor; NULL with err filled (one line naming the dtype and shape) when a size is
 * negative, the element count or byte size passes 2^63-1 (EM_EINPUT), or the storage is more than this
 * machine's physical memory or cannot be allocated (EM_ERUN). Never aborts. */
em_tensor *em_tensor_new(em_dtype dt, int rank, const int64_t *shape, char *err);
void em_tensor_free(em_tensor *t);
/* A copy, or NULL with err filled as em_tensor_new does. */
em_tensor *em_tensor_clone(const em_tensor *t, char *err);
/* Zeroed storage of bytes for what ("a f32 tensor [2, 3]"): NULL with err filled when it is more than the
 * machine's physical memory or the allocation fails. The caller frees it. */
void *em_tensor_alloc_bytes(int64_t bytes, const char *what, char *err);

static inline double em_t_get(const em_tensor *t, int64_t i) {
  return t->is_f32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}
/* Stores v rounded as the dtype requires (bf16/f16 rounding, integer truncation toward zero, bool != 0). */
void em_t_set(em_tensor *t, int64_t i, double v);

/* Deterministic fill from seed: normal(mean, std) for floats, uniform integers in [lo, hi) for
 * integer dtypes, fair coin for bool. The same arguments give the same values on every machine. */
void em_tensor_fill_normal(em_tensor *t, uint64_t seed, double mean, double std);
void em_tensor_fill_int(em_tensor *t, uint64_t seed, int64_t lo, int64_t hi);
void em_tensor_fill_const(em_tensor *t, double v);

/* .npy (format 1.0, C order). bf16 is written as <f4 (values exact); the loader converts any supported
 * numpy dtype to dt. */
em_status em_tensor_save_npy(const em_tensor *t, const char *path, char *err);
em_tensor *em_tensor_load_npy(const char *path, em_dtype dt, char *err);

/* Comparison with a dtype-aware tolerance: |a-b| <= atol + rtol*|b|. Reports max abs/rel error and
 * mismatch count; NaN in either mismatches unless both are NaN. */
typedef struct {
  double max_abs, max_rel, rtol, atol;
  int64_t mismatches, numel;
  int shape_ok;
} em_cmp;
void em_tolerance(em_dtype dt, double *rtol, double *atol);
em_cmp em_tensor_compare(const em_tensor *a, const em_tensor *b, double rtol, double atol);
/* Row-major element strides of a right-aligned to rank dims (rank >= a's): 0 where a has no dim or a dim of 1, so
 * a broadcast operand is read at out-index . st (NumPy's rule). */
void em_tensor_bcast_strides(const em_tensor *a, int rank, int64_t *st);
/* The same, where b (the reference) is a sum or difference of terms (tensors that broadcast to b's shape): an element
 * is within tolerance at atol + rtol * max(|b|, |each term|) there, since each term was rounded at its own magnitude
 * before they cancelled (a residual add: the result rounded, plus the residual, one ulp of the result apart in two
 * summation orders). A term of another shape is ignored. */
em_cmp em_tensor_compare_terms(const em_tensor *a, const em_tensor *b, const em_tensor *const *terms, int nterms, double rtol,
                               double atol);

#endif

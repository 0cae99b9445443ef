/* dtype.h — the element types of emmy tensors, from one X-macro table, and exact bf16/f16 rounding.
 * The reference interpreter stores every floating tensor as f32 values that are exactly representable in
 * the tensor's dtype; em_round_to() is the one place where that rounding happens. */
#ifndef EM_DTYPE_H
#define EM_DTYPE_H

#include <stdint.h>

/* X(ENUM, name, bytes, torch name, numpy descr, is_float) */
#define EM_DTYPES(X)                                  \
  X(BF16, "bf16", 2, "bfloat16", "<f4", 1)            \
  X(F16, "f16", 2, "float16", "<f2", 1)               \
  X(F32, "f32", 4, "float32", "<f4", 1)               \
  X(F64, "f64", 8, "float64", "<f8", 1)               \
  X(I32, "i32", 4, "int32", "<i4", 0)                 \
  X(I64, "i64", 8, "int64", "<i8", 0)                 \
  X(BOOL, "bool", 1, "bool", "|b1", 0)

typedef enum {
#define X(e, n, b, t, np, f) EM_##e,
  EM_DTYPES(X)
#undef X
  EM_NDTYPES
} em_dtype;

const char *em_dtype_name(em_dtype t);
const char *em_dtype_torch(em_dtype t);
int em_dtype_bytes(em_dtype t);
int em_dtype_is_float(em_dtype t);
/* Parses a dtype name ("bf16", also torch's "bfloat16"); returns -1 when unknown. */
int em_dtype_parse(const char *s);
/* PyTorch's promotion of two tensor dtypes (both tensors with dims). */
em_dtype em_dtype_promote(em_dtype a, em_dtype b);

/* Round-to-nearest-even conversions. bf16/f16 values are carried as f32. */
float em_round_bf16(float x);
float em_round_f16(float x);
/* Rounds x (computed in f32 or f64) to what dtype t can hold, returned as f32 (f64 tensors store doubles:
 * em_t_set in tensor.c). */
float em_round_to(em_dtype t, double x);
uint16_t em_f32_to_bf16_bits(float x);
float em_bf16_bits_to_f32(uint16_t b);
uint16_t em_f32_to_f16_bits(float x);
float em_f16_bits_to_f32(uint16_t h);

#endif

/* dtype.c — dtype names, promotion and exact IEEE rounding to bf16/f16. */
#include "dtype.h"

#include <math.h>
#include <string.h>

static const struct {
  const char *name, *torch, *np;
  int bytes, is_float;
} dtypes[] = {
#define X(e, n, b, t, np, f) {n, t, np, b, f},
    EM_DTYPES(X)
#undef X
};

const char *em_dtype_name(em_dtype t) { return (unsigned)t < EM_NDTYPES ? dtypes[t].name : "?"; }
const char *em_dtype_torch(em_dtype t) { return (unsigned)t < EM_NDTYPES ? dtypes[t].torch : "?"; }
int em_dtype_bytes(em_dtype t) { return dtypes[t].bytes; }
int em_dtype_is_float(em_dtype t) { return dtypes[t].is_float; }

int em_dtype_parse(const char *s) {
  if (!s) return -1;
  for (int i = 0; i < EM_NDTYPES; i++)
    if (!strcmp(s, dtypes[i].name) || !strcmp(s, dtypes[i].torch)) return i;
  return -1;
}

/* Category order bool < int < float; within floats PyTorch promotes bf16+f16 to f32. */
em_dtype em_dtype_promote(em_dtype a, em_dtype b) {
  if (a == b) return a;
  if (a == EM_BOOL) return b;
  if (b == EM_BOOL) return a;
  int fa = em_dtype_is_float(a), fb = em_dtype_is_float(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa) return (a == EM_I64 || b == EM_I64) ? EM_I64 : EM_I32;
  if (a == EM_F64 || b == EM_F64) return EM_F64;
  return EM_F32; /* any two distinct of bf16, f16, f32 */
}

uint16_t em_f32_to_bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float em_bf16_bits_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

float em_round_bf16(float x) { return em_bf16_bits_to_f32(em_f32_to_bf16_bits(x)); }

uint16_t em_f32_to_f16_bits(float x) {
  _Float16 h = (_Float16)x;
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}

float em_f16_bits_to_f32(uint16_t b) {
  _Float16 h;
  memcpy(&h, &b, 2);
  return (float)h;
}

float em_round_f16(float x) { return (float)(_Float16)x; }

float em_round_to(em_dtype t, double x) {
  switch (t) {
  case EM_BF16: return em_round_bf16((float)x);
  case EM_F16: return (float)(_Float16)x;
  default: return (float)x;
  }
}

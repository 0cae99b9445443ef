/* numfmt.c — "%.9g" by integer arithmetic (numfmt.h). */
#include "numfmt.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const double P10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* a scaled to nine digits for decimal exponent e: round(a * 10^(8 - e)), the power exact (10^k, k <= 22) and applied
 * by one multiply or divide, so one rounding; a tie to even, as printf rounds the exact value (a float32's product with
 * 10^k for k up to ~12 is exact, so its ties — common: 0.03173828125 — are seen exactly) */
static uint64_t scaled(double a, int e) {
  int k = 8 - e;
  double s = k >= 0 ? (k <= 22 ? a * P10[k] : a * P10[22] * P10[k - 22]) : (-k <= 22 ? a / P10[-k] : a / P10[22] / P10[-k - 22]);
  double f = floor(s), r = s - f;
  uint64_t m = (uint64_t)f;
  return m + (r > 0.5 || (r == 0.5 && (m & 1u)));
}

/* the digits of m (nine) from d[0] */
static void digits9(char *d, uint32_t m) {
  static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                              "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                              "8081828384858687888990919293949596979899";
  for (int i = 7; i >= 1; i -= 2) {
    uint32_t q = m / 100, r = m - 100 * q;
    d[i] = pairs[2 * r];
    d[i + 1] = pairs[2 * r + 1];
    m = q;
  }
  d[0] = (char)('0' + m);
}

size_t em_fmt_g9(char *out, double v) {
  if (v == 0) return (size_t)snprintf(out, EM_NUMFMT_MAX, signbit(v) ? "-0" : "0");
  double a = fabs(v);
  if (!isfinite(v) || a < 1e-30 || a > 1e30) return (size_t)snprintf(out, EM_NUMFMT_MAX, "%.9g", v);
  int e2;
  frexp(a, &e2);                             /* a in [2^(e2-1), 2^e2) */
  int e = ((e2 - 1) * 78913) >> 18;          /* floor((e2 - 1) log10 2): the decimal exponent or one under it */
  uint64_t m = scaled(a, e);
  if (m >= 1000000000u) m = scaled(a, ++e);  /* one under, or rounded up to the next power of ten */
  if (m >= 1000000000u) {                    /* 9.999999995e-1 -> 1.00000000 */
    m /= 10;
    e++;
  }
  char d[9], *p = out;
  digits9(d, (uint32_t)m);
  int nd = 9;
  while (nd > 1 && d[nd - 1] == '0') nd--;   /* %g drops trailing zeros */
  if (v < 0) *p++ = '-';
  if (e < -4 || e >= 9) {                    /* d.ddde[+-]XX */
    *p++ = d[0];
    if (nd > 1) {
      *p++ = '.';
      memcpy(p, d + 1, (size_t)nd - 1);
      p += nd - 1;
    }
    p += snprintf(p, 8, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  } else if (e >= 0) {                       /* ddd.ddd */
    int ni = e + 1;
    memcpy(p, d, (size_t)ni);
    p += ni;
    if (nd > ni) {
      *p++ = '.';
      memcpy(p, d + ni, (size_t)(nd - ni));
      p += nd - ni;
    }
  } else {                                   /* 0.000ddd */
    *p++ = '0';
    *p++ = '.';
    for (int i = 0; i < -e - 1; i++) *p++ = '0';
    memcpy(p, d, (size_t)nd);
    p += nd;
  }
  *p = 0;
  return (size_t)(p - out);
}

/* test_numfmt.c — src/numfmt.c: em_fmt_g9 writes what printf's "%.9g" writes, on random magnitudes across its fast
 * range, the edges of its cases (powers of ten, 9.9999999995, the %e switch at 1e-5 and 1e9), zeros and non-finite
 * values; every float32 reads back to itself. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numfmt.h"
#include "unit.h"

static int same_as_printf(double v) {
  char a[EM_NUMFMT_MAX], b[64];
  size_t n = em_fmt_g9(a, v);
  snprintf(b, sizeof b, "%.9g", v);
  if (strcmp(a, b) || n != strlen(b)) {
    fprintf(stderr, "    %.17g: em_fmt_g9 '%s', printf '%s'\n", v, a, b);
    return 0;
  }
  return 1;
}

TEST(numfmt_edges) {
  const double vs[] = {0.0, -0.0, 1, -1, 0.5, 0.1, 1e-5, 1e-4, 9.99999999e-5, 1e8, 1e9, 999999999, 999999999.5,
                       9.9999999995, 0.99999999995, 123456789, 1234567890, 1.5e-7, -3.25e12, 1e-30, 1e30, 2e-31,
                       3e31, 1e300, 5e-324, INFINITY, -INFINITY, 0.0009765625, 65504, 3.4028234663852886e38};
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) CHECK(same_as_printf(vs[i]));
  char s[EM_NUMFMT_MAX];
  em_fmt_g9(s, NAN);
  CHECK(!strcmp(s, "nan") || !strcmp(s, "-nan"));
  for (int k = -30; k <= 30; k++) {
    CHECK(same_as_printf(pow(10, k)));
    CHECK(same_as_printf(-pow(10, k) * 0.999999999));
  }
}

TEST(numfmt_random) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  int bad = 0, trip = 0;
  for (int i = 0; i < 400000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double u = (double)(x >> 11) / 9007199254740992.0;  /* [0, 1) */
    double v = (i & 1 ? -1 : 1) * pow(10, -29 + 58 * u);
    if (i % 4 == 2) v = (float)((u - 0.5) * 0.25); /* the served embeddings' range, as float32 */
    if (!same_as_printf(v) && ++bad > 5) break;
    char s[EM_NUMFMT_MAX];
    em_fmt_g9(s, (float)v);
    float back = strtof(s, NULL);
    if (back != (float)v) trip++;
  }
  CHECK(bad == 0);
  CHECK(trip == 0);
}

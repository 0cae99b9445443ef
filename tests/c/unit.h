/* unit.h — a minimal C test harness: TEST(name) registers a test, CHECK(cond) records a failure with the
 * line and continues, unit_skip(reason) marks the running test skipped (a missing NVRTC); main (unit_main.c)
 * runs every test, prints one line each, then "N passed, N failed, N skipped". */
#ifndef EM_UNIT_H
#define EM_UNIT_H

#include <math.h>
#include <stdio.h>

typedef void (*unit_fn)(int *failed);
void unit_register(const char *name, unit_fn fn);
/* marks the running test skipped with a one-line reason (copied); its CHECKs still count as failures */
void unit_skip(const char *reason);

#define TEST(name)                                                                             \
  static void test_##name(int *unit_failed);                                                   \
  __attribute__((constructor)) static void reg_##name(void) { unit_register(#name, test_##name); } \
  static void test_##name(int *unit_failed)

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "    %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);            \
      (*unit_failed)++;                                                                        \
    }                                                                                          \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                  \
  do {                                                                                         \
    double ua_ = (double)(a), ub_ = (double)(b);                                               \
    if (!(fabs(ua_ - ub_) <= (tol))) {                                                         \
      fprintf(stderr, "    %s:%d: %s = %.9g, expected %.9g (tol %g)\n", __FILE__, __LINE__, #a, ua_, ub_, \
              (double)(tol));                                                                  \
      (*unit_failed)++;                                                                        \
    }                                                                                          \
  } while (0)

#endif

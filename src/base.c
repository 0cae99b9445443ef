/* base.c — the error-buffer helper, checked allocation and the FNV-1a hash shared by every subsystem. */
#include "base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

em_status em_fail(char *err, em_status st, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, EM_ERR_MAX, fmt, ap);
    va_end(ap);
  }
  return st;
}

static void oom(size_t n) {
  fprintf(stderr, "emmy: out of memory allocating %zu bytes\n", n);
  abort();
}

void *em_alloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (!p) oom(n);
  return p;
}

void *em_realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) oom(n);
  return q;
}

char *em_strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = em_alloc(n);
  memcpy(d, s, n);
  return d;
}

uint64_t em_fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

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

size_t em_utf8_valid_prefix(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t len;
    unsigned cp, min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
    else return i;
    if (n - i < len) return i;
    for (size_t k = 1; k < len; k++) {
      if ((p[i + k] & 0xc0) != 0x80) return i;
      cp = cp << 6 | (p[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return n;
}

char *em_quote_bytes(const char *s, size_t n, char *buf, size_t bufn) {
  size_t o = 0;
  if (!bufn) return buf;
  buf[0] = 0;
  for (size_t i = 0; i < n && o + 8 < bufn; i++) {
    unsigned char c = (unsigned char)s[i];
    if (i >= 60) {
      snprintf(buf + o, bufn - o, "…");
      return buf;
    }
    if (c >= 0x20 && c < 0x7f && c != '\\') buf[o++] = (char)c;
    else o += (size_t)snprintf(buf + o, bufn - o, "\\x%02x", c);
    buf[o] = 0;
  }
  return buf;
}

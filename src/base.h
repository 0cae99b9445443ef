/* base.h — status codes, the caller-owned error buffer convention, checked allocation and growable arrays.
 * Every exported emmy function that can fail returns an em_status and writes one line into a caller-owned
 * buffer of EM_ERR_MAX bytes; EM_EINPUT means the input was bad (usage exit 2), EM_ERUN a runtime failure. */
#ifndef EM_BASE_H
#define EM_BASE_H

#include <stddef.h>
#include <stdint.h>

#define EM_ERR_MAX 512

typedef enum {
  EM_OK = 0,
  EM_EINPUT = 2,  /* malformed or inconsistent input: the user must change something */
  EM_ERUN = 1,    /* runtime failure: I/O, resources, a library that is missing */
} em_status;

/* Formats one line into err (EM_ERR_MAX bytes, may be NULL) and returns st. */
em_status em_fail(char *err, em_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Allocation that aborts with a message on exhaustion: emmy's data structures are small next to the
 * tensors, and a half-built IR is worse than a clean exit. */
void *em_alloc(size_t n);                 /* zeroed */
void *em_realloc(void *p, size_t n);
char *em_strdup(const char *s);           /* NULL stays NULL */

/* Growable array: struct { T *v; int n, cap; }. */
#define EM_VEC(T) struct { T *v; int n, cap; }
#define EM_VEC_PUSH(vec, x)                                                                  \
  do {                                                                                       \
    if ((vec).n == (vec).cap) {                                                              \
      (vec).cap = (vec).cap ? 2 * (vec).cap : 8;                                             \
      (vec).v = em_realloc((vec).v, (size_t)(vec).cap * sizeof(*(vec).v));                   \
    }                                                                                        \
    (vec).v[(vec).n++] = (x);                                                                \
  } while (0)

/* Length of the longest valid UTF-8 prefix of s[0..n) (n when all of it is valid): no overlong forms,
 * surrogates or code points past U+10FFFF. NUL bytes are valid UTF-8; callers that need C strings check
 * for them themselves. */
size_t em_utf8_valid_prefix(const char *s, size_t n);
/* Writes s[0..n) for a one-line message into buf (bufn bytes): printable ASCII as is, every other byte as
 * \xHH, cut after about 60 bytes with "…". Returns buf. */
char *em_quote_bytes(const char *s, size_t n, char *buf, size_t bufn);

/* 64-bit FNV-1a, used for structural hashes; stable across processes and machines. */
uint64_t em_fnv1a(uint64_t h, const void *data, size_t n);
#define EM_FNV_SEED 0xcbf29ce484222325ULL

/* Build identity, set by the Makefile. */
extern const char em_version[];
extern const char em_git_rev[];

#endif

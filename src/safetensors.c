/* safetensors.c — .safetensors reader and writer: a strict JSON parser for the header, the reference crate's
 * validation (header bounds, dtype × shape = byte size, contiguous data from offset 0 to the end of the
 * file, distinct names), conversion of an entry to a host tensor, and an atomic writer. */
#include "safetensors.h"
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian data in place; a big-endian host needs byte swapping"
#endif

/* X(ENUM, bytes) — the dtypes of the format; the name is the enum's spelling. */
#define EM_ST_DTYPES(X) \
  X(BOOL, 1)            \
  X(U8, 1)              \
  X(I8, 1)              \
  X(F8_E5M2, 1)         \
  X(F8_E4M3, 1)         \
  X(I16, 2)             \
  X(U16, 2)             \
  X(F16, 2)             \
  X(BF16, 2)            \
  X(I32, 4)             \
  X(U32, 4)             \
  X(F32, 4)             \
  X(F64, 8)             \
  X(I64, 8)             \
  X(U64, 8)

typedef enum {
#define X(e, b) ST_##e,
  EM_ST_DTYPES(X)
#undef X
  ST_NDTYPES
} st_dtype;

static const struct {
  const char *name;
  int bytes;
} st_dtypes[] = {
#define X(e, b) {#e, b},
    EM_ST_DTYPES(X)
#undef X
};

static int st_dtype_parse(const char *s) {
  for (int i = 0; i < ST_NDTYPES; i++)
    if (!strcmp(s, st_dtypes[i].name)) return i;
  return -1;
}

/* ---- messages ---------------------------------------------------------------------------------------- */

/* Formats "path: message" into err and makes it one line (control bytes, e.g. from an escaped "\n" in a
 * tensor name, become '?'). Returns st. */
static em_status st_fail(char *err, em_status st, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static em_status st_fail(char *err, em_status st, const char *path, const char *fmt, ...) {
  if (!err) return st;
  int o = snprintf(err, EM_ERR_MAX, "%s: ", path);
  if (o < 0) o = 0;
  if (o < EM_ERR_MAX) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + o, EM_ERR_MAX - (size_t)o, fmt, ap);
    va_end(ap);
  }
  for (char *p = err; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  return st;
}

/* A tensor name shortened for a message (the whole line must fit EM_ERR_MAX). */
typedef struct {
  char s[100];
} st_label;
static st_label label(const char *name) {
  st_label l;
  size_t n = strlen(name);
  if (n < sizeof l.s) memcpy(l.s, name, n + 1);
  else {
    memcpy(l.s, name, sizeof l.s - 4);
    memcpy(l.s + sizeof l.s - 4, "...", 4);
  }
  return l;
}

/* "[2, 4]" into buf, ending in ", ...]" when it does not fit. */
static const char *fmt_dims(char *buf, size_t size, const uint64_t *d, int rank) {
  size_t o = (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < rank; i++) {
    if (o + 28 >= size) {
      snprintf(buf + o, size - o, ", ...]");
      return buf;
    }
    o += (size_t)snprintf(buf + o, size - o, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
  }
  snprintf(buf + o, size - o, "]");
  return buf;
}

/* ---- UTF-8 ------------------------------------------------------------------------------------------ */

/* Returns the offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlong forms,
 * no surrogates, nothing above U+10FFFF), or n when all of s is valid. */
static size_t utf8_check(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    int len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else return i;
    if (i + (size_t)len > n) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (int k = 2; k < len; k++)
      if (s[i + (size_t)k] < 0x80 || s[i + (size_t)k] > 0xbf) return i;
    i += (size_t)len;
  }
  return n;
}

/* ---- JSON ------------------------------------------------------------------------------------------- */
/* RFC 8259 into a node tree. Strings are decoded into one arena of header length + 1 bytes: a decoded string
 * plus its NUL is never longer than its quoted source. Numbers keep their source text. Object members carry
 * their key in the value node; children link through next. */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
static const char *const j_kind[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};

typedef struct {
  int type;
  int child, next; /* first child and next sibling: node indices, -1 for none */
  int n;           /* children of an array or object */
  const char *s;   /* string: decoded, NUL-terminated; number: source text (len bytes) */
  size_t len;
  const char *key; /* member key when the parent is an object */
  size_t at;       /* offset in the header, for messages */
} jnode;

#define J_MAX_DEPTH 128

typedef struct {
  const char *p, *end, *base;
  char *arena;
  size_t used;
  EM_VEC(jnode) nodes;
  int depth;
  char msg[160];
  size_t err_at;
} jparser;

static int j_error(jparser *js, const char *p, const char *what) {
  if (!js->msg[0]) {
    js->err_at = (size_t)(p - js->base);
    snprintf(js->msg, sizeof js->msg, "%s", what);
  }
  return -1;
}

static void j_ws(jparser *js) {
  while (js->p < js->end && (*js->p == ' ' || *js->p == '\t' || *js->p == '\n' || *js->p == '\r')) js->p++;
}

static int j_new(jparser *js, int type, const char *at) {
  jnode nd = {type, -1, -1, 0, NULL, 0, NULL, (size_t)(at - js->base)};
  EM_VEC_PUSH(js->nodes, nd);
  return js->nodes.n - 1;
}

static int hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

/* Parses the string at js->p (on the opening quote) into the arena; returns its start or NULL. */
static const char *j_string(jparser *js, size_t *len) {
  const char *start = js->p++;
  char *out = js->arena + js->used, *o = out;
  for (;;) {
    if (js->p >= js->end) return j_error(js, start, "unterminated string"), NULL;
    unsigned char c = (unsigned char)*js->p;
    if (c == '"') break;
    if (c < 0x20) return j_error(js, js->p, "control character in a string (must be escaped)"), NULL;
    if (c != '\\') {
      *o++ = (char)c;
      js->p++;
      continue;
    }
    if (js->p + 1 >= js->end) return j_error(js, js->p, "unterminated string"), NULL;
    char e = js->p[1];
    js->p += 2;
    switch (e) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '/': *o++ = '/'; break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      unsigned cp, lo;
      if (js->end - js->p < 4 || hex4(js->p, &cp)) return j_error(js, js->p - 2, "bad \\u escape"), NULL;
      js->p += 4;
      if (cp >= 0xdc00 && cp <= 0xdfff) return j_error(js, js->p - 6, "lone trailing surrogate in \\u escape"), NULL;
      if (cp >= 0xd800 && cp <= 0xdbff) {
        if (js->end - js->p < 6 || js->p[0] != '\\' || js->p[1] != 'u' || hex4(js->p + 2, &lo) || lo < 0xdc00 ||
            lo > 0xdfff)
          return j_error(js, js->p - 6, "lone leading surrogate in \\u escape"), NULL;
        js->p += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      if (cp == 0) return j_error(js, js->p - 6, "\\u0000 in a string is not supported"), NULL;
      if (cp < 0x80) *o++ = (char)cp;
      else if (cp < 0x800) {
        *o++ = (char)(0xc0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3f));
      } else if (cp < 0x10000) {
        *o++ = (char)(0xe0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
      } else {
        *o++ = (char)(0xf0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
      }
      break;
    }
    default: return j_error(js, js->p - 2, "unknown escape in a string"), NULL;
    }
  }
  js->p++; /* closing quote */
  *o++ = 0;
  js->used += (size_t)(o - out);
  *len = (size_t)(o - out) - 1;
  return out;
}

static int j_digits(jparser *js) {
  const char *s = js->p;
  while (js->p < js->end && *js->p >= '0' && *js->p <= '9') js->p++;
  return js->p > s;
}

static int j_value(jparser *js);

/* Parses members or elements until the closing bracket; links them under node id. */
static int j_container(jparser *js, int id, int is_obj) {
  const char *open = js->p++;
  char close = is_obj ? '}' : ']';
  if (++js->depth > J_MAX_DEPTH) return j_error(js, open, "nested deeper than 128 levels");
  int last = -1;
  j_ws(js);
  if (js->p < js->end && *js->p == close) {
    js->p++;
    js->depth--;
    return id;
  }
  for (;;) {
    const char *key = NULL;
    if (is_obj) {
      size_t klen;
      if (js->p >= js->end || *js->p != '"') return j_error(js, js->p, "expected a string key");
      if (!(key = j_string(js, &klen))) return -1;
      j_ws(js);
      if (js->p >= js->end || *js->p != ':') return j_error(js, js->p, "expected ':' after a key");
      js->p++;
    }
    int v = j_value(js);
    if (v < 0) return -1;
    js->nodes.v[v].key = key;
    if (last < 0) js->nodes.v[id].child = v;
    else js->nodes.v[last].next = v;
    last = v;
    js->nodes.v[id].n++;
    j_ws(js);
    if (js->p < js->end && *js->p == ',') {
      js->p++;
      j_ws(js);
      continue;
    }
    if (js->p < js->end && *js->p == close) {
      js->p++;
      js->depth--;
      return id;
    }
    return j_error(js, js->p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int j_value(jparser *js) {
  j_ws(js);
  if (js->p >= js->end) return j_error(js, js->p, "unexpected end of header");
  const char *at = js->p;
  char c = *at;
  if (c == '{' || c == '[') return j_container(js, j_new(js, c == '{' ? J_OBJ : J_ARR, at), c == '{');
  if (c == '"') {
    size_t len;
    const char *s = j_string(js, &len);
    if (!s) return -1;
    int id = j_new(js, J_STR, at);
    js->nodes.v[id].s = s;
    js->nodes.v[id].len = len;
    return id;
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    if (c == '-') js->p++;
    if (js->p < js->end && *js->p == '0') js->p++;
    else if (!j_digits(js)) return j_error(js, at, "bad number");
    if (js->p < js->end && *js->p == '.') {
      js->p++;
      if (!j_digits(js)) return j_error(js, at, "bad number");
    }
    if (js->p < js->end && (*js->p == 'e' || *js->p == 'E')) {
      js->p++;
      if (js->p < js->end && (*js->p == '+' || *js->p == '-')) js->p++;
      if (!j_digits(js)) return j_error(js, at, "bad number");
    }
    int id = j_new(js, J_NUM, at);
    js->nodes.v[id].s = at;
    js->nodes.v[id].len = (size_t)(js->p - at);
    return id;
  }
  static const struct {
    const char *word;
    int type;
  } lits[] = {{"true", J_BOOL}, {"false", J_BOOL}, {"null", J_NULL}};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(lits[i].word);
    if ((size_t)(js->end - at) >= n && !memcmp(at, lits[i].word, n)) {
      js->p += n;
      return j_new(js, lits[i].type, at);
    }
  }
  return j_error(js, at, "unexpected character");
}

/* A JSON number that is a non-negative integer below 2^64 (what the reference crate's usize accepts). */
static int j_uint(const jnode *nd, uint64_t *out) {
  if (nd->type != J_NUM || nd->len == 0) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < nd->len; i++) {
    char c = nd->s[i];
    if (c < '0' || c > '9') return -1;
    uint64_t d = (uint64_t)(c - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* ---- the open file ---------------------------------------------------------------------------------- */

typedef struct {
  const char *name; /* in the arena */
  int dtype;        /* st_dtype */
  int rank;
  int dims;         /* first dim in em_st_file.dims */
  uint64_t begin, end;
} st_entry;

struct em_st_file {
  char *path;
  unsigned char *map;
  size_t size;     /* of the file */
  size_t data_off; /* 8 + header length */
  char *arena;     /* decoded header strings */
  int n;
  st_entry *e;     /* in file order */
  int *by_name;    /* entry indices sorted by name */
  int64_t *dims;
  int nmeta;
  const char **meta_k, **meta_v; /* sorted by key */
};

static int cmp_entry_name(const void *a, const void *b) {
  return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int cmp_entry_offsets(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_index_name(const void *a, const void *b, void *entries) {
  const st_entry *e = entries;
  return strcmp(e[*(const int *)a].name, e[*(const int *)b].name);
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Reads one tensor entry (node v, key = name) into *e; dims are appended to *dims. */
static em_status parse_entry(const char *path, const jparser *js, const jnode *v, st_entry *e, uint64_t **dims,
                             int *ndims, int *cap, char *err) {
  st_label nm = label(v->key);
  if (v->type != J_OBJ)
    return st_fail(err, EM_EINPUT, path, "tensor '%s': entry is %s, not a JSON object", nm.s, j_kind[v->type]);
  const jnode *f_dtype = NULL, *f_shape = NULL, *f_off = NULL;
  for (int c = v->child; c >= 0; c = js->nodes.v[c].next) {
    const jnode *m = &js->nodes.v[c];
    const jnode **slot = !strcmp(m->key, "dtype") ? &f_dtype
                         : !strcmp(m->key, "shape") ? &f_shape
                         : !strcmp(m->key, "data_offsets") ? &f_off
                                                           : NULL;
    if (!slot)
      return st_fail(err, EM_EINPUT, path,
                     "tensor '%s': unknown field \"%s\" (an entry has exactly dtype, shape and data_offsets)", nm.s,
                     label(m->key).s);
    if (*slot) return st_fail(err, EM_EINPUT, path, "tensor '%s': field \"%s\" appears twice", nm.s, m->key);
    *slot = m;
  }
  if (!f_dtype) return st_fail(err, EM_EINPUT, path, "tensor '%s': no \"dtype\" field", nm.s);
  if (!f_shape) return st_fail(err, EM_EINPUT, path, "tensor '%s': no \"shape\" field", nm.s);
  if (!f_off) return st_fail(err, EM_EINPUT, path, "tensor '%s': no \"data_offsets\" field", nm.s);

  if (f_dtype->type != J_STR)
    return st_fail(err, EM_EINPUT, path, "tensor '%s': dtype is %s, not a string", nm.s, j_kind[f_dtype->type]);
  e->dtype = st_dtype_parse(f_dtype->s);
  if (e->dtype < 0)
    return st_fail(err, EM_EINPUT, path,
                   "tensor '%s': unknown dtype '%s' (known: BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, "
                   "F32, F64, F8_E4M3, F8_E5M2)",
                   nm.s, label(f_dtype->s).s);

  if (f_shape->type != J_ARR)
    return st_fail(err, EM_EINPUT, path, "tensor '%s': shape is %s, not a list", nm.s, j_kind[f_shape->type]);
  e->rank = f_shape->n;
  e->dims = *ndims;
  int k = 0;
  for (int c = f_shape->child; c >= 0; c = js->nodes.v[c].next, k++) {
    uint64_t d;
    const jnode *x = &js->nodes.v[c];
    if (j_uint(x, &d)) {
      if (x->type == J_NUM)
        return st_fail(err, EM_EINPUT, path, "tensor '%s': shape[%d] = %.*s is not a non-negative integer", nm.s, k,
                       (int)(x->len < 40 ? x->len : 40), x->s);
      return st_fail(err, EM_EINPUT, path, "tensor '%s': shape[%d] is %s, not a non-negative integer", nm.s, k,
                     j_kind[x->type]);
    }
    if (d > (uint64_t)INT64_MAX)
      return st_fail(err, EM_EINPUT, path, "tensor '%s': shape[%d] = %llu is above 2^63-1", nm.s, k,
                     (unsigned long long)d);
    if (*ndims == *cap) {
      *cap = *cap ? 2 * *cap : 64;
      *dims = em_realloc(*dims, sizeof(uint64_t) * (size_t)*cap);
    }
    (*dims)[(*ndims)++] = d;
  }

  uint64_t off[2];
  const jnode *b = f_off->type == J_ARR && f_off->n == 2 ? &js->nodes.v[f_off->child] : NULL;
  if (!b || j_uint(b, &off[0]) || j_uint(&js->nodes.v[b->next], &off[1]))
    return st_fail(err, EM_EINPUT, path, "tensor '%s': data_offsets must be [begin, end], two non-negative integers",
                   nm.s);
  e->begin = off[0];
  e->end = off[1];
  if (e->begin > e->end)
    return st_fail(err, EM_EINPUT, path, "tensor '%s': data_offsets [%llu, %llu] has begin after end", nm.s,
                   (unsigned long long)e->begin, (unsigned long long)e->end);

  /* element count, then bytes, each product checked as the reference crate does (left to right) */
  const uint64_t *d = *dims + e->dims;
  char sh[96];
  uint64_t need = 1;
  int overflow = 0;
  for (int i = 0; i < e->rank && !overflow; i++) {
    if (d[i] && need > UINT64_MAX / d[i]) overflow = 1;
    else need *= d[i];
  }
  uint64_t es = (uint64_t)st_dtypes[e->dtype].bytes;
  if (overflow || need > UINT64_MAX / es)
    return st_fail(err, EM_EINPUT, path, "tensor '%s': shape %s × %s overflows 64 bits", nm.s,
                   fmt_dims(sh, sizeof sh, d, e->rank), st_dtypes[e->dtype].name);
  need *= es;
  if (e->end - e->begin != need)
    return st_fail(err, EM_EINPUT, path,
                   "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape %s × %s needs %llu", nm.s,
                   (unsigned long long)e->begin, (unsigned long long)e->end,
                   (unsigned long long)(e->end - e->begin), fmt_dims(sh, sizeof sh, d, e->rank),
                   st_dtypes[e->dtype].name, (unsigned long long)need);
  return EM_OK;
}

/* em_st_open's state, owned until the file takes it: the mapping, the parsed header, the entries, the metadata. */
typedef struct {
  const char *path;
  int fd;
  unsigned char *map;
  size_t size;
  uint64_t hlen;
  jparser js;
  uint64_t *dims;
  int ndims, capdims;
  char *arena;
  st_entry *e;
  int ne, nmeta;
  const char **mk, **mv;
} st_open_t;

/* The file mapped read-only (at least the 8 bytes of the header length). */
static em_status st_map(st_open_t *o, char *err) {
  o->fd = open(o->path, O_RDONLY | O_CLOEXEC);
  if (o->fd < 0) return st_fail(err, EM_EINPUT, o->path, "cannot open: %s", strerror(errno));
  struct stat sb;
  if (fstat(o->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) return st_fail(err, EM_EINPUT, o->path, "not a regular file");
  o->size = (size_t)sb.st_size;
  if (o->size < 8)
    return st_fail(err, EM_EINPUT, o->path, "file is %zu bytes; a safetensors file has at least 8 (the header length)",
                   o->size);
  o->map = mmap(NULL, o->size, PROT_READ, MAP_PRIVATE, o->fd, 0);
  if (o->map == MAP_FAILED) {
    o->map = NULL;
    return st_fail(err, EM_ERUN, o->path, "cannot mmap %zu bytes: %s", o->size, strerror(errno));
  }
  close(o->fd);
  o->fd = -1;
  return EM_OK;
}

/* The header: its length within the limit and the file, UTF-8, one JSON object; returns its root node. */
static em_status st_header(st_open_t *o, const jnode **root, char *err) {
  memcpy(&o->hlen, o->map, 8);
  if (o->hlen > EM_ST_MAX_HEADER)
    return st_fail(err, EM_EINPUT, o->path, "header length %llu exceeds the limit of %llu bytes", (unsigned long long)o->hlen,
                   (unsigned long long)EM_ST_MAX_HEADER);
  if (8 + o->hlen > o->size)
    return st_fail(err, EM_EINPUT, o->path, "header length %llu runs past the end of the file (%zu bytes)",
                   (unsigned long long)o->hlen, o->size);
  const char *h = (const char *)o->map + 8;
  size_t bad = utf8_check((const unsigned char *)h, (size_t)o->hlen);
  if (bad < o->hlen) return st_fail(err, EM_EINPUT, o->path, "header is not valid UTF-8 (byte %zu)", bad);
  o->arena = em_alloc((size_t)o->hlen + 1);
  o->js.p = o->js.base = h;
  o->js.end = h + o->hlen;
  o->js.arena = o->arena;
  int r = j_value(&o->js);
  if (r >= 0) {
    j_ws(&o->js);
    if (o->js.p < o->js.end) r = j_error(&o->js, o->js.p, "unexpected text after the header object");
  }
  if (r < 0) return st_fail(err, EM_EINPUT, o->path, "header is not valid JSON: %s at byte %zu", o->js.msg, o->js.err_at);
  *root = &o->js.nodes.v[r];
  if ((*root)->type != J_OBJ) return st_fail(err, EM_EINPUT, o->path, "header is %s, not a JSON object", j_kind[(*root)->type]);
  return EM_OK;
}

/* The __metadata__ object v: string values only. */
static em_status st_metadata(st_open_t *o, const jnode *v, char *err) {
  if (v->type == J_NULL) return EM_OK; /* the reference crate reads null as no metadata */
  if (v->type != J_OBJ) return st_fail(err, EM_EINPUT, o->path, "__metadata__ is %s, not an object of strings", j_kind[v->type]);
  o->mk = em_alloc(sizeof *o->mk * (size_t)(v->n ? v->n : 1));
  o->mv = em_alloc(sizeof *o->mv * (size_t)(v->n ? v->n : 1));
  for (int m = v->child; m >= 0; m = o->js.nodes.v[m].next) {
    const jnode *x = &o->js.nodes.v[m];
    if (x->type != J_STR)
      return st_fail(err, EM_EINPUT, o->path, "__metadata__ value for key '%s' is %s, not a string", label(x->key).s,
                     j_kind[x->type]);
    o->mk[o->nmeta] = x->key;
    o->mv[o->nmeta++] = x->s;
  }
  return EM_OK;
}

/* The metadata's keys in order (after every entry was read, as the errors were always ordered), each once. */
static em_status st_metadata_keys(st_open_t *o, char *err) {
  if (!o->nmeta) return EM_OK;
  /* Sorting key pointers keeps pairs intact by sorting pairs together. */
  const char **pairs = em_alloc(sizeof *pairs * 2 * (size_t)o->nmeta);
  for (int i = 0; i < o->nmeta; i++) pairs[2 * i] = o->mk[i], pairs[2 * i + 1] = o->mv[i];
  qsort(pairs, (size_t)o->nmeta, 2 * sizeof *pairs, cmp_str_ptr);
  for (int i = 0; i < o->nmeta; i++) o->mk[i] = pairs[2 * i], o->mv[i] = pairs[2 * i + 1];
  free(pairs);
  for (int i = 1; i < o->nmeta; i++)
    if (!strcmp(o->mk[i], o->mk[i - 1]))
      return st_fail(err, EM_EINPUT, o->path, "__metadata__ key '%s' appears twice", label(o->mk[i]).s);
  return EM_OK;
}

/* Every member of the header object r: a tensor entry (parse_entry) or the one __metadata__; names unique. */
static em_status st_entries(st_open_t *o, const jnode *r, char *err) {
  em_status st;
  o->e = em_alloc(sizeof *o->e * (size_t)(r->n ? r->n : 1));
  int seen_meta = 0;
  for (int c = r->child; c >= 0; c = o->js.nodes.v[c].next) {
    const jnode *v = &o->js.nodes.v[c];
    if (strcmp(v->key, "__metadata__")) {
      o->e[o->ne].name = v->key;
      if ((st = parse_entry(o->path, &o->js, v, &o->e[o->ne], &o->dims, &o->ndims, &o->capdims, err))) return st;
      o->ne++;
      continue;
    }
    if (seen_meta++) return st_fail(err, EM_EINPUT, o->path, "\"__metadata__\" appears twice in the header");
    if ((st = st_metadata(o, v, err))) return st;
  }
  if ((st = st_metadata_keys(o, err))) return st;
  qsort(o->e, (size_t)o->ne, sizeof *o->e, cmp_entry_name);
  for (int i = 1; i < o->ne; i++)
    if (!strcmp(o->e[i].name, o->e[i - 1].name))
      return st_fail(err, EM_EINPUT, o->path, "tensor name '%s' appears twice in the header", label(o->e[i].name).s);
  return EM_OK;
}

/* The data section: sorted by offsets, the entries must tile [0, size - 8 - hlen) exactly. */
static em_status st_tiling(st_open_t *o, char *err) {
  st_entry *e = o->e;
  const char *path = o->path;
  qsort(e, (size_t)o->ne, sizeof *e, cmp_entry_offsets);
  uint64_t data_size = (uint64_t)o->size - 8 - o->hlen, pos = 0;
  for (int i = 0; i < o->ne; i++) {
    if (e[i].begin == pos) {
      pos = e[i].end;
      continue;
    }
    if (i == 0)
      return st_fail(err, EM_EINPUT, path, "tensor '%s' is first in the data but begins at byte %llu, not 0",
                     label(e[i].name).s, (unsigned long long)e[i].begin);
    if (e[i].begin > pos)
      return st_fail(err, EM_EINPUT, path,
                     "gap of %llu bytes between tensor '%s' (ends at %llu) and tensor '%s' (begins at %llu)",
                     (unsigned long long)(e[i].begin - pos), label(e[i - 1].name).s, (unsigned long long)pos,
                     label(e[i].name).s, (unsigned long long)e[i].begin);
    return st_fail(err, EM_EINPUT, path, "tensor '%s' (bytes %llu..%llu) overlaps tensor '%s' (ends at %llu)",
                   label(e[i].name).s, (unsigned long long)e[i].begin, (unsigned long long)e[i].end,
                   label(e[i - 1].name).s, (unsigned long long)pos);
  }
  if (pos < data_size)
    return st_fail(err, EM_EINPUT, path,
                   "%llu trailing bytes after the last tensor (the tensors end at byte %llu of a %llu-byte data section)",
                   (unsigned long long)(data_size - pos), (unsigned long long)pos, (unsigned long long)data_size);
  if (pos > data_size)
    return st_fail(err, EM_EINPUT, path,
                   "%llu bytes missing: the tensors end at byte %llu but the data section has %llu (truncated file?)",
                   (unsigned long long)(pos - data_size), (unsigned long long)pos, (unsigned long long)data_size);
  return EM_OK;
}

/* The open file from a checked state, which it takes over. */
static em_st_file *st_file(st_open_t *o) {
  em_st_file *f = em_alloc(sizeof *f);
  f->path = em_strdup(o->path);
  f->map = o->map;
  f->size = o->size;
  f->data_off = 8 + (size_t)o->hlen;
  f->arena = o->arena;
  f->n = o->ne;
  f->e = o->e;
  f->dims = em_alloc(sizeof(int64_t) * (size_t)(o->ndims ? o->ndims : 1));
  for (int i = 0; i < o->ndims; i++) f->dims[i] = (int64_t)o->dims[i];
  f->by_name = em_alloc(sizeof(int) * (size_t)(o->ne ? o->ne : 1));
  for (int i = 0; i < o->ne; i++) f->by_name[i] = i;
  qsort_r(f->by_name, (size_t)o->ne, sizeof(int), cmp_index_name, o->e);
  f->nmeta = o->nmeta;
  f->meta_k = o->mk;
  f->meta_v = o->mv;
  o->map = NULL, o->arena = NULL, o->e = NULL, o->mk = o->mv = NULL; /* now f's */
  return f;
}

em_st_file *em_st_open(const char *path, char *err) {
  st_open_t o;
  memset(&o, 0, sizeof o);
  o.path = path;
  o.fd = -1;
  const jnode *root = NULL;
  em_st_file *f = NULL;
  if (!st_map(&o, err) && !st_header(&o, &root, err) && !st_entries(&o, root, err) && !st_tiling(&o, err)) f = st_file(&o);
  if (o.fd >= 0) close(o.fd);
  if (o.map) munmap(o.map, o.size);
  free(o.js.nodes.v);
  free(o.dims);
  free(o.arena);
  free(o.e);
  free(o.mk);
  free(o.mv);
  return f;
}

void em_st_close(em_st_file *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->size);
  free(f->path);
  free(f->arena);
  free(f->e);
  free(f->by_name);
  free(f->dims);
  free(f->meta_k);
  free(f->meta_v);
  free(f);
}

/* ---- accessors -------------------------------------------------------------------------------------- */

const char *em_st_path(const em_st_file *f) { return f->path; }
int em_st_count(const em_st_file *f) { return f->n; }
const char *em_st_name(const em_st_file *f, int i) { return i >= 0 && i < f->n ? f->e[i].name : NULL; }
const char *em_st_dtype(const em_st_file *f, int i) {
  return i >= 0 && i < f->n ? st_dtypes[f->e[i].dtype].name : NULL;
}
int em_st_rank(const em_st_file *f, int i) { return i >= 0 && i < f->n ? f->e[i].rank : -1; }
const int64_t *em_st_shape(const em_st_file *f, int i) { return i >= 0 && i < f->n ? f->dims + f->e[i].dims : NULL; }

const void *em_st_data(const em_st_file *f, int i, size_t *nbytes) {
  if (i < 0 || i >= f->n) {
    if (nbytes) *nbytes = 0;
    return NULL;
  }
  if (nbytes) *nbytes = (size_t)(f->e[i].end - f->e[i].begin);
  return f->map + f->data_off + f->e[i].begin;
}

int em_st_find(const em_st_file *f, const char *name) {
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(f->e[f->by_name[mid]].name, name);
    if (!c) return f->by_name[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

const char *em_st_meta(const em_st_file *f, const char *key) {
  int lo = 0, hi = f->nmeta - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(f->meta_k[mid], key);
    if (!c) return f->meta_v[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}

int em_st_meta_count(const em_st_file *f) { return f->nmeta; }
const char *em_st_meta_key(const em_st_file *f, int i) { return i >= 0 && i < f->nmeta ? f->meta_k[i] : NULL; }
const char *em_st_meta_value(const em_st_file *f, int i) { return i >= 0 && i < f->nmeta ? f->meta_v[i] : NULL; }

/* ---- conversion to a host tensor -------------------------------------------------------------------- */

static inline float bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static inline float f16_to_f32(uint16_t b) {
  _Float16 h;
  memcpy(&h, &b, 2);
  return (float)h;
}

/* How elements reach the tensor: straight into float or double storage where that is exactly what em_t_set
 * would store, otherwise through em_t_set. */
enum { TO_FLOAT, TO_DOUBLE, TO_SET };

#define CONVERT(T, VAL)                                                                            \
  do {                                                                                             \
    const unsigned char *s_ = src;                                                                 \
    if (how == TO_FLOAT) {                                                                         \
      float *o_ = t->data;                                                                         \
      for (int64_t k = 0; k < n; k++) {                                                            \
        T x;                                                                                       \
        memcpy(&x, s_ + (size_t)k * sizeof x, sizeof x);                                           \
        o_[k] = (float)(double)(VAL);                                                                      \
      }                                                                                            \
    } else if (how == TO_DOUBLE) {                                                                 \
      double *o_ = t->data;                                                                        \
      for (int64_t k = 0; k < n; k++) {                                                            \
        T x;                                                                                       \
        memcpy(&x, s_ + (size_t)k * sizeof x, sizeof x);                                           \
        o_[k] = (double)(VAL);                                                                     \
      }                                                                                            \
    } else {                                                                                       \
      for (int64_t k = 0; k < n; k++) {                                                            \
        T x;                                                                                       \
        memcpy(&x, s_ + (size_t)k * sizeof x, sizeof x);                                           \
        em_t_set(t, k, (double)(VAL));                                                             \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* Integer sources every value of which an i32 holds. */
static int fits_i32(int sd) { return sd == ST_U8 || sd == ST_I8 || sd == ST_I16 || sd == ST_U16 || sd == ST_I32; }

em_tensor *em_st_load(const em_st_file *f, int i, em_dtype want, char *err) {
  if (i < 0 || i >= f->n) {
    st_fail(err, EM_EINPUT, f->path, "tensor index %d is outside 0..%d", i, f->n - 1);
    return NULL;
  }
  const st_entry *e = &f->e[i];
  st_label nm = label(e->name);
  if ((unsigned)want >= EM_NDTYPES) {
    st_fail(err, EM_EINPUT, f->path, "tensor '%s': target dtype %d is unknown", nm.s, (int)want);
    return NULL;
  }
  int sd = e->dtype;
  if (sd == ST_F8_E4M3 || sd == ST_F8_E5M2) {
    st_fail(err, EM_EINPUT, f->path,
            "tensor '%s' has dtype %s, which emmy cannot load (it loads BOOL, U8, I8, I16, U16, I32, U32, I64, U64, "
            "F16, BF16, F32 and F64)",
            nm.s, st_dtypes[sd].name);
    return NULL;
  }
  if (e->rank > EM_TENSOR_MAX_RANK) {
    st_fail(err, EM_EINPUT, f->path, "tensor '%s' has rank %d; emmy tensors have at most %d dims", nm.s, e->rank,
            EM_TENSOR_MAX_RANK);
    return NULL;
  }
  char terr[EM_ERR_MAX];
  em_tensor *t = em_tensor_new(want, e->rank, f->dims + e->dims, terr);
  if (!t) {
    st_fail(err, EM_ERUN, f->path, "tensor '%s': %s", nm.s, terr);
    return NULL;
  }
  const void *src = f->map + f->data_off + e->begin;
  int64_t n = t->numel;
  /* Transparent huge pages for a large destination: first-touch page faults, not the conversion, dominate
   * an embedding-sized load (0.23 s → 0.07 s for 151669×1024 bf16). Advice only; failure is harmless. */
  size_t out_bytes = (size_t)n * (t->is_f32 ? 4 : 8), huge = (size_t)2 << 20;
  if (out_bytes >= 2 * huge) {
    uintptr_t a = ((uintptr_t)t->data + huge - 1) & ~(uintptr_t)(huge - 1);
    uintptr_t z = ((uintptr_t)t->data + out_bytes) & ~(uintptr_t)(huge - 1);
    if (z > a) madvise((void *)a, z - a, MADV_HUGEPAGE);
  }
  int how = TO_SET;
  if (want == EM_F32 || (want == EM_BF16 && sd == ST_BF16) || (want == EM_F16 && sd == ST_F16)) how = TO_FLOAT;
  else if (want == EM_F64 || ((want == EM_I32 || want == EM_I64) && fits_i32(sd)) ||
           (want == EM_I64 && sd == ST_U32))
    how = TO_DOUBLE;
  switch (sd) {
  case ST_BOOL: CONVERT(uint8_t, x != 0); break;
  case ST_U8: CONVERT(uint8_t, x); break;
  case ST_I8: CONVERT(int8_t, x); break;
  case ST_I16: CONVERT(int16_t, x); break;
  case ST_U16: CONVERT(uint16_t, x); break;
  case ST_I32: CONVERT(int32_t, x); break;
  case ST_U32: CONVERT(uint32_t, x); break;
  case ST_I64: CONVERT(int64_t, x); break;
  case ST_U64: CONVERT(uint64_t, x); break;
  case ST_F16: CONVERT(uint16_t, f16_to_f32(x)); break;
  case ST_BF16: CONVERT(uint16_t, bf16_to_f32(x)); break;
  case ST_F32: CONVERT(float, x); break;
  case ST_F64: CONVERT(double, x); break;
  default: break;
  }
  return t;
}

/* ---- writer ----------------------------------------------------------------------------------------- */

typedef EM_VEC(char) strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
  if (b->n + (int)n + 1 > b->cap) {
    while (b->n + (int)n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
    b->v = em_realloc(b->v, (size_t)b->cap);
  }
  memcpy(b->v + b->n, s, n);
  b->n += (int)n;
  b->v[b->n] = 0;
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  sb_put(b, tmp, (size_t)n);
}

/* A JSON string as serde_json writes it: \" \\ \b \f \n \r \t, other control bytes as \u00xx. */
static void sb_json_str(strbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f"
                    : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
    if (esc) sb_put(b, esc, 2);
    else if (c < 0x20) sb_printf(b, "\\u%04x", c);
    else sb_put(b, (const char *)&c, 1);
  }
  sb_put(b, "\"", 1);
}

static const char *st_name_of(em_dtype dt) {
  switch (dt) {
  case EM_BF16: return "BF16";
  case EM_F16: return "F16";
  case EM_F32: return "F32";
  case EM_F64: return "F64";
  case EM_I32: return "I32";
  case EM_I64: return "I64";
  case EM_BOOL: return "BOOL";
  default: return NULL;
  }
}

/* Writes element k of t in its file encoding into p; returns the byte count. */
static int encode(const em_tensor *t, int64_t k, unsigned char *p) {
  switch (t->dtype) {
  case EM_BF16: {
    uint16_t h = em_f32_to_bf16_bits(((const float *)t->data)[k]);
    memcpy(p, &h, 2);
    return 2;
  }
  case EM_F16: {
    uint16_t h = em_f32_to_f16_bits(((const float *)t->data)[k]);
    memcpy(p, &h, 2);
    return 2;
  }
  case EM_F32: memcpy(p, (const float *)t->data + k, 4); return 4;
  case EM_F64: memcpy(p, (const double *)t->data + k, 8); return 8;
  case EM_I32: { /* stored values are already integers in range (em_t_set) */
    int32_t x = (int32_t)((const double *)t->data)[k];
    memcpy(p, &x, 4);
    return 4;
  }
  case EM_I64: {
    int64_t x = (int64_t)((const double *)t->data)[k];
    memcpy(p, &x, 8);
    return 8;
  }
  case EM_BOOL: *p = ((const double *)t->data)[k] != 0; return 1;
  default: return 0;
  }
}

typedef struct {
  const char *name;
  const em_tensor *t;
} st_item;

static int cmp_item(const void *a, const void *b) {
  return strcmp(((const st_item *)a)->name, ((const st_item *)b)->name);
}

em_status em_st_write(const char *path, int n, const char *const *names, const em_tensor *const *tensors,
                      const char *const *meta_kv, char *err) {
  em_status st = EM_OK;
  st_item *items = NULL;
  const char **meta = NULL;
  strbuf hb = {0};
  em_file_out *out = NULL;
  unsigned char *buf = NULL;
  int nmeta = 0;

  if (n < 0 || (n > 0 && (!names || !tensors))) {
    st = st_fail(err, EM_EINPUT, path, "cannot write %d tensors without names and tensors", n);
    goto cleanup;
  }
  items = em_alloc(sizeof *items * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    const char *nm = names[i];
    const em_tensor *t = tensors[i];
    if (!nm || !t) {
      st = st_fail(err, EM_EINPUT, path, "tensor %d has no %s", i, nm ? "tensor" : "name");
      goto cleanup;
    }
    if (utf8_check((const unsigned char *)nm, strlen(nm)) != strlen(nm)) {
      st = st_fail(err, EM_EINPUT, path, "tensor name '%s' is not valid UTF-8", label(nm).s);
      goto cleanup;
    }
    if (!strcmp(nm, "__metadata__")) {
      st = st_fail(err, EM_EINPUT, path, "'__metadata__' is reserved and cannot name a tensor");
      goto cleanup;
    }
    if (!st_name_of(t->dtype)) {
      st = st_fail(err, EM_EINPUT, path, "tensor '%s' has dtype %d, which safetensors cannot hold", label(nm).s,
                   (int)t->dtype);
      goto cleanup;
    }
    items[i].name = nm;
    items[i].t = t;
  }
  qsort(items, (size_t)n, sizeof *items, cmp_item);
  for (int i = 1; i < n; i++)
    if (!strcmp(items[i].name, items[i - 1].name)) {
      st = st_fail(err, EM_EINPUT, path, "tensor name '%s' is given twice", label(items[i].name).s);
      goto cleanup;
    }
  if (meta_kv) {
    while (meta_kv[2 * nmeta]) {
      if (!meta_kv[2 * nmeta + 1]) {
        st = st_fail(err, EM_EINPUT, path, "metadata key '%s' has no value", label(meta_kv[2 * nmeta]).s);
        goto cleanup;
      }
      nmeta++;
    }
    meta = em_alloc(sizeof *meta * 2 * (size_t)(nmeta ? nmeta : 1));
    for (int i = 0; i < 2 * nmeta; i++) {
      meta[i] = meta_kv[i];
      if (utf8_check((const unsigned char *)meta[i], strlen(meta[i])) != strlen(meta[i])) {
        st = st_fail(err, EM_EINPUT, path, "metadata %s '%s' is not valid UTF-8", i % 2 ? "value" : "key",
                     label(meta[i]).s);
        goto cleanup;
      }
    }
    qsort(meta, (size_t)nmeta, 2 * sizeof *meta, cmp_str_ptr);
    for (int i = 1; i < nmeta; i++)
      if (!strcmp(meta[2 * i], meta[2 * i - 2])) {
        st = st_fail(err, EM_EINPUT, path, "metadata key '%s' is given twice", label(meta[2 * i]).s);
        goto cleanup;
      }
  }

  /* header, compact as serde_json writes it */
  sb_put(&hb, "{", 1);
  if (meta) {
    sb_put(&hb, "\"__metadata__\":{", 16);
    for (int i = 0; i < nmeta; i++) {
      if (i) sb_put(&hb, ",", 1);
      sb_json_str(&hb, meta[2 * i]);
      sb_put(&hb, ":", 1);
      sb_json_str(&hb, meta[2 * i + 1]);
    }
    sb_put(&hb, "}", 1);
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    const em_tensor *t = items[i].t;
    if (i || meta) sb_put(&hb, ",", 1);
    sb_json_str(&hb, items[i].name);
    sb_printf(&hb, ":{\"dtype\":\"%s\",\"shape\":[", st_name_of(t->dtype));
    for (int k = 0; k < t->rank; k++) sb_printf(&hb, "%s%lld", k ? "," : "", (long long)t->shape[k]);
    uint64_t bytes = (uint64_t)t->numel * (uint64_t)em_dtype_bytes(t->dtype);
    sb_printf(&hb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + bytes));
    off += bytes;
  }
  sb_put(&hb, "}", 1);
  while (hb.n % 8) sb_put(&hb, " ", 1);

  /* through src/file.c, fsynced: the file is the old one or the whole new one, also after a crash */
  if ((st = em_file_begin(&out, path, EM_FILE_SYNC, err))) goto cleanup;
  uint64_t hlen = (uint64_t)hb.n;
  em_file_put(out, &hlen, 8, NULL);
  em_file_put(out, hb.v, (size_t)hb.n, NULL);
  enum { CHUNK = 1 << 20 };
  buf = em_alloc(CHUNK);
  for (int i = 0; i < n; i++) {
    const em_tensor *t = items[i].t;
    size_t used = 0;
    for (int64_t k = 0; k < t->numel; k++) {
      used += (size_t)encode(t, k, buf + used);
      if (used > CHUNK - 8) {
        if (em_file_put(out, buf, used, NULL)) break; /* kept: the commit reports it */
        used = 0;
      }
    }
    if (used) em_file_put(out, buf, used, NULL);
  }
  st = em_file_commit(out, err);
  out = NULL;

cleanup:
  em_file_abort(out); /* a failed write leaves neither path changed nor a stray temp */
  free(items);
  free(meta);
  free(hb.v);
  free(buf);
  return st;
}

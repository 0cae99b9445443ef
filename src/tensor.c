/* tensor.c — host tensors of the CPU reference: allocation, dtype-exact stores, seeded random fill that is
 * bit-identical on every machine (xoshiro256** and a polar normal with a portable log), .npy I/O and
 * tolerance-aware comparison. */
#include "tensor.h"

#include "file.h"

#include <math.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int stores_f32(em_dtype dt) { return dt == EM_BF16 || dt == EM_F16 || dt == EM_F32; }

/* The memory this process may use: physical memory, or less where a cgroup (v2 memory.max, v1
 * memory.limit_in_bytes, as a container sees its own at /sys/fs/cgroup) limits it. Read once: a property
 * of the machine, shared by every thread that allocates. */
static int64_t mem_limit;
static pthread_once_t mem_once = PTHREAD_ONCE_INIT;

static void read_mem_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  mem_limit = pages > 0 && page > 0 ? (int64_t)pages * (int64_t)page : INT64_MAX;
  static const char *const files[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(files[i], "r");
    long long v;
    if (!f) continue;
    if (fscanf(f, "%lld", &v) == 1 && v > 0 && v < mem_limit) mem_limit = v; /* "max" reads as no number */
    fclose(f);
  }
}

static int64_t phys_bytes(void) {
  pthread_once(&mem_once, read_mem_limit);
  return mem_limit;
}

static char *fmt_shape(int rank, const int64_t *shape, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
  return buf;
}

void *em_tensor_alloc_bytes(int64_t bytes, const char *what, char *err) {
  int64_t phys = phys_bytes();
  if (bytes > phys) {
    em_fail(err, EM_ERUN, "%s needs %.1f GiB, more than the %.1f GiB of memory this machine gives emmy: use smaller sizes", what,
            (double)bytes / (1 << 30), (double)phys / (1 << 30));
    return NULL;
  }
  void *p = bytes > 0 && (uint64_t)bytes <= SIZE_MAX ? calloc(1, (size_t)bytes) : calloc(1, 1);
  if (!p)
    em_fail(err, EM_ERUN, "%s: cannot allocate %.1f GiB (out of memory): use smaller sizes or free memory", what,
            (double)bytes / (1 << 30));
  return p;
}

em_tensor *em_tensor_new(em_dtype dt, int rank, const int64_t *shape, char *err) {
  if ((unsigned)dt >= EM_NDTYPES) {
    em_fail(err, EM_EINPUT, "tensor dtype %d is unknown", (int)dt);
    return NULL;
  }
  if (rank < 0 || rank > EM_TENSOR_MAX_RANK) {
    em_fail(err, EM_EINPUT, "tensor rank %d is outside 0..%d", rank, EM_TENSOR_MAX_RANK);
    return NULL;
  }
  char sb[160], what[200];
  int64_t n = 1, bytes;
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0) {
      em_fail(err, EM_EINPUT, "tensor %s has a negative size at dim %d", fmt_shape(rank, shape, sb, sizeof sb), i);
      return NULL;
    }
  for (int i = 0; i < rank; i++)
    if (shape[i] == 0) n = 0; /* no elements, however large the other sizes */
  for (int i = 0; i < rank && n; i++)
    if (__builtin_mul_overflow(n, shape[i], &n)) {
      em_fail(err, EM_EINPUT, "tensor %s has more than 2^63-1 elements", fmt_shape(rank, shape, sb, sizeof sb));
      return NULL;
    }
  int es = stores_f32(dt) ? 4 : 8;
  if (__builtin_mul_overflow(n, (int64_t)es, &bytes)) {
    em_fail(err, EM_EINPUT, "tensor %s is more than 2^63-1 bytes", fmt_shape(rank, shape, sb, sizeof sb));
    return NULL;
  }
  snprintf(what, sizeof what, "a %s tensor %s", em_dtype_name(dt), fmt_shape(rank, shape, sb, sizeof sb));
  void *data = em_tensor_alloc_bytes(bytes, what, err);
  if (!data) return NULL;
  em_tensor *t = em_alloc(sizeof *t);
  t->dtype = dt;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
  t->numel = n;
  t->is_f32 = es == 4;
  t->data = data;
  return t;
}

void em_tensor_free(em_tensor *t) {
  if (!t) return;
  if (!t->borrowed) free(t->data);
  free(t);
}

em_tensor *em_tensor_clone(const em_tensor *t, char *err) {
  em_tensor *c = em_tensor_new(t->dtype, t->rank, t->shape, err);
  if (c) memcpy(c->data, t->data, (size_t)t->numel * (t->is_f32 ? 4 : 8));
  return c;
}

/* Truncation toward zero; NaN and values out of the integer's range become its minimum, as x86's
 * conversion (and so PyTorch's CPU cast) gives, without the undefined behaviour of a C cast. */
static double to_int(double v, int bits) {
  double lim = bits == 32 ? 2147483648.0 : 9223372036854775808.0;
  if (!(v > -lim - 1.0 && v < lim)) return -lim;
  return trunc(v);
}

void em_t_set(em_tensor *t, int64_t i, double v) {
  switch (t->dtype) {
  case EM_BF16:
  case EM_F16: ((float *)t->data)[i] = em_round_to(t->dtype, (double)(float)v); break;
  case EM_F32: ((float *)t->data)[i] = (float)v; break;
  case EM_F64: ((double *)t->data)[i] = v; break;
  case EM_I32: ((double *)t->data)[i] = to_int(v, 32); break;
  case EM_I64: ((double *)t->data)[i] = to_int(v, 64); break;
  case EM_BOOL: ((double *)t->data)[i] = v != 0 ? 1.0 : 0.0; break;
  default: break;
  }
}

/* ---- deterministic random numbers ------------------------------------------------------------------ */

typedef struct {
  uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

/* Uniform in [-1, 1) with 53 random bits. */
static double rng_sym(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-52 - 1.0; }

/* Natural log from +, -, *, / only: libm's log may differ by an ulp between library versions and CPU
 * dispatch paths, which would change the seeded inputs from machine to machine. x = m·2^e with m in
 * [sqrt(1/2), sqrt(2)); log(m) = 2·atanh(s), s = (m-1)/(m+1), |s| < 0.172, summed to 2^-60. */
static double portable_log(double x) {
  int e;
  double m = frexp(x, &e); /* exact: m in [0.5, 1) */
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  static const double inv_odd[] = {1.0 / 1,  1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11, 1.0 / 13,
                                    1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21, 1.0 / 23, 1.0 / 25, 1.0 / 27,
                                    1.0 / 29, 1.0 / 31, 1.0 / 33, 1.0 / 35, 1.0 / 37, 1.0 / 39};
  double s = (m - 1.0) / (m + 1.0), s2 = s * s, term = s, sum = 0.0;
  for (int k = 0; k < 20; k++) {
    sum += term * inv_odd[k];
    term *= s2;
    if (term < 1e-20 && term > -1e-20) break;
  }
  return 2.0 * sum + (double)e * 0.69314718055994530942;
}

/* Marsaglia's polar form of Box–Muller: a pair of independent standard normals without sin/cos. */
static void normal_pair(rng *r, double *z0, double *z1) {
  double u, v, s;
  do {
    u = rng_sym(r);
    v = rng_sym(r);
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  double f = sqrt(-2.0 * portable_log(s) / s);
  *z0 = u * f;
  *z1 = v * f;
}

/* Large tensors are filled in fixed chunks, each from its own stream seeded by (seed, chunk index), on
 * several threads: the values depend only on the seed, never on the thread count. */
#define FILL_CHUNK ((int64_t)1 << 16)

typedef struct {
  em_tensor *t;
  uint64_t seed;
  double mean, std;
  int64_t next; /* next chunk to take */
  pthread_mutex_t mu;
} fill_job;

static void fill_chunk(em_tensor *t, uint64_t seed, double mean, double std, int64_t lo, int64_t hi) {
  rng r;
  rng_seed(&r, seed);
  if (t->dtype == EM_BOOL) {
    for (int64_t i = lo; i < hi; i++) em_t_set(t, i, (double)(rng_next(&r) >> 63));
    return;
  }
  for (int64_t i = lo; i < hi; i += 2) {
    double z0, z1;
    normal_pair(&r, &z0, &z1);
    em_t_set(t, i, mean + std * z0);
    if (i + 1 < hi) em_t_set(t, i + 1, mean + std * z1);
  }
}

static uint64_t chunk_seed(uint64_t seed, int64_t c) {
  uint64_t x = seed ^ ((uint64_t)c * 0xd1b54a32d192ed03ULL);
  return c == 0 ? seed : splitmix64(&x);
}

static void *fill_worker(void *arg) {
  fill_job *j = arg;
  int64_t nchunks = (j->t->numel + FILL_CHUNK - 1) / FILL_CHUNK;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int64_t c = j->next++;
    pthread_mutex_unlock(&j->mu);
    if (c >= nchunks) return NULL;
    int64_t lo = c * FILL_CHUNK, hi = lo + FILL_CHUNK < j->t->numel ? lo + FILL_CHUNK : j->t->numel;
    fill_chunk(j->t, chunk_seed(j->seed, c), j->mean, j->std, lo, hi);
  }
}

void em_tensor_fill_normal(em_tensor *t, uint64_t seed, double mean, double std) {
  fill_job j = {t, seed, mean, std, 0, PTHREAD_MUTEX_INITIALIZER};
  long nt = t->numel > 8 * FILL_CHUNK ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
  if (nt > 64) nt = 64;
  pthread_t th[64];
  int started = 0;
  for (long i = 1; i < nt; i++)
    if (pthread_create(&th[started], NULL, fill_worker, &j) == 0) started++;
  fill_worker(&j);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
}

void em_tensor_fill_int(em_tensor *t, uint64_t seed, int64_t lo, int64_t hi) {
  rng r;
  rng_seed(&r, seed);
  uint64_t range = hi > lo ? (uint64_t)hi - (uint64_t)lo : 0;
  for (int64_t i = 0; i < t->numel; i++) {
    uint64_t x = rng_next(&r);
    if (t->dtype == EM_BOOL) {
      em_t_set(t, i, (double)(x >> 63));
      continue;
    }
    uint64_t k = range ? (uint64_t)(((unsigned __int128)x * range) >> 64) : 0;
    em_t_set(t, i, (double)(int64_t)((uint64_t)lo + k));
  }
}

void em_tensor_fill_const(em_tensor *t, double v) {
  for (int64_t i = 0; i < t->numel; i++) em_t_set(t, i, v);
}

/* ---- .npy ----------------------------------------------------------------------------------------- */

static const char *npy_descr(em_dtype dt) {
  switch (dt) {
  case EM_BF16: return "<f4";
  case EM_F16: return "<f2";
  case EM_F32: return "<f4";
  case EM_F64: return "<f8";
  case EM_I32: return "<i4";
  case EM_I64: return "<i8";
  case EM_BOOL: return "|b1";
  default: return NULL;
  }
}

em_status em_tensor_save_npy(const em_tensor *t, const char *path, char *err) {
  em_status st = EM_OK;
  em_file_out *f = NULL;
  unsigned char *buf = NULL;
  const char *descr = npy_descr(t->dtype);
  if (!descr) return em_fail(err, EM_EINPUT, "%s: cannot save dtype %d", path, (int)t->dtype);
  char shape[256];
  int o = snprintf(shape, sizeof shape, "(");
  for (int i = 0; i < t->rank; i++) o += snprintf(shape + o, sizeof shape - (size_t)o, "%lld, ", (long long)t->shape[i]);
  if (t->rank == 1) shape[o - 1] = 0, o--; /* "(3,)" */
  else if (t->rank > 1) shape[o - 2] = 0, o -= 2;
  snprintf(shape + o, sizeof shape - (size_t)o, ")");
  char header[512];
  int hl = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  /* pad with spaces so that magic (6) + version (2) + length (2) + header ends on a 64-byte boundary */
  int total = 10 + hl + 1;
  int pad = (64 - total % 64) % 64;
  memset(header + hl, ' ', (size_t)pad);
  header[hl + pad] = '\n';
  hl += pad + 1;

  int es = em_dtype_bytes(t->dtype == EM_BF16 ? EM_F32 : t->dtype);
  buf = em_tensor_alloc_bytes(t->numel * es, path, err); /* numel * es <= the tensor's own bytes */
  if (!buf) return EM_ERUN;
  for (int64_t i = 0; i < t->numel; i++) {
    double v = em_t_get(t, i);
    unsigned char *p = buf + (size_t)i * (size_t)es;
    switch (t->dtype) {
    case EM_BF16:
    case EM_F32: {
      float x = ((const float *)t->data)[i];
      memcpy(p, &x, 4);
      break;
    }
    case EM_F16: {
      uint16_t h = em_f32_to_f16_bits((float)v);
      memcpy(p, &h, 2);
      break;
    }
    case EM_F64: memcpy(p, &v, 8); break;
    case EM_I32: {
      int32_t x = (int32_t)v;
      memcpy(p, &x, 4);
      break;
    }
    case EM_I64: {
      int64_t x = (int64_t)v;
      memcpy(p, &x, 8);
      break;
    }
    case EM_BOOL: *p = v != 0; break;
    default: break;
    }
  }
  /* through src/file.c: the file is the old one or the whole new one; no fsync (a result that can be made again) */
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
  if ((st = em_file_begin(&f, path, 0, err))) goto cleanup;
  em_file_put(f, pre, 10, NULL);
  em_file_put(f, header, (size_t)hl, NULL);
  em_file_put(f, buf, (size_t)es * (size_t)t->numel, NULL);
  st = em_file_commit(f, err); /* reports the first failed put, if any */
  f = NULL;
cleanup:
  em_file_abort(f);
  free(buf);
  return st;
}

/* Finds 'key': in a numpy header dict and returns a pointer just past the colon and spaces. */
static const char *npy_key(const char *h, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(h, pat);
  if (!p) {
    snprintf(pat, sizeof pat, "\"%s\"", key);
    p = strstr(h, pat);
  }
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

/* The element types a .npy file may hold, by its header's descr (kind: 0 float, 1 int, 2 bool). */
static const struct {
  const char *d;
  int bytes, kind;
} npy_known[] = {{"<f2", 2, 0}, {"<f4", 4, 0}, {"<f8", 8, 0}, {"<i4", 4, 1}, {"<i8", 8, 1}, {"|b1", 1, 2}};

/* The header of the .npy file f (magic, version and length read here), NUL-terminated and allocated; NULL and err
 * on a bad magic, an unknown version, a truncated or implausibly long header. */
static char *npy_read_header(FILE *f, const char *path, char *err) {
  unsigned char pre[12];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
    em_fail(err, EM_EINPUT, "%s: not a .npy file (bad magic)", path);
    return NULL;
  }
  size_t hl;
  if (pre[6] == 1) hl = (size_t)pre[8] | (size_t)pre[9] << 8;
  else if (pre[6] == 2 || pre[6] == 3) {
    if (fread(pre + 10, 1, 2, f) != 2) {
      em_fail(err, EM_EINPUT, "%s: truncated header", path);
      return NULL;
    }
    hl = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  } else {
    em_fail(err, EM_EINPUT, "%s: unsupported .npy version %d.%d", path, pre[6], pre[7]);
    return NULL;
  }
  if (hl > 1 << 20) {
    em_fail(err, EM_EINPUT, "%s: header of %zu bytes is implausible", path, hl);
    return NULL;
  }
  char *header = em_alloc(hl + 1);
  if (fread(header, 1, hl, f) != hl) {
    em_fail(err, EM_EINPUT, "%s: truncated header", path);
    free(header);
    return NULL;
  }
  header[hl] = 0;
  return header;
}

/* The shape in header ("(2, 3)", "(4,)", "()") into shape[*rank]; 0, or -1 and err. */
static int npy_parse_shape(const char *header, const char *path, int64_t *shape, int *rank, char *err) {
  const char *p = npy_key(header, "shape");
  if (!p || *p != '(') return em_fail(err, EM_EINPUT, "%s: header has no 'shape'", path), -1;
  p++;
  *rank = 0;
  for (;;) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') return 0;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0) return em_fail(err, EM_EINPUT, "%s: malformed shape in header", path), -1;
    if (*rank == EM_TENSOR_MAX_RANK) return em_fail(err, EM_EINPUT, "%s: rank is over %d", path, EM_TENSOR_MAX_RANK), -1;
    shape[(*rank)++] = v;
    p = end;
    while (*p == 'L') p++;
  }
}

/* header's element type (its index in npy_known), C order and shape; the index, or -1 and err. */
static int npy_parse_header(const char *header, const char *path, int64_t *shape, int *rank, char *err) {
  const char *p = npy_key(header, "descr");
  char descr[16] = {0};
  if (!p || (*p != '\'' && *p != '"')) return em_fail(err, EM_EINPUT, "%s: header has no 'descr'", path), -1;
  char q = *p++;
  for (int n = 0; *p && *p != q && n < 15;) descr[n++] = *p++;
  int k = -1;
  for (int i = 0; i < (int)(sizeof npy_known / sizeof npy_known[0]); i++)
    if (!strcmp(descr, npy_known[i].d)) k = i;
  if (k < 0) {
    em_fail(err, EM_EINPUT, "%s: numpy dtype '%s' is not supported (use <f2, <f4, <f8, <i4, <i8 or |b1)", path, descr);
    return -1;
  }
  p = npy_key(header, "fortran_order");
  if (!p || strncmp(p, "False", 5)) {
    em_fail(err, EM_EINPUT, "%s: only C-order arrays are supported (save with np.ascontiguousarray)", path);
    return -1;
  }
  return npy_parse_shape(header, path, shape, rank, err) ? -1 : k;
}

/* The data must be there before anything its shape asks for is allocated: 0 when f holds at least the shape's
 * elements of es bytes after its position, else -1 and err. */
static int npy_check_length(FILE *f, const char *path, const int64_t *shape, int rank, size_t es, char *err) {
  int64_t want = 1, have;
  long here = ftell(f);
  for (int i = 0; i < rank; i++)
    if (__builtin_mul_overflow(want, shape[i], &want)) want = INT64_MAX;
  if (__builtin_mul_overflow(want, (int64_t)es, &want)) want = INT64_MAX;
  if (here >= 0 && fseek(f, 0, SEEK_END) == 0 && (have = ftell(f)) >= 0 && fseek(f, here, SEEK_SET) == 0 &&
      have - here < want) {
    em_fail(err, EM_EINPUT, "%s: data is shorter than its shape needs (%lld bytes for %lld)", path, (long long)(have - here),
            (long long)want);
    return -1;
  }
  return 0;
}

/* One element of type npy_known[k] at q as a double. */
static double npy_elem(const unsigned char *q, int k) {
  switch (k) {
  case 0: {
    uint16_t h;
    memcpy(&h, q, 2);
    return em_f16_bits_to_f32(h);
  }
  case 1: {
    float x;
    memcpy(&x, q, 4);
    return x;
  }
  case 2: {
    double v;
    memcpy(&v, q, 8);
    return v;
  }
  case 3: {
    int32_t x;
    memcpy(&x, q, 4);
    return x;
  }
  case 4: {
    int64_t x;
    memcpy(&x, q, 8);
    return (double)x;
  }
  default: return *q != 0;
  }
}

em_tensor *em_tensor_load_npy(const char *path, em_dtype dt, char *err) {
  char *header = NULL;
  unsigned char *buf = NULL;
  em_tensor *t = NULL;
  int64_t shape[EM_TENSOR_MAX_RANK];
  int rank = 0, k;
  FILE *f = fopen(path, "rb");
  if (!f) {
    em_fail(err, EM_ERUN, "%s: cannot open", path);
    return NULL;
  }
  header = npy_read_header(f, path, err);
  if (!header || (k = npy_parse_header(header, path, shape, &rank, err)) < 0) goto cleanup;
  size_t es = (size_t)npy_known[k].bytes;
  if (npy_check_length(f, path, shape, rank, es, err)) goto cleanup;
  t = em_tensor_new(dt, rank, shape, err);
  if (!t) {
    char e2[EM_ERR_MAX];
    snprintf(e2, sizeof e2, "%s", err ? err : "");
    em_fail(err, EM_ERUN, "%s: %s", path, e2);
    goto cleanup;
  }
  buf = em_tensor_alloc_bytes((int64_t)((size_t)t->numel * es), path, err);
  if (buf && fread(buf, es, (size_t)t->numel, f) != (size_t)t->numel)
    em_fail(err, EM_EINPUT, "%s: data is shorter than its shape needs (%lld elements of %zu bytes)", path, (long long)t->numel, es);
  else if (buf) {
    for (int64_t i = 0; i < t->numel; i++) em_t_set(t, i, npy_elem(buf + (size_t)i * es, k));
    goto cleanup;
  }
  em_tensor_free(t);
  t = NULL;
cleanup:
  fclose(f);
  free(header);
  free(buf);
  return t;
}

/* ---- comparison ----------------------------------------------------------------------------------- */

void em_tolerance(em_dtype dt, double *rtol, double *atol) {
  switch (dt) {
  case EM_BF16: *rtol = 1.6e-2, *atol = 1e-2; break; /* 2^-8 ulp, a couple of ulps of f32-order drift */
  case EM_F16: *rtol = 2e-3, *atol = 1e-3; break;    /* 2^-11 ulp */
  case EM_F32: *rtol = 1e-5, *atol = 1e-5; break;
  case EM_F64: *rtol = 1e-10, *atol = 1e-10; break;
  default: *rtol = 0, *atol = 0; break; /* integers and bool are exact */
  }
}

em_cmp em_tensor_compare(const em_tensor *a, const em_tensor *b, double rtol, double atol) {
  return em_tensor_compare_terms(a, b, NULL, 0, rtol, atol);
}

void em_tensor_bcast_strides(const em_tensor *a, int rank, int64_t *st) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    int ia = i - (rank - a->rank);
    st[i] = (ia >= 0 && a->shape[ia] != 1) ? s : 0;
    if (ia >= 0) s *= a->shape[ia];
  }
}

/* 1 when t broadcasts to b's shape. */
static int broadcasts_to(const em_tensor *t, const em_tensor *b) {
  if (t->rank > b->rank) return 0;
  for (int d = b->rank - 1, e = t->rank - 1; e >= 0; d--, e--)
    if (t->shape[e] != 1 && t->shape[e] != b->shape[d]) return 0;
  return 1;
}

em_cmp em_tensor_compare_terms(const em_tensor *a, const em_tensor *b, const em_tensor *const *terms, int nterms, double rtol,
                               double atol) {
  em_cmp c;
  memset(&c, 0, sizeof c);
  c.rtol = rtol;
  c.atol = atol;
  c.shape_ok = a->rank == b->rank;
  for (int i = 0; c.shape_ok && i < a->rank; i++)
    if (a->shape[i] != b->shape[i]) c.shape_ok = 0;
  c.numel = b->numel;
  int64_t tst[4][EM_TENSOR_MAX_RANK];
  if (nterms > 4) nterms = 4;
  for (int t = 0; t < nterms; t++)
    if (!broadcasts_to(terms[t], b)) nterms = 0; /* (a term of another shape: the plain comparison) */
  for (int t = 0; t < nterms; t++) em_tensor_bcast_strides(terms[t], b->rank, tst[t]);
  if (!c.shape_ok) {
    c.mismatches = a->numel > b->numel ? a->numel : b->numel;
    return c;
  }
  for (int64_t i = 0; i < a->numel; i++) {
    double x = em_t_get(a, i), y = em_t_get(b, i);
    if (isnan(x) || isnan(y)) {
      if (!(isnan(x) && isnan(y))) c.mismatches++;
      continue;
    }
    double d = x == y ? 0.0 : fabs(x - y); /* equal infinities match */
    if (d > c.max_abs) c.max_abs = d;
    if (y != 0 && d / fabs(y) > c.max_rel) c.max_rel = d / fabs(y);
    double s = fabs(y);
    for (int t = 0; t < nterms; t++) {
      int64_t off = 0, r = i;
      for (int dd = b->rank - 1; dd >= 0; dd--) off += r % b->shape[dd] * tst[t][dd], r /= b->shape[dd];
      double u = fabs(em_t_get(terms[t], off));
      if (u > s && !isinf(u)) s = u;
    }
    if (!(d <= atol + rtol * s)) c.mismatches++;
  }
  return c;
}

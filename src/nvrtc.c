/* nvrtc.c — NVRTC compiles through the functions dl.c resolves, in the calling thread or in a fork()ed child
 * with a deadline, on a thread pool for many jobs, with the ptxas -v log parsed into resource usage and a
 * content-addressed cubin cache (one code file and one text sidecar per key, written by tmp + rename). */
#include "nvrtc.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dl.h"
#include "file.h"

const char *em_nvrtc_status_name(em_nvrtc_status s) {
  static const char *const names[] = {
#define X(e, s) s,
      EM_NVRTC_STATUSES(X)
#undef X
  };
  return (unsigned)s < EM_NVRTC_NSTATUS ? names[s] : "?";
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- the NVRTC entry points ------------------------------------------------------------------------------ */

/* nvrtc.h's prototypes, declared here so the build needs no CUDA headers; results are nvrtcResult ints. */
enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_INVALID_OPTION = 5, NVRTC_ERROR_COMPILATION = 6,
       NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID = 10 };
typedef struct _nvrtcProgram *nvrtc_prog;

typedef struct {
  const char *(*error_string)(int);
  int (*create)(nvrtc_prog *, const char *src, const char *name, int nheaders, const char *const *headers,
                const char *const *include_names);
  int (*destroy)(nvrtc_prog *);
  int (*compile)(nvrtc_prog, int nopts, const char *const *opts);
  int (*ptx_size)(nvrtc_prog, size_t *);
  int (*ptx)(nvrtc_prog, char *);
  int (*cubin_size)(nvrtc_prog, size_t *);
  int (*cubin)(nvrtc_prog, char *);
  int (*log_size)(nvrtc_prog, size_t *);
  int (*log)(nvrtc_prog, char *);
  int (*add_name)(nvrtc_prog, const char *);
  int (*lowered_name)(nvrtc_prog, const char *, const char **);
  int major, minor;
  char identity[96]; /* "13.0 <library size in bytes>": in every cache key, so a patch release misses */
} nvrtc_api;

static pthread_mutex_t api_mu = PTHREAD_MUTEX_INITIALIZER;
static int api_state; /* 0 untried, 1 loaded, -1 missing */
static nvrtc_api api;
static char api_err[EM_ERR_MAX];

/* Forks exclude in-process compiles: a child forked while another thread is inside NVRTC could inherit one
 * of NVRTC's locks held and hang. In-process compiles hold it shared, fork() holds it exclusive. */
static pthread_rwlock_t fork_lock;
static pthread_once_t fork_lock_once = PTHREAD_ONCE_INIT;
static void fork_lock_init(void) {
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&fork_lock, &a);
  pthread_rwlockattr_destroy(&a);
}

/* Resolves every entry point once; NULL with err (one line) when NVRTC or a symbol is missing. */
static const nvrtc_api *load_api(char *err) {
  pthread_once(&fork_lock_once, fork_lock_init);
  pthread_mutex_lock(&api_mu);
  if (api_state == 0) {
    char e[EM_ERR_MAX] = "";
    int ok = 1;
#define SYM(field, name)                                                    \
  if (ok && !(*(void **)&api.field = em_dl_sym(EM_LIB_NVRTC, name, e))) ok = 0;
    SYM(error_string, "nvrtcGetErrorString")
    SYM(create, "nvrtcCreateProgram")
    SYM(destroy, "nvrtcDestroyProgram")
    SYM(compile, "nvrtcCompileProgram")
    SYM(ptx_size, "nvrtcGetPTXSize")
    SYM(ptx, "nvrtcGetPTX")
    SYM(cubin_size, "nvrtcGetCUBINSize")
    SYM(cubin, "nvrtcGetCUBIN")
    SYM(log_size, "nvrtcGetProgramLogSize")
    SYM(log, "nvrtcGetProgramLog")
    SYM(add_name, "nvrtcAddNameExpression")
    SYM(lowered_name, "nvrtcGetLoweredName")
#undef SYM
    if (ok && em_nvrtc_version(&api.major, &api.minor, e)) ok = 0;
    if (ok) {
      long long size = -1;
      Dl_info info;
      struct stat sb;
      if (dladdr(*(void **)&api.compile, &info) && info.dli_fname && stat(info.dli_fname, &sb) == 0)
        size = (long long)sb.st_size;
      snprintf(api.identity, sizeof api.identity, "%d.%d %lld", api.major, api.minor, size);
    }
    api_state = ok ? 1 : -1;
    if (!ok) snprintf(api_err, sizeof api_err, "%s", e);
  }
  int state = api_state;
  if (state < 0 && err) snprintf(err, EM_ERR_MAX, "%s", api_err);
  pthread_mutex_unlock(&api_mu);
  return state > 0 ? &api : NULL;
}

/* ---- bytes ----------------------------------------------------------------------------------------------- */

typedef struct {
  char *p;
  size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const void *data, size_t n) {
  if (b->n + n + 1 > b->cap) {
    while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
    b->p = em_realloc(b->p, b->cap);
  }
  if (n) memcpy(b->p + b->n, data, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static char *dup_n(const char *s, size_t n) {
  char *d = em_alloc(n + 1);
  memcpy(d, s, n);
  return d;
}

/* ---- job checks, options and the cache key --------------------------------------------------------------- */

/* arch must be sm_NN or compute_NN with an optional one-letter suffix (sm_90a, sm_100f). */
static int parse_arch(const char *arch, int *want_ptx) {
  const char *p;
  if (!strncmp(arch, "sm_", 3)) *want_ptx = 0, p = arch + 3;
  else if (!strncmp(arch, "compute_", 8)) *want_ptx = 1, p = arch + 8;
  else return 0;
  int digits = 0;
  while (*p >= '0' && *p <= '9') p++, digits++;
  if (*p >= 'a' && *p <= 'z') p++;
  return digits >= 2 && *p == 0;
}

typedef struct {
  const char **v;
  int n;
  char arch_opt[48];
} optlist;

static em_status check_job(const em_nvrtc_job *job, int *want_ptx, char *err) {
  if (!job->source) return em_fail(err, EM_EINPUT, "nvrtc: the job has no source");
  if (!job->arch || strlen(job->arch) > 24 || !parse_arch(job->arch, want_ptx))
    return em_fail(err, EM_EINPUT, "nvrtc: arch '%s' is not sm_NN[a|f] (cubin) or compute_NN[a|f] (PTX)",
                   job->arch ? job->arch : "(none)");
  for (int i = 0; i < job->noptions; i++) {
    const char *o = job->options[i];
    if (!o) return em_fail(err, EM_EINPUT, "nvrtc: option %d is NULL", i + 1);
    if (!strncmp(o, "-arch", 5) || !strncmp(o, "--gpu-architecture", 18))
      return em_fail(err, EM_EINPUT, "nvrtc: option '%s': set the job's arch instead", o);
  }
  for (int i = 0; i < job->nname_exprs; i++)
    if (!job->name_exprs[i]) return em_fail(err, EM_EINPUT, "nvrtc: name expression %d is NULL", i + 1);
  if (job->timeout_ms < 0) return em_fail(err, EM_EINPUT, "nvrtc: timeout_ms %d is negative", job->timeout_ms);
  return EM_OK;
}

/* The options NVRTC gets: -arch, ptxas -v for cubins (its report is parsed), -std=c++17 unless the job sets a
 * standard, the two flags, then the job's own options. ol->v borrows the job's strings. */
static void build_options(const em_nvrtc_job *job, int want_ptx, optlist *ol) {
  ol->v = em_alloc(sizeof(char *) * (size_t)(job->noptions + 5));
  snprintf(ol->arch_opt, sizeof ol->arch_opt, "-arch=%s", job->arch);
  ol->v[ol->n++] = ol->arch_opt;
  if (!want_ptx) ol->v[ol->n++] = "--ptxas-options=-v";
  int has_std = 0;
  for (int i = 0; i < job->noptions; i++)
    if (!strncmp(job->options[i], "-std", 4) || !strncmp(job->options[i], "--std", 5)) has_std = 1;
  if (!has_std) ol->v[ol->n++] = "-std=c++17";
  if (job->fast_math) ol->v[ol->n++] = "--use_fast_math";
  if (job->lineinfo) ol->v[ol->n++] = "-lineinfo";
  for (int i = 0; i < job->noptions; i++) ol->v[ol->n++] = job->options[i];
}

typedef struct {
  uint64_t a, b;
} hash2;

/* Each part is framed by its length, so ("ab","c") and ("a","bc") differ. */
static void hash_part(hash2 *h, const void *p, size_t n) {
  uint64_t len = n;
  h->a = em_fnv1a(em_fnv1a(h->a, &len, sizeof len), p, n);
  h->b = em_fnv1a(em_fnv1a(h->b, &len, sizeof len), p, n);
}
static void hash_str(hash2 *h, const char *s) { hash_part(h, s, strlen(s)); }

static uint64_t fmix64(uint64_t k) { /* MurmurHash3's finalizer: every input bit reaches every output bit */
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

#define CACHE_FORMAT "emmy-nvrtc-cache 1"

/* key = two FNV-1a 64 streams with different seeds over (format, NVRTC identity, program name, final options,
 * source, name expressions). Headers reached through -I options are not hashed. */
static void make_key(const em_nvrtc_job *job, const optlist *ol, char key[33]) {
  hash2 h = {EM_FNV_SEED, 0x9e3779b97f4a7c15ULL};
  hash_str(&h, CACHE_FORMAT);
  hash_str(&h, api.identity);
  hash_str(&h, job->name ? job->name : "kernel.cu");
  uint64_t n = (uint64_t)ol->n;
  hash_part(&h, &n, sizeof n);
  for (int i = 0; i < ol->n; i++) hash_str(&h, ol->v[i]);
  hash_str(&h, job->source);
  n = (uint64_t)job->nname_exprs;
  hash_part(&h, &n, sizeof n);
  for (int i = 0; i < job->nname_exprs; i++) hash_str(&h, job->name_exprs[i]);
  snprintf(key, 33, "%016llx%016llx", (unsigned long long)fmix64(h.a), (unsigned long long)fmix64(h.b ^ h.a));
}

/* ---- the ptxas -v log ------------------------------------------------------------------------------------ */

static em_nvrtc_kernel *kernel_get(em_nvrtc_result *r, const char *name, size_t len, int entry) {
  for (int i = 0; i < r->nkernels; i++)
    if (strlen(r->kernels[i].name) == len && !memcmp(r->kernels[i].name, name, len)) {
      if (entry) r->kernels[i].entry = 1;
      return &r->kernels[i];
    }
  r->kernels = em_realloc(r->kernels, sizeof *r->kernels * (size_t)(r->nkernels + 1));
  em_nvrtc_kernel *k = &r->kernels[r->nkernels++];
  *k = (em_nvrtc_kernel){dup_n(name, len), entry, -1, -1, -1, -1, -1, -1, -1, -1};
  return k;
}

/* Reads the comma-separated "N unit" items of one ptxas line (from p to end) into k. Unknown items are
 * skipped, so a ptxas that adds a figure still parses. */
static void parse_items(const char *p, const char *end, em_nvrtc_kernel *k) {
  while (p < end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *stop = comma ? comma : end;
    const char *d = p;
    while (d < stop && (*d < '0' || *d > '9')) d++;
    if (d < stop) {
      long v = 0;
      while (d < stop && *d >= '0' && *d <= '9') v = v * 10 + (*d++ - '0');
      while (d < stop && *d == ' ') d++;
      size_t ul = (size_t)(stop - d);
      while (ul && (d[ul - 1] == ' ' || d[ul - 1] == '\r')) ul--;
      int iv = v > INT_MAX ? INT_MAX : (int)v;
#define UNIT(s) (ul == sizeof(s) - 1 && !memcmp(d, s, ul))
      if (UNIT("registers")) k->regs = iv;
      else if (UNIT("barriers")) k->barriers = iv;
      else if (UNIT("bytes smem")) k->smem = iv;
      else if (UNIT("bytes cmem[0]")) k->cmem0 = iv;
      else if (UNIT("bytes stack frame")) k->stack = iv;
      else if (UNIT("bytes cumulative stack size")) k->cumulative_stack = iv;
      else if (UNIT("bytes spill stores")) k->spill_stores = iv;
      else if (UNIT("bytes spill loads")) k->spill_loads = iv;
#undef UNIT
    }
    p = stop + 1;
  }
}

static int imax(int a, int b) { return a > b ? a : b; }

/* NVRTC 13 writes, per function (entries in their order, then non-inlined device functions):
 *   ptxas info    : Compiling entry function '_Z3addPfPKfi' for 'sm_90a'
 *   ptxas info    : Function properties for _Z3addPfPKfi
 *   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 10 registers, used 1 barriers, 16 bytes cumulative stack size, 1024 bytes smem
 * ("… bytes smem" only when nonzero; "N bytes cmem[0]" on some targets, e.g. sm_80). */
void em_nvrtc_parse_log(const char *log, em_nvrtc_result *res) {
  for (int i = 0; i < res->nkernels; i++) free(res->kernels[i].name);
  free(res->kernels);
  res->kernels = NULL;
  res->nkernels = 0;
  em_nvrtc_kernel *cur = NULL;
  for (const char *line = log ? log : ""; *line;) {
    const char *end = strchr(line, '\n');
    if (!end) end = line + strlen(line);
    size_t len = (size_t)(end - line);
    const char *s;
    static const char entry_tag[] = "Compiling entry function '", props_tag[] = "Function properties for ";
    if (len > 5 && !memcmp(line, "ptxas", 5)) {
      if ((s = memmem(line, len, entry_tag, sizeof entry_tag - 1))) {
        s += sizeof entry_tag - 1;
        const char *q = memchr(s, '\'', (size_t)(end - s));
        if (q) cur = kernel_get(res, s, (size_t)(q - s), 1);
      } else if ((s = memmem(line, len, props_tag, sizeof props_tag - 1))) {
        s += sizeof props_tag - 1;
        const char *q = end;
        while (q > s && (q[-1] == ' ' || q[-1] == '\r')) q--;
        if (q > s) cur = kernel_get(res, s, (size_t)(q - s), 0);
      } else if (cur && memmem(line, len, "bytes stack frame", 17)) {
        parse_items(line + 5, end, cur);
      } else if (cur && (s = memmem(line, len, ": Used ", 7)) && memmem(line, len, "registers", 9)) {
        parse_items(s + 1, end, cur);
        if (cur->smem < 0) cur->smem = 0; /* ptxas omits "0 bytes smem" */
      }
    }
    line = *end ? end + 1 : end;
  }
  res->regs = res->smem = res->stack = res->spill_stores = res->spill_loads = -1;
  for (int i = 0; i < res->nkernels; i++) {
    const em_nvrtc_kernel *k = &res->kernels[i];
    if (k->entry) {
      res->regs = imax(res->regs, k->regs);
      res->smem = imax(res->smem, k->smem);
    }
    res->stack = imax(res->stack, k->stack);
    res->spill_stores = imax(res->spill_stores, k->spill_stores);
    res->spill_loads = imax(res->spill_loads, k->spill_loads);
  }
}

/* ---- one NVRTC run --------------------------------------------------------------------------------------- */

/* Runs NVRTC in this thread and fills status, log, code, lowered names and compile_ms. compile errors and bad
 * options are compile_fail (deterministic); other NVRTC failures are error. */
static void run_nvrtc(const em_nvrtc_job *job, const optlist *ol, int want_ptx, em_nvrtc_result *res) {
  nvrtc_prog prog = NULL;
  sbuf log = {0};
  double t0 = now_ms();
  int rc = api.create(&prog, job->source, job->name ? job->name : "kernel.cu", 0, NULL, NULL);
  if (rc != NVRTC_SUCCESS) {
    res->status = EM_NVRTC_ERROR;
    sb_printf(&log, "nvrtc: nvrtcCreateProgram failed: %s\n", api.error_string(rc));
    goto cleanup;
  }
  for (int i = 0; i < job->nname_exprs; i++) api.add_name(prog, job->name_exprs[i]);
  rc = api.compile(prog, ol->n, ol->v);
  size_t n = 0;
  if (api.log_size(prog, &n) == NVRTC_SUCCESS && n > 1) {
    char *tmp = em_alloc(n);
    if (api.log(prog, tmp) == NVRTC_SUCCESS) sb_put(&log, tmp, strnlen(tmp, n));
    free(tmp);
  }
  if (rc == NVRTC_ERROR_COMPILATION || rc == NVRTC_ERROR_INVALID_OPTION || rc == NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID) {
    res->status = EM_NVRTC_COMPILE_FAIL;
    if (!log.n) sb_printf(&log, "nvrtc: %s\n", api.error_string(rc));
    goto cleanup;
  }
  if (rc != NVRTC_SUCCESS) {
    res->status = EM_NVRTC_ERROR;
    sb_printf(&log, "nvrtc: nvrtcCompileProgram failed: %s\n", api.error_string(rc));
    goto cleanup;
  }
  n = 0;
  rc = want_ptx ? api.ptx_size(prog, &n) : api.cubin_size(prog, &n);
  if (rc == NVRTC_SUCCESS && n) {
    res->code = em_alloc(n + 1);
    rc = want_ptx ? api.ptx(prog, (char *)res->code) : api.cubin(prog, (char *)res->code);
    res->code_size = want_ptx ? strnlen((char *)res->code, n) : n;
  }
  if (rc != NVRTC_SUCCESS || !res->code_size) {
    free(res->code);
    res->code = NULL;
    res->code_size = 0;
    res->status = EM_NVRTC_ERROR;
    sb_printf(&log, "nvrtc: no %s came back (%s)\n", want_ptx ? "PTX" : "cubin", api.error_string(rc));
    goto cleanup;
  }
  res->is_ptx = want_ptx;
  res->status = EM_NVRTC_OK;
  if (job->nname_exprs) {
    res->lowered = em_alloc(sizeof(char *) * (size_t)job->nname_exprs);
    res->nlowered = job->nname_exprs;
    for (int i = 0; i < job->nname_exprs; i++) {
      const char *low = NULL;
      if (api.lowered_name(prog, job->name_exprs[i], &low) == NVRTC_SUCCESS && low) res->lowered[i] = em_strdup(low);
    }
  }
cleanup:
  if (prog) api.destroy(&prog);
  res->compile_ms = now_ms() - t0;
  if (!log.p) sb_put(&log, "", 0);
  res->log = log.p;
}

static void run_inproc(const em_nvrtc_job *job, const optlist *ol, int want_ptx, em_nvrtc_result *res) {
  pthread_rwlock_rdlock(&fork_lock);
  run_nvrtc(job, ol, want_ptx, res);
  pthread_rwlock_unlock(&fork_lock);
}

/* ---- the forked child ------------------------------------------------------------------------------------- */

/* Child → parent record: u32 status, f64 compile_ms, u64 log length + bytes, u64 code length + bytes,
 * u32 is_ptx, u32 nlowered, then per name u64 length (UINT64_MAX: none) + bytes. */
static void put_u64(sbuf *b, uint64_t v) { sb_put(b, &v, sizeof v); }
static void put_u32(sbuf *b, uint32_t v) { sb_put(b, &v, sizeof v); }

static void serialize(const em_nvrtc_result *r, sbuf *b) {
  put_u32(b, (uint32_t)r->status);
  sb_put(b, &r->compile_ms, sizeof r->compile_ms);
  size_t ll = r->log ? strlen(r->log) : 0;
  put_u64(b, ll);
  sb_put(b, r->log, ll);
  put_u64(b, r->code_size);
  sb_put(b, r->code, r->code_size);
  put_u32(b, (uint32_t)r->is_ptx);
  put_u32(b, (uint32_t)r->nlowered);
  for (int i = 0; i < r->nlowered; i++) {
    if (!r->lowered[i]) {
      put_u64(b, UINT64_MAX);
      continue;
    }
    put_u64(b, strlen(r->lowered[i]));
    sb_put(b, r->lowered[i], strlen(r->lowered[i]));
  }
}

typedef struct {
  const char *p;
  size_t n, at;
  int bad;
} reader;

static const char *take(reader *r, size_t n) {
  if (r->bad || n > r->n - r->at) {
    r->bad = 1;
    return NULL;
  }
  const char *p = r->p + r->at;
  r->at += n;
  return p;
}
static uint64_t get_u64(reader *r) {
  uint64_t v = 0;
  const char *p = take(r, sizeof v);
  if (p) memcpy(&v, p, sizeof v);
  return v;
}
static uint32_t get_u32(reader *r) {
  uint32_t v = 0;
  const char *p = take(r, sizeof v);
  if (p) memcpy(&v, p, sizeof v);
  return v;
}

/* Fills res from a child's record; 0 when it is truncated or malformed. */
static int deserialize(const char *p, size_t n, int nnames, em_nvrtc_result *res) {
  reader r = {p, n, 0, 0};
  uint32_t st = get_u32(&r);
  const char *ms = take(&r, sizeof(double));
  if (ms) memcpy(&res->compile_ms, ms, sizeof(double));
  uint64_t ll = get_u64(&r);
  const char *lp = take(&r, ll);
  uint64_t cl = get_u64(&r);
  const char *cp = take(&r, cl);
  uint32_t is_ptx = get_u32(&r);
  uint32_t nl = get_u32(&r);
  if (r.bad || st >= EM_NVRTC_NSTATUS || nl != (uint32_t)(st == EM_NVRTC_OK ? nnames : 0)) return 0;
  res->status = (em_nvrtc_status)st;
  res->log = dup_n(lp, ll);
  if (cl) {
    res->code = em_alloc(cl + 1);
    memcpy(res->code, cp, cl);
    res->code_size = cl;
  }
  res->is_ptx = (int)is_ptx;
  if (nl) {
    res->lowered = em_alloc(sizeof(char *) * nl);
    res->nlowered = (int)nl;
    for (uint32_t i = 0; i < nl; i++) {
      uint64_t len = get_u64(&r);
      if (len == UINT64_MAX) continue;
      const char *s = take(&r, len);
      if (s) res->lowered[i] = dup_n(s, len);
    }
  }
  return !r.bad && r.at == r.n;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Compiles in a fork()ed child that sends its result through a pipe; the child is SIGKILLed when
 * job->timeout_ms passes (status timeout), and a child that dies is status crash. EM_ERUN when no pipe or
 * child could be made. */
static em_status run_forked(const em_nvrtc_job *job, const optlist *ol, int want_ptx, em_nvrtc_result *res,
                            char *err) {
  int fds[2];
  /* Exclusive: no NVRTC call is in flight in this process, and no other thread's pipe is open for writing
   * while this child is forked (the parent closes its write end before unlocking). */
  pthread_rwlock_wrlock(&fork_lock);
  if (pipe2(fds, O_CLOEXEC) != 0) {
    pthread_rwlock_unlock(&fork_lock);
    return em_fail(err, EM_ERUN, "nvrtc: cannot create a pipe for the compile child: %s", strerror(errno));
  }
  pid_t pid = fork();
  if (pid == 0) {
    /* Dies with the forking thread (which waits for it), so a killed emmy leaves no compile running. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(fds[0]);
    /* The child keeps only stdio and its pipe: it must not hold other pipes (a bench worker's stdin, another
     * job's pipe) open past the parent's use of them. */
    if (fds[1] > 3) close_range(3, (unsigned)fds[1] - 1, 0);
    close_range((unsigned)fds[1] + 1, ~0U, 0);
    em_nvrtc_result r;
    memset(&r, 0, sizeof r);
    run_nvrtc(job, ol, want_ptx, &r);
    sbuf b = {0};
    serialize(&r, &b);
    _exit(write_all(fds[1], b.p, b.n) == 0 ? 0 : 3);
  }
  int fork_errno = errno;
  close(fds[1]);
  pthread_rwlock_unlock(&fork_lock);
  if (pid < 0) {
    close(fds[0]);
    return em_fail(err, EM_ERUN, "nvrtc: cannot fork the compile child: %s", strerror(fork_errno));
  }
  double t0 = now_ms(), deadline = t0 + job->timeout_ms;
  sbuf b = {0};
  int timed_out = 0;
  for (;;) {
    double left = deadline - now_ms();
    if (left <= 0) {
      timed_out = 1;
      break;
    }
    struct pollfd pf = {fds[0], POLLIN, 0};
    int pr = poll(&pf, 1, left > 1e9 ? 1000000000 : (int)left + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue; /* the loop head decides */
    char chunk[65536];
    ssize_t got = read(fds[0], chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    sb_put(&b, chunk, (size_t)got);
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int ws = 0;
  pid_t w;
  while ((w = waitpid(pid, &ws, 0)) < 0 && errno == EINTR) {}
  if (timed_out) {
    res->status = EM_NVRTC_TIMEOUT;
    res->compile_ms = now_ms() - t0;
    char line[160];
    snprintf(line, sizeof line, "nvrtc: the compile passed its %d ms timeout and was killed\n", job->timeout_ms);
    res->log = em_strdup(line);
  } else if (deserialize(b.p, b.n, job->nname_exprs, res) && !(w == pid && WIFSIGNALED(ws))) {
    /* res is filled: a complete record is the child's last act (waitpid may fail when SIGCHLD is ignored) */
  } else {
    em_nvrtc_result_free(res);
    res->status = EM_NVRTC_CRASH;
    res->compile_ms = now_ms() - t0;
    char line[160];
    if (w == pid && WIFSIGNALED(ws))
      snprintf(line, sizeof line, "nvrtc: the compile child died of signal %d (%s)\n", WTERMSIG(ws),
               strsignal(WTERMSIG(ws)));
    else
      snprintf(line, sizeof line, "nvrtc: the compile child ended without a complete result (exit %d)\n",
               w == pid && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    res->log = em_strdup(line);
  }
  free(b.p);
  return EM_OK;
}

/* ---- the cubin cache ------------------------------------------------------------------------------------- */

int em_nvrtc_cache_dir(const char *override, char *buf, size_t cap) {
  const char *d = override ? override : getenv("EMMY_CUBIN_CACHE");
  int n;
  if (d && !strcmp(d, "off")) return 0;
  if (d && *d) {
    n = snprintf(buf, cap, "%s", d);
  } else {
    const char *home = getenv("HOME");
    if (!home || !*home) return 0;
    n = snprintf(buf, cap, "%s/.cache/emmy/cubin", home);
  }
  return n > 0 && (size_t)n < cap;
}

static int mkdir_p(const char *path) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
      *p = c;
      if (!c) break;
    }
  }
  return 0;
}

static char *read_whole(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  sbuf b = {0};
  char chunk[65536];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) sb_put(&b, chunk, got);
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(b.p);
    return NULL;
  }
  if (!b.p) sb_put(&b, "", 0);
  *n = b.n;
  return b.p;
}

/* Writes a cache file through src/file.c (temp + rename: readers see the old file or the whole new one; no fsync:
 * an entry is checked against its sidecar's size and hash when read). 0 on success. */
static int write_atomic(const char *path, const void *data, size_t n) { return em_file_write(path, data, n, 0, NULL) ? -1 : 0; }

static int entry_path(char *buf, size_t cap, const char *dir, const char *key, const char *ext) {
  int n = snprintf(buf, cap, "%s/%s.%s", dir, key, ext);
  return n > 0 && (size_t)n < cap;
}

/* One "word value" header line of a sidecar; returns the value or NULL. */
static const char *meta_field(const char *meta, size_t header_len, const char *word) {
  size_t wl = strlen(word);
  for (const char *l = meta; l < meta + header_len;) {
    const char *e = memchr(l, '\n', (size_t)(meta + header_len - l));
    if (!e) break;
    if ((size_t)(e - l) > wl && !memcmp(l, word, wl) && l[wl] == ' ') return l + wl + 1;
    l = e + 1;
  }
  return NULL;
}

/* Appends s with line breaks turned into spaces: a header value stays on its line. */
static void put_one_line(sbuf *b, const char *s) {
  for (; *s; s++) sb_put(b, *s == '\n' || *s == '\r' ? " " : s, 1);
}

/* The sidecar <key>.meta is text: a header of "word value" lines (status, nvrtc, arch, options, compile_ms,
 * code, the parsed kernels for readers), then "lowered N" + N bytes per name expression and "log N" + the log.
 * It is written after the code file, so its presence commits the entry; a failure record has no code file. */
static void cache_store(const char *dir, const char *key, const em_nvrtc_job *job, const optlist *ol,
                        const em_nvrtc_result *res) {
  char path[PATH_MAX];
  const char *ext = res->is_ptx ? "ptx" : "cubin";
  if (mkdir_p(dir) != 0) return; /* the cache is an optimization: a read-only or full disk only costs time */
  if (res->status == EM_NVRTC_OK &&
      (!entry_path(path, sizeof path, dir, key, ext) || write_atomic(path, res->code, res->code_size) != 0))
    return;
  sbuf m = {0};
  sb_printf(&m, "%s\nstatus %s\nnvrtc %s\narch %s\nname ", CACHE_FORMAT, em_nvrtc_status_name(res->status),
            api.identity, job->arch);
  put_one_line(&m, job->name ? job->name : "kernel.cu");
  sb_put(&m, "\noptions", 8);
  for (int i = 0; i < ol->n; i++) {
    sb_put(&m, " ", 1);
    put_one_line(&m, ol->v[i]);
  }
  sb_printf(&m, "\ncompile_ms %.3f\n", res->compile_ms);
  if (res->status == EM_NVRTC_OK)
    sb_printf(&m, "code %s %zu %016llx\n", ext, res->code_size,
              (unsigned long long)em_fnv1a(EM_FNV_SEED, res->code, res->code_size));
  sb_printf(&m, "summary regs %d smem %d stack %d spill_stores %d spill_loads %d\n", res->regs, res->smem,
            res->stack, res->spill_stores, res->spill_loads);
  for (int i = 0; i < res->nkernels; i++) {
    const em_nvrtc_kernel *k = &res->kernels[i];
    sb_printf(&m, "kernel %.300s entry %d regs %d barriers %d smem %d cmem0 %d stack %d cumulative_stack %d "
              "spill_stores %d spill_loads %d\n", k->name, k->entry, k->regs, k->barriers, k->smem, k->cmem0,
              k->stack, k->cumulative_stack, k->spill_stores, k->spill_loads);
  }
  for (int i = 0; i < res->nlowered; i++) {
    const char *s = res->lowered[i] ? res->lowered[i] : "";
    sb_printf(&m, "lowered %zu\n", strlen(s));
    sb_put(&m, s, strlen(s));
    sb_put(&m, "\n", 1);
  }
  size_t ll = strlen(res->log);
  sb_printf(&m, "log %zu\n", ll);
  sb_put(&m, res->log, ll);
  if (entry_path(path, sizeof path, dir, key, "meta")) write_atomic(path, m.p, m.n);
  free(m.p);
}

/* Fills res from the entry for key: 1 on a usable hit (ok with its code intact, or compile_fail), 0 otherwise
 * (res untouched). */
static int cache_load(const char *dir, const char *key, int want_ptx, int nnames, em_nvrtc_result *res) {
  char path[PATH_MAX];
  size_t mn = 0, cn = 0;
  char *meta = NULL, *code = NULL, **lowered = NULL;
  int hit = 0, nl = 0;
  if (!entry_path(path, sizeof path, dir, key, "meta") || !(meta = read_whole(path, &mn))) goto cleanup;
  size_t fl = strlen(CACHE_FORMAT);
  if (mn <= fl || memcmp(meta, CACHE_FORMAT, fl) || meta[fl] != '\n') goto cleanup;
  /* the header ends where the first length-prefixed section starts */
  const char *sect = strstr(meta, "\nlowered ");
  const char *logp = strstr(meta, "\nlog ");
  if (!logp) goto cleanup;
  if (!sect || sect > logp) sect = logp;
  size_t header_len = (size_t)(sect - meta) + 1;
  const char *st = meta_field(meta, header_len, "status");
  const char *ms = meta_field(meta, header_len, "compile_ms");
  if (!st || !ms) goto cleanup;
  int ok = !strncmp(st, "ok\n", 3), failed = !strncmp(st, "compile_fail\n", 13);
  if (!ok && !failed) goto cleanup;
  /* sections */
  const char *p = sect + 1, *end = meta + mn;
  if (ok && nnames) lowered = em_alloc(sizeof(char *) * (size_t)nnames);
  while (p < end && !strncmp(p, "lowered ", 8)) {
    char *q;
    unsigned long long len = strtoull(p + 8, &q, 10);
    if (*q != '\n' || len > (unsigned long long)(end - q - 1) || nl >= nnames || !ok) goto cleanup;
    lowered[nl++] = dup_n(q + 1, (size_t)len);
    p = q + 1 + len;
    if (p < end && *p == '\n') p++;
  }
  if (nl != (ok ? nnames : 0) || strncmp(p, "log ", 4)) goto cleanup;
  char *q;
  unsigned long long ll = strtoull(p + 4, &q, 10);
  if (*q != '\n' || ll != (unsigned long long)(end - q - 1)) goto cleanup;
  if (ok) {
    const char *ext = want_ptx ? "ptx" : "cubin";
    const char *c = meta_field(meta, header_len, "code");
    char cext[8];
    size_t csize;
    unsigned long long chash;
    if (!c || sscanf(c, "%7s %zu %llx", cext, &csize, &chash) != 3 || strcmp(cext, ext)) goto cleanup;
    if (!entry_path(path, sizeof path, dir, key, ext) || !(code = read_whole(path, &cn))) goto cleanup;
    if (cn != csize || em_fnv1a(EM_FNV_SEED, code, cn) != chash || cn == 0) goto cleanup;
  }
  res->status = ok ? EM_NVRTC_OK : EM_NVRTC_COMPILE_FAIL;
  res->compile_ms = strtod(ms, NULL);
  res->log = dup_n(q + 1, (size_t)ll);
  res->code = (unsigned char *)code;
  res->code_size = ok ? cn : 0;
  res->is_ptx = ok && want_ptx;
  res->lowered = lowered;
  res->nlowered = nl;
  code = NULL;
  lowered = NULL;
  hit = 1;
  /* a hit is a use: the meta file's time orders the trim (em_nvrtc_cache_trim removes the least recent first) */
  if (entry_path(path, sizeof path, dir, key, "meta")) utimensat(AT_FDCWD, path, NULL, 0);
cleanup:
  if (lowered)
    for (int i = 0; i < nl; i++) free(lowered[i]);
  free(lowered);
  free(code);
  free(meta);
  return hit;
}

/* A name the cache writes: 32 hex digits, ".cubin" / ".ptx" / ".meta", optionally ".tmp.<pid>.<n>". */
static int is_cache_file(const char *name) {
  for (int i = 0; i < 32; i++)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return 0;
  const char *e = name + 32;
  static const char *const exts[] = {".cubin", ".ptx", ".meta"};
  for (int i = 0; i < 3; i++) {
    size_t l = strlen(exts[i]);
    if (!strncmp(e, exts[i], l) && (e[l] == 0 || !strncmp(e + l, ".tmp.", 5))) return 1;
  }
  return 0;
}

em_status em_nvrtc_cache_clear(const char *override, int *removed, char *err) {
  char dir[PATH_MAX], path[PATH_MAX + 300];
  int n = 0;
  if (removed) *removed = 0;
  if (!em_nvrtc_cache_dir(override, dir, sizeof dir))
    return em_fail(err, EM_ERUN, "nvrtc: the cubin cache is off (EMMY_CUBIN_CACHE=off or no HOME); nothing to clear");
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return EM_OK;
    return em_fail(err, EM_ERUN, "nvrtc: cannot read the cubin cache %s: %s", dir, strerror(errno));
  }
  em_status st = EM_OK;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!is_cache_file(e->d_name)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) == 0) n++;
    else if (errno != ENOENT && !st)
      st = em_fail(err, EM_ERUN, "nvrtc: cannot remove %s: %s", path, strerror(errno));
  }
  closedir(d);
  if (removed) *removed = n;
  return st;
}

typedef struct {
  char key[33];
  long long bytes;
  time_t used;
} cache_entry;

static int cmp_entry_key(const void *a, const void *b) { return strcmp(((const cache_entry *)a)->key, ((const cache_entry *)b)->key); }

static int cmp_entry_used(const void *a, const void *b) {
  const cache_entry *x = a, *y = b;
  return x->used < y->used ? -1 : x->used > y->used ? 1 : strcmp(x->key, y->key);
}

long long em_nvrtc_cache_cap(void) {
  const char *s = getenv("EMMY_CUBIN_CACHE_MB");
  if (!s || !*s) return 2048LL << 20;
  char *end;
  long long mb = strtoll(s, &end, 10);
  return *end || mb < 0 ? 2048LL << 20 : mb << 20;
}

em_status em_nvrtc_cache_trim(const char *override, long long max_bytes, long long *kept, int *removed, char *err) {
  char dir[PATH_MAX], path[PATH_MAX + 300];
  if (kept) *kept = 0;
  if (removed) *removed = 0;
  if (!em_nvrtc_cache_dir(override, dir, sizeof dir)) return EM_OK;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? EM_OK : em_fail(err, EM_ERUN, "nvrtc: cannot read the cubin cache %s: %s", dir, strerror(errno));
  /* one record a file, sorted by key, then one entry a key (its files' bytes, its newest time) */
  EM_VEC(cache_entry) fs = {0}, es = {0};
  long long total = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!is_cache_file(e->d_name) || strstr(e->d_name, ".tmp.")) continue;
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) != 0) continue;
    cache_entry ce = {{0}, (long long)st.st_size, st.st_mtime};
    memcpy(ce.key, e->d_name, 32);
    EM_VEC_PUSH(fs, ce);
    total += ce.bytes;
  }
  closedir(d);
  if (fs.n > 1) qsort(fs.v, (size_t)fs.n, sizeof *fs.v, cmp_entry_key);
  for (int i = 0; i < fs.n; i++) {
    if (es.n && !strcmp(es.v[es.n - 1].key, fs.v[i].key)) {
      es.v[es.n - 1].bytes += fs.v[i].bytes;
      if (fs.v[i].used > es.v[es.n - 1].used) es.v[es.n - 1].used = fs.v[i].used;
    } else {
      EM_VEC_PUSH(es, fs.v[i]);
    }
  }
  free(fs.v);
  em_status st = EM_OK;
  int n = 0;
  if (max_bytes > 0 && total > max_bytes) {
    /* least recently used first, down to 90% of the cap so that the next run does not trim again at once */
    qsort(es.v, (size_t)es.n, sizeof *es.v, cmp_entry_used);
    long long goal = max_bytes / 10 * 9;
    static const char *const exts[] = {"cubin", "ptx", "meta"};
    for (int i = 0; i < es.n && total > goal; i++) {
      for (int x = 0; x < 3; x++) {
        if (!entry_path(path, sizeof path, dir, es.v[i].key, exts[x])) continue;
        if (unlink(path) == 0) n++;
        else if (errno != ENOENT && !st) st = em_fail(err, EM_ERUN, "nvrtc: cannot remove %s: %s", path, strerror(errno));
      }
      total -= es.v[i].bytes;
    }
  }
  free(es.v);
  if (kept) *kept = total;
  if (removed) *removed = n;
  return st;
}

/* ---- one job ------------------------------------------------------------------------------------------------ */

void em_nvrtc_result_free(em_nvrtc_result *res) {
  if (!res) return;
  free(res->log);
  free(res->code);
  for (int i = 0; i < res->nkernels; i++) free(res->kernels[i].name);
  free(res->kernels);
  for (int i = 0; i < res->nlowered; i++) free(res->lowered[i]);
  free(res->lowered);
  memset(res, 0, sizeof *res);
  res->regs = res->smem = res->stack = res->spill_stores = res->spill_loads = -1;
}

em_status em_nvrtc_compile(const em_nvrtc_job *job, em_nvrtc_result *res, char *err) {
  char ebuf[EM_ERR_MAX], dir[PATH_MAX];
  if (!err) err = ebuf;
  double t0 = now_ms();
  memset(res, 0, sizeof *res);
  em_nvrtc_result_free(res);
  optlist ol = {0};
  int want_ptx = 0;
  em_status st = check_job(job, &want_ptx, err);
  if (st) goto cleanup;
  if (!load_api(err)) {
    st = EM_ERUN;
    goto cleanup;
  }
  build_options(job, want_ptx, &ol);
  make_key(job, &ol, res->key);
  int use_cache = !job->no_cache && em_nvrtc_cache_dir(job->cache_dir, dir, sizeof dir);
  if (use_cache && cache_load(dir, res->key, want_ptx, job->nname_exprs, res)) {
    res->cache_hit = 1;
    em_nvrtc_parse_log(res->log, res);
    goto cleanup;
  }
  if (job->timeout_ms > 0) st = run_forked(job, &ol, want_ptx, res, err);
  else run_inproc(job, &ol, want_ptx, res);
  if (st) goto cleanup;
  em_nvrtc_parse_log(res->log, res);
  if (use_cache && (res->status == EM_NVRTC_OK || res->status == EM_NVRTC_COMPILE_FAIL))
    cache_store(dir, res->key, job, &ol, res);
cleanup:
  free(ol.v);
  if (st) {
    char key[33];
    memcpy(key, res->key, sizeof key);
    em_nvrtc_result_free(res);
    memcpy(res->key, key, sizeof key);
    res->status = EM_NVRTC_ERROR;
    res->log = em_strdup(err);
  }
  res->ms = now_ms() - t0;
  return st;
}

/* ---- many jobs ------------------------------------------------------------------------------------------------ */

typedef struct {
  const em_nvrtc_job *jobs;
  em_nvrtc_result *results;
  int n;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int next, cancel;
  int *finished; /* job indices in the order they finished */
  int nfinished;
  int stored; /* a job wrote a new cache entry (the trim's cue; the caller may free results as it takes them) */
} pool;

static void *pool_worker(void *arg) {
  pool *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int i = p->next < p->n ? p->next++ : -1;
    int cancel = p->cancel;
    pthread_mutex_unlock(&p->mu);
    if (i < 0) break;
    em_nvrtc_result *r = &p->results[i];
    if (cancel) {
      em_nvrtc_result_free(r);
      r->status = EM_NVRTC_CANCELLED;
      r->log = em_strdup("nvrtc: cancelled before it started\n");
    } else {
      em_nvrtc_compile(&p->jobs[i], r, NULL); /* a failure is in r (status error, the line as its log) */
    }
    pthread_mutex_lock(&p->mu);
    if (!p->jobs[i].no_cache && !r->cache_hit && r->status == EM_NVRTC_OK) p->stored = 1;
    p->finished[p->nfinished++] = i;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
  return NULL;
}

struct em_nvrtc_batch {
  pool p;
  pthread_t *th;
  int started, taken;
};

em_nvrtc_batch *em_nvrtc_batch_start(const em_nvrtc_job *jobs, int n, em_nvrtc_result *results, int nthreads,
                                     char *err) {
  for (int i = 0; i < n; i++) {
    memset(&results[i], 0, sizeof results[i]);
    em_nvrtc_result_free(&results[i]);
  }
  char e[EM_ERR_MAX];
  if (n > 0 && !load_api(e)) {
    for (int i = 0; i < n; i++) {
      results[i].status = EM_NVRTC_ERROR;
      results[i].log = em_strdup(e);
    }
    em_fail(err, EM_ERUN, "%s", e);
    return NULL;
  }
  em_nvrtc_batch *b = em_alloc(sizeof *b);
  memset(b, 0, sizeof *b);
  b->p.jobs = jobs;
  b->p.results = results;
  b->p.n = n > 0 ? n : 0;
  pthread_mutex_init(&b->p.mu, NULL);
  pthread_cond_init(&b->p.cv, NULL);
  b->p.finished = em_alloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  if (nthreads <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = c > 0 ? (int)c : 1;
  }
  if (nthreads > b->p.n) nthreads = b->p.n;
  b->th = em_alloc(sizeof(pthread_t) * (size_t)(nthreads > 0 ? nthreads : 1));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64u << 20); /* NVRTC's front end recurses deeply on template-heavy code */
  for (int t = 0; t < nthreads; t++)
    if (pthread_create(&b->th[b->started], &attr, pool_worker, &b->p) == 0) b->started++;
  pthread_attr_destroy(&attr);
  if (!b->started && b->p.n) pool_worker(&b->p); /* no thread could start: compile here, then report */
  return b;
}

int em_nvrtc_batch_next(em_nvrtc_batch *b, int wait_ms) {
  pthread_mutex_lock(&b->p.mu);
  if (b->taken >= b->p.n) {
    pthread_mutex_unlock(&b->p.mu);
    return -2;
  }
  if (wait_ms > 0 && b->p.nfinished == b->taken) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)wait_ms * 1000000LL;
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    while (b->p.nfinished == b->taken && pthread_cond_timedwait(&b->p.cv, &b->p.mu, &ts) == 0) {
    }
  } else if (wait_ms < 0) {
    while (b->p.nfinished == b->taken) pthread_cond_wait(&b->p.cv, &b->p.mu);
  }
  int i = b->p.nfinished > b->taken ? b->p.finished[b->taken++] : -1;
  pthread_mutex_unlock(&b->p.mu);
  return i;
}

void em_nvrtc_batch_cancel(em_nvrtc_batch *b) {
  pthread_mutex_lock(&b->p.mu);
  b->p.cancel = 1;
  pthread_mutex_unlock(&b->p.mu);
}

void em_nvrtc_batch_end(em_nvrtc_batch *b) {
  if (!b) return;
  for (int t = 0; t < b->started; t++) pthread_join(b->th[t], NULL);
  /* the cache stays under its cap ($EMMY_CUBIN_CACHE_MB, 2048 by default; 0: no cap): a GPU-less compile of every
   * candidate of a model writes gigabytes of cubins otherwise (Qwen3 layer 0: 28,897 variants, ~1.7 GB) */
  char e[EM_ERR_MAX];
  if (b->p.stored) em_nvrtc_cache_trim(b->p.jobs[0].cache_dir, em_nvrtc_cache_cap(), NULL, NULL, e);
  free(b->th);
  free(b->p.finished);
  pthread_mutex_destroy(&b->p.mu);
  pthread_cond_destroy(&b->p.cv);
  free(b);
}

em_status em_nvrtc_compile_many(const em_nvrtc_job *jobs, int n, em_nvrtc_result *results, int nthreads,
                                em_nvrtc_progress_fn progress, void *ctx, char *err) {
  em_nvrtc_batch *b = em_nvrtc_batch_start(jobs, n, results, nthreads, err);
  if (!b) return EM_ERUN;
  int stop = 0;
  for (int i; (i = em_nvrtc_batch_next(b, -1)) != -2;) {
    if (progress && !stop && progress(ctx, b->taken, n, i, &results[i])) {
      stop = 1;
      em_nvrtc_batch_cancel(b);
    }
  }
  em_nvrtc_batch_end(b);
  return EM_OK;
}

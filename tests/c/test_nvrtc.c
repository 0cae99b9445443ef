/* test_nvrtc.c — NVRTC compiles: a cubin for sm_90a with its ptxas figures parsed, PTX for compute_90a,
 * compile errors as data, spills and stack frames, name expressions, 8 jobs on the pool in order, the cubin
 * cache (hit, miss on a changed option, failure records, EMMY_CUBIN_CACHE, corruption, clearing), the forked
 * compile and its timeout. The log parser is also checked on fixed NVRTC 12 and 13 logs. Without NVRTC the
 * compiling tests report as skipped with the reason. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dl.h"
#include "nvrtc.h"
#include "unit.h"

static int have_nvrtc(const char *test) {
  char err[EM_ERR_MAX];
  int ma, mi;
  if (em_nvrtc_version(&ma, &mi, err) == EM_OK) return 1;
  char why[EM_ERR_MAX + 32];
  snprintf(why, sizeof why, "NVRTC not found: %s", err);
  unit_skip(why);
  (void)test;
  return 0;
}

typedef struct {
  char dir[64];
} cache_dir;

static void cache_open(cache_dir *c) {
  snprintf(c->dir, sizeof c->dir, "/tmp/emmy-nvrtc-XXXXXX");
  if (!mkdtemp(c->dir)) {
    perror("mkdtemp");
    abort();
  }
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

static void cache_close(cache_dir *c) {
  em_nvrtc_cache_clear(c->dir, NULL, NULL);
  rmdir(c->dir);
}

static const char *ADD_SRC =
    "extern \"C\" __global__ void add(float *y, const float *x, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] += x[i];\n"
    "}\n";

static em_nvrtc_job job_for(const char *src, const char *dir) {
  em_nvrtc_job j;
  memset(&j, 0, sizeof j);
  j.source = src;
  j.arch = "sm_90a";
  j.cache_dir = dir ? dir : "off";
  return j;
}

static int is_elf(const em_nvrtc_result *r) {
  return r->code && r->code_size > 4 && !memcmp(r->code, "\177ELF", 4);
}

/* ---- the log parser, no NVRTC needed ----------------------------------------------------------------------- */

TEST(nvrtc_parse_log_13) {
  const char *log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function '_Z3bigILi4096EEvPfi' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z3bigILi4096EEvPfi\n"
      "ptxas         .     16384 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 32 registers, used 1 barriers, 16384 bytes cumulative stack size, 1024 bytes smem\n"
      "ptxas info    : Compile time = 9.480 ms\n"
      "ptxas info    : Compiling entry function 'add' for 'sm_90a'\n"
      "ptxas info    : Function properties for add\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 10 registers, used 0 barriers\n"
      "ptxas info    : Compile time = 1.302 ms\n"
      "ptxas info    : Function properties for _Z6helperPfi\n"
      "ptxas         .     40 bytes stack frame, 64 bytes spill stores, 0 bytes spill loads\n";
  em_nvrtc_result r;
  memset(&r, 0, sizeof r);
  em_nvrtc_parse_log(log, &r);
  CHECK(r.nkernels == 3);
  if (r.nkernels == 3) {
    CHECK(!strcmp(r.kernels[0].name, "_Z3bigILi4096EEvPfi") && r.kernels[0].entry);
    CHECK(r.kernels[0].regs == 32 && r.kernels[0].barriers == 1 && r.kernels[0].smem == 1024);
    CHECK(r.kernels[0].stack == 16384 && r.kernels[0].cumulative_stack == 16384);
    CHECK(r.kernels[0].spill_stores == 8 && r.kernels[0].spill_loads == 12);
    CHECK(r.kernels[0].cmem0 == -1);
    CHECK(!strcmp(r.kernels[1].name, "add") && r.kernels[1].entry && r.kernels[1].regs == 10);
    CHECK(r.kernels[1].smem == 0 && r.kernels[1].stack == 0);
    CHECK(!strcmp(r.kernels[2].name, "_Z6helperPfi") && !r.kernels[2].entry && r.kernels[2].regs == -1);
  }
  CHECK(r.regs == 32 && r.smem == 1024 && r.stack == 16384);
  CHECK(r.spill_stores == 64 && r.spill_loads == 12); /* the helper's spills count */
  em_nvrtc_result_free(&r);
}

TEST(nvrtc_parse_log_12) { /* the older layout: smem and cmem on the Used line, no barriers or stack size */
  const char *log =
      "ptxas info    : 0 bytes gmem, 256 bytes cmem[3]\r\n"
      "ptxas info    : Compiling entry function '_Z4gemmPKfS0_Pf' for 'sm_80'\r\n"
      "ptxas info    : Function properties for _Z4gemmPKfS0_Pf\r\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\r\n"
      "ptxas info    : Used 40 registers, 384 bytes smem, 380 bytes cmem[0]\r\n";
  em_nvrtc_result r;
  memset(&r, 0, sizeof r);
  em_nvrtc_parse_log(log, &r);
  CHECK(r.nkernels == 1);
  if (r.nkernels == 1) {
    CHECK(!strcmp(r.kernels[0].name, "_Z4gemmPKfS0_Pf"));
    CHECK(r.kernels[0].regs == 40 && r.kernels[0].smem == 384 && r.kernels[0].cmem0 == 380);
    CHECK(r.kernels[0].barriers == -1);
  }
  CHECK(r.regs == 40 && r.smem == 384);
  em_nvrtc_parse_log("", &r); /* a PTX target or a failure: nothing known */
  CHECK(r.nkernels == 0 && r.regs == -1 && r.spill_stores == -1);
  em_nvrtc_result_free(&r);
}

TEST(nvrtc_bad_jobs) {
  em_nvrtc_result r;
  char err[EM_ERR_MAX];
  em_nvrtc_job j = job_for(NULL, NULL);
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_EINPUT && strstr(err, "no source"));
  CHECK(r.status == EM_NVRTC_ERROR && r.log && strstr(r.log, "no source"));
  em_nvrtc_result_free(&r);
  j = job_for(ADD_SRC, NULL);
  j.arch = "sm90";
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_EINPUT && strstr(err, "sm90"));
  em_nvrtc_result_free(&r);
  const char *opts[] = {"-arch=sm_80"};
  j = job_for(ADD_SRC, NULL);
  j.options = opts;
  j.noptions = 1;
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_EINPUT && strstr(err, "-arch=sm_80"));
  em_nvrtc_result_free(&r);
}

/* ---- compiles -------------------------------------------------------------------------------------------------- */

TEST(nvrtc_compile_cubin) {
  if (!have_nvrtc("nvrtc_compile_cubin")) return;
  em_nvrtc_result r;
  char err[EM_ERR_MAX];
  em_nvrtc_job j = job_for(ADD_SRC, NULL);
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK);
  CHECK(r.status == EM_NVRTC_OK && !r.is_ptx && is_elf(&r));
  CHECK(r.nkernels == 1 && r.kernels && !strcmp(r.kernels[0].name, "add") && r.kernels[0].entry);
  CHECK(r.regs > 0 && r.regs < 64 && r.spill_stores == 0 && r.stack == 0 && r.smem == 0);
  CHECK(strstr(r.log, "Compiling entry function 'add' for 'sm_90a'") != NULL);
  CHECK(!r.cache_hit && strlen(r.key) == 32 && r.ms > 0 && r.compile_ms > 0);
  fprintf(stderr, "    (add for sm_90a: %.1f ms, %zu bytes, %d registers)\n", r.ms, r.code_size, r.regs);
  em_nvrtc_result_free(&r);
}

TEST(nvrtc_compile_ptx) {
  if (!have_nvrtc("nvrtc_compile_ptx")) return;
  em_nvrtc_result r;
  char err[EM_ERR_MAX];
  em_nvrtc_job j = job_for(ADD_SRC, NULL);
  j.arch = "compute_90a";
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK);
  CHECK(r.status == EM_NVRTC_OK && r.is_ptx && r.code && strlen((char *)r.code) == r.code_size);
  CHECK(r.code && strstr((char *)r.code, ".entry add") && strstr((char *)r.code, ".target sm_90a"));
  CHECK(r.nkernels == 0 && r.regs == -1);
  em_nvrtc_result_free(&r);
}

TEST(nvrtc_compile_error_is_data) {
  if (!have_nvrtc("nvrtc_compile_error_is_data")) return;
  em_nvrtc_result r;
  char err[EM_ERR_MAX];
  em_nvrtc_job j = job_for("__global__ void bad(float *y) {\n  y[0] = undefined_thing + 1;\n}\n", NULL);
  j.name = "bad.cu";
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK);
  CHECK(r.status == EM_NVRTC_COMPILE_FAIL && !r.code && r.code_size == 0);
  CHECK(strstr(r.log, "bad.cu(2): error: identifier \"undefined_thing\" is undefined") != NULL);
  em_nvrtc_result_free(&r);
  const char *opts[] = {"--no-such-option"};
  j = job_for(ADD_SRC, NULL);
  j.options = opts;
  j.noptions = 1;
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK);
  CHECK(r.status == EM_NVRTC_COMPILE_FAIL && strstr(r.log, "--no-such-option"));
  em_nvrtc_result_free(&r);
}

static const char *SPILL_SRC =
    "__global__ void local_array(float *y, const float *x, int n) {\n"
    "  float a[4096];\n"
    "  for (int i = 0; i < 4096; i++) a[i] = x[(i * 7 + threadIdx.x) % n];\n"
    "  y[threadIdx.x] = a[(threadIdx.x * 3) % 4096] + a[x[0] > 0 ? 5 : 9];\n"
    "}\n"
    "__global__ void pressure(float *y, const float *x, int n) {\n"
    "  float a[96];\n"
    "#pragma unroll\n"
    "  for (int k = 0; k < 96; k++) a[k] = x[threadIdx.x + k * n];\n"
    "  float s = 0;\n"
    "#pragma unroll\n"
    "  for (int k = 0; k < 96; k++) s += a[k] * a[(k * 5) % 96] + a[(k * 7) % 96];\n"
    "#pragma unroll\n"
    "  for (int k = 0; k < 96; k++) y[threadIdx.x + k * n] = a[k] * s;\n"
    "}\n";

TEST(nvrtc_spills_and_stack) {
  if (!have_nvrtc("nvrtc_spills_and_stack")) return;
  em_nvrtc_result r;
  char err[EM_ERR_MAX];
  const char *opts[] = {"-maxrregcount=32"};
  em_nvrtc_job j = job_for(SPILL_SRC, NULL);
  j.options = opts;
  j.noptions = 1;
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK && r.status == EM_NVRTC_OK);
  CHECK(r.nkernels == 2);
  for (int i = 0; i < r.nkernels; i++) {
    const em_nvrtc_kernel *k = &r.kernels[i];
    if (strstr(k->name, "local_array")) CHECK(k->stack >= 16384 && k->regs > 0 && k->regs <= 32);
    if (strstr(k->name, "pressure")) CHECK(k->spill_stores > 0 && k->spill_loads > 0 && k->regs == 32);
  }
  CHECK(r.stack >= 16384 && r.spill_stores > 0 && r.spill_loads > 0);
  em_nvrtc_result_free(&r);
}

TEST(nvrtc_name_expressions) {
  if (!have_nvrtc("nvrtc_name_expressions")) return;
  em_nvrtc_result r;
  char err[EM_ERR_MAX];
  const char *names[] = {"scale<4>", "scale<8>"};
  em_nvrtc_job j = job_for("template <int N> __global__ void scale(float *y) { y[threadIdx.x] *= N; }\n", NULL);
  j.name_exprs = names;
  j.nname_exprs = 2;
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK && r.status == EM_NVRTC_OK);
  CHECK(r.nlowered == 2 && r.lowered[0] && !strcmp(r.lowered[0], "_Z5scaleILi4EEvPf"));
  CHECK(r.nlowered == 2 && r.lowered[1] && !strcmp(r.lowered[1], "_Z5scaleILi8EEvPf"));
  CHECK(r.nkernels == 2);
  em_nvrtc_result_free(&r);
}

/* ---- many jobs ---------------------------------------------------------------------------------------------- */

typedef struct {
  int calls, last_done, bad_order, seen[8];
} progress_log;

static int note_progress(void *ctx, int done, int total, int index, const em_nvrtc_result *r) {
  progress_log *p = ctx;
  p->calls++;
  if (done != p->last_done + 1 || total != 8 || index < 0 || index >= 8 || !r) p->bad_order = 1;
  else p->seen[index]++;
  p->last_done = done;
  return 0;
}

TEST(nvrtc_compile_many_in_order) {
  if (!have_nvrtc("nvrtc_compile_many_in_order")) return;
  char src[8][256];
  em_nvrtc_job jobs[8];
  em_nvrtc_result res[8];
  for (int i = 0; i < 8; i++) {
    snprintf(src[i], sizeof src[i], "extern \"C\" __global__ void k%d(float *y) { y[threadIdx.x] = y[threadIdx.x] * %d.0f + %d; }\n",
             i, i + 2, i);
    jobs[i] = job_for(src[i], NULL);
  }
  progress_log p = {0};
  char err[EM_ERR_MAX];
  CHECK(em_nvrtc_compile_many(jobs, 8, res, 4, note_progress, &p, err) == EM_OK);
  CHECK(p.calls == 8 && p.last_done == 8 && !p.bad_order);
  for (int i = 0; i < 8; i++) {
    char name[8];
    snprintf(name, sizeof name, "k%d", i);
    CHECK(p.seen[i] == 1);
    CHECK(res[i].status == EM_NVRTC_OK && is_elf(&res[i]));
    CHECK(res[i].nkernels == 1 && !strcmp(res[i].kernels[0].name, name));
    em_nvrtc_result_free(&res[i]);
  }
}

static int cancel_at_first(void *ctx, int done, int total, int index, const em_nvrtc_result *r) {
  (*(int *)ctx)++;
  return 1;
}

TEST(nvrtc_compile_many_cancel) {
  if (!have_nvrtc("nvrtc_compile_many_cancel")) return;
  em_nvrtc_job jobs[6];
  em_nvrtc_result res[6];
  for (int i = 0; i < 6; i++) jobs[i] = job_for(ADD_SRC, NULL);
  jobs[2].arch = "bogus"; /* a malformed job is a result with status error, not a failed batch */
  int calls = 0;
  char err[EM_ERR_MAX];
  CHECK(em_nvrtc_compile_many(jobs, 6, res, 1, cancel_at_first, &calls, err) == EM_OK);
  CHECK(calls == 1);
  CHECK(res[0].status == EM_NVRTC_OK);
  int cancelled = 0;
  for (int i = 1; i < 6; i++) cancelled += res[i].status == EM_NVRTC_CANCELLED;
  CHECK(cancelled >= 4); /* one thread: at most the job after the first had started */
  for (int i = 0; i < 6; i++) em_nvrtc_result_free(&res[i]);
  for (int i = 0; i < 6; i++) jobs[i] = job_for(ADD_SRC, NULL);
  jobs[2].arch = "bogus";
  CHECK(em_nvrtc_compile_many(jobs, 6, res, 0, NULL, NULL, err) == EM_OK);
  CHECK(res[2].status == EM_NVRTC_ERROR && strstr(res[2].log, "bogus"));
  CHECK(res[5].status == EM_NVRTC_OK);
  for (int i = 0; i < 6; i++) em_nvrtc_result_free(&res[i]);
}

/* ---- the cache ------------------------------------------------------------------------------------------------ */

TEST(nvrtc_cache) {
  if (!have_nvrtc("nvrtc_cache")) return;
  cache_dir c;
  cache_open(&c);
  em_nvrtc_result a, b;
  char err[EM_ERR_MAX];
  em_nvrtc_job j = job_for(ADD_SRC, c.dir);
  CHECK(em_nvrtc_compile(&j, &a, err) == EM_OK && a.status == EM_NVRTC_OK && !a.cache_hit);
  CHECK(count_files(c.dir) == 2); /* <key>.cubin and <key>.meta */
  CHECK(em_nvrtc_compile(&j, &b, err) == EM_OK && b.status == EM_NVRTC_OK && b.cache_hit);
  CHECK(b.code_size == a.code_size && b.code && !memcmp(a.code, b.code, a.code_size));
  CHECK(!strcmp(a.key, b.key) && !strcmp(a.log, b.log) && b.regs == a.regs && b.nkernels == a.nkernels);
  CHECK(b.ms < a.ms && b.ms < 20);
  CHECK_NEAR(b.compile_ms, a.compile_ms, 0.01);
  fprintf(stderr, "    (miss %.1f ms, hit %.2f ms)\n", a.ms, b.ms);
  em_nvrtc_result_free(&b);

  /* a changed option, flag or arch is another key */
  const char *opts[] = {"-DFOO=1"};
  em_nvrtc_job j2 = j;
  j2.options = opts;
  j2.noptions = 1;
  CHECK(em_nvrtc_compile(&j2, &b, err) == EM_OK && b.status == EM_NVRTC_OK && !b.cache_hit);
  CHECK(strcmp(a.key, b.key) != 0);
  em_nvrtc_result_free(&b);
  j2 = j;
  j2.fast_math = 1;
  CHECK(em_nvrtc_compile(&j2, &b, err) == EM_OK && !b.cache_hit && strcmp(a.key, b.key));
  em_nvrtc_result_free(&b);
  j2 = j;
  j2.arch = "sm_80";
  CHECK(em_nvrtc_compile(&j2, &b, err) == EM_OK && !b.cache_hit && strcmp(a.key, b.key));
  em_nvrtc_result_free(&b);

  /* no_cache neither reads nor writes */
  j2 = j;
  j2.no_cache = 1;
  CHECK(em_nvrtc_compile(&j2, &b, err) == EM_OK && !b.cache_hit && !strcmp(a.key, b.key));
  em_nvrtc_result_free(&b);

  /* a damaged code file is a miss, and the recompile repairs the entry */
  char path[256];
  snprintf(path, sizeof path, "%s/%s.cubin", c.dir, a.key);
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 100, SEEK_SET);
    fputc(0x5a ^ a.code[100], f);
    fclose(f);
  }
  CHECK(em_nvrtc_compile(&j, &b, err) == EM_OK && b.status == EM_NVRTC_OK && !b.cache_hit);
  em_nvrtc_result_free(&b);
  CHECK(em_nvrtc_compile(&j, &b, err) == EM_OK && b.cache_hit && !memcmp(a.code, b.code, a.code_size));
  em_nvrtc_result_free(&b);

  /* failures are cached as records without code */
  em_nvrtc_job bad = job_for("__global__ void bad() { nope; }\n", c.dir);
  CHECK(em_nvrtc_compile(&bad, &b, err) == EM_OK && b.status == EM_NVRTC_COMPILE_FAIL && !b.cache_hit);
  em_nvrtc_result_free(&b);
  CHECK(em_nvrtc_compile(&bad, &b, err) == EM_OK && b.status == EM_NVRTC_COMPILE_FAIL && b.cache_hit);
  CHECK(strstr(b.log, "identifier \"nope\" is undefined") != NULL && !b.code);
  em_nvrtc_result_free(&b);

  /* the sidecar is readable text with the parsed figures */
  snprintf(path, sizeof path, "%s/%s.meta", c.dir, a.key);
  f = fopen(path, "rb");
  char meta[4096] = "";
  if (f) {
    size_t got = fread(meta, 1, sizeof meta - 1, f);
    meta[got] = 0;
    fclose(f);
  }
  CHECK(!strncmp(meta, "emmy-nvrtc-cache 1\nstatus ok\nnvrtc ", 35));
  char want[64];
  snprintf(want, sizeof want, "kernel add entry 1 regs %d ", a.regs);
  CHECK(strstr(meta, want) != NULL && strstr(meta, "\nlog ") != NULL);

  /* clearing removes the entries and leaves other files */
  snprintf(path, sizeof path, "%s/notes.txt", c.dir);
  f = fopen(path, "w");
  if (f) fclose(f);
  int removed = -1;
  int before = count_files(c.dir);
  CHECK(em_nvrtc_cache_clear(c.dir, &removed, err) == EM_OK);
  CHECK(removed == before - 1 && removed >= 7 && count_files(c.dir) == 1);
  unlink(path);
  em_nvrtc_result_free(&a);
  cache_close(&c);
}

TEST(nvrtc_cache_env) {
  if (!have_nvrtc("nvrtc_cache_env")) return;
  cache_dir c;
  cache_open(&c);
  char *old = getenv("EMMY_CUBIN_CACHE") ? strdup(getenv("EMMY_CUBIN_CACHE")) : NULL;
  char buf[256], err[EM_ERR_MAX];
  setenv("EMMY_CUBIN_CACHE", c.dir, 1);
  CHECK(em_nvrtc_cache_dir(NULL, buf, sizeof buf) && !strcmp(buf, c.dir));
  em_nvrtc_job j = job_for(ADD_SRC, NULL);
  j.cache_dir = NULL;
  em_nvrtc_result r;
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK && !r.cache_hit && count_files(c.dir) == 2);
  em_nvrtc_result_free(&r);
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK && r.cache_hit);
  em_nvrtc_result_free(&r);
  setenv("EMMY_CUBIN_CACHE", "off", 1);
  CHECK(!em_nvrtc_cache_dir(NULL, buf, sizeof buf));
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK && !r.cache_hit);
  em_nvrtc_result_free(&r);
  CHECK(em_nvrtc_cache_clear(NULL, NULL, err) == EM_ERUN && strstr(err, "off"));
  unsetenv("EMMY_CUBIN_CACHE");
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  setenv("HOME", "/home/someone", 1);
  CHECK(em_nvrtc_cache_dir(NULL, buf, sizeof buf) && !strcmp(buf, "/home/someone/.cache/emmy/cubin"));
  if (home) setenv("HOME", home, 1);
  else unsetenv("HOME");
  free(home);
  if (old) setenv("EMMY_CUBIN_CACHE", old, 1);
  free(old);
  cache_close(&c);
}

/* ---- the forked compile ---------------------------------------------------------------------------------------- */

/* ~1.7 s of NVRTC on one core of the build machine (ptxas on a deep, fully unrolled call chain). */
static const char *SLOW_SRC =
    "template <int N> struct U { __device__ static float f(float x) {\n"
    "  return U<N - 1>::f(x * 1.000001f + (float)N) * 0.999f + __sinf(x); } };\n"
    "template <> struct U<0> { __device__ static float f(float x) { return x; } };\n"
    "__global__ void slow(float *y) {\n"
    "  float x = y[threadIdx.x];\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 64; i++) x = U<180>::f(x + i);\n"
    "  y[threadIdx.x] = x;\n"
    "}\n";

TEST(nvrtc_forked_matches_inprocess) {
  if (!have_nvrtc("nvrtc_forked_matches_inprocess")) return;
  em_nvrtc_result a, b;
  char err[EM_ERR_MAX];
  const char *names[] = {"add"};
  em_nvrtc_job j = job_for(ADD_SRC, NULL);
  j.name_exprs = names;
  j.nname_exprs = 1;
  CHECK(em_nvrtc_compile(&j, &a, err) == EM_OK && a.status == EM_NVRTC_OK);
  j.timeout_ms = 60000;
  CHECK(em_nvrtc_compile(&j, &b, err) == EM_OK && b.status == EM_NVRTC_OK);
  CHECK(a.code_size == b.code_size && b.code && !memcmp(a.code, b.code, a.code_size));
  CHECK(a.regs == b.regs && a.nkernels == b.nkernels && strstr(b.log, "Compiling entry function 'add'"));
  CHECK(b.nlowered == 1 && b.lowered[0] && !strcmp(b.lowered[0], "add"));
  fprintf(stderr, "    (in-process %.1f ms, forked %.1f ms)\n", a.ms, b.ms);
  em_nvrtc_result_free(&a);
  em_nvrtc_result_free(&b);
  em_nvrtc_job bad = job_for("__global__ void bad() { nope; }\n", NULL);
  bad.timeout_ms = 60000;
  CHECK(em_nvrtc_compile(&bad, &b, err) == EM_OK && b.status == EM_NVRTC_COMPILE_FAIL && strstr(b.log, "nope"));
  em_nvrtc_result_free(&b);
}

TEST(nvrtc_timeout) {
  if (!have_nvrtc("nvrtc_timeout")) return;
  cache_dir c;
  cache_open(&c);
  em_nvrtc_result r;
  char err[EM_ERR_MAX];
  em_nvrtc_job j = job_for(SLOW_SRC, c.dir);
  j.timeout_ms = 50;
  CHECK(em_nvrtc_compile(&j, &r, err) == EM_OK);
  CHECK(r.status == EM_NVRTC_TIMEOUT && strstr(r.log, "50 ms timeout") && !r.code);
  CHECK(r.ms >= 50 && r.ms < 1000);
  CHECK(count_files(c.dir) == 0); /* a timeout is not a property of the source: never cached */
  em_nvrtc_result_free(&r);
  /* several at once on the pool: each child is killed, none is left behind */
  em_nvrtc_job jobs[3] = {j, j, j};
  em_nvrtc_result res[3];
  CHECK(em_nvrtc_compile_many(jobs, 3, res, 3, NULL, NULL, err) == EM_OK);
  for (int i = 0; i < 3; i++) {
    CHECK(res[i].status == EM_NVRTC_TIMEOUT && res[i].ms < 1000);
    em_nvrtc_result_free(&res[i]);
  }
  cache_close(&c);
}

/* lib_nvrtc.c — `emmy.nvrtc`: compile CUDA C++ with NVRTC from Lua, one job or many on a thread pool with a
 * progress callback, results as plain tables (status, log, cubin or ptx bytes, ptxas resource usage), and the
 * cubin cache's folder and clearing. Results live in a scratch userdata until copied, so a raise leaks nothing. */
#include <stdlib.h>
#include <string.h>

#include "bindings.h"
#include "dl.h"
#include "nvrtc.h"

#define RESULTS_T "emmy.nvrtc.results"

/* Scratch owner of n results; __gc frees them, so a Lua error at any point releases them. */
typedef struct {
  em_nvrtc_result *r;
  int n;
} results_box;

static int results_gc(lua_State *L) {
  results_box *b = luaL_checkudata(L, 1, RESULTS_T);
  for (int i = 0; i < b->n; i++) em_nvrtc_result_free(&b->r[i]);
  free(b->r);
  b->r = NULL;
  b->n = 0;
  return 0;
}

static results_box *push_results(lua_State *L, int n) {
  results_box *b = lua_newuserdata(L, sizeof *b);
  b->r = NULL;
  b->n = 0;
  if (luaL_newmetatable(L, RESULTS_T)) {
    lua_pushcfunction(L, results_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  b->r = em_alloc(sizeof(em_nvrtc_result) * (size_t)(n ? n : 1));
  b->n = n;
  return b;
}

/* ---- job tables ------------------------------------------------------------------------------------------ */

/* Keeps the value at idx alive in the anchor table (absolute index), so the C job may borrow it even if a
 * progress callback edits the job tables. */
static void anchor(lua_State *L, int anchor_idx, int idx) {
  lua_pushvalue(L, idx);
  lua_rawseti(L, anchor_idx, (int)lua_objlen(L, anchor_idx) + 1);
}

/* A list of strings at the top of the stack → a borrowed array in a scratch userdata, anchored. */
static const char *const *string_list(lua_State *L, int anchor_idx, const char *what, const char *field, int *n) {
  int t = lua_gettop(L);
  if (!lua_istable(L, t)) luaL_error(L, "%s: field '%s' must be a list of strings", what, field);
  int len = (int)lua_objlen(L, t);
  const char **v = lua_newuserdata(L, sizeof(char *) * (size_t)(len ? len : 1));
  anchor(L, anchor_idx, -1);
  lua_pop(L, 1);
  for (int i = 0; i < len; i++) {
    lua_rawgeti(L, t, i + 1);
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "%s: %s[%d] is not a string", what, field, i + 1);
    anchor(L, anchor_idx, -1);
    v[i] = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  *n = len;
  return v;
}

/* Reads the job table at idx into job; unknown fields and wrong types raise (a typo must not compile a
 * different variant silently). Strings are anchored in the table at anchor_idx. */
static void read_job(lua_State *L, int idx, int anchor_idx, const char *what, em_nvrtc_job *job) {
  memset(job, 0, sizeof *job);
  job->arch = "sm_90a";
  if (!lua_istable(L, idx)) luaL_error(L, "%s: a job must be a table", what);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "%s: job fields are named by strings", what);
    const char *k = lua_tostring(L, -2);
    int t = lua_type(L, -1);
#define STR(f)                                                                           \
  do {                                                                                   \
    if (t != LUA_TSTRING) luaL_error(L, "%s: field '%s' must be a string", what, k);     \
    anchor(L, anchor_idx, -1);                                                           \
    job->f = lua_tostring(L, -1);                                                        \
  } while (0)
#define BOOL(f)                                                                          \
  do {                                                                                   \
    if (t != LUA_TBOOLEAN) luaL_error(L, "%s: field '%s' must be a boolean", what, k);   \
    job->f = lua_toboolean(L, -1);                                                       \
  } while (0)
    if (!strcmp(k, "source")) STR(source);
    else if (!strcmp(k, "arch")) STR(arch);
    else if (!strcmp(k, "name")) STR(name);
    else if (!strcmp(k, "cache_dir")) STR(cache_dir);
    else if (!strcmp(k, "fast_math")) BOOL(fast_math);
    else if (!strcmp(k, "lineinfo")) BOOL(lineinfo);
    else if (!strcmp(k, "cache")) {
      if (t != LUA_TBOOLEAN) luaL_error(L, "%s: field 'cache' must be a boolean", what);
      job->no_cache = !lua_toboolean(L, -1);
    } else if (!strcmp(k, "timeout_ms")) {
      lua_Number v = lua_tonumber(L, -1);
      if (t != LUA_TNUMBER || v < 0 || v > 86400000) luaL_error(L, "%s: timeout_ms must be a number of ms >= 0", what);
      job->timeout_ms = (int)v;
    } else if (!strcmp(k, "options")) {
      job->options = string_list(L, anchor_idx, what, k, &job->noptions);
    } else if (!strcmp(k, "name_expressions")) {
      job->name_exprs = string_list(L, anchor_idx, what, k, &job->nname_exprs);
    } else {
      luaL_error(L, "%s: unknown job field '%s' (source, arch, name, options, name_expressions, fast_math, "
                 "lineinfo, timeout_ms, cache, cache_dir)", what, k);
    }
#undef STR
#undef BOOL
    lua_pop(L, 1);
  }
  if (!job->source) luaL_error(L, "%s: the job has no source", what);
}

/* The list of job tables at list_idx → an array of *n jobs in a scratch userdata, anchored with their strings in the
 * table at anchor_idx; fn names the function in errors. */
static em_nvrtc_job *read_jobs(lua_State *L, int list_idx, int anchor_idx, const char *fn, int *n) {
  *n = (int)lua_objlen(L, list_idx);
  em_nvrtc_job *jobs = lua_newuserdata(L, sizeof(em_nvrtc_job) * (size_t)(*n ? *n : 1));
  anchor(L, anchor_idx, -1);
  lua_pop(L, 1);
  char what[64];
  for (int i = 0; i < *n; i++) {
    snprintf(what, sizeof what, "%s: job %d", fn, i + 1);
    lua_rawgeti(L, list_idx, i + 1);
    read_job(L, lua_gettop(L), anchor_idx, what, &jobs[i]);
    lua_pop(L, 1);
  }
  return jobs;
}

/* ---- result tables --------------------------------------------------------------------------------------- */

static void set_int(lua_State *L, const char *k, int v) { /* -1 (unknown) stays nil */
  if (v < 0) return;
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

static void push_kernels(lua_State *L, const em_nvrtc_result *r) {
  lua_createtable(L, r->nkernels, 0);
  for (int i = 0; i < r->nkernels; i++) {
    const em_nvrtc_kernel *k = &r->kernels[i];
    lua_createtable(L, 0, 10);
    lua_pushstring(L, k->name);
    lua_setfield(L, -2, "name");
    lua_pushboolean(L, k->entry);
    lua_setfield(L, -2, "entry");
    set_int(L, "regs", k->regs);
    set_int(L, "barriers", k->barriers);
    set_int(L, "smem", k->smem);
    set_int(L, "cmem0", k->cmem0);
    set_int(L, "stack", k->stack);
    set_int(L, "cumulative_stack", k->cumulative_stack);
    set_int(L, "spill_stores", k->spill_stores);
    set_int(L, "spill_loads", k->spill_loads);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "kernels");
}

static void push_summary(lua_State *L, const em_nvrtc_result *r) {
  set_int(L, "regs", r->regs);
  set_int(L, "smem", r->smem);
  set_int(L, "stack", r->stack);
  set_int(L, "spill_stores", r->spill_stores);
  set_int(L, "spill_loads", r->spill_loads);
  push_kernels(L, r);
}

/* {status, log, cubin|ptx, regs, smem, stack, spill_stores, spill_loads, kernels, lowered, ms, compile_ms,
 *  cache_hit, key}; job gives the name expressions that key lowered. */
static void push_result(lua_State *L, const em_nvrtc_job *job, const em_nvrtc_result *r) {
  lua_createtable(L, 0, 16);
  lua_pushstring(L, em_nvrtc_status_name(r->status));
  lua_setfield(L, -2, "status");
  lua_pushstring(L, r->log ? r->log : "");
  lua_setfield(L, -2, "log");
  if (r->code) {
    lua_pushlstring(L, (const char *)r->code, r->code_size);
    lua_setfield(L, -2, r->is_ptx ? "ptx" : "cubin");
  }
  push_summary(L, r);
  if (r->nlowered) {
    lua_createtable(L, 0, r->nlowered);
    for (int i = 0; i < r->nlowered && i < job->nname_exprs; i++) {
      if (!r->lowered[i]) continue;
      lua_pushstring(L, r->lowered[i]);
      lua_setfield(L, -2, job->name_exprs[i]);
    }
    lua_setfield(L, -2, "lowered");
  }
  lua_pushnumber(L, r->ms);
  lua_setfield(L, -2, "ms");
  lua_pushnumber(L, r->compile_ms);
  lua_setfield(L, -2, "compile_ms");
  lua_pushboolean(L, r->cache_hit);
  lua_setfield(L, -2, "cache_hit");
  if (r->key[0]) {
    lua_pushstring(L, r->key);
    lua_setfield(L, -2, "key");
  }
}

/* ---- functions ------------------------------------------------------------------------------------------- */

/* nvrtc.version() -> "13.0" | nil, msg */
static int l_version(lua_State *L) {
  int ma, mi;
  char err[EM_ERR_MAX];
  if (em_nvrtc_version(&ma, &mi, err)) return em_lua_fail(L, err);
  lua_pushfstring(L, "%d.%d", ma, mi);
  return 1;
}

/* nvrtc.compile{source=, arch="sm_90a", options={...}, name=, name_expressions={...}, fast_math=, lineinfo=,
 * timeout_ms=, cache=true, cache_dir=} -> result table | nil, msg (NVRTC missing, no fork or pipe).
 * A compile error is a result with status "compile_fail"; a malformed job raises. */
static int l_compile(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lua_newtable(L); /* 2: anchors */
  em_nvrtc_job job;
  read_job(L, 1, 2, "nvrtc.compile", &job);
  results_box *b = push_results(L, 1);
  char err[EM_ERR_MAX];
  em_status st = em_nvrtc_compile(&job, &b->r[0], err);
  if (st == EM_EINPUT) luaL_error(L, "%s", err);
  if (st) return em_lua_fail(L, err);
  push_result(L, &job, &b->r[0]);
  return 1;
}

typedef struct {
  lua_State *L;
  int fn;      /* stack index of the progress function, 0 for none */
  int err_ref; /* registry ref of the progress function's error, LUA_NOREF while none */
} progress_ctx;

static int on_progress(void *ctx, int done, int total, int index, const em_nvrtc_result *r) {
  progress_ctx *p = ctx;
  if (!p->fn) return 0;
  lua_State *L = p->L;
  lua_checkstack(L, 8);
  lua_pushvalue(L, p->fn);
  lua_pushinteger(L, done);
  lua_pushinteger(L, total);
  lua_pushinteger(L, index + 1);
  lua_pushstring(L, em_nvrtc_status_name(r->status));
  if (lua_pcall(L, 4, 0, 0) == 0) return 0;
  p->err_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* raised again once every worker has stopped */
  return 1;
}

/* The options table at idx of compile_many (progress: 1, a function) or start (0): unknown keys and wrong types raise
 * naming fn. Returns threads (0: one per CPU). */
static int read_options(lua_State *L, int idx, const char *fn, int progress) {
  luaL_checktype(L, idx, LUA_TTABLE);
  int nthreads = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
    if (!strcmp(k, "threads")) {
      if (lua_type(L, -1) != LUA_TNUMBER || lua_tonumber(L, -1) < 0)
        luaL_error(L, "%s: threads must be a number >= 0 (0: one per CPU)", fn);
      nthreads = (int)lua_tointeger(L, -1);
    } else if (progress && !strcmp(k, "progress")) {
      if (!lua_isfunction(L, -1)) luaL_error(L, "%s: progress must be a function", fn);
    } else {
      luaL_error(L, "%s: unknown option '%s' (%s)", fn, k, progress ? "threads, progress" : "threads");
    }
    lua_pop(L, 1);
  }
  return nthreads;
}

/* nvrtc.compile_many({job, ...} [, {threads=N, progress=function(done, total, index, status) end}])
 *   -> {result, ...} in job order | nil, msg (NVRTC missing).
 * Jobs run in parallel; progress is called on this thread as each finishes. An error raised by progress
 * cancels the jobs not yet started and is raised again after the running ones finish. */
static int l_compile_many(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int nthreads = 0;
  progress_ctx pc = {L, 0, LUA_NOREF};
  lua_settop(L, 2);
  if (!lua_isnil(L, 2)) {
    nthreads = read_options(L, 2, "nvrtc.compile_many", 1);
    lua_getfield(L, 2, "progress"); /* 3 */
    if (!lua_isnil(L, 3)) pc.fn = 3;
  } else {
    lua_pushnil(L); /* 3 */
  }
  lua_newtable(L); /* 4: anchors */
  int n;
  em_nvrtc_job *jobs = read_jobs(L, 1, 4, "nvrtc.compile_many", &n);
  results_box *b = push_results(L, n); /* 5 */
  char err[EM_ERR_MAX];
  em_status st = em_nvrtc_compile_many(jobs, n, b->r, nthreads, on_progress, &pc, err);
  if (pc.err_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, pc.err_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, pc.err_ref);
    return lua_error(L);
  }
  if (st) return em_lua_fail(L, err);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_result(L, &jobs[i], &b->r[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* ---- a batch in the background ------------------------------------------------------------------------------ */

#define BATCH_T "emmy.nvrtc.batch"

/* The batch's C side; its environment table anchors the job tables' strings and the jobs array until it closes. */
typedef struct {
  em_nvrtc_batch *b; /* NULL once closed */
  em_nvrtc_job *jobs;
  em_nvrtc_result *r;
  int n, left; /* jobs, and jobs not yet given by next */
} batch_box;

static void batch_close(batch_box *bb) {
  if (bb->b) {
    em_nvrtc_batch_cancel(bb->b);
    em_nvrtc_batch_end(bb->b);
    bb->b = NULL;
  }
  for (int i = 0; i < bb->n; i++) em_nvrtc_result_free(&bb->r[i]);
  free(bb->r);
  bb->r = NULL;
  bb->n = bb->left = 0;
}

static int batch_gc(lua_State *L) {
  batch_close(luaL_checkudata(L, 1, BATCH_T));
  return 0;
}

/* batch:next([wait_ms = 0]) -> index, result (a job that finished, each once, in the order they finished)
 *   | nil when none finished within wait_ms (< 0: wait as long as it takes) | false once every job was given */
static int batch_next(lua_State *L) {
  batch_box *bb = luaL_checkudata(L, 1, BATCH_T);
  int wait_ms = (int)luaL_optinteger(L, 2, 0);
  if (!bb->b || !bb->left) {
    lua_pushboolean(L, 0);
    return 1;
  }
  int i = em_nvrtc_batch_next(bb->b, wait_ms);
  if (i == -2) {
    bb->left = 0;
    lua_pushboolean(L, 0);
    return 1;
  }
  if (i < 0) {
    lua_pushnil(L);
    return 1;
  }
  bb->left--;
  lua_pushinteger(L, i + 1);
  push_result(L, &bb->jobs[i], &bb->r[i]);
  em_nvrtc_result_free(&bb->r[i]); /* (the cubin is in the table now) */
  return 2;
}

/* batch:left() -> the number of jobs next has not given yet */
static int batch_left(lua_State *L) {
  lua_pushinteger(L, ((batch_box *)luaL_checkudata(L, 1, BATCH_T))->left);
  return 1;
}

/* batch:close(): the jobs not yet started are cancelled, the running ones waited for; idempotent (also __gc) */
static int batch_close_l(lua_State *L) {
  batch_close(luaL_checkudata(L, 1, BATCH_T));
  return 0;
}

/* nvrtc.start({job, ...} [, {threads=N}]) -> batch | nil, msg (NVRTC missing): compile_many in the background;
 * batch:next(wait_ms) gives each finished job's index and result table, batch:close() ends it. */
static int l_start(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int nthreads = 0;
  lua_settop(L, 2);
  if (!lua_isnil(L, 2)) nthreads = read_options(L, 2, "nvrtc.start", 0);
  lua_newtable(L); /* 3: anchors */
  int n;
  em_nvrtc_job *jobs = read_jobs(L, 1, 3, "nvrtc.start", &n);
  batch_box *bb = lua_newuserdata(L, sizeof *bb); /* 4 */
  memset(bb, 0, sizeof *bb);
  if (luaL_newmetatable(L, BATCH_T)) {
    static const luaL_Reg m[] = {{"next", batch_next}, {"left", batch_left}, {"close", batch_close_l}, {NULL, NULL}};
    lua_pushcfunction(L, batch_gc);
    lua_setfield(L, -2, "__gc");
    lua_newtable(L);
    luaL_register(L, NULL, m);
    lua_setfield(L, -2, "__index");
  }
  lua_setmetatable(L, 4);
  lua_pushvalue(L, 3);
  lua_setfenv(L, 4);
  bb->jobs = jobs;
  bb->r = em_alloc(sizeof(em_nvrtc_result) * (size_t)(n ? n : 1));
  bb->n = bb->left = n;
  char err[EM_ERR_MAX];
  bb->b = em_nvrtc_batch_start(jobs, n, bb->r, nthreads, err);
  if (!bb->b) return em_lua_fail(L, err);
  return 1;
}

/* nvrtc.parse_log(text) -> {regs, smem, stack, spill_stores, spill_loads, kernels} from a ptxas -v log */
static int l_parse_log(lua_State *L) {
  const char *log = luaL_checkstring(L, 1);
  results_box *b = push_results(L, 1);
  em_nvrtc_result_free(&b->r[0]);
  em_nvrtc_parse_log(log, &b->r[0]);
  lua_createtable(L, 0, 6);
  push_summary(L, &b->r[0]);
  return 1;
}

/* nvrtc.cache_dir([dir]) -> the cache folder | nil, msg when the cache is off */
static int l_cache_dir(lua_State *L) {
  char dir[4096];
  if (!em_nvrtc_cache_dir(luaL_optstring(L, 1, NULL), dir, sizeof dir))
    return em_lua_fail(L, "the cubin cache is off (EMMY_CUBIN_CACHE=off, or no HOME)");
  lua_pushstring(L, dir);
  return 1;
}

/* nvrtc.clear_cache([dir]) -> number of files removed | nil, msg */
static int l_clear_cache(lua_State *L) {
  char err[EM_ERR_MAX];
  int removed = 0;
  if (em_nvrtc_cache_clear(luaL_optstring(L, 1, NULL), &removed, err)) return em_lua_fail(L, err);
  lua_pushinteger(L, removed);
  return 1;
}

/* nvrtc.trim_cache(max_bytes [, dir]) -> kept bytes, files removed | nil, msg: the least recently used entries removed
 * until the cache is at most 90% of max_bytes (em_nvrtc_cache_trim; compile_many does it after storing) */
static int l_trim_cache(lua_State *L) {
  char err[EM_ERR_MAX];
  long long kept = 0;
  int removed = 0;
  if (em_nvrtc_cache_trim(luaL_optstring(L, 2, NULL), (long long)luaL_checknumber(L, 1), &kept, &removed, err))
    return em_lua_fail(L, err);
  lua_pushnumber(L, (lua_Number)kept);
  lua_pushinteger(L, removed);
  return 2;
}

int luaopen_emmy_nvrtc(lua_State *L) {
  static const luaL_Reg fns[] = {{"version", l_version},         {"compile", l_compile},
                                 {"compile_many", l_compile_many}, {"parse_log", l_parse_log},
                                 {"start", l_start},
                                 {"cache_dir", l_cache_dir},     {"clear_cache", l_clear_cache},
                                 {"trim_cache", l_trim_cache},   {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  lua_createtable(L, EM_NVRTC_NSTATUS, 0); /* nvrtc.STATUS: every status label, in enum order */
  for (int i = 0; i < EM_NVRTC_NSTATUS; i++) {
    lua_pushstring(L, em_nvrtc_status_name((em_nvrtc_status)i));
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "STATUS");
  return 1;
}

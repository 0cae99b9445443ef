/* lib_cuda.c — `emmy.cuda`: a device context (userdata "emmy.cuda"), device buffers ("emmy.cubuf"), modules
 * ("emmy.cumodule") and functions ("emmy.cufn"), launches, synchronization and event / CUDA-graph timing.
 * Driver failures return nil, message (one line); misuse raises. Each child userdata keeps its parent userdata
 * alive through its environment table, and the C objects are reference counted, so any release order is safe. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindings.h"
#include "cuda.h"
#include "cupti.h"
#include "ref.h"

#define CTX_T "emmy.cuda"
#define BUF_T "emmy.cubuf"
#define MOD_T "emmy.cumodule"
#define FN_T "emmy.cufn"
#define GRAPH_T "emmy.cugraph"
#define EVENT_T "emmy.cuevent"
#define TENSOR_T "emmy.tensor"
#define HOST_T "emmy.cuhost"

static em_cu_ctx *check_ctx(lua_State *L, int idx) { return em_lua_check(L, idx, CTX_T, "CUDA context"); }
static em_cu_buf *check_buf(lua_State *L, int idx) { return em_lua_check(L, idx, BUF_T, "CUDA buffer"); }
static em_cu_module *check_mod(lua_State *L, int idx) { return em_lua_check(L, idx, MOD_T, "CUDA module"); }
static em_cu_fn *check_fn(lua_State *L, int idx) { return em_lua_check(L, idx, FN_T, "CUDA function"); }
static em_cu_host *check_host(lua_State *L, int idx) { return em_lua_check(L, idx, HOST_T, "CUDA host buffer"); }

/* Pushes a userdata of class tname owning p whose environment holds the value at parent (keeps it alive). */
static void push_child(lua_State *L, const char *tname, void *p, int parent) {
  parent = parent < 0 ? lua_gettop(L) + parent + 1 : parent;
  em_lua_push(L, tname, p);
  lua_createtable(L, 1, 0);
  lua_pushvalue(L, parent);
  lua_rawseti(L, -2, 1);
  lua_setfenv(L, -2);
}

static int ok_or_fail(lua_State *L, em_status st, const char *err) {
  if (st) return em_lua_fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- context ---- */

static int ctx_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, CTX_T);
  em_cu_close(b->p);
  b->p = NULL;
  return 0;
}

static int ctx_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, CTX_T);
  if (!b->p) {
    lua_pushstring(L, "emmy.cuda (closed)");
    return 1;
  }
  const em_cu_info *in = em_cu_ctx_info(b->p);
  const char *lost = em_cu_lost(b->p);
  lua_pushfstring(L, "emmy.cuda device %d: %s sm_%d%d%s", in->device, in->name, in->cc_major, in->cc_minor,
                  lost ? " (lost)" : "");
  return 1;
}

/* cuda.open([device]) -> ctx | nil, msg */
static int l_open(lua_State *L) {
  int device = (int)luaL_optinteger(L, 1, 0);
  char err[EM_ERR_MAX];
  em_cu_ctx *c = em_cu_open(device, err);
  if (!c) return em_lua_fail(L, err);
  em_lua_push(L, CTX_T, c);
  return 1;
}

/* cuda.has_symbol(name) -> boolean: whether the driver exports name (false without a driver) */
static int l_has_symbol(lua_State *L) {
  lua_pushboolean(L, em_cu_has_symbol(luaL_checkstring(L, 1)));
  return 1;
}

#define SET_INT(k, v)                  \
  do {                                 \
    lua_pushnumber(L, (lua_Number)(v)); \
    lua_setfield(L, -2, k);            \
  } while (0)

/* ctx:info() -> {name, cc = "9.0", cc_major, cc_minor, arch = "sm_90", sm_count, smem_per_block, smem_optin,
 *   smem_per_sm, regs_per_sm, threads_per_sm, l2, clock_khz, mem_clock_khz, bus_width_bits, dram_gbps (peak),
 *   total_mem, driver_version, device} */
static int ctx_info(lua_State *L) {
  const em_cu_info *in = em_cu_ctx_info(check_ctx(L, 1));
  lua_createtable(L, 0, 20);
  lua_pushstring(L, in->name);
  lua_setfield(L, -2, "name");
  lua_pushfstring(L, "%d.%d", in->cc_major, in->cc_minor);
  lua_setfield(L, -2, "cc");
  lua_pushfstring(L, "sm_%d%d", in->cc_major, in->cc_minor);
  lua_setfield(L, -2, "arch");
  SET_INT("device", in->device);
  SET_INT("cc_major", in->cc_major);
  SET_INT("cc_minor", in->cc_minor);
  SET_INT("sm_count", in->sm_count);
  SET_INT("smem_per_block", in->smem_per_block);
  SET_INT("smem_optin", in->smem_optin);
  SET_INT("smem_per_sm", in->smem_per_sm);
  SET_INT("regs_per_sm", in->regs_per_sm);
  SET_INT("threads_per_sm", in->threads_per_sm);
  SET_INT("l2", in->l2_bytes);
  SET_INT("clock_khz", in->clock_khz);
  SET_INT("mem_clock_khz", in->mem_clock_khz);
  SET_INT("bus_width_bits", in->bus_width_bits);
  /* Double data rate: two transfers per memory clock. */
  SET_INT("dram_gbps", 2.0 * in->mem_clock_khz * 1e3 * (in->bus_width_bits / 8.0) / 1e9);
  SET_INT("total_mem", (double)in->total_mem);
  SET_INT("driver_version", in->driver_version);
  return 1;
}

/* ctx:lost() -> nil while usable | the reason the context was lost */
static int ctx_lost(lua_State *L) {
  const char *why = em_cu_lost(check_ctx(L, 1));
  if (why) lua_pushstring(L, why);
  else lua_pushnil(L);
  return 1;
}

/* ctx:alloc(bytes) -> buffer | nil, msg */
static int ctx_alloc(lua_State *L) {
  em_cu_ctx *c = check_ctx(L, 1);
  lua_Number n = luaL_checknumber(L, 2);
  if (n < 0 || n != floor(n) || n > 9.007199254740992e15) luaL_argerror(L, 2, "a byte count");
  char err[EM_ERR_MAX];
  em_cu_buf *b = em_cu_alloc(c, (size_t)n, err);
  if (!b) return em_lua_fail(L, err);
  push_child(L, BUF_T, b, 1);
  return 1;
}

/* ctx:upload(tensor) -> buffer holding the tensor in its dtype's device layout | nil, msg */
static int ctx_upload(lua_State *L) {
  em_cu_ctx *c = check_ctx(L, 1);
  em_tensor *t = em_lua_check(L, 2, TENSOR_T, "tensor");
  char err[EM_ERR_MAX];
  em_cu_buf *b = em_cu_upload(c, t, err);
  if (!b) return em_lua_fail(L, err);
  push_child(L, BUF_T, b, 1);
  return 1;
}

/* ctx:module(image) -> module | nil, msg (image: cubin, fatbin or PTX text) */
static int ctx_module(lua_State *L) {
  em_cu_ctx *c = check_ctx(L, 1);
  const char *image = luaL_checkstring(L, 2);
  char err[EM_ERR_MAX];
  em_cu_module *m = em_cu_module_load(c, image, err);
  if (!m) return em_lua_fail(L, err);
  push_child(L, MOD_T, m, 1);
  return 1;
}

/* Reads field k of the table at idx as dim3: a number or {x [, y [, z]]}; absent -> 1,1,1. */
static void read_dim3(lua_State *L, int idx, const char *k, unsigned d[3]) {
  d[0] = d[1] = d[2] = 1;
  lua_getfield(L, idx, k);
  if (lua_isnumber(L, -1)) {
    d[0] = (unsigned)lua_tonumber(L, -1);
  } else if (lua_istable(L, -1)) {
    for (int i = 0; i < 3; i++) {
      lua_rawgeti(L, -1, i + 1);
      if (lua_isnumber(L, -1)) {
        lua_Number v = lua_tonumber(L, -1);
        if (v < 1 || v > 4294967295.0) luaL_error(L, "launch: %s[%d] = %f is out of range", k, i + 1, v);
        d[i] = (unsigned)v;
      } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "launch: %s[%d] must be a number", k, i + 1);
      }
      lua_pop(L, 1);
    }
  } else if (!lua_isnil(L, -1)) {
    luaL_error(L, "launch: %s must be a number or {x, y, z}", k);
  }
  lua_pop(L, 1);
}

/* Reads argument i (1-based) of the list at idx: a buffer, or {ptr = buffer|address}, {i32 = n}, {i64 = n}, {f32 = x}. */
static void read_arg(lua_State *L, int idx, int i, em_cu_arg *a) {
  lua_rawgeti(L, idx, i);
  int v = lua_gettop(L);
  if (luaL_testudata(L, v, BUF_T)) {
    a->kind = EM_CU_ARG_PTR;
    a->v.ptr = em_cu_buf_ptr(check_buf(L, v));
  } else if (lua_istable(L, v)) {
    static const char *const tags[] = {
#define X(e, n) n,
        EM_CU_ARG_KINDS(X)
#undef X
    };
    int found = -1;
    for (int k = 0; k < EM_CU_NARG_KINDS; k++) {
      lua_getfield(L, v, tags[k]);
      if (!lua_isnil(L, -1)) {
        if (found >= 0) luaL_error(L, "launch: args[%d] has both %s and %s", i, tags[found], tags[k]);
        found = k;
        a->kind = (em_cu_arg_kind)k;
        if (k == EM_CU_ARG_PTR && luaL_testudata(L, -1, BUF_T)) {
          a->v.ptr = em_cu_buf_ptr(check_buf(L, lua_gettop(L)));
        } else if (k == EM_CU_ARG_TMAP) {
          size_t n = 0;
          const char *b = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
          if (!b || n != 128) luaL_error(L, "launch: args[%d].tmap must be the 128-byte string of ctx:tmap()", i);
          memcpy(a->v.tmap, b, 128);
        } else {
          if (!lua_isnumber(L, -1)) luaL_error(L, "launch: args[%d].%s must be a number", i, tags[k]);
          lua_Number x = lua_tonumber(L, -1);
          switch (k) {
          case EM_CU_ARG_PTR: a->v.ptr = (uint64_t)x; break;
          case EM_CU_ARG_I32:
            if (x != floor(x) || x < -2147483648.0 || x > 2147483647.0)
              luaL_error(L, "launch: args[%d].i32 = %f is not a 32-bit integer", i, x);
            a->v.i32 = (int32_t)x;
            break;
          case EM_CU_ARG_I64:
            if (x != floor(x)) luaL_error(L, "launch: args[%d].i64 = %f is not an integer", i, x);
            a->v.i64 = (int64_t)x;
            break;
          default: a->v.f32 = (float)x; break;
          }
        }
      }
      lua_pop(L, 1);
    }
    if (found < 0) luaL_error(L, "launch: args[%d] must be a buffer or {ptr=}, {i32=}, {i64=}, {f32=}", i);
  } else {
    luaL_error(L, "launch: args[%d] is a %s; pass a buffer or tag it {i32=}, {i64=}, {f32=}, {ptr=}", i,
               luaL_typename(L, v));
  }
  lua_pop(L, 1);
}

/* Reads list field `name` of the table at index 2: n positive integers into out (n from the list when *n is 0). */
static void tmap_list(lua_State *L, const char *name, uint64_t *out, int *n) {
  lua_getfield(L, 2, name);
  luaL_checktype(L, -1, LUA_TTABLE);
  int len = (int)lua_objlen(L, -1);
  if (*n == 0) *n = len;
  if (len != *n || len < 1 || len > 5) luaL_error(L, "tmap: %s has %d entries (want %d, at most 5)", name, len, *n);
  for (int i = 0; i < len; i++) {
    lua_rawgeti(L, -1, i + 1);
    lua_Number x = luaL_checknumber(L, -1);
    if (x < 1 || x != floor(x)) luaL_error(L, "tmap: %s[%d] = %f must be a positive integer", name, i + 1, x);
    out[i] = (uint64_t)x;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* ctx:tmap{ptr = buffer, dtype = "bf16"|"f16", dims = {innermost first, 2..5 of them}, strides = {bytes a step of
 * dims[2], dims[3], ...}, box = {an extent a dim}} -> the 128-byte tensor map as a string (a launch argument
 * {tmap = s}) | nil, msg */
static int ctx_tmap(lua_State *L) {
  check_ctx(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_getfield(L, 2, "ptr");
  uint64_t ptr = luaL_testudata(L, -1, BUF_T) ? em_cu_buf_ptr(check_buf(L, lua_gettop(L))) : (uint64_t)luaL_checknumber(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 2, "dtype");
  const char *dt = luaL_optstring(L, -1, "bf16");
  int bf16 = !strcmp(dt, "bf16");
  if (!bf16 && strcmp(dt, "f16")) luaL_error(L, "tmap: dtype %s (bf16 or f16)", dt);
  lua_pop(L, 1);
  uint64_t dims[5], strides[4], box[5];
  int rank = 0, ns, nb;
  tmap_list(L, "dims", dims, &rank);
  if (rank < 2) luaL_error(L, "tmap: dims has %d entries (2..5)", rank);
  ns = rank - 1, nb = rank;
  tmap_list(L, "strides", strides, &ns);
  tmap_list(L, "box", box, &nb);
  unsigned bx[5];
  for (int i = 0; i < rank; i++) bx[i] = (unsigned)box[i];
  _Alignas(64) unsigned char m[128];
  char err[EM_ERR_MAX];
  if (em_cu_tmap_encode(m, ptr, bf16, rank, dims, strides, bx, err)) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  lua_pushlstring(L, (const char *)m, 128);
  return 1;
}

/* ctx:launch(fn, {grid = {x,y,z}, block = {x,y,z}, smem = bytes, args = {...}}) -> true | nil, msg */
static int ctx_launch(lua_State *L) {
  em_cu_ctx *c = check_ctx(L, 1);
  em_cu_fn *f = check_fn(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  if (em_cu_fn_ctx(f) != c) luaL_argerror(L, 2, "the function belongs to another CUDA context");
  em_cu_launch_cfg cfg = {{1, 1, 1}, {1, 1, 1}, 0, NULL, 0};
  read_dim3(L, 3, "grid", cfg.grid);
  read_dim3(L, 3, "block", cfg.block);
  lua_getfield(L, 3, "smem");
  lua_Number smem = luaL_optnumber(L, -1, 0);
  lua_pop(L, 1);
  if (smem < 0 || smem > 4294967295.0) luaL_error(L, "launch: smem = %f is out of range", smem);
  cfg.smem = (unsigned)smem;
  lua_getfield(L, 3, "pdl");
  cfg.pdl = lua_toboolean(L, -1);
  lua_pop(L, 1);
  em_cu_arg args[256];
  int nargs = 0;
  lua_getfield(L, 3, "args");
  if (lua_istable(L, -1)) {
    int idx = lua_gettop(L);
    nargs = (int)lua_objlen(L, idx);
    if (nargs > 256) luaL_error(L, "launch: %d arguments (at most 256)", nargs);
    for (int i = 0; i < nargs; i++) read_arg(L, idx, i + 1, &args[i]);
  } else if (!lua_isnil(L, -1)) {
    luaL_error(L, "launch: args must be a list");
  }
  lua_pop(L, 1);
  char err[EM_ERR_MAX];
  return ok_or_fail(L, em_cu_launch(f, &cfg, args, nargs, err), err);
}

/* ctx:sync() -> true | nil, msg */
static int ctx_sync(lua_State *L) {
  char err[EM_ERR_MAX];
  return ok_or_fail(L, em_cu_sync(check_ctx(L, 1), err), err);
}

typedef struct {
  lua_State *L;
  int fn;     /* stack index of the Lua function */
  int raised; /* 1: its error value is on top of the stack */
} lua_body;

/* Calls the Lua function; `nil|false, msg` from it is a failure, an error it raises is kept for re-raising. */
static em_status call_body(void *ud, char *err) {
  lua_body *b = ud;
  lua_State *L = b->L;
  lua_pushvalue(L, b->fn);
  if (lua_pcall(L, 0, 2, 0)) {
    b->raised = 1;
    return em_fail(err, EM_ERUN, "the timed function raised an error");
  }
  if (!lua_toboolean(L, -2) && lua_type(L, -1) == LUA_TSTRING) {
    em_fail(err, EM_ERUN, "%s", lua_tostring(L, -1));
    lua_pop(L, 2);
    return EM_ERUN;
  }
  lua_pop(L, 2);
  return EM_OK;
}

/* ctx:capture(fn) -> graph | nil, msg: fn's launches (as for ctx:time) captured once into a CUDA graph, instantiated;
 * graph:launch() replays it on the context's stream (emmy serve: one graph a bucket of batch sizes). The buffers and
 * tensor maps fn passed are baked in: the caller keeps the buffers alive and refills them between replays. */
static int ctx_capture(lua_State *L) {
  em_cu_ctx *c = check_ctx(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  lua_body b = {L, 2, 0};
  char err[EM_ERR_MAX];
  lua_gc(L, LUA_GCSTOP, 0); /* (a buffer freed during capture would invalidate it) */
  em_cu_graph *g = em_cu_graph_capture(c, call_body, &b, err);
  lua_gc(L, LUA_GCRESTART, 0);
  if (b.raised) return lua_error(L);
  if (!g) return em_lua_fail(L, err);
  push_child(L, GRAPH_T, g, 1);
  return 1;
}

/* ctx:event() -> a CUDA event of the context: ev:record() marks the context's stream there; ev:ms_since(start) waits
 * for ev and gives the milliseconds from start's mark to ev's (the GPU's own timing of the work between) */
static int ctx_event(lua_State *L) {
  char err[EM_ERR_MAX];
  em_cu_event *e = em_cu_event_new(check_ctx(L, 1), err);
  if (!e) return em_lua_fail(L, err);
  push_child(L, EVENT_T, e, 1);
  return 1;
}

static int event_record(lua_State *L) {
  char err[EM_ERR_MAX];
  return ok_or_fail(L, em_cu_event_record(em_lua_check(L, 1, EVENT_T, "CUDA event"), NULL, err), err);
}

/* ev:sync() -> true | nil, msg — waits until the work enqueued before its record is done */
static int event_sync(lua_State *L) {
  char err[EM_ERR_MAX];
  return ok_or_fail(L, em_cu_event_sync(em_lua_check(L, 1, EVENT_T, "CUDA event"), err), err);
}

static int event_ms_since(lua_State *L) {
  em_cu_event *e = em_lua_check(L, 1, EVENT_T, "CUDA event"), *s = em_lua_check(L, 2, EVENT_T, "CUDA event");
  char err[EM_ERR_MAX];
  float ms = 0;
  if (em_cu_event_sync(e, err) || em_cu_event_elapsed_ms(s, e, &ms, err)) return em_lua_fail(L, err);
  lua_pushnumber(L, ms);
  return 1;
}

static int event_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, EVENT_T);
  em_cu_event_free(b->p);
  b->p = NULL;
  return 0;
}

static int event_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, EVENT_T);
  lua_pushstring(L, b->p ? "emmy.cuevent" : "emmy.cuevent (freed)");
  return 1;
}

static int graph_launch(lua_State *L) {
  em_cu_graph *g = em_lua_check(L, 1, GRAPH_T, "CUDA graph");
  char err[EM_ERR_MAX];
  return ok_or_fail(L, em_cu_graph_launch(g, err), err);
}

static int graph_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, GRAPH_T);
  em_cu_graph_free(b->p);
  b->p = NULL;
  return 0;
}

static int graph_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, GRAPH_T);
  lua_pushstring(L, b->p ? "emmy.cugraph" : "emmy.cugraph (freed)");
  return 1;
}

/* ctx:time(fn, {reps = 50, warmup = 5, graph = false, min_sample_us = 20 (graph: 200), warmup_ms = 0, flush_bytes = 0,
 *              flush = nil | "read" | "memset" (flush_bytes read, or written; nil: $EMMY_FLUSH, memset or read)})
 *   -> {median_us, min_us, p20_us, p80_us, mean_us, samples, batch, graph, flushed, all_us = {...}} | nil, msg
 * fn enqueues work (ctx:launch ...) and returns nothing, or nil, msg on failure. With graph = true its launches
 * are captured once into a CUDA graph and replays are timed. Times are per run of fn (per replay). */
static int ctx_time(lua_State *L) {
  em_cu_ctx *c = check_ctx(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  em_cu_time_opts o = EM_CU_TIME_DEFAULTS;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "reps");
    o.reps = (int)luaL_optnumber(L, -1, o.reps);
    lua_getfield(L, 3, "warmup");
    o.warmup = (int)luaL_optnumber(L, -1, o.warmup);
    lua_getfield(L, 3, "graph");
    o.graph = lua_toboolean(L, -1);
    lua_getfield(L, 3, "min_sample_us");
    o.min_sample_us = luaL_optnumber(L, -1, o.min_sample_us);
    lua_getfield(L, 3, "warmup_ms");
    o.warmup_ms = luaL_optnumber(L, -1, o.warmup_ms);
    lua_getfield(L, 3, "flush_bytes");
    lua_Number fb = luaL_optnumber(L, -1, 0);
    if (fb < 0 || fb > 1e11) luaL_argerror(L, 3, "flush_bytes must be 0 to 1e11");
    o.flush_bytes = (size_t)fb;
    lua_getfield(L, 3, "flush");
    const char *fm = luaL_optstring(L, -1, "env");
    if (strcmp(fm, "env") && strcmp(fm, "read") && strcmp(fm, "memset"))
      luaL_argerror(L, 3, "flush must be \"read\", \"memset\" (or nil: $EMMY_FLUSH)");
    o.flush_mode = !strcmp(fm, "read") ? 1 : !strcmp(fm, "memset") ? 2 : 0;
    lua_pop(L, 7);
  }
  lua_settop(L, 2);
  lua_body b = {L, 2, 0};
  em_cu_timing t;
  char err[EM_ERR_MAX];
  /* A collection during capture could free a buffer (cuMemFree), which would invalidate the capture. */
  if (o.graph) lua_gc(L, LUA_GCSTOP, 0);
  em_status st = em_cu_time(c, call_body, &b, &o, &t, err);
  if (o.graph) lua_gc(L, LUA_GCRESTART, 0);
  if (b.raised) return lua_error(L); /* the callback's error value is on top */
  if (st) return em_lua_fail(L, err);
  lua_createtable(L, 0, 10);
  lua_pushnumber(L, t.median_us);
  lua_setfield(L, -2, "median_us");
  lua_pushnumber(L, t.min_us);
  lua_setfield(L, -2, "min_us");
  lua_pushnumber(L, t.p20_us);
  lua_setfield(L, -2, "p20_us");
  lua_pushnumber(L, t.p80_us);
  lua_setfield(L, -2, "p80_us");
  lua_pushnumber(L, t.mean_us);
  lua_setfield(L, -2, "mean_us");
  SET_INT("samples", t.samples);
  SET_INT("batch", t.batch);
  lua_pushboolean(L, t.graph);
  lua_setfield(L, -2, "graph");
  lua_pushboolean(L, t.flushed);
  lua_setfield(L, -2, "flushed");
  lua_createtable(L, t.samples, 0);
  for (int i = 0; i < t.samples; i++) {
    lua_pushnumber(L, t.all_us[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "all_us");
  em_cu_timing_free(&t);
  return 1;
}

/* ---- buffers ---- */

static int buf_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, BUF_T);
  em_cu_free(b->p);
  b->p = NULL;
  return 0;
}

static int buf_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, BUF_T);
  if (!b->p) lua_pushstring(L, "emmy.cubuf (closed)");
  else {
    char s[96];
    snprintf(s, sizeof s, "emmy.cubuf %zu bytes at 0x%llx", em_cu_buf_bytes(b->p),
             (unsigned long long)em_cu_buf_ptr(b->p));
    lua_pushstring(L, s);
  }
  return 1;
}

/* buf:size() -> bytes */
static int buf_size(lua_State *L) {
  lua_pushnumber(L, (lua_Number)em_cu_buf_bytes(check_buf(L, 1)));
  return 1;
}

/* buf:ptr() -> the device address as a number */
static int buf_ptr(lua_State *L) {
  lua_pushnumber(L, (lua_Number)em_cu_buf_ptr(check_buf(L, 1)));
  return 1;
}

/* buf:fill(byte) -> true | nil, msg — every byte set (0xFF poisons float outputs with NaN) */
static int buf_fill(lua_State *L) {
  em_cu_buf *b = check_buf(L, 1);
  lua_Integer v = luaL_checkinteger(L, 2);
  if (v < 0 || v > 255) luaL_argerror(L, 2, "a byte value 0..255");
  char err[EM_ERR_MAX];
  return ok_or_fail(L, em_cu_fill(b, (unsigned char)v, err), err);
}

/* buf:upload(tensor | string) -> true | nil, msg — writes the tensor (converted to the device dtype) or the string's raw
 * bytes at the start of the buffer */
static int buf_upload(lua_State *L) {
  em_cu_buf *b = check_buf(L, 1);
  char err[EM_ERR_MAX];
  if (lua_type(L, 2) == LUA_TSTRING) { /* raw bytes, as the device holds them (ref.packed_mask(lens, "bytes")) */
    size_t n;
    const char *p = lua_tolstring(L, 2, &n);
    return ok_or_fail(L, em_cu_write(b, 0, p, n, err), err);
  }
  em_tensor *t = em_lua_check(L, 2, TENSOR_T, "tensor");
  return ok_or_fail(L, em_cu_upload_into(b, t, err), err);
}

/* The byte offset (or size) at idx: a non-negative integer, else an argument error; absent: dflt (-1: required). */
static size_t byte_arg(lua_State *L, int idx, lua_Number dflt) {
  lua_Number o = dflt < 0 ? luaL_checknumber(L, idx) : luaL_optnumber(L, idx, dflt);
  if (o < 0 || o != floor(o)) luaL_argerror(L, idx, "a non-negative integer (bytes)");
  return (size_t)o;
}

/* The packed sequences' lengths at idx (a table of positive integers) in a static array kept between calls; their count
 * in *n, their sum in *T. */
static const int64_t *mask_lens(lua_State *L, int idx, int *n, int64_t *T) {
  static int64_t *lens;
  static int lcap;
  luaL_checktype(L, idx, LUA_TTABLE);
  *n = (int)lua_objlen(L, idx);
  if (*n > lcap) {
    int64_t *nl = realloc(lens, sizeof *nl * (size_t)*n);
    if (!nl) luaL_error(L, "mask: out of host memory");
    lens = nl, lcap = *n;
  }
  *T = 0;
  for (int i = 1; i <= *n; i++) {
    lua_rawgeti(L, idx, i);
    int bad = em_lua_toint(L, -1, &lens[i - 1]);
    lua_pop(L, 1);
    if (bad || lens[i - 1] < 1) luaL_argerror(L, idx, "lengths must be positive integers");
    *T += lens[i - 1];
  }
  return lens;
}

/* nil, msg (what's) where T tokens' mask (T*T bytes) does not fit `bytes`: 2 results; else 0 */
static int mask_fits(lua_State *L, const char *what, int64_t T, size_t bytes) {
  if (T <= 46340 && (size_t)(T * T) <= bytes) return 0;
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %d tokens' mask (%d MB) does not fit the buffer's %d MB", what, (int)T, (int)((T * T) >> 20), (int)(bytes >> 20));
  return 2;
}

/* buf:upload_mask({len1, len2, ...}) -> true | nil, msg — the packed sequences' block-diagonal causal mask (T*T bytes,
 * T the lengths' sum; em_packed_mask_bytes) built in a host buffer kept between calls and written at the start of the
 * buffer: emmy serve's batches, without a T*T Lua string a batch (4 MB at 2,048 tokens, whose garbage collection
 * cost ~9 ms a batch in the server) */
static int buf_upload_mask(lua_State *L) {
  static unsigned char *host;
  static size_t cap;
  em_cu_buf *b = check_buf(L, 1);
  int n;
  int64_t T;
  const int64_t *lens = mask_lens(L, 2, &n, &T);
  if (mask_fits(L, "upload_mask", T, em_cu_buf_bytes(b))) return 2;
  size_t bytes = (size_t)(T * T);
  if (bytes > cap) {
    unsigned char *nh = realloc(host, bytes);
    if (!nh) return luaL_error(L, "upload_mask: out of host memory for %d bytes", (int)bytes);
    host = nh, cap = bytes;
  }
  em_packed_mask_bytes(host, lens, n, T);
  char err[EM_ERR_MAX];
  return ok_or_fail(L, em_cu_write(b, 0, host, bytes, err), err);
}

/* buf:write_async(host, hoff, n [, boff = 0]) / buf:read_async(host, hoff, n [, boff = 0]) -> true | nil, msg — n bytes
 * from / into the page-locked host buffer at hoff, enqueued on the context's stream in order with its launches; the
 * host bytes may be reused (write) or read (read) once an event recorded after them has completed */
static int buf_async(lua_State *L, int write) {
  em_cu_buf *b = check_buf(L, 1);
  em_cu_host *h = check_host(L, 2);
  size_t hoff = byte_arg(L, 3, -1), n = byte_arg(L, 4, -1), boff = byte_arg(L, 5, 0);
  char err[EM_ERR_MAX];
  em_status st = write ? em_cu_write_async(b, boff, h, hoff, n, err) : em_cu_read_async(b, boff, h, hoff, n, err);
  return ok_or_fail(L, st, err);
}
static int buf_write_async(lua_State *L) { return buf_async(L, 1); }
static int buf_read_async(lua_State *L) { return buf_async(L, 0); }

/* The arguments dtype, shape [, offset] from idx on: the dtype, rank, shape and offset (bytes, default 0). */
static em_dtype dtype_shape_off(lua_State *L, int idx, int *rank, int64_t *shape, size_t *off) {
  int dt = em_dtype_parse(luaL_checkstring(L, idx));
  if (dt < 0) luaL_argerror(L, idx, "unknown dtype");
  luaL_checktype(L, idx + 1, LUA_TTABLE);
  *rank = (int)lua_objlen(L, idx + 1);
  if (*rank > EM_TENSOR_MAX_RANK) luaL_argerror(L, idx + 1, "rank too high");
  for (int k = 0; k < *rank; k++) {
    lua_rawgeti(L, idx + 1, k + 1);
    lua_Number v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    if (v < 0 || v != floor(v)) luaL_argerror(L, idx + 1, "sizes must be non-negative integers");
    shape[k] = (int64_t)v;
  }
  *off = byte_arg(L, idx + 2, 0);
  return (em_dtype)dt;
}

/* buf:download(dtype, shape [, offset]) -> emmy.tensor | nil, msg — from offset bytes into the buffer (default 0) */
static int buf_download(lua_State *L) {
  em_cu_buf *b = check_buf(L, 1);
  int rank;
  int64_t shape[EM_TENSOR_MAX_RANK];
  size_t off;
  em_dtype dt = dtype_shape_off(L, 2, &rank, shape, &off);
  char err[EM_ERR_MAX];
  em_tensor *t = em_cu_download_at(b, off, dt, rank, shape, err);
  if (!t) return em_lua_fail(L, err);
  em_lua_push(L, TENSOR_T, t);
  return 1;
}

/* ---- page-locked host buffers ---- */

/* cu:host(bytes) -> emmy.cuhost | nil, msg — page-locked host memory (zeroed), the host end of buf:write_async and
 * buf:read_async */
static int ctx_host(lua_State *L) {
  size_t n = byte_arg(L, 2, -1);
  char err[EM_ERR_MAX];
  em_cu_host *h = em_cu_host_alloc(check_ctx(L, 1), n, err);
  if (!h) return em_lua_fail(L, err);
  push_child(L, HOST_T, h, 1);
  return 1;
}

static int host_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, HOST_T);
  em_cu_host_free(b->p);
  b->p = NULL;
  return 0;
}

static int host_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, HOST_T);
  if (!b->p) lua_pushstring(L, "emmy.cuhost (freed)");
  else lua_pushfstring(L, "emmy.cuhost %d bytes", (int)em_cu_host_bytes(b->p));
  return 1;
}

/* host:size() -> bytes */
static int host_size(lua_State *L) {
  lua_pushnumber(L, (lua_Number)em_cu_host_bytes(check_host(L, 1)));
  return 1;
}

/* host:put(offset, tensor) -> bytes written | nil, msg — the tensor in its dtype's device layout at offset */
static int host_put(lua_State *L) {
  em_cu_host *h = check_host(L, 1);
  size_t off = byte_arg(L, 2, -1);
  em_tensor *t = em_lua_check(L, 3, TENSOR_T, "tensor");
  char err[EM_ERR_MAX];
  if (em_cu_host_put(h, off, t, err)) return em_lua_fail(L, err);
  lua_pushnumber(L, (lua_Number)em_cu_dtype_bytes(t->dtype, t->numel));
  return 1;
}

/* host:mask(offset, {len1, len2, ...}) -> bytes written (T*T) | nil, msg — the packed sequences' block-diagonal causal
 * mask (as buf:upload_mask builds it) at offset */
static int host_mask(lua_State *L) {
  em_cu_host *h = check_host(L, 1);
  size_t off = byte_arg(L, 2, -1);
  if (off > em_cu_host_bytes(h)) luaL_argerror(L, 2, "an offset inside the buffer (bytes)");
  int n;
  int64_t T;
  const int64_t *lens = mask_lens(L, 3, &n, &T);
  if (mask_fits(L, "mask", T, em_cu_host_bytes(h) - off)) return 2;
  em_packed_mask_bytes((unsigned char *)em_cu_host_ptr(h) + off, lens, n, T);
  lua_pushnumber(L, (lua_Number)(T * T));
  return 1;
}

/* host:get(dtype, shape [, offset]) -> emmy.tensor | nil, msg — read from offset bytes into the host buffer */
static int host_get(lua_State *L) {
  em_cu_host *h = check_host(L, 1);
  int rank;
  int64_t shape[EM_TENSOR_MAX_RANK];
  size_t off;
  em_dtype dt = dtype_shape_off(L, 2, &rank, shape, &off);
  char err[EM_ERR_MAX];
  em_tensor *t = em_cu_host_get(h, off, dt, rank, shape, err);
  if (!t) return em_lua_fail(L, err);
  em_lua_push(L, TENSOR_T, t);
  return 1;
}

/* ---- modules and functions ---- */

static int mod_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, MOD_T);
  em_cu_module_free(b->p);
  b->p = NULL;
  return 0;
}

static int mod_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, MOD_T);
  lua_pushstring(L, b->p ? "emmy.cumodule" : "emmy.cumodule (closed)");
  return 1;
}

/* mod:fn(name) -> function | nil, msg */
static int mod_fn(lua_State *L) {
  em_cu_module *m = check_mod(L, 1);
  char err[EM_ERR_MAX];
  em_cu_fn *f = em_cu_fn_get(m, luaL_checkstring(L, 2), err);
  if (!f) return em_lua_fail(L, err);
  push_child(L, FN_T, f, 1);
  return 1;
}

static int fn_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, FN_T);
  em_cu_fn_free(b->p);
  b->p = NULL;
  return 0;
}

static int fn_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, FN_T);
  if (!b->p) lua_pushstring(L, "emmy.cufn (closed)");
  else lua_pushfstring(L, "emmy.cufn %s", em_cu_fn_name(b->p));
  return 1;
}

static int fn_name(lua_State *L) {
  lua_pushstring(L, em_cu_fn_name(check_fn(L, 1)));
  return 1;
}

/* fn:attrs() -> {regs, local_bytes, max_threads, static_smem, const_bytes, max_dynamic_smem, ptx_version,
 *   binary_version} | nil, msg */
static int fn_attrs(lua_State *L) {
  em_cu_fn *f = check_fn(L, 1);
  em_cu_fn_attrs a;
  char err[EM_ERR_MAX];
  if (em_cu_fn_attrs_get(f, &a, err)) return em_lua_fail(L, err);
  lua_createtable(L, 0, 8);
  SET_INT("regs", a.regs);
  SET_INT("local_bytes", a.local_bytes);
  SET_INT("max_threads", a.max_threads);
  SET_INT("static_smem", a.static_smem);
  SET_INT("const_bytes", a.const_bytes);
  SET_INT("max_dynamic_smem", a.max_dynamic_smem);
  SET_INT("ptx_version", a.ptx_version);
  SET_INT("binary_version", a.binary_version);
  return 1;
}

/* fn:set_max_dynamic_smem(bytes) -> true | nil, msg */
static int fn_set_max_dynamic_smem(lua_State *L) {
  em_cu_fn *f = check_fn(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  if (n < 0 || n > 0x7fffffff) luaL_argerror(L, 2, "a byte count");
  char err[EM_ERR_MAX];
  return ok_or_fail(L, em_cu_fn_set_max_dynamic_smem(f, (int)n, err), err);
}

/* fn:max_clusters(grid, block, smem) -> n (-1: unknown) | nil, msg: clusters of the kernel's shape resident at once */
static int fn_max_clusters(lua_State *L) {
  em_cu_fn *f = check_fn(L, 1);
  unsigned g[3] = {1, 1, 1}, b[3] = {1, 1, 1};
  for (int a = 2; a <= 3; a++) {
    luaL_checktype(L, a, LUA_TTABLE);
    for (int i = 0; i < 3; i++) {
      lua_rawgeti(L, a, i + 1);
      lua_Integer v = lua_isnil(L, -1) ? 1 : luaL_checkinteger(L, -1);
      if (v < 1 || v > 0x7fffffff) luaL_argerror(L, a, "dims of 1 or more");
      (a == 2 ? g : b)[i] = (unsigned)v;
      lua_pop(L, 1);
    }
  }
  lua_Integer smem = luaL_optinteger(L, 4, 0);
  if (smem < 0 || smem > 0x7fffffff) luaL_argerror(L, 4, "a byte count");
  char err[EM_ERR_MAX];
  int n = -1;
  if (em_cu_fn_max_clusters(f, g, b, (unsigned)smem, &n, err) != EM_OK) return em_lua_fail(L, err);
  lua_pushinteger(L, n);
  return 1;
}

/* cuda.records_start() -> true | nil, msg: CUPTI kernel activity records from now on. */
static int l_records_start(lua_State *L) {
  char err[EM_ERR_MAX];
  if (em_cupti_start(err) != EM_OK) return em_lua_fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* cuda.records_stop() -> {{name, start_ns, end_ns, correlation, graph_node}, ...} (GPU start order), dropped
 * | nil, msg. Times are GPU timestamps in ns (as Lua numbers: exact below 2^53). */
static int l_records_stop(lua_State *L) {
  char err[EM_ERR_MAX];
  em_cupti_rec *r = NULL;
  int n = 0, dropped = 0;
  if (em_cupti_stop(&r, &n, &dropped, err) != EM_OK) return em_lua_fail(L, err);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_createtable(L, 0, 5);
    lua_pushstring(L, r[i].name);
    lua_setfield(L, -2, "name");
    lua_pushnumber(L, (double)r[i].start);
    lua_setfield(L, -2, "start_ns");
    lua_pushnumber(L, (double)r[i].end);
    lua_setfield(L, -2, "end_ns");
    lua_pushnumber(L, (double)r[i].correlation);
    lua_setfield(L, -2, "correlation");
    lua_pushnumber(L, (double)r[i].graph_node);
    lua_setfield(L, -2, "graph_node");
    lua_rawseti(L, -2, i + 1);
  }
  free(r);
  lua_pushinteger(L, dropped);
  return 2;
}

int luaopen_emmy_cuda(lua_State *L) {
  /* buf:download hands out emmy.tensor values, whose class emmy.ref defines. */
  luaL_getmetatable(L, TENSOR_T);
  int have_tensor = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (!have_tensor) {
    lua_pushcfunction(L, luaopen_emmy_ref);
    lua_call(L, 0, 0);
  }
  static const luaL_Reg ctx_methods[] = {{"info", ctx_info},     {"lost", ctx_lost},   {"alloc", ctx_alloc},
                                         {"upload", ctx_upload}, {"module", ctx_module}, {"launch", ctx_launch}, {"tmap", ctx_tmap},
                                         {"sync", ctx_sync},     {"time", ctx_time},   {"capture", ctx_capture}, {"event", ctx_event},
                                         {"host", ctx_host},     {NULL, NULL}};
  em_lua_class(L, CTX_T, ctx_methods, ctx_gc, ctx_tostring);
  static const luaL_Reg graph_methods[] = {{"launch", graph_launch}, {NULL, NULL}};
  em_lua_class(L, GRAPH_T, graph_methods, graph_gc, graph_tostring);
  static const luaL_Reg event_methods[] = {{"record", event_record}, {"sync", event_sync}, {"ms_since", event_ms_since}, {NULL, NULL}};
  em_lua_class(L, EVENT_T, event_methods, event_gc, event_tostring);
  static const luaL_Reg buf_methods[] = {{"size", buf_size},     {"ptr", buf_ptr},           {"fill", buf_fill},
                                         {"upload", buf_upload}, {"upload_mask", buf_upload_mask}, {"download", buf_download},
                                         {"write_async", buf_write_async}, {"read_async", buf_read_async}, {NULL, NULL}};
  em_lua_class(L, BUF_T, buf_methods, buf_gc, buf_tostring);
  static const luaL_Reg host_methods[] = {{"size", host_size}, {"put", host_put}, {"mask", host_mask}, {"get", host_get}, {NULL, NULL}};
  em_lua_class(L, HOST_T, host_methods, host_gc, host_tostring);
  static const luaL_Reg mod_methods[] = {{"fn", mod_fn}, {NULL, NULL}};
  em_lua_class(L, MOD_T, mod_methods, mod_gc, mod_tostring);
  static const luaL_Reg fn_methods[] = {
      {"name", fn_name}, {"attrs", fn_attrs}, {"set_max_dynamic_smem", fn_set_max_dynamic_smem},
      {"max_clusters", fn_max_clusters}, {NULL, NULL}};
  em_lua_class(L, FN_T, fn_methods, fn_gc, fn_tostring);
  static const luaL_Reg fns[] = {{"open", l_open},
                                 {"has_symbol", l_has_symbol},
                                 {"records_start", l_records_start},
                                 {"records_stop", l_records_stop},
                                 {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}

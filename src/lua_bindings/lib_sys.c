/* lib_sys.c — `emmy.sys`: what Lua's standard library lacks for a command-line host: build identity,
 * directory listing, mkdir -p, monotonic time, tty detection and the GPU/toolkit probes. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bindings.h"
#include "dl.h"

static int l_version(lua_State *L) {
  lua_pushstring(L, em_version);
  lua_pushstring(L, em_git_rev);
  return 2;
}

static int l_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_optinteger(L, 1, 1)));
  return 1;
}

static int l_nproc(lua_State *L) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  lua_pushinteger(L, n > 0 ? (lua_Integer)n : 1);
  return 1;
}

/* sys.clock() -> monotonic seconds (double) */
static int l_clock(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
  return 1;
}

/* sys.listdir(path) -> sorted list of names (no . and ..) | nil, msg */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int l_listdir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  DIR *d = opendir(path);
  if (!d) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", path, strerror(errno));
    return 2;
  }
  EM_VEC(char *) names = {0};
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *s = em_strdup(e->d_name);
    EM_VEC_PUSH(names, s);
  }
  closedir(d);
  if (names.n > 1) qsort(names.v, (size_t)names.n, sizeof(char *), cmp_str);
  lua_createtable(L, names.n, 0);
  for (int i = 0; i < names.n; i++) {
    lua_pushstring(L, names.v[i]);
    lua_rawseti(L, -2, i + 1);
    free(names.v[i]);
  }
  free(names.v);
  return 1;
}

/* sys.stat(path) -> "file" | "dir" | "other" | nil */
static int l_stat(lua_State *L) {
  struct stat st;
  if (stat(luaL_checkstring(L, 1), &st) != 0) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : "other");
  return 1;
}

/* sys.mkdir_p(path) -> true | nil, msg */
static int l_mkdir_p(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
        lua_pushnil(L);
        lua_pushfstring(L, "cannot create directory %s: %s", buf, strerror(errno));
        return 2;
      }
      *p = c;
      if (!c) break;
    }
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_realpath(lua_State *L) {
  char buf[PATH_MAX];
  if (!realpath(luaL_checkstring(L, 1), buf)) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
    return 2;
  }
  lua_pushstring(L, buf);
  return 1;
}

static int l_getpid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

/* sys.cuda() -> {driver_version, device_count, name, cc, sm_count} | nil, msg */
static int l_cuda(lua_State *L) {
  em_cuda_info info;
  char err[EM_ERR_MAX];
  if (em_cuda_probe(&info, err)) return em_lua_fail(L, err);
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, info.driver_version);
  lua_setfield(L, -2, "driver_version");
  lua_pushinteger(L, info.device_count);
  lua_setfield(L, -2, "device_count");
  lua_pushstring(L, info.name);
  lua_setfield(L, -2, "name");
  lua_pushfstring(L, "%d.%d", info.cc_major, info.cc_minor);
  lua_setfield(L, -2, "cc");
  lua_pushinteger(L, info.sm_count);
  lua_setfield(L, -2, "sm_count");
  return 1;
}

/* sys.nvrtc() -> "13.0" | nil, msg */
static int l_nvrtc(lua_State *L) {
  int ma, mi;
  char err[EM_ERR_MAX];
  if (em_nvrtc_version(&ma, &mi, err)) return em_lua_fail(L, err);
  lua_pushfstring(L, "%d.%d", ma, mi);
  return 1;
}

/* sys.fnv(s) -> FNV-1a of s, as a number below 2^48 (seeds derived from names) */
static int l_fnv(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  lua_pushnumber(L, (lua_Number)(em_fnv1a(EM_FNV_SEED, s, n) & ((1ULL << 48) - 1)));
  return 1;
}

int luaopen_emmy_sys(lua_State *L) {
  static const luaL_Reg fns[] = {{"version", l_version}, {"isatty", l_isatty},   {"nproc", l_nproc},
                                 {"clock", l_clock},     {"listdir", l_listdir}, {"stat", l_stat},
                                 {"mkdir_p", l_mkdir_p}, {"realpath", l_realpath}, {"getpid", l_getpid},
                                 {"cuda", l_cuda},       {"nvrtc", l_nvrtc},     {"fnv", l_fnv},         {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}

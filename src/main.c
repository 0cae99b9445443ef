/* main.c — the emmy host: one LuaJIT state with emmy's modules preloaded, scripts resolved from emmy's own
 * folders (never the current directory) and loaded as text only. Dispatch lives in scripts/emmy/host.lua;
 * this file turns its outcome into one line and an exit status (2 usage, 1 runtime failure). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"
#include "lua_bindings/bindings.h"

static char emmy_home[PATH_MAX];

/* EMMY_HOME, else the folder holding the executable. */
static int find_home(void) {
  const char *env = getenv("EMMY_HOME");
  if (env && *env) {
    if (!realpath(env, emmy_home)) {
      fprintf(stderr, "emmy: EMMY_HOME '%s' does not exist\n", env);
      return -1;
    }
    return 0;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    fprintf(stderr, "emmy: cannot locate the emmy executable; set EMMY_HOME to the emmy checkout\n");
    return -1;
  }
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  snprintf(emmy_home, sizeof emmy_home, "%s", exe);
  return 0;
}

/* package.loaders[2] replacement: search package.path, load as text only. */
static int text_searcher(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  const char *path = lua_tostring(L, -1);
  luaL_Buffer tried;
  luaL_buffinit(L, &tried);
  char mod[256];
  snprintf(mod, sizeof mod, "%s", name);
  for (char *p = mod; *p; p++)
    if (*p == '.') *p = '/';
  const char *s = path ? path : "";
  while (*s) {
    const char *e = strchr(s, ';');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    char tmpl[PATH_MAX], file[PATH_MAX];
    if (len < sizeof tmpl) {
      memcpy(tmpl, s, len);
      tmpl[len] = 0;
      char *q = strchr(tmpl, '?');
      if (q) {
        *q = 0;
        snprintf(file, sizeof file, "%s%s%s", tmpl, mod, q + 1);
        FILE *f = fopen(file, "r");
        if (f) {
          fclose(f);
          if (luaL_loadfilex(L, file, "t") != 0) return lua_error(L);
          return 1;
        }
        lua_pushfstring(L, "\n\tno file '%s'", file);
        luaL_addvalue(&tried);
      }
    }
    s += len;
    if (*s == ';') s++;
  }
  luaL_pushresult(&tried);
  return 1;
}

/* loadfile/dofile restricted to text. */
static int text_loadfile(lua_State *L) {
  const char *f = luaL_optstring(L, 1, NULL);
  if (luaL_loadfilex(L, f, "t") != 0) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  return 1;
}

static int text_dofile(lua_State *L) {
  const char *f = luaL_optstring(L, 1, NULL);
  lua_settop(L, 1);
  if (luaL_loadfilex(L, f, "t") != 0) return lua_error(L);
  lua_call(L, 0, LUA_MULTRET);
  return lua_gettop(L) - 1;
}

static int traceback(lua_State *L) {
  if (!lua_isstring(L, 1)) return 1; /* error objects (tables) pass through untouched */
  luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

static void setup(lua_State *L, int argc, char **argv) {
  luaL_openlibs(L);
  em_preload_modules(L);
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/scripts/?.lua;%s/scripts/?/init.lua", emmy_home, emmy_home);
  lua_setfield(L, -2, "path");
  lua_pushstring(L, "");
  lua_setfield(L, -2, "cpath");
  lua_getfield(L, -1, "loaders");
  lua_pushcfunction(L, text_searcher);
  lua_rawseti(L, -2, 2);
  /* drop the C searchers: every C module is preloaded */
  lua_pushnil(L);
  lua_rawseti(L, -2, 4);
  lua_pushnil(L);
  lua_rawseti(L, -2, 3);
  lua_pop(L, 2);
  lua_pushcfunction(L, text_loadfile);
  lua_setglobal(L, "loadfile");
  lua_pushcfunction(L, text_dofile);
  lua_setglobal(L, "dofile");
  lua_pushstring(L, emmy_home);
  lua_setglobal(L, "EMMY_HOME");
  lua_createtable(L, argc, 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
  lua_setglobal(L, "EMMY_ARGV");
}

int main(int argc, char **argv) {
  if (find_home()) return 1;
  char host[PATH_MAX + 32];
  snprintf(host, sizeof host, "%s/scripts/emmy/host.lua", emmy_home);
  struct stat st;
  if (stat(host, &st) != 0) {
    fprintf(stderr, "emmy: %s is missing; set EMMY_HOME to the emmy checkout\n", host);
    return 1;
  }
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "emmy: cannot create the Lua state\n");
    return 1;
  }
  /* the rule sandbox's memory ceiling (emmy.budget); it outlives the state */
  em_budget budget;
  em_budget_install(L, &budget);
  setup(L, argc, argv);
  lua_pushcfunction(L, traceback);
  int rc;
  if (luaL_loadfilex(L, host, "t") != 0) {
    fprintf(stderr, "emmy: %s\n", lua_tostring(L, -1));
    rc = 1;
  } else if (lua_pcall(L, 0, 1, -2) != 0) {
    /* host.lua catches script errors itself; reaching here is a bug in the host */
    fprintf(stderr, "emmy: %s\n", lua_isstring(L, -1) ? lua_tostring(L, -1) : "(error object)");
    rc = 1;
  } else {
    rc = (int)lua_tointeger(L, -1);
  }
  lua_close(L);
  /* what was printed must have reached stdout: `emmy … > FILE` on a full disk is a failure, not exit 0 */
  errno = 0;
  int out_bad = fflush(stdout) != 0;
  int out_errno = errno;
  out_bad |= ferror(stdout);
  if (fclose(stdout) != 0 && !out_bad) out_bad = 1, out_errno = errno;
  if (out_bad) {
    fprintf(stderr, "emmy: cannot write standard output: %s\n", out_errno ? strerror(out_errno) : "a write failed");
    if (rc == 0) rc = 1;
  }
  return rc;
}

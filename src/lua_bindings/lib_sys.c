/* lib_sys.c — `emmy.sys`: what Lua's standard library lacks for a command-line host: build identity,
 * directory listing, mkdir -p, the one checked file writer (src/file.c), monotonic time, tty detection and the
 * GPU/toolkit probes, and number arrays as JSON text (emmy serve's answers). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bindings.h"
#include "dl.h"
#include "file.h"
#include "numfmt.h"

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

/* sys.write_file(path, data [, {sync = true}]) -> true | nil, msg — data is a string or a list of strings,
 * written through src/file.c (temp file, every write and the close checked, rename; sync = false skips the
 * fsyncs, for files a crash may lose, such as a dump folder's). On failure path is as it was and msg is one
 * line naming path and the OS error. */
static int l_write_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int ty = lua_type(L, 2);
  if (ty != LUA_TSTRING && ty != LUA_TTABLE) luaL_typerror(L, 2, "string or list of strings");
  int flags = EM_FILE_SYNC;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "sync");
    if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) flags &= ~EM_FILE_SYNC;
    lua_pop(L, 1);
  }
  int nparts = ty == LUA_TTABLE ? (int)lua_objlen(L, 2) : 1;
  if (ty == LUA_TTABLE)
    for (int i = 1; i <= nparts; i++) { /* checked before anything is written: misuse raises, path untouched */
      lua_rawgeti(L, 2, i);
      if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "sys.write_file: part %d of the data is not a string", i);
      lua_pop(L, 1);
    }
  char err[EM_ERR_MAX];
  em_file_out *f;
  if (em_file_begin(&f, path, flags, err)) return em_lua_fail(L, err);
  for (int i = 1; i <= nparts; i++) {
    size_t n;
    const char *s;
    if (ty == LUA_TTABLE) {
      lua_rawgeti(L, 2, i);
      s = lua_tolstring(L, -1, &n);
      lua_pop(L, 1); /* the string stays alive in the table */
    } else {
      s = lua_tolstring(L, 2, &n);
    }
    if (em_file_put(f, s, n, err)) break; /* the failure is kept; the commit reports it and removes the temp */
  }
  if (em_file_commit(f, err)) return em_lua_fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* sys.writable(path) -> true | false, msg: may this process write path (access(2) W_OK; a read-only mount
 * answers false also for root) */
static int l_writable(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  if (access(path, W_OK) == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  lua_pushfstring(L, "%s: %s", path, strerror(errno));
  return 2;
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

/* sys.json_numbers(list) -> "[x1,x2,...]": a list of finite numbers as a JSON array, each as "%.9g" (numfmt.h;
 * every float32 reads back to itself) — an embedding's thousand numbers in ~1/5 of cjson's time | nil, msg (a
 * non-number or non-finite element) */
static int l_json_numbers(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int n = (int)lua_objlen(L, 1);
  char *buf = em_alloc((size_t)n * (EM_NUMFMT_MAX + 1) + 2), *p = buf;
  *p++ = '[';
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    double v = lua_tonumber(L, -1);
    int ok = lua_type(L, -1) == LUA_TNUMBER && isfinite(v);
    lua_pop(L, 1);
    if (!ok) {
      free(buf);
      lua_pushnil(L);
      lua_pushfstring(L, "element %d is not a finite number", i);
      return 2;
    }
    p += em_fmt_g9(p, v);
    if (i < n) *p++ = ',';
  }
  *p++ = ']';
  lua_pushlstring(L, buf, (size_t)(p - buf));
  free(buf);
  return 1;
}

/* ---- child processes: sys.spawn(argv) -> proc | nil, msg -------------------------------------------------
 * A child with its stdin and stdout on pipes (stderr inherited), for the bench worker that owns the CUDA context:
 *   proc:send(line)                  -- writes line .. "\n" -> true | nil, msg (the child is gone)
 *   proc:recv(timeout_ms)            -- the next line -> line | nil, "timeout" | nil, "exited: <how>"
 *   proc:kill()                      -- SIGKILL, reaped; idempotent (also :close() and __gc)
 *   proc:pid()                                                                                          */
#define PROC_T "emmy.sys.proc"

typedef struct {
  pid_t pid;
  int to, from; /* our ends: the child's stdin, the child's stdout */
  char buf[1 << 16];
  size_t n;     /* bytes in buf */
  int status;   /* waitpid status once reaped, -1 before */
} em_proc;

static em_proc *check_proc(lua_State *L) { return em_lua_check(L, 1, PROC_T, "process"); }

static void proc_reap(em_proc *p, int block) {
  if (p->status != -1 || p->pid <= 0) return;
  int st;
  if (waitpid(p->pid, &st, block ? 0 : WNOHANG) == p->pid) p->status = st;
}

static void proc_how(em_proc *p, char *out, size_t n) {
  if (p->status == -1) snprintf(out, n, "exited: still running");
  else if (WIFEXITED(p->status)) snprintf(out, n, "exited: status %d", WEXITSTATUS(p->status));
  else if (WIFSIGNALED(p->status)) snprintf(out, n, "exited: killed by signal %d (%s)", WTERMSIG(p->status), strsignal(WTERMSIG(p->status)));
  else snprintf(out, n, "exited");
}

static int l_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int argc = (int)lua_objlen(L, 1);
  if (argc < 1 || argc > 62) return em_lua_fail(L, "spawn: argv must have 1..62 strings");
  const char *argv[64];
  for (int i = 0; i < argc; i++) {
    lua_rawgeti(L, 1, i + 1);
    argv[i] = luaL_checkstring(L, -1);
    lua_pop(L, 1); /* the strings stay alive in the argv table */
  }
  argv[argc] = NULL;
  int in[2], out[2];
  if (pipe(in) || pipe(out)) return em_lua_fail(L, "spawn: pipe failed");
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return em_lua_fail(L, "spawn: fork failed");
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]); close(in[1]); close(out[0]); close(out[1]);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  fcntl(in[1], F_SETFD, FD_CLOEXEC);
  fcntl(out[0], F_SETFD, FD_CLOEXEC);
  em_proc *p = calloc(1, sizeof *p);
  p->pid = pid;
  p->to = in[1];
  p->from = out[0];
  p->status = -1;
  em_lua_push(L, PROC_T, p);
  return 1;
}

static int l_proc_send(lua_State *L) {
  em_proc *p = check_proc(L);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  struct sigaction ign = {.sa_handler = SIG_IGN}, old;
  sigaction(SIGPIPE, &ign, &old); /* a dead child is an error return, not a signal */
  int ok = 1;
  for (size_t off = 0; ok && off < n + 1;) {
    const char *src = off < n ? s + off : "\n";
    size_t len = off < n ? n - off : 1;
    ssize_t w = write(p->to, src, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) ok = 0;
    else off += (size_t)w;
  }
  sigaction(SIGPIPE, &old, NULL);
  if (!ok) {
    proc_reap(p, 0);
    char how[128];
    proc_how(p, how, sizeof how);
    return em_lua_fail(L, how);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_proc_recv(lua_State *L) {
  em_proc *p = check_proc(L);
  double timeout = luaL_optnumber(L, 2, -1);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int polled = 0; /* a deadline of 0 still reads what has already arrived */
  for (;;) {
    char *nl = memchr(p->buf, '\n', p->n);
    if (nl) {
      size_t len = (size_t)(nl - p->buf);
      lua_pushlstring(L, p->buf, len);
      memmove(p->buf, nl + 1, p->n - len - 1);
      p->n -= len + 1;
      return 1;
    }
    if (p->n == sizeof p->buf) return em_lua_fail(L, "recv: a line longer than 64 KB");
    int wait_ms = -1;
    if (timeout >= 0) {
      struct timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      double left = timeout - ((double)(t.tv_sec - t0.tv_sec) * 1e3 + (double)(t.tv_nsec - t0.tv_nsec) * 1e-6);
      if (left <= 0 && polled) return em_lua_fail(L, "timeout");
      wait_ms = left > 0 ? (int)left + 1 : 0;
    }
    struct pollfd pf = {.fd = p->from, .events = POLLIN};
    int r = poll(&pf, 1, wait_ms);
    polled = 1;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return em_lua_fail(L, "timeout");
    ssize_t got = read(p->from, p->buf + p->n, sizeof p->buf - p->n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      proc_reap(p, 1);
      char how[128];
      proc_how(p, how, sizeof how);
      return em_lua_fail(L, how);
    }
    p->n += (size_t)got;
  }
}

static int l_proc_pid(lua_State *L) {
  lua_pushinteger(L, check_proc(L)->pid);
  return 1;
}

static int l_proc_close(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, PROC_T);
  em_proc *p = b->p;
  if (!p) return 0;
  if (p->status == -1 && p->pid > 0) {
    kill(p->pid, SIGKILL);
    proc_reap(p, 1);
  }
  close(p->to);
  close(p->from);
  free(p);
  b->p = NULL;
  return 0;
}

static int l_proc_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, PROC_T);
  if (b->p) lua_pushfstring(L, "process %d", (int)((em_proc *)b->p)->pid);
  else lua_pushstring(L, "process (closed)");
  return 1;
}

int luaopen_emmy_sys(lua_State *L) {
  static const luaL_Reg proc_methods[] = {
      {"send", l_proc_send}, {"recv", l_proc_recv}, {"pid", l_proc_pid}, {"kill", l_proc_close}, {NULL, NULL}};
  em_lua_class(L, PROC_T, proc_methods, l_proc_close, l_proc_tostring);
  static const luaL_Reg fns[] = {{"version", l_version}, {"isatty", l_isatty},   {"nproc", l_nproc},
                                 {"clock", l_clock},     {"listdir", l_listdir}, {"stat", l_stat},
                                 {"mkdir_p", l_mkdir_p}, {"write_file", l_write_file}, {"writable", l_writable}, {"realpath", l_realpath}, {"getpid", l_getpid},
                                 {"cuda", l_cuda},       {"nvrtc", l_nvrtc},     {"fnv", l_fnv},         {"spawn", l_spawn},
                                 {"json_numbers", l_json_numbers},
                                 {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}

/* lib_sqlite.c — require "emmy.sqlite": SQLite (linked statically) for the tune DB. Parameters are always bound,
 * never formatted into SQL; every call that can fail returns nil, msg (the message names the SQL's first words).
 *
 *   local db = sqlite.open(path [, opts])   -- nil, msg. opts: busy_ms = 5000; readonly = true (nothing is ever
 *                                           -- written, the file must exist; PRAGMA query_only is on);
 *                                           -- create = false (the file must exist); immutable = true (with
 *                                           -- readonly: media nobody writes, no locks, no -shm: read-only mounts)
 *   db:exec(sql)                 -- several statements, no parameters -> true | nil, msg
 *   db:run(sql, ...)             -- one statement with ? parameters -> changes | nil, msg
 *   db:rows(sql, ...)            -- -> {row, ...} (a row maps column name -> value) | nil, msg
 *   db:last_id()                 -- rowid of the last insert
 *   db:lock(mode [, wait_ms])    -- emmy's run lock, "shared" | "exclusive" | "none" -> true | nil, "busy" | nil, msg
 *   db:close()                   -- idempotent (also __gc); releases the run lock
 * Values: nil -> NULL, boolean -> 0/1, integer-valued numbers -> INTEGER, other numbers -> REAL, strings -> TEXT.
 *
 * The run lock is an open-file-description lock (F_OFD_SETLK) on one byte of the database file past SQLite's own
 * lock bytes (SQLite locks [2^30, 2^30 + 512)), so it never conflicts with SQLite's locking, is released by the
 * kernel when the process dies, and conflicts between two handles of one process as between two processes.
 * Closing any descriptor of a file drops the process's POSIX locks on it — SQLite's included — so a lock
 * descriptor is closed only once no handle of this process has that file open (until then it is parked).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "bindings.h"

#define DB_T "emmy.sqlite.db"
#define RUN_LOCK_BYTE ((off_t)0x40000000 + 4096) /* past SQLite's PENDING..SHARED bytes */

typedef struct {
  sqlite3 *db;
  int lock_fd; /* -1 until db:lock first asks */
  dev_t dev;   /* the database file's identity: handles of one file share the parking of lock fds */
  ino_t ino;
  int have_id;
} sqldb;

/* Every open handle's file identity and the lock descriptors waiting for the last handle of their file to close
 * (one process-wide list: handles are few). */
typedef struct {
  dev_t dev;
  ino_t ino;
  int fd; /* -1: an open handle's entry; else a parked lock descriptor */
} file_ref;
static EM_VEC(file_ref) refs;

static void refs_add(dev_t dev, ino_t ino, int fd) {
  file_ref r = {dev, ino, fd};
  EM_VEC_PUSH(refs, r);
}

/* Drops one open-handle entry of (dev, ino); when none is left, closes that file's parked descriptors. */
static void refs_release(dev_t dev, ino_t ino) {
  int open_left = 0;
  for (int i = 0; i < refs.n; i++) {
    if (refs.v[i].dev != dev || refs.v[i].ino != ino || refs.v[i].fd != -1) continue;
    refs.v[i] = refs.v[--refs.n];
    break;
  }
  for (int i = 0; i < refs.n; i++) open_left += refs.v[i].dev == dev && refs.v[i].ino == ino && refs.v[i].fd == -1;
  if (open_left) return;
  for (int i = 0; i < refs.n;) {
    if (refs.v[i].dev == dev && refs.v[i].ino == ino) {
      close(refs.v[i].fd);
      refs.v[i] = refs.v[--refs.n];
    } else {
      i++;
    }
  }
}

static sqlite3 *check_db(lua_State *L) { return ((sqldb *)em_lua_check(L, 1, DB_T, "database"))->db; }

static int fail_db(lua_State *L, sqlite3 *db, const char *sql) {
  char msg[512];
  snprintf(msg, sizeof msg, "sqlite: %s (in \"%.60s%s\")", sqlite3_errmsg(db), sql, strlen(sql) > 60 ? "…" : "");
  return em_lua_fail(L, msg);
}

/* "file:" URI of path with the characters that URIs reserve percent-encoded, then "?immutable=1"; out holds
 * 3 * PATH_MAX + 32 bytes (the caller checks that path is shorter than PATH_MAX). */
static void immutable_uri(const char *path, char *out, size_t cap) {
  size_t o = (size_t)snprintf(out, cap, "file:");
  for (const unsigned char *p = (const unsigned char *)path; *p && o + 4 < cap; p++) {
    if (*p == '%' || *p == '?' || *p == '#' || *p < 0x21 || *p > 0x7e) o += (size_t)snprintf(out + o, cap - o, "%%%02X", *p);
    else out[o++] = (char)*p;
  }
  snprintf(out + o, cap > o ? cap - o : 0, "?immutable=1");
}

static int opt_bool(lua_State *L, int idx, const char *key, int dflt) {
  if (!lua_istable(L, idx)) return dflt;
  lua_getfield(L, idx, key);
  int v = lua_isnil(L, -1) ? dflt : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

static int l_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int busy = 5000;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "busy_ms");
    if (lua_isnumber(L, -1)) busy = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  int ro = opt_bool(L, 2, "readonly", 0), create = opt_bool(L, 2, "create", !ro), imm = opt_bool(L, 2, "immutable", 0);
  if (imm && !ro) luaL_error(L, "sqlite.open: immutable needs readonly");
  int flags = SQLITE_OPEN_FULLMUTEX | (ro ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) |
              (create && !ro ? SQLITE_OPEN_CREATE : 0);
  char uri[3 * PATH_MAX + 32];
  const char *name = path;
  if (imm) {
    if (strlen(path) >= PATH_MAX) return em_lua_fail(L, "sqlite: the path is longer than PATH_MAX");
    immutable_uri(path, uri, sizeof uri);
    name = uri;
    flags |= SQLITE_OPEN_URI;
  }
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(name, &db, flags, NULL);
  if (rc != SQLITE_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "sqlite: cannot open %s: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return em_lua_fail(L, msg);
  }
  sqlite3_busy_timeout(db, busy);
  sqlite3_extended_result_codes(db, 1);
  if (ro) sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
  sqldb *h = em_alloc(sizeof *h);
  h->db = db;
  h->lock_fd = -1;
  struct stat st;
  if (stat(path, &st) == 0) {
    h->dev = st.st_dev;
    h->ino = st.st_ino;
    h->have_id = 1;
    refs_add(h->dev, h->ino, -1);
  }
  em_lua_push(L, DB_T, h);
  return 1;
}

static int l_exec(lua_State *L) {
  sqlite3 *db = check_db(L);
  const char *sql = luaL_checkstring(L, 2);
  char *err = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "sqlite: %s (in \"%.60s%s\")", err ? err : "error", sql, strlen(sql) > 60 ? "…" : "");
    sqlite3_free(err);
    return em_lua_fail(L, msg);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* Prepares sql and binds the Lua values from stack index first on; NULL (and a pushed nil, msg) on failure. */
static sqlite3_stmt *prepare(lua_State *L, sqlite3 *db, const char *sql, int first, int *nret) {
  sqlite3_stmt *st = NULL;
  const char *tail = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, &tail) != SQLITE_OK) {
    *nret = fail_db(L, db, sql);
    return NULL;
  }
  if (tail && strspn(tail, " \t\r\n;") != strlen(tail)) {
    sqlite3_finalize(st);
    *nret = em_lua_fail(L, "sqlite: one statement per call (use exec for scripts)");
    return NULL;
  }
  int np = sqlite3_bind_parameter_count(st), given = lua_gettop(L) - first + 1;
  if (given != np) {
    sqlite3_finalize(st);
    char msg[256];
    snprintf(msg, sizeof msg, "sqlite: the statement takes %d parameters, %d given (in \"%.60s\")", np, given, sql);
    *nret = em_lua_fail(L, msg);
    return NULL;
  }
  for (int i = 1; i <= np; i++) {
    int idx = first + i - 1, rc;
    switch (lua_type(L, idx)) {
    case LUA_TNIL: rc = sqlite3_bind_null(st, i); break;
    case LUA_TBOOLEAN: rc = sqlite3_bind_int(st, i, lua_toboolean(L, idx)); break;
    case LUA_TNUMBER: {
      double x = lua_tonumber(L, idx);
      if (x == floor(x) && fabs(x) < 9007199254740992.0) rc = sqlite3_bind_int64(st, i, (sqlite3_int64)x);
      else rc = sqlite3_bind_double(st, i, x);
      break;
    }
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      rc = sqlite3_bind_text(st, i, s, (int)n, SQLITE_TRANSIENT);
      break;
    }
    default:
      sqlite3_finalize(st);
      *nret = em_lua_fail(L, "sqlite: parameters are nil, booleans, numbers or strings");
      return NULL;
    }
    if (rc != SQLITE_OK) {
      sqlite3_finalize(st);
      *nret = fail_db(L, db, sql);
      return NULL;
    }
  }
  return st;
}

static int l_run(lua_State *L) {
  sqlite3 *db = check_db(L);
  const char *sql = luaL_checkstring(L, 2);
  int nret = 0;
  sqlite3_stmt *st = prepare(L, db, sql, 3, &nret);
  if (!st) return nret;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return fail_db(L, db, sql);
  lua_pushinteger(L, sqlite3_changes(db));
  return 1;
}

static int l_rows(lua_State *L) {
  sqlite3 *db = check_db(L);
  const char *sql = luaL_checkstring(L, 2);
  int nret = 0;
  sqlite3_stmt *st = prepare(L, db, sql, 3, &nret);
  if (!st) return nret;
  lua_newtable(L);
  int n = 0, rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    lua_newtable(L);
    for (int c = 0; c < sqlite3_column_count(st); c++) {
      switch (sqlite3_column_type(st, c)) {
      case SQLITE_INTEGER: lua_pushnumber(L, (lua_Number)sqlite3_column_int64(st, c)); break;
      case SQLITE_FLOAT: lua_pushnumber(L, sqlite3_column_double(st, c)); break;
      case SQLITE_NULL: continue;
      default: lua_pushlstring(L, (const char *)sqlite3_column_text(st, c), (size_t)sqlite3_column_bytes(st, c)); break;
      }
      lua_setfield(L, -2, sqlite3_column_name(st, c));
    }
    lua_rawseti(L, -2, ++n);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return fail_db(L, db, sql);
  return 1;
}

static int l_last_id(lua_State *L) {
  lua_pushnumber(L, (lua_Number)sqlite3_last_insert_rowid(check_db(L)));
  return 1;
}

static int set_lock(int fd, int mode, int wait) {
  struct flock fl = {.l_type = mode == 2 ? F_WRLCK : mode == 1 ? F_RDLCK : F_UNLCK, .l_whence = SEEK_SET,
                     .l_start = RUN_LOCK_BYTE, .l_len = 1};
  int r;
  while ((r = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl)) != 0 && errno == EINTR) {
  }
  return r;
}

static int l_lock(lua_State *L) {
  sqldb *h = em_lua_check(L, 1, DB_T, "database");
  static const char *const modes[] = {"none", "shared", "exclusive", NULL};
  int mode = luaL_checkoption(L, 2, NULL, modes);
  double wait_ms = luaL_optnumber(L, 3, 0);
  char msg[600];
  const char *file = sqlite3_db_filename(h->db, "main");
  if (!file || !*file) return em_lua_fail(L, "sqlite: the run lock needs a database file");
  if (h->lock_fd < 0) {
    if (mode == 0) {
      lua_pushboolean(L, 1);
      return 1;
    }
    int fd = open(file, O_RDWR | O_CLOEXEC);
    if (fd < 0 && mode == 1) fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      snprintf(msg, sizeof msg, "sqlite: cannot open %s for the run lock: %s", file, strerror(errno));
      return em_lua_fail(L, msg);
    }
    h->lock_fd = fd;
    struct stat st;
    if (!h->have_id && fstat(fd, &st) == 0) { /* the file did not exist when the handle was opened */
      h->dev = st.st_dev;
      h->ino = st.st_ino;
      h->have_id = 1;
      refs_add(h->dev, h->ino, -1);
    }
  }
  /* waiting: polled, so that a wait has an end (F_OFD_SETLKW has none) */
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    if (set_lock(h->lock_fd, mode, 0) == 0) break;
    if (errno != EAGAIN && errno != EACCES) {
      snprintf(msg, sizeof msg, "sqlite: the run lock of %s: %s", file, strerror(errno));
      return em_lua_fail(L, msg);
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((double)(t.tv_sec - t0.tv_sec) * 1e3 + (double)(t.tv_nsec - t0.tv_nsec) * 1e-6 >= wait_ms) return em_lua_fail(L, "busy");
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int l_close(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, DB_T);
  sqldb *h = b->p;
  if (!h) return 0;
  b->p = NULL;
  sqlite3_close_v2(h->db);
  if (h->lock_fd >= 0) {
    set_lock(h->lock_fd, 0, 0); /* releases this handle's run lock only; other handles' locks stay */
    if (h->have_id) refs_add(h->dev, h->ino, h->lock_fd); /* parked until the file's last handle is closed */
    else close(h->lock_fd);
  }
  if (h->have_id) refs_release(h->dev, h->ino);
  free(h);
  return 0;
}

static int l_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, DB_T);
  lua_pushstring(L, b->p ? "sqlite database" : "sqlite database (closed)");
  return 1;
}

int luaopen_emmy_sqlite(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"exec", l_exec}, {"run", l_run}, {"rows", l_rows}, {"last_id", l_last_id}, {"lock", l_lock}, {NULL, NULL}};
  em_lua_class(L, DB_T, methods, l_close, l_tostring);
  lua_newtable(L);
  lua_pushcfunction(L, l_open);
  lua_setfield(L, -2, "open");
  lua_pushstring(L, sqlite3_libversion());
  lua_setfield(L, -2, "version");
  return 1;
}

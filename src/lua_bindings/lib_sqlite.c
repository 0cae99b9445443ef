/* lib_sqlite.c — require "emmy.sqlite": SQLite (linked statically) for the tune DB. Parameters are always bound,
 * never formatted into SQL; every call that can fail returns nil, msg (the message names the SQL's first words).
 *
 *   local db = sqlite.open(path [, {busy_ms = 5000}])   -- nil, msg
 *   db:exec(sql)                 -- several statements, no parameters -> true | nil, msg
 *   db:run(sql, ...)             -- one statement with ? parameters -> changes | nil, msg
 *   db:rows(sql, ...)            -- -> {row, ...} (a row maps column name -> value) | nil, msg
 *   db:last_id()                 -- rowid of the last insert
 *   db:close()                   -- idempotent (also __gc)
 * Values: nil -> NULL, boolean -> 0/1, integer-valued numbers -> INTEGER, other numbers -> REAL, strings -> TEXT.
 */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "bindings.h"

#define DB_T "emmy.sqlite.db"

static sqlite3 *check_db(lua_State *L) { return em_lua_check(L, 1, DB_T, "database"); }

static int fail_db(lua_State *L, sqlite3 *db, const char *sql) {
  char msg[512];
  snprintf(msg, sizeof msg, "sqlite: %s (in \"%.60s%s\")", sqlite3_errmsg(db), sql, strlen(sql) > 60 ? "…" : "");
  return em_lua_fail(L, msg);
}

static int l_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int busy = 5000;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "busy_ms");
    if (lua_isnumber(L, -1)) busy = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
  if (rc != SQLITE_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "sqlite: cannot open %s: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return em_lua_fail(L, msg);
  }
  sqlite3_busy_timeout(db, busy);
  sqlite3_extended_result_codes(db, 1);
  em_lua_push(L, DB_T, db);
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

static int l_close(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, DB_T);
  if (b->p) sqlite3_close_v2(b->p);
  b->p = NULL;
  return 0;
}

static int l_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, DB_T);
  lua_pushstring(L, b->p ? "sqlite database" : "sqlite database (closed)");
  return 1;
}

int luaopen_emmy_sqlite(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"exec", l_exec}, {"run", l_run}, {"rows", l_rows}, {"last_id", l_last_id}, {NULL, NULL}};
  em_lua_class(L, DB_T, methods, l_close, l_tostring);
  lua_newtable(L);
  lua_pushcfunction(L, l_open);
  lua_setfield(L, -2, "open");
  lua_pushstring(L, sqlite3_libversion());
  lua_setfield(L, -2, "version");
  return 1;
}

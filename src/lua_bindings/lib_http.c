/* lib_http.c — `emmy.http_c`: the HTTP server and client of src/http.h. scripts/emmy/serve.lua drives the server
 * (poll, then reply to each request); the client is for tests and the load generator.
 *   http_c.listen(host, port[, max_body]) -> server | nil, msg
 *   server:poll(timeout_ms) -> { {id=, method=, path=, body=}, ... }
 *   server:reply(id, status, content_type, body) -> true | nil, msg
 *   server:port(), server:pending(), server:close()
 *   http_c.request(host, port, method, path[, body[, content_type[, timeout_ms]]]) -> status, body | nil, msg
 *   http_c.load(host, port, path, {bodies}, concurrency[, timeout_ms]) -> { {status=, latency=}, ... }, seconds */
#include <stdlib.h>

#include "bindings.h"
#include "http.h"

#define HTTP_T "emmy.http"

static em_http *check_http(lua_State *L, int idx) { return em_lua_check(L, idx, HTTP_T, "http server"); }

static int h_gc(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, HTTP_T);
  em_http_free(b->p);
  b->p = NULL;
  return 0;
}

static int h_tostring(lua_State *L) {
  em_box *b = luaL_checkudata(L, 1, HTTP_T);
  if (b->p) lua_pushfstring(L, "emmy.http (port %d)", em_http_port(b->p));
  else lua_pushstring(L, "emmy.http (closed)");
  return 1;
}

static int l_listen(lua_State *L) {
  char err[EM_ERR_MAX];
  em_http *h = em_http_listen(luaL_checkstring(L, 1), (int)luaL_checkinteger(L, 2), (size_t)luaL_optnumber(L, 3, 16 << 20), err);
  if (!h) return em_lua_fail(L, err);
  em_lua_push(L, HTTP_T, h);
  return 1;
}

static int h_poll(lua_State *L) {
  em_http_req *r;
  int n;
  em_http_poll(check_http(L, 1), (int)luaL_optinteger(L, 2, 0), &r, &n);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, (lua_Number)r[i].id);
    lua_setfield(L, -2, "id");
    lua_pushstring(L, r[i].method);
    lua_setfield(L, -2, "method");
    lua_pushstring(L, r[i].path);
    lua_setfield(L, -2, "path");
    lua_pushlstring(L, r[i].body, r[i].body_len);
    lua_setfield(L, -2, "body");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int h_reply(lua_State *L) {
  size_t n;
  em_http *h = check_http(L, 1);
  long long id = (long long)luaL_checknumber(L, 2);
  int status = (int)luaL_checkinteger(L, 3);
  const char *ct = luaL_checkstring(L, 4), *body = luaL_checklstring(L, 5, &n);
  if (em_http_reply(h, id, status, ct, body, n)) return em_lua_fail(L, "request unknown, answered, or its client went away");
  lua_pushboolean(L, 1);
  return 1;
}

static int h_port(lua_State *L) {
  lua_pushinteger(L, em_http_port(check_http(L, 1)));
  return 1;
}

static int h_pending(lua_State *L) {
  lua_pushinteger(L, em_http_pending(check_http(L, 1)));
  return 1;
}

static int l_request(lua_State *L) {
  size_t n = 0, rn;
  const char *host = luaL_checkstring(L, 1), *method = luaL_checkstring(L, 3), *path = luaL_checkstring(L, 4);
  int port = (int)luaL_checkinteger(L, 2);
  const char *body = luaL_optlstring(L, 5, NULL, &n), *ct = luaL_optstring(L, 6, body ? "application/json" : NULL);
  int timeout = (int)luaL_optinteger(L, 7, 30000), status;
  char err[EM_ERR_MAX], *resp;
  if (em_http_request(host, port, method, path, ct, body, n, timeout, &status, &resp, &rn, err)) return em_lua_fail(L, err);
  lua_pushinteger(L, status);
  lua_pushlstring(L, resp, rn);
  free(resp);
  return 2;
}

/* http_c.load(host, port, path, {bodies}, concurrency[, timeout_ms]) -> { {status=, latency=}, ... }, seconds | nil, msg */
static int l_load(lua_State *L) {
  const char *host = luaL_checkstring(L, 1), *path = luaL_checkstring(L, 3);
  int port = (int)luaL_checkinteger(L, 2), conc = (int)luaL_checkinteger(L, 5), timeout = (int)luaL_optinteger(L, 6, 600000);
  luaL_checktype(L, 4, LUA_TTABLE);
  int n = (int)lua_objlen(L, 4);
  const char **bodies = calloc((size_t)n + 1, sizeof *bodies);
  size_t *lens = calloc((size_t)n + 1, sizeof *lens);
  int *status = calloc((size_t)n + 1, sizeof *status);
  double *lat = calloc((size_t)n + 1, sizeof *lat), dur = 0;
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 4, i + 1);
    bodies[i] = lua_tolstring(L, -1, &lens[i]); /* (the table keeps the strings alive) */
    lua_pop(L, 1);
    if (!bodies[i]) {
      free(bodies), free(lens), free(status), free(lat);
      return luaL_error(L, "load: body %d is not a string", i + 1);
    }
  }
  char err[EM_ERR_MAX];
  int rc = em_http_load(host, port, path, bodies, lens, n, conc, timeout, status, lat, &dur, err);
  if (rc == 0) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
      lua_createtable(L, 0, 2);
      lua_pushinteger(L, status[i]);
      lua_setfield(L, -2, "status");
      lua_pushnumber(L, lat[i]);
      lua_setfield(L, -2, "latency");
      lua_rawseti(L, -2, i + 1);
    }
    lua_pushnumber(L, dur);
  }
  free(bodies), free(lens), free(status), free(lat);
  if (rc) return em_lua_fail(L, err);
  return 2;
}

int luaopen_emmy_http_c(lua_State *L) {
  static const luaL_Reg methods[] = {{"poll", h_poll}, {"reply", h_reply}, {"port", h_port}, {"pending", h_pending}, {NULL, NULL}};
  em_lua_class(L, HTTP_T, methods, h_gc, h_tostring);
  static const luaL_Reg fns[] = {{"listen", l_listen}, {"request", l_request}, {"load", l_load}, {NULL, NULL}};
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  return 1;
}

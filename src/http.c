/* http.c — the evhttp server and client behind http.h. */
#include "http.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* A request received and not yet answered; conn NULL once its client went away. */
typedef struct {
  long long id;
  struct evhttp_request *req;
  struct evhttp_connection *conn;
} pend;

struct em_http {
  struct event_base *base;
  struct evhttp *http;
  int port;
  long long next_id;
  EM_VEC(pend) pending;      /* handed out by a poll, waiting for a reply */
  EM_VEC(em_http_req) fresh; /* received since the last poll */
  em_http_req *out;          /* the last poll's requests (owned until the next poll) */
  int nout;
};

static void free_reqs(em_http_req *r, int n) {
  for (int i = 0; i < n; i++) free(r[i].method), free(r[i].path), free(r[i].body);
  free(r);
}

static const char *method_name(enum evhttp_cmd_type t) {
  switch (t) {
  case EVHTTP_REQ_GET: return "GET";
  case EVHTTP_REQ_POST: return "POST";
  case EVHTTP_REQ_HEAD: return "HEAD";
  case EVHTTP_REQ_PUT: return "PUT";
  case EVHTTP_REQ_DELETE: return "DELETE";
  case EVHTTP_REQ_OPTIONS: return "OPTIONS";
  default: return "OTHER";
  }
}

/* TCP_NODELAY on conn's socket (where it has one yet): a small answer or request is sent at once, not held back by
 * Nagle's algorithm waiting for the peer's delayed acknowledgement (up to 40 ms a request on a keep-alive line). */
static void nodelay(struct evhttp_connection *conn) {
  struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
  evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
  int one = 1;
  if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* The client of conn went away: its unanswered requests are freed by libevent, so they are marked dead. */
static void on_close(struct evhttp_connection *conn, void *arg) {
  em_http *h = arg;
  for (int i = 0; i < h->pending.n; i++)
    if (h->pending.v[i].conn == conn) h->pending.v[i].conn = NULL, h->pending.v[i].req = NULL;
}

static void on_request(struct evhttp_request *req, void *arg) {
  em_http *h = arg;
  struct evbuffer *in = evhttp_request_get_input_buffer(req);
  size_t n = evbuffer_get_length(in);
  em_http_req r = {.id = ++h->next_id, .method = em_strdup(method_name(evhttp_request_get_command(req))),
                   .path = em_strdup(evhttp_request_get_uri(req)), .body = em_alloc(n + 1), .body_len = n};
  if (n) evbuffer_copyout(in, r.body, n);
  EM_VEC_PUSH(h->fresh, r);
  struct evhttp_connection *conn = evhttp_request_get_connection(req);
  evhttp_connection_set_closecb(conn, on_close, h);
  nodelay(conn);
  pend p = {r.id, req, conn};
  EM_VEC_PUSH(h->pending, p);
  event_base_loopbreak(h->base);
}

em_http *em_http_listen(const char *host, int port, size_t max_body, char err[EM_ERR_MAX]) {
  em_http *h = em_alloc(sizeof *h);
  h->base = event_base_new();
  h->http = h->base ? evhttp_new(h->base) : NULL;
  if (!h->http) {
    em_fail(err, EM_ERUN, "http: libevent could not start");
    em_http_free(h);
    return NULL;
  }
  evhttp_set_max_body_size(h->http, (ev_ssize_t)max_body);
  evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
  evhttp_set_gencb(h->http, on_request, h);
  struct evhttp_bound_socket *s = evhttp_bind_socket_with_handle(h->http, host, (ev_uint16_t)port);
  if (!s) {
    em_fail(err, EM_EINPUT, "http: cannot listen on %s:%d (in use, or not an address of this machine)", host, port);
    em_http_free(h);
    return NULL;
  }
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  evutil_socket_t fd = evhttp_bound_socket_get_fd(s);
  h->port = port;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
    h->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return h;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  event_base_loopbreak(((em_http *)arg)->base);
}

int em_http_port(const em_http *h) { return h->port; }
int em_http_pending(const em_http *h) { return h->pending.n; }

int em_http_poll(em_http *h, int timeout_ms, em_http_req **reqs, int *n) {
  free_reqs(h->out, h->nout);
  h->out = NULL, h->nout = 0;
  if (!h->fresh.n && timeout_ms > 0) {
    /* (a timer of its own, freed after: event_base_loopexit's would stay armed past an early break) */
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    struct event *t = evtimer_new(h->base, on_timeout, h);
    evtimer_add(t, &tv);
    event_base_dispatch(h->base);
    event_free(t);
  }
  event_base_loop(h->base, EVLOOP_NONBLOCK);
  h->out = h->fresh.v, h->nout = h->fresh.n;
  h->fresh.v = NULL, h->fresh.n = h->fresh.cap = 0;
  *reqs = h->out, *n = h->nout;
  return 0;
}

static const char *reason(int status) {
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 413: return "Payload Too Large";
  case 500: return "Internal Server Error";
  case 503: return "Service Unavailable";
  default: return "Status";
  }
}

int em_http_reply(em_http *h, long long id, int status, const char *content_type, const char *body, size_t len) {
  int i = 0;
  while (i < h->pending.n && h->pending.v[i].id != id) i++;
  if (i == h->pending.n) return -1;
  pend p = h->pending.v[i];
  h->pending.v[i] = h->pending.v[--h->pending.n];
  if (!p.req) return -1;
  struct evbuffer *b = evbuffer_new();
  evbuffer_add(b, body, len);
  evhttp_add_header(evhttp_request_get_output_headers(p.req), "Content-Type", content_type);
  evhttp_send_reply(p.req, status, reason(status), b);
  evbuffer_free(b);
  event_base_loop(h->base, EVLOOP_NONBLOCK); /* start writing it now */
  return 0;
}

void em_http_free(em_http *h) {
  if (!h) return;
  free_reqs(h->out, h->nout);
  free_reqs(h->fresh.v, h->fresh.n);
  free(h->pending.v);
  if (h->http) evhttp_free(h->http);
  if (h->base) event_base_free(h->base);
  free(h);
}

/* ---- the client ------------------------------------------------------------------------------------------ */

typedef struct {
  struct event_base *base;
  int done, status;
  char *resp;
  size_t len;
} client;

static void on_response(struct evhttp_request *req, void *arg) {
  client *c = arg;
  c->done = 1;
  if (req && evhttp_request_get_response_code(req) > 0) {
    c->status = evhttp_request_get_response_code(req);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    c->len = evbuffer_get_length(in);
    c->resp = em_alloc(c->len + 1);
    if (c->len) evbuffer_copyout(in, c->resp, c->len);
  }
  event_base_loopbreak(c->base);
}

static enum evhttp_cmd_type method_type(const char *m) {
  if (!strcmp(m, "POST")) return EVHTTP_REQ_POST;
  if (!strcmp(m, "HEAD")) return EVHTTP_REQ_HEAD;
  if (!strcmp(m, "PUT")) return EVHTTP_REQ_PUT;
  if (!strcmp(m, "DELETE")) return EVHTTP_REQ_DELETE;
  return EVHTTP_REQ_GET;
}

int em_http_request(const char *host, int port, const char *method, const char *path, const char *content_type,
                    const char *body, size_t len, int timeout_ms, int *status, char **resp, size_t *resp_len,
                    char err[EM_ERR_MAX]) {
  client c = {.base = event_base_new()};
  if (!c.base) return em_fail(err, EM_ERUN, "http: libevent could not start"), -1;
  struct evhttp_connection *conn = evhttp_connection_base_new(c.base, NULL, host, (ev_uint16_t)port);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  evhttp_connection_set_timeout_tv(conn, &tv);
  struct evhttp_request *req = evhttp_request_new(on_response, &c);
  struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
  evhttp_add_header(hd, "Host", host);
  if (content_type) evhttp_add_header(hd, "Content-Type", content_type);
  if (body && len) evbuffer_add(evhttp_request_get_output_buffer(req), body, len);
  int rc = -1;
  if (evhttp_make_request(conn, req, method_type(method), path) == 0) {
    nodelay(conn);
    event_base_dispatch(c.base);
    if (c.resp) {
      *status = c.status, *resp = c.resp, *resp_len = c.len;
      rc = 0;
    } else {
      em_fail(err, EM_ERUN, "http: no answer from %s:%d (refused, reset or timed out after %d ms)", host, port, timeout_ms);
    }
  } else {
    em_fail(err, EM_ERUN, "http: could not send to %s:%d", host, port);
  }
  evhttp_connection_free(conn);
  event_base_free(c.base);
  return rc;
}

/* ---- the load client -------------------------------------------------------------------------------------- */

typedef struct load load;
typedef struct {
  load *ld;
  struct evhttp_connection *conn;
  int cur;      /* the request in flight on this connection, -1 none */
  double t0;
} lane;

struct load {
  struct event_base *base;
  const char *host, *path;
  const char *const *bodies;
  const size_t *lens;
  int n, next, done;
  int *status;
  double *lat;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void lane_next(lane *l);

static void on_load_response(struct evhttp_request *req, void *arg) {
  lane *l = arg;
  load *ld = l->ld;
  int i = l->cur;
  ld->status[i] = req ? evhttp_request_get_response_code(req) : 0;
  ld->lat[i] = now_s() - l->t0;
  l->cur = -1;
  if (++ld->done == ld->n) event_base_loopbreak(ld->base);
  else lane_next(l);
}

/* This connection's next request, if any is left. */
static void lane_next(lane *l) {
  load *ld = l->ld;
  if (ld->next >= ld->n) return;
  int i = ld->next++;
  struct evhttp_request *req = evhttp_request_new(on_load_response, l);
  struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
  evhttp_add_header(hd, "Host", ld->host);
  evhttp_add_header(hd, "Content-Type", "application/json");
  evbuffer_add(evhttp_request_get_output_buffer(req), ld->bodies[i], ld->lens[i]);
  l->cur = i;
  l->t0 = now_s();
  if (evhttp_make_request(l->conn, req, EVHTTP_REQ_POST, ld->path) != 0) {
    ld->status[i] = 0, ld->lat[i] = 0, l->cur = -1;
    if (++ld->done == ld->n) event_base_loopbreak(ld->base);
  } else {
    nodelay(l->conn);
  }
}

int em_http_load(const char *host, int port, const char *path, const char *const *bodies, const size_t *lens, int n,
                 int concurrency, int timeout_ms, int *status, double *latency_s, double *duration_s, char err[EM_ERR_MAX]) {
  load ld = {.base = event_base_new(), .host = host, .path = path, .bodies = bodies, .lens = lens, .n = n, .status = status, .lat = latency_s};
  if (!ld.base) return em_fail(err, EM_ERUN, "http: libevent could not start"), -1;
  if (concurrency < 1) concurrency = 1;
  if (concurrency > n) concurrency = n > 0 ? n : 1;
  lane *lanes = em_alloc((size_t)concurrency * sizeof *lanes);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  for (int c = 0; c < concurrency; c++) {
    lanes[c] = (lane){.ld = &ld, .conn = evhttp_connection_base_new(ld.base, NULL, host, (ev_uint16_t)port), .cur = -1};
    evhttp_connection_set_timeout_tv(lanes[c].conn, &tv);
  }
  double t0 = now_s();
  for (int c = 0; c < concurrency; c++) lane_next(&lanes[c]);
  if (ld.done < n) event_base_dispatch(ld.base);
  *duration_s = now_s() - t0;
  for (int c = 0; c < concurrency; c++) evhttp_connection_free(lanes[c].conn);
  free(lanes);
  event_base_free(ld.base);
  return 0;
}

/* http.h — a small HTTP/1.1 server and client over libevent's evhttp (Debian's libevent-dev, linked statically):
 * the transport of `emmy serve` (issue 23). The server is single-threaded and driven by its caller: em_http_poll
 * runs the event loop until requests arrive or the timeout passes and hands them out whole (method, path, body);
 * the caller answers each with em_http_reply, in any order, later. Keep-alive, chunked request bodies and the
 * payload limit (413) are libevent's. Why not libmicrohttpd: Debian builds its static archive against GnuTLS,
 * whose own static archive needs p11-kit's, which Debian does not ship static; evhttp links alone. */
#ifndef EM_HTTP_H
#define EM_HTTP_H

#include <stddef.h>

#include "base.h"

typedef struct em_http em_http;

typedef struct {
  long long id;   /* for em_http_reply */
  char *method;   /* "GET", "POST", ... */
  char *path;     /* the request target (path and query), as sent */
  char *body;     /* NUL-terminated copy of the body (may hold NULs before body_len) */
  size_t body_len;
} em_http_req;

/* Listens on host:port (port 0: an ephemeral one, em_http_port says which); bodies above max_body bytes are
 * answered 413 by libevent. NULL with err on failure. */
em_http *em_http_listen(const char *host, int port, size_t max_body, char err[EM_ERR_MAX]);
int em_http_port(const em_http *h);
/* Runs the loop until at least one request is complete or timeout_ms passes (0: only what is ready). The
 * returned requests (*n of them, owned by h until the next poll) each need one em_http_reply. */
int em_http_poll(em_http *h, int timeout_ms, em_http_req **reqs, int *n);
/* Answers request id; -1 when it is unknown, answered already, or its client went away (nothing sent). */
int em_http_reply(em_http *h, long long id, int status, const char *content_type, const char *body, size_t len);
/* Requests received and not yet answered. */
int em_http_pending(const em_http *h);
void em_http_free(em_http *h);

/* One request to host:port and its answer (a test and load client): 0 with *status and a malloc'd *resp (NUL-
 * terminated, *resp_len bytes), or -1 with err (connection refused, timeout). */
int em_http_request(const char *host, int port, const char *method, const char *path, const char *content_type,
                    const char *body, size_t len, int timeout_ms, int *status, char **resp, size_t *resp_len,
                    char err[EM_ERR_MAX]);

/* A closed-loop load: n POSTs of bodies[i] to path over `concurrency` keep-alive connections, each sending its next
 * body when the last is answered. status[i] (0: no answer) and latency_s[i] (send to answer) per request, the
 * whole run's seconds in *duration_s. 0, or -1 with err when the event loop cannot start. */
int em_http_load(const char *host, int port, const char *path, const char *const *bodies, const size_t *lens, int n,
                 int concurrency, int timeout_ms, int *status, double *latency_s, double *duration_s, char err[EM_ERR_MAX]);

#endif

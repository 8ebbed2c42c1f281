/* server.c: routing, request bodies, CORS, limits and drain on top of
 * libmicrohttpd in thread-per-connection mode.
 *
 * Threading: every connection has its own libmicrohttpd thread, which parses
 * the request and then blocks in codec_run while the compute pool (pool.c,
 * W threads) does the arithmetic. Health probes, metrics and small errors
 * never touch the pool, so they are answered by their own thread however
 * busy the pool is; concurrent /attend requests share the pool task by task.
 *
 * Per-request state (http_request) is made on the first access-handler call
 * and freed in exactly one place, http__completed, however the request
 * ended. Responses are queued only before any body byte is consumed (on the
 * first call for a request with a body, on the second for one without, which
 * keeps its connection alive) or after the whole body has been read:
 * libmicrohttpd 0.9.75 mishandles a response queued mid-upload, so an
 * oversized chunked body is drained and discarded, and 413 follows the
 * upload. */
#include "http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http/assets.h"
#include "attend/codec.h"
#include "errors.h"
#include "log.h"
#include "pool.h"
#include "store/store.h"
#include "store/tensors_http.h"

/* Streamed /attend responses are produced in blocks of this size. */
#define HTTP__BLOCK_SIZE (64 * 1024)
/* The most of a declared Content-Length reserved before the body arrives. */
#define HTTP__BODY_HINT_MAX ((size_t)64 << 20)
/* Seconds a refused client is told to wait (503 Retry-After). */
#define HTTP__RETRY_AFTER "1"
/* Browsers cache a preflight answer this many seconds. */
#define HTTP__PREFLIGHT_MAX_AGE "600"

typedef enum http__route {
    HTTP__ROUTE_NONE,
    HTTP__ROUTE_ATTEND,
    HTTP__ROUTE_HEALTHZ,
    HTTP__ROUTE_LIVEZ,
    HTTP__ROUTE_READYZ,
    HTTP__ROUTE_METRICS,
    HTTP__ROUTE_OPENAPI,
    HTTP__ROUTE_ASSET,
    HTTP__ROUTE_TENSORS, /* POST /tensors */
    HTTP__ROUTE_TENSOR   /* GET, HEAD /tensors/<ref> */
} http__route;

typedef struct http__route_row {
    const char *path; /* also the metrics label */
    http__route route;
} http__route_row;

/* /openapi.json is served from the embedded assets (mk/service.mk adds it to
 * ASSET_FILES) but keeps its own route so its label and Allow are fixed. */
static const http__route_row http__routes[] = {
    {"/attend", HTTP__ROUTE_ATTEND},     {"/healthz", HTTP__ROUTE_HEALTHZ},
    {"/livez", HTTP__ROUTE_LIVEZ},       {"/readyz", HTTP__ROUTE_READYZ},
    {"/metrics", HTTP__ROUTE_METRICS},   {"/openapi.json", HTTP__ROUTE_OPENAPI},
    {"/tensors", HTTP__ROUTE_TENSORS},
};

/* GET /tensors/<ref>: matched by this prefix, counted under one label. */
#define HTTP__TENSOR_PREFIX "/tensors/"
#define HTTP__TENSOR_LABEL "/tensors/{ref}"

#define HTTP__ALLOW_POST "POST, OPTIONS"
#define HTTP__ALLOW_GET "GET, HEAD, OPTIONS"

struct server {
    config cfg;
    struct MHD_Daemon *daemon;
    pool *pool;
    metrics *metrics;
    store *store; /* NULL: --tensor-store-bytes 0 */
    uint16_t port;
    atomic_bool shutting_down; /* /readyz 503 */
    atomic_bool refusing;      /* quiesced: new /attend refused */
    atomic_size_t attend_in_flight;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    size_t active; /* requests between first call and completion */
    bool quiesced;
};

/* Per-request state, see the banner. */
typedef struct http_request {
    server *srv;
    char method[16];
    char path[256];
    const char *label; /* bounded metrics label */
    http__route route;
    struct timespec t0;
    bool attend_slot; /* holds one of max_in_flight */
    bool discard;     /* body over the limit: drained, then 413 */
    bool deferred;    /* no body: headers judged on the second call */
    bool http11;      /* HTTP/1.1, which must carry Host (RFC 9112 3.2) */
    char *body;
    size_t body_len, body_cap;
    size_t body_hint; /* the declared Content-Length, capped */
    size_t bytes_in, bytes_out;
    int status; /* 0 until a response is queued */
    const char *error_code;
} http_request;

/* The streamed 200 body of /attend. */
typedef struct http__body {
    codec_writer *writer;
    size_t *bytes_out; /* the request's counter; read calls end before the
                          request-completed callback frees it */
} http__body;

static double http__since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) +
           (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* -- CORS ---------------------------------------------------------------- */

/* Whether origin is one of the configured comma-separated origins. */
static bool http__origin_listed(const char *list, const char *origin)
{
    size_t olen = strlen(origin);
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *end = p;
        while (*end && *end != ',')
            end++;
        size_t len = (size_t)(end - p);
        while (len && p[len - 1] == ' ')
            len--;
        if (len && len == olen && !strncasecmp(p, origin, len))
            return true;
        p = end;
    }
    return false;
}

static void http__add_cors(const server *srv, struct MHD_Connection *c,
                           struct MHD_Response *resp)
{
    const char *list = srv->cfg.cors_origins;
    if (!strcmp(list, "*")) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        return;
    }
    /* The answer depends on Origin: caches must key on it. */
    MHD_add_response_header(resp, "Vary", "Origin");
    const char *origin =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && http__origin_listed(list, origin))
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
}

/* -- responses ----------------------------------------------------------- */

/* Adds the common headers, queues resp with status and drops our reference.
 * body_len is what a GET sends (HEAD sends none). */
static enum MHD_Result http__queue(http_request *r, struct MHD_Connection *c,
                                   int status, struct MHD_Response *resp,
                                   size_t body_len)
{
    if (!resp)
        return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    http__add_cors(r->srv, c, resp);
    if (atomic_load(&r->srv->refusing))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    r->status = status;
    r->bytes_out = strcmp(r->method, "HEAD") ? body_len : 0;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Sends e as the contract's error body with e's status from the table.
 * allow is the Allow header of a 405 (or NULL). */
static enum MHD_Result http__send_error(http_request *r,
                                        struct MHD_Connection *c,
                                        const codec_error *e,
                                        const char *allow)
{
    static const char oom_body[] =
        "{\"error\":{\"code\":\"unavailable\",\"message\":\"out of memory\"}}";
    int status = errors_http_status(e->kind);
    size_t len = 0;
    char *body = codec_error_body(e, &len);
    struct MHD_Response *resp;
    if (body) {
        resp = MHD_create_response_from_buffer(len, body,
                                               MHD_RESPMEM_MUST_FREE);
        if (!resp)
            free(body);
    } else {
        status = 503;
        len = sizeof oom_body - 1;
        resp = MHD_create_response_from_buffer(len, (void *)oom_body,
                                               MHD_RESPMEM_PERSISTENT);
    }
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    if (allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    if (status == 503)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER,
                                HTTP__RETRY_AFTER);
    r->error_code = body ? errors_code(e->kind) : "unavailable";
    return http__queue(r, c, status, resp, len);
}

/* A contract error for kind with a formatted message and no field. */
static enum MHD_Result http__error(http_request *r, struct MHD_Connection *c,
                                   errors_kind kind, const char *allow,
                                   const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static enum MHD_Result http__error(http_request *r, struct MHD_Connection *c,
                                   errors_kind kind, const char *allow,
                                   const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    codec_error e;
    memset(&e, 0, sizeof e);
    codec_error_set(&e, kind, NULL, "%s", msg);
    return http__send_error(r, c, &e, allow);
}

/* A body from static or caller-freed memory with its content type. */
static enum MHD_Result http__send(http_request *r, struct MHD_Connection *c,
                                  int status, const char *type,
                                  const void *data, size_t len,
                                  enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)data, mode);
    if (!resp) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free((void *)data);
        return MHD_NO;
    }
    if (type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    return http__queue(r, c, status, resp, len);
}

static enum MHD_Result http__preflight(http_request *r,
                                       struct MHD_Connection *c,
                                       const char *allow)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", allow);
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            "Content-Type, Accept");
    MHD_add_response_header(resp, "Access-Control-Max-Age",
                            HTTP__PREFLIGHT_MAX_AGE);
    return http__queue(r, c, 204, resp, 0);
}

/* An answer of the tensor store's endpoints (tensors_http.h), or its
 * error. */
static enum MHD_Result http__store_answer(http_request *r,
                                          struct MHD_Connection *c, int rc,
                                          store_http_answer *ans,
                                          const codec_error *e)
{
    if (rc)
        return http__send_error(r, c, e, NULL);
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        ans->len, ans->body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(ans->body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            ans->content_type);
    if (ans->location[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION,
                                ans->location);
    return http__queue(r, c, ans->status, resp, ans->len);
}

/* -- GET routes ---------------------------------------------------------- */

static enum MHD_Result http__get(http_request *r, struct MHD_Connection *c,
                                 const asset *a)
{
    static const char ok[] = "{\"status\":\"ok\"}";
    server *srv = r->srv;
    switch (r->route) {
    case HTTP__ROUTE_HEALTHZ:
    case HTTP__ROUTE_LIVEZ:
        return http__send(r, c, 200, "application/json", ok, sizeof ok - 1,
                          MHD_RESPMEM_PERSISTENT);
    case HTTP__ROUTE_READYZ:
        if (atomic_load(&srv->shutting_down))
            return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                               "shutting down: not ready for traffic");
        return http__send(r, c, 200, "application/json", ok, sizeof ok - 1,
                          MHD_RESPMEM_PERSISTENT);
    case HTTP__ROUTE_METRICS: {
        size_t len;
        char *text = metrics_render(srv->metrics, &len);
        if (!text)
            return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                               "out of memory rendering metrics");
        return http__send(r, c, 200,
                          "text/plain; version=0.0.4; charset=utf-8", text,
                          len, MHD_RESPMEM_MUST_FREE);
    }
    case HTTP__ROUTE_OPENAPI:
    case HTTP__ROUTE_ASSET:
        if (!a)
            return http__error(r, c, ERRORS_NOT_FOUND, NULL,
                               "no asset for %s in this build", r->path);
        return http__send(r, c, 200, a->content_type, a->data, a->len,
                          MHD_RESPMEM_PERSISTENT);
    case HTTP__ROUTE_TENSOR: {
        const char *ref = r->path + strlen(HTTP__TENSOR_PREFIX);
        store_http_answer ans;
        codec_error e;
        memset(&e, 0, sizeof e);
        int rc = store_http_get(srv->store, ref, strlen(ref), &ans, &e);
        return http__store_answer(r, c, rc, &ans, &e);
    }
    case HTTP__ROUTE_ATTEND:
    case HTTP__ROUTE_TENSORS:
    case HTTP__ROUTE_NONE:
        break;
    }
    return http__error(r, c, ERRORS_INTERNAL, NULL, "unroutable request");
}

/* -- POST /attend -------------------------------------------------------- */

/* Whether a Content-Type names JSON: application/json or application/...+json,
 * parameters such as charset allowed. */
static bool http__is_json(const char *type)
{
    if (!type)
        return false;
    while (*type == ' ' || *type == '\t')
        type++;
    size_t len = strcspn(type, ";");
    while (len && (type[len - 1] == ' ' || type[len - 1] == '\t'))
        len--;
    static const char app[] = "application/";
    if (len < sizeof app - 1 || strncasecmp(type, app, sizeof app - 1))
        return false;
    const char *sub = type + sizeof app - 1;
    size_t sub_len = len - (sizeof app - 1);
    if (sub_len == 4 && !strncasecmp(sub, "json", 4))
        return true;
    return sub_len > 5 && !strncasecmp(sub + sub_len - 5, "+json", 5);
}

/* Appends a chunk of the body; past the limit the body is dropped and the
 * rest drained (see the banner). */
static void http__take_body(http_request *r, const char *data, size_t size)
{
    size_t max = r->srv->cfg.limits.max_body_bytes;
    r->bytes_in += size;
    if (r->discard)
        return;
    if (size > max - r->body_len) {
        r->discard = true;
        free(r->body);
        r->body = NULL;
        r->body_len = r->body_cap = 0;
        return;
    }
    if (r->body_len + size > r->body_cap) {
        /* The first chunk reserves the declared Content-Length (at most
         * HTTP__BODY_HINT_MAX), so a body is copied once, not once per
         * doubling; beyond that, or without one, the buffer grows
         * geometrically as data arrives. */
        size_t cap = r->body_cap ? r->body_cap
                     : r->body_hint > 16384 ? r->body_hint : 16384;
        while (cap < r->body_len + size)
            cap = cap > max / 2 ? max : cap * 2;
        char *b = realloc(r->body, cap);
        if (!b) {
            /* Treated like an oversized body: drained, then refused. */
            r->discard = true;
            free(r->body);
            r->body = NULL;
            r->body_len = r->body_cap = 0;
            return;
        }
        r->body = b;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, size);
    r->body_len += size;
}

static ssize_t http__body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http__body *b = cls;
    size_t n = codec_writer_read(b->writer, buf, max);
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    *b->bytes_out += n;
    return (ssize_t)n;
}

static void http__body_free(void *cls)
{
    http__body *b = cls;
    codec_writer_free(b->writer);
    free(b);
}

/* The whole body has arrived: parse, compute on the pool, stream back. */
static enum MHD_Result http__attend(http_request *r, struct MHD_Connection *c)
{
    server *srv = r->srv;
    if (r->discard)
        return http__error(r, c, ERRORS_TOO_LARGE, NULL,
                           "the request body has %zu bytes; the limit "
                           "--max-body-bytes (ATTND_MAX_BODY_BYTES) is %zu",
                           r->bytes_in, srv->cfg.limits.max_body_bytes);
    codec_error err;
    memset(&err, 0, sizeof err);
    if (r->route == HTTP__ROUTE_TENSORS) {
        store_http_answer ans;
        int rc = store_http_post(
            srv->store,
            MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                        MHD_HTTP_HEADER_CONTENT_TYPE),
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "shape"),
            r->body, r->body_len, &ans, &err);
        return http__store_answer(r, c, rc, &ans, &err);
    }
    codec_request *req = NULL;
    int rc = codec_parse_with(r->body ? r->body : "", r->body_len,
                              &srv->cfg.limits, srv->store, &req, &err);
    /* The parsed request owns copies of everything it needs. */
    free(r->body);
    r->body = NULL;
    r->body_cap = 0;
    if (rc)
        return http__send_error(r, c, &err, NULL);
    double seconds = 0;
    if (codec_run(req, pool_executor(srv->pool), &err, &seconds)) {
        codec_request_free(req);
        return http__send_error(r, c, &err, NULL);
    }
    metrics_compute(srv->metrics, seconds);
    http__body *b = malloc(sizeof *b);
    codec_writer *w = codec_writer_new(req); /* owns req from here */
    if (!b || !w) {
        free(b);
        codec_writer_free(w);
        return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                           "out of memory for the response");
    }
    b->writer = w;
    b->bytes_out = &r->bytes_out;
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, HTTP__BLOCK_SIZE, http__body_read, b,
        http__body_free);
    if (!resp) {
        http__body_free(b);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    /* bytes_out starts at 0 and grows block by block as the body is sent. */
    return http__queue(r, c, 200, resp, 0);
}

/* -- the access handler -------------------------------------------------- */

static http__route http__find_route(const char *path, const asset **a,
                                    const char **label)
{
    *a = NULL;
    for (size_t i = 0; i < sizeof http__routes / sizeof http__routes[0]; i++)
        if (!strcmp(path, http__routes[i].path)) {
            *label = http__routes[i].path;
            if (http__routes[i].route == HTTP__ROUTE_OPENAPI)
                *a = assets_find(path);
            return http__routes[i].route;
        }
    if (!strncmp(path, HTTP__TENSOR_PREFIX, strlen(HTTP__TENSOR_PREFIX))) {
        *label = HTTP__TENSOR_LABEL;
        return HTTP__ROUTE_TENSOR;
    }
    *a = assets_find(path);
    if (*a) {
        *label = (*a)->path; /* the assets are a fixed, embedded set */
        return HTTP__ROUTE_ASSET;
    }
    *label = "other";
    return HTTP__ROUTE_NONE;
}

/* The request's body framing headers (the first of each, NULL when
 * absent), how many of each it carries, and whether repeated
 * Content-Length values differ. */
typedef struct http__framing_info {
    const char *te, *cl;
    unsigned te_count, cl_count;
    bool cl_differ;
} http__framing_info;

static enum MHD_Result http__framing_cb(void *cls, enum MHD_ValueKind kind,
                                        const char *key, const char *value)
{
    http__framing_info *f = cls;

    (void)kind;
    if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        if (f->te_count++ == 0)
            f->te = value;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (f->cl_count++ == 0)
            f->cl = value;
        else if (strcmp(f->cl, value ? value : ""))
            f->cl_differ = true;
    }
    return MHD_YES;
}

static void http__framing(struct MHD_Connection *c, http__framing_info *f)
{
    memset(f, 0, sizeof *f);
    MHD_get_connection_values(c, MHD_HEADER_KIND, http__framing_cb, f);
}

/* Everything decidable from the headers alone, answered before any body
 * byte is read. */
static enum MHD_Result http__headers(http_request *r, struct MHD_Connection *c)
{
    server *srv = r->srv;
    http__framing_info f;
    http__framing(c, &f);
    const char *te = f.te, *cl = f.cl;
    /* Request smuggling guards libmicrohttpd 0.9.75 lacks (RFC 9112 6.1,
     * 6.3): it reads only the first of repeated framing headers, where a
     * proxy in front may have read another. */
    if (f.cl_differ)
        return http__error(r, c, ERRORS_BAD_REQUEST, NULL,
                           "a request may not carry differing "
                           "Content-Length headers");
    if (f.te_count > 1)
        return http__error(r, c, ERRORS_BAD_REQUEST, NULL,
                           "a request may carry one Transfer-Encoding "
                           "header; found %u",
                           f.te_count);
    if (r->http11 && !MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                  MHD_HTTP_HEADER_HOST))
        return http__error(r, c, ERRORS_BAD_REQUEST, NULL,
                           "an HTTP/1.1 request must carry a Host header");
    if (te && cl)
        return http__error(r, c, ERRORS_BAD_REQUEST, NULL,
                           "a request may not carry both Transfer-Encoding "
                           "and Content-Length");
    if (te && strcasecmp(te, "chunked"))
        return http__error(r, c, ERRORS_BAD_REQUEST, NULL,
                           "unsupported Transfer-Encoding \"%.64s\": only "
                           "chunked is accepted",
                           te);

    const asset *a;
    r->route = http__find_route(r->path, &a, &r->label);
    if (r->route == HTTP__ROUTE_NONE)
        return http__error(r, c, ERRORS_NOT_FOUND, NULL,
                           "no such path: %.200s", r->path);
    bool tensors = r->route == HTTP__ROUTE_TENSORS ||
                   r->route == HTTP__ROUTE_TENSOR;
    if (tensors && !srv->store)
        return http__error(r, c, ERRORS_NOT_FOUND, NULL,
                           "no such path: %.200s (the tensor store is off: "
                           "--tensor-store-bytes 0)",
                           r->path);
    bool is_post_route = r->route == HTTP__ROUTE_ATTEND ||
                         r->route == HTTP__ROUTE_TENSORS;
    const char *allow = is_post_route ? HTTP__ALLOW_POST : HTTP__ALLOW_GET;
    if (!strcmp(r->method, "OPTIONS"))
        return http__preflight(r, c, allow);
    if (!is_post_route) {
        if (strcmp(r->method, "GET") && strcmp(r->method, "HEAD"))
            return http__error(r, c, ERRORS_METHOD_NOT_ALLOWED, allow,
                               "method %s is not allowed on %s; allowed: %s",
                               r->method, r->path, allow);
        return http__get(r, c, a);
    }
    if (strcmp(r->method, "POST"))
        return http__error(r, c, ERRORS_METHOD_NOT_ALLOWED, allow,
                           "method %s is not allowed on %s; allowed: %s",
                           r->method, r->path, allow);
    const char *type = MHD_lookup_connection_value(
        c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (r->route == HTTP__ROUTE_TENSORS ? !store_http_media_ok(type)
                                        : !http__is_json(type))
        return http__error(r, c, ERRORS_UNSUPPORTED_MEDIA_TYPE, NULL,
                           "expected Content-Type application/json%s, found "
                           "%s%.100s%s",
                           r->route == HTTP__ROUTE_TENSORS
                               ? " or application/octet-stream"
                               : "",
                           type ? "\"" : "", type ? type : "none",
                           type ? "\"" : "");
    if (atomic_load(&srv->refusing))
        return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                           "shutting down: not accepting new work");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (!errno && end != cl && *end == '\0') {
            if (n > srv->cfg.limits.max_body_bytes)
                return http__error(r, c, ERRORS_TOO_LARGE, NULL,
                                   "Content-Length is %llu bytes; the limit "
                                   "--max-body-bytes (ATTND_MAX_BODY_BYTES) "
                                   "is %zu",
                                   n, srv->cfg.limits.max_body_bytes);
            r->body_hint = n < HTTP__BODY_HINT_MAX ? (size_t)n
                                                   : HTTP__BODY_HINT_MAX;
        }
    }
    size_t prev = atomic_fetch_add(&srv->attend_in_flight, 1);
    if (prev >= srv->cfg.limits.max_in_flight) {
        atomic_fetch_sub(&srv->attend_in_flight, 1);
        return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                           "over capacity: %zu requests are in progress, "
                           "the limit --max-in-flight (ATTND_MAX_IN_FLIGHT); "
                           "retry later",
                           srv->cfg.limits.max_in_flight);
    }
    r->attend_slot = true;
    return MHD_YES; /* wait for the body */
}

/* The path of a request target: an absolute-form target
 * ("http://host:port/attend", which RFC 9112 3.2.2 requires a server to
 * accept, as proxies send) loses its scheme and authority; any other form
 * is returned as it is. */
static const char *http__origin_form(const char *url)
{
    const char *p;

    if (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8))
        return url;
    p = strstr(url, "://") + 3;
    p += strcspn(p, "/");
    return *p ? p : "/";
}

static enum MHD_Result http__access(void *cls, struct MHD_Connection *c,
                                    const char *url, const char *method,
                                    const char *version,
                                    const char *upload_data,
                                    size_t *upload_data_size, void **con_cls)
{
    server *srv = cls;
    http_request *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->srv = srv;
        clock_gettime(CLOCK_MONOTONIC, &r->t0);
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", http__origin_form(url));
        r->http11 = version != NULL && !strcmp(version, MHD_HTTP_VERSION_1_1);
        r->label = "other";
        *con_cls = r;
        pthread_mutex_lock(&srv->mu);
        srv->active++;
        pthread_mutex_unlock(&srv->mu);
        metrics_request_begin(srv->metrics);
        /* libmicrohttpd 0.9.75 closes the connection after a response
         * queued on the first call, so requests without a body are answered
         * on the second call and keep their connection alive; requests with
         * one are judged now, before any body byte is read. */
        http__framing_info f;
        http__framing(c, &f);
        if (f.te || (f.cl && strcmp(f.cl, "0")))
            return http__headers(r, c);
        r->deferred = true;
        return MHD_YES;
    }
    if (r->status) {
        /* Answered from the headers; whatever body still arrives is
         * dropped unread. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        /* A client trickling its body stays under the inactivity timeout;
         * the whole body gets a deadline. No answer can be queued
         * mid-upload (see the banner), so the connection is closed. */
        if (http__since(&r->t0) > (double)srv->cfg.body_timeout_s)
            return MHD_NO;
        http__take_body(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->deferred) {
        r->deferred = false;
        enum MHD_Result ret = http__headers(r, c);
        if (ret != MHD_YES || r->status)
            return ret;
    }
    return http__attend(r, c);
}

/* The one place per-request state is freed. */
static void http__completed(void *cls, struct MHD_Connection *c,
                            void **con_cls,
                            enum MHD_RequestTerminationCode toe)
{
    (void)c;
    server *srv = cls;
    http_request *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    double seconds = http__since(&r->t0);
    /* A request that never got a response (client gone, timeout) is not
     * counted by status; it leaves the in-flight gauge all the same. */
    metrics_request_end(srv->metrics, r->label, r->status, r->bytes_in,
                        r->bytes_out, seconds);
    if (!srv->cfg.quiet) {
        log_request_line line = {
            .method = r->method,
            .path = r->path,
            .status = r->status,
            .bytes_in = r->bytes_in,
            .bytes_out = r->bytes_out,
            .duration_ms = seconds * 1e3,
            .error_code = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK
                              ? r->error_code
                              : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED
                                    ? "connection_timeout"
                                    : "connection_closed",
        };
        log_request(&line);
    }
    if (r->attend_slot)
        atomic_fetch_sub(&srv->attend_in_flight, 1);
    free(r->body);
    free(r);
    pthread_mutex_lock(&srv->mu);
    if (--srv->active == 0)
        pthread_cond_broadcast(&srv->idle);
    pthread_mutex_unlock(&srv->mu);
}

static void http__mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void http__mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    char extra[700];
    size_t len = 0;
    memcpy(extra, "\"detail\":", 9);
    len = 9;
    extra[len] = '\0';
    log_json_string(extra, &len, sizeof extra, msg);
    log_event("warn", "libmicrohttpd", extra);
}

/* -- lifecycle ----------------------------------------------------------- */

int server_start(const config *cfg, server **out, char *err, size_t err_cap)
{
    *out = NULL;
    server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    srv->cfg = *cfg;
    atomic_init(&srv->shutting_down, false);
    atomic_init(&srv->refusing, false);
    atomic_init(&srv->attend_in_flight, 0);
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->idle, NULL);

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, cfg->host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, cfg->host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)cfg->port);
        /* "::" means every address, IPv4 ones included. */
        flags |= IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr) ? MHD_USE_DUAL_STACK
                                                         : MHD_USE_IPv6;
    } else {
        snprintf(err, err_cap, "invalid host address \"%s\"", cfg->host);
        server_stop(srv);
        return -1;
    }

    if (store_new(cfg->tensor_store_bytes, &srv->store)) {
        snprintf(err, err_cap, "out of memory for the tensor store");
        server_stop(srv);
        return -1;
    }
    size_t threads = cfg->threads ? cfg->threads : config_usable_cores();
    srv->metrics = metrics_new();
    if (!srv->metrics || pool_new(threads, &srv->pool)) {
        snprintf(err, err_cap, "cannot start %zu compute threads", threads);
        server_stop(srv);
        return -1;
    }
    /* The pool is the only source of compute parallelism; OpenBLAS's own
     * threads on top would oversubscribe the cores. */
    attn_blas_set_threads(1);
    char mhd_version[32];
    snprintf(mhd_version, sizeof mhd_version, "%s", MHD_get_version());
    metrics_set_build_info(srv->metrics, CONFIG_VERSION, mhd_version,
                           threads);
    metrics_set_store(srv->metrics, srv->store);

    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, http__access, srv, MHD_OPTION_EXTERNAL_LOGGER,
        http__mhd_log, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, http__completed, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->limits.timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_END);
    if (!srv->daemon) {
        snprintf(err, err_cap, "cannot listen on %s port %u: %s", cfg->host,
                 cfg->port, strerror(errno));
        server_stop(srv);
        return -1;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : (uint16_t)cfg->port;
    *out = srv;
    return 0;
}

uint16_t server_port(const server *srv)
{
    return srv->port;
}

size_t server_threads(const server *srv)
{
    return pool_workers(srv->pool);
}

void server_begin_shutdown(server *srv)
{
    atomic_store(&srv->shutting_down, true);
}

void server_quiesce(server *srv)
{
    server_begin_shutdown(srv);
    atomic_store(&srv->refusing, true);
    pthread_mutex_lock(&srv->mu);
    bool first = !srv->quiesced;
    srv->quiesced = true;
    pthread_mutex_unlock(&srv->mu);
    if (first && srv->daemon) {
        MHD_socket fd = MHD_quiesce_daemon(srv->daemon);
        /* libmicrohttpd's polling thread may still be inside poll() with
         * this socket, which keeps it listening after close() until the
         * poll returns; shutdown() stops the listening at once. */
        if (fd != MHD_INVALID_SOCKET) {
            shutdown(fd, SHUT_RDWR);
            close(fd);
        }
    }
}

void server_wait(server *srv)
{
    pthread_mutex_lock(&srv->mu);
    while (srv->active)
        pthread_cond_wait(&srv->idle, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
}

void server_stop(server *srv)
{
    if (!srv)
        return;
    if (srv->daemon) {
        server_quiesce(srv);
        server_wait(srv);
        MHD_stop_daemon(srv->daemon);
    }
    pool_free(srv->pool);
    metrics_free(srv->metrics);
    /* after the daemon: no request holds a stored tensor any more */
    store_free(srv->store);
    pthread_cond_destroy(&srv->idle);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}

const attn_executor *server_executor(server *srv)
{
    return pool_executor(srv->pool);
}

metrics *server_metrics(server *srv)
{
    return srv->metrics;
}

store *server_store(server *srv)
{
    return srv->store;
}

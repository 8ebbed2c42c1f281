/* server.c: routing, the access handler and the lifecycle, on top of
 * libmicrohttpd in its epoll mode with a pool of its own threads.
 *
 * Threading: a few libmicrohttpd threads (HTTP__IO_THREADS) serve every
 * connection through epoll, so an idle connection costs a descriptor and a
 * few KiB, never a thread. They parse requests, read bodies, answer probes,
 * metrics and errors at once, and write responses; they never compute. A
 * POST /attend whose body is complete is suspended while a thread of its
 * own computes it on the compute pool (attend.c), then resumed to stream its
 * answer. Below libmicrohttpd, guard.c sees every connection and byte first:
 * strict framing, deadlines for the slow, per-address and total connection
 * limits, and closing the idle on shutdown.
 *
 * Per-request state (http_request, internal.h) is made on the first
 * access-handler call and freed in exactly one place, http__completed,
 * however the request ended. Responses are queued only before any body byte
 * is consumed (on the first call for a request with a body, on the second
 * for one without, which keeps its connection alive) or after the whole
 * body has been read: libmicrohttpd 0.9.75 mishandles a response queued
 * mid-upload, so a chunked body that grows over a limit is answered by
 * guard.c instead, raw, and its connection closed (attend.c). */
#include "http/server.h"
#include "http/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
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
#include "json/json.h"
#include "json/text.h"
#include "attend/codec.h"
#include "errors.h"
#include "log.h"
#include "pool.h"
#include "store/store.h"
#include "store/tensors_http.h"

/* libmicrohttpd's own threads, each with its epoll set. */
#define HTTP__IO_THREADS 4
/* Memory libmicrohttpd gives each connection for its head and read
 * buffer: above guard.c's 16 KiB head limit, so its own 414/431 answers
 * (HTML) never happen. libmicrohttpd clears all of it (memset) when a
 * connection's next request begins: more would take a body in fewer
 * passes of its loop and cost more than that saves (docs/performance.md,
 * "libmicrohttpd's loop"). */
#define HTTP__CONN_MEMORY ((size_t)64 << 10)
/* A refused chunked body is drained up to this multiple of
 * --max-body-bytes, then its connection is closed. */
#define HTTP__DRAIN_FACTOR 2

typedef enum http__route {
    HTTP__ROUTE_NONE,
    HTTP__ROUTE_ATTEND,
    HTTP__ROUTE_HEALTHZ,
    HTTP__ROUTE_LIVEZ,
    HTTP__ROUTE_READYZ,
    HTTP__ROUTE_METRICS,
    HTTP__ROUTE_OPENAPI,
    HTTP__ROUTE_LIMITS,
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
    {"/tensors", HTTP__ROUTE_TENSORS},   {"/limits", HTTP__ROUTE_LIMITS},
};

/* GET /tensors/<ref>: matched by this prefix, counted under one label. */
#define HTTP__TENSOR_PREFIX "/tensors/"
#define HTTP__TENSOR_LABEL "/tensors/{ref}"

#define HTTP__ALLOW_POST "POST, OPTIONS"
#define HTTP__ALLOW_GET "GET, HEAD, OPTIONS"

static double http__since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) +
           (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
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
    case HTTP__ROUTE_LIMITS:
        return http__send(r, c, 200, "application/json", srv->limits_json,
                          srv->limits_len, MHD_RESPMEM_PERSISTENT);
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
 * absent), how many of each it carries (and of Content-Type), and whether
 * repeated Content-Length values differ. */
typedef struct http__framing_info {
    const char *te, *cl;
    unsigned te_count, cl_count, type_count;
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
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_TYPE)) {
        f->type_count++;
    }
    return MHD_YES;
}

/* Counts the query arguments named "shape" (as MHD looks them up, in any
 * case) into *cls. */
static enum MHD_Result http__count_shape(void *cls, enum MHD_ValueKind kind,
                                         const char *key, const char *value)
{
    (void)kind;
    (void)value;
    if (!strcasecmp(key, "shape"))
        ++*(unsigned *)cls;
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
    /* two media types, or two shapes: which one the sender meant is not
     * for us to guess */
    if (f.type_count > 1)
        return http__error(r, c, ERRORS_UNSUPPORTED_MEDIA_TYPE, NULL,
                           "Content-Type is given %u times; give it once",
                           f.type_count);
    if (r->route == HTTP__ROUTE_TENSORS) {
        unsigned shapes = 0;
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND,
                                  http__count_shape, &shapes);
        if (shapes > 1)
            return http__error(r, c, ERRORS_INVALID_REQUEST, NULL,
                               "shape is given %u times in the query "
                               "string; give it once",
                               shapes);
    }
    if (r->route == HTTP__ROUTE_TENSORS ? !store_http_media_ok(type)
                                        : codec_media_of(type) != CODEC_MEDIA_JSON)
        return http__error(r, c, ERRORS_UNSUPPORTED_MEDIA_TYPE, NULL,
                           "expected Content-Type application/json%s, found "
                           "%s%.100s%s",
                           r->route == HTTP__ROUTE_TENSORS
                               ? " or application/octet-stream"
                               : "",
                           type ? "\"" : "", type ? type : "none",
                           type ? "\"" : "");
    /* A compressed body would otherwise reach the JSON reader as bytes
     * (RFC 9110 8.4.1: 415 for a content coding the server does not
     * take). */
    const char *coding = MHD_lookup_connection_value(
        c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (coding && strcasecmp(coding, "identity"))
        return http__error(r, c, ERRORS_UNSUPPORTED_MEDIA_TYPE, NULL,
                           "Content-Encoding \"%.64s\" is not accepted: "
                           "send the body uncompressed",
                           coding);
    if (atomic_load(&srv->refusing))
        return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                           "shutting down: not accepting new work");
    r->route_tensors = r->route == HTTP__ROUTE_TENSORS;
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (!errno && end != cl && *end == '\0') {
            if (n > srv->cfg.limits.max_body_bytes) {
                metrics_closed(srv->metrics, METRICS_CLOSED_TOO_LARGE);
                return http__error(r, c, ERRORS_TOO_LARGE, NULL,
                                   "Content-Length is %llu bytes; the limit "
                                   "--max-body-bytes (ATTND_MAX_BODY_BYTES) "
                                   "is %zu",
                                   n, srv->cfg.limits.max_body_bytes);
            }
            /* The body is reserved whole before it is read; a compute slot
             * is taken only once it is complete (attend.c). */
            return http__body_admit(r, c, n);
        }
    }
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
        r->conn = c;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        r->gc = ci ? guard_conn_of(ci->connect_fd) : NULL;
        if (r->gc)
            guard_request_begin(r->gc);
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
    if (r->cut && !*upload_data_size)
        return MHD_NO; /* answered raw by guard.c; nothing to queue */
    if (r->status) {
        /* Answered from the headers; whatever body still arrives is
         * dropped unread. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        /* A body's deadlines are guard.c's (it answers 408). On a
         * connection it does not track, the whole body still gets one, and
         * since no answer can be queued mid-upload (see the banner) the
         * connection is closed. */
        if (!r->gc && http__since(&r->t0) > (double)srv->cfg.body_timeout_s)
            return MHD_NO;
        http__take_body(r, upload_data, *upload_data_size);
        if (r->discard && r->bytes_in / HTTP__DRAIN_FACTOR >
                              srv->cfg.limits.max_body_bytes)
            return MHD_NO; /* drained long enough: closed unanswered */
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
    /* Cut off by guard.c, which answered it (408, 503) when it could. */
    int cut = r->gc ? guard_request_cut(r->gc) : 0;
    bool answered_raw = r->cut; /* a body refused midway: 413, 503 */
    if (cut && !r->status && cut - 1 != METRICS_CLOSED_SLOW_READ) {
        bool shutdown = cut - 1 == METRICS_CLOSED_SHUTDOWN;
        errors_kind k = shutdown ? ERRORS_UNAVAILABLE : ERRORS_REQUEST_TIMEOUT;
        r->status = errors_http_status(k);
        r->error_code = errors_code(k);
        answered_raw = true;
    }
    if (r->gc)
        guard_request_end(r->gc);
    /* The slots before the count: once the in-flight gauge shows the
     * request ended, its slots are free. Its address's slot is given
     * back here, before libmicrohttpd closes the socket, while r->gc
     * and its address's entry still exist. */
    if (r->attend_slot)
        atomic_fetch_sub(&srv->attend_in_flight, 1);
    if (r->ip_slot)
        guard_slot_give(r->gc);
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
            /* An answer guard.c sent raw ends the connection, which
             * libmicrohttpd reports as closed: the line names the error
             * the client was answered with, as for any other. */
            .error_code = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ||
                                  answered_raw
                              ? r->error_code
                              : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED
                                    ? "connection_timeout"
                                    : "connection_closed",
        };
        log_request(&line);
    }
    http__drop_body(r);
    codec_writer_free(r->writer);
    free(r->store_ans.body); /* an answer never queued */
    free(r);
    pthread_mutex_lock(&srv->mu);
    if (--srv->active == 0)
        pthread_cond_broadcast(&srv->idle);
    pthread_mutex_unlock(&srv->mu);
}

/* -- lifecycle ----------------------------------------------------------- */

/* GET /limits' body, made once: the limits in force never change while the
 * server runs. Each is keyed by its flag with underscores for dashes
 * (--max-body-bytes: "max_body_bytes"). Returns a malloc'd string, or NULL
 * when out of memory. */
static char *http__limits_json(const config *cfg, size_t *len)
{
    config_limit lim[CONFIG_LIMITS_MAX];
    size_t n = config_limits(cfg, lim, CONFIG_LIMITS_MAX);
    text_buf t = TEXT_BUF_INIT;
    text_puts(&t, "{");
    for (size_t i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s", lim[i].flag);
        for (char *k = key; *k; k++)
            if (*k == '-')
                *k = '_';
        text_printf(&t, "%s\"%s\":%" PRIu64, i ? "," : "", key,
                    lim[i].value);
    }
    text_puts(&t, "}");
    if (text_failed(&t)) {
        text_free(&t);
        return NULL;
    }
    return text_take(&t, len);
}

/* /metrics' connection gauges. */
static void http__gauges(void *ctx, metrics_gauges *out)
{
    server *srv = ctx;
    guard_counts(srv->guard, &out->open, &out->idle);
    out->buffered_bytes = atomic_load(&srv->buffered);
}

int server_start(const config *cfg, server **out, char *err, size_t err_cap)
{
    *out = NULL;
    server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    srv->cfg = *cfg;
    config_resolve(&srv->cfg);
    cfg = &srv->cfg;
    atomic_init(&srv->shutting_down, false);
    atomic_init(&srv->refusing, false);
    atomic_init(&srv->attend_in_flight, 0);
    atomic_init(&srv->buffered, 0);
    srv->listen_fd = -1;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->idle, &ca);
    pthread_condattr_destroy(&ca);

    srv->limits_json = http__limits_json(cfg, &srv->limits_len);
    if (!srv->limits_json) {
        snprintf(err, err_cap, "out of memory");
        server_stop(srv);
        return -1;
    }

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
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
    /* a request's workspace is counted for every worker it may run on */
    srv->cfg.limits.workers = threads;
    /* The pool is the only source of compute parallelism; OpenBLAS's own
     * threads on top would oversubscribe the cores. */
    attn_blas_set_threads(1);
    char mhd_version[32];
    snprintf(mhd_version, sizeof mhd_version, "%s", MHD_get_version());
    metrics_set_build_info(srv->metrics, CONFIG_VERSION, mhd_version,
                           threads);
    metrics_set_store(srv->metrics, srv->store);
    if (guard_start(&srv->cfg, srv->metrics, &srv->guard)) {
        snprintf(err, err_cap, "cannot start the connection guard");
        server_stop(srv);
        return -1;
    }
    metrics_set_gauges_fn(srv->metrics, http__gauges, srv);
    /* Every connection is a descriptor: leave room for the rest. */
    size_t fds = guard_max_descriptors();
    if (srv->cfg.max_connections + 64 > fds) {
        srv->cfg.max_connections = fds > 128 ? fds - 64 : 64;
        char extra[96];
        snprintf(extra, sizeof extra, "\"max_connections\":%zu",
                 srv->cfg.max_connections);
        log_event("warn", "max-connections lowered to RLIMIT_NOFILE", extra);
    }

    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, http__access, srv, MHD_OPTION_EXTERNAL_LOGGER,
        log_libmicrohttpd, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, http__completed, srv,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->limits.timeout_s,
        /* guard.c enforces --max-connections (closing the longest idle
         * first); libmicrohttpd's own limit, split among its threads, only
         * needs room for connections being closed. */
        MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(2 * cfg->max_connections + 64 * HTTP__IO_THREADS),
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP__IO_THREADS,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP__CONN_MEMORY,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024U, MHD_OPTION_END);
    if (!srv->daemon) {
        snprintf(err, err_cap, "cannot listen on %s port %u: %s", cfg->host,
                 cfg->port, strerror(errno));
        server_stop(srv);
        return -1;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : (uint16_t)cfg->port;
    info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_LISTEN_FD);
    if (info)
        guard_listen(srv->guard, info->listen_fd, HTTP__IO_THREADS);
    *out = srv;
    return 0;
}

uint16_t server_port(const server *srv)
{
    return srv->port;
}

const config *server_config(const server *srv)
{
    return &srv->cfg;
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
         * poll returns; shutdown() stops the listening at once. Its
         * threads may still take the socket out of their epoll sets after
         * this (guard.c's epoll_ctl), so it stays open, and one of our
         * listening sockets, until they have stopped (server_stop_by). */
        if (fd != MHD_INVALID_SOCKET) {
            shutdown(fd, SHUT_RDWR);
            pthread_mutex_lock(&srv->mu);
            srv->listen_fd = fd;
            pthread_mutex_unlock(&srv->mu);
        }
    }
    /* Uploads under way are refused and closed now; connections between
     * requests stay, and their next request is answered with
     * Connection: close. */
    if (srv->guard)
        guard_refuse_uploads(srv->guard);
}

void server_wait(server *srv)
{
    pthread_mutex_lock(&srv->mu);
    while (srv->active || srv->runners)
        pthread_cond_wait(&srv->idle, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
}

bool server_wait_until(server *srv, const struct timespec *deadline)
{
    pthread_mutex_lock(&srv->mu);
    int rc = 0;
    while ((srv->active || srv->runners) && rc == 0)
        rc = pthread_cond_timedwait(&srv->idle, &srv->mu, deadline);
    bool done = !srv->active && !srv->runners;
    pthread_mutex_unlock(&srv->mu);
    return done;
}

void server_cut_off(server *srv)
{
    if (srv->guard)
        guard_close_all(srv->guard);
}

void server_stop(server *srv)
{
    server_stop_by(srv, NULL);
}

void server_stop_by(server *srv, const struct timespec *deadline)
{
    if (!srv)
        return;
    /* before the daemon closes its connections, which then linger */
    if (srv->guard && deadline)
        guard_finish_by(srv->guard, deadline);
    if (srv->daemon) {
        server_quiesce(srv);
        server_wait(srv);
        MHD_stop_daemon(srv->daemon);
        if (srv->listen_fd >= 0)
            close(srv->listen_fd);
    }
    guard_free(srv->guard);
    pool_free(srv->pool);
    metrics_free(srv->metrics);
    /* after the daemon: no request holds a stored tensor any more */
    store_free(srv->store);
    free(srv->limits_json);
    pthread_cond_destroy(&srv->idle);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}

size_t server_thread_connections(server *srv, size_t *held, size_t cap)
{
    return guard_thread_connections(srv->guard, held, cap);
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

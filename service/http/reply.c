/* reply.c: responses: CORS, the contract's error body, static and
 * allocated bodies, the CORS preflight. Every answer the server queues goes
 * through http__queue. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "errors.h"
#include "http/internal.h"

/* Browsers cache a preflight answer this many seconds. */
#define HTTP__PREFLIGHT_MAX_AGE "600"

/* -- CORS ---------------------------------------------------------------- */

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
    if (origin && guard_origin_listed(list, origin))
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
}

/* -- responses ----------------------------------------------------------- */

/* Adds the common headers, queues resp with status and drops our reference.
 * body_len is what a GET sends (HEAD sends none). */
enum MHD_Result http__queue(http_request *r, struct MHD_Connection *c,
                            int status, struct MHD_Response *resp,
                                   size_t body_len)
{
    if (!resp)
        return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    http__add_cors(r->srv, c, resp);
    if (atomic_load(&r->srv->refusing))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (r->gc && !r->claimed && !guard_request_answer(r->gc)) {
        /* guard.c has answered by itself meanwhile (shutdown, a deadline):
         * one answer is all the client may get */
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    r->claimed = true;
    r->status = status;
    r->bytes_out = strcmp(r->method, "HEAD") ? body_len : 0;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Sends e as the contract's error body with e's status from the table.
 * allow is the Allow header of a 405 (or NULL). */
enum MHD_Result http__send_error(http_request *r,
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
    r->error_code = errors_code(body ? e->kind : ERRORS_UNAVAILABLE);
    return http__queue(r, c, status, resp, len);
}

/* A contract error for kind with a formatted message and no field. */
enum MHD_Result http__error(http_request *r, struct MHD_Connection *c,
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

/* A body with its content type: static memory (borrowed), or malloc'd with
 * MHD_RESPMEM_MUST_FREE (stolen: freed here, also on failure). */
enum MHD_Result http__send(http_request *r, struct MHD_Connection *c,
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

enum MHD_Result http__preflight(http_request *r,
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
enum MHD_Result http__store_answer(http_request *r, struct MHD_Connection *c,
                                   int rc, store_http_answer *ans,
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


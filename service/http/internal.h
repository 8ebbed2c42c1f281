/* internal.h: what the files of service/http share: the server, the
 * per-request state and the response helpers (reply.c), the POST body and
 * compute path (attend.c). Not for use outside service/http. */
#ifndef ATTND_HTTP_INTERNAL_H
#define ATTND_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "attend/codec.h"
#include "config.h"
#include "errors.h"
#include "http/guard.h"
#include "http/server.h"
#include "metrics.h"
#include "pool.h"
#include "store/store.h"
#include "store/tensors_http.h"

/* Seconds a refused client is told to wait (503 Retry-After). */
#define HTTP__RETRY_AFTER "1"

struct server {
    config cfg; /* config_resolve'd */
    struct MHD_Daemon *daemon;
    pool *pool;
    metrics *metrics;
    store *store; /* NULL: --tensor-store-bytes 0 */
    guard *guard;
    uint16_t port;
    char *limits_json; /* GET /limits' body, made at start */
    size_t limits_len;
    atomic_bool shutting_down; /* /readyz 503 */
    atomic_bool refusing;      /* quiesced: new /attend refused */
    atomic_size_t attend_in_flight; /* slots: bodies complete, not ended */
    atomic_size_t buffered;         /* bytes reserved for bodies */
    pthread_mutex_t mu;
    pthread_cond_t idle;
    size_t active;  /* requests between first call and completion */
    size_t runners; /* compute threads not yet finished */
    bool quiesced;
    int listen_fd; /* the listening socket after the quiesce, shut down;
                      closed once libmicrohttpd has stopped (-1: none) */
};

/* Per-request state, made on the first access-handler call and freed in
 * exactly one place, http__completed, however the request ended. */
typedef struct http_request {
    server *srv;
    struct MHD_Connection *conn;
    guard_conn *gc; /* NULL when the connection is not tracked */
    char method[16];
    char path[256];
    const char *label; /* bounded metrics label */
    int route;         /* http__route of server.c */
    bool route_tensors; /* POST /tensors: the body goes to the store */
    struct timespec t0;
    bool attend_slot; /* holds one of max_in_flight */
    bool ip_slot;     /* ... counted against its address (guard_slot_take) */
    bool discard;     /* body over a limit: drained, then refused */
    int budget;       /* ... the limit being --max-buffered-bytes: for now
                         or for good (attend.c's http__refusal), else 0 */
    bool body_oom;    /* ... or the memory for it not to be had */
    bool cut;         /* cut off and answered by guard.c: no response */
    bool claimed;     /* the answer is this request's to send (guard.h) */
    bool deferred;    /* no body: headers judged on the second call */
    bool http11;      /* HTTP/1.1, which must carry Host (RFC 9112 3.2) */
    char *body;
    size_t body_len, body_cap;
    size_t body_hint;  /* the declared Content-Length */
    size_t reserved;   /* bytes of srv->buffered this request holds */
    size_t bytes_in, bytes_out;
    int status; /* 0 until a response is queued */
    const char *error_code;
    /* The computation, on its own thread while the connection is
     * suspended (attend.c). */
    atomic_bool cancel;
    bool suspended, computed;
    codec_writer *writer; /* the 200 answer, when computed */
    codec_request *parsed; /* parsed before the hand-off to a thread */
    codec_error err;      /* the error answer otherwise */
    bool failed;
    /* POST /tensors, stored on the same kind of thread: its headers as
     * copied before the connection was suspended, and the answer. */
    char type[128], shape[256];
    bool has_type, has_shape;
    int store_rc;
    store_http_answer store_ans;
} http_request;

/* -- reply.c -- */

/* Adds the common headers (CORS, Connection: close when refusing), queues
 * resp with status and drops our reference. body_len is what a GET sends. */
enum MHD_Result http__queue(http_request *r, struct MHD_Connection *c,
                            int status, struct MHD_Response *resp,
                            size_t body_len);
/* e as the contract's error body with its status; allow: a 405's Allow. */
enum MHD_Result http__send_error(http_request *r, struct MHD_Connection *c,
                                 const codec_error *e, const char *allow);
enum MHD_Result http__error(http_request *r, struct MHD_Connection *c,
                            errors_kind kind, const char *allow,
                            const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A body from static or malloc'd memory (MHD_RESPMEM_MUST_FREE: freed
 * here, also on failure) with its content type. */
enum MHD_Result http__send(http_request *r, struct MHD_Connection *c,
                           int status, const char *type, const void *data,
                           size_t len, enum MHD_ResponseMemoryMode mode);
enum MHD_Result http__preflight(http_request *r, struct MHD_Connection *c,
                                const char *allow);
/* An answer of the tensor store's endpoints (tensors_http.h), or its
 * error (rc != 0: e). */
enum MHD_Result http__store_answer(http_request *r, struct MHD_Connection *c,
                                   int rc, store_http_answer *ans,
                                   const codec_error *e);

/* -- attend.c -- */

/* Reserves a declared Content-Length against --max-buffered-bytes; a 503
 * is queued when it does not fit. Returns MHD_YES to read the body. */
enum MHD_Result http__body_admit(http_request *r, struct MHD_Connection *c,
                                 unsigned long long declared);
/* Appends a chunk of the body; past a limit it is dropped and the rest
 * drained. */
void http__take_body(http_request *r, const char *data, size_t size);
/* Releases the body and its reservation. */
void http__drop_body(http_request *r);
/* The whole body of POST /attend has arrived: computes it off the
 * libmicrohttpd thread, then answers. */
enum MHD_Result http__attend(http_request *r, struct MHD_Connection *c);

#endif

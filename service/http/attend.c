/* attend.c: request bodies and POST /attend's computation.
 *
 * Bodies: a declared Content-Length is reserved whole against
 * --max-buffered-bytes before any byte is read (503 when the bodies being
 * received leave no room for it now, 413 when a body that large never
 * fits); a chunked body reserves as it grows, and one that outgrows the
 * room left (503), the budget (413) or --max-body-bytes (413) is cut off
 * at once: guard.c answers it raw and closes the connection, since
 * libmicrohttpd 0.9.75 mishandles a response queued mid-upload. (Without
 * guard.c, on a descriptor it cannot track, the body is drained and
 * refused when it ends.) The reservation is released when the body is
 * freed: after parsing, or when the request ends.
 *
 * Compute: a request takes one of --max-in-flight slots only once its body
 * is complete, so slow uploads never hold a slot; bodies over 1 MiB leave
 * an eighth of the slots to smaller ones, and one client address holds at
 * most --max-in-flight-per-ip of them. A body of at most 1 MiB is
 * parsed on the libmicrohttpd thread that read it (about a millisecond at
 * most), and a request whose work is tiny is computed and answered there
 * too. Otherwise its connection is suspended and a thread of its own
 * parses it (unless done), runs it on the compute pool (or alone, while
 * others hold slots and its work is small: HTTP__OWN_THREAD_COST) and
 * builds the response writer, then resumes the connection; the
 * libmicrohttpd threads never wait for the compute pool. The slot is held
 * until the request ends (its answer holds the results). A client that
 * leaves meanwhile (guard.c notices) sets the request's cancel flag, which
 * the pool checks between tasks (pool_set_cancel): the rest of the work is
 * skipped and the request answers nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "errors.h"
#include "http/internal.h"

/* Streamed /attend responses are produced in blocks of this size. */
#define HTTP__BLOCK_SIZE (64 * 1024)

/* Bodies from this size on are held in transparent huge pages. */
#define HTTP__HUGE_BODY (4u << 20)

/* An answer of at most this many bytes is sent whole, with its length:
 * libmicrohttpd then sends the head and the body in one call, where a
 * streamed answer takes three (the head, a chunk, the last chunk), each
 * a trip through the kernel's TCP path. */
#define HTTP__WHOLE_ANSWER (64 * 1024)

/* The streamed 200 body of /attend: the text read before streaming began
 * (head), then the writer's. */
typedef struct http__body {
    char *head;
    size_t head_len, head_off;
    codec_writer *writer;
    size_t *bytes_out; /* the request's counter; read calls end before the
                          request-completed callback frees it */
    guard_conn *gc;
} http__body;

/* Bodies up to this size may use the last sixteenth of the budget, which
 * larger ones may not: clients holding large bodies (slowly, or many at
 * once) cannot starve the small requests of everyone else. */
#define HTTP__SMALL_BODY ((size_t)1 << 20)

/* Bodies from this size are read into their own buffer by guard.c, not
 * copied out of libmicrohttpd's; smaller ones mostly come with the head. */
#define HTTP__SINK_MIN ((size_t)1 << 16)

/* The most of --max-buffered-bytes one body of total bytes may hold. */
static size_t http__budget_most(const server *srv, size_t total)
{
    size_t max = srv->cfg.max_buffered_bytes;
    return total > HTTP__SMALL_BODY ? max - max / 16 : max;
}

/* The 413 of a body that can never fit in the budget, whatever else is
 * received meanwhile: bytes is its Content-Length (declared) or what a
 * chunked one has reached. */
static void http__beyond_budget(const server *srv, bool declared,
                                size_t bytes, char *msg, size_t cap)
{
    size_t max = srv->cfg.max_buffered_bytes;
    size_t most = http__budget_most(srv, bytes);
    snprintf(msg, cap,
             "%s %zu bytes; one body may hold at most %zu bytes of "
             "--max-buffered-bytes (ATTND_MAX_BUFFERED_BYTES, %zu)%s",
             declared ? "Content-Length is" : "the chunked body reached",
             bytes, most, max,
             most < max ? ", a sixteenth being kept for bodies up to 1 MiB"
                        : "");
}

/* Takes bytes from the budget for a body that will then hold total
 * reserved bytes; false when they do not fit. */
static bool http__reserve(server *srv, size_t bytes, size_t total)
{
    size_t max = http__budget_most(srv, total);
    size_t cur = atomic_load(&srv->buffered);
    do {
        if (cur > max || bytes > max - cur)
            return false;
    } while (!atomic_compare_exchange_weak(&srv->buffered, &cur, cur + bytes));
    return true;
}

/* Asks the kernel for huge pages under the 2 MiB-aligned part of the n
 * bytes at p, a body's buffer, when n is HTTP__HUGE_BODY or more. A large
 * body's buffer is fresh memory (malloc maps it for each body and unmaps
 * it after), and filling it a page of 4 KiB at a time costs a page fault
 * a page: some 15,000 for a body of 54 MB, more than half of such a
 * request's time on a paravirtualised guest (docs/performance.md). Where
 * the kernel has huge pages off, nothing changes. */
static void http__huge(void *p, size_t n)
{
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t e = ((uintptr_t)p + n) & ~(huge - 1);

    if (n >= HTTP__HUGE_BODY && e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
}

enum MHD_Result http__body_admit(http_request *r, struct MHD_Connection *c,
                                 unsigned long long declared)
{
    server *srv = r->srv;
    if (declared > srv->cfg.max_buffered_bytes ||
        (size_t)declared > http__budget_most(srv, (size_t)declared)) {
        /* Retrying cannot help: 413, like --max-body-bytes. */
        char msg[256];
        http__beyond_budget(srv, true, (size_t)declared, msg, sizeof msg);
        metrics_closed(srv->metrics, METRICS_CLOSED_TOO_LARGE);
        return http__error(r, c, ERRORS_TOO_LARGE, NULL, "%s", msg);
    }
    if (!http__reserve(srv, (size_t)declared, (size_t)declared)) {
        metrics_closed(srv->metrics, METRICS_CLOSED_BUDGET);
        return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                           "over capacity: a body of %llu bytes does not fit "
                           "in what --max-buffered-bytes "
                           "(ATTND_MAX_BUFFERED_BYTES, %zu) leaves for bodies "
                           "being received; retry later",
                           declared, srv->cfg.max_buffered_bytes);
    }
    r->reserved = (size_t)declared;
    r->body_hint = (size_t)declared;
    if (r->gc && declared >= HTTP__SINK_MIN) {
        /* The whole body's buffer now, so that guard.c reads what is left
         * of the body straight into it. */
        r->body = malloc((size_t)declared);
        if (r->body) {
            http__huge(r->body, (size_t)declared);
            r->body_cap = (size_t)declared;
            guard_body_sink(r->gc, r->body, declared);
        }
    }
    return MHD_YES;
}

void http__drop_body(http_request *r)
{
    free(r->body);
    r->body = NULL;
    r->body_len = r->body_cap = 0;
    if (r->reserved) {
        atomic_fetch_sub(&r->srv->buffered, r->reserved);
        r->reserved = 0;
    }
}

/* Why a body is refused mid-upload. */
typedef enum http__refusal {
    HTTP__REFUSE_BODY_LIMIT = 1, /* over --max-body-bytes: 413 (not 0:
                                    http_request's budget is 0 when the
                                    budget did not refuse the body) */
    HTTP__REFUSE_BUDGET_NOW,  /* the bodies being received leave no room
                                 for it: 503, retry later */
    HTTP__REFUSE_BUDGET_EVER  /* more than one body may hold of the
                                 budget: 413 */
} http__refusal;

/* The answer to a body --max-buffered-bytes refused (why: for now or for
 * good): its error, its count among the closed connections (*closed) and
 * its message. */
static errors_kind http__budget_refusal(const http_request *r,
                                        http__refusal why,
                                        metrics_close *closed, char *msg,
                                        size_t cap)
{
    if (why == HTTP__REFUSE_BUDGET_EVER) {
        http__beyond_budget(r->srv, false, r->bytes_in, msg, cap);
        *closed = METRICS_CLOSED_TOO_LARGE;
        return ERRORS_TOO_LARGE;
    }
    snprintf(msg, cap,
             "over capacity: the chunked body outgrew what "
             "--max-buffered-bytes (ATTND_MAX_BUFFERED_BYTES, %zu) "
             "leaves for bodies being received; retry later",
             r->srv->cfg.max_buffered_bytes);
    *closed = METRICS_CLOSED_BUDGET;
    return ERRORS_UNAVAILABLE;
}

/* A body refused mid-upload: cut off now when guard.c tracks the
 * connection (the answer is sent raw and the rest never read), else drained
 * and answered when it ends (http__attend). */
static void http__refuse_body(http_request *r, http__refusal why)
{
    server *srv = r->srv;
    r->discard = true;
    if (r->gc)
        guard_body_sink(r->gc, NULL, 0);
    r->budget = why == HTTP__REFUSE_BODY_LIMIT ? 0 : (int)why;
    http__drop_body(r);
    if (!r->gc)
        return;
    char msg[256];
    metrics_close closed = METRICS_CLOSED_TOO_LARGE;
    errors_kind kind = ERRORS_TOO_LARGE;
    if (r->budget)
        kind = http__budget_refusal(r, why, &closed, msg, sizeof msg);
    else
        snprintf(msg, sizeof msg,
                 "the request body is over the limit --max-body-bytes "
                 "(ATTND_MAX_BODY_BYTES) of %zu bytes",
                 srv->cfg.limits.max_body_bytes);
    r->status = errors_http_status(kind);
    r->error_code = errors_code(kind);
    r->cut = true;
    guard_request_cut_off(r->gc, closed, r->status, r->error_code, msg);
}

void http__take_body(http_request *r, const char *data, size_t size)
{
    size_t max = r->srv->cfg.limits.max_body_bytes;
    r->bytes_in += size;
    if (r->discard)
        return;
    if (size > max - r->body_len) {
        http__refuse_body(r, HTTP__REFUSE_BODY_LIMIT);
        return;
    }
    size_t need = r->body_len + size;
    if (need > r->body_cap) {
        if (need > http__budget_most(r->srv, need)) {
            http__refuse_body(r, HTTP__REFUSE_BUDGET_EVER);
            return;
        }
        /* A declared length is allocated whole, so a body is copied once;
         * without one the buffer doubles as data arrives, each growth
         * reserved from the budget first, and never past what one body
         * may hold of it: a body that fits is not refused for the
         * doubling's slack. */
        size_t cap = r->body_cap   ? r->body_cap
                     : r->body_hint ? r->body_hint /* reserved already */
                                    : 16384;
        while (cap < need)
            cap = cap > max / 2 ? max : cap * 2;
        size_t most = http__budget_most(r->srv, cap);
        if (cap > most)
            cap = most > need ? most : need;
        if (cap > r->reserved) {
            if (!http__reserve(r->srv, cap - r->reserved, cap)) {
                http__refuse_body(r, HTTP__REFUSE_BUDGET_NOW);
                return;
            }
            r->reserved = cap;
        }
        if (r->gc)
            guard_body_sink(r->gc, NULL, 0); /* the buffer moves */
        char *b = realloc(r->body, cap);
        if (!b) {
            /* Drained, then refused as a moment's shortage (503). */
            r->discard = true;
            r->body_oom = true;
            http__drop_body(r);
            return;
        }
        r->body = b;
        r->body_cap = cap;
    }
    /* Bytes from the offset guard.c began to read into the buffer itself
     * are in place already; libmicrohttpd's copy of them is stale. */
    uint64_t sunk = r->gc ? guard_body_sunk(r->gc) : UINT64_MAX;
    size_t copy = size;
    if (sunk < r->body_len + size)
        copy = sunk > r->body_len ? (size_t)(sunk - r->body_len) : 0;
    memcpy(r->body + r->body_len, data, copy);
    r->body_len += size;
}

static ssize_t http__body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http__body *b = cls;
    size_t n;
    if (b->head_off < b->head_len) {
        n = b->head_len - b->head_off < max ? b->head_len - b->head_off : max;
        memcpy(buf, b->head + b->head_off, n);
        b->head_off += n;
    } else {
        n = codec_writer_read(b->writer, buf, max);
    }
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    *b->bytes_out += n;
    if (b->gc)
        guard_request_sent(b->gc, n);
    return (ssize_t)n;
}

static void http__body_free(void *cls)
{
    http__body *b = cls;
    codec_writer_free(b->writer);
    free(b->head);
    free(b);
}

/* The end of a request's own thread: the connection resumes, after which
 * r is libmicrohttpd's again. */
static void http__resume(http_request *r)
{
    server *srv = r->srv;
    r->computed = true;
    MHD_resume_connection(r->conn);
    pthread_mutex_lock(&srv->mu);
    if (--srv->runners == 0)
        pthread_cond_broadcast(&srv->idle);
    pthread_mutex_unlock(&srv->mu);
}

/* Whether an answer's large arrays may be formatted on the compute pool
 * (codec_writer_gate): only while no other request holds a slot. With
 * others, the cores are busy anyway, and waiting for the pool would hold
 * up the libmicrohttpd thread that reads the answer out, and every other
 * connection it serves (workload 2 of make bench-http, 16 connections:
 * 149 req/s with the pool, 166 without). */
static bool http__pool_to_spare(void *ctx)
{
    server *srv = ctx;
    return atomic_load(&srv->attend_in_flight) <= 1;
}

/* While other requests hold slots, a request of at most this much work
 * (attn_cost's units: a few milliseconds of one core; workload 2 of make
 * bench-http has 87 million) computes on its own thread rather than as
 * tasks of the compute pool: the cores are busy with the others anyway,
 * and the tasks' hand-offs, the weights packed again for each tile and
 * the data moving to the pool's cores cost more than they gain (workload 2
 * under 16 connections: 7.72 against 8.09 ms of attnd's CPU a request, 7
 * alternating rounds). It is split into tasks as on the pool and they run
 * in turn (pool_inline_executor), so its answer has the same bytes, and
 * it stops at the next task when its client leaves. */
#define HTTP__OWN_THREAD_COST UINT64_C(256000000)

/* The answer of a computed request: its writer, which takes req, or the
 * 503 when there is no memory for it. */
static void http__writer_of(http_request *r, codec_request *req)
{
    r->writer = codec_writer_new(req); /* owns req from here */
    r->failed = r->writer == NULL;
    if (r->failed)
        codec_error_set(&r->err, ERRORS_UNAVAILABLE, NULL,
                        "out of memory for the response");
}

/* The computation of one request, on its own thread (or, when no thread
 * can be started, on the libmicrohttpd thread). Touches r only until it
 * resumes the connection. */
static void *http__compute(void *arg)
{
    http_request *r = arg;
    server *srv = r->srv;
    codec_request *req = NULL;
    memset(&r->err, 0, sizeof r->err);
    r->failed = true;
    if (r->route_tensors) {
        /* Hashing and parsing a tensor take a while too: not on the
         * threads that serve every connection. */
        r->store_rc = store_http_post(srv->store,
                                      r->has_type ? r->type : NULL,
                                      r->has_shape ? r->shape : NULL,
                                      r->body, r->body_len, &r->store_ans,
                                      &r->err);
        if (r->store_rc)
            r->store_ans.body = NULL;
        http__drop_body(r);
        http__resume(r);
        return NULL;
    }
    pool_set_cancel(&r->cancel);
    req = r->parsed; /* parsed on the libmicrohttpd thread, or NULL */
    r->parsed = NULL;
    if (!atomic_load(&r->cancel)) {
        int rc = req != NULL ? 0
                             : codec_parse_with(r->body ? r->body : "",
                                                r->body_len,
                                                &srv->cfg.limits, srv->store,
                                                &req, &r->err);
        /* The parsed request owns copies of everything it needs. */
        http__drop_body(r);
        double seconds = 0;
        const attn_executor *exec = pool_executor(srv->pool);
        if (rc == 0 && atomic_load(&srv->attend_in_flight) > 1 &&
            codec_request_cost(req) <= HTTP__OWN_THREAD_COST)
            exec = pool_inline_executor(srv->pool);
        if (rc == 0 && codec_run(req, exec, &r->err, &seconds) == 0) {
            metrics_compute(srv->metrics, seconds);
            r->failed = false;
        }
    }
    pool_set_cancel(NULL);
    if (atomic_load(&r->cancel)) {
        /* Its client has gone: whatever was computed is discarded. */
        metrics_cancelled(srv->metrics);
        r->failed = true;
        memset(&r->err, 0, sizeof r->err);
        codec_error_set(&r->err, ERRORS_UNAVAILABLE, NULL,
                        "the computation was cancelled: the server is "
                        "shutting down, or the client closed its side of "
                        "the connection before the answer (a half-close "
                        "counts as leaving: keep it open until the answer "
                        "has come)");
    } else if (!r->failed) {
        http__writer_of(r, req);
        req = NULL;
        if (r->writer)
            codec_writer_gate(r->writer, http__pool_to_spare, srv);
    }
    codec_request_free(req);
    http__resume(r);
    return NULL;
}

/* A body of at most HTTP__SMALL_BODY parses in about a millisecond (the
 * reader takes every form at over 1 GB/s), and a request whose work is
 * this small computes in tens of microseconds: such a request is answered
 * on the thread that read it, without suspending the connection or
 * starting a thread (which would cost more than the request). Anything
 * more goes to a thread of its own, parsed already. */
#define HTTP__INLINE_BODY HTTP__SMALL_BODY
#define HTTP__INLINE_COST UINT64_C(4000000)

static enum MHD_Result http__run_off_thread(http_request *r,
                                            struct MHD_Connection *c);

static enum MHD_Result http__attend_small(http_request *r,
                                          struct MHD_Connection *c)
{
    server *srv = r->srv;
    codec_request *req = NULL;
    double seconds = 0;

    memset(&r->err, 0, sizeof r->err);
    if (codec_parse_with(r->body ? r->body : "", r->body_len,
                         &srv->cfg.limits, srv->store, &req, &r->err) != 0) {
        http__drop_body(r);
        r->failed = true;
        r->computed = true;
        return http__attend(r, c);
    }
    http__drop_body(r);
    if (codec_request_cost(req) > HTTP__INLINE_COST) {
        r->parsed = req;
        return http__run_off_thread(r, c);
    }
    r->failed = true;
    if (codec_run(req, pool_inline_executor(srv->pool), &r->err, &seconds) ==
        0) {
        metrics_compute(srv->metrics, seconds);
        http__writer_of(r, req);
        req = NULL;
    }
    codec_request_free(req);
    r->computed = true;
    return http__attend(r, c);
}

/* Suspends the connection and runs http__compute on a thread of its own;
 * libmicrohttpd calls the access handler again once it resumes. */
static enum MHD_Result http__run_off_thread(http_request *r,
                                            struct MHD_Connection *c)
{
    server *srv = r->srv;
    r->suspended = true;
    pthread_mutex_lock(&srv->mu);
    srv->runners++;
    pthread_mutex_unlock(&srv->mu);
    if (r->gc)
        guard_request_work(r->gc, &r->cancel);
    MHD_suspend_connection(c);
    pthread_attr_t attr;
    pthread_t t;
    bool started = false;
    if (pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&t, &attr, http__compute, r) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started)
        http__compute(r); /* no thread to spare: compute here */
    return MHD_YES;
}

/* Copies a header or argument of c into buf; whether it was there and
 * fit. */
static bool http__copy_value(struct MHD_Connection *c, enum MHD_ValueKind kind,
                             const char *key, char *buf, size_t cap)
{
    const char *v = MHD_lookup_connection_value(c, kind, key);
    if (!v || strlen(v) >= cap)
        return false;
    memcpy(buf, v, strlen(v) + 1);
    return true;
}

enum MHD_Result http__attend(http_request *r, struct MHD_Connection *c)
{
    server *srv = r->srv;
    if (r->computed) {
        /* Resumed: answer. */
        if (r->route_tensors) {
            enum MHD_Result ret = http__store_answer(
                r, c, r->store_rc, &r->store_ans, &r->err);
            r->store_ans.body = NULL; /* the answer's now */
            return ret;
        }
        if (r->failed)
            return http__send_error(r, c, &r->err, NULL);
        char *whole = malloc(HTTP__WHOLE_ANSWER);
        size_t got = 0, k = 1;
        while (whole && got < HTTP__WHOLE_ANSWER &&
               (k = codec_writer_read(r->writer, whole + got,
                                      HTTP__WHOLE_ANSWER - got)) > 0)
            got += k;
        if (whole && k == 0) {
            /* the whole answer: sent with its length */
            codec_writer_free(r->writer);
            r->writer = NULL;
            struct MHD_Response *resp = MHD_create_response_from_buffer(
                got, whole, MHD_RESPMEM_MUST_FREE);
            if (!resp) {
                free(whole);
                return MHD_NO;
            }
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                    "application/json");
            return http__queue(r, c, 200, resp, got);
        }
        http__body *b = malloc(sizeof *b);
        if (!b) {
            free(whole);
            return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                               "out of memory for the response");
        }
        b->head = whole;
        b->head_len = got;
        b->head_off = 0;
        b->writer = r->writer;
        r->writer = NULL;
        b->bytes_out = &r->bytes_out;
        b->gc = r->gc;
        struct MHD_Response *resp = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, HTTP__BLOCK_SIZE, http__body_read, b,
            http__body_free);
        if (!resp) {
            http__body_free(b);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                "application/json");
        if (r->gc && !guard_request_send(r->gc)) {
            MHD_destroy_response(resp); /* guard.c answered: see http__queue */
            return MHD_NO;
        }
        r->claimed = true;
        /* bytes_out starts at 0 and grows block by block as it is sent. */
        return http__queue(r, c, 200, resp, 0);
    }
    if (r->suspended)
        return MHD_YES;
    if (r->discard && r->budget) {
        char msg[256];
        metrics_close closed;
        errors_kind kind = http__budget_refusal(r, (http__refusal)r->budget,
                                                &closed, msg, sizeof msg);
        metrics_closed(srv->metrics, closed);
        return http__error(r, c, kind, NULL, "%s", msg);
    }
    if (r->discard && r->body_oom)
        return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                           "out of memory for the request body of %zu "
                           "bytes; retry later",
                           r->bytes_in);
    if (r->discard) {
        metrics_closed(srv->metrics, METRICS_CLOSED_TOO_LARGE);
        return http__error(r, c, ERRORS_TOO_LARGE, NULL,
                           "the request body has %zu bytes; the limit "
                           "--max-body-bytes (ATTND_MAX_BODY_BYTES) is %zu",
                           r->bytes_in, srv->cfg.limits.max_body_bytes);
    }
    if (r->route_tensors) {
        /* POST /tensors: stored off the libmicrohttpd threads, without a
         * compute slot. A shape argument too long to copy is passed as
         * empty, which the store refuses. */
        r->has_type = http__copy_value(c, MHD_HEADER_KIND,
                                       MHD_HTTP_HEADER_CONTENT_TYPE, r->type,
                                       sizeof r->type);
        r->has_shape = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                   "shape") != NULL;
        if (r->has_shape &&
            !http__copy_value(c, MHD_GET_ARGUMENT_KIND, "shape", r->shape,
                              sizeof r->shape))
            r->shape[0] = '\0';
        return http__run_off_thread(r, c);
    }
    if (atomic_load(&srv->refusing)) {
        http__drop_body(r);
        return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                           "shutting down: not accepting new work");
    }
    /* One address holds at most its share of the slots, so that one
     * client (many connections asking for large answers that it reads
     * slowly) cannot hold every slot and lock the others out; a share of
     * all the slots or more is no limit. Taken before the global slot, so
     * that its refused attempts never hold a global slot even for a
     * moment. */
    size_t per_ip = srv->cfg.max_in_flight_per_ip;
    if (per_ip >= srv->cfg.limits.max_in_flight)
        per_ip = 0;
    if (per_ip && r->gc && !guard_slot_take(r->gc, per_ip)) {
        metrics_slot_refused(srv->metrics, METRICS_SLOT_IN_FLIGHT_PER_IP);
        http__drop_body(r);
        return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                           "over capacity: the limit --max-in-flight-per-ip "
                           "(ATTND_MAX_IN_FLIGHT_PER_IP) is %zu requests "
                           "computing at once from one client address, all "
                           "held by this address's requests; retry later",
                           per_ip);
    }
    r->ip_slot = per_ip && r->gc;
    /* Large bodies (their parsing alone takes a while) leave an eighth of
     * the slots, at least one, to small requests, as they leave part of
     * the body budget: a crowd of large uploads cannot lock out the small
     * requests of everyone else. */
    size_t slots = srv->cfg.limits.max_in_flight;
    if (r->body_len > HTTP__SMALL_BODY && slots > 1)
        slots -= slots / 8 ? slots / 8 : 1;
    size_t prev = atomic_fetch_add(&srv->attend_in_flight, 1);
    if (prev >= slots) {
        atomic_fetch_sub(&srv->attend_in_flight, 1);
        if (r->ip_slot) {
            guard_slot_give(r->gc);
            r->ip_slot = false;
        }
        metrics_slot_refused(srv->metrics, METRICS_SLOT_IN_FLIGHT);
        http__drop_body(r);
        char large[64] = "";
        if (slots < srv->cfg.limits.max_in_flight)
            snprintf(large, sizeof large, " (%zu for a body over 1 MiB)",
                     slots);
        return http__error(r, c, ERRORS_UNAVAILABLE, NULL,
                           "over capacity: the limit --max-in-flight "
                           "(ATTND_MAX_IN_FLIGHT) is %zu requests computing "
                           "at once%s, all taken; retry later",
                           srv->cfg.limits.max_in_flight, large);
    }
    r->attend_slot = true;
    if (r->body_len <= HTTP__INLINE_BODY)
        return http__attend_small(r, c);
    return http__run_off_thread(r, c);
}

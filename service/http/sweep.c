/* sweep.c: the connection layer's policy (see guard.h): the stages of a
 * request as the application reports them, the sweeper thread that applies
 * the deadlines and the rates, shutdown's closing, and the lifecycle. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "errors.h"
#include "http/guard_internal.h"

/* -- the stages of a request -------------------------------------------- */

void guard_request_begin(guard_conn *gc)
{
    atomic_fetch_add(&gc->seq, 1);
    atomic_store(&gc->responded, false);
    atomic_store(&gc->cut, 0);
    atomic_store(&gc->t_req, guard__now());
    atomic_store(&gc->app, GUARD__APP_REQ);
    guard_body_sink(gc, NULL, 0);
    gc->sink_from = UINT64_MAX;
}

bool guard_request_answer(guard_conn *gc)
{
    return !atomic_exchange(&gc->responded, true);
}

void guard_request_work(guard_conn *gc, atomic_bool *cancel)
{
    pthread_mutex_lock(&guard__mu);
    gc->cancel = cancel;
    atomic_store(&gc->app, GUARD__APP_WORK);
    bool all = gc->g->closing_all;
    pthread_mutex_unlock(&guard__mu);
    if (all)
        atomic_store(cancel, true);
}

bool guard_request_send(guard_conn *gc)
{
    pthread_mutex_lock(&guard__mu);
    gc->cancel = NULL;
    bool mine = !atomic_exchange(&gc->responded, true);
    if (mine)
        atomic_store(&gc->app, GUARD__APP_SEND);
    pthread_mutex_unlock(&guard__mu);
    return mine;
}

void guard_request_sent(guard_conn *gc, size_t bytes)
{
    atomic_fetch_add_explicit(&gc->tx, bytes, memory_order_relaxed);
}

void guard_request_end(guard_conn *gc)
{
    pthread_mutex_lock(&guard__mu);
    gc->cancel = NULL;
    atomic_store(&gc->t_idle, guard__now());
    atomic_store(&gc->app, GUARD__APP_NONE);
    pthread_mutex_unlock(&guard__mu);
    /* The answer was this request's: a head refused behind it (pipelined,
     * or sent later on the kept-alive connection) and a later head that
     * misses --header-timeout get their own (guard__refuse, guard__cut). */
    atomic_store(&gc->responded, false);
    guard_body_sink(gc, NULL, 0); /* before the request's buffer is freed */
    guard__wake_on_eof(gc);
}

int guard_request_cut(const guard_conn *gc)
{
    return atomic_load(&gc->cut);
}

/* -- the sweeper ---------------------------------------------------------- */

/* Closes one connection for a reason (under guard__mu), answering first
 * with status when it is not 0 and no answer has begun. */
static void guard__cut(guard_conn *gc, metrics_close why, int status,
                       const char *code, const char *message)
{
    /* Counted before the answer leaves, so a client that has it finds it
     * counted (the metrics' lock is never held while guard__mu is taken,
     * so taking it here is safe); logged later, outside guard__mu. */
    metrics_closed(gc->g->m, why);
    if (status && !atomic_exchange(&gc->responded, true)) {
        /* Marked before the answer leaves: a client that reads it and
         * closes at once ends the request on a libmicrohttpd thread, whose
         * log line must find it cut (and answered), not merely closed. */
        atomic_store(&gc->cut, (int)why + 1);
        guard__answer(gc->g, gc->fd, status, code, message, gc->fr.origin);
        /* The answer, then the end of the stream; what the client still
         * sends is read and dropped for a while (see recv) before the
         * connection closes, since closing with unread input would send a
         * reset that can destroy the answer before it is read. */
        guard__sys_shutdown(gc->fd, SHUT_WR);
        atomic_store(&gc->linger_until, guard__now() + GUARD__LINGER_NS);
        if (!atomic_exchange(&gc->dead, true))
            gc->g->dead++;
        return;
    } else if (why == METRICS_CLOSED_SLOW_READ) {
        /* A reader too slow for its answer: the
         * close resets the connection, so what the kernel still holds for
         * it is dropped now, not sent for minutes to a client that does not
         * read. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(gc->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    atomic_store(&gc->cut, (int)why + 1);
    guard__kill(gc);
}

/* Whether a rate-checked stage (kind, counter) fell under min bytes/s over
 * the last window; starts a new window when one is complete. */
static bool guard__slow(guard_conn *gc, int kind, uint64_t counter,
                        size_t min, int64_t now, int64_t window)
{
    uint64_t seq = atomic_load(&gc->seq);
    if (gc->snap_kind != kind || gc->snap_seq != seq) {
        gc->snap_kind = kind;
        gc->snap_seq = seq;
        gc->snap_t = now;
        gc->snap_bytes = counter;
        return false;
    }
    if (now - gc->snap_t < window)
        return false;
    double rate = (double)(counter - gc->snap_bytes) * 1e9 /
                  (double)(now - gc->snap_t);
    if (min && rate < (double)min)
        return true;
    gc->snap_t = now;
    gc->snap_bytes = counter;
    return false;
}

/* One pass over the connections (under guard__mu). The reasons of those
 * closed are collected in closed[] for the log and counts. */
static size_t guard__sweep(guard *g, metrics_close *closed, char (*peers)[INET6_ADDRSTRLEN],
                           size_t cap)
{
    const config *cfg = g->cfg;
    int64_t now = guard__now(), window = (int64_t)cfg->rate_window_s * 1000000000LL;
    size_t n = 0;
    for (guard_conn *c = g->conns; c; c = c->next) {
        if (atomic_load(&c->dead)) {
            /* The lingering after an answer is over: a shut-down read side
             * makes libmicrohttpd read once more, see the end and close. */
            int64_t until = atomic_load(&c->linger_until);
            if (until && (now >= until || g->closing_all)) {
                atomic_store(&c->linger_until, 0);
                guard__sys_shutdown(c->fd, SHUT_RD);
            }
            continue;
        }
        int app = atomic_load(&c->app);
        bool body = app == GUARD__APP_REQ && atomic_load(&c->in_body) &&
                    !atomic_load(&c->responded);
        int64_t t_head = atomic_load(&c->t_head);
        int why = -1;
        if (g->closing_all) {
            if (c->cancel)
                atomic_store(c->cancel, true);
            guard__cut(c, METRICS_CLOSED_SHUTDOWN,
                       body ? errors_http_status(ERRORS_UNAVAILABLE) : 0,
                       errors_code(ERRORS_UNAVAILABLE),
                       "shutting down: the request was cut off");
            why = METRICS_CLOSED_SHUTDOWN;
        } else if (g->refusing_uploads && body) {
            /* An upload would hold the exit back: refused now. A
             * connection between requests (or in a head) stays: its next
             * request is answered, /readyz 503 and /attend 503, with
             * Connection: close, and it closes after that answer or when
             * the process exits. */
            guard__cut(c, METRICS_CLOSED_SHUTDOWN,
                       errors_http_status(ERRORS_UNAVAILABLE),
                       errors_code(ERRORS_UNAVAILABLE),
                       "shutting down: not accepting new work");
            why = METRICS_CLOSED_SHUTDOWN;
        } else if (app == GUARD__APP_NONE && t_head &&
                   now - t_head > (int64_t)cfg->header_timeout_s * 1000000000LL) {
            guard__cut(c, METRICS_CLOSED_HEADER_TIMEOUT, errors_http_status(ERRORS_REQUEST_TIMEOUT),
                       errors_code(ERRORS_REQUEST_TIMEOUT),
                       "the request head did not arrive within "
                       "--header-timeout");
            why = METRICS_CLOSED_HEADER_TIMEOUT;
        } else if (body) {
            if (now - atomic_load(&c->t_req) >
                (int64_t)cfg->body_timeout_s * 1000000000LL) {
                guard__cut(c, METRICS_CLOSED_BODY_TIMEOUT, errors_http_status(ERRORS_REQUEST_TIMEOUT),
                           errors_code(ERRORS_REQUEST_TIMEOUT),
                           "the request body did not arrive within "
                           "--body-timeout");
                why = METRICS_CLOSED_BODY_TIMEOUT;
            } else if (guard__slow(c, 1, atomic_load(&c->rx),
                                   cfg->min_body_rate, now, window)) {
                guard__cut(c, METRICS_CLOSED_SLOW_BODY, errors_http_status(ERRORS_REQUEST_TIMEOUT),
                           errors_code(ERRORS_REQUEST_TIMEOUT),
                           "the request body arrived slower than "
                           "--min-body-rate");
                why = METRICS_CLOSED_SLOW_BODY;
            }
        } else if (app == GUARD__APP_SEND) {
            /* The answer's pace is what the client has acknowledged, not
             * what was written: the kernel's send buffer (megabytes,
             * autotuned) takes a burst, after which a writer is woken
             * only once a third of it is free, so writes can be further
             * apart than a window while the client reads steadily (15 s
             * apart for one reading 90 KiB/s). The bytes written are the
             * measure only where the kernel keeps no count. */
            uint64_t acked = guard__acked(c->fd, atomic_load(&c->tx));
            if (guard__slow(c, 2, acked, cfg->min_send_rate, now, window)) {
                guard__cut(c, METRICS_CLOSED_SLOW_READ, 0, NULL, NULL);
                why = METRICS_CLOSED_SLOW_READ;
            }
        } else if (app == GUARD__APP_WORK && c->cancel &&
                   !atomic_load(c->cancel) && !atomic_load(&c->rd_shut)) {
            /* A client gone while its request computes: the end of its
             * stream (or an error) is readable, unless this layer shut
             * the read side itself (guard.c, a refused head behind the
             * request). */
            struct pollfd pfd = {.fd = c->fd, .events = POLLRDHUP};
            if (poll(&pfd, 1, 0) == 1 &&
                (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                atomic_store(c->cancel, true);
        } else {
            c->snap_kind = 0;
        }
        if (why >= 0 && n < cap) {
            closed[n] = (metrics_close)why;
            memcpy(peers[n], c->peer, sizeof peers[n]);
            n++;
        }
    }
    return n;
}

void guard_request_cut_off(guard_conn *gc, metrics_close why, int status,
                           const char *code, const char *message)
{
    char peer[INET6_ADDRSTRLEN];
    pthread_mutex_lock(&guard__mu);
    guard__cut(gc, why, status, code, message);
    memcpy(peer, gc->peer, sizeof peer);
    pthread_mutex_unlock(&guard__mu);
    guard__log_close(gc->g, why, peer);
}

static void guard__sweep_and_report(guard *g)
{
    enum { CAP = 256 };
    static _Thread_local metrics_close closed[CAP];
    static _Thread_local char peers[CAP][INET6_ADDRSTRLEN];
    pthread_mutex_lock(&guard__mu);
    size_t n = guard__sweep(g, closed, peers, CAP);
    pthread_mutex_unlock(&guard__mu);
    for (size_t i = 0; i < n; i++)
        guard__log_close(g, closed[i], peers[i]);
}

static void *guard__main(void *arg)
{
    guard *g = arg;
    int64_t next_sweep = guard__now() + GUARD__TICK_NS;
    pthread_mutex_lock(&guard__mu);
    while (!g->stopping) {
        /* every tick a sweep; while connections linger, their input is
         * read every GUARD__LINGER_TICK_NS in between */
        int64_t at = g->n_lingering ? guard__now() + GUARD__LINGER_TICK_NS
                                    : next_sweep;
        if (at > next_sweep)
            at = next_sweep;
        struct timespec ts = {(time_t)(at / 1000000000LL),
                              (long)(at % 1000000000LL)};
        pthread_cond_timedwait(&g->wake, &guard__mu, &ts);
        if (g->stopping)
            break;
        bool lingering = g->n_lingering != 0;
        pthread_mutex_unlock(&guard__mu);
        if (lingering)
            guard__linger_drain(g, false);
        if (guard__now() >= next_sweep) {
            guard__sweep_and_report(g);
            next_sweep = guard__now() + GUARD__TICK_NS;
        }
        pthread_mutex_lock(&guard__mu);
    }
    pthread_mutex_unlock(&guard__mu);
    guard__linger_drain(g, true);
    return NULL;
}

/* -- lifecycle -------------------------------------------------------------- */

int guard_start(const config *cfg, metrics *m, guard **out)
{
    *out = NULL;
    pthread_mutex_lock(&guard__mu);
    int rc = guard__table_init();
    pthread_mutex_unlock(&guard__mu);
    if (rc)
        return -1;
    guard *g = calloc(1, sizeof *g);
    if (!g)
        return -1;
    g->cfg = cfg;
    g->m = m;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&g->sweeper, NULL, guard__main, g)) {
        pthread_cond_destroy(&g->wake);
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void guard_finish_by(guard *g, const struct timespec *deadline)
{
    pthread_mutex_lock(&guard__mu);
    g->finish_by = (int64_t)deadline->tv_sec * 1000000000LL + deadline->tv_nsec;
    if (!g->finish_by)
        g->finish_by = 1; /* 0 means not finishing */
    pthread_mutex_unlock(&guard__mu);
}

void guard_free(guard *g)
{
    if (!g)
        return;
    guard__unlisten(g);
    pthread_mutex_lock(&guard__mu);
    /* The connections closed last linger first: until their clients have
     * the answers (guard__linger_drain), by the shutdown's deadline or,
     * without one, by their own. */
    int64_t by = g->finish_by ? g->finish_by : guard__now() + GUARD__LINGER_NS;
    struct timespec ts = {(time_t)(by / 1000000000LL),
                          (long)(by % 1000000000LL)};
    while (g->n_lingering &&
           pthread_cond_timedwait(&g->wake, &guard__mu, &ts) != ETIMEDOUT)
        ;
    g->stopping = true;
    pthread_cond_broadcast(&g->wake);
    pthread_mutex_unlock(&guard__mu);
    pthread_join(g->sweeper, NULL);
    pthread_mutex_lock(&guard__mu);
    /* Connections libmicrohttpd never closed (none, normally) stay open
     * but are no longer this guard's. */
    while (g->conns) {
        guard_conn *gc = guard__forget(g->conns->fd);
        free(gc->in);
        free(gc);
    }
    pthread_mutex_unlock(&guard__mu);
    pthread_cond_destroy(&g->wake);
    free(g);
}

void guard_refuse_uploads(guard *g)
{
    pthread_mutex_lock(&guard__mu);
    g->refusing_uploads = true;
    pthread_mutex_unlock(&guard__mu);
    guard__sweep_and_report(g);
}

void guard_close_all(guard *g)
{
    pthread_mutex_lock(&guard__mu);
    g->refusing_uploads = g->closing_all = true;
    pthread_mutex_unlock(&guard__mu);
    guard__sweep_and_report(g);
}

size_t guard_thread_connections(guard *g, size_t *held, size_t cap)
{
    pthread_mutex_lock(&guard__mu);
    size_t n = g->slots_taken < cap ? g->slots_taken : cap;
    for (size_t i = 0; i < n; i++)
        held[i] = g->held[i];
    pthread_mutex_unlock(&guard__mu);
    return n;
}

void guard_counts(guard *g, size_t *open, size_t *idle)
{
    size_t o = 0, i = 0;
    pthread_mutex_lock(&guard__mu);
    for (guard_conn *c = g->conns; c; c = c->next) {
        if (atomic_load(&c->dead))
            continue;
        o++;
        if (atomic_load(&c->app) == GUARD__APP_NONE &&
            atomic_load(&c->t_head) == 0)
            i++;
    }
    pthread_mutex_unlock(&guard__mu);
    *open = o;
    *idle = i;
}

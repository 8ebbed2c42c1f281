/* guard.c: the connection layer under libmicrohttpd (see guard.h): the
 * accept4, recv and close it calls, a table of connections by descriptor,
 * and the sweeper thread that applies deadlines. */
#define _GNU_SOURCE /* accept4, POLLRDHUP */
#include "http/guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "http/framing.h"
#include "log.h"

/* Bytes read ahead while a head is being checked: a head at its limit and
 * the start of what follows. */
#define GUARD__IN_CAP (FRAMING_MAX_HEAD + 4096)
/* How long input is still read and dropped after a raw answer, so the
 * client, perhaps still sending, reads the answer instead of a reset. */
#define GUARD__LINGER_NS 2000000000LL
/* Sweeper period, nanoseconds. */
#define GUARD__TICK_NS 250000000LL
/* Per-address counts: buckets of a chained hash. */
#define GUARD__IP_BUCKETS 4096
/* Listening sockets of all guards in the process (tests run several). */
#define GUARD__MAX_LISTENERS 16

typedef enum guard__app {
    GUARD__APP_NONE, /* no request at the application */
    GUARD__APP_REQ,  /* begun: its body may be arriving, or it is answered */
    GUARD__APP_WORK, /* suspended while its computation runs */
    GUARD__APP_SEND  /* its streamed answer is being read */
} guard__app;

typedef struct guard__ip {
    unsigned char addr[16];
    size_t count;
    struct guard__ip *next;
} guard__ip;

struct guard_conn {
    guard *g;
    int fd;
    unsigned char addr[16];
    char peer[INET6_ADDRSTRLEN];
    guard_conn *prev, *next; /* g's list, under guard__mu */

    /* Read by the sweeper, written by the connection's libmicrohttpd
     * thread and the request's callbacks. */
    _Atomic int64_t t_idle; /* since when between requests */
    _Atomic int64_t t_head; /* first byte of an unfinished head, 0: none */
    _Atomic int64_t t_req;  /* the current request's start */
    atomic_int app;
    atomic_bool in_body; /* the framing is inside a body */
    atomic_bool responded;
    atomic_bool dead; /* shut down by this layer: reads see the end */
    _Atomic int64_t linger_until; /* an answer sent: input drained until */
    atomic_int cut;   /* METRICS_CLOSED_* + 1 */
    _Atomic uint64_t seq, rx, tx;
    atomic_bool *cancel; /* under guard__mu */

    /* The sweeper's own: the rate window. */
    uint64_t snap_seq, snap_bytes;
    int64_t snap_t;
    int snap_kind;

    /* The libmicrohttpd thread's own: framing and held-back bytes. */
    framing fr;
    char *in;
    size_t in_len, in_ready; /* in[0..in_ready) is classified */
    framing_error reject;     /* to answer at the next read */
    bool eof;
};

struct guard {
    const config *cfg;
    metrics *m;
    guard_conn *conns; /* list head */
    size_t open, dead;
    guard__ip *ips[GUARD__IP_BUCKETS];
    bool closing_idle, closing_all, stopping;
    pthread_t sweeper;
    pthread_cond_t wake;
    /* log rate limit, per reason: last line's time and lines held back */
    int64_t log_t[METRICS_CLOSED_COUNT + METRICS_REFUSED_COUNT];
    unsigned log_held[METRICS_CLOSED_COUNT + METRICS_REFUSED_COUNT];
};

static pthread_mutex_t guard__mu = PTHREAD_MUTEX_INITIALIZER;
static guard_conn *_Atomic *guard__table; /* by descriptor */
static size_t guard__table_size;
static struct {
    int fd;
    guard *g;
} guard__listeners[GUARD__MAX_LISTENERS];

static int64_t guard__now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static ssize_t guard__sys_recv(int fd, void *buf, size_t len, int flags)
{
    return (ssize_t)syscall(SYS_recvfrom, fd, buf, len, flags, NULL, NULL);
}

static int guard__sys_close(int fd)
{
    return (int)syscall(SYS_close, fd);
}

/* -- raw answers ------------------------------------------------------------ */

bool guard_origin_listed(const char *list, const char *origin)
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

static const char *guard__reason(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* Sends a whole answer with the contract's error body and Connection:
 * close, without blocking; a client that cannot take it loses it. */
static void guard__answer(const guard *g, int fd, int status,
                          const char *code, const char *message,
                          const char *origin)
{
    char body[512], head[1024];
    size_t blen = 0;
    blen = (size_t)snprintf(body, sizeof body, "{\"error\":{\"code\":\"%s\","
                                               "\"message\":",
                            code);
    log_json_string(body, &blen, sizeof body - 3, message);
    memcpy(body + blen, "}}", 3);
    blen += 2;
    const char *cors = g->cfg->cors_origins;
    char acao[400] = "";
    if (!strcmp(cors, "*"))
        snprintf(acao, sizeof acao, "Access-Control-Allow-Origin: *\r\n");
    else if (origin && origin[0] && guard_origin_listed(cors, origin))
        snprintf(acao, sizeof acao,
                 "Vary: Origin\r\nAccess-Control-Allow-Origin: %.300s\r\n",
                 origin);
    else
        snprintf(acao, sizeof acao, "Vary: Origin\r\n");
    int hlen = snprintf(head, sizeof head,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\n%s%s\r\n",
                        status, guard__reason(status), blen,
                        status == 503 ? "Retry-After: 1\r\n" : "", acao);
    struct iovec iov[2] = {{head, (size_t)hlen}, {body, blen}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t n = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n;
}

/* One log line per reason a second at most; the lines held back meanwhile
 * are counted in the next. Called without guard__mu. */
static void guard__log(guard *g, size_t slot, const char *what,
                       const char *reason, const char *peer)
{
    int64_t now = guard__now();
    unsigned held;
    pthread_mutex_lock(&guard__mu);
    if (now - g->log_t[slot] < 1000000000LL) {
        g->log_held[slot]++;
        pthread_mutex_unlock(&guard__mu);
        return;
    }
    g->log_t[slot] = now;
    held = g->log_held[slot];
    g->log_held[slot] = 0;
    pthread_mutex_unlock(&guard__mu);
    char extra[256];
    size_t len = (size_t)snprintf(extra, sizeof extra, "\"reason\":\"%s\","
                                                       "\"peer\":",
                                  reason);
    log_json_string(extra, &len, sizeof extra - 40, peer);
    snprintf(extra + len, sizeof extra - len, ",\"suppressed\":%u", held);
    log_event("warn", what, extra);
}

static void guard__closed(guard *g, metrics_close why, const char *peer)
{
    metrics_closed(g->m, why);
    guard__log(g, (size_t)why, "connection closed", metrics_close_name(why),
               peer);
}

/* -- the table ---------------------------------------------------------- */

static guard_conn *guard__lookup(int fd)
{
    if (fd < 0 || (size_t)fd >= guard__table_size || !guard__table)
        return NULL;
    return atomic_load_explicit(&guard__table[fd], memory_order_acquire);
}

guard_conn *guard_conn_of(int fd)
{
    return guard__lookup(fd);
}

static guard__ip **guard__ip_slot(guard *g, const unsigned char *addr)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < 16; i++)
        h = (h ^ addr[i]) * 1099511628211ULL;
    guard__ip **p = &g->ips[h % GUARD__IP_BUCKETS];
    while (*p && memcmp((*p)->addr, addr, 16))
        p = &(*p)->next;
    return p;
}

/* Shuts a connection down (under guard__mu): its reads see the end, and
 * libmicrohttpd closes it. */
static void guard__kill(guard_conn *gc)
{
    if (atomic_exchange(&gc->dead, true))
        return;
    gc->g->dead++;
    shutdown(gc->fd, SHUT_RDWR);
}

/* The address as a 16-byte key (IPv4 as v4-mapped IPv6) and as text. */
static void guard__peer_key(const struct sockaddr_storage *ss,
                            unsigned char addr[16], char *text, size_t cap)
{
    memset(addr, 0, 16);
    snprintf(text, cap, "?");
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const void *)ss;
        memcpy(addr + 12, &v4->sin_addr, 4);
        addr[10] = addr[11] = 0xff;
        inet_ntop(AF_INET, &v4->sin_addr, text, (socklen_t)cap);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const void *)ss;
        memcpy(addr, &v6->sin6_addr, 16);
        inet_ntop(AF_INET6, &v6->sin6_addr, text, (socklen_t)cap);
    }
}

static void guard__peer(const struct sockaddr_storage *ss, char *text,
                        size_t cap)
{
    unsigned char addr[16];
    guard__peer_key(ss, addr, text, cap);
}

/* Admits a new connection, or says why not (under guard__mu). */
static int guard__admit(guard *g, int fd, const struct sockaddr_storage *ss,
                        guard_conn **evicted)
{
    unsigned char addr[16];
    char peer[INET6_ADDRSTRLEN];
    guard__peer_key(ss, addr, peer, sizeof peer);
    if ((size_t)fd >= guard__table_size)
        return METRICS_REFUSED_FULL;
    guard__ip **slot = guard__ip_slot(g, addr);
    size_t per_ip = g->cfg->max_connections_per_ip;
    if (per_ip && *slot && (*slot)->count >= per_ip)
        return METRICS_REFUSED_PER_IP;
    if (g->open - g->dead >= g->cfg->max_connections) {
        /* Full: the keep-alive connection idle the longest makes room. */
        guard_conn *old = NULL;
        for (guard_conn *c = g->conns; c; c = c->next)
            if (!atomic_load(&c->dead) && atomic_load(&c->app) == GUARD__APP_NONE &&
                atomic_load(&c->t_head) == 0 && !c->in_len &&
                (!old || atomic_load(&c->t_idle) < atomic_load(&old->t_idle)))
                old = c;
        if (!old)
            return METRICS_REFUSED_FULL;
        guard__kill(old);
        *evicted = old;
    }
    guard_conn *gc = calloc(1, sizeof *gc);
    guard__ip *ip = *slot ? *slot : calloc(1, sizeof *ip);
    if (!gc || !ip) {
        free(gc);
        if (ip != *slot)
            free(ip);
        return METRICS_REFUSED_FULL;
    }
    if (!*slot) {
        memcpy(ip->addr, addr, 16);
        *slot = ip;
    }
    ip->count++;
    gc->g = g;
    gc->fd = fd;
    memcpy(gc->addr, addr, 16);
    memcpy(gc->peer, peer, sizeof peer);
    atomic_init(&gc->t_idle, guard__now());
    gc->next = g->conns;
    if (g->conns)
        g->conns->prev = gc;
    g->conns = gc;
    g->open++;
    atomic_store_explicit(&guard__table[fd], gc, memory_order_release);
    return -1;
}

/* Drops fd's connection (under guard__mu); returns it to be freed. */
static guard_conn *guard__forget(int fd)
{
    guard_conn *gc = guard__lookup(fd);
    if (!gc)
        return NULL;
    guard *g = gc->g;
    atomic_store(&guard__table[fd], NULL);
    if (gc->prev)
        gc->prev->next = gc->next;
    else
        g->conns = gc->next;
    if (gc->next)
        gc->next->prev = gc->prev;
    g->open--;
    if (atomic_load(&gc->dead))
        g->dead--;
    guard__ip **slot = guard__ip_slot(g, gc->addr);
    if (*slot && --(*slot)->count == 0) {
        guard__ip *ip = *slot;
        *slot = ip->next;
        free(ip);
    }
    pthread_cond_broadcast(&g->wake);
    return gc;
}

/* -- the calls libmicrohttpd makes ---------------------------------------- */

__attribute__((visibility("default"))) int accept4(int lfd,
                                                  struct sockaddr *addr,
                                                  socklen_t *alen, int flags);
__attribute__((visibility("default"))) ssize_t recv(int fd, void *buf,
                                                   size_t len, int flags);
__attribute__((visibility("default"))) int close(int fd);

int accept4(int lfd, struct sockaddr *addr, socklen_t *alen, int flags)
{
    guard *g = NULL;
    pthread_mutex_lock(&guard__mu);
    for (size_t i = 0; i < GUARD__MAX_LISTENERS; i++)
        if (guard__listeners[i].g && guard__listeners[i].fd == lfd)
            g = guard__listeners[i].g;
    pthread_mutex_unlock(&guard__mu);
    if (!g)
        return (int)syscall(SYS_accept4, lfd, addr, alen, flags);
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        memset(&ss, 0, sizeof ss);
        int fd = (int)syscall(SYS_accept4, lfd, &ss, &sl, flags);
        if (fd < 0)
            return fd;
        if (addr && alen) {
            memcpy(addr, &ss, *alen < sl ? *alen : sl);
            *alen = sl;
        }
        guard_conn *evicted = NULL;
        pthread_mutex_lock(&guard__mu);
        int why = guard__admit(g, fd, &ss, &evicted);
        char peer[INET6_ADDRSTRLEN];
        if (evicted)
            memcpy(peer, evicted->peer, sizeof peer);
        pthread_mutex_unlock(&guard__mu);
        if (evicted)
            guard__closed(g, METRICS_CLOSED_IDLE_EVICTED, peer);
        if (why < 0)
            return fd;
        guard__answer(g, fd, 503, "unavailable",
                      why == METRICS_REFUSED_PER_IP
                          ? "too many connections from this address: the "
                            "limit --max-connections-per-ip"
                          : "too many connections: the limit "
                            "--max-connections",
                      NULL);
        guard__sys_close(fd);
        metrics_refused(g->m, (metrics_refusal)why);
        guard__peer(&ss, peer, sizeof peer);
        guard__log(g, METRICS_CLOSED_COUNT + (size_t)why,
                   "connection refused", metrics_refusal_name((metrics_refusal)why),
                   peer);
    }
}

int close(int fd)
{
    if (guard__lookup(fd)) {
        pthread_mutex_lock(&guard__mu);
        guard_conn *gc = guard__forget(fd);
        pthread_mutex_unlock(&guard__mu);
        if (gc) {
            free(gc->in);
            free(gc);
        }
    } else if (fd >= 0) {
        pthread_mutex_lock(&guard__mu);
        for (size_t i = 0; i < GUARD__MAX_LISTENERS; i++)
            if (guard__listeners[i].g && guard__listeners[i].fd == fd)
                guard__listeners[i].g = NULL;
        pthread_mutex_unlock(&guard__mu);
    }
    return guard__sys_close(fd);
}

/* Answers a framing error (when no answer has begun) and ends the
 * connection after the lingering that guard__cut describes. Returns what
 * recv returns meanwhile. */
static ssize_t guard__refuse(guard_conn *gc)
{
    if (!atomic_load(&gc->responded))
        guard__answer(gc->g, gc->fd, gc->reject.status, gc->reject.code,
                      gc->reject.message, gc->fr.origin);
    atomic_store(&gc->responded, true);
    shutdown(gc->fd, SHUT_WR);
    atomic_store(&gc->linger_until, guard__now() + GUARD__LINGER_NS);
    if (!atomic_exchange(&gc->dead, true)) {
        pthread_mutex_lock(&guard__mu);
        gc->g->dead++;
        pthread_mutex_unlock(&guard__mu);
    }
    /* Counted as an answered request like any other error. */
    metrics_request_begin(gc->g->m);
    metrics_request_end(gc->g->m, "other", gc->reject.status, 0, 0, 0);
    guard__closed(gc->g, METRICS_CLOSED_FRAMING, gc->peer);
    return recv(gc->fd, NULL, 0, 0);
}

/* Classifies what is in gc->in; a head still arriving stays. */
static void guard__classify(guard_conn *gc)
{
    size_t k = framing_scan(&gc->fr, gc->in + gc->in_ready,
                            gc->in_len - gc->in_ready, &gc->reject);
    gc->in_ready += k;
    atomic_store(&gc->in_body, framing_in_body(&gc->fr));
    bool pending = gc->fr.in_head && gc->in_ready < gc->in_len;
    if (pending && atomic_load(&gc->t_head) == 0)
        atomic_store(&gc->t_head, guard__now());
    else if (!pending)
        atomic_store(&gc->t_head, 0);
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    guard_conn *gc = guard__lookup(fd);
    if (!gc || flags)
        return guard__sys_recv(fd, buf, len, flags);
    if (atomic_load(&gc->dead)) {
        int64_t until = atomic_load(&gc->linger_until);
        if (!until || guard__now() >= until)
            return 0;
        char sink[16384];
        for (;;) {
            ssize_t r = guard__sys_recv(fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r == 0)
                return 0; /* the client has read the answer and left */
            if (r < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? -1 : 0;
        }
    }
    if (gc->reject.status)
        return guard__refuse(gc);
    char *out = buf;
    size_t n = 0;
    for (;;) {
        /* Bytes already classified go first. */
        if (gc->in_ready) {
            size_t k = gc->in_ready < len - n ? gc->in_ready : len - n;
            memcpy(out + n, gc->in, k);
            memmove(gc->in, gc->in + k, gc->in_len - k);
            gc->in_len -= k;
            gc->in_ready -= k;
            n += k;
            if (!gc->in_len) {
                free(gc->in);
                gc->in = NULL;
            }
        }
        if (n == len)
            return (ssize_t)n; /* full: libmicrohttpd reads again */
        if (gc->reject.status || gc->eof)
            break;
        uint64_t direct = framing_direct(&gc->fr);
        ssize_t r;
        if (direct && !gc->in_len) {
            /* Body bytes straight into libmicrohttpd's buffer. */
            size_t want = len - n < direct ? len - n : (size_t)direct;
            r = guard__sys_recv(fd, out + n, want, 0);
            if (r > 0) {
                framing_error none = {0};
                framing_scan(&gc->fr, out + n, (size_t)r, &none);
                atomic_store(&gc->in_body, framing_in_body(&gc->fr));
                atomic_fetch_add(&gc->rx, (uint64_t)r);
                n += (size_t)r;
                if ((size_t)r < want)
                    break; /* the socket is drained */
                continue;
            }
        } else {
            if (!gc->in && !(gc->in = malloc(GUARD__IN_CAP)))
                break;
            size_t room = GUARD__IN_CAP - gc->in_len;
            r = guard__sys_recv(fd, gc->in + gc->in_len, room, 0);
            if (r > 0) {
                bool was_body = framing_in_body(&gc->fr);
                gc->in_len += (size_t)r;
                guard__classify(gc);
                if (was_body || framing_in_body(&gc->fr))
                    atomic_fetch_add(&gc->rx, (uint64_t)r);
                if (!gc->in_ready && gc->in_len == GUARD__IN_CAP &&
                    !gc->reject.status) {
                    gc->reject.status = 431;
                    gc->reject.code = "too_large";
                    snprintf(gc->reject.message, sizeof gc->reject.message,
                             "the request head is over %d bytes",
                             FRAMING_MAX_HEAD);
                }
                if ((size_t)r < room && !gc->in_ready)
                    break; /* drained, nothing new to hand on */
                continue;
            }
        }
        if (r == 0) {
            gc->eof = true;
            break;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            break;
        if (n)
            break; /* the error comes back on the next read */
        return -1;
    }
    if (n && gc->reject.status) {
        /* What came before the error is handed on now; a shut-down read
         * side makes libmicrohttpd read again, and the error is answered
         * then. */
        shutdown(fd, SHUT_RD);
        return (ssize_t)n;
    }
    if (n)
        return (ssize_t)n;
    if (gc->reject.status)
        return guard__refuse(gc);
    if (gc->eof)
        return 0;
    errno = EAGAIN;
    return -1;
}

/* -- the stages of a request -------------------------------------------- */

void guard_request_begin(guard_conn *gc)
{
    atomic_fetch_add(&gc->seq, 1);
    atomic_store(&gc->responded, false);
    atomic_store(&gc->cut, 0);
    atomic_store(&gc->t_req, guard__now());
    atomic_store(&gc->app, GUARD__APP_REQ);
}

void guard_request_responded(guard_conn *gc)
{
    atomic_store(&gc->responded, true);
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

void guard_request_send(guard_conn *gc)
{
    pthread_mutex_lock(&guard__mu);
    gc->cancel = NULL;
    atomic_store(&gc->responded, true);
    atomic_store(&gc->app, GUARD__APP_SEND);
    pthread_mutex_unlock(&guard__mu);
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
    if (status && !atomic_load(&gc->responded)) {
        atomic_store(&gc->responded, true);
        guard__answer(gc->g, gc->fd, status, code, message, gc->fr.origin);
        /* The answer, then the end of the stream; what the client still
         * sends is read and dropped for a while (see recv) before the
         * connection closes, since closing with unread input would send a
         * reset that can destroy the answer before it is read. */
        shutdown(gc->fd, SHUT_WR);
        atomic_store(&gc->linger_until, guard__now() + GUARD__LINGER_NS);
        atomic_store(&gc->cut, (int)why + 1);
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
                shutdown(c->fd, SHUT_RD);
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
            guard__cut(c, METRICS_CLOSED_SHUTDOWN, body ? 503 : 0,
                       "unavailable", "shutting down: the request was cut off");
            why = METRICS_CLOSED_SHUTDOWN;
        } else if (g->closing_idle && (app == GUARD__APP_NONE || body)) {
            guard__cut(c, METRICS_CLOSED_SHUTDOWN,
                       body || t_head ? 503 : 0, "unavailable",
                       "shutting down: not accepting new work");
            why = METRICS_CLOSED_SHUTDOWN;
        } else if (app == GUARD__APP_NONE && t_head &&
                   now - t_head > (int64_t)cfg->header_timeout_s * 1000000000LL) {
            guard__cut(c, METRICS_CLOSED_HEADER_TIMEOUT, 408,
                       "request_timeout",
                       "the request head did not arrive within "
                       "--header-timeout");
            why = METRICS_CLOSED_HEADER_TIMEOUT;
        } else if (body) {
            if (now - atomic_load(&c->t_req) >
                (int64_t)cfg->body_timeout_s * 1000000000LL) {
                guard__cut(c, METRICS_CLOSED_BODY_TIMEOUT, 408,
                           "request_timeout",
                           "the request body did not arrive within "
                           "--body-timeout");
                why = METRICS_CLOSED_BODY_TIMEOUT;
            } else if (guard__slow(c, 1, atomic_load(&c->rx),
                                   cfg->min_body_rate, now, window)) {
                guard__cut(c, METRICS_CLOSED_SLOW_BODY, 408,
                           "request_timeout",
                           "the request body arrived slower than "
                           "--min-body-rate");
                why = METRICS_CLOSED_SLOW_BODY;
            }
        } else if (app == GUARD__APP_SEND) {
            if (guard__slow(c, 2, atomic_load(&c->tx), cfg->min_send_rate,
                            now, window)) {
                guard__cut(c, METRICS_CLOSED_SLOW_READ, 0, NULL, NULL);
                why = METRICS_CLOSED_SLOW_READ;
            }
        } else if (app == GUARD__APP_WORK && c->cancel &&
                   !atomic_load(c->cancel)) {
            /* A client gone while its request computes: the end of its
             * stream (or an error) is readable. */
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
    guard__closed(gc->g, why, peer);
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
        guard__closed(g, closed[i], peers[i]);
}

static void *guard__main(void *arg)
{
    guard *g = arg;
    pthread_mutex_lock(&guard__mu);
    while (!g->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += GUARD__TICK_NS;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->wake, &guard__mu, &ts);
        if (g->stopping)
            break;
        pthread_mutex_unlock(&guard__mu);
        guard__sweep_and_report(g);
        pthread_mutex_lock(&guard__mu);
    }
    pthread_mutex_unlock(&guard__mu);
    return NULL;
}

/* -- lifecycle -------------------------------------------------------------- */

/* The descriptor table, made once for the process at the size of
 * RLIMIT_NOFILE, whose soft limit is first raised to the hard one so that
 * --max-connections can be in the tens of thousands. */
static int guard__table_init(void)
{
    if (guard__table)
        return 0;
    struct rlimit rl;
    size_t size = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rlim_t want = rl.rlim_max;
            if (want == RLIM_INFINITY || want > (1u << 20))
                want = 1u << 20;
            rl.rlim_cur = want;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > size)
            size = rl.rlim_cur > (1u << 20) ? (1u << 20) : (size_t)rl.rlim_cur;
    }
    guard_conn *_Atomic *t = calloc(size, sizeof *t);
    if (!t)
        return -1;
    guard__table_size = size;
    guard__table = t;
    return 0;
}

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

size_t guard_max_descriptors(void)
{
    return guard__table_size;
}

void guard_listen(guard *g, int fd)
{
    pthread_mutex_lock(&guard__mu);
    for (size_t i = 0; i < GUARD__MAX_LISTENERS; i++)
        if (!guard__listeners[i].g) {
            guard__listeners[i].fd = fd;
            guard__listeners[i].g = g;
            break;
        }
    pthread_mutex_unlock(&guard__mu);
}

void guard_free(guard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&guard__mu);
    g->stopping = true;
    pthread_cond_broadcast(&g->wake);
    for (size_t i = 0; i < GUARD__MAX_LISTENERS; i++)
        if (guard__listeners[i].g == g)
            guard__listeners[i].g = NULL;
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

void guard_close_idle(guard *g)
{
    pthread_mutex_lock(&guard__mu);
    g->closing_idle = true;
    pthread_mutex_unlock(&guard__mu);
    guard__sweep_and_report(g);
}

void guard_close_all(guard *g)
{
    pthread_mutex_lock(&guard__mu);
    g->closing_idle = g->closing_all = true;
    pthread_mutex_unlock(&guard__mu);
    guard__sweep_and_report(g);
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

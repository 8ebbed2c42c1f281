/* guard.c: the connection layer under libmicrohttpd (see guard.h): the
 * accept4, recv, shutdown, close and epoll_ctl it calls, the lingering of
 * closed connections, and the table of connections by descriptor. The
 * deadlines and the lifecycle are in sweep.c. */
#define _GNU_SOURCE /* accept4 */
#include "errors.h"
#include "http/guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <linux/tcp.h> /* tcpi_bytes_acked, which glibc's tcp_info lacks */
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "http/guard_internal.h"
#include "log.h"
#include "json/text.h"

pthread_mutex_t guard__mu = PTHREAD_MUTEX_INITIALIZER;
static guard_conn *_Atomic *guard__table; /* by descriptor */
static size_t guard__table_size;
static struct {
    int fd;
    guard *g;
} guard__listeners[GUARD__MAX_LISTENERS];


static ssize_t guard__sys_recv(int fd, void *buf, size_t len, int flags)
{
    return (ssize_t)syscall(SYS_recvfrom, fd, buf, len, flags, NULL, NULL);
}

/* A read of the socket for libmicrohttpd's recv, noting whether it found
 * the socket empty (guard__wake_on_eof). */
static ssize_t guard__read(guard_conn *gc, void *buf, size_t len)
{
    ssize_t r = guard__sys_recv(gc->fd, buf, len, 0);
    gc->drained = r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    return r;
}

static int guard__sys_close(int fd)
{
    return (int)syscall(SYS_close, fd);
}

int guard__sys_shutdown(int fd, int how)
{
    return (int)syscall(SYS_shutdown, fd, how);
}

/* Bytes written to fd that its peer has not acknowledged yet (the end of
 * the stream counts as one); 0 when that cannot be told. */
static int guard__unacked(int fd)
{
    int n = 0;
    return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : 0;
}

uint64_t guard__acked(int fd, uint64_t fallback)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) +
                  sizeof ti.tcpi_bytes_acked)
        return fallback;
    return ti.tcpi_bytes_acked;
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
void guard__answer(const guard *g, int fd, int status,
                          const char *code, const char *message,
                          const char *origin)
{
    char head[1024];
    text_buf body = TEXT_BUF_INIT;
    text_printf(&body, "{\"error\":{\"code\":\"%s\",\"message\":", code);
    text_json_string(&body, message, strlen(message));
    text_puts(&body, "}}");
    if (text_failed(&body)) { /* out of memory: the code alone */
        text_free(&body);
        text_printf(&body, "{\"error\":{\"code\":\"%s\"}}", code);
        if (text_failed(&body))
            return;
    }
    size_t blen = body.len;
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
    struct iovec iov[2] = {{head, (size_t)hlen}, {body.data, blen}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t n = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n;
    text_free(&body);
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
    text_buf extra = TEXT_BUF_INIT;
    text_printf(&extra, "\"reason\":\"%s\",\"peer\":", reason);
    text_json_string(&extra, peer, strlen(peer));
    text_printf(&extra, ",\"suppressed\":%u", held);
    if (!text_failed(&extra))
        log_event("warn", what, extra.data);
    text_free(&extra);
}

void guard__log_close(guard *g, metrics_close why, const char *peer)
{
    guard__log(g, (size_t)why, "connection closed", metrics_close_name(why),
               peer);
}

void guard__closed(guard *g, metrics_close why, const char *peer)
{
    metrics_closed(g->m, why);
    guard__log_close(g, why, peer);
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
void guard__kill(guard_conn *gc)
{
    if (atomic_exchange(&gc->dead, true))
        return;
    gc->g->dead++;
    guard__sys_shutdown(gc->fd, SHUT_RDWR);
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
                        int worker, guard_conn **evicted)
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
        atomic_init(&ip->in_flight, 0);
        *slot = ip;
    }
    ip->count++;
    gc->ip = ip;
    gc->g = g;
    gc->fd = fd;
    gc->worker = worker;
    if (worker >= 0)
        g->held[worker]++;
    g->accepts++;
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
guard_conn *guard__forget(int fd)
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
    if (gc->worker >= 0)
        g->held[gc->worker]--;
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

bool guard_slot_take(guard_conn *gc, size_t max)
{
    size_t cur = atomic_load(&gc->ip->in_flight);
    do {
        if (cur >= max)
            return false;
    } while (!atomic_compare_exchange_weak(&gc->ip->in_flight, &cur,
                                           cur + 1));
    return true;
}

void guard_slot_give(guard_conn *gc)
{
    atomic_fetch_sub(&gc->ip->in_flight, 1);
}

/* -- the calls libmicrohttpd makes ---------------------------------------- */

/* accept4, recv, close and epoll_ctl below replace the C library's for
 * the whole process: the linker exports them from the executable because
 * libmicrohttpd.so refers to them (the service is built with default
 * visibility), and the dynamic linker binds libmicrohttpd's calls to the
 * executable's definitions first. Descriptors this layer does not track
 * pass straight through to the system calls. */

/* The calling thread's slot among g's libmicrohttpd threads (taken at its
 * first accept4), or -1 past g->workers. Under guard__mu. */
static int guard__worker(guard *g)
{
    static _Thread_local const guard *tl_g;
    static _Thread_local int tl_slot = -1;
    if (tl_g != g) {
        tl_g = g;
        tl_slot = g->slots_taken < g->workers ? (int)g->slots_taken++ : -1;
    }
    return tl_slot;
}

/* Whether the calling thread leaves the pending connection to another.
 * libmicrohttpd's threads each accept from the one listening socket, up
 * to ten in a row, and a thread answers its connections' small requests
 * itself: left alone, all of a client's connections opened at once often
 * land on one thread, which then serves them on one core while the others
 * idle (a third of the machine idle, two thirds of the throughput). A
 * thread with two connections more than the thread with fewest leaves a
 * new one to the others, which the same readiness wakes; for at most
 * GUARD__HOLD_NS, after which it takes it (another thread may be busy
 * with a request). Under guard__mu. */
static bool guard__hold_back(guard *g, int worker)
{
    if (worker < 0 || g->workers < 2)
        return false;
    size_t fewest = g->held[0];
    for (size_t i = 1; i < g->workers; i++)
        if (g->held[i] < fewest)
            fewest = g->held[i];
    if (g->held[worker] < fewest + 2) {
        g->hold_since[worker] = 0;
        return false;
    }
    int64_t now = guard__now();
    if (!g->hold_since[worker] || g->hold_at[worker] != g->accepts) {
        /* a new wait: the connection held back before has been taken */
        g->hold_since[worker] = now;
        g->hold_at[worker] = g->accepts;
    }
    if (now - g->hold_since[worker] < GUARD__HOLD_NS)
        return true;
    g->hold_since[worker] = 0;
    return false;
}

/* The guard whose listening socket fd is, or NULL (under guard__mu). */
static guard *guard__listener(int fd)
{
    guard *g = NULL;
    for (size_t i = 0; i < GUARD__MAX_LISTENERS; i++)
        if (guard__listeners[i].g && guard__listeners[i].fd == fd)
            g = guard__listeners[i].g;
    return g;
}

int accept4(int lfd, struct sockaddr *addr, socklen_t *alen, int flags)
{
    guard *g = NULL;
    int worker = -1;
    bool hold = false;
    pthread_mutex_lock(&guard__mu);
    g = guard__listener(lfd);
    if (g) {
        worker = guard__worker(g);
        hold = guard__hold_back(g, worker);
    }
    pthread_mutex_unlock(&guard__mu);
    if (!g)
        return (int)syscall(SYS_accept4, lfd, addr, alen, flags);
    if (hold) {
        errno = EAGAIN;
        return -1;
    }
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
        int why = guard__admit(g, fd, &ss, worker, &evicted);
        char peer[INET6_ADDRSTRLEN];
        if (evicted)
            memcpy(peer, evicted->peer, sizeof peer);
        pthread_mutex_unlock(&guard__mu);
        if (evicted)
            guard__closed(g, METRICS_CLOSED_IDLE_EVICTED, peer);
        if (why < 0)
            return fd;
        metrics_refused(g->m, (metrics_refusal)why);
        char msg[160];
        if (why == METRICS_REFUSED_PER_IP)
            snprintf(msg, sizeof msg,
                     "too many connections from this address: the limit "
                     "--max-connections-per-ip "
                     "(ATTND_MAX_CONNECTIONS_PER_IP) is %zu",
                     g->cfg->max_connections_per_ip);
        else
            snprintf(msg, sizeof msg,
                     "too many connections: the limit --max-connections "
                     "(ATTND_MAX_CONNECTIONS) is %zu",
                     g->cfg->max_connections);
        guard__answer(g, fd, errors_http_status(ERRORS_UNAVAILABLE),
                      errors_code(ERRORS_UNAVAILABLE), msg, NULL);
        /* The client's request may be here already: closed at once, the
         * socket would answer it with a reset, which can destroy the 503
         * before it is read. */
        pthread_mutex_lock(&guard__mu);
        bool lingers =
            guard__linger(g, fd, guard__now() + GUARD__LINGER_NS, 0);
        pthread_mutex_unlock(&guard__mu);
        if (!lingers)
            guard__sys_close(fd);
        guard__peer(&ss, peer, sizeof peer);
        guard__log(g, METRICS_CLOSED_COUNT + (size_t)why,
                   "connection refused", metrics_refusal_name((metrics_refusal)why),
                   peer);
    }
}

/* Until when gc's connection, closed now, lingers; 0: it closes at once.
 * The kernel resets a connection closed with input unread, and one that
 * receives a byte once closed (or once its read side is shut, after its
 * end of the stream was sent); the reset drops what it still holds of the
 * answer, and a client still sending (node's fetch, a browser, Python's
 * http.client) sees a broken pipe instead of the answer. So a connection
 * lingers when its client may still send: inside a body, with bytes
 * waiting unread, or with the answer not yet all acknowledged (a client
 * pipelining requests behind one answered at shutdown). One this layer
 * answered itself (guard__cut, guard__refuse) lingers for the rest of
 * its time; one it shut down on purpose (guard__kill) closes at once. */
static int64_t guard__linger_end(guard_conn *gc)
{
    char b;
    int64_t now = guard__now();
    if (atomic_load(&gc->dead)) {
        int64_t until = atomic_load(&gc->linger_until);
        return until > now && gc->linger_bytes < GUARD__LINGER_BYTES ? until
                                                                    : 0;
    }
    if (framing_in_body(&gc->fr) || guard__unacked(gc->fd) > 0 ||
        guard__sys_recv(gc->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0)
        return now + GUARD__LINGER_NS;
    return 0;
}

bool guard__linger(guard *g, int fd, int64_t until, uint64_t bytes)
{
    if (g->n_lingering >= GUARD__LINGER_MAX ||
        g->open + g->n_lingering + GUARD__FD_RESERVE >= guard__table_size)
        return false;
    guard__sys_shutdown(fd, SHUT_WR);
    int64_t now = guard__now();
    g->lingering[g->n_lingering++] = (guard__lingerer){
        .fd = fd, .until = until, .last_in = now, .bytes = bytes,
        .rate_t = now, .rate_unacked = guard__unacked(fd)};
    pthread_cond_broadcast(&g->wake);
    return true;
}

/* libmicrohttpd shuts both sides of each connection down when it stops
 * (to wake per-connection threads, which this server does not use), then
 * closes it. A shut read side would make the kernel reset the connection
 * at the client's next byte, dropping the rest of an answer it still
 * holds: on a connection this layer tracks, only the write side is shut,
 * and close() decides whether it lingers. */
int shutdown(int fd, int how)
{
    if (how == SHUT_RDWR && guard__lookup(fd))
        how = SHUT_WR;
    return guard__sys_shutdown(fd, how);
}

int close(int fd)
{
    if (guard__lookup(fd)) {
        bool linger = false;
        pthread_mutex_lock(&guard__mu);
        guard_conn *gc = guard__forget(fd);
        if (gc) {
            /* the answer, then the end of the stream; the input is read
             * and dropped for a while before the descriptor is closed */
            int64_t until = guard__linger_end(gc);
            linger = until && guard__linger(gc->g, fd, until,
                                            gc->linger_bytes);
        }
        pthread_mutex_unlock(&guard__mu);
        if (gc) {
            free(gc->in);
            free(gc);
        }
        if (linger)
            return 0;
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
    /* Counted before it is answered, so a client that has its answer
     * finds it counted: as an answered request like any other error, and
     * as a connection closed for its framing. */
    metrics_request_begin(gc->g->m);
    metrics_request_end(gc->g->m, "other", gc->reject.status, 0, 0, 0);
    guard__closed(gc->g, METRICS_CLOSED_FRAMING, gc->peer);
    if (!atomic_exchange(&gc->responded, true))
        guard__answer(gc->g, gc->fd, gc->reject.status, gc->reject.code,
                      gc->reject.message, gc->fr.origin);
    guard__sys_shutdown(gc->fd, SHUT_WR);
    atomic_store(&gc->linger_until, guard__now() + GUARD__LINGER_NS);
    if (!atomic_exchange(&gc->dead, true)) {
        pthread_mutex_lock(&guard__mu);
        gc->g->dead++;
        pthread_mutex_unlock(&guard__mu);
    }
    return recv(gc->fd, NULL, 0, 0);
}

/* Classifies p[0..len), the bytes after those already classified, of
 * which the last fresh have just been read (counted as received when a
 * body is under way): returns how many are ready to hand on; a head still
 * arriving is not. */
static size_t guard__classify(guard_conn *gc, const char *p, size_t len,
                              size_t fresh)
{
    bool was_body = framing_in_body(&gc->fr);
    size_t k = framing_scan(&gc->fr, p, len, &gc->reject);
    atomic_store(&gc->in_body, framing_in_body(&gc->fr));
    /* A head has begun when its first byte, or an empty line before it,
     * has come: the header deadline runs from then. */
    bool pending = (gc->fr.in_head && k < len) || gc->fr.blank > 0;
    if (pending && atomic_load(&gc->t_head) == 0)
        atomic_store(&gc->t_head, guard__now());
    else if (!pending)
        atomic_store(&gc->t_head, 0);
    if (was_body || framing_in_body(&gc->fr))
        atomic_fetch_add(&gc->rx, (uint64_t)fresh);
    return k;
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    guard_conn *gc = guard__lookup(fd);
    if (gc && flags)
        gc->drained = false;
    if (!gc || flags)
        return guard__sys_recv(fd, buf, len, flags);
    if (atomic_load(&gc->dead)) {
        int64_t until = atomic_load(&gc->linger_until);
        if (!until || guard__now() >= until)
            return 0;
        char sink[16384];
        while (gc->linger_bytes < GUARD__LINGER_BYTES) {
            ssize_t r = guard__sys_recv(fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r == 0)
                return 0; /* the client has read the answer and left */
            if (r < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? -1 : 0;
            gc->linger_bytes += (uint64_t)r;
        }
        return 0; /* sent too much: closed */
    }
    if (gc->reject.status)
        return guard__refuse(gc);
    char *out = buf;
    size_t n = 0;
    for (;;) {
        /* Bytes already in the sink, not yet counted to libmicrohttpd, go
         * first; then bytes already classified. */
        if (gc->sink_ahead) {
            size_t k = gc->sink_ahead < len - n ? gc->sink_ahead : len - n;
            gc->sink_ahead -= k;
            n += k;
        }
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
            /* Body bytes straight into libmicrohttpd's buffer, or into
             * the request's own at their place (guard_body_sink). */
            size_t want = len - n < direct ? len - n : (size_t)direct;
            char *to = out + n;
            uint64_t at = gc->sink_len - direct;
            if (gc->sink && gc->fr.state == FRAMING_BODY &&
                direct <= gc->sink_len) {
                /* As much of the body as has come, in one read: what
                 * libmicrohttpd's buffer has no room for is counted to it
                 * at its next reads (sink_ahead), before any other byte. */
                to = gc->sink + at;
                want = direct < GUARD__SINK_READ ? (size_t)direct
                                                 : GUARD__SINK_READ;
            }
            r = guard__read(gc, to, want);
            if (r > 0) {
                framing_error none = {0};
                framing_scan(&gc->fr, to, (size_t)r, &none);
                atomic_fetch_add(&gc->rx, (uint64_t)r);
                if (to != out + n) {
                    if (gc->sink_from == UINT64_MAX)
                        gc->sink_from = at;
                    if ((size_t)r > len - n) {
                        gc->sink_ahead = (size_t)r - (len - n);
                        r = (ssize_t)(len - n);
                    }
                }
                if (!framing_direct(&gc->fr))
                    gc->sink = NULL; /* the body is whole */
                atomic_store(&gc->in_body, framing_in_body(&gc->fr));
                n += (size_t)r;
                if ((size_t)r < want)
                    break; /* the socket is drained */
                continue;
            }
        } else if (!gc->in_len && len - n >= GUARD__IN_CAP) {
            /* Nothing held back and room for a head at its limit: read
             * into libmicrohttpd's buffer and classify the bytes there,
             * so a head and a body's first bytes come in one read and are
             * copied once; only what is not ready (a head still arriving,
             * what follows a refused one) moves to gc->in. */
            char *at = out + n;
            size_t room = len - n;
            r = guard__read(gc, at, room);
            if (r > 0) {
                size_t k = guard__classify(gc, at, (size_t)r, (size_t)r);
                if (k < (size_t)r) {
                    size_t rest = (size_t)r - k;
                    size_t cap = rest > GUARD__IN_CAP ? rest : GUARD__IN_CAP;
                    free(gc->in); /* empty, if there at all */
                    if (!(gc->in = malloc(cap))) {
                        /* the bytes read cannot be kept: the connection
                         * fails */
                        errno = ENOMEM;
                        return -1;
                    }
                    gc->in_cap = cap;
                    memcpy(gc->in, at + k, rest);
                    gc->in_len = rest;
                    gc->in_ready = 0;
                }
                n += k;
                if ((size_t)r < room)
                    break; /* the socket is drained */
                continue;
            }
        } else {
            if (!gc->in) {
                if (!(gc->in = malloc(GUARD__IN_CAP)))
                    break;
                gc->in_cap = GUARD__IN_CAP;
            }
            size_t room = gc->in_cap - gc->in_len;
            r = guard__read(gc, gc->in + gc->in_len, room);
            if (r > 0) {
                gc->in_len += (size_t)r;
                /* a head still arriving stays */
                gc->in_ready += guard__classify(gc, gc->in + gc->in_ready,
                                                gc->in_len - gc->in_ready,
                                                (size_t)r);
                if (!gc->in_ready && gc->in_len == gc->in_cap &&
                    !gc->reject.status) {
                    gc->reject.status =
                        errors_http_status(ERRORS_HEADERS_TOO_LARGE);
                    gc->reject.code = errors_code(ERRORS_HEADERS_TOO_LARGE);
                    snprintf(gc->reject.message, sizeof gc->reject.message,
                             "the request head is over %d bytes",
                             FRAMING_MAX_HEAD);
                }
                if ((size_t)r < room && !gc->in_ready)
                    break; /* drained, nothing new to hand on */
                continue;
            }
            if (!gc->in_len) {
                /* Nothing came: an idle connection holds no buffer. */
                int e = errno;
                free(gc->in);
                gc->in = NULL;
                errno = e;
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
         * then. The sweep then sees the end of the stream, which is ours,
         * not the client's: the request before it must not be cancelled
         * for it. */
        atomic_store(&gc->rd_shut, true);
        guard__sys_shutdown(fd, SHUT_RD);
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

void guard_body_sink(guard_conn *gc, char *buf, uint64_t len)
{
    gc->sink = buf;
    gc->sink_len = buf ? len : 0;
}

uint64_t guard_body_sunk(const guard_conn *gc)
{
    return gc->sink_from;
}

/* libmicrohttpd 0.9.75, with edge-triggered epoll, takes a read shorter
 * than its buffer to mean the socket is drained. A client that half-closes
 * right after its request (its FIN behind the last bytes) gives no new
 * edge, so once the answer is sent the connection would wait for a read
 * that never comes. When a request ends and the end of the stream is
 * already there (seen by recv here, or waiting in the socket), shutting
 * the read side down wakes libmicrohttpd, which reads it and closes. */
void guard__wake_on_eof(guard_conn *gc)
{
    char b;
    /* After a read that found the socket empty, a FIN can only come
     * later, with an epoll edge of its own at which libmicrohttpd reads
     * it: only one behind the last bytes read needs the peek (a system
     * call a request) */
    if (gc->eof ||
        (!gc->drained &&
         guard__sys_recv(gc->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0))
        guard__sys_shutdown(gc->fd, SHUT_RD);
}

void guard__linger_drain(guard *g, bool all)
{
    /* Only this guard's sweeper removes entries or changes them; close()
     * and accept4 append past n. */
    pthread_mutex_lock(&guard__mu);
    size_t n = g->n_lingering;
    int64_t finish_by = g->finish_by;
    pthread_mutex_unlock(&guard__mu);
    int64_t now = guard__now();
    size_t min_rate = g->cfg->min_send_rate;
    int64_t window = (int64_t)g->cfg->rate_window_s * 1000000000LL;
    bool done[GUARD__LINGER_MAX];
    for (size_t i = 0; i < n; i++) {
        guard__lingerer *l = &g->lingering[i];
        char sink[16384];
        size_t got = 0;
        done[i] = all;
        while (!done[i] && got < GUARD__LINGER_READ) {
            ssize_t r = guard__sys_recv(l->fd, sink, sizeof sink,
                                        MSG_DONTWAIT);
            if (r > 0) {
                got += (size_t)r;
                l->bytes += (uint64_t)r;
                l->last_in = now;
                done[i] = l->bytes >= GUARD__LINGER_BYTES;
                continue;
            }
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
                          errno == EINTR))
                break;
            done[i] = true; /* the client's end, or an error */
        }
        if (done[i])
            continue;
        if (!finish_by) {
            done[i] = now >= l->until;
            continue;
        }
        int unacked = guard__unacked(l->fd);
        if (unacked == 0) {
            /* Shutting down, the answer in the client's hands: it closes
             * once the client is quiet, or at its own end if it is still
             * sending. */
            done[i] = now >= l->until ||
                      now - l->last_in >= GUARD__LINGER_QUIET_NS;
        } else if (min_rate && now - l->rate_t >= window) {
            /* One not yet acknowledged lingers on, until the shutdown's
             * deadline (guard_free), while its client reads it at
             * --min-send-rate: a slower one would have been cut off
             * while the answer was sent. Closed, the rest is still
             * delivered unless the client sends more. */
            int acked = l->rate_unacked > unacked ? l->rate_unacked - unacked
                                                  : 0;
            done[i] = (double)acked * 1e9 / (double)(now - l->rate_t) <
                      (double)min_rate;
            l->rate_t = now;
            l->rate_unacked = unacked;
        }
    }
    bool closed = false;
    pthread_mutex_lock(&guard__mu);
    for (size_t i = n; i-- > 0;)
        if (done[i]) {
            guard__sys_close(g->lingering[i].fd);
            g->lingering[i] = g->lingering[--g->n_lingering];
            closed = true;
        }
    if (closed)
        pthread_cond_broadcast(&g->wake); /* guard_free may wait */
    pthread_mutex_unlock(&guard__mu);
}

/* -- the table's lifecycle ------------------------------------------------- */

/* The descriptor table, made once for the process at the size of
 * RLIMIT_NOFILE, whose soft limit is first raised to the hard one so that
 * --max-connections can be in the tens of thousands. */
int guard__table_init(void)
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

size_t guard_max_descriptors(void)
{
    return guard__table_size;
}

void guard_listen(guard *g, int fd, size_t workers)
{
    pthread_mutex_lock(&guard__mu);
    g->workers = workers < GUARD__MAX_WORKERS ? workers : GUARD__MAX_WORKERS;
    for (size_t i = 0; i < GUARD__MAX_LISTENERS; i++)
        if (!guard__listeners[i].g) {
            guard__listeners[i].fd = fd;
            guard__listeners[i].g = g;
            break;
        }
    pthread_mutex_unlock(&guard__mu);
}

/* libmicrohttpd 0.9.75 takes a listening socket out of a thread's epoll
 * set in two places: MHD_quiesce_daemon, on the thread that drains, and
 * each thread's own loop once it sees the daemon quiesced. Neither holds
 * a lock, and each aborts the process (MHD_PANIC, "Failed to remove
 * listen FD from epoll set") when epoll_ctl says the socket is not in the
 * set, so when the two meet, the one that comes second ends a drain
 * (SIGTERM) in an abort. Either only wants the socket out of the set: for
 * a listening socket of ours, "not there" (ENOENT) is that done. The
 * drain keeps the socket open, shut down, until libmicrohttpd has
 * stopped (server.c, server_quiesce), so the number stays ours until no
 * thread of it can ask. Every other call is the system's. */
int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    int r = (int)syscall(SYS_epoll_ctl, epfd, op, fd, event);
    if (r != 0 && op == EPOLL_CTL_DEL && errno == ENOENT) {
        pthread_mutex_lock(&guard__mu);
        bool ours = guard__listener(fd) != NULL;
        pthread_mutex_unlock(&guard__mu);
        if (ours)
            return 0;
    }
    return r;
}

void guard__unlisten(guard *g)
{
    pthread_mutex_lock(&guard__mu);
    for (size_t i = 0; i < GUARD__MAX_LISTENERS; i++)
        if (guard__listeners[i].g == g)
            guard__listeners[i].g = NULL;
    pthread_mutex_unlock(&guard__mu);
}

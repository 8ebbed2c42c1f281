/* guard_internal.h: what guard.c (the descriptor table and the calls
 * libmicrohttpd makes) and sweep.c (the stages of a request, the deadlines
 * and the lifecycle) share. Not for use outside them. */
#ifndef ATTND_GUARD_INTERNAL_H
#define ATTND_GUARD_INTERNAL_H

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "http/framing.h"
#include "http/guard.h"

/* Bytes read ahead while a head is being checked: a head at its limit and
 * the start of what follows. */
#define GUARD__IN_CAP (FRAMING_MAX_HEAD + 4096)
/* Most bytes one read into a request's body buffer takes. */
#define GUARD__SINK_READ ((size_t)1 << 22)
/* How long input is still read and dropped after an answer, so the
 * client, perhaps still sending, reads the answer instead of a reset. */
#define GUARD__LINGER_NS 2000000000LL
/* Most input read and dropped from one lingering connection; past it, it
 * closes. */
#define GUARD__LINGER_BYTES ((uint64_t)64 << 20)
/* Most input one pass of the sweeper reads from one lingering connection,
 * so one fast sender cannot hold it. */
#define GUARD__LINGER_READ ((size_t)4 << 20)
/* While shutting down: a lingering connection whose answer has been
 * acknowledged whole and whose client has sent nothing for this long
 * closes (one whose answer is not, when it is acknowledged slower than
 * --min-send-rate, or at the shutdown's deadline). */
#define GUARD__LINGER_QUIET_NS 200000000LL
/* Descriptors kept free of lingering for the rest of the process (the
 * listening socket, libmicrohttpd's epoll sets, the log). */
#define GUARD__FD_RESERVE 32
/* Sweeper period, nanoseconds. */
#define GUARD__TICK_NS 250000000LL
/* Its period while connections linger (guard.c's close): their input is
 * read at least this often, so a sender is not held back by a full
 * receive buffer. */
#define GUARD__LINGER_TICK_NS 10000000LL
/* Most descriptors a guard keeps lingering; past them, a close is plain. */
#define GUARD__LINGER_MAX 1024
/* Per-address counts: buckets of a chained hash. */
#define GUARD__IP_BUCKETS 4096
/* Listening sockets of all guards in the process (tests run several). */
#define GUARD__MAX_LISTENERS 16
/* libmicrohttpd threads whose connections are balanced (guard_listen). */
#define GUARD__MAX_WORKERS 16
/* How long a thread with more connections than the others leaves a new
 * one to them before it takes it after all. */
#define GUARD__HOLD_NS 1000000LL

typedef enum guard__app {
    GUARD__APP_NONE, /* no request at the application */
    GUARD__APP_REQ,  /* begun: its body may be arriving, or it is answered */
    GUARD__APP_WORK, /* suspended while its computation runs */
    GUARD__APP_SEND  /* its streamed answer is being read */
} guard__app;

/* A descriptor closed after its answer but kept open, its write side
 * shut, while its input is read and dropped (guard.c, guard__linger). */
typedef struct guard__lingerer {
    int fd;
    int64_t until;   /* its own end (shutting down: once acknowledged) */
    int64_t last_in; /* when input last came, or lingering began */
    uint64_t bytes;  /* input read and dropped */
    /* shutting down: the answer's bytes not yet acknowledged, and since
     * when, for --min-send-rate */
    int64_t rate_t;
    int rate_unacked;
} guard__lingerer;

/* One client address: its open connections (under guard__mu), and the
 * POST /attend slots its requests hold (guard_slot_take). An entry lives
 * while the address has a connection open: a request gives its slot back
 * when libmicrohttpd completes it, which is before its connection's
 * socket is closed (and forgotten here), so an entry whose count falls to
 * 0 holds no slot. */
typedef struct guard__ip {
    unsigned char addr[16];
    size_t count;
    atomic_size_t in_flight;
    struct guard__ip *next;
} guard__ip;

struct guard_conn {
    guard *g;
    int fd;
    unsigned char addr[16];
    char peer[INET6_ADDRSTRLEN];
    guard__ip *ip; /* its address's entry, which outlives it */
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
    atomic_bool rd_shut; /* this layer shut the read side (a refused head
                            behind a request): no sign its client left */
    _Atomic int64_t linger_until; /* an answer sent: input drained until */
    uint64_t linger_bytes; /* input drained meanwhile (recv's own) */
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
    size_t in_cap;           /* bytes allocated, at least GUARD__IN_CAP
                                (more when held back from a larger read) */
    size_t in_len, in_ready; /* in[0..in_ready) is classified */
    framing_error reject;     /* to answer at the next read */
    bool eof;
    bool drained; /* the socket's last read found it empty (EAGAIN):
                     whatever comes after, a FIN included, gives
                     libmicrohttpd a new epoll edge */
    int worker;               /* the accepting thread's slot, or -1 */
    char *sink;               /* guard_body_sink: the body's buffer */
    uint64_t sink_len, sink_from; /* sink_from: guard_body_sunk, reset by
                                     guard_request_begin */
    size_t sink_ahead; /* read into it, not yet counted to libmicrohttpd */
};

struct guard {
    const config *cfg;
    metrics *m;
    guard_conn *conns; /* list head */
    size_t open, dead;
    guard__ip *ips[GUARD__IP_BUCKETS];
    bool refusing_uploads, closing_all, stopping;
    pthread_t sweeper;
    pthread_cond_t wake;
    /* log rate limit, per reason: last line's time and lines held back */
    int64_t log_t[METRICS_CLOSED_COUNT + METRICS_REFUSED_COUNT];
    unsigned log_held[METRICS_CLOSED_COUNT + METRICS_REFUSED_COUNT];
    /* The libmicrohttpd threads all accept from one socket: their open
     * connections (by the slot each takes at its first accept4), and since
     * when and for which accept a thread with more holds back. */
    size_t workers, slots_taken;
    size_t held[GUARD__MAX_WORKERS];
    int64_t hold_since[GUARD__MAX_WORKERS];
    uint64_t hold_at[GUARD__MAX_WORKERS], accepts;
    /* Descriptors closed while their client may still send or has not
     * acknowledged the whole answer: the write side shut, their input read
     * and dropped by the sweeper until the client's end or the deadline,
     * then closed (guard.c's close, guard__linger_drain). */
    guard__lingerer lingering[GUARD__LINGER_MAX];
    size_t n_lingering;
    /* Shutting down (guard_finish_by): lingering lasts until this for an
     * answer not yet acknowledged; 0 otherwise. */
    int64_t finish_by;
};

/* Guards the table, every guard's list, counts and per-address counts,
 * and each connection's cancel pointer. */
extern pthread_mutex_t guard__mu;

static inline int64_t guard__now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Bytes of fd's stream its peer has acknowledged since the connection
 * began (the kernel's count: it only grows); fallback when the kernel does
 * not keep it (TCP_INFO before Linux 4.1). */
uint64_t guard__acked(int fd, uint64_t fallback);
/* shutdown(2) itself, past this layer's shutdown (guard.c). */
int guard__sys_shutdown(int fd, int how);
/* Keeps fd open, its write side shut, for the sweeper to read and drop
 * its input until until (under guard__mu; bytes: dropped already). False
 * when too many descriptors linger already: the caller closes it. */
bool guard__linger(guard *g, int fd, int64_t until, uint64_t bytes);

/* Sends a whole answer with the contract's error body and Connection:
 * close, without blocking. */
void guard__answer(const guard *g, int fd, int status, const char *code,
                   const char *message, const char *origin);
/* Counts and logs (rate-limited) a close; called without guard__mu.
 * guard__log_close only logs (for a close counted already). */
void guard__closed(guard *g, metrics_close why, const char *peer);
void guard__log_close(guard *g, metrics_close why, const char *peer);
/* Shuts a connection down (under guard__mu). */
void guard__kill(guard_conn *gc);
/* Drops fd's connection (under guard__mu); returns it to be freed. */
guard_conn *guard__forget(int fd);

/* After a request: when its client has half-closed, wakes libmicrohttpd up
 * to read the end (see guard.c). */
void guard__wake_on_eof(guard_conn *gc);
/* The descriptor table, made once (under guard__mu); -1 when out of
 * memory. */
int guard__table_init(void);
/* g's listening sockets are no longer its. */
void guard__unlisten(guard *g);
/* Reads and drops what g's lingering descriptors have received; closes
 * those whose client has finished, that have sent too much, or whose time
 * is up (all of them when all). Called by the sweeper, without
 * guard__mu. */
void guard__linger_drain(guard *g, bool all);

#endif

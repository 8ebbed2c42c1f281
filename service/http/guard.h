/* guard.h: the connection layer under libmicrohttpd. It sees every byte a
 * client sends before libmicrohttpd does and every connection before it is
 * accepted, and enforces what libmicrohttpd 0.9.75 cannot:
 *
 *   - strict framing (RFC 9112): a request's header section is held back
 *     until it is complete and valid; whitespace before a colon, obs-fold,
 *     a bare CR, a bad or comma-repeated Content-Length, an unknown
 *     Transfer-Encoding, an oversized request line or header section are
 *     answered here, once, with the contract's JSON error body;
 *   - deadlines: the header section within --header-timeout of its first
 *     byte, bodies at --min-body-rate and within --body-timeout, responses
 *     acknowledged by the client at --min-send-rate (each averaged over
 *     --rate-window);
 *   - connection limits: --max-connections-per-ip, and --max-connections
 *     reached by closing the longest-idle keep-alive connection first;
 *   - the count of POST /attend slots each client address holds, for
 *     --max-in-flight-per-ip (guard_slot_take; attend.c answers the 503);
 *   - on shutdown, closing every connection without a request in compute;
 *   - noticing a client that leaves while its request computes, and one
 *     that half-closed right after its request (libmicrohttpd would wait
 *     for a read that never comes; guard__wake_on_eof in guard.c);
 *   - a drain that libmicrohttpd's own race would abort (epoll_ctl in
 *     guard.c).
 *
 * How: the executable defines accept4, recv, shutdown, close and epoll_ctl,
 * which libmicrohttpd (a shared library) calls through the dynamic linker,
 * so they reach this layer first; every other caller and descriptor passes
 * straight through to the system calls. A sweeper thread (4 ticks a second)
 * applies the deadlines. A connection it closes gets a raw answer first when
 * one can still be sent (408 for the slow, 503 when shutting down) and is
 * then shut down, which libmicrohttpd sees as the client leaving.
 *
 * Closing: a connection is closed gracefully wherever an answer may still
 * be on its way, since the kernel resets one closed with unread input, or
 * that receives a byte after it closed, and the reset destroys the rest
 * of the answer: its write side is shut after the answer, and its input
 * read and dropped (lingering) until the client's end of the stream, for
 * at most 2 s and 64 MiB (when shutting down: until the answer has been
 * acknowledged and the client is quiet, by the shutdown's deadline;
 * guard_finish_by). */
#ifndef ATTND_GUARD_H
#define ATTND_GUARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "config.h"
#include "metrics.h"

typedef struct guard guard;
typedef struct guard_conn guard_conn;

/* Starts the layer for cfg (borrowed; it must outlive the guard) with its
 * sweeper thread; counts go to m (borrowed). Returns 0 and *out, or -1. */
int guard_start(const config *cfg, metrics *m, guard **out);

/* Descriptors the layer can track (RLIMIT_NOFILE after start); a
 * connection on a higher one is refused. */
size_t guard_max_descriptors(void);

/* Connections accepted on listening socket fd are this guard's; workers
 * libmicrohttpd threads accept from it, whose connections the layer keeps
 * balanced (guard.c, guard__hold_back). */
void guard_listen(guard *g, int fd, size_t workers);

/* Each libmicrohttpd thread's open connections, of those that have
 * accepted one: held[0 .. returned count), at most cap. */
size_t guard_thread_connections(guard *g, size_t *held, size_t cap);

/* Shutdown, before libmicrohttpd closes its connections: a connection
 * closed after its answer lingers (its input read and dropped, see
 * guard.c's close) until its client has acknowledged the whole answer and
 * then gone quiet; while the answer is not all acknowledged, until
 * deadline (CLOCK_MONOTONIC) as long as the client reads it at
 * --min-send-rate. guard_free waits for them until deadline. */
void guard_finish_by(guard *g, const struct timespec *deadline);

/* Waits for the connections that linger after their answers (until the
 * deadline of guard_finish_by, or their own, of about 2 s), then stops the
 * sweeper and frees g; its connections must all be closed. Accepts
 * NULL. */
void guard_free(guard *g);

/* The connection of socket fd (a request's; borrowed until the socket is
 * closed, which libmicrohttpd does only after the request has completed),
 * or NULL when fd is not one this layer tracks. */
guard_conn *guard_conn_of(int fd);

/* A request's stages at the application, in order. The first access
 * handler call begins it (its body, if any, may still be arriving); WORK
 * is while it is suspended for compute, cancel being set if the client
 * leaves meanwhile; SEND while a streamed response is being read by the
 * client (sent counts its bytes); end when libmicrohttpd completes it. */
void guard_request_begin(guard_conn *gc);
void guard_request_work(guard_conn *gc, atomic_bool *cancel);
void guard_request_sent(guard_conn *gc, size_t bytes);
void guard_request_end(guard_conn *gc);

/* A request's answer is claimed once: by the application when it queues
 * one (guard_request_answer; guard_request_send for a streamed one, which
 * also enters SEND) or by this layer when it answers by itself (a refused
 * head, a deadline, shutdown). Each returns whether the caller has it; one
 * that has not must not answer, and closes the connection instead, since
 * the client already has its one answer. */
bool guard_request_answer(guard_conn *gc);
bool guard_request_send(guard_conn *gc);

/* The current request's body buffer, of len bytes (its Content-Length):
 * body bytes read from the socket from now on go straight to their place
 * in buf, and libmicrohttpd's buffer gets their count only, so the access
 * handler copies only the bytes before guard_body_sunk(gc). This saves
 * copying a large body from libmicrohttpd's buffer to the request's
 * (libmicrohttpd 0.9.75 hands a Content-Length body on without reading
 * it). buf NULL: no more; a body ends it too. On the connection's
 * libmicrohttpd thread only, like the reads. */
void guard_body_sink(guard_conn *gc, char *buf, uint64_t len);
/* The body offset from which its bytes were read into the sink; UINT64_MAX
 * when none were. */
uint64_t guard_body_sunk(const guard_conn *gc);

/* A POST /attend slot counted against the connection's client address:
 * taken when the address holds fewer than max (the caller skips the call
 * for no limit); returns whether it was. Each slot taken is given back
 * once, before libmicrohttpd closes the connection: in the request's
 * completed callback. Lock-free, one compare-and-swap. */
bool guard_slot_take(guard_conn *gc, size_t max);
void guard_slot_give(guard_conn *gc);

/* Cuts the current request off now: answers status (code, message) raw
 * when no answer has begun, then shuts the connection down; counted under
 * why. For a body that must not be read further. */
void guard_request_cut_off(guard_conn *gc, metrics_close why, int status,
                           const char *code, const char *message);

/* Why the layer cut the current request off (a METRICS_CLOSED_* + 1), or 0. */
int guard_request_cut(const guard_conn *gc);

/* Shutdown, step 1: every upload in progress is answered 503 and closed
 * now, and each one from now on as soon as it begins. Connections between
 * requests stay open: their next request is answered (the server adds
 * Connection: close while it refuses new work). */
void guard_refuse_uploads(guard *g);

/* Shutdown, last step: every remaining connection is closed and every
 * computation cancelled. */
void guard_close_all(guard *g);

/* Open connections and, of those, keep-alive ones between requests. */
void guard_counts(guard *g, size_t *open, size_t *idle);

/* Whether origin is one of the comma-separated origins in list. */
bool guard_origin_listed(const char *list, const char *origin);

#endif

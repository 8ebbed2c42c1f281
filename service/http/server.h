/* server.h: the attnd HTTP server as a library, so tests run it in-process.
 *
 * Lifecycle: server_start -> (serving) -> server_begin_shutdown (/readyz
 * answers 503 at once) -> server_quiesce (listening socket closed, new work
 * refused with 503) -> server_wait (requests in flight finish) ->
 * server_stop (daemon stopped, connections closed once their clients have
 * the answers, everything freed). server_stop runs whatever steps have not
 * run yet, so it alone is a complete, graceful stop. */
#ifndef ATTND_SERVER_H
#define ATTND_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "attn.h"
#include "config.h"
#include "metrics.h"
#include "store/store.h"

typedef struct server server;

/* Starts serving cfg (copied, config_resolve'd) on cfg->host:cfg->port
 * (port 0: an ephemeral port, see server_port) with libmicrohttpd's epoll
 * mode on a few threads of its own and a compute pool of cfg->threads
 * workers (0: config_usable_cores()). Raises RLIMIT_NOFILE's soft limit to
 * the hard one (process-wide) and lowers max_connections to fit it.
 * Limits OpenBLAS to one thread (process-wide) so the pool alone decides
 * how many cores compute. Returns 0 and *out, or -1 with a message in
 * err[0..err_cap) and nothing left running. */
int server_start(const config *cfg, server **out, char *err, size_t err_cap);

/* The TCP port actually bound. */
uint16_t server_port(const server *srv);

/* The configuration in force (automatic sizes resolved, max_connections
 * fitted to RLIMIT_NOFILE). */
const config *server_config(const server *srv);

/* Compute threads of the pool. */
size_t server_threads(const server *srv);

/* Readiness off: /readyz answers 503 from now on; everything else is
 * unchanged. Async-signal-unsafe; call it from a normal thread. */
void server_begin_shutdown(server *srv);

/* Stops accepting connections and refuses new POST /attend with 503
 * (Connection: close); requests already started continue. Implies
 * server_begin_shutdown. Idempotent. */
void server_quiesce(server *srv);

/* Blocks until no request is in progress (headers received, response not
 * yet completed). Call after server_quiesce so the count can only fall. */
void server_wait(server *srv);

/* server_wait up to deadline (CLOCK_MONOTONIC); whether none is left. */
bool server_wait_until(server *srv, const struct timespec *deadline);

/* The end of the drain: closes every connection left and cancels every
 * computation (each stops at its next task); server_wait then returns
 * soon. */
void server_cut_off(server *srv);

/* Quiesces, waits for requests in flight, stops the daemon (closing idle
 * keep-alive connections) and frees srv. A connection whose answer its
 * client may not have yet lingers (guard.h) for about 2 s at most before
 * srv is freed. Accepts NULL. Never call it from a request handler. */
void server_stop(server *srv);

/* server_stop at the end of a graceful shutdown: a connection whose
 * answer its client has not acknowledged whole lingers until deadline
 * (CLOCK_MONOTONIC) at most, while the client reads it at
 * --min-send-rate; one whose client has it, until its client is quiet
 * (guard_finish_by). */
void server_stop_by(server *srv, const struct timespec *deadline);

/* Borrowed views for tests and main: the compute pool's executor and the
 * metrics, valid until server_stop. */
const attn_executor *server_executor(server *srv);
metrics *server_metrics(server *srv);

/* The open connections of each libmicrohttpd thread that has accepted
 * one, in held[0 .. returned count) (at most cap), for tests. */
size_t server_thread_connections(server *srv, size_t *held, size_t cap);

/* The tensor store (borrowed, valid until server_stop); NULL when
 * --tensor-store-bytes is 0. */
store *server_store(server *srv);

#endif

/* metrics.h: the server's counters and histograms, rendered as Prometheus
 * text exposition format 0.0.4. Every function is thread-safe. */
#ifndef ATTND_METRICS_H
#define ATTND_METRICS_H

#include <stddef.h>

#include "store/store.h"

typedef struct metrics metrics;

/* A new, zeroed set; NULL when out of memory. Free with metrics_free. */
metrics *metrics_new(void);
void metrics_free(metrics *m); /* accepts NULL */

/* A request started / finished. path is a label from a bounded set that the
 * server chose (a static string, kept by pointer); status the HTTP status,
 * or 0 when no response was sent (then only the gauge and bytes move). */
void metrics_request_begin(metrics *m);
void metrics_request_end(metrics *m, const char *path, int status,
                         size_t bytes_in, size_t bytes_out, double seconds);

/* Library compute time of one /attend request. */
void metrics_compute(metrics *m, double seconds);

/* Current requests in flight (begun, not yet ended). */
size_t metrics_in_flight(metrics *m);

/* Why a connection was refused at accept (a 503 is sent, then it closes). */
#define METRICS_REFUSALS(X) X(PER_IP, "per_ip") X(FULL, "full")
/* Why a POST /attend was refused a compute slot (503 with Retry-After):
 * --max-in-flight, or its client address's share, --max-in-flight-per-ip. */
#define METRICS_SLOT_REFUSALS(X)                                              \
    X(IN_FLIGHT, "in_flight") X(IN_FLIGHT_PER_IP, "in_flight_per_ip")
/* Why the server closed a connection or cut a request off. */
#define METRICS_CLOSES(X)                                                     \
    X(HEADER_TIMEOUT, "header_timeout") X(SLOW_BODY, "slow_body")             \
    X(BODY_TIMEOUT, "body_timeout") X(BUDGET, "budget")                       \
    X(TOO_LARGE, "too_large") X(SLOW_READ, "slow_read")                       \
    X(IDLE_EVICTED, "idle_evicted") X(FRAMING, "framing")                     \
    X(SHUTDOWN, "shutdown")

typedef enum metrics_refusal {
#define METRICS__R(name, label) METRICS_REFUSED_##name,
    METRICS_REFUSALS(METRICS__R)
#undef METRICS__R
    METRICS_REFUSED_COUNT
} metrics_refusal;

typedef enum metrics_slot_refusal {
#define METRICS__S(name, label) METRICS_SLOT_##name,
    METRICS_SLOT_REFUSALS(METRICS__S)
#undef METRICS__S
    METRICS_SLOT_COUNT
} metrics_slot_refusal;

typedef enum metrics_close {
#define METRICS__C(name, label) METRICS_CLOSED_##name,
    METRICS_CLOSES(METRICS__C)
#undef METRICS__C
    METRICS_CLOSED_COUNT
} metrics_close;

/* The label of a reason (static string). */
const char *metrics_refusal_name(metrics_refusal why);
const char *metrics_close_name(metrics_close why);

void metrics_refused(metrics *m, metrics_refusal why);
void metrics_slot_refused(metrics *m, metrics_slot_refusal why);
void metrics_closed(metrics *m, metrics_close why);
/* A computation stopped early because its client had gone. */
void metrics_cancelled(metrics *m);

/* Gauges owned by the connection layer, read when /metrics is rendered. */
typedef struct metrics_gauges {
    size_t open, idle;     /* connections; idle: keep-alive, between requests */
    size_t buffered_bytes; /* reserved for request bodies being received */
} metrics_gauges;
/* fn fills the gauges at each render (called without m's lock held). */
void metrics_set_gauges_fn(metrics *m,
                           void (*fn)(void *ctx, metrics_gauges *out),
                           void *ctx);

/* Static labels of attnd_build_info (strings are copied). */
void metrics_set_build_info(metrics *m, const char *version,
                            const char *mhd_version, size_t threads);

/* The tensor store whose statistics every render reads (the
 * attnd_tensor_store_* families); NULL, the default, renders them as 0.
 * s must outlive m or be unset first. */
void metrics_set_store(metrics *m, store *s);

/* The exposition text as a malloc'd NUL-terminated string (caller frees)
 * and its length; NULL when out of memory. */
char *metrics_render(metrics *m, size_t *len);

#endif

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

/* metrics.c: counters under one mutex; a request touches it twice, which
 * costs nothing next to the HTTP work around it. */
#include "metrics.h"
#include "json/text.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds in seconds, shared by the request and compute histograms:
 * from a health probe (~ms) to the heaviest request the limits admit. */
static const double metrics__bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01,
                                         0.025,  0.05,  0.1,    0.25,  0.5,
                                         1,      2.5,   5,      10,    30,
                                         60};
#define METRICS__NB (sizeof metrics__bounds / sizeof metrics__bounds[0])

/* Paths are normalised by the server to a handful of labels and statuses
 * are a few dozen at most, so this bound is never reached in practice. */
#define METRICS__MAX_SERIES 256

typedef struct metrics__hist {
    uint64_t buckets[METRICS__NB]; /* non-cumulative; summed when rendered */
    uint64_t count;
    double sum;
} metrics__hist;

typedef struct metrics__series {
    const char *path;
    int status;
    uint64_t count;
} metrics__series;

struct metrics {
    pthread_mutex_t mu;
    metrics__series series[METRICS__MAX_SERIES];
    size_t n_series;
    metrics__hist duration, compute;
    size_t in_flight;
    uint64_t bytes_in, bytes_out;
    char version[32], mhd_version[32];
    size_t threads;
    store *store; /* read at render time; may be NULL */
    uint64_t refused[METRICS_REFUSED_COUNT];
    uint64_t slot_refused[METRICS_SLOT_COUNT];
    uint64_t closed[METRICS_CLOSED_COUNT];
    uint64_t cancelled;
    void (*gauges_fn)(void *ctx, metrics_gauges *out);
    void *gauges_ctx;
};

static const char *const metrics__refusal_names[] = {
#define METRICS__R(name, label) label,
    METRICS_REFUSALS(METRICS__R)
#undef METRICS__R
};

static const char *const metrics__slot_names[] = {
#define METRICS__S(name, label) label,
    METRICS_SLOT_REFUSALS(METRICS__S)
#undef METRICS__S
};

static const char *const metrics__close_names[] = {
#define METRICS__C(name, label) label,
    METRICS_CLOSES(METRICS__C)
#undef METRICS__C
};

const char *metrics_refusal_name(metrics_refusal why)
{
    return why < METRICS_REFUSED_COUNT ? metrics__refusal_names[why] : "other";
}

const char *metrics_close_name(metrics_close why)
{
    return why < METRICS_CLOSED_COUNT ? metrics__close_names[why] : "other";
}

void metrics_refused(metrics *m, metrics_refusal why)
{
    pthread_mutex_lock(&m->mu);
    if (why < METRICS_REFUSED_COUNT)
        m->refused[why]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_slot_refused(metrics *m, metrics_slot_refusal why)
{
    pthread_mutex_lock(&m->mu);
    if (why < METRICS_SLOT_COUNT)
        m->slot_refused[why]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_closed(metrics *m, metrics_close why)
{
    pthread_mutex_lock(&m->mu);
    if (why < METRICS_CLOSED_COUNT)
        m->closed[why]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_cancelled(metrics *m)
{
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_gauges_fn(metrics *m,
                           void (*fn)(void *ctx, metrics_gauges *out),
                           void *ctx)
{
    pthread_mutex_lock(&m->mu);
    m->gauges_fn = fn;
    m->gauges_ctx = ctx;
    pthread_mutex_unlock(&m->mu);
}

metrics *metrics_new(void)
{
    metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    if (pthread_mutex_init(&m->mu, NULL)) {
        free(m);
        return NULL;
    }
    return m;
}

void metrics_free(metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void metrics__observe(metrics__hist *h, double v)
{
    size_t i = 0;
    while (i < METRICS__NB && v > metrics__bounds[i])
        i++;
    if (i < METRICS__NB)
        h->buckets[i]++;
    h->count++;
    h->sum += v;
}

void metrics_request_begin(metrics *m)
{
    pthread_mutex_lock(&m->mu);
    m->in_flight++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_request_end(metrics *m, const char *path, int status,
                         size_t bytes_in, size_t bytes_out, double seconds)
{
    pthread_mutex_lock(&m->mu);
    if (m->in_flight)
        m->in_flight--;
    m->bytes_in += bytes_in;
    m->bytes_out += bytes_out;
    /* Status 0: no response was sent (client gone, timeout), nothing to
     * count by status. */
    if (status != 0) {
        metrics__observe(&m->duration, seconds);
        size_t i = 0;
        while (i < m->n_series && (m->series[i].status != status ||
                                   strcmp(m->series[i].path, path)))
            i++;
        /* A full table drops new series (see METRICS__MAX_SERIES). */
        if (i == m->n_series && i < METRICS__MAX_SERIES) {
            m->series[i].path = path;
            m->series[i].status = status;
            m->n_series++;
        }
        if (i < m->n_series)
            m->series[i].count++;
    }
    pthread_mutex_unlock(&m->mu);
}

void metrics_compute(metrics *m, double seconds)
{
    pthread_mutex_lock(&m->mu);
    metrics__observe(&m->compute, seconds);
    pthread_mutex_unlock(&m->mu);
}

size_t metrics_in_flight(metrics *m)
{
    pthread_mutex_lock(&m->mu);
    size_t n = m->in_flight;
    pthread_mutex_unlock(&m->mu);
    return n;
}

void metrics_set_build_info(metrics *m, const char *version,
                            const char *mhd_version, size_t threads)
{
    pthread_mutex_lock(&m->mu);
    snprintf(m->version, sizeof m->version, "%s", version);
    snprintf(m->mhd_version, sizeof m->mhd_version, "%s", mhd_version);
    m->threads = threads;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_store(metrics *m, store *s)
{
    pthread_mutex_lock(&m->mu);
    m->store = s;
    pthread_mutex_unlock(&m->mu);
}

static void metrics__hist_render(text_buf *t, const char *name,
                                 const char *help, const metrics__hist *h)
{
    text_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < METRICS__NB; i++) {
        cum += h->buckets[i];
        text_printf(t, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name,
                    metrics__bounds[i], cum);
    }
    text_printf(t, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, h->count);
    text_printf(t, "%s_sum %.9g\n%s_count %" PRIu64 "\n", name, h->sum, name,
                h->count);
}

char *metrics_render(metrics *m, size_t *len)
{
    text_buf t = TEXT_BUF_INIT;
    /* The gauges come from the connection layer, under its own lock, which
     * is never held while this one is taken. */
    metrics_gauges g = {0, 0, 0};
    pthread_mutex_lock(&m->mu);
    void (*fn)(void *, metrics_gauges *) = m->gauges_fn;
    void *ctx = m->gauges_ctx;
    pthread_mutex_unlock(&m->mu);
    if (fn)
        fn(ctx, &g);
    pthread_mutex_lock(&m->mu);
    text_printf(&t,
                "# HELP attnd_build_info Build information; always 1.\n"
                "# TYPE attnd_build_info gauge\n"
                "attnd_build_info{version=\"%s\",libmicrohttpd=\"%s\"} 1\n",
                m->version, m->mhd_version);
    text_printf(&t,
                "# HELP attnd_compute_threads Threads of the compute pool.\n"
                "# TYPE attnd_compute_threads gauge\n"
                "attnd_compute_threads %zu\n",
                m->threads);
    text_printf(&t, "# HELP attnd_http_requests_total HTTP requests "
                    "answered, by normalised path and status.\n"
                    "# TYPE attnd_http_requests_total counter\n");
    for (size_t i = 0; i < m->n_series; i++)
        text_printf(&t,
                    "attnd_http_requests_total{path=\"%s\",status=\"%d\"} "
                    "%" PRIu64 "\n",
                    m->series[i].path, m->series[i].status, m->series[i].count);
    metrics__hist_render(&t, "attnd_http_request_duration_seconds",
                         "Time from request headers to the last byte of the "
                         "response.",
                         &m->duration);
    text_printf(&t,
                "# HELP attnd_http_requests_in_flight Requests begun and "
                "not yet finished.\n"
                "# TYPE attnd_http_requests_in_flight gauge\n"
                "attnd_http_requests_in_flight %zu\n",
                m->in_flight);
    text_printf(&t,
                "# HELP attnd_http_received_bytes_total Request body "
                "bytes received.\n"
                "# TYPE attnd_http_received_bytes_total counter\n"
                "attnd_http_received_bytes_total %" PRIu64 "\n"
                "# HELP attnd_http_sent_bytes_total Response body bytes "
                "sent.\n"
                "# TYPE attnd_http_sent_bytes_total counter\n"
                "attnd_http_sent_bytes_total %" PRIu64 "\n",
                m->bytes_in, m->bytes_out);
    text_printf(&t,
                "# HELP attnd_compute_seconds_total Wall time spent in the "
                "attention library.\n"
                "# TYPE attnd_compute_seconds_total counter\n"
                "attnd_compute_seconds_total %.9g\n",
                m->compute.sum);
    metrics__hist_render(&t, "attnd_compute_duration_seconds",
                         "Library wall time per /attend request.",
                         &m->compute);
    text_printf(&t,
                "# HELP attnd_connections_open Open client connections.\n"
                "# TYPE attnd_connections_open gauge\n"
                "attnd_connections_open %zu\n"
                "# HELP attnd_connections_idle Keep-alive connections "
                "between requests.\n"
                "# TYPE attnd_connections_idle gauge\n"
                "attnd_connections_idle %zu\n"
                "# HELP attnd_buffered_bytes Bytes reserved for request "
                "bodies being received.\n"
                "# TYPE attnd_buffered_bytes gauge\n"
                "attnd_buffered_bytes %zu\n",
                g.open, g.idle, g.buffered_bytes);
    text_printf(&t, "# HELP attnd_connections_refused_total Connections "
                    "refused at accept, by reason.\n"
                    "# TYPE attnd_connections_refused_total counter\n");
    for (size_t i = 0; i < METRICS_REFUSED_COUNT; i++)
        text_printf(&t,
                    "attnd_connections_refused_total{reason=\"%s\"} "
                    "%" PRIu64 "\n",
                    metrics__refusal_names[i], m->refused[i]);
    text_printf(&t, "# HELP attnd_attend_refused_total POST /attend "
                    "requests refused a compute slot (503), by reason.\n"
                    "# TYPE attnd_attend_refused_total counter\n");
    for (size_t i = 0; i < METRICS_SLOT_COUNT; i++)
        text_printf(&t,
                    "attnd_attend_refused_total{reason=\"%s\"} %" PRIu64
                    "\n",
                    metrics__slot_names[i], m->slot_refused[i]);
    text_printf(&t, "# HELP attnd_connections_closed_total Connections "
                    "the server closed or requests it cut off, by "
                    "reason.\n"
                    "# TYPE attnd_connections_closed_total counter\n");
    for (size_t i = 0; i < METRICS_CLOSED_COUNT; i++)
        text_printf(&t,
                    "attnd_connections_closed_total{reason=\"%s\"} "
                    "%" PRIu64 "\n",
                    metrics__close_names[i], m->closed[i]);
    text_printf(&t,
                "# HELP attnd_compute_cancelled_total Computations "
                "stopped because their client had gone.\n"
                "# TYPE attnd_compute_cancelled_total counter\n"
                "attnd_compute_cancelled_total %" PRIu64 "\n",
                m->cancelled);
    store_stats st;
    store_get_stats(m->store, &st);
    text_printf(&t,
                "# HELP attnd_tensor_store_entries Tensors in the tensor "
                "store.\n"
                "# TYPE attnd_tensor_store_entries gauge\n"
                "attnd_tensor_store_entries %zu\n"
                "# HELP attnd_tensor_store_bytes Bytes the tensor store "
                "holds: values, and 256 a tensor.\n"
                "# TYPE attnd_tensor_store_bytes gauge\n"
                "attnd_tensor_store_bytes %zu\n",
                st.entries, st.bytes);
    text_printf(&t,
                "# HELP attnd_tensor_store_hits_total Lookups of a ref "
                "(in /attend, GET or HEAD /tensors) that found it.\n"
                "# TYPE attnd_tensor_store_hits_total counter\n"
                "attnd_tensor_store_hits_total %" PRIu64 "\n"
                "# HELP attnd_tensor_store_misses_total Lookups of a ref "
                "that did not find it.\n"
                "# TYPE attnd_tensor_store_misses_total counter\n"
                "attnd_tensor_store_misses_total %" PRIu64 "\n"
                "# HELP attnd_tensor_store_evictions_total Tensors "
                "forgotten to make room for new ones.\n"
                "# TYPE attnd_tensor_store_evictions_total counter\n"
                "attnd_tensor_store_evictions_total %" PRIu64 "\n",
                st.hits, st.misses, st.evictions);
    pthread_mutex_unlock(&m->mu);
    return text_take(&t, len);
}

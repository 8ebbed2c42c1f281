/* test_metrics.c: the exposition text: counters by label, cumulative
 * histogram buckets, gauge, and a well-formed 0.0.4 layout. */
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "test_service.h"

START_TEST(test_metrics_counts_and_buckets)
{
    metrics *m = metrics_new();
    ck_assert_ptr_nonnull(m);
    metrics_set_build_info(m, "9.9.9", "0.9.75", 4);
    metrics_request_begin(m);
    metrics_request_begin(m);
    metrics_request_begin(m);
    ck_assert_uint_eq(metrics_in_flight(m), 3);
    metrics_request_end(m, "/healthz", 200, 0, 15, 0.0002);
    metrics_request_end(m, "/attend", 413, 100, 50, 0.3);
    metrics_compute(m, 1.5);
    size_t len;
    char *t = metrics_render(m, &len);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(strlen(t), len);
    ck_assert_double_eq(ts_metric(t, "attnd_http_requests_total{path=\"/healthz\",status=\"200\"}"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_http_requests_total{path=\"/attend\",status=\"413\"}"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_http_requests_in_flight"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_http_received_bytes_total"), 100);
    ck_assert_double_eq(ts_metric(t, "attnd_http_sent_bytes_total"), 65);
    /* Buckets are cumulative: 0.0002 s falls in every bucket, 0.3 s from
     * le=0.5 on. */
    ck_assert_double_eq(ts_metric(t, "attnd_http_request_duration_seconds_bucket{le=\"0.0005\"}"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_http_request_duration_seconds_bucket{le=\"0.25\"}"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_http_request_duration_seconds_bucket{le=\"0.5\"}"), 2);
    ck_assert_double_eq(ts_metric(t, "attnd_http_request_duration_seconds_bucket{le=\"+Inf\"}"), 2);
    ck_assert_double_eq(ts_metric(t, "attnd_http_request_duration_seconds_count"), 2);
    ck_assert_double_eq_tol(ts_metric(t, "attnd_http_request_duration_seconds_sum"), 0.3002, 1e-9);
    ck_assert_double_eq(ts_metric(t, "attnd_compute_seconds_total"), 1.5);
    ck_assert_double_eq(ts_metric(t, "attnd_compute_duration_seconds_bucket{le=\"1\"}"), 0);
    ck_assert_double_eq(ts_metric(t, "attnd_compute_duration_seconds_bucket{le=\"2.5\"}"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_build_info{version=\"9.9.9\",libmicrohttpd=\"0.9.75\"}"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_compute_threads"), 4);
    /* Every sample line belongs to a family announced by # TYPE. */
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        ck_assert_msg(!strncmp(line, "attnd_", 6), "bad line %s", line);
    }
    free(t);
    metrics_free(m);
    metrics_free(NULL);
}
END_TEST

START_TEST(test_metrics_aborted_request_not_counted_by_status)
{
    metrics *m = metrics_new();
    metrics_request_begin(m);
    metrics_request_end(m, "/attend", 0, 10, 0, 0.1);
    char *t = metrics_render(m, NULL);
    ck_assert_double_eq(ts_metric(t, "attnd_http_requests_in_flight"), 0);
    ck_assert_ptr_null(strstr(t, "status=\"0\""));
    free(t);
    metrics_free(m);
}
END_TEST

static void fake_gauges(void *ctx, metrics_gauges *out)
{
    (void)ctx;
    out->open = 7;
    out->idle = 5;
    out->buffered_bytes = 1234;
}

START_TEST(test_metrics_connection_counts_and_gauges)
{
    metrics *m = metrics_new();
    ck_assert_ptr_nonnull(m);
    metrics_set_gauges_fn(m, fake_gauges, NULL);
    metrics_refused(m, METRICS_REFUSED_PER_IP);
    metrics_refused(m, METRICS_REFUSED_PER_IP);
    metrics_closed(m, METRICS_CLOSED_HEADER_TIMEOUT);
    metrics_closed(m, METRICS_CLOSED_SLOW_READ);
    metrics_cancelled(m);
    metrics_slot_refused(m, METRICS_SLOT_IN_FLIGHT_PER_IP);
    metrics_slot_refused(m, METRICS_SLOT_IN_FLIGHT_PER_IP);
    metrics_slot_refused(m, METRICS_SLOT_IN_FLIGHT);
    char *t = metrics_render(m, NULL);
    ck_assert_ptr_nonnull(t);
    ck_assert_double_eq(ts_metric(t, "attnd_connections_open"), 7);
    ck_assert_double_eq(ts_metric(t, "attnd_connections_idle"), 5);
    ck_assert_double_eq(ts_metric(t, "attnd_buffered_bytes"), 1234);
    ck_assert_double_eq(ts_metric(t, "attnd_connections_refused_total{reason=\"per_ip\"}"), 2);
    ck_assert_double_eq(ts_metric(t, "attnd_connections_refused_total{reason=\"full\"}"), 0);
    ck_assert_double_eq(ts_metric(t, "attnd_connections_closed_total{reason=\"header_timeout\"}"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_connections_closed_total{reason=\"slow_read\"}"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_connections_closed_total{reason=\"budget\"}"), 0);
    ck_assert_double_eq(ts_metric(t, "attnd_compute_cancelled_total"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_attend_refused_total{reason=\"in_flight\"}"), 1);
    ck_assert_double_eq(ts_metric(t, "attnd_attend_refused_total{reason=\"in_flight_per_ip\"}"), 2);
    ck_assert_str_eq(metrics_close_name(METRICS_CLOSED_IDLE_EVICTED), "idle_evicted");
    free(t);
    metrics_free(m);
}
END_TEST

Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *t = tcase_create("metrics");
    tcase_add_test(t, test_metrics_counts_and_buckets);
    tcase_add_test(t, test_metrics_aborted_request_not_counted_by_status);
    tcase_add_test(t, test_metrics_connection_counts_and_gauges);
    suite_add_tcase(s, t);
    return s;
}

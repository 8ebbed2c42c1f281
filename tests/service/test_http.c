/* test_http.c: the daemon in-process on 127.0.0.1 (ephemeral port), driven
 * over real HTTP: routes and methods, errors, CORS, health, metrics, body
 * limits, smuggling guards, the in-flight limit, a computed /attend checked
 * against the float64 reference, and health probes while compute is busy. */
#define _GNU_SOURCE /* strcasestr */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "errors.h"
#include "http/framing.h"
#include "http/guard.h"
#include "json/text.h"
#include "metrics.h"
#include "test_service.h"

static server *srv;
static uint16_t port;

static void setup_default(void)
{
    config cfg;
    ts_config(&cfg);
    srv = ts_start(&cfg);
    port = server_port(srv);
}

static void teardown(void)
{
    server_stop(srv);
    srv = NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls (up to 30 s) until at least want requests are in flight. This only
 * orders the test's steps; it asserts nothing about time. */
static void wait_in_flight(server *s, size_t want)
{
    for (int i = 0; i < 3000 && metrics_in_flight(server_metrics(s)) < want;
         i++)
        sleep_ms(10);
    ck_assert_uint_ge(metrics_in_flight(server_metrics(s)), want);
}

/* Polls (up to 30 s) until no request is in flight: a client has its whole
 * response before the server's completion callback has counted it. */
static void wait_idle(server *s)
{
    for (int i = 0; i < 3000 && metrics_in_flight(server_metrics(s)) > 0; i++)
        sleep_ms(10);
    ck_assert_uint_eq(metrics_in_flight(server_metrics(s)), 0);
}

/* -- routes -------------------------------------------------------------- */

START_TEST(test_http_health_routes)
{
    static const char *paths[] = {"/healthz", "/livez", "/readyz"};
    for (size_t i = 0; i < 3; i++) {
        ts_response r;
        ts_request q = {.path = paths[i]};
        ts_http(port, &q, &r);
        ck_assert_int_eq(r.status, 200);
        json_t *j = json_loads(r.body, 0, NULL);
        ck_assert_ptr_nonnull(j);
        ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "ok");
        json_decref(j);
        ts_response_free(&r);
    }
}
END_TEST

START_TEST(test_http_head_has_no_body)
{
    ts_response r;
    ts_request q = {.method = "HEAD", .path = "/healthz"};
    ts_http(port, &q, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 0);
    char v[64];
    ck_assert_str_eq(ts_header(&r, "Content-Length", v, sizeof v), "15");
    ts_response_free(&r);
}
END_TEST

START_TEST(test_http_openapi_lists_attend)
{
    ts_response r;
    ts_request q = {.path = "/openapi.json"};
    ts_http(port, &q, &r);
    ck_assert_int_eq(r.status, 200);
    char type[128];
    ck_assert_str_eq(ts_header(&r, "Content-Type", type, sizeof type),
                     "application/json");
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    ck_assert_msg(j != NULL, "openapi.json line %d: %s", je.line, je.text);
    const char *ver = json_string_value(json_object_get(j, "openapi"));
    ck_assert_ptr_nonnull(ver);
    ck_assert(!strncmp(ver, "3.", 2));
    json_t *paths = json_object_get(j, "paths");
    ck_assert(json_is_object(json_object_get(json_object_get(paths, "/attend"),
                                             "post")));
    static const char *gets[] = {"/healthz", "/livez", "/readyz", "/metrics",
                                 "/openapi.json", "/limits"};
    for (size_t i = 0; i < sizeof gets / sizeof gets[0]; i++)
        ck_assert_msg(json_is_object(json_object_get(
                          json_object_get(paths, gets[i]), "get")),
                      "openapi.json lacks GET %s", gets[i]);
    /* Every documented GET path without parameters is served (GET
     * /tensors/{ref} is tested by the store suite). */
    const char *path;
    json_t *item;
    json_object_foreach(paths, path, item)
    {
        if (json_object_get(item, "get") && !strchr(path, '{'))
            ck_assert_msg(ts_get_status(port, path) == 200, "GET %s", path);
    }
    /* The documented request example is a valid request. */
    json_t *example = json_object_get(
        json_object_get(json_object_get(json_object_get(j, "components"),
                                        "schemas"),
                        "AttendRequest"),
        "example");
    ck_assert(json_is_object(example));
    char *body = json_dumps(example, JSON_COMPACT);
    ts_response a;
    ts_request q2 = {.method = "POST", .path = "/attend",
                     .content_type = "application/json", .body = body,
                     .body_len = strlen(body)};
    ts_http(port, &q2, &a);
    ck_assert_msg(a.status == 200, "example got %ld: %s", a.status, a.body);
    ts_response_free(&a);
    free(body);
    json_decref(j);
    ts_response_free(&r);
}
END_TEST

/* The Error schema's code enum is exactly the codes of the error table
 * (errors.h): every code the service can send is documented, none it
 * never sends. */
START_TEST(test_http_openapi_error_codes)
{
    ts_response r;
    ts_request q = {.path = "/openapi.json"};
    ts_http(port, &q, &r);
    ck_assert_int_eq(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_t *error = json_object_get(
        json_object_get(json_object_get(json_object_get(j, "components"),
                                        "schemas"),
                        "Error"),
        "properties");
    json_t *code = json_object_get(
        json_object_get(json_object_get(error, "error"), "properties"),
        "code");
    json_t *values = json_object_get(code, "enum");
    const char *description =
        json_string_value(json_object_get(code, "description"));
    ck_assert(json_is_array(values));
    ck_assert_ptr_nonnull(description);
    for (int k = 0; k < ERRORS_COUNT; k++) {
        const char *name = errors_code((errors_kind)k);
        char status[64];
        size_t i;
        json_t *v;
        int found = 0;
        json_array_foreach(values, i, v)
            found |= !strcmp(json_string_value(v), name);
        ck_assert_msg(found, "Error.code enum lacks \"%s\"", name);
        /* the description gives each code's statuses */
        snprintf(status, sizeof status, "%d",
                 errors_http_status((errors_kind)k));
        ck_assert_msg(strstr(description, name) &&
                          strstr(strstr(description, name), status),
                      "Error.code description lacks %s %s", name, status);
    }
    size_t i;
    json_t *v;
    json_array_foreach(values, i, v)
    {
        int k = 0;
        while (k < ERRORS_COUNT &&
               strcmp(errors_code((errors_kind)k), json_string_value(v)))
            k++;
        ck_assert_msg(k < ERRORS_COUNT, "Error.code enum has \"%s\", which "
                      "the service never sends", json_string_value(v));
    }
    json_decref(j);
    ts_response_free(&r);
}
END_TEST

START_TEST(test_http_dashboard_served)
{
    ts_response r;
    ts_request q = {.path = "/"};
    ts_http(port, &q, &r);
    ck_assert_int_eq(r.status, 200);
    char type[128];
    ck_assert_ptr_nonnull(ts_header(&r, "Content-Type", type, sizeof type));
    ck_assert_msg(!strncmp(type, "text/html", 9), "type %s", type);
    ck_assert_uint_gt(r.len, 0);
    ts_response_free(&r);
}
END_TEST

START_TEST(test_http_unknown_path_404)
{
    static const char *methods[] = {"GET", "POST", "DELETE"};
    for (size_t i = 0; i < 3; i++) {
        ts_response r;
        ts_request q = {.method = methods[i], .path = "/no/such/thing"};
        ts_http(port, &q, &r);
        ts_assert_error(&r, 404, "not_found");
        ts_response_free(&r);
    }
}
END_TEST

START_TEST(test_http_wrong_method_405_allow)
{
    static const struct {
        const char *method, *path, *allow;
    } rows[] = {
        {"GET", "/attend", "POST, OPTIONS"},
        {"PUT", "/attend", "POST, OPTIONS"},
        {"DELETE", "/attend", "POST, OPTIONS"},
        {"POST", "/healthz", "GET, HEAD, OPTIONS"},
        {"PUT", "/readyz", "GET, HEAD, OPTIONS"},
        {"DELETE", "/metrics", "GET, HEAD, OPTIONS"},
        {"POST", "/openapi.json", "GET, HEAD, OPTIONS"},
        {"PATCH", "/livez", "GET, HEAD, OPTIONS"},
        {"POST", "/limits", "GET, HEAD, OPTIONS"},
        {"PUT", "/limits", "GET, HEAD, OPTIONS"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ts_response r;
        ts_request q = {.method = rows[i].method, .path = rows[i].path};
        ts_http(port, &q, &r);
        ts_assert_error(&r, 405, "method_not_allowed");
        char allow[128];
        ck_assert_ptr_nonnull(ts_header(&r, "Allow", allow, sizeof allow));
        ck_assert_str_eq(allow, rows[i].allow);
        ts_response_free(&r);
    }
}
END_TEST

/* -- GET /limits --------------------------------------------------------- */

/* The limits GET /limits publishes, in the order it writes them. */
static const char *const limit_keys[] = {
    "max_body_bytes", "max_dim",           "max_batch",
    "max_heads",      "max_map_elems",     "max_flops",
    "max_request_bytes", "tensor_store_bytes",
};
#define N_LIMIT_KEYS (sizeof limit_keys / sizeof limit_keys[0])

/* GET /limits on p: a 200 JSON object of exactly the limit_keys, each an
 * integer, in that order; its values in v. */
static void get_limits(uint16_t p, json_int_t v[N_LIMIT_KEYS])
{
    ts_response r;
    ts_request q = {.path = "/limits"};
    ts_http(p, &q, &r);
    ck_assert_msg(r.status == 200, "GET /limits: %ld %s", r.status, r.body);
    char type[128];
    ck_assert_str_eq(ts_header(&r, "Content-Type", type, sizeof type),
                     "application/json");
    json_error_t je;
    json_t *j = json_loads(r.body, JSON_PRESERVE_ORDER, &je);
    ck_assert_msg(json_is_object(j), "GET /limits: %s (%s)", r.body, je.text);
    ck_assert_uint_eq(json_object_size(j), N_LIMIT_KEYS);
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach(j, key, val)
    {
        ck_assert_str_eq(key, limit_keys[i]);
        ck_assert_msg(json_is_integer(val), "%s is not an integer", key);
        v[i++] = json_integer_value(val);
    }
    json_decref(j);
    ts_response_free(&r);
}

/* A server on the command line args (after "attnd"), on 127.0.0.1:0. */
static server *start_with_flags(int argc, char **argv)
{
    config cfg;
    ck_assert_int_eq(config_parse(&cfg, argc, argv, stdout, stderr),
                     CONFIG_RUN);
    strcpy(cfg.host, "127.0.0.1");
    cfg.port = 0;
    cfg.threads = 2;
    cfg.quiet = true;
    return ts_start(&cfg);
}

/* On a server at its defaults, /limits gives the documented defaults and
 * --max-request-bytes' automatic value resolved to bytes: half the memory
 * over --max-in-flight (64). */
START_TEST(test_http_limits_defaults)
{
    json_int_t v[N_LIMIT_KEYS];
    get_limits(port, v);
    const json_int_t want[N_LIMIT_KEYS] = {
        67108864, 16384, 256, 128, 16777216, 200000000000LL,
        (json_int_t)(config_memory_bytes() / 2 / 64), 268435456};
    for (size_t i = 0; i < N_LIMIT_KEYS; i++)
        ck_assert_msg(v[i] == want[i], "%s is %lld, expected %lld",
                      limit_keys[i], (long long)v[i], (long long)want[i]);
    ck_assert_int_gt(v[6], 0);
    ck_assert_int_eq(v[6], (json_int_t)server_config(srv)->limits
                               .max_request_bytes);
}
END_TEST

/* /limits gives the values of the flags a server was started with, the
 * automatic --max-request-bytes sized by the --max-in-flight in force, and
 * 0 for a store turned off. */
START_TEST(test_http_limits_follow_flags)
{
    char *args[] = {"attnd", "--max-body-bytes", "60000", "--max-dim", "8",
                    "--max-batch", "3", "--max-heads", "2",
                    "--max-map-elems=300", "--max-flops", "1000000",
                    "--max-in-flight", "4", "--max-request-bytes", "auto",
                    "--tensor-store-bytes", "0"};
    server *s = start_with_flags((int)(sizeof args / sizeof args[0]), args);
    json_int_t v[N_LIMIT_KEYS];
    get_limits(server_port(s), v);
    const json_int_t want[N_LIMIT_KEYS] = {
        60000, 8, 3, 2, 300, 1000000,
        (json_int_t)(config_memory_bytes() / 2 / 4), 0};
    for (size_t i = 0; i < N_LIMIT_KEYS; i++)
        ck_assert_msg(v[i] == want[i], "%s is %lld, expected %lld",
                      limit_keys[i], (long long)v[i], (long long)want[i]);
    /* with the store off, /limits is still served */
    ck_assert_int_eq(ts_get_status(server_port(s), "/tensors"), 404);
    server_stop(s);

    char *fixed[] = {"attnd", "--max-request-bytes", "123456",
                     "--tensor-store-bytes", "4096"};
    s = start_with_flags(5, fixed);
    get_limits(server_port(s), v);
    ck_assert_int_eq(v[6], 123456);
    ck_assert_int_eq(v[7], 4096);
    server_stop(s);
}
END_TEST

/* HEAD has GET's headers and no body; OPTIONS is a preflight; each is
 * counted under the path label /limits. */
START_TEST(test_http_limits_head_options_metrics)
{
    ts_response g, h, o;
    ts_request qg = {.path = "/limits"};
    ts_request qh = {.method = "HEAD", .path = "/limits"};
    ts_request qo = {.method = "OPTIONS", .path = "/limits",
                     .origin = "https://app.example"};
    ts_http(port, &qg, &g);
    ts_http(port, &qh, &h);
    ts_http(port, &qo, &o);
    ck_assert_int_eq(h.status, 200);
    ck_assert_uint_eq(h.len, 0);
    char len[32], type[64], allow[64];
    ck_assert_ptr_nonnull(ts_header(&h, "Content-Length", len, sizeof len));
    ck_assert_uint_eq(strtoull(len, NULL, 10), g.len);
    ck_assert_str_eq(ts_header(&h, "Content-Type", type, sizeof type),
                     "application/json");
    ck_assert_int_eq(o.status, 204);
    ck_assert_str_eq(ts_header(&o, "Allow", allow, sizeof allow),
                     "GET, HEAD, OPTIONS");
    ts_response_free(&g);
    ts_response_free(&h);
    ts_response_free(&o);
    wait_idle(srv);
    ts_response m;
    ts_request qm = {.path = "/metrics"};
    ts_http(port, &qm, &m);
    ck_assert_double_eq(
        ts_metric(m.body, "attnd_http_requests_total{path=\"/limits\",status=\"200\"}"),
        2);
    ck_assert_double_eq(
        ts_metric(m.body, "attnd_http_requests_total{path=\"/limits\",status=\"204\"}"),
        1);
    ts_response_free(&m);
}
END_TEST

START_TEST(test_http_attend_needs_json_415)
{
    static const char *bad[] = {"text/plain", "application/x-www-form-urlencoded",
                                "application/jsonx", NULL};
    for (size_t i = 0; i < 4; i++) {
        ts_response r;
        ts_request q = {.method = "POST", .path = "/attend",
                        .content_type = bad[i], .body = "{}", .body_len = 2};
        ts_http(port, &q, &r);
        ts_assert_error(&r, 415, "unsupported_media_type");
        ts_response_free(&r);
    }
    /* JSON types with parameters pass the media-type check and reach the
     * codec, which answers for the (invalid) body itself. */
    static const char *good[] = {"application/json",
                                 "application/json; charset=utf-8",
                                 "Application/JSON;charset=UTF-8"};
    for (size_t i = 0; i < 3; i++) {
        ts_response r;
        ts_request q = {.method = "POST", .path = "/attend",
                        .content_type = good[i], .body = "[1,", .body_len = 3};
        ts_http(port, &q, &r);
        ts_assert_error(&r, 400, "invalid_json");
        ts_response_free(&r);
    }
    /* A compressed body is refused by its coding, not read as broken
     * JSON: 415 on both POST routes; "identity" is no coding at all. */
    static const char *const posts[] = {
        "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
        "\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
        "POST /tensors HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
        "\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\n[1]",
        "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
        "\r\nContent-Encoding: identity\r\nContent-Length: 3\r\n\r\n[1,",
        /* two media types: neither is guessed */
        "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
        "\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\n[1,",
        "POST /tensors HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
        "\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n"
        "[1]",
    };
    static const int want[] = {415, 415, 400, 415, 415};
    for (size_t i = 0; i < 5; i++) {
        char out[4096];
        int st = ts_raw(port, posts[i], strlen(posts[i]), out, sizeof out);
        ck_assert_msg(st == want[i], "case %zu: %d: %s", i, st, out);
        ck_assert_ptr_nonnull(strstr(out, want[i] == 415
                                              ? "\"unsupported_media_type\""
                                              : "\"invalid_json\""));
    }
}
END_TEST

/* -- CORS ---------------------------------------------------------------- */

START_TEST(test_http_cors_default_any_origin)
{
    ts_response r;
    ts_request q = {.path = "/healthz", .origin = "https://app.example"};
    ts_http(port, &q, &r);
    char v[256];
    ck_assert_str_eq(ts_header(&r, "Access-Control-Allow-Origin", v, sizeof v),
                     "*");
    ts_response_free(&r);

    const char *extra[] = {"Access-Control-Request-Method: POST",
                           "Access-Control-Request-Headers: content-type",
                           NULL};
    ts_request pre = {.method = "OPTIONS", .path = "/attend",
                      .origin = "https://app.example", .extra = extra};
    ts_http(port, &pre, &r);
    ck_assert_int_eq(r.status, 204);
    ck_assert_uint_eq(r.len, 0);
    ck_assert_str_eq(ts_header(&r, "Access-Control-Allow-Origin", v, sizeof v),
                     "*");
    ck_assert_ptr_nonnull(
        ts_header(&r, "Access-Control-Allow-Methods", v, sizeof v));
    ck_assert_ptr_nonnull(strstr(v, "POST"));
    ck_assert_ptr_nonnull(
        ts_header(&r, "Access-Control-Allow-Headers", v, sizeof v));
    ck_assert_ptr_nonnull(strcasestr(v, "content-type"));
    ck_assert_ptr_nonnull(ts_header(&r, "Access-Control-Max-Age", v, sizeof v));
    ck_assert_int_gt(atoi(v), 0);
    ts_response_free(&r);

    /* Error responses carry the header too, so browsers can read them. */
    ts_request nf = {.path = "/nope", .origin = "https://app.example"};
    ts_http(port, &nf, &r);
    ck_assert_int_eq(r.status, 404);
    ck_assert_str_eq(ts_header(&r, "Access-Control-Allow-Origin", v, sizeof v),
                     "*");
    ts_response_free(&r);
}
END_TEST

START_TEST(test_http_cors_configured_origins)
{
    config cfg;
    ts_config(&cfg);
    strcpy(cfg.cors_origins, "https://a.example, https://b.example:8443");
    server *s = ts_start(&cfg);
    uint16_t p = server_port(s);
    char v[256];
    ts_response r;

    ts_request ok = {.path = "/readyz", .origin = "https://b.example:8443"};
    ts_http(p, &ok, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(ts_header(&r, "Access-Control-Allow-Origin", v, sizeof v),
                     "https://b.example:8443");
    ck_assert_ptr_nonnull(ts_header(&r, "Vary", v, sizeof v));
    ck_assert_ptr_nonnull(strstr(v, "Origin"));
    ts_response_free(&r);

    ts_request pre = {.method = "OPTIONS", .path = "/attend",
                      .origin = "https://a.example"};
    ts_http(p, &pre, &r);
    ck_assert_int_eq(r.status, 204);
    ck_assert_str_eq(ts_header(&r, "Access-Control-Allow-Origin", v, sizeof v),
                     "https://a.example");
    ts_response_free(&r);

    ts_request bad = {.path = "/healthz", .origin = "https://evil.example"};
    ts_http(p, &bad, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_null(ts_header(&r, "Access-Control-Allow-Origin", v, sizeof v));
    ck_assert_ptr_nonnull(ts_header(&r, "Vary", v, sizeof v));
    ts_response_free(&r);
    server_stop(s);
}
END_TEST

START_TEST(test_http_wildcard_ipv6_host_serves_ipv4_too)
{
    config cfg;
    ts_config(&cfg);
    strcpy(cfg.host, "::");
    server *s = NULL;
    char err[256];
    if (server_start(&cfg, &s, err, sizeof err)) {
        /* Only a machine without IPv6 may refuse "::". */
        int fd = socket(AF_INET6, SOCK_STREAM, 0);
        ck_assert_msg(fd < 0, "\"::\" refused with IPv6 present: %s", err);
        return;
    }
    /* ts_get_status connects to 127.0.0.1. */
    ck_assert_int_eq(ts_get_status(server_port(s), "/healthz"), 200);
    server_stop(s);
}
END_TEST

/* -- metrics ------------------------------------------------------------- */

static char *get_metrics(uint16_t p)
{
    ts_response r;
    ts_request q = {.path = "/metrics"};
    ts_http(p, &q, &r);
    ck_assert_int_eq(r.status, 200);
    char type[128];
    ck_assert_ptr_nonnull(ts_header(&r, "Content-Type", type, sizeof type));
    ck_assert_ptr_nonnull(strstr(type, "version=0.0.4"));
    return r.body;
}

/* /metrics after closing fds[0..n) (those still open), on a connection
 * of its own. */
static char *get_metrics_close(uint16_t p, int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    sleep_ms(100);
    return get_metrics(p);
}

START_TEST(test_http_metrics_move)
{
    wait_idle(srv);
    char *before = get_metrics(port);
    double h0 = ts_metric(before, "attnd_http_requests_total{path=\"/healthz\",status=\"200\"}");
    double nf0 = ts_metric(before, "attnd_http_requests_total{path=\"other\",status=\"404\"}");
    double in0 = ts_metric(before, "attnd_http_received_bytes_total");
    double out0 = ts_metric(before, "attnd_http_sent_bytes_total");
    double d0 = ts_metric(before, "attnd_http_request_duration_seconds_count");
    free(before);
    ck_assert(in0 >= 0 && out0 >= 0 && d0 >= 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ts_get_status(port, "/healthz"), 200);
    ck_assert_int_eq(ts_get_status(port, "/nope-1"), 404);
    ck_assert_int_eq(ts_get_status(port, "/nope-2"), 404);
    ts_response r;
    ts_request q = {.method = "POST", .path = "/attend",
                    .content_type = "application/json", .body = "{\"x\":",
                    .body_len = 5};
    ts_http(port, &q, &r);
    ck_assert_int_eq(r.status, 400);
    ts_response_free(&r);

    wait_idle(srv);
    char *after = get_metrics(port);
    /* Counts are exact: the test is the only client. */
    ck_assert_double_eq(
        ts_metric(after, "attnd_http_requests_total{path=\"/healthz\",status=\"200\"}"),
        (h0 < 0 ? 0 : h0) + 3);
    /* Unknown paths share one label, so scanners cannot grow the series. */
    ck_assert_double_eq(
        ts_metric(after, "attnd_http_requests_total{path=\"other\",status=\"404\"}"),
        (nf0 < 0 ? 0 : nf0) + 2);
    ck_assert_double_eq(
        ts_metric(after, "attnd_http_requests_total{path=\"/attend\",status=\"400\"}"),
        1);
    ck_assert_double_eq(ts_metric(after, "attnd_http_received_bytes_total"),
                        in0 + 5);
    ck_assert(ts_metric(after, "attnd_http_sent_bytes_total") >= out0 + 3 * 15);
    /* 6 requests plus the first /metrics itself finished in between. */
    ck_assert_double_eq(
        ts_metric(after, "attnd_http_request_duration_seconds_count"), d0 + 7);
    ck_assert(ts_metric(after, "attnd_http_requests_in_flight") >= 1);
    ck_assert_double_eq(
        ts_metric(after, "attnd_build_info{version=\"" CONFIG_VERSION
                         "\",libmicrohttpd=\"0.9.75\"}"),
        1);
    ck_assert(ts_metric(after, "attnd_compute_seconds_total") >= 0);
    ck_assert_ptr_nonnull(strstr(after, "# TYPE attnd_compute_duration_seconds histogram"));
    free(after);
}
END_TEST

/* -- body limits and smuggling guards ------------------------------------ */

static server *start_small_body(size_t max_body)
{
    config cfg;
    ts_config(&cfg);
    cfg.limits.max_body_bytes = max_body;
    return ts_start(&cfg);
}

START_TEST(test_http_content_length_over_limit_413_before_upload)
{
    server *s = start_small_body(1000);
    /* Headers only: the body is never sent, so an answer proves the server
     * decided from Content-Length alone. */
    static const char req[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                              "Content-Type: application/json\r\n"
                              "Content-Length: 5000\r\n\r\n";
    char out[4096];
    int status = ts_raw(server_port(s), req, sizeof req - 1, out, sizeof out);
    ck_assert_msg(status == 413, "got %d: %s", status, out);
    ck_assert_ptr_nonnull(strstr(out, "\"too_large\""));
    ck_assert_ptr_nonnull(strstr(out, "--max-body-bytes"));
    ck_assert_ptr_nonnull(strstr(out, "is 1000"));
    /* Through libcurl too, body attached. */
    char *big = malloc(5000);
    memset(big, ' ', 5000);
    ts_response r;
    ts_request q = {.method = "POST", .path = "/attend",
                    .content_type = "application/json", .body = big,
                    .body_len = 5000};
    ts_http(server_port(s), &q, &r);
    ts_assert_error(&r, 413, "too_large");
    ts_response_free(&r);
    free(big);
    ck_assert_int_eq(ts_get_status(server_port(s), "/healthz"), 200);
    server_stop(s);
}
END_TEST

/* Sends head and then body_len bytes of body on a fresh connection, the
 * way node's fetch or a browser does (all of it before reading), and
 * returns the status it then reads, or -errno when a send failed: an
 * answer decided from the head must not reach such a client as a reset
 * (a broken pipe, the answer lost). */
static int send_all_then_read(uint16_t p, const char *head,
                              size_t body_len, char *out, size_t cap)
{
    static char chunk[65536];
    int fd = ts_connect(p), status = -1;
    size_t sent = 0, got = 0;
    struct timeval tv = {10, 0};

    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    memset(chunk, ' ', sizeof chunk);
    if (send(fd, head, strlen(head), MSG_NOSIGNAL) < 0) {
        status = -errno;
        goto out;
    }
    while (sent < body_len) {
        size_t k = body_len - sent < sizeof chunk ? body_len - sent
                                                   : sizeof chunk;
        ssize_t w = send(fd, chunk, k, MSG_NOSIGNAL);
        if (w < 0) {
            status = -errno;
            goto out;
        }
        sent += (size_t)w;
    }
    for (;;) {
        ssize_t r = recv(fd, out + got, cap - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    out[got] = '\0';
    if (sscanf(out, "HTTP/1.1 %d", &status) != 1)
        status = -1;
out:
    close(fd);
    return status;
}

START_TEST(test_http_early_refusal_read_by_a_client_still_sending)
{
    static const struct {
        const char *head;
        size_t body;
        int want;
    } cases[] = {
        {"POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
         "\r\nContent-Length: 16777216\r\n\r\n", 16777216, 413},
        {"POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
         "Content-Length: 900\r\n\r\n", 900, 415},
        {"POST /tensors HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
         "\r\nContent-Length: 16777216\r\n\r\n", 16777216, 413},
    };
    server *s = start_small_body(1000);
    char out[4096];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = send_all_then_read(server_port(s), cases[i].head,
                                    cases[i].body, out, sizeof out);
        ck_assert_msg(st == cases[i].want, "case %zu: got %d (%s)", i, st,
                      st < 0 ? strerror(-st) : out);
    }
    ck_assert_int_eq(ts_get_status(server_port(s), "/healthz"), 200);
    server_stop(s);
}
END_TEST

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* An answer of about a megabyte sent with Connection: close reaches a
 * client that sends more bytes only after the server began closing the
 * connection (its end is past ESTABLISHED), whole and without a reset: the
 * connection lingers, its input read and dropped, where a closed socket
 * would answer those bytes with a reset that drops the rest of the answer.
 * Lingering lasts 2 s; a try whose client sent more than a second after
 * the request was last seen unfinished (a stalled machine) and failed
 * proves nothing, and is run again. */
START_TEST(test_http_answer_whole_when_the_client_sends_after_the_close)
{
    ts_case k;
    ts_case_make(&k, 2000, 64, 4, 16, "\"return_weights\":\"none\"");
    char head[256];
    int hlen = snprintf(head, sizeof head,
                        "POST /attend HTTP/1.1\r\nHost: t\r\n"
                        "Connection: close\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %zu\r\n\r\n",
                        k.json_len);
    static const char more[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    size_t cap = (size_t)8 << 20;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (int tries = 1;; tries++) {
        int fd = ts_connect(port);
        double busy = seconds_now();
        ck_assert_int_eq(send(fd, head, (size_t)hlen, MSG_NOSIGNAL), hlen);
        ck_assert_int_eq(send(fd, k.json, k.json_len, MSG_NOSIGNAL),
                         (ssize_t)k.json_len);
        /* The server closes once the whole answer is with the kernel;
         * what the kernel cannot hold yet is made room for by reading,
         * but most of the answer stays unread. */
        size_t got = 0;
        for (int i = 0;; i++) {
            double t = seconds_now();
            if (metrics_in_flight(server_metrics(srv)) == 0)
                break;
            busy = t;
            ck_assert_msg(i < 6000, "the answer was never sent");
            ssize_t n = recv(fd, buf + got, 65536, MSG_DONTWAIT);
            if (n > 0)
                got += (size_t)n;
            sleep_ms(10);
        }
        int state;
        for (int i = 0; (state = ts_server_end_state(fd, port)) == 1; i++) {
            ck_assert_msg(i < 30000, "the server never closed the connection");
            sleep_ms(1);
        }
        ck_assert_int_eq(send(fd, more, sizeof more - 1, MSG_NOSIGNAL),
                         (ssize_t)sizeof more - 1);
        double late = seconds_now() - busy;

        int err = ts_read_to_end(fd, buf, cap, &got, 30);
        close(fd);
        bool whole = !err && ts_whole_chunked_200(buf, got);
        if (!whole && late > 1.0 && tries < 5)
            continue;
        ck_assert_msg(!err, "the connection ended in %s after %zu bytes "
                            "(server end state %d, %.3f s late)",
                      strerror(err), got, state, late);
        ck_assert_msg(whole, "the answer is not whole: %zu bytes", got);
        break;
    }
    free(buf);
    ts_case_free(&k);
}
END_TEST

/* A body with a Content-Length is reserved whole against
 * --max-buffered-bytes, and its buffer is that size: a 60-byte request
 * under a 2 KiB budget is served (its buffer was rounded up to 16 KiB,
 * over the budget, and every small body was refused 503). */
START_TEST(test_http_small_buffered_budget_serves_small_bodies)
{
    static const char body[] =
        "{\"x\":[[1,0]],\"w_q\":[[1],[0]],\"w_k\":[[1],[0]],"
        "\"w_v\":[[1],[0]]}";
    config cfg;
    ts_config(&cfg);
    cfg.max_buffered_bytes = 2048;
    server *s = ts_start(&cfg);
    ts_response r;
    ts_request q = {.method = "POST", .path = "/attend",
                    .content_type = "application/json", .body = body,
                    .body_len = sizeof body - 1};

    ts_http(server_port(s), &q, &r);
    ck_assert_msg(r.status == 200, "%ld: %s", (long)r.status, r.body);
    ts_response_free(&r);
    server_stop(s);
}
END_TEST

/* A chunked upload of total bytes, in 512-byte pieces. */
typedef struct upload {
    size_t total, sent;
    atomic_int gate; /* 0: hold the rest of the body; 1: send it */
    atomic_int started;
    size_t hold_after; /* bytes sent before waiting on gate (0: never) */
    const char *prefix; /* sent first; the rest is spaces */
} upload;

static size_t upload_read(char *buf, size_t size, size_t n, void *arg)
{
    upload *u = arg;
    atomic_store(&u->started, 1);
    if (u->hold_after && u->sent >= u->hold_after)
        while (!atomic_load(&u->gate))
            sleep_ms(5);
    size_t cap = size * n < 512 ? size * n : 512;
    size_t left = u->total - u->sent;
    size_t k = left < cap ? left : cap;
    size_t plen = u->prefix ? strlen(u->prefix) : 0;
    for (size_t i = 0; i < k; i++) {
        size_t at = u->sent + i;
        buf[i] = at < plen ? u->prefix[at] : ' ';
    }
    u->sent += k;
    return k;
}

typedef struct chunked_call {
    uint16_t port;
    upload *u;
    long status;
    char body[4096];
    char headers[4096];
} chunked_call;

static size_t keep_body(char *d, size_t s, size_t n, void *arg)
{
    char *b = arg;
    size_t have = strlen(b), add = s * n;
    if (have + add < 4096) {
        memcpy(b + have, d, add);
        b[have + add] = '\0';
    }
    return add;
}

static void *chunked_post(void *arg)
{
    chunked_call *c = arg;
    CURL *h = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/attend", (unsigned)c->port);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, upload_read);
    curl_easy_setopt(h, CURLOPT_READDATA, c->u);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c->body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, keep_body);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, c->headers);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    struct curl_slist *hl = curl_slist_append(NULL, "Transfer-Encoding: chunked");
    hl = curl_slist_append(hl, "Content-Type: application/json");
    hl = curl_slist_append(hl, "Expect:");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    c->status = curl_easy_perform(h) == CURLE_OK ? 0 : -1;
    if (c->status == 0)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &c->status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    return NULL;
}

/* The bytes reserved for bodies being received, from /metrics. */
static double buffered_bytes(uint16_t p)
{
    char *m = get_metrics(p);
    double v = ts_metric(m, "attnd_buffered_bytes");
    free(m);
    return v;
}

/* A body larger than all --max-buffered-bytes lets one body hold can
 * never be received, so it is 413, not 503 "retry later"; one that merely
 * does not fit beside the bodies being received now is 503 with
 * Retry-After. The budget is 4 MiB, of which a body over 1 MiB may take
 * fifteen sixteenths (3.75 MiB). */
START_TEST(test_http_body_beyond_budget_413_not_503)
{
    config cfg;
    ts_config(&cfg);
    cfg.max_buffered_bytes = (size_t)4 << 20;
    server *s = ts_start(&cfg);
    uint16_t p = server_port(s);
    char out[4096];

    /* Heads only: the answers are decided from Content-Length alone. */
    static const char beyond[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                                 "Content-Type: application/json\r\n"
                                 "Content-Length: 4000000\r\n\r\n";
    int status = ts_raw(p, beyond, sizeof beyond - 1, out, sizeof out);
    ck_assert_msg(status == 413, "got %d: %s", status, out);
    ck_assert_ptr_nonnull(strstr(out, "\"too_large\""));
    ck_assert_ptr_nonnull(strstr(out, "--max-buffered-bytes"));
    ck_assert_ptr_nonnull(strstr(out, "3932160"));
    ck_assert_ptr_null(strstr(out, "Retry-After"));

    /* 3 MB held by an upload whose body is still to come: 2 MB more do
     * not fit now, but will once it is gone. */
    static const char hold[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                               "Content-Type: application/json\r\n"
                               "Content-Length: 3000000\r\n\r\n";
    int held = ts_connect(p);
    ck_assert_int_eq(send(held, hold, sizeof hold - 1, MSG_NOSIGNAL),
                     (ssize_t)sizeof hold - 1);
    for (int i = 0; i < 500 && buffered_bytes(p) < 3000000; i++)
        sleep_ms(10);
    static const char now[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                              "Content-Type: application/json\r\n"
                              "Content-Length: 2000000\r\n\r\n";
    status = ts_raw(p, now, sizeof now - 1, out, sizeof out);
    ck_assert_msg(status == 503, "got %d: %s", status, out);
    ck_assert_ptr_nonnull(strstr(out, "\"unavailable\""));
    ck_assert_ptr_nonnull(strstr(out, "Retry-After"));
    close(held);

    /* Chunked: one that grows past 3.75 MiB is cut off with 413; one of
     * 3.5 MB, which the buffer's doubling once took to 4 MiB and refused
     * 503, is read whole and reaches the codec (spaces: invalid JSON). */
    for (int i = 0; i < 500 && buffered_bytes(p) > 0; i++)
        sleep_ms(10);
    upload u = {.total = 8 << 20};
    chunked_call c = {.port = p, .u = &u};
    chunked_post(&c);
    ck_assert_msg(c.status == 413, "got %ld: %s", c.status, c.body);
    ck_assert_ptr_nonnull(strstr(c.body, "\"too_large\""));
    ck_assert_ptr_nonnull(strstr(c.body, "--max-buffered-bytes"));
    ck_assert_uint_lt(u.sent, u.total);
    upload fits = {.total = 3500000};
    chunked_call c2 = {.port = p, .u = &fits};
    chunked_post(&c2);
    ck_assert_msg(c2.status == 400, "got %ld: %s", c2.status, c2.body);
    ck_assert_ptr_nonnull(strstr(c2.body, "\"invalid_json\""));
    server_stop(s);
}
END_TEST

START_TEST(test_http_chunked_over_limit_413_cut_off)
{
    server *s = start_small_body(1000);
    /* More than loopback's socket buffers hold, so the client is still
     * sending when it is cut off. */
    upload u = {.total = 64 << 20};
    chunked_call c = {.port = server_port(s), .u = &u};
    chunked_post(&c);
    ck_assert_int_eq(c.status, 413);
    ck_assert_ptr_nonnull(strstr(c.body, "\"too_large\""));
    ck_assert_ptr_nonnull(strstr(c.body, "--max-body-bytes"));
    /* Cut off as soon as it passed the limit, not read to its end. */
    ck_assert_uint_lt(u.sent, u.total);
    /* A chunked body within the limit is read in full and reaches the
     * codec (invalid JSON here: just spaces). */
    upload small = {.total = 900};
    chunked_call c2 = {.port = server_port(s), .u = &small};
    chunked_post(&c2);
    ck_assert_int_eq(c2.status, 400);
    ck_assert_ptr_nonnull(strstr(c2.body, "\"invalid_json\""));
    ck_assert_int_eq(ts_get_status(server_port(s), "/healthz"), 200);
    wait_idle(s);
    char *m = get_metrics(server_port(s));
    ck_assert_double_eq(
        ts_metric(m, "attnd_connections_closed_total{reason=\"too_large\"}"),
        1);
    ck_assert_double_eq(
        ts_metric(m, "attnd_http_requests_total{path=\"/attend\",status=\"413\"}"),
        1);
    free(m);
    server_stop(s);
}
END_TEST

START_TEST(test_http_transfer_encoding_guards_400)
{
    static const char both[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                               "Content-Type: application/json\r\n"
                               "Content-Length: 5\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n"
                               "0\r\n\r\n";
    static const char gzip[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                               "Content-Type: application/json\r\n"
                               "Transfer-Encoding: gzip, chunked\r\n\r\n"
                               "0\r\n\r\n";
    char out[4096];
    int st = ts_raw(port, both, sizeof both - 1, out, sizeof out);
    ck_assert_msg(st == 400, "TE+CL got %d: %s", st, out);
    ck_assert_ptr_nonnull(strstr(out, "\"code\":\"bad_request\""));
    st = ts_raw(port, gzip, sizeof gzip - 1, out, sizeof out);
    ck_assert_msg(st == 400, "TE gzip got %d: %s", st, out);
    ck_assert_ptr_nonnull(strstr(out, "\"code\":\"bad_request\""));
    ck_assert_int_eq(ts_get_status(port, "/healthz"), 200);
}
END_TEST

/* RFC 9112 3.2: an HTTP/1.1 request without Host is a 400; HTTP/1.0 needs
 * none. Repeated framing headers a proxy may read differently are 400. */
START_TEST(test_http_host_and_repeated_framing_400)
{
    static const char no_host[] = "GET /healthz HTTP/1.1\r\n"
                                  "Connection: close\r\n\r\n";
    static const char http10[] = "GET /healthz HTTP/1.0\r\n\r\n";
    static const char two_cl[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                                 "Content-Type: application/json\r\n"
                                 "Content-Length: 2\r\n"
                                 "Content-Length: 3\r\n\r\n{}";
    static const char two_te[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                                 "Content-Type: application/json\r\n"
                                 "Transfer-Encoding: chunked\r\n"
                                 "Transfer-Encoding: gzip\r\n\r\n"
                                 "0\r\n\r\n";
    char out[4096];
    int st = ts_raw(port, no_host, sizeof no_host - 1, out, sizeof out);
    ck_assert_msg(st == 400, "no Host got %d: %s", st, out);
    ck_assert_ptr_nonnull(strstr(out, "\"code\":\"bad_request\""));
    st = ts_raw(port, http10, sizeof http10 - 1, out, sizeof out);
    ck_assert_msg(st == 200, "HTTP/1.0 without Host got %d: %s", st, out);
    st = ts_raw(port, two_cl, sizeof two_cl - 1, out, sizeof out);
    ck_assert_msg(st == 400, "two Content-Length got %d: %s", st, out);
    st = ts_raw(port, two_te, sizeof two_te - 1, out, sizeof out);
    ck_assert_msg(st == 400, "two Transfer-Encoding got %d: %s", st, out);
    ck_assert_int_eq(ts_get_status(port, "/healthz"), 200);
}
END_TEST

/* RFC 9112 3.2.2: absolute-form targets (what a client sends through a
 * forward proxy) name the same resources as origin-form ones. */
START_TEST(test_http_absolute_form_target)
{
    static const char health[] = "GET http://t:8080/healthz HTTP/1.1\r\n"
                                 "Host: t:8080\r\nConnection: close\r\n\r\n";
    static const char upper[] = "GET HTTPS://t/readyz HTTP/1.1\r\n"
                                "Host: t\r\nConnection: close\r\n\r\n";
    static const char root[] = "GET http://t HTTP/1.1\r\n"
                               "Host: t\r\nConnection: close\r\n\r\n";
    static const char missing[] = "GET http://t/nothing HTTP/1.1\r\n"
                                  "Host: t\r\nConnection: close\r\n\r\n";
    char out[65536];
    int st = ts_raw(port, health, sizeof health - 1, out, sizeof out);
    ck_assert_msg(st == 200, "absolute-form /healthz got %d: %s", st, out);
    st = ts_raw(port, upper, sizeof upper - 1, out, sizeof out);
    ck_assert_msg(st == 200 || st == 503, "HTTPS:// /readyz got %d: %s", st,
                  out);
    st = ts_raw(port, root, sizeof root - 1, out, sizeof out);
    ck_assert_msg(st == 200, "absolute-form without a path got %d", st);
    st = ts_raw(port, missing, sizeof missing - 1, out, sizeof out);
    ck_assert_msg(st == 404, "absolute-form /nothing got %d: %s", st, out);
    ck_assert_ptr_nonnull(strstr(out, "no such path: /nothing"));
}
END_TEST

START_TEST(test_http_idle_connection_closed_by_timeout)
{
    config cfg;
    ts_config(&cfg);
    cfg.limits.timeout_s = 1;
    server *s = ts_start(&cfg);
    /* A slowloris: an unfinished request, then silence. The server must
     * close the connection by itself (-1), not leave it open (-2). */
    static const char partial[] = "POST /attend HTTP/1.1\r\nHost: t\r\n";
    char out[256];
    int st = ts_raw(server_port(s), partial, sizeof partial - 1, out, sizeof out);
    ck_assert_int_eq(st, -1);
    ck_assert_int_eq(ts_get_status(server_port(s), "/healthz"), 200);
    server_stop(s);
}
END_TEST

/* An upload that never pauses long enough for the inactivity timeout but
 * sends one byte every 200 ms. */
static size_t trickle_read(char *buf, size_t size, size_t n, void *arg)
{
    (void)size;
    (void)n;
    int *left = arg;
    if (*left == 0)
        return 0;
    sleep_ms(200);
    (*left)--;
    buf[0] = ' ';
    return 1;
}

START_TEST(test_http_trickled_body_cut_at_body_timeout)
{
    config cfg;
    ts_config(&cfg);
    cfg.body_timeout_s = 1;
    server *s = ts_start(&cfg);
    CURL *h = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/attend",
             (unsigned)server_port(s));
    int left = 50; /* 10 s of trickle if nobody stops it */
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, trickle_read);
    curl_easy_setopt(h, CURLOPT_READDATA, &left);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    struct curl_slist *hl = curl_slist_append(NULL, "Transfer-Encoding: chunked");
    hl = curl_slist_append(hl, "Content-Type: application/json");
    hl = curl_slist_append(hl, "Expect:");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    /* The server answered 408 and closed the connection, well before the
     * client had sent everything. */
    ck_assert_msg(rc == CURLE_OK && status == 408, "trickle: curl %d, status %ld",
                  (int)rc, status);
    ck_assert_int_gt(left, 0);
    wait_idle(s);
    ck_assert_int_eq(ts_get_status(server_port(s), "/healthz"), 200);
    server_stop(s);
}
END_TEST

/* -- in-flight limit ----------------------------------------------------- */

/* Tasks that hold every pool worker until released. */
typedef struct blocker {
    atomic_size_t started;
    atomic_int release;
} blocker;

static void block_task(void *arg, size_t i, size_t worker)
{
    (void)i;
    (void)worker;
    blocker *b = arg;
    atomic_fetch_add(&b->started, 1);
    while (!atomic_load(&b->release))
        sleep_ms(2);
}

/* A server's pool with every worker held by a block_task, from hold_pool
 * (which returns once all have started) to release_pool. */
typedef struct held_pool {
    const attn_executor *exec;
    blocker b;
    pthread_t thread;
} held_pool;

static void *held_pool_run(void *arg)
{
    held_pool *h = arg;
    h->exec->run(h->exec->ctx, h->exec->workers, block_task, &h->b);
    return NULL;
}

static void hold_pool(held_pool *h, server *s)
{
    h->exec = server_executor(s);
    atomic_init(&h->b.started, 0);
    atomic_init(&h->b.release, 0);
    pthread_create(&h->thread, NULL, held_pool_run, h);
    while (atomic_load(&h->b.started) < h->exec->workers)
        sleep_ms(2);
}

static void release_pool(held_pool *h)
{
    atomic_store(&h->b.release, 1);
    pthread_join(h->thread, NULL);
}

/* One POST /attend of c on a thread of its own: its answer (free r), and
 * done once it has come. */
typedef struct heavy_call {
    uint16_t port;
    const ts_case *c;
    long status;
    ts_response r;
    atomic_int done;
} heavy_call;

static void *heavy_post(void *arg)
{
    heavy_call *h = arg;
    ts_request q = {.method = "POST", .path = "/attend",
                    .content_type = "application/json", .body = h->c->json,
                    .body_len = h->c->json_len};
    ts_http(h->port, &q, &h->r);
    h->status = h->r.status;
    atomic_store(&h->done, 1);
    return NULL;
}

START_TEST(test_http_in_flight_limit_503_retry_after)
{
    config cfg;
    ts_config(&cfg);
    cfg.limits.max_in_flight = 1;
    server *s = ts_start(&cfg);
    uint16_t p = server_port(s);
    /* An upload stopped halfway holds no slot: a slot is taken by work,
     * from the moment a body is complete. */
    upload u = {.total = 2000, .hold_after = 512, .prefix = "["};
    chunked_call c = {.port = p, .u = &u};
    pthread_t t;
    pthread_create(&t, NULL, chunked_post, &c);
    wait_in_flight(s, 1);
    ts_response r;
    ts_request q = {.method = "POST", .path = "/attend",
                    .content_type = "application/json", .body = "{}",
                    .body_len = 2};
    ts_http(p, &q, &r);
    ts_assert_error(&r, 422, "invalid_request");
    ts_response_free(&r);

    /* A request computing holds the only slot: every compute thread is
     * held by a blocking task, so the request waits in the pool. */
    held_pool hp;
    hold_pool(&hp, s);
    ts_case k;
    ts_case_make(&k, 256, 64, 4, 16, NULL); /* large enough for the pool */
    heavy_call h = {.port = p, .c = &k};
    pthread_t th;
    pthread_create(&th, NULL, heavy_post, &h);
    wait_in_flight(s, 2);
    sleep_ms(200); /* its body is complete and its slot taken */
    ts_http(p, &q, &r);
    ts_assert_error(&r, 503, "unavailable");
    char v[64];
    ck_assert_ptr_nonnull(ts_header(&r, "Retry-After", v, sizeof v));
    ck_assert_int_ge(atoi(v), 1);
    ck_assert_msg(strstr(r.body, "the limit --max-in-flight "
                                 "(ATTND_MAX_IN_FLIGHT) is 1 "),
                  "%s", r.body);
    ts_response_free(&r);
    /* Probes are not work: they pass the full house. */
    ck_assert_int_eq(ts_get_status(p, "/healthz"), 200);
    ck_assert_int_eq(ts_get_status(p, "/readyz"), 200);
    release_pool(&hp);
    pthread_join(th, NULL);
    ck_assert_int_eq(h.status, 200);
    ts_response_free(&h.r);
    ts_case_free(&k);

    atomic_store(&u.gate, 1);
    pthread_join(t, NULL);
    ck_assert_int_eq(c.status, 400); /* "[" and spaces: invalid JSON */
    wait_idle(s);
    /* The slot is free again. */
    ts_http(p, &q, &r);
    ck_assert_int_ne(r.status, 503);
    ts_response_free(&r);
    server_stop(s);
}
END_TEST

/* Polls (up to 30 s) until at most want requests are in flight; as
 * wait_in_flight, it only orders the test's steps. */
static void wait_in_flight_down(server *s, size_t want)
{
    for (int i = 0; i < 3000 && metrics_in_flight(server_metrics(s)) > want;
         i++)
        sleep_ms(10);
    ck_assert_uint_le(metrics_in_flight(server_metrics(s)), want);
}

/* A POST /attend of c from address src whose answer is left unread:
 * returns its socket once the answer has begun, so the request holds its
 * slot until the socket is closed. The answer (per-head maps, over 10 MB)
 * is larger than what the kernel buffers between the two ends. */
static int hold_answer(uint16_t p, const char *src, const ts_case *c)
{
    int fd = ts_connect_from(p, src);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n",
                     c->json_len);
    ck_assert_int_eq(send(fd, head, (size_t)n, MSG_NOSIGNAL), n);
    ck_assert_int_eq(send(fd, c->json, c->json_len, MSG_NOSIGNAL),
                     (ssize_t)c->json_len);
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char status[13] = "";
    ck_assert_int_eq(recv(fd, status, 12, MSG_WAITALL), 12);
    ck_assert_str_eq(status, "HTTP/1.1 200");
    return fd;
}

/* One small POST /attend from src: its status, and its body in *r when r
 * is not NULL (free it). */
static long post_from(uint16_t p, const char *src, const ts_case *c,
                      ts_response *r)
{
    ts_response own;
    ts_request q = {.method = "POST", .path = "/attend",
                    .content_type = "application/json", .body = c->json,
                    .body_len = c->json_len, .source = src};
    ts_http(p, &q, r ? r : &own);
    long status = r ? r->status : own.status;
    if (!r)
        ts_response_free(&own);
    return status;
}

/* One address holds at most --max-in-flight-per-ip slots: another is
 * still served while it holds them, its slots come back when its
 * requests end (an error answered, an answer left mid-way), and an
 * attempt refused by the global limit leaves its address's count as it
 * was. Idle connections from A and D keep their addresses' entries, and
 * so their counts, for the whole test. A request ends (libmicrohttpd's
 * completion) just after its client has read the answer: the test waits
 * for the in-flight gauge before counting on the slots being free. */
START_TEST(test_http_in_flight_per_ip_limit)
{
    static const char *A = "127.0.0.2", *B = "127.0.0.1", *C = "127.0.0.3",
                      *D = "127.0.0.4";
    config cfg;
    ts_config(&cfg);
    cfg.limits.max_in_flight = 4;
    cfg.max_in_flight_per_ip = 2;
    cfg.min_send_rate = 0; /* an unread answer holds its slot */
    server *s = ts_start(&cfg);
    uint16_t p = server_port(s);
    int keep_a = ts_connect_from(p, A), keep_d = ts_connect_from(p, D);
    ts_case small, big;
    ts_case_make(&small, 4, 8, 2, 4, NULL);
    ts_case_make(&big, 512, 16, 4, 4, NULL);

    /* Answers and errors, one after another, each give their slot back. */
    ts_request bad = {.method = "POST", .path = "/attend",
                      .content_type = "application/json", .body = "{}",
                      .body_len = 2, .source = A};
    for (int i = 0; i < 3; i++) {
        ts_response r;
        ts_http(p, &bad, &r);
        ts_assert_error(&r, 422, "invalid_request");
        ts_response_free(&r);
        wait_in_flight_down(s, 0);
        ck_assert_int_eq(post_from(p, A, &small, NULL), 200);
        wait_in_flight_down(s, 0);
    }

    /* A holds its two: a third is refused, another address served. */
    int a1 = hold_answer(p, A, &big), a2 = hold_answer(p, A, &big);
    ts_response r;
    ck_assert_int_eq(post_from(p, A, &small, &r), 503);
    ts_assert_error(&r, 503, "unavailable");
    char v[64];
    ck_assert_ptr_nonnull(ts_header(&r, "Retry-After", v, sizeof v));
    ck_assert_str_eq(v, "1");
    ck_assert_msg(strstr(r.body, "the limit --max-in-flight-per-ip "
                                 "(ATTND_MAX_IN_FLIGHT_PER_IP) is 2 "),
                  "%s", r.body);
    ts_response_free(&r);
    ck_assert_int_eq(post_from(p, B, &small, NULL), 200);
    wait_in_flight_down(s, 2);

    /* C takes the other two: every slot is held. D is refused by the
     * global limit, twice; A still by its own. */
    int c1 = hold_answer(p, C, &big), c2 = hold_answer(p, C, &big);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(post_from(p, D, &small, &r), 503);
        ck_assert_msg(strstr(r.body, "the limit --max-in-flight "
                                     "(ATTND_MAX_IN_FLIGHT) is 4 "),
                      "%s", r.body);
        ts_response_free(&r);
    }
    ck_assert_int_eq(post_from(p, A, &small, &r), 503);
    ck_assert_ptr_nonnull(strstr(r.body, "--max-in-flight-per-ip"));
    ts_response_free(&r);

    /* C leaves mid-answer: D's refused attempts took nothing of its
     * address's share. */
    close(c1);
    close(c2);
    wait_in_flight_down(s, 2);
    ck_assert_int_eq(post_from(p, D, &small, NULL), 200);

    /* A leaves mid-answer: its slots come back, and the count is exact:
     * it holds two again, and no more. */
    close(a1);
    close(a2);
    wait_in_flight_down(s, 0);
    ck_assert_int_eq(post_from(p, A, &small, NULL), 200);
    wait_in_flight_down(s, 0);
    a1 = hold_answer(p, A, &big);
    a2 = hold_answer(p, A, &big);
    ck_assert_int_eq(post_from(p, A, &small, NULL), 503);
    ck_assert_int_eq(post_from(p, B, &small, NULL), 200);
    /* Each refusal counted under its reason: A's three, D's two. */
    char *m = metrics_render(server_metrics(s), NULL);
    ck_assert_ptr_nonnull(m);
    ck_assert_double_eq(
        ts_metric(m, "attnd_attend_refused_total{reason=\"in_flight_per_ip\"}"),
        3);
    ck_assert_double_eq(
        ts_metric(m, "attnd_attend_refused_total{reason=\"in_flight\"}"), 2);
    free(m);
    close(a1);
    close(a2);
    close(keep_a);
    close(keep_d);
    ts_case_free(&small);
    ts_case_free(&big);
    server_stop(s);
}
END_TEST

/* With --max-in-flight-per-ip 0, one address may hold every slot (attnd
 * behind a proxy whose address every request shares). */
START_TEST(test_http_in_flight_per_ip_off)
{
    config cfg;
    ts_config(&cfg);
    cfg.limits.max_in_flight = 3;
    cfg.max_in_flight_per_ip = 0;
    cfg.min_send_rate = 0;
    server *s = ts_start(&cfg);
    uint16_t p = server_port(s);
    ts_case small, big;
    ts_case_make(&small, 4, 8, 2, 4, NULL);
    ts_case_make(&big, 512, 16, 4, 4, NULL);
    int fd[3];
    for (int i = 0; i < 3; i++)
        fd[i] = hold_answer(p, "127.0.0.2", &big);
    ts_response r;
    ck_assert_int_eq(post_from(p, "127.0.0.1", &small, &r), 503);
    ck_assert_ptr_nonnull(strstr(r.body, "(ATTND_MAX_IN_FLIGHT) is 3 "));
    ts_response_free(&r);
    for (int i = 0; i < 3; i++)
        close(fd[i]);
    wait_in_flight_down(s, 0);
    ck_assert_int_eq(post_from(p, "127.0.0.2", &small, NULL), 200);
    ts_case_free(&small);
    ts_case_free(&big);
    server_stop(s);
}
END_TEST

/* -- computing ----------------------------------------------------------- */

/* Checks a nested [rows][cols] JSON array against ref within
 * 1e-4 * (1 + |ref|), the contract's tolerance. */
static void check_matrix(json_t *a, const float *ref, size_t rows, size_t cols)
{
    ck_assert_msg(json_is_array(a) && json_array_size(a) == rows,
                  "expected %zu rows", rows);
    for (size_t i = 0; i < rows; i++) {
        json_t *row = json_array_get(a, i);
        ck_assert_uint_eq(json_array_size(row), cols);
        for (size_t j = 0; j < cols; j++) {
            double got = json_number_value(json_array_get(row, j));
            double want = ref[i * cols + j];
            ck_assert_msg(fabs(got - want) <= 1e-4 * (1 + fabs(want)),
                          "[%zu][%zu] = %.9g, reference %.9g", i, j, got, want);
        }
    }
}

static void reference(const ts_case *c, float *out, float *weights)
{
    attn_params p;
    memset(&p, 0, sizeof p);
    p.dims = (attn_dims){1, c->n, c->n, c->d_model, c->d_model, c->h, c->h,
                         c->d_k, c->d_k, c->h * c->d_k};
    p.x = c->x;
    p.w_q = c->w_q;
    p.w_k = c->w_k;
    p.w_v = c->w_v;
    p.weights = weights ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE;
    ck_assert_int_eq(attn_forward_ref(&p, out, weights), ATTN_OK);
}

START_TEST(test_http_attend_round_trip)
{
    ts_case c;
    ts_case_make(&c, 5, 8, 2, 3, NULL);
    ts_response r;
    ts_request q = {.method = "POST", .path = "/attend",
                    .content_type = "application/json", .body = c.json,
                    .body_len = c.json_len, .origin = "https://x.example"};
    ts_http(port, &q, &r);
    ck_assert_msg(r.status == 200, "status %ld: %s", r.status, r.body);
    char v[128];
    ck_assert_str_eq(ts_header(&r, "Content-Type", v, sizeof v),
                     "application/json");
    ck_assert_str_eq(ts_header(&r, "Access-Control-Allow-Origin", v, sizeof v),
                     "*");
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    ck_assert_msg(j != NULL, "response is not JSON (%s): %.200s", je.text,
                  r.body);
    size_t d_out = c.h * c.d_k;
    float out[5 * 6], weights[2 * 5 * 5];
    reference(&c, out, weights);
    check_matrix(json_object_get(j, "output"), out, c.n, d_out);
    /* Per-head maps are the contract's default; check them when the codec
     * returns them ([h][n][m]). */
    json_t *att = json_object_get(j, "attention");
    if (att) {
        ck_assert_uint_eq(json_array_size(att), c.h);
        for (size_t i = 0; i < c.h; i++)
            check_matrix(json_array_get(att, i), weights + i * c.n * c.n, c.n,
                         c.n);
    }
    json_decref(j);
    ts_response_free(&r);

    wait_idle(srv);
    char *m = get_metrics(port);
    ck_assert_double_eq(
        ts_metric(m, "attnd_http_requests_total{path=\"/attend\",status=\"200\"}"), 1);
    ck_assert_double_eq(ts_metric(m, "attnd_compute_duration_seconds_count"), 1);
    ck_assert_double_eq(ts_metric(m, "attnd_http_received_bytes_total"),
                        (double)c.json_len);
    free(m);
    ts_case_free(&c);
}
END_TEST

/* Reads fd until the server closes it (or the receive timeout, or cap - 1
 * bytes): the text, NUL-terminated, its length in *got, and in *closed
 * whether the server closed it. */
static char *recv_to_close(int fd, size_t cap, size_t *got, bool *closed)
{
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    ssize_t n = 0;
    *got = 0;
    while (*got < cap - 1 && (n = recv(fd, out + *got, cap - 1 - *got, 0)) > 0)
        *got += (size_t)n;
    *closed = *got < cap - 1 && n == 0;
    out[*got] = '\0';
    close(fd);
    return out;
}

/* Sends the pieces of stream with a pause before each after the first,
 * then reads until the server closes; the answers' bodies go to bodies
 * (at most want). Returns how many came with status 200. */
static int paced_exchange(const char *stream, const size_t *cuts, size_t ncut,
                          size_t len, char **bodies, int want)
{
    int fd = ts_connect(port);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t from = 0;
    for (size_t i = 0; i <= ncut; i++) {
        size_t to = i < ncut ? cuts[i] : len;
        if (i > 0)
            sleep_ms(30);
        ck_assert_int_eq(send(fd, stream + from, to - from, MSG_NOSIGNAL),
                         (ssize_t)(to - from));
        from = to;
    }
    size_t got;
    bool closed;
    char *out = recv_to_close(fd, 1 << 22, &got, &closed);
    int ok = 0, k = 0;
    for (char *p = out; k < want && (p = strstr(p, "HTTP/1.1 ")); k++) {
        int status = atoi(p + 9);
        char *body = strstr(p, "\r\n\r\n");
        ck_assert_ptr_nonnull(body);
        body += 4;
        /* a chunked answer: its chunk sizes out of the way */
        text_buf t = TEXT_BUF_INIT;
        char *next = body;
        if (strcasestr(p, "Transfer-Encoding: chunked") &&
            strcasestr(p, "Transfer-Encoding: chunked") < body) {
            for (;;) {
                unsigned long sz = strtoul(next, &next, 16);
                next = strstr(next, "\r\n") + 2;
                if (sz == 0) {
                    next += 2;
                    break;
                }
                text_append(&t, next, sz);
                next += sz + 2;
            }
        } else {
            const char *h = strcasestr(p, "Content-Length: ");
            size_t blen = h && h < body ? strtoul(h + 16, NULL, 10) : 0;
            text_append(&t, body, blen);
            next = body + blen;
        }
        bodies[k] = text_take(&t, NULL);
        ok += status == 200;
        p = next;
    }
    free(out);
    return ok;
}

START_TEST(test_http_large_body_read_in_place)
{
    /* A body of at least 64 KiB is read straight into the request's
     * buffer, and libmicrohttpd's gets only the count of those bytes:
     * whatever way the bytes arrive (with the head, in small pieces, in one
     * piece larger than libmicrohttpd's buffer, two requests back to back
     * with a probe after them), the answers are those of the reference. */
    ts_case c;
    ts_case_make(&c, 48, 64, 4, 16, NULL);
    ck_assert_uint_gt(c.json_len, 1u << 17);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
                      "application/json\r\nContent-Length: %zu\r\n\r\n",
                      c.json_len);
    size_t one = (size_t)hl + c.json_len;
    static const char probe[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n"
                                "Connection: close\r\n\r\n";
    size_t len = 2 * one + sizeof probe - 1;
    char *stream = malloc(len);
    ck_assert_ptr_nonnull(stream);
    for (int i = 0; i < 2; i++) {
        memcpy(stream + i * one, head, (size_t)hl);
        memcpy(stream + i * one + hl, c.json, c.json_len);
    }
    memcpy(stream + 2 * one, probe, sizeof probe - 1);
    size_t h = (size_t)hl, b = c.json_len;
    const struct {
        size_t cuts[6];
        size_t ncut;
    } ways[] = {
        {{0}, 0},                                  /* all at once */
        {{h}, 1},                                  /* head, then the rest */
        {{h + 10}, 1},                             /* a few bytes with it */
        {{h + 7, h + 5000, h + 70000, h + 70001, one + h}, 5}, /* pieces */
        {{h + b - 1, one + h + 3, one + h + b / 2}, 3},
    };
    size_t d_out = c.h * c.d_k;
    float *out = malloc(c.n * d_out * sizeof *out);
    float *weights = malloc(c.h * c.n * c.n * sizeof *weights);
    reference(&c, out, weights);
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        char *bodies[3] = {NULL, NULL, NULL};
        int ok = paced_exchange(stream, ways[w].cuts, ways[w].ncut, len,
                                bodies, 3);
        ck_assert_msg(ok == 3, "way %zu: %d answers of 200", w, ok);
        for (int k = 0; k < 2; k++) {
            json_error_t je;
            json_t *j = json_loads(bodies[k], 0, &je);
            ck_assert_msg(j != NULL, "way %zu answer %d: %s", w, k, je.text);
            check_matrix(json_object_get(j, "output"), out, c.n, d_out);
            json_t *att = json_object_get(j, "attention");
            for (size_t i = 0; i < c.h; i++)
                check_matrix(json_array_get(att, i),
                             weights + i * c.n * c.n, c.n, c.n);
            json_decref(j);
        }
        for (int k = 0; k < 3; k++)
            free(bodies[k]);
    }
    free(out);
    free(weights);
    free(stream);
    ts_case_free(&c);
}
END_TEST

/* Sends data, half-closes (shutdown SHUT_WR, as a client that has nothing
 * more to say does) and reads until the server closes: the number of
 * "HTTP/1.1 " status lines it sent, or -1 when it neither closed nor
 * finished within 10 s. */
static int half_closed_exchange(const char *data, size_t len, int *first)
{
    int fd = ts_connect(port);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ck_assert_int_eq(send(fd, data, len, MSG_NOSIGNAL), (ssize_t)len);
    ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    size_t got;
    bool closed;
    char *out = recv_to_close(fd, 1 << 16, &got, &closed);
    int answers = 0;
    *first = 0;
    for (const char *p = out; (p = strstr(p, "HTTP/1.1 ")); p += 9)
        if (answers++ == 0)
            *first = atoi(p + 9);
    free(out);
    return closed ? answers : -1;
}

START_TEST(test_http_refused_head_answered_after_the_request_before_it)
{
    /* A head refused for its framing that comes pipelined behind a good
     * request: the good one gets its answer, then the refused one its 400,
     * in that order, and the server closes. For a request answered on the
     * thread that read it and for one computed on a thread of its own
     * whose answer streams, with three kinds of fault. */
    static const char *const bad[] = {
        "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Length: zz\r\n\r\n",
        "GARBAGE\r\n\r\n",
        ("GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
         "Content-Length: 5\r\n\r\n"),
    };
    ts_case small, large;
    ts_case_make(&small, 4, 8, 2, 4, NULL);
    ts_case_make(&large, 128, 256, 8, 32, "\"return_weights\":\"per_head\"");
    ck_assert_uint_gt(large.json_len, (size_t)1 << 20); /* off-thread */
    const ts_case *goods[] = {&small, &large};
    for (size_t g = 0; g < 2; g++)
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            char *data = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&data, &len);
            fprintf(f, "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
                       "application/json\r\nContent-Length: %zu\r\n\r\n",
                    goods[g]->json_len);
            fwrite(goods[g]->json, 1, goods[g]->json_len, f);
            fputs(bad[b], f);
            fclose(f);
            int fd = ts_connect(port);
            struct timeval tv = {.tv_sec = 20};
            held_pool h;
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            /* the large one waits in the held pool while sweeps pass: the
             * end of the stream they see is the server's own, its read
             * side shut for the refused head, and must not cancel it */
            if (g == 1)
                hold_pool(&h, srv);
            ck_assert_int_eq(send(fd, data, len, MSG_NOSIGNAL), (ssize_t)len);
            if (g == 1) {
                sleep_ms(700);
                release_pool(&h);
            }
            size_t got;
            bool closed;
            char *out = recv_to_close(fd, (size_t)1 << 24, &got, &closed);
            int status[3] = {0, 0, 0}, answers = 0;
            for (const char *p = out; (p = strstr(p, "HTTP/1.1 ")); p += 9)
                if (answers < 3)
                    status[answers++] = atoi(p + 9);
            ck_assert_msg(closed, "request %zu, fault %zu: not closed", g, b);
            ck_assert_msg(answers == 2 && status[0] == 200 &&
                              status[1] == 400,
                          "request %zu, fault %zu: %d answers (%d, %d)", g, b,
                          answers, status[0], status[1]);
            ck_assert_ptr_nonnull(strstr(out, "\"bad_request\""));
            free(out);
            free(data);
        }
    ts_case_free(&small);
    ts_case_free(&large);
}
END_TEST

START_TEST(test_http_later_request_refused_or_timed_out_answered)
{
    /* A kept-alive connection whose first request was answered: a second
     * head refused for its framing gets its 400, and one that stalls gets
     * its 408, instead of a silent close. */
    config cfg;
    ts_config(&cfg);
    cfg.header_timeout_s = 1;
    server *s = ts_start(&cfg);
    static const char first[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    static const char *const second[] = {
        "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Length: zz\r\n\r\n",
        "GARBAGE\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: t\r\n",
    };
    static const int want[] = {400, 400, 408};
    for (size_t i = 0; i < sizeof second / sizeof second[0]; i++) {
        int fd = ts_connect(server_port(s));
        struct timeval tv = {.tv_sec = 10};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ck_assert_int_eq(send(fd, first, sizeof first - 1, MSG_NOSIGNAL),
                         (ssize_t)(sizeof first - 1));
        char head[512];
        ssize_t n = recv(fd, head, sizeof head - 1, 0);
        ck_assert_int_gt(n, 0);
        head[n] = '\0';
        ck_assert_ptr_nonnull(strstr(head, "{\"status\":\"ok\"}"));
        size_t len = strlen(second[i]);
        ck_assert_int_eq(send(fd, second[i], len, MSG_NOSIGNAL), (ssize_t)len);
        size_t got;
        bool closed;
        char *out = recv_to_close(fd, 1 << 16, &got, &closed);
        int status = -1;
        ck_assert_msg(sscanf(out, "HTTP/1.1 %d", &status) == 1 &&
                          status == want[i],
                      "case %zu: answered \"%.60s\", expected %d", i, out,
                      want[i]);
        ck_assert(closed);
        free(out);
    }
    server_stop(s);
}
END_TEST

START_TEST(test_http_half_closed_client_answered_and_closed)
{
    /* A client that half-closes right after its request (its FIN arriving
     * with the last bytes) gets its answer, and then the server closes the
     * connection rather than waiting for a next request that cannot come.
     * Repeated, since whether the FIN comes with the data or after it is
     * the network's timing. */
    ts_case c;
    ts_case_make(&c, 4, 8, 2, 4, NULL);
    char *post = NULL;
    size_t post_len = 0;
    FILE *f = open_memstream(&post, &post_len);
    fprintf(f, "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
               "application/json\r\nContent-Length: %zu\r\n\r\n%s",
            c.json_len, c.json);
    fclose(f);
    static const char get[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    static const char two[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
                              "GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n";
    static const char bad[] = "POST /attend HTTP/1.1\r\nHost: t\r\n"
                              "Content-Type: application/json\r\n"
                              "Content-Length: 5\r\n\r\n[[[[[";
    static const char chunked[] =
        "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
        "\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[[[\r\n0\r\n\r\n";
    const struct {
        const char *data;
        size_t len;
        int answers, status;
    } cases[] = {
        {get, sizeof get - 1, 1, 200},
        {two, sizeof two - 1, 2, 200},
        {post, post_len, 1, 200},
        {bad, sizeof bad - 1, 1, 400},
        {chunked, sizeof chunked - 1, 1, 400},
    };
    for (int round = 0; round < 20; round++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            int status;
            int answers = half_closed_exchange(cases[i].data, cases[i].len,
                                               &status);
            ck_assert_msg(answers == cases[i].answers,
                          "case %zu round %d: %d answers (-1: the connection "
                          "stayed open), expected %d",
                          i, round, answers, cases[i].answers);
            ck_assert_int_eq(status, cases[i].status);
        }
    free(post);
    ts_case_free(&c);
}
END_TEST

START_TEST(test_http_probes_answered_while_pool_saturated)
{
    /* Every compute thread is held by a task: probes, metrics and request
     * errors must still be answered, since none of them needs the pool. */
    held_pool hp;
    hold_pool(&hp, srv);
    ck_assert_int_eq(ts_get_status(port, "/healthz"), 200);
    ck_assert_int_eq(ts_get_status(port, "/livez"), 200);
    ck_assert_int_eq(ts_get_status(port, "/readyz"), 200);
    ck_assert_int_eq(ts_get_status(port, "/metrics"), 200);
    ts_response r;
    ts_request q = {.method = "POST", .path = "/attend",
                    .content_type = "application/json", .body = "{",
                    .body_len = 1};
    ts_http(port, &q, &r);
    ts_assert_error(&r, 400, "invalid_json");
    ts_response_free(&r);
    /* Still held: the answers above did not wait for the pool. */
    ck_assert_uint_eq(atomic_load(&hp.b.started), hp.exec->workers);
    release_pool(&hp);
}
END_TEST

START_TEST(test_http_health_during_heavy_request)
{
    ts_case c;
    /* heavy enough to be seen in flight between polls 10 ms apart: at
     * n = 384 the fused outputs-only kernel finished both requests
     * between two polls */
    ts_case_make(&c, 2048, 128, 4, 32, "\"return_weights\":\"none\"");
    heavy_call h[2] = {{.port = port, .c = &c}, {.port = port, .c = &c}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, heavy_post, &h[i]);
    wait_in_flight(srv, 1);
    int probes = 0;
    while (metrics_in_flight(server_metrics(srv)) > 0 && probes < 50) {
        ck_assert_int_eq(ts_get_status(port, "/healthz"), 200);
        probes++;
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(h[i].status, 200);
        ts_response_free(&h[i].r);
    }
    ck_assert_int_ge(probes, 1);
    ts_case_free(&c);
}
END_TEST

START_TEST(test_http_client_vanishing_mid_response)
{
    /* A large response whose client reads a little and leaves: only that
     * request ends; the server keeps serving and releases its slot. */
    ts_case c;
    ts_case_make(&c, 256, 16, 2, 8, NULL);
    char *req = malloc(c.json_len + 256);
    int hl = sprintf(req, "POST /attend HTTP/1.1\r\nHost: t\r\n"
                          "Content-Type: application/json\r\n"
                          "Content-Length: %zu\r\n\r\n",
                     c.json_len);
    memcpy(req + hl, c.json, c.json_len);
    char out[512];
    /* ts_raw reads only sizeof out - 1 bytes, then closes the socket. */
    int st = ts_raw(port, req, (size_t)hl + c.json_len, out, sizeof out);
    ck_assert_int_eq(st, 200);
    free(req);
    wait_idle(srv);
    ck_assert_int_eq(ts_get_status(port, "/healthz"), 200);
    ts_case_free(&c);
}
END_TEST

/* -- hostile clients ------------------------------------------------------ */

START_TEST(test_http_small_work_under_load_computes_alone)
{
    /* Every compute thread is held and one request waits in the pool with
     * its slot: a second request of a few milliseconds' work computes on
     * its own thread and is answered meanwhile, the same bytes (before
     * meta) as when it runs alone on the pool. */
    held_pool hp;
    hold_pool(&hp, srv);
    ts_case k;
    ts_case_make(&k, 256, 64, 4, 16, NULL); /* past the inline limit */
    heavy_call first = {.port = port, .c = &k}, second = {.port = port,
                                                          .c = &k};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, heavy_post, &first);
    wait_in_flight(srv, 1);
    sleep_ms(300); /* its body is complete: it is waiting in the pool */
    pthread_create(&t2, NULL, heavy_post, &second);
    for (int i = 0; i < 1000 && !atomic_load(&second.done); i++)
        sleep_ms(10);
    int second_done = atomic_load(&second.done), first_done =
                                                     atomic_load(&first.done);
    release_pool(&hp);
    pthread_join(t2, NULL);
    pthread_join(t1, NULL);
    ck_assert_msg(second_done, "the second request waited for the pool");
    ck_assert_msg(!first_done, "the first request did not wait");
    ck_assert_int_eq(first.r.status, 200);
    ck_assert_int_eq(second.r.status, 200);
    wait_idle(srv);
    heavy_call alone = {.port = port, .c = &k};
    heavy_post(&alone);
    ck_assert_int_eq(alone.r.status, 200);
    const char *m1 = strstr(second.r.body, "\"meta\"");
    const char *m2 = strstr(alone.r.body, "\"meta\"");
    ck_assert_ptr_nonnull(m1);
    ck_assert_ptr_nonnull(m2);
    ck_assert_int_eq(m1 - second.r.body, m2 - alone.r.body);
    ck_assert(memcmp(second.r.body, alone.r.body,
                     (size_t)(m1 - second.r.body)) == 0);
    ts_response_free(&first.r);
    ts_response_free(&second.r);
    ts_response_free(&alone.r);
    ts_case_free(&k);
}
END_TEST

START_TEST(test_http_same_answer_inline_or_on_pool)
{
    /* A small request is computed on the libmicrohttpd thread that read
     * it; the same request in a body of more than 1 MiB (blanks after its
     * last member) on the compute pool. Both split the work as the pool
     * does, so the answers have the same bytes (with OpenBLAS's Haswell
     * sgemm, a product's rounding depends on how its rows are split).
     * Causal, n = 96, d_model = 64: 4.7e6 flops, enough to be split, and
     * work enough under HTTP__INLINE_COST to be computed inline. */
    ts_case k;
    ts_case_make(&k, 96, 64, 4, 16, "\"mask\":\"causal\"");
    size_t pad = ((size_t)1 << 20) + 4096, len = k.json_len + pad;
    char *padded = malloc(len);
    ck_assert_ptr_nonnull(padded);
    memcpy(padded, k.json, k.json_len - 1);
    memset(padded + k.json_len - 1, ' ', pad);
    padded[len - 1] = '}';
    ts_request q = {.method = "POST", .path = "/attend",
                    .content_type = "application/json", .body = k.json,
                    .body_len = k.json_len};
    ts_response small, large;
    ts_http(port, &q, &small);
    q.body = padded;
    q.body_len = len;
    ts_http(port, &q, &large);
    ck_assert_int_eq(small.status, 200);
    ck_assert_int_eq(large.status, 200);
    const char *m1 = strstr(small.body, "\"meta\"");
    const char *m2 = strstr(large.body, "\"meta\"");
    ck_assert_ptr_nonnull(m1);
    ck_assert_ptr_nonnull(m2);
    ck_assert_int_eq(m1 - small.body, m2 - large.body);
    ck_assert(memcmp(small.body, large.body, (size_t)(m1 - small.body)) == 0);
    ts_response_free(&small);
    ts_response_free(&large);
    free(padded);
    ts_case_free(&k);
}
END_TEST

START_TEST(test_http_client_gone_mid_compute_cancelled)
{
    /* Every compute thread is held, so the request waits in the pool; its
     * client leaves; once the pool is free the request's tasks are
     * skipped and counted as cancelled. */
    held_pool hp;
    hold_pool(&hp, srv);
    ts_case k;
    ts_case_make(&k, 256, 64, 4, 16, NULL);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: "
                      "application/json\r\nContent-Length: %zu\r\n\r\n",
                      k.json_len);
    int fd = ts_connect(port);
    ck_assert_int_eq(send(fd, head, (size_t)hl, MSG_NOSIGNAL), hl);
    ck_assert_int_eq(send(fd, k.json, k.json_len, MSG_NOSIGNAL),
                     (ssize_t)k.json_len);
    wait_in_flight(srv, 1);
    sleep_ms(300); /* its body is complete: it is waiting in the pool */
    close(fd);
    sleep_ms(600); /* the guard's sweeper notices within 250 ms */
    release_pool(&hp);
    wait_idle(srv);
    char *m = get_metrics(port);
    ck_assert_double_eq(ts_metric(m, "attnd_compute_cancelled_total"), 1);
    free(m);
    ts_case_free(&k);
}
END_TEST

/* A keep-alive connection whose GET /healthz has been answered: the
 * server has accepted and counted it (its threads accept in parallel, so
 * a connection merely made may not be counted yet). */
static int connect_answered(uint16_t p)
{
    static const char probe[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    char buf[4096];
    int fd = ts_connect(p);
    ck_assert_int_eq(send(fd, probe, sizeof probe - 1, 0),
                     (ssize_t)sizeof probe - 1);
    ck_assert_int_gt(recv(fd, buf, sizeof buf, 0), 0);
    return fd;
}

/* Waits (up to a second) until the libmicrohttpd threads hold want open
 * connections in all; their counts go to held, the threads' number to *n. */
static size_t wait_thread_connections(size_t want, size_t *held, size_t *n)
{
    size_t total = SIZE_MAX;
    for (int tries = 0; tries < 500 && total != want; tries++) {
        sleep_ms(2);
        *n = server_thread_connections(srv, held, 16);
        total = 0;
        for (size_t i = 0; i < *n; i++)
            total += held[i];
    }
    return total;
}

START_TEST(test_http_connections_spread_over_threads)
{
    /* Sixteen connections opened at once (as wrk or a client's pool opens
     * them) are spread over the libmicrohttpd threads, each of which
     * answers its connections' small requests itself: left to the order
     * in which the threads accept, all of them landed on one thread in
     * about one round of eight, which then served them on one core.
     * Several rounds, since the threads' timing decides. */
    for (int round = 0; round < 6; round++) {
        int fds[16];
        for (int i = 0; i < 16; i++)
            fds[i] = ts_connect(port);
        size_t held[16], n = 0;
        ck_assert_uint_eq(wait_thread_connections(16, held, &n), 16);
        size_t most = 0;
        for (size_t i = 0; i < n; i++)
            most = held[i] > most ? held[i] : most;
        ck_assert_msg(most <= 12,
                      "round %d: one thread holds %zu of the 16 connections",
                      round, most);
        for (int i = 0; i < 16; i++)
            close(fds[i]);
        /* until the server has closed them too */
        ck_assert_uint_eq(wait_thread_connections(0, held, &n), 0);
    }
}
END_TEST

START_TEST(test_http_per_address_limit_503)
{
    config cfg;
    ts_config(&cfg);
    cfg.max_connections_per_ip = 3;
    server *s = ts_start(&cfg);
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = connect_answered(server_port(s));
    char out[2048];
    static const char probe[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    /* The fourth from the same address is answered 503 and closed. */
    int st = ts_raw(server_port(s), probe, sizeof probe - 1, out, sizeof out);
    ck_assert_int_eq(st, 503);
    ck_assert_ptr_nonnull(strstr(out, "\"unavailable\""));
    ck_assert_ptr_nonnull(strstr(out, "Retry-After: 1"));
    /* the message names the limit, its variable and its value */
    ck_assert_msg(strstr(out, "--max-connections-per-ip "
                              "(ATTND_MAX_CONNECTIONS_PER_IP) is 3"),
                  "%s", out);
    close(fds[0]);
    fds[0] = -1;
    sleep_ms(100);
    ck_assert_int_eq(ts_raw(server_port(s), probe, sizeof probe - 1, out,
                            sizeof out),
                     200);
    char *m = get_metrics_close(server_port(s), fds, 3);
    ck_assert_double_eq(
        ts_metric(m, "attnd_connections_refused_total{reason=\"per_ip\"}"), 1);
    free(m);
    server_stop(s);
}
END_TEST

START_TEST(test_http_full_closes_longest_idle)
{
    config cfg;
    ts_config(&cfg);
    cfg.max_connections = 3;
    cfg.max_connections_per_ip = 0;
    server *s = ts_start(&cfg);
    int fds[3];
    /* Three counted keep-alive connections, idle from one after the
     * other. */
    for (int i = 0; i < 3; i++) {
        fds[i] = connect_answered(server_port(s));
        sleep_ms(20);
    }
    /* Full: the oldest idle connection makes room for a new one. */
    ck_assert_int_eq(ts_get_status(server_port(s), "/healthz"), 200);
    char c;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ck_assert_int_eq(recv(fds[0], &c, 1, 0), 0);
    char *m = get_metrics_close(server_port(s), fds, 3);
    ck_assert_double_eq(
        ts_metric(m, "attnd_connections_closed_total{reason=\"idle_evicted\"}"),
        1);
    free(m);
    server_stop(s);
}
END_TEST

START_TEST(test_http_header_timeout_408)
{
    config cfg;
    ts_config(&cfg);
    cfg.header_timeout_s = 1;
    server *s = ts_start(&cfg);
    static const char partial[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n";
    char out[1024];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = ts_raw(server_port(s), partial, sizeof partial - 1, out,
                    sizeof out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_int_eq(st, 408);
    ck_assert_ptr_nonnull(strstr(out, "\"request_timeout\""));
    ck_assert_int_lt(t1.tv_sec - t0.tv_sec, 5);
    ck_assert_int_eq(ts_get_status(server_port(s), "/healthz"), 200);
    server_stop(s);
}
END_TEST

START_TEST(test_http_whitespace_libmicrohttpd_refuses_answered_once)
{
    /* Whitespace after a Content-Length's number or after a chunk size,
     * which libmicrohttpd 0.9.75 would answer with HTML of its own (the
     * first twice): one JSON 400, then the connection closes. */
    static const char *const heads[] = {
        "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
        "\r\nContent-Length: 2 \r\n\r\n{}",
        "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
        "\r\nTransfer-Encoding: chunked\r\n\r\n2 ;x=1\r\n{}\r\n0\r\n\r\n",
        "POST /attend HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
        "\r\nTransfer-Encoding: chunked\r\n\r\n2\t\r\n{}\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        char out[4096];
        int st = ts_raw(port, heads[i], strlen(heads[i]), out, sizeof out);
        ck_assert_msg(st == 400, "case %zu: %d", i, st);
        ck_assert_msg(strstr(out, "\"bad_request\"") != NULL,
                      "case %zu: %s", i, out);
        ck_assert_msg(strstr(out + 9, "HTTP/1.1 ") == NULL,
                      "case %zu answered twice: %s", i, out);
    }
    ck_assert_int_eq(ts_get_status(port, "/healthz"), 200);
}
END_TEST

START_TEST(test_http_many_fields_431_json)
{
    /* A thousand short header fields fit in 16 KiB but not in what
     * libmicrohttpd 0.9.75 keeps per connection: the contract's 431, not
     * its HTML one. */
    char *many = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&many, &len);
    fputs("GET /healthz HTTP/1.1\r\nHost: t\r\n", f);
    for (int i = 0; i < 1000; i++)
        fputs("A: b\r\n", f);
    fputs("\r\n", f);
    fclose(f);
    char out[4096];
    ck_assert_int_eq(ts_raw(port, many, len, out, sizeof out), 431);
    ck_assert_ptr_nonnull(strstr(out, "\"too_large\""));
    free(many);
}
END_TEST

/* -- framing (framing.c, no sockets) --------------------------------------- */

/* Feeds stream[0..len) to a fresh framing n bytes at a time, as a reader
 * would: what is classified is consumed, the rest presented again with the
 * next bytes. Returns the error status (0: none) and the bytes classified. */
static int frame_in_steps(const char *stream, size_t len, size_t n,
                          size_t *classified)
{
    framing f;
    memset(&f, 0, sizeof f);
    framing_error err;
    memset(&err, 0, sizeof err);
    size_t done = 0, have = 0;
    while (have < len && !err.status) {
        have = have + n < len ? have + n : len;
        done += framing_scan(&f, stream + done, have - done, &err);
    }
    *classified = done;
    return err.status;
}

START_TEST(test_http_framing_any_split)
{
    /* Two pipelined requests, the first chunked with an extension and a
     * trailer, the second with a Content-Length body, and CRLFs between:
     * classified whole, whatever the reads' sizes. */
    static const char stream[] =
        "POST /attend HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
        "\r\n5;ext=1\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n"
        "\r\nPOST /attend HTTP/1.1\nHost: t\nContent-Length: 3\n\n{}\n";
    size_t len = sizeof stream - 1, got;
    for (size_t n = 1; n <= len; n++) {
        ck_assert_int_eq(frame_in_steps(stream, len, n, &got), 0);
        ck_assert_uint_eq(got, len);
    }
}
END_TEST

START_TEST(test_http_framing_refusals)
{
    static const struct {
        const char *in;
        int status;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost : t\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: t\r\n x\r\n\r\n", 400},
        {"GET / HTTP/1.1\rHost: t\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1,1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n", 413},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", 400},
        {"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\n\r\n", 505},
        {"GET /healthz%00x HTTP/1.1\r\nHost: t\r\n\r\n", 400},
        {"GET /?a=%00 HTTP/1.1\r\nHost: t\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nx\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", 400},
        {"GET /healthz%00 HTTP/1.1\r\n\r\n", 400},
        {"GET /metrics%00.js HTTP/1.1\r\n\r\n", 400},
        {"POST /tensors?shape=4%00,9 HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1 \r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1\t\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1 ;x\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\t\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got;
        int st = frame_in_steps(cases[i].in, strlen(cases[i].in),
                                strlen(cases[i].in), &got);
        ck_assert_msg(st == cases[i].status, "case %zu: %d, expected %d", i,
                      st, cases[i].status);
    }
    /* More than FRAMING_MAX_FIELDS header fields, or trailer fields, is
     * 431; exactly as many pass. */
    for (int c = 0; c < 4; c++) {
        int head = FRAMING_MAX_FIELDS - 1 + (c == 1); /* and T-E */
        int trail = FRAMING_MAX_FIELDS + (c == 3);
        char *many = NULL;
        size_t many_len = 0;
        FILE *f = open_memstream(&many, &many_len);
        fputs("POST / HTTP/1.1\r\n", f);
        for (int i = 0; i < head; i++)
            fputs("A: b\r\n", f);
        fputs("Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n", f);
        for (int i = 0; c >= 2 && i < trail; i++)
            fputs("A: b\r\n", f);
        fputs("\r\n", f);
        fclose(f);
        size_t got;
        int st = frame_in_steps(many, many_len, 7, &got);
        ck_assert_msg(st == (c % 2 ? 431 : 0), "case %d: %d", c, st);
        ck_assert(st || got == many_len);
        free(many);
    }
    /* A request line over 8 KiB is 414, even before its end arrives. */
    char *line = malloc(FRAMING_MAX_LINE + 64);
    memset(line, 'a', FRAMING_MAX_LINE + 63);
    memcpy(line, "GET /", 5);
    size_t got;
    ck_assert_int_eq(frame_in_steps(line, FRAMING_MAX_LINE + 63, 1024, &got),
                     414);
    free(line);
}
END_TEST

/* -- drain in-process ----------------------------------------------------- */

static size_t discard(char *d, size_t s, size_t n, void *arg)
{
    (void)d;
    (void)arg;
    return s * n;
}

START_TEST(test_http_quiesce_answers_kept_connections_and_refuses_new_work)
{
    /* A keep-alive connection between requests, and one whose upload is
     * under way. */
    int idle = connect_answered(port);
    char buf[4096];
    wait_idle(srv); /* so that the request awaited below is the upload */
    upload u = {.total = 2000, .hold_after = 512, .prefix = "["};
    chunked_call c = {.port = port, .u = &u};
    pthread_t t;
    pthread_create(&t, NULL, chunked_post, &c);
    wait_in_flight(srv, 1);

    server_begin_shutdown(srv);
    ck_assert_int_eq(ts_get_status(port, "/readyz"), 503);
    server_quiesce(srv);

    /* The upload, which would hold the exit back, is refused at once. */
    atomic_store(&u.gate, 1);
    pthread_join(t, NULL);
    ck_assert_int_eq(c.status, 503);
    ck_assert_ptr_nonnull(strstr(c.body, "\"unavailable\""));

    /* The connection between requests stays open: a client that asks
     * /readyz on it sees the 503, which closes it. */
    static const char ready[] = "GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n";
    struct timeval tv = {.tv_sec = 5};
    setsockopt(idle, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sleep_ms(300); /* past a sweep of the connections */
    ck_assert_int_eq(send(idle, ready, sizeof ready - 1, MSG_NOSIGNAL),
                     (ssize_t)sizeof ready - 1);
    size_t got = 0;
    ssize_t k;
    while (got < sizeof buf - 1 &&
           (k = recv(idle, buf + got, sizeof buf - 1 - got, 0)) > 0)
        got += (size_t)k;
    buf[got] = '\0';
    ck_assert_msg(strncmp(buf, "HTTP/1.1 503", 12) == 0, "%s", buf);
    ck_assert_ptr_nonnull(strcasestr(buf, "\r\nConnection: close\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\"unavailable\""));
    close(idle);

    /* No new connections. */
    CURL *n = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/healthz", (unsigned)port);
    curl_easy_setopt(n, CURLOPT_URL, url);
    curl_easy_setopt(n, CURLOPT_WRITEFUNCTION, discard);
    ck_assert_int_eq(curl_easy_perform(n), CURLE_COULDNT_CONNECT);
    curl_easy_cleanup(n);
    server_wait(srv);
}
END_TEST

/* libmicrohttpd takes a quiesced listening socket out of each thread's
 * epoll set from two threads, without a lock, and aborts the process when
 * the second finds it gone. For a listening socket of ours (open, shut
 * down by the quiesce, until libmicrohttpd has stopped), taking out one
 * that is not in a set counts as done; for any other descriptor, and for
 * ours once closed, the answer is the system's. */
START_TEST(test_http_epoll_removal_of_a_listener_gone_is_done)
{
    config cfg;
    metrics *m = metrics_new();
    guard *g = NULL;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct epoll_event ev = {.events = EPOLLIN};
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int other = socket(AF_INET, SOCK_STREAM, 0);
    int ep = epoll_create1(0);

    ts_config(&cfg);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(guard_start(&cfg, m, &g), 0);
    ck_assert_int_ge(lfd, 0);
    ck_assert_int_ge(other, 0);
    ck_assert_int_ge(ep, 0);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(lfd, 8), 0);
    guard_listen(g, lfd, 1);

    ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev), 0);
    ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL), 0);
    /* the removal of the thread that comes second */
    ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL), 0);
    /* not a listening socket of ours */
    errno = 0;
    ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_DEL, other, NULL), -1);
    ck_assert_int_eq(errno, ENOENT);
    /* ours, shut down by the quiesce */
    ck_assert_int_eq(shutdown(lfd, SHUT_RDWR), 0);
    ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL), 0);
    /* closed, the number is no longer ours */
    ck_assert_int_eq(close(lfd), 0);
    errno = 0;
    ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL), -1);
    ck_assert_int_eq(errno, EBADF);

    close(other);
    close(ep);
    guard_free(g);
    metrics_free(m);
}
END_TEST

Suite *http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *t = tcase_create("http");
    tcase_add_checked_fixture(t, setup_default, teardown);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_http_health_routes);
    tcase_add_test(t, test_http_absolute_form_target);
    tcase_add_test(t, test_http_head_has_no_body);
    tcase_add_test(t, test_http_openapi_lists_attend);
    tcase_add_test(t, test_http_openapi_error_codes);
    tcase_add_test(t, test_http_dashboard_served);
    tcase_add_test(t, test_http_unknown_path_404);
    tcase_add_test(t, test_http_wrong_method_405_allow);
    tcase_add_test(t, test_http_limits_defaults);
    tcase_add_test(t, test_http_limits_follow_flags);
    tcase_add_test(t, test_http_limits_head_options_metrics);
    tcase_add_test(t, test_http_attend_needs_json_415);
    tcase_add_test(t, test_http_wildcard_ipv6_host_serves_ipv4_too);
    tcase_add_test(t, test_http_cors_default_any_origin);
    tcase_add_test(t, test_http_cors_configured_origins);
    tcase_add_test(t, test_http_metrics_move);
    tcase_add_test(t, test_http_content_length_over_limit_413_before_upload);
    tcase_add_test(t, test_http_early_refusal_read_by_a_client_still_sending);
    tcase_add_test(t, test_http_answer_whole_when_the_client_sends_after_the_close);
    tcase_add_test(t, test_http_small_buffered_budget_serves_small_bodies);
    tcase_add_test(t, test_http_body_beyond_budget_413_not_503);
    tcase_add_test(t, test_http_chunked_over_limit_413_cut_off);
    tcase_add_test(t, test_http_transfer_encoding_guards_400);
    tcase_add_test(t, test_http_host_and_repeated_framing_400);
    tcase_add_test(t, test_http_idle_connection_closed_by_timeout);
    tcase_add_test(t, test_http_trickled_body_cut_at_body_timeout);
    tcase_add_test(t, test_http_in_flight_limit_503_retry_after);
    tcase_add_test(t, test_http_in_flight_per_ip_limit);
    tcase_add_test(t, test_http_in_flight_per_ip_off);
    tcase_add_test(t, test_http_attend_round_trip);
    tcase_add_test(t, test_http_large_body_read_in_place);
    tcase_add_test(t, test_http_half_closed_client_answered_and_closed);
    tcase_add_test(t, test_http_refused_head_answered_after_the_request_before_it);
    tcase_add_test(t, test_http_later_request_refused_or_timed_out_answered);
    tcase_add_test(t, test_http_probes_answered_while_pool_saturated);
    tcase_add_test(t, test_http_health_during_heavy_request);
    tcase_add_test(t, test_http_client_vanishing_mid_response);
    tcase_add_test(t, test_http_quiesce_answers_kept_connections_and_refuses_new_work);
    tcase_add_test(t, test_http_epoll_removal_of_a_listener_gone_is_done);
    tcase_add_test(t, test_http_client_gone_mid_compute_cancelled);
    tcase_add_test(t, test_http_small_work_under_load_computes_alone);
    tcase_add_test(t, test_http_same_answer_inline_or_on_pool);
    tcase_add_test(t, test_http_connections_spread_over_threads);
    tcase_add_test(t, test_http_per_address_limit_503);
    tcase_add_test(t, test_http_full_closes_longest_idle);
    tcase_add_test(t, test_http_header_timeout_408);
    tcase_add_test(t, test_http_framing_any_split);
    tcase_add_test(t, test_http_framing_refusals);
    tcase_add_test(t, test_http_many_fields_431_json);
    tcase_add_test(t, test_http_whitespace_libmicrohttpd_refuses_answered_once);
    suite_add_tcase(s, t);
    return s;
}

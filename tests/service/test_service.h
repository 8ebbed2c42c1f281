/* test_service.h: the service suites and the helpers they share: an
 * in-process attnd on 127.0.0.1 (ephemeral port) and an HTTP client. */
#ifndef ATTND_TEST_SERVICE_H
#define ATTND_TEST_SERVICE_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "http/server.h"

/* ck_assert_msg for loops over many values: check marks a point at every
 * passing ck_assert (a message to the runner, which reads them back with a
 * copy each, quadratic in their number), which made a few million checks
 * cost minutes under ASan; this says nothing unless cond fails. */
#define TS_REQUIRE(cond, ...)                                                 \
    do {                                                                      \
        if (!(cond))                                                          \
            ck_abort_msg(__VA_ARGS__);                                        \
    } while (0)

Suite *codec_suite(void); /* tests/service/test_codec.c */
Suite *reader_forms_suite(void); /* tests/service/test_reader_forms.c */
void reader_forms_pairs(TCase *tc); /* its tests in test_reader_pairs.c */
Suite *config_suite(void);
Suite *pool_suite(void);
Suite *metrics_suite(void);
Suite *http_suite(void);
Suite *drain_suite(void);
Suite *store_suite(void); /* tests/service/test_store.c */
Suite *v2_suite(void);    /* tests/service/test_v2.c */

/* A config for tests: 127.0.0.1, port 0, 2 compute threads, quiet. */
void ts_config(config *cfg);

/* Starts a server on cfg or fails the test. */
server *ts_start(const config *cfg);

/* One HTTP exchange's outcome. body is NUL-terminated, malloc'd. */
typedef struct ts_response {
    long status;
    char *body;
    size_t len;
    char headers[8192];
} ts_response;

/* Request options; NULL/0 fields are left out. */
typedef struct ts_request {
    const char *method;       /* default GET */
    const char *path;
    const char *content_type; /* sent as Content-Type */
    const char *body;
    size_t body_len;
    const char *origin;       /* sent as Origin */
    const char *const *extra; /* more header lines, NULL-terminated */
    const char *source;       /* the client's address (127.0.0.x), to be
                                 another client to the server */
} ts_request;

/* Performs req against 127.0.0.1:port with libcurl; fails the test on a
 * transport error. Free the result with ts_response_free. */
void ts_http(uint16_t port, const ts_request *req, ts_response *out);
void ts_response_free(ts_response *r);

/* GET path, returning the status (body discarded). */
long ts_get_status(uint16_t port, const char *path);

/* The value of header name in r (case-insensitive), copied to buf, or NULL. */
const char *ts_header(const ts_response *r, const char *name, char *buf,
                      size_t cap);

/* A new TCP connection to 127.0.0.1:port (fails the test otherwise). */
int ts_connect(uint16_t port);
/* The same from source address src (127.0.0.x: another client address on
 * loopback). */
int ts_connect_from(uint16_t port, const char *src);

/* Sends raw bytes on a new connection and reads the answer until the server
 * closes, out is full or 10 s pass without data; returns the status of the
 * first response line, -1 when the server closed without an answer, -2 when
 * it neither answered nor closed. The text is in out. */
int ts_raw(uint16_t port, const char *data, size_t len, char *out, size_t cap);

/* The state of the server's end of loopback connection fd to port, as
 * /proc/net/tcp numbers it (1 established, 4 FIN-WAIT-1 ...), or 0 when
 * it has none any more. */
int ts_server_end_state(int fd, uint16_t port);

/* Whether buf[0, len) starts with a whole chunked 200 answer whose body
 * holds "output". */
bool ts_whole_chunked_200(const char *buf, size_t len);

/* Reads fd into buf[*got..cap) until the server's end of the stream or
 * an error (receive timeout `seconds`); fails the test past cap. Returns
 * 0, or the errno the connection ended in (ECONNRESET). */
int ts_read_to_end(int fd, char *buf, size_t cap, size_t *got, int seconds);

/* Asserts r is a contract error body with this status and code. */
void ts_assert_error(const ts_response *r, long status, const char *code);

/* A self-attention request body (n x d_model, h heads of width d_k, no W_O)
 * with deterministic values, and the same values as floats for the
 * reference: x [n][d_model], w_q/w_k/w_v [d_model][h*d_k]. */
typedef struct ts_case {
    size_t n, d_model, h, d_k;
    float *x, *w_q, *w_k, *w_v;
    char *json;
    size_t json_len;
} ts_case;
void ts_case_make(ts_case *c, size_t n, size_t d_model, size_t h, size_t d_k,
                  const char *extra_members);
void ts_case_free(ts_case *c);

/* A numeric sample of Prometheus text: the value of the line that starts
 * with series (name plus labels, exactly), or -1 when absent. */
double ts_metric(const char *text, const char *series);

#endif

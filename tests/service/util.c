/* util.c: helpers of the service suites: an in-process server, a libcurl
 * client, raw sockets, request bodies and Prometheus samples. */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <curl/curl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "test_service.h"
#include "json/text.h"

void ts_config(config *cfg)
{
    config_defaults(cfg);
    strcpy(cfg->host, "127.0.0.1");
    cfg->port = 0;
    cfg->threads = 2;
    cfg->quiet = true;
}

server *ts_start(const config *cfg)
{
    server *srv = NULL;
    char err[256] = "";
    int rc = server_start(cfg, &srv, err, sizeof err);
    ck_assert_msg(rc == 0, "server_start: %s", err);
    ck_assert_uint_ne(server_port(srv), 0);
    return srv;
}

static size_t ts__collect(char *data, size_t size, size_t n, void *arg)
{
    ts_response *r = arg;
    size_t add = size * n;
    char *b = realloc(r->body, r->len + add + 1);
    if (!b)
        return 0;
    memcpy(b + r->len, data, add);
    r->body = b;
    r->len += add;
    b[r->len] = '\0';
    return add;
}

static size_t ts__header(char *data, size_t size, size_t n, void *arg)
{
    ts_response *r = arg;
    size_t add = size * n;
    size_t have = strlen(r->headers);
    if (have + add < sizeof r->headers) {
        memcpy(r->headers + have, data, add);
        r->headers[have + add] = '\0';
    }
    return add;
}

void ts_http(uint16_t port, const ts_request *req, ts_response *out)
{
    memset(out, 0, sizeof *out);
    out->body = calloc(1, 1);
    CURL *h = curl_easy_init();
    ck_assert_ptr_nonnull(h);
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", (unsigned)port,
             req->path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts__collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, ts__header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    const char *method = req->method ? req->method : "GET";
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "GET"))
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (req->body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)req->body_len);
    }
    struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
    char line[512];
    /* libcurl adds a form content type to bodies unless told otherwise. */
    snprintf(line, sizeof line, "Content-Type:%s%s",
             req->content_type ? " " : "",
             req->content_type ? req->content_type : "");
    hl = curl_slist_append(hl, line);
    if (req->origin) {
        snprintf(line, sizeof line, "Origin: %s", req->origin);
        hl = curl_slist_append(hl, line);
    }
    for (const char *const *e = req->extra; e && *e; e++)
        hl = curl_slist_append(hl, *e);
    if (req->source) {
        snprintf(line, sizeof line, "host!%s", req->source);
        curl_easy_setopt(h, CURLOPT_INTERFACE, line);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    CURLcode rc = curl_easy_perform(h);
    ck_assert_msg(rc == CURLE_OK, "%s %s: %s", method, req->path,
                  curl_easy_strerror(rc));
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
}

void ts_response_free(ts_response *r)
{
    free(r->body);
    r->body = NULL;
}

long ts_get_status(uint16_t port, const char *path)
{
    ts_response r;
    ts_request q = {.path = path};
    ts_http(port, &q, &r);
    ts_response_free(&r);
    return r.status;
}

const char *ts_header(const ts_response *r, const char *name, char *buf,
                      size_t cap)
{
    size_t nlen = strlen(name);
    for (const char *p = r->headers; p && *p;) {
        const char *eol = strstr(p, "\r\n");
        size_t llen = eol ? (size_t)(eol - p) : strlen(p);
        if (llen > nlen && !strncasecmp(p, name, nlen) && p[nlen] == ':') {
            const char *v = p + nlen + 1;
            while (*v == ' ')
                v++;
            size_t vlen = llen - (size_t)(v - p);
            if (vlen >= cap)
                vlen = cap - 1;
            memcpy(buf, v, vlen);
            buf[vlen] = '\0';
            return buf;
        }
        p = eol ? eol + 2 : NULL;
    }
    return NULL;
}

int ts_connect(uint16_t port)
{
    return ts_connect_from(port, NULL);
}

int ts_connect_from(uint16_t port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    if (src) {
        struct sockaddr_in me = {.sin_family = AF_INET};
        ck_assert_int_eq(inet_pton(AF_INET, src, &me.sin_addr), 1);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&me, sizeof me), 0);
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

int ts_server_end_state(int fd, uint16_t port)
{
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&me, &len), 0);
    unsigned mine = ntohs(me.sin_port);
    FILE *f = fopen("/proc/net/tcp", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    int state = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned la, lp, ra, rp, st;
        if (sscanf(line, " %*u: %X:%X %X:%X %X", &la, &lp, &ra, &rp, &st) ==
                5 &&
            lp == port && rp == mine) {
            state = (int)st;
            break;
        }
    }
    fclose(f);
    return state;
}

static int ts__hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool ts_whole_chunked_200(const char *buf, size_t len)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end || len < 12 || strncmp(buf, "HTTP/1.1 200", 12) ||
        !memmem(buf, (size_t)(end - buf), "chunked", 7))
        return false;
    size_t at = (size_t)(end - buf) + 4;
    bool output = false;
    for (;;) {
        /* a chunk: its size in hex, CRLF, the data, CRLF */
        size_t size = 0, digits = 0;
        for (; at < len && ts__hex(buf[at]) >= 0 && digits < 8;
             at++, digits++)
            size = size * 16 + (size_t)ts__hex(buf[at]);
        if (!digits || len - at < 2 || memcmp(buf + at, "\r\n", 2))
            return false;
        at += 2;
        if (len - at < size + 2 || memcmp(buf + at + size, "\r\n", 2))
            return false;
        if (memmem(buf + at, size, "\"output\"", 8))
            output = true;
        at += size + 2;
        if (size == 0)
            return output;
    }
}

int ts_raw(uint16_t port, const char *data, size_t len, char *out, size_t cap)
{
    int fd = ts_connect(port);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ck_assert_int_eq(send(fd, data, len, MSG_NOSIGNAL), (ssize_t)len);
    size_t got = 0;
    bool timed_out = false;
    for (;;) {
        ssize_t n = recv(fd, out + got, cap - 1 - got, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            timed_out = true;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == cap - 1)
            break;
    }
    out[got] = '\0';
    close(fd);
    if (!got && timed_out)
        return -2;
    int status = -1;
    if (sscanf(out, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    return status;
}

void ts_assert_error(const ts_response *r, long status, const char *code)
{
    ck_assert_msg(r->status == status, "status %ld, expected %ld; body %s",
                  r->status, status, r->body);
    char type[128];
    ck_assert_ptr_nonnull(ts_header(r, "Content-Type", type, sizeof type));
    ck_assert_msg(!strncmp(type, "application/json", 16), "type %s", type);
    json_error_t je;
    json_t *j = json_loads(r->body, 0, &je);
    ck_assert_msg(j != NULL, "error body is not JSON: %s", r->body);
    json_t *e = json_object_get(j, "error");
    ck_assert_msg(json_is_object(e), "no error object: %s", r->body);
    ck_assert_str_eq(json_string_value(json_object_get(e, "code")), code);
    ck_assert(json_is_string(json_object_get(e, "message")));
    ck_assert(strlen(json_string_value(json_object_get(e, "message"))) > 0);
    json_decref(j);
}

/* Deterministic values in [-1, 1) from a 64-bit LCG. */
static float ts__next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*s >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
}

/* Requests are written into the service's own text buffer (json/text.h). */
typedef text_buf ts__text;

static void ts__put(ts__text *t, const char *s)
{
    text_puts(t, s);
}

static float *ts__matrix(ts__text *t, const char *name, size_t rows,
                         size_t cols, uint64_t *seed)
{
    float *m = malloc(rows * cols * sizeof *m);
    ck_assert_ptr_nonnull(m);
    char num[40];
    snprintf(num, sizeof num, "\"%s\":[", name);
    ts__put(t, num);
    for (size_t i = 0; i < rows; i++) {
        ts__put(t, i ? ",[" : "[");
        for (size_t j = 0; j < cols; j++) {
            m[i * cols + j] = ts__next(seed);
            /* %.9g reads back to the same float32. */
            snprintf(num, sizeof num, "%s%.9g", j ? "," : "",
                     (double)m[i * cols + j]);
            ts__put(t, num);
        }
        ts__put(t, "]");
    }
    ts__put(t, "]");
    return m;
}

void ts_case_make(ts_case *c, size_t n, size_t d_model, size_t h, size_t d_k,
                  const char *extra_members)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->d_model = d_model;
    c->h = h;
    c->d_k = d_k;
    uint64_t seed = 42 + n * 31 + d_model;
    ts__text t = TEXT_BUF_INIT;
    ts__put(&t, "{");
    c->x = ts__matrix(&t, "x", n, d_model, &seed);
    ts__put(&t, ",");
    c->w_q = ts__matrix(&t, "w_q", d_model, h * d_k, &seed);
    ts__put(&t, ",");
    c->w_k = ts__matrix(&t, "w_k", d_model, h * d_k, &seed);
    ts__put(&t, ",");
    c->w_v = ts__matrix(&t, "w_v", d_model, h * d_k, &seed);
    char heads[64];
    snprintf(heads, sizeof heads, ",\"num_heads\":%zu", h);
    ts__put(&t, heads);
    if (extra_members) {
        ts__put(&t, ",");
        ts__put(&t, extra_members);
    }
    ts__put(&t, "}");
    c->json = text_take(&t, &c->json_len);
    ck_assert_ptr_nonnull(c->json);
}

void ts_case_free(ts_case *c)
{
    free(c->x);
    free(c->w_q);
    free(c->w_k);
    free(c->w_v);
    free(c->json);
}

double ts_metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, series, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

int ts_read_to_end(int fd, char *buf, size_t cap, size_t *got, int seconds)
{
    struct timeval tv = {.tv_sec = seconds};
    int err = 0;

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
        ck_assert_msg(*got < cap, "more than %zu bytes of answer", cap);
        ssize_t n = recv(fd, buf + *got, cap - *got, 0);
        if (n < 0)
            err = errno;
        if (n <= 0)
            return err;
        *got += (size_t)n;
    }
}

/* log.c: JSON log lines, each written with a single write(2). */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG__LINE_MAX 4096

static void log__append(char *buf, size_t *len, size_t cap, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

static void log__append(char *buf, size_t *len, size_t cap, const char *fmt,
                        ...)
{
    if (*len >= cap - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    *len += (size_t)n < cap - *len ? (size_t)n : cap - 1 - *len;
}

void log_json_string(char *buf, size_t *len, size_t cap, const char *s)
{
    /* Reserve room for the closing quote so truncation keeps valid JSON. */
    if (*len + 3 > cap)
        return;
    buf[(*len)++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        size_t n;
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            n = 2;
        } else if (*p < 0x20 || *p == 0x7f) {
            n = (size_t)snprintf(esc, sizeof esc, "\\u%04x", *p);
        } else if (*p >= 0x80) {
            /* Bytes from a request path may not be UTF-8: escape them as
             * U+00XX so the line stays valid JSON whatever arrived. */
            n = (size_t)snprintf(esc, sizeof esc, "\\u%04x", *p);
        } else {
            esc[0] = (char)*p;
            n = 1;
        }
        if (*len + n + 2 > cap)
            break;
        memcpy(buf + *len, esc, n);
        *len += n;
    }
    buf[(*len)++] = '"';
    buf[*len] = '\0';
}

static void log__begin(char *buf, size_t *len, const char *level)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    log__append(buf, len, LOG__LINE_MAX, "{\"ts\":\"%s.%03ldZ\",\"level\":",
                when, ts.tv_nsec / 1000000);
    log_json_string(buf, len, LOG__LINE_MAX, level);
}

static void log__end(char *buf, size_t len)
{
    if (len > LOG__LINE_MAX - 3)
        len = LOG__LINE_MAX - 3;
    buf[len++] = '}';
    buf[len++] = '\n';
    const char *p = buf;
    while (len) {
        ssize_t w = write(STDERR_FILENO, p, len);
        if (w <= 0)
            return; /* a closed stderr must not take the server down */
        p += w;
        len -= (size_t)w;
    }
}

void log_request(const log_request_line *l)
{
    char buf[LOG__LINE_MAX];
    size_t len = 0;
    log__begin(buf, &len, "info");
    log__append(buf, &len, LOG__LINE_MAX, ",\"msg\":\"request\",\"method\":");
    log_json_string(buf, &len, LOG__LINE_MAX - 200, l->method ? l->method : "");
    log__append(buf, &len, LOG__LINE_MAX, ",\"path\":");
    log_json_string(buf, &len, LOG__LINE_MAX - 200, l->path ? l->path : "");
    log__append(buf, &len, LOG__LINE_MAX,
                ",\"status\":%d,\"bytes_in\":%zu,\"bytes_out\":%zu,"
                "\"duration_ms\":%.3f",
                l->status, l->bytes_in, l->bytes_out, l->duration_ms);
    if (l->error_code) {
        log__append(buf, &len, LOG__LINE_MAX, ",\"error\":");
        log_json_string(buf, &len, LOG__LINE_MAX - 4, l->error_code);
    }
    log__end(buf, len);
}

void log_event(const char *level, const char *msg, const char *extra)
{
    char buf[LOG__LINE_MAX];
    size_t len = 0;
    log__begin(buf, &len, level);
    log__append(buf, &len, LOG__LINE_MAX, ",\"msg\":");
    log_json_string(buf, &len, LOG__LINE_MAX - 4, msg);
    if (extra && *extra)
        log__append(buf, &len, LOG__LINE_MAX - 4, ",%s", extra);
    log__end(buf, len);
}

/* Lines of libmicrohttpd allowed per second (see log_libmicrohttpd). */
#define LOG__MHD_PER_SECOND 10

void log_libmicrohttpd(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static time_t second;
    static unsigned lines, held;
    (void)cls;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&mu);
    if (now.tv_sec != second) {
        second = now.tv_sec;
        lines = 0;
    }
    if (lines >= LOG__MHD_PER_SECOND) {
        held++;
        pthread_mutex_unlock(&mu);
        return;
    }
    lines++;
    unsigned suppressed = held;
    held = 0;
    pthread_mutex_unlock(&mu);
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    char extra[700];
    size_t len = 0;
    memcpy(extra, "\"detail\":", 10);
    len = 9;
    log_json_string(extra, &len, sizeof extra - 32, msg);
    snprintf(extra + len, sizeof extra - len, ",\"suppressed\":%u", suppressed);
    log_event("warn", "libmicrohttpd", extra);
}

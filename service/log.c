/* log.c: JSON log lines, each written with a single write(2). */
#include "log.h"
#include "json/text.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Most bytes of a string field a line carries (a request path, a
 * message): a line stays short whatever a client sent. */
#define LOG__FIELD_MAX 2048

/* s as a JSON string (json/text.h's escaper), cut to LOG__FIELD_MAX bytes. */
static void log__string(text_buf *t, const char *s)
{
    text_json_string(t, s, strnlen(s, LOG__FIELD_MAX));
}

static void log__begin(text_buf *t, const char *level)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    text_printf(t, "{\"ts\":\"%s.%03ldZ\",\"level\":", when,
                ts.tv_nsec / 1000000);
    log__string(t, level);
}

/* Ends the line and writes it with one write(2); frees t. A line that
 * could not be built (out of memory) is dropped. */
static void log__end(text_buf *t)
{
    text_puts(t, "}\n");
    const char *p = t->data;
    size_t len = text_failed(t) ? 0 : t->len;
    while (len) {
        ssize_t w = write(STDERR_FILENO, p, len);
        if (w <= 0)
            break; /* a closed stderr must not take the server down */
        p += w;
        len -= (size_t)w;
    }
    text_free(t);
}

void log_request(const log_request_line *l)
{
    text_buf t = TEXT_BUF_INIT;
    log__begin(&t, "info");
    text_puts(&t, ",\"msg\":\"request\",\"method\":");
    log__string(&t, l->method ? l->method : "");
    text_puts(&t, ",\"path\":");
    log__string(&t, l->path ? l->path : "");
    text_printf(&t,
                ",\"status\":%d,\"bytes_in\":%zu,\"bytes_out\":%zu,"
                "\"duration_ms\":%.3f",
                l->status, l->bytes_in, l->bytes_out, l->duration_ms);
    if (l->error_code) {
        text_puts(&t, ",\"error\":");
        log__string(&t, l->error_code);
    }
    log__end(&t);
}

void log_event(const char *level, const char *msg, const char *extra)
{
    text_buf t = TEXT_BUF_INIT;
    log__begin(&t, level);
    text_puts(&t, ",\"msg\":");
    log__string(&t, msg);
    if (extra && *extra) {
        text_puts(&t, ",");
        text_puts(&t, extra);
    }
    log__end(&t);
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
    text_buf extra = TEXT_BUF_INIT;
    text_puts(&extra, "\"detail\":");
    text_json_string(&extra, msg, n);
    text_printf(&extra, ",\"suppressed\":%u", suppressed);
    if (!text_failed(&extra))
        log_event("warn", "libmicrohttpd", extra.data);
    text_free(&extra);
}

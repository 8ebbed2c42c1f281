/* log.h: attnd's log, one JSON object per line on stderr. */
#ifndef ATTND_LOG_H
#define ATTND_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* One finished request. Strings are borrowed; they are escaped as JSON. */
typedef struct log_request_line {
    const char *method;
    const char *path;
    int status;
    size_t bytes_in, bytes_out;
    double duration_ms;
    const char *error_code; /* contract error code, or NULL on success */
} log_request_line;

/* Writes {"ts":..,"level":"info","msg":"request",...} with one write(2), so
 * lines from concurrent requests never interleave. Never fails visibly. */
void log_request(const log_request_line *line);

/* An event line: {"ts":..,"level":level,"msg":msg} followed by the
 * already-formatted JSON members in extra ("\"k\":v,..." or NULL; strings
 * in it escaped with json/text.h's text_json_string). */
void log_event(const char *level, const char *msg, const char *extra);

/* libmicrohttpd's messages (its MHD_OPTION_EXTERNAL_LOGGER) as "warn"
 * events with the text in "detail"; at most 10 lines a second, the lines
 * held back meanwhile counted in the next one's "suppressed", so a flood
 * of hostile connections cannot flood the log. cls is unused. */
void log_libmicrohttpd(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#endif

/* json/text.h: the service's one growable text buffer and its one JSON
 * string escaper, in the manner of redis's sds and jansson's strbuffer.
 * Every piece of text the service builds by appending (response bodies and
 * their segments, error bodies, the tensor store's answers, log lines, the
 * metrics exposition) is built here.
 *
 * Failure is sticky: an append that cannot grow the buffer (out of memory,
 * or a size past SIZE_MAX) marks it failed and does nothing, and so does
 * every append after it. A caller appends freely and checks once, at the
 * end: text_take returns NULL, or text_failed is nonzero. */
#ifndef ATTND_TEXT_H
#define ATTND_TEXT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct text_buf {
    char *data;  /* owned; NULL while nothing was appended, else
                    NUL-terminated at data[len] */
    size_t len;  /* bytes of text, the NUL not counted */
    size_t cap;  /* bytes allocated */
    int failed;  /* nonzero once an append could not grow the buffer */
} text_buf;

/* An empty buffer; allocates nothing, so it never fails. */
#define TEXT_BUF_INIT {NULL, 0, 0, 0}
void text_init(text_buf *t);

/* Appends s[0..len) (may hold NUL bytes); s is borrowed. */
void text_append(text_buf *t, const char *s, size_t len);

/* Appends the NUL-terminated s; s is borrowed. */
void text_puts(text_buf *t, const char *s);

/* Appends v in decimal, as printf's %llu writes it, without printf's
 * parsing of a format. */
void text_uint(text_buf *t, uint64_t v);

/* Appends printf-formatted text; one vsnprintf when the buffer has room. */
void text_printf(text_buf *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void text_vprintf(text_buf *t, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Makes room for n more bytes and counts them as text: returns where the
 * caller writes them (exactly n, before the next append), or NULL when the
 * buffer has failed. For writers that know their size (base64). */
char *text_extend(text_buf *t, size_t n);

/* Appends s[0..len) as a JSON string, quotes included (RFC 8259): '"' and
 * '\\' escaped, \b \f \n \r \t in their short forms, other bytes below
 * 0x20 as \u00XX (upper-case hex, as jansson writes them), well-formed
 * UTF-8 copied as it is, and each byte of an ill-formed UTF-8 sequence as
 * \u00XX (U+0080..U+00FF), so the result is valid JSON whatever bytes
 * arrived (a request path, a quoted piece of a request). s is borrowed. */
void text_json_string(text_buf *t, const char *s, size_t len);

/* Nonzero once an append has failed. */
static inline int text_failed(const text_buf *t)
{
    return t->failed;
}

/* Hands the text over: returns the malloc'd NUL-terminated string (the
 * caller frees it; "" is allocated too) and its length in *len (may be
 * NULL), and leaves t empty. When the buffer has failed, frees it, leaves
 * t empty and returns NULL. */
char *text_take(text_buf *t, size_t *len);

/* Frees the text and leaves t empty; accepts an empty buffer. */
void text_free(text_buf *t);

#endif

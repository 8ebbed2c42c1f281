/* json/text.c: the growable text buffer and the JSON string escaper
 * (json/text.h). */
#include "json/text.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void text_init(text_buf *t)
{
    t->data = NULL;
    t->len = t->cap = 0;
    t->failed = 0;
}

/* Room for n more bytes and the NUL; 0, or -1 with t failed. The capacity
 * doubles, so appending a byte at a time costs O(1) amortised. */
static int text__reserve(text_buf *t, size_t n)
{
    size_t need, cap;
    char *d;

    if (t->failed)
        return -1;
    if (n > SIZE_MAX - 1 - t->len)
        goto fail;
    need = t->len + n + 1;
    if (need <= t->cap)
        return 0;
    cap = t->cap ? t->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    d = realloc(t->data, cap);
    if (d == NULL)
        goto fail;
    t->data = d;
    t->cap = cap;
    return 0;
fail:
    t->failed = 1;
    return -1;
}

void text_append(text_buf *t, const char *s, size_t len)
{
    if (text__reserve(t, len) != 0)
        return;
    memcpy(t->data + t->len, s, len);
    t->len += len;
    t->data[t->len] = '\0';
}

void text_puts(text_buf *t, const char *s)
{
    text_append(t, s, strlen(s));
}

void text_uint(text_buf *t, uint64_t v)
{
    char digits[20]; /* 2^64 - 1 has 20 */
    size_t i = sizeof digits;

    do {
        digits[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    text_append(t, digits + i, sizeof digits - i);
}

char *text_extend(text_buf *t, size_t n)
{
    char *at;

    if (text__reserve(t, n) != 0)
        return NULL;
    at = t->data + t->len;
    t->len += n;
    t->data[t->len] = '\0';
    return at;
}

void text_vprintf(text_buf *t, const char *fmt, va_list ap)
{
    va_list again;
    int n;

    if (t->failed)
        return;
    va_copy(again, ap);
    /* first into whatever room is left: most texts fit in one pass */
    n = vsnprintf(t->data ? t->data + t->len : NULL,
                  t->data ? t->cap - t->len : 0, fmt, ap);
    if (n < 0) {
        t->failed = 1;
    } else if (t->data != NULL && (size_t)n < t->cap - t->len) {
        t->len += (size_t)n;
    } else if (text__reserve(t, (size_t)n) == 0) {
        vsnprintf(t->data + t->len, (size_t)n + 1, fmt, again);
        t->len += (size_t)n;
    } else if (t->data != NULL) {
        t->data[t->len] = '\0'; /* the first pass wrote past the text */
    }
    va_end(again);
}

void text_printf(text_buf *t, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    text_vprintf(t, fmt, ap);
    va_end(ap);
}

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF), or 0. */
static size_t text__utf8(const unsigned char *p, const unsigned char *end)
{
    size_t n, i;
    unsigned char lo = 0x80, hi = 0xBF;

    if (p[0] >= 0xC2 && p[0] <= 0xDF)
        n = 2;
    else if (p[0] >= 0xE0 && p[0] <= 0xEF)
        n = 3;
    else if (p[0] >= 0xF0 && p[0] <= 0xF4)
        n = 4;
    else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    /* the second byte's range rules out the overlong and surrogate forms */
    if (p[0] == 0xE0)
        lo = 0xA0;
    else if (p[0] == 0xED)
        hi = 0x9F;
    else if (p[0] == 0xF0)
        lo = 0x90;
    else if (p[0] == 0xF4)
        hi = 0x8F;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

void text_json_string(text_buf *t, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s, *end = p + len;

    text_append(t, "\"", 1);
    while (p < end) {
        const unsigned char *run = p;
        char esc[6] = {'\\', 'u', '0', '0', 0, 0};
        size_t n = 2;

        /* the bytes that need nothing, copied as one run */
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (p > run)
            text_append(t, (const char *)run, (size_t)(p - run));
        if (p == end)
            break;
        if (*p >= 0x80) {
            size_t u = text__utf8(p, end);
            if (u != 0) {
                text_append(t, (const char *)p, u);
                p += u;
                continue;
            }
        }
        switch (*p) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default: /* a control byte, or a byte of ill-formed UTF-8 */
            esc[4] = hex[*p >> 4];
            esc[5] = hex[*p & 15];
            n = 6;
        }
        text_append(t, esc, n);
        p++;
    }
    text_append(t, "\"", 1);
}

char *text_take(text_buf *t, size_t *len)
{
    char *s;

    if (t->failed) {
        text_free(t);
        return NULL;
    }
    if (t->data == NULL && text__reserve(t, 0) != 0) {
        text_free(t);
        return NULL;
    }
    t->data[t->len] = '\0';
    s = t->data;
    if (len != NULL)
        *len = t->len;
    text_init(t);
    return s;
}

void text_free(text_buf *t)
{
    free(t->data);
    text_init(t);
}

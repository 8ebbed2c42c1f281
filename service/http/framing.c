/* framing.c: strict HTTP/1.1 request framing (RFC 9112 sections 2-7).
 *
 * What is refused, and why: every construct on which two parsers may
 * disagree about where a request ends, which is how requests are smuggled
 * past a proxy. A bare CR (libmicrohttpd 0.9.75 ends a line at it),
 * whitespace between a field name and its colon, obs-fold (a line that
 * continues the previous field), a Content-Length that is not one decimal
 * number or differs between repeats, a Transfer-Encoding other than one
 * "chunked" or beside a Content-Length. Also what libmicrohttpd 0.9.75
 * itself refuses with an HTML answer of its own instead of the contract's:
 * whitespace after a Content-Length's number or after a chunk size, and
 * more header or trailer fields than its connection's memory holds. A
 * line may end with CRLF or LF (RFC 9112 2.2 lets a recipient accept LF). */
#include "http/framing.h"

#include "errors.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static void framing__fail(framing_error *err, errors_kind kind,
                          const char *msg)
{
    err->status = errors_http_status(kind);
    err->code = errors_code(kind);
    snprintf(err->message, sizeof err->message, "%s", msg);
}

/* RFC 9110 5.6.2 token characters. */
static bool framing__tchar(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return true;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A field value's bytes: visible, obs-text, SP and HT; no other control. */
static bool framing__value_ok(const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

static void framing__trim(const char **v, size_t *n)
{
    while (*n && (**v == ' ' || **v == '\t')) {
        (*v)++;
        (*n)--;
    }
    while (*n && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t'))
        (*n)--;
}

/* The line buf[0..n) without its LF and a CR just before it; false when a
 * CR stands anywhere else. */
static bool framing__line(const char *buf, size_t n, size_t *content)
{
    size_t c = n;
    if (c && buf[c - 1] == '\r')
        c--;
    if (memchr(buf, '\r', c))
        return false;
    *content = c;
    return true;
}

/* One field line "name: value" (a header or a trailer). */
static bool framing__field(const char *l, size_t n, framing_error *err,
                           const char **name, size_t *name_len,
                           const char **value, size_t *value_len)
{
    if (n && (l[0] == ' ' || l[0] == '\t')) {
        framing__fail(err, ERRORS_BAD_REQUEST,
                      "obs-fold (a header line that begins with whitespace) "
                      "is not accepted");
        return false;
    }
    size_t i = 0;
    while (i < n && framing__tchar((unsigned char)l[i]))
        i++;
    if (i == n || l[i] != ':') {
        framing__fail(err, ERRORS_BAD_REQUEST,
                      i < n && (l[i] == ' ' || l[i] == '\t')
                          ? "whitespace between a header name and its colon "
                            "is not accepted"
                          : "a header line must be a token name, a colon "
                            "and a value");
        return false;
    }
    if (i == 0) {
        framing__fail(err, ERRORS_BAD_REQUEST, "a header has an empty name");
        return false;
    }
    *name = l;
    *name_len = i;
    *value = l + i + 1;
    *value_len = n - i - 1;
    framing__trim(value, value_len);
    if (!framing__value_ok(*value, *value_len)) {
        framing__fail(err, ERRORS_BAD_REQUEST,
                      "a header value holds a control character");
        return false;
    }
    return true;
}

static bool framing__is(const char *name, size_t n, const char *want)
{
    return n == strlen(want) && !strncasecmp(name, want, n);
}

/* Checks the head buf[0..len) (request line to the empty line) and sets
 * the body's framing. */
static bool framing__head(framing *f, const char *buf, size_t len,
                          framing_error *err)
{
    const char *p = buf, *end = buf + len;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n;
    if (!framing__line(p, (size_t)(nl - p), &n)) {
        framing__fail(err, ERRORS_BAD_REQUEST,
                      "a bare CR (not followed by LF) is not accepted");
        return false;
    }
    if (n > FRAMING_MAX_LINE) {
        framing__fail(err, ERRORS_URI_TOO_LONG,
                      "the request line is over 8192 bytes");
        return false;
    }
    /* A line that continues the previous one (obs-fold) is refused before
     * any field is read, whatever it continues. */
    for (const char *q = nl + 1; q < end; q = (const char *)memchr(q, '\n', (size_t)(end - q)) + 1)
        if (*q == ' ' || *q == '\t') {
            framing__fail(err, ERRORS_BAD_REQUEST,
                          "obs-fold (a header line that begins with "
                          "whitespace) is not accepted");
            return false;
        }
    /* method SP request-target SP HTTP-version */
    size_t i = 0;
    while (i < n && framing__tchar((unsigned char)p[i]))
        i++;
    size_t t0 = i + 1, t1 = t0;
    while (t1 < n && (unsigned char)p[t1] > 0x20 && p[t1] != 0x7f)
        t1++;
    if (i == 0 || i >= n || p[i] != ' ' || t1 == t0 || t1 >= n ||
        p[t1] != ' ' || n - t1 - 1 != 8 || strncmp(p + t1 + 1, "HTTP/", 5) ||
        p[t1 + 6] < '0' || p[t1 + 6] > '9' || p[t1 + 7] != '.' ||
        p[t1 + 8] < '0' || p[t1 + 8] > '9') {
        framing__fail(err, ERRORS_BAD_REQUEST,
                      "the request line must be: method, one space, target, "
                      "one space, HTTP/x.y");
        return false;
    }
    if (p[t1 + 6] != '1' || (p[t1 + 8] != '0' && p[t1 + 8] != '1')) {
        framing__fail(err, ERRORS_UNSUPPORTED_VERSION,
                      "only HTTP/1.0 and HTTP/1.1 are served");
        return false;
    }
    /* libmicrohttpd decodes the path into a C string, where a %00 ends it:
     * "/healthz%00junk" would be served as /healthz, a path that names
     * nothing answered as one that does. */
    for (size_t k = t0; k + 2 < t1; k++)
        if (p[k] == '%' && p[k + 1] == '0' && p[k + 2] == '0') {
            framing__fail(err, ERRORS_BAD_REQUEST,
                          "the request target may not contain %00 (a NUL)");
            return false;
        }
    bool http10 = p[t1 + 8] == '0';
    const char *cl = NULL, *te = NULL;
    size_t cl_len = 0, te_len = 0;
    unsigned te_count = 0, host_count = 0;
    size_t fields = 0;
    f->origin[0] = '\0';
    for (p = nl + 1; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!framing__line(p, (size_t)(nl - p), &n)) {
            framing__fail(err, ERRORS_BAD_REQUEST,
                          "a bare CR (not followed by LF) is not accepted");
            return false;
        }
        if (n == 0)
            break; /* the empty line that ends the head */
        if (++fields > FRAMING_MAX_FIELDS) {
            framing__fail(err, ERRORS_HEADERS_TOO_LARGE,
                          "the request head has more than 256 header "
                          "fields");
            return false;
        }
        const char *name, *value;
        size_t name_len, value_len;
        if (!framing__field(p, n, err, &name, &name_len, &value, &value_len))
            return false;
        if (framing__is(name, name_len, "Content-Length")) {
            if (value + value_len < p + n) {
                /* libmicrohttpd 0.9.75 takes whitespace after the number
                 * for a malformed length and answers HTML, twice. */
                framing__fail(err, ERRORS_BAD_REQUEST,
                              "Content-Length must be a decimal number, "
                              "without whitespace after it");
                return false;
            }
            if (value_len == 0 || strspn(value, "0123456789") < value_len) {
                framing__fail(err, ERRORS_BAD_REQUEST,
                              memchr(value, ',', value_len)
                                  ? "Content-Length must be one number, "
                                    "not a list"
                                  : "Content-Length must be a decimal "
                                    "number");
                return false;
            }
            if (value_len > 18) {
                /* A number, but more than any body accepted here. */
                framing__fail(err, ERRORS_TOO_LARGE,
                              "Content-Length has more than 18 digits, "
                              "over any --max-body-bytes");
                return false;
            }
            if (cl && (cl_len != value_len || memcmp(cl, value, value_len))) {
                framing__fail(err, ERRORS_BAD_REQUEST,
                              "a request may not carry differing "
                              "Content-Length headers");
                return false;
            }
            cl = value;
            cl_len = value_len;
        } else if (framing__is(name, name_len, "Transfer-Encoding")) {
            te = value;
            te_len = value_len;
            te_count++;
        } else if (framing__is(name, name_len, "Host")) {
            host_count++;
        } else if (framing__is(name, name_len, "Origin")) {
            size_t k = value_len < sizeof f->origin - 1 ? value_len
                                                        : sizeof f->origin - 1;
            memcpy(f->origin, value, k);
            f->origin[k] = '\0';
        }
    }
    if (host_count > 1) {
        framing__fail(err, ERRORS_BAD_REQUEST,
                      "a request may carry one Host header");
        return false;
    }
    if (te_count) {
        const char *why = NULL;
        if (te_count > 1)
            why = "a request may carry one Transfer-Encoding header";
        else if (cl)
            why = "a request may not carry both Transfer-Encoding and "
                  "Content-Length";
        else if (http10)
            why = "Transfer-Encoding is not defined for HTTP/1.0";
        else if (!framing__is(te, te_len, "chunked"))
            why = "unsupported Transfer-Encoding: only chunked is accepted";
        if (why) {
            framing__fail(err, ERRORS_BAD_REQUEST, why);
            return false;
        }
        f->state = FRAMING_CHUNK_SIZE;
        return true;
    }
    unsigned long long v = 0;
    for (size_t k = 0; k < cl_len; k++)
        v = v * 10 + (unsigned long long)(cl[k] - '0');
    f->left = v;
    f->state = v ? FRAMING_BODY : FRAMING_HEAD;
    return true;
}

/* The length of the head at buf[0..len) through its empty line, or 0 when
 * it has not ended yet; f->scan remembers how far it was searched. */
static size_t framing__head_end(framing *f, const char *buf, size_t len)
{
    size_t i = f->scan;
    for (;;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        if (!nl)
            break;
        size_t j = (size_t)(nl - buf) + 1;
        if (j < len && buf[j] == '\n')
            return j + 1;
        if (j + 1 < len && buf[j] == '\r' && buf[j + 1] == '\n')
            return j + 2;
        if (j >= len || (j + 1 >= len && buf[j] == '\r'))
            break; /* the next line has not begun (or is a lone CR yet) */
        i = j;
    }
    f->scan = i;
    return 0;
}

size_t framing_scan(framing *f, const char *buf, size_t len,
                    framing_error *err)
{
    size_t pos = 0;
    while (pos < len) {
        const char *p = buf + pos;
        size_t avail = len - pos;
        switch (f->state) {
        case FRAMING_HEAD: {
            if (!f->in_head) {
                /* Empty lines before a request line are ignored (RFC 9112
                 * 2.2); libmicrohttpd skips them too. A few: a client
                 * sending nothing else must not pass for an active one. */
                if (p[0] == '\n' || p[0] == '\r') {
                    size_t k = p[0] == '\n' ? 1 : 2;
                    if (k == 2 && avail < 2)
                        return pos;
                    if (k == 1 || p[1] == '\n') {
                        f->blank += k;
                        if (f->blank > 64) {
                            framing__fail(err, ERRORS_BAD_REQUEST,
                                          "more than 64 bytes of empty "
                                          "lines before a request");
                            return pos;
                        }
                        pos += k;
                        continue;
                    }
                }
                f->in_head = true;
                f->scan = 0;
            }
            size_t e = framing__head_end(f, p, avail);
            if (!e) {
                const char *nl = memchr(p, '\n', avail);
                if (!nl && avail > FRAMING_MAX_LINE)
                    framing__fail(err, ERRORS_URI_TOO_LONG,
                                  "the request line is over 8192 bytes");
                else if (avail > FRAMING_MAX_HEAD)
                    framing__fail(err, ERRORS_HEADERS_TOO_LARGE,
                                  "the request head is over 16384 bytes");
                return pos;
            }
            if (e > FRAMING_MAX_HEAD) {
                framing__fail(err, ERRORS_HEADERS_TOO_LARGE,
                              "the request head is over 16384 bytes");
                return pos;
            }
            if (!framing__head(f, p, e, err))
                return pos;
            f->in_head = false;
            f->blank = 0;
            f->scan = 0;
            pos += e;
            break;
        }
        case FRAMING_BODY:
        case FRAMING_CHUNK_DATA: {
            size_t k = avail < f->left ? avail : (size_t)f->left;
            pos += k;
            f->left -= k;
            if (f->left == 0)
                f->state = f->state == FRAMING_BODY ? FRAMING_HEAD
                                                    : FRAMING_CHUNK_END;
            break;
        }
        case FRAMING_CHUNK_END:
            if (p[0] == '\n') {
                pos++;
            } else if (p[0] == '\r' && avail < 2) {
                return pos;
            } else if (p[0] == '\r' && p[1] == '\n') {
                pos += 2;
            } else {
                framing__fail(err, ERRORS_BAD_REQUEST,
                              "chunk data must be followed by CRLF");
                return pos;
            }
            f->state = FRAMING_CHUNK_SIZE;
            break;
        case FRAMING_CHUNK_SIZE:
        case FRAMING_TRAILER: {
            const char *nl = memchr(p, '\n', avail);
            if (!nl) {
                if (avail > 4096)
                    framing__fail(err, ERRORS_BAD_REQUEST,
                                  "a chunk-size or trailer line is over "
                                  "4096 bytes");
                return pos;
            }
            size_t n, line = (size_t)(nl - p) + 1;
            if (!framing__line(p, line - 1, &n)) {
                framing__fail(err, ERRORS_BAD_REQUEST,
                              "a bare CR (not followed by LF) is not "
                              "accepted");
                return pos;
            }
            if (f->state == FRAMING_TRAILER) {
                const char *name, *value;
                size_t name_len, value_len;
                if (n == 0) {
                    f->state = FRAMING_HEAD;
                } else if (++f->trailers > FRAMING_MAX_FIELDS) {
                    framing__fail(err, ERRORS_HEADERS_TOO_LARGE,
                                  "the trailer section has more than 256 "
                                  "fields");
                    return pos;
                } else if (!framing__field(p, n, err, &name, &name_len,
                                           &value, &value_len)) {
                    return pos;
                }
                pos += line;
                break;
            }
            uint64_t size = 0;
            size_t i = 0;
            for (; i < n; i++) {
                char c = p[i];
                int d = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
                if (d < 0)
                    break;
                if (size >> 56) {
                    framing__fail(err, ERRORS_BAD_REQUEST,
                                  "a chunk size is over 2^60");
                    return pos;
                }
                size = size * 16 + (uint64_t)d;
            }
            if (i < n && (p[i] == ' ' || p[i] == '\t')) {
                /* RFC 9112 allows it (BWS), but libmicrohttpd 0.9.75
                 * refuses it with an HTML 400 of its own. */
                framing__fail(err, ERRORS_BAD_REQUEST,
                              "whitespace after a chunk size is not "
                              "accepted");
                return pos;
            }
            if (i == 0 || (i < n && p[i] != ';') ||
                !framing__value_ok(p + i, n - i)) {
                framing__fail(err, ERRORS_BAD_REQUEST,
                              "a chunk-size line must be hex digits and "
                              "optional extensions");
                return pos;
            }
            pos += line;
            f->left = size;
            f->state = size ? FRAMING_CHUNK_DATA : FRAMING_TRAILER;
            f->trailers = 0;
            break;
        }
        }
    }
    return pos;
}

uint64_t framing_direct(const framing *f)
{
    return f->state == FRAMING_BODY || f->state == FRAMING_CHUNK_DATA
               ? f->left
               : 0;
}

bool framing_in_body(const framing *f)
{
    return f->state != FRAMING_HEAD;
}

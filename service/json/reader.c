/* json/reader.c: a strict RFC 8259 reader over the request body: whitespace,
 * strings (escapes and UTF-8 validated), numbers (grammar checked here; the
 * value by codec__f32_of_decimal of json.h, or by fast_float when that
 * cannot be sure), literals, skipping any value. Syntax errors say line and
 * column. The codec parses the request with it instead of jansson because a
 * jansson tree of millions of numbers costs more than the attention itself,
 * and instead of simdjson because its numeric arrays are read several times
 * faster (figures in docs/performance.md, "The JSON reader", from
 * tests/bench/bench_codec.c). */
#include "json/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

/* The powers of ten of codec__f32_of_decimal (json.h): the compiler
 * rounds each literal to the nearest double. */
const double codec__pow10_q[256] = {
    1e-128, 1e-127, 1e-126, 1e-125, 1e-124, 1e-123, 1e-122, 1e-121,
    1e-120, 1e-119, 1e-118, 1e-117, 1e-116, 1e-115, 1e-114, 1e-113,
    1e-112, 1e-111, 1e-110, 1e-109, 1e-108, 1e-107, 1e-106, 1e-105,
    1e-104, 1e-103, 1e-102, 1e-101, 1e-100, 1e-99, 1e-98, 1e-97,
    1e-96, 1e-95, 1e-94, 1e-93, 1e-92, 1e-91, 1e-90, 1e-89,
    1e-88, 1e-87, 1e-86, 1e-85, 1e-84, 1e-83, 1e-82, 1e-81,
    1e-80, 1e-79, 1e-78, 1e-77, 1e-76, 1e-75, 1e-74, 1e-73,
    1e-72, 1e-71, 1e-70, 1e-69, 1e-68, 1e-67, 1e-66, 1e-65,
    1e-64, 1e-63, 1e-62, 1e-61, 1e-60, 1e-59, 1e-58, 1e-57,
    1e-56, 1e-55, 1e-54, 1e-53, 1e-52, 1e-51, 1e-50, 1e-49,
    1e-48, 1e-47, 1e-46, 1e-45, 1e-44, 1e-43, 1e-42, 1e-41,
    1e-40, 1e-39, 1e-38, 1e-37, 1e-36, 1e-35, 1e-34, 1e-33,
    1e-32, 1e-31, 1e-30, 1e-29, 1e-28, 1e-27, 1e-26, 1e-25,
    1e-24, 1e-23, 1e-22, 1e-21, 1e-20, 1e-19, 1e-18, 1e-17,
    1e-16, 1e-15, 1e-14, 1e-13, 1e-12, 1e-11, 1e-10, 1e-9,
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1,
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7,
    1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23,
    1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31,
    1e32, 1e33, 1e34, 1e35, 1e36, 1e37, 1e38, 1e39,
    1e40, 1e41, 1e42, 1e43, 1e44, 1e45, 1e46, 1e47,
    1e48, 1e49, 1e50, 1e51, 1e52, 1e53, 1e54, 1e55,
    1e56, 1e57, 1e58, 1e59, 1e60, 1e61, 1e62, 1e63,
    1e64, 1e65, 1e66, 1e67, 1e68, 1e69, 1e70, 1e71,
    1e72, 1e73, 1e74, 1e75, 1e76, 1e77, 1e78, 1e79,
    1e80, 1e81, 1e82, 1e83, 1e84, 1e85, 1e86, 1e87,
    1e88, 1e89, 1e90, 1e91, 1e92, 1e93, 1e94, 1e95,
    1e96, 1e97, 1e98, 1e99, 1e100, 1e101, 1e102, 1e103,
    1e104, 1e105, 1e106, 1e107, 1e108, 1e109, 1e110, 1e111,
    1e112, 1e113, 1e114, 1e115, 1e116, 1e117, 1e118, 1e119,
    1e120, 1e121, 1e122, 1e123, 1e124, 1e125, 1e126, 1e127,
};

/* The non-number a client most often sends where a number belongs
 * (Python's json.dumps writes NaN, Infinity and -Infinity by default):
 * its name when the text at p starts with one, else NULL. */
static const char *codec__non_number(const char *p, const char *end)
{
    static const char *const names[] = {"-Infinity", "Infinity", "-NaN",
                                        "NaN"};
    size_t i, n;

    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        n = strlen(names[i]);
        if ((size_t)(end - p) >= n && memcmp(p, names[i], n) == 0)
            return names[i];
    }
    return NULL;
}

void codec_json_syntax(const codec_reader *r, codec_error *err,
                       const char *what)
{
    size_t line = 1, col = 1;
    const char *q, *nan;
    char msg[160];

    /* "invalid number" at "-Infinity" is reported from its '-' or its 'I' */
    nan = r->p > r->start && r->p[-1] == '-'
              ? codec__non_number(r->p - 1, r->end) : NULL;
    if (nan == NULL && r->p < r->end)
        nan = codec__non_number(r->p, r->end);
    if (nan != NULL) {
        snprintf(msg, sizeof msg,
                 "%s is not a JSON number (JSON has no NaN, Infinity or "
                 "-Infinity; send a finite number)", nan);
        what = msg;
    }

    /* Counted only on failure, so the fast path tracks no positions. */
    for (q = r->start; q < r->p && q < r->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)*q & 0xC0) != 0x80) {
            col++; /* columns count characters, not UTF-8 bytes */
        }
    }
    codec_error_set(err, ERRORS_INVALID_JSON, NULL,
                    "invalid JSON: %s at line %zu, column %zu (byte %zu)",
                    what, line, col, (size_t)(r->p - r->start));
}

static int codec__hex(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at p (p + 4 <= end checked by the caller). */
static long codec__hex4(const char *p)
{
    long v = 0;
    int i, d;
    for (i = 0; i < 4; i++) {
        d = codec__hex((unsigned char)p[i]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Length of the valid UTF-8 sequence at p (a non-ASCII lead byte), or 0. */
static size_t codec__utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n, i;
    unsigned cp;

    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n)
        return 0;
    for (i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    /* overlong forms, UTF-16 surrogates, beyond U+10FFFF */
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
        return 0;
    return n;
}

int codec_json_string(codec_reader *r, const char **s, size_t *len,
                      int *escaped, codec_error *err)
{
    const unsigned char *p = (const unsigned char *)r->p + 1;
    const unsigned char *end = (const unsigned char *)r->end;
    const unsigned char *begin = p;
    int esc = 0;

    for (;;) {
        /* the common case, printable ASCII, in a tight loop (base64 data
         * runs to megabytes) */
        while (p < end && (unsigned)(*p - 0x20) < 0x60 && *p != '"' &&
               *p != '\\')
            p++;
        if (p >= end) {
            r->p = (const char *)p;
            codec_json_syntax(r, err, "unterminated string");
            return -1;
        }
        if (*p == '"')
            break;
        if (*p < 0x20) {
            r->p = (const char *)p;
            codec_json_syntax(r, err, "control character in a string");
            return -1;
        }
        if (*p == '\\') {
            esc = 1;
            if (p + 1 >= end) {
                r->p = (const char *)p;
                codec_json_syntax(r, err, "unterminated string");
                return -1;
            }
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n':
            case 'r': case 't':
                p += 2;
                continue;
            case 'u': {
                long u;
                if (end - p < 6 || (u = codec__hex4((const char *)p + 2)) < 0) {
                    r->p = (const char *)p;
                    codec_json_syntax(r, err, "invalid \\u escape");
                    return -1;
                }
                /* a lone surrogate is JSON (RFC 8259 8.2): JavaScript
                 * writes one for half of an emoji; it is kept as sent
                 * (labels are echoed raw) and decodes to U+FFFD */
                p += 6;
                continue;
            }
            default:
                r->p = (const char *)p;
                codec_json_syntax(r, err, "invalid escape in a string");
                return -1;
            }
        }
        if (*p >= 0x80) {
            size_t n = codec__utf8_len(p, end);
            if (n == 0) {
                r->p = (const char *)p;
                codec_json_syntax(r, err, "invalid UTF-8 in a string");
                return -1;
            }
            p += n;
            continue;
        }
        p++;
    }
    *s = (const char *)begin;
    *len = (size_t)(p - begin);
    *escaped = esc;
    r->p = (const char *)p + 1;
    return 0;
}

static size_t codec__put_utf8(char *o, unsigned long cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

char *codec_json_unescape(const char *s, size_t len, size_t *out_len)
{
    /* decoding never lengthens: \uXXXX (6) gives at most 3 bytes */
    char *o = malloc(len + 1);
    size_t i = 0, n = 0;

    if (o == NULL)
        return NULL;
    while (i < len) {
        if (s[i] != '\\') {
            o[n++] = s[i++];
            continue;
        }
        switch (s[i + 1]) {
        case 'b': o[n++] = '\b'; i += 2; break;
        case 'f': o[n++] = '\f'; i += 2; break;
        case 'n': o[n++] = '\n'; i += 2; break;
        case 'r': o[n++] = '\r'; i += 2; break;
        case 't': o[n++] = '\t'; i += 2; break;
        case 'u': {
            unsigned long cp = (unsigned long)codec__hex4(s + i + 2);
            long lo = -1;
            i += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= len &&
                s[i] == '\\' && s[i + 1] == 'u')
                lo = codec__hex4(s + i + 2);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) +
                     ((unsigned long)lo - 0xDC00);
                i += 6;
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                cp = 0xFFFD; /* a lone surrogate */
            }
            n += codec__put_utf8(o + n, cp);
            break;
        }
        default: /* '"', '\\', '/' */
            o[n++] = s[i + 1];
            i += 2;
            break;
        }
    }
    o[n] = '\0';
    if (out_len != NULL)
        *out_len = n;
    return o;
}

/* Scans the RFC 8259 number grammar at r->p; on success *e is its end. */
static int codec__scan_number(codec_reader *r, const char **e,
                              codec_error *err)
{
    const char *p = r->p, *end = r->end;

    if (p < end && *p == '-')
        p++;
    if (p >= end || *p < '0' || *p > '9')
        goto bad;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            goto bad;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            goto bad;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    *e = p;
    return 0;
bad:
    {
        codec_reader at = *r;
        at.p = p;
        codec_json_syntax(&at, err, "invalid number");
    }
    return -1;
}

int codec_json_number(codec_reader *r, float *out, int *finite,
                      codec_error *err)
{
    const char *e;
    float v;

    if (codec_json_number_fast(r->p, r->end, &v, &e)) {
        *out = v;
        *finite = 1;
        r->p = e;
        return 0;
    }
    if (codec__scan_number(r, &e, err) != 0)
        return -1;
    /* fast_float rejects a leading '+' only; the grammar was checked above */
    if (codec_num_parse_f32(r->p, e, &v) != 0) {
        codec_json_syntax(r, err, "invalid number");
        return -1;
    }
    *out = v;
    *finite = isfinite(v);
    r->p = e;
    return 0;
}

int codec_json_number_d(codec_reader *r, double *out, codec_error *err)
{
    const char *e;

    if (codec__scan_number(r, &e, err) != 0)
        return -1;
    if (codec_num_parse_f64(r->p, e, out) != 0) {
        codec_json_syntax(r, err, "invalid number");
        return -1;
    }
    r->p = e;
    return 0;
}

int codec_json_literal(codec_reader *r, const char *lit, codec_error *err)
{
    size_t n = strlen(lit);

    if ((size_t)(r->end - r->p) < n || memcmp(r->p, lit, n) != 0) {
        codec_json_syntax(r, err, "invalid literal");
        return -1;
    }
    r->p += n;
    return 0;
}

const char *codec_json_kind(const codec_reader *r)
{
    if (r->p >= r->end)
        return "nothing";
    switch (*r->p) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a string";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    default:
        return (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))
                   ? "a number" : "an invalid token";
    }
}

int codec_json_member(codec_reader *r, int *first, const char **key,
                      size_t *len, int *escaped, codec_error *err)
{
    codec_json_ws(r);
    if (*first) {
        *first = 0;
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            return 0;
        }
    } else if (r->p < r->end && *r->p == '}') {
        r->p++;
        return 0;
    } else if (r->p < r->end && *r->p == ',') {
        r->p++;
        codec_json_ws(r);
    } else {
        codec_json_syntax(r, err, "expected ',' or '}'");
        return -1;
    }
    if (r->p >= r->end || *r->p != '"') {
        codec_json_syntax(r, err, "expected a string key");
        return -1;
    }
    if (codec_json_string(r, key, len, escaped, err) != 0)
        return -1;
    codec_json_ws(r);
    if (r->p >= r->end || *r->p != ':') {
        codec_json_syntax(r, err, "expected ':'");
        return -1;
    }
    r->p++;
    codec_json_ws(r);
    return 1;
}

int codec_json_element(codec_reader *r, int *first, codec_error *err)
{
    codec_json_ws(r);
    if (*first) {
        *first = 0;
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return 0;
        }
        return 1;
    }
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return 0;
    }
    if (r->p < r->end && *r->p == ',') {
        r->p++;
        codec_json_ws(r);
        return 1;
    }
    codec_json_syntax(r, err, "expected ',' or ']'");
    return -1;
}

int codec_json_skip(codec_reader *r, codec_error *err)
{
    const char *s;
    size_t len;
    int esc;

    codec_json_ws(r);
    if (r->p >= r->end) {
        codec_json_syntax(r, err, "unexpected end of input, expected a value");
        return -1;
    }
    switch (*r->p) {
    case '"':
        return codec_json_string(r, &s, &len, &esc, err);
    case 't':
        return codec_json_literal(r, "true", err);
    case 'f':
        return codec_json_literal(r, "false", err);
    case 'n':
        return codec_json_literal(r, "null", err);
    case '{': {
        int first = 1, rc;
        if (++r->depth > CODEC_MAX_DEPTH) {
            codec_json_syntax(r, err, "nesting deeper than 512 levels");
            return -1;
        }
        r->p++;
        while ((rc = codec_json_member(r, &first, &s, &len, &esc, err)) == 1)
            if (codec_json_skip(r, err) != 0)
                return -1;
        if (rc < 0)
            return -1;
        r->depth--;
        return 0;
    }
    case '[': {
        int first = 1, rc;
        if (++r->depth > CODEC_MAX_DEPTH) {
            codec_json_syntax(r, err, "nesting deeper than 512 levels");
            return -1;
        }
        r->p++;
        while ((rc = codec_json_element(r, &first, err)) == 1)
            if (codec_json_skip(r, err) != 0)
                return -1;
        if (rc < 0)
            return -1;
        r->depth--;
        return 0;
    }
    default:
        if (*r->p == '-' || (*r->p >= '0' && *r->p <= '9')) {
            const char *e;
            if (codec__scan_number(r, &e, err) != 0)
                return -1;
            r->p = e;
            return 0;
        }
        codec_json_syntax(r, err, "unexpected character, expected a value");
        return -1;
    }
}

codec_media codec_media_of(const char *type)
{
    static const char app[] = "application/";
    const char *sub;
    size_t len, sub_len;

    if (!type)
        return CODEC_MEDIA_OTHER;
    while (*type == ' ' || *type == '\t')
        type++;
    len = strcspn(type, ";");
    while (len && (type[len - 1] == ' ' || type[len - 1] == '\t'))
        len--;
    if (len < sizeof app - 1 || strncasecmp(type, app, sizeof app - 1))
        return CODEC_MEDIA_OTHER;
    sub = type + sizeof app - 1;
    sub_len = len - (sizeof app - 1);
    if (sub_len == 12 && !strncasecmp(sub, "octet-stream", 12))
        return CODEC_MEDIA_OCTETS;
    if ((sub_len == 4 && !strncasecmp(sub, "json", 4)) ||
        (sub_len > 5 && !strncasecmp(sub + sub_len - 5, "+json", 5)))
        return CODEC_MEDIA_JSON;
    return CODEC_MEDIA_OTHER;
}

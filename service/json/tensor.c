/* json/tensor.c: the request's matrices, vectors and masks, parsed straight
 * from the body into packed row-major buffers (nested JSON arrays, or base64
 * tensor objects {"dtype","shape","data"}), with a JSON Pointer to the first
 * offending element; and the base64 encoder the response writer uses. */
#include "json/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* State of one nested-array parse. */
typedef struct codec__nest {
    codec_reader *r;
    const char *ptr;
    const char *shape_doc;
    codec_leaf leaf;
    int rank;
    size_t shape[4];    /* 0 until the first array at that level closes */
    size_t idx[4];      /* index of the element being parsed, per level */
    unsigned char *buf; /* packed leaves */
    size_t count, cap;  /* in leaves */
    codec_error *err;
} codec__nest;

/* Writes ptr + "/i0/i1/.../i(levels-1)" of the current indices. */
static void codec__path(const codec__nest *s, int levels, char *out,
                        size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "%s", s->ptr);
    int l;
    for (l = 0; l < levels && n < cap; l++)
        n += (size_t)snprintf(out + n, cap - n, "/%zu", s->idx[l]);
}

static void codec__oom(codec_error *err)
{
    codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                    "out of memory while parsing the request");
}

static int codec__grow(codec__nest *s)
{
    size_t elem = s->leaf == CODEC_LEAF_F32     ? sizeof(float)
                  : s->leaf == CODEC_LEAF_INDEX ? sizeof(int64_t)
                                                : 1;
    size_t cap = s->cap ? s->cap * 2 : 1024;
    unsigned char *b;

    /* the buffer never outgrows the body (a leaf takes >= 2 bytes of JSON),
     * so the doubling cannot overflow before realloc fails */
    if (cap > SIZE_MAX / elem || (b = realloc(s->buf, cap * elem)) == NULL) {
        codec__oom(s->err);
        return -1;
    }
    s->buf = b;
    s->cap = cap;
    return 0;
}

static int codec__leaf(codec__nest *s, int level)
{
    codec_reader *r = s->r;
    char path[256];

    if (s->leaf == CODEC_LEAF_F32) {
        float v;
        int finite;
        if (r->p < r->end && (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) {
            if (codec_json_number(r, &v, &finite, s->err) != 0)
                return -1;
            if (!finite) {
                codec__path(s, level + 1, path, sizeof path);
                codec_error_set(s->err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected a number that is finite in "
                                "float32 (|v| <= 3.4028235e38), found one "
                                "out of range", path);
                return -1;
            }
            if (s->count == s->cap && codec__grow(s) != 0)
                return -1;
            memcpy(s->buf + s->count * sizeof(float), &v, sizeof v);
            s->count++;
            return 0;
        }
    } else if (s->leaf == CODEC_LEAF_INDEX) {
        double d;
        int64_t v;
        if (r->p < r->end && (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) {
            if (codec_json_number_d(r, &d, s->err) != 0)
                return -1;
            /* 2^53: every integer below it is exact in the double */
            if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) {
                codec__path(s, level + 1, path, sizeof path);
                codec_error_set(s->err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected an integer >= 0, found %.17g",
                                path, d);
                return -1;
            }
            if (s->count == s->cap && codec__grow(s) != 0)
                return -1;
            v = (int64_t)d;
            memcpy(s->buf + s->count * sizeof v, &v, sizeof v);
            s->count++;
            return 0;
        }
    } else if (r->p < r->end && (*r->p == 't' || *r->p == 'f')) {
        int t = *r->p == 't';
        if (codec_json_literal(r, t ? "true" : "false", s->err) != 0)
            return -1;
        if (s->count == s->cap && codec__grow(s) != 0)
            return -1;
        s->buf[s->count++] = (unsigned char)t;
        return 0;
    }
    codec__path(s, level + 1, path, sizeof path);
    codec_error_set(s->err, ERRORS_INVALID_REQUEST, path,
                    "%s: expected %s, found %s", path,
                    s->leaf == CODEC_LEAF_F32     ? "a number"
                    : s->leaf == CODEC_LEAF_INDEX ? "an integer >= 0"
                                                  : "a boolean",
                    codec_json_kind(r));
    return -1;
}

/* Reports a ragged array at `level` (>= 1): n values, or more than n when
 * `more` (found while reading, before the row ends). The indices are left
 * as they were. */
static void codec__ragged(codec__nest *s, int level, size_t n, int more)
{
    char path[256], first[256];
    size_t keep[4];
    int l;

    codec__path(s, level, path, sizeof path);
    /* the first array at this level: all indices above it 0 */
    for (l = 0; l < level; l++) {
        keep[l] = s->idx[l];
        s->idx[l] = 0;
    }
    codec__path(s, level, first, sizeof first);
    for (l = 0; l < level; l++)
        s->idx[l] = keep[l];
    codec_error_set(s->err, ERRORS_INVALID_REQUEST, path,
                    "ragged array: %s has %s%zu values, expected %zu like %s",
                    path, more ? "more than " : "", n, s->shape[level],
                    first);
}

/* Parses the array at r->p, which sits at depth `level` (0: the field). */
static int codec__level(codec__nest *s, int level)
{
    codec_reader *r = s->r;
    size_t n = 0;
    char path[256];

    r->p++; /* '[' */
    codec_json_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
    } else {
        for (;;) {
            s->idx[level] = n;
            if (s->shape[level] != 0 && n == s->shape[level]) {
                codec__ragged(s, level, n, 1);
                return -1;
            }
            if (level + 1 == s->rank) {
                float v;
                const char *e;
                size_t room = s->cap - s->count, k;
                int fast;
                if (s->shape[level] != 0 && s->shape[level] - n < room)
                    room = s->shape[level] - n;
                /* the hot path: a run of short numbers, then one plain
                 * number, into room already there */
                fast = s->leaf == CODEC_LEAF_F32 && room > 0;
                if (fast && (k = codec_json_row_any(
                                 &r->p, r->end,
                                 (float *)(void *)s->buf + s->count,
                                 room)) > 0) {
                    s->count += k;
                    n += k - 1;
                } else if (fast &&
                           codec_json_number_fast(r->p, r->end, &v, &e)) {
                    memcpy(s->buf + s->count * sizeof(float), &v, sizeof v);
                    s->count++;
                    r->p = e;
                } else if (codec__leaf(s, level) != 0) {
                    return -1;
                }
            } else if (r->p < r->end && *r->p == '[') {
                if (codec__level(s, level + 1) != 0)
                    return -1;
            } else {
                codec__path(s, level + 1, path, sizeof path);
                codec_error_set(s->err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected an array (%s), found %s", path,
                                s->shape_doc, codec_json_kind(r));
                return -1;
            }
            n++;
            if (r->p < r->end && *r->p == ',') {
                /* no whitespace around the comma: the common compact form */
                r->p++;
                if (r->p < r->end && (unsigned char)*r->p <= ' ')
                    codec_json_ws(r);
                continue;
            }
            codec_json_ws(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                codec_json_ws(r);
                continue;
            }
            if (r->p < r->end && *r->p == ']') {
                r->p++;
                break;
            }
            codec_json_syntax(r, s->err, "expected ',' or ']'");
            return -1;
        }
    }
    if (s->shape[level] == 0) {
        if (n == 0) {
            codec__path(s, level, path, sizeof path);
            codec_error_set(s->err, ERRORS_INVALID_REQUEST, path,
                            "%s: empty array; every dimension of %s must be "
                            "at least 1", path, s->shape_doc);
            return -1;
        }
        s->shape[level] = n;
    } else if (n != s->shape[level]) {
        codec__ragged(s, level, n, 0);
        return -1;
    }
    return 0;
}

static int codec__nested(codec_reader *r, const char *ptr,
                         const char *shape_doc, codec_leaf leaf, int min_rank,
                         int max_rank, codec_array *a, codec_error *err)
{
    codec__nest s;
    codec_reader peek = *r;
    int depth = 0, l;

    memset(&s, 0, sizeof s);
    /* the rank is the depth of the first leaf: [[[1 ... is rank 3 */
    while (peek.p < peek.end && *peek.p == '[' && depth <= max_rank) {
        depth++;
        peek.p++;
        codec_json_ws(&peek);
    }
    if (depth > max_rank) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected %s, found an array nested more than %d "
                        "deep", ptr, shape_doc, max_rank);
        return -1;
    }
    if (depth < min_rank) {
        /* an empty array ends the descent early: report it as empty */
        if (peek.p < peek.end && *peek.p == ']') {
            depth = min_rank;
        } else {
            codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                            "%s: expected %s, found a rank-%d array", ptr,
                            shape_doc, depth);
            return -1;
        }
    }
    s.r = r;
    s.ptr = ptr;
    s.shape_doc = shape_doc;
    s.leaf = leaf;
    s.rank = depth;
    s.err = err;
    if (codec__level(&s, 0) != 0) {
        free(s.buf);
        return -1;
    }
    a->data = s.buf;
    a->rank = s.rank;
    a->count = s.count;
    a->tensor = 0;
    for (l = 0; l < 4; l++)
        a->shape[l] = l < s.rank ? s.shape[l] : 0;
    return 0;
}

/* -- base64 ----------------------------------------------------------------- */

static const char codec__b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* value + 1 of each base64 character; 0 for any other byte */
static const unsigned char codec__b64_dec[256] = {
    ['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6,
    ['G'] = 7, ['H'] = 8, ['I'] = 9, ['J'] = 10, ['K'] = 11, ['L'] = 12,
    ['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16, ['Q'] = 17, ['R'] = 18,
    ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24,
    ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30,
    ['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36,
    ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42,
    ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48,
    ['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54,
    ['2'] = 55, ['3'] = 56, ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60,
    ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64};

static int codec__b64_val(unsigned char c)
{
    return (int)codec__b64_dec[c] - 1;
}

/* Byte k of the little-endian float32 stream v. */
static unsigned codec__f32_byte(const float *v, size_t k)
{
    uint32_t u;
    memcpy(&u, v + k / 4, sizeof u);
    return (u >> (8 * (k % 4))) & 0xFFu;
}

size_t codec_base64_f32(const float *v, size_t total_bytes, size_t from,
                        size_t to, char *out)
{
    size_t k, o = 0;

    for (k = from; k + 3 <= to; k += 3) {
        uint32_t t = (codec__f32_byte(v, k) << 16) |
                     (codec__f32_byte(v, k + 1) << 8) | codec__f32_byte(v, k + 2);
        out[o++] = codec__b64[(t >> 18) & 63];
        out[o++] = codec__b64[(t >> 12) & 63];
        out[o++] = codec__b64[(t >> 6) & 63];
        out[o++] = codec__b64[t & 63];
    }
    if (k < to && to == total_bytes) {
        uint32_t t = codec__f32_byte(v, k) << 16;
        if (k + 1 < to)
            t |= codec__f32_byte(v, k + 1) << 8;
        out[o++] = codec__b64[(t >> 18) & 63];
        out[o++] = codec__b64[(t >> 12) & 63];
        out[o++] = k + 1 < to ? codec__b64[(t >> 6) & 63] : '=';
        out[o++] = '=';
    }
    return o;
}

/* Decodes base64 text s[0..len) into the float buffer f of `count` values,
 * whose byte length the caller has already matched against the text. */
static int codec__b64_decode(const char *s, size_t len, float *f, size_t count,
                             const char *ptr, codec_error *err)
{
    unsigned char *bytes = (unsigned char *)f;
    size_t i, o = 0, nbytes = count * 4;
    char path[300];

    snprintf(path, sizeof path, "%s/data", ptr);
    /* whole groups first (no padding possible before the last one); a bad
     * character drops to the careful loop below, which names it */
    for (i = 0; i + 4 < len; i += 4) {
        unsigned a0 = codec__b64_dec[(unsigned char)s[i]];
        unsigned a1 = codec__b64_dec[(unsigned char)s[i + 1]];
        unsigned a2 = codec__b64_dec[(unsigned char)s[i + 2]];
        unsigned a3 = codec__b64_dec[(unsigned char)s[i + 3]];
        uint32_t t;
        if ((a0 == 0) | (a1 == 0) | (a2 == 0) | (a3 == 0))
            break;
        t = ((a0 - 1) << 18) | ((a1 - 1) << 12) | ((a2 - 1) << 6) | (a3 - 1);
        bytes[o] = (unsigned char)(t >> 16);
        bytes[o + 1] = (unsigned char)(t >> 8);
        bytes[o + 2] = (unsigned char)t;
        o += 3;
    }
    for (; i < len; i += 4) {
        int v[4], j, pads = 0;
        for (j = 0; j < 4; j++) {
            unsigned char c = (unsigned char)s[i + (size_t)j];
            if (c == '=' && i + 4 == len && j >= 2 &&
                (j == 3 || s[i + 3] == '=')) {
                v[j] = 0;
                pads++;
                continue;
            }
            v[j] = codec__b64_val(c);
            if (v[j] < 0) {
                if (c >= 0x20 && c < 0x7F)
                    codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                    "%s: invalid base64 character '%c' at "
                                    "offset %zu (expected RFC 4648 standard "
                                    "alphabet with '=' padding at the end)",
                                    path, c, i + (size_t)j);
                else
                    codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                    "%s: invalid base64 byte 0x%02x at "
                                    "offset %zu", path, c, i + (size_t)j);
                return -1;
            }
        }
        {
            uint32_t t = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) |
                         ((uint32_t)v[2] << 6) | (uint32_t)v[3];
            if ((pads == 1 && (t & 0xFF)) || (pads == 2 && (t & 0xFFFF))) {
                codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                "%s: non-canonical base64: the bits before "
                                "the padding must be zero", path);
                return -1;
            }
            if (o < nbytes) bytes[o++] = (unsigned char)(t >> 16);
            if (pads < 2 && o < nbytes) bytes[o++] = (unsigned char)(t >> 8);
            if (pads < 1 && o < nbytes) bytes[o++] = (unsigned char)t;
        }
    }
    /* the wire is little-endian; reorder in place on a big-endian host */
    for (i = 0; i < count; i++) {
        uint32_t u = (uint32_t)bytes[4 * i] | ((uint32_t)bytes[4 * i + 1] << 8) |
                     ((uint32_t)bytes[4 * i + 2] << 16) |
                     ((uint32_t)bytes[4 * i + 3] << 24);
        memcpy(f + i, &u, sizeof u);
        if (!isfinite(f[i])) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: value %zu (row-major) is %s; values must be "
                            "finite float32", path, i,
                            isnan(f[i]) ? "NaN" : "infinite");
            return -1;
        }
    }
    return 0;
}

/* The keys a tensor object may hold. */
static const char *const codec__tensor_keys[] = {"dtype", "shape", "data",
                                                 "ref"};

/* Index of key[0..len) (raw, escapes undecoded) in codec__tensor_keys, or
 * -1 with err filled (an unknown key, with the closest one named). */
static int codec__tensor_key(const char *key, size_t len, int esc,
                             const char *ptr, codec_error *err)
{
    char *dec = esc ? codec_json_unescape(key, len, &len) : NULL;
    const char *k = dec ? dec : key, *near;
    char path[300], shown[48];
    size_t i, n;

    if (esc && dec == NULL) {
        codec__oom(err);
        return -1;
    }
    for (i = 0; i < sizeof codec__tensor_keys / sizeof codec__tensor_keys[0];
         i++)
        if (strlen(codec__tensor_keys[i]) == len &&
            memcmp(codec__tensor_keys[i], k, len) == 0) {
            free(dec);
            return (int)i;
        }
    for (n = 0; n < len && n + 4 < sizeof shown; n++)
        shown[n] = ((unsigned char)k[n] >= 0x20 && (unsigned char)k[n] < 0x7F &&
                    k[n] != '"' && k[n] != '/' && k[n] != '~')
                       ? k[n] : '?';
    shown[n] = '\0';
    near = codec_json_closest(k, len, codec__tensor_keys,
                              sizeof codec__tensor_keys /
                                  sizeof codec__tensor_keys[0]);
    free(dec);
    snprintf(path, sizeof path, "%s/%s", ptr, shown);
    if (near != NULL)
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: unknown key \"%s\" in a tensor object; did you "
                        "mean \"%s\"? (a tensor object holds \"dtype\", "
                        "\"shape\" and \"data\", or \"ref\")", path, shown,
                        near);
    else
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: unknown key \"%s\" in a tensor object (it holds "
                        "\"dtype\", \"shape\" and \"data\", or \"ref\")", path,
                        shown);
    return -1;
}

/* A {"ref": ..., "shape"?: [..]} tensor: the stored values, borrowed, with
 * the stored shape or a given one of the same element count. */
static int codec__tensor_ref(codec_reader *r, const char *ptr,
                             const char *shape_doc, int min_rank,
                             int max_rank, const char *ref, size_t ref_len,
                             const size_t *shape, int rank, codec_array *a,
                             codec_error *err)
{
    char path[300];
    size_t count = 1, i;

    if (r->refs == NULL) {
        codec_error_set(err, ERRORS_UNKNOWN_REF, ptr,
                        "%s: this server keeps no tensors (its tensor store "
                        "is off); send the values inline", ptr);
        return -1;
    }
    if (r->refs->resolve(r->refs->ctx, ref, ref_len, ptr, a, err) != 0)
        return -1;
    a->refs = r->refs;
    if (rank > 0) {
        for (i = 0; i < (size_t)rank; i++)
            count = shape[i] != 0 && count > SIZE_MAX / shape[i]
                        ? SIZE_MAX : count * shape[i];
        if (count != a->count) {
            snprintf(path, sizeof path, "%s/shape", ptr);
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: the shape given holds %zu values, but the "
                            "stored tensor %s holds %zu", path, count,
                            a->ref, a->count);
            codec_array_clear(a);
            return -1;
        }
        a->rank = rank;
        for (i = 0; i < 4; i++)
            a->shape[i] = i < (size_t)rank ? shape[i] : 0;
    }
    if (a->rank < min_rank || a->rank > max_rank) {
        snprintf(path, sizeof path, "%s", ptr);
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: expected %s, found the stored tensor %s of rank "
                        "%d", path, shape_doc, a->ref, a->rank);
        codec_array_clear(a);
        return -1;
    }
    a->tensor = 1;
    return 0;
}

static int codec__tensor(codec_reader *r, const char *ptr,
                         const char *shape_doc, int min_rank, int max_rank,
                         codec_array *a, codec_error *err)
{
    const char *data = NULL, *key, *ref = NULL;
    size_t data_len = 0, key_len, shape[4] = {0, 0, 0, 0}, count = 1, i;
    size_t ref_len = 0;
    int data_esc = 0, esc, have_dtype = 0, have_shape = 0, rank = 0;
    int first = 1, elem_first, rc, which;
    char path[300];
    char *unesc = NULL;
    float *f = NULL;

    r->p++; /* '{' */
    while ((rc = codec_json_member(r, &first, &key, &key_len, &esc, err)) ==
           1) {
        if ((which = codec__tensor_key(key, key_len, esc, ptr, err)) < 0)
            return -1;
        if (which == 3) {
            int ref_esc;
            snprintf(path, sizeof path, "%s/ref", ptr);
            if (r->p >= r->end || *r->p != '"') {
                codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected a string \"sha256:<64 hex "
                                "digits>\", found %s", path,
                                codec_json_kind(r));
                return -1;
            }
            if (codec_json_string(r, &ref, &ref_len, &ref_esc, err) != 0)
                return -1;
            if (ref_esc) {
                /* a ref is plain lowercase hex: an escape cannot be one */
                codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected \"sha256:<64 lowercase hex "
                                "digits>\", found escapes", path);
                return -1;
            }
        } else if (which == 0) {
            const char *v;
            size_t vl;
            int ve;
            snprintf(path, sizeof path, "%s/dtype", ptr);
            if (r->p >= r->end || *r->p != '"') {
                codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected the string \"float32\", "
                                "found %s", path, codec_json_kind(r));
                return -1;
            }
            if (codec_json_string(r, &v, &vl, &ve, err) != 0)
                return -1;
            {
                /* decoded, so "float\u0033\u0032" counts as "float32" */
                char *dec = ve ? codec_json_unescape(v, vl, &vl) : NULL;
                const char *t = dec ? dec : v;
                char q[40];
                size_t k;
                int ok = vl == 7 && memcmp(t, "float32", 7) == 0;
                for (k = 0; k < vl && k + 4 < sizeof q; k++)
                    q[k] = ((unsigned char)t[k] >= 0x20 &&
                            (unsigned char)t[k] < 0x7F && t[k] != '"')
                               ? t[k] : '?';
                q[k] = '\0';
                free(dec);
                if (ve && dec == NULL) {
                    codec__oom(err);
                    return -1;
                }
                if (!ok) {
                    codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                    "%s: expected \"float32\", found "
                                    "\"%s\"", path, q);
                    return -1;
                }
            }
            have_dtype = 1;
        } else if (which == 1) {
            snprintf(path, sizeof path, "%s/shape", ptr);
            if (r->p >= r->end || *r->p != '[') {
                codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected an array of dimensions, "
                                "found %s", path, codec_json_kind(r));
                return -1;
            }
            r->p++;
            rank = 0;
            elem_first = 1;
            while ((rc = codec_json_element(r, &elem_first, err)) == 1) {
                double d;
                snprintf(path, sizeof path, "%s/shape/%d", ptr, rank);
                if (rank == max_rank) {
                    codec_error_set(err, ERRORS_INVALID_REQUEST,
                                    path, "%s/shape: expected %s, "
                                    "found more than %d dimensions",
                                    ptr, shape_doc, max_rank);
                    return -1;
                }
                if (r->p >= r->end ||
                    !(*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) {
                    codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                    "%s: expected a positive integer, "
                                    "found %s", path,
                                    codec_json_kind(r));
                    return -1;
                }
                if (codec_json_number_d(r, &d, err) != 0)
                    return -1;
                if (!(d >= 1 && d <= 9007199254740992.0) ||
                    d != floor(d)) {
                    codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                    "%s: expected a positive integer, "
                                    "found %g", path, d);
                    return -1;
                }
                shape[rank++] = (size_t)d;
            }
            if (rc < 0)
                return -1;
            have_shape = 1;
        } else {
            if (r->p >= r->end || *r->p != '"') {
                snprintf(path, sizeof path, "%s/data", ptr);
                codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected a base64 string, found %s",
                                path, codec_json_kind(r));
                return -1;
            }
            if (codec_json_string(r, &data, &data_len, &data_esc, err))
                return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (ref != NULL) {
        if (data != NULL) {
            snprintf(path, sizeof path, "%s/data", ptr);
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: a tensor object holds \"data\" or \"ref\", "
                            "not both", path);
            return -1;
        }
        return codec__tensor_ref(r, ptr, shape_doc, min_rank, max_rank, ref,
                                 ref_len, shape, have_shape ? rank : 0, a,
                                 err);
    }
    if (!have_dtype || !have_shape || data == NULL) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: a tensor object needs \"dtype\", \"shape\" and "
                        "\"data\"; \"%s\" is missing", ptr,
                        !have_dtype ? "dtype" : !have_shape ? "shape" : "data");
        return -1;
    }
    if (rank < min_rank || rank > max_rank) {
        snprintf(path, sizeof path, "%s/shape", ptr);
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: expected %s, found a shape of rank %d", path,
                        shape_doc, rank);
        return -1;
    }
    for (i = 0; i < (size_t)rank; i++) {
        if (count > SIZE_MAX / 4 / shape[i]) {
            snprintf(path, sizeof path, "%s/shape", ptr);
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: the product of the dimensions overflows",
                            path);
            return -1;
        }
        count *= shape[i];
    }
    if (data_esc) {
        /* JSON allows "\/" inside the base64 text */
        unesc = codec_json_unescape(data, data_len, &data_len);
        if (unesc == NULL) {
            codec__oom(err);
            return -1;
        }
        data = unesc;
    }
    snprintf(path, sizeof path, "%s/data", ptr);
    if (data_len % 4 != 0) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: base64 text of %zu characters; expected a "
                        "multiple of 4 (RFC 4648 with padding)", path,
                        data_len);
        goto fail;
    }
    {
        size_t pad = 0, bytes;
        if (data_len >= 1 && data[data_len - 1] == '=')
            pad++;
        if (data_len >= 2 && data[data_len - 2] == '=')
            pad++;
        bytes = data_len / 4 * 3 - pad;
        if (bytes != count * 4) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: decodes to %zu bytes, expected 4 * %zu = "
                            "%zu for the shape given", path, bytes, count,
                            count * 4);
            goto fail;
        }
    }
    /* the text length was matched to count first, so this allocation is
     * bounded by the body size */
    f = malloc(count * sizeof(float));
    if (f == NULL) {
        codec__oom(err);
        goto fail;
    }
    if (codec__b64_decode(data, data_len, f, count, ptr, err) != 0)
        goto fail;
    free(unesc);
    a->data = f;
    a->rank = rank;
    a->count = count;
    a->tensor = 1;
    for (i = 0; i < 4; i++)
        a->shape[i] = shape[i];
    return 0;
fail:
    free(unesc);
    free(f);
    return -1;
}

int codec_array_parse(codec_reader *r, const char *ptr, const char *shape_doc,
                      codec_leaf leaf, int min_rank, int max_rank,
                      codec_array *a, codec_error *err)
{
    memset(a, 0, sizeof *a);
    codec_json_ws(r);
    if (r->p < r->end && *r->p == '[')
        return codec__nested(r, ptr, shape_doc, leaf, min_rank, max_rank, a,
                             err);
    if (r->p < r->end && *r->p == '{' && leaf == CODEC_LEAF_F32)
        return codec__tensor(r, ptr, shape_doc, min_rank, max_rank, a, err);
    codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                    "%s: expected %s%s, found %s", ptr, shape_doc,
                    leaf == CODEC_LEAF_F32     ? " (nested arrays or a tensor "
                                                 "object)"
                    : leaf == CODEC_LEAF_INDEX ? " of integers >= 0"
                                               : " of booleans",
                    codec_json_kind(r));
    return -1;
}

void codec_array_clear(codec_array *a)
{
    if (a->hold != NULL)
        a->refs->release(a->refs->ctx, a->hold);
    else
        free(a->data);
    memset(a, 0, sizeof *a);
}

void codec_array_dim_ptr(const codec_array *a, const char *ptr, int k,
                         char *buf, size_t cap)
{
    size_t n;
    int i;

    if (a->tensor) {
        snprintf(buf, cap, "%s/shape/%d", ptr, k);
        return;
    }
    n = (size_t)snprintf(buf, cap, "%s", ptr);
    for (i = 0; i < k && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "/0");
}

/* json/tensor.c: the request's matrices, vectors and masks, parsed straight
 * from the body into packed row-major buffers (nested JSON arrays here,
 * tensor objects in json/tensor_object.c), with a JSON Pointer to the
 * first offending element. */
#include "json/json.h"
#include "json/tensor_object.h"

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

void codec__oom(codec_error *err)
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

/* Whether text[0..len), a JSON number, is exactly the integer d (digits,
 * then at most a point and zeros). */
static int codec__integer_text(const char *text, size_t len, double d)
{
    char digits[32];
    size_t k = 0;
    int n = snprintf(digits, sizeof digits, "%.0f", d);

    while (k < len && text[k] >= '0' && text[k] <= '9')
        k++;
    if (n <= 0 || (size_t)n != k || memcmp(text, digits, k) != 0)
        return 0;
    if (k < len && text[k++] != '.')
        return 0;
    while (k < len && text[k] == '0')
        k++;
    return k == len;
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
            const char *text = r->p;
            if (codec_json_number_d(r, &d, s->err) != 0)
                return -1;
            /* 2^53: every integer below it is exact in the double; from
             * 2^52 on, a double can be the rounding of another number
             * (2^53 + 1, or a fraction), so the text must be the one */
            if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d) ||
                (d >= 4503599627370496.0 &&
                 !codec__integer_text(text, (size_t)(r->p - text), d))) {
                codec__path(s, level + 1, path, sizeof path);
                codec_error_set(s->err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected an integer from 0 to 2^53 "
                                "(9007199254740992, the largest a JSON "
                                "reader keeps exact), found %.*s",
                                path,
                                (int)(r->p - text < 40 ? r->p - text : 40),
                                text);
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

/* A boolean field given as a tensor object: the contract lets any matrix
 * or vector field be one, and its dtype is float32, so its values must be
 * 0 (false) or 1 (true). An additive mask (0 and a large negative number,
 * PyTorch's float masks) is refused rather than read as booleans:
 * attn_bias takes it. Not a ref: the contract's refs stand for tensors of
 * numbers, not the boolean masks (422 at the field, as any other value
 * the field does not take). */
static int codec__bool_tensor(codec_reader *r, const char *ptr,
                              const char *shape_doc, int min_rank,
                              int max_rank, codec_array *a, codec_error *err)
{
    const char *refused = r->ref_refused;
    char at_ref[300];
    codec_array f;
    const float *v;
    uint8_t *b;
    size_t i;
    int rc;

    memset(&f, 0, sizeof f);
    r->ref_refused = "a boolean mask takes its values inline (true and "
                     "false, or a tensor object of 0 and 1), not a ref";
    rc = codec__tensor_object(r, ptr, shape_doc, min_rank, max_rank, &f, err);
    r->ref_refused = refused;
    snprintf(at_ref, sizeof at_ref, "%s/ref", ptr);
    if (rc != 0 && strcmp(err->field, at_ref) == 0) {
        /* the field is what takes no ref: named so in the message too */
        size_t n = strlen(at_ref);
        snprintf(err->field, sizeof err->field, "%s", ptr);
        if (strncmp(err->message, at_ref, n) == 0)
            memmove(err->message + strlen(ptr), err->message + n,
                    strlen(err->message + n) + 1);
    }
    if (rc != 0)
        return -1;
    v = f.data;
    for (i = 0; i < f.count; i++)
        if (v[i] != 0.0f && v[i] != 1.0f) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                            "%s: a tensor object of booleans holds 0 (false) "
                            "and 1 (true); element %zu is %.9g (an additive "
                            "mask goes in attn_bias)",
                            ptr, i, (double)v[i]);
            codec_array_clear(&f);
            return -1;
        }
    b = malloc(f.count ? f.count : 1);
    if (b == NULL) {
        codec_array_clear(&f);
        codec__oom(err);
        return -1;
    }
    for (i = 0; i < f.count; i++)
        b[i] = v[i] != 0.0f;
    *a = f;
    a->data = b;
    a->hold = NULL;
    a->refs = NULL;
    codec_array_clear(&f); /* the floats, or the stored tensor's hold */
    return 0;
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
        return codec__tensor_object(r, ptr, shape_doc, min_rank, max_rank, a,
                                    err);
    if (r->p < r->end && *r->p == '{' && leaf == CODEC_LEAF_BOOL)
        return codec__bool_tensor(r, ptr, shape_doc, min_rank, max_rank, a,
                                  err);
    codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                    "%s: expected %s%s, found %s", ptr, shape_doc,
                    leaf == CODEC_LEAF_F32     ? " (nested arrays or a tensor "
                                                 "object)"
                    : leaf == CODEC_LEAF_INDEX ? " of integers >= 0"
                                               : " of booleans (or a tensor "
                                                 "object of 0 and 1)",
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

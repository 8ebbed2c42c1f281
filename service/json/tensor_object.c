/* json/tensor_object.c: tensor objects {"dtype","shape","data"} (base64
 * little-endian float32) or {"ref": "sha256:..."} (a stored tensor) read
 * in three steps (keys, shape, data); and the base64 encoder the response
 * writer uses. */
#include "json/json.h"
#include "json/tensor_object.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* When the first '=' of base64 text s[0..len) is misplaced, fills err
 * (path: the text's pointer) and returns -1: padding followed by more text,
 * or more than two '=' at the end. 0 when the padding is not the fault.
 * Only on the way to an error: it reads the text again. */
static int codec__b64_pad_fault(const char *s, size_t len, const char *path,
                                codec_error *err)
{
    const char *eq = memchr(s, '=', len);
    size_t at, i;

    if (eq == NULL)
        return 0;
    at = (size_t)(eq - s);
    for (i = at + 1; i < len; i++)
        if (s[i] != '=') {
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: padding '=' at offset %zu, before the end "
                            "of the text (RFC 4648 base64 has one or two "
                            "'=' only at its end)", path, at);
            return -1;
        }
    if (len - at > 2) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: %zu '=' of padding from offset %zu (RFC 4648 "
                        "base64 ends with at most two)", path, len - at, at);
        return -1;
    }
    return 0;
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
                /* an '=' refused here is misplaced padding: say so */
                if (c == '=' && codec__b64_pad_fault(s, len, path, err) != 0)
                    return -1;
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
    char path[400], *shown;
    size_t i;

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
    near = codec_json_closest(k, len, codec__tensor_keys,
                              sizeof codec__tensor_keys /
                                  sizeof codec__tensor_keys[0]);
    shown = codec_json_quote_key(k, len);
    codec_json_pointer(path, sizeof path, ptr, k, len);
    free(dec);
    if (shown == NULL) {
        codec__oom(err);
        return -1;
    }
    if (near != NULL)
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: unknown key %s in a tensor object; did you "
                        "mean \"%s\"? (a tensor object holds \"dtype\", "
                        "\"shape\" and \"data\", or \"ref\")", path, shown,
                        near);
    else
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: unknown key %s in a tensor object (it holds "
                        "\"dtype\", \"shape\" and \"data\", or \"ref\")", path,
                        shown);
    free(shown);
    return -1;
}

/* A {"ref": ..., "shape"?: [..]} tensor: the stored values, borrowed, with
 * the stored shape or a given one (have_shape: shape[0..rank)) of the same
 * element count. */
static int codec__tensor_ref(codec_reader *r, const char *ptr,
                             const char *shape_doc, int min_rank,
                             int max_rank, const char *ref, size_t ref_len,
                             int have_shape, const size_t *shape, int rank,
                             codec_array *a, codec_error *err)
{
    char path[300];
    size_t count = 1, i;

    /* a given shape is checked as a tensor object's is, before the store
     * is asked: "shape": [] is rank 0, not "the stored shape" */
    if (have_shape && (rank < min_rank || rank > max_rank)) {
        snprintf(path, sizeof path, "%s/shape", ptr);
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: expected %s, found a shape of rank %d", path,
                        shape_doc, rank);
        return -1;
    }
    if (r->refs == NULL) {
        codec_error_set(err, ERRORS_UNKNOWN_REF, ptr,
                        "%s: this server keeps no tensors (its tensor store "
                        "is off); send the values inline", ptr);
        return -1;
    }
    if (r->refs->resolve(r->refs->ctx, ref, ref_len, ptr, a, err) != 0)
        return -1;
    a->refs = r->refs;
    if (have_shape) {
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
    /* the stored shape (a given one was checked above) */
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

/* What the members of a tensor object gave, as read (strings raw). */
typedef struct codec__tobj {
    const char *data, *ref;
    size_t data_len, ref_len;
    int data_esc, have_dtype, have_shape, rank;
    size_t shape[4];
} codec__tobj;

/* "ref": a string of plain lowercase hex, kept raw in t. */
static int codec__tensor_ref_member(codec_reader *r, const char *ptr,
                                    codec__tobj *t, codec_error *err)
{
    char path[300];
    int ref_esc;

    snprintf(path, sizeof path, "%s/ref", ptr);
    if (r->p >= r->end || *r->p != '"') {
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: expected a string \"sha256:<64 hex "
                        "digits>\", found %s", path, codec_json_kind(r));
        return -1;
    }
    if (codec_json_string(r, &t->ref, &t->ref_len, &ref_esc, err) != 0)
        return -1;
    if (ref_esc) {
        /* a ref is plain lowercase hex: an escape cannot be one */
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: expected \"sha256:<64 lowercase hex "
                        "digits>\", found escapes", path);
        return -1;
    }
    return 0;
}

/* "dtype": the string "float32" (escapes decoded). */
static int codec__tensor_dtype(codec_reader *r, const char *ptr,
                               codec__tobj *t, codec_error *err)
{
    char path[300];
    const char *v, *text;
    char *dec, *q;
    size_t vl;
    int ve, ok;

    snprintf(path, sizeof path, "%s/dtype", ptr);
    if (r->p >= r->end || *r->p != '"') {
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: expected the string \"float32\", found %s",
                        path, codec_json_kind(r));
        return -1;
    }
    if (codec_json_string(r, &v, &vl, &ve, err) != 0)
        return -1;
    /* decoded, so "float\u0033\u0032" counts as "float32" */
    dec = ve ? codec_json_unescape(v, vl, &vl) : NULL;
    text = dec ? dec : v;
    if (ve && dec == NULL) {
        codec__oom(err);
        return -1;
    }
    ok = vl == 7 && memcmp(text, "float32", 7) == 0;
    q = ok ? NULL : codec_json_quote_key(text, vl);
    free(dec);
    if (!ok) {
        if (q == NULL) {
            codec__oom(err);
            return -1;
        }
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: expected \"float32\", found %s", path, q);
        free(q);
        return -1;
    }
    t->have_dtype = 1;
    return 0;
}

/* "shape": an array of at most max_rank positive integers. */
static int codec__tensor_shape(codec_reader *r, const char *ptr,
                               const char *shape_doc, int max_rank,
                               codec__tobj *t, codec_error *err)
{
    char path[300];
    int elem_first = 1, rc;

    snprintf(path, sizeof path, "%s/shape", ptr);
    if (r->p >= r->end || *r->p != '[') {
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: expected an array of dimensions, found %s",
                        path, codec_json_kind(r));
        return -1;
    }
    r->p++;
    t->rank = 0;
    while ((rc = codec_json_element(r, &elem_first, err)) == 1) {
        double d;
        snprintf(path, sizeof path, "%s/shape/%d", ptr, t->rank);
        if (t->rank == max_rank) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s/shape: expected %s, found more than %d "
                            "dimensions", ptr, shape_doc, max_rank);
            return -1;
        }
        if (r->p >= r->end ||
            !(*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: expected a positive integer, found %s",
                            path, codec_json_kind(r));
            return -1;
        }
        if (codec_json_number_d(r, &d, err) != 0)
            return -1;
        if (!(d >= 1 && d <= 9007199254740992.0) || d != floor(d)) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: expected a positive integer, found %g",
                            path, d);
            return -1;
        }
        t->shape[t->rank++] = (size_t)d;
    }
    if (rc < 0)
        return -1;
    t->have_shape = 1;
    return 0;
}

/* Step 1, the keys: reads the members of the object at r->p (just past
 * its '{') into t, each checked as it comes (first error wins). */
static int codec__tensor_members(codec_reader *r, const char *ptr,
                                 const char *shape_doc, int max_rank,
                                 codec__tobj *t, codec_error *err)
{
    const char *key;
    size_t key_len;
    int first = 1, esc, rc, which;
    unsigned seen = 0;
    char path[300];

    while ((rc = codec_json_member(r, &first, &key, &key_len, &esc, err)) ==
           1) {
        if ((which = codec__tensor_key(key, key_len, esc, ptr, err)) < 0)
            return -1;
        if (seen & 1u << which) {
            /* the last one would win in silence: a typo's different
             * tensor */
            snprintf(path, sizeof path, "%s/%s", ptr,
                     codec__tensor_keys[which]);
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: the key is given twice", path);
            return -1;
        }
        seen |= 1u << which;
        if (which == 3) {
            if (r->ref_refused != NULL) {
                snprintf(path, sizeof path, "%s/ref", ptr);
                codec_error_set(err, ERRORS_INVALID_REQUEST, path, "%s: %s",
                                path, r->ref_refused);
                return -1;
            }
            if (codec__tensor_ref_member(r, ptr, t, err) != 0)
                return -1;
        } else if (which == 0) {
            if (codec__tensor_dtype(r, ptr, t, err) != 0)
                return -1;
        } else if (which == 1) {
            if (codec__tensor_shape(r, ptr, shape_doc, max_rank, t, err) != 0)
                return -1;
        } else {
            if (r->p >= r->end || *r->p != '"') {
                snprintf(path, sizeof path, "%s/data", ptr);
                codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                                "%s: expected a base64 string, found %s",
                                path, codec_json_kind(r));
                return -1;
            }
            if (codec_json_string(r, &t->data, &t->data_len, &t->data_esc,
                                  err))
                return -1;
        }
    }
    return rc < 0 ? -1 : 0;
}

/* Step 2, the shape: all three members there, a rank in [min_rank,
 * max_rank], and the element count (*count), its bytes within SIZE_MAX. */
static int codec__tensor_count(const char *ptr, const char *shape_doc,
                               int min_rank, int max_rank,
                               const codec__tobj *t, size_t *count,
                               codec_error *err)
{
    char path[300];
    size_t i;

    if (!t->have_dtype || !t->have_shape || t->data == NULL) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: a tensor object needs \"dtype\", \"shape\" and "
                        "\"data\"; \"%s\" is missing", ptr,
                        !t->have_dtype   ? "dtype"
                        : !t->have_shape ? "shape"
                                         : "data");
        return -1;
    }
    if (t->rank < min_rank || t->rank > max_rank) {
        snprintf(path, sizeof path, "%s/shape", ptr);
        codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                        "%s: expected %s, found a shape of rank %d", path,
                        shape_doc, t->rank);
        return -1;
    }
    *count = 1;
    for (i = 0; i < (size_t)t->rank; i++) {
        if (*count > SIZE_MAX / 4 / t->shape[i]) {
            snprintf(path, sizeof path, "%s/shape", ptr);
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: the product of the dimensions overflows",
                            path);
            return -1;
        }
        *count *= t->shape[i];
    }
    return 0;
}

/* Step 3, the data: the base64 text of t decoded into a new buffer of
 * count floats, which a then owns. */
static int codec__tensor_data(const char *ptr, const codec__tobj *t,
                              size_t count, codec_array *a, codec_error *err)
{
    const char *data = t->data;
    size_t data_len = t->data_len, i;
    char path[300];
    char *unesc = NULL;
    float *f = NULL;

    if (t->data_esc) {
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
        /* a length that is wrong because of '=' inside the text is
         * reported as that '=' (here and below) */
        if (codec__b64_pad_fault(data, data_len, path, err) != 0)
            goto fail;
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
            if (codec__b64_pad_fault(data, data_len, path, err) != 0)
                goto fail;
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
    a->rank = t->rank;
    a->count = count;
    a->tensor = 1;
    for (i = 0; i < 4; i++)
        a->shape[i] = t->shape[i];
    return 0;
fail:
    free(unesc);
    free(f);
    return -1;
}

int codec__tensor_object(codec_reader *r, const char *ptr,
                         const char *shape_doc, int min_rank, int max_rank,
                         codec_array *a, codec_error *err)
{
    codec__tobj t;
    size_t count;
    char path[300];

    memset(&t, 0, sizeof t);
    r->p++; /* '{' */
    if (codec__tensor_members(r, ptr, shape_doc, max_rank, &t, err) != 0)
        return -1;
    if (t.ref != NULL) {
        if (t.data != NULL) {
            snprintf(path, sizeof path, "%s/data", ptr);
            codec_error_set(err, ERRORS_INVALID_REQUEST, path,
                            "%s: a tensor object holds \"data\" or \"ref\", "
                            "not both", path);
            return -1;
        }
        return codec__tensor_ref(r, ptr, shape_doc, min_rank, max_rank, t.ref,
                                 t.ref_len, t.have_shape, t.shape, t.rank,
                                 a, err);
    }
    if (codec__tensor_count(ptr, shape_doc, min_rank, max_rank, &t, &count,
                            err) != 0)
        return -1;
    return codec__tensor_data(ptr, &t, count, a, err);
}

/* tensors_http.c: POST /tensors and GET /tensors/<ref> as functions of a
 * body and a ref: the upload's three forms read into float32 values (the
 * codec's array parser for JSON, the raw bytes for octet-stream), stored,
 * and answered as JSON; a stored tensor written back as a tensor object
 * with base64 data. */
#include "store/tensors_http.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "json/text.h"

/* How the accepted shapes read in messages. */
#define STORE_HTTP__SHAPE_DOC "a tensor of rank 1 to 4"

bool store_http_media_ok(const char *content_type)
{
    return codec_media_of(content_type) != CODEC_MEDIA_OTHER;
}

static int store_http__off(codec_error *err)
{
    codec_error_set(err, ERRORS_NOT_FOUND, NULL,
                    "the tensor store is off (--tensor-store-bytes 0, "
                    "ATTND_TENSOR_STORE_BYTES): send tensors inline");
    return -1;
}

static int store_http__oom(codec_error *err)
{
    codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                    "out of memory for the tensor; retry later");
    return -1;
}

/* Writes "[d0,d1,..]" of shape[0..rank) into buf (96 bytes suffice). */
static void store_http__shape(char *buf, size_t cap, const size_t *shape,
                              int rank)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%zu", i ? "," : "",
                              shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* -- POST ---------------------------------------------------------------------- */

/* The codec's messages start with the field's pointer, which is "" for a
 * whole body: "the body" reads better than a bare ":". */
static void store_http__name_body(codec_error *err)
{
    if (err->message[0] != ':')
        return;
    static const char body[] = "the body";
    size_t len = strlen(err->message);
    if (len + sizeof body > sizeof err->message)
        len = sizeof err->message - sizeof body;
    memmove(err->message + sizeof body - 1, err->message, len);
    memcpy(err->message, body, sizeof body - 1);
    err->message[len + sizeof body - 1] = '\0';
}

/* A JSON body: a tensor object or a nested numeric array, and nothing
 * after it. On success a owns (or holds) the values. */
static int store_http__parse_json(const char *body, size_t len,
                                  codec_array *a, codec_error *err)
{
    codec_reader r;
    codec_reader_init(&r, body, len, NULL);
    /* a ref names what is already stored: it cannot be what is uploaded
     * (without this, it would read as a ref this reader cannot resolve) */
    r.ref_refused = "POST /tensors takes the tensor's values (a tensor "
                    "object with \"dtype\", \"shape\" and \"data\", a "
                    "numeric array, or raw float32 bytes as "
                    "application/octet-stream), not a ref";
    codec_json_ws(&r);
    if (r.p < r.end && *r.p != '[' && *r.p != '{') {
        /* not a tensor: invalid JSON (400) or the wrong value (422) */
        codec_reader check = r;
        if (codec_json_skip(&check, err))
            return -1;
        codec_json_ws(&check);
        if (check.p != check.end) {
            codec_json_syntax(&check, err, "unexpected data after the value");
            return -1;
        }
        codec_error_set(err, ERRORS_INVALID_REQUEST, "",
                        "the body: expected %s (a tensor object or nested "
                        "arrays of numbers), found %s",
                        STORE_HTTP__SHAPE_DOC, codec_json_kind(&r));
        return -1;
    }
    if (r.p == r.end) {
        codec_json_syntax(&r, err, "unexpected end of input, expected a value");
        return -1;
    }
    codec_reader value = r;
    if (codec_array_parse(&r, "", STORE_HTTP__SHAPE_DOC, CODEC_LEAF_F32, 1, 4,
                          a, err)) {
        /* read again for syntax only: a body that is not JSON at all is
         * 400 invalid_json, as on /attend, whatever the value broke first */
        codec_error syntax = {0};
        if (err->kind == ERRORS_INVALID_REQUEST) {
            if (codec_json_skip(&value, &syntax) == 0) {
                codec_json_ws(&value);
                if (value.p != value.end)
                    codec_json_syntax(&value, &syntax,
                                      "unexpected data after the tensor");
            }
            if (syntax.kind != ERRORS_INVALID_REQUEST && syntax.message[0]) {
                *err = syntax;
                return -1;
            }
        }
        store_http__name_body(err);
        return -1;
    }
    codec_json_ws(&r);
    if (r.p != r.end) {
        codec_json_syntax(&r, err, "unexpected data after the tensor");
        codec_array_clear(a);
        return -1;
    }
    if (a->count == 0) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "",
                        "the body: expected %s with at least one value, "
                        "found an empty array",
                        STORE_HTTP__SHAPE_DOC);
        codec_array_clear(a);
        return -1;
    }
    return 0;
}

/* "768,768" into shape; 1 to 4 positive integers whose product (the
 * number of values, *count) fits in memory. */
static int store_http__parse_shape(const char *arg, size_t shape[4],
                                   int *rank, size_t *count, codec_error *err)
{
    if (!arg || !*arg) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, NULL,
                        "an application/octet-stream upload needs its shape "
                        "in the query string, e.g. POST /tensors?shape=768,768");
        return -1;
    }
    const char *p = arg;
    size_t product = 1;
    *rank = 0;
    for (;;) {
        if (*rank == 4 || *p < '0' || *p > '9')
            goto bad;
        size_t d = 0;
        while (*p >= '0' && *p <= '9') {
            if (d > (SIZE_MAX - 9) / 10)
                goto bad;
            d = d * 10 + (size_t)(*p++ - '0');
        }
        if (d == 0 || product > SIZE_MAX / sizeof(float) / d)
            goto bad;
        product *= d;
        shape[(*rank)++] = d;
        if (*p == '\0')
            break;
        if (*p++ != ',')
            goto bad;
    }
    *count = product;
    return 0;
bad:
    codec_error_set(err, ERRORS_INVALID_REQUEST, NULL,
                    "?shape=%.100s: expected 1 to 4 positive integers "
                    "separated by commas (e.g. 768,768) whose product times "
                    "4 is the body's length",
                    arg);
    return -1;
}

/* ?shape= with a JSON body: the values as read, in that shape, which must
 * hold as many (as {"ref": ..., "shape": [..]} does on /attend). */
static int store_http__reshape(const char *arg, size_t count, size_t shape[4],
                               int *rank, codec_error *err)
{
    size_t want[4] = {0, 0, 0, 0}, n;
    int r;
    char dims[96];

    if (!*arg) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, NULL,
                        "?shape= is empty: give the dimensions (e.g. "
                        "?shape=768,768) or leave it out");
        return -1;
    }
    if (store_http__parse_shape(arg, want, &r, &n, err))
        return -1;
    if (n != count) {
        store_http__shape(dims, sizeof dims, shape, *rank);
        codec_error_set(err, ERRORS_INVALID_REQUEST, NULL,
                        "?shape=%.100s holds %zu values, but the body's "
                        "tensor %s holds %zu",
                        arg, n, dims, count);
        return -1;
    }
    memcpy(shape, want, sizeof want);
    *rank = r;
    return 0;
}

/* Raw little-endian float32 values: the length must match the shape and
 * every value must be finite. */
static int store_http__check_octets(const char *body, size_t len,
                                    const size_t *shape, int rank,
                                    size_t count, codec_error *err)
{
    char dims[96];
    store_http__shape(dims, sizeof dims, shape, rank);
    if (len / sizeof(float) != count || len % sizeof(float)) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, NULL,
                        "the body has %zu bytes; shape %s needs 4 * %zu = %zu "
                        "bytes of little-endian float32",
                        len, dims, count, count * sizeof(float));
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        float v;
        memcpy(&v, body + i * sizeof v, sizeof v);
        if (!isfinite(v)) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, NULL,
                            "value %zu (bytes %zu to %zu) is %s; expected a "
                            "finite float32",
                            i, i * sizeof v, i * sizeof v + 3,
                            isnan(v) ? "NaN" : "infinite");
            return -1;
        }
    }
    return 0;
}

int store_http_post(store *s, const char *content_type, const char *shape_arg,
                    const char *body, size_t len, store_http_answer *ans,
                    codec_error *err)
{
    memset(ans, 0, sizeof *ans);
    if (!s)
        return store_http__off(err);
    codec_media media = codec_media_of(content_type);
    if (media == CODEC_MEDIA_OTHER) {
        codec_error_set(err, ERRORS_UNSUPPORTED_MEDIA_TYPE, NULL,
                        "expected Content-Type application/json or "
                        "application/octet-stream, found %s%.100s%s",
                        content_type ? "\"" : "",
                        content_type ? content_type : "none",
                        content_type ? "\"" : "");
        return -1;
    }

    codec_array a;
    memset(&a, 0, sizeof a);
    const float *values;
    size_t count, shape[4] = {0, 0, 0, 0};
    int rank;
    if (media == CODEC_MEDIA_JSON) {
        if (store_http__parse_json(body ? body : "", len, &a, err))
            return -1;
        values = a.data;
        count = a.count;
        rank = a.rank;
        memcpy(shape, a.shape, sizeof shape);
        if (shape_arg != NULL &&
            store_http__reshape(shape_arg, count, shape, &rank, err)) {
            codec_array_clear(&a);
            return -1;
        }
    } else {
        if (store_http__parse_shape(shape_arg, shape, &rank, &count, err) ||
            store_http__check_octets(body, len, shape, rank, count, err))
            return -1;
        /* the body buffer comes from malloc, so it is aligned for floats */
        values = (const float *)(const void *)body;
    }

    const store_tensor *t;
    int created;
    int rc = store_put(s, values, count, shape, rank, &t, &created);
    int put_errno = errno;
    codec_array_clear(&a);
    if (rc) {
        if (put_errno == EFBIG) {
            store_stats st;
            store_get_stats(s, &st);
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the tensor has %zu values and needs %zu bytes of "
                            "the store (4 a value and %d a tensor), more than "
                            "it holds: the limit --tensor-store-bytes "
                            "(ATTND_TENSOR_STORE_BYTES) is %zu",
                            count, count * sizeof(float) + STORE_ENTRY_OVERHEAD,
                            STORE_ENTRY_OVERHEAD, st.capacity);
            return -1;
        }
        return store_http__oom(err);
    }

    char dims[96];
    text_buf out = TEXT_BUF_INIT;
    store_http__shape(dims, sizeof dims, t->shape, t->rank);
    text_printf(&out, "{\"ref\":\"%s\",\"shape\":%s,\"bytes\":%zu}", t->ref,
                dims, t->count * sizeof(float));
    ans->body = text_take(&out, &ans->len);
    if (!ans->body) {
        store_release(s, t);
        return store_http__oom(err);
    }
    ans->status = created ? 201 : 200;
    ans->content_type = "application/json";
    snprintf(ans->location, sizeof ans->location, "/tensors/%s", t->ref);
    store_release(s, t);
    return 0;
}

/* -- GET ------------------------------------------------------------------------ */

int store_http_get(store *s, const char *ref, size_t len,
                   store_http_answer *ans, codec_error *err)
{
    memset(ans, 0, sizeof *ans);
    if (!s)
        return store_http__off(err);
    unsigned char hash[32];
    if (store_ref_parse(ref, len, hash)) {
        codec_error_set(err, ERRORS_NOT_FOUND, NULL,
                        "no such tensor: \"%.*s\" is not a ref; expected "
                        "/tensors/sha256:<64 lowercase hex digits>",
                        (int)(len < 100 ? len : 100), ref);
        return -1;
    }
    const store_tensor *t = store_get(s, hash);
    if (!t) {
        codec_error_set(err, ERRORS_NOT_FOUND, NULL,
                        "this replica's tensor store does not hold %.*s "
                        "(never uploaded here, or evicted): upload it again",
                        (int)len, ref);
        return -1;
    }
    char dims[96];
    store_http__shape(dims, sizeof dims, t->shape, t->rank);
    size_t bytes = t->count * sizeof(float);
    text_buf out = TEXT_BUF_INIT;
    /* the upload's answer, and the values as a tensor object's */
    text_printf(&out,
                "{\"ref\":\"%s\",\"shape\":%s,\"bytes\":%zu,"
                "\"dtype\":\"float32\",\"data\":\"",
                t->ref, dims, bytes);
    char *b64 = text_extend(&out, (bytes + 2) / 3 * 4);
    if (b64)
        codec_base64_f32(t->data, bytes, 0, bytes, b64);
    text_puts(&out, "\"}");
    store_release(s, t);
    ans->body = text_take(&out, &ans->len);
    if (!ans->body)
        return store_http__oom(err);
    ans->status = 200;
    ans->content_type = "application/json";
    return 0;
}

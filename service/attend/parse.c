/* attend/parse.c: request body -> validated attn_params with owned buffers.
 *
 * One pass over the body with the reader of json/reader.c: each known field is
 * parsed straight into its packed buffer; unknown fields are skipped (the
 * contract may grow optional fields, so an older server ignores them), and a
 * JSON null counts as an absent optional field. The first contract error is
 * kept while the rest of the body is still checked for syntax, so a body that
 * is not JSON at all is always 400 invalid_json, never 422. Then dimensions
 * are derived from the weight shapes, checked against each other (messages
 * say expected vs found, with a JSON Pointer), the limits are checked with
 * overflow-checked products, and only then are 3-D weights converted to the
 * library's side-by-side layout. */
#include "attend/request.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything the fields say, before cross-checking. */
/* tokens / memory_tokens: the raw text of the value in the body (the
 * reader validated it), checked for shape once n, m and B are known and
 * echoed back as it came. */
typedef struct codec__label_text {
    const char *text; /* NULL: absent */
    size_t len;
} codec__label_text;

typedef struct codec__fields {
    codec_array x, memory, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, kpm;
    int has_h, has_g, has_scale;
    size_t h, g;
    double scale;
    attn_mask mask;
    attn_weights weights;
    int base64;
    int analysis;
    size_t top_k;
    codec__label_text tokens, memory_tokens;
    unsigned seen; /* bit per field, for duplicates */
} codec__fields;

enum {
    F_X, F_MEMORY, F_NUM_HEADS, F_NUM_KV_HEADS, F_W_Q, F_W_K, F_W_V, F_W_O,
    F_B_Q, F_B_K, F_B_V, F_B_O, F_MASK, F_KPM, F_SCALE, F_RETURN_WEIGHTS,
    F_ENCODING, F_TOKENS, F_MEMORY_TOKENS, F_ANALYSIS, F_TOP_K, F_COUNT
};

static const char *const codec__names[F_COUNT] = {
    "x", "memory", "num_heads", "num_kv_heads", "w_q", "w_k", "w_v", "w_o",
    "b_q", "b_k", "b_v", "b_o", "mask", "key_padding_mask", "scale",
    "return_weights", "encoding", "tokens", "memory_tokens", "analysis",
    "top_k"};

static void codec__fields_free(codec__fields *f)
{
    codec_array_clear(&f->x);
    codec_array_clear(&f->memory);
    codec_array_clear(&f->w_q);
    codec_array_clear(&f->w_k);
    codec_array_clear(&f->w_v);
    codec_array_clear(&f->w_o);
    codec_array_clear(&f->b_q);
    codec_array_clear(&f->b_k);
    codec_array_clear(&f->b_v);
    codec_array_clear(&f->b_o);
    codec_array_clear(&f->kpm);
}

/* Copies request text into a message safely: printable ASCII, at most 40
 * characters, anything else as '?'. */
static void codec__quote(const char *s, size_t len, char *out, size_t cap)
{
    size_t i, n = 0;
    for (i = 0; i < len && n + 4 < cap && i < 40; i++) {
        unsigned char c = (unsigned char)s[i];
        out[n++] = (c >= 0x20 && c < 0x7F && c != '"') ? (char)c : '?';
    }
    if (i < len && n + 4 < cap) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

/* An enum string: *out is the index of the value in names[0..count). */
static int codec__enum(codec_reader *r, const char *name,
                       const char *const *names, int count, int *out,
                       codec_error *err)
{
    const char *s;
    char *unesc = NULL;
    size_t len;
    int esc, i;
    char ptr[64], q[64], expect[128];
    size_t n = 0;

    snprintf(ptr, sizeof ptr, "/%s", name);
    for (i = 0; i < count; i++)
        n += (size_t)snprintf(expect + n, sizeof expect - n, "%s\"%s\"",
                              i == 0 ? "" : i + 1 == count ? " or " : ", ",
                              names[i]);
    if (r->p >= r->end || *r->p != '"') {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected %s, found %s", ptr, expect,
                        codec_json_kind(r));
        return -1;
    }
    if (codec_json_string(r, &s, &len, &esc, err) != 0)
        return -1;
    if (esc) {
        /* "caus\u0061l" is "causal" */
        unesc = codec_json_unescape(s, len, &len);
        if (unesc == NULL) {
            codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                            "out of memory while parsing the request");
            return -1;
        }
        s = unesc;
    }
    for (i = 0; i < count; i++) {
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) {
            free(unesc);
            *out = i;
            return 0;
        }
    }
    codec__quote(s, len, q, sizeof q);
    free(unesc);
    codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                    "%s: expected %s, found \"%s\"", ptr, expect, q);
    return -1;
}

/* Counts above this are read as this (every limit is far below it). */
#define CODEC__COUNT_MAX ((size_t)1000000000000000ULL)

/* An integer >= 1 (a JSON number with an integral value: 8 or 8.0). */
static int codec__count(codec_reader *r, const char *name, size_t *out,
                        codec_error *err)
{
    char ptr[64];
    double d;

    snprintf(ptr, sizeof ptr, "/%s", name);
    if (r->p >= r->end || !(*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected an integer >= 1, found %s", ptr,
                        codec_json_kind(r));
        return -1;
    }
    if (codec_json_number_d(r, &d, err) != 0)
        return -1;
    if (!(d >= 1) || d != floor(d) || !isfinite(d)) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected an integer >= 1, found %.17g", ptr, d);
        return -1;
    }
    /* larger values are refused by the limits with a 413, which says
     * "at least" for a clamped one */
    *out = d > (double)CODEC__COUNT_MAX ? CODEC__COUNT_MAX : (size_t)d;
    return 0;
}

static int codec__scale(codec_reader *r, double *out, codec_error *err)
{
    float v;
    int finite;

    if (r->p >= r->end || !(*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/scale",
                        "/scale: expected a number > 0, found %s",
                        codec_json_kind(r));
        return -1;
    }
    if (codec_json_number(r, &v, &finite, err) != 0)
        return -1;
    if (!finite || !(v > 0.0f)) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/scale",
                        "/scale: expected a number > 0 that is finite in "
                        "float32, found %s",
                        !finite ? "one out of range" : "one <= 0 (or one "
                                                       "that rounds to 0)");
        return -1;
    }
    *out = v;
    return 0;
}

/* A malloc'd NUL-terminated copy of s[0..len); NULL when out of memory. */
static char *codec__strndup(const char *s, size_t len)
{
    char *d = malloc(len + 1);

    if (d != NULL) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

/* tokens / memory_tokens: validated and kept as text. */
static int codec__labels(codec_reader *r, const char *name,
                         codec__label_text *out, codec_error *err)
{
    const char *begin = r->p;
    char ptr[64];

    if (codec_json_skip(r, err) != 0)
        return -1;
    snprintf(ptr, sizeof ptr, "/%s", name);
    if (*begin != '[') {
        codec_reader at = *r;
        at.p = begin;
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected an array of strings, found %s", ptr,
                        codec_json_kind(&at));
        return -1;
    }
    out->text = begin;
    out->len = (size_t)(r->p - begin);
    return 0;
}

/* Parses the value of field `id` at r->p into f. */
static int codec__field(codec_reader *r, int id, codec__fields *f,
                        codec_error *err)
{
    static const char *const mask_names[] = {"none", "causal"};
    static const char *const weight_names[] = {"none", "per_head", "mean"};
    static const char *const enc_names[] = {"json", "base64"};
    int v;

    switch (id) {
    case F_X:
        return codec_array_parse(r, "/x", "[n][d_model] or [B][n][d_model]",
                                 CODEC_LEAF_F32, 2, 3, &f->x, err);
    case F_MEMORY:
        return codec_array_parse(r, "/memory", "[m][d_mem] or [B][m][d_mem]",
                                 CODEC_LEAF_F32, 2, 3, &f->memory, err);
    case F_NUM_HEADS:
        f->has_h = 1;
        return codec__count(r, "num_heads", &f->h, err);
    case F_NUM_KV_HEADS:
        f->has_g = 1;
        return codec__count(r, "num_kv_heads", &f->g, err);
    case F_W_Q:
        return codec_array_parse(r, "/w_q", "[d_model][h*d_k] or "
                                 "[h][d_model][d_k]", CODEC_LEAF_F32, 2, 3,
                                 &f->w_q, err);
    case F_W_K:
        return codec_array_parse(r, "/w_k", "[d_mem][g*d_k] or "
                                 "[g][d_mem][d_k]", CODEC_LEAF_F32, 2, 3,
                                 &f->w_k, err);
    case F_W_V:
        return codec_array_parse(r, "/w_v", "[d_mem][g*d_v] or "
                                 "[g][d_mem][d_v]", CODEC_LEAF_F32, 2, 3,
                                 &f->w_v, err);
    case F_W_O:
        return codec_array_parse(r, "/w_o", "[h*d_v][d_out]", CODEC_LEAF_F32,
                                 2, 2, &f->w_o, err);
    case F_B_Q:
        return codec_array_parse(r, "/b_q", "[h*d_k]", CODEC_LEAF_F32, 1, 1,
                                 &f->b_q, err);
    case F_B_K:
        return codec_array_parse(r, "/b_k", "[g*d_k]", CODEC_LEAF_F32, 1, 1,
                                 &f->b_k, err);
    case F_B_V:
        return codec_array_parse(r, "/b_v", "[g*d_v]", CODEC_LEAF_F32, 1, 1,
                                 &f->b_v, err);
    case F_B_O:
        return codec_array_parse(r, "/b_o", "[d_out]", CODEC_LEAF_F32, 1, 1,
                                 &f->b_o, err);
    case F_KPM:
        return codec_array_parse(r, "/key_padding_mask", "[m] or [B][m]",
                                 CODEC_LEAF_BOOL, 1, 2, &f->kpm, err);
    case F_MASK:
        if (codec__enum(r, "mask", mask_names, 2, &v, err) != 0)
            return -1;
        f->mask = v == 1 ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE;
        return 0;
    case F_SCALE:
        f->has_scale = 1;
        return codec__scale(r, &f->scale, err);
    case F_RETURN_WEIGHTS:
        if (codec__enum(r, "return_weights", weight_names, 3, &v, err) != 0)
            return -1;
        f->weights = v == 0 ? ATTN_WEIGHTS_NONE
                     : v == 1 ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_MEAN;
        return 0;
    case F_ENCODING:
        if (codec__enum(r, "encoding", enc_names, 2, &v, err) != 0)
            return -1;
        f->base64 = v == 1;
        return 0;
    case F_ANALYSIS:
        if (r->p < r->end && (*r->p == 't' || *r->p == 'f')) {
            f->analysis = *r->p == 't';
            return codec_json_literal(r, f->analysis ? "true" : "false", err);
        }
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/analysis",
                        "/analysis: expected true or false, found %s",
                        codec_json_kind(r));
        return -1;
    case F_TOP_K:
        return codec__count(r, "top_k", &f->top_k, err);
    case F_TOKENS:
        return codec__labels(r, "tokens", &f->tokens, err);
    case F_MEMORY_TOKENS:
        return codec__labels(r, "memory_tokens", &f->memory_tokens, err);
    default:
        return codec_json_skip(r, err);
    }
}

/* Copies e into err unless err already holds one (first error wins). */
static void codec__error_copy(codec_error *err, const codec_error *e)
{
    if (err->message[0] == '\0')
        *err = *e;
}

/* Reads the top-level object into f. Returns 0, or -1 with err filled: a
 * syntax error anywhere wins over the first contract error. */
static int codec__object(codec_reader *r, codec__fields *f, codec_error *err)
{
    codec_error first = {0};
    int failed = 0, at_start = 1;

    codec_json_ws(r);
    if (r->p >= r->end) {
        codec_json_syntax(r, err, "empty body, expected a JSON object");
        return -1;
    }
    if (*r->p != '{') {
        codec_error tmp = {0};
        codec_reader at = *r;
        if (codec_json_skip(r, &tmp) != 0) {
            codec__error_copy(err, &tmp);
            return -1;
        }
        codec_json_ws(r);
        if (r->p < r->end) {
            codec_json_syntax(r, err, "unexpected text after the JSON value");
            return -1;
        }
        codec_error_set(err, ERRORS_INVALID_REQUEST, "",
                        "the body must be a JSON object, found %s",
                        codec_json_kind(&at));
        return -1;
    }
    r->p++;
    r->depth = 1;
    for (;;) {
        const char *key, *vstart;
        size_t key_len;
        int esc, id = F_COUNT, i, rc;
        char *unesc = NULL;
        codec_error e = {0};

        rc = codec_json_member(r, &at_start, &key, &key_len, &esc, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            break;
        if (esc) {
            unesc = codec_json_unescape(key, key_len, &key_len);
            if (unesc == NULL) {
                codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                                "out of memory while parsing the request");
                return -1;
            }
            key = unesc;
        }
        for (i = 0; i < F_COUNT; i++) {
            if (strlen(codec__names[i]) == key_len &&
                memcmp(codec__names[i], key, key_len) == 0) {
                id = i;
                break;
            }
        }
        free(unesc);
        vstart = r->p;
        if (failed || id == F_COUNT ||
            (r->p + 4 <= r->end && memcmp(r->p, "null", 4) == 0 &&
             id != F_X)) {
            /* skipped: unknown, null (absent), or after a contract error */
            if (codec_json_skip(r, err) != 0)
                return -1;
        } else if (f->seen & (1u << id)) {
            char ptr[64];
            snprintf(ptr, sizeof ptr, "/%s", codec__names[id]);
            codec_error_set(&first, ERRORS_INVALID_REQUEST, ptr,
                            "%s: the field is given twice", ptr);
            failed = 1;
            if (codec_json_skip(r, err) != 0)
                return -1;
        } else {
            f->seen |= 1u << id;
            if (codec__field(r, id, f, &e) != 0) {
                if (e.kind != ERRORS_INVALID_REQUEST) {
                    codec__error_copy(err, &e);
                    return -1;
                }
                /* re-read the value for syntax only: a syntax error
                 * further on outranks this contract error */
                first = e;
                failed = 1;
                r->p = vstart;
                r->depth = 1;
                if (codec_json_skip(r, err) != 0)
                    return -1;
            }
        }
    }
    codec_json_ws(r);
    if (r->p < r->end) {
        codec_json_syntax(r, err, "unexpected text after the JSON object");
        return -1;
    }
    if (failed) {
        codec__error_copy(err, &first);
        return -1;
    }
    return 0;
}

/* -- cross-checks ----------------------------------------------------------- */

/* Checks that dimension k of field a (pointer ptr) equals want. */
static int codec__dim(const codec_array *a, const char *ptr, int k,
                      size_t want, const char *want_doc, const char *what,
                      codec_error *err)
{
    char p[300];
    if (a->shape[k] == want)
        return 0;
    codec_array_dim_ptr(a, ptr, k, p, sizeof p);
    codec_error_set(err, ERRORS_INVALID_REQUEST, p,
                    "%s: %s is %zu, expected %s = %zu", ptr, what,
                    a->shape[k], want_doc, want);
    return -1;
}

/* Checks that dimension k of a is a multiple of `per` and returns the
 * quotient in *out. */
static int codec__split(const codec_array *a, const char *ptr, int k,
                        size_t per, const char *per_doc, const char *what,
                        size_t *out, codec_error *err)
{
    char p[300];
    if (a->shape[k] % per == 0) {
        *out = a->shape[k] / per;
        return 0;
    }
    codec_array_dim_ptr(a, ptr, k, p, sizeof p);
    codec_error_set(err, ERRORS_INVALID_REQUEST, p,
                    "%s: %s is %zu, expected a multiple of %s = %zu", ptr,
                    what, a->shape[k], per_doc, per);
    return -1;
}

static int codec__too_large(codec_error *err, const char *what, size_t value,
                            const char *flag, const char *env, uint64_t limit)
{
    codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                    "%s is %s%zu; the limit %s (%s) is %llu", what,
                    value >= CODEC__COUNT_MAX ? "at least " : "", value, flag,
                    env, (unsigned long long)limit);
    return -1;
}

/* Checks label arrays: [count] strings, or [B][count] with a batched x. */
/* Walks the elements of the array at r->p (validated JSON), calling
 * visit(ctx, i, r) with r->p at element i; visit consumes the element.
 * Returns the element count, or -1 when visit does. */
static long codec__elements(codec_reader *r,
                            int (*visit)(void *ctx, size_t i, codec_reader *r),
                            void *ctx)
{
    size_t i = 0;
    codec_error ignored = {0};

    r->p++; /* '[' */
    codec_json_ws(r);
    if (*r->p == ']') {
        r->p++;
        return 0;
    }
    for (;;) {
        codec_json_ws(r);
        if (visit ? visit(ctx, i, r) != 0 : codec_json_skip(r, &ignored) != 0)
            return -1;
        i++;
        codec_json_ws(r);
        if (*r->p++ == ']')
            return (long)i;
    }
}

typedef struct codec__label_check {
    const char *name;
    size_t row;      /* the row of a nested array, or (size_t)-1 */
    size_t count;    /* labels a row must hold */
    const char *count_doc;
    codec_error *err;
} codec__label_check;

/* Element i of a row of labels: a string. */
static int codec__label_string(void *ctx, size_t i, codec_reader *r)
{
    codec__label_check *c = ctx;
    codec_error ignored = {0};
    char ptr[96];

    if (*r->p != '"') {
        if (c->row == (size_t)-1)
            snprintf(ptr, sizeof ptr, "/%s/%zu", c->name, i);
        else
            snprintf(ptr, sizeof ptr, "/%s/%zu/%zu", c->name, c->row, i);
        codec_error_set(c->err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected a string", ptr);
        return -1;
    }
    return codec_json_skip(r, &ignored);
}

/* Row i of [B][count] labels: an array of count strings. */
static int codec__label_row(void *ctx, size_t i, codec_reader *r)
{
    codec__label_check *c = ctx;
    codec_reader counter = *r;
    char ptr[96];
    long n;

    snprintf(ptr, sizeof ptr, "/%s/%zu", c->name, i);
    if (*r->p != '[') {
        codec_error_set(c->err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected an array of strings", ptr);
        return -1;
    }
    n = codec__elements(&counter, NULL, NULL);
    if (n != (long)c->count) {
        codec_error_set(c->err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: %ld labels, expected %s = %zu", ptr, n,
                        c->count_doc, c->count);
        return -1;
    }
    c->row = i;
    return codec__elements(r, codec__label_string, c) < 0 ? -1 : 0;
}

static int codec__check_labels(const codec__label_text *t, const char *name,
                               size_t B, int batched, size_t count,
                               const char *count_doc, codec_error *err)
{
    codec__label_check c = {name, (size_t)-1, count, count_doc, err};
    codec_reader r;
    char ptr[96];
    long rows;
    int nested;

    if (t->text == NULL)
        return 0;
    r.start = r.p = t->text;
    r.end = t->text + t->len;
    r.depth = 0;
    rows = codec__elements(&r, NULL, NULL);
    r.p = t->text + 1;
    codec_json_ws(&r);
    nested = rows > 0 && *r.p == '[';
    r.p = t->text;
    snprintf(ptr, sizeof ptr, "/%s", name);
    if (!nested) {
        if (rows != (long)count) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                            "%s: %ld labels, expected %s = %zu (or [B][%s])",
                            ptr, rows, count_doc, count, count_doc);
            return -1;
        }
        return codec__elements(&r, codec__label_string, &c) < 0 ? -1 : 0;
    }
    if (!batched) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected [%s] strings for a 2-D x ([B][%s] goes "
                        "with a batched x), found nested arrays", ptr,
                        count_doc, count_doc);
        return -1;
    }
    if (rows != (long)B) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: %ld rows of labels, expected B = %zu", ptr, rows,
                        B);
        return -1;
    }
    return codec__elements(&r, codec__label_row, &c) < 0 ? -1 : 0;
}

/* Derives the dimensions from the shapes and checks them against each other.
 * Fills d; returns 0 or -1 with err filled. */
static int codec__dims(codec__fields *f, attn_dims *d, codec_error *err)
{
    const codec_array *x = &f->x;
    int b3 = x->rank == 3;

    if (x->data == NULL) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/x",
                        "/x: missing required field ([n][d_model] or "
                        "[B][n][d_model])");
        return -1;
    }
    memset(d, 0, sizeof *d);
    d->B = b3 ? x->shape[0] : 1;
    d->n = x->shape[b3];
    d->d_model = x->shape[b3 + 1];
    if (f->memory.data != NULL) {
        const codec_array *mem = &f->memory;
        if (mem->rank != x->rank) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, "/memory",
                            "/memory: expected %s like x, found a rank-%d "
                            "array", b3 ? "[B][m][d_mem]" : "[m][d_mem]",
                            mem->rank);
            return -1;
        }
        if (b3 && codec__dim(mem, "/memory", 0, d->B, "B", "the batch size",
                             err) != 0)
            return -1;
        d->m = mem->shape[b3];
        d->d_mem = mem->shape[b3 + 1];
    } else {
        d->m = d->n;
        d->d_mem = d->d_model;
    }
    d->h = f->has_h ? f->h : 1;
    d->g = f->has_g ? f->g : d->h;
    if (d->g > d->h) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/num_kv_heads",
                        "/num_kv_heads: expected 1 <= g <= h = %zu, found "
                        "g = %zu", d->h, d->g);
        return -1;
    }
    if (d->h % d->g != 0) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/num_kv_heads",
                        "/num_kv_heads: g = %zu must divide num_heads "
                        "h = %zu", d->g, d->h);
        return -1;
    }

    /* w_q fixes d_k */
    if (f->w_q.data == NULL) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/w_q",
                        "/w_q: missing required field ([d_model][h*d_k] or "
                        "[h][d_model][d_k])");
        return -1;
    }
    if (f->w_q.rank == 2) {
        if (codec__dim(&f->w_q, "/w_q", 0, d->d_model, "d_model (the width "
                       "of x)", "the number of rows", err) ||
            codec__split(&f->w_q, "/w_q", 1, d->h, "num_heads",
                         "the row width (h*d_k)", &d->d_k, err))
            return -1;
    } else {
        if (codec__dim(&f->w_q, "/w_q", 0, d->h, "num_heads",
                       "the number of heads", err) ||
            codec__dim(&f->w_q, "/w_q", 1, d->d_model, "d_model (the width "
                       "of x)", "the number of rows", err))
            return -1;
        d->d_k = f->w_q.shape[2];
    }

    if (f->w_k.data == NULL) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/w_k",
                        "/w_k: missing required field ([d_mem][g*d_k] or "
                        "[g][d_mem][d_k])");
        return -1;
    }
    if (f->w_k.rank == 2) {
        if (codec__dim(&f->w_k, "/w_k", 0, d->d_mem, "d_mem (the width of "
                       "memory, or of x)", "the number of rows", err) ||
            codec__dim(&f->w_k, "/w_k", 1, d->g * d->d_k, "g*d_k",
                       "the row width", err))
            return -1;
    } else {
        if (codec__dim(&f->w_k, "/w_k", 0, d->g, "num_kv_heads",
                       "the number of heads", err) ||
            codec__dim(&f->w_k, "/w_k", 1, d->d_mem, "d_mem (the width of "
                       "memory, or of x)", "the number of rows", err) ||
            codec__dim(&f->w_k, "/w_k", 2, d->d_k, "d_k (from w_q)",
                       "the row width", err))
            return -1;
    }

    if (f->w_v.data == NULL) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/w_v",
                        "/w_v: missing required field ([d_mem][g*d_v] or "
                        "[g][d_mem][d_v])");
        return -1;
    }
    if (f->w_v.rank == 2) {
        if (codec__dim(&f->w_v, "/w_v", 0, d->d_mem, "d_mem (the width of "
                       "memory, or of x)", "the number of rows", err) ||
            codec__split(&f->w_v, "/w_v", 1, d->g, "num_kv_heads",
                         "the row width (g*d_v)", &d->d_v, err))
            return -1;
    } else {
        if (codec__dim(&f->w_v, "/w_v", 0, d->g, "num_kv_heads",
                       "the number of heads", err) ||
            codec__dim(&f->w_v, "/w_v", 1, d->d_mem, "d_mem (the width of "
                       "memory, or of x)", "the number of rows", err))
            return -1;
        d->d_v = f->w_v.shape[2];
    }

    if (f->w_o.data != NULL) {
        if (codec__dim(&f->w_o, "/w_o", 0, d->h * d->d_v, "h*d_v",
                       "the number of rows", err))
            return -1;
        d->d_out = f->w_o.shape[1];
    } else {
        d->d_out = d->h * d->d_v;
    }

    if ((f->b_q.data && codec__dim(&f->b_q, "/b_q", 0, d->h * d->d_k, "h*d_k",
                                   "the length", err)) ||
        (f->b_k.data && codec__dim(&f->b_k, "/b_k", 0, d->g * d->d_k, "g*d_k",
                                   "the length", err)) ||
        (f->b_v.data && codec__dim(&f->b_v, "/b_v", 0, d->g * d->d_v, "g*d_v",
                                   "the length", err)) ||
        (f->b_o.data && codec__dim(&f->b_o, "/b_o", 0, d->d_out, "d_out",
                                   "the length", err)))
        return -1;

    if (f->kpm.data != NULL) {
        if (f->kpm.rank == 2 && !b3) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, "/key_padding_mask",
                            "/key_padding_mask: expected [m] for a 2-D x "
                            "([B][m] goes with a batched x), found a rank-2 "
                            "array");
            return -1;
        }
        if (f->kpm.rank == 1) {
            if (codec__dim(&f->kpm, "/key_padding_mask", 0, d->m, "m (keys)",
                           "the length", err))
                return -1;
        } else if (codec__dim(&f->kpm, "/key_padding_mask", 0, d->B,
                              "B (the batch size)", "the number of rows",
                              err) ||
                   codec__dim(&f->kpm, "/key_padding_mask", 1, d->m,
                              "m (keys)", "the row length", err)) {
            return -1;
        }
    }
    if (f->top_k > d->m) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/top_k",
                        "/top_k: expected 1 <= k <= m = %zu (keys), found "
                        "%zu", d->m, f->top_k);
        return -1;
    }
    if (f->top_k > 0 && f->weights == ATTN_WEIGHTS_NONE) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/top_k",
                        "/top_k: selects weights to return, but "
                        "return_weights is \"none\"; expected \"per_head\" "
                        "or \"mean\"");
        return -1;
    }
    if (codec__check_labels(&f->tokens, "tokens", d->B, b3, d->n, "n", err) ||
        codec__check_labels(&f->memory_tokens, "memory_tokens", d->B, b3,
                            d->m, "m", err))
        return -1;
    return 0;
}

/* The limits, cheapest first; every product is overflow-checked. */
static int codec__limits(const attn_params *p, size_t top_k, int analysis,
                         const limits_config *lim, uint64_t *params,
                         uint64_t *flops, codec_error *err)
{
    const attn_dims *d = &p->dims;
    const struct {
        const char *name;
        size_t v;
    } dims[] = {{"n", d->n},         {"m", d->m},     {"d_model", d->d_model},
                {"d_mem", d->d_mem}, {"d_k", d->d_k}, {"d_v", d->d_v},
                {"d_out", d->d_out}};
    size_t i, maps = 0, outs = 0;
    char what[64];
    int rc;

    for (i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].v > lim->max_dim) {
            snprintf(what, sizeof what, "the dimension %s", dims[i].name);
            return codec__too_large(err, what, dims[i].v, "--max-dim",
                                    "ATTND_MAX_DIM", lim->max_dim);
        }
    }
    if (d->B > lim->max_batch)
        return codec__too_large(err, "the batch size B", d->B, "--max-batch",
                                "ATTND_MAX_BATCH", lim->max_batch);
    if (d->h > lim->max_heads)
        return codec__too_large(err, "num_heads", d->h, "--max-heads",
                                "ATTND_MAX_HEADS", lim->max_heads);
    if (p->weights != ATTN_WEIGHTS_NONE) {
        /* with top_k each row returns k (index, weight) pairs, 2k values */
        int ovf = __builtin_mul_overflow(d->B, d->n, &maps) ||
                  __builtin_mul_overflow(maps, top_k ? 2 * top_k : d->m,
                                         &maps) ||
                  (p->weights == ATTN_WEIGHTS_PER_HEAD &&
                   __builtin_mul_overflow(maps, d->h, &maps));
        if (ovf || maps > lim->max_map_elems) {
            if (ovf)
                maps = SIZE_MAX;
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "attention maps would hold %s%zu values; the "
                            "limit --max-map-elems (ATTND_MAX_MAP_ELEMS) is "
                            "%zu", ovf ? "more than " : "", maps,
                            lim->max_map_elems);
            return -1;
        }
    }
    /* the analysis returns [B][h][h] similarities, bounded alike */
    if (analysis) {
        size_t sim;
        if (__builtin_mul_overflow(d->B, d->h, &sim) ||
            __builtin_mul_overflow(sim, d->h, &sim) ||
            sim > lim->max_map_elems) {
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the head similarity matrices would hold %zu x "
                            "%zu x %zu values; the limit --max-map-elems "
                            "(ATTND_MAX_MAP_ELEMS) is %zu", d->B, d->h, d->h,
                            lim->max_map_elems);
            return -1;
        }
    }
    /* The output is bounded by the same limit: a small body with a wide
     * w_o could otherwise ask for gigabytes of response. */
    if (__builtin_mul_overflow(d->B, d->n, &outs) ||
        __builtin_mul_overflow(outs, d->d_out, &outs) ||
        outs > lim->max_map_elems) {
        codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                        "the output would hold %zu x %zu x %zu values; the "
                        "limit --max-map-elems (ATTND_MAX_MAP_ELEMS), which "
                        "also bounds the output, is %zu", d->B, d->n,
                        d->d_out, lim->max_map_elems);
        return -1;
    }
    rc = attn_flops(p, flops);
    if (rc == ATTN_EOVERFLOW || (rc == ATTN_OK && *flops > lim->max_flops)) {
        if (rc == ATTN_OK)
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the request needs %llu flops; the limit "
                            "--max-flops (ATTND_MAX_FLOPS) is %llu",
                            (unsigned long long)*flops,
                            (unsigned long long)lim->max_flops);
        else
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the request's flop count overflows 64 bits; "
                            "the limit --max-flops (ATTND_MAX_FLOPS) is %llu",
                            (unsigned long long)lim->max_flops);
        return -1;
    }
    if (rc == ATTN_OK)
        rc = attn_param_count(p, params);
    if (rc != ATTN_OK) {
        codec_error_set(err, errors_from_attn(rc), NULL,
                        "the library refused the request: %s",
                        attn_strerror(rc));
        return -1;
    }
    return 0;
}

/* [k][rows][d] (one matrix per head) -> [rows][k*d] (heads side by side).
 * Returns a new buffer or NULL when out of memory. */
static float *codec__side_by_side(const float *in, size_t k, size_t rows,
                                  size_t d)
{
    float *out = malloc(k * rows * d * sizeof(float));
    size_t i, r;

    if (out == NULL)
        return NULL;
    for (i = 0; i < k; i++)
        for (r = 0; r < rows; r++)
            memcpy(out + r * k * d + i * d, in + (i * rows + r) * d,
                   d * sizeof(float));
    return out;
}

/* Moves a's buffer to *dst; a 3-D weight (`weight` set) is converted to the
 * side-by-side layout, while a 3-D x or memory is already [B][rows][d].
 * Returns 0 or -1 (out of memory). */
static int codec__take(codec_array *a, float **dst, int weight)
{
    if (a->data == NULL) {
        *dst = NULL;
        return 0;
    }
    if (weight && a->rank == 3) {
        float *t = codec__side_by_side(a->data, a->shape[0], a->shape[1],
                                       a->shape[2]);
        if (t == NULL)
            return -1;
        codec_array_clear(a);
        *dst = t;
        return 0;
    }
    *dst = a->data;
    a->data = NULL;
    return 0;
}

int codec_parse(const char *body, size_t len, const limits_config *lim,
                codec_request **out, codec_error *err)
{
    codec__fields f;
    codec_reader r;
    codec_request *req = NULL;
    attn_params *p;
    int rc;

    *out = NULL;
    memset(&f, 0, sizeof f);
    f.weights = ATTN_WEIGHTS_PER_HEAD;
    if (len > lim->max_body_bytes) {
        codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                        "the body has %zu bytes; the limit --max-body-bytes "
                        "(ATTND_MAX_BODY_BYTES) is %zu", len,
                        lim->max_body_bytes);
        return -1;
    }
    r.start = r.p = body;
    r.end = body + len;
    r.depth = 0;
    if (codec__object(&r, &f, err) != 0)
        goto fail;

    req = calloc(1, sizeof *req);
    if (req == NULL) {
        codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                        "out of memory while parsing the request");
        goto fail;
    }
    p = &req->p;
    /* before the shapes are checked against a huge h */
    if ((f.has_h && f.h > lim->max_heads) ||
        (f.has_g && f.g > lim->max_heads)) {
        codec__too_large(err, f.has_h && f.h > lim->max_heads
                                  ? "num_heads" : "num_kv_heads",
                         f.has_h && f.h > lim->max_heads ? f.h : f.g,
                         "--max-heads", "ATTND_MAX_HEADS", lim->max_heads);
        goto fail;
    }
    if (codec__dims(&f, &p->dims, err) != 0)
        goto fail;
    p->mask = f.mask;
    p->weights = f.weights;
    p->scale = f.has_scale ? (float)f.scale : 0.0f;
    /* pointers for the limit checks; the real buffers are set below */
    p->x = f.x.data;
    p->memory = f.memory.data;
    p->w_q = f.w_q.data;
    p->w_k = f.w_k.data;
    p->w_v = f.w_v.data;
    p->w_o = f.w_o.data;
    p->b_q = f.b_q.data;
    p->b_k = f.b_k.data;
    p->b_v = f.b_v.data;
    p->b_o = f.b_o.data;
    if (codec__limits(p, f.top_k, f.analysis, lim, &req->params,
                      &req->flops, err) != 0)
        goto fail;
    req->analysis = f.analysis;
    req->top_k = f.top_k;
    req->batched = f.x.rank == 3; /* before the buffers move */

    if (codec__take(&f.x, &req->x, 0) ||
        codec__take(&f.memory, &req->memory, 0) ||
        codec__take(&f.w_q, &req->w_q, 1) || codec__take(&f.w_k, &req->w_k, 1) ||
        codec__take(&f.w_v, &req->w_v, 1) || codec__take(&f.w_o, &req->w_o, 0) ||
        codec__take(&f.b_q, &req->b_q, 0) || codec__take(&f.b_k, &req->b_k, 0) ||
        codec__take(&f.b_v, &req->b_v, 0) || codec__take(&f.b_o, &req->b_o, 0)) {
        codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                        "out of memory while parsing the request");
        goto fail;
    }
    if (f.kpm.data != NULL) {
        size_t B = p->dims.B, m = p->dims.m, b;
        req->key_padding = malloc(B * m);
        if (req->key_padding == NULL) {
            codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                            "out of memory while parsing the request");
            goto fail;
        }
        /* [m] is broadcast over the batch */
        for (b = 0; b < B; b++)
            memcpy(req->key_padding + b * m,
                   (const uint8_t *)f.kpm.data + (f.kpm.rank == 2 ? b * m : 0),
                   m);
    }
    if ((f.tokens.text != NULL &&
         (req->tokens_json = codec__strndup(f.tokens.text, f.tokens.len)) ==
             NULL) ||
        (f.memory_tokens.text != NULL &&
         (req->memory_tokens_json = codec__strndup(
              f.memory_tokens.text, f.memory_tokens.len)) == NULL)) {
        codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                        "out of memory while parsing the request");
        goto fail;
    }
    p->x = req->x;
    p->memory = req->memory;
    p->w_q = req->w_q;
    p->w_k = req->w_k;
    p->w_v = req->w_v;
    p->w_o = req->w_o;
    p->b_q = req->b_q;
    p->b_k = req->b_k;
    p->b_v = req->b_v;
    p->b_o = req->b_o;
    p->key_padding = req->key_padding;
    req->base64_out = f.base64;
    rc = attn_check(p);
    if (rc != ATTN_OK) {
        codec_error_set(err, errors_from_attn(rc), NULL,
                        "the library refused the request: %s",
                        attn_strerror(rc));
        goto fail;
    }
    codec__fields_free(&f);
    *out = req;
    return 0;
fail:
    codec__fields_free(&f);
    codec_request_free(req);
    return -1;
}

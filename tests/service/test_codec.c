/* test_codec.c: the JSON codec (codec.h): parse -> run -> write round trips
 * checked against the library's float64 reference, every error kind with its
 * code and JSON Pointer, the limits, and the float formatter.
 *
 * Tolerance for computed values: |got - ref| <= 1e-4 * (1 + |ref|) (the
 * contract's). Round trips of numbers through text are exact (bitwise). */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_analysis.h"
#include "attend/codec.h"
#include "attend/request.h"
#include "json/text.h"
#include "test_service.h"

#ifndef CODEC_FIXTURES
#define CODEC_FIXTURES "tests/fixtures/codec"
#endif

Suite *codec_suite(void);

/* -- helpers ------------------------------------------------------------------ */

/* Requests are written into the service's own text buffer (json/text.h);
 * an allocation failure there fails the test. */
typedef text_buf sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    text_vprintf(b, fmt, ap);
    va_end(ap);
    ck_assert(!text_failed(b));
}

/* [rows][cols] as nested arrays; %.9g reads back to the same float32. */
static void sb_matrix(sbuf *b, const float *v, size_t rows, size_t cols)
{
    size_t r, c;
    sb_printf(b, "[");
    for (r = 0; r < rows; r++) {
        sb_printf(b, "%s[", r ? "," : "");
        for (c = 0; c < cols; c++)
            sb_printf(b, "%s%.9g", c ? "," : "", (double)v[r * cols + c]);
        sb_printf(b, "]");
    }
    sb_printf(b, "]");
}

static void sb_vector(sbuf *b, const float *v, size_t n)
{
    size_t i;
    sb_printf(b, "[");
    for (i = 0; i < n; i++)
        sb_printf(b, "%s%.9g", i ? "," : "", (double)v[i]);
    sb_printf(b, "]");
}

/* Side-by-side [rows][k*d] written as one matrix per head [k][rows][d]. */
static void sb_heads(sbuf *b, const float *v, size_t rows, size_t k, size_t d)
{
    size_t i, r, c;
    sb_printf(b, "[");
    for (i = 0; i < k; i++) {
        sb_printf(b, "%s[", i ? "," : "");
        for (r = 0; r < rows; r++) {
            sb_printf(b, "%s[", r ? "," : "");
            for (c = 0; c < d; c++)
                sb_printf(b, "%s%.9g", c ? "," : "",
                          (double)v[r * k * d + i * d + c]);
            sb_printf(b, "]");
        }
        sb_printf(b, "]");
    }
    sb_printf(b, "]");
}

/* A tensor object {"dtype","shape","data"}. */
static void sb_tensor(sbuf *b, const float *v, const size_t *shape, int rank)
{
    size_t count = 1, len;
    char *text;
    int i;

    sb_printf(b, "{\"dtype\":\"float32\",\"shape\":[");
    for (i = 0; i < rank; i++) {
        sb_printf(b, "%s%zu", i ? "," : "", shape[i]);
        count *= shape[i];
    }
    text = malloc((count * 4 + 2) / 3 * 4 + 1);
    ck_assert_ptr_nonnull(text);
    len = codec_base64_f32(v, count * 4, 0, count * 4, text);
    text[len] = '\0';
    sb_printf(b, "],\"data\":\"%s\"}", text);
    free(text);
}

#define RNG_SEED 12345u
static uint32_t rng_state = RNG_SEED;

/* Each test of the suite starts from the same generator state whether it
 * runs in a child of its own (check's fork) or after the others in one
 * process (CK_FORK=no, as the ASan run does). */
static void rng_reset(void)
{
    rng_state = RNG_SEED;
}

static float frand(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static float *frand_n(size_t n)
{
    float *v = malloc((n ? n : 1) * sizeof(float));
    size_t i;
    ck_assert_ptr_nonnull(v);
    for (i = 0; i < n; i++)
        v[i] = frand();
    return v;
}

static limits_config lim_default(void)
{
    limits_config l;
    limits_defaults(&l);
    return l;
}

static codec_request *parse_ok_lim(const char *json, const limits_config *l)
{
    codec_request *req = NULL;
    codec_error err = {0};
    int rc = codec_parse(json, strlen(json), l, &req, &err);
    ck_assert_msg(rc == 0, "parse failed: %s (%s) field '%s'", err.message,
                  errors_code(err.kind), err.field);
    ck_assert_ptr_nonnull(req);
    return req;
}

static codec_request *parse_ok(const char *json)
{
    limits_config l = lim_default();
    return parse_ok_lim(json, &l);
}

/* Parses json expecting failure of `kind` at `field`, with `part` in the
 * message (NULL: not checked). */
static void expect_err_lim(const char *json, size_t len,
                           const limits_config *l, errors_kind kind,
                           const char *field, const char *part)
{
    codec_request *req = (codec_request *)1;
    codec_error err = {0};
    int rc = codec_parse(json, len, l, &req, &err);

    ck_assert_msg(rc == -1, "parse of %.80s should fail", json);
    ck_assert_ptr_null(req);
    ck_assert_msg(err.kind == kind, "%.80s: code %s, expected %s (%s)", json,
                  errors_code(err.kind), errors_code(kind), err.message);
    ck_assert_msg(strcmp(err.field, field) == 0,
                  "%.80s: field '%s', expected '%s' (%s)", json, err.field,
                  field, err.message);
    if (part != NULL)
        ck_assert_msg(strstr(err.message, part) != NULL,
                      "%.80s: message '%s' lacks '%s'", json, err.message,
                      part);
}

static void expect_err(const char *json, errors_kind kind, const char *field,
                       const char *part)
{
    limits_config l = lim_default();
    expect_err_lim(json, strlen(json), &l, kind, field, part);
}

/* Reads a writer to the end in chunks of varied sizes (1, 7, 4096, ...), so
 * chunk boundaries fall everywhere. */
static char *drain_writer(codec_writer *w, size_t *len)
{
    static const size_t caps[] = {1, 7, 4096, 3, 65536, 13};
    size_t n = 0, cap = 1 << 16, got;
    char *buf = malloc(cap + 1);
    int i = 0;

    ck_assert_ptr_nonnull(buf);
    for (;;) {
        size_t want = caps[i++ % 6];
        if (n + want + 1 > cap) {
            cap = (n + want + 1) * 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
        got = codec_writer_read(w, buf + n, want);
        ck_assert_uint_le(got, want);
        if (got == 0)
            break;
        n += got;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int close_enough(double got, double ref)
{
    return fabs(got - ref) <= 1e-4 * (1.0 + fabs(ref));
}

/* Flattens a nested JSON array of numbers of the given shape into out
 * (count values); fails the test on any shape difference. */
static void flatten(const json_t *a, const size_t *shape, int rank,
                    float *out, size_t *pos)
{
    size_t i;
    ck_assert_msg(json_is_array(a), "expected an array");
    ck_assert_uint_eq(json_array_size(a), shape[0]);
    for (i = 0; i < shape[0]; i++) {
        const json_t *e = json_array_get(a, i);
        if (rank == 1) {
            ck_assert_msg(json_is_number(e), "expected a number");
            out[(*pos)++] = (float)json_number_value(e);
        } else {
            flatten(e, shape + 1, rank - 1, out, pos);
        }
    }
}

/* Decodes a response tensor object of the given shape into out. */
static void decode_tensor(const json_t *t, const size_t *shape, int rank,
                          float *out, size_t count)
{
    const json_t *js = json_object_get(t, "shape");
    const char *data = json_string_value(json_object_get(t, "data"));
    char req[256];
    sbuf b = TEXT_BUF_INIT;
    codec_reader r;
    codec_array a;
    codec_error err = {0};
    int i;

    ck_assert_str_eq(json_string_value(json_object_get(t, "dtype")),
                     "float32");
    ck_assert_uint_eq(json_array_size(js), (size_t)rank);
    for (i = 0; i < rank; i++)
        ck_assert_uint_eq(json_integer_value(json_array_get(js, (size_t)i)),
                          shape[i]);
    /* the request decoder reads the response text back */
    snprintf(req, sizeof req, "{\"dtype\":\"float32\",\"shape\":[%zu],"
             "\"data\":\"", count);
    sb_printf(&b, "%s%s\"}", req, data);
    codec_reader_init(&r, b.data, b.len, NULL);
    ck_assert_int_eq(codec_array_parse(&r, "/t", "[k]", CODEC_LEAF_F32, 1, 1,
                                       &a, &err), 0);
    ck_assert_uint_eq(a.count, count);
    memcpy(out, a.data, count * sizeof(float));
    codec_array_clear(&a);
    free(b.data);
}

/* A request to build, and what the round trip checks. */
typedef struct spec {
    size_t B, n, m, d_model, d_mem, h, g, d_k, d_v, d_out;
    int batched, cross, w3d, wo, bias, causal;
    int kpm;       /* 0 none, 1 broadcast [m], 2 per batch [B][m] */
    const char *weights; /* NULL: default per_head */
    int b64_in, b64_out;
    double scale;  /* 0: default */
    int tokens;    /* 1: [n] labels, 2: [B][n] labels */
    int analysis;  /* "analysis": true */
    size_t top_k;  /* "top_k": k (0: absent) */
} spec;

/* Emits a field as nested arrays or a tensor object. */
static void sb_field(sbuf *b, const spec *s, const char *name, const float *v,
                     const size_t *shape, int rank)
{
    sb_printf(b, ",\"%s\":", name);
    if (s->b64_in) {
        sb_tensor(b, v, shape, rank);
    } else if (rank == 1) {
        sb_vector(b, v, shape[0]);
    } else if (rank == 2) {
        sb_matrix(b, v, shape[0], shape[1]);
    } else {
        size_t i;
        sb_printf(b, "[");
        for (i = 0; i < shape[0]; i++) {
            sb_printf(b, "%s", i ? "," : "");
            sb_matrix(b, v + i * shape[1] * shape[2], shape[1], shape[2]);
        }
        sb_printf(b, "]");
    }
}

/* Emits a weight [rows][k*d] in the 2-D or the 3-D layout. */
static void sb_weight(sbuf *b, const spec *s, const char *name,
                      const float *v, size_t rows, size_t k, size_t d)
{
    if (!s->w3d) {
        size_t shape[2] = {rows, k * d};
        sb_field(b, s, name, v, shape, 2);
        return;
    }
    if (s->b64_in) {
        /* reorder to [k][rows][d] for the tensor */
        float *t = malloc(rows * k * d * sizeof(float));
        size_t i, r, shape[3] = {k, rows, d};
        ck_assert_ptr_nonnull(t);
        for (i = 0; i < k; i++)
            for (r = 0; r < rows; r++)
                memcpy(t + (i * rows + r) * d, v + r * k * d + i * d,
                       d * sizeof(float));
        sb_field(b, s, name, t, shape, 3);
        free(t);
        return;
    }
    sb_printf(b, ",\"%s\":", name);
    sb_heads(b, v, rows, k, d);
}

static char *build_request(const spec *s)
{
    sbuf b = TEXT_BUF_INIT;
    size_t B = s->B, mrows = s->cross ? s->m : s->n;
    size_t dmem = s->cross ? s->d_mem : s->d_model;
    float *x = frand_n(B * s->n * s->d_model);
    float *mem = frand_n(B * mrows * dmem);
    float *wq = frand_n(s->d_model * s->h * s->d_k);
    float *wk = frand_n(dmem * s->g * s->d_k);
    float *wv = frand_n(dmem * s->g * s->d_v);
    size_t d_out = s->wo ? s->d_out : s->h * s->d_v;
    float *wo = frand_n(s->h * s->d_v * d_out);
    float *bq = frand_n(s->h * s->d_k), *bk = frand_n(s->g * s->d_k);
    float *bv = frand_n(s->g * s->d_v), *bo = frand_n(d_out);
    size_t shape[3];
    size_t i, j;

    sb_printf(&b, "{\"num_heads\":%zu,\"num_kv_heads\":%zu", s->h, s->g);
    shape[0] = B;
    shape[1] = s->n;
    shape[2] = s->d_model;
    if (s->batched)
        sb_field(&b, s, "x", x, shape, 3);
    else
        sb_field(&b, s, "x", x, shape + 1, 2);
    if (s->cross) {
        shape[1] = mrows;
        shape[2] = dmem;
        if (s->batched)
            sb_field(&b, s, "memory", mem, shape, 3);
        else
            sb_field(&b, s, "memory", mem, shape + 1, 2);
    }
    sb_weight(&b, s, "w_q", wq, s->d_model, s->h, s->d_k);
    sb_weight(&b, s, "w_k", wk, dmem, s->g, s->d_k);
    sb_weight(&b, s, "w_v", wv, dmem, s->g, s->d_v);
    if (s->wo) {
        shape[0] = s->h * s->d_v;
        shape[1] = d_out;
        sb_field(&b, s, "w_o", wo, shape, 2);
    }
    if (s->bias) {
        shape[0] = s->h * s->d_k;
        sb_field(&b, s, "b_q", bq, shape, 1);
        shape[0] = s->g * s->d_k;
        sb_field(&b, s, "b_k", bk, shape, 1);
        shape[0] = s->g * s->d_v;
        sb_field(&b, s, "b_v", bv, shape, 1);
        shape[0] = d_out;
        sb_field(&b, s, "b_o", bo, shape, 1);
    }
    if (s->causal)
        sb_printf(&b, ",\"mask\":\"causal\"");
    if (s->kpm) {
        /* pad the last key (and, per batch, the last b keys) */
        sb_printf(&b, ",\"key_padding_mask\":");
        if (s->kpm == 1) {
            sb_printf(&b, "[");
            for (j = 0; j < mrows; j++)
                sb_printf(&b, "%s%s", j ? "," : "",
                          j + 1 == mrows ? "true" : "false");
            sb_printf(&b, "]");
        } else {
            sb_printf(&b, "[");
            for (i = 0; i < B; i++) {
                sb_printf(&b, "%s[", i ? "," : "");
                for (j = 0; j < mrows; j++)
                    sb_printf(&b, "%s%s", j ? "," : "",
                              j + i + 1 >= mrows && j > 0 ? "true" : "false");
                sb_printf(&b, "]");
            }
            sb_printf(&b, "]");
        }
    }
    if (s->scale > 0)
        sb_printf(&b, ",\"scale\":%.9g", s->scale);
    if (s->weights)
        sb_printf(&b, ",\"return_weights\":\"%s\"", s->weights);
    if (s->b64_out)
        sb_printf(&b, ",\"encoding\":\"base64\"");
    if (s->analysis)
        sb_printf(&b, ",\"analysis\":true");
    if (s->top_k)
        sb_printf(&b, ",\"top_k\":%zu", s->top_k);
    if (s->tokens == 1) {
        sb_printf(&b, ",\"tokens\":[");
        for (j = 0; j < s->n; j++)
            sb_printf(&b, "%s\"t%zu \\u00e9\\\"\"", j ? "," : "", j);
        sb_printf(&b, "]");
    } else if (s->tokens == 2) {
        sb_printf(&b, ",\"tokens\":[");
        for (i = 0; i < B; i++) {
            sb_printf(&b, "%s[", i ? "," : "");
            for (j = 0; j < s->n; j++)
                sb_printf(&b, "%s\"b%zu t%zu\"", j ? "," : "", i, j);
            sb_printf(&b, "]");
        }
        sb_printf(&b, "]");
    }
    if (s->cross) {
        sb_printf(&b, ",\"memory_tokens\":[");
        for (j = 0; j < mrows; j++)
            sb_printf(&b, "%s\"k%zu\"", j ? "," : "", j);
        sb_printf(&b, "]");
    }
    sb_printf(&b, "}");
    free(x);
    free(mem);
    free(wq);
    free(wk);
    free(wv);
    free(wo);
    free(bq);
    free(bk);
    free(bv);
    free(bo);
    return b.data;
}

/* The outcome of one round trip, for tests that look further. */
typedef struct trip {
    json_t *root;
    float *out, *ref_out, *att, *ref_att;
    size_t out_n, att_n;
    attn_params p;
} trip;

static void trip_free(trip *t)
{
    json_decref(t->root);
    free(t->out);
    free(t->ref_out);
    free(t->att);
    free(t->ref_att);
}

/* The figures attn_analyze_ref gives on the dense per-head reference weights
 * of req's params, kept for check_analysis_json. */
static attn_head_stats an_heads[256];
static double an_sim[4096];
static size_t an_skipped[16];

static void check_analysis(const spec *s, const codec_request *req)
{
    attn_params p = req->p;
    size_t B = p.dims.B, h = p.dims.h, n_w = B * h * p.dims.n * p.dims.m;
    float *out = malloc(p.dims.B * p.dims.n * p.dims.d_out * sizeof(float));
    float *w = malloc(n_w * sizeof(float));
    attn_extras ex;

    (void)s;
    ck_assert_uint_le(B * h, 256);
    ck_assert_uint_le(B * h * h, 4096);
    p.weights = ATTN_WEIGHTS_PER_HEAD;
    ck_assert_int_eq(attn_forward_ref(&p, out, w), 0);
    memset(&ex, 0, sizeof ex);
    ex.stats = 1;
    ex.heads = an_heads;
    ex.similarity = an_sim;
    ex.skipped_rows = an_skipped;
    ck_assert_int_eq(attn_analyze_ref(&p, w, &ex), 0);
    free(out);
    free(w);
}

static void check_figure(const json_t *o, const char *key, double ref)
{
    const json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_number(v), "analysis figure %s missing", key);
    ck_assert_msg(close_enough(json_number_value(v), ref),
                  "%s = %.9g, reference %.9g", key, json_number_value(v),
                  ref);
}

/* The response's "analysis" against the reference figures: an object for a
 * 2-D x, a list of them for a batched x. */
static void check_analysis_json(const spec *s, const json_t *an)
{
    size_t e, i, j;

    ck_assert_ptr_nonnull(an);
    if (s->batched) {
        ck_assert(json_is_array(an));
        ck_assert_uint_eq(json_array_size(an), s->B);
    } else {
        ck_assert(json_is_object(an));
    }
    for (e = 0; e < s->B; e++) {
        const json_t *el = s->batched ? json_array_get(an, e) : an;
        const json_t *heads = json_object_get(el, "heads");
        const json_t *sim = json_object_get(el, "similarity");
        ck_assert_uint_eq(json_array_size(heads), s->h);
        ck_assert_uint_eq(json_array_size(sim), s->h);
        ck_assert_int_eq(json_integer_value(json_object_get(el,
                                                            "skipped_rows")),
                         (json_int_t)an_skipped[e]);
        for (i = 0; i < s->h; i++) {
            const json_t *o = json_array_get(heads, i);
            const attn_head_stats *r = &an_heads[e * s->h + i];
            check_figure(o, "entropy", r->entropy);
            check_figure(o, "entropy_normalized", r->entropy_normalized);
            check_figure(o, "confidence", r->confidence);
            check_figure(o, "self", r->self);
            check_figure(o, "prev", r->prev);
            check_figure(o, "next", r->next);
            check_figure(o, "first", r->first);
            ck_assert_int_eq(json_integer_value(json_object_get(
                                 o, "dominant_offset")),
                             r->dominant_offset);
            ck_assert_str_eq(json_string_value(json_object_get(o, "pattern")),
                             attn_pattern_name((int)r->pattern));
            ck_assert_uint_eq(json_array_size(json_array_get(sim, i)), s->h);
            for (j = 0; j < s->h; j++)
                ck_assert(close_enough(
                    json_number_value(json_array_get(json_array_get(sim, i),
                                                     j)),
                    an_sim[(e * s->h + i) * s->h + j]));
        }
    }
}

/* Top-k pairs against the dense reference rows: each weight matches the
 * reference at its index, weights descend, and they are the k largest. */
static void check_top_k(const float *pairs, const float *ref, size_t rows,
                        size_t m, size_t k)
{
    size_t r, i, j;

    for (r = 0; r < rows; r++) {
        const float *row = ref + r * m;
        for (i = 0; i < k; i++) {
            float idx = pairs[(r * k + i) * 2], wt = pairs[(r * k + i) * 2 + 1];
            size_t above = 0;
            ck_assert_msg(idx >= 0 && idx < (float)m && idx == floorf(idx),
                          "row %zu pair %zu: index %g", r, i, (double)idx);
            ck_assert_msg(close_enough(wt, row[(size_t)idx]),
                          "row %zu: weight %.9g at key %g, reference %.9g", r,
                          (double)wt, (double)idx,
                          (double)row[(size_t)idx]);
            if (i > 0)
                ck_assert(wt <= pairs[(r * k + i - 1) * 2 + 1]);
            /* at most i reference weights clearly above the i-th pick */
            for (j = 0; j < m; j++)
                if (row[j] > wt + 1e-4f * (1.0f + wt))
                    above++;
            ck_assert_msg(above <= i, "row %zu: pick %zu (%.9g) is not "
                          "among the %zu largest", r, i, (double)wt, i + 1);
        }
    }
}

/* parse -> run -> write -> read back with jansson; checks shapes and meta
 * against s and every value against attn_forward_ref on the parsed params. */
static void round_trip(const spec *s, trip *t)
{
    char *json = build_request(s), *text;
    codec_request *req = parse_ok(json);
    codec_error err = {0};
    codec_writer *w;
    json_error_t je;
    const attn_dims *d = &req->p.dims;
    size_t d_out = s->wo ? s->d_out : s->h * s->d_v, shape[5], pos, i, len;
    const json_t *meta, *att;
    int rank, per_head;
    double secs = -1;

    memset(t, 0, sizeof *t);
    ck_assert_uint_eq(d->B, s->B);
    ck_assert_uint_eq(d->n, s->n);
    ck_assert_uint_eq(d->m, s->cross ? s->m : s->n);
    ck_assert_uint_eq(d->h, s->h);
    ck_assert_uint_eq(d->g, s->g);
    ck_assert_uint_eq(d->d_k, s->d_k);
    ck_assert_uint_eq(d->d_v, s->d_v);
    ck_assert_uint_eq(d->d_out, d_out);
    ck_assert_int_eq(codec_run(req, NULL, &err, &secs), 0);
    ck_assert(secs >= 0);

    /* the reference on the very params the codec built */
    t->p = req->p;
    t->out_n = req->output_elems;
    /* dense sizes even with top_k, which returns none */
    ck_assert_int_eq(attn_output_sizes(&req->p, NULL, &t->att_n), 0);
    ck_assert_uint_eq(req->weights_elems, s->top_k ? 0 : t->att_n);
    t->ref_out = malloc(t->out_n * sizeof(float));
    t->ref_att = malloc((t->att_n ? t->att_n : 1) * sizeof(float));
    ck_assert_int_eq(attn_forward_ref(&req->p, t->ref_out,
                                      t->att_n ? t->ref_att : NULL), 0);
    if (s->analysis)
        check_analysis(s, req);

    w = codec_writer_new(req);
    ck_assert_ptr_nonnull(w);
    text = drain_writer(w, &len);
    codec_writer_free(w);
    t->root = json_loadb(text, len, 0, &je);
    ck_assert_msg(t->root != NULL, "response is not JSON: %s at %d:%d",
                  je.text, je.line, je.column);

    /* output */
    rank = s->batched ? 3 : 2;
    shape[0] = s->B;
    shape[1] = s->n;
    shape[2] = d_out;
    t->out = malloc(t->out_n * sizeof(float));
    if (s->b64_out) {
        decode_tensor(json_object_get(t->root, "output"), shape + !s->batched,
                      rank, t->out, t->out_n);
    } else {
        pos = 0;
        flatten(json_object_get(t->root, "output"), shape + !s->batched, rank,
                t->out, &pos);
        ck_assert_uint_eq(pos, t->out_n);
    }
    for (i = 0; i < t->out_n; i++)
        ck_assert_msg(close_enough(t->out[i], t->ref_out[i]),
                      "output[%zu] = %.9g, reference %.9g", i,
                      (double)t->out[i], (double)t->ref_out[i]);

    /* attention */
    att = json_object_get(t->root, "attention");
    if (s->weights != NULL && strcmp(s->weights, "none") == 0) {
        ck_assert_ptr_null(att);
        ck_assert_uint_eq(t->att_n, 0);
    } else {
        per_head = s->weights == NULL || strcmp(s->weights, "per_head") == 0;
        shape[0] = s->B;
        shape[1] = s->h;
        shape[2] = s->n;
        shape[3] = s->cross ? s->m : s->n;
        rank = (per_head ? 3 : 2) + s->batched;
        if (!per_head) {
            shape[1] = s->n;
            shape[2] = shape[3];
        }
        if (s->top_k) {
            /* [..][k][2] (index, weight) pairs */
            size_t m = shape[rank - 1 + !s->batched], rows = t->att_n / m;
            size_t np = rows * s->top_k * 2;
            float *pairs = malloc(np * sizeof(float));
            shape[rank + !s->batched - 1] = s->top_k;
            shape[rank + !s->batched] = 2;
            if (s->b64_out) {
                decode_tensor(att, shape + !s->batched, rank + 1, pairs, np);
            } else {
                pos = 0;
                flatten(att, shape + !s->batched, rank + 1, pairs, &pos);
                ck_assert_uint_eq(pos, np);
            }
            check_top_k(pairs, t->ref_att, rows, m, s->top_k);
            free(pairs);
        } else {
            t->att = malloc(t->att_n * sizeof(float));
            if (s->b64_out) {
                decode_tensor(att, shape + !s->batched, rank, t->att,
                              t->att_n);
            } else {
                pos = 0;
                flatten(att, shape + !s->batched, rank, t->att, &pos);
                ck_assert_uint_eq(pos, t->att_n);
            }
            for (i = 0; i < t->att_n; i++)
                ck_assert_msg(close_enough(t->att[i], t->ref_att[i]),
                              "attention[%zu] = %.9g, reference %.9g", i,
                              (double)t->att[i], (double)t->ref_att[i]);
        }
    }
    if (s->analysis)
        check_analysis_json(s, json_object_get(t->root, "analysis"));
    else
        ck_assert_ptr_null(json_object_get(t->root, "analysis"));

    meta = json_object_get(t->root, "meta");
    ck_assert_ptr_nonnull(meta);
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "batch")),
                     (json_int_t)s->B);
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "n")),
                     (json_int_t)s->n);
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "m")),
                     (json_int_t)(s->cross ? s->m : s->n));
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "d_model")),
                     (json_int_t)s->d_model);
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "d_mem")),
                     (json_int_t)(s->cross ? s->d_mem : s->d_model));
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "num_heads")),
                     (json_int_t)s->h);
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "num_kv_heads")),
                     (json_int_t)s->g);
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "d_k")),
                     (json_int_t)s->d_k);
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "d_v")),
                     (json_int_t)s->d_v);
    ck_assert_int_eq(json_integer_value(json_object_get(meta, "d_out")),
                     (json_int_t)d_out);
    ck_assert_str_eq(json_string_value(json_object_get(meta, "mask")),
                     s->causal ? "causal" : "none");
    {
        /* params: every weight and bias value the request carried */
        size_t dmem = s->cross ? s->d_mem : s->d_model;
        json_int_t want = (json_int_t)(s->d_model * s->h * s->d_k +
                                       dmem * s->g * (s->d_k + s->d_v));
        if (s->wo)
            want += (json_int_t)(s->h * s->d_v * d_out);
        if (s->bias)
            want += (json_int_t)(s->h * s->d_k + s->g * (s->d_k + s->d_v) +
                                 d_out);
        ck_assert_int_eq(json_integer_value(json_object_get(meta, "params")),
                         want);
    }
    {
        uint64_t flops;
        ck_assert_int_eq(attn_flops(&t->p, &flops), 0);
        ck_assert_int_eq(json_integer_value(json_object_get(meta, "flops")),
                         (json_int_t)flops);
        ck_assert(json_number_value(json_object_get(meta, "elapsed_ms")) >= 0);
    }
    if (s->analysis || s->top_k) {
        /* the extras' cost: CPU time summed over the compute threads */
        json_t *a = json_object_get(meta, "analysis_ms");
        ck_assert(json_is_number(a) && json_number_value(a) >= 0);
        ck_assert_uint_eq(json_object_size(meta), 15);
    } else {
        ck_assert_ptr_null(json_object_get(meta, "analysis_ms"));
        ck_assert_uint_eq(json_object_size(meta), 14);
    }
    free(text);
    free(json);
    /* req was freed with the writer: t->p keeps dims, mask and scale only */
    t->p.x = t->p.memory = t->p.w_q = t->p.w_k = t->p.w_v = t->p.w_o = NULL;
    t->p.b_q = t->p.b_k = t->p.b_v = t->p.b_o = NULL;
    t->p.key_padding = NULL;
}

/* -- round trips ---------------------------------------------------------- */

START_TEST(test_codec_self_2d)
{
    spec s = {.B = 1, .n = 5, .d_model = 8, .h = 2, .g = 2, .d_k = 3,
              .d_v = 4, .tokens = 1};
    trip t;
    const json_t *tok;
    round_trip(&s, &t);
    /* tokens echoed unchanged, escapes and all */
    tok = json_object_get(t.root, "tokens");
    ck_assert_uint_eq(json_array_size(tok), 5);
    ck_assert_str_eq(json_string_value(json_array_get(tok, 3)),
                     "t3 \xc3\xa9\"");
    ck_assert_ptr_null(json_object_get(t.root, "memory_tokens"));
    trip_free(&t);
}
END_TEST

START_TEST(test_codec_layouts_agree)
{
    /* the same weights in the 2-D and the 3-D layout give the same result */
    spec s = {.B = 1, .n = 4, .d_model = 6, .h = 3, .g = 3, .d_k = 2,
              .d_v = 5, .wo = 1, .d_out = 7, .bias = 1};
    trip a, b;
    size_t i;
    uint32_t seed = rng_state;

    round_trip(&s, &a);
    rng_state = seed;
    s.w3d = 1;
    round_trip(&s, &b);
    ck_assert_uint_eq(a.out_n, b.out_n);
    for (i = 0; i < a.out_n; i++)
        ck_assert_msg(a.out[i] == b.out[i], "output[%zu]: 2-D %.9g, 3-D %.9g",
                      i, (double)a.out[i], (double)b.out[i]);
    trip_free(&a);
    trip_free(&b);
}
END_TEST

START_TEST(test_codec_gqa_3d_bias_scale)
{
    spec s = {.B = 1, .n = 6, .d_model = 8, .h = 4, .g = 2, .d_k = 3,
              .d_v = 2, .w3d = 1, .bias = 1, .wo = 1, .d_out = 5,
              .scale = 0.25};
    trip t;
    round_trip(&s, &t);
    ck_assert(t.p.scale == 0.25f);
    trip_free(&t);
}
END_TEST

START_TEST(test_codec_mqa_cross)
{
    spec s = {.B = 1, .n = 3, .m = 7, .d_model = 4, .d_mem = 9, .h = 4,
              .g = 1, .d_k = 2, .d_v = 3, .cross = 1, .causal = 1};
    trip t;
    const json_t *mt;
    round_trip(&s, &t);
    mt = json_object_get(t.root, "memory_tokens");
    ck_assert_uint_eq(json_array_size(mt), 7);
    ck_assert_str_eq(json_string_value(json_array_get(mt, 6)), "k6");
    trip_free(&t);
}
END_TEST

START_TEST(test_codec_batch_padding)
{
    /* per-element padding: batch element b pads its last b+1 keys */
    spec s = {.B = 3, .n = 4, .d_model = 5, .h = 2, .g = 1, .d_k = 2,
              .d_v = 2, .batched = 1, .kpm = 2, .tokens = 2};
    trip t;
    size_t b, hh, i, j, m = 4;
    round_trip(&s, &t);
    for (b = 0; b < 3; b++)
        for (hh = 0; hh < 2; hh++)
            for (i = 0; i < 4; i++)
                for (j = 0; j < m; j++) {
                    float a = t.att[((b * 2 + hh) * 4 + i) * m + j];
                    if (j > 0 && j + b + 1 >= m)
                        ck_assert_msg(a == 0.0f, "padded key %zu of batch "
                                      "%zu has weight %g", j, b, (double)a);
                }
    ck_assert_uint_eq(json_array_size(json_object_get(t.root, "tokens")), 3);
    trip_free(&t);
}
END_TEST

START_TEST(test_codec_padding_broadcast_cross_batched)
{
    spec s = {.B = 2, .n = 3, .m = 5, .d_model = 4, .d_mem = 6, .h = 2,
              .g = 2, .d_k = 3, .d_v = 3, .batched = 1, .cross = 1,
              .kpm = 1, .weights = "mean"};
    trip t;
    size_t b, i;
    round_trip(&s, &t);
    ck_assert_uint_eq(t.att_n, 2 * 3 * 5);
    for (b = 0; b < 2; b++)
        for (i = 0; i < 3; i++)
            ck_assert(t.att[(b * 3 + i) * 5 + 4] == 0.0f);
    trip_free(&t);
}
END_TEST

START_TEST(test_codec_base64_in_out)
{
    spec s = {.B = 2, .n = 5, .d_model = 6, .h = 2, .g = 1, .d_k = 4,
              .d_v = 3, .batched = 1, .w3d = 1, .bias = 1, .wo = 1,
              .d_out = 4, .b64_in = 1, .b64_out = 1, .causal = 1};
    trip t;
    round_trip(&s, &t);
    trip_free(&t);
    s.w3d = 0;
    s.weights = "mean";
    round_trip(&s, &t);
    trip_free(&t);
}
END_TEST

START_TEST(test_codec_weights_none)
{
    spec s = {.B = 1, .n = 6, .d_model = 4, .h = 2, .g = 2, .d_k = 2,
              .d_v = 2, .weights = "none", .b64_out = 1};
    trip t;
    round_trip(&s, &t);
    trip_free(&t);
    s.b64_out = 0;
    s.weights = "mean";
    round_trip(&s, &t);
    trip_free(&t);
}
END_TEST

START_TEST(test_codec_analysis)
{
    /* head figures against attn_analyze_ref: a 2-D x with causal GQA, and a
     * batched cross-attention with per-element padding and no maps */
    spec a = {.B = 1, .n = 6, .d_model = 8, .h = 4, .g = 2, .d_k = 3,
              .d_v = 2, .causal = 1, .analysis = 1};
    spec b = {.B = 2, .n = 4, .m = 5, .d_model = 6, .d_mem = 3, .h = 3,
              .g = 3, .d_k = 2, .d_v = 2, .batched = 1, .cross = 1,
              .kpm = 2, .analysis = 1, .weights = "none"};
    trip t;

    round_trip(&a, &t);
    trip_free(&t);
    round_trip(&b, &t);
    trip_free(&t);
}
END_TEST

START_TEST(test_codec_top_k)
{
    spec a = {.B = 1, .n = 5, .d_model = 6, .h = 2, .g = 1, .d_k = 3,
              .d_v = 2, .top_k = 3, .tokens = 1};
    spec b = {.B = 2, .n = 4, .m = 7, .d_model = 5, .d_mem = 4, .h = 2,
              .g = 2, .d_k = 2, .d_v = 3, .batched = 1, .cross = 1,
              .kpm = 1, .top_k = 2, .weights = "mean", .b64_out = 1,
              .analysis = 1};
    spec c = {.B = 1, .n = 3, .d_model = 4, .h = 2, .g = 2, .d_k = 2,
              .d_v = 2, .top_k = 3, .causal = 1};
    trip t;

    round_trip(&a, &t);
    trip_free(&t);
    round_trip(&b, &t);
    trip_free(&t);
    /* k == m with a causal mask: the masked keys come last with weight 0 */
    round_trip(&c, &t);
    trip_free(&t);
}
END_TEST

START_TEST(test_codec_literal_request)
{
    /* a hand-written request whose answer is known: one head, identity
     * projections, two equal keys -> uniform weights, output = mean of x */
    const char *json =
        "{ \"x\" : [[1, 0], [0, 1]],\n"
        "  \"w_q\": [[0,0],[0,0]], \"w_k\": [[1,0],[0,1]],\n"
        "  \"w_v\": [[1,0],[0,1]], \"return_weights\": \"mean\",\n"
        "  \"b_o\": null }";
    codec_request *req = parse_ok(json);
    codec_error err = {0};
    codec_writer *w;
    char *text;
    size_t len;

    ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
    w = codec_writer_new(req);
    text = drain_writer(w, &len);
    codec_writer_free(w);
    {
        /* the exact text, up to the flops count and the time */
        static const char want[] =
            "{\"output\":[[0.5,0.5],[0.5,0.5]],"
            "\"attention\":[[0.5,0.5],[0.5,0.5]],"
            "\"meta\":{\"batch\":1,\"n\":2,\"m\":2,\"d_model\":2,"
            "\"d_mem\":2,\"num_heads\":1,\"num_kv_heads\":1,"
            "\"d_k\":2,\"d_v\":2,\"d_out\":2,\"mask\":\"none\","
            "\"params\":12,\"flops\":";
        ck_assert_msg(strncmp(text, want, sizeof want - 1) == 0,
                      "body: %s", text);
        ck_assert(strstr(text, ",\"elapsed_ms\":") != NULL);
        ck_assert(text[len - 2] == '}' && text[len - 1] == '}');
    }
    free(text);
}
END_TEST

/* Finite inputs whose scores or projections overflow float32 while the
 * answer fits: the float64 path answers them, as the reference does. An
 * answer beyond float32 itself, and top-k (float32 only), stay 422. */
START_TEST(test_codec_float32_overflow_inside)
{
    static const struct {
        const char *json;
        float out[2]; /* the float64 answer, rounded to float32 */
        size_t n;
    } ok[] = {
        /* one key: weight 1, output x; q . k = 1e40 */
        {"{\"x\":[[1e20]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]]}",
         {1e20f}, 1},
        /* scores 1e38 .. 4e38: each row takes its largest key */
        {"{\"x\":[[1],[2]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
         "\"scale\":1e38}",
         {2, 2}, 2},
        /* biases of 3.4e38: q and k equal for every row, uniform weights */
        {"{\"x\":[[1],[2]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
         "\"b_q\":[3.4e38],\"b_k\":[3.4e38]}",
         {1.5f, 1.5f}, 2},
    };
    static const char *refused[] = {
        /* the output itself is 6e38 */
        "{\"x\":[[1],[2]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
        "\"w_o\":[[3e38]],\"b_o\":[3e38]}",
        "{\"x\":[[1e20],[1]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
        "\"top_k\":1}",
    };
    size_t i, j;

    for (i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        codec_request *req = parse_ok(ok[i].json);
        codec_error err = {0};

        ck_assert_msg(codec_run(req, NULL, &err, NULL) == 0, "%s: %s",
                      ok[i].json, err.message);
        for (j = 0; j < ok[i].n; j++)
            ck_assert_msg(req->output[j] == ok[i].out[j],
                          "%s: output %zu is %.9g, expected %.9g",
                          ok[i].json, j, (double)req->output[j],
                          (double)ok[i].out[j]);
        codec_request_free(req);
    }
    for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        codec_request *req = parse_ok(refused[i]);
        codec_error err = {0};

        ck_assert_int_eq(codec_run(req, NULL, &err, NULL), -1);
        ck_assert_int_eq(err.kind, ERRORS_INVALID_REQUEST);
        ck_assert_msg(strstr(err.message, "overflow float32") != NULL, "%s",
                      err.message);
        codec_request_free(req);
    }
}
END_TEST

/* A request of n x d_model inputs and weights of uniform values times
 * xs and ws, with return_weights "none"; parsed. */
static codec_request *scaled_request(size_t n, size_t d, size_t h, float xs,
                                     float ws)
{
    sbuf b = {0};
    float *x = frand_n(n * d), *w[4];
    const char *names[4] = {"w_q", "w_k", "w_v", "w_o"};
    codec_request *req;
    size_t i, k;

    for (i = 0; i < n * d; i++)
        x[i] *= xs;
    sb_printf(&b, "{\"num_heads\":%zu,\"return_weights\":\"none\",\"x\":", h);
    sb_matrix(&b, x, n, d);
    for (k = 0; k < 4; k++) {
        w[k] = frand_n(d * d);
        for (i = 0; i < d * d; i++)
            w[k][i] *= ws;
        sb_printf(&b, ",\"%s\":", names[k]);
        sb_matrix(&b, w[k], d, d);
        free(w[k]);
    }
    sb_printf(&b, "}");
    req = parse_ok(b.data);
    free(x);
    text_free(&b);
    return req;
}

/* Checks the service's values got against the float64 reference ref,
 * count values named what, within the contract's bound; returns how many
 * of float32's own values f32 miss that bound (a test of the float64
 * computation needs some). */
static size_t recomputed_close(const char *what, const float *got,
                               const float *f32, const float *ref,
                               size_t count)
{
    size_t i, missed = 0;

    for (i = 0; i < count; i++) {
        missed += !close_enough(f32[i], ref[i]);
        TS_REQUIRE(close_enough(got[i], ref[i]),
                   "%s %zu is %.9g, the float64 reference %.9g", what, i,
                   (double)got[i], (double)ref[i]);
    }
    return missed;
}

/* Scores in the tens to hundreds (weights of unit values, not scaled by
 * 1/sqrt(d_model)): float32's rounding of q and k alone moves the answer
 * past the contract's 1e-4 * (1 + |reference|), so the float64 reference
 * computes it; inputs of unit scale keep the float32 answer. */
START_TEST(test_codec_float32_loose_recomputed)
{
    static const float scales[] = {2.0f, 3.0f, 4.0f, 6.0f};
    const size_t n = 16, d = 64, h = 4;
    codec_request *req;
    codec_error err = {0};
    float *f32 = malloc(n * d * sizeof(float));
    float *ref = malloc(n * d * sizeof(float));
    size_t i, k, seed, missed = 0, differ = 0;
    char what[64];

    ck_assert_ptr_nonnull(f32);
    ck_assert_ptr_nonnull(ref);
    for (k = 0; k < sizeof scales / sizeof scales[0]; k++)
        for (seed = 1; seed <= 3; seed++) {
            rng_state = (uint32_t)(2024 + seed);
            req = scaled_request(n, d, h, 1.0f, scales[k]);
            ck_assert_int_eq(attn_forward(&req->p, f32, NULL), ATTN_OK);
            ck_assert_int_eq(attn_forward_ref(&req->p, ref, NULL), ATTN_OK);
            ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
            snprintf(what, sizeof what, "weights x%g, seed %zu: output",
                     (double)scales[k], seed);
            missed += recomputed_close(what, req->output, f32, ref, n * d);
            codec_request_free(req);
        }
    /* cases float32 alone gets wrong are among them */
    ck_assert_msg(missed > 0, "float32 alone met the bound: no test");

    rng_state = 2024;
    req = scaled_request(n, d, h, 1.0f, 0.2f);
    ck_assert_int_eq(attn_forward(&req->p, f32, NULL), ATTN_OK);
    ck_assert_int_eq(attn_forward_ref(&req->p, ref, NULL), ATTN_OK);
    ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
    for (i = 0; i < n * d; i++) {
        ck_assert(req->output[i] == f32[i]);
        differ += f32[i] != ref[i];
    }
    ck_assert_msg(differ > 0, "float32 and float64 agree: no test");
    codec_request_free(req);
    free(f32);
    free(ref);
}
END_TEST

/* rope's dim is "an even integer <= d_k": 0 rotates nothing, the answer
 * of the request without rope; 3 is refused at /rope/dim. */
START_TEST(test_codec_rope_dim_zero)
{
#define ROPE_BASE "{\"x\":[[1,0,2,1],[0,1,1,3],[2,1,0,1]],\"num_heads\":1," \
                  "\"w_q\":[[1,0,0,1],[0,1,1,0],[1,1,0,0],[0,0,1,1]]," \
                  "\"w_k\":[[0,1,0,1],[1,0,1,0],[1,0,0,1],[0,1,1,0]]," \
                  "\"w_v\":[[1,2,0,1],[0,1,2,0],[1,0,1,2],[2,1,0,1]]"
    static const char *const with[] = {
        ROPE_BASE ",\"rope\":{\"dim\":0}}",
        ROPE_BASE ",\"rope\":{\"dim\":0,\"theta\":500,\"style\":\"interleaved\"}}",
    };
    codec_error err = {0};
    codec_request *plain = parse_ok(ROPE_BASE "}"), *req;
    size_t i, k;

    ck_assert_int_eq(codec_run(plain, NULL, &err, NULL), 0);
    for (k = 0; k < sizeof with / sizeof with[0]; k++) {
        req = parse_ok(with[k]);
        ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
        for (i = 0; i < 3 * 4; i++)
            ck_assert_msg(req->output[i] == plain->output[i],
                          "%s: output %zu is %g, without rope %g", with[k], i,
                          (double)req->output[i], (double)plain->output[i]);
        codec_request_free(req);
    }
    codec_request_free(plain);
    expect_err(ROPE_BASE ",\"rope\":{\"dim\":3}}", ERRORS_INVALID_REQUEST,
               "/rope/dim", "even number");
#undef ROPE_BASE
}
END_TEST

/* Large constant offsets in q and k (big b_q and b_k, as real models'
 * projection biases have) make every score large and nearly equal: the
 * weights are all rounding, however small v is, and float32 alone misses
 * the contract's bound on them. Computed again in float64 when the
 * weights are returned; outputs alone (v of 0.03 here) stay float32. */
START_TEST(test_codec_float32_offsets_recomputed)
{
#define OFFSETS_BODY                                                        \
    "{\"x\":[[-0.007923807017505169],[-0.021826576441526413],"               \
    "[-0.027104174718260765],[0.004495714325457811],"                       \
    "[-0.022186998277902603]],\"w_q\":[[1.0,-0.5]],\"w_k\":[[0.8,1.2]],"     \
    "\"w_v\":[[1.0,0.3]],\"b_q\":[50.0,-20.0],\"b_k\":[650,325.0]"
    const size_t n = 5, d_v = 2;
    codec_request *req = parse_ok(OFFSETS_BODY "}");
    codec_error err = {0};
    float w32[25], wref[25], o32[10], oref[10];
    size_t i, missed;

    ck_assert_int_eq(attn_forward(&req->p, o32, w32), ATTN_OK);
    ck_assert_int_eq(attn_forward_ref(&req->p, oref, wref), ATTN_OK);
    ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
    missed = recomputed_close("weight", req->weights, w32, wref, n * n);
    ck_assert_msg(missed > 0, "float32 alone met the bound: no test");
    codec_request_free(req);

    req = parse_ok(OFFSETS_BODY ",\"return_weights\":\"none\"}");
    ck_assert_int_eq(attn_forward(&req->p, o32, NULL), ATTN_OK);
    ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
    for (i = 0; i < n * d_v; i++) {
        ck_assert(req->output[i] == o32[i]);
        ck_assert(close_enough(req->output[i], oref[i]));
    }
    codec_request_free(req);
#undef OFFSETS_BODY
}
END_TEST

/* Scores in the tens to hundreds at the size of a real layer, past the
 * 1e9 operations the float64 path once stopped at (1e10 now): n = 1024,
 * d_model = 256, 4 heads (1.6e9 operations), weights of twice unit
 * values. */
START_TEST(test_codec_float32_loose_recomputed_large)
{
    const size_t n = 1024, d = 256, h = 4;
    codec_request *req;
    codec_error err = {0};
    float *f32 = malloc(n * d * sizeof(float));
    float *ref = malloc(n * d * sizeof(float));
    size_t missed;

    ck_assert_ptr_nonnull(f32);
    ck_assert_ptr_nonnull(ref);
    rng_state = 2025;
    req = scaled_request(n, d, h, 1.0f, 2.0f);
    ck_assert_uint_gt(req->flops, UINT64_C(1000000000));
    ck_assert_uint_le(req->flops, CODEC_REF_FLOPS);
    ck_assert_int_eq(attn_forward(&req->p, f32, NULL), ATTN_OK);
    ck_assert_int_eq(attn_forward_ref(&req->p, ref, NULL), ATTN_OK);
    ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
    missed = recomputed_close("output", req->output, f32, ref, n * d);
    ck_assert_msg(missed > 0, "float32 alone met the bound: no test");
    codec_request_free(req);
    free(f32);
    free(ref);
}
END_TEST

/* A boolean field may be a tensor object too ("any matrix or vector
 * field"), float32 like every one: 0 is false and 1 true, anything else
 * (an additive float mask) 422. */
START_TEST(test_codec_bool_tensor_object)
{
#define BOOL_BASE "{\"x\":[[1,0],[0,1],[1,1]],\"w_q\":[[1,0],[0,1]]," \
                  "\"w_k\":[[1,0],[0,1]],\"w_v\":[[1,2],[3,4]],"
    /* [0, 1, 0] and [[0, 1, 0], [1, 0, 0], [0, 0, 0]] as float32 */
    static const char *const pairs[][2] = {
        {BOOL_BASE "\"key_padding_mask\":[false,true,false]}",
         BOOL_BASE "\"key_padding_mask\":{\"dtype\":\"float32\","
                   "\"shape\":[3],\"data\":\"AAAAAAAAgD8AAAAA\"}}"},
        {BOOL_BASE "\"attn_mask\":[[false,true,false],[true,false,false],"
                   "[false,false,false]]}",
         BOOL_BASE "\"attn_mask\":{\"dtype\":\"float32\",\"shape\":[3,3],"
                   "\"data\":\"AAAAAAAAgD8AAAAAAACAPwAAAAAAAAAA"
                   "AAAAAAAAAAAAAAAA\"}}"},
    };
    size_t i, j;

    for (i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        codec_request *a = parse_ok(pairs[i][0]), *b = parse_ok(pairs[i][1]);
        codec_error err = {0};

        ck_assert_int_eq(codec_run(a, NULL, &err, NULL), 0);
        ck_assert_int_eq(codec_run(b, NULL, &err, NULL), 0);
        ck_assert_uint_eq(a->output_elems, b->output_elems);
        for (j = 0; j < a->output_elems; j++)
            ck_assert(a->output[j] == b->output[j]);
        for (j = 0; j < a->weights_elems; j++)
            ck_assert(a->weights[j] == b->weights[j]);
        codec_request_free(a);
        codec_request_free(b);
    }
    /* [0, -1, 0]: PyTorch's additive convention, not a boolean */
    expect_err(BOOL_BASE "\"key_padding_mask\":{\"dtype\":\"float32\","
                         "\"shape\":[3],\"data\":\"AAAAAAAAgL8AAAAA\"}}",
               ERRORS_INVALID_REQUEST, "/key_padding_mask", "attn_bias");
    /* the store holds tensors of numbers, not masks: no ref here */
    expect_err(BOOL_BASE "\"key_padding_mask\":{\"ref\":\"sha256:"
                         "00000000000000000000000000000000"
                         "00000000000000000000000000000000\"}}",
               ERRORS_INVALID_REQUEST, "/key_padding_mask", "not a ref");
    /* and the shape is checked as for nested arrays */
    expect_err(BOOL_BASE "\"key_padding_mask\":{\"dtype\":\"float32\","
                         "\"shape\":[2],\"data\":\"AAAAAAAAgD8=\"}}",
               ERRORS_INVALID_REQUEST, "/key_padding_mask/shape/0", NULL);
#undef BOOL_BASE
}
END_TEST

/* A layers request takes at most CODEC_MAX_LAYERS layers: 1024 empty
 * layers over a top-level request are read, 1025 are 413 at the first
 * one too many, which is refused before it is parsed. */
START_TEST(test_codec_layers_count_limited)
{
    static const char head[] =
        "{\"x\":[[1,0],[0,1]],\"w_q\":[[1,0],[0,1]],\"w_k\":[[1,0],[0,1]],"
        "\"w_v\":[[1,2],[3,4]],\"return_weights\":\"none\",\"layers\":[";
    sbuf b = {0};
    codec_request *req;
    char at[32];
    size_t i;

    sb_printf(&b, "%s", head);
    for (i = 0; i < CODEC_MAX_LAYERS; i++)
        sb_printf(&b, "%s{}", i ? "," : "");
    sb_printf(&b, "]}");
    req = parse_ok(b.data);
    ck_assert_uint_eq(req->n_layers, CODEC_MAX_LAYERS);
    codec_request_free(req);
    b.len -= 2;
    sb_printf(&b, ",{}]}");
    snprintf(at, sizeof at, "/layers/%d", CODEC_MAX_LAYERS);
    expect_err(b.data, ERRORS_TOO_LARGE, at, "at most 1024");
    free(b.data);
}
END_TEST

/* "global_tokens": [] is no global token, as when absent (an index list
 * a client computes may come out empty); [[]] stays 422. */
START_TEST(test_codec_global_tokens_empty)
{
    static const char *with =
        "{\"x\":[[1],[2],[3]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
        "\"window\":{\"left\":0},\"global_tokens\":[ \n ]}";
    static const char *without =
        "{\"x\":[[1],[2],[3]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
        "\"window\":{\"left\":0}}";
    static const char *nested =
        "{\"x\":[[1],[2],[3]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
        "\"global_tokens\":[[]]}";
    codec_request *a = parse_ok(with), *b = parse_ok(without);
    codec_error err = {0};
    size_t i;

    ck_assert_int_eq(codec_run(a, NULL, &err, NULL), 0);
    ck_assert_int_eq(codec_run(b, NULL, &err, NULL), 0);
    ck_assert_ptr_null(a->p.global_tokens);
    for (i = 0; i < 3; i++)
        ck_assert(a->output[i] == b->output[i]);
    codec_request_free(a);
    codec_request_free(b);
    expect_err(nested, ERRORS_INVALID_REQUEST, "/global_tokens", "nested");
}
END_TEST

/* Indices and positions are exact: from 2^52 on, a double is also the
 * rounding of other numbers (2^53 + 1, a fraction), so the text must be
 * the integer itself. */
/* Labels come back as sent, lone UTF-16 surrogates too (JavaScript writes
 * one for half of an emoji); a key holding one is an unknown key. */
START_TEST(test_codec_labels_lone_surrogates)
{
    static const char *const body =
        "{\"x\":[[1],[2],[3]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
        "\"tokens\":[\"\\ud83d\",\"x\\udc00y\",\"\\ud83d\\ude00\"]}";
    static const char *const echo =
        "\"tokens\":[\"\\ud83d\",\"x\\udc00y\",\"\\ud83d\\ude00\"]";
    codec_request *req = parse_ok(body);
    codec_error err = {0};
    codec_writer *w;
    size_t len;
    char *out;

    ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
    w = codec_writer_new(req);
    ck_assert_ptr_nonnull(w);
    out = drain_writer(w, &len);
    ck_assert_msg(strstr(out, echo) != NULL, "%s", out);
    free(out);
    codec_writer_free(w);
    expect_err("{\"x\":[[1]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
               "\"tok\\udc00ens\":[]}",
               ERRORS_INVALID_REQUEST, "/tok\xef\xbf\xbd" "ens", "unknown field");
}
END_TEST

/* rope's theta and attention_factor are the library's doubles as read:
 * theta 10000.1 in float32 would turn the angles at position 10^6 by
 * some 1e-3 radians. */
START_TEST(test_codec_rope_numbers_exact)
{
    codec_request *req = parse_ok(
        "{\"x\":[[1,0],[0,1]],\"w_q\":[[1,0],[0,1]],\"w_k\":[[1,0],[0,1]],"
        "\"w_v\":[[1,0],[0,1]],\"rope\":{\"theta\":10000.1,"
        "\"attention_factor\":1.2772588722239782}}");

    ck_assert(req->p.rope.theta == 10000.1);
    ck_assert(req->p.rope.attention_factor == 1.2772588722239782);
    codec_request_free(req);
    /* still within float32, as every number of a request */
    expect_err("{\"x\":[[1]],\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
               "\"rope\":{\"theta\":1e39}}",
               ERRORS_INVALID_REQUEST, "/rope/theta", "finite in float32");
}
END_TEST

START_TEST(test_codec_positions_exact)
{
    static const char *const ok[] = {"9007199254740992",
                                     "9007199254740992.000", "4503599627370497",
                                     "1e3", "8.0", "0"};
    static const char *const bad[] = {"9007199254740993", "4503599627370497.5",
                                      "9007199254740994", "-1", "0.5",
                                      "1e300"};
    char body[256];
    size_t i;

    for (i = 0; i < sizeof ok / sizeof ok[0] + sizeof bad / sizeof bad[0];
         i++) {
        int good = i < sizeof ok / sizeof ok[0];
        snprintf(body, sizeof body,
                 "{\"x\":[[1,0]],\"memory\":[[1,0],[0,1]],\"w_q\":[[1],[0]],"
                 "\"w_k\":[[1],[0]],\"w_v\":[[1,0],[0,1]],"
                 "\"positions\":[9007199254740992],\"key_positions\":[0,%s]}",
                 good ? ok[i] : bad[i - sizeof ok / sizeof ok[0]]);
        if (good)
            codec_request_free(parse_ok(body));
        else
            expect_err(body, ERRORS_INVALID_REQUEST, "/key_positions/1",
                       "expected an integer from 0 to 2^53");
    }
}
END_TEST

START_TEST(test_codec_layout_values)
{
    /* the parsed buffers hold the library's layouts: x and memory
     * [B][rows][d] as given; 3-D weights [h][d_model][d_k] side by side
     * into [d_model][h*d_k] */
    const char *json =
        "{\"x\":[[[1,2],[3,4],[5,6]],[[7,8],[9,10],[11,12]]],"
        "\"memory\":[[[1,2]],[[3,4]]],\"num_heads\":2,"
        "\"w_q\":[[[1],[2]],[[3],[4]]],\"w_k\":[[1,5],[2,6]],"
        "\"w_v\":[[[1,2,3],[4,5,6]],[[7,8,9],[10,11,12]]]}";
    static const float wv[] = {1, 2, 3, 7, 8, 9, 4, 5, 6, 10, 11, 12};
    codec_request *req = parse_ok(json);
    size_t i;

    for (i = 0; i < 12; i++)
        ck_assert(req->p.x[i] == (float)(i + 1));
    for (i = 0; i < 4; i++)
        ck_assert(req->p.memory[i] == (float)(i + 1));
    ck_assert(req->p.w_q[0] == 1 && req->p.w_q[1] == 3 && req->p.w_q[2] == 2 &&
              req->p.w_q[3] == 4);
    for (i = 0; i < 12; i++)
        ck_assert_msg(req->p.w_v[i] == wv[i], "w_v[%zu] = %g", i,
                      (double)req->p.w_v[i]);
    ck_assert_uint_eq(req->p.dims.m, 1);
    ck_assert_uint_eq(req->p.dims.d_v, 3);
    codec_request_free(req);
}
END_TEST

START_TEST(test_codec_escapes_and_unknown)
{
    /* an escaped key names a known field; a label holding U+0000 is echoed
     * as valid JSON (unknown fields: test_v2_unknown_fields) */
    const char *json =
        "{\"\\u0078\":[[1,2]],\"w_q\":[[1],[2]],\"w_k\":[[1],[2]],"
        "\"w_v\":[[1],[2]],\"tokens\":[\"a\\u0000b\"]}";
    codec_request *req = parse_ok(json);
    codec_error err = {0};
    codec_writer *w;
    json_t *root;
    char *text;
    size_t len;

    ck_assert(req->p.x[0] == 1.0f && req->p.x[1] == 2.0f);
    ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
    w = codec_writer_new(req);
    text = drain_writer(w, &len);
    codec_writer_free(w);
    root = json_loadb(text, len, JSON_ALLOW_NUL, NULL);
    ck_assert_ptr_nonnull(root);
    ck_assert_uint_eq(json_string_length(json_array_get(
                          json_object_get(root, "tokens"), 0)), 3);
    json_decref(root);
    free(text);
}
END_TEST

START_TEST(test_codec_numbers_in)
{
    /* text -> float32 is correctly rounded, -0 kept, underflow to 0 fine,
     * FLT_MAX and what rounds to it accepted */
    const char *json =
        "{\"x\":[[0.1, -0, 1e-50, 3.4028235e38, 3.40282356e38, "
        "16777217, 1.17549435e-38, 1E2, 2.5e+1]],"
        "\"w_q\":[[1],[1],[1],[1],[1],[1],[1],[1],[1]],"
        "\"w_k\":[[1],[1],[1],[1],[1],[1],[1],[1],[1]],"
        "\"w_v\":[[1],[1],[1],[1],[1],[1],[1],[1],[1]]}";
    codec_request *req = parse_ok(json);
    const float *x = req->p.x;
    ck_assert(x[0] == 0.1f);
    ck_assert(x[1] == 0.0f && signbit(x[1]));
    ck_assert(x[2] == 0.0f && !signbit(x[2]));
    ck_assert(x[3] == 3.4028235e38f);
    ck_assert(x[4] == 3.4028235e38f);
    ck_assert(x[5] == 16777216.0f); /* ties to even */
    ck_assert(x[6] == 1.17549435e-38f);
    ck_assert(x[7] == 100.0f);
    ck_assert(x[8] == 25.0f);
    codec_request_free(req);
}
END_TEST

/* -- the library's reference fixtures through the codec ------------------- */

#ifndef CODEC_LIB_FIXTURES
#define CODEC_LIB_FIXTURES "tests/fixtures/lib"
#endif

/* One tests/fixtures/lib/<case>.txt (written by tests/gen/gen_lib_fixtures.py
 * from PyTorch / a float64 numpy reference): sections "name count" + values. */
typedef struct lib_fixture {
    size_t B, n, m, d_model, d_mem, h, g, d_k, d_v, d_out;
    int causal;
    double scale;
    float *sec[16];
    size_t len[16];
} lib_fixture;

static const char *const fx_names[] = {
    "x", "memory", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o",
    "key_padding", "output", "weights"};
enum { FX_X, FX_MEM, FX_WQ, FX_WK, FX_WV, FX_WO, FX_BQ, FX_BK, FX_BV, FX_BO,
       FX_KP, FX_OUT, FX_W, FX_COUNT };

static int fx_load(const char *path, lib_fixture *fx)
{
    FILE *f = fopen(path, "r");
    char word[64], mask[16];
    size_t count, i;
    int k;

    memset(fx, 0, sizeof *fx);
    if (f == NULL)
        return -1;
    if (fscanf(f, "attn_fixture 1 %63s", word) != 1 ||
        fscanf(f, " dims %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu", &fx->B,
               &fx->n, &fx->m, &fx->d_model, &fx->d_mem, &fx->h, &fx->g,
               &fx->d_k, &fx->d_v, &fx->d_out) != 10 ||
        fscanf(f, " mask %15s scale %lf", mask, &fx->scale) != 2) {
        fclose(f);
        return -1;
    }
    fx->causal = strcmp(mask, "causal") == 0;
    while (fscanf(f, " %63s", word) == 1 && strcmp(word, "end") != 0) {
        if (fscanf(f, " %zu", &count) != 1)
            break;
        for (k = 0; k < FX_COUNT; k++)
            if (strcmp(word, fx_names[k]) == 0)
                break;
        if (k == FX_COUNT) {
            /* a v2 rule (rope, softcap, ...): the family fixtures run over
             * HTTP in tests/families, which speaks every field */
            for (k = 0; k < FX_COUNT; k++)
                free(fx->sec[k]);
            fclose(f);
            return 1;
        }
        fx->sec[k] = malloc(count * sizeof(float));
        fx->len[k] = count;
        for (i = 0; i < count; i++)
            ck_assert_int_eq(fscanf(f, " %f", &fx->sec[k][i]), 1);
    }
    fclose(f);
    return 0;
}

/* Builds the request of a fixture: nested arrays with 2-D weights, or
 * (variant 1) base64 tensors with 3-D weights and base64 out. */
static char *fx_request(const lib_fixture *fx, int variant)
{
    sbuf b = TEXT_BUF_INIT;
    spec s;
    size_t shape[3], i, j;
    int batched = fx->B > 1;

    memset(&s, 0, sizeof s);
    s.b64_in = variant == 1;
    s.w3d = variant == 1;
    sb_printf(&b, "{\"num_heads\":%zu,\"num_kv_heads\":%zu,\"mask\":\"%s\"",
              fx->h, fx->g, fx->causal ? "causal" : "none");
    if (fx->scale > 0)
        sb_printf(&b, ",\"scale\":%.9g", fx->scale);
    if (fx->sec[FX_W] == NULL)
        sb_printf(&b, ",\"return_weights\":\"none\"");
    else if (fx->len[FX_W] != fx->B * fx->h * fx->n * fx->m)
        sb_printf(&b, ",\"return_weights\":\"mean\"");
    if (variant == 1)
        sb_printf(&b, ",\"encoding\":\"base64\"");
    shape[0] = fx->B;
    shape[1] = fx->n;
    shape[2] = fx->d_model;
    sb_field(&b, &s, "x", fx->sec[FX_X], shape + !batched, 2 + batched);
    if (fx->sec[FX_MEM] != NULL) {
        shape[1] = fx->m;
        shape[2] = fx->d_mem;
        sb_field(&b, &s, "memory", fx->sec[FX_MEM], shape + !batched,
                 2 + batched);
    }
    sb_weight(&b, &s, "w_q", fx->sec[FX_WQ], fx->d_model, fx->h, fx->d_k);
    sb_weight(&b, &s, "w_k", fx->sec[FX_WK], fx->d_mem, fx->g, fx->d_k);
    sb_weight(&b, &s, "w_v", fx->sec[FX_WV], fx->d_mem, fx->g, fx->d_v);
    if (fx->sec[FX_WO] != NULL) {
        shape[0] = fx->h * fx->d_v;
        shape[1] = fx->d_out;
        sb_field(&b, &s, "w_o", fx->sec[FX_WO], shape, 2);
    }
    for (i = FX_BQ; i <= FX_BO; i++) {
        if (fx->sec[i] != NULL) {
            shape[0] = fx->len[i];
            sb_field(&b, &s, fx_names[i], fx->sec[i], shape, 1);
        }
    }
    if (fx->sec[FX_KP] != NULL) {
        sb_printf(&b, ",\"key_padding_mask\":[");
        for (i = 0; i < fx->B; i++) {
            sb_printf(&b, "%s%s", i ? "," : "", batched ? "[" : "");
            for (j = 0; j < fx->m; j++)
                sb_printf(&b, "%s%s", j ? "," : "",
                          fx->sec[FX_KP][i * fx->m + j] != 0 ? "true"
                                                              : "false");
            sb_printf(&b, "%s", batched ? "]" : "");
        }
        sb_printf(&b, "]");
    }
    sb_printf(&b, "}");
    return b.data;
}

START_TEST(test_codec_lib_fixtures)
{
    DIR *dir = opendir(CODEC_LIB_FIXTURES);
    struct dirent *de;
    int seen = 0, variant, rc;

    ck_assert_msg(dir != NULL, "cannot open %s", CODEC_LIB_FIXTURES);
    while ((de = readdir(dir)) != NULL) {
        char path[512];
        lib_fixture fx;
        size_t k;

        if (strstr(de->d_name, ".txt") == NULL)
            continue;
        snprintf(path, sizeof path, "%s/%s", CODEC_LIB_FIXTURES, de->d_name);
        rc = fx_load(path, &fx);
        ck_assert_int_ge(rc, 0);
        if (rc == 1)
            continue;
        for (variant = 0; variant < 2; variant++) {
            char *json = fx_request(&fx, variant), *text;
            codec_request *req = parse_ok(json);
            codec_error err = {0};
            codec_writer *w;
            json_t *root, *o, *a;
            size_t len, i, pos, shape[4];
            float *got;
            int batched = fx.B > 1;

            ck_assert_int_eq(codec_run(req, NULL, &err, NULL), 0);
            w = codec_writer_new(req);
            text = drain_writer(w, &len);
            codec_writer_free(w);
            root = json_loadb(text, len, 0, NULL);
            ck_assert_ptr_nonnull(root);
            o = json_object_get(root, "output");
            a = json_object_get(root, "attention");
            shape[0] = fx.B;
            shape[1] = fx.n;
            shape[2] = fx.d_out;
            got = malloc(fx.len[FX_OUT] * sizeof(float));
            if (variant == 1) {
                decode_tensor(o, shape + !batched, 2 + batched, got,
                              fx.len[FX_OUT]);
            } else {
                pos = 0;
                flatten(o, shape + !batched, 2 + batched, got, &pos);
            }
            for (i = 0; i < fx.len[FX_OUT]; i++)
                ck_assert_msg(close_enough(got[i], fx.sec[FX_OUT][i]),
                              "%s variant %d: output[%zu] = %.9g, "
                              "fixture %.9g", de->d_name, variant, i,
                              (double)got[i], (double)fx.sec[FX_OUT][i]);
            free(got);
            if (fx.sec[FX_W] != NULL) {
                int per_head = fx.len[FX_W] == fx.B * fx.h * fx.n * fx.m;
                int rank = (per_head ? 3 : 2) + batched;
                shape[0] = fx.B;
                shape[1] = per_head ? fx.h : fx.n;
                shape[2] = per_head ? fx.n : fx.m;
                shape[3] = fx.m;
                got = malloc(fx.len[FX_W] * sizeof(float));
                if (variant == 1) {
                    decode_tensor(a, shape + !batched, rank, got,
                                  fx.len[FX_W]);
                } else {
                    pos = 0;
                    flatten(a, shape + !batched, rank, got, &pos);
                }
                for (i = 0; i < fx.len[FX_W]; i++)
                    ck_assert_msg(close_enough(got[i], fx.sec[FX_W][i]),
                                  "%s variant %d: attention[%zu] = %.9g, "
                                  "fixture %.9g", de->d_name, variant, i,
                                  (double)got[i], (double)fx.sec[FX_W][i]);
                free(got);
            } else {
                ck_assert_ptr_null(a);
            }
            json_decref(root);
            free(text);
            free(json);
        }
        for (k = 0; k < 16; k++)
            free(fx.sec[k]);
        seen++;
    }
    closedir(dir);
    ck_assert_int_ge(seen, 5);
}
END_TEST

/* -- errors ---------------------------------------------------------------- */

#define W2 "\"w_q\":[[1,0],[0,1]],\"w_k\":[[1,0],[0,1]],\"w_v\":[[1,0],[0,1]]"
#define X2 "\"x\":[[1,2],[3,4],[5,6]]"

static const struct err_case {
    const char *json;
    errors_kind kind;
    const char *field;
    const char *part;
} err_cases[] = {
    /* syntax */
    {"", ERRORS_INVALID_JSON, "", "line 1, column 1"},
    {"{\"x\": [1,2", ERRORS_INVALID_JSON, "", "line 1"},
    {"{\"x\":\n  [[1,,2]]}", ERRORS_INVALID_JSON, "", "line 2, column 7"},
    {"{\"x\": [[1]]} x", ERRORS_INVALID_JSON, "", "after the JSON object"},
    {"{\"x\": NaN}", ERRORS_INVALID_JSON, "", "line 1, column 7"},
    {"{\"x\": [[01]]}", ERRORS_INVALID_JSON, "", "line 1, column 10"},
    {"{\"x\": [[1.]]}", ERRORS_INVALID_JSON, "", "invalid number"},
    {"{\"x\": [[1.e5]]}", ERRORS_INVALID_JSON, "", "invalid number"},
    {"{\"x\": [[-.5]]}", ERRORS_INVALID_JSON, "", "invalid number"},
    {"{\"x\": [[-inf]]}", ERRORS_INVALID_JSON, "", "invalid number"},
    {"{\"x\": [[-nan]]}", ERRORS_INVALID_JSON, "", "invalid number"},
    {"{\"x\": [[-]]}", ERRORS_INVALID_JSON, "", "invalid number"},
    {"{\"x\": [[1e]]}", ERRORS_INVALID_JSON, "", NULL},
    {"{\"x\": [[1e+]]}", ERRORS_INVALID_JSON, "", NULL},
    {"{\"x\": [[1.5.3]]}", ERRORS_INVALID_JSON, "", NULL},
    {"{\"x\": [[0x10]]}", ERRORS_INVALID_JSON, "", NULL},
    {"{\"x\": [[+1]]}", ERRORS_INVALID_JSON, "", NULL},
    {"{\"a\": \"\\x\"}", ERRORS_INVALID_JSON, "", "escape"},
    {"{\"a\": \"\xff\"}", ERRORS_INVALID_JSON, "", "UTF-8"},
    /* a lone surrogate is JSON (RFC 8259 8.2): the key is merely unknown */
    {"{\"a\": \"\\ud800\"}", ERRORS_INVALID_REQUEST, "/a", "unknown field"},
    /* a syntax error after a contract error is still 400 */
    {"{\"x\": [[1],[1,2]], \"w_q\": [1,}", ERRORS_INVALID_JSON, "", NULL},
    /* shape of the body */
    {"[1,2]", ERRORS_INVALID_REQUEST, "", "JSON object"},
    {"{" W2 "}", ERRORS_INVALID_REQUEST, "/x", "missing"},
    {"{" X2 ",\"w_k\":[[1,0],[0,1]],\"w_v\":[[1,0],[0,1]]}",
     ERRORS_INVALID_REQUEST, "/w_q", "missing"},
    {"{\"x\":[[1,2],[3,4,5]]," W2 "}", ERRORS_INVALID_REQUEST, "/x/1",
     "has more than 2 values, expected 2 like /x/0"},
    {"{\"x\":[[1,2,3],[3,4]]," W2 "}", ERRORS_INVALID_REQUEST, "/x/1",
     "has 2 values, expected 3"},
    {"{\"x\":[[[1,2]],[[3,4],[5,6]]]," W2 "}", ERRORS_INVALID_REQUEST, "/x/1",
     "has more than 1 values"},
    {"{\"x\":[1,2]," W2 "}", ERRORS_INVALID_REQUEST, "/x",
     "expected [n][d_model] or [B][n][d_model], found a rank-1 array"},
    {"{\"x\":[[[[1]]]]," W2 "}", ERRORS_INVALID_REQUEST, "/x", "nested more"},
    {"{\"x\":[[1,\"a\"]]," W2 "}", ERRORS_INVALID_REQUEST, "/x/0/1",
     "expected a number, found a string"},
    {"{\"x\":[[1,2],3]," W2 "}", ERRORS_INVALID_REQUEST, "/x/1",
     "expected an array"},
    {"{\"x\":[[]]," W2 "}", ERRORS_INVALID_REQUEST, "/x/0", "empty"},
    {"{\"x\":[]," W2 "}", ERRORS_INVALID_REQUEST, "/x", "empty"},
    {"{\"x\":\"abc\"," W2 "}", ERRORS_INVALID_REQUEST, "/x", "found a string"},
    {"{\"x\":[[1,2],[3,1e39]]," W2 "}", ERRORS_INVALID_REQUEST, "/x/1/1",
     "finite in float32"},
    {"{\"x\":[[1,2],[3,-1e400]]," W2 "}", ERRORS_INVALID_REQUEST, "/x/1/1",
     "finite in float32"},
    {"{" X2 ",\"x\":[[1,2]]," W2 "}", ERRORS_INVALID_REQUEST, "/x", "twice"},
    /* dimensions */
    {"{\"x\":[[1,2,3]]," W2 "}", ERRORS_INVALID_REQUEST, "/w_q",
     "the number of rows is 2, expected d_model (the width of x) = 3"},
    {"{" X2 ",\"w_q\":[[1,0,1],[0,1,1]],\"w_k\":[[1,0],[0,1]],"
     "\"w_v\":[[1,0],[0,1]],\"num_heads\":2}",
     ERRORS_INVALID_REQUEST, "/w_q/0", "expected a multiple of num_heads = 2"},
    {"{" X2 ",\"w_q\":[[1,0],[0,1]],\"w_k\":[[1,0,0],[0,1,0]],"
     "\"w_v\":[[1,0],[0,1]]}",
     ERRORS_INVALID_REQUEST, "/w_k/0", "the row width is 3, expected g*d_k = 2"},
    {"{" X2 ",\"w_q\":[[1,0],[0,1]],\"w_k\":[[1,0],[0,1],[1,1]],"
     "\"w_v\":[[1,0],[0,1]]}",
     ERRORS_INVALID_REQUEST, "/w_k", "the number of rows is 3, expected d_mem"},
    {"{" X2 ",\"w_q\":[[[1],[0]],[[0],[1]]],\"w_k\":[[1,0],[0,1]],"
     "\"w_v\":[[1,0],[0,1]],\"num_heads\":3,\"num_kv_heads\":1}",
     ERRORS_INVALID_REQUEST, "/w_q", "the number of heads is 2, expected "
                                     "num_heads = 3"},
    {"{" X2 ",\"w_q\":[[[1],[0]],[[0],[1]]],\"w_k\":[[[1],[0]],[[0],[1]]],"
     "\"w_v\":[[[1,0],[0,1],[1,1]]],\"num_heads\":2,\"num_kv_heads\":1}",
     ERRORS_INVALID_REQUEST, "/w_k", "the number of heads is 2, expected "
                                     "num_kv_heads = 1"},
    {"{" X2 "," W2 ",\"num_heads\":2,\"num_kv_heads\":3}",
     ERRORS_INVALID_REQUEST, "/num_kv_heads", "1 <= g <= h = 2"},
    {"{" X2 ",\"w_q\":[[1,0,1,0,1,0],[0,1,0,1,0,1]],"
     "\"w_k\":[[1,0,1,0],[0,1,0,1]],\"w_v\":[[1,0,1,0],[0,1,0,1]],"
     "\"num_heads\":3,\"num_kv_heads\":2}",
     ERRORS_INVALID_REQUEST, "/num_kv_heads", "g = 2 must divide num_heads h = 3"},
    {"{" X2 "," W2 ",\"num_heads\":2.5}", ERRORS_INVALID_REQUEST,
     "/num_heads", "expected an integer >= 1, found 2.5"},
    {"{" X2 "," W2 ",\"num_heads\":0}", ERRORS_INVALID_REQUEST, "/num_heads",
     "integer >= 1"},
    {"{" X2 "," W2 ",\"num_heads\":\"2\"}", ERRORS_INVALID_REQUEST,
     "/num_heads", "found a string"},
    {"{" X2 "," W2 ",\"w_o\":[[1],[2],[3]]}", ERRORS_INVALID_REQUEST, "/w_o",
     "the number of rows is 3, expected h*d_v = 2"},
    {"{" X2 "," W2 ",\"b_q\":[1,2,3]}", ERRORS_INVALID_REQUEST, "/b_q",
     "the length is 3, expected h*d_k = 2"},
    {"{" X2 "," W2 ",\"b_o\":[[1,2]]}", ERRORS_INVALID_REQUEST, "/b_o",
     "expected [d_out]"},
    {"{" X2 ",\"memory\":[[1,2,3]]," W2 "}", ERRORS_INVALID_REQUEST, "/w_k",
     "expected d_mem (the width of memory, or of x) = 3"},
    {"{\"x\":[[[1,2]]],\"memory\":[[1,2]]," W2 "}", ERRORS_INVALID_REQUEST,
     "/memory", "like x, found a rank-2 array"},
    {"{\"x\":[[[1,2]],[[1,2]]],\"memory\":[[[1,2]]]," W2 "}",
     ERRORS_INVALID_REQUEST, "/memory", "the batch size is 1, expected B = 2"},
    /* masks, enums, scale */
    {"{" X2 "," W2 ",\"key_padding_mask\":[false,true,1]}",
     ERRORS_INVALID_REQUEST, "/key_padding_mask/2",
     "expected a boolean, found a number"},
    {"{" X2 "," W2 ",\"key_padding_mask\":[false,true]}",
     ERRORS_INVALID_REQUEST, "/key_padding_mask",
     "the length is 2, expected m (keys) = 3"},
    {"{" X2 "," W2 ",\"key_padding_mask\":[[false,false,true]]}",
     ERRORS_INVALID_REQUEST, "/key_padding_mask",
     "expected [m] for a 2-D x"},
    {"{" X2 "," W2 ",\"tokens\":[[\"a\",\"b\",\"c\"]]}",
     ERRORS_INVALID_REQUEST, "/tokens", "expected [n] strings for a 2-D x"},
    {"{\"x\":[[[1,2]],[[3,4]]]," W2 ",\"key_padding_mask\":[[false]]}",
     ERRORS_INVALID_REQUEST, "/key_padding_mask",
     "the number of rows is 1, expected B (the batch size) = 2"},
    {"{" X2 "," W2 ",\"mask\":\"future\"}", ERRORS_INVALID_REQUEST, "/mask",
     "expected \"none\" or \"causal\", found \"future\""},
    {"{" X2 "," W2 ",\"return_weights\":\"all\"}", ERRORS_INVALID_REQUEST,
     "/return_weights", "\"none\", \"per_head\" or \"mean\""},
    {"{" X2 "," W2 ",\"encoding\":\"hex\"}", ERRORS_INVALID_REQUEST,
     "/encoding", "found \"hex\""},
    {"{" X2 "," W2 ",\"mask\":true}", ERRORS_INVALID_REQUEST, "/mask",
     "found a boolean"},
    /* the value as sent, UTF-8 kept, quotes and controls escaped */
    {"{" X2 "," W2 ",\"mask\":\"caus\xc3\xa9\"}", ERRORS_INVALID_REQUEST,
     "/mask", "found \"caus\xc3\xa9\""},
    {"{" X2 "," W2 ",\"mask\":\"c\\\"a\\u0000l\"}", ERRORS_INVALID_REQUEST,
     "/mask", "found \"c\\\"a\\u0000l\""},
    {"{" X2 "," W2 ",\"mask\":\"caus\\u0061l\",\"num_heads\":3}",
     ERRORS_INVALID_REQUEST, "/w_q/0", "multiple of num_heads = 3"},
    {"{" X2 "," W2 ",\"num_heads\":1e300}", ERRORS_TOO_LARGE, "",
     "num_heads is at least 1000000000000000; the limit --max-heads "
     "(ATTND_MAX_HEADS) is 128"},
    {"{" X2 "," W2 ",\"num_kv_heads\":129}", ERRORS_TOO_LARGE, "",
     "num_kv_heads is 129"},
    {"{\"x\":{\"dtype\":\"float\\u00332\",\"shape\":[1,2],"
     "\"data\":\"AAAAAAAAAA==\"}," W2 "}", ERRORS_INVALID_REQUEST, "/x/data",
     "decodes to 7 bytes"},
    {"{" X2 "," W2 ",\"scale\":0}", ERRORS_INVALID_REQUEST, "/scale", "> 0"},
    {"{" X2 "," W2 ",\"scale\":1e39}", ERRORS_INVALID_REQUEST, "/scale",
     "finite in float32"},
    /* analysis and top_k */
    {"{" X2 "," W2 ",\"analysis\":\"yes\"}", ERRORS_INVALID_REQUEST,
     "/analysis", "expected true or false, found a string"},
    {"{" X2 "," W2 ",\"top_k\":4}", ERRORS_INVALID_REQUEST, "/top_k",
     "expected 1 <= k <= m = 3 (keys), found 4"},
    {"{" X2 "," W2 ",\"top_k\":0}", ERRORS_INVALID_REQUEST, "/top_k",
     "integer >= 1"},
    {"{" X2 "," W2 ",\"top_k\":2,\"return_weights\":\"none\"}",
     ERRORS_INVALID_REQUEST, "/top_k", "return_weights is \"none\""},
    /* labels */
    {"{" X2 "," W2 ",\"tokens\":[\"a\",\"b\"]}", ERRORS_INVALID_REQUEST,
     "/tokens", "2 labels, expected n = 3"},
    {"{" X2 "," W2 ",\"tokens\":[\"a\",\"b\",3]}", ERRORS_INVALID_REQUEST,
     "/tokens/2", "expected a string"},
    {"{" X2 "," W2 ",\"memory_tokens\":\"abc\"}", ERRORS_INVALID_REQUEST,
     "/memory_tokens", "expected an array of strings"},
    {"{\"x\":[[[1,2]],[[3,4]]]," W2 ",\"tokens\":[[\"a\"],[\"b\",\"c\"]]}",
     ERRORS_INVALID_REQUEST, "/tokens/1", "2 labels, expected n = 1"},
    /* base64 tensors */
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],\"data\":\"AAAAAAAAAA==\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/data", "decodes to 7 bytes"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],\"data\":\"AAAAAAAAwH8\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/data", "multiple of 4"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],\"data\":\"AAAAAAAAwH8=\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/data",
     "value 1 (row-major) is NaN"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],\"data\":\"AAAAAAAAgH8=\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/data", "infinite"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],\"data\":\"AAAA*AAAAAA=\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/data",
     "invalid base64 character '*' at offset 4"},
    /* '=' inside the text is named as the fault, whatever the length
     * it gives */
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],\"data\":\"AA=AAAAAAAA=\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/data",
     "padding '=' at offset 2, before the end of the text"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],"
     "\"data\":\"AACAPw==AACAPw==\"}," W2 "}", ERRORS_INVALID_REQUEST,
     "/x/data", "padding '=' at offset 6, before the end of the text"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],"
     "\"data\":\"AACAPw==AACAPw=\"}," W2 "}", ERRORS_INVALID_REQUEST,
     "/x/data", "padding '=' at offset 6, before the end of the text"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],\"data\":\"AAAAAAAAA===\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/data",
     "3 '=' of padding from offset 9"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,1],\"data\":\"AAAA====\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/data",
     "4 '=' of padding from offset 4"},
    {"{\"x\":{\"dtype\":\"float64\",\"shape\":[1,2],\"data\":\"AAAAAAAAAAAA\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/dtype",
     "expected \"float32\", found \"float64\""},
    {"{\"x\":{\"dtype\":\"fl\xc3\xb6" "at32\",\"shape\":[1,2],"
     "\"data\":\"AAAAAAAAAAA=\"}," W2 "}", ERRORS_INVALID_REQUEST, "/x/dtype",
     "found \"fl\xc3\xb6" "at32\""},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[2],\"data\":\"AAAAAAAAAAA=\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/shape",
     "found a shape of rank 1"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,0],\"data\":\"\"}," W2 "}",
     ERRORS_INVALID_REQUEST, "/x/shape/1", "positive integer"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[4294967296,4294967296,"
     "4294967296],\"data\":\"\"}," W2 "}",
     ERRORS_INVALID_REQUEST, "/x/shape", "overflows"},
    {"{\"x\":{\"dtype\":\"float32\",\"data\":\"AAAAAAAAAAA=\"}," W2 "}",
     ERRORS_INVALID_REQUEST, "/x", "\"shape\" is missing"},
    {"{\"x\":{\"dtype\":\"float32\",\"shape\":[1,2],\"data\":\"AAAAAAAAAAB=\"},"
     W2 "}", ERRORS_INVALID_REQUEST, "/x/data", "non-canonical"},
    {"{" X2 "," W2 ",\"key_padding_mask\":{\"dtype\":\"float32\"}}",
     ERRORS_INVALID_REQUEST, "/key_padding_mask", "\"shape\" is missing"},
    {"{" X2 "," W2 ",\"key_padding_mask\":\"no\"}",
     ERRORS_INVALID_REQUEST, "/key_padding_mask", "of booleans"},
    {"{" X2 ",\"w_q\":{\"dtype\":\"float32\",\"shape\":[3,2],"
     "\"data\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"},\"w_k\":[[1,0],[0,1]],"
     "\"w_v\":[[1,0],[0,1]]}", ERRORS_INVALID_REQUEST, "/w_q/shape/0",
     "the number of rows is 3, expected d_model"},
};

START_TEST(test_codec_errors)
{
    const struct err_case *c = &err_cases[_i];
    expect_err(c->json, c->kind, c->field, c->part);
}
END_TEST

/* The one JSON string escaper (json/text.h), case by case. */
START_TEST(test_codec_text_json_string)
{
    static const struct {
        const char *in;
        size_t len;
        const char *out;
    } cases[] = {
        {"plain", 5, "\"plain\""},
        {"", 0, "\"\""},
        {"a\"b\\c/", 6, "\"a\\\"b\\\\c/\""},
        {"\b\f\n\r\t", 5, "\"\\b\\f\\n\\r\\t\""},
        {"\x01\x1f\x7f", 3, "\"\\u0001\\u001F\x7f\""},
        {"a\0b", 3, "\"a\\u0000b\""},
        /* well-formed UTF-8 as it is: 2, 3 and 4 bytes, the last code
         * point before the surrogates and U+10FFFF */
        {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xed\x9f\xbf\xf4\x8f\xbf\xbf",
         16,
         "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xed\x9f\xbf\xf4\x8f\xbf\xbf\""},
        /* ill-formed: each byte as U+00XX */
        {"\xc3", 1, "\"\\u00C3\""},
        {"\xc0\xaf", 2, "\"\\u00C0\\u00AF\""},         /* overlong '/' */
        {"\xed\xa0\x80", 3, "\"\\u00ED\\u00A0\\u0080\""}, /* a surrogate */
        {"\xf4\x90\x80\x80", 4,
         "\"\\u00F4\\u0090\\u0080\\u0080\""},          /* past U+10FFFF */
        {"\xe2\x82x", 3, "\"\\u00E2\\u0082x\""},       /* cut short */
        {"\xff", 1, "\"\\u00FF\""},
    };
    unsigned seed = 7;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        text_buf t = TEXT_BUF_INIT;
        size_t len;
        char *got;
        json_t *back;

        text_json_string(&t, cases[i].in, cases[i].len);
        got = text_take(&t, &len);
        ck_assert_ptr_nonnull(got);
        ck_assert_str_eq(got, cases[i].out);
        ck_assert_uint_eq(len, strlen(cases[i].out));
        back = json_loads(got, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        ck_assert_msg(back != NULL, "case %zu is not valid JSON", i);
        json_decref(back);
        free(got);
    }
    /* on every string jansson accepts (well-formed UTF-8) the escaper
     * writes exactly what jansson writes, so answers did not change */
    for (int it = 0; it < 20000; it++) {
        char in[24];
        size_t len = (size_t)(rand_r(&seed) % 24);
        json_t *j;

        for (size_t k = 0; k < len; k++) {
            int r = rand_r(&seed) % 10;
            in[k] = r < 6   ? (char)(0x20 + rand_r(&seed) % 0x60)
                    : r < 8 ? (char)(rand_r(&seed) % 0x20)
                            : (char)(0x80 + rand_r(&seed) % 0x80);
        }
        if (len >= 2 && it % 2) {
            in[0] = '\xc3';
            in[1] = '\xa9';
        }
        j = json_stringn(in, len);
        if (j != NULL) {
            char *want = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
            text_buf t = TEXT_BUF_INIT;
            char *got;
            text_json_string(&t, in, len);
            got = text_take(&t, NULL);
            ck_assert_str_eq(got, want);
            free(got);
            free(want);
            json_decref(j);
        }
    }
}
END_TEST

/* The buffer grows past its first allocation, keeps NUL bytes, hands its
 * text over and is empty afterwards. */
START_TEST(test_codec_text_grow_take)
{
    text_buf t = TEXT_BUF_INIT;
    size_t len;
    char *s, *at;

    s = text_take(&t, &len);
    ck_assert_str_eq(s, "");
    ck_assert_uint_eq(len, 0);
    free(s);
    for (int i = 0; i < 1000; i++)
        text_printf(&t, "%s%d", i ? "," : "[", i);
    text_append(&t, "]\0x", 3);
    at = text_extend(&t, 4);
    ck_assert_ptr_nonnull(at);
    memcpy(at, "tail", 4);
    ck_assert(!text_failed(&t));
    s = text_take(&t, &len);
    ck_assert_uint_eq(len, 3890 + 3 + 4);
    ck_assert_int_eq(memcmp(s, "[0,1,2,", 7), 0);
    ck_assert_int_eq(memcmp(s + 3890, "]\0xtail", 8), 0);
    ck_assert_ptr_null(t.data);
    ck_assert_uint_eq(t.len, 0);
    free(s);
    text_free(&t); /* an empty buffer */
}
END_TEST

START_TEST(test_codec_deep_nesting)
{
    /* 100000 nested arrays in an ignored field: refused as invalid_json at
     * depth 513, without recursing 100000 deep */
    size_t n = 100000, i;
    char *json = malloc(n + 64);
    memcpy(json, "{\"future\":", 10);
    for (i = 0; i < n; i++)
        json[10 + i] = '[';
    json[10 + n] = '\0';
    expect_err(json, ERRORS_INVALID_JSON, "", "nesting deeper than 512");
    free(json);
}
END_TEST

START_TEST(test_codec_error_body)
{
    codec_error e = {0};
    char *body;
    size_t len = 0;
    json_t *root, *err;

    codec_error_set(&e, ERRORS_INVALID_REQUEST, "/w_q/3/1",
                    "bad \"%s\" value", "q");
    codec_error_set(&e, ERRORS_INTERNAL, "/x", "second error is ignored");
    body = codec_error_body(&e, &len);
    ck_assert_ptr_nonnull(body);
    ck_assert_uint_eq(len, strlen(body));
    root = json_loads(body, 0, NULL);
    ck_assert_ptr_nonnull(root);
    err = json_object_get(root, "error");
    ck_assert_str_eq(json_string_value(json_object_get(err, "code")),
                     "invalid_request");
    ck_assert_str_eq(json_string_value(json_object_get(err, "message")),
                     "bad \"q\" value");
    ck_assert_str_eq(json_string_value(json_object_get(err, "field")),
                     "/w_q/3/1");
    json_decref(root);
    free(body);

    /* no pointer: "field" left out */
    memset(&e, 0, sizeof e);
    codec_error_set(&e, ERRORS_INVALID_JSON, NULL, "line %d", 3);
    body = codec_error_body(&e, NULL);
    root = json_loads(body, 0, NULL);
    err = json_object_get(root, "error");
    ck_assert_str_eq(json_string_value(json_object_get(err, "code")),
                     "invalid_json");
    ck_assert_ptr_null(json_object_get(err, "field"));
    json_decref(root);
    free(body);
}
END_TEST

/* Data-driven cases: tests/fixtures/codec/invalid/<case>.json with the
 * expectation on its first line: `// code field message-part`. */
START_TEST(test_codec_error_fixtures)
{
    DIR *dir = opendir(CODEC_FIXTURES "/invalid");
    struct dirent *de;
    int seen = 0;

    ck_assert_msg(dir != NULL, "cannot open %s/invalid", CODEC_FIXTURES);
    while ((de = readdir(dir)) != NULL) {
        char path[512], code[64], field[128], part[256], *body, *nl;
        FILE *f;
        long size;
        errors_kind kind;
        int k;
        limits_config l = lim_default();

        if (strstr(de->d_name, ".json") == NULL)
            continue;
        snprintf(path, sizeof path, "%s/invalid/%s", CODEC_FIXTURES,
                 de->d_name);
        f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, 0, SEEK_SET);
        body = malloc((size_t)size + 1);
        ck_assert_uint_eq(fread(body, 1, (size_t)size, f), (size_t)size);
        body[size] = '\0';
        fclose(f);
        nl = strchr(body, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        part[0] = '\0';
        ck_assert_int_ge(sscanf(body, "// %63s %127s %255[^\n]", code, field,
                                part), 2);
        if (strcmp(field, "-") == 0)
            field[0] = '\0';
        /* the first kind with that code: several statuses share one
         * (413, 414 and 431 are all too_large), the codec's is the first */
        kind = ERRORS_COUNT;
        for (k = 0; k < ERRORS_COUNT && kind == ERRORS_COUNT; k++)
            if (strcmp(errors_code((errors_kind)k), code) == 0)
                kind = (errors_kind)k;
        ck_assert_msg(kind != ERRORS_COUNT, "%s: unknown code %s", path, code);
        expect_err_lim(nl + 1, strlen(nl + 1), &l, kind, field,
                       part[0] ? part : NULL);
        free(body);
        seen++;
    }
    closedir(dir);
    ck_assert_int_ge(seen, 3);
}
END_TEST

#ifndef CODEC_JSON_SUITE
#define CODEC_JSON_SUITE "tests/robust/jsontestsuite/test_parsing"
#endif

/* The reader against JSONTestSuite (vendored by tests/robust): every y_ file
 * is JSON (any error but invalid_json: they are not requests), every n_ file
 * is invalid_json; i_ files may go either way but never crash. */
START_TEST(test_codec_json_suite)
{
    DIR *dir = opendir(CODEC_JSON_SUITE);
    struct dirent *de;
    int y = 0, n = 0;
    limits_config l = lim_default();

    ck_assert_msg(dir != NULL, "cannot open %s", CODEC_JSON_SUITE);
    while ((de = readdir(dir)) != NULL) {
        char path[512], *body;
        FILE *f;
        long size;
        codec_request *req = NULL;
        codec_error err = {0};
        int rc, invalid;

        if (de->d_name[0] != 'y' && de->d_name[0] != 'n' &&
            de->d_name[0] != 'i')
            continue;
        snprintf(path, sizeof path, "%s/%s", CODEC_JSON_SUITE, de->d_name);
        f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, 0, SEEK_SET);
        body = malloc((size_t)size + 1);
        ck_assert_uint_eq(fread(body, 1, (size_t)size, f), (size_t)size);
        fclose(f);
        rc = codec_parse(body, (size_t)size, &l, &req, &err);
        invalid = rc != 0 && err.kind == ERRORS_INVALID_JSON;
        codec_request_free(req);
        free(body);
        if (de->d_name[0] == 'y') {
            ck_assert_msg(!invalid, "%s is JSON, got: %s", de->d_name,
                          err.message);
            y++;
        } else if (de->d_name[0] == 'n') {
            ck_assert_msg(invalid, "%s is not JSON, got %s: %s", de->d_name,
                          rc ? errors_code(err.kind) : "success",
                          err.message);
            n++;
        }
    }
    closedir(dir);
    ck_assert_int_ge(y, 90);
    ck_assert_int_ge(n, 180);
}
END_TEST

/* -- limits ----------------------------------------------------------------- */

START_TEST(test_codec_limits)
{
    const char *json = "{\"x\":[[[1,2],[3,4],[5,6]],[[1,2],[3,4],[5,6]]],"
                       "\"w_q\":[[1,0,1,0],[0,1,0,1]],"
                       "\"w_k\":[[1,0,1,0],[0,1,0,1]],"
                       "\"w_v\":[[1,0,1,0],[0,1,0,1]],\"num_heads\":2}";
    size_t len = strlen(json);
    limits_config l;
    codec_request *req;

    /* B = 2, n = m = 3, d_model = 2, h = g = 2, d_k = d_v = 2, d_out = 4:
     * maps 2*2*3*3 = 36 values, output 24 */
    l = lim_default();
    req = parse_ok_lim(json, &l);
    codec_request_free(req);

    l = lim_default();
    l.max_body_bytes = len - 1;
    expect_err_lim(json, len, &l, ERRORS_TOO_LARGE, "",
                   "--max-body-bytes (ATTND_MAX_BODY_BYTES)");
    l = lim_default();
    l.max_dim = 3;
    expect_err_lim(json, len, &l, ERRORS_TOO_LARGE, "",
                   "the dimension d_out is 4; the limit --max-dim "
                   "(ATTND_MAX_DIM) is 3");
    l = lim_default();
    l.max_batch = 1;
    expect_err_lim(json, len, &l, ERRORS_TOO_LARGE, "",
                   "the batch size B is 2; the limit --max-batch "
                   "(ATTND_MAX_BATCH) is 1");
    l = lim_default();
    l.max_heads = 1;
    expect_err_lim(json, len, &l, ERRORS_TOO_LARGE, "",
                   "num_heads is 2; the limit --max-heads (ATTND_MAX_HEADS) "
                   "is 1");
    l = lim_default();
    l.max_map_elems = 35;
    expect_err_lim(json, len, &l, ERRORS_TOO_LARGE, "",
                   "attention maps would hold 36 values; the limit "
                   "--max-map-elems (ATTND_MAX_MAP_ELEMS) is 35");
    l = lim_default();
    l.max_map_elems = 23;
    expect_err_lim(json, len, &l, ERRORS_TOO_LARGE, "",
                   "--max-map-elems (ATTND_MAX_MAP_ELEMS)");
    /* top_k: 2 (index, weight) values per pick, 2*3*2*k=2 picks */
    {
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s,\"top_k\":2}", (int)(len - 1), json);
        l = lim_default();
        l.max_map_elems = 47;
        expect_err_lim(buf, strlen(buf), &l, ERRORS_TOO_LARGE, "",
                       "attention maps would hold 48 values");
        snprintf(buf, sizeof buf, "%.*s,\"analysis\":true,"
                 "\"return_weights\":\"none\"}", (int)(len - 1), json);
        l.max_map_elems = 7;
        expect_err_lim(buf, strlen(buf), &l, ERRORS_TOO_LARGE, "",
                       "the head similarity matrices would hold 2 x 2 x 2 "
                       "values");
    }
    l = lim_default();
    l.max_flops = 10;
    expect_err_lim(json, len, &l, ERRORS_TOO_LARGE, "",
                   "the limit --max-flops (ATTND_MAX_FLOPS) is 10");
}
END_TEST

/* sb_matrix of a [rows][cols] matrix whose row r is [1, r, r, ...], or
 * of `fill` everywhere when fill is not 0. */
static void sb_rows(sbuf *b, size_t rows, size_t cols, float fill)
{
    float *v = malloc(rows * cols * sizeof *v);

    ck_assert_ptr_nonnull(v);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            v[r * cols + c] = fill != 0.0f ? fill : c ? (float)r : 1.0f;
    sb_matrix(b, v, rows, cols);
    free(v);
}

/* The request b (an object) with `extra` ("\"value_norms\":true") added
 * costs `delta` more units of work than b alone, is refused with `part`
 * in the message when --max-flops is one unit short, and b alone is not. */
static void expect_extra_work(const sbuf *b, const char *extra,
                              uint64_t delta, const char *part)
{
    sbuf with = TEXT_BUF_INIT;
    limits_config l = lim_default();
    codec_request *req = parse_ok(b->data);
    uint64_t base = req->cost;

    codec_request_free(req);
    sb_printf(&with, "%.*s,%s}", (int)(b->len - 1), b->data, extra);
    req = parse_ok(with.data);
    ck_assert_uint_eq(req->cost, base + delta);
    codec_request_free(req);
    l.max_flops = base + delta - 1;
    req = parse_ok_lim(b->data, &l);
    codec_request_free(req);
    expect_err_lim(with.data, with.len, &l, ERRORS_TOO_LARGE, "", part);
    free(with.data);
}

/* value_norms' products (each key's value through each head's rows of
 * W_O) count against --max-flops: one query against many keys and a wide
 * W_O costs little else, and took seconds past the limit. */
START_TEST(test_codec_limits_value_norms_work)
{
    sbuf b = TEXT_BUF_INIT;
    size_t m = 64, d_out = 512;

    sb_printf(&b, "{\"x\":[[1,2]],\"memory\":");
    sb_rows(&b, m, 2, 0.0f);
    sb_printf(&b, ",\"w_q\":[[1,0],[0,1]],\"w_k\":[[1,0],[0,1]],"
                  "\"w_v\":[[1,0],[0,1]],\"w_o\":");
    sb_rows(&b, 2, d_out, 0.5f);
    sb_printf(&b, "}");
    /* B h m (2 d_v d_out + 2 d_out) */
    expect_extra_work(&b, "\"value_norms\":true",
                      (uint64_t)m * (2 * 2 * d_out + 2 * d_out),
                      "and value_norms' products");
    free(b.data);
}
END_TEST

/* value_norms with w_o multiplies each head's values by its rows of W_O
 * into an [m][d_out] buffer: with m = d_out = 2048 that is 16 MiB for a
 * body of 12 KB, counted against --max-request-bytes like the rest of the
 * workspace. */
START_TEST(test_codec_limits_value_norms_bytes)
{
    sbuf b = TEXT_BUF_INIT, vn = TEXT_BUF_INIT;
    size_t m = 2048, d_out = 2048;
    codec_request *req;
    limits_config l = lim_default();

    sb_printf(&b, "{\"x\":[[1]],\"memory\":");
    sb_rows(&b, m, 1, 1.0f);
    sb_printf(&b, ",\"w_q\":[[1]],\"w_k\":[[1]],\"w_v\":[[1]],"
                  "\"return_weights\":\"none\",\"w_o\":");
    sb_rows(&b, 1, d_out, 0.5f);
    sb_printf(&b, "}");
    sb_printf(&vn, "%.*s,\"value_norms\":true}", (int)(b.len - 1), b.data);
    l.max_request_bytes = (size_t)8 << 20;
    req = parse_ok_lim(b.data, &l);
    codec_request_free(req);
    expect_err_lim(vn.data, vn.len, &l, ERRORS_TOO_LARGE, "",
                   "--max-request-bytes");
    l.max_request_bytes = (size_t)17 << 20;
    req = parse_ok_lim(vn.data, &l);
    codec_request_free(req);
    free(b.data);
    free(vn.data);
}
END_TEST

/* top_k keeps every head's scores of a tile: blk h m floats a worker
 * (128 x 16 x 1024, 8 MiB), and each worker of the pool has its own. The
 * request fits 16 MiB on one worker, not on four. */
START_TEST(test_codec_limits_bytes_per_worker)
{
    sbuf b = TEXT_BUF_INIT;
    size_t n = 1024, h = 16;
    codec_request *req;
    limits_config l = lim_default();

    sb_printf(&b, "{\"x\":[");
    for (size_t r = 0; r < n; r++)
        sb_printf(&b, "%s[%zu]", r ? "," : "", r % 7);
    sb_printf(&b, "],\"num_heads\":%zu,\"top_k\":1", h);
    for (const char *w = "qkv"; *w; w++) {
        sb_printf(&b, ",\"w_%c\":[[", *w);
        for (size_t c = 0; c < h; c++)
            sb_printf(&b, "%s0.5", c ? "," : "");
        sb_printf(&b, "]]");
    }
    sb_printf(&b, "}");
    l.max_request_bytes = (size_t)16 << 20;
    l.workers = 1;
    req = parse_ok_lim(b.data, &l);
    codec_request_free(req);
    l.workers = 4;
    expect_err_lim(b.data, b.len, &l, ERRORS_TOO_LARGE, "",
                   "--max-request-bytes");
    free(b.data);
}
END_TEST

/* Every layer keeps its results and its own copy of what it inherits
 * (x [256][64], 64 KiB) until the answer is written: 2 layers fit 1 MiB,
 * 32 do not, and neither does the rollout's n^2 doubles over 1 layer. */
START_TEST(test_codec_limits_layers_bytes)
{
    sbuf b = TEXT_BUF_INIT, two = TEXT_BUF_INIT, many = TEXT_BUF_INIT,
         roll = TEXT_BUF_INIT;
    size_t n = 256, d_model = 64;
    codec_request *req;
    limits_config l = lim_default();

    sb_printf(&b, "{\"return_weights\":\"none\",\"x\":[");
    for (size_t r = 0; r < n; r++) {
        sb_printf(&b, "%s[", r ? "," : "");
        for (size_t c = 0; c < d_model; c++)
            sb_printf(&b, "%s%zu", c ? "," : "", (r + c) % 5);
        sb_printf(&b, "]");
    }
    sb_printf(&b, "]");
    for (const char *w = "qkv"; *w; w++) {
        sb_printf(&b, ",\"w_%c\":[", *w);
        for (size_t r = 0; r < d_model; r++)
            sb_printf(&b, "%s[0.5]", r ? "," : "");
        sb_printf(&b, "]");
    }
    sb_printf(&two, "%s,\"layers\":[{},{}]}", b.data);
    sb_printf(&many, "%s,\"layers\":[{}", b.data);
    for (size_t k = 1; k < 32; k++)
        sb_printf(&many, ",{}");
    sb_printf(&many, "]}");
    sb_printf(&roll, "%s,\"rollout\":true,\"layers\":[{}]}", b.data);
    l.max_request_bytes = (size_t)1 << 20;
    req = parse_ok_lim(two.data, &l);
    codec_request_free(req);
    expect_err_lim(many.data, many.len, &l, ERRORS_TOO_LARGE, "",
                   "layers need");
    expect_err_lim(roll.data, roll.len, &l, ERRORS_TOO_LARGE, "",
                   "and the rollout need");
    free(b.data);
    free(two.data);
    free(many.data);
    free(roll.data);
}
END_TEST

/* A request of at most CODEC_REF_FLOPS is computed again in float64 when
 * float32 overflows: its Q [512][1024] in doubles is 4 MiB where the
 * float32 workspace holds 2 MiB, and the budget counts the larger. */
START_TEST(test_codec_limits_ref_bytes)
{
    sbuf b = TEXT_BUF_INIT;
    size_t n = 512, d_k = 1024;
    codec_request *req;
    limits_config l = lim_default();

    sb_printf(&b, "{\"memory\":[[1]],\"w_v\":[[1]],"
                  "\"return_weights\":\"none\",\"x\":[");
    for (size_t r = 0; r < n; r++)
        sb_printf(&b, "%s[1e20]", r ? "," : "");
    sb_printf(&b, "]");
    for (const char *w = "qk"; *w; w++) {
        sb_printf(&b, ",\"w_%c\":[[", *w);
        for (size_t c = 0; c < d_k; c++)
            sb_printf(&b, "%s1", c ? "," : "");
        sb_printf(&b, "]]");
    }
    sb_printf(&b, "}");
    l.max_request_bytes = (size_t)3 << 20;
    expect_err_lim(b.data, b.len, &l, ERRORS_TOO_LARGE, "",
                   "--max-request-bytes");
    l.max_request_bytes = (size_t)5 << 20;
    req = parse_ok_lim(b.data, &l);
    codec_request_free(req);
    free(b.data);
}
END_TEST

/* The head figures' logarithms (each head's entropy and each pair of
 * heads' divergence, over every key of every row) count too: 128 heads
 * over 1024 tokens in a 39 KB body took 20 s. */
START_TEST(test_codec_limits_analysis_work)
{
    sbuf b = TEXT_BUF_INIT;
    size_t n = 16, h = 8;

    sb_printf(&b, "{\"x\":");
    sb_rows(&b, n, 2, 0.0f);
    sb_printf(&b, ",\"num_heads\":%zu,\"w_q\":", h);
    sb_rows(&b, 2, h, 0.5f);
    sb_printf(&b, ",\"w_k\":");
    sb_rows(&b, 2, h, 0.5f);
    sb_printf(&b, ",\"w_v\":");
    sb_rows(&b, 2, h, 0.5f);
    sb_printf(&b, ",\"return_weights\":\"none\"}");
    /* B n m (h + h (h - 1) / 2) logarithms of 100 units */
    expect_extra_work(&b, "\"analysis\":true",
                      (uint64_t)n * n * (h + h * (h - 1) / 2) * 100,
                      "and the head figures' logarithms");
    free(b.data);
}
END_TEST

/* What build.c expands or converts counts in --max-request-bytes too:
 * positions [n] given for a batch become [B][n], one int64 a query. */
START_TEST(test_codec_limits_copied_bytes)
{
    sbuf b = TEXT_BUF_INIT, pos = TEXT_BUF_INIT;
    size_t B = 64, n = 256;
    codec_request *req;
    limits_config l = lim_default();
    uint64_t plain, with;

    sb_printf(&b, "{\"x\":[");
    for (size_t e = 0; e < B; e++) {
        sb_printf(&b, "%s", e ? "," : "");
        sb_rows(&b, n, 2, 0.0f);
    }
    sb_printf(&b, "],\"w_q\":[[1],[0]],\"w_k\":[[1],[0]],\"w_v\":[[1],[0]],"
                  "\"return_weights\":\"none\"}");
    sb_printf(&pos, "%.*s,\"positions\":[", (int)(b.len - 1), b.data);
    for (size_t a = 0; a < n; a++)
        sb_printf(&pos, "%s%zu", a ? "," : "", 3 * a);
    sb_printf(&pos, "]}");
    l.max_request_bytes = (size_t)1 << 30;
    req = parse_ok_lim(b.data, &l);
    plain = req->ws_bytes + req->result_bytes + req->copied + req->inputs;
    codec_request_free(req);
    req = parse_ok_lim(pos.data, &l);
    with = req->ws_bytes + req->result_bytes + req->copied + req->inputs;
    codec_request_free(req);
    ck_assert_uint_ge(with, plain + (uint64_t)B * n * 8);
    l.max_request_bytes = with;
    req = parse_ok_lim(pos.data, &l);
    codec_request_free(req);
    l.max_request_bytes = with - 1;
    expect_err_lim(pos.data, pos.len, &l, ERRORS_TOO_LARGE, "",
                   "and the inputs converted or expanded");
    free(b.data);
    free(pos.data);
}
END_TEST

/* The input tensors a request keeps count in --max-request-bytes: the
 * body they were parsed from is freed, and they stay until the answer is
 * written. x of [1024][1024] (4 MiB of float32) with one head of d_k = 1
 * and no maps keeps more than its workspace and results together; a
 * limit 1 byte short of them and x is refused. */
START_TEST(test_codec_limits_input_bytes)
{
    sbuf b = TEXT_BUF_INIT;
    size_t n = 1024, d = 1024;
    codec_request *req;
    limits_config l = lim_default();
    uint64_t rest;

    sb_printf(&b, "{\"x\":");
    sb_rows(&b, n, d, 0.0f);
    sb_printf(&b, ",\"w_q\":");
    sb_rows(&b, d, 1, 1.0f);
    sb_printf(&b, ",\"w_k\":");
    sb_rows(&b, d, 1, 1.0f);
    sb_printf(&b, ",\"w_v\":");
    sb_rows(&b, d, 1, 1.0f);
    sb_printf(&b, ",\"return_weights\":\"none\"}");
    l.max_request_bytes = (size_t)1 << 30;
    req = parse_ok_lim(b.data, &l);
    ck_assert_uint_ge(req->inputs, (uint64_t)n * d * sizeof(float));
    rest = req->ws_bytes + req->result_bytes + req->copied;
    l.max_request_bytes = rest + req->inputs;
    codec_request_free(req);
    req = parse_ok_lim(b.data, &l);
    codec_request_free(req);
    l.max_request_bytes = rest + (size_t)n * d * sizeof(float) - 1;
    expect_err_lim(b.data, b.len, &l, ERRORS_TOO_LARGE, "",
                   "the input tensors");
    free(b.data);
}
END_TEST

START_TEST(test_codec_limits_maps_before_alloc)
{
    /* a small body asking for a gigantic map: n = 65536 rows of one value
     * as a base64 tensor, heads 128; refused as too_large, not attempted */
    sbuf b = TEXT_BUF_INIT;
    size_t n = 65536, shape[2] = {65536, 1};
    float *x = calloc(n, sizeof(float));
    limits_config l = lim_default();

    l.max_dim = n;
    sb_printf(&b, "{\"x\":");
    sb_tensor(&b, x, shape, 2);
    sb_printf(&b, ",\"num_heads\":128,\"w_q\":[[");
    for (size_t i = 0; i < 128; i++)
        sb_printf(&b, "%s1", i ? "," : "");
    sb_printf(&b, "]],\"w_k\":[[");
    for (size_t i = 0; i < 128; i++)
        sb_printf(&b, "%s1", i ? "," : "");
    sb_printf(&b, "]],\"w_v\":[[");
    for (size_t i = 0; i < 128; i++)
        sb_printf(&b, "%s1", i ? "," : "");
    sb_printf(&b, "]]}");
    expect_err_lim(b.data, b.len, &l, ERRORS_TOO_LARGE, "",
                   "attention maps would hold 549755813888 values");
    free(b.data);
    free(x);
}
END_TEST

/* -- numbers ------------------------------------------------------------------ */

static void fmt(float v, char *buf)
{
    size_t n = codec_num_format(v, buf);
    ck_assert_uint_le(n, CODEC_NUM_MAX);
    buf[n] = '\0';
}

START_TEST(test_codec_format_known)
{
    static const struct {
        float v;
        const char *text;
    } cases[] = {
        {0.1f, "0.1"},
        {1.0f / 3.0f, "0.33333334"},
        {1.0f, "1"},
        {-0.0f, "-0"},
        {0.0f, "0"},
        {100.0f, "100"},
        {123456789.0f, "123456790"},
        {1e10f, "1e10"},
        {0.001f, "0.001"},
        {1.5e-5f, "1.5e-5"},
        {-2.5f, "-2.5"},
        {1e-45f, "1e-45"},
        {3.4028235e38f, "3.4028235e38"},
        {1.17549435e-38f, "1.1754944e-38"},
        {16777216.0f, "16777216"},
    };
    char buf[32];
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fmt(cases[i].v, buf);
        ck_assert_msg(strcmp(buf, cases[i].text) == 0, "%.9g: '%s', "
                      "expected '%s'", (double)cases[i].v, buf,
                      cases[i].text);
    }
    fmt(NAN, buf);
    ck_assert_str_eq(buf, "null");
}
END_TEST

START_TEST(test_codec_format_round_trip)
{
    /* 1e6 random bit patterns (every finite one): the text reads back with
     * strtof to the same bits, and is valid JSON number syntax */
    uint32_t s = 0x9E3779B9u, u, back;
    char buf[32], *end;
    float v, r;
    size_t i, checked = 0;

    for (i = 0; i < 1000000; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        u = s;
        memcpy(&v, &u, sizeof v);
        if (!isfinite(v))
            continue;
        fmt(v, buf);
        r = strtof(buf, &end);
        TS_REQUIRE(*end == '\0', "'%s' not fully read", buf);
        memcpy(&back, &r, sizeof back);
        TS_REQUIRE(back == u, "0x%08x -> '%s' -> 0x%08x", u, buf, back);
        checked++;
    }
    ck_assert_uint_gt(checked, 990000);
}
END_TEST

/* The SSSE3 layout (one shuffle a number, from right-aligned digits) and the
 * portable one (digit by digit) write the same text: 64K values spread over
 * each binade from 2^-15 to 2^31 (both ends of the plain notation, whose
 * regimes change at powers of ten), the floats next to each power of ten in
 * that span, and 1e6 random bit patterns. The batch call
 * (codec_num_shortest_n then codec_num_layout) agrees too. */
static void layouts_agree(const float *v, size_t n)
{
    uint32_t sig[64];
    int ex[64];
    char a[CODEC_NUM_BUF + 1], b[CODEC_NUM_BUF + 1], c[CODEC_NUM_BUF + 1];
    char text[CODEC_NUM_RUN][16];
    unsigned char len[CODEC_NUM_RUN];
    size_t i, la, lb, lc;

    ck_assert_uint_le(n, 64);
    codec_num_shortest_n(v, n, sig, ex);
    codec_num_text_n(v, n, text, len);
    for (i = 0; i < n; i++) {
        la = codec_num_format(v[i], a);
        lb = codec_num_format_portable(v[i], b);
        lc = codec_num_layout(v[i], sig[i], ex[i], c);
        a[la] = b[lb] = c[lc] = '\0';
        TS_REQUIRE(la == lb && strcmp(a, b) == 0, "%.9g: '%s' vs "
                   "portable '%s'", (double)v[i], a, b);
        TS_REQUIRE(lc == la && strcmp(a, c) == 0, "%.9g: batch '%s' vs "
                   "'%s'", (double)v[i], c, a);
        TS_REQUIRE(len[i] == la && memcmp(text[i], a, la) == 0,
                   "%.9g: run text '%.*s' vs '%s'", (double)v[i],
                   (int)len[i], text[i], a);
    }
}

START_TEST(test_codec_format_layouts_agree)
{
    float v[64];
    uint32_t u, s = 0x2545F491u;
    size_t n = 0, i;
    int b, k, d;

    for (b = -15; b < 31; b++)
        for (i = 0; i < 65536; i++) {
            /* 2^b times 1 + i/65536, both signs */
            u = (uint32_t)(127 + b) << 23 | (uint32_t)i << 7;
            u |= (uint32_t)(i & 1) << 31;
            memcpy(&v[n++], &u, sizeof u);
            if (n == 64) {
                layouts_agree(v, n);
                n = 0;
            }
        }
    for (k = -5; k <= 10; k++) {
        char text[16];
        float p;
        snprintf(text, sizeof text, "1e%d", k);
        p = strtof(text, NULL);
        memcpy(&u, &p, sizeof u);
        for (d = -8; d <= 8; d++) {
            uint32_t w = u + (uint32_t)d;
            memcpy(&v[n++], &w, sizeof w);
        }
        layouts_agree(v, n);
        n = 0;
    }
    for (i = 0; i < 1000000; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        memcpy(&v[n++], &s, sizeof s);
        if (n == 64) {
            layouts_agree(v, n);
            n = 0;
        }
    }
    /* every plain layout (digit count, point place) and a few scientific
     * ones, both signs, in runs that end in every lane */
    for (k = 1; k <= 9; k++)
        for (d = -5; d <= 11; d++)
            for (i = 0; i < 24; i++) {
                char text[32];
                int j, at = 0;
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                text[at++] = (s & 1) ? '-' : '+';
                text[at++] = '.';
                for (j = 0; j < k; j++)
                    text[at++] = (char)('1' + (s >> (j * 3 % 29)) % 9);
                snprintf(text + at, sizeof text - (size_t)at, "e%d", d);
                v[n++] = strtof(text, NULL);
                if (n == 13 + (size_t)k) {
                    layouts_agree(v, n);
                    n = 0;
                }
            }
    layouts_agree(v, n);
    v[0] = 0.0f;
    v[1] = -0.0f;
    v[2] = INFINITY;
    v[3] = NAN;
    v[4] = -INFINITY;
    v[5] = 1.0f;
    layouts_agree(v, 6);
}
END_TEST

/* codec_num_shortest_n (AVX-512 where the CPU has it) gives dragonbox's
 * digits for the values the 8-wide loop could get wrong, in runs of every
 * length from 0 to 40 so each lane and each partial last block is used, and
 * writes nothing past the run. make test also compares every float32
 * (test-shortest-all). */
static void shortest_agrees(const float *v, size_t n)
{
    uint32_t s1[48], s2[48];
    int e1[48], e2[48];
    size_t i;

    ck_assert_uint_le(n, 40);
    for (i = 0; i < 48; i++) {
        s1[i] = 0xDEADBEEFu;
        e1[i] = -12345;
    }
    codec_num_shortest_n(v, n, s1, e1);
    codec_num_dragonbox_n(v, n, s2, e2);
    for (i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        TS_REQUIRE(s1[i] == s2[i] && e1[i] == e2[i],
                   "bits %08x: %ue%d, dragonbox %ue%d", (unsigned)u,
                   s1[i], e1[i], s2[i], e2[i]);
    }
    for (; i < 48; i++)
        TS_REQUIRE(s1[i] == 0xDEADBEEFu && e1[i] == -12345,
                   "written past %zu values at %zu", n, i);
}

START_TEST(test_codec_shortest_simd)
{
    static const uint32_t edge[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x00000002u, 0x00000003u,
        0x007FFFFFu, 0x00800000u, 0x00800001u, 0x01000000u, 0x3F800000u,
        0x3F7FFFFFu, 0x3F800001u, 0x4B7FFFFFu, 0x4B800000u, 0x7F7FFFFFu,
        0x7F000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u,
        0xFFFFFFFFu, 0x80000001u, 0xBF800000u, 0x3DCCCCCDu, 0x3E4CCCCDu,
        0x3EAAAAABu, 0x3C23D70Au, 0x3A83126Fu, 0x447A0000u, 0x4CBEBC20u,
        0x501502F9u, 0x5A0E1BCAu, 0x2F0AFF0Bu, 0x0CAB4BD0u, 0x1E3CE508u,
        0x7E967699u, 0x0DA24260u, 0x3F000000u, 0x3E800000u, 0x40000000u};
    float v[40], all[4096];
    uint32_t x = 0x9E3779B9u;
    size_t n, at, i;

    for (i = 0; i < 40; i++)
        memcpy(&v[i], &edge[i], sizeof v[i]);
    for (n = 0; n <= 40; n++)
        shortest_agrees(v, n);
    /* powers of two (the lower neighbour nearer) and their neighbours */
    for (i = 0; i < 254 * 3; i++) {
        uint32_t u = (uint32_t)(i / 3 + 1) << 23;
        u = u + (uint32_t)(i % 3) - 1u;
        memcpy(&all[i], &u, sizeof u);
    }
    for (at = 0; at < 254 * 3; at += 37)
        shortest_agrees(all + at, 254 * 3 - at < 37 ? 254 * 3 - at : 37);
    for (i = 0; i < 4096; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        memcpy(&all[i], &x, sizeof x);
    }
    for (at = 0, n = 0; at + n <= 4096; at += n, n = (n + 1) % 41)
        shortest_agrees(all + at, n);
}
END_TEST

/* The number reader (one-pass fast path and fast_float fallback) is
 * correctly rounded: 1e6 random decimals of 1 to 21 significant digits, a
 * random decimal point and exponent, read exactly like glibc's strtof (which
 * rounds correctly); and the float midpoints that a double-then-float
 * conversion would round wrongly. */
static float read_number(const char *text)
{
    codec_reader r;
    codec_error e;
    float v = NAN;
    int finite;

    memset(&e, 0, sizeof e);
    codec_reader_init(&r, text, strlen(text), NULL);
    ck_assert_msg(codec_json_number(&r, &v, &finite, &e) == 0, "'%s': %s",
                  text, e.message);
    ck_assert_msg(r.p == r.end, "'%s' not fully read", text);
    return v;
}

START_TEST(test_codec_numbers_correctly_rounded)
{
    static const char *const hard[] = {
        "16777217", "16777219", "33554434", "0.5000000298023223876953125",
        "1.00000005960464477539062500001", "1.0000000596046447753906249999",
        "3.4028235677973366e38", "3.4028235677973362e38", "1e-45", "7e-46",
        "1.1754942e-38", "1.17549435e-38", "9007199254740993",
        "0.1", "0.3", "1e22", "1e23", "123456789012345678", "-0.0",
        "8.589973e9", "4.0000002", "0.00000000000000000000012345"};
    uint64_t st = 0x243F6A8885A308D3ull;
    char buf[64];
    size_t i;

    for (i = 0; i < sizeof hard / sizeof hard[0]; i++) {
        float want = strtof(hard[i], NULL), got = read_number(hard[i]);
        TS_REQUIRE(memcmp(&want, &got, sizeof want) == 0,
                   "'%s': got %a, strtof %a", hard[i], (double)got,
                   (double)want);
    }
    for (i = 0; i < 1000000; i++) {
        int digits, point, exp, n = 0;
        float want, got;
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        digits = 1 + (int)(st % 21);
        point = (int)((st >> 8) % (uint64_t)(digits + 1));
        exp = (int)((st >> 16) % 61) - 30;
        if (st & (1ull << 40))
            buf[n++] = '-';
        for (int d = 0; d < digits; d++) {
            uint64_t t = st >> (20 + (d % 40));
            if (d == point && d > 0)
                buf[n++] = '.';
            buf[n++] = (char)('0' + (d == 0 ? 1 + t % 9 : t % 10));
        }
        if (st & (1ull << 41))
            n += snprintf(buf + n, sizeof buf - (size_t)n, "e%d", exp);
        buf[n] = '\0';
        want = strtof(buf, NULL);
        if (!isfinite(want))
            continue;
        got = read_number(buf);
        TS_REQUIRE(memcmp(&want, &got, sizeof want) == 0,
                   "'%s': got %a, strtof %a", buf, (double)got,
                   (double)want);
        /* the midpoints between neighbouring floats, written exactly */
        if (i % 8 == 0 && want != 0.0f) {
            double mid = ((double)want + (double)nextafterf(want, INFINITY)) / 2;
            snprintf(buf, sizeof buf, "%.17g", mid);
            want = strtof(buf, NULL);
            if (isfinite(want)) {
                got = read_number(buf);
                TS_REQUIRE(memcmp(&want, &got, sizeof want) == 0,
                           "midpoint '%s': got %a, strtof %a", buf,
                           (double)got, (double)want);
            }
        }
    }
}
END_TEST

/* -?(0|[1-9][0-9]*)(\.[0-9]+)? : the JSON numbers without an exponent. */
static int plain_json_number(const char *t)
{
    if (*t == '-')
        t++;
    if (*t == '0')
        t++;
    else if (*t >= '1' && *t <= '9')
        while (*t >= '0' && *t <= '9')
            t++;
    else
        return 0;
    if (*t == '.') {
        t++;
        if (!(*t >= '0' && *t <= '9'))
            return 0;
        while (*t >= '0' && *t <= '9')
            t++;
    }
    return *t == '\0';
}

/* The row reader (json/rows.c), with each of its loops this CPU has, takes
 * exactly the short plain decimals and reads them like strtof: rows of random numbers of 1 to 16 bytes (sign,
 * digits, point anywhere, leading zeros, exponents, doubled points, lone
 * signs) in random spacing; whatever it takes must equal strtof bit for
 * bit and end just before a ',' or ']'; a valid short number it refuses
 * is only allowed for the reasons its comment gives. */
START_TEST(test_codec_row_reader)
{
    uint64_t st = 0x9E3779B97F4A7C15ull;
    static char buf[8192];
    float out[512];
    size_t starts[512], ends[512];
    int round, taken_total = 0, isa = codec__row_isa(-1);

    /* every loop this CPU has: AVX-512 at fixed strides and block by block
     * (each with the ones below after it), SSSE3 alone */
    ck_assert_int_ge(isa, 1);
    for (round = 0; round < 20000 * isa; round++) {
        if (round % 20000 == 0)
            codec__row_isa(isa - round / 20000);
        size_t n = 0, count = 0, k, i, room;
        const char *p;
        while (count < 40 && n < sizeof buf - 200) {
            int len, j, point;
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            len = 1 + (int)(st % 14);
            point = (int)((st >> 8) % (uint64_t)(len + 2)); /* may be none */
            starts[count] = n;
            if (st & (1ull << 20))
                buf[n++] = '-';
            for (j = 0; j < len; j++) {
                uint64_t t = st >> (24 + (j % 36));
                if (j == point && j > 0)
                    buf[n++] = '.';
                /* mostly no leading zero, sometimes one */
                buf[n++] = (char)('0' + (j == 0 && (st & (1ull << 21))
                                             ? 1 + t % 9 : t % 10));
            }
            /* rare oddities the reader must refuse */
            switch ((st >> 50) % 64) {
            case 0: buf[n++] = 'e'; buf[n++] = '3'; break;
            case 1: buf[n++] = '.'; break;
            case 2: buf[n++] = ' '; break;
            case 3: n = starts[count]; buf[n++] = '-'; break;
            case 4: buf[n++] = '.'; buf[n++] = '5'; break;
            case 5: buf[n++] = '-'; buf[n++] = '1'; break; /* "12-1" */
            case 6: /* ".5" or "-.5": no digit before the point */
                n = starts[count];
                if (st & 1)
                    buf[n++] = '-';
                buf[n++] = '.';
                buf[n++] = '5';
                break;
            case 7: n = starts[count]; buf[n++] = '-'; buf[n++] = '-';
                    buf[n++] = '2'; break; /* "--2" */
            case 8: buf[n++] = '.'; buf[n++] = '.'; buf[n++] = '3'; break;
            case 9: /* a float midpoint (2^24 + 1): the row loops stop */
                n = starts[count];
                memcpy(buf + n, "16777217", 8);
                n += 8;
                break;
            default: break;
            }
            ends[count] = n;
            count++;
            buf[n++] = (st >> 60) == 0 ? ']' : ',';
        }
        memset(buf + n, ' ', 128); /* the reader needs 96 bytes of room */
        n += 128;
        p = buf;
        /* room for all of the row, or (one round in four) fewer */
        room = (st >> 40) % 4 ? 512 : 1 + (size_t)((st >> 42) % (count + 2));
        k = codec_json_row(&p, buf + n, out, room);
        ck_assert_uint_le(k, count);
        ck_assert_uint_le(k, room);
        if (k > 0) {
            ck_assert_ptr_eq(p, buf + ends[k - 1]);
            ck_assert(*p == ',' || *p == ']');
        } else {
            ck_assert_ptr_eq(p, buf);
        }
        for (i = 0; i < k; i++) {
            char one[64], *e;
            size_t len = ends[i] - starts[i];
            float want;
            memcpy(one, buf + starts[i], len);
            one[len] = '\0';
            want = strtof(one, &e);
            ck_assert_msg(*e == '\0' && memcmp(&want, &out[i], 4) == 0,
                          "'%s': row reader %a, strtof %a", one,
                          (double)out[i], (double)want);
            /* JSON's grammar: no leading zero before digits, digits on
             * both sides of the point */
            ck_assert_msg(!(one[one[0] == '-'] == '0' &&
                            one[(one[0] == '-') + 1] >= '0' &&
                            one[(one[0] == '-') + 1] <= '9'),
                          "'%s' taken with a leading zero", one);
            ck_assert_msg(plain_json_number(one), "'%s' taken, not a JSON "
                          "number", one);
        }
        taken_total += (int)k;
        /* the number it stopped at, when it is valid, short, followed by a
         * separator and not after the array's end, may only be a float
         * midpoint */
        if (k < count && k < room && (k == 0 || buf[ends[k - 1]] == ',') &&
            buf[ends[k]] != ' ' && ends[k] - starts[k] <= 15) {
            char one[64];
            size_t len = ends[k] - starts[k];
            codec_reader r;
            codec_error e;
            float v;
            int finite;
            memcpy(one, buf + starts[k], len);
            one[len] = '\0';
            memset(&e, 0, sizeof e);
            codec_reader_init(&r, one, len, NULL);
            if (strchr(one, 'e') == NULL &&
                codec_json_number(&r, &v, &finite, &e) == 0 &&
                r.p == r.end) {
                double d = strtod(one, NULL);
                /* a midpoint has 25 significant bits after rounding to
                 * double; anything else should have been taken */
                uint64_t bits;
                memcpy(&bits, &d, sizeof bits);
                ck_assert_msg((bits & ((1ull << 29) - 1)) == (1ull << 28),
                              "'%s' refused after %zu in [%.*s]", one, k,
                              (int)(ends[k] + 2), buf);
            }
        }
    }
    codec__row_isa(-1);
    ck_assert_int_gt(taken_total, 50000 * isa);
}
END_TEST

START_TEST(test_codec_format_shortest)
{
    /* no text with fewer significant digits reads back to the same float:
     * %.{k-1}g (the best of k-1 digits) must miss */
    uint32_t s = 0x12345678u, u, sig;
    char buf[400];
    float v;
    int e, k, i;

    for (i = 0; i < 100000; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        u = s;
        memcpy(&v, &u, sizeof v);
        if (!isfinite(v) || v == 0.0f)
            continue;
        codec_num_shortest(v, &sig, &e);
        for (k = 0; sig != 0; sig /= 10)
            k++;
        if (k > 1) {
            snprintf(buf, sizeof buf, "%.*g", k - 1, (double)v);
            ck_assert_msg(strtof(buf, NULL) != v, "%.9g has %d digits but "
                          "'%s' reads back", (double)v, k, buf);
        }
    }
}
END_TEST

START_TEST(test_codec_writer_chunks_identical)
{
    /* reading 1 byte at a time gives the same body as one big read */
    spec sp = {.B = 2, .n = 40, .d_model = 8, .h = 2, .g = 2, .d_k = 4,
               .d_v = 4, .batched = 1};
    char *json = build_request(&sp), *a, *b2;
    codec_request *r1 = parse_ok(json), *r2 = parse_ok(json);
    codec_error err = {0};
    codec_writer *w1, *w2;
    size_t la, lb = 0, got;

    ck_assert_int_eq(codec_run(r1, NULL, &err, NULL), 0);
    ck_assert_int_eq(codec_run(r2, NULL, &err, NULL), 0);
    r2->elapsed_ms = r1->elapsed_ms;
    w1 = codec_writer_new(r1);
    w2 = codec_writer_new(r2);
    a = drain_writer(w1, &la);
    b2 = malloc(la + 16);
    while ((got = codec_writer_read(w2, b2 + lb, 1)) == 1)
        lb++;
    ck_assert_uint_eq(lb, la);
    ck_assert(memcmp(a, b2, la) == 0);
    ck_assert_uint_eq(codec_writer_read(w2, b2, 16), 0);
    codec_writer_free(w1);
    codec_writer_free(w2);
    free(a);
    free(b2);
    free(json);
}
END_TEST

/* An executor that runs the tasks in reverse order on three pretend
 * workers: output must not depend on the order tasks run in. */
static void reverse_run(void *ctx, size_t count,
                        void (*fn)(void *, size_t, size_t), void *arg)
{
    (void)ctx;
    for (size_t i = count; i-- > 0;)
        fn(arg, i, i % 3);
}

/* Large maps are formatted in parallel chunks on the pool: the body must be
 * byte-identical to the one-thread writer's, per head and mean, plain and
 * batched (chunk boundaries fall inside rows and between batch elements). */
START_TEST(test_codec_writer_parallel_identical)
{
    static const spec specs[] = {
        {.B = 1, .n = 130, .d_model = 8, .h = 4, .g = 2, .d_k = 2, .d_v = 2},
        {.B = 3, .n = 97, .d_model = 6, .h = 3, .g = 3, .d_k = 2, .d_v = 2,
         .batched = 1, .causal = 1},
        {.B = 1, .n = 300, .d_model = 4, .h = 1, .g = 1, .d_k = 2, .d_v = 2,
         .weights = "mean"},
    };
    const attn_executor rev = {reverse_run, 3, NULL};

    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char *json = build_request(&specs[i]), *a, *b;
        codec_request *r1 = parse_ok(json), *r2 = parse_ok(json);
        codec_error err = {0};
        codec_writer *w1, *w2;
        size_t la, lb;

        ck_assert_msg(codec_run(r1, NULL, &err, NULL) == 0, "%s", err.message);
        ck_assert_msg(codec_run(r2, &rev, &err, NULL) == 0, "%s", err.message);
        ck_assert_ptr_eq(r2->exec, &rev);
        r2->elapsed_ms = r1->elapsed_ms;
        w1 = codec_writer_new(r1);
        w2 = codec_writer_new(r2);
        a = drain_writer(w1, &la);
        b = drain_writer(w2, &lb);
        codec_writer_free(w1);
        codec_writer_free(w2);
        ck_assert_msg(la == lb && memcmp(a, b, la) == 0,
                      "spec %zu: parallel body differs (%zu vs %zu bytes)", i,
                      lb, la);
        ck_assert(la > 65536 * 2); /* the parallel path was taken */
        free(a);
        free(b);
        free(json);
    }
}
END_TEST

#ifdef CODEC_TEST_STANDALONE
/* Allocation failure, each allocation in turn (jansson's and the library's
 * own test style). The standalone binary is linked with --wrap=malloc etc.,
 * so the codec's (and libattn.a's) allocations come here; jansson, a shared
 * library, allocates unwrapped. Leaks on these paths show in the SAN=1
 * build, whose LeakSanitizer checks at exit. */
void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);

static long alloc_fail_at = -1, alloc_seen;

static int alloc_should_fail(void)
{
    return alloc_fail_at >= 0 && alloc_seen++ == alloc_fail_at;
}

void *__wrap_malloc(size_t size)
{
    return alloc_should_fail() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return alloc_should_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    return alloc_should_fail() ? NULL : __real_realloc(p, size);
}

/* Fails each allocation of parse, run and writer in turn for json (owned,
 * freed here): every failure is 503 unavailable and frees everything, and
 * the run that no failure touched gives the same body. At least `least`
 * allocations happen. */
/* A failed allocation leaves the text buffer failed: later appends do
 * nothing, text_take frees and returns NULL, nothing leaks. */
START_TEST(test_codec_text_sticky_failure)
{
    text_buf t = TEXT_BUF_INIT;

    text_puts(&t, "{");
    alloc_seen = 0;
    alloc_fail_at = 0; /* the next growth fails */
    for (int i = 0; i < 100; i++)
        text_printf(&t, "\"key%d\":%d,", i, i);
    alloc_fail_at = -1;
    ck_assert(text_failed(&t));
    text_puts(&t, "}"); /* room again, but the buffer stays failed */
    ck_assert(text_failed(&t));
    ck_assert_ptr_null(text_extend(&t, 1));
    ck_assert_ptr_null(text_take(&t, NULL));
    ck_assert_ptr_null(t.data);
    ck_assert(!text_failed(&t)); /* empty again, usable */
}
END_TEST

static void alloc_failure_run(char *json, long least)
{
    char *reference = NULL;
    size_t ref_len = 0;
    long k;
    int completed = 0;
    limits_config lim = lim_default();

    for (k = 0; !completed && k < 10000; k++) {
        codec_request *req = NULL;
        codec_error err = {0};
        codec_writer *w = NULL;
        char buf[256];
        size_t got;
        int rc;

        alloc_seen = 0;
        alloc_fail_at = k;
        rc = codec_parse(json, strlen(json), &lim, &req, &err);
        alloc_fail_at = -1;
        if (rc != 0) {
            ck_assert_ptr_null(req);
            ck_assert_msg(err.kind == ERRORS_UNAVAILABLE,
                          "allocation %ld failed: %s (%s)", k,
                          errors_code(err.kind), err.message);
            continue;
        }
        alloc_fail_at = k;
        rc = codec_run(req, NULL, &err, NULL);
        alloc_fail_at = -1;
        if (rc != 0) {
            ck_assert_msg(err.kind == ERRORS_UNAVAILABLE, "run: %s",
                          err.message);
            codec_request_free(req);
            continue;
        }
        alloc_fail_at = k;
        w = codec_writer_new(req);
        alloc_fail_at = -1;
        if (w == NULL)
            continue; /* req freed by codec_writer_new */
        if (reference == NULL) {
            reference = drain_writer(w, &ref_len);
        } else {
            /* once the writer exists, the body is whole */
            size_t n = 0;
            char *body;
            alloc_fail_at = 0; /* every later allocation would fail */
            alloc_seen = 0;
            body = __real_malloc(ref_len + 1);
            while ((got = codec_writer_read(w, buf, sizeof buf)) > 0) {
                ck_assert_uint_le(n + got, ref_len);
                memcpy(body + n, buf, got);
                n += got;
            }
            alloc_fail_at = -1;
            ck_assert_uint_eq(n, ref_len);
            /* elapsed_ms differs; the arrays before "meta" agree */
            ck_assert(memcmp(body, reference,
                             (size_t)(strstr(reference, "\"meta\"") -
                                      reference)) == 0);
            free(body);
        }
        codec_writer_free(w);
        completed = alloc_seen <= k;
    }
    ck_assert_msg(completed, "never completed without a failure");
    ck_assert_int_ge(k, least);
    free(reference);
    free(json);
}

START_TEST(test_codec_alloc_failure)
{
    spec sp = {.B = 2, .n = 3, .m = 4, .d_model = 4, .d_mem = 3, .h = 2,
               .g = 1, .d_k = 2, .d_v = 2, .batched = 1, .cross = 1,
               .w3d = 1, .bias = 1, .kpm = 2, .tokens = 2, .wo = 1,
               .d_out = 3, .analysis = 1, .top_k = 2};
    /* parse, 3-D conversions, labels, results, writer segments */
    alloc_failure_run(build_request(&sp), 15);
}
END_TEST

/* The v2 paths: layers inheriting defaults with rollout, out_in and packed
 * weights, every score rule, the extras, store: true (the values kept
 * until the request has been computed). */
START_TEST(test_codec_alloc_failure_v2)
{
    const char *json =
        "{\"x\":[[0.5,-1,0.25],[1,0.25,0],[0,1,-0.5]],\"num_heads\":2,"
        "\"num_kv_heads\":1,\"weight_layout\":\"out_in\","
        "\"w_qkv\":[[1,0,0],[0,1,0],[0,0,1],[1,1,0],[0,1,1],[1,0,1],"
        "[0.5,0,0],[0,0.5,0]],\"b_qkv\":[0,0,0,0,0,0,0.5,0.5],"
        "\"w_o\":[[1,0,0,1],[0,1,1,0]],"
        "\"positions\":[4,5,6],\"rope\":{\"theta\":100},\"alibi\":true,"
        "\"window\":{\"left\":1},\"softcap\":4,\"global_tokens\":[0],"
        "\"qk_norm\":{\"q_weight\":[1,1],\"k_weight\":[1,0.5]},"
        "\"attn_bias\":[[0,0.5,0],[0,0,0],[0.25,0,0]],"
        "\"attn_mask\":[[false,false,false],[true,false,false],"
        "[false,false,false]],\"value_norms\":true,\"return_qk\":true,"
        "\"tokens\":[\"a\",\"b\",\"c\"],\"rollout\":true,\"store\":true,"
        "\"layers\":[{},{\"mask\":\"causal\",\"x\":[[1,0,0],[0,1,0],"
        "[0,0,1]]}]}";
    alloc_failure_run(strdup(json), 30);
}
END_TEST

/* A map large enough for the parallel fill, whose buffers the writer
 * allocates on first use: when that allocation fails, the body is written
 * on one thread, byte for byte the same. */
START_TEST(test_codec_alloc_parallel_buffers)
{
    spec sp = {.B = 1, .n = 130, .d_model = 8, .h = 4, .g = 2, .d_k = 2,
               .d_v = 2};
    const attn_executor rev = {reverse_run, 3, NULL};
    char *json = build_request(&sp), *a, *b;
    codec_request *r1 = parse_ok(json), *r2 = parse_ok(json);
    codec_error err = {0};
    codec_writer *w1, *w2;
    size_t la, lb;

    ck_assert_int_eq(codec_run(r1, &rev, &err, NULL), 0);
    ck_assert_int_eq(codec_run(r2, &rev, &err, NULL), 0);
    r2->elapsed_ms = r1->elapsed_ms;
    w1 = codec_writer_new(r1);
    w2 = codec_writer_new(r2);
    ck_assert_ptr_nonnull(w1);
    ck_assert_ptr_nonnull(w2);
    a = drain_writer(w1, &la);
    ck_assert(la > 65536 * 2); /* a map for the parallel fill */
    b = __real_malloc(la + 1);
    lb = 0;
    alloc_seen = 0;
    alloc_fail_at = 0; /* the buffers' allocation fails */
    {
        size_t got;
        while (lb < la && (got = codec_writer_read(w2, b + lb,
                                                    la - lb < 4096 ? la - lb
                                                                   : 4096)) > 0)
            lb += got;
    }
    alloc_fail_at = -1;
    ck_assert_int_ge(alloc_seen, 1); /* it was tried */
    ck_assert_uint_eq(lb, la);
    ck_assert(memcmp(a, b, la) == 0);
    codec_writer_free(w1);
    codec_writer_free(w2);
    free(a);
    free(b);
    free(json);
}
END_TEST
#endif

Suite *codec_suite(void)
{
    Suite *s = suite_create("codec");
    TCase *tc = tcase_create("codec");

    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, rng_reset, NULL);
    tcase_add_test(tc, test_codec_self_2d);
    tcase_add_test(tc, test_codec_layouts_agree);
    tcase_add_test(tc, test_codec_gqa_3d_bias_scale);
    tcase_add_test(tc, test_codec_mqa_cross);
    tcase_add_test(tc, test_codec_batch_padding);
    tcase_add_test(tc, test_codec_padding_broadcast_cross_batched);
    tcase_add_test(tc, test_codec_base64_in_out);
    tcase_add_test(tc, test_codec_weights_none);
    tcase_add_test(tc, test_codec_literal_request);
    tcase_add_test(tc, test_codec_analysis);
    tcase_add_test(tc, test_codec_top_k);
    tcase_add_test(tc, test_codec_float32_overflow_inside);
    tcase_add_test(tc, test_codec_float32_loose_recomputed);
    tcase_add_test(tc, test_codec_float32_loose_recomputed_large);
    tcase_add_test(tc, test_codec_rope_dim_zero);
    tcase_add_test(tc, test_codec_float32_offsets_recomputed);
    tcase_add_test(tc, test_codec_bool_tensor_object);
    tcase_add_test(tc, test_codec_layers_count_limited);
    tcase_add_test(tc, test_codec_global_tokens_empty);
    tcase_add_test(tc, test_codec_positions_exact);
    tcase_add_test(tc, test_codec_rope_numbers_exact);
    tcase_add_test(tc, test_codec_labels_lone_surrogates);
    tcase_add_test(tc, test_codec_lib_fixtures);
    tcase_add_test(tc, test_codec_numbers_in);
    tcase_add_test(tc, test_codec_escapes_and_unknown);
    tcase_add_test(tc, test_codec_layout_values);
    tcase_add_loop_test(tc, test_codec_errors, 0,
                        (int)(sizeof err_cases / sizeof err_cases[0]));
    tcase_add_test(tc, test_codec_error_body);
    tcase_add_test(tc, test_codec_text_json_string);
    tcase_add_test(tc, test_codec_text_grow_take);
    tcase_add_test(tc, test_codec_deep_nesting);
    tcase_add_test(tc, test_codec_json_suite);
    tcase_add_test(tc, test_codec_error_fixtures);
    tcase_add_test(tc, test_codec_limits);
    tcase_add_test(tc, test_codec_limits_maps_before_alloc);
    tcase_add_test(tc, test_codec_limits_value_norms_work);
    tcase_add_test(tc, test_codec_limits_value_norms_bytes);
    tcase_add_test(tc, test_codec_limits_bytes_per_worker);
    tcase_add_test(tc, test_codec_limits_layers_bytes);
    tcase_add_test(tc, test_codec_limits_ref_bytes);
    tcase_add_test(tc, test_codec_limits_analysis_work);
    tcase_add_test(tc, test_codec_limits_copied_bytes);
    tcase_add_test(tc, test_codec_limits_input_bytes);
    tcase_add_test(tc, test_codec_format_known);
    tcase_add_test(tc, test_codec_format_round_trip);
    tcase_add_test(tc, test_codec_format_layouts_agree);
    tcase_add_test(tc, test_codec_shortest_simd);
    tcase_add_test(tc, test_codec_numbers_correctly_rounded);
    tcase_add_test(tc, test_codec_row_reader);
    tcase_add_test(tc, test_codec_format_shortest);
    tcase_add_test(tc, test_codec_writer_chunks_identical);
    tcase_add_test(tc, test_codec_writer_parallel_identical);
    suite_add_tcase(s, tc);
#ifdef CODEC_TEST_STANDALONE
    tc = tcase_create("alloc");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_codec_alloc_failure);
    tcase_add_test(tc, test_codec_text_sticky_failure);
    tcase_add_test(tc, test_codec_alloc_failure_v2);
    tcase_add_test(tc, test_codec_alloc_parallel_buffers);
    suite_add_tcase(s, tc);
#endif
    return s;
}

#ifdef CODEC_TEST_STANDALONE
int main(void)
{
    SRunner *sr = srunner_create(codec_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
#endif

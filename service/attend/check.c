/* attend/check.c: the request's dimensions, derived from the shapes of its
 * fields and checked against each other (messages say what was expected and
 * what was found, with a JSON Pointer to the first offending dimension),
 * and its limits, with overflow-checked products, all before any large
 * allocation. Steps: the sources (x, memory, value), the heads, the
 * projections (separate or packed, in either weight layout), the biases,
 * the masks and positions, the score rules, the labels. */
#include "attend/parse.h"

#include <stdio.h>
#include <string.h>

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
 * quotient in *out. The message names the dimension as what, followed by
 * " (what_doc)" unless what_doc is NULL. */
static int codec__split(const codec_array *a, const char *ptr, int k,
                        size_t per, const char *per_doc, const char *what,
                        const char *what_doc, size_t *out, codec_error *err)
{
    char p[300];
    if (a->shape[k] % per == 0) {
        *out = a->shape[k] / per;
        return 0;
    }
    codec_array_dim_ptr(a, ptr, k, p, sizeof p);
    codec_error_set(err, ERRORS_INVALID_REQUEST, p,
                    "%s: %s%s%s%s is %zu, expected a multiple of %s = %zu",
                    ptr, what, what_doc ? " (" : "", what_doc ? what_doc : "",
                    what_doc ? ")" : "", a->shape[k], per_doc, per);
    return -1;
}

static int codec__missing(const char *ptr, const char *doc, codec_error *err)
{
    codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                    "%s: missing required field (%s)", ptr, doc);
    return -1;
}

/* Counts above this are read as this by the parser. */
#define CODEC__COUNT_MAX ((size_t)1000000000000000ULL)

static int codec__too_large(codec_error *err, const char *what, size_t value,
                            const char *flag, const char *env, uint64_t limit)
{
    codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                    "%s is %s%zu; the limit %s (%s) is %llu", what,
                    value >= CODEC__COUNT_MAX ? "at least " : "", value, flag,
                    env, (unsigned long long)limit);
    return -1;
}

/* -- dimensions ----------------------------------------------------------- */

/* x, memory and value: B, n, m, d_model, d_mem. */
static int codec__sources(const codec__fields *f, attn_dims *d,
                          codec_error *err)
{
    const codec_array *x = &f->x, *src;
    int b3 = x->rank == 3;

    if (x->data == NULL)
        return codec__missing("/x", "[n][d_model] or [B][n][d_model]", err);
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
    src = &f->value;
    if (src->data != NULL) {
        if (src->rank != x->rank) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, "/value",
                            "/value: expected %s like x, found a rank-%d "
                            "array", b3 ? "[B][m][d_val]" : "[m][d_val]",
                            src->rank);
            return -1;
        }
        if ((b3 && codec__dim(src, "/value", 0, d->B, "B", "the batch size",
                              err) != 0) ||
            codec__dim(src, "/value", b3, d->m, "m (the keys: rows of "
                       "memory, or of x)", "the number of rows", err) != 0)
            return -1;
    }
    return 0;
}

static int codec__heads(const codec__fields *f, attn_dims *d,
                        codec_error *err)
{
    d->h = f->seen[F_NUM_HEADS] ? f->num_heads : 1;
    d->g = f->seen[F_NUM_KV_HEADS] ? f->num_kv_heads : d->h;
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
    return 0;
}

/* One projection of `heads` heads from inputs of width `in`: 2-D
 * [in][heads*per] (in_out) or [heads*per][in] (out_in), 3-D
 * [heads][in][per] (in_out) or [heads][per][in] (out_in). *per is derived
 * when 0 on entry, else checked; out_doc names heads*per ("g*d_k"). */
static int codec__proj(const codec_array *a, const char *ptr, int out_in,
                       size_t in, const char *in_doc, size_t heads,
                       const char *heads_doc, size_t *per,
                       const char *per_doc, const char *out_doc,
                       codec_error *err)
{
    const char *in_what = out_in ? "the row width" : "the number of rows";
    const char *out_what = out_in ? "the number of rows" : "the row width";

    if (a->rank == 2) {
        if (codec__dim(a, ptr, out_in ? 1 : 0, in, in_doc, in_what, err))
            return -1;
        if (*per != 0)
            return codec__dim(a, ptr, out_in ? 0 : 1, heads * *per, out_doc,
                              out_what, err);
        return codec__split(a, ptr, out_in ? 0 : 1, heads, heads_doc,
                            out_what, out_doc, per, err);
    }
    if (codec__dim(a, ptr, 0, heads, heads_doc, "the number of heads", err) ||
        codec__dim(a, ptr, out_in ? 2 : 1, in, in_doc, in_what, err))
        return -1;
    if (*per == 0) {
        *per = a->shape[out_in ? 1 : 2];
        return 0;
    }
    return codec__dim(a, ptr, out_in ? 1 : 2, *per, per_doc, out_what, err);
}

/* The packed w_qkv: d_k = d_v = outputs / (h + 2g). */
static int codec__packed(const codec__fields *f, attn_dims *d,
                         codec_error *err)
{
    int oi = f->weight_layout == 1;
    const char *clash = f->w_q.data ? "w_q" : f->w_k.data ? "w_k"
                        : f->w_v.data ? "w_v" : NULL;
    size_t outs = 0;

    if (clash != NULL) {
        char ptr[8];
        snprintf(ptr, sizeof ptr, "/%s", clash);
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: w_qkv packs the three projections and excludes "
                        "w_q, w_k and w_v; send one form or the other", ptr);
        return -1;
    }
    if (f->seen[F_QKV_ORDER] && f->qkv_order == 1 && d->g != d->h) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/qkv_order",
                        "/qkv_order: \"per_head\" packs each head's query, "
                        "key and value together and needs num_kv_heads == "
                        "num_heads; found g = %zu, h = %zu", d->g, d->h);
        return -1;
    }
    if (codec__dim(&f->w_qkv, "/w_qkv", oi ? 1 : 0, d->d_model,
                   "d_model (the width of x)",
                   oi ? "the row width" : "the number of rows", err) ||
        codec__split(&f->w_qkv, "/w_qkv", oi ? 0 : 1, d->h + 2 * d->g,
                     "num_heads + 2*num_kv_heads",
                     oi ? "the number of rows" : "the row width",
                     "h*d_k + 2*g*d_k", &outs, err))
        return -1;
    d->d_k = d->d_v = outs;
    if (f->memory.data != NULL && d->d_mem != d->d_model) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/memory",
                        "/memory: rows of %zu values, but the packed w_qkv "
                        "projects inputs of d_model = %zu", d->d_mem,
                        d->d_model);
        return -1;
    }
    if (f->value.data != NULL &&
        f->value.shape[f->value.rank - 1] != d->d_model) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/value",
                        "/value: rows of %zu values, but the packed w_qkv "
                        "projects inputs of d_model = %zu",
                        f->value.shape[f->value.rank - 1], d->d_model);
        return -1;
    }
    return 0;
}

/* w_q, w_k, w_v (or w_qkv) and w_o: d_k, d_v, d_out. */
static int codec__projections(const codec__fields *f, attn_dims *d,
                              codec_error *err)
{
    int oi = f->weight_layout == 1;
    size_t d_val = f->value.data ? f->value.shape[f->value.rank - 1]
                                 : d->d_mem;

    if (f->w_qkv.data != NULL) {
        if (codec__packed(f, d, err) != 0)
            return -1;
    } else if (f->seen[F_QKV_ORDER] && f->qkv_order == 1) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/qkv_order",
                        "/qkv_order: applies to w_qkv and b_qkv, which are "
                        "not given");
        return -1;
    } else {
        if (f->w_q.data == NULL)
            return codec__missing("/w_q", "[d_model][h*d_k] or "
                                  "[h][d_model][d_k]; or w_qkv", err);
        if (codec__proj(&f->w_q, "/w_q", oi, d->d_model,
                        "d_model (the width of x)", d->h, "num_heads",
                        &d->d_k, "d_k", "h*d_k", err))
            return -1;
        if (f->w_k.data == NULL)
            return codec__missing("/w_k", "[d_mem][g*d_k] or "
                                  "[g][d_mem][d_k]", err);
        if (codec__proj(&f->w_k, "/w_k", oi, d->d_mem,
                        "d_mem (the width of memory, or of x)", d->g,
                        "num_kv_heads", &d->d_k, "d_k (from w_q)", "g*d_k",
                        err))
            return -1;
        if (f->w_v.data == NULL)
            return codec__missing("/w_v", "[d_mem][g*d_v] or "
                                  "[g][d_mem][d_v]", err);
        if (codec__proj(&f->w_v, "/w_v", oi, d_val,
                        f->value.data ? "d_val (the width of value)"
                                      : "d_mem (the width of memory, or of "
                                        "x)",
                        d->g, "num_kv_heads", &d->d_v, "d_v", "g*d_v", err))
            return -1;
    }
    if (f->w_o.data != NULL) {
        if (codec__dim(&f->w_o, "/w_o", oi ? 1 : 0, d->h * d->d_v, "h*d_v",
                       oi ? "the row width" : "the number of rows", err))
            return -1;
        d->d_out = f->w_o.shape[oi ? 0 : 1];
    } else {
        d->d_out = d->h * d->d_v;
    }
    return 0;
}

static int codec__biases(const codec__fields *f, const attn_dims *d,
                         codec_error *err)
{
    if (f->b_qkv.data != NULL) {
        const char *clash = f->b_q.data ? "b_q" : f->b_k.data ? "b_k"
                            : f->b_v.data ? "b_v" : NULL;
        if (f->w_qkv.data == NULL) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, "/b_qkv",
                            "/b_qkv: the packed bias goes with the packed "
                            "w_qkv, which is not given (use b_q, b_k, b_v)");
            return -1;
        }
        if (clash != NULL) {
            char ptr[8];
            snprintf(ptr, sizeof ptr, "/%s", clash);
            codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                            "%s: b_qkv packs the three biases and excludes "
                            "b_q, b_k and b_v; send one form or the other",
                            ptr);
            return -1;
        }
        if (codec__dim(&f->b_qkv, "/b_qkv", 0, (d->h + 2 * d->g) * d->d_k,
                       "h*d_k + 2*g*d_k", "the length", err))
            return -1;
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
    return 0;
}

/* A [len] or [B][len] field (key_padding_mask, positions): the [B] form
 * only with a batched x. */
static int codec__per_batch(const codec_array *a, const char *ptr, int b3,
                            size_t B, size_t len, const char *len_doc,
                            codec_error *err)
{
    char sym[2] = {len_doc[0], '\0'}; /* "m (keys)" -> "m" */

    if (a->data == NULL)
        return 0;
    if (a->rank == 2 && !b3) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected [%s] for a 2-D x ([B][%s] goes with a "
                        "batched x), found a rank-2 array", ptr, sym, sym);
        return -1;
    }
    if (a->rank == 1)
        return codec__dim(a, ptr, 0, len, len_doc, "the length", err);
    return codec__dim(a, ptr, 0, B, "B (the batch size)",
                      "the number of rows", err) ||
                   codec__dim(a, ptr, 1, len, len_doc, "the row length", err)
               ? -1
               : 0;
}

/* attn_bias / attn_mask in one of their broadcast forms: [n][m] or
 * [h][n][m] with a 2-D x; [n][m], [B][n][m] or [B|1][h][n][m] with a
 * batched x. */
static int codec__score_map(const codec_array *a, const char *ptr, int b3,
                            const attn_dims *d, codec_error *err)
{
    const char *forms = b3 ? "[n][m], [B][n][m] or [B][h][n][m] (a leading "
                             "1 shared by the batch) for a batched x"
                           : "[n][m] or [h][n][m] for a 2-D x";
    size_t want[4], k;
    int r = a->rank, ok = 1;
    char shape[96];

    if (a->data == NULL)
        return 0;
    want[r - 2] = d->n;
    want[r - 1] = d->m;
    if (r == 3)
        want[0] = b3 ? d->B : d->h;
    if (r == 4) {
        want[0] = a->shape[0] == 1 ? 1 : d->B;
        want[1] = d->h;
    }
    ok = !(r == 4 && !b3);
    for (k = 0; ok && k < (size_t)r; k++)
        ok = a->shape[k] == want[k];
    if (ok)
        return 0;
    /* the shape as a whole matches no form: the pointer names the field */
    for (k = 0, shape[0] = '\0'; k < (size_t)r; k++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "[%zu]",
                 a->shape[k]);
    codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                    "%s: expected %s with B = %zu, h = %zu, n = %zu, "
                    "m = %zu; found %s", ptr, forms, d->B, d->h, d->n, d->m,
                    shape);
    return -1;
}

static int codec__masks(const codec__fields *f, const attn_dims *d,
                        codec_error *err)
{
    int b3 = f->x.rank == 3;
    size_t i, bound = f->memory.data && d->m > d->n ? d->m : d->n;

    if (codec__per_batch(&f->kpm, "/key_padding_mask", b3, d->B, d->m,
                         "m (keys)", err) ||
        codec__per_batch(&f->positions, "/positions", b3, d->B, d->n,
                         "n (queries)", err) ||
        codec__per_batch(&f->key_positions, "/key_positions", b3, d->B, d->m,
                         "m (keys)", err) ||
        codec__score_map(&f->attn_mask, "/attn_mask", b3, d, err) ||
        codec__score_map(&f->attn_bias, "/attn_bias", b3, d, err))
        return -1;
    for (i = 0; i < f->global_tokens.count; i++) {
        int64_t t = ((const int64_t *)f->global_tokens.data)[i];
        if ((uint64_t)t >= bound) {
            char ptr[64];
            snprintf(ptr, sizeof ptr, "/global_tokens/%zu", i);
            codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                            "%s: index %lld is out of range; expected < %s "
                            "= %zu", ptr, (long long)t,
                            bound == d->n ? "n (queries)" : "m (keys)",
                            bound);
            return -1;
        }
    }
    return 0;
}

/* rope, alibi and qk_norm against d_k and the heads. */
static int codec__rules(const codec__fields *f, const attn_dims *d,
                        codec_error *err)
{
    if (f->seen[F_ROPE]) {
        size_t dim = f->rope.dim_given ? f->rope.dim : d->d_k;
        if (dim % 2 != 0 || dim > d->d_k) {
            codec_error_set(err, ERRORS_INVALID_REQUEST,
                            f->rope.dim_given ? "/rope/dim" : "/rope",
                            "%s: expected an even number of rotated "
                            "entries <= d_k = %zu, found %zu",
                            f->rope.dim_given ? "/rope/dim" : "/rope", d->d_k,
                            dim);
            return -1;
        }
        if (f->rope.inv_freq.data != NULL &&
            codec__dim(&f->rope.inv_freq, "/rope/inv_freq", 0, dim / 2,
                       "dim/2 (the rotated pairs)", "the length", err))
            return -1;
    }
    if (f->alibi.slopes.data != NULL &&
        codec__dim(&f->alibi.slopes, "/alibi/slopes", 0, d->h, "num_heads",
                   "the length", err))
        return -1;
    if (f->seen[F_QK_NORM]) {
        int all = f->qk_norm.over == 1;
        if (f->qk_norm.q_weight.data == NULL ||
            f->qk_norm.k_weight.data == NULL) {
            const char *ptr = f->qk_norm.q_weight.data == NULL
                                  ? "/qk_norm/q_weight" : "/qk_norm/k_weight";
            codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                            "%s: missing (qk_norm needs q_weight and "
                            "k_weight)", ptr);
            return -1;
        }
        if (codec__dim(&f->qk_norm.q_weight, "/qk_norm/q_weight", 0,
                       all ? d->h * d->d_k : d->d_k,
                       all ? "h*d_k (over \"all\")" : "d_k (over \"head\")",
                       "the length", err) ||
            codec__dim(&f->qk_norm.k_weight, "/qk_norm/k_weight", 0,
                       all ? d->g * d->d_k : d->d_k,
                       all ? "g*d_k (over \"all\")" : "d_k (over \"head\")",
                       "the length", err))
            return -1;
    }
    return 0;
}

int codec__check(codec__fields *f, attn_dims *d, codec_error *err)
{
    int b3;

    if (codec__sources(f, d, err) || codec__heads(f, d, err) ||
        codec__projections(f, d, err) || codec__biases(f, d, err) ||
        codec__masks(f, d, err) || codec__rules(f, d, err))
        return -1;
    if (f->top_k > d->m) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/top_k",
                        "/top_k: expected 1 <= k <= m = %zu (keys), found "
                        "%zu", d->m, f->top_k);
        return -1;
    }
    if (f->top_k > 0 && f->return_weights == ATTN_WEIGHTS_NONE) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/top_k",
                        "/top_k: selects weights to return, but "
                        "return_weights is \"none\"; expected \"per_head\" "
                        "or \"mean\"");
        return -1;
    }
    b3 = f->x.rank == 3;
    if (codec__check_labels(&f->tokens, "tokens", d->B, b3, d->n, "n", err) ||
        codec__check_labels(&f->memory_tokens, "memory_tokens", d->B, b3,
                            d->m, "m", err))
        return -1;
    return 0;
}

/* -- limits --------------------------------------------------------------- */

/* The limits, cheapest first; every product is overflow-checked. */
int codec__limits(const attn_params *p, const codec__fields *f,
                  const limits_config *lim, codec_error *err)
{
    const attn_dims *d = &p->dims;
    size_t top_k = f->top_k;
    int analysis = f->analysis;
    attn_weights weights = (attn_weights)f->return_weights;
    const struct {
        const char *name;
        size_t v;
    } dims[] = {{"n", d->n},         {"m", d->m},     {"d_model", d->d_model},
                {"d_mem", d->d_mem}, {"d_k", d->d_k}, {"d_v", d->d_v},
                {"d_out", d->d_out}};
    size_t i, maps = 0, outs = 0;
    char what[64];

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
    if (weights != ATTN_WEIGHTS_NONE) {
        /* with top_k each row returns k (index, weight) pairs, 2k values */
        int ovf = __builtin_mul_overflow(d->B, d->n, &maps) ||
                  __builtin_mul_overflow(maps, top_k ? 2 * top_k : d->m,
                                         &maps) ||
                  (weights == ATTN_WEIGHTS_PER_HEAD &&
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
    /* a bias or boolean map by ref can be as large as the maps without
     * being in the body; q and k returned are bounded alike */
    if (f->attn_bias.count > lim->max_map_elems ||
        f->attn_mask.count > lim->max_map_elems) {
        codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                        "%s holds %zu values; the limit --max-map-elems "
                        "(ATTND_MAX_MAP_ELEMS) is %zu",
                        f->attn_bias.count > lim->max_map_elems ? "attn_bias"
                                                                : "attn_mask",
                        f->attn_bias.count > lim->max_map_elems
                            ? f->attn_bias.count : f->attn_mask.count,
                        lim->max_map_elems);
        return -1;
    }
    if (f->return_qk) {
        size_t qk;
        if (__builtin_mul_overflow(d->B, (d->n * d->h + d->m * d->g), &qk) ||
            __builtin_mul_overflow(qk, d->d_k, &qk) ||
            qk > lim->max_map_elems) {
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the queries and keys returned (return_qk) would "
                            "hold more than %zu values, the limit "
                            "--max-map-elems (ATTND_MAX_MAP_ELEMS)",
                            lim->max_map_elems);
            return -1;
        }
    }
    return 0;
}


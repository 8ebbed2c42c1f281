/* attn_common.c: validation, sizes, counts and allocation shared by both
 * kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_visible.h"

const char *attn_strerror(int status)
{
    switch (status) {
#define ATTN__STATUS_CASE(name, value, msg)                                   \
    case ATTN_##name:                                                         \
        return msg;
        ATTN_STATUS_MAP(ATTN__STATUS_CASE)
#undef ATTN__STATUS_CASE
    }
    return "unknown status";
}

void *attn__alloc(const attn_params *p, size_t count, size_t size)
{
    size_t bytes;

    if (attn__mul(count, size, &bytes) != 0)
        return NULL;
    if (bytes == 0)
        bytes = 1;
    if (p->allocator != NULL)
        return p->allocator->alloc(p->allocator->ctx, bytes);
    return malloc(bytes);
}

void attn__free(const attn_params *p, void *ptr)
{
    if (ptr == NULL)
        return;
    if (p->allocator != NULL)
        p->allocator->free(p->allocator->ctx, ptr);
    else
        free(ptr);
}

double attn__scale(const attn_params *p)
{
    if (p->scale != 0.0f)
        return (double)p->scale;
    return 1.0 / sqrt((double)p->dims.d_k);
}

const float *attn__memory(const attn_params *p)
{
    return p->memory != NULL ? p->memory : p->x;
}

const float *attn__value_source(const attn_params *p)
{
    return p->value != NULL ? p->value : attn__memory(p);
}

size_t attn__value_width(const attn_params *p)
{
    return p->value != NULL ? p->d_val : p->dims.d_mem;
}

/* Every element count the kernels allocate or index, checked once. The
 * largest single product a kernel forms is bounded by one of these times
 * sizeof(double). */
static attn_status attn__check_products(const attn_params *p)
{
    const attn_dims *d = &p->dims;
    size_t t, u, hdk, gdk, gdv, hdv;

    if (attn__mul(d->h, d->d_k, &hdk) || attn__mul(d->g, d->d_k, &gdk) ||
        attn__mul(d->g, d->d_v, &gdv) || attn__mul(d->h, d->d_v, &hdv))
        return ATTN_EOVERFLOW;
    /* x, memory, Q, K, V, concat, output: B * rows * width * 8 bytes */
    if (attn__mul(d->B, d->n, &t) || attn__mul(t, d->d_model, &u) ||
        attn__mul(u, 8, &u) || attn__mul(t, hdk, &u) || attn__mul(u, 8, &u) ||
        attn__mul(t, hdv, &u) || attn__mul(u, 8, &u) ||
        attn__mul(t, d->d_out, &u) || attn__mul(u, 8, &u))
        return ATTN_EOVERFLOW;
    if (attn__mul(d->B, d->m, &t) || attn__mul(t, d->d_mem, &u) ||
        attn__mul(u, 8, &u) || attn__mul(t, gdk, &u) || attn__mul(u, 8, &u) ||
        attn__mul(t, gdv, &u) || attn__mul(u, 8, &u))
        return ATTN_EOVERFLOW;
    /* weights */
    if (attn__mul(d->d_model, hdk, &u) || attn__mul(u, 8, &u) ||
        attn__mul(d->d_mem, gdk, &u) || attn__mul(u, 8, &u) ||
        attn__mul(d->d_mem, gdv, &u) || attn__mul(u, 8, &u) ||
        attn__mul(hdv, d->d_out, &u) || attn__mul(u, 8, &u))
        return ATTN_EOVERFLOW;
    /* one row of scores per query, and the maps when returned */
    if (attn__mul(d->m, 8 * 256, &u))
        return ATTN_EOVERFLOW;
    if (p->weights != ATTN_WEIGHTS_NONE &&
        (attn__mul(d->B, d->h, &t) || attn__mul(t, d->n, &t) ||
         attn__mul(t, d->m, &t) || attn__mul(t, 8, &t)))
        return ATTN_EOVERFLOW;
    return ATTN_OK;
}

/* A window side: a count of positions, or ATTN_UNBOUNDED. Sides beyond
 * INT64_MAX (other than ATTN_UNBOUNDED) cannot be told apart from
 * unbounded on int64_t positions and are refused. */
static int attn__window_side_ok(size_t side)
{
    return side == ATTN_UNBOUNDED || (uint64_t)side <= (uint64_t)INT64_MAX;
}

static int attn__all_finite(const float *v, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

/* The last element a score map can reach for p's dims, checked for
 * overflow: (B-1) stride_b + (h-1) stride_h + n m. */
static attn_status attn__map_ok(const attn_params *p, const attn_score_map *map)
{
    const attn_dims *d = &p->dims;
    size_t a, b, nm;

    if (map->data == NULL)
        return ATTN_OK;
    if (attn__mul(d->B - 1, map->stride_b, &a) ||
        attn__mul(d->h - 1, map->stride_h, &b) || a > SIZE_MAX - b ||
        attn__mul(d->n, d->m, &nm) || a + b > SIZE_MAX - nm)
        return ATTN_EOVERFLOW;
    return ATTN_OK;
}

/* The optional score rules (attn.h, "the rules of real model families"):
 * every value a zeroed field would default is accepted, everything else
 * must be in its documented range. Positions are scanned (O(B (n + m))). */
static attn_status attn__check_rules(const attn_params *p)
{
    const attn_dims *d = &p->dims;
    const attn_rope *r = &p->rope;
    const attn_qk_norm *qn = &p->qk_norm;
    attn_status rc;

    if (r->dim != 0) {
        if (r->dim % 2 != 0)
            return ATTN_EINVAL;
        if (r->dim > d->d_k)
            return ATTN_ESHAPE;
        if (!(r->theta >= 0.0) || isinf(r->theta) ||
            !(r->attention_factor >= 0.0) || isinf(r->attention_factor))
            return ATTN_EINVAL; /* NaN fails the comparisons */
        if (r->style != ATTN_ROPE_HALF && r->style != ATTN_ROPE_INTERLEAVED)
            return ATTN_EINVAL;
        if (r->inv_freq != NULL && !attn__all_finite(r->inv_freq, r->dim / 2))
            return ATTN_EINVAL;
    }
    if (qn->over != ATTN_QK_NORM_NONE) {
        if (qn->over != ATTN_QK_NORM_HEAD && qn->over != ATTN_QK_NORM_ALL)
            return ATTN_EINVAL;
        if (qn->q_weight == NULL || qn->k_weight == NULL)
            return ATTN_EINVAL;
        if (!(qn->eps >= 0.0) || isinf(qn->eps))
            return ATTN_EINVAL;
    }
    if (!(p->softcap >= 0.0f) || isinf(p->softcap))
        return ATTN_EINVAL;
    if (p->alibi_slopes != NULL && !attn__all_finite(p->alibi_slopes, d->h))
        return ATTN_EINVAL;
    if ((rc = attn__map_ok(p, &p->score_bias)) != ATTN_OK ||
        (rc = attn__map_ok(p, &p->score_mask)) != ATTN_OK)
        return rc;
    if (p->window.on != 0 &&
        (p->window.on != 1 || !attn__window_side_ok(p->window.left) ||
         !attn__window_side_ok(p->window.right)))
        return ATTN_EINVAL;
    if (p->n_global != 0) {
        size_t top = d->n > d->m ? d->n : d->m;
        if (p->global_tokens == NULL)
            return ATTN_EINVAL;
        for (size_t t = 0; t < p->n_global; t++)
            if (p->global_tokens[t] >= top)
                return ATTN_ESHAPE;
    }
    if (p->positions != NULL)
        for (size_t t = 0; t < d->B * d->n; t++)
            if (p->positions[t] < 0)
                return ATTN_EINVAL;
    if (p->key_positions != NULL)
        for (size_t t = 0; t < d->B * d->m; t++)
            if (p->key_positions[t] < 0)
                return ATTN_EINVAL;
    if (p->value != NULL) {
        size_t t, u;
        if (p->d_val == 0)
            return ATTN_ESHAPE;
        if (attn__mul(d->B, d->m, &t) || attn__mul(t, p->d_val, &u) ||
            attn__mul(u, 8, &u) || attn__mul(p->d_val, d->g * d->d_v, &u) ||
            attn__mul(u, 8, &u))
            return ATTN_EOVERFLOW;
    }
    return ATTN_OK;
}

attn_status attn_check(const attn_params *p)
{
    const attn_dims *d;

    if (p == NULL)
        return ATTN_EINVAL;
    d = &p->dims;
    if (p->x == NULL || p->w_q == NULL || p->w_k == NULL || p->w_v == NULL)
        return ATTN_EINVAL;
    if (p->mask != ATTN_MASK_NONE && p->mask != ATTN_MASK_CAUSAL)
        return ATTN_EINVAL;
    if (p->weights != ATTN_WEIGHTS_NONE && p->weights != ATTN_WEIGHTS_PER_HEAD &&
        p->weights != ATTN_WEIGHTS_MEAN)
        return ATTN_EINVAL;
    if (!(p->scale >= 0.0f) || isinf(p->scale))
        return ATTN_EINVAL; /* NaN fails the comparison */
    if (p->allocator != NULL &&
        (p->allocator->alloc == NULL || p->allocator->free == NULL))
        return ATTN_EINVAL;
    if (p->executor != NULL &&
        (p->executor->run == NULL || p->executor->workers == 0))
        return ATTN_EINVAL;
    if (d->B == 0 || d->n == 0 || d->m == 0 || d->d_model == 0 ||
        d->d_mem == 0 || d->h == 0 || d->g == 0 || d->d_k == 0 ||
        d->d_v == 0 || d->d_out == 0)
        return ATTN_ESHAPE;
    if (d->g > d->h || d->h % d->g != 0)
        return ATTN_ESHAPE;
    if (p->memory == NULL && (d->m != d->n || d->d_mem != d->d_model))
        return ATTN_ESHAPE;
    if (attn__check_products(p) != ATTN_OK)
        return ATTN_EOVERFLOW;
    if (p->w_o == NULL && d->d_out != d->h * d->d_v)
        return ATTN_ESHAPE;
    return attn__check_rules(p);
}

attn_status attn_output_sizes(const attn_params *p, size_t *output_elems,
                              size_t *weights_elems)
{
    const attn_dims *d;
    attn_status rc = attn_check(p);

    if (rc != ATTN_OK)
        return rc;
    d = &p->dims;
    /* products already checked by attn_check */
    if (output_elems != NULL)
        *output_elems = d->B * d->n * d->d_out;
    if (weights_elems != NULL) {
        switch (p->weights) {
        case ATTN_WEIGHTS_PER_HEAD:
            *weights_elems = d->B * d->h * d->n * d->m;
            break;
        case ATTN_WEIGHTS_MEAN:
            *weights_elems = d->B * d->n * d->m;
            break;
        default:
            *weights_elems = 0;
        }
    }
    return ATTN_OK;
}

/* Overflow-checked uint64 arithmetic for the counts. */
static int attn__mul64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

static int attn__add64(uint64_t *acc, uint64_t v)
{
    if (*acc > UINT64_MAX - v)
        return -1;
    *acc += v;
    return 0;
}

/* acc += a * b * c */
static int attn__fma3(uint64_t *acc, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t t;

    if (attn__mul64(a, b, &t) || attn__mul64(t, c, &t))
        return -1;
    return attn__add64(acc, t);
}

attn_status attn_param_count(const attn_params *p, uint64_t *count)
{
    const attn_dims *d;
    uint64_t c = 0;
    attn_status rc = attn_check(p);

    if (rc != ATTN_OK)
        return rc;
    d = &p->dims;
    if (attn__fma3(&c, d->d_model, d->h, d->d_k) ||
        attn__fma3(&c, d->d_mem, d->g, d->d_k) ||
        attn__fma3(&c, attn__value_width(p), d->g, d->d_v) ||
        (p->w_o && attn__fma3(&c, d->h, d->d_v, d->d_out)) ||
        (p->b_q && attn__fma3(&c, d->h, d->d_k, 1)) ||
        (p->b_k && attn__fma3(&c, d->g, d->d_k, 1)) ||
        (p->b_v && attn__fma3(&c, d->g, d->d_v, 1)) ||
        (p->b_o && attn__fma3(&c, d->d_out, 1, 1)))
        return ATTN_EOVERFLOW;
    /* qk_norm's weights: the module's parameters too (Qwen3's q_norm and
     * k_norm, OLMo 2's); per head d_k values each, over all h*d_k and
     * g*d_k */
    if (p->qk_norm.over == ATTN_QK_NORM_HEAD &&
        attn__fma3(&c, 2, d->d_k, 1))
        return ATTN_EOVERFLOW;
    if (p->qk_norm.over == ATTN_QK_NORM_ALL &&
        attn__fma3(&c, d->h + (uint64_t)d->g, d->d_k, 1))
        return ATTN_EOVERFLOW;
    *count = c;
    return ATTN_OK;
}

attn_status attn_flops(const attn_params *p, uint64_t *flops)
{
    const attn_dims *d;
    uint64_t bn, bm, bhnm, f = 0;
    attn_status rc = attn_check(p);

    if (rc != ATTN_OK)
        return rc;
    d = &p->dims;
    if (attn__mul64(d->B, d->n, &bn) || attn__mul64(d->B, d->m, &bm) ||
        attn__mul64(bn, d->h, &bhnm) || attn__mul64(bhnm, d->m, &bhnm))
        return ATTN_EOVERFLOW;
    /* multiply-adds: the three projections, Q K^T, A V, the output
     * projection; the result doubles them */
    if (attn__fma3(&f, bn, d->d_model, (uint64_t)d->h * d->d_k) ||
        attn__fma3(&f, bm, d->d_mem, (uint64_t)d->g * d->d_k) ||
        attn__fma3(&f, bm, attn__value_width(p), (uint64_t)d->g * d->d_v) ||
        attn__fma3(&f, bhnm, d->d_k, 1) || attn__fma3(&f, bhnm, d->d_v, 1) ||
        (p->w_o && attn__fma3(&f, bn, (uint64_t)d->h * d->d_v, d->d_out)) ||
        attn__mul64(f, 2, &f))
        return ATTN_EOVERFLOW;
    *flops = f;
    return ATTN_OK;
}

/* The keys query a of batch element b can see under the causal mask, the
 * window and the global tokens, counted on sorted key positions (m
 * otherwise; attn__vis_span); an upper bound when global keys escape the
 * window. */
static uint64_t attn__cost_row(const attn__vis *v, size_t b, size_t a,
                               int sorted, size_t global_keys)
{
    const attn_params *p = v->p;
    size_t lo, hi, extra = 0;
    int window = v->window;

    if (!sorted)
        return v->m;
    for (size_t t = 0; window && t < p->n_global; t++)
        if (p->global_tokens[t] == a)
            window = 0;
    if (window)
        extra = global_keys;
    attn__vis_span(v, b, a, window, &lo, &hi);
    return (uint64_t)(hi - lo + extra < v->m ? hi - lo + extra : v->m);
}

attn_status attn_cost(const attn_params *p, uint64_t *work_units)
{
    const attn_dims *d;
    attn__vis v;
    uint64_t w = 0, pairs = 0, per_pair, qk_rows;
    size_t global_keys = 0;
    attn_status rc = attn_check(p);

    if (rc != ATTN_OK)
        return rc;
    if (work_units == NULL)
        return ATTN_EINVAL;
    d = &p->dims;
    attn__vis_rules(&v, p);
    for (size_t t = 0; p->window.on && t < p->n_global; t++)
        global_keys += p->global_tokens[t] < d->m;
    for (size_t b = 0; b < d->B; b++) {
        int sorted = 1;
        for (size_t c = 1; sorted && c < d->m; c++)
            sorted = attn__vis_kpos(&v, b, c) >= attn__vis_kpos(&v, b, c - 1);
        for (size_t a = 0; a < d->n; a++)
            if (attn__add64(&pairs, attn__cost_row(&v, b, a, sorted,
                                                   global_keys)))
                return ATTN_EOVERFLOW;
    }
    /* per visible pair and head: the two products (multiply-adds times
     * two), the exponential, the softcap's tanh */
    per_pair = 2 * ((uint64_t)d->d_k + d->d_v) + ATTN_COST_EXP +
               (p->softcap > 0.0f ? ATTN_COST_SOFTCAP : 0);
    qk_rows = (uint64_t)d->B * d->n * d->h + (uint64_t)d->B * d->m * d->g;
    if (attn__fma3(&w, pairs, d->h, per_pair) ||
        attn__fma3(&w, (uint64_t)d->B * d->n, d->h, ATTN_COST_ROW) ||
        attn__fma3(&w, qk_rows, d->d_k,
                   (p->qk_norm.over != ATTN_QK_NORM_NONE ? 4 : 0) +
                       (p->rope.dim != 0 ? 6 : 0)) ||
        attn__fma3(&w, (uint64_t)d->B * d->n, d->d_model,
                   2 * (uint64_t)d->h * d->d_k) ||
        attn__fma3(&w, (uint64_t)d->B * d->m, d->d_mem,
                   2 * (uint64_t)d->g * d->d_k) ||
        attn__fma3(&w, (uint64_t)d->B * d->m, attn__value_width(p),
                   2 * (uint64_t)d->g * d->d_v) ||
        (p->w_o && attn__fma3(&w, (uint64_t)d->B * d->n,
                              (uint64_t)d->h * d->d_v, 2 * (uint64_t)d->d_out)))
        return ATTN_EOVERFLOW;
    *work_units = w;
    return ATTN_OK;
}

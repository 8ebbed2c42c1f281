/* attn_visible.c: the visibility of keys and the position-dependent score
 * rules, for every fast kernel (see attn_visible.h). The reference kernel
 * keeps its own obvious copy of these rules, so the two check each other. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_exp.h"
#include "attn_visible.h"

#define ATTN__VIS_UNBOUNDED UINT64_MAX

/* The offsets of the tables in the one block (attn_check bounded
 * B * (m + 1) * 8 and n, m by the inputs' sizes; these are smaller). */
typedef struct attn__vis_offsets {
    size_t gq, gk, gkb, pad, qs, ks, kp, bm, total;
} attn__vis_offsets;

/* The rows of n x m maps score_bias holds: every (b, i) map starts at a
 * multiple of m (its strides are 0, n*m or h*n*m). */
static size_t attn__vis_bias_rows(const attn_params *p)
{
    const attn_dims *d = &p->dims;

    if (p->score_bias.data == NULL || d->m == 0)
        return 0;
    return ((d->B - 1) * p->score_bias.stride_b +
            (d->h - 1) * p->score_bias.stride_h) / d->m + d->n;
}

/* Whether ALiBi needs the key positions in order (attn__vis_near): they
 * are given, not the indices 0 .. m-1. */
static int attn__vis_alibi_sorts(const attn_params *p)
{
    return p->alibi_slopes != NULL &&
           (p->key_positions != NULL ||
            (p->memory == NULL && p->positions != NULL));
}

static void attn__vis_layout(const attn_params *p, attn__vis_offsets *o)
{
    const attn_dims *d = &p->dims;

    o->gq = 0;
    o->gk = o->gq + d->n;
    o->gkb = (o->gk + d->m + 7) / 8 * 8;
    o->pad = o->gkb + (d->m + 1) * sizeof(size_t);
    o->qs = o->pad +
            (p->key_padding != NULL ? d->B * (d->m + 1) * sizeof(size_t) : 0);
    o->ks = o->qs + d->B;
    o->kp = (o->ks + d->B + 7) / 8 * 8;
    o->bm = o->kp + (attn__vis_alibi_sorts(p)
                         ? d->B * d->m * sizeof(int64_t) : 0);
    o->total = o->bm + attn__vis_bias_rows(p) * sizeof(float);
}

static int attn__vis_cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

    return (a > b) - (a < b);
}

size_t attn__vis_bytes(const attn_params *p)
{
    attn__vis_offsets o;

    attn__vis_layout(p, &o);
    return o.total;
}

void attn__vis_rules(attn__vis *v, const attn_params *p)
{
    const attn_dims *d = &p->dims;

    memset(v, 0, sizeof(*v));
    v->p = p;
    v->B = d->B;
    v->n = d->n;
    v->m = d->m;
    v->causal = p->mask == ATTN_MASK_CAUSAL;
    v->window = p->window.on != 0;
    v->left = p->window.left == ATTN_UNBOUNDED ? ATTN__VIS_UNBOUNDED
                                               : (uint64_t)p->window.left;
    v->right = p->window.right == ATTN_UNBOUNDED ? ATTN__VIS_UNBOUNDED
                                                 : (uint64_t)p->window.right;
    v->has_mask = p->score_mask.data != NULL;
    v->has_global = v->window && p->n_global > 0;
    v->adjust = p->softcap > 0.0f || p->score_bias.data != NULL ||
                p->alibi_slopes != NULL;
#ifdef ATTN__HAVE_X86
    v->avx512 = __builtin_cpu_supports("avx512f") != 0;
#endif
}

attn_status attn__vis_init(attn__vis *v, const attn_params *p)
{
    const attn_dims *d = &p->dims;
    attn__vis_offsets o;
    unsigned char *base;
    int sorted = 1;

    attn__vis_rules(v, p);

    attn__vis_layout(p, &o);
    v->block = attn__alloc(p, o.total, 1);
    if (v->block == NULL)
        return ATTN_ENOMEM;
    base = v->block;
    v->gq = base + o.gq;
    v->gk = base + o.gk;
    v->gk_before = (size_t *)(void *)(base + o.gkb);
    v->pad_before =
        p->key_padding != NULL ? (size_t *)(void *)(base + o.pad) : NULL;
    v->q_sorted = base + o.qs;
    v->k_sorted = base + o.ks;
    if (p->score_bias.data != NULL) {
        /* each row's largest bias: what attn__vis_adjust takes off it */
        const float *bias = p->score_bias.data;
        v->bias_max = (float *)(void *)(base + o.bm);
        for (size_t r = 0; r < attn__vis_bias_rows(p); r++) {
            float top = -FLT_MAX;
            for (size_t c = 0; c < d->m; c++)
                top = bias[r * d->m + c] > top ? bias[r * d->m + c] : top;
            v->bias_max[r] = top;
        }
    }
    if (attn__vis_alibi_sorts(p)) {
        v->kp_sorted = (int64_t *)(void *)(base + o.kp);
        for (size_t b = 0; b < d->B; b++) {
            int64_t *row = v->kp_sorted + b * d->m;
            for (size_t c = 0; c < d->m; c++)
                row[c] = attn__vis_kpos(v, b, c);
            qsort(row, d->m, sizeof *row, attn__vis_cmp_i64);
        }
    }

    memset(v->gq, 0, d->n);
    memset(v->gk, 0, d->m);
    for (size_t t = 0; v->has_global && t < p->n_global; t++) {
        if (p->global_tokens[t] < d->n)
            v->gq[p->global_tokens[t]] = 1;
        if (p->global_tokens[t] < d->m)
            v->gk[p->global_tokens[t]] = 1;
    }
    v->gk_before[0] = 0;
    for (size_t c = 0; c < d->m; c++)
        v->gk_before[c + 1] = v->gk_before[c] + v->gk[c];
    for (size_t b = 0; v->pad_before != NULL && b < d->B; b++) {
        size_t *pb = v->pad_before + b * (d->m + 1);
        pb[0] = 0;
        for (size_t c = 0; c < d->m; c++)
            pb[c + 1] = pb[c] + (p->key_padding[b * d->m + c] != 0);
    }
    for (size_t b = 0; b < d->B; b++) {
        v->q_sorted[b] = v->k_sorted[b] = 1;
        for (size_t a = 1; a < d->n; a++)
            if (attn__vis_qpos(v, b, a) < attn__vis_qpos(v, b, a - 1))
                v->q_sorted[b] = 0;
        for (size_t c = 1; c < d->m; c++)
            if (attn__vis_kpos(v, b, c) < attn__vis_kpos(v, b, c - 1))
                v->k_sorted[b] = 0;
        if (!v->k_sorted[b] && (v->causal || v->window))
            v->hide_rows = 1; /* ranges are then [0, m) */
        sorted &= v->k_sorted[b];
    }
    if (p->key_padding != NULL || v->has_mask || v->has_global)
        v->hide_rows = 1;
    v->pad_only = p->key_padding != NULL && !v->has_mask && !v->has_global &&
                  sorted;
    return ATTN_OK;
}

void attn__vis_free(attn__vis *v)
{
    if (v->p != NULL)
        attn__free(v->p, v->block);
    memset(v, 0, sizeof(*v));
}

int64_t attn__vis_qpos(const attn__vis *v, size_t b, size_t a)
{
    const attn_params *p = v->p;

    return p->positions != NULL ? p->positions[b * v->n + a] : (int64_t)a;
}

int64_t attn__vis_kpos(const attn__vis *v, size_t b, size_t c)
{
    const attn_params *p = v->p;

    if (p->key_positions != NULL)
        return p->key_positions[b * v->m + c];
    if (p->memory == NULL)
        return attn__vis_qpos(v, b, c); /* self-attention: m == n */
    return (int64_t)c;
}

/* hi - lo > side, for positions (>= 0, so the difference fits) */
static int attn__vis_beyond(int64_t hi, int64_t lo, uint64_t side)
{
    return hi > lo && (uint64_t)(hi - lo) > side;
}

/* The window's verdict on key position kp from query position qp. */
static int attn__vis_in_window(const attn__vis *v, int64_t qp, int64_t kp)
{
    return !attn__vis_beyond(qp, kp, v->left) &&
           !attn__vis_beyond(kp, qp, v->right);
}

static const unsigned char *attn__vis_mask_row(const attn__vis *v, size_t b,
                                               size_t i, size_t a)
{
    const attn_score_map *map = &v->p->score_mask;

    if (!v->has_mask)
        return NULL;
    return (const unsigned char *)map->data + b * map->stride_b +
           i * map->stride_h + a * v->m;
}

int attn__vis_key(const attn__vis *v, size_t b, size_t i, size_t a, size_t c)
{
    const attn_params *p = v->p;
    const unsigned char *mrow = attn__vis_mask_row(v, b, i, a);
    int64_t qp = attn__vis_qpos(v, b, a), kp = attn__vis_kpos(v, b, c);

    if (v->causal && kp > qp)
        return 0;
    if (p->key_padding != NULL && p->key_padding[b * v->m + c])
        return 0;
    if (mrow != NULL && mrow[c])
        return 0;
    if (v->window && !(v->has_global && (v->gq[a] || v->gk[c])) &&
        !attn__vis_in_window(v, qp, kp))
        return 0;
    return 1;
}

size_t attn__vis_row(const attn__vis *v, size_t b, size_t i, size_t a,
                     size_t k0, size_t k1, unsigned char *hide)
{
    const attn_params *p = v->p;
    const unsigned char *mrow = attn__vis_mask_row(v, b, i, a);
    const unsigned char *pad =
        p->key_padding != NULL ? p->key_padding + b * v->m : NULL;
    int64_t qp = attn__vis_qpos(v, b, a);
    int window = v->window && !(v->has_global && v->gq[a]);
    size_t count = 0;

    for (size_t c = k0; c < k1; c++) {
        int64_t kp = attn__vis_kpos(v, b, c);
        int hidden = (v->causal && kp > qp) || (pad != NULL && pad[c]) ||
                     (mrow != NULL && mrow[c]) ||
                     (window && !(v->has_global && v->gk[c]) &&
                      !attn__vis_in_window(v, qp, kp));
        hide[c - k0] = (unsigned char)hidden;
        count += !hidden;
    }
    return count;
}

size_t attn__vis_count(const attn__vis *v, size_t b, size_t i, size_t a)
{
    size_t count = 0;

    for (size_t c = 0; c < v->m; c++)
        count += (size_t)attn__vis_key(v, b, i, a, c);
    return count;
}

/* The smallest and largest positions of queries [q0, q1) (or keys). */
static void attn__vis_extent(const attn__vis *v, size_t b, int keys,
                             size_t x0, size_t x1, int64_t *lo, int64_t *hi)
{
    int sorted = keys ? v->k_sorted[b] : v->q_sorted[b];

    if (sorted) {
        *lo = keys ? attn__vis_kpos(v, b, x0) : attn__vis_qpos(v, b, x0);
        *hi = keys ? attn__vis_kpos(v, b, x1 - 1)
                   : attn__vis_qpos(v, b, x1 - 1);
        return;
    }
    *lo = INT64_MAX;
    *hi = INT64_MIN;
    for (size_t x = x0; x < x1; x++) {
        int64_t t = keys ? attn__vis_kpos(v, b, x) : attn__vis_qpos(v, b, x);
        *lo = t < *lo ? t : *lo;
        *hi = t > *hi ? t : *hi;
    }
}

attn__vis_kind attn__vis_block(const attn__vis *v, size_t b, size_t i,
                               size_t q0, size_t q1, size_t k0, size_t k1)
{
    int64_t qlo, qhi, klo, khi;
    int all = 1;

    if (q0 >= q1 || k0 >= k1)
        return ATTN__VIS_NONE;
    if (v->pad_before != NULL) {
        const size_t *pb = v->pad_before + b * (v->m + 1);
        size_t padded = pb[k1] - pb[k0];
        if (padded == k1 - k0)
            return ATTN__VIS_NONE;
        all = padded == 0;
    }
    attn__vis_extent(v, b, 0, q0, q1, &qlo, &qhi);
    attn__vis_extent(v, b, 1, k0, k1, &klo, &khi);
    if (v->causal) {
        if (klo > qhi)
            return ATTN__VIS_NONE;
        if (khi > qlo)
            all = 0;
    }
    if (v->window) {
        int escape = 0;
        if (v->has_global) {
            for (size_t a = q0; !escape && a < q1; a++)
                escape = v->gq[a];
            escape |= v->gk_before[k1] != v->gk_before[k0];
        }
        if (!escape && (attn__vis_beyond(qlo, khi, v->left) ||
                        attn__vis_beyond(klo, qhi, v->right)))
            return ATTN__VIS_NONE;
        if (attn__vis_beyond(qhi, klo, v->left) ||
            attn__vis_beyond(khi, qlo, v->right))
            all = 0;
    }
    if (v->has_mask) {
        size_t hidden = 0;
        for (size_t a = q0; a < q1; a++) {
            const unsigned char *mrow = attn__vis_mask_row(v, b, i, a);
            for (size_t c = k0; c < k1; c++)
                hidden += mrow[c] != 0;
        }
        if (hidden == (q1 - q0) * (k1 - k0))
            return ATTN__VIS_NONE;
        if (hidden != 0)
            all = 0;
    }
    return all ? ATTN__VIS_ALL : ATTN__VIS_PARTIAL;
}

/* The first key c of batch element b (sorted key positions) with
 * kpos(c) > t, or with kpos(c) >= t when `inclusive`. */
static size_t attn__vis_search(const attn__vis *v, size_t b, int64_t t,
                               int inclusive)
{
    size_t lo = 0, hi = v->m;

    if (v->p->key_positions == NULL &&
        (v->p->memory != NULL || v->p->positions == NULL)) {
        /* key positions 0 .. m-1: the answer is t itself */
        int64_t first;
        if (!inclusive && t == INT64_MAX)
            return v->m;
        first = inclusive ? t : t + 1;
        return first <= 0 ? 0
               : (uint64_t)first >= (uint64_t)v->m ? v->m
                                                   : (size_t)first;
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int64_t kp = attn__vis_kpos(v, b, mid);
        if (inclusive ? kp >= t : kp > t)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void attn__vis_span(const attn__vis *v, size_t b, size_t a, int window,
                    size_t *lo, size_t *hi)
{
    int64_t qp = attn__vis_qpos(v, b, a);
    size_t l = 0, h = v->m;

    if (v->causal)
        h = attn__vis_search(v, b, qp, 0);
    if (window) {
        if (v->left < (uint64_t)qp)
            l = attn__vis_search(v, b, qp - (int64_t)v->left, 1);
        if (v->right < (uint64_t)(INT64_MAX - qp)) {
            size_t r = attn__vis_search(v, b, qp + (int64_t)v->right, 0);
            h = r < h ? r : h;
        }
    }
    *lo = l > h ? h : l;
    *hi = h;
}

/* The index of the t-th global key (t >= 1, at most their count), by a
 * search of gk_before: O(log m), where a walk over the keys would make
 * every row's range O(m). */
static size_t attn__vis_global_at(const attn__vis *v, size_t t)
{
    size_t lo = 0, hi = v->m;

    while (lo < hi) { /* the first c with t global keys in [0, c] */
        size_t mid = lo + (hi - lo) / 2;
        if (v->gk_before[mid + 1] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void attn__vis_range(const attn__vis *v, size_t b, size_t a, size_t *lo,
                     size_t *hi)
{
    size_t l, h, cap;
    int window = v->window && !(v->has_global && v->gq[a]);

    if (!v->k_sorted[b] || (!v->causal && !v->window)) {
        *lo = 0;
        *hi = v->m;
        return;
    }
    attn__vis_span(v, b, a, 0, &l, &cap);
    attn__vis_span(v, b, a, window, &l, &h);
    if (window && v->has_global && v->gk_before[cap] > 0) {
        /* global keys below the causal bound escape the window */
        size_t first = attn__vis_global_at(v, 1),
               last = attn__vis_global_at(v, v->gk_before[cap]) + 1;
        l = first < l ? first : l;
        h = last > h ? last : h;
    }
    *lo = l;
    *hi = h;
}

/* 16 flags of bytes (nonzero: set) as bits, for t < count. */
static uint16_t attn__vis_flags16(const unsigned char *f, size_t count)
{
#ifdef __SSE2__
    if (count == 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)f);
        __m128i z = _mm_cmpeq_epi8(x, _mm_setzero_si128());
        return (uint16_t)~_mm_movemask_epi8(z);
    }
#endif
    uint16_t bits = 0;
    for (size_t t = 0; t < count; t++)
        bits |= (uint16_t)((f[t] != 0) << t);
    return bits;
}

/* The bits of [from, to) within the 16 keys from j. */
static uint32_t attn__vis_span16(size_t from, size_t to, size_t j)
{
    size_t l = from > j ? from - j : 0, h = to > j ? to - j : 0;

    h = h > 16 ? 16 : h;
    return l >= h ? 0
                  : ((h == 16 ? 0xFFFFu : (1u << h) - 1) & ~((1u << l) - 1));
}

void attn__vis_bits(const attn__vis *v, size_t b, size_t i, size_t a,
                    size_t lo, size_t hi, size_t k0, size_t n_keys,
                    size_t keys, uint16_t *bits)
{
    const attn_params *p = v->p;
    const unsigned char *pad =
        p->key_padding != NULL ? p->key_padding + b * v->m + k0 : NULL;
    const unsigned char *mrow = attn__vis_mask_row(v, b, i, a);
    const unsigned char *gk = NULL;
    size_t cap = 0;

    if (!v->k_sorted[b]) {
        /* no ranges to go by: every key asks every rule */
        for (size_t j = 0; j < keys; j += 16)
            bits[j / 16] = 0;
        for (size_t c = 0; c < n_keys; c++)
            if (attn__vis_key(v, b, i, a, k0 + c))
                bits[c / 16] |= (uint16_t)(1u << (c % 16));
        return;
    }
    if (v->has_global && !v->gq[a]) {
        /* [lo, hi) was widened to the global keys: the window's own
         * range, and the global keys below the causal bound */
        size_t l;
        attn__vis_span(v, b, a, 0, &l, &cap);
        attn__vis_span(v, b, a, 1, &lo, &hi);
        gk = v->gk + k0;
        cap = cap > k0 ? cap - k0 : 0;
    }
    lo = lo > k0 ? lo - k0 : 0;
    hi = hi > k0 ? hi - k0 : 0;
    hi = hi < n_keys ? hi : n_keys;
    cap = cap < n_keys ? cap : n_keys;
    /* the range, then the per-key rules 16 keys at a time */
    for (size_t j = 0; j < keys; j += 16) {
        size_t count = n_keys - j < 16 ? (n_keys > j ? n_keys - j : 0) : 16;
        uint32_t m = attn__vis_span16(lo, hi, j);
        if (gk != NULL && cap > j)
            m |= attn__vis_flags16(gk + j, count) & attn__vis_span16(0, cap, j);
        if (m != 0 && pad != NULL)
            m &= ~(uint32_t)attn__vis_flags16(pad + j, count);
        if (m != 0 && mrow != NULL)
            m &= ~(uint32_t)attn__vis_flags16(mrow + k0 + j, count);
        bits[j / 16] = (uint16_t)m;
    }
}

/* Score x plus its bias b, less the row's largest bias top (the softmax
 * is the same, and x keeps its precision under a large bias common to
 * the row), in double as the float64 reference adds: a bias so large that
 * the reference's sum loses x (a row all at float32's lowest, the
 * additive mask of a padded query) loses it here too, where float32's
 * b - top would keep x whole and give another answer. */
static inline float attn__vis_bias_add(float x, float b, float top)
{
    return (float)(((double)x + (double)b) - (double)top);
}

#ifdef ATTN__HAVE_X86
/* tanh on 16 lanes: the odd series to y^9 below |y| = 0.1 (its next term
 * is under 1e-13 there), sign(y) (1 - t) / (1 + t) with t = e^(-2|y|)
 * above (at most a factor 5 of cancellation: relative error ~1e-6). A NaN
 * stays NaN; +-inf gives +-1, as tanhf does. */
__attribute__((target("avx512f"))) static inline __m512
attn__tanh512(__m512 y)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512 a = _mm512_abs_ps(y), y2 = _mm512_mul_ps(y, y);
    __m512 poly = _mm512_set1_ps((float)(62.0 / 2835.0));
    __m512 t, big, small;

    poly = _mm512_fmadd_ps(poly, y2, _mm512_set1_ps((float)(-17.0 / 315.0)));
    poly = _mm512_fmadd_ps(poly, y2, _mm512_set1_ps((float)(2.0 / 15.0)));
    poly = _mm512_fmadd_ps(poly, y2, _mm512_set1_ps((float)(-1.0 / 3.0)));
    poly = _mm512_fmadd_ps(poly, y2, _mm512_set1_ps(1.0f));
    small = _mm512_mul_ps(y, poly);
    t = attn__exp2_512(
        _mm512_mul_ps(a, _mm512_set1_ps((float)(-2.0 * M_LOG2E))));
    big = _mm512_div_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), t),
                        _mm512_add_ps(_mm512_set1_ps(1.0f), t));
    big = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(big),
        _mm512_and_si512(_mm512_castps_si512(y), sign)));
    return _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.1f), _CMP_LT_OQ), big, small);
}

/* attn__vis_adjust 16 scores at a time: the softcap, the bias row less
 * top, and ALiBi when the distance of key k0 + c is |d0 - c| - near (key
 * positions 0 .. m-1), exact in float. A score that is not finite here
 * overflowed float32 (masks come later), and tanh would make it a finite
 * +-cap, of either sign whatever the float64 score is: it becomes NaN,
 * which the softmax reports, so the request is computed again in
 * float64. */
__attribute__((target("avx512f"))) static void
attn__vis_adjust512(float *s, size_t len, float unit, float cap,
                    const float *bias, float top, float slope, float d0,
                    float near)
{
    const __m512 lane = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                      5, 4, 3, 2, 1, 0);
    const __m512 vunit = _mm512_set1_ps(unit);
    const __m512 vinv = _mm512_set1_ps(1.0f / unit);
    const __m512 vcap = _mm512_set1_ps(cap);
    const __m512 vinv_cap = _mm512_set1_ps(cap > 0.0f ? 1.0f / cap : 0.0f);

    for (size_t j = 0; j < len; j += 16) {
        __mmask16 k = len - j >= 16 ? (__mmask16)0xFFFF
                                    : (__mmask16)((1u << (len - j)) - 1);
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + j), vinv);
        if (cap > 0.0f) {
            __mmask16 lost = _mm512_cmp_ps_mask(
                _mm512_abs_ps(x), _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
            x = _mm512_mul_ps(vcap,
                              attn__tanh512(_mm512_mul_ps(x, vinv_cap)));
            x = _mm512_mask_blend_ps(lost, x, _mm512_set1_ps(NAN));
        }
        if (bias != NULL) {
            /* (x + bias) - top in double, as attn__vis_bias_add */
            __m512 b = _mm512_maskz_loadu_ps(k, bias + j);
            __m512d t = _mm512_set1_pd((double)top);
            __m256 lo = _mm512_cvtpd_ps(_mm512_sub_pd(
                _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)),
                              _mm512_cvtps_pd(_mm512_castps512_ps256(b))),
                t));
            __m256 hi = _mm512_cvtpd_ps(_mm512_sub_pd(
                _mm512_add_pd(
                    _mm512_cvtps_pd(_mm256_castpd_ps(
                        _mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))),
                    _mm512_cvtps_pd(_mm256_castpd_ps(
                        _mm512_extractf64x4_pd(_mm512_castps_pd(b), 1)))),
                t));
            x = _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castps_pd(_mm512_castps256_ps512(lo)),
                _mm256_castps_pd(hi), 1));
        }
        if (slope != 0.0f) {
            __m512 c = _mm512_add_ps(lane, _mm512_set1_ps((float)j));
            __m512 dist = _mm512_sub_ps(
                _mm512_abs_ps(_mm512_sub_ps(_mm512_set1_ps(d0), c)),
                _mm512_set1_ps(near));
            x = _mm512_sub_ps(x, _mm512_mul_ps(_mm512_set1_ps(slope), dist));
        }
        _mm512_mask_storeu_ps(s + j, k, _mm512_mul_ps(x, vunit));
    }
}
#endif

/* The distance from query position qp to the nearest key of batch element
 * b. ALiBi's distances are taken less this: the same for every key of the
 * row, so the softmax is the same, and a row whose keys are all far away
 * (a query at 10^6 over keys 0 .. m-1) keeps its scores' differences,
 * which float32 would lose under a bias of slope * 10^6. */
static int64_t attn__vis_near(const attn__vis *v, size_t b, int64_t qp)
{
    const int64_t *k;
    size_t lo = 0, hi = v->m;
    int64_t near = INT64_MAX;

    if (v->kp_sorted == NULL) /* keys at 0 .. m-1; qp >= 0 */
        return qp >= (int64_t)v->m ? qp - ((int64_t)v->m - 1) : 0;
    k = v->kp_sorted + b * v->m;
    while (lo < hi) { /* the first key at qp or after it */
        size_t mid = lo + (hi - lo) / 2;
        if (k[mid] < qp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < v->m)
        near = k[lo] - qp;
    if (lo > 0 && qp - k[lo - 1] < near)
        near = qp - k[lo - 1];
    return near;
}

void attn__vis_adjust(const attn__vis *v, size_t b, size_t i, size_t a,
                      size_t k0, float *s, size_t len, float unit)
{
    const attn_params *p = v->p;
    const float *bias = NULL;
    float top = 0.0f; /* the row's largest bias, taken off every key's */
    float cap = p->softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
    float inv_unit = 1.0f / unit;
    double slope = p->alibi_slopes != NULL ? (double)p->alibi_slopes[i] : 0.0;
    int64_t qp = attn__vis_qpos(v, b, a), near;

    if (!v->adjust)
        return;
    near = slope != 0.0 ? attn__vis_near(v, b, qp) : 0;
    if (p->score_bias.data != NULL) {
        size_t row = (b * p->score_bias.stride_b +
                      i * p->score_bias.stride_h) / v->m + a;
        bias = (const float *)p->score_bias.data + row * v->m + k0;
        top = v->bias_max[row];
    }
#ifdef ATTN__HAVE_X86
    if (v->avx512) {
        /* ALiBi in float when every distance is an exact float: key
         * positions 0 .. m-1 and |qp - k0| + len < 2^24 */
        int identity = p->key_positions == NULL &&
                       (p->memory != NULL || p->positions == NULL);
        int64_t d0 = qp - (int64_t)k0;
        if (slope == 0.0 ||
            (identity && d0 < ((int64_t)1 << 23) &&
             d0 > -((int64_t)1 << 23) && len < ((size_t)1 << 23))) {
            attn__vis_adjust512(s, len, unit, cap, bias, top, (float)slope,
                                (float)d0, (float)near);
            return;
        }
    }
#endif
    for (size_t c = 0; c < len; c++) {
        float x = s[c] * inv_unit;
        if (cap > 0.0f) /* an overflowed score stays non-finite: above */
            x = isfinite(x) ? cap * tanhf(x * inv_cap) : NAN;
        if (bias != NULL)
            x = attn__vis_bias_add(x, bias[c], top);
        if (slope != 0.0) {
            int64_t kp = attn__vis_kpos(v, b, k0 + c);
            double dist = (double)((kp > qp ? kp - qp : qp - kp) - near);
            x -= (float)(slope * dist);
        }
        s[c] = x * unit;
    }
}

/* attn_flash.c: the fused outputs-only kernel (AVX-512). When no weights
 * are returned, a tile of query rows of one head walks the keys in blocks
 * and keeps a running max and sum per row (online softmax), so its scores
 * never leave the core's caches:
 *
 *   for each key block K_b, V_b (FLASH_KEYS keys) of the tile's range:
 *     for each group of 8 rows, over the 32-key span of the block that
 *     the group's rows can see (none: the group skips the block):
 *       pass 1  S = (scale log2 e) Q K_b^T    [8 rows][<= FLASH_KEYS]  (L1)
 *       pass 2  softcap, bias, ALiBi; mask; max_new = max(max, rowmax S);
 *               O, sum *= 2^(max - max_new); P = 2^(S - max_new);
 *               sum += rowsum P
 *       pass 3  O += P V_b                    [8 rows][d_v]
 *   O /= sum
 * The key ranges and masks come from attn_visible.c, so a sliding window
 * costs the keys of its band (rounded to 32 at each edge), not of the
 * whole causal triangle.
 *
 * (the scores in log2 units: 2^(S log2 e) = e^S, and 2^x is the cheaper
 * polynomial). K is transposed and each head's V made contiguous once per
 * call (attn__flash_pack). The BLAS path (two sgemm calls around a 2 to 4 MiB tile of
 * scores a head) packs both operands on every call and sends each score
 * through the memory hierarchy four times; here the only traffic is K and
 * V. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn_exp.h"
#include "attn_visible.h"

/* Keys a block: its scores for one row group (8 x 256 floats, 8 KiB) stay
 * in L1, its packed K^T and V (d_k or d_v x 256 floats) in L2. */
#define FLASH_KEYS ATTN__FLASH_KEYS
/* Query rows a group: the micro-kernels hold 8 rows x 32 columns of
 * accumulators (16 registers). */
#define FLASH_GROUP 8
/* The widest d_v the accumulators of pass 3 are sized for (columns in
 * slices of 32), and the widest d_k worth packing. */
#define FLASH_MAX_DV 128
#define FLASH_MAX_DK 256

static int attn__flash_on = 1;

int attn__flash_enable(int on)
{
    int was = attn__flash_on;

    attn__flash_on = on != 0;
    return was;
}

static size_t attn__round_up(size_t a, size_t to)
{
    return (a + to - 1) / to * to;
}

#ifdef ATTN__HAVE_X86

/* The per-worker workspace, in floats, each part on its own cache line. */
typedef struct attn__flash_ws {
    float *qs;  /* [ATTN__FLASH_ROWS][d_k]: the tile's queries, scaled */
    float *s;   /* [FLASH_GROUP][FLASH_KEYS]: a group's scores, then P */
    float *o;   /* [ATTN__FLASH_ROWS][dvp]: the unnormalised outputs */
    float *max; /* [ATTN__FLASH_ROWS]: running max, -inf before any key */
    float *sum; /* [ATTN__FLASH_ROWS]: running sum of e^(s - max) */
    uint16_t *bits; /* [FLASH_KEYS / 16]: a row's visible keys, 1 bits */
} attn__flash_ws;

static size_t attn__flash_dvp(const attn_dims *d)
{
    return attn__round_up(d->d_v, 32);
}

static size_t attn__flash_parts(const attn_dims *d, float *base,
                                attn__flash_ws *ws)
{
    size_t dvp = attn__flash_dvp(d), at = 0;
    size_t sizes[6] = {
        ATTN__FLASH_ROWS * d->d_k, FLASH_GROUP * FLASH_KEYS,
        ATTN__FLASH_ROWS * dvp,  ATTN__FLASH_ROWS,
        ATTN__FLASH_ROWS,        FLASH_KEYS / 16 / 2 /* uint16 in floats */
    };
    float *part[6];

    for (size_t i = 0; i < 6; i++) {
        part[i] = base != NULL ? base + at : NULL;
        at += attn__round_up(sizes[i], 16);
    }
    if (ws != NULL) {
        ws->qs = part[0];
        ws->s = part[1];
        ws->o = part[2];
        ws->max = part[3];
        ws->sum = part[4];
        ws->bits = (uint16_t *)(void *)part[5];
    }
    return at;
}

/* pass 1 for one group: s[r][0..keys) = sum_c qs[r][c] kt[c][..], keys a
 * multiple of 32, kt's rows ldk apart (zero past the last key); top[r] is
 * row r's max, which a block without masked keys uses as it is (NaN
 * scores may be missing from it: they surface in the exponentials). */
__attribute__((target("avx512f"))) static void
attn__flash_scores(float *s, float *top, const float *qs, const float *kt,
                   size_t ldk, size_t d_k, size_t keys)
{
    __m512 vmax[FLASH_GROUP];

#pragma GCC unroll 8
    for (size_t r = 0; r < FLASH_GROUP; r++)
        vmax[r] = _mm512_set1_ps(-INFINITY);
    for (size_t j = 0; j < keys; j += 32) {
        __m512 acc[FLASH_GROUP][2];

#pragma GCC unroll 8
        for (size_t r = 0; r < FLASH_GROUP; r++)
            acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        for (size_t c = 0; c < d_k; c++) {
            const float *kr = kt + c * ldk + j;
            __m512 k0 = _mm512_load_ps(kr), k1 = _mm512_load_ps(kr + 16);
#pragma GCC unroll 8
            for (size_t r = 0; r < FLASH_GROUP; r++) {
                __m512 q = _mm512_set1_ps(qs[r * d_k + c]);
                acc[r][0] = _mm512_fmadd_ps(q, k0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(q, k1, acc[r][1]);
            }
        }
#pragma GCC unroll 8
        for (size_t r = 0; r < FLASH_GROUP; r++) {
            _mm512_store_ps(s + r * FLASH_KEYS + j, acc[r][0]);
            _mm512_store_ps(s + r * FLASH_KEYS + j + 16, acc[r][1]);
            vmax[r] = _mm512_max_ps(vmax[r],
                                    _mm512_max_ps(acc[r][0], acc[r][1]));
        }
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < FLASH_GROUP; r++)
        top[r] = _mm512_reduce_max_ps(vmax[r]);
}

/* pass 3 for one group: o[r][..] += sum_k s[r][k] v[k][..] over keys
 * keys, v's rows ldv apart and d_v wide (read in place, masked past d_v),
 * o's dvp, in slices of 32 columns. */
__attribute__((target("avx512f"))) static void
attn__flash_values(float *o, const float *s, const float *v, size_t ldv,
                   size_t d_v, size_t dvp, size_t keys)
{
    for (size_t c0 = 0; c0 < dvp; c0 += 32) {
        __m512 acc[FLASH_GROUP][2];
        size_t w = d_v - c0 < 32 ? d_v - c0 : 32;
        __mmask16 m0 = (__mmask16)(w >= 16 ? 0xFFFFu : (1u << w) - 1);
        __mmask16 m1 = (__mmask16)(w >= 32 ? 0xFFFFu
                                   : w > 16 ? (1u << (w - 16)) - 1
                                            : 0);

#pragma GCC unroll 8
        for (size_t r = 0; r < FLASH_GROUP; r++) {
            acc[r][0] = _mm512_load_ps(o + r * dvp + c0);
            acc[r][1] = _mm512_load_ps(o + r * dvp + c0 + 16);
        }
        for (size_t k = 0; k < keys; k++) {
            const float *vr = v + k * ldv + c0;
            __m512 v0 = _mm512_maskz_loadu_ps(m0, vr);
            __m512 v1 = _mm512_maskz_loadu_ps(m1, vr + 16);
#pragma GCC unroll 8
            for (size_t r = 0; r < FLASH_GROUP; r++) {
                __m512 pk = _mm512_set1_ps(s[r * FLASH_KEYS + k]);
                acc[r][0] = _mm512_fmadd_ps(pk, v0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(pk, v1, acc[r][1]);
            }
        }
#pragma GCC unroll 8
        for (size_t r = 0; r < FLASH_GROUP; r++) {
            _mm512_store_ps(o + r * dvp + c0, acc[r][0]);
            _mm512_store_ps(o + r * dvp + c0 + 16, acc[r][1]);
        }
    }
}

/* pass 2 for one row: with masked, the keys whose bit is set in bits are
 * visible and the others hidden; s becomes P (0 where hidden) and the
 * row's running max, sum and outputs move to the new max. When every key
 * is visible and the scores are pass 1's (masked 0), top is the row's max
 * from pass 1. */
__attribute__((target("avx512f"))) static void
attn__flash_softmax(float *s, size_t keys, const uint16_t *bits, int masked,
                    float top, float *max, float *sum, float *o, size_t dvp)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vmax = ninf, vsum = _mm512_setzero_ps(), vnew;
    float fresh;

    for (size_t j = 0; masked && j < keys; j += 16) {
        __mmask16 k = (__mmask16)bits[j / 16];
        /* masked scores become -inf, as an additive mask would make them */
        __m512 v = _mm512_mask_blend_ps(k, ninf, _mm512_load_ps(s + j));
        _mm512_store_ps(s + j, v);
        vmax = _mm512_max_ps(vmax, v);
    }
    if (masked)
        top = _mm512_reduce_max_ps(vmax);
    if (isnan(top))
        top = INFINITY; /* gives NaN below, and the row reports it */
    fresh = top > *max ? top : *max;
    if (fresh == -INFINITY) { /* nothing visible yet: P = 0 */
        for (size_t j = 0; j < keys; j += 16)
            _mm512_store_ps(s + j, _mm512_setzero_ps());
        return;
    }
    if (fresh > *max) {
        /* 2^(-inf) = 0 on the first visible block: o and sum start at 0 */
        float f = exp2f(*max - fresh);
        __m512 vf = _mm512_set1_ps(f);
        for (size_t c = 0; c < dvp; c += 16)
            _mm512_store_ps(o + c, _mm512_mul_ps(_mm512_load_ps(o + c), vf));
        *sum *= f;
        *max = fresh;
    }
    vnew = _mm512_set1_ps(fresh);
    for (size_t j = 0; j < keys; j += 16) {
        /* 2^-inf is exactly 0; a NaN or +inf score makes NaN */
        __m512 e = attn__exp2_512(_mm512_sub_ps(_mm512_load_ps(s + j), vnew));
        _mm512_store_ps(s + j, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    *sum += _mm512_reduce_add_ps(vsum);
}

/* The visible bits of row q (a query of the tile, or a padding row past
 * it: none) over keys [k0, k0 + n_keys) into ws->bits, keys bits wide;
 * [lo, hi) is the row's range (attn__vis_range). */
static void attn__flash_bits(const attn__flash_args *a, attn__flash_ws *ws,
                             size_t b, size_t i, size_t q, int real,
                             attn__vis_kind kind, size_t k0, size_t n_keys,
                             size_t keys, size_t lo, size_t hi)
{
    if (!real) {
        memset(ws->bits, 0, keys / 16 * sizeof(uint16_t));
        return;
    }
    if (kind == ATTN__VIS_ALL) {
        lo = 0;
        hi = a->p->dims.m;
        if (a->p->key_padding == NULL && !a->vis->has_mask &&
            !a->vis->has_global) {
            for (size_t j = 0; j < keys; j += 16) {
                size_t h = n_keys > j ? n_keys - j : 0;
                ws->bits[j / 16] =
                    (uint16_t)(h >= 16 ? 0xFFFFu : (1u << h) - 1);
            }
            return;
        }
    }
    attn__vis_bits(a->vis, b, i, q, lo, hi, k0, n_keys, keys, ws->bits);
}

/* What a tile's spans share (attn__flash_span). */
typedef struct attn__flash_tile_ctx {
    const attn__flash_args *a;
    size_t b, i, q0, ldk, dvp;
    const float *kt, *v;
    const size_t *rlo, *rhi; /* each row's range (attn__vis_range) */
} attn__flash_tile_ctx;

/* Passes 1 to 3 for the group of rows r0 .. r0+real (of the tile) over
 * keys [s0, s1), s0 a multiple of 32, s1 - s0 <= FLASH_KEYS; kind is the
 * group's visibility there. */
__attribute__((target("avx512f"))) static void
attn__flash_span(const attn__flash_tile_ctx *t, attn__flash_ws *ws,
                 size_t r0, size_t real, size_t s0, size_t s1,
                 attn__vis_kind kind)
{
    const attn__flash_args *a = t->a;
    const attn__vis *vis = a->vis;
    size_t d_k = a->p->dims.d_k, d_v = a->p->dims.d_v;
    size_t n_keys = s1 - s0, keys = attn__round_up(n_keys, 32);
    int masked = kind != ATTN__VIS_ALL || n_keys < keys || vis->adjust;
    float top[FLASH_GROUP];

    attn__flash_scores(ws->s, top, ws->qs + r0 * d_k, t->kt + s0, t->ldk,
                       d_k, keys);
    for (size_t r = 0; r < FLASH_GROUP; r++) {
        float *sr = ws->s + r * FLASH_KEYS;
        size_t q = t->q0 + r0 + r;
        if (masked) {
            attn__flash_bits(a, ws, t->b, t->i, q, r < real, kind, s0,
                             n_keys, keys, r < real ? t->rlo[r0 + r] : 0,
                             r < real ? t->rhi[r0 + r] : 0);
            if (r < real)
                attn__vis_adjust(vis, t->b, t->i, q, s0, sr, n_keys,
                                 (float)M_LOG2E);
        }
        attn__flash_softmax(sr, keys, ws->bits, masked, top[r],
                            ws->max + r0 + r, ws->sum + r0 + r,
                            ws->o + (r0 + r) * t->dvp, t->dvp);
    }
    attn__flash_values(ws->o + r0 * t->dvp, ws->s, t->v + s0 * d_v, d_v, d_v,
                       t->dvp, n_keys);
}

__attribute__((target("avx512f"))) int
attn__flash_tile(const attn__flash_args *a, size_t b, size_t i, size_t q0,
                 size_t rows, float *base)
{
    const attn_params *p = a->p;
    const attn_dims *d = &p->dims;
    const attn__vis *vis = a->vis;
    size_t hdk = d->h * d->d_k, hdv = d->h * d->d_v;
    size_t kv = i / (d->h / d->g), dvp = attn__flash_dvp(d);
    size_t groups = (rows + FLASH_GROUP - 1) / FLASH_GROUP;
    size_t rows_pad = groups * FLASH_GROUP;
    size_t ldk = attn__round_up(d->m, 32);
    size_t glo[ATTN__FLASH_ROWS / FLASH_GROUP], ghi[ATTN__FLASH_ROWS / FLASH_GROUP];
    size_t rlo[ATTN__FLASH_ROWS], rhi[ATTN__FLASH_ROWS];
    size_t tlo = d->m, thi = 0;
    const float *kt = a->kt + (b * d->g + kv) * d->d_k * ldk;
    const float *v = a->vp + (b * d->g + kv) * d->m * d->d_v;
    attn_status rc = ATTN_OK;
    float qscale = a->scale * (float)M_LOG2E;
    attn__flash_ws ws;
    attn__flash_tile_ctx t = {a, b, i, q0, ldk, dvp, kt, v, rlo, rhi};

    attn__flash_parts(d, base, &ws);
    /* each group's key range: the union of its rows' (attn__vis_range) */
    for (size_t g = 0; g < groups; g++) {
        glo[g] = d->m;
        ghi[g] = 0;
        for (size_t r = g * FLASH_GROUP; r < rows && r < (g + 1) * FLASH_GROUP;
             r++) {
            size_t l, h;
            attn__vis_range(vis, b, q0 + r, &l, &h);
            rlo[r] = l;
            rhi[r] = h;
            if (l < h) {
                glo[g] = l < glo[g] ? l : glo[g];
                ghi[g] = h > ghi[g] ? h : ghi[g];
            }
        }
        tlo = glo[g] < tlo ? glo[g] : tlo;
        thi = ghi[g] > thi ? ghi[g] : thi;
    }
    /* the tile's queries, scaled once, with log2 e: the scores come in
     * log2 units for attn__exp2_512; rows past the tile are zero */
    for (size_t r = 0; r < rows_pad; r++) {
        float *qr = ws.qs + r * d->d_k;
        const float *src =
            r < rows ? a->q + (b * d->n + q0 + r) * hdk + i * d->d_k : NULL;
        /* vector loads: Q's rows are cold here and far apart, and a
         * scalar loop had few of their misses in flight */
        for (size_t c = 0; c < d->d_k; c += 16) {
            __mmask16 k = d->d_k - c >= 16
                              ? (__mmask16)0xFFFF
                              : (__mmask16)((1u << (d->d_k - c)) - 1);
            __m512 x = src != NULL ? _mm512_maskz_loadu_ps(k, src + c)
                                   : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(qr + c, k,
                                  _mm512_mul_ps(x, _mm512_set1_ps(qscale)));
        }
        ws.max[r] = -INFINITY;
        ws.sum[r] = 0.0f;
    }
    memset(ws.o, 0, rows_pad * dvp * sizeof(float));

    for (size_t k0 = tlo / 32 * 32; k0 < thi; k0 += FLASH_KEYS) {
        size_t k_end = thi - k0 < FLASH_KEYS ? thi : k0 + FLASH_KEYS;

        for (size_t g = 0; g < groups; g++) {
            size_t r0 = g * FLASH_GROUP;
            size_t real = rows - r0 < FLASH_GROUP ? rows - r0 : FLASH_GROUP;
            size_t s0 = glo[g] > k0 ? glo[g] / 32 * 32 : k0;
            size_t s1 = ghi[g] < k_end ? ghi[g] : k_end;
            attn__vis_kind kind;

            if (s0 >= s1)
                continue; /* the group sees no key of this block */
            kind = attn__vis_block(vis, b, i, q0 + r0, q0 + r0 + real, s0, s1);
            if (kind == ATTN__VIS_NONE)
                continue;
            if (kind == ATTN__VIS_ALL || (!vis->has_mask && !vis->has_global)) {
                attn__flash_span(&t, &ws, r0, real, s0, s1, kind);
                continue;
            }
            /* runs of 32-key chunks that some row of the group sees: the
             * holes of a boolean map and the gaps between global keys and
             * the window cost nothing */
            for (size_t c0 = s0; c0 < s1;) {
                attn__vis_kind run = ATTN__VIS_ALL, part;
                size_t start;
                while (c0 < s1 &&
                       attn__vis_block(vis, b, i, q0 + r0, q0 + r0 + real, c0,
                                       c0 + 32 < s1 ? c0 + 32 : s1) ==
                           ATTN__VIS_NONE)
                    c0 += 32;
                start = c0;
                while (c0 < s1 &&
                       (part = attn__vis_block(
                            vis, b, i, q0 + r0, q0 + r0 + real, c0,
                            c0 + 32 < s1 ? c0 + 32 : s1)) != ATTN__VIS_NONE) {
                    if (part != ATTN__VIS_ALL)
                        run = ATTN__VIS_PARTIAL;
                    c0 += 32;
                }
                if (start < s1)
                    attn__flash_span(&t, &ws, r0, real, start,
                                     c0 < s1 ? c0 : s1, run);
            }
        }
    }

    for (size_t r = 0; r < rows; r++) {
        float *out = a->cat + (b * d->n + q0 + r) * hdv + i * d->d_v;
        const float *o = ws.o + r * dvp;
        float s = ws.sum[r], inv = 0.0f;

        if (!isfinite(s)) {
            rc = ATTN_ERANGE; /* +inf or NaN scores */
        } else if (s == 0.0f) {
            /* a row of -inf: fully masked (zero output), or finite inputs
             * whose scores overflowed to -inf */
            if (attn__vis_count(vis, b, i, q0 + r) > 0)
                rc = ATTN_ERANGE;
        } else {
            inv = 1.0f / s;
        }
        for (size_t c = 0; c < d->d_v; c++)
            out[c] = o[c] * inv;
    }
    return rc;
}

void attn__flash_pack(const attn__flash_args *a, size_t b, size_t kv,
                      size_t k0)
{
    const attn_dims *d = &a->p->dims;
    size_t gdk = d->g * d->d_k, gdv = d->g * d->d_v;
    size_t ldk = attn__round_up(d->m, 32);
    size_t end = d->m - k0 < FLASH_KEYS ? d->m : k0 + FLASH_KEYS;
    float *kt = a->kt + (b * d->g + kv) * d->d_k * ldk;
    float *vp = a->vp + (b * d->g + kv) * d->m * d->d_v;
    const float *k = a->k + b * d->m * gdk + kv * d->d_k;
    const float *v = a->v + b * d->m * gdv + kv * d->d_v;

    /* K^T, 16 keys at a time: each row of kt gets one whole cache line,
     * where a key at a time wrote d_k lines ldk floats apart (the same L1
     * set when ldk is a multiple of 1024) */
    for (size_t t0 = k0; t0 < end; t0 += 16) {
        size_t t1 = end - t0 < 16 ? end : t0 + 16;
        for (size_t c = 0; c < d->d_k; c++)
            for (size_t t = t0; t < t1; t++)
                kt[c * ldk + t] = k[t * gdk + c];
    }
    if (end == d->m) /* zero up to the padded width */
        for (size_t c = 0; c < d->d_k; c++)
            memset(kt + c * ldk + end, 0, (ldk - end) * sizeof(float));
    /* V's rows of this head next to each other: in place they are g * d_v
     * floats apart, and at 1 KiB (g * d_v = 256) pass 3's rows of V fall
     * into a few L1 sets (n = 2048, d_model 256, 8 heads: 8% slower) */
    for (size_t t = k0; t < end; t++)
        memcpy(vp + t * d->d_v, v + t * gdv, d->d_v * sizeof(float));
}

size_t attn__flash_packed_floats(const attn_dims *d)
{
    size_t bg, kt, vp;

    /* the sizes of K (up to 31 keys more a head; m is at most INT32_MAX)
     * and V */
    if (attn__mul(d->B, d->g, &bg) ||
        attn__mul(d->d_k, attn__round_up(d->m, 32), &kt) ||
        attn__mul(d->m, d->d_v, &vp) || kt > SIZE_MAX - vp ||
        attn__mul(bg, kt + vp, &kt))
        return SIZE_MAX; /* more than any allocation can hold */
    return kt;
}

void attn__flash_place(attn__flash_args *a, float *packed)
{
    const attn_dims *d = &a->p->dims;

    a->kt = packed;
    a->vp = packed + d->B * d->g * d->d_k * attn__round_up(d->m, 32);
}

size_t attn__flash_floats(const attn_dims *d)
{
    if (!attn__flash_on || !__builtin_cpu_supports("avx512f") ||
        d->d_k > FLASH_MAX_DK || d->d_v > FLASH_MAX_DV)
        return 0;
    return attn__flash_parts(d, NULL, NULL);
}

#else

attn_status attn__flash_tile(const attn__flash_args *a, size_t b, size_t i,
                             size_t q0, size_t rows, float *base)
{
    (void)a;
    (void)b;
    (void)i;
    (void)q0;
    (void)rows;
    (void)base;
    return ATTN_EINVAL;
}

void attn__flash_pack(const attn__flash_args *a, size_t b, size_t kv,
                      size_t k0)
{
    (void)a;
    (void)b;
    (void)kv;
    (void)k0;
}

size_t attn__flash_packed_floats(const attn_dims *d)
{
    (void)d;
    return 0;
}

void attn__flash_place(attn__flash_args *a, float *packed)
{
    a->kt = a->vp = packed;
}

size_t attn__flash_floats(const attn_dims *d)
{
    (void)d;
    (void)attn__round_up;
    return 0;
}

#endif

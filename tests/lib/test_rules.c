/* test_rules.c: the score rules of model families (positions, RoPE, q/k
 * norm, softcap, ALiBi, bias and boolean maps in every broadcast form,
 * windows, global tokens, a separate value source) through every fast
 * path, against the float64 reference, on a table of shapes that cross
 * each rule alone and combined.
 *
 * Paths: per-head weights (sgemm tiles written into the weights), mean
 * weights, outputs only on a 2-worker executor with the fused kernel and
 * without it, outputs only on the calling thread, head figures with
 * top-k (analysis tiles), and the extras q_out, k_out, value_norms.
 * Tolerance: the contract's, TL_TOL * (1 + |ref|) element-wise. */
#include "test_lib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/src/attn_visible.h"

/* The fused kernel's switch (attn_flash.c). */
int attn__flash_enable(int on);

typedef enum rl_pos {
    RL_POS_DEFAULT = 0, /* 0 .. n-1 and 0 .. m-1 */
    RL_POS_OFFSET,      /* per batch element: queries from 3 + 5b, keys
                           from 5b (cross) */
    RL_POS_UNSORTED,    /* keys in falling order (the search-free paths) */
    RL_POS_DECODE,      /* the queries are the last n of m positions */
    RL_POS_HUGE,        /* OFFSET's, plus INT64_MAX - 1000 (no overflow
                           in the window and causal bounds) */
    RL_POS_BEYOND,      /* queries from m / 2 + b, two apart, keys 0 ..
                           m-1: a left window leaves the last rows no key */
    RL_POS_FAR,         /* queries from 2^30 + b, seven apart, keys 0 ..
                           m-1 given: ALiBi's distances all near 2^30 */
    RL_POS_FAR_UNSORTED, /* the same, the keys in falling order */
    RL_POS_FAR_DEFAULT  /* the same queries, the keys' positions not given
                           (0 .. m-1 by default) */
} rl_pos;

typedef struct rl_spec {
    const char *name;
    size_t B, n, m, d_model, h, g, d_k, d_v;
    bool cross, w_o;
    attn_mask mask;
    tl_pad pad;
    int rope; /* 0 none, 1 half, 2 interleaved */
    size_t rope_dim; /* 0: d_k */
    bool inv_freq;
    double factor, theta;
    bool alibi;
    int bias_form, mask_form; /* 0 none, 1 [n][m], 2 [h][n][m], 3 [B][n][m],
                                 4 [B][h][n][m] */
    bool window;
    size_t left, right;
    bool globals; /* tokens 0 and n/2 */
    float softcap;
    attn_qk_norm_over qkn;
    size_t d_val;
    rl_pos pos;
    bool blocky; /* the boolean map hides whole 64-key stretches of rows */
    float bias_at; /* added to every bias: rows of large, near values */
} rl_spec;

#define U ATTN_UNBOUNDED

static const rl_spec rl_table[] = {
    {.name = "plain", .B = 2, .n = 40, .m = 40, .d_model = 24, .h = 4,
     .g = 4, .d_k = 8, .d_v = 8},
    {.name = "rope_half", .B = 2, .n = 37, .m = 37, .d_model = 24, .h = 4,
     .g = 2, .d_k = 16, .d_v = 8, .mask = ATTN_MASK_CAUSAL, .rope = 1},
    {.name = "rope_interleaved_partial", .B = 1, .n = 33, .m = 33,
     .d_model = 16, .h = 2, .g = 1, .d_k = 16, .d_v = 8, .rope = 2,
     .rope_dim = 8, .theta = 500.0},
    {.name = "rope_inv_freq_factor_pos", .B = 2, .n = 20, .m = 29,
     .d_model = 16, .h = 4, .g = 2, .d_k = 8, .d_v = 12, .cross = true,
     .mask = ATTN_MASK_CAUSAL, .rope = 1, .inv_freq = true, .factor = 1.3,
     .pos = RL_POS_OFFSET, .w_o = true},
    {.name = "alibi_causal", .B = 2, .n = 45, .m = 45, .d_model = 16,
     .h = 4, .g = 4, .d_k = 8, .d_v = 8, .mask = ATTN_MASK_CAUSAL,
     .alibi = true, .w_o = true},
    {.name = "bias_nm", .B = 2, .n = 19, .m = 23, .d_model = 16, .h = 3,
     .g = 1, .d_k = 8, .d_v = 4, .cross = true, .bias_form = 1},
    {.name = "bias_hnm", .B = 2, .n = 19, .m = 19, .d_model = 16, .h = 3,
     .g = 3, .d_k = 8, .d_v = 4, .bias_form = 2},
    {.name = "bias_bnm", .B = 3, .n = 17, .m = 17, .d_model = 16, .h = 2,
     .g = 2, .d_k = 8, .d_v = 4, .bias_form = 3,
     .mask = ATTN_MASK_CAUSAL},
    {.name = "bias_bhnm", .B = 2, .n = 17, .m = 21, .d_model = 16, .h = 2,
     .g = 1, .d_k = 8, .d_v = 4, .cross = true, .bias_form = 4},
    {.name = "mask_nm", .B = 2, .n = 30, .m = 30, .d_model = 16, .h = 2,
     .g = 2, .d_k = 8, .d_v = 8, .mask_form = 1},
    {.name = "mask_hnm_pad", .B = 3, .n = 30, .m = 30, .d_model = 16,
     .h = 4, .g = 2, .d_k = 8, .d_v = 8, .mask_form = 2,
     .pad = TL_PAD_SOME},
    {.name = "mask_bnm_causal", .B = 2, .n = 30, .m = 30, .d_model = 16,
     .h = 2, .g = 1, .d_k = 8, .d_v = 8, .mask_form = 3,
     .mask = ATTN_MASK_CAUSAL},
    {.name = "mask_bhnm_cross", .B = 2, .n = 25, .m = 31, .d_model = 16,
     .h = 2, .g = 2, .d_k = 8, .d_v = 8, .mask_form = 4, .cross = true},
    {.name = "window_left", .B = 2, .n = 300, .m = 300, .d_model = 16,
     .h = 2, .g = 1, .d_k = 16, .d_v = 16, .mask = ATTN_MASK_CAUSAL,
     .window = true, .left = 37, .right = U},
    {.name = "window_right", .B = 1, .n = 280, .m = 280, .d_model = 16,
     .h = 2, .g = 2, .d_k = 8, .d_v = 8, .window = true, .left = U,
     .right = 40},
    {.name = "window_both", .B = 2, .n = 290, .m = 290, .d_model = 16,
     .h = 2, .g = 1, .d_k = 8, .d_v = 16, .window = true, .left = 70,
     .right = 33, .pad = TL_PAD_SOME},
    {.name = "window_global", .B = 2, .n = 300, .m = 300, .d_model = 16,
     .h = 2, .g = 2, .d_k = 8, .d_v = 8, .window = true, .left = 20,
     .right = 20, .globals = true},
    {.name = "window_global_causal_offset", .B = 2, .n = 150, .m = 170,
     .d_model = 16, .h = 2, .g = 1, .d_k = 8, .d_v = 8, .cross = true,
     .mask = ATTN_MASK_CAUSAL, .window = true, .left = 30, .right = U,
     .globals = true, .pos = RL_POS_OFFSET},
    {.name = "window_unsorted", .B = 2, .n = 60, .m = 70, .d_model = 16,
     .h = 2, .g = 2, .d_k = 8, .d_v = 8, .cross = true,
     .mask = ATTN_MASK_CAUSAL, .window = true, .left = 9, .right = 5,
     .pos = RL_POS_UNSORTED},
    {.name = "softcap", .B = 2, .n = 40, .m = 40, .d_model = 16, .h = 2,
     .g = 2, .d_k = 16, .d_v = 8, .softcap = 1.5f,
     .mask = ATTN_MASK_CAUSAL},
    {.name = "softcap_window_long", .B = 1, .n = 300, .m = 300,
     .d_model = 16, .h = 2, .g = 1, .d_k = 16, .d_v = 8, .softcap = 2.0f,
     .mask = ATTN_MASK_CAUSAL, .window = true, .left = 63, .right = U},
    {.name = "qk_norm_head", .B = 2, .n = 30, .m = 30, .d_model = 16,
     .h = 4, .g = 2, .d_k = 8, .d_v = 8, .qkn = ATTN_QK_NORM_HEAD,
     .rope = 1},
    {.name = "qk_norm_all", .B = 2, .n = 30, .m = 36, .d_model = 16,
     .h = 2, .g = 1, .d_k = 8, .d_v = 8, .cross = true,
     .qkn = ATTN_QK_NORM_ALL, .w_o = true},
    {.name = "value_dval", .B = 2, .n = 20, .m = 28, .d_model = 16, .h = 4,
     .g = 2, .d_k = 8, .d_v = 8, .cross = true, .d_val = 11, .w_o = true},
    {.name = "value_self", .B = 1, .n = 20, .m = 20, .d_model = 16, .h = 2,
     .g = 2, .d_k = 8, .d_v = 8, .d_val = 5, .mask = ATTN_MASK_CAUSAL},
    {.name = "decode_step", .B = 2, .n = 1, .m = 333, .d_model = 16,
     .h = 4, .g = 1, .d_k = 16, .d_v = 8, .cross = true,
     .mask = ATTN_MASK_CAUSAL, .pos = RL_POS_DECODE, .rope = 1,
     .alibi = true},
    {.name = "decode_window", .B = 1, .n = 4, .m = 300, .d_model = 16,
     .h = 2, .g = 2, .d_k = 8, .d_v = 8, .cross = true,
     .mask = ATTN_MASK_CAUSAL, .pos = RL_POS_DECODE, .window = true,
     .left = 50, .right = U},
    {.name = "everything", .B = 2, .n = 270, .m = 270, .d_model = 24,
     .h = 4, .g = 2, .d_k = 16, .d_v = 16, .mask = ATTN_MASK_CAUSAL,
     .pad = TL_PAD_SOME, .rope = 2, .rope_dim = 12, .factor = 0.9,
     .alibi = true, .bias_form = 2, .mask_form = 4, .window = true,
     .left = 45, .right = U, .globals = true, .softcap = 3.0f,
     .qkn = ATTN_QK_NORM_HEAD, .d_val = 10, .w_o = true,
     .pos = RL_POS_OFFSET},
    {.name = "huge_positions", .B = 2, .n = 40, .m = 50, .d_model = 16,
     .h = 2, .g = 2, .d_k = 8, .d_v = 8, .cross = true,
     .mask = ATTN_MASK_CAUSAL, .window = true, .left = 7, .right = 3,
     .alibi = true, .pos = RL_POS_HUGE},
    /* ALiBi with every key some 2^30 away: the rows keep their scores'
     * differences, which a bias of slope * 2^30 in float32 would lose */
    /* rows of biases near -10^6, near -10^4 (in float32, steps of 1/16
     * and 1/1024): their differences and the scores' stay exact */
    {.name = "bias_large", .B = 2, .n = 19, .m = 23, .d_model = 16, .h = 3,
     .g = 3, .d_k = 8, .d_v = 4, .cross = true, .bias_form = 4,
     .bias_at = -1e6f},
    {.name = "bias_large_causal", .B = 2, .n = 30, .m = 30, .d_model = 16,
     .h = 2, .g = 1, .d_k = 8, .d_v = 4, .bias_form = 2, .bias_at = -1e4f,
     .mask = ATTN_MASK_CAUSAL, .softcap = 5.0f},
    {.name = "alibi_far_keys", .B = 2, .n = 20, .m = 33, .d_model = 16,
     .h = 4, .g = 2, .d_k = 8, .d_v = 8, .cross = true, .alibi = true,
     .pos = RL_POS_FAR},
    {.name = "alibi_far_keys_unsorted", .B = 2, .n = 20, .m = 33,
     .d_model = 16, .h = 4, .g = 2, .d_k = 8, .d_v = 8, .cross = true,
     .alibi = true, .pos = RL_POS_FAR_UNSORTED, .w_o = true},
    {.name = "alibi_far_keys_default", .B = 2, .n = 20, .m = 33,
     .d_model = 16, .h = 4, .g = 4, .d_k = 8, .d_v = 8, .cross = true,
     .alibi = true, .pos = RL_POS_FAR_DEFAULT},
    /* rows the window's left bound leaves without a key (every key
     * before it), or whose keys inside it are all padded: zero weights */
    {.name = "window_left_empties_rows", .B = 2, .n = 30, .m = 40,
     .d_model = 16, .h = 2, .g = 1, .d_k = 8, .d_v = 8, .cross = true,
     .window = true, .left = 3, .right = U, .pos = RL_POS_BEYOND},
    {.name = "window_left_padded", .B = 3, .n = 30, .m = 30, .d_model = 16,
     .h = 2, .g = 2, .d_k = 8, .d_v = 8, .window = true, .left = 0,
     .right = U, .pad = TL_PAD_SOME},
    {.name = "mask_block_sparse", .B = 1, .n = 300, .m = 600, .d_model = 16,
     .h = 2, .g = 1, .d_k = 16, .d_v = 8, .cross = true, .mask_form = 2,
     .blocky = true, .softcap = 4.0f},
    {.name = "all_masked_rows", .B = 2, .n = 24, .m = 24, .d_model = 16,
     .h = 2, .g = 2, .d_k = 8, .d_v = 8, .mask_form = 4,
     .pad = TL_PAD_ALL_B0, .window = true, .left = 2, .right = 0},
};

/* A case of the table: the base problem and the rules' arrays. */
typedef struct rl_case {
    tl_case c;
    int64_t *pos, *kpos;
    float *inv_freq, *slopes, *bias, *qw, *kw, *value, *w_v;
    uint8_t *mask;
    size_t globals[2];
} rl_case;

static float *rl_fill(tl_rng *r, size_t count, float lo, float hi)
{
    float *v = malloc((count ? count : 1) * sizeof(float));

    TL_CHECK(v != NULL, "test setup: out of memory");
    for (size_t i = 0; i < count; i++)
        v[i] = tl_rng_uniform(r, lo, hi);
    return v;
}

/* The map's element count and strides for a broadcast form. */
static size_t rl_map(const rl_spec *s, int form, attn_score_map *map)
{
    size_t nm = s->n * s->m;

    map->stride_b = form == 3 ? nm : form == 4 ? s->h * nm : 0;
    map->stride_h = form == 2 || form == 4 ? nm : 0;
    switch (form) {
    case 1:
        return nm;
    case 2:
        return s->h * nm;
    case 3:
        return s->B * nm;
    default:
        return s->B * s->h * nm;
    }
}

static void rl_case_init(rl_case *rc, const rl_spec *s, uint64_t seed)
{
    tl_spec base = {s->name,
                    {s->B, s->n, s->m, s->d_model, s->d_model, s->h, s->g,
                     s->d_k, s->d_v, s->h * s->d_v},
                    s->cross, s->w_o, TL_B_ALL, s->mask, s->pad, 0.0f,
                    0.0f};
    attn_params *p = &rc->c.p;
    tl_rng r;

    memset(rc, 0, sizeof *rc);
    if (s->w_o)
        base.dims.d_out = 12;
    tl_case_init(&rc->c, &base, seed);
    tl_rng_seed(&r, seed ^ 0x5eed);
    if (s->pos != RL_POS_DEFAULT) {
        rc->pos = malloc(s->B * s->n * sizeof(int64_t));
        rc->kpos = malloc(s->B * s->m * sizeof(int64_t));
        TL_CHECK(rc->pos && rc->kpos, "test setup: out of memory");
        for (size_t b = 0; b < s->B; b++) {
            for (size_t a = 0; a < s->n; a++)
                rc->pos[b * s->n + a] =
                    s->pos == RL_POS_DECODE ? (int64_t)(s->m - s->n + a)
                    : s->pos == RL_POS_HUGE
                        ? INT64_MAX - 1000 + (int64_t)(a + 3 + 5 * b)
                    : s->pos == RL_POS_OFFSET
                        ? (int64_t)(a + 3 + 5 * b)
                    : s->pos == RL_POS_BEYOND
                        ? (int64_t)(s->m / 2 + 2 * a + b)
                    : s->pos >= RL_POS_FAR
                        ? ((int64_t)1 << 30) + (int64_t)(7 * a + b)
                        : (int64_t)(a * s->m / s->n + b);
            for (size_t c = 0; c < s->m; c++)
                rc->kpos[b * s->m + c] =
                    s->pos == RL_POS_UNSORTED || s->pos == RL_POS_FAR_UNSORTED
                        ? (int64_t)(s->m - 1 - c)
                    : s->pos == RL_POS_HUGE
                        ? INT64_MAX - 1000 + (int64_t)(c + 5 * b)
                    : s->pos == RL_POS_OFFSET ? (int64_t)(c + 5 * b)
                                              : (int64_t)c;
        }
        p->positions = rc->pos;
        p->key_positions = s->pos == RL_POS_FAR_DEFAULT ? NULL : rc->kpos;
    }
    if (s->rope) {
        p->rope.dim = s->rope_dim ? s->rope_dim : s->d_k;
        p->rope.style = s->rope == 1 ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
        p->rope.theta = s->theta;
        p->rope.attention_factor = s->factor;
        if (s->inv_freq) {
            rc->inv_freq = malloc(p->rope.dim / 2 * sizeof(float));
            TL_CHECK(rc->inv_freq != NULL, "test setup: out of memory");
            for (size_t q = 0; q < p->rope.dim / 2; q++)
                rc->inv_freq[q] = (float)(0.5 * pow(10000.0, -2.0 * (double)q /
                                                              (double)p->rope.dim));
            p->rope.inv_freq = rc->inv_freq;
        }
    }
    if (s->alibi) {
        rc->slopes = malloc(s->h * sizeof(float));
        TL_CHECK(rc->slopes != NULL, "test setup: out of memory");
        for (size_t i = 0; i < s->h; i++)
            rc->slopes[i] = (float)pow(2.0, -8.0 * (double)(i + 1) / (double)s->h);
        p->alibi_slopes = rc->slopes;
    }
    if (s->bias_form) {
        size_t count = rl_map(s, s->bias_form, &p->score_bias);
        rc->bias = rl_fill(&r, count, -2.0f + s->bias_at, 2.0f + s->bias_at);
        p->score_bias.data = rc->bias;
    }
    if (s->mask_form) {
        size_t count = rl_map(s, s->mask_form, &p->score_mask);
        rc->mask = malloc(count);
        TL_CHECK(rc->mask != NULL, "test setup: out of memory");
        for (size_t t = 0; t < count; t++)
            rc->mask[t] =
                s->blocky
                    ? (uint8_t)((t / s->m / 40 + t % s->m / 64) % 3 != 0 ||
                                tl_rng_next(&r) % 10 == 0)
                    : (uint8_t)(tl_rng_next(&r) % 10 < 3 ? 1 + t % 200 : 0);
        /* one fully hidden row in the first map */
        if (s->n > 1)
            memset(rc->mask + s->m, 1, s->m);
        p->score_mask.data = rc->mask;
    }
    if (s->window) {
        p->window.on = 1;
        p->window.left = s->left;
        p->window.right = s->right;
    }
    if (s->globals) {
        rc->globals[0] = 0;
        rc->globals[1] = s->n / 2;
        p->global_tokens = rc->globals;
        p->n_global = 2;
    }
    p->softcap = s->softcap;
    if (s->qkn != ATTN_QK_NORM_NONE) {
        size_t qn = s->qkn == ATTN_QK_NORM_HEAD ? s->d_k : s->h * s->d_k;
        size_t kn = s->qkn == ATTN_QK_NORM_HEAD ? s->d_k : s->g * s->d_k;
        rc->qw = rl_fill(&r, qn, 0.5f, 1.5f);
        rc->kw = rl_fill(&r, kn, 0.5f, 1.5f);
        p->qk_norm.over = s->qkn;
        p->qk_norm.q_weight = rc->qw;
        p->qk_norm.k_weight = rc->kw;
        p->qk_norm.eps = 1e-5;
    }
    if (s->d_val) {
        rc->value = rl_fill(&r, s->B * s->m * s->d_val, -1.0f, 1.0f);
        rc->w_v = rl_fill(&r, s->d_val * s->g * s->d_v, -0.5f, 0.5f);
        p->value = rc->value;
        p->d_val = s->d_val;
        p->w_v = rc->w_v;
    }
}

static void rl_case_free(rl_case *rc)
{
    tl_case_free(&rc->c);
    free(rc->pos);
    free(rc->kpos);
    free(rc->inv_freq);
    free(rc->slopes);
    free(rc->bias);
    free(rc->qw);
    free(rc->kw);
    free(rc->value);
    free(rc->w_v);
    free(rc->mask);
}

static float *rl_buf(size_t count)
{
    float *v = malloc((count ? count : 1) * sizeof(float));

    TL_CHECK(v != NULL, "test setup: out of memory");
    for (size_t i = 0; i < count; i++)
        v[i] = NAN;
    return v;
}

/* Outputs (and weights in p->weights' mode) of attn_forward_ex. */
static void rl_run(const attn_params *p, const attn_extras *ex, float *out,
                   float *w, const char *path, const char *name)
{
    int st = attn_forward_ex(p, out, w, ex);

    TL_CHECK(st == ATTN_OK, "%s, %s: attn_forward_ex returned %d (%s)", name,
             path, st, attn_strerror(st));
}

static void rl_close(const char *name, const char *path, const char *what,
                     const float *got, const float *ref, size_t count)
{
    char label[160];

    snprintf(label, sizeof label, "%s, %s: %s", name, path, what);
    tl_assert_close_f(label, got, ref, count);
}

START_TEST(test_rules_paths)
{
    const rl_spec *s = &rl_table[_i];
    rl_case rc;
    attn_params p;
    tl_exec ex2;
    size_t out_n, w_n, qo_n, ko_n, vn_n;
    float *ref_out, *ref_w, *ref_q, *ref_k, *ref_vn, *mean;
    float *out, *w, *q, *k, *vn;
    attn_extras rex, fex;
    int was;
    int st;

    rl_case_init(&rc, s, 1000 + (uint64_t)_i);
    p = rc.c.p;
    p.weights = ATTN_WEIGHTS_PER_HEAD;
    out_n = tl_output_elems(&p);
    w_n = tl_weights_elems(&p, ATTN_WEIGHTS_PER_HEAD);
    qo_n = s->B * s->h * s->n * s->d_k;
    ko_n = s->B * s->g * s->m * s->d_k;
    vn_n = s->B * s->h * s->m;

    /* the reference, with its extras */
    ref_out = rl_buf(out_n);
    ref_w = rl_buf(w_n);
    ref_q = rl_buf(qo_n);
    ref_k = rl_buf(ko_n);
    ref_vn = rl_buf(vn_n);
    memset(&rex, 0, sizeof rex);
    rex.q_out = ref_q;
    rex.k_out = ref_k;
    rex.value_norms = ref_vn;
    st = attn_forward_ref_ex(&p, ref_out, ref_w, &rex);
    ck_assert_msg(st == ATTN_OK, "%s: reference returned %d", s->name, st);
    tl_assert_finite("reference output", ref_out, out_n);

    /* per-head weights with the extras, on the calling thread */
    out = rl_buf(out_n);
    w = rl_buf(w_n);
    q = rl_buf(qo_n);
    k = rl_buf(ko_n);
    vn = rl_buf(vn_n);
    memset(&fex, 0, sizeof fex);
    fex.q_out = q;
    fex.k_out = k;
    fex.value_norms = vn;
    rl_run(&p, &fex, out, w, "per-head", s->name);
    rl_close(s->name, "per-head", "output", out, ref_out, out_n);
    rl_close(s->name, "per-head", "weights", w, ref_w, w_n);
    rl_close(s->name, "extras", "q_out", q, ref_q, qo_n);
    rl_close(s->name, "extras", "k_out", k, ref_k, ko_n);
    rl_close(s->name, "extras", "value_norms", vn, ref_vn, vn_n);

    /* mean weights */
    p.weights = ATTN_WEIGHTS_MEAN;
    mean = tl_mean_heads(&p, ref_w);
    rl_run(&p, NULL, out, w, "mean", s->name);
    rl_close(s->name, "mean", "output", out, ref_out, out_n);
    rl_close(s->name, "mean", "weights", w, mean, s->B * s->n * s->m);

    /* outputs only: fused kernel and sgemm tiles on an executor, then the
     * calling thread */
    tl_exec_init(&ex2, TL_EXEC_THREADS, 2);
    p.weights = ATTN_WEIGHTS_NONE;
    p.executor = &ex2.iface;
    rl_run(&p, NULL, out, NULL, "outputs, fused, executor", s->name);
    rl_close(s->name, "outputs, fused, executor", "output", out, ref_out,
             out_n);
    was = attn__flash_enable(0);
    rl_run(&p, NULL, out, NULL, "outputs, sgemm, executor", s->name);
    attn__flash_enable(was);
    rl_close(s->name, "outputs, sgemm, executor", "output", out, ref_out,
             out_n);
    p.weights = ATTN_WEIGHTS_PER_HEAD;
    rl_run(&p, NULL, out, w, "per-head, executor", s->name);
    rl_close(s->name, "per-head, executor", "weights", w, ref_w, w_n);
    p.executor = NULL;
    p.weights = ATTN_WEIGHTS_NONE;
    rl_run(&p, NULL, out, NULL, "outputs, calling thread", s->name);
    rl_close(s->name, "outputs, calling thread", "output", out, ref_out,
             out_n);

    /* head figures and top-k from the analysis tiles */
    {
        size_t kk = s->m < 3 ? s->m : 3, rows = s->B * s->h * s->n;
        attn_head_stats *hs = calloc(s->B * s->h, sizeof *hs);
        attn_head_stats *rs = calloc(s->B * s->h, sizeof *rs);
        double *sim = calloc(s->B * s->h * s->h, sizeof(double));
        double *rsim = calloc(s->B * s->h * s->h, sizeof(double));
        size_t *sk = calloc(s->B, sizeof(size_t));
        size_t *rsk = calloc(s->B, sizeof(size_t));
        uint32_t *idx = calloc(rows * kk, sizeof(uint32_t));
        float *val = calloc(rows * kk, sizeof(float));
        attn_extras aex, arx;

        TL_CHECK(hs && rs && sim && rsim && sk && rsk && idx && val,
                 "test setup: out of memory");
        memset(&aex, 0, sizeof aex);
        aex.stats = 1;
        aex.heads = hs;
        aex.similarity = sim;
        aex.skipped_rows = sk;
        aex.top_k = kk;
        aex.top_index = idx;
        aex.top_weight = val;
        p.weights = ATTN_WEIGHTS_PER_HEAD;
        p.executor = &ex2.iface;
        rl_run(&p, &aex, out, NULL, "analysis", s->name);
        rl_close(s->name, "analysis", "output", out, ref_out, out_n);
        p.executor = NULL;
        memset(&arx, 0, sizeof arx);
        arx.stats = 1;
        arx.heads = rs;
        arx.similarity = rsim;
        arx.skipped_rows = rsk;
        st = attn_analyze_ref(&p, ref_w, &arx);
        ck_assert_int_eq(st, ATTN_OK);
        for (size_t b = 0; b < s->B; b++)
            ck_assert_msg(sk[b] == rsk[b], "%s: skipped rows %zu, ref %zu",
                          s->name, sk[b], rsk[b]);
        for (size_t t = 0; t < s->B * s->h; t++) {
            double pairs[3][2] = {{hs[t].entropy, rs[t].entropy},
                                  {hs[t].entropy_normalized,
                                   rs[t].entropy_normalized},
                                  {hs[t].confidence, rs[t].confidence}};
            for (int f = 0; f < 3; f++)
                TL_CHECK(fabs(pairs[f][0] - pairs[f][1]) <=
                             1e-3 * (1.0 + fabs(pairs[f][1])),
                         "%s: head %zu figure %d: %g, ref %g", s->name, t,
                         f, pairs[f][0], pairs[f][1]);
        }
        /* top-k: each returned weight is its key's weight, descending */
        for (size_t row = 0; row < rows; row++)
            for (size_t t = 0; t < kk; t++) {
                float got = val[row * kk + t];
                float want = ref_w[row * s->m + idx[row * kk + t]];
                TL_CHECK(fabsf(got - want) <= TL_TOL * (1.0f + fabsf(want)),
                         "%s: top-k row %zu rank %zu: %g, ref %g", s->name,
                         row, t, got, want);
                TL_CHECK(t == 0 || got <= val[row * kk + t - 1] + 1e-6f,
                         "%s: top-k row %zu not descending", s->name, row);
            }
        free(hs);
        free(rs);
        free(sim);
        free(rsim);
        free(sk);
        free(rsk);
        free(idx);
        free(val);
    }

    tl_exec_destroy(&ex2);
    free(ref_out);
    free(ref_w);
    free(ref_q);
    free(ref_k);
    free(ref_vn);
    free(mean);
    free(out);
    free(w);
    free(q);
    free(k);
    free(vn);
    rl_case_free(&rc);
}
END_TEST

/* attn_cost on a case small enough to count by hand: n = m = 10, causal,
 * one head, d_model = d_k = d_v = 4, no W_O. */
START_TEST(test_rules_cost_counts_visible_pairs)
{
    tl_spec spec = {"cost", {1, 10, 10, 4, 4, 1, 1, 4, 4, 4}, false, false,
                    0, ATTN_MASK_CAUSAL, TL_PAD_NONE, 0, 0};
    /* projections 3 * 2 * 10 * 4 * 4, rows 10 * ATTN_COST_ROW, and per
     * visible pair 2 * (d_k + d_v) + ATTN_COST_EXP */
    const uint64_t fixed = 960 + 10 * ATTN_COST_ROW, per = 16 + ATTN_COST_EXP;
    int64_t decode_pos[1] = {9};
    tl_case c;
    attn_params p;
    uint64_t cost, flops, flops_window;

    tl_case_init(&c, &spec, 3);
    p = c.p;
    ck_assert_int_eq(attn_cost(&p, &cost), ATTN_OK);
    ck_assert_uint_eq(cost, fixed + 55 * per); /* 1 + 2 + .. + 10 */
    ck_assert_int_eq(attn_flops(&p, &flops), ATTN_OK);
    p.window.on = 1;
    p.window.left = 2;
    p.window.right = ATTN_UNBOUNDED;
    ck_assert_int_eq(attn_cost(&p, &cost), ATTN_OK);
    ck_assert_uint_eq(cost, fixed + 27 * per); /* 1 + 2 + 8 * 3 */
    /* the contract's flops count the whole n x m whatever hides it */
    ck_assert_int_eq(attn_flops(&p, &flops_window), ATTN_OK);
    ck_assert_uint_eq(flops, flops_window);
    p.softcap = 5.0f;
    ck_assert_int_eq(attn_cost(&p, &cost), ATTN_OK);
    ck_assert_uint_eq(cost, fixed + 27 * (per + ATTN_COST_SOFTCAP));
    tl_case_free(&c);

    /* a decode step: one query at position m - 1 sees all m keys */
    spec.dims.n = 1;
    spec.cross = true;
    tl_case_init(&c, &spec, 3);
    p = c.p;
    p.positions = decode_pos;
    ck_assert_int_eq(attn_cost(&p, &cost), ATTN_OK);
    ck_assert_uint_eq(cost, 32 + 2 * 2 * 10 * 4 * 4 + ATTN_COST_ROW +
                                10 * per);
    tl_case_free(&c);
}
END_TEST

/* attn_workspace_bytes is the peak the library's allocations reach, on
 * every path (the caller's allocator counts them). */
START_TEST(test_rules_workspace_is_the_peak)
{
    static const int specs[] = {0, 3, 16, 23, 27};
    const rl_spec *s = &rl_table[specs[_i / 4]];
    int path = _i % 4;
    rl_case rc;
    attn_params p;
    tl_exec e;
    tl_alloc a;
    attn_extras ex;
    size_t out_n, w_n;
    float *out, *w = NULL, *vn;
    attn_head_stats *hs;
    double *sim;
    size_t *sk;
    uint64_t bytes;
    int was = attn__flash_enable(path != 3);

    rl_case_init(&rc, s, 5);
    p = rc.c.p;
    tl_exec_init(&e, TL_EXEC_THREADS, 2);
    p.executor = &e.iface;
    p.weights = path == 0   ? ATTN_WEIGHTS_PER_HEAD
                : path == 1 ? ATTN_WEIGHTS_MEAN
                            : ATTN_WEIGHTS_NONE;
    out_n = tl_output_elems(&p);
    out = rl_buf(out_n);
    vn = rl_buf(s->B * s->h * s->m);
    hs = calloc(s->B * s->h, sizeof *hs);
    sim = calloc(s->B * s->h * s->h, sizeof *sim);
    sk = calloc(s->B, sizeof *sk);
    TL_CHECK(hs && sim && sk, "test setup: out of memory");
    if (p.weights != ATTN_WEIGHTS_NONE) {
        w_n = tl_weights_elems(&p, p.weights);
        w = rl_buf(w_n);
    }
    memset(&ex, 0, sizeof ex);
    ex.value_norms = vn;
    if (path == 1) {
        ex.stats = 1;
        ex.heads = hs;
        ex.similarity = sim;
        ex.skipped_rows = sk;
    }
    ck_assert_int_eq(attn_workspace_bytes(&p, &ex, 2, &bytes), ATTN_OK);
    tl_alloc_init(&a, 0);
    p.allocator = &a.iface;
    ck_assert_int_eq(attn_forward_ex(&p, out, w, &ex), ATTN_OK);
    ck_assert_msg(a.peak_bytes == bytes,
                  "%s, path %d: peak %zu bytes, attn_workspace_bytes %llu",
                  s->name, path, a.peak_bytes, (unsigned long long)bytes);
    tl_alloc_destroy(&a);
    attn__flash_enable(was);
    tl_exec_destroy(&e);
    free(out);
    free(w);
    free(vn);
    free(hs);
    free(sim);
    free(sk);
    rl_case_free(&rc);
}
END_TEST

/* Failing each of the library's allocations in turn, on the case that
 * uses every rule and every extra that allocates: ATTN_ENOMEM, nothing
 * leaked, and the call after the last allocation succeeds. */
START_TEST(test_rules_alloc_fail_each)
{
    const rl_spec *s = &rl_table[27]; /* "everything" */
    rl_case rc;
    attn_params p;
    attn_extras ex;
    tl_alloc a;
    size_t total;
    float *out, *vn;
    attn_head_stats *hs;
    double *sim;
    size_t *sk;

    ck_assert_str_eq(s->name, "everything");
    rl_case_init(&rc, s, 9);
    p = rc.c.p;
    p.weights = _i ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE;
    out = rl_buf(tl_output_elems(&p) +
                 (_i ? tl_weights_elems(&p, p.weights) : 0));
    vn = rl_buf(s->B * s->h * s->m);
    hs = calloc(s->B * s->h, sizeof *hs);
    sim = calloc(s->B * s->h * s->h, sizeof *sim);
    sk = calloc(s->B, sizeof *sk);
    TL_CHECK(hs && sim && sk, "test setup: out of memory");
    memset(&ex, 0, sizeof ex);
    ex.value_norms = vn;
    if (_i) {
        ex.stats = 1;
        ex.heads = hs;
        ex.similarity = sim;
        ex.skipped_rows = sk;
    }
    tl_alloc_init(&a, 0);
    p.allocator = &a.iface;
    ck_assert_int_eq(attn_forward_ex(&p, out, _i ? out + tl_output_elems(&p)
                                                 : NULL, &ex),
                     ATTN_OK);
    total = a.calls;
    tl_alloc_destroy(&a);
    ck_assert_uint_ge(total, 3);
    for (size_t k = 1; k <= total + 1; k++) {
        int st;
        tl_alloc_init(&a, k);
        p.allocator = &a.iface;
        st = attn_forward_ex(&p, out, _i ? out + tl_output_elems(&p) : NULL,
                             &ex);
        ck_assert_msg(k <= total ? st == ATTN_ENOMEM : st == ATTN_OK,
                      "failing allocation %zu of %zu: status %d", k, total,
                      st);
        ck_assert_uint_eq(a.live, 0);
        tl_alloc_destroy(&a);
    }
    free(out);
    free(vn);
    free(hs);
    free(sim);
    free(sk);
    rl_case_free(&rc);
}
END_TEST

/* The rules spelled out at their neutral values (positions 0 .. n-1 given,
 * a window unbounded on both sides, rope.dim 0, no tokens in an empty
 * global list) give exactly the answer of the zeroed fields, bit for bit,
 * on every path: the neutral rules cost nothing and change nothing. */
START_TEST(test_rules_neutral_is_v1_bit_for_bit)
{
    static const attn_weights modes[] = {ATTN_WEIGHTS_PER_HEAD,
                                         ATTN_WEIGHTS_MEAN,
                                         ATTN_WEIGHTS_NONE};
    tl_spec spec = {"neutral", {2, 300, 300, 32, 32, 4, 2, 16, 8, 16},
                    false, true, TL_B_ALL, ATTN_MASK_CAUSAL, TL_PAD_SOME,
                    0, 0};
    static const size_t no_tokens[1] = {0};
    tl_case c;
    tl_exec e;
    attn_params v1, neutral;
    int64_t *pos;

    tl_case_init(&c, &spec, 11);
    tl_exec_init(&e, TL_EXEC_THREADS, 2);
    pos = malloc(2 * 300 * sizeof *pos);
    TL_CHECK(pos != NULL, "test setup: out of memory");
    for (size_t t = 0; t < 600; t++)
        pos[t] = (int64_t)(t % 300);
    v1 = c.p;
    v1.executor = _i ? &e.iface : NULL;
    neutral = v1;
    neutral.positions = pos;
    neutral.key_positions = pos;
    neutral.window.on = 1;
    neutral.window.left = ATTN_UNBOUNDED;
    neutral.window.right = ATTN_UNBOUNDED;
    neutral.global_tokens = no_tokens;
    for (size_t k = 0; k < 3; k++) {
        float *w1 = NULL, *w2 = NULL;
        float *o1 = tl_run(attn_forward, &v1, modes[k], &w1);
        float *o2 = tl_run(attn_forward, &neutral, modes[k], &w2);
        ck_assert_msg(memcmp(o1, o2, tl_output_elems(&v1) * sizeof *o1) == 0,
                      "weights mode %d: outputs differ", (int)modes[k]);
        if (w1 != NULL)
            ck_assert_msg(memcmp(w1, w2, tl_weights_elems(&v1, modes[k]) *
                                             sizeof *w1) == 0,
                          "weights mode %d: weights differ", (int)modes[k]);
        free(o1);
        free(o2);
        free(w1);
        free(w2);
    }
    free(pos);
    tl_exec_destroy(&e);
    tl_case_free(&c);
}
END_TEST

/* The score rules of one row (attn__vis_adjust, vector and scalar) against
 * float64: softcap over [-40 cap, 40 cap] and around 0 (where the vector
 * tanh switches from its series), bias, ALiBi, in natural and log2 units.
 * Error at most 2e-6 (1 + |ref|) of the adjusted score. */
START_TEST(test_rules_adjust_matches_float64)
{
    enum { LEN = 803 };
    static float s[LEN], in[LEN], bias[LEN * 2];
    static const float units[2] = {1.0f, (float)M_LOG2E};
    tl_spec spec = {"adjust", {1, 2, LEN, 4, 4, 1, 1, 4, 4, 4}, true,
                    false, 0, ATTN_MASK_NONE, TL_PAD_NONE, 0, 0};
    float slope[1] = {0.0625f};
    tl_case c;
    attn__vis v;

    tl_case_init(&c, &spec, 2);
    for (size_t t = 0; t < LEN; t++) {
        /* a sweep, with a dense stretch around 0 */
        double y = t < 200 ? ((double)t - 100.0) * 1e-3
                           : ((double)t - 500.0) * 0.13;
        in[t] = (float)y;
    }
    for (size_t t = 0; t < 2 * LEN; t++)
        bias[t] = (float)(t % 7) * 0.25f - 0.75f;
    c.p.softcap = 3.0f;
    c.p.score_bias.data = bias;
    c.p.alibi_slopes = slope;
    for (int isa = 0; isa < 2; isa++)
        for (int u = 0; u < 2; u++) {
            ck_assert_int_eq(attn__vis_init(&v, &c.p), ATTN_OK);
            v.avx512 = v.avx512 && isa;
            for (size_t t = 0; t < LEN; t++)
                s[t] = in[t] * 3.0f * units[u];
            /* query 1 (position 1) against keys 0 .. LEN-1 */
            attn__vis_adjust(&v, 0, 0, 1, 0, s, LEN, units[u]);
            for (size_t t = 0; t < LEN; t++) {
                double x = (double)in[t] * 3.0 * (double)units[u] /
                           (double)units[u];
                /* less the row's largest bias, 0.75, and ALiBi at the
                 * nearest key, 0: constants the softmax does not see */
                double ref = 3.0 * tanh(x / 3.0) + (double)bias[LEN + t] -
                             0.75 - 0.0625 * fabs(1.0 - (double)t);
                double got = (double)s[t] / (double)units[u];
                TL_CHECK(fabs(got - ref) <= 2e-6 * (1.0 + fabs(ref)),
                         "isa %d unit %d key %zu: %.9g, float64 %.9g", isa,
                         u, t, got, ref);
            }
            attn__vis_free(&v);
        }
    tl_case_free(&c);
}
END_TEST

/* A bias so large that the float64 reference's sum loses the score (a row
 * all at float32's lowest or highest: Hugging Face's additive mask of a
 * padded query) loses it here too, on both paths: every score of the row
 * becomes the same, and the softmax uniform, as the reference's. */
START_TEST(test_rules_adjust_bias_absorbs_as_float64)
{
    enum { LEN = 37 };
    static float s[LEN], bias[LEN * 2];
    static const float rows[3] = {-FLT_MAX, FLT_MAX, 1e30f};
    tl_spec spec = {"absorb", {1, 2, LEN, 4, 4, 1, 1, 4, 4, 4}, true,
                    false, 0, ATTN_MASK_NONE, TL_PAD_NONE, 0, 0};
    tl_case c;
    attn__vis v;

    tl_case_init(&c, &spec, 2);
    c.p.score_bias.data = bias;
    for (int r = 0; r < 3; r++)
        for (int isa = 0; isa < 2; isa++) {
            for (size_t t = 0; t < 2 * LEN; t++)
                bias[t] = rows[r];
            ck_assert_int_eq(attn__vis_init(&v, &c.p), ATTN_OK);
            v.avx512 = v.avx512 && isa;
            for (size_t t = 0; t < LEN; t++)
                s[t] = ((float)t - 18.0f) * 0.37f;
            attn__vis_adjust(&v, 0, 0, 1, 0, s, LEN, 1.0f);
            for (size_t t = 0; t < LEN; t++)
                TL_CHECK(s[t] == 0.0f, "bias %g isa %d key %zu: %.9g, not 0",
                         (double)rows[r], isa, t, (double)s[t]);
            attn__vis_free(&v);
        }
    tl_case_free(&c);
}
END_TEST

Suite *tl_suite_rules(void)
{
    Suite *s = suite_create("rules");
    TCase *tc = tcase_create("paths");

    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_rules_paths, 0,
                        (int)(sizeof rl_table / sizeof rl_table[0]));
    tcase_add_test(tc, test_rules_cost_counts_visible_pairs);
    tcase_add_loop_test(tc, test_rules_workspace_is_the_peak, 0, 20);
    tcase_add_loop_test(tc, test_rules_alloc_fail_each, 0, 2);
    tcase_add_loop_test(tc, test_rules_neutral_is_v1_bit_for_bit, 0, 2);
    tcase_add_test(tc, test_rules_adjust_matches_float64);
    tcase_add_test(tc, test_rules_adjust_bias_absorbs_as_float64);
    suite_add_tcase(s, tc);
    return s;
}

/* test_analysis.c: the head figures and top-k rows (attn_extras).
 *
 * Hand-built weight patterns must be classified as attn.h documents
 * (identity -> self, shifted diagonals -> previous / next, uniform -> broad,
 * first column -> first_token, a scattered one-hot -> focused), with their
 * figures exact to 1e-9. The BLAS kernel's figures, computed in its tiles,
 * must match attn_analyze_ref on the float64 reference's weights within the
 * contract's 1e-4 * (1 + |ref|); dominant offsets, patterns and skipped-row
 * counts must be equal. Top-k rows must hold the k largest reference
 * weights in descending order (ties by lower index).
 */
#include "test_lib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { HB_N = 8, HB_H = 6 };

/* A parameter set whose only role is to carry dims and masks into
 * attn_analyze_ref; the arrays are never read there. */
static float hb_dummy[HB_N * HB_N * HB_H];

static attn_params hb_params(size_t n, size_t h)
{
    attn_params p;

    memset(&p, 0, sizeof p);
    p.dims = (attn_dims){ 1, n, n, 1, 1, h, h, 1, 1, h };
    p.x = p.w_q = p.w_k = p.w_v = hb_dummy;
    p.weights = ATTN_WEIGHTS_PER_HEAD;
    return p;
}

/* head 0 identity, 1 previous (row 0 on itself), 2 next (last row on
 * itself), 3 uniform, 4 first column, 5 one-hot on key (3r + 5) mod n, which
 * is never r, r +- 1 or 0 for n = 8 except where noted below */
static void hb_fill(float *w, size_t n)
{
    memset(w, 0, sizeof(float) * HB_H * n * n);
    for (size_t r = 0; r < n; r++) {
        w[(0 * n + r) * n + r] = 1.0f;
        w[(1 * n + r) * n + (r == 0 ? 0 : r - 1)] = 1.0f;
        w[(2 * n + r) * n + (r + 1 == n ? r : r + 1)] = 1.0f;
        for (size_t c = 0; c < n; c++)
            w[(3 * n + r) * n + c] = 1.0f / (float)n;
        w[(4 * n + r) * n + 0] = 1.0f;
        w[(5 * n + r) * n + (3 * r + 5) % n] = 1.0f;
    }
}

/* Self-attention of x over dims d with W_q, W_k, W_v only, no weights
 * returned: the requests of the absmax and normmax tests. */
static attn_params an_params(attn_dims d, const float *x, const float *wq,
                             const float *wk, const float *wv)
{
    attn_params p;

    memset(&p, 0, sizeof p);
    p.dims = d;
    p.x = x;
    p.w_q = wq;
    p.w_k = wk;
    p.w_v = wv;
    p.weights = ATTN_WEIGHTS_NONE;
    return p;
}

/* ex->absmax: the largest |q|, |k| and |v| of the request, which a
 * caller uses to judge float32's rounding. q = x W_q = [1 6; -3 1.5],
 * k = x W_k = [0.5 2; -1.5 0.5], v = x W_v = [-5 2; 15 0.5]. */
START_TEST(test_analysis_absmax)
{
    static const float x[] = {1, 2, -3, 0.5f}, wq[] = {1, 0, 0, 3},
                       wk[] = {0.5f, 0, 0, 1}, wv[] = {-5, 0, 0, 1};
    float out[4], absmax[3] = {-1, -1, -1};
    attn_params p = an_params((attn_dims){ 1, 2, 2, 2, 2, 1, 1, 2, 2, 2 },
                              x, wq, wk, wv);
    attn_extras ex;

    memset(&ex, 0, sizeof ex);
    ex.absmax = absmax;
    ck_assert_int_eq(attn_forward_ex(&p, out, NULL, &ex), ATTN_OK);
    ck_assert(absmax[0] == 6.0f);
    ck_assert(absmax[1] == 2.0f);
    ck_assert(absmax[2] == 15.0f);
}
END_TEST

/* ex->normmax: the largest 2-norm of one head's slice of a query row and
 * of a key row (the bound on a score's partial sums the service's
 * rounding estimate uses), merged over the executor's workers. Two query
 * heads of d_k = 2: q = x W_q = [1 6 | 2 2; -3 1.5 | 0.5 -6], slices of
 * squared norms 37, 8, 11.25, 36.25 (a whole row's would be 45 or 47.5);
 * k = x W_k = [0.5 2; -1.5 0.5], 4.25 and 2.5. */
START_TEST(test_analysis_normmax)
{
    static const float x[] = {1, 2, -3, 0.5f},
                       wq[] = {1, 0, 0, 2, 0, 3, 1, 0},
                       wk[] = {0.5f, 0, 0, 1}, wv[] = {-5, 0, 0, 1};
    float out[8], absmax[3], normmax[2];
    attn_params p = an_params((attn_dims){ 1, 2, 2, 2, 2, 2, 1, 2, 2, 4 },
                              x, wq, wk, wv);
    attn_extras ex;
    tl_exec e;

    memset(&ex, 0, sizeof ex);
    ex.absmax = absmax;
    ex.normmax = normmax;
    tl_exec_init(&e, TL_EXEC_REVERSE, 3);
    for (int pass = 0; pass < 2; pass++) {
        p.executor = pass ? &e.iface : NULL;
        normmax[0] = normmax[1] = -1.0f;
        ck_assert_int_eq(attn_forward_ex(&p, out, NULL, &ex), ATTN_OK);
        ck_assert_float_eq_tol(normmax[0], sqrtf(37.0f), 1e-6f);
        ck_assert_float_eq_tol(normmax[1], sqrtf(4.25f), 1e-6f);
        ck_assert(absmax[0] == 6.0f);
    }
    tl_exec_destroy(&e);

    /* NULL: not wanted, and the call is the same */
    ex.normmax = NULL;
    ck_assert_int_eq(attn_forward_ex(&p, out, NULL, &ex), ATTN_OK);
}
END_TEST

START_TEST(test_analysis_hand_built_patterns)
{
    attn_params p = hb_params(HB_N, HB_H);
    float w[HB_H * HB_N * HB_N];
    attn_head_stats hs[HB_H];
    double sim[HB_H * HB_H];
    size_t skipped = 99;
    attn_extras ex = { 1, hs, sim, &skipped, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    const double n = HB_N, ln2 = log(2.0);

    hb_fill(w, HB_N);
    ck_assert_int_eq(attn_analyze_ref(&p, w, &ex), ATTN_OK);
    ck_assert_uint_eq(skipped, 0);
    ck_assert_int_eq(hs[0].pattern, ATTN_PATTERN_SELF);
    ck_assert_int_eq(hs[1].pattern, ATTN_PATTERN_PREVIOUS);
    ck_assert_int_eq(hs[2].pattern, ATTN_PATTERN_NEXT);
    ck_assert_int_eq(hs[3].pattern, ATTN_PATTERN_BROAD);
    ck_assert_int_eq(hs[4].pattern, ATTN_PATTERN_FIRST_TOKEN);
    ck_assert_int_eq(hs[5].pattern, ATTN_PATTERN_FOCUSED);
    ck_assert_str_eq(attn_pattern_name(hs[4].pattern), "first_token");
    ck_assert_str_eq(attn_pattern_name(hs[5].pattern), "focused");

    /* identity: one-hot on offset 0 */
    ck_assert_double_eq_tol(hs[0].self, 1.0, 1e-9);
    ck_assert_double_eq_tol(hs[0].entropy, 0.0, 1e-9);
    ck_assert_double_eq_tol(hs[0].confidence, 1.0, 1e-9);
    ck_assert_double_eq_tol(hs[0].first, 1.0 / n, 1e-9);
    ck_assert_int_eq(hs[0].dominant_offset, 0);
    /* previous: all rows but row 0 on offset -1 */
    ck_assert_double_eq_tol(hs[1].prev, (n - 1) / n, 1e-9);
    ck_assert_int_eq(hs[1].dominant_offset, -1);
    ck_assert_double_eq_tol(hs[2].next, (n - 1) / n, 1e-9);
    ck_assert_int_eq(hs[2].dominant_offset, 1);
    /* uniform over n keys */
    ck_assert_double_eq_tol(hs[3].entropy, log(n), 1e-6);
    ck_assert_double_eq_tol(hs[3].entropy_normalized, 1.0, 1e-6);
    ck_assert_double_eq_tol(hs[3].confidence, 1.0 / n, 1e-7);
    ck_assert_double_eq_tol(hs[3].first, 1.0 / n, 1e-7);
    /* offset o holds n - |o| entries of 1/n each: the diagonal has most */
    ck_assert_int_eq(hs[3].dominant_offset, 0);
    ck_assert_double_eq_tol(hs[4].first, 1.0, 1e-9);
    ck_assert_double_eq_tol(hs[4].entropy_normalized, 0.0, 1e-9);

    /* Jensen-Shannon: symmetric, 0 on the diagonal; identity vs first
     * column differ on every row but row 0, each a pair of distinct one-hot
     * rows: ln 2 */
    for (size_t i = 0; i < HB_H; i++) {
        ck_assert_double_eq_tol(sim[i * HB_H + i], 0.0, 1e-12);
        for (size_t j = 0; j < HB_H; j++) {
            ck_assert_double_eq_tol(sim[i * HB_H + j], sim[j * HB_H + i],
                                    1e-12);
            ck_assert(sim[i * HB_H + j] >= 0.0 &&
                      sim[i * HB_H + j] <= ln2 + 1e-12);
        }
    }
    ck_assert_double_eq_tol(sim[0 * HB_H + 4], (n - 1) / n * ln2, 1e-9);
}
END_TEST

/* Causal uniform attention: every row spreads evenly over its visible keys,
 * so the normalised entropy is 1 (rows with two or more keys) and the head
 * is broad; padding every key of a batch element skips all its rows. */
START_TEST(test_analysis_masks_respected)
{
    enum { N = 6, H = 1, B = 2 };
    attn_params p = hb_params(N, H);
    float w[B * H * N * N];
    uint8_t pad[B * N];
    attn_head_stats hs[B * H];
    double sim[B * H * H];
    size_t skipped[B];
    attn_extras ex = { 1, hs, sim, skipped, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };

    p.dims.B = B;
    p.mask = ATTN_MASK_CAUSAL;
    memset(pad, 0, sizeof pad);
    memset(pad + N, 1, N); /* batch element 1: every key padded */
    p.key_padding = pad;
    memset(w, 0, sizeof w);
    for (size_t r = 0; r < N; r++)
        for (size_t c = 0; c <= r; c++)
            w[r * N + c] = 1.0f / (float)(r + 1);
    ck_assert_int_eq(attn_analyze_ref(&p, w, &ex), ATTN_OK);
    ck_assert_uint_eq(skipped[0], 0);
    ck_assert_uint_eq(skipped[1], N);
    ck_assert_double_eq_tol(hs[0].entropy_normalized, 1.0, 1e-6);
    ck_assert_int_eq(hs[0].pattern, ATTN_PATTERN_BROAD);
    ck_assert_double_eq_tol(hs[1].entropy, 0.0, 1e-12);
    ck_assert_double_eq_tol(hs[1].confidence, 0.0, 1e-12);
}
END_TEST

#define D(B, n, m, dm, dmem, h, g, dk, dv, dout) \
    { B, n, m, dm, dmem, h, g, dk, dv, dout }

static const tl_spec analysis_table[] = {
    { "self_mha", D(1, 9, 9, 8, 8, 4, 4, 4, 4, 16), false, false, 0,
      ATTN_MASK_NONE, TL_PAD_NONE, 0, 2.0f },
    { "gqa_causal_pad", D(3, 17, 17, 8, 8, 4, 2, 3, 2, 8), false, true,
      TL_B_ALL, ATTN_MASK_CAUSAL, TL_PAD_SOME, 0, 3.0f },
    { "cross_fully_masked", D(2, 11, 7, 8, 5, 3, 1, 4, 4, 12), true, false, 0,
      ATTN_MASK_NONE, TL_PAD_ALL_B0, 0, 2.0f },
    { "causal_key0", D(2, 70, 70, 8, 8, 2, 2, 4, 4, 8), false, false, 0,
      ATTN_MASK_CAUSAL, TL_PAD_KEY0, 0, 3.0f },
};

static void assert_stats_close(const attn_head_stats *got,
                               const attn_head_stats *ref, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const double g[7] = { got[i].entropy, got[i].entropy_normalized,
                              got[i].confidence, got[i].self, got[i].prev,
                              got[i].next, got[i].first };
        const double r[7] = { ref[i].entropy, ref[i].entropy_normalized,
                              ref[i].confidence, ref[i].self, ref[i].prev,
                              ref[i].next, ref[i].first };
        for (size_t f = 0; f < 7; f++)
            ck_assert_msg(fabs(g[f] - r[f]) <= TL_TOL * (1.0 + fabs(r[f])),
                          "head %zu figure %zu: got %.9g, ref %.9g", i, f,
                          g[f], r[f]);
        ck_assert_int_eq(got[i].dominant_offset, ref[i].dominant_offset);
        ck_assert_str_eq(attn_pattern_name(got[i].pattern),
                         attn_pattern_name(ref[i].pattern));
    }
}

/* Figures from the BLAS kernel's tiles (every weights mode, with and
 * without a threaded executor) against the reference on the reference's
 * weights. */
START_TEST(test_analysis_kernel_matches_reference)
{
    const tl_spec *s = &analysis_table[_i];
    static const attn_weights modes[] = { ATTN_WEIGHTS_PER_HEAD,
                                          ATTN_WEIGHTS_MEAN,
                                          ATTN_WEIGHTS_NONE };
    tl_case c;
    float *ref_w = NULL, *ref_out;
    size_t B = s->dims.B, h = s->dims.h;
    attn_head_stats *rs = calloc(B * h, sizeof *rs);
    attn_head_stats *ks = calloc(B * h, sizeof *ks);
    double *rsim = calloc(B * h * h, sizeof *rsim);
    double *ksim = calloc(B * h * h, sizeof *ksim);
    size_t *rsk = calloc(B, sizeof *rsk), *ksk = calloc(B, sizeof *ksk);
    attn_extras rex = { 1, rs, rsim, rsk, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    double kcost = -1.0;
    attn_extras kex = { 1, ks, ksim, ksk, 0, NULL, NULL, &kcost, NULL, NULL, NULL, NULL, NULL };

    ck_assert(rs && ks && rsim && ksim && rsk && ksk);
    tl_case_init(&c, s, 0xA11A + (uint64_t)_i);
    ref_out = tl_run(attn_forward_ref, &c.p, ATTN_WEIGHTS_PER_HEAD, &ref_w);
    ck_assert_int_eq(attn_analyze_ref(&c.p, ref_w, &rex), ATTN_OK);
    for (size_t mi = 0; mi < 3; mi++)
        for (int threaded = 0; threaded < 2; threaded++) {
            attn_params p = c.p;
            tl_exec e;
            float *out = malloc(sizeof(float) * tl_output_elems(&c.p));
            float *w = NULL;
            ck_assert(out != NULL);
            p.weights = modes[mi];
            if (modes[mi] != ATTN_WEIGHTS_NONE) {
                w = malloc(sizeof(float) * tl_weights_elems(&c.p, modes[mi]));
                ck_assert(w != NULL);
            }
            tl_exec_init(&e, TL_EXEC_THREADS, 3);
            if (threaded)
                p.executor = &e.iface;
            memset(ksk, 0xff, B * sizeof *ksk);
            kcost = -1.0;
            ck_assert_int_eq(attn_forward_ex(&p, out, w, &kex), ATTN_OK);
            ck_assert(kcost >= 0.0 && kcost < 60.0); /* set, and seconds */
            tl_assert_close_f("output", out, ref_out, tl_output_elems(&c.p));
            assert_stats_close(ks, rs, B * h);
            for (size_t i = 0; i < B * h * h; i++)
                ck_assert_msg(fabs(ksim[i] - rsim[i]) <=
                                  TL_TOL * (1.0 + fabs(rsim[i])),
                              "similarity %zu: got %.9g, ref %.9g", i, ksim[i],
                              rsim[i]);
            for (size_t b = 0; b < B; b++)
                ck_assert_uint_eq(ksk[b], rsk[b]);
            tl_exec_destroy(&e);
            free(out);
            free(w);
        }
    free(ref_out);
    free(ref_w);
    free(rs);
    free(ks);
    free(rsim);
    free(ksim);
    free(rsk);
    free(ksk);
    tl_case_free(&c);
}
END_TEST

/* Checks one top-k row against the dense row it was taken from. */
static void assert_top_k_row(const float *dense, size_t m, size_t k,
                             const uint32_t *idx, const float *val)
{
    size_t above = 0;

    for (size_t q = 0; q < k; q++) {
        ck_assert_uint_lt(idx[q], m);
        ck_assert_msg(fabsf(val[q] - dense[idx[q]]) <=
                          TL_TOL * (1.0f + fabsf(dense[idx[q]])),
                      "top-k weight %zu: got %.9g, dense %.9g", q, val[q],
                      dense[idx[q]]);
        if (q > 0) {
            ck_assert(val[q] <= val[q - 1]);
            ck_assert(idx[q] != idx[q - 1]);
        }
    }
    /* nothing outside the k is clearly larger than the k-th */
    for (size_t c = 0; c < m; c++)
        if (dense[c] > val[k - 1] + TL_TOL)
            above++;
    ck_assert_uint_lt(above, k);
}

START_TEST(test_analysis_top_k_rows)
{
    const tl_spec *s = &analysis_table[1];
    static const size_t ks[] = { 1, 3, 17 };
    tl_case c;
    float *ref_w = NULL, *ref_out, *mean;
    size_t B = s->dims.B, h = s->dims.h, n = s->dims.n, m = s->dims.m;

    tl_case_init(&c, s, 0x70C);
    ref_out = tl_run(attn_forward_ref, &c.p, ATTN_WEIGHTS_PER_HEAD, &ref_w);
    mean = tl_mean_heads(&c.p, ref_w);
    for (size_t ki = 0; ki < 3; ki++)
        for (int per_head = 0; per_head < 2; per_head++) {
            size_t k = ks[ki], rows = B * n * (per_head ? h : 1);
            uint32_t *idx = malloc(rows * k * sizeof *idx);
            float *val = malloc(rows * k * sizeof *val);
            float *out = malloc(sizeof(float) * tl_output_elems(&c.p));
            attn_extras ex = { 0, NULL, NULL, NULL, k, idx, val, NULL, NULL, NULL, NULL, NULL, NULL };
            attn_params p = c.p;
            ck_assert(idx && val && out);
            p.weights = per_head ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_MEAN;
            ck_assert_int_eq(attn_forward_ex(&p, out, NULL, &ex), ATTN_OK);
            tl_assert_close_f("output", out, ref_out, tl_output_elems(&c.p));
            for (size_t r = 0; r < rows; r++)
                assert_top_k_row((per_head ? ref_w : mean) + r * m, m, k,
                                 idx + r * k, val + r * k);
            free(idx);
            free(val);
            free(out);
        }
    free(mean);
    free(ref_out);
    free(ref_w);
    tl_case_free(&c);
}
END_TEST

/* Ties resolve to the lower key index: a uniform row's top 3 are keys
 * 0, 1, 2 (key 0 is padded in no row here). */
START_TEST(test_analysis_top_k_ties)
{
    tl_spec s = analysis_table[0];
    tl_case c;
    uint32_t idx[9 * 4 * 3];
    float val[9 * 4 * 3];
    float out[9 * 16];
    attn_extras ex = { 0, NULL, NULL, NULL, 3, idx, val, NULL, NULL, NULL, NULL, NULL, NULL };

    s.x_scale = 0.0f;
    tl_case_init(&c, &s, 0x71E);
    /* zero queries make every score 0: uniform rows */
    memset(c.x, 0, sizeof(float) * 9 * 8);
    c.p.b_q = NULL;
    ck_assert_int_eq(attn_forward_ex(&c.p, out, NULL, &ex), ATTN_OK);
    for (size_t r = 0; r < 9 * 4; r++)
        for (size_t q = 0; q < 3; q++) {
            ck_assert_uint_eq(idx[r * 3 + q], q);
            ck_assert_float_eq_tol(val[r * 3 + q], 1.0f / 9.0f, 1e-6f);
        }
    tl_case_free(&c);
}
END_TEST

START_TEST(test_analysis_bad_extras)
{
    tl_case c;
    float out[9 * 16], w[4 * 9 * 9];
    uint32_t idx[9 * 4 * 10];
    float val[9 * 4 * 10];
    attn_head_stats hs[4];
    attn_extras ex;

    tl_case_init(&c, &analysis_table[0], 0xBAD);
    memset(&ex, 0, sizeof ex);
    ex.top_k = 10; /* > m */
    ex.top_index = idx;
    ex.top_weight = val;
    ck_assert_int_eq(attn_forward_ex(&c.p, out, NULL, &ex), ATTN_EINVAL);
    ex.top_k = 2;
    ck_assert_int_eq(attn_forward_ex(&c.p, out, w, &ex), ATTN_EINVAL);
    c.p.weights = ATTN_WEIGHTS_NONE;
    ck_assert_int_eq(attn_forward_ex(&c.p, out, NULL, &ex), ATTN_EINVAL);
    memset(&ex, 0, sizeof ex);
    ex.stats = 1;
    ex.heads = hs; /* similarity and skipped_rows missing */
    ck_assert_int_eq(attn_forward_ex(&c.p, out, NULL, &ex), ATTN_EINVAL);
    tl_case_free(&c);
}
END_TEST

/* Every allocation of a call with figures and top-k fails in turn: each
 * ends in ATTN_ENOMEM with nothing left allocated. */
START_TEST(test_analysis_alloc_failure)
{
    tl_case c;
    tl_alloc counter;
    tl_exec e;
    size_t total;
    float out[3 * 17 * 8];
    uint32_t idx[3 * 4 * 17 * 2];
    float val[3 * 4 * 17 * 2];
    attn_head_stats hs[3 * 4];
    double sim[3 * 4 * 4];
    size_t sk[3];
    attn_extras ex = { 1, hs, sim, sk, 2, idx, val, NULL, NULL, NULL, NULL, NULL, NULL };

    tl_case_init(&c, &analysis_table[1], 0xA10C);
    tl_exec_init(&e, TL_EXEC_THREADS, 2);
    c.p.executor = &e.iface;
    tl_alloc_init(&counter, 0);
    c.p.allocator = &counter.iface;
    ck_assert_int_eq(attn_forward_ex(&c.p, out, NULL, &ex), ATTN_OK);
    total = counter.calls;
    ck_assert_uint_eq(counter.live, 0);
    tl_alloc_destroy(&counter);
    for (size_t k = 1; k <= total; k++) {
        tl_alloc_init(&counter, k);
        c.p.allocator = &counter.iface;
        ck_assert_int_eq(attn_forward_ex(&c.p, out, NULL, &ex), ATTN_ENOMEM);
        ck_assert_uint_eq(counter.live, 0);
        tl_alloc_destroy(&counter);
    }
    tl_exec_destroy(&e);
    tl_case_free(&c);
}
END_TEST

Suite *tl_suite_analysis(void)
{
    Suite *s = suite_create("analysis");
    TCase *tc = tcase_create("analysis");

    tcase_add_test(tc, test_analysis_hand_built_patterns);
    tcase_add_test(tc, test_analysis_absmax);
    tcase_add_test(tc, test_analysis_normmax);
    tcase_add_test(tc, test_analysis_masks_respected);
    tcase_add_loop_test(tc, test_analysis_kernel_matches_reference, 0,
                        (int)(sizeof analysis_table / sizeof analysis_table[0]));
    tcase_add_test(tc, test_analysis_top_k_rows);
    tcase_add_test(tc, test_analysis_top_k_ties);
    tcase_add_test(tc, test_analysis_bad_extras);
    tcase_add_test(tc, test_analysis_alloc_failure);
    suite_add_tcase(s, tc);
    return s;
}

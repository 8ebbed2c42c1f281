/* test_lesson.c: the lesson's worked examples: the 3-token NumPy example
 * (unmasked and causal), the parameter count of one head, and the flop count
 * of a small case counted by hand.
 *
 * Fixtures lesson_3token*.txt hold X = [[1,0,1,0],[0,2,0,2],[1,1,1,1]] and
 * W_Q, W_K, W_V drawn by np.random.seed(0); np.random.randn(4, 4) * 0.5 (in
 * that order) with the expected weights and outputs computed in float64 by
 * tests/gen/gen_lib_fixtures.py. Tolerance: 1e-4 * (1 + |expected|).
 */
#include "test_lib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void lesson_compare(const tl_fixture *f, tl_forward_fn fn,
                           const char *label, float **weights_out)
{
    float *w;
    float *out = tl_run(fn, &f->p, ATTN_WEIGHTS_PER_HEAD, &w);
    char what[128];

    snprintf(what, sizeof what, "%s: %s output", f->name, label);
    tl_assert_close_d(what, out, f->output, 3 * 4);
    snprintf(what, sizeof what, "%s: %s weights", f->name, label);
    tl_assert_close_d(what, w, f->weights, 3 * 3);
    free(out);
    *weights_out = w;
}

START_TEST(test_lesson_three_token)
{
    tl_fixture f;
    float *w;

    tl_fixture_load(&f, "lesson_3token");
    ck_assert_uint_eq(f.p.dims.n, 3);
    ck_assert_uint_eq(f.p.dims.d_k, 4);
    ck_assert_int_eq(f.p.mask, ATTN_MASK_NONE);
    /* spot-check the fixture is the lesson's: W_Q[0][0] = 1.76405235 * 0.5 */
    TL_CHECK(fabs(f.w_q[0] - 0.882026172) < 1e-6, "W_Q[0][0] = %.9g",
             (double)f.w_q[0]);
    lesson_compare(&f, attn_forward, "attn_forward", &w);
    free(w);
    lesson_compare(&f, attn_forward_ref, "attn_forward_ref", &w);
    free(w);
    tl_fixture_free(&f);
}
END_TEST

START_TEST(test_lesson_three_token_causal)
{
    tl_forward_fn fns[] = { attn_forward, attn_forward_ref };
    const char *labels[] = { "attn_forward", "attn_forward_ref" };
    tl_fixture f;

    tl_fixture_load(&f, "lesson_3token_causal");
    ck_assert_int_eq(f.p.mask, ATTN_MASK_CAUSAL);
    for (size_t k = 0; k < 2; k++) {
        float *w;
        lesson_compare(&f, fns[k], labels[k], &w);
        /* token 0 sees only itself: its row is exactly [1, 0, 0] (to float
         * rounding of a one-term softmax) */
        TL_CHECK(fabs(w[0] - 1.0) <= 1e-6 && w[1] == 0.0f && w[2] == 0.0f,
                 "%s: first row [%.9g, %.9g, %.9g], expected [1, 0, 0]",
                 labels[k], (double)w[0], (double)w[1], (double)w[2]);
        for (size_t i = 0; i < 3; i++) {
            double sum = (double)w[3 * i] + w[3 * i + 1] + w[3 * i + 2];
            TL_CHECK(fabs(sum - 1.0) <= 1e-5,
                     "%s: row %zu sums to %.9g, expected 1 within 1e-5",
                     labels[k], i, sum);
            for (size_t j = i + 1; j < 3; j++)
                TL_CHECK(w[3 * i + j] == 0.0f,
                         "%s: future weight [%zu][%zu] = %g", labels[k],
                         i, j, (double)w[3 * i + j]);
        }
        free(w);
    }
    tl_fixture_free(&f);
}
END_TEST

/* attn_param_count and attn_flops read only the dimensions and which
 * optional pointers are present; the data pointers are never dereferenced,
 * so one dummy value stands in for every array. */
static float lesson_dummy[1];

static attn_params lesson_params(attn_dims d)
{
    attn_params p = { 0 };

    p.dims = d;
    p.x = lesson_dummy;
    p.w_q = lesson_dummy;
    p.w_k = lesson_dummy;
    p.w_v = lesson_dummy;
    if (d.d_mem != d.d_model || d.m != d.n)
        p.memory = lesson_dummy;
    return p;
}

START_TEST(test_lesson_param_count_one_head)
{
    attn_dims d = { .B = 1, .n = 1, .m = 1, .d_model = 512, .d_mem = 512,
                    .h = 1, .g = 1, .d_k = 64, .d_v = 64, .d_out = 64 };
    attn_params p = lesson_params(d);
    uint64_t count = 0;

    ck_assert_int_eq(attn_param_count(&p, &count), ATTN_OK);
    /* W_Q, W_K, W_V, each 512 x 64, no W_O, no biases */
    ck_assert_uint_eq(count, 3u * 512u * 64u);
    ck_assert_uint_eq(count, 98304u);
}
END_TEST

START_TEST(test_lesson_param_count_full)
{
    attn_dims d = { .B = 2, .n = 3, .m = 4, .d_model = 5, .d_mem = 6,
                    .h = 4, .g = 2, .d_k = 3, .d_v = 2, .d_out = 7 };
    attn_params p = lesson_params(d);
    uint64_t count = 0;

    p.w_o = p.b_q = p.b_k = p.b_v = p.b_o = lesson_dummy;
    ck_assert_int_eq(attn_param_count(&p, &count), ATTN_OK);
    /* W_q 5*12 + W_k 6*6 + W_v 6*4 + W_o 8*7 + b_q 12 + b_k 6 + b_v 4 + b_o 7 */
    ck_assert_uint_eq(count, 60u + 36u + 24u + 56u + 12u + 6u + 4u + 7u);
    /* the count does not depend on B, n or m */
    p.dims.B = 9;
    p.dims.n = 11;
    p.dims.m = 13;
    ck_assert_int_eq(attn_param_count(&p, &count), ATTN_OK);
    ck_assert_uint_eq(count, 205u);
}
END_TEST

/* qk_norm's weights are parameters of the module (PyTorch counts Qwen3's
 * q_norm and k_norm); per head d_k values each, over the whole row h*d_k
 * and g*d_k. */
START_TEST(test_lesson_param_count_qk_norm)
{
    attn_dims d = { .B = 1, .n = 2, .m = 2, .d_model = 8, .d_mem = 8,
                    .h = 4, .g = 2, .d_k = 2, .d_v = 2, .d_out = 8 };
    attn_params p = lesson_params(d);
    uint64_t count = 0;

    /* W_q 8*8 + W_k 8*4 + W_v 8*4 */
    ck_assert_int_eq(attn_param_count(&p, &count), ATTN_OK);
    ck_assert_uint_eq(count, 128u);
    p.qk_norm.q_weight = p.qk_norm.k_weight = lesson_dummy;
    p.qk_norm.over = ATTN_QK_NORM_HEAD;
    ck_assert_int_eq(attn_param_count(&p, &count), ATTN_OK);
    ck_assert_uint_eq(count, 128u + 2u + 2u);
    p.qk_norm.over = ATTN_QK_NORM_ALL;
    ck_assert_int_eq(attn_param_count(&p, &count), ATTN_OK);
    ck_assert_uint_eq(count, 128u + 8u + 4u);
}
END_TEST

START_TEST(test_lesson_flops_hand_count)
{
    attn_dims d = { .B = 2, .n = 3, .m = 4, .d_model = 5, .d_mem = 6,
                    .h = 4, .g = 2, .d_k = 3, .d_v = 2, .d_out = 7 };
    attn_params p = lesson_params(d);
    uint64_t flops = 0;

    /* multiply-adds per batch element:
     *   Q = x W_q        n * d_model * h*d_k = 3 * 5 * 12 = 180
     *   K = memory W_k   m * d_mem * g*d_k   = 4 * 6 * 6  = 144
     *   V = memory W_v   m * d_mem * g*d_v   = 4 * 6 * 4  =  96
     *   S_i = Q_i K_j^T  h * n * m * d_k     = 4*3*4*3    = 144
     *   O_i = A_i V_j    h * n * m * d_v     = 4*3*4*2    =  96
     *   output = O W_o   n * h*d_v * d_out   = 3 * 8 * 7  = 168
     * total 828, times B = 2, times two flops per multiply-add: 3312 */
    p.w_o = lesson_dummy;
    ck_assert_int_eq(attn_flops(&p, &flops), ATTN_OK);
    ck_assert_uint_eq(flops, 3312u);

    /* without W_O (d_out = h*d_v = 8): 828 - 168 = 660, so 2 * 2 * 660 */
    p.w_o = NULL;
    p.dims.d_out = 8;
    ck_assert_int_eq(attn_flops(&p, &flops), ATTN_OK);
    ck_assert_uint_eq(flops, 2640u);

    /* masks do not change the count (the contract counts all n x m) */
    p.mask = ATTN_MASK_CAUSAL;
    ck_assert_int_eq(attn_flops(&p, &flops), ATTN_OK);
    ck_assert_uint_eq(flops, 2640u);
}
END_TEST

Suite *tl_suite_lesson(void)
{
    Suite *s = suite_create("lesson");
    TCase *tc = tcase_create("lesson");

    tcase_add_test(tc, test_lesson_three_token);
    tcase_add_test(tc, test_lesson_three_token_causal);
    tcase_add_test(tc, test_lesson_param_count_one_head);
    tcase_add_test(tc, test_lesson_param_count_full);
    tcase_add_test(tc, test_lesson_param_count_qk_norm);
    tcase_add_test(tc, test_lesson_flops_hand_count);
    suite_add_tcase(s, tc);
    return s;
}

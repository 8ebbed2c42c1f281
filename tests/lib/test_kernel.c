/* test_kernel.c: the BLAS kernel (attn_forward) against the float64
 * reference (attn_forward_ref) on a seeded table of shapes, every weights
 * mode, every mask kind, fully masked rows and softmax stability.
 *
 * Tolerance: the contract's 1e-4 * (1 + |ref|) element-wise, on outputs and
 * on weights; masked weights must be exactly 0 and fully masked rows must
 * give exactly zero weights and a zero head output (never NaN).
 */
#include "test_lib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* attn_flash.c, for the tests: turns the fused kernel off and on */
int attn__flash_enable(int on);

#define D(B, n, m, dm, dmem, h, g, dk, dv, dout) \
    { B, n, m, dm, dmem, h, g, dk, dv, dout }
#define NOMASK ATTN_MASK_NONE
#define CAUSAL ATTN_MASK_CAUSAL

/* name, dims {B, n, m, d_model, d_mem, h, g, d_k, d_v, d_out}, cross, w_o,
 * biases, mask, key padding, scale (0: 1/sqrt(d_k)), x multiplier */
static const tl_spec kernel_table[] = {
    { "n1_self", D(1, 1, 1, 8, 8, 2, 2, 4, 4, 8), false, false, 0, NOMASK,
      TL_PAD_NONE, 0, 0 },
    { "n1_cross", D(2, 1, 7, 8, 5, 4, 2, 2, 3, 6), true, true, TL_B_ALL,
      NOMASK, TL_PAD_SOME, 0, 0 },
    { "m1_cross", D(1, 5, 1, 6, 3, 2, 1, 3, 2, 4), true, false, 0, NOMASK,
      TL_PAD_NONE, 0, 0 },
    { "m1_cross_causal", D(2, 4, 1, 6, 3, 2, 2, 3, 2, 5), true, true, 0,
      CAUSAL, TL_PAD_NONE, 0, 0 },
    { "cross_dmem_ne_dmodel", D(1, 6, 9, 12, 7, 3, 3, 4, 5, 10), true, true,
      TL_B_ALL, NOMASK, TL_PAD_NONE, 0, 0 },
    { "cross_causal_n_gt_m", D(2, 9, 4, 8, 5, 2, 1, 4, 4, 8), true, false,
      TL_B_Q | TL_B_V, CAUSAL, TL_PAD_NONE, 0, 0 },
    { "cross_causal_pad_n_lt_m", D(3, 3, 8, 8, 8, 4, 2, 2, 2, 8), true, false,
      0, CAUSAL, TL_PAD_SOME, 0, 0 },
    { "dk1", D(1, 5, 5, 4, 4, 2, 2, 1, 3, 6), false, false, 0, NOMASK,
      TL_PAD_NONE, 0, 0 },
    { "dk1_dv1_h1", D(2, 4, 4, 3, 3, 1, 1, 1, 1, 1), false, false, TL_B_ALL,
      CAUSAL, TL_PAD_NONE, 0, 0 },
    { "dv_ne_dk_wo", D(1, 7, 7, 10, 10, 2, 2, 6, 2, 5), false, true, 0, NOMASK,
      TL_PAD_NONE, 0, 0 },
    { "mha_h_eq_g", D(1, 8, 8, 16, 16, 4, 4, 4, 4, 16), false, false, 0,
      NOMASK, TL_PAD_NONE, 0, 0 },
    { "mqa_g1", D(1, 8, 8, 16, 16, 4, 1, 4, 4, 16), false, true, TL_B_ALL,
      CAUSAL, TL_PAD_NONE, 0, 0 },
    { "gqa_g_h_over_4", D(2, 6, 6, 16, 16, 8, 2, 2, 3, 24), false, false, 0,
      NOMASK, TL_PAD_SOME, 0, 0 },
    { "gqa_h12_g3_cross", D(1, 5, 7, 12, 9, 12, 3, 2, 2, 7), true, true,
      TL_B_ALL, CAUSAL, TL_PAD_SOME, 0, 0 },
    { "batch3_wo", D(3, 5, 5, 8, 8, 2, 2, 4, 4, 6), false, true, TL_B_ALL,
      NOMASK, TL_PAD_NONE, 0, 0 },
    { "no_wo_no_bias", D(2, 5, 5, 8, 8, 2, 2, 4, 4, 8), false, false, 0,
      NOMASK, TL_PAD_NONE, 0, 0 },
    { "bias_q", D(1, 5, 5, 8, 8, 2, 2, 4, 4, 8), false, false, TL_B_Q, NOMASK,
      TL_PAD_NONE, 0, 0 },
    /* b_k shifts every score of a row by q . b_k, which softmax cancels:
     * this case checks it is read in bounds, not that it is added */
    { "bias_k", D(1, 5, 5, 8, 8, 2, 2, 4, 4, 8), false, false, TL_B_K, NOMASK,
      TL_PAD_NONE, 0, 0 },
    { "bias_v", D(1, 5, 5, 8, 8, 2, 1, 4, 4, 8), false, false, TL_B_V, NOMASK,
      TL_PAD_NONE, 0, 0 },
    { "bias_o_no_wo", D(1, 5, 5, 8, 8, 2, 2, 4, 4, 8), false, false, TL_B_O,
      NOMASK, TL_PAD_NONE, 0, 0 },
    { "bias_o_wo", D(1, 5, 5, 8, 8, 2, 2, 4, 4, 3), false, true, TL_B_O,
      NOMASK, TL_PAD_NONE, 0, 0 },
    { "mask_causal", D(2, 7, 7, 8, 8, 2, 2, 4, 4, 8), false, false, 0, CAUSAL,
      TL_PAD_NONE, 0, 0 },
    { "mask_key_padding", D(4, 6, 6, 8, 8, 2, 2, 4, 4, 8), false, false, 0,
      NOMASK, TL_PAD_SOME, 0, 0 },
    { "mask_causal_padding", D(4, 6, 6, 8, 8, 2, 2, 4, 4, 8), false, true,
      TL_B_ALL, CAUSAL, TL_PAD_SOME, 0, 0 },
    { "fully_masked_b0", D(2, 4, 5, 8, 6, 2, 2, 4, 4, 8), true, false, 0,
      NOMASK, TL_PAD_ALL_B0, 0, 0 },
    { "fully_masked_b0_causal_wo", D(3, 5, 5, 8, 8, 2, 1, 4, 4, 3), false,
      true, TL_B_ALL, CAUSAL, TL_PAD_ALL_B0, 0, 0 },
    { "fully_masked_causal_key0", D(2, 5, 5, 8, 8, 2, 2, 4, 4, 8), false,
      false, 0, CAUSAL, TL_PAD_KEY0, 0, 0 },
    { "custom_scale", D(2, 6, 6, 8, 8, 2, 2, 4, 4, 8), false, true, TL_B_ALL,
      CAUSAL, TL_PAD_NONE, 0.37f, 0 },
    { "odd_sizes", D(2, 13, 17, 19, 11, 6, 3, 5, 7, 9), true, true, TL_B_ALL,
      CAUSAL, TL_PAD_SOME, 0.21f, 0 },
    /* n = 700 is not a multiple of any power-of-two query block */
    { "large_n700_causal_pad", D(1, 700, 700, 16, 16, 4, 2, 8, 8, 32), false,
      false, 0, CAUSAL, TL_PAD_SOME, 0, 0 },
    { "large_n700_cross", D(2, 700, 33, 16, 12, 2, 1, 8, 4, 8), true, true,
      TL_B_ALL, NOMASK, TL_PAD_SOME, 0, 0 },
    { "large_m1000", D(1, 5, 1000, 8, 8, 2, 2, 4, 4, 8), true, false, 0,
      NOMASK, TL_PAD_SOME, 0, 0 },
    /* the fused outputs-only kernel: key blocks of 256 (m = 513 leaves
     * one key in the last), query tiles of 128 in groups of 8, d_v in
     * slices of 32 up to 128, d_k up to 256; past those, the BLAS path */
    { "fused_m513_cross_pad", D(2, 260, 513, 16, 12, 4, 2, 16, 32, 8), true,
      true, TL_B_ALL, NOMASK, TL_PAD_SOME, 0, 0 },
    { "fused_causal_dv48_gqa", D(2, 300, 300, 24, 24, 6, 2, 20, 48, 16),
      false, true, TL_B_ALL, CAUSAL, TL_PAD_SOME, 0, 0 },
    { "fused_causal_key0_dv100", D(1, 137, 137, 16, 16, 2, 1, 3, 100, 8),
      false, true, 0, CAUSAL, TL_PAD_KEY0, 0, 0 },
    /* one head, 300 rows, 3 workers: tiles of 50 rows, so groups of 8
     * straddle the key block at 256 */
    { "fused_tile50_causal", D(1, 300, 300, 8, 8, 1, 1, 4, 4, 8), false,
      true, 0, CAUSAL, TL_PAD_NONE, 0, 0 },
    { "fused_dv129_blas", D(1, 40, 40, 16, 16, 2, 2, 8, 129, 8), false,
      true, 0, NOMASK, TL_PAD_NONE, 0, 0 },
    { "fused_dk257_blas", D(1, 40, 40, 16, 16, 1, 1, 257, 5, 5), false,
      false, 0, CAUSAL, TL_PAD_SOME, 0, 0 },
};

#define KERNEL_TABLE_LEN (sizeof kernel_table / sizeof kernel_table[0])

/* Rows whose every key is masked: each output row must equal b_o (or 0),
 * exactly, since the heads contribute zero. */
static size_t kernel_check_masked_rows(const char *what, const attn_params *p,
                                       const float *out)
{
    const attn_dims *d = &p->dims;
    size_t rows = 0;

    for (size_t b = 0; b < d->B; b++)
        for (size_t i = 0; i < d->n; i++) {
            bool any = false;
            for (size_t j = 0; j < d->m && !any; j++)
                any = tl_allowed(p, b, i, j);
            if (any)
                continue;
            rows++;
            for (size_t c = 0; c < d->d_out; c++) {
                float want = p->b_o ? p->b_o[c] : 0.0f;
                float got = out[(b * d->n + i) * d->d_out + c];
                TL_CHECK(got == want,
                         "%s: fully masked row [b=%zu][%zu], column %zu: "
                         "got %.9g, expected exactly %.9g (zero head "
                         "output)", what, b, i, c, (double)got,
                         (double)want);
            }
        }
    return rows;
}

/* Runs one spec through both kernels in every weights mode and compares. */
static void kernel_check(const tl_spec *s, uint64_t seed,
                         size_t *masked_rows)
{
    tl_case c;
    const attn_params *p;
    size_t n_out, n_w, n_mean;
    float *w_ref, *w_rmean, *w_ph, *w_mean, *mean_ref;
    float *out_ref, *out_rmean, *out_rnone, *out_ph, *out_mean, *out_none;
    float *out_blas;
    attn_params on_exec;
    tl_exec ex;
    char what[160];

    tl_case_init(&c, s, seed);
    p = &c.p;
    n_out = tl_output_elems(p);
    n_w = tl_weights_elems(p, ATTN_WEIGHTS_PER_HEAD);
    n_mean = tl_weights_elems(p, ATTN_WEIGHTS_MEAN);
    ck_assert_uint_eq(n_out, p->dims.B * p->dims.n * p->dims.d_out);
    ck_assert_uint_eq(n_w, p->dims.B * p->dims.h * p->dims.n * p->dims.m);
    ck_assert_uint_eq(n_mean, p->dims.B * p->dims.n * p->dims.m);
    ck_assert_uint_eq(tl_weights_elems(p, ATTN_WEIGHTS_NONE), 0);

    /* the reference: per-head weights obey the masks, no NaN */
    out_ref = tl_run(attn_forward_ref, p, ATTN_WEIGHTS_PER_HEAD, &w_ref);
    snprintf(what, sizeof what, "%s: ref output", s->name);
    tl_assert_finite(what, out_ref, n_out);
    snprintf(what, sizeof what, "%s: ref weights", s->name);
    tl_assert_weights_masked(what, p, w_ref);
    mean_ref = tl_mean_heads(p, w_ref);

    /* the reference's other modes agree with its per-head run */
    out_rmean = tl_run(attn_forward_ref, p, ATTN_WEIGHTS_MEAN, &w_rmean);
    out_rnone = tl_run(attn_forward_ref, p, ATTN_WEIGHTS_NONE, NULL);
    snprintf(what, sizeof what, "%s: ref mean-mode output", s->name);
    tl_assert_close_f(what, out_rmean, out_ref, n_out);
    snprintf(what, sizeof what, "%s: ref mean weights", s->name);
    tl_assert_close_f(what, w_rmean, mean_ref, n_mean);
    snprintf(what, sizeof what, "%s: ref none-mode output", s->name);
    tl_assert_close_f(what, out_rnone, out_ref, n_out);

    /* BLAS, per head */
    out_ph = tl_run(attn_forward, p, ATTN_WEIGHTS_PER_HEAD, &w_ph);
    snprintf(what, sizeof what, "%s: per_head output", s->name);
    tl_assert_close_f(what, out_ph, out_ref, n_out);
    snprintf(what, sizeof what, "%s: per_head weights", s->name);
    tl_assert_close_f(what, w_ph, w_ref, n_w);
    tl_assert_weights_masked(what, p, w_ph);

    /* BLAS, mean over heads */
    out_mean = tl_run(attn_forward, p, ATTN_WEIGHTS_MEAN, &w_mean);
    snprintf(what, sizeof what, "%s: mean-mode output", s->name);
    tl_assert_close_f(what, out_mean, out_ref, n_out);
    snprintf(what, sizeof what, "%s: mean weights", s->name);
    tl_assert_close_f(what, w_mean, mean_ref, n_mean);

    /* BLAS, no weights, on an executor (3 workers, tasks in reverse):
     * the fused kernel where the CPU has AVX-512, which takes a call on
     * an executor or with OpenBLAS on one thread */
    tl_exec_init(&ex, TL_EXEC_REVERSE, 3);
    on_exec = *p;
    on_exec.executor = &ex.iface;
    out_none = tl_run(attn_forward, &on_exec, ATTN_WEIGHTS_NONE, NULL);
    tl_exec_destroy(&ex);
    snprintf(what, sizeof what, "%s: none-mode output vs ref", s->name);
    tl_assert_close_f(what, out_none, out_ref, n_out);
    snprintf(what, sizeof what, "%s: none-mode output vs per_head run",
             s->name);
    tl_assert_close_f(what, out_none, out_ph, n_out);
    /* the same without the fused kernel: the blocked sgemm path */
    attn__flash_enable(0);
    out_blas = tl_run(attn_forward, p, ATTN_WEIGHTS_NONE, NULL);
    attn__flash_enable(1);
    snprintf(what, sizeof what, "%s: none-mode BLAS output vs ref", s->name);
    tl_assert_close_f(what, out_blas, out_ref, n_out);

    snprintf(what, sizeof what, "%s: ref", s->name);
    *masked_rows = kernel_check_masked_rows(what, p, out_ref);
    snprintf(what, sizeof what, "%s: per_head", s->name);
    kernel_check_masked_rows(what, p, out_ph);
    snprintf(what, sizeof what, "%s: mean", s->name);
    kernel_check_masked_rows(what, p, out_mean);
    snprintf(what, sizeof what, "%s: none", s->name);
    kernel_check_masked_rows(what, p, out_none);
    snprintf(what, sizeof what, "%s: none, BLAS", s->name);
    kernel_check_masked_rows(what, p, out_blas);

    free(out_ref);
    free(w_ref);
    free(mean_ref);
    free(out_rmean);
    free(w_rmean);
    free(out_rnone);
    free(out_ph);
    free(w_ph);
    free(out_mean);
    free(w_mean);
    free(out_none);
    free(out_blas);
    tl_case_free(&c);
}

START_TEST(test_kernel_table)
{
    size_t masked_rows;

    kernel_check(&kernel_table[_i], 0x5eed0000u + (uint64_t)_i, &masked_rows);
}
END_TEST

/* Batch element 0 pads every key: its rows get zero weights and a zero
 * head output; batch element 1 is unaffected. */
START_TEST(test_kernel_fully_masked_padding)
{
    const tl_spec s = { "fully_masked_padding", D(2, 4, 4, 8, 8, 2, 2, 4, 4, 8),
                        false, false, 0, NOMASK, TL_PAD_ALL_B0, 0, 0 };
    size_t rows;

    kernel_check(&s, 11, &rows);
    ck_assert_uint_eq(rows, 4); /* every row of batch element 0 */
}
END_TEST

/* Causal with key 0 padded: query 0 may attend nothing. */
START_TEST(test_kernel_fully_masked_causal_key0)
{
    const tl_spec s = { "fully_masked_causal_key0", D(3, 6, 6, 8, 8, 4, 2, 4, 3, 12),
                        false, false, 0, CAUSAL, TL_PAD_KEY0, 0, 0 };
    size_t rows;

    kernel_check(&s, 12, &rows);
    ck_assert_uint_eq(rows, 3); /* row 0 of each batch element */
}
END_TEST

/* x multiplied by 1000 puts the scores far beyond float32 exp's range;
 * softmax must subtract the row maximum: finite weights summing to 1. */
START_TEST(test_kernel_softmax_stability)
{
    const tl_spec s = { "softmax_stability", D(2, 6, 6, 8, 8, 2, 2, 4, 4, 8),
                        false, false, 0, NOMASK, TL_PAD_NONE, 0, 1000.0f };
    const attn_dims *d = &s.dims;
    attn_weights modes[] = { ATTN_WEIGHTS_PER_HEAD, ATTN_WEIGHTS_MEAN,
                             ATTN_WEIGHTS_NONE };
    double max_score = 0.0;
    tl_case c;

    tl_case_init(&c, &s, 13);
    /* the largest |score| of head 0, batch 0, computed here in float64 to
     * show the test really reaches the thousands */
    for (size_t i = 0; i < d->n; i++)
        for (size_t j = 0; j < d->m; j++) {
            double dot = 0.0;
            for (size_t t = 0; t < d->d_k; t++) {
                double q = 0.0, k = 0.0;
                for (size_t e = 0; e < d->d_model; e++) {
                    q += (double)c.x[i * d->d_model + e] *
                         c.w_q[e * d->h * d->d_k + t];
                    k += (double)c.x[j * d->d_model + e] *
                         c.w_k[e * d->g * d->d_k + t];
                }
                dot += q * k;
            }
            dot /= sqrt((double)d->d_k);
            if (fabs(dot) > max_score)
                max_score = fabs(dot);
        }
    TL_CHECK(max_score > 1000.0, "max |score| only %g", max_score);

    for (size_t k = 0; k < 3; k++) {
        tl_forward_fn fns[] = { attn_forward, attn_forward_ref };
        for (size_t f = 0; f < 2; f++) {
            float *w = NULL;
            float *out = tl_run(fns[f], &c.p, modes[k], &w);
            tl_assert_finite("stability output", out,
                             tl_output_elems(&c.p));
            if (modes[k] == ATTN_WEIGHTS_PER_HEAD)
                tl_assert_weights_masked("stability weights", &c.p, w);
            if (modes[k] == ATTN_WEIGHTS_MEAN) {
                for (size_t r = 0; r < d->B * d->n; r++) {
                    double sum = 0.0;
                    for (size_t j = 0; j < d->m; j++) {
                        TL_CHECK(isfinite(w[r * d->m + j]),
                                 "mean weight not finite");
                        sum += w[r * d->m + j];
                    }
                    TL_CHECK(fabs(sum - 1.0) <= TL_TOL * (double)d->m,
                             "mean row %zu sums to %.9g", r, sum);
                }
            }
            free(out);
            free(w);
        }
    }
    tl_case_free(&c);
}
END_TEST

/* A custom scale changes the result (it is not ignored) and matches the
 * reference run with the same scale. */
START_TEST(test_kernel_custom_scale_used)
{
    const tl_spec s = { "custom_scale_used", D(1, 5, 5, 8, 8, 2, 2, 4, 4, 8),
                        false, false, 0, NOMASK, TL_PAD_NONE, 0, 0 };
    tl_case c;
    float *w_default, *w_scaled, *out_default, *out_scaled;
    double diff = 0.0;
    size_t n_w;

    tl_case_init(&c, &s, 14);
    n_w = tl_weights_elems(&c.p, ATTN_WEIGHTS_PER_HEAD);
    out_default = tl_run(attn_forward, &c.p, ATTN_WEIGHTS_PER_HEAD, &w_default);
    c.p.scale = 3.0f; /* far from the default 1/sqrt(4) = 0.5 */
    out_scaled = tl_run(attn_forward, &c.p, ATTN_WEIGHTS_PER_HEAD, &w_scaled);
    for (size_t i = 0; i < n_w; i++)
        diff = fmax(diff, fabs((double)w_default[i] - w_scaled[i]));
    TL_CHECK(diff > 1e-2, "scale 3 gave the same weights as the default "
             "(max difference %g)", diff);
    /* scale = 1/sqrt(d_k) given explicitly equals the default */
    c.p.scale = 0.5f;
    free(out_scaled);
    free(w_scaled);
    out_scaled = tl_run(attn_forward, &c.p, ATTN_WEIGHTS_PER_HEAD, &w_scaled);
    tl_assert_close_f("explicit 1/sqrt(d_k) weights", w_scaled, w_default, n_w);
    tl_assert_close_f("explicit 1/sqrt(d_k) output", out_scaled, out_default,
                      tl_output_elems(&c.p));
    free(out_default);
    free(w_default);
    free(out_scaled);
    free(w_scaled);
    tl_case_free(&c);
}
END_TEST

/* Without weights the library never holds an n x m matrix: at n = m = 2048
 * and 8 heads the per-head weights would be 128 MiB; the workspace (tiles of
 * up to 512 query rows, their scores and their softmax) must stay under one
 * head's scores (16 MiB), and the outputs must still match the reference
 * (n a multiple of the query block this time). */
START_TEST(test_kernel_no_weights_memory)
{
    const tl_spec s = { "no_weights_memory", D(1, 2048, 2048, 16, 16, 8, 8, 4, 4, 32),
                        false, false, 0, CAUSAL, TL_PAD_SOME, 0, 0 };
    size_t one_head = 2048 * 2048 * sizeof(float);
    float *out, *ref;
    tl_alloc a;
    tl_case c;

    tl_case_init(&c, &s, 15);
    tl_alloc_init(&a, 0);
    c.p.allocator = &a.iface;
    out = tl_run(attn_forward, &c.p, ATTN_WEIGHTS_NONE, NULL);
    ck_assert_uint_eq(a.live, 0);
    ck_assert_msg(a.peak_bytes < one_head,
                  "outputs-only workspace peaked at %zu bytes, not below one "
                  "head's n x m scores (%zu bytes)", a.peak_bytes, one_head);
    c.p.allocator = NULL;
    ref = tl_run(attn_forward_ref, &c.p, ATTN_WEIGHTS_NONE, NULL);
    tl_assert_close_f("no_weights_memory: output", out, ref,
                      tl_output_elems(&c.p));
    free(out);
    free(ref);
    tl_alloc_destroy(&a);
    tl_case_free(&c);
}
END_TEST

/* Outputs only on an executor (the fused kernel where the CPU has
 * AVX-512) against the float64 reference on a sweep of seeded random
 * shapes: n and m on both sides of the 8-row groups, the 128-row tiles and
 * the 256-key blocks, every mask and padding pattern, GQA, cross-attention,
 * d_k and d_v of any size up to past the kernel's slices of 16 and 32. */
START_TEST(test_kernel_fused_sweep)
{
    static const tl_pad pads[] = { TL_PAD_NONE, TL_PAD_SOME, TL_PAD_ALL_B0,
                                   TL_PAD_KEY0 };
    static const size_t heads[][2] = { { 1, 1 }, { 2, 1 }, { 4, 2 },
                                       { 6, 3 }, { 3, 3 } };
    tl_rng rng;
    size_t pick[12];
    tl_spec sp;
    tl_case c;
    tl_exec ex;
    attn_params on_exec;
    float *out, *ref;
    char what[160];

    tl_rng_seed(&rng, 0xf05ed000u + (uint64_t)_i);
    for (size_t k = 0; k < 12; k++)
        pick[k] = (size_t)(tl_rng_next(&rng) >> 11);
    memset(&sp, 0, sizeof sp);
    sp.name = "fused_sweep";
    sp.cross = pick[0] % 3 == 0;
    sp.dims.B = 1 + pick[1] % 2;
    sp.dims.n = 1 + pick[2] % 300;
    sp.dims.m = sp.cross ? 1 + pick[3] % 560 : sp.dims.n;
    sp.dims.d_model = 4 + pick[4] % 13;
    sp.dims.d_mem = sp.cross ? 3 + pick[5] % 9 : sp.dims.d_model;
    sp.dims.h = heads[pick[6] % 5][0];
    sp.dims.g = heads[pick[6] % 5][1];
    sp.dims.d_k = 1 + pick[7] % 40;
    sp.dims.d_v = 1 + pick[8] % 70;
    sp.dims.d_out = 1 + pick[9] % 9;
    sp.w_o = true;
    sp.biases = pick[10] % 2 ? TL_B_ALL : 0;
    sp.mask = pick[11] % 2 ? CAUSAL : NOMASK;
    sp.pad = pads[pick[11] / 2 % 4];
    tl_case_init(&c, &sp, tl_rng_next(&rng));

    tl_exec_init(&ex, TL_EXEC_THREADS, 2);
    on_exec = c.p;
    on_exec.executor = &ex.iface;
    out = tl_run(attn_forward, &on_exec, ATTN_WEIGHTS_NONE, NULL);
    tl_exec_destroy(&ex);
    ref = tl_run(attn_forward_ref, &c.p, ATTN_WEIGHTS_NONE, NULL);
    snprintf(what, sizeof what,
             "fused sweep %d: B %zu n %zu m %zu h %zu g %zu d_k %zu d_v %zu "
             "%s%s pad %d", _i, sp.dims.B, sp.dims.n, sp.dims.m, sp.dims.h,
             sp.dims.g, sp.dims.d_k, sp.dims.d_v, sp.cross ? "cross " : "",
             sp.mask == CAUSAL ? "causal" : "no mask", (int)sp.pad);
    tl_assert_close_f(what, out, ref, tl_output_elems(&c.p));
    kernel_check_masked_rows(what, &c.p, out);
    free(out);
    free(ref);
    tl_case_free(&c);
}
END_TEST

Suite *tl_suite_kernel(void)
{
    Suite *s = suite_create("kernel");
    TCase *tc = tcase_create("kernel");

    /* n = 700 through the naive reference under ASan takes seconds */
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_kernel_table, 0, (int)KERNEL_TABLE_LEN);
    tcase_add_test(tc, test_kernel_fully_masked_padding);
    tcase_add_test(tc, test_kernel_fully_masked_causal_key0);
    tcase_add_test(tc, test_kernel_softmax_stability);
    tcase_add_test(tc, test_kernel_custom_scale_used);
    tcase_add_test(tc, test_kernel_no_weights_memory);
    tcase_add_loop_test(tc, test_kernel_fused_sweep, 0, 24);
    suite_add_tcase(s, tc);
    return s;
}

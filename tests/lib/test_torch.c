/* test_torch.c: both kernels against fixtures computed outside this project:
 * PyTorch's multi_head_attention_forward (MHA cases) and an explicit float64
 * NumPy computation (GQA/MQA), written by tests/gen/gen_lib_fixtures.py.
 *
 * Tolerance: the contract's 1e-4 * (1 + |expected|) element-wise, on
 * outputs, per-head weights and mean weights.
 */
#include "test_lib.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const torch_fixtures[] = {
    "mha_self",               /* packed in_proj_weight, all biases */
    "mha_cross_kdim",         /* kdim = vdim = 5 != embed_dim = 8 */
    "mha_causal",             /* bool attn_mask, upper triangle */
    "mha_key_padding",        /* key_padding_mask differing per batch */
    "mha_causal_padding",     /* both masks */
    "mha_batch_cross_nobias", /* B = 4, n != m, no biases */
    "gqa_self_causal",        /* NumPy: h = 4, g = 2, d_v != d_k, W_O */
    "mqa_cross_padding",      /* NumPy: g = 1, no W_O, d_mem != d_model */
    "gqa_h8_g2_scale",        /* NumPy: g = h/4, scale 0.3, both masks */
    /* PyTorch, written as each family's code computes it */
    "family_llama_rope_positions",  /* rotate_half RoPE, positions 3.., 10.. */
    "family_gptj_partial_yarn",     /* interleaved, dim 4 of 8, inv_freq, f */
    "family_bloom_alibi",           /* slope * key_position, key padding */
    "family_gemma2_softcap_window", /* softcap 5, Mistral window W = 4 */
    "family_t5_bias_mask",          /* bias [h][n][m], mask [B][n][m] */
    "family_qwen3_qknorm_value",    /* per-head RMS norm, value d_val 5 */
    "family_olmo2_qknorm_all",      /* RMS norm over the whole row */
    "family_longformer_global",     /* window 2/2, globals 0 and 7 */
};

#define TORCH_FIXTURES_LEN (sizeof torch_fixtures / sizeof torch_fixtures[0])

/* Expected mean over heads, [B][n][m], from the expected per-head weights. */
static double *torch_mean(const tl_fixture *f)
{
    const attn_dims *d = &f->p.dims;
    size_t nm = d->n * d->m;
    double *mean = calloc(d->B * nm, sizeof *mean);

    ck_assert_msg(mean != NULL, "test setup: out of memory");
    for (size_t b = 0; b < d->B; b++)
        for (size_t hh = 0; hh < d->h; hh++)
            for (size_t e = 0; e < nm; e++)
                mean[b * nm + e] += f->weights[(b * d->h + hh) * nm + e] /
                                    (double)d->h;
    return mean;
}

START_TEST(test_torch_fixture)
{
    static const char *const fn_names[] = { "attn_forward",
                                            "attn_forward_ref" };
    tl_forward_fn fns[] = { attn_forward, attn_forward_ref };
    tl_fixture f;
    double *mean;
    size_t n_out, n_w, n_mean;
    char what[160];

    tl_fixture_load(&f, torch_fixtures[_i]);
    n_out = tl_output_elems(&f.p);
    n_w = tl_weights_elems(&f.p, ATTN_WEIGHTS_PER_HEAD);
    n_mean = tl_weights_elems(&f.p, ATTN_WEIGHTS_MEAN);
    mean = torch_mean(&f);

    for (size_t k = 0; k < 2; k++) {
        float *w, *out;

        out = tl_run(fns[k], &f.p, ATTN_WEIGHTS_PER_HEAD, &w);
        snprintf(what, sizeof what, "%s: %s output", f.name, fn_names[k]);
        tl_assert_close_d(what, out, f.output, n_out);
        snprintf(what, sizeof what, "%s: %s per-head weights", f.name,
                 fn_names[k]);
        tl_assert_close_d(what, w, f.weights, n_w);
        free(out);
        free(w);

        out = tl_run(fns[k], &f.p, ATTN_WEIGHTS_MEAN, &w);
        snprintf(what, sizeof what, "%s: %s mean-mode output", f.name,
                 fn_names[k]);
        tl_assert_close_d(what, out, f.output, n_out);
        snprintf(what, sizeof what, "%s: %s mean weights", f.name,
                 fn_names[k]);
        tl_assert_close_d(what, w, mean, n_mean);
        free(out);
        free(w);

        out = tl_run(fns[k], &f.p, ATTN_WEIGHTS_NONE, NULL);
        snprintf(what, sizeof what, "%s: %s none-mode output", f.name,
                 fn_names[k]);
        tl_assert_close_d(what, out, f.output, n_out);
        free(out);
    }
    free(mean);
    tl_fixture_free(&f);
}
END_TEST

Suite *tl_suite_torch(void)
{
    Suite *s = suite_create("torch");
    TCase *tc = tcase_create("torch");

    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_torch_fixture, 0, (int)TORCH_FIXTURES_LEN);
    suite_add_tcase(s, tc);
    return s;
}

/* test_errors.c: every fallible entry point returns the documented status
 * for bad shapes, missing pointers, bad scales, size products that overflow
 * size_t and values that overflow float32; validation fails before any
 * allocation, nothing leaks, and nothing crashes. */
#include "test_lib.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A valid small self-attention problem the cases below break one way each:
 * B = 1, n = m = 3, d_model = 4, h = g = 2, d_k = d_v = 2, d_out = 4. */
static const tl_spec errors_base = {
    "errors_base", { 1, 3, 3, 4, 4, 2, 2, 2, 2, 4 }, false, false, 0,
    ATTN_MASK_NONE, TL_PAD_NONE, 0, 0
};

/* Output buffers far larger than the base problem needs; an oversized
 * dimension must be rejected before anything is written. */
static float errors_out[4096];
static float errors_w[4096];

/* Every entry point on p returns want; the forward calls allocate nothing
 * when want is a validation status, and leak nothing in any case. */
static void errors_expect(const char *what, const attn_params *p, int want)
{
    tl_forward_fn fns[] = { attn_forward, attn_forward_ref };
    size_t out_elems = 0, w_elems = 0;
    uint64_t count = 0;
    int st;

    st = attn_check(p);
    ck_assert_msg(st == want, "%s: attn_check returned %d, expected %d", what,
                  st, want);
    st = attn_output_sizes(p, &out_elems, &w_elems);
    ck_assert_msg(st == want, "%s: attn_output_sizes returned %d, expected %d",
                  what, st, want);
    st = attn_param_count(p, &count);
    ck_assert_msg(st == want, "%s: attn_param_count returned %d, expected %d",
                  what, st, want);
    st = attn_flops(p, &count);
    ck_assert_msg(st == want, "%s: attn_flops returned %d, expected %d", what,
                  st, want);
    st = attn_cost(p, &count);
    ck_assert_msg(st == want, "%s: attn_cost returned %d, expected %d", what,
                  st, want);
    st = attn_workspace_bytes(p, NULL, 2, &count);
    ck_assert_msg(st == want,
                  "%s: attn_workspace_bytes returned %d, expected %d", what,
                  st, want);

    for (size_t k = 0; k < 2; k++) {
        attn_params q = *p;
        tl_alloc a;

        tl_alloc_init(&a, 0);
        q.allocator = &a.iface;
        st = fns[k](&q, errors_out,
                    q.weights == ATTN_WEIGHTS_NONE ? NULL : errors_w);
        ck_assert_msg(st == want, "%s: %s returned %d (%s), expected %d", what,
                      k ? "attn_forward_ref" : "attn_forward", st,
                      attn_strerror(st), want);
        ck_assert_msg(a.calls == 0, "%s: %s allocated %zu blocks before "
                      "rejecting the arguments", what,
                      k ? "attn_forward_ref" : "attn_forward", a.calls);
        ck_assert_uint_eq(a.live, 0);
        tl_alloc_destroy(&a);
    }
}

START_TEST(test_errors_base_is_valid)
{
    tl_case c;

    tl_case_init(&c, &errors_base, 1);
    ck_assert_int_eq(attn_check(&c.p), ATTN_OK);
    ck_assert_int_eq(attn_forward(&c.p, errors_out, errors_w), ATTN_OK);
    ck_assert_int_eq(attn_forward_ref(&c.p, errors_out, errors_w), ATTN_OK);
    tl_case_free(&c);
}
END_TEST

START_TEST(test_errors_shape)
{
    tl_case c;
    attn_params p;

    tl_case_init(&c, &errors_base, 2);

    p = c.p;
    p.dims.h = 4; /* h % g != 0 */
    p.dims.g = 3;
    errors_expect("h = 4, g = 3", &p, ATTN_ESHAPE);

    p = c.p;
    p.dims.g = 4; /* g > h */
    errors_expect("h = 2, g = 4", &p, ATTN_ESHAPE);

    p = c.p;
    p.dims.d_out = 3; /* != h*d_v without W_O */
    errors_expect("d_out = 3 != h*d_v = 4 without W_O", &p, ATTN_ESHAPE);

    p = c.p;
    p.dims.m = 4; /* self-attention (memory NULL) with m != n */
    errors_expect("self-attention with m = 4 != n = 3", &p, ATTN_ESHAPE);

    p = c.p;
    p.dims.d_mem = 5; /* self-attention with d_mem != d_model */
    errors_expect("self-attention with d_mem = 5 != d_model = 4", &p,
                  ATTN_ESHAPE);

    /* each dimension zero in turn */
    {
        size_t *dims[] = { &p.dims.B, &p.dims.n, &p.dims.m, &p.dims.d_model,
                           &p.dims.d_mem, &p.dims.h, &p.dims.g, &p.dims.d_k,
                           &p.dims.d_v, &p.dims.d_out };
        const char *names[] = { "B", "n", "m", "d_model", "d_mem", "h", "g",
                                "d_k", "d_v", "d_out" };
        for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
            char what[64];
            p = c.p;
            *dims[k] = 0;
            snprintf(what, sizeof what, "%s = 0", names[k]);
            errors_expect(what, &p, ATTN_ESHAPE);
        }
    }
    tl_case_free(&c);
}
END_TEST

START_TEST(test_errors_invalid_pointers)
{
    tl_case c;
    attn_params p;
    int st;

    tl_case_init(&c, &errors_base, 3);

    ck_assert_int_eq(attn_check(NULL), ATTN_EINVAL);
    ck_assert_int_eq(attn_output_sizes(NULL, NULL, NULL), ATTN_EINVAL);
    ck_assert_int_eq(attn_forward(NULL, errors_out, errors_w), ATTN_EINVAL);
    ck_assert_int_eq(attn_forward_ref(NULL, errors_out, errors_w), ATTN_EINVAL);

    p = c.p;
    p.x = NULL;
    errors_expect("x NULL", &p, ATTN_EINVAL);
    p = c.p;
    p.w_q = NULL;
    errors_expect("w_q NULL", &p, ATTN_EINVAL);
    p = c.p;
    p.w_k = NULL;
    errors_expect("w_k NULL", &p, ATTN_EINVAL);
    p = c.p;
    p.w_v = NULL;
    errors_expect("w_v NULL", &p, ATTN_EINVAL);

    /* the caller-owned outputs */
    st = attn_forward(&c.p, NULL, errors_w);
    ck_assert_int_eq(st, ATTN_EINVAL);
    st = attn_forward_ref(&c.p, NULL, errors_w);
    ck_assert_int_eq(st, ATTN_EINVAL);
    for (int mode = ATTN_WEIGHTS_PER_HEAD; mode <= ATTN_WEIGHTS_MEAN; mode++) {
        p = c.p;
        p.weights = (attn_weights)mode;
        ck_assert_int_eq(attn_forward(&p, errors_out, NULL), ATTN_EINVAL);
        ck_assert_int_eq(attn_forward_ref(&p, errors_out, NULL), ATTN_EINVAL);
    }
    tl_case_free(&c);
}
END_TEST

START_TEST(test_errors_invalid_scale_and_enums)
{
    tl_case c;
    attn_params p;

    tl_case_init(&c, &errors_base, 4);
    p = c.p;
    p.scale = -1.0f;
    errors_expect("scale -1", &p, ATTN_EINVAL);
    p.scale = NAN;
    errors_expect("scale NaN", &p, ATTN_EINVAL);
    p.scale = -INFINITY;
    errors_expect("scale -inf", &p, ATTN_EINVAL);

    p = c.p;
    p.mask = (attn_mask)7;
    errors_expect("mask 7", &p, ATTN_EINVAL);
    p = c.p;
    p.weights = (attn_weights)9;
    errors_expect("weights mode 9", &p, ATTN_EINVAL);
    tl_case_free(&c);
}
END_TEST

START_TEST(test_errors_overflow)
{
    tl_case c;
    attn_params p;

    tl_case_init(&c, &errors_base, 5);

    p = c.p; /* n * m and n * d_model overflow */
    p.dims.n = p.dims.m = SIZE_MAX / 2;
    errors_expect("n = m = SIZE_MAX/2", &p, ATTN_EOVERFLOW);

    p = c.p; /* B * n * d_model overflows; each factor is modest */
    p.dims.B = SIZE_MAX / 3;
    errors_expect("B = SIZE_MAX/3", &p, ATTN_EOVERFLOW);

    p = c.p; /* d_model * h * d_k overflows */
    p.dims.d_k = SIZE_MAX / 2;
    errors_expect("d_k = SIZE_MAX/2", &p, ATTN_EOVERFLOW);

    p = c.p; /* the weights [B][h][n][m]: 2 * 2^32 * 2^32 */
    p.dims.n = p.dims.m = (size_t)1 << 32;
    errors_expect("n = m = 2^32 with per-head weights", &p, ATTN_EOVERFLOW);

    p = c.p; /* h * d_v * d_out for W_O */
    p.w_o = c.w_q;
    p.dims.d_out = SIZE_MAX / 3;
    errors_expect("d_out = SIZE_MAX/3 with W_O", &p, ATTN_EOVERFLOW);
    tl_case_free(&c);
}
END_TEST

/* Finite inputs whose values overflow float32 give ATTN_ERANGE, never a
 * non-finite output reported as success, and leak nothing. Here V = x W_v is
 * 4 * 1e30 * 1e10 = 4e40 > FLT_MAX, so every output overflows (also in the
 * reference, which rounds its float64 output to float). */
START_TEST(test_errors_range_output)
{
    tl_forward_fn fns[] = { attn_forward, attn_forward_ref };
    attn_weights modes[] = { ATTN_WEIGHTS_PER_HEAD, ATTN_WEIGHTS_MEAN,
                             ATTN_WEIGHTS_NONE };
    tl_case c;

    tl_case_init(&c, &errors_base, 6);
    for (size_t i = 0; i < 3 * 4; i++)
        c.x[i] = 1e30f;
    for (size_t i = 0; i < 4 * 2 * 2; i++)
        c.w_v[i] = 1e10f;
    for (size_t k = 0; k < 2; k++)
        for (size_t m = 0; m < 3; m++) {
            attn_params p = c.p;
            tl_alloc a;
            int st;
            tl_alloc_init(&a, 0);
            p.allocator = &a.iface;
            p.weights = modes[m];
            st = fns[k](&p, errors_out,
                        modes[m] == ATTN_WEIGHTS_NONE ? NULL : errors_w);
            ck_assert_msg(st == ATTN_ERANGE, "%s, weights mode %d: returned "
                          "%d (%s), expected ATTN_ERANGE",
                          k ? "attn_forward_ref" : "attn_forward",
                          (int)modes[m], st, attn_strerror(st));
            ck_assert_uint_eq(a.live, 0);
            tl_alloc_destroy(&a);
        }
    tl_case_free(&c);
}
END_TEST

/* The extras are answers too: a value norm (or a query, a key) beyond
 * float32 is ATTN_ERANGE from both kernels, never an infinity reported as
 * success; one whose float32 product overflows on the way while the norm
 * fits is the reference's. One query, two keys of scores 10 and -10 (the
 * second weighs 2e-9, so the output stays near 1e30) and values from a
 * separate source, the second near float32's limit; d_out = 1, w_o ones. */
START_TEST(test_errors_range_value_norms)
{
    float x[1] = { 1.0f }, mem[2] = { 10.0f, -10.0f }, one[1] = { 1.0f };
    float beyond[4] = { 1.0f, 0.0f, 3e38f, 3e38f };         /* norm 6e38 */
    float fits[6] = { 1.0f, 0.0f, 0.0f, 3e38f, 3e38f, -3e38f }; /* 3e38 */
    float w_v2[4] = { 1, 0, 0, 1 }, w_v3[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    float w_o[3] = { 1, 1, 1 };
    float out[1], w[2], vn[2], out_ref[1], w_ref[2], vn_ref[2];
    attn_extras ex, ex_ref;
    attn_params p;
    int st;

    memset(&p, 0, sizeof p);
    p.dims = (attn_dims){ 1, 1, 2, 1, 1, 1, 1, 1, 2, 1 };
    p.x = x;
    p.memory = mem;
    p.w_q = one;
    p.w_k = one;
    p.w_v = w_v2;
    p.w_o = w_o;
    p.scale = 1.0f;
    p.weights = ATTN_WEIGHTS_PER_HEAD;
    p.value = beyond;
    p.d_val = 2;
    memset(&ex, 0, sizeof ex);
    ex.value_norms = vn;
    st = attn_forward_ex(&p, out, w, &ex);
    ck_assert_msg(st == ATTN_ERANGE, "attn_forward_ex, norm 6e38: returned "
                  "%d, value norm %g", st, (double)vn[1]);
    st = attn_forward_ref_ex(&p, out, w, &ex);
    ck_assert_msg(st == ATTN_ERANGE, "attn_forward_ref_ex, norm 6e38: "
                  "returned %d, value norm %g", st, (double)vn[1]);
    p.dims.d_v = 3;
    p.value = fits;
    p.d_val = 3;
    p.w_v = w_v3;
    memset(&ex_ref, 0, sizeof ex_ref);
    ex_ref.value_norms = vn_ref;
    ck_assert_int_eq(attn_forward_ref_ex(&p, out_ref, w_ref, &ex_ref),
                     ATTN_OK);
    ck_assert_msg(fabsf(vn_ref[1] - 3e38f) <= 1e-4f * 3e38f,
                  "reference value norm %g, expected 3e38", (double)vn_ref[1]);
    memset(&ex, 0, sizeof ex);
    ex.value_norms = vn;
    st = attn_forward_ex(&p, out, w, &ex);
    ck_assert_msg(st == ATTN_OK || st == ATTN_ERANGE, "returned %d", st);
    if (st == ATTN_OK)
        tl_assert_close_f("value norms overflowing on the way", vn, vn_ref,
                          2);
}
END_TEST

/* attn_forward on c in every weights mode, on the calling thread and on
 * an executor (outputs only: the fused kernel where the CPU has it):
 * ATTN_ERANGE, or the float64 reference's answer. what names the case. */
static void errors_range_or_reference(const tl_case *c, const char *what)
{
    attn_weights modes[] = { ATTN_WEIGHTS_PER_HEAD, ATTN_WEIGHTS_MEAN,
                             ATTN_WEIGHTS_NONE };
    tl_exec ex;

    for (size_t m = 0; m < 2 * 3; m++) {
        float *w_ref = NULL, *out_ref, *out, *w = NULL;
        attn_params p = c->p;
        attn_weights mode = modes[m % 3];
        char msg[128];
        int st;

        p.weights = mode;
        out_ref = tl_run(attn_forward_ref, &p, mode, &w_ref);
        out = malloc(tl_output_elems(&p) * sizeof *out);
        ck_assert_ptr_nonnull(out);
        if (mode != ATTN_WEIGHTS_NONE) {
            w = malloc(tl_weights_elems(&p, mode) * sizeof *w);
            ck_assert_ptr_nonnull(w);
        }
        tl_exec_init(&ex, TL_EXEC_REVERSE, 2);
        if (m >= 3)
            p.executor = &ex.iface;
        st = attn_forward(&p, out, w);
        tl_exec_destroy(&ex);
        snprintf(msg, sizeof msg, "%s, weights mode %d%s", what, (int)mode,
                 m >= 3 ? ", executor" : "");
        ck_assert_msg(st == ATTN_OK || st == ATTN_ERANGE, "%s: returned %d",
                      msg, st);
        if (st == ATTN_OK) {
            tl_assert_close_f(msg, out, out_ref, tl_output_elems(&p));
            if (w != NULL)
                tl_assert_close_f(msg, w, w_ref, tl_weights_elems(&p, mode));
        }
        free(out_ref);
        free(w_ref);
        free(out);
        free(w);
    }
}

/* One key's score cancels in float64 (q . k = -1e40 + 1e40 = 0) while
 * the float32 products overflow, beside keys of moderate scores: a score
 * that came out -inf would read as a hidden key and the row would keep
 * weights that look right, [0, 0.67, 0.33] instead of the reference's
 * [0.2, 0.5, 0.2]-like row. attn_forward reports ATTN_ERANGE or gives the
 * reference's answer. */
START_TEST(test_errors_range_cancel)
{
    tl_case c;

    tl_case_init(&c, &errors_base, 8);
    memset(c.x, 0, 3 * 4 * sizeof(float));
    memset(c.w_q, 0, 4 * 4 * sizeof(float));
    memset(c.w_k, 0, 4 * 4 * sizeof(float));
    for (size_t r = 0; r < 3; r++)
        c.x[r * 4 + r] = 1.0f; /* token r is e_r */
    c.w_q[0] = c.w_q[1] = 1e20f;   /* q_0 = (1e20, 1e20) in head 0 */
    c.w_k[0] = -1e20f;             /* k_0 = (-1e20, 1e20) */
    c.w_k[1] = 1e20f;
    c.w_k[4] = 1e-20f;             /* k_1 = (1e-20, 0): q_0 . k_1 = 1 */
    errors_range_or_reference(&c, "cancelling score");
    tl_case_free(&c);
}
END_TEST

/* Scores that overflow float32 (q . k = +-1.6e61 with x = 1e30, W_q = 1,
 * W_k = +-1) while the output would be finite. Every token is identical, so
 * the exact weights are uniform (1/3), which the float64 reference gets.
 * attn_forward may report ATTN_ERANGE; if it reports success, its result
 * must be the reference's: a row of -inf scores is not a masked row. With
 * W_k's columns of alternating sign (sign 0) q . k is 1.6e61 - 1.6e61, 0 in
 * float64 but +inf + -inf = NaN in float32: NaN scores must not pass as
 * weights of 0. Each call runs twice, on the calling thread and on an
 * executor (outputs only, the fused kernel where the CPU has it). */
START_TEST(test_errors_range_scores)
{
    tl_case c;

    tl_case_init(&c, &errors_base, 7);
    for (size_t i = 0; i < 3 * 4; i++)
        c.x[i] = 1e30f;
    for (size_t i = 0; i < 4 * 2 * 2; i++)
        c.w_q[i] = 1.0f;
    for (int sign = -1; sign <= 1; sign++) {
        for (size_t i = 0; i < 4 * 2 * 2; i++)
            c.w_k[i] = sign != 0 ? (float)sign : i % 2 ? -1.0f : 1.0f;
        errors_range_or_reference(&c, sign < 0   ? "scores -inf"
                                      : sign > 0 ? "scores +inf"
                                                 : "scores NaN");
    }
    tl_case_free(&c);
}
END_TEST

/* -- the optional score rules: one broken field a case ------------------- */

static const float errors_ones[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                      1, 1, 1, 1, 1, 1, 1, 1};
static const float errors_nan[2] = {NAN, 1.0f};
static const int64_t errors_neg_pos[3] = {0, -1, 2};
static const size_t errors_global_far[1] = {3};
static const uint8_t errors_map[64];

typedef struct errors_rule_case {
    const char *name;
    void (*breaks)(attn_params *p);
    int want;
} errors_rule_case;

static void er_rope_odd(attn_params *p) { p->rope.dim = 1; }
static void er_rope_wide(attn_params *p) { p->rope.dim = 4; }
static void er_rope_theta(attn_params *p)
{
    p->rope.dim = 2;
    p->rope.theta = -1.0;
}
static void er_rope_theta_nan(attn_params *p)
{
    p->rope.dim = 2;
    p->rope.theta = NAN;
}
static void er_rope_factor(attn_params *p)
{
    p->rope.dim = 2;
    p->rope.attention_factor = -0.5;
}
static void er_rope_style(attn_params *p)
{
    p->rope.dim = 2;
    p->rope.style = (attn_rope_style)7;
}
static void er_rope_freq(attn_params *p)
{
    p->rope.dim = 2;
    p->rope.inv_freq = errors_nan;
}
static void er_qkn_weights(attn_params *p)
{
    p->qk_norm.over = ATTN_QK_NORM_HEAD;
    p->qk_norm.q_weight = errors_ones;
}
static void er_qkn_over(attn_params *p)
{
    p->qk_norm.over = (attn_qk_norm_over)3;
    p->qk_norm.q_weight = p->qk_norm.k_weight = errors_ones;
}
static void er_qkn_eps(attn_params *p)
{
    p->qk_norm.over = ATTN_QK_NORM_ALL;
    p->qk_norm.q_weight = p->qk_norm.k_weight = errors_ones;
    p->qk_norm.eps = -1e-6;
}
static void er_softcap_neg(attn_params *p) { p->softcap = -1.0f; }
static void er_softcap_nan(attn_params *p) { p->softcap = NAN; }
static void er_softcap_inf(attn_params *p) { p->softcap = INFINITY; }
static void er_alibi_nan(attn_params *p) { p->alibi_slopes = errors_nan; }
static void er_window_on(attn_params *p) { p->window.on = 2; }
static void er_window_side(attn_params *p)
{
    p->window.on = 1;
    p->window.left = (size_t)INT64_MAX + 1;
}
static void er_global_far(attn_params *p)
{
    p->global_tokens = errors_global_far;
    p->n_global = 1;
}
static void er_global_null(attn_params *p) { p->n_global = 1; }
static void er_positions(attn_params *p) { p->positions = errors_neg_pos; }
static void er_key_positions(attn_params *p)
{
    p->key_positions = errors_neg_pos;
}
static void er_value_width(attn_params *p) { p->value = errors_ones; }
static void er_map_overflow(attn_params *p)
{
    p->score_mask.data = errors_map;
    p->score_mask.stride_h = SIZE_MAX - 3;
}

static const errors_rule_case errors_rules[] = {
    {"rope.dim odd", er_rope_odd, ATTN_EINVAL},
    {"rope.dim > d_k", er_rope_wide, ATTN_ESHAPE},
    {"rope.theta < 0", er_rope_theta, ATTN_EINVAL},
    {"rope.theta NaN", er_rope_theta_nan, ATTN_EINVAL},
    {"rope.attention_factor < 0", er_rope_factor, ATTN_EINVAL},
    {"rope.style unknown", er_rope_style, ATTN_EINVAL},
    {"rope.inv_freq NaN", er_rope_freq, ATTN_EINVAL},
    {"qk_norm without k_weight", er_qkn_weights, ATTN_EINVAL},
    {"qk_norm.over unknown", er_qkn_over, ATTN_EINVAL},
    {"qk_norm.eps < 0", er_qkn_eps, ATTN_EINVAL},
    {"softcap < 0", er_softcap_neg, ATTN_EINVAL},
    {"softcap NaN", er_softcap_nan, ATTN_EINVAL},
    {"softcap infinite", er_softcap_inf, ATTN_EINVAL},
    {"alibi slope NaN", er_alibi_nan, ATTN_EINVAL},
    {"window.on 2", er_window_on, ATTN_EINVAL},
    {"window side beyond int64", er_window_side, ATTN_EINVAL},
    {"global token >= max(n, m)", er_global_far, ATTN_ESHAPE},
    {"n_global without tokens", er_global_null, ATTN_EINVAL},
    {"negative position", er_positions, ATTN_EINVAL},
    {"negative key position", er_key_positions, ATTN_EINVAL},
    {"value without d_val", er_value_width, ATTN_ESHAPE},
    {"score map strides overflow", er_map_overflow, ATTN_EOVERFLOW},
};

START_TEST(test_errors_rules)
{
    const errors_rule_case *rc = &errors_rules[_i];
    tl_case c;
    attn_params p;

    tl_case_init(&c, &errors_base, 1);
    p = c.p;
    rc->breaks(&p);
    errors_expect(rc->name, &p, rc->want);
    tl_case_free(&c);
}
END_TEST

/* The defaults a zeroed field stands for are accepted as given. */
START_TEST(test_errors_rules_defaults_valid)
{
    tl_case c;
    attn_params p;

    tl_case_init(&c, &errors_base, 1);
    p = c.p;
    p.rope.dim = 2; /* theta 0: 10000, attention_factor 0: 1 */
    p.qk_norm.over = ATTN_QK_NORM_HEAD; /* eps 0: 1e-6 */
    p.qk_norm.q_weight = p.qk_norm.k_weight = errors_ones;
    p.window.on = 1;
    p.window.left = ATTN_UNBOUNDED;
    p.window.right = 0;
    p.global_tokens = NULL; /* n_global 0 */
    ck_assert_int_eq(attn_check(&p), ATTN_OK);
    ck_assert_int_eq(attn_forward(&p, errors_out, errors_w), ATTN_OK);
    ck_assert_int_eq(attn_forward_ref(&p, errors_out, errors_w), ATTN_OK);
    tl_case_free(&c);
}
END_TEST

START_TEST(test_errors_strerror)
{
    int codes[] = { ATTN_OK, ATTN_EINVAL, ATTN_ESHAPE, ATTN_EOVERFLOW,
                    ATTN_ENOMEM, ATTN_ERANGE };
    size_t n = sizeof codes / sizeof codes[0];

    for (size_t i = 0; i < n; i++) {
        const char *msg = attn_strerror(codes[i]);
        ck_assert_ptr_nonnull(msg);
        ck_assert_msg(strlen(msg) > 0 && strcmp(msg, "unknown status") != 0,
                      "status %d has no message", codes[i]);
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(msg, attn_strerror(codes[j]));
    }
    ck_assert_str_eq(attn_strerror(ATTN_OK), "success");
    ck_assert_str_eq(attn_strerror(1), "unknown status");
    ck_assert_str_eq(attn_strerror(-1000), "unknown status");
}
END_TEST

Suite *tl_suite_errors(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("errors");

    tcase_add_test(tc, test_errors_base_is_valid);
    tcase_add_test(tc, test_errors_shape);
    tcase_add_test(tc, test_errors_invalid_pointers);
    tcase_add_test(tc, test_errors_invalid_scale_and_enums);
    tcase_add_test(tc, test_errors_overflow);
    tcase_add_test(tc, test_errors_range_output);
    tcase_add_test(tc, test_errors_range_scores);
    tcase_add_test(tc, test_errors_range_cancel);
    tcase_add_test(tc, test_errors_range_value_norms);
    tcase_add_test(tc, test_errors_strerror);
    tcase_add_loop_test(tc, test_errors_rules, 0,
                        (int)(sizeof errors_rules / sizeof errors_rules[0]));
    tcase_add_test(tc, test_errors_rules_defaults_valid);
    suite_add_tcase(s, tc);
    return s;
}

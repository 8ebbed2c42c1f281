/* test_softmax.c: the row softmax of every instruction set this CPU has
 * (scalar, AVX2, AVX-512), in place and out of place, against a float64
 * softmax: masks, rows of every length around the vector widths, scores in
 * the thousands, rows whose max comes late (the AVX-512 kernel's moving
 * reference and its fallback), fully masked rows, and the scores that must
 * be refused (+inf, NaN, finite scores overflowed to -inf). */
#include "test_lib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/src/attn_exp.h"
#include "../../lib/src/attn_internal.h"

#define SM_ISAS 3
static const char *const sm_isa_name[SM_ISAS] = {"scalar", "avx2", "avx512"};

/* One row to run through every kernel. */
typedef struct sm_row {
    size_t len, visible;
    const float *s;
    const unsigned char *pad; /* NULL: none */
} sm_row;

/* The float64 softmax of the row's visible, unpadded keys; 0 elsewhere.
 * Returns the number of such keys. */
static size_t sm_ref(const sm_row *r, double *w)
{
    double max = -INFINITY, sum = 0.0;
    size_t live = 0;

    for (size_t j = 0; j < r->len; j++) {
        int on = j < r->visible && !(r->pad && r->pad[j]);
        w[j] = on ? (double)r->s[j] : -INFINITY;
        if (on) {
            live++;
            if (w[j] > max)
                max = w[j];
        }
    }
    for (size_t j = 0; j < r->len; j++) {
        w[j] = live ? exp(w[j] - max) : 0.0;
        sum += w[j];
    }
    for (size_t j = 0; live && j < r->len; j++)
        w[j] /= sum;
    return live;
}

/* Runs r through kernel isa, in place (out 0) or out of place (out 1),
 * normalised or not, and checks it against the reference. Returns 0 when
 * this CPU lacks the kernel. */
static int sm_check(const sm_row *r, int isa, int out, int normalize,
                    const char *what)
{
    float *s = malloc(r->len * sizeof(float) + 1);
    float *p = out ? malloc(r->len * sizeof(float) + 1) : s;
    double *w = malloc(r->len * sizeof(double) + 1);
    float inv = -1.0f;
    size_t live;
    int rc;

    ck_assert(s && p && w);
    memcpy(s, r->s, r->len * sizeof(float));
    if (out)
        for (size_t j = 0; j < r->len; j++)
            p[j] = 12345.0f; /* every one must be written */
    live = sm_ref(r, w);
    rc = attn__softmax_isa(isa, s, p, r->len, r->visible, r->pad, normalize,
                           &inv);
    if (rc == -2) {
        free(s);
        if (out)
            free(p);
        free(w);
        return 0;
    }
    ck_assert_msg(rc == (live ? 0 : 1), "%s %s out %d: status %d, %zu live keys",
                  what, sm_isa_name[isa], out, rc, live);
    for (size_t j = 0; j < r->len; j++) {
        double got = normalize ? (double)p[j] : (double)p[j] * (double)inv;
        TL_CHECK(fabs(got - w[j]) <= 2e-6 * (1.0 + w[j]),
                 "%s %s out %d norm %d: weight %zu of %zu is %.9g, "
                 "float64 says %.9g",
                 what, sm_isa_name[isa], out, normalize, j, r->len, got, w[j]);
        TL_CHECK(w[j] != 0.0 || p[j] == 0.0,
                 "%s %s: masked key %zu holds %g", what, sm_isa_name[isa], j,
                 (double)p[j]);
        TL_CHECK(!out || s[j] == 0.0f,
                 "%s %s: score %zu not zeroed (%g)", what, sm_isa_name[isa],
                 j, (double)s[j]);
    }
    ck_assert_msg(live || inv == 0.0f, "%s: a masked row's 1/sum is %g", what,
                  (double)inv);
    free(s);
    if (out)
        free(p);
    free(w);
    return 1;
}

/* Every kernel, both placements, both normalisations. */
static void sm_check_all(const sm_row *r, const char *what)
{
    for (int isa = 0; isa < SM_ISAS; isa++)
        for (int out = 0; out < 2; out++)
            for (int norm = 0; norm < 2; norm++)
                if (!sm_check(r, isa, out, norm, what))
                    return; /* nor the wider ones */
}

START_TEST(test_softmax_random_rows)
{
    static const size_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 47, 64,
                                  100, 300, 2048};
    static const float spreads[] = {0.1f, 5.0f, 60.0f, 3000.0f};
    tl_rng rng;
    float *s = malloc(2048 * sizeof(float));
    unsigned char *pad = malloc(2048);

    ck_assert(s && pad);
    tl_rng_seed(&rng, 77);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t si = 0; si < sizeof spreads / sizeof spreads[0]; si++)
            for (int mask = 0; mask < 3; mask++) {
                size_t len = lens[li];
                sm_row r = {len, len, s, NULL};
                for (size_t j = 0; j < len; j++) {
                    s[j] = tl_rng_uniform(&rng, -spreads[si], spreads[si]);
                    pad[j] = tl_rng_uniform(&rng, 0.0f, 1.0f) < 0.3f;
                }
                if (mask == 1) /* causal: a prefix */
                    r.visible = len / 2 + 1;
                if (mask == 2)
                    r.pad = pad;
                sm_check_all(&r, "random row");
            }
    free(s);
    free(pad);
}
END_TEST

/* The max comes late or keeps rising: the AVX-512 kernel moves its
 * reference, rescales what it wrote, and after a few moves takes the rest's
 * max in one pass. */
START_TEST(test_softmax_rising_rows)
{
    float *s = malloc(600 * sizeof(float));

    ck_assert(s != NULL);
    for (int kind = 0; kind < 4; kind++) {
        sm_row r = {600, 600, s, NULL};
        for (size_t j = 0; j < 600; j++) {
            switch (kind) {
            case 0: /* steadily rising, past any headroom */
                s[j] = 0.5f * (float)j;
                break;
            case 1: /* flat, then one step up near the end */
                s[j] = j < 590 ? 0.0f : 40.0f;
                break;
            case 2: /* a staircase of ten steps of 30 */
                s[j] = 30.0f * (float)(j / 60);
                break;
            default: /* falling: the first vector holds the max */
                s[j] = -0.25f * (float)j;
                break;
            }
        }
        sm_check_all(&r, "rising row");
    }
    free(s);
}
END_TEST

START_TEST(test_softmax_masked_rows)
{
    float s[40];
    unsigned char pad[40];

    for (size_t j = 0; j < 40; j++) {
        s[j] = (float)j - 20.0f;
        pad[j] = 1;
    }
    sm_row all_padded = {40, 40, s, pad};
    sm_check_all(&all_padded, "padded row");
    sm_row nothing_visible = {40, 0, s, NULL};
    sm_check_all(&nothing_visible, "row with no visible key");
    /* the first vectors padded, the rest live */
    for (size_t j = 20; j < 40; j++)
        pad[j] = 0;
    sm_row late = {40, 40, s, pad};
    sm_check_all(&late, "row padded up to key 20");
}
END_TEST

/* Scores that only finite inputs whose products overflowed produce. */
START_TEST(test_softmax_refused_rows)
{
    static const char *const what[] = {"+inf", "NaN in a full vector",
                                       "NaN in the tail", "NaN with +inf",
                                       "unpadded -inf row"};

    for (int kind = 0; kind < 5; kind++)
        for (int isa = 0; isa < SM_ISAS; isa++)
            for (int out = 0; out < 2; out++) {
                float s[37], buf[37], inv;
                float *p = out ? buf : s;
                for (size_t j = 0; j < 37; j++)
                    s[j] = kind == 4 ? -INFINITY : 0.01f * (float)j;
                if (kind == 0)
                    s[21] = INFINITY;
                if (kind == 1)
                    s[5] = NAN;
                if (kind == 2)
                    s[35] = NAN;
                if (kind == 3) {
                    s[3] = NAN;
                    s[30] = INFINITY;
                }
                int rc = attn__softmax_isa(isa, s, p, 37, 37, NULL, 0, &inv);
                if (rc == -2)
                    break;
                ck_assert_msg(rc == -1, "%s row, %s kernel, out %d: status %d",
                              what[kind], sm_isa_name[isa], out, rc);
            }
}
END_TEST

#ifdef ATTN__HAVE_X86
/* The fused kernel's 2^v against libm's exp2 in float64: every v of
 * [-130, 0] in steps of 2^-10 and the edges. Relative error under 1e-6
 * (Cephes gives 1.7e-7) down to -126, exactly 0 below it and for -inf,
 * NaN for NaN. */
__attribute__((target("avx512f"))) static void sm_exp2_check(void)
{
    float in[16], out[16];
    size_t bad = 0, checked = 0;
    double worst = 0.0;

    for (int i = 0; i <= 130 * 1024; i += 16) {
        for (int t = 0; t < 16; t++)
            in[t] = -(float)(i + t) / 1024.0f;
        if (i == 0) {
            in[1] = -INFINITY;
            in[2] = NAN;
            in[3] = -126.0f;
            in[4] = -125.99f;
            in[5] = -126.01f;
            in[6] = -0.5f;
            in[7] = -1e-30f;
        }
        _mm512_storeu_ps(out, attn__exp2_512(_mm512_loadu_ps(in)));
        for (int t = 0; t < 16; t++) {
            double want = exp2((double)in[t]);
            checked++;
            if (isnan(in[t])) {
                bad += !isnan(out[t]);
            } else if (in[t] < -126.0f) {
                bad += out[t] != 0.0f;
            } else {
                double rel = fabs((double)out[t] - want) / want;
                if (rel > worst)
                    worst = rel;
                bad += !(rel < 1e-6);
            }
        }
    }
    ck_assert_msg(bad == 0, "attn__exp2_512: %zu of %zu values off (worst "
                  "relative error %.3g)", bad, checked, worst);
}
#endif

START_TEST(test_softmax_exp2)
{
#ifdef ATTN__HAVE_X86
    if (__builtin_cpu_supports("avx512f"))
        sm_exp2_check();
#endif
}
END_TEST

Suite *tl_suite_softmax(void)
{
    Suite *s = suite_create("softmax");
    TCase *tc = tcase_create("rows");

    tcase_add_test(tc, test_softmax_random_rows);
    tcase_add_test(tc, test_softmax_rising_rows);
    tcase_add_test(tc, test_softmax_masked_rows);
    tcase_add_test(tc, test_softmax_refused_rows);
    tcase_add_test(tc, test_softmax_exp2);
    suite_add_tcase(s, tc);
    return s;
}

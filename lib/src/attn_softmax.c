/* attn_softmax.c: the fused mask + softmax of one row of scores, with an
 * AVX2 path chosen at run time (the exponentials dominate the attention's
 * non-GEMM time: one per score). */
#include <math.h>

#include "attn_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTN__HAVE_AVX2 1
#include <immintrin.h>
#endif

/* Scalar: exponentiates s[0..len) - max in place and returns the sum. */
static float attn__exp_sum_scalar(float *s, size_t len, float max)
{
    float sum = 0.0f;

    for (size_t j = 0; j < len; j++) {
        s[j] = expf(s[j] - max);
        sum += s[j];
    }
    return sum;
}

static void attn__scale_scalar(float *s, size_t len, float f)
{
    for (size_t j = 0; j < len; j++)
        s[j] *= f;
}

#ifdef ATTN__HAVE_AVX2
/* exp(v) for v <= 0 (Cephes' expf: range reduction by ln 2 in two parts,
 * degree-5 polynomial, relative error ~2 ulp). Below -87.3, where the result
 * would be subnormal, and for -inf, it returns exactly 0 so masked keys
 * weigh nothing. */
__attribute__((target("avx2,fma"))) static inline __m256
attn__exp256(__m256 v)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    __m256 zero_mask = _mm256_cmp_ps(v, lo, _CMP_LT_OQ);
    __m256 x = _mm256_max_ps(v, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r),
                        _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(zero_mask, res);
}

__attribute__((target("avx2,fma"))) static float
attn__exp_sum_avx2(float *s, size_t len, float max)
{
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    size_t j = 0;
    float sum;

    for (; j + 8 <= len; j += 8) {
        __m256 e = attn__exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
        _mm256_storeu_ps(s + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc),
                          _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    sum = _mm_cvtss_f32(h);
    return sum + attn__exp_sum_scalar(s + j, len - j, max);
}

__attribute__((target("avx2,fma"))) static void
attn__scale_avx2(float *s, size_t len, float f)
{
    const __m256 vf = _mm256_set1_ps(f);
    size_t j = 0;

    for (; j + 8 <= len; j += 8)
        _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), vf));
    attn__scale_scalar(s + j, len - j, f);
}
#endif

static int attn__use_avx2(void)
{
#ifdef ATTN__HAVE_AVX2
    /* __builtin_cpu_supports reads data set up before main: no state here */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

int attn__softmax_row(float *s, size_t len, size_t visible,
                      const unsigned char *pad)
{
    float max = -INFINITY, sum;
    size_t j;

    if (visible > len)
        visible = len;
    if (pad != NULL)
        for (j = 0; j < visible; j++)
            if (pad[j])
                s[j] = -INFINITY;
    /* pass 1: the running max starts at -inf; subtracting it keeps every
     * exponent <= 0, so scores in the thousands cannot overflow */
    for (j = 0; j < visible; j++)
        if (s[j] > max)
            max = s[j];
    for (j = visible; j < len; j++)
        s[j] = 0.0f;
    if (max == -INFINITY) {
        for (j = 0; j < visible; j++)
            s[j] = 0.0f;
        return 1;
    }
    if (!isfinite(max))
        return -1;
    /* pass 2: exponentials and their sum */
#ifdef ATTN__HAVE_AVX2
    if (attn__use_avx2())
        sum = attn__exp_sum_avx2(s, visible, max);
    else
#endif
        sum = attn__exp_sum_scalar(s, visible, max);
    if (!isfinite(sum))
        return -1; /* a NaN score */
    /* pass 3: normalise; sum >= 1 because the max contributes exp(0) */
#ifdef ATTN__HAVE_AVX2
    if (attn__use_avx2())
        attn__scale_avx2(s, visible, 1.0f / sum);
    else
#endif
        attn__scale_scalar(s, visible, 1.0f / sum);
    return 0;
}

/* attn_softmax.c: the fused mask + softmax of one row of scores, with
 * AVX-512 and AVX2 paths chosen at run time. The exponentials are the
 * attention's main cost outside the GEMMs (one per score), and glibc's expf
 * is scalar. */
#include <math.h>

#include "attn_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTN__HAVE_X86 1
#include <immintrin.h>
#endif

/* The polynomial exp below (Cephes' expf: range reduction by ln 2 in two
 * parts, degree-5 polynomial, ~2 ulp) is valid for v <= 0. Below EXP_LO the
 * result would be subnormal; it returns exactly 0 there and for -inf, so
 * masked keys weigh nothing. */
#define EXP_LO (-87.33654f)
#define EXP_LOG2E 1.44269504f
#define EXP_C1 0.693359375f
#define EXP_C2 (-2.12194440e-4f)
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

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

static float attn__max_scalar(const float *s, size_t len)
{
    float max = -INFINITY;

    for (size_t j = 0; j < len; j++)
        if (s[j] > max)
            max = s[j];
    return max;
}

static void attn__scale_scalar(float *s, size_t len, float f)
{
    for (size_t j = 0; j < len; j++)
        s[j] *= f;
}

#ifdef ATTN__HAVE_X86
__attribute__((target("avx2,fma"))) static inline __m256
attn__exp256(__m256 v)
{
    const __m256 lo = _mm256_set1_ps(EXP_LO);
    __m256 zero_mask = _mm256_cmp_ps(v, lo, _CMP_LT_OQ);
    __m256 x = _mm256_max_ps(v, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_C1), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_C2), r);
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r),
                        _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(zero_mask,
                            _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

__attribute__((target("avx2,fma"))) static float
attn__exp_sum_avx2(float *s, size_t len, float max)
{
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    size_t j = 0;

    for (; j + 8 <= len; j += 8) {
        __m256 e = attn__exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
        _mm256_storeu_ps(s + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc),
                          _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h) + attn__exp_sum_scalar(s + j, len - j, max);
}

__attribute__((target("avx512f"))) static inline __m512
attn__exp512(__m512 v)
{
    const __m512 lo = _mm512_set1_ps(EXP_LO);
    __mmask16 keep = _mm512_cmp_ps_mask(v, lo, _CMP_GE_OQ);
    __m512 x = _mm512_max_ps(v, lo);
    __m512 n = _mm512_roundscale_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_C1), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_C2), r);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r),
                        _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    /* p * 2^n, n in [-126, 0] here */
    return _mm512_maskz_scalef_ps(keep, p, n);
}

__attribute__((target("avx512f"))) static float
attn__exp_sum_avx512(float *s, size_t len, float max)
{
    const __m512 vmax = _mm512_set1_ps(max);
    __m512 acc = _mm512_setzero_ps();
    size_t j = 0;

    for (; j + 16 <= len; j += 16) {
        __m512 e = attn__exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vmax));
        _mm512_storeu_ps(s + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < len) {
        __mmask16 k = (__mmask16)((1u << (len - j)) - 1);
        __m512 e = attn__exp512(
            _mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vmax));
        _mm512_mask_storeu_ps(s + j, k, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(acc);
}

/* NaN scores compare false and are skipped here; they surface as a NaN
 * sum after the exponentials. */
__attribute__((target("avx512f"))) static float
attn__max_avx512(const float *s, size_t len)
{
    __m512 acc = _mm512_set1_ps(-INFINITY);
    size_t j = 0;

    for (; j + 16 <= len; j += 16)
        acc = _mm512_max_ps(acc, _mm512_loadu_ps(s + j));
    if (j < len) {
        __mmask16 k = (__mmask16)((1u << (len - j)) - 1);
        acc = _mm512_mask_max_ps(acc, k, acc, _mm512_maskz_loadu_ps(k, s + j));
    }
    return _mm512_reduce_max_ps(acc);
}

__attribute__((target("avx512f"))) static void
attn__scale_avx512(float *s, size_t len, float f)
{
    const __m512 vf = _mm512_set1_ps(f);
    size_t j = 0;

    for (; j + 16 <= len; j += 16)
        _mm512_storeu_ps(s + j, _mm512_mul_ps(_mm512_loadu_ps(s + j), vf));
    attn__scale_scalar(s + j, len - j, f);
}
#endif

typedef enum { ATTN__ISA_SCALAR, ATTN__ISA_AVX2, ATTN__ISA_AVX512 } attn__isa;

static attn__isa attn__cpu(void)
{
#ifdef ATTN__HAVE_X86
    /* __builtin_cpu_supports reads data the runtime set up before main */
    if (__builtin_cpu_supports("avx512f"))
        return ATTN__ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return ATTN__ISA_AVX2;
#endif
    return ATTN__ISA_SCALAR;
}

int attn__softmax_row(float *s, size_t len, size_t visible,
                      const unsigned char *pad, int normalize, float *inv_sum)
{
    attn__isa isa = attn__cpu();
    float max, sum;
    size_t j;

    *inv_sum = 0.0f;
    if (visible > len)
        visible = len;
    if (pad != NULL)
        for (j = 0; j < visible; j++)
            if (pad[j])
                s[j] = -INFINITY;
    for (j = visible; j < len; j++)
        s[j] = 0.0f;
    /* pass 1: the max, from -inf; subtracting it keeps every exponent <= 0,
     * so scores in the thousands cannot overflow */
#ifdef ATTN__HAVE_X86
    if (isa == ATTN__ISA_AVX512)
        max = attn__max_avx512(s, visible);
    else
#endif
        max = attn__max_scalar(s, visible);
    if (max == -INFINITY) {
        /* a masked row, or finite scores that overflowed to -inf: only the
         * first is a row of zeros */
        int overflow = 0;
        for (j = 0; j < visible; j++) {
            overflow |= pad == NULL || !pad[j];
            s[j] = 0.0f;
        }
        return overflow ? -1 : 1;
    }
    if (!isfinite(max))
        return -1;
    /* pass 2: exponentials and their sum (>= 1: the max gives exp(0)) */
#ifdef ATTN__HAVE_X86
    if (isa == ATTN__ISA_AVX512)
        sum = attn__exp_sum_avx512(s, visible, max);
    else if (isa == ATTN__ISA_AVX2)
        sum = attn__exp_sum_avx2(s, visible, max);
    else
#endif
        sum = attn__exp_sum_scalar(s, visible, max);
    if (!isfinite(sum))
        return -1; /* a NaN score */
    *inv_sum = 1.0f / sum;
    if (!normalize)
        return 0;
    /* pass 3: normalise */
#ifdef ATTN__HAVE_X86
    if (isa == ATTN__ISA_AVX512)
        attn__scale_avx512(s, visible, *inv_sum);
    else
#endif
        attn__scale_scalar(s, visible, *inv_sum);
    return 0;
}

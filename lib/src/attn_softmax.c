/* attn_softmax.c: the fused mask + softmax of one row of scores, with
 * AVX-512 and AVX2 paths chosen at run time. The exponentials are the
 * attention's main cost outside the GEMMs (one per score), and glibc's expf
 * is scalar. */
#include <float.h>
#include <math.h>
#include <string.h>

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

/* Scalar: p[j] = exp(s[j] - max) for j < len, zeroing s[j] when p is
 * another row (see attn__softmax_into); returns the sum. */
static float attn__exp_sum_scalar(float *s, float *p, size_t len, float max)
{
    float sum = 0.0f;

    for (size_t j = 0; j < len; j++) {
        float e = expf(s[j] - max);
        if (p != s)
            s[j] = 0.0f;
        p[j] = e;
        sum += e;
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
    /* max_ps returns its second operand when one is NaN: a NaN score stays
     * NaN and surfaces in the row's sum */
    __m256 x = _mm256_max_ps(lo, v);
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
attn__exp_sum_avx2(float *s, float *p, size_t len, float max)
{
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    size_t j = 0;

    for (; j + 8 <= len; j += 8) {
        __m256 e = attn__exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
        if (p != s)
            _mm256_storeu_ps(s + j, _mm256_setzero_ps());
        _mm256_storeu_ps(p + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc),
                          _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h) + attn__exp_sum_scalar(s + j, p + j, len - j, max);
}

__attribute__((target("avx512f"))) static inline __m512
attn__exp512(__m512 v)
{
    const __m512 lo = _mm512_set1_ps(EXP_LO);
    /* NaN lanes are kept and stay NaN (max_ps returns its second operand
     * when one is NaN), so a NaN score surfaces in the row's sum */
    __mmask16 keep = _mm512_cmp_ps_mask(v, lo, _CMP_NLT_UQ);
    __m512 x = _mm512_max_ps(lo, v);
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
    /* p * 2^n, n in [-126, 24] here */
    return _mm512_maskz_scalef_ps(keep, p, n);
}

/* How far (in natural log units) a score may exceed the row's running
 * reference before the reference moves: exp(16) ~ 8.9e6, so the unnormalised
 * values and their sum stay far from float overflow for any row length the
 * library accepts, and a row of ordinary scores moves its reference once. */
#define ATTN__HEADROOM 16.0f
/* Moves of the reference after which the rest of the row's max is taken
 * in one pass, so a rising row costs O(len), not O(len^2). */
#define ATTN__MOVES_MAX 3

__attribute__((target("avx512f"))) static float
attn__max_avx512(const float *s, size_t len);
__attribute__((target("avx512f"))) static void
attn__scale_avx512(float *s, size_t len, float f);

/* The reference's move in attn__exp_sum_avx512, for the vector v at s + j:
 * returns the new reference, having rescaled p[0..j) and *acc to it, or NaN
 * when v holds +inf or NaN. */
__attribute__((target("avx512f"))) static float
attn__ref_move(float *s, float *p, size_t j, size_t len, __m512 v, float ref,
               int *moves, __m512 *acc)
{
    float top = _mm512_reduce_max_ps(v), f;

    if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) || top == INFINITY)
        return NAN;
    if (++*moves > ATTN__MOVES_MAX && j + 16 < len) {
        float rest = attn__max_avx512(s + j + 16, len - j - 16);
        if (rest > top)
            top = rest; /* +inf or NaN later still moves and fails */
    }
    /* 0 for the first move, from -FLT_MAX: without expf, whose underflow
     * takes the C library's slow path (errno) once a row */
    f = ref == -FLT_MAX ? 0.0f : expf(ref - top);
    attn__scale_avx512(p, j, f);
    *acc = _mm512_mul_ps(*acc, _mm512_set1_ps(f));
    return top;
}

/* One pass: p[j] = exp(s[j] - ref) and their sum, for j < len, zeroing s[j]
 * when p is another row. ref starts at the first vector's max and moves up
 * (rescaling what is written and summed) only when a score exceeds it by
 * more than ATTN__HEADROOM, so there is no separate pass for the row's max
 * and every exponent stays <= ATTN__HEADROOM. Returns the sum, or NaN when
 * the row holds +inf or NaN (finite inputs whose products overflowed). A
 * row of -inf sums to 0; any finite score gives a sum >= 1, since the final
 * reference is itself one of the scores. */
__attribute__((target("avx512f"))) static float
attn__exp_sum_avx512(float *s, float *p, size_t len)
{
    const __m512 zero = _mm512_setzero_ps();
    __m512 acc = zero;
    float ref = -FLT_MAX;
    /* NLE_UQ against ref + headroom: above it, or NaN */
    __m512 vref = _mm512_set1_ps(ref), vtop = vref;
    int moves = 0, out = p != s;
    size_t j = 0;

    for (; j < len; j += 16) {
        __mmask16 k = len - j >= 16 ? (__mmask16)0xFFFF
                                    : (__mmask16)((1u << (len - j)) - 1);
        __m512 v = len - j >= 16 ? _mm512_loadu_ps(s + j)
                                 : _mm512_mask_loadu_ps(
                                       _mm512_set1_ps(-INFINITY), k, s + j);
        __m512 e;
        if (__builtin_expect(_mm512_cmp_ps_mask(v, vtop, _CMP_NLE_UQ) != 0,
                             0)) {
            ref = attn__ref_move(s, p, j, len, v, ref, &moves, &acc);
            if (isnan(ref)) {
                if (out)
                    memset(s + j, 0, (len - j) * sizeof(float));
                return NAN;
            }
            vref = _mm512_set1_ps(ref);
            vtop = _mm512_set1_ps(ref + ATTN__HEADROOM);
        }
        e = attn__exp512(_mm512_sub_ps(v, vref));
        if (len - j >= 16) {
            if (out)
                _mm512_storeu_ps(s + j, zero);
            _mm512_storeu_ps(p + j, e);
        } else {
            if (out)
                _mm512_mask_storeu_ps(s + j, k, zero);
            _mm512_mask_storeu_ps(p + j, k, e);
        }
        acc = _mm512_add_ps(acc, e); /* lanes past len hold exp(-inf) = 0 */
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

/* attn__softmax_into with the kernels of isa. */
static int attn__softmax(float *s, float *p, size_t len, size_t visible,
                         const unsigned char *hide, int normalize,
                         float *inv_sum, attn__isa isa)
{
    float sum;
    size_t j;

    *inv_sum = 0.0f;
    if (visible > len)
        visible = len;
    if (hide != NULL)
        for (j = 0; j < visible; j++)
            if (hide[j])
                s[j] = -INFINITY;
    if (visible < len) { /* most rows see every key: no call at all */
        memset(p + visible, 0, (len - visible) * sizeof(float));
        if (p != s)
            memset(s + visible, 0, (len - visible) * sizeof(float));
    }
#ifdef ATTN__HAVE_X86
    if (isa == ATTN__ISA_AVX512) {
        sum = attn__exp_sum_avx512(s, p, visible);
    } else
#endif
    {
        /* pass 1: the max, from -inf; subtracting it keeps every exponent
         * <= 0, so scores in the thousands cannot overflow */
        float max = attn__max_scalar(s, visible);
        if (!isfinite(max)) {
            sum = max == -INFINITY ? 0.0f : NAN;
            memset(p, 0, visible * sizeof(float));
            if (p != s)
                memset(s, 0, visible * sizeof(float));
        } else if (isa == ATTN__ISA_AVX2) {
            sum = attn__exp_sum_avx2(s, p, visible, max);
        } else {
            sum = attn__exp_sum_scalar(s, p, visible, max);
        }
    }
    if (sum == 0.0f) {
        /* every visible score was -inf: a masked row, or finite scores that
         * overflowed to -inf, and only the first is a row of zeros */
        for (j = 0; j < visible; j++)
            if (hide == NULL || !hide[j])
                return -1;
        return 1;
    }
    if (!isfinite(sum))
        return -1; /* +inf or NaN scores */
    *inv_sum = 1.0f / sum;
    if (!normalize)
        return 0;
    /* last pass: normalise */
#ifdef ATTN__HAVE_X86
    if (isa == ATTN__ISA_AVX512)
        attn__scale_avx512(p, visible, *inv_sum);
    else
#endif
        attn__scale_scalar(p, visible, *inv_sum);
    return 0;
}

int attn__softmax_row(float *s, size_t len, size_t visible,
                      const unsigned char *hide, int normalize, float *inv_sum)
{
    return attn__softmax(s, s, len, visible, hide, normalize, inv_sum,
                         attn__cpu());
}

int attn__softmax_into(float *s, float *p, size_t len, size_t visible,
                       const unsigned char *hide, float *inv_sum)
{
    return attn__softmax(s, p, len, visible, hide, 0, inv_sum, attn__cpu());
}

int attn__softmax_isa(int isa, float *s, float *p, size_t len,
                      size_t visible, const unsigned char *hide, int normalize,
                      float *inv_sum)
{
    attn__isa have = attn__cpu();

    if (isa < 0 || isa > (int)have)
        return -2;
    return attn__softmax(s, p, len, visible, hide, normalize, inv_sum,
                         (attn__isa)isa);
}

/* attn_exp.h: the fused outputs-only kernel's vector exponential, in a
 * header of its own so the tests can reach it (not installed). The row
 * softmax's e^x stays in attn_softmax.c. */
#ifndef ATTN_EXP_H
#define ATTN_EXP_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTN__HAVE_X86 1
#include <immintrin.h>
#endif

#ifdef ATTN__HAVE_X86
/* 2^v for v <= 0, the fused kernel's exponential: its scores come in
 * log2 units (log2 e folded into the scale of Q), which saves the range
 * reduction's multiply and its two-part subtraction. v = n + f with n an
 * integer and |f| <= 1/2; 2^f = 1 + f P(f) with Cephes' exp2f polynomial
 * (relative error 1.7e-7 there). Below -126 (and for -inf) the result is
 * exactly 0; a NaN stays NaN. */
#define EXP2_LO (-126.0f)
#define EXP2_P0 1.535336188319500e-4f
#define EXP2_P1 1.339887440266574e-3f
#define EXP2_P2 9.618437357674640e-3f
#define EXP2_P3 5.550332471162809e-2f
#define EXP2_P4 2.402264791363012e-1f
#define EXP2_P5 6.931472028550421e-1f

__attribute__((target("avx512f"))) static inline __m512
attn__exp2_512(__m512 v)
{
    __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_set1_ps(EXP2_LO),
                                        _CMP_NLT_UQ);
    __m512 n = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT |
                                           _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(v, n);
    __m512 p = _mm512_set1_ps(EXP2_P0);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_P1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_P2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_P3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_P4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_P5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    /* lanes below EXP2_LO (n = -inf for -inf, f NaN) are zeroed */
    return _mm512_maskz_scalef_ps(keep, p, n);
}
#endif

#endif

/* attn_internal.h: helpers shared by the kernels (not installed). */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include <stddef.h>

#include "attn.h"

/* *out = a * b; returns -1 (and leaves *out alone) when it overflows. */
static inline int attn__mul(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > (size_t)-1 / a)
        return -1;
    *out = a * b;
    return 0;
}

/* Allocates count * size bytes through p's allocator; NULL on overflow or
 * failure. attn__free accepts NULL. */
void *attn__alloc(const attn_params *p, size_t count, size_t size);
void attn__free(const attn_params *p, void *ptr);

/* The effective scale: p->scale, or 1/sqrt(d_k) when it is 0. */
double attn__scale(const attn_params *p);

/* The memory sequence and its width: p->memory, or x for self-attention. */
const float *attn__memory(const attn_params *p);

/* Row softmax over s[0..len) in place, with keys at and beyond `visible`
 * masked (causal) and keys whose pad[j] is nonzero masked (pad may be NULL).
 * Masked entries become exactly 0. With normalize 0 the row is left as
 * exp(s - max), and *inv_sum (always set) is what normalises it: callers
 * that only need A V scale the d_v outputs instead of the m weights.
 * A row with no visible key becomes all 0, *inv_sum 0, and the call returns
 * 1. Returns -1 when the row holds +inf or NaN scores (finite inputs whose
 * products overflowed), 0 otherwise. */
int attn__softmax_row(float *s, size_t len, size_t visible,
                      const unsigned char *pad, int normalize,
                      float *inv_sum);

/* The same without normalising, out of place: the row of scores s becomes
 * all 0 and p holds its unnormalised softmax, exp(s - c) for some c of the
 * row (every exponent is at most 16), with 1 / sum(p) in *inv_sum. A
 * scores buffer kept at zero this way takes the next product with beta = 1,
 * which spares OpenBLAS its own zeroing pass over it. */
int attn__softmax_into(float *s, float *p, size_t len, size_t visible,
                       const unsigned char *pad, float *inv_sum);

/* For the tests: the softmax with the kernels of one instruction set
 * (0 scalar, 1 AVX2, 2 AVX-512), in place when p == s. Returns -2 when
 * this CPU lacks them. */
int attn__softmax_isa(int isa, float *s, float *p, size_t len,
                      size_t visible, const unsigned char *pad, int normalize,
                      float *inv_sum);

#endif

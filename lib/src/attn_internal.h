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

/* The source of the values, [B][m][width]: p->value (width d_val), or the
 * memory sequence (width d_mem). */
const float *attn__value_source(const attn_params *p);
size_t attn__value_width(const attn_params *p);

/* The reference's own visibility rule (attn_ref.c): whether head i's query
 * a of batch element b sees key c. Only the float64 reference uses it. */
int attn__ref_visible(const attn_params *p, size_t b, size_t i, size_t a,
                      size_t c);

/* Row softmax over s[0..len) in place, with keys at and beyond `visible`
 * hidden and keys whose hide[j] is nonzero hidden (hide, the row's hidden
 * flags from attn_visible.c or the key padding itself, may be NULL).
 * Masked entries become exactly 0. With normalize 0 the row is left as
 * exp(s - max), and *inv_sum (always set) is what normalises it: callers
 * that only need A V scale the d_v outputs instead of the m weights.
 * A row with no visible key becomes all 0, *inv_sum 0, and the call returns
 * 1. Returns -1 when the row holds +inf or NaN scores (finite inputs whose
 * products overflowed), 0 otherwise. */
int attn__softmax_row(float *s, size_t len, size_t visible,
                      const unsigned char *hide, int normalize,
                      float *inv_sum);

/* The same without normalising, out of place: the row of scores s becomes
 * all 0 and p holds its unnormalised softmax, exp(s - c) for some c of the
 * row (every exponent is at most 16), with 1 / sum(p) in *inv_sum. A
 * scores buffer kept at zero this way takes the next product with beta = 1,
 * which spares OpenBLAS its own zeroing pass over it. */
int attn__softmax_into(float *s, float *p, size_t len, size_t visible,
                       const unsigned char *hide, float *inv_sum);

/* For the tests: the softmax with the kernels of one instruction set
 * (0 scalar, 1 AVX2, 2 AVX-512), in place when p == s. Returns -2 when
 * this CPU lacks them. */
int attn__softmax_isa(int isa, float *s, float *p, size_t len,
                      size_t visible, const unsigned char *hide, int normalize,
                      float *inv_sum);

/* The fused outputs-only kernel (attn_flash.c): query rows q0 .. q0+rows
 * (at most ATTN__FLASH_ROWS) of batch element b, query head i, from the
 * projected q [B*n][h*d_k], k [B*m][g*d_k] and v [B*m][g*d_v], into its
 * columns of cat [B*n][h*d_v], with the masks of p. ws is the worker's
 * workspace of attn__flash_floats(d) floats, 64-byte aligned. Returns
 * ATTN_OK, or ATTN_ERANGE when a row's scores held +inf or NaN, or all
 * overflowed to -inf (the row softmax's rule). */
#define ATTN__FLASH_ROWS 128
typedef struct attn__vis attn__vis;
typedef struct attn__flash_args {
    const attn_params *p;
    const attn__vis *vis; /* which keys each query sees */
    const float *q, *k, *v;
    float *kt; /* [B][g][d_k][m rounded up to 32]: K^T, zero-padded */
    float *vp; /* [B][g][m][d_v]: V, each head's rows contiguous */
    float *cat;
    float scale;
} attn__flash_args;

/* Packs keys k0 .. k0+256 (or to m) of batch element b, key/value head kv
 * from a->k and a->v into a->kt and a->vp, before any tile reads them; the
 * last block also zeroes kt's padding. */
#define ATTN__FLASH_KEYS 256
void attn__flash_pack(const attn__flash_args *a, size_t b, size_t kv,
                      size_t k0);

/* The floats of a->kt and a->vp together (SIZE_MAX when they would
 * overflow), and where each starts in a block of them (a->p set). */
size_t attn__flash_packed_floats(const attn_dims *d);
void attn__flash_place(attn__flash_args *a, float *packed);

attn_status attn__flash_tile(const attn__flash_args *a, size_t b, size_t i,
                             size_t q0, size_t rows, float *ws);

/* The workspace attn__flash_tile needs a worker, in floats; 0 when it
 * cannot take these dims on this CPU (no AVX-512F, d_k > 256, d_v > 128)
 * or has been turned off. */
size_t attn__flash_floats(const attn_dims *d);

/* For the tests: turns the fused kernel on or off (it is on by default);
 * returns whether it was on. Not thread-safe. */
int attn__flash_enable(int on);

#endif

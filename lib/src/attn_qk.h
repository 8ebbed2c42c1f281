/* attn_qk.h: the query/key norm and rotation of the fast kernels (not
 * installed). */
#ifndef ATTN_QK_H
#define ATTN_QK_H

#include "attn_visible.h"

/* Whether p norms or rotates queries and keys at all. */
int attn__qk_active(const attn_params *p);

/* Applies qk_norm, then rope, in place to rows r0 .. r0+rows of the
 * projected queries x [B*n][h*d_k] (keys 0) or keys [B*m][g*d_k] (keys 1).
 * trig is the caller's scratch of rope.dim doubles. */
void attn__qk_prepare(const attn__vis *v, float *x, size_t r0, size_t rows,
                      int keys, double *trig);

#endif

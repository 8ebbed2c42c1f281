/* attn_heads.h: the head figures' accumulators and top-k selection,
 * shared by the BLAS kernel's tiles (not installed; the figures' public
 * side is attn_analysis.h). */
#ifndef ATTN_HEADS_H
#define ATTN_HEADS_H

#include "attn_analysis.h"
#include "attn_visible.h"

/* Heads whose row entropies are kept on the stack for the similarity;
 * beyond it they are recomputed. */
#define ATTN__MAX_STACK_HEADS 128

typedef struct attn__head_sums {
    double entropy, entropy_normalized, confidence, self, prev, next, first;
    size_t rows_normalized;
} attn__head_sums;

/* Per-worker sums, so tiles of one batch element can run concurrently:
 *   sums     [workers][B][h]
 *   hist     [workers][B][h][n + m - 1]  mass per offset c - r
 *   sim      [workers][B][h][h]          upper triangle used
 *   skipped  [workers][B] */
typedef struct attn__acc {
    size_t workers, B, h, n, m, offsets;
    attn__head_sums *sums;
    double *hist, *sim;
    size_t *skipped;
} attn__acc;

/* ATTN_OK, ATTN_EOVERFLOW or ATTN_ENOMEM; on failure attn__acc_free still
 * frees what was allocated. */
attn_status attn__acc_init(attn__acc *acc, const attn_params *p,
                           size_t workers);
void attn__acc_free(attn__acc *acc, const attn_params *p);

/* Adds query row r of batch element b: rows[i] is head i's normalised row,
 * of which keys [0, len) may be nonzero; visible[i] counts the keys the
 * masks leave head i (0 in every head: the row is skipped and counted). */
void attn__acc_row(attn__acc *acc, size_t worker, size_t b, size_t r,
                   const float *const *rows, size_t len,
                   const size_t *visible);

/* Means, dominant offsets, patterns and similarity into ex. */
void attn__acc_finish(const attn__acc *acc, const attn_extras *ex);

/* The k largest of w[0..m) (w[c] = 0 for c >= len), descending, ties by
 * lower index, into idx[0..k) and val[0..k). */
void attn__top_k(const float *w, size_t len, size_t m, size_t k,
                 uint32_t *idx, float *val);

/* ATTN_EINVAL when ex is inconsistent with p and weights (see attn.h). */
attn_status attn__extras_check(const attn_params *p, const float *weights,
                               const attn_extras *ex);

#endif

/* attn_visible.h: which keys a query sees, decided in one place for every
 * fast kernel (not installed). The rules are attn.h's: the causal mask by
 * positions, key padding, the boolean score map, the sliding window and
 * the global tokens that escape it. The kernels ask three questions:
 *   attn__vis_key     one (query, key) of one head
 *   attn__vis_block   a block of queries against a block of keys: none of
 *                     its pairs visible, all of them, or some
 *   attn__vis_range   for one query, the [lo, hi) key range outside which
 *                     no key can be visible (the window and causal bounds,
 *                     widened to the global keys), for every head
 * and attn__vis_row fills one row's hidden flags over a range of keys.
 * The additive score rules that depend on positions (softcap, bias,
 * ALiBi) are applied here too, by attn__vis_adjust, so the kernels hold no
 * copy of either. */
#ifndef ATTN_VISIBLE_H
#define ATTN_VISIBLE_H

#include "attn_internal.h"

typedef enum attn__vis_kind {
    ATTN__VIS_NONE = 0,    /* no pair of the block is visible */
    ATTN__VIS_PARTIAL = 1, /* some may be */
    ATTN__VIS_ALL = 2      /* every pair is */
} attn__vis_kind;

/* The per-call state: flags and prefix counts built once (O(B (n + m)))
 * so that a block's answer costs O(1) when positions are nondecreasing. */
typedef struct attn__vis {
    const attn_params *p;
    size_t B, n, m;
    int causal, window;
    uint64_t left, right; /* window sides; UINT64_MAX unbounded */
    int has_mask;         /* a boolean score map */
    int has_global;       /* global tokens with a window */
    int adjust;           /* softcap, bias or ALiBi change the scores */
    int hide_rows;        /* rows need per-key flags beyond their range */
    int pad_only;         /* ... and those flags are the key padding alone */
    int avx512;           /* attn__vis_adjust may use AVX-512F */
    unsigned char *gq;    /* [n]: global queries (has_global) */
    unsigned char *gk;    /* [m]: global keys (has_global) */
    size_t *gk_before;    /* [m + 1]: global keys before each index */
    size_t *pad_before;   /* [B][m + 1]: padded keys before each index */
    unsigned char *q_sorted, *k_sorted; /* [B]: positions nondecreasing */
    int64_t *kp_sorted;   /* [B][m]: key positions in order, for ALiBi when
                             they are given (else NULL: 0 .. m-1) */
    float *bias_max;      /* each row of score_bias: its largest value (the
                             row's scores are taken less it) */
    void *block;          /* the one allocation the arrays live in */
} attn__vis;

/* Builds v for p (p must have passed attn_check). Returns ATTN_OK or
 * ATTN_ENOMEM; attn__vis_free accepts a failed or zeroed v. */
attn_status attn__vis_init(attn__vis *v, const attn_params *p);
/* The bytes attn__vis_init allocates for p. */
size_t attn__vis_bytes(const attn_params *p);
void attn__vis_free(attn__vis *v);

/* Positions of query a and key c of batch element b (attn.h defaults). */
int64_t attn__vis_qpos(const attn__vis *v, size_t b, size_t a);
int64_t attn__vis_kpos(const attn__vis *v, size_t b, size_t c);

/* Whether head i's query a of batch element b sees key c. */
int attn__vis_key(const attn__vis *v, size_t b, size_t i, size_t a,
                  size_t c);

/* Queries [q0, q1) against keys [k0, k1) of head i, batch element b. */
attn__vis_kind attn__vis_block(const attn__vis *v, size_t b, size_t i,
                               size_t q0, size_t q1, size_t k0, size_t k1);

/* The scalar rules of p into v (no tables, no allocation): enough for
 * attn__vis_qpos, attn__vis_kpos and attn__vis_span. */
void attn__vis_rules(attn__vis *v, const attn_params *p);

/* On sorted key positions: the keys [*lo, *hi) of batch element b that
 * the causal bound and (when window) the window leave query a. */
void attn__vis_span(const attn__vis *v, size_t b, size_t a, int window,
                    size_t *lo, size_t *hi);

/* Keys outside [*lo, *hi) are hidden from query a in every head (lo ==
 * hi when all are). */
void attn__vis_range(const attn__vis *v, size_t b, size_t a, size_t *lo,
                     size_t *hi);

/* hide[c - k0] = 1 for the hidden keys c of [k0, k1) of head i's query a,
 * 0 for the visible ones; returns how many are visible. */
size_t attn__vis_row(const attn__vis *v, size_t b, size_t i, size_t a,
                     size_t k0, size_t k1, unsigned char *hide);

/* The visible bits of head i's query a over keys [k0, k0 + n_keys), 16 a
 * word (bit t of bits[j] is key k0 + 16 j + t), given its range [lo, hi)
 * from attn__vis_range; words up to keys bits are written. */
void attn__vis_bits(const attn__vis *v, size_t b, size_t i, size_t a,
                    size_t lo, size_t hi, size_t k0, size_t n_keys,
                    size_t keys, uint16_t *bits);

/* The visible keys of head i's query a over all m. */
size_t attn__vis_count(const attn__vis *v, size_t b, size_t i, size_t a);

/* Steps 5 and 6 of the score rules on s[0..len), head i's scores of query
 * a against keys k0 .. k0+len-1, kept in units of `unit` (1, or log2 e for
 * the fused kernel): s = unit * (softcap(s / unit) + bias - alibi), less a
 * constant of the row that the softmax does not see (the row's largest
 * bias, and ALiBi at the row's nearest key), so that a large bias or a
 * far key leaves the scores' differences to float32. Does nothing unless
 * v->adjust. */
void attn__vis_adjust(const attn__vis *v, size_t b, size_t i, size_t a,
                      size_t k0, float *s, size_t len, float unit);

#endif

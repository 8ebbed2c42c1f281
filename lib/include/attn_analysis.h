/* attn_analysis.h: what each head of an attention call does, the figures
 * attn_forward_ex fills when attn_extras.stats is set, and their float64
 * reference. A caller that asks for them includes this header beside
 * attn.h. */
#ifndef ATTN_ANALYSIS_H
#define ATTN_ANALYSIS_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Head analysis: what each head does (Clark et al. 2019, "What Does BERT
 * Look At?"), computed in the same pass as the weights.
 *
 * For batch element b and head i, over the queries r whose row has at least
 * one visible key (fully masked rows are skipped and counted), with A the
 * head's weights and masked keys excluded (their weight is 0):
 *   entropy             mean of H_r = -sum_c A[r][c] ln A[r][c]  (nats)
 *   entropy_normalized  mean of H_r / ln(visible keys of row r), over rows
 *                       with at least two visible keys (0 if none)
 *   confidence          mean of max_c A[r][c]
 *   self, prev, next    mean of A[r][r], A[r][r-1], A[r][r+1] (0 where that
 *                       key does not exist)
 *   first               mean of A[r][0]
 *   dominant_offset     the offset c - r with the largest mean mass
 *                       (ties: the smallest |offset|, then the negative one)
 *   pattern             ATTN_PATTERN_* below, by these rules in order:
 *                       the largest of first, prev, next, self (ties in that
 *                       order) when it is >= 0.5 names the pattern;
 *                       otherwise entropy_normalized >= 0.75 is broad;
 *                       otherwise focused.
 * similarity[b][i][i2] is the mean over the same rows of the Jensen-Shannon
 * divergence (nats, in [0, ln 2]) between the rows of heads i and i2. */
#define ATTN_PATTERN_MAP(X)                                                   \
    X(FIRST_TOKEN, "first_token")                                             \
    X(PREVIOUS, "previous")                                                   \
    X(NEXT, "next")                                                           \
    X(SELF, "self")                                                           \
    X(BROAD, "broad")                                                         \
    X(FOCUSED, "focused")

typedef enum attn_pattern {
#define ATTN__PATTERN_ENUM(name, str) ATTN_PATTERN_##name,
    ATTN_PATTERN_MAP(ATTN__PATTERN_ENUM)
#undef ATTN__PATTERN_ENUM
} attn_pattern;

/* The pattern's name ("first_token", ...); "unknown" for anything else. */
ATTN_API const char *attn_pattern_name(int pattern);

/* Thresholds of the classification above. */
#define ATTN_PATTERN_POSITIONAL_MIN 0.5
#define ATTN_PATTERN_BROAD_MIN 0.75

struct attn_head_stats {
    double entropy, entropy_normalized, confidence;
    double self, prev, next, first;
    long dominant_offset;
    attn_pattern pattern;
};

/* The reference for the extras: computes them in float64 from dense
 * per-head weights [B][h][n][m] (as attn_forward_ref returns them) and the
 * masks of p (ex->top_k must be 0). */
ATTN_API attn_status attn_analyze_ref(const attn_params *p,
                                      const float *weights,
                                      const attn_extras *ex);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ANALYSIS_H */

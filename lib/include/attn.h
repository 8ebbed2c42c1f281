/* attn.h: scaled dot-product attention over plain row-major float arrays.
 *
 * Dimension names, fixed here and used everywhere (code, comments, errors):
 *   B        batch size
 *   n        query positions
 *   m        key/value positions (m == n for self-attention)
 *   d_model  width of x
 *   d_mem    width of memory (d_mem == d_model for self-attention)
 *   h        query heads
 *   g        key/value heads, 1 <= g <= h, h % g == 0
 *            (g == h multi-head, g == 1 multi-query, otherwise grouped-query)
 *   d_k      per-head query/key width
 *   d_v      per-head value width
 *   d_out    output width (h * d_v when there is no W_O)
 *
 * The computation, for each batch element b:
 *   Q = x W_q + b_q          [n][h*d_k]
 *   K = memory W_k + b_k     [m][g*d_k]
 *   V = memory W_v + b_v     [m][g*d_v]
 *   for each query head i, with key/value head j = i / (h/g):
 *     S_i = scale * Q_i K_j^T                     [n][m]
 *     masked entries of S_i set to -inf
 *     A_i = softmax over each row of S_i          [n][m]
 *     O_i = A_i V_j                               [n][d_v]
 *   output = concat(O_0 .. O_{h-1}) W_o + b_o     [n][d_out]
 * A row whose every key is masked gives all-zero weights and a zero head
 * output, never NaN.
 *
 * Ownership: the library never keeps a pointer past the call. The caller owns
 * every input and allocates every output; the library fills the outputs and
 * frees its own workspace before returning, whatever the outcome.
 *
 * Reentrancy: no global state. Calls may run concurrently from any number of
 * threads, provided their outputs do not overlap.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version: MAJOR changes with the ABI (attn_params grew in
 * 2.0), MINOR with additions, PATCH with fixes. */
#define ATTN_VERSION_MAJOR 2
#define ATTN_VERSION_MINOR 0
#define ATTN_VERSION_PATCH 0

/* Marks the exported functions: the library builds with
 * -fvisibility=hidden, so libattn.so exports attn_* and nothing else. */
#if defined(__GNUC__) || defined(__clang__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

/* Status codes: 0 or negative. One table generates the enum and the messages.
 * Every fallible function below returns one; the values never change, so
 * a caller built against an older header that stored them in an int still
 * reads them right. */
#define ATTN_STATUS_MAP(X)                                                    \
    X(OK, 0, "success")                                                       \
    X(EINVAL, -1, "invalid argument")                                         \
    X(ESHAPE, -2, "inconsistent dimensions")                                  \
    X(EOVERFLOW, -3, "size product overflows size_t")                         \
    X(ENOMEM, -4, "out of memory")                                            \
    X(ERANGE, -5, "values overflow float32 during the computation")

typedef enum attn_status {
#define ATTN__STATUS_ENUM(name, value, msg) ATTN_##name = (value),
    ATTN_STATUS_MAP(ATTN__STATUS_ENUM)
#undef ATTN__STATUS_ENUM
} attn_status;

/* A static string describing a status; "unknown status" for anything else. */
ATTN_API const char *attn_strerror(int status);

typedef enum attn_mask {
    ATTN_MASK_NONE = 0,
    ATTN_MASK_CAUSAL = 1 /* query i may attend key j only when j <= i */
} attn_mask;

typedef enum attn_weights {
    ATTN_WEIGHTS_NONE = 0,     /* weights not returned, never materialised */
    ATTN_WEIGHTS_PER_HEAD = 1, /* weights [B][h][n][m] */
    ATTN_WEIGHTS_MEAN = 2      /* weights [B][n][m], mean over the h heads */
} attn_weights;

typedef struct attn_dims {
    size_t B, n, m, d_model, d_mem, h, g, d_k, d_v, d_out;
} attn_dims;

/* Optional allocator for the library's workspace (tests use it to fail each
 * allocation in turn). alloc returns NULL on failure; free accepts NULL. */
typedef struct attn_allocator {
    void *(*alloc)(void *ctx, size_t size);
    void (*free)(void *ctx, void *ptr);
    void *ctx;
} attn_allocator;

/* Optional executor through which the library spreads its work (row blocks
 * of the projections, (batch, head, query block) tiles of the attention)
 * over the caller's threads, so a server sizes one pool for all its requests
 * and never creates threads per request. run calls fn(arg, i, worker) once
 * for every i in [0, count), possibly concurrently, and returns when all have
 * returned; worker is in [0, workers) and no two concurrent calls share one
 * (the library keeps one scratch buffer per worker). With no executor the
 * library runs the tasks in order on the calling thread. OpenBLAS should then
 * be limited to one thread (OPENBLAS_NUM_THREADS=1) so the two never
 * oversubscribe the cores. */
typedef struct attn_executor {
    void (*run)(void *ctx, size_t count,
                void (*fn)(void *arg, size_t i, size_t worker), void *arg);
    size_t workers;
    void *ctx;
} attn_executor;

/* Rotary position embedding (RoFormer). Pair p (0 <= p < dim/2) has the
 * frequency inv_freq[p], or theta^(-2p/dim) when inv_freq is NULL; at
 * position t the pair (u, w) becomes
 *   f * (u cos(t freq) - w sin(t freq), u sin(t freq) + w cos(t freq))
 * with f the attention factor. Pair p is entries (p, p + dim/2) for
 * ATTN_ROPE_HALF (Hugging Face rotate_half) and (2p, 2p+1) for
 * ATTN_ROPE_INTERLEAVED (GPT-J). Entries dim .. d_k-1 pass through. */
typedef enum attn_rope_style {
    ATTN_ROPE_HALF = 0,
    ATTN_ROPE_INTERLEAVED = 1
} attn_rope_style;

typedef struct attn_rope {
    size_t dim;              /* even, <= d_k; 0: no rotary embedding */
    double theta;            /* > 0, or 0: 10000 */
    const float *inv_freq;   /* [dim/2], or NULL: from theta */
    attn_rope_style style;
    double attention_factor; /* > 0, or 0: 1 */
} attn_rope;

/* RMS norm of queries and keys before the rotation: per head (weights of
 * d_k values, Qwen3) or over the whole projected row (weights of h*d_k and
 * g*d_k values, OLMo 2). */
typedef enum attn_qk_norm_over {
    ATTN_QK_NORM_NONE = 0,
    ATTN_QK_NORM_HEAD = 1,
    ATTN_QK_NORM_ALL = 2
} attn_qk_norm_over;

typedef struct attn_qk_norm {
    attn_qk_norm_over over;
    const float *q_weight; /* [d_k] (HEAD) or [h*d_k] (ALL) */
    const float *k_weight; /* [d_k] (HEAD) or [g*d_k] (ALL) */
    double eps;            /* > 0, or 0: 1e-6 */
} attn_qk_norm;

/* An n x m map per (batch element, head) given in a broadcast form: the map
 * of batch element b and head i starts at data + b*stride_b + i*stride_h
 * (elements), rows of m. A stride of 0 shares the map: [n][m] is both
 * strides 0, [h][n][m] is stride_h n*m, [B][n][m] stride_b n*m,
 * [B][h][n][m] stride_b h*n*m and stride_h n*m. */
typedef struct attn_score_map {
    const void *data; /* float (score_bias) or uint8_t (score_mask); NULL: none */
    size_t stride_b, stride_h;
} attn_score_map;

/* Sliding window: key b is visible from query a only when
 * pos[a] - left <= kpos[b] <= pos[a] + right. */
#define ATTN_UNBOUNDED SIZE_MAX
typedef struct attn_window {
    int on;             /* 0: no window */
    size_t left, right; /* ATTN_UNBOUNDED: no bound on that side */
} attn_window;

/* Everything one call needs. All pointers are borrowed for the call.
 * Matrices are row-major and contiguous; weights use the "heads side by side"
 * layout: head i of W_q owns columns i*d_k .. (i+1)*d_k-1. */
typedef struct attn_params {
    attn_dims dims;
    const float *x;      /* [B][n][d_model], required */
    const float *memory; /* [B][m][d_mem]; NULL: self-attention on x, which
                            requires m == n and d_mem == d_model */
    const float *w_q;    /* [d_model][h*d_k], required */
    const float *w_k;    /* [d_mem][g*d_k], required */
    const float *w_v;    /* [d_mem][g*d_v], required */
    const float *w_o;    /* [h*d_v][d_out]; NULL: d_out must be h*d_v */
    const float *b_q;    /* [h*d_k] or NULL */
    const float *b_k;    /* [g*d_k] or NULL */
    const float *b_v;    /* [g*d_v] or NULL */
    const float *b_o;    /* [d_out] or NULL */
    attn_mask mask;
    const uint8_t *key_padding; /* [B][m], nonzero marks a padded key; or NULL */
    float scale;                /* > 0; 0 selects 1/sqrt(d_k) */
    attn_weights weights;
    const attn_allocator *allocator; /* NULL: malloc/free */
    const attn_executor *executor;   /* NULL: run on the calling thread */

    /* -- the rules of real model families (all optional: zeroed fields
     * give the computation above exactly) ------------------------------
     * For head i (key/value head j), query a, key c of batch element b:
     *   q = Q_i[a], k = K_j[c]
     *   qk_norm: q = q / sqrt(mean(q^2) + eps) * q_weight, likewise k
     *   rope:    q rotated by positions[a], k by key_positions[c]
     *   s = scale * (q . k)
     *   softcap: s = softcap * tanh(s / softcap)
     *   s += score_bias[b][i][a][c] - alibi_slopes[i] * |pos[a] - kpos[c]|
     *   s = -inf where the key is hidden: by the causal mask
     *       (kpos[c] > pos[a]), key_padding, score_mask, or the window
     *       (unless query a or key c is a global token)
     *   softmax over the visible keys; O_i = A_i V_j */
    const int64_t *positions;     /* [B][n], >= 0; NULL: 0 .. n-1 */
    const int64_t *key_positions; /* [B][m], >= 0; NULL: positions when
                                     memory is NULL, else 0 .. m-1 */
    attn_rope rope;               /* rope.dim 0: no rotation */
    attn_qk_norm qk_norm;         /* qk_norm.over ATTN_QK_NORM_NONE: none */
    float softcap;                /* > 0, or 0: none */
    const float *alibi_slopes;    /* [h], or NULL: no ALiBi */
    attn_score_map score_bias;    /* float, added; data NULL: none */
    attn_score_map score_mask;    /* uint8_t, nonzero hides; data NULL: none */
    attn_window window;           /* window.on 0: none */
    const size_t *global_tokens;  /* [n_global] indices, or NULL: query a
                                     (a < n) sees every key and key b
                                     (b < m) is seen by every query that
                                     the window alone hides it from */
    size_t n_global;
    const float *value;           /* [B][m][d_val]: a separate source of
                                     values (w_v is then [d_val][g*d_v]);
                                     NULL: values come from memory (or x) */
    size_t d_val;                 /* width of value; ignored when NULL */
} attn_params;

/* The head figures (attn_analysis.h) that attn_forward_ex fills. */
typedef struct attn_head_stats attn_head_stats;

/* Optional extra outputs, all caller-owned; see attn_forward_ex.
 *   stats         nonzero: fill heads, similarity, skipped_rows (the figures
 *                 are defined in attn_analysis.h)
 *   heads         [B][h]
 *   similarity    [B][h][h]
 *   skipped_rows  [B]: fully masked query rows
 *   top_k         0, or k in [1, m]: instead of dense weights, the k largest
 *                 weights of each row (descending; ties by lower index),
 *                 per head [B][h][n][k] or of the mean [B][n][k], following
 *                 p->weights, which must then not be ATTN_WEIGHTS_NONE
 *   top_index     key indices, [..][k]
 *   top_weight    their weights, [..][k]
 *   cost_seconds  NULL, or receives the time spent on the figures and the
 *                 top-k rows, summed over the executor's workers */
typedef struct attn_extras {
    int stats;
    attn_head_stats *heads;
    double *similarity;
    size_t *skipped_rows;
    size_t top_k;
    uint32_t *top_index;
    float *top_weight;
    double *cost_seconds;
    /* value_norms  [B][h][m]: ||V_j[b] W_o^(i)||, W_o^(i) being the d_v
     *              rows of w_o that head i owns (||V_j[b]|| without w_o)
     * q_out        [B][h][n][d_k], k_out [B][g][m][d_k]: the queries and
     *              keys as they enter the dot product (after qk_norm and
     *              rope, before the scale)
     * each NULL when not wanted */
    float *value_norms;
    float *q_out;
    float *k_out;
    /* absmax       [3]: the largest |q|, |k| and |v| of the request as
     *              they enter the products (q and k after qk_norm and
     *              rope, before the scale), for a caller judging how far
     *              float32 rounding may move the answer; NULL when not
     *              wanted; attn_forward_ref_ex leaves it */
    float *absmax;
    /* normmax      [2]: the largest 2-norm of one head's d_k values of a
     *              query row and of a key row, taken where absmax is;
     *              a score's partial sums are at most their product
     *              (Cauchy-Schwarz), often far below d_k max|q| max|k|;
     *              NULL when not wanted; attn_forward_ref_ex leaves it */
    float *normmax;
} attn_extras;

/* Validates p: dimensions non-zero, g divides h, d_out == h*d_v without W_O,
 * required pointers present, every size product representable; and the
 * score rules: rope.dim even (ATTN_EINVAL) and <= d_k (ATTN_ESHAPE), theta
 * and attention_factor >= 0 and finite, a known style, finite inv_freq;
 * qk_norm a known over with both weights and eps >= 0; softcap >= 0 and
 * finite; finite alibi_slopes; window.on 0 or 1 with sides <= INT64_MAX or
 * ATTN_UNBOUNDED; n_global tokens present, each < max(n, m) (ATTN_ESHAPE);
 * positions >= 0 (it reads all B*(n+m)); d_val > 0 with value
 * (ATTN_ESHAPE); score-map strides whose last element is representable
 * (ATTN_EOVERFLOW). A zeroed field is always valid.
 * Returns ATTN_OK, ATTN_EINVAL, ATTN_ESHAPE or ATTN_EOVERFLOW. */
ATTN_API attn_status attn_check(const attn_params *p);

/* Element counts of the caller-owned outputs for p: *output_elems is
 * B*n*d_out; *weights_elems is B*h*n*m (per head), B*n*m (mean) or 0 (none).
 * Either pointer may be NULL. Fails like attn_check. */
ATTN_API attn_status attn_output_sizes(const attn_params *p,
                                       size_t *output_elems,
                                       size_t *weights_elems);

/* Number of weight and bias values p carries (W_q, W_k, W_v, W_o and the
 * biases that are present; W_v has d_val inputs when value is given; and
 * qk_norm's two weights: what PyTorch counts as the attention module's
 * parameters, not the score inputs attn_bias, slopes or inv_freq), and
 * the exact floating-point operation count of the computation above
 * (multiply-adds times two; masked entries counted, as the contract
 * defines the computation over the whole n x m, whatever the window or
 * the masks hide; the V projection over d_val inputs with value). */
ATTN_API attn_status attn_param_count(const attn_params *p, uint64_t *count);
ATTN_API attn_status attn_flops(const attn_params *p, uint64_t *flops);

/* The work the call will do, for limits (not the contract's flops):
 * multiply-adds times two of the projections and of the score and value
 * products over the pairs that the causal mask, the window and the global
 * tokens leave (positions taken into account; key padding and score_mask
 * are not counted off), plus ATTN_COST_EXP per such pair (the
 * exponential), ATTN_COST_ROW per (batch element, head, query row),
 * ATTN_COST_SOFTCAP per pair with a softcap, and the norm and rotation of
 * queries and keys. O(B (n log m + m)), no allocation.
 * Returns ATTN_OK, or fails like attn_check (ATTN_EOVERFLOW when the count
 * does not fit 64 bits). */
#define ATTN_COST_EXP 20
#define ATTN_COST_SOFTCAP 20
#define ATTN_COST_ROW 64
ATTN_API attn_status attn_cost(const attn_params *p, uint64_t *work_units);

/* The peak of the workspace attn_forward_ex allocates for p and ex (NULL:
 * none) when it runs on `workers` workers (the executor's, or 1 without):
 * projections, packed K and V, score tiles, the visibility tables and the
 * head figures' sums. The caller's own outputs are not included. Returns
 * ATTN_OK, or fails like attn_check. */
ATTN_API attn_status attn_workspace_bytes(const attn_params *p,
                                          const attn_extras *ex, size_t workers,
                                          uint64_t *bytes);

/* Computes the attention described by p.
 *   output   [B][n][d_out], caller-owned, required
 *   weights  [B][h][n][m] (per head), [B][n][m] (mean), or NULL when
 *            p->weights is ATTN_WEIGHTS_NONE
 * Returns ATTN_OK, or a negative status with the outputs' contents
 * unspecified and nothing leaked. ATTN_ERANGE: finite inputs whose products
 * overflow float32 (an infinite or NaN score or output), or queries and
 * keys large enough that a score might (d_k max|q| max|k|, times the
 * scale when above 1, not below FLT_MAX: a score that overflowed to -inf
 * would pass for a hidden key). Without weights, memory stays
 * O(block * m) beyond the projections: the n x m scores are never
 * materialised per head.
 * attn_forward uses cblas_sgemm; attn_forward_ref is the naive reference with
 * the same contract (float64 accumulation), which the tests trust. */
ATTN_API attn_status attn_forward(const attn_params *p, float *output,
                                  float *weights);
ATTN_API attn_status attn_forward_ref(const attn_params *p, float *output,
                                      float *weights);

/* attn_forward with extras (ex may be NULL). With ex->top_k the dense
 * weights are not materialised: weights must be NULL, memory stays
 * O(workers * h * block * m) beyond the projections. The head figures cost
 * O(B h n m) logarithms, and the similarity O(B h^2 n m).
 * Returns ATTN_EINVAL for inconsistent extras (top_k > m, missing outputs,
 * top_k with ATTN_WEIGHTS_NONE, a dense weights pointer with top_k). */
ATTN_API attn_status attn_forward_ex(const attn_params *p, float *output,
                                     float *weights, const attn_extras *ex);

/* The reference with the extras it can compute from the call alone:
 * value_norms, q_out and k_out (in float64, rounded to float once; one
 * beyond float32 is ATTN_ERANGE, as an output is, in both kernels);
 * ex->stats and ex->top_k must be 0 (ATTN_EINVAL otherwise: the head
 * figures' reference is attn_analyze_ref). ex may be NULL. */
ATTN_API attn_status attn_forward_ref_ex(const attn_params *p, float *output,
                                         float *weights, const attn_extras *ex);

/* Process-wide BLAS settings (OpenBLAS keeps them globally, so these are the
 * only calls here that touch shared state; call them once at start-up).
 * attn_blas_set_threads limits OpenBLAS to n threads (n >= 1) and returns
 * the number now in use; attn_blas_config returns OpenBLAS's build
 * description (openblas_get_config()), a static string. */
ATTN_API int attn_blas_set_threads(int n);
ATTN_API const char *attn_blas_config(void);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */

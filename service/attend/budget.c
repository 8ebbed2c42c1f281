/* attend/budget.c: the limits of a built request's work and memory, known
 * before anything large is allocated.
 *
 * Work: the library's attn_cost, which counts what the computation will
 * do (the products over the pairs the causal mask and the window leave,
 * an exponential per pair, an overhead per query row and head), is held
 * to --max-flops; the contract's flops (over the whole n x m) go to
 * meta.flops. A request of many narrow heads (h = 128, d_k = 1) has few
 * flops but costs its exponentials, and a windowed request over a long
 * sequence has many contract flops but costs only its band. value_norms
 * adds its own products (codec__value_norms_cost), analysis its
 * logarithms (codec__analysis_cost).
 *
 * Memory: the library's workspace (attn_workspace_bytes: projections,
 * packed keys and values, score tiles, for as many workers as the pool
 * has) plus the results this request keeps
 * (output, maps or top-k pairs, value norms, queries and keys, head
 * figures), held to --max-request-bytes (0: no bound). A 197 KB body can
 * ask for gigabytes of projections; it is refused here, with RSS
 * unchanged. */
#include "attend/parse.h"

#include <stdio.h>

/* The bytes of results codec_run allocates for req. */
static uint64_t codec__result_bytes(const codec_request *req)
{
    const attn_dims *d = &req->p.dims;
    size_t out = 0, maps = 0;
    uint64_t bytes;

    attn_output_sizes(&req->p, &out, &maps);
    if (req->top_k)
        maps = maps / d->m * req->top_k * 4; /* index, weight and pairs */
    bytes = 4 * ((uint64_t)out + maps);
    if (req->want_value_norms)
        bytes += 4 * (uint64_t)d->B * d->h * d->m;
    if (req->want_qk)
        bytes += 4 * (uint64_t)d->B * (d->h * d->n + d->g * d->m) * d->d_k;
    if (req->analysis)
        bytes += (uint64_t)d->B * d->h * (sizeof(attn_head_stats) + 12 * d->h);
    return bytes;
}

/* Adds to *cost the work of value_norms: for each head and key, V_j[b]
 * times the head's d_v rows of W_O (multiply-adds times two) and the
 * squares of the d_out values, or the squares of V_j[b] alone. This is
 * the request's largest part when a few queries meet many keys and a wide
 * W_O (one token against a long memory). Returns 0, or -1 on overflow. */
static int codec__value_norms_cost(const attn_params *p, uint64_t *cost)
{
    const attn_dims *d = &p->dims;
    uint64_t per_key = p->w_o ? 2 * (uint64_t)d->d_v * d->d_out + 2 * d->d_out
                              : 2 * (uint64_t)d->d_v,
             w;

    return __builtin_mul_overflow((uint64_t)d->B * d->h, d->m, &w) ||
                   __builtin_mul_overflow(w, per_key, &w) ||
                   __builtin_add_overflow(*cost, w, cost)
               ? -1
               : 0;
}

/* Units of work a logarithm of the head figures costs. The figures take,
 * for each query row, each head's entropy and each pair of heads' Jensen-
 * Shannon divergence over the row's keys: a logarithm a key, head and pair
 * of heads, about 2 ns each on the two workers of a 2-core machine, where
 * a unit of attn_cost takes about 0.02 ns. */
#define CODEC__COST_LOG 100

/* Adds to *cost the work of analysis: B n m (h + h (h - 1) / 2)
 * logarithms, the largest part of a request of many heads. Returns 0, or
 * -1 on overflow. */
static int codec__analysis_cost(const attn_params *p, uint64_t *cost)
{
    const attn_dims *d = &p->dims;
    uint64_t per_key = (uint64_t)d->h + (uint64_t)d->h * (d->h - 1) / 2, w;

    return __builtin_mul_overflow((uint64_t)d->B * d->n, d->m, &w) ||
                   __builtin_mul_overflow(w, per_key, &w) ||
                   __builtin_mul_overflow(w, (uint64_t)CODEC__COST_LOG, &w) ||
                   __builtin_add_overflow(*cost, w, cost)
               ? -1
               : 0;
}

/* The bytes the rollout over the layers takes at its peak: A_l, R_l (B
 * n^2 doubles each), a product's n^2 doubles and the [B][n][n] answer,
 * and for the layer that returns no map its mean map, output and
 * workspace, computed again (run.c's codec__layer_mean). */
static uint64_t codec__rollout_bytes(codec_request *const *layers,
                                     size_t count, const limits_config *lim)
{
    const attn_dims *d = &layers[0]->p.dims;
    uint64_t nn = (uint64_t)d->n * d->n, again = 0;
    size_t l;

    for (l = 0; l < count; l++) {
        const codec_request *one = layers[l];
        attn_params p = one->p;
        uint64_t ws = 0, b;
        if (one->p.weights != ATTN_WEIGHTS_NONE && !one->top_k)
            continue;
        p.weights = ATTN_WEIGHTS_MEAN;
        if (attn_workspace_bytes(&p, NULL, lim->workers ? lim->workers : 1,
                                 &ws) != ATTN_OK)
            return UINT64_MAX;
        b = ws + 4 * (uint64_t)d->B * d->n * (p.dims.d_out + d->n);
        if (b > again)
            again = b;
    }
    return 20 * d->B * nn + 8 * nn + again;
}

int codec__layers_budget(codec_request *const *layers, size_t count,
                         int rollout, const limits_config *lim,
                         codec_error *err)
{
    uint64_t kept = 0, peak = 0, roll, bytes;
    size_t l;

    if (lim->max_request_bytes == 0)
        return 0;
    for (l = 0; l < count; l++) {
        kept += layers[l]->result_bytes + layers[l]->copied +
                layers[l]->inputs;
        if (layers[l]->ws_bytes > peak)
            peak = layers[l]->ws_bytes;
    }
    roll = rollout ? codec__rollout_bytes(layers, count, lim) : 0;
    if (roll > peak)
        peak = roll;
    bytes = kept + peak < kept ? UINT64_MAX : kept + peak;
    if (bytes <= lim->max_request_bytes)
        return 0;
    codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                    "the first %zu layers%s need %llu bytes of working memory "
                    "together (every layer's results, input tensors and the "
                    "copies of the inputs it inherits or converts, kept "
                    "until the answer is written, and the largest "
                    "workspace%s); the limit "
                    "--max-request-bytes (ATTND_MAX_REQUEST_BYTES) is %zu",
                    count, rollout ? " and the rollout" : "",
                    (unsigned long long)bytes,
                    rollout ? " or the rollout's" : "",
                    lim->max_request_bytes);
    return -1;
}

int codec__budget(codec_request *req, const limits_config *lim,
                  codec_error *err)
{
    const attn_params *p = &req->p;
    attn_extras ex = {0};
    uint64_t cost = 0, ws = 0, bytes;
    float unused;
    attn_status rc;

    rc = attn_flops(p, &req->flops);
    if (rc == ATTN_OK)
        rc = attn_param_count(p, &req->params);
    if (rc == ATTN_OK)
        rc = attn_cost(p, &cost);
    if (rc == ATTN_OK && req->want_value_norms &&
        codec__value_norms_cost(p, &cost) != 0)
        rc = ATTN_EOVERFLOW;
    if (rc == ATTN_OK && req->analysis && codec__analysis_cost(p, &cost) != 0)
        rc = ATTN_EOVERFLOW;
    if (rc == ATTN_EOVERFLOW || (rc == ATTN_OK && cost > lim->max_flops)) {
        if (rc == ATTN_OK)
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the request needs %llu units of work (flops "
                            "over the visible pairs, plus %d a softmax "
                            "exponential and %d a query row of a head%s); "
                            "the limit --max-flops (ATTND_MAX_FLOPS) is %llu",
                            (unsigned long long)cost, ATTN_COST_EXP,
                            ATTN_COST_ROW,
                            req->want_value_norms && req->analysis
                                ? ", and value_norms' products and the "
                                  "head figures' logarithms"
                            : req->want_value_norms
                                ? ", and value_norms' products"
                            : req->analysis
                                ? ", and the head figures' logarithms"
                                : "",
                            (unsigned long long)lim->max_flops);
        else
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the request's work overflows 64 bits; the "
                            "limit --max-flops (ATTND_MAX_FLOPS) is %llu",
                            (unsigned long long)lim->max_flops);
        return -1;
    }
    if (rc != ATTN_OK) {
        codec_error_set(err, errors_from_attn(rc), NULL,
                        "the library refused the request: %s",
                        attn_strerror(rc));
        return -1;
    }
    req->cost = cost;
    if (lim->max_request_bytes == 0)
        return 0;
    /* the extras codec_run asks for: the library sizes its workspace by
     * which outputs are wanted (value_norms with w_o takes an [m][d_out]
     * buffer of its own), never writing through these pointers here */
    ex.stats = req->analysis;
    ex.top_k = req->top_k;
    ex.value_norms = req->want_value_norms ? &unused : NULL;
    /* sized for every worker of the pool: keeping each head's scores
     * for top_k or the head figures takes blk h m floats a worker */
    rc = attn_workspace_bytes(p, &ex, lim->workers ? lim->workers : 1, &ws);
    if (rc == ATTN_OK && req->flops <= CODEC_REF_FLOPS && !req->top_k &&
        !req->analysis) {
        /* the float64 reference that computes the request again when
         * float32 overflows (run.c): Q, K (twice: as it is and
         * transposed), V and the heads' concatenation of one batch
         * element, a row of scores and one of the output, in doubles;
         * twice the float32 projections, once the fast path's workspace
         * is freed */
        const attn_dims *d = &p->dims;
        uint64_t ref = 8 * ((uint64_t)d->n * d->h * (d->d_k + d->d_v) +
                            (uint64_t)d->m * d->g * (2 * d->d_k + d->d_v) +
                            d->m + d->d_out);
        if (ref > ws)
            ws = ref;
    }
    req->ws_bytes = ws;
    req->result_bytes = codec__result_bytes(req);
    /* and the inputs: those it took from the body or holds from the
     * store, and those build.c converted or expanded (weights in another
     * layout, positions and masks for every batch element, the tokens) */
    bytes = ws + req->result_bytes + req->copied + req->inputs;
    if (rc != ATTN_OK || bytes > lim->max_request_bytes) {
        codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                        "the request needs %s%llu bytes of working memory "
                        "(projections, score tiles, results, the input "
                        "tensors, and the inputs converted or expanded); "
                        "the limit --max-request-bytes "
                        "(ATTND_MAX_REQUEST_BYTES) is %zu",
                        rc != ATTN_OK ? "more than " : "",
                        (unsigned long long)bytes, lim->max_request_bytes);
        return -1;
    }
    return 0;
}

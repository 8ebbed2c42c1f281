/* attend/run.c: runs the library on a parsed request (attn_forward, or
 * attn_forward_ex for top-k rows and head analysis), keeps the results in
 * it, and frees requests. */
#include "attend/request.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double codec__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void codec__results_free(codec_request *req)
{
    free(req->output);
    free(req->weights);
    free(req->pairs);
    free(req->heads);
    free(req->similarity);
    free(req->skipped_rows);
    req->output = req->weights = req->pairs = req->similarity = NULL;
    req->heads = NULL;
    req->skipped_rows = NULL;
    req->output_elems = req->weights_elems = req->pairs_elems = 0;
}

/* 4 MFLOP: about 40 us on one core here. */
#define CODEC_INLINE_FLOPS UINT64_C(4000000)

int codec_run(codec_request *req, const attn_executor *exec, codec_error *err,
              double *compute_seconds)
{
    const attn_dims *d = &req->p.dims;
    size_t out_n = 0, w_n = 0, rows = 0, i;
    attn_extras ex;
    uint32_t *top_index = NULL;
    float *top_weight = NULL;
    double *sim = NULL, t0, t1;
    int rc, oom;

    codec__results_free(req);
    rc = attn_output_sizes(&req->p, &out_n, &w_n);
    if (rc != ATTN_OK) {
        codec_error_set(err, errors_from_attn(rc), NULL,
                        "the library refused the request: %s",
                        attn_strerror(rc));
        return -1;
    }
    memset(&ex, 0, sizeof ex);
    if (req->top_k) {
        /* k of the m weights of each row: w_n / m rows; codec_parse
         * bounded rows * 2k by --max-map-elems */
        rows = w_n / d->m;
        w_n = 0;
        ex.top_k = req->top_k;
        top_index = malloc(rows * req->top_k * sizeof *top_index);
        top_weight = malloc(rows * req->top_k * sizeof *top_weight);
        req->pairs = malloc(rows * req->top_k * 2 * sizeof(float));
        ex.top_index = top_index;
        ex.top_weight = top_weight;
    }
    if (req->analysis) {
        ex.stats = 1;
        req->heads = malloc(d->B * d->h * sizeof *req->heads);
        sim = malloc(d->B * d->h * d->h * sizeof *sim);
        req->similarity = malloc(d->B * d->h * d->h * sizeof(float));
        req->skipped_rows = malloc(d->B * sizeof *req->skipped_rows);
        ex.heads = req->heads;
        ex.similarity = sim;
        ex.skipped_rows = req->skipped_rows;
    }
    /* codec_parse bounded both counts by --max-map-elems */
    req->output = malloc(out_n * sizeof(float));
    req->weights = w_n ? malloc(w_n * sizeof(float)) : NULL;
    oom = req->output == NULL || (w_n && req->weights == NULL) ||
          (req->top_k && (top_index == NULL || top_weight == NULL ||
                          req->pairs == NULL)) ||
          (req->analysis && (req->heads == NULL || sim == NULL ||
                             req->similarity == NULL ||
                             req->skipped_rows == NULL));
    if (oom) {
        codec__results_free(req);
        free(top_index);
        free(top_weight);
        free(sim);
        codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                        "out of memory for the results (%zu + %zu values)",
                        out_n, w_n);
        return -1;
    }
    req->output_elems = out_n;
    req->weights_elems = w_n;
    /* Below this much work the hand-off to the pool (two context switches)
     * costs more than the computation: run it on the calling thread. */
    req->p.executor = req->flops < CODEC_INLINE_FLOPS ? NULL : exec;
    req->exec = exec; /* the writer formats large maps on it */
    ex.cost_seconds = &req->analysis_seconds;
    t0 = codec__now();
    if (req->top_k || req->analysis)
        rc = attn_forward_ex(&req->p, req->output, req->weights, &ex);
    else
        rc = attn_forward(&req->p, req->output, req->weights);
    t1 = codec__now();
    req->p.executor = NULL;
    if (rc == ATTN_OK && req->top_k) {
        /* interleaved (index, weight), written like any float array */
        for (i = 0; i < rows * req->top_k; i++) {
            req->pairs[2 * i] = (float)top_index[i];
            req->pairs[2 * i + 1] = top_weight[i];
        }
        req->pairs_elems = rows * req->top_k * 2;
    }
    if (rc == ATTN_OK && req->analysis)
        for (i = 0; i < d->B * d->h * d->h; i++)
            req->similarity[i] = (float)sim[i];
    free(top_index);
    free(top_weight);
    free(sim);
    req->elapsed_ms = (t1 - t0) * 1e3;
    if (compute_seconds != NULL)
        *compute_seconds = t1 - t0;
    if (rc != ATTN_OK) {
        codec_error_set(err, errors_from_attn(rc), NULL,
                        "the computation failed: %s", attn_strerror(rc));
        return -1;
    }
    /* Finite inputs can still overflow float32 in the projections (1e30 *
     * 1e30); JSON has no spelling for infinity, so say so instead. */
    for (i = 0; i < out_n; i++) {
        if (!isfinite(req->output[i])) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, NULL,
                            "output value %zu (row-major) overflows float32: "
                            "the inputs are too large in magnitude", i);
            return -1;
        }
    }
    return 0;
}

void codec_request_free(codec_request *req)
{
    if (req == NULL)
        return;
    free(req->x);
    free(req->memory);
    free(req->w_q);
    free(req->w_k);
    free(req->w_v);
    free(req->w_o);
    free(req->b_q);
    free(req->b_k);
    free(req->b_v);
    free(req->b_o);
    free(req->key_padding);
    free(req->tokens_json);
    free(req->memory_tokens_json);
    codec__results_free(req);
    free(req);
}

/* codec_run.c: runs the library on a parsed request, keeps the results in
 * it, and frees requests. */
#include "codec_int.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

static double codec__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int codec_run(codec_request *req, const attn_executor *exec, codec_error *err,
              double *compute_seconds)
{
    size_t out_n = 0, w_n = 0, i;
    double t0, t1;
    int rc;

    free(req->output);
    free(req->weights);
    req->output = req->weights = NULL;
    rc = attn_output_sizes(&req->p, &out_n, &w_n);
    if (rc != ATTN_OK) {
        codec_error_set(err, errors_from_attn(rc), NULL,
                        "the library refused the request: %s",
                        attn_strerror(rc));
        return -1;
    }
    /* codec_parse bounded both counts by --max-map-elems */
    req->output = malloc(out_n * sizeof(float));
    req->weights = w_n ? malloc(w_n * sizeof(float)) : NULL;
    if (req->output == NULL || (w_n && req->weights == NULL)) {
        free(req->output);
        free(req->weights);
        req->output = req->weights = NULL;
        codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                        "out of memory for the results (%zu + %zu values)",
                        out_n, w_n);
        return -1;
    }
    req->output_elems = out_n;
    req->weights_elems = w_n;
    req->p.executor = exec;
    t0 = codec__now();
    rc = attn_forward(&req->p, req->output, req->weights);
    t1 = codec__now();
    req->p.executor = NULL;
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
    free(req->output);
    free(req->weights);
    free(req);
}

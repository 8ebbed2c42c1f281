/* attend/run.c: runs the library on a parsed request (attn_forward, or
 * attn_forward_ex for top-k rows, head analysis, value norms and the
 * queries and keys), each layer of a `layers` request in turn with the
 * attention rollout over them, keeps the results in it, and frees
 * requests. */
#include "attend/request.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
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
    free(req->value_norms);
    free(req->q_out);
    free(req->k_out);
    free(req->rollout_map);
    req->value_norms = req->q_out = req->k_out = req->rollout_map = NULL;
    req->output = req->weights = req->pairs = req->similarity = NULL;
    req->heads = NULL;
    req->skipped_rows = NULL;
    req->output_elems = req->weights_elems = req->pairs_elems = 0;
}

/* 4 MFLOP: about 40 us on one core here. */
#define CODEC_INLINE_FLOPS UINT64_C(4000000)

/* Whether float32 rounding may move p's answer past the contract's
 * 1e-4 * (1 + |reference|), from what the fast kernels saw: the largest
 * 2-norm of a head's slice of a query row and of a key row (normmax) and
 * the largest |v| (absmax). A score's partial sums are at most scale
 * ||q_i|| ||k_j|| (Cauchy-Schwarz), so rounding moves it by about 2^-24
 * times that, and a weight by as much; a head output, a weighted mean of
 * value rows, by that much times max|v|; an output element by that times
 * the longest column of w_o. The projections' own rounding is of the
 * same order: q and k rounded to float32 from their exact values already
 * cost most of it. The norms bound the scores as tightly as d_k max|q|
 * max|k| where every score is large alike (big constant offsets in q and
 * k, as large projection biases give) and about sqrt(d_k) times tighter
 * on random data, so one threshold serves both. tools/calibrate_f32.py
 * measures the estimate against float32's actual error; CODEC_F32_ERROR
 * comes from its figures. */
static int codec__loose(const attn_params *p, const float *normmax,
                        const float *absmax)
{
    const attn_dims *d = &p->dims;
    double scale = p->scale > 0 ? (double)p->scale : 1.0 / sqrt((double)d->d_k);
    double t = ldexp(scale, -24) * (double)normmax[0] * (double)normmax[1];
    double col = 1.0, out, wts = p->weights != ATTN_WEIGHTS_NONE ? 1.0 : 0.0;

    if (p->w_o != NULL) {
        /* the columns' squares, eight columns at a time down the rows: their
         * sums stay in registers, and nothing is allocated (the run's
         * allocations are each either had or a 503) or cleared; each
         * column's sum is taken in row order, as one at a time would */
        size_t rows = d->h * d->d_v, c0, c, r;
        double top = 0.0;
        for (c0 = 0; c0 + 8 <= d->d_out; c0 += 8) {
            /* eight named sums: as an array, gcc keeps them in memory */
            const float *row = p->w_o + c0;
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            double s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0;
            for (r = 0; r < rows; r++, row += d->d_out) {
                s0 += (double)row[0] * (double)row[0];
                s1 += (double)row[1] * (double)row[1];
                s2 += (double)row[2] * (double)row[2];
                s3 += (double)row[3] * (double)row[3];
                s4 += (double)row[4] * (double)row[4];
                s5 += (double)row[5] * (double)row[5];
                s6 += (double)row[6] * (double)row[6];
                s7 += (double)row[7] * (double)row[7];
            }
            top = s0 > top ? s0 : top;
            top = s1 > top ? s1 : top;
            top = s2 > top ? s2 : top;
            top = s3 > top ? s3 : top;
            top = s4 > top ? s4 : top;
            top = s5 > top ? s5 : top;
            top = s6 > top ? s6 : top;
            top = s7 > top ? s7 : top;
        }
        for (c = c0; c < d->d_out; c++) {
            double s = 0.0;
            for (r = 0; r < rows; r++) {
                double v = p->w_o[r * d->d_out + c];
                s += v * v;
            }
            top = s > top ? s : top;
        }
        col = sqrt(top);
    }
    /* the weights, when returned, move with the scores themselves, however
     * small v is (a map of nearly equal scores is all rounding) */
    out = (double)absmax[2] * col;
    return t * (out > wts ? out : wts) > CODEC_F32_ERROR;
}

/* attn_forward_ex; the float64 reference computes the request again
 * when finite inputs overflow float32 inside the computation (x of 1e20
 * makes scores of 1e40) while the answer itself would fit, or when
 * codec__loose finds float32's rounding may miss the contract's bound:
 * the contract holds answers to a float64 reference. Only for requests
 * of at most CODEC_REF_FLOPS, and not for the head figures and top-k
 * rows, which the reference does not give. */
static attn_status codec__forward(const attn_params *p, uint64_t flops,
                                  float *output, float *weights,
                                  const attn_extras *ex)
{
    static const attn_extras none;
    attn_extras fast = ex != NULL ? *ex : none;
    float absmax[3] = {0.0f, 0.0f, 0.0f}, normmax[2] = {0.0f, 0.0f};
    int ref = flops <= CODEC_REF_FLOPS && !fast.top_k && !fast.stats;
    attn_status rc;

    fast.absmax = ref ? absmax : NULL;
    fast.normmax = ref ? normmax : NULL;
    rc = attn_forward_ex(p, output, weights, &fast);
    if (ref && (rc == ATTN_ERANGE ||
                (rc == ATTN_OK && codec__loose(p, normmax, absmax))))
        rc = attn_forward_ref_ex(p, output, weights, ex);
    return rc;
}

/* codec__run_one's message names the bound */
_Static_assert(CODEC_REF_FLOPS == UINT64_C(10000000000), "the 1e10 below");

static int codec__run_one(codec_request *req, const attn_executor *exec,
                          codec_error *err, double *compute_seconds)
{
    const attn_dims *d = &req->p.dims;
    size_t out_n = 0, w_n = 0, rows = 0, i;
    attn_extras ex;
    uint32_t *top_index = NULL;
    float *top_weight = NULL;
    double *sim = NULL, t0, t1;
    attn_status rc;
    int oom;

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
    if (req->want_value_norms) {
        req->value_norms = malloc(d->B * d->h * d->m * sizeof(float));
        ex.value_norms = req->value_norms;
    }
    if (req->want_qk) {
        req->q_out = malloc(d->B * d->h * d->n * d->d_k * sizeof(float));
        req->k_out = malloc(d->B * d->g * d->m * d->d_k * sizeof(float));
        ex.q_out = req->q_out;
        ex.k_out = req->k_out;
    }
    /* codec_parse bounded both counts by --max-map-elems */
    req->output = malloc(out_n * sizeof(float));
    req->weights = w_n ? malloc(w_n * sizeof(float)) : NULL;
    oom = req->output == NULL || (w_n && req->weights == NULL) ||
          (req->top_k && (top_index == NULL || top_weight == NULL ||
                          req->pairs == NULL)) ||
          (req->analysis && (req->heads == NULL || sim == NULL ||
                             req->similarity == NULL ||
                             req->skipped_rows == NULL)) ||
          (req->want_value_norms && req->value_norms == NULL) ||
          (req->want_qk && (req->q_out == NULL || req->k_out == NULL));
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
    rc = codec__forward(&req->p, req->flops, req->output, req->weights,
                        req->top_k || req->analysis || req->want_value_norms ||
                                req->want_qk
                            ? &ex
                            : NULL);
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
    if (rc == ATTN_ERANGE) {
        codec_error_set(
            err, ERRORS_INVALID_REQUEST, NULL,
            "the computation failed: values overflow float32 during it, %s",
            req->top_k || req->analysis
                ? "and top_k and the head figures are computed in float32 "
                  "only"
            : req->flops > CODEC_REF_FLOPS
                ? "and the request's work is over the 1e10 floating-point "
                  "operations its float64 path takes on"
                : "and the answer itself, computed in float64, is beyond "
                  "float32's range");
        return -1;
    }
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

int codec_rollout_check(const codec_request *req, codec_error *err)
{
    const attn_dims *first = &req->layers[0]->p.dims;
    size_t l;

    for (l = 0; l < req->n_layers; l++) {
        const codec_request *one = req->layers[l];
        const attn_dims *d = &one->p.dims;
        char ptr[40];
        snprintf(ptr, sizeof ptr, "/layers/%zu", l);
        if (one->p.memory != NULL) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, "/rollout",
                            "/rollout: needs self-attention in every layer, "
                            "but %s has memory (cross-attention)", ptr);
            return -1;
        }
        if (d->n != first->n || d->B != first->B) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, "/rollout",
                            "/rollout: needs every layer over the same "
                            "tokens; %s has B = %zu, n = %zu against B = %zu, "
                            "n = %zu in the first", ptr, d->B, d->n, first->B,
                            first->n);
            return -1;
        }
    }
    return 0;
}

/* One layer's attention averaged over heads, A_l [B][n][n], in float64:
 * from the mean map, or the per-head maps, or computed again by the
 * reference when the layer returned no weights (or only top-k rows). */
static int codec__layer_mean(const codec_request *one, double *a)
{
    const attn_dims *d = &one->p.dims;
    size_t nn = d->n * d->n, b, i, k;
    float *w = NULL;
    const float *src = one->weights;
    attn_weights kind = one->p.weights;

    if (src == NULL) {
        attn_params p = one->p;
        float *out = malloc(d->B * d->n * d->d_out * sizeof(float));
        p.weights = ATTN_WEIGHTS_MEAN;
        w = malloc(d->B * nn * sizeof(float));
        if (out == NULL || w == NULL ||
            codec__forward(&p, one->flops, out, w, NULL) != ATTN_OK) {
            free(out);
            free(w);
            return -1;
        }
        free(out);
        src = w;
        kind = ATTN_WEIGHTS_MEAN;
    }
    for (b = 0; b < d->B; b++)
        for (k = 0; k < nn; k++) {
            double acc = 0;
            if (kind == ATTN_WEIGHTS_MEAN)
                acc = src[b * nn + k];
            else {
                for (i = 0; i < d->h; i++)
                    acc += src[(b * d->h + i) * nn + k];
                acc /= (double)d->h;
            }
            a[b * nn + k] = acc;
        }
    free(w);
    return 0;
}

/* Attention rollout (Abnar and Zuidema 2020): R_1 = Â_1, R_l = Â_l R_(l-1)
 * with Â_l = (A_l + I), each row divided by its sum. */
static int codec__rollout(codec_request *req)
{
    const attn_dims *d = &req->layers[0]->p.dims;
    size_t n = d->n, nn = n * n, B = d->B, l, b, r, c, k;
    double *a = malloc(B * nn * sizeof(double));
    double *acc = malloc(B * nn * sizeof(double));
    double *tmp = malloc(nn * sizeof(double));
    int rc = -1;

    req->rollout_map = malloc(B * nn * sizeof(float));
    if (a == NULL || acc == NULL || tmp == NULL || req->rollout_map == NULL)
        goto out;
    for (l = 0; l < req->n_layers; l++) {
        if (codec__layer_mean(req->layers[l], a) != 0)
            goto out;
        for (b = 0; b < B; b++) {
            double *al = a + b * nn, *rb = acc + b * nn;
            for (r = 0; r < n; r++) {
                double sum = 0;
                al[r * n + r] += 1.0;
                for (c = 0; c < n; c++)
                    sum += al[r * n + c];
                for (c = 0; c < n; c++)
                    al[r * n + c] /= sum;
            }
            if (l == 0) {
                memcpy(rb, al, nn * sizeof(double));
                continue;
            }
            /* R_l = Â_l R_(l-1): an n^3 product, which the work limit
             * counts (parse.c), on the BLAS */
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n,
                        (int)n, (int)n, 1.0, al, (int)n, rb, (int)n, 0.0,
                        tmp, (int)n);
            memcpy(rb, tmp, nn * sizeof(double));
        }
    }
    for (k = 0; k < B * nn; k++)
        req->rollout_map[k] = (float)acc[k];
    rc = 0;
out:
    free(a);
    free(acc);
    free(tmp);
    return rc;
}

int codec_run(codec_request *req, const attn_executor *exec, codec_error *err,
              double *compute_seconds)
{
    double total = 0, one;
    size_t l;

    if (req->n_layers == 0)
        return codec__run_one(req, exec, err, compute_seconds) != 0
                   ? -1 : codec_store_pending(req, err);
    req->elapsed_ms = 0;
    req->params = req->flops = 0;
    for (l = 0; l < req->n_layers; l++) {
        if (codec__run_one(req->layers[l], exec, err, &one) != 0) {
            char field[sizeof err->field];
            /* the failing layer, named in the error */
            snprintf(field, sizeof field, "/layers/%zu", l);
            if (err->field[0] == '\0')
                snprintf(err->field, sizeof err->field, "%s", field);
            return -1;
        }
        total += one;
        req->elapsed_ms += req->layers[l]->elapsed_ms;
        req->params += req->layers[l]->params;
        req->flops += req->layers[l]->flops;
    }
    req->exec = exec;
    if (req->rollout) {
        double t0 = codec__now();
        if (codec__rollout(req) != 0) {
            codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                            "out of memory for the attention rollout");
            return -1;
        }
        total += codec__now() - t0;
    }
    /* every layer computed: only now does `store: true` store */
    if (codec_store_pending(req, err) != 0)
        return -1;
    if (compute_seconds != NULL)
        *compute_seconds = total;
    return 0;
}

uint64_t codec_request_cost(const codec_request *req)
{
    uint64_t sum = req->cost;
    size_t l;

    for (l = 0; l < req->n_layers; l++)
        sum += req->layers[l]->cost;
    return sum;
}

void codec_request_free(codec_request *req)
{
    size_t i;

    if (req == NULL)
        return;
    for (i = 0; i < req->n_owned; i++)
        free(req->owned[i]);
    for (i = 0; i < req->n_holds; i++)
        req->refs.release(req->refs.ctx, req->holds[i]);
    for (i = 0; i < req->n_layers; i++)
        codec_request_free(req->layers[i]);
    free(req->layers);
    codec_pending_free(req->pending);
    free(req->refs_json);
    free(req->tokens_json);
    free(req->memory_tokens_json);
    codec__results_free(req);
    free(req);
}

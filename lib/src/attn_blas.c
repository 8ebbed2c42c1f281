/* attn_blas.c: the fast kernel's phases. Projections and both attention
 * products go through cblas_sgemm; the score rules, the mask and the
 * softmax are fused in one pass over each row of scores, over the keys the
 * tile's rows can see (attn_visible.c). Outputs only, on a CPU with
 * AVX-512F, the attention itself is attn_flash.c's fused kernel instead
 * (d_k <= 256, d_v <= 128; on an executor, or with OpenBLAS on one
 * thread). The call's planning is attn_job.c's.
 * The only file that includes cblas.h. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "attn_coretype.h"
#include "attn_job.h"
#include "attn_qk.h"

/* out[rows][cols] = in[rows][in_w] W[in_w][cols] + bias */
static void attn__project(float *out, const float *in, const float *w,
                          const float *bias, size_t rows, size_t in_w,
                          size_t cols)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows,
                (int)cols, (int)in_w, 1.0f, in, (int)in_w, w, (int)cols, 0.0f,
                out, (int)cols);
    if (bias != NULL)
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                out[r * cols + c] += bias[c];
}

/* The larger of m and the largest |a[i]| (NaN is left to the softmax).
 * Eight lanes, so the compiler makes it one vector max a step. */
static float attn__absmax(const float *a, size_t len, float m)
{
    float lane[8] = {0};
    size_t i = 0;

    for (; i + 8 <= len; i += 8)
        for (size_t k = 0; k < 8; k++) {
            float v = fabsf(a[i + k]);
            lane[k] = v > lane[k] ? v : lane[k];
        }
    for (; i < len; i++) {
        float v = fabsf(a[i]);
        m = v > m ? v : m;
    }
    for (size_t k = 0; k < 8; k++)
        m = lane[k] > m ? lane[k] : m;
    return m;
}

/* The larger of m and the largest 2-norm of the rows' d_k-wide head
 * slices (rows * heads of them, contiguous). Summed in double: a slice of
 * values near 1e19 has a norm that fits float32 while its squares do not. */
static float attn__normmax(const float *a, size_t slices, size_t d_k, float m)
{
    double top = 0.0;

    for (size_t s = 0; s < slices; s++) {
        const float *row = a + s * d_k;
        double sum = 0.0;
        for (size_t c = 0; c < d_k; c++)
            sum += (double)row[c] * (double)row[c];
        top = sum > top ? sum : top;
    }
    top = sqrt(top);
    return top > (double)m ? (float)top : m;
}

/* out[c] = the largest of per[w * n + c] over the workers w (each worker's
 * n figures, all >= 0). */
static void attn__max_over_workers(float *out, const float *per,
                                   size_t workers, size_t n)
{
    for (size_t c = 0; c < n; c++) {
        out[c] = 0.0f;
        for (size_t w = 0; w < workers; w++)
            out[c] = per[w * n + c] > out[c] ? per[w * n + c] : out[c];
    }
}

/* Phase 1, task t: one chunk of rows of Q, K or V. */
static void attn__proj_task(void *arg, size_t t, size_t worker)
{
    const attn__job *j = arg;
    const attn_params *p = j->p;
    const attn_dims *d = j->d;
    const float *mem = attn__memory(p), *val = attn__value_source(p);
    size_t r0, rows, vw = attn__value_width(p);
    double *trig = j->trig + worker * d->d_k;

    if (t < j->q_chunks) {
        r0 = t * j->chunk;
        rows = j->q_rows - r0 < j->chunk ? j->q_rows - r0 : j->chunk;
        attn__project(j->q + r0 * d->h * d->d_k, p->x + r0 * d->d_model,
                      p->w_q, p->b_q, rows, d->d_model, d->h * d->d_k);
        if (attn__qk_active(p))
            attn__qk_prepare(&j->vis, j->q, r0, rows, 0, trig);
        j->absmax[3 * worker] =
            attn__absmax(j->q + r0 * d->h * d->d_k, rows * d->h * d->d_k,
                         j->absmax[3 * worker]);
        if (j->ex->normmax != NULL)
            j->normmax[2 * worker] =
                attn__normmax(j->q + r0 * d->h * d->d_k, rows * d->h,
                              d->d_k, j->normmax[2 * worker]);
        return;
    }
    t -= j->q_chunks;
    r0 = (t % j->kv_chunks) * j->chunk;
    rows = j->kv_rows - r0 < j->chunk ? j->kv_rows - r0 : j->chunk;
    if (t < j->kv_chunks) {
        attn__project(j->k + r0 * d->g * d->d_k, mem + r0 * d->d_mem, p->w_k,
                      p->b_k, rows, d->d_mem, d->g * d->d_k);
        if (attn__qk_active(p))
            attn__qk_prepare(&j->vis, j->k, r0, rows, 1, trig);
        j->absmax[3 * worker + 1] =
            attn__absmax(j->k + r0 * d->g * d->d_k, rows * d->g * d->d_k,
                         j->absmax[3 * worker + 1]);
        if (j->ex->normmax != NULL)
            j->normmax[2 * worker + 1] =
                attn__normmax(j->k + r0 * d->g * d->d_k, rows * d->g,
                              d->d_k, j->normmax[2 * worker + 1]);
    } else {
        attn__project(j->v + r0 * d->g * d->d_v, val + r0 * vw, p->w_v,
                      p->b_v, rows, vw, d->g * d->d_v);
        j->absmax[3 * worker + 2] =
            attn__absmax(j->v + r0 * d->g * d->d_v, rows * d->g * d->d_v,
                         j->absmax[3 * worker + 2]);
    }
}

/* Phase 2, one head of one tile: query rows q0 .. q0+rows of batch
 * element b, query head i, against keys k0 .. k1 (the tile's range:
 * attn__tile_range).
 *   S = scale Q_i K_j^T      [rows][k1-k0]   (sgemm, scale as alpha)
 *   S = softcap, bias, ALiBi (attn__vis_adjust)
 *   A = masked softmax(S)    in place, or beside S on the lean path
 *   O = A V_j                [rows][d_v]     (sgemm into the concat)
 * Keys outside [k0, k1) are hidden from every row of the tile, so the
 * products skip them. Query head i reads key/value head i / (h/g) in
 * place: K and V are never copied per query head. Returns the head's rows
 * of A (normalised when normalize), k1 - k0 wide. */
static const float *attn__attend_head(const attn__job *j, size_t b, size_t q0,
                                      size_t rows, size_t k0, size_t k1,
                                      size_t i, size_t worker, int normalize)
{
    const attn_dims *d = j->d;
    const attn__vis *vis = &j->vis;
    size_t hdk = d->h * d->d_k, gdk = d->g * d->d_k;
    size_t gdv = d->g * d->d_v, hdv = d->h * d->d_v;
    size_t kv = i / (d->h / d->g), m_eff = k1 - k0, lds = m_eff;
    float inv_h = 1.0f / (float)d->h;
    float *inv = j->inv + worker * j->blk;
    float *s, *a;
    int onto_zeros;

    if (j->dense_per_head) {
        s = j->weights + ((b * d->h + i) * d->n + q0) * d->m + k0;
        lds = d->m;
    } else if (j->keep_heads) {
        s = j->scratch + (worker * d->h + i) * j->blk * d->m;
    } else {
        s = j->scratch + worker * j->blk * d->m;
    }
    /* The lean path's softmax zeroes the scores it reads, so once a
     * worker's buffer has been used that far the product adds onto zeros
     * with beta = 1 and OpenBLAS skips its zeroing pass over rows x m_eff
     * floats. */
    onto_zeros = j->lean && rows * lds <= j->zeroed[worker];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows,
                (int)m_eff, (int)d->d_k, j->scale,
                j->q + (b * d->n + q0) * hdk + i * d->d_k, (int)hdk,
                j->k + (b * d->m + k0) * gdk + kv * d->d_k, (int)gdk,
                onto_zeros ? 1.0f : 0.0f, s, (int)lds);
    a = j->lean ? j->probs + worker * j->blk * d->m : s;
    for (size_t r = 0; r < rows; r++) {
        size_t lo, hi, off = 0;
        const unsigned char *hide = NULL;
        int rc;

        attn__vis_range(vis, b, q0 + r, &lo, &hi);
        hi = hi < k0 ? k0 : hi > k1 ? k1 : hi;
        attn__vis_adjust(vis, b, i, q0 + r, k0, s + r * lds, hi - k0, 1.0f);
        if (vis->hide_rows && !vis->pad_only) {
            unsigned char *h = j->hide + worker * d->m;
            attn__vis_row(vis, b, i, q0 + r, k0, hi, h);
            hide = h;
        } else {
            /* the range alone, or the range and the key padding, which
             * the softmax reads as the row's hidden flags in place */
            if (vis->pad_only)
                hide = j->p->key_padding + b * d->m + k0;
            /* the row's keys are [lo, hi): the ones before lo get weight 0
             * here and the softmax takes the row from lo, as it hides those
             * past hi; given them as -inf scores, it would read a row with
             * no key left in [lo, hi) as scores that overflowed */
            if (lo > k0) {
                off = (lo < hi ? lo : hi) - k0;
                memset(a + r * lds, 0, off * sizeof(float));
                if (a != s)
                    memset(s + r * lds, 0, off * sizeof(float));
                if (hide != NULL)
                    hide += off;
            }
        }
        if (j->lean)
            rc = attn__softmax_into(s + r * lds + off, a + r * lds + off,
                                    m_eff - off, hi - k0 - off, hide, &inv[r]);
        else
            rc = attn__softmax_row(s + r * lds + off, m_eff - off,
                                   hi - k0 - off, hide, normalize, &inv[r]);
        if (rc < 0)
            j->status[worker] = ATTN_ERANGE;
        if (j->dense_per_head) {
            float *w = s - k0 + r * lds;
            memset(w, 0, k0 * sizeof(float));
            memset(w + k1, 0, (d->m - k1) * sizeof(float));
        }
    }
    if (j->lean && rows * lds > j->zeroed[worker])
        j->zeroed[worker] = rows * lds;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows,
                (int)d->d_v, (int)m_eff, 1.0f, a, (int)lds,
                j->v + (b * d->m + k0) * gdv + kv * d->d_v, (int)gdv, 0.0f,
                j->cat + (b * d->n + q0) * hdv + i * d->d_v, (int)hdv);
    if (!normalize)
        for (size_t r = 0; r < rows; r++) {
            float *o = j->cat + (b * d->n + q0 + r) * hdv + i * d->d_v;
            for (size_t c = 0; c < d->d_v; c++)
                o[c] *= inv[r];
        }
    if (j->dense_mean) {
        float *w = j->weights + (b * d->n + q0) * d->m;
        for (size_t r = 0; r < rows; r++) {
            float *wr = w + r * d->m;
            const float *sr = a + r * lds;
            float f = normalize ? inv_h : inv_h * inv[r];
            if (i == 0) {
                memset(wr, 0, k0 * sizeof(float));
                for (size_t c = 0; c < m_eff; c++)
                    wr[k0 + c] = sr[c] * f;
                memset(wr + k1, 0, (d->m - k1) * sizeof(float));
            } else {
                for (size_t c = 0; c < m_eff; c++)
                    wr[k0 + c] += sr[c] * f;
            }
        }
    }
    return a;
}

/* The keys a tile's rows can see, [*k0, *k1): the union of its rows'
 * ranges (attn__vis_range), never empty so the products keep a shape
 * (a tile that sees nothing computes one key and hides it). from_zero:
 * the range starts at key 0 (the head figures and top-k index rows from
 * there). */
static void attn__tile_range(const attn__job *j, size_t b, size_t q0,
                             size_t rows, int from_zero, size_t *k0,
                             size_t *k1)
{
    size_t lo = j->d->m, hi = 0;

    for (size_t r = 0; r < rows; r++) {
        size_t l, h;
        attn__vis_range(&j->vis, b, q0 + r, &l, &h);
        if (l < h) {
            lo = l < lo ? l : lo;
            hi = h > hi ? h : hi;
        }
    }
    if (lo >= hi) {
        lo = 0;
        hi = 1;
    }
    *k0 = from_zero ? 0 : lo;
    *k1 = hi;
}

/* Phase 2 when no work spans heads (outputs only, or per-head weights
 * without figures or top-k): task t is one head of one tile, head-major
 * within a batch element. A short request then still has a task per
 * worker without cutting its tiles short (n = 128, d_model = 256, 8 heads,
 * per-head weights, 2 workers: 0.74-0.80 ms before, 0.65-0.72 ms after),
 * and consecutive tasks share one head's K and V. The fused kernel, when
 * it takes the call, works in the same tasks. */
static void attn__head_task(void *arg, size_t t, size_t worker)
{
    const attn__job *j = arg;
    const attn_dims *d = j->d;
    size_t per_b = d->h * j->nblocks;
    size_t b = t / per_b, i = t % per_b / j->nblocks;
    size_t q0 = t % j->nblocks * j->blk;
    size_t rows = d->n - q0 < j->blk ? d->n - q0 : j->blk;
    size_t k0, k1;

    if (j->flash_floats) {
        if (attn__flash_tile(&j->fa, b, i, q0, rows,
                             j->flash + worker * j->flash_floats) != ATTN_OK)
            j->status[worker] = ATTN_ERANGE;
        return;
    }
    attn__tile_range(j, b, q0, rows, 0, &k0, &k1);
    attn__attend_head(j, b, q0, rows, k0, k1, i, worker, j->dense_per_head);
}

/* Between phases 1 and 2 for the fused kernel, task t: one block of keys
 * of one key/value head, K transposed and V made contiguous for the
 * tiles. */
static void attn__flash_pack_task(void *arg, size_t t, size_t worker)
{
    const attn__job *j = arg;
    size_t blocks = attn__ceil_div(j->d->m, ATTN__FLASH_KEYS);

    (void)worker;
    attn__flash_pack(&j->fa, t / blocks / j->d->g, t / blocks % j->d->g,
                     t % blocks * ATTN__FLASH_KEYS);
}

/* Phase 2 otherwise, task t: every head of one tile, in order (the mean
 * accumulates head by head; figures and top-k read all heads' rows). */
static void attn__attend_task(void *arg, size_t t, size_t worker)
{
    const attn__job *j = arg;
    const attn_params *p = j->p;
    const attn_dims *d = j->d;
    const attn_extras *ex = j->ex;
    size_t b = t / j->nblocks, q0 = (t % j->nblocks) * j->blk;
    size_t rows = d->n - q0 < j->blk ? d->n - q0 : j->blk;
    size_t k0, m_eff;
    float inv_h = 1.0f / (float)d->h;
    const float **hrow = j->hrow + worker * d->h;
    /* Returned per-head weights, head figures and top-k need normalised
     * rows; otherwise the rows stay exp(s - max) and the 1/sum goes onto
     * the d_v outputs of A V (and the mean's accumulation), a pass over m
     * per row saved. */
    int normalize = j->dense_per_head || j->keep_heads;
    struct timespec t0, t1;

    attn__tile_range(j, b, q0, rows, 1, &k0, &m_eff);
    for (size_t i = 0; i < d->h; i++)
        hrow[i] = attn__attend_head(j, b, q0, rows, k0, m_eff, i, worker,
                                    normalize);
    if (!j->keep_heads)
        return;
    /* every head's rows of the tile are at hand: figures and top-k */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t r = 0; r < rows; r++) {
        size_t lds = j->dense_per_head ? d->m : m_eff, k = ex->top_k;
        const float *cur[ATTN__MAX_STACK_HEADS];
        const float **rp =
            d->h <= ATTN__MAX_STACK_HEADS ? cur : j->hrow_rows + worker * d->h;

        for (size_t i = 0; i < d->h; i++)
            rp[i] = hrow[i] + r * lds;
        if (ex->stats) {
            size_t vis_st[ATTN__MAX_STACK_HEADS];
            size_t *visible = d->h <= ATTN__MAX_STACK_HEADS
                                  ? vis_st
                                  : j->visible + worker * d->h;
            for (size_t i = 0; i < d->h; i++)
                visible[i] = attn__vis_count(&j->vis, b, i, q0 + r);
            attn__acc_row(j->acc, worker, b, q0 + r, rp, m_eff, visible);
        }
        if (k == 0)
            continue;
        if (p->weights == ATTN_WEIGHTS_PER_HEAD) {
            for (size_t i = 0; i < d->h; i++) {
                size_t at = ((b * d->h + i) * d->n + q0 + r) * k;
                attn__top_k(rp[i], m_eff, d->m, k, ex->top_index + at,
                            ex->top_weight + at);
            }
        } else {
            float *mean = j->meanrow + worker * d->m;
            size_t at = (b * d->n + q0 + r) * k;
            for (size_t c = 0; c < m_eff; c++) {
                float acc = 0.0f;
                for (size_t i = 0; i < d->h; i++)
                    acc += rp[i][c];
                mean[c] = acc * inv_h;
            }
            attn__top_k(mean, m_eff, d->m, k, ex->top_index + at,
                        ex->top_weight + at);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    j->cost[worker] += (double)(t1.tv_sec - t0.tv_sec) +
                       1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

/* Phase 3, task t: one chunk of output rows: the output projection (or the
 * bias alone without W_O), and the overflow check of the result. */
static void attn__out_task(void *arg, size_t t, size_t worker)
{
    const attn__job *j = arg;
    const attn_params *p = j->p;
    const attn_dims *d = j->d;
    size_t r0 = t * j->chunk;
    size_t rows = j->q_rows - r0 < j->chunk ? j->q_rows - r0 : j->chunk;
    float *out = j->output + r0 * d->d_out;

    if (p->w_o != NULL)
        attn__project(out, j->cat + r0 * d->h * d->d_v, p->w_o, p->b_o, rows,
                      d->h * d->d_v, d->d_out);
    else if (p->b_o != NULL)
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < d->d_out; c++)
                out[r * d->d_out + c] += p->b_o[c];
    for (size_t e = 0; e < rows * d->d_out; e++)
        if (!isfinite(out[e])) {
            j->status[worker] = ATTN_ERANGE;
            break;
        }
}

/* The extras read straight from the projections: q_out [B][h][n][d_k],
 * k_out [B][g][m][d_k] (after the norm and rotation, unscaled) and
 * value_norms [B][h][m], ||V_j[b] W_o^(i)|| (one sgemm a head into a
 * [m][d_out] buffer of its own), or ||V_j[b]|| without W_O. Returns
 * ATTN_OK, ATTN_ENOMEM, or ATTN_ERANGE for a value norm beyond float32
 * (V W_o^(i) can overflow where the output, weighted, does not). */
static attn_status attn__extras_qkv(const attn__job *j)
{
    const attn_params *p = j->p;
    const attn_dims *d = j->d;
    const attn_extras *ex = j->ex;
    size_t hdk = d->h * d->d_k, gdk = d->g * d->d_k, gdv = d->g * d->d_v;
    size_t group = d->h / d->g;
    float *tmp = NULL;
    attn_status rc = ATTN_OK;

    for (size_t b = 0; ex->q_out != NULL && b < d->B; b++)
        for (size_t i = 0; i < d->h; i++)
            for (size_t a = 0; a < d->n; a++)
                memcpy(ex->q_out + ((b * d->h + i) * d->n + a) * d->d_k,
                       j->q + (b * d->n + a) * hdk + i * d->d_k,
                       d->d_k * sizeof(float));
    for (size_t b = 0; ex->k_out != NULL && b < d->B; b++)
        for (size_t kv = 0; kv < d->g; kv++)
            for (size_t c = 0; c < d->m; c++)
                memcpy(ex->k_out + ((b * d->g + kv) * d->m + c) * d->d_k,
                       j->k + (b * d->m + c) * gdk + kv * d->d_k,
                       d->d_k * sizeof(float));
    if (ex->value_norms == NULL)
        return ATTN_OK;
    if (p->w_o != NULL) {
        tmp = attn__alloc(p, d->m * d->d_out, sizeof(float));
        if (tmp == NULL)
            return ATTN_ENOMEM;
    }
    for (size_t b = 0; b < d->B; b++)
        for (size_t i = 0; i < d->h; i++) {
            const float *vj = j->v + b * d->m * gdv + (i / group) * d->d_v;
            float *out = ex->value_norms + (b * d->h + i) * d->m;
            const float *y = vj;
            size_t w = d->d_v, ld = gdv;
            if (tmp != NULL) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                            (int)d->m, (int)d->d_out, (int)d->d_v, 1.0f, vj,
                            (int)gdv, p->w_o + i * d->d_v * d->d_out,
                            (int)d->d_out, 0.0f, tmp, (int)d->d_out);
                y = tmp;
                w = ld = d->d_out;
            }
            for (size_t c = 0; c < d->m; c++) {
                double ss = 0.0;
                for (size_t t = 0; t < w; t++)
                    ss += (double)y[c * ld + t] * (double)y[c * ld + t];
                out[c] = (float)sqrt(ss);
                if (!isfinite(out[c]))
                    rc = ATTN_ERANGE;
            }
        }
    attn__free(p, tmp);
    return rc;
}

static void attn__run(const attn_params *p, size_t count,
                      void (*fn)(void *, size_t, size_t), attn__job *job)
{
    if (p->executor != NULL) {
        p->executor->run(p->executor->ctx, count, fn, job);
        return;
    }
    for (size_t t = 0; t < count; t++)
        fn(job, t, 0);
}

attn_status attn_forward(const attn_params *p, float *output, float *weights)
{
    return attn_forward_ex(p, output, weights, NULL);
}

/* Whether every score fits float32 whatever the order of its sums: a
 * score's partial sums are at most d_k max|q| max|k| (times the scale
 * when it is above 1). A score that overflowed to -inf would read as a
 * hidden key, its weight 0, where the float64 score may be moderate (the
 * products cancel); +inf and NaN the softmax reports itself. When the
 * bound is not below FLT_MAX (inputs near 1e19, or Q or K overflowed
 * already), ATTN_ERANGE: the caller may compute the request in float64. */
static attn_status attn__scores_fit(const attn__job *j, size_t workers)
{
    float qmax = 0.0f, kmax = 0.0f;
    double bound;

    for (size_t w = 0; w < workers; w++) {
        qmax = j->absmax[3 * w] > qmax ? j->absmax[3 * w] : qmax;
        kmax = j->absmax[3 * w + 1] > kmax ? j->absmax[3 * w + 1] : kmax;
    }
    bound = (double)qmax * (double)kmax * (double)j->d->d_k *
            (j->scale > 1.0f ? (double)j->scale : 1.0);
    return bound < (double)FLT_MAX ? ATTN_OK : ATTN_ERANGE;
}

/* Step 4: the phases. Projections (with the norm and rotation of Q and
 * K), the extras read from them, the fused kernel's packing, the
 * attention tiles, the output projection. Returns the first failure. */
static attn_status attn__job_run(attn__job *job, size_t workers)
{
    const attn_params *p = job->p;
    const attn_dims *d = job->d;
    attn_status rc;

    attn__run(p, job->q_chunks + 2 * job->kv_chunks, attn__proj_task, job);
    rc = attn__scores_fit(job, workers);
    if (rc == ATTN_OK)
        rc = attn__extras_qkv(job);
    if (rc != ATTN_OK)
        return rc;
    if (job->flash_floats) {
        job->fa.q = job->q;
        job->fa.k = job->k;
        job->fa.v = job->v;
        job->fa.cat = job->cat;
        job->fa.scale = job->scale;
        attn__run(p, d->B * d->g * attn__ceil_div(d->m, ATTN__FLASH_KEYS),
                  attn__flash_pack_task, job);
    }
    if (job->head_tasks)
        attn__run(p, d->B * d->h * job->nblocks, attn__head_task, job);
    else
        attn__run(p, d->B * job->nblocks, attn__attend_task, job);
    attn__run(p, job->q_chunks, attn__out_task, job);
    for (size_t w = 0; w < workers; w++)
        if (job->status[w] != ATTN_OK)
            rc = job->status[w];
    return rc;
}

/* What attn_forward_ex refuses before any work: inconsistent outputs or
 * extras, and sizes cblas's int arguments cannot take. */
static attn_status attn__call_check(const attn_params *p, const float *output,
                                    const float *weights, const attn_extras *ex)
{
    const attn_dims *d = &p->dims;
    attn_status rc;

    if (output == NULL ||
        (p->weights != ATTN_WEIGHTS_NONE && weights == NULL && !ex->top_k))
        return ATTN_EINVAL;
    rc = attn__extras_check(p, weights, ex);
    if (rc != ATTN_OK)
        return rc;
    /* attn_check bounded the products by size_t */
    if (d->B * d->n > INT32_MAX || d->B * d->m > INT32_MAX ||
        d->h * d->d_k > INT32_MAX || d->h * d->d_v > INT32_MAX ||
        d->d_model > INT32_MAX || d->d_mem > INT32_MAX ||
        d->d_out > INT32_MAX || d->m > INT32_MAX ||
        attn__value_width(p) > INT32_MAX)
        return ATTN_EOVERFLOW;
    return ATTN_OK;
}

/* The fused kernel has no threads of its own: without an executor it
 * would run on the calling thread alone, where the sgemm calls are spread
 * over OpenBLAS's threads. */
static int attn__flash_ok(const attn_params *p)
{
    return p->executor != NULL || openblas_get_num_threads() == 1;
}

attn_status attn_forward_ex(const attn_params *p, float *output, float *weights,
                            const attn_extras *ex)
{
    static const attn_extras no_extras;
    attn__job job;
    attn__acc acc;
    size_t workers;
    attn_status rc = attn_check(p);

    if (rc != ATTN_OK)
        return rc;
    if (ex == NULL)
        ex = &no_extras;
    rc = attn__call_check(p, output, weights, ex);
    if (rc != ATTN_OK)
        return rc;
    workers = p->executor != NULL ? p->executor->workers : 1;
    memset(&acc, 0, sizeof(acc));
    attn__job_init(&job, p, ex, workers, attn__flash_ok(p));
    job.output = output;
    job.weights = p->weights != ATTN_WEIGHTS_NONE ? weights : NULL;
    rc = attn__job_alloc(&job, &acc, workers);
    if (rc == ATTN_OK)
        rc = attn__job_run(&job, workers);
    if (rc == ATTN_OK && ex->stats)
        attn__acc_finish(&acc, ex);
    if (rc == ATTN_OK && ex->cost_seconds != NULL) {
        *ex->cost_seconds = 0.0;
        for (size_t w = 0; w < workers; w++)
            *ex->cost_seconds += job.cost[w];
    }
    if (rc == ATTN_OK && ex->absmax != NULL)
        attn__max_over_workers(ex->absmax, job.absmax, workers, 3);
    if (rc == ATTN_OK && ex->normmax != NULL)
        attn__max_over_workers(ex->normmax, job.normmax, workers, 2);
    attn__job_free(&job, &acc);
    return rc;
}

attn_status attn_workspace_bytes(const attn_params *p, const attn_extras *ex,
                                 size_t workers, uint64_t *bytes)
{
    static const attn_extras no_extras;
    attn__job job;
    attn_status rc = attn_check(p);

    if (rc != ATTN_OK)
        return rc;
    if (bytes == NULL || workers == 0)
        return ATTN_EINVAL;
    attn__job_init(&job, p, ex != NULL ? ex : &no_extras, workers,
                   attn__flash_ok(p));
    return attn__job_bytes(&job, workers, bytes);
}

int attn_blas_set_threads(int n)
{
    if (n >= 1)
        openblas_set_num_threads(n);
    return openblas_get_num_threads();
}

const char *attn_blas_config(void)
{
    return openblas_get_config();
}

const char *attn_blas_coretype_hint(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const char *core = openblas_get_corename();
    static const char *const slow[] = {"prescott", "core2",   "penryn",
                                       "dunnington", "nehalem", "sandybridge",
                                       "unknown"};
    int fallback = core == NULL;

    for (size_t i = 0; !fallback && i < sizeof(slow) / sizeof(slow[0]); i++)
        fallback = strcasecmp(core, slow[i]) == 0;
    if (!fallback)
        return NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

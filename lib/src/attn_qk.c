/* attn_qk.c: steps 2 and 3 of the score rules on the projected queries and
 * keys, once per call (O((n + m) d_k) a head), never per tile: the RMS
 * norm (per head or over the whole row) and the rotary embedding. */
#include <math.h>

#include "attn_qk.h"

/* RMS norm of each group of len entries of x [width], times weight. */
static void attn__qk_rms(float *x, size_t width, size_t len,
                         const float *weight, double eps)
{
    for (size_t g0 = 0; g0 < width; g0 += len) {
        float *y = x + g0;
        double ms = 0.0;
        float inv;
        for (size_t t = 0; t < len; t++)
            ms += (double)y[t] * (double)y[t];
        inv = (float)(1.0 / sqrt(ms / (double)len + eps));
        for (size_t t = 0; t < len; t++)
            y[t] = y[t] * inv * weight[t];
    }
}

void attn__qk_prepare(const attn__vis *v, float *x, size_t r0, size_t rows,
                      int keys, double *trig)
{
    const attn_params *p = v->p;
    const attn_dims *d = &p->dims;
    const attn_qk_norm *qn = &p->qk_norm;
    const attn_rope *rp = &p->rope;
    size_t heads = keys ? d->g : d->h, width = heads * d->d_k;
    size_t seq = keys ? d->m : d->n, half = rp->dim / 2;
    double eps = qn->eps > 0.0 ? qn->eps : 1e-6;
    double theta = rp->theta > 0.0 ? rp->theta : 10000.0;
    double f = rp->attention_factor > 0.0 ? rp->attention_factor : 1.0;
    const float *w = keys ? qn->k_weight : qn->q_weight;

    for (size_t r = r0; r < r0 + rows; r++) {
        float *row = x + r * width;
        size_t b = r / seq, a = r % seq;
        int64_t t;

        if (qn->over == ATTN_QK_NORM_HEAD)
            attn__qk_rms(row, width, d->d_k, w, eps);
        else if (qn->over == ATTN_QK_NORM_ALL)
            attn__qk_rms(row, width, width, w, eps);
        if (half == 0)
            continue;
        /* one angle per pair, shared by every head of the row */
        t = keys ? attn__vis_kpos(v, b, a) : attn__vis_qpos(v, b, a);
        for (size_t q = 0; q < half; q++) {
            double freq = rp->inv_freq != NULL
                              ? (double)rp->inv_freq[q]
                              : pow(theta, -2.0 * (double)q / (double)rp->dim);
            double ang = (double)t * freq;
            trig[2 * q] = f * cos(ang);
            trig[2 * q + 1] = f * sin(ang);
        }
        for (size_t hd = 0; hd < heads; hd++) {
            float *y = row + hd * d->d_k;
            for (size_t q = 0; q < half; q++) {
                size_t iu = rp->style == ATTN_ROPE_HALF ? q : 2 * q;
                size_t iw = rp->style == ATTN_ROPE_HALF ? q + half : 2 * q + 1;
                double u = y[iu], wv = y[iw];
                y[iu] = (float)(u * trig[2 * q] - wv * trig[2 * q + 1]);
                y[iw] = (float)(u * trig[2 * q + 1] + wv * trig[2 * q]);
            }
        }
    }
}

int attn__qk_active(const attn_params *p)
{
    return p->qk_norm.over != ATTN_QK_NORM_NONE || p->rope.dim != 0;
}

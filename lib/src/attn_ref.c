/* attn_ref.c: the naive reference kernel, float64 throughout. Obvious on
 * purpose: the tests trust it, and it shares nothing with the fast kernels
 * but the validation. Each score rule of attn.h is one step below, in the
 * order the contract gives them. Its products are sums in the plain order,
 * taken a row of results at a time (attn__ref_axpy) so that the compiler
 * makes vector operations of them: the service computes whole requests
 * with it when float32 is not enough, at 3 to 7 GFLOP/s on one core here
 * where the dot-product form gave 0.9 to 1.7. */
#include <math.h>
#include <string.h>

#include "attn_internal.h"

/* y[c] += a * x[c] for c < len: the one inner loop of the products
 * below, each y[c] a sum taken in the order of the calls. Four at a
 * time, which the compiler makes vector operations (the float64
 * fallback of the service runs this kernel on whole requests). */
static void attn__ref_axpy(double *restrict y, double a,
                           const double *restrict x, size_t len)
{
    size_t c = 0;

    for (; c + 4 <= len; c += 4) {
        y[c] += a * x[c];
        y[c + 1] += a * x[c + 1];
        y[c + 2] += a * x[c + 2];
        y[c + 3] += a * x[c + 3];
    }
    for (; c < len; c++)
        y[c] += a * x[c];
}

/* The same with x of floats. */
static void attn__ref_axpy_f(double *restrict y, double a,
                             const float *restrict x, size_t len)
{
    size_t c = 0;

    for (; c + 4 <= len; c += 4) {
        y[c] += a * (double)x[c];
        y[c + 1] += a * (double)x[c + 1];
        y[c + 2] += a * (double)x[c + 2];
        y[c + 3] += a * (double)x[c + 3];
    }
    for (; c < len; c++)
        y[c] += a * (double)x[c];
}

/* out[r][c] = sum_k in[r][k] w[k][c] + bias[c], rows x cols, in float64.
 * in: [rows][in_w] floats, w: [in_w][cols] floats, bias: [cols] or NULL.
 * Each sum is taken in the order of k, a row of out at a time, so that
 * the innermost loop walks w as it lies (the service's float64 fallback
 * runs this kernel on whole requests). */
static void attn__ref_project(double *out, const float *in, const float *w,
                              const float *bias, size_t rows, size_t in_w,
                              size_t cols)
{
    for (size_t r = 0; r < rows; r++) {
        double *o = out + r * cols;
        for (size_t c = 0; c < cols; c++)
            o[c] = bias != NULL ? (double)bias[c] : 0.0;
        for (size_t k = 0; k < in_w; k++) {
            double a = (double)in[r * in_w + k];
            attn__ref_axpy_f(o, a, w + k * cols, cols);
        }
    }
}

/* Position of query a and of key c of batch element b (attn.h defaults). */
static int64_t attn__ref_qpos(const attn_params *p, size_t b, size_t a)
{
    return p->positions != NULL ? p->positions[b * p->dims.n + a]
                                : (int64_t)a;
}

static int64_t attn__ref_kpos(const attn_params *p, size_t b, size_t c)
{
    if (p->key_positions != NULL)
        return p->key_positions[b * p->dims.m + c];
    if (p->memory == NULL)
        return attn__ref_qpos(p, b, c); /* self-attention: m == n */
    return (int64_t)c;
}

static int attn__ref_global(const attn_params *p, size_t index)
{
    for (size_t t = 0; t < p->n_global; t++)
        if (p->global_tokens[t] == index)
            return 1;
    return 0;
}

int attn__ref_visible(const attn_params *p, size_t b, size_t i, size_t a,
                      size_t c)
{
    const attn_dims *d = &p->dims;
    int64_t qp = attn__ref_qpos(p, b, a), kp = attn__ref_kpos(p, b, c);

    if (p->mask == ATTN_MASK_CAUSAL && kp > qp)
        return 0;
    if (p->key_padding != NULL && p->key_padding[b * d->m + c])
        return 0;
    if (p->score_mask.data != NULL) {
        const uint8_t *map = (const uint8_t *)p->score_mask.data +
                             b * p->score_mask.stride_b +
                             i * p->score_mask.stride_h;
        if (map[a * d->m + c])
            return 0;
    }
    if (p->window.on && !attn__ref_global(p, a) && !attn__ref_global(p, c)) {
        /* pos[a] - left <= kpos[c] <= pos[a] + right, both positions >= 0
         * so their difference cannot overflow */
        int64_t diff = qp - kp;
        if (diff > 0 && (uint64_t)diff > (uint64_t)p->window.left)
            return 0;
        if (diff < 0 && (uint64_t)(-diff) > (uint64_t)p->window.right)
            return 0;
    }
    return 1;
}

/* Step 2: RMS norm of the rows of v (rows x width), in groups of len
 * entries (d_k per head, or the whole row), times weight[entry % len]. */
static void attn__ref_rms(double *v, size_t rows, size_t width, size_t len,
                          const float *weight, double eps)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t g0 = 0; g0 < width; g0 += len) {
            double *x = v + r * width + g0, ms = 0.0, inv;
            for (size_t t = 0; t < len; t++)
                ms += x[t] * x[t];
            inv = 1.0 / sqrt(ms / (double)len + eps);
            for (size_t t = 0; t < len; t++)
                x[t] = x[t] * inv * (double)weight[t];
        }
}

/* Step 3: rotates the first rope.dim entries of each of the heads d_k
 * slices of row r by position t. */
static void attn__ref_rope(const attn_params *p, double *row, size_t heads,
                           int64_t t)
{
    const attn_rope *rp = &p->rope;
    size_t half = rp->dim / 2, d_k = p->dims.d_k;
    double theta = rp->theta > 0.0 ? rp->theta : 10000.0;
    double f = rp->attention_factor > 0.0 ? rp->attention_factor : 1.0;

    for (size_t hd = 0; hd < heads; hd++) {
        double *x = row + hd * d_k;
        for (size_t q = 0; q < half; q++) {
            double freq = rp->inv_freq != NULL
                              ? (double)rp->inv_freq[q]
                              : pow(theta, -2.0 * (double)q / (double)rp->dim);
            double ang = (double)t * freq, c = cos(ang), s = sin(ang);
            size_t iu = rp->style == ATTN_ROPE_HALF ? q : 2 * q;
            size_t iw = rp->style == ATTN_ROPE_HALF ? q + half : 2 * q + 1;
            double u = x[iu], w = x[iw];
            x[iu] = f * (u * c - w * s);
            x[iw] = f * (u * s + w * c);
        }
    }
}

/* Steps 1-3 for one batch element: q [n][h*d_k] and k [m][g*d_k] after
 * the norm and the rotation. */
static void attn__ref_qk(const attn_params *p, size_t b, double *q, double *k)
{
    const attn_dims *d = &p->dims;
    const attn_qk_norm *qn = &p->qk_norm;
    size_t hdk = d->h * d->d_k, gdk = d->g * d->d_k;
    double eps = qn->eps > 0.0 ? qn->eps : 1e-6;

    attn__ref_project(q, p->x + b * d->n * d->d_model, p->w_q, p->b_q, d->n,
                      d->d_model, hdk);
    attn__ref_project(k, attn__memory(p) + b * d->m * d->d_mem, p->w_k,
                      p->b_k, d->m, d->d_mem, gdk);
    if (qn->over == ATTN_QK_NORM_HEAD) {
        attn__ref_rms(q, d->n, hdk, d->d_k, qn->q_weight, eps);
        attn__ref_rms(k, d->m, gdk, d->d_k, qn->k_weight, eps);
    } else if (qn->over == ATTN_QK_NORM_ALL) {
        attn__ref_rms(q, d->n, hdk, hdk, qn->q_weight, eps);
        attn__ref_rms(k, d->m, gdk, gdk, qn->k_weight, eps);
    }
    if (p->rope.dim != 0) {
        for (size_t a = 0; a < d->n; a++)
            attn__ref_rope(p, q + a * hdk, d->h, attn__ref_qpos(p, b, a));
        for (size_t c = 0; c < d->m; c++)
            attn__ref_rope(p, k + c * gdk, d->g, attn__ref_kpos(p, b, c));
    }
}

/* Steps 4-6 for head i, query a, key c (visible): the score, from the
 * dot product dot = q . k. */
static double attn__ref_score(const attn_params *p, size_t b, size_t i,
                              size_t a, size_t c, double dot, double scale)
{
    const attn_dims *d = &p->dims;
    double s = dot * scale;

    if (p->softcap > 0.0f)
        s = (double)p->softcap * tanh(s / (double)p->softcap);
    if (p->score_bias.data != NULL) {
        const float *map = (const float *)p->score_bias.data +
                           b * p->score_bias.stride_b +
                           i * p->score_bias.stride_h;
        s += (double)map[a * d->m + c];
    }
    if (p->alibi_slopes != NULL) {
        /* the difference in int64_t: both positions are >= 0, and far
         * from 0 a double could not tell them apart */
        int64_t diff = attn__ref_qpos(p, b, a) - attn__ref_kpos(p, b, c);
        double dist = fabs((double)diff);
        s -= (double)p->alibi_slopes[i] * dist;
    }
    return s;
}

/* value_norms of batch element b from its values v [m][g*d_v]; returns 1
 * when one is beyond float32, else 0. */
static int attn__ref_value_norms(const attn_params *p, size_t b,
                                  const double *v, float *out)
{
    const attn_dims *d = &p->dims;
    size_t gdv = d->g * d->d_v, group = d->h / d->g;
    int range = 0;

    for (size_t i = 0; i < d->h; i++)
        for (size_t c = 0; c < d->m; c++) {
            const double *vc = v + c * gdv + (i / group) * d->d_v;
            double ss = 0.0;
            if (p->w_o == NULL) {
                for (size_t t = 0; t < d->d_v; t++)
                    ss += vc[t] * vc[t];
            } else {
                for (size_t e = 0; e < d->d_out; e++) {
                    double y = 0.0;
                    for (size_t t = 0; t < d->d_v; t++)
                        y += vc[t] *
                             (double)p->w_o[(i * d->d_v + t) * d->d_out + e];
                    ss += y * y;
                }
            }
            out[(b * d->h + i) * d->m + c] = (float)sqrt(ss);
            range |= !isfinite(out[(b * d->h + i) * d->m + c]);
        }
    return range;
}

attn_status attn_forward_ref(const attn_params *p, float *output,
                             float *weights)
{
    return attn_forward_ref_ex(p, output, weights, NULL);
}

attn_status attn_forward_ref_ex(const attn_params *p, float *output,
                                float *weights, const attn_extras *ex)
{
    const attn_dims *d;
    double *q = NULL, *k = NULL, *v = NULL, *cat = NULL, *row = NULL;
    double *orow = NULL, *kt = NULL;
    double scale;
    size_t hdk, gdk, gdv, hdv, group;
    attn_status rc = attn_check(p);
    int range = 0;

    if (rc != ATTN_OK)
        return rc;
    if (output == NULL || (p->weights != ATTN_WEIGHTS_NONE && weights == NULL))
        return ATTN_EINVAL;
    if (ex != NULL && (ex->stats || ex->top_k))
        return ATTN_EINVAL;
    d = &p->dims;
    hdk = d->h * d->d_k;
    gdk = d->g * d->d_k;
    gdv = d->g * d->d_v;
    hdv = d->h * d->d_v;
    group = d->h / d->g;
    scale = attn__scale(p);

    /* per batch element: Q [n][h*d_k], K [m][g*d_k], V [m][g*d_v],
     * concat [n][h*d_v], one row of scores [m], one of the output
     * [d_out], and K transposed [g*d_k][m] for the dot products */
    q = attn__alloc(p, d->n * hdk, sizeof(double));
    k = attn__alloc(p, d->m * gdk, sizeof(double));
    v = attn__alloc(p, d->m * gdv, sizeof(double));
    cat = attn__alloc(p, d->n * hdv, sizeof(double));
    row = attn__alloc(p, d->m, sizeof(double));
    orow = attn__alloc(p, d->d_out, sizeof(double));
    kt = attn__alloc(p, d->m * gdk, sizeof(double));
    if (!q || !k || !v || !cat || !row || !orow || !kt) {
        rc = ATTN_ENOMEM;
        goto out;
    }
    if (p->weights != ATTN_WEIGHTS_NONE)
        memset(weights, 0,
               sizeof(float) * d->B * d->n * d->m *
                   (p->weights == ATTN_WEIGHTS_PER_HEAD ? d->h : 1));

    for (size_t b = 0; b < d->B; b++) {
        size_t vw = attn__value_width(p);

        attn__ref_qk(p, b, q, k);
        for (size_t c = 0; c < d->m; c++)
            for (size_t t = 0; t < gdk; t++)
                kt[t * d->m + c] = k[c * gdk + t];
        attn__ref_project(v, attn__value_source(p) + b * d->m * vw, p->w_v,
                          p->b_v, d->m, vw, gdv);
        /* the extras are answers too: one beyond float32 is ATTN_ERANGE,
         * as an output is */
        if (ex != NULL && ex->q_out != NULL)
            for (size_t i = 0; i < d->h; i++)
                for (size_t a = 0; a < d->n; a++)
                    for (size_t t = 0; t < d->d_k; t++) {
                        float *qo = ex->q_out +
                                    ((b * d->h + i) * d->n + a) * d->d_k + t;
                        *qo = (float)q[a * hdk + i * d->d_k + t];
                        range |= !isfinite(*qo);
                    }
        if (ex != NULL && ex->k_out != NULL)
            for (size_t j = 0; j < d->g; j++)
                for (size_t c = 0; c < d->m; c++)
                    for (size_t t = 0; t < d->d_k; t++) {
                        float *ko = ex->k_out +
                                    ((b * d->g + j) * d->m + c) * d->d_k + t;
                        *ko = (float)k[c * gdk + j * d->d_k + t];
                        range |= !isfinite(*ko);
                    }
        if (ex != NULL && ex->value_norms != NULL)
            range |= attn__ref_value_norms(p, b, v, ex->value_norms);

        for (size_t i = 0; i < d->h; i++) {
            size_t j = i / group;
            for (size_t r = 0; r < d->n; r++) {
                const double *qa = q + r * hdk + i * d->d_k;
                double max = -INFINITY, sum = 0.0;
                /* pass 1: the dot products (each in the order of t, the
                 * keys a row of kt at a time), then the scores, hidden
                 * keys at -inf */
                for (size_t c = 0; c < d->m; c++)
                    row[c] = 0.0;
                for (size_t t = 0; t < d->d_k; t++)
                    attn__ref_axpy(row, qa[t], kt + (j * d->d_k + t) * d->m,
                                   d->m);
                for (size_t c = 0; c < d->m; c++) {
                    if (!attn__ref_visible(p, b, i, r, c)) {
                        row[c] = -INFINITY;
                        continue;
                    }
                    row[c] = attn__ref_score(p, b, i, r, c, row[c], scale);
                    if (row[c] > max)
                        max = row[c];
                }
                /* pass 2: softmax; a fully masked row stays all zero */
                for (size_t c = 0; c < d->m; c++) {
                    row[c] = max == -INFINITY ? 0.0 : exp(row[c] - max);
                    sum += row[c];
                }
                for (size_t c = 0; c < d->m; c++)
                    row[c] = sum > 0.0 ? row[c] / sum : 0.0;
                /* pass 3: the head's output (each sum in the order of
                 * c, the values read as they lie) and the returned
                 * weights */
                double *o = cat + r * hdv + i * d->d_v;
                for (size_t t = 0; t < d->d_v; t++)
                    o[t] = 0.0;
                for (size_t c = 0; c < d->m; c++)
                    attn__ref_axpy(o, row[c], v + c * gdv + j * d->d_v,
                                   d->d_v);
                if (p->weights == ATTN_WEIGHTS_PER_HEAD) {
                    float *w = weights + ((b * d->h + i) * d->n + r) * d->m;
                    for (size_t c = 0; c < d->m; c++)
                        w[c] = (float)row[c];
                } else if (p->weights == ATTN_WEIGHTS_MEAN) {
                    float *w = weights + (b * d->n + r) * d->m;
                    for (size_t c = 0; c < d->m; c++)
                        w[c] += (float)(row[c] / (double)d->h);
                }
            }
        }

        /* output = concat W_o + b_o (each sum in the order of t, in row
         * of doubles), or the concatenation itself */
        for (size_t r = 0; r < d->n; r++) {
            const double *cr = cat + r * hdv;
            if (p->w_o != NULL) {
                for (size_t c = 0; c < d->d_out; c++)
                    orow[c] = p->b_o != NULL ? (double)p->b_o[c] : 0.0;
                for (size_t t = 0; t < hdv; t++)
                    attn__ref_axpy_f(orow, cr[t], p->w_o + t * d->d_out,
                                     d->d_out);
            }
            for (size_t c = 0; c < d->d_out; c++) {
                double acc = p->w_o != NULL ? orow[c] : cr[c];
                if (p->w_o == NULL && p->b_o != NULL)
                    acc += (double)p->b_o[c];
                output[(b * d->n + r) * d->d_out + c] = (float)acc;
                if (!isfinite(output[(b * d->n + r) * d->d_out + c]))
                    range = 1;
            }
        }
    }
    rc = range ? ATTN_ERANGE : ATTN_OK;
out:
    attn__free(p, q);
    attn__free(p, k);
    attn__free(p, v);
    attn__free(p, cat);
    attn__free(p, row);
    attn__free(p, orow);
    attn__free(p, kt);
    return rc;
}

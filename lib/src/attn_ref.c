/* attn_ref.c: the naive reference kernel, float64 throughout. Slow and
 * obvious on purpose: the tests trust it, and it shares nothing with the
 * BLAS kernel but the validation. */
#include <math.h>
#include <string.h>

#include "attn_internal.h"

/* out[r][c] = sum_k in[r][k] w[k][c] + bias[c], rows x cols, in float64.
 * in: [rows][in_w] floats, w: [in_w][cols] floats, bias: [cols] or NULL. */
static void attn__ref_project(double *out, const float *in, const float *w,
                              const float *bias, size_t rows, size_t in_w,
                              size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double acc = bias != NULL ? (double)bias[c] : 0.0;
            for (size_t k = 0; k < in_w; k++)
                acc += (double)in[r * in_w + k] * (double)w[k * cols + c];
            out[r * cols + c] = acc;
        }
}

int attn_forward_ref(const attn_params *p, float *output, float *weights)
{
    const attn_dims *d;
    double *q = NULL, *k = NULL, *v = NULL, *cat = NULL, *row = NULL;
    double scale;
    size_t hdk, gdk, gdv, hdv, group;
    int rc = attn_check(p), range = 0;

    if (rc != ATTN_OK)
        return rc;
    if (output == NULL || (p->weights != ATTN_WEIGHTS_NONE && weights == NULL))
        return ATTN_EINVAL;
    d = &p->dims;
    hdk = d->h * d->d_k;
    gdk = d->g * d->d_k;
    gdv = d->g * d->d_v;
    hdv = d->h * d->d_v;
    group = d->h / d->g;
    scale = attn__scale(p);

    /* per batch element: Q [n][h*d_k], K [m][g*d_k], V [m][g*d_v],
     * concat [n][h*d_v], one row of scores [m] */
    q = attn__alloc(p, d->n * hdk, sizeof(double));
    k = attn__alloc(p, d->m * gdk, sizeof(double));
    v = attn__alloc(p, d->m * gdv, sizeof(double));
    cat = attn__alloc(p, d->n * hdv, sizeof(double));
    row = attn__alloc(p, d->m, sizeof(double));
    if (!q || !k || !v || !cat || !row) {
        rc = ATTN_ENOMEM;
        goto out;
    }
    if (p->weights != ATTN_WEIGHTS_NONE)
        memset(weights, 0,
               sizeof(float) * d->B * d->n * d->m *
                   (p->weights == ATTN_WEIGHTS_PER_HEAD ? d->h : 1));

    for (size_t b = 0; b < d->B; b++) {
        const float *xb = p->x + b * d->n * d->d_model;
        const float *mb = attn__memory(p) + b * d->m * d->d_mem;
        const uint8_t *pad =
            p->key_padding != NULL ? p->key_padding + b * d->m : NULL;

        attn__ref_project(q, xb, p->w_q, p->b_q, d->n, d->d_model, hdk);
        attn__ref_project(k, mb, p->w_k, p->b_k, d->m, d->d_mem, gdk);
        attn__ref_project(v, mb, p->w_v, p->b_v, d->m, d->d_mem, gdv);

        for (size_t i = 0; i < d->h; i++) {
            size_t j = i / group;
            for (size_t r = 0; r < d->n; r++) {
                double max = -INFINITY, sum = 0.0;
                /* pass 1: scaled dot products, masked keys at -inf */
                for (size_t c = 0; c < d->m; c++) {
                    int masked = (p->mask == ATTN_MASK_CAUSAL && c > r) ||
                                 (pad != NULL && pad[c]);
                    double dot = 0.0;
                    if (masked) {
                        row[c] = -INFINITY;
                        continue;
                    }
                    for (size_t t = 0; t < d->d_k; t++)
                        dot += q[r * hdk + i * d->d_k + t] *
                               k[c * gdk + j * d->d_k + t];
                    row[c] = scale * dot;
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
                /* pass 3: the head's output and the returned weights */
                for (size_t t = 0; t < d->d_v; t++) {
                    double acc = 0.0;
                    for (size_t c = 0; c < d->m; c++)
                        acc += row[c] * v[c * gdv + j * d->d_v + t];
                    cat[r * hdv + i * d->d_v + t] = acc;
                }
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

        /* output = concat W_o + b_o, or the concatenation itself */
        for (size_t r = 0; r < d->n; r++)
            for (size_t c = 0; c < d->d_out; c++) {
                double acc;
                if (p->w_o == NULL) {
                    acc = cat[r * hdv + c];
                } else {
                    acc = p->b_o != NULL ? (double)p->b_o[c] : 0.0;
                    for (size_t t = 0; t < hdv; t++)
                        acc += cat[r * hdv + t] * (double)p->w_o[t * d->d_out + c];
                }
                if (p->w_o == NULL && p->b_o != NULL)
                    acc += (double)p->b_o[c];
                output[(b * d->n + r) * d->d_out + c] = (float)acc;
                if (!isfinite(output[(b * d->n + r) * d->d_out + c]))
                    range = 1;
            }
    }
    rc = range ? ATTN_ERANGE : ATTN_OK;
out:
    attn__free(p, q);
    attn__free(p, k);
    attn__free(p, v);
    attn__free(p, cat);
    attn__free(p, row);
    return rc;
}

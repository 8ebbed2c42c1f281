/* attn_analysis.c: per-head figures and top-k rows (attn_extras), for the
 * BLAS kernel's tiles and as a float64 reference. Definitions are in attn.h. */
#include <math.h>
#include <string.h>

#include "attn_heads.h"

const char *attn_pattern_name(int pattern)
{
    switch (pattern) {
#define ATTN__PATTERN_CASE(name, str)                                         \
    case ATTN_PATTERN_##name:                                                 \
        return str;
        ATTN_PATTERN_MAP(ATTN__PATTERN_CASE)
#undef ATTN__PATTERN_CASE
    }
    return "unknown";
}

attn_status attn__extras_check(const attn_params *p, const float *weights,
                               const attn_extras *ex)
{
    if (ex == NULL)
        return ATTN_OK;
    if (ex->stats && (!ex->heads || !ex->similarity || !ex->skipped_rows))
        return ATTN_EINVAL;
    if (ex->top_k != 0) {
        if (ex->top_k > p->dims.m || p->weights == ATTN_WEIGHTS_NONE ||
            weights != NULL || !ex->top_index || !ex->top_weight)
            return ATTN_EINVAL;
        if (p->dims.m > UINT32_MAX)
            return ATTN_EOVERFLOW;
    }
    return ATTN_OK;
}

/* -- accumulators ---------------------------------------------------------- */

attn_status attn__acc_init(attn__acc *acc, const attn_params *p, size_t workers)
{
    const attn_dims *d = &p->dims;
    size_t bh, cells;

    memset(acc, 0, sizeof(*acc));
    acc->B = d->B;
    acc->h = d->h;
    acc->n = d->n;
    acc->m = d->m;
    acc->offsets = d->n + d->m - 1;
    if (attn__mul(workers, d->B, &cells) || attn__mul(cells, d->h, &bh))
        return ATTN_EOVERFLOW;
    acc->sums = attn__alloc(p, bh, sizeof(attn__head_sums));
    if (attn__mul(bh, acc->offsets, &cells))
        return ATTN_EOVERFLOW;
    acc->hist = attn__alloc(p, cells, sizeof(double));
    if (attn__mul(bh, d->h, &cells))
        return ATTN_EOVERFLOW;
    acc->sim = attn__alloc(p, cells, sizeof(double));
    acc->skipped = attn__alloc(p, workers * d->B, sizeof(size_t));
    if (!acc->sums || !acc->hist || !acc->sim || !acc->skipped)
        return ATTN_ENOMEM;
    memset(acc->sums, 0, bh * sizeof(attn__head_sums));
    memset(acc->hist, 0, bh * acc->offsets * sizeof(double));
    memset(acc->sim, 0, bh * d->h * sizeof(double));
    memset(acc->skipped, 0, workers * d->B * sizeof(size_t));
    acc->workers = workers;
    return ATTN_OK;
}

void attn__acc_free(attn__acc *acc, const attn_params *p)
{
    attn__free(p, acc->sums);
    attn__free(p, acc->hist);
    attn__free(p, acc->sim);
    attn__free(p, acc->skipped);
    memset(acc, 0, sizeof(*acc));
}

/* -sum w ln w over w > 0, in float64 */
static double attn__entropy(const float *w, size_t len)
{
    double e = 0.0;

    for (size_t c = 0; c < len; c++)
        if (w[c] > 0.0f)
            e -= (double)w[c] * log((double)w[c]);
    return e;
}

void attn__acc_row(attn__acc *acc, size_t worker, size_t b, size_t r,
                   const float *const *rows, size_t len,
                   const size_t *visible)
{
    size_t h = acc->h, any = 0;
    size_t base = (worker * acc->B + b) * h;
    double ent[ATTN__MAX_STACK_HEADS], *entp = ent;

    for (size_t i = 0; i < h; i++)
        any |= visible[i];
    if (any == 0) {
        acc->skipped[worker * acc->B + b]++;
        return;
    }
    for (size_t i = 0; i < h; i++) {
        const float *w = rows[i];
        attn__head_sums *s = &acc->sums[base + i];
        double *hist = acc->hist + (base + i) * acc->offsets + (acc->n - 1) - r;
        float max = 0.0f;
        double e = attn__entropy(w, len);

        if (i < ATTN__MAX_STACK_HEADS)
            entp[i] = e;
        s->entropy += e;
        if (visible[i] >= 2) {
            s->entropy_normalized += e / log((double)visible[i]);
            s->rows_normalized++;
        }
        for (size_t c = 0; c < len; c++) {
            if (w[c] > max)
                max = w[c];
            hist[c] += w[c]; /* offset c - r */
        }
        s->confidence += max;
        s->first += w[0];
        if (r < len)
            s->self += w[r];
        if (r >= 1 && r - 1 < len)
            s->prev += w[r - 1];
        if (r + 1 < len)
            s->next += w[r + 1];
    }
    /* Jensen-Shannon: H((P+Q)/2) - (H(P) + H(Q)) / 2 */
    for (size_t i = 0; i < h; i++)
        for (size_t i2 = i + 1; i2 < h; i2++) {
            const float *pw = rows[i], *qw = rows[i2];
            double hm = 0.0, js;
            for (size_t c = 0; c < len; c++) {
                float mw = 0.5f * (pw[c] + qw[c]);
                if (mw > 0.0f)
                    hm -= (double)mw * (double)logf(mw);
            }
            js = hm - 0.5 * ((i < ATTN__MAX_STACK_HEADS ? entp[i]
                                                        : attn__entropy(pw, len)) +
                             (i2 < ATTN__MAX_STACK_HEADS ? entp[i2]
                                                         : attn__entropy(qw, len)));
            if (js < 0.0)
                js = 0.0; /* rounding */
            acc->sim[(base + i) * h + i2] += js;
        }
}

static attn_pattern attn__classify(const attn_head_stats *s)
{
    double best = s->first;
    attn_pattern pat = ATTN_PATTERN_FIRST_TOKEN;

    if (s->prev > best) {
        best = s->prev;
        pat = ATTN_PATTERN_PREVIOUS;
    }
    if (s->next > best) {
        best = s->next;
        pat = ATTN_PATTERN_NEXT;
    }
    if (s->self > best) {
        best = s->self;
        pat = ATTN_PATTERN_SELF;
    }
    if (best >= ATTN_PATTERN_POSITIONAL_MIN)
        return pat;
    if (s->entropy_normalized >= ATTN_PATTERN_BROAD_MIN)
        return ATTN_PATTERN_BROAD;
    return ATTN_PATTERN_FOCUSED;
}

/* dominant offset from a histogram indexed by offset + (n - 1) */
static long attn__dominant(const double *hist, size_t offsets, size_t n)
{
    size_t best = n - 1;

    for (size_t o = 0; o < offsets; o++) {
        long off = (long)o - (long)(n - 1);
        long boff = (long)best - (long)(n - 1);
        long a = off < 0 ? -off : off, ba = boff < 0 ? -boff : boff;
        if (hist[o] > hist[best] ||
            (hist[o] == hist[best] && (a < ba || (a == ba && off < boff))))
            best = o;
    }
    return (long)best - (long)(n - 1);
}

void attn__acc_finish(const attn__acc *acc, const attn_extras *ex)
{
    size_t B = acc->B, h = acc->h;

    for (size_t b = 0; b < B; b++) {
        size_t skipped = 0, rows;
        for (size_t w = 0; w < acc->workers; w++)
            skipped += acc->skipped[w * B + b];
        rows = acc->n - skipped;
        ex->skipped_rows[b] = skipped;
        for (size_t i = 0; i < h; i++) {
            attn__head_sums t;
            attn_head_stats *out = &ex->heads[b * h + i];
            /* the workers' histograms are summed into worker 0's */
            double *hist0 = acc->hist + (b * h + i) * acc->offsets;

            memset(&t, 0, sizeof(t));
            for (size_t w = 0; w < acc->workers; w++) {
                const attn__head_sums *s = &acc->sums[(w * B + b) * h + i];
                t.entropy += s->entropy;
                t.entropy_normalized += s->entropy_normalized;
                t.rows_normalized += s->rows_normalized;
                t.confidence += s->confidence;
                t.self += s->self;
                t.prev += s->prev;
                t.next += s->next;
                t.first += s->first;
                if (w > 0) {
                    const double *hw =
                        acc->hist + ((w * B + b) * h + i) * acc->offsets;
                    for (size_t o = 0; o < acc->offsets; o++)
                        hist0[o] += hw[o];
                }
            }
            memset(out, 0, sizeof(*out));
            if (rows > 0) {
                out->entropy = t.entropy / (double)rows;
                out->confidence = t.confidence / (double)rows;
                out->self = t.self / (double)rows;
                out->prev = t.prev / (double)rows;
                out->next = t.next / (double)rows;
                out->first = t.first / (double)rows;
                out->dominant_offset =
                    attn__dominant(hist0, acc->offsets, acc->n);
            }
            if (t.rows_normalized > 0)
                out->entropy_normalized =
                    t.entropy_normalized / (double)t.rows_normalized;
            out->pattern = attn__classify(out);
            for (size_t i2 = 0; i2 < h; i2++) {
                double js = 0.0;
                size_t lo = i < i2 ? i : i2, hi = i < i2 ? i2 : i;
                if (lo != hi && rows > 0) {
                    for (size_t w = 0; w < acc->workers; w++)
                        js += acc->sim[((w * B + b) * h + lo) * h + hi];
                    js /= (double)rows;
                }
                ex->similarity[(b * h + i) * h + i2] = js;
            }
        }
    }
}

/* -- top k ------------------------------------------------------------------ */

/* a ranks before b: larger weight, then lower index */
static int attn__before(float wa, uint32_t ia, float wb, uint32_t ib)
{
    return wa > wb || (wa == wb && ia < ib);
}

void attn__top_k(const float *w, size_t len, size_t m, size_t k,
                 uint32_t *idx, float *val)
{
    size_t count = 0;

    /* idx/val hold a min-heap (the worst kept entry at the root) of the k
     * best so far; keys from len to m are masked, weight 0 */
    for (size_t c = 0; c < m; c++) {
        float wc = c < len ? w[c] : 0.0f;
        size_t pos;
        if (count < k) {
            pos = count++;
            while (pos > 0) {
                size_t parent = (pos - 1) / 2;
                if (!attn__before(val[parent], idx[parent], wc, (uint32_t)c))
                    break;
                idx[pos] = idx[parent];
                val[pos] = val[parent];
                pos = parent;
            }
            idx[pos] = (uint32_t)c;
            val[pos] = wc;
            continue;
        }
        if (!attn__before(wc, (uint32_t)c, val[0], idx[0]))
            continue;
        pos = 0;
        for (;;) {
            size_t l = 2 * pos + 1, r = l + 1, worst = l;
            if (l >= k)
                break;
            if (r < k && attn__before(val[l], idx[l], val[r], idx[r]))
                worst = r;
            if (!attn__before(wc, (uint32_t)c, val[worst], idx[worst]))
                break;
            idx[pos] = idx[worst];
            val[pos] = val[worst];
            pos = worst;
        }
        idx[pos] = (uint32_t)c;
        val[pos] = wc;
    }
    /* heap sort in place: pop the worst to the end, best ends first */
    for (size_t end = k; end > 1; end--) {
        uint32_t ti = idx[0];
        float tv = val[0];
        size_t pos = 0, last = end - 1;
        uint32_t li = idx[last];
        float lv = val[last];
        for (;;) {
            size_t l = 2 * pos + 1, r = l + 1, worst = l;
            if (l >= last)
                break;
            if (r < last && attn__before(val[l], idx[l], val[r], idx[r]))
                worst = r;
            if (!attn__before(lv, li, val[worst], idx[worst]))
                break;
            idx[pos] = idx[worst];
            val[pos] = val[worst];
            pos = worst;
        }
        idx[pos] = li;
        val[pos] = lv;
        idx[last] = ti;
        val[last] = tv;
    }
}

/* -- float64 reference ------------------------------------------------------ */

/* Whether query r of batch element b sees no key in any head. */
static int attn__ref_row_hidden(const attn_params *p, size_t b, size_t r)
{
    for (size_t i = 0; i < p->dims.h; i++)
        for (size_t c = 0; c < p->dims.m; c++)
            if (attn__ref_visible(p, b, i, r, c))
                return 0;
    return 1;
}

attn_status attn_analyze_ref(const attn_params *p, const float *weights,
                             const attn_extras *ex)
{
    const attn_dims *d;
    attn_status rc = attn_check(p);

    if (rc != ATTN_OK)
        return rc;
    if (weights == NULL || ex == NULL || ex->top_k != 0 || !ex->stats ||
        !ex->heads || !ex->similarity || !ex->skipped_rows)
        return ATTN_EINVAL;
    d = &p->dims;
    for (size_t b = 0; b < d->B; b++) {
        size_t rows = 0, skipped = 0;
        for (size_t i = 0; i < d->h; i++)
            memset(&ex->heads[b * d->h + i], 0, sizeof(attn_head_stats));
        for (size_t i = 0; i < d->h * d->h; i++)
            ex->similarity[b * d->h * d->h + i] = 0.0;
        for (size_t r = 0; r < d->n; r++)
            if (attn__ref_row_hidden(p, b, r))
                skipped++;
        rows = d->n - skipped;
        ex->skipped_rows[b] = skipped;
        for (size_t i = 0; i < d->h; i++) {
            attn_head_stats *s = &ex->heads[b * d->h + i];
            size_t rows_norm = 0, offsets = d->n + d->m - 1;
            double best_mass = -1.0;
            for (long off = -(long)(d->n - 1); off <= (long)(d->m - 1); off++) {
                double mass = 0.0;
                long a = off < 0 ? -off : off;
                long ba = s->dominant_offset < 0 ? -s->dominant_offset
                                                 : s->dominant_offset;
                for (size_t r = 0; r < d->n; r++) {
                    long c = (long)r + off;
                    if (c >= 0 && c < (long)d->m)
                        mass += weights[((b * d->h + i) * d->n + r) * d->m +
                                        (size_t)c];
                }
                if (mass > best_mass + 1e-12 ||
                    (fabs(mass - best_mass) <= 1e-12 &&
                     (a < ba || (a == ba && off < s->dominant_offset)))) {
                    best_mass = mass;
                    s->dominant_offset = off;
                }
            }
            (void)offsets;
            for (size_t r = 0; r < d->n; r++) {
                const float *w = weights + ((b * d->h + i) * d->n + r) * d->m;
                size_t vis = 0;
                double e = 0.0, mx = 0.0;
                if (attn__ref_row_hidden(p, b, r))
                    continue;
                for (size_t c = 0; c < d->m; c++)
                    vis += (size_t)attn__ref_visible(p, b, i, r, c);
                for (size_t c = 0; c < d->m; c++) {
                    if (w[c] > 0.0f)
                        e -= (double)w[c] * log((double)w[c]);
                    if (w[c] > mx)
                        mx = w[c];
                }
                s->entropy += e;
                if (vis >= 2) {
                    s->entropy_normalized += e / log((double)vis);
                    rows_norm++;
                }
                s->confidence += mx;
                s->first += w[0];
                if (r < d->m)
                    s->self += w[r];
                if (r >= 1 && r - 1 < d->m)
                    s->prev += w[r - 1];
                if (r + 1 < d->m)
                    s->next += w[r + 1];
                for (size_t i2 = 0; i2 < d->h; i2++) {
                    const float *q =
                        weights + ((b * d->h + i2) * d->n + r) * d->m;
                    double js = 0.0;
                    if (i2 == i)
                        continue;
                    for (size_t c = 0; c < d->m; c++) {
                        double mm = 0.5 * ((double)w[c] + (double)q[c]);
                        if (w[c] > 0.0f)
                            js += 0.5 * w[c] * log(w[c] / mm);
                        if (q[c] > 0.0f)
                            js += 0.5 * q[c] * log(q[c] / mm);
                    }
                    ex->similarity[(b * d->h + i) * d->h + i2] += js;
                }
            }
            if (rows > 0) {
                s->entropy /= (double)rows;
                s->confidence /= (double)rows;
                s->self /= (double)rows;
                s->prev /= (double)rows;
                s->next /= (double)rows;
                s->first /= (double)rows;
                for (size_t i2 = 0; i2 < d->h; i2++)
                    ex->similarity[(b * d->h + i) * d->h + i2] /= (double)rows;
            } else {
                s->dominant_offset = 0;
            }
            if (rows_norm > 0)
                s->entropy_normalized /= (double)rows_norm;
            s->pattern = attn__classify(s);
        }
    }
    return ATTN_OK;
}
